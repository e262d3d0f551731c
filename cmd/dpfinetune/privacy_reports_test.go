package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

// TestPrivacyReports: privacy epsilon --report composes the phases of the
// runs' reports (and any --phase) into one guarantee, at the smallest δ of
// the runs unless --delta says otherwise, exactly as the accountant
// composes them; runs of another privacy unit, a non-private run, a dry
// run, a report without phases and a run given twice over (--report with
// --sigma) are refused.
func TestPrivacyReports(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, r dptrain.Report) string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(unit string, delta float64, phases ...accountant.Phase) dptrain.Report {
		steps := 0
		for _, p := range phases {
			steps += p.Steps
		}
		return dptrain.Report{Settings: dptrain.Settings{PrivacyUnit: unit, Accountant: "rdp"},
			Privacy: &accountant.Result{Accountant: "rdp", Epsilon: 1, Delta: delta, Steps: steps}, Phases: phases}
	}
	pa := []accountant.Phase{{Sigma: 1.0, SampleRate: 0.01, Steps: 300}}
	pb := []accountant.Phase{{Sigma: 1.2, SampleRate: 0.02, Steps: 100}, {Sigma: 1.1, SampleRate: 0.02, Steps: 50}}
	a := write("a.json", run("", 1e-5, pa...))
	b := write("b.json", run(dptrain.PrivacyUnitExample, 1e-6, pb...))
	all := append(append([]accountant.Phase{}, pa...), pb...)

	code, out, errs := runCLI(t, "privacy", "epsilon", "--report", a, "--report", b, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m := decodeJSON(t, out)
	want := libEpsilon(t, "rdp", accountant.Options{}, all, 1e-6)
	if m["epsilon"] != want.Epsilon || m["delta"] != 1e-6 || m["steps"] != 450.0 || len(m["phases"].([]any)) != 3 || len(m["runs"].([]any)) != 2 || m["privacy_unit"] != "example" {
		t.Errorf("composed: %v; want ε %v at δ 1e-6 over 450 steps", m, want.Epsilon)
	}
	// --delta and a further run given by its phase.
	extra := accountant.Phase{Sigma: 2, SampleRate: 0.05, Steps: 40}
	code, out, errs = runCLI(t, "privacy", "epsilon", "--report", a, "--report", b, "--phase", "2,0.05,40", "--delta", "1e-5", "--json")
	m = decodeJSON(t, out)
	if want := libEpsilon(t, "rdp", accountant.Options{}, append(all, extra), 1e-5); code != 0 || m["epsilon"] != want.Epsilon {
		t.Errorf("with --phase and --delta: exit %d, ε %v, want %v: %s", code, m["epsilon"], want.Epsilon, errs)
	}
	code, out, _ = runCLI(t, "privacy", "epsilon", "--report", a, "--report", b)
	if code != 0 || !strings.Contains(out, "run 2:") || !strings.Contains(out, "unit:        example") {
		t.Errorf("human output (exit %d):\n%s", code, out)
	}

	user := write("user.json", run(dptrain.PrivacyUnitUser, 1e-5, pa...))
	private := run("", 1e-5)
	private.Settings.NonPrivate, private.Privacy = true, nil
	dry := run("", 1e-5)
	dry.DryRun = true
	old := run("", 1e-5)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--report", a, "--report", user}, "compose the runs of one privacy unit"},
		{[]string{"--report", write("private.json", private)}, "non-private run"},
		{[]string{"--report", write("dry.json", dry)}, "dry run"},
		{[]string{"--report", write("old.json", old)}, "records no phases"},
		{[]string{"--report", a, "--sigma", "1"}, "not --sigma"},
		{[]string{"--report", filepath.Join(dir, "none.json")}, "no such file"},
	} {
		code, _, errs := runCLI(t, append([]string{"privacy", "epsilon"}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d: %s (want %q)", c.args, code, errs, c.want)
		}
	}
}
