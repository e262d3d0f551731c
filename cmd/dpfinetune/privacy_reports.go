package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

// composedRun is one run report that privacy epsilon --report composes.
type composedRun struct {
	Report  string             `json:"report"`
	Unit    string             `json:"privacy_unit"`
	Epsilon float64            `json:"epsilon"`
	Delta   float64            `json:"delta"`
	Phases  []accountant.Phase `json:"phases"`
}

// readRunReports reads train's JSON reports (--report) for their phases:
// runs on the same data compose — a search over settings on private data
// spends the composition of its runs — and only runs that protect the same unit
// (examples, or users) compose into one guarantee of that unit. A report
// without phases (a dry run's, which spent nothing; a non-private run's;
// one written before reports recorded them) is refused rather than
// guessed from its last settings, which would under-count a resumed run
// whose σ changed.
func readRunReports(paths []string) ([]composedRun, error) {
	var runs []composedRun
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
		var r dptrain.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("--report %s: not a train report: %v", path, err)
		}
		switch {
		case r.Settings.NonPrivate:
			return nil, fmt.Errorf("--report %s: a non-private run (--non-private) has no guarantee to compose: it spent no noise on its data, and whoever saw its model has no bound at all", path)
		case r.DryRun:
			return nil, fmt.Errorf("--report %s: a dry run's report: it spent nothing", path)
		case len(r.Phases) == 0:
			return nil, fmt.Errorf("--report %s records no phases (a report written before train recorded them): give its run's phases as --phase sigma,q,steps instead", path)
		}
		run := composedRun{Report: path, Unit: r.Settings.PrivacyUnit, Phases: r.Phases}
		if run.Unit == "" {
			run.Unit = dptrain.PrivacyUnitExample
		}
		if r.Privacy != nil {
			run.Epsilon, run.Delta = r.Privacy.Epsilon, r.Privacy.Delta
		}
		if len(runs) > 0 && run.Unit != runs[0].Unit {
			return nil, fmt.Errorf("--report %s protects each %s, %s each %s: a guarantee per %s composes with another per %s only through group privacy; compose the runs of one privacy unit", path, run.Unit, runs[0].Report, runs[0].Unit, dptrain.PrivacyUnitExample, dptrain.PrivacyUnitUser)
		}
		runs = append(runs, run)
	}
	return runs, nil
}
