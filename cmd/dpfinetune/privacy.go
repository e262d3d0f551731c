package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

func init() {
	register(&command{
		name:    "privacy",
		summary: "privacy accounting: epsilon for a run, or sigma for a target epsilon",
		run:     runPrivacy,
	})
}

const privacyUsage = `usage: dpfinetune privacy <subcommand> [flags]

subcommands:
  epsilon   the epsilon spent by a run: --sample-rate q --sigma s --steps n --delta d
  sigma     the noise multiplier for a target: --target-epsilon e --sample-rate q --steps n --delta d
  search    the epsilon of a private random search (dpfinetune tune) of such runs,
            or with --target-epsilon the runs' sigma: --trials-mean M [--trials-eta η]
            [--score-noise-multiplier s]

Either takes a run as train describes it instead of --sample-rate and
--steps: --examples n --batch-size L --epochs E (q = L/n, ⌈n/L⌉ steps an
epoch, as train samples; δ defaults to train's 1/(10·n)). epsilon also
composes runs from their reports (train --report): --report a.json
--report b.json ... is the ε that the runs spent together, as a search
over settings on the same private data does.

Accountants (--accountant): rdp (default; Rényi DP, an upper bound), prv
(privacy loss random variables; reports its upper bound), gdp (Gaussian DP
by the central limit theorem: approximate (CLT), not an upper bound).
All assume Poisson sampling with rate q, noise multiplier sigma applied
once per logical batch, and add-or-remove-one adjacency.

Run "dpfinetune privacy <subcommand> -h" for the flags of one.
`

func runPrivacy(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subcommand (epsilon, sigma or search)\n\n%s", privacyUsage)
	}
	switch args[0] {
	case "epsilon":
		return runPrivacyEpsilon(args[1:], stdout)
	case "sigma":
		return runPrivacySigma(args[1:], stdout)
	case "search":
		return runPrivacySearch(args[1:], stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, privacyUsage)
		return flag.ErrHelp
	}
	return usagef("unknown subcommand %q (want epsilon, sigma or search)\n\n%s", args[0], privacyUsage)
}

// phaseList is a repeatable flag of phases "sigma,q,steps".
type phaseList []accountant.Phase

func (p *phaseList) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, ph := range *p {
		s[i] = fmt.Sprintf("%g,%g,%d", ph.Sigma, ph.SampleRate, ph.Steps)
	}
	return strings.Join(s, " ")
}

func (p *phaseList) Set(v string) error {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return fmt.Errorf("phase %q: want sigma,q,steps", v)
	}
	sigma, err1 := strconv.ParseFloat(strings.TrimSpace(f[0]), 64)
	q, err2 := strconv.ParseFloat(strings.TrimSpace(f[1]), 64)
	steps, err3 := strconv.Atoi(strings.TrimSpace(f[2]))
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("phase %q: want sigma,q,steps: %v", v, err)
	}
	if err := accountant.ValidatePhase(sigma, q, steps); err != nil {
		return fmt.Errorf("phase %q: %v", v, err)
	}
	*p = append(*p, accountant.Phase{Sigma: sigma, SampleRate: q, Steps: steps})
	return nil
}

// accountantFlags are the flags shared by both subcommands.
type accountantFlags struct {
	name       string
	conversion string
	epsError   float64
	delta      float64
	jsonOut    bool
}

func (a *accountantFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.name, "accountant", accountant.RDP, "accountant: rdp, prv or gdp (gdp is approximate (CLT))")
	fs.StringVar(&a.conversion, "conversion", "", "rdp only: RDP to (ε, δ) conversion, improved (default) or classic")
	fs.Float64Var(&a.epsError, "eps-error", 0, fmt.Sprintf("prv only: ε error budget (default %g)", accountant.DefaultEpsError))
	fs.Float64Var(&a.delta, "delta", 0, "δ of the (ε, δ) guarantee, in (0, 1) (required)")
	fs.BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
}

func (a *accountantFlags) options() accountant.Options {
	return accountant.Options{Conversion: accountant.Conversion(a.conversion), EpsError: a.epsError}
}

// flagsSet returns the names of the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func requireFlags(set map[string]bool, names ...string) error {
	var missing []string
	for _, n := range names {
		if !set[n] {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return usagef("missing required flag(s): %s", strings.Join(missing, ", "))
	}
	return nil
}

// asUsage turns invalid-argument errors from the accountant package into
// usage errors (exit status 2).
func asUsage(err error) error {
	if errors.Is(err, accountant.ErrInvalid) {
		return usageError{err.Error()}
	}
	return err
}

// runFlags are train's description of a run (--examples, --batch-size,
// --epochs), which both subcommands take instead of --sample-rate and
// --steps.
type runFlags struct {
	examples, batch, epochs *int
}

func addRunFlags(fs *flag.FlagSet) runFlags {
	return runFlags{
		examples: fs.Int("examples", 0, "training examples n (with --batch-size and --epochs, instead of --sample-rate and --steps, as train samples them)"),
		batch:    fs.Int("batch-size", 0, "expected logical batch size L (with --examples)"),
		epochs:   fs.Int("epochs", 0, "epochs (with --examples)"),
	}
}

// resolve fills q and steps from train's description of the run where it
// was given (and δ, where not given, with train's default 1/(10·n)); it
// refuses the two descriptions mixed or train's given in part.
func (r runFlags) resolve(set map[string]bool, q *float64, steps *int, delta *float64) error {
	given := set["examples"] || set["batch-size"] || set["epochs"]
	if !given {
		return nil
	}
	if set["sample-rate"] || set["steps"] {
		return usagef("--examples, --batch-size and --epochs describe the run instead of --sample-rate and --steps: give one or the other")
	}
	if err := requireFlags(set, "examples", "batch-size", "epochs"); err != nil {
		return err
	}
	if *r.examples <= 0 || *r.batch <= 0 || *r.epochs <= 0 {
		return usagef("--examples, --batch-size and --epochs must be positive")
	}
	sp := dptrain.Sampling(*r.examples, *r.batch, *r.epochs)
	*q, *steps = sp.SampleRate, sp.Steps
	set["sample-rate"], set["steps"] = true, true
	if !set["delta"] {
		*delta = 1 / (10 * float64(*r.examples))
		set["delta"] = true
	}
	return nil
}

func runPrivacyEpsilon(args []string, stdout io.Writer) error {
	fs := newFlagSet("privacy epsilon", "(--sample-rate q --sigma s --steps n | --sigma s --examples n --batch-size L --epochs E | --phase s,q,n ... | --report run.json ...) --delta d [--accountant rdp|prv|gdp] [--json]")
	var af accountantFlags
	af.register(fs)
	q := fs.Float64("sample-rate", 0, "Poisson sampling rate q = expected batch size / dataset size, in (0, 1]")
	sigma := fs.Float64("sigma", 0, "noise multiplier σ (noise std / clipping norm), > 0")
	steps := fs.Int("steps", 0, "number of steps (logical batches), ≥ 1")
	var phases phaseList
	fs.Var(&phases, "phase", "a phase `sigma,q,steps` of a run whose settings changed; repeat in order (instead of --sigma/--sample-rate/--steps)")
	var reports pathList
	fs.Var(&reports, "report", "a train run's JSON report (train --report): its phases composed with every other run given (--report or --phase), as a search over settings on the same private data spends the composition of its runs; repeat for each run (δ defaults to the runs' smallest)")
	rf := addRunFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := flagsSet(fs)
	var runs []composedRun
	if len(reports) > 0 {
		if set["sigma"] || set["sample-rate"] || set["steps"] || set["examples"] || set["batch-size"] || set["epochs"] {
			return usagef("--report takes a run's phases from its report: add other runs as --report or --phase, not --sigma, --sample-rate, --steps, --examples, --batch-size or --epochs")
		}
		var err error
		if runs, err = readRunReports(reports); err != nil {
			return err
		}
		var own phaseList
		for _, r := range runs {
			own = append(own, r.Phases...)
			if !set["delta"] && r.Delta > 0 && (af.delta == 0 || r.Delta < af.delta) {
				af.delta = r.Delta
			}
		}
		if af.delta > 0 {
			set["delta"] = true
		}
		phases = append(own, phases...)
	}
	if len(phases) > 0 && (set["examples"] || set["batch-size"] || set["epochs"]) {
		return usagef("--phase cannot be combined with --examples, --batch-size or --epochs")
	}
	if err := rf.resolve(set, q, steps, &af.delta); err != nil {
		return err
	}
	if err := requireFlags(set, "delta"); err != nil {
		return err
	}
	if len(phases) > 0 {
		if set["sigma"] || set["sample-rate"] || set["steps"] {
			return usagef("--phase cannot be combined with --sigma, --sample-rate or --steps")
		}
	} else {
		if err := requireFlags(set, "sample-rate", "sigma", "steps"); err != nil {
			return err
		}
		phases = phaseList{{Sigma: *sigma, SampleRate: *q, Steps: *steps}}
	}
	acc, err := accountant.NewWithOptions(af.name, af.options())
	if err != nil {
		return asUsage(err)
	}
	for _, p := range phases {
		if err := acc.Step(p.Sigma, p.SampleRate, p.Steps); err != nil {
			return asUsage(err)
		}
	}
	res, err := acc.Epsilon(af.delta)
	if err != nil {
		return asUsage(err)
	}
	if math.IsInf(res.Epsilon, 0) || math.IsNaN(res.Epsilon) {
		return fmt.Errorf("no finite epsilon: the %s accountant gives ε = %v for these settings (noise multiplier too small?)", acc.Name(), res.Epsilon)
	}
	out := newPrivacyJSON(acc, res)
	out.Runs = runs
	if len(runs) > 0 {
		out.PrivacyUnit = runs[0].Unit
	}
	if af.jsonOut {
		return writeJSON(stdout, out)
	}
	printHuman(stdout, out, nil)
	return nil
}

func runPrivacySigma(args []string, stdout io.Writer) error {
	fs := newFlagSet("privacy sigma", "--target-epsilon e (--sample-rate q --steps n | --examples n --batch-size L --epochs E) --delta d [--accountant rdp|prv|gdp] [--prior-phase s,q,n ...] [--json]")
	var af accountantFlags
	af.register(fs)
	target := fs.Float64("target-epsilon", 0, "the ε not to exceed, > 0 (required)")
	q := fs.Float64("sample-rate", 0, "Poisson sampling rate q of the steps to run, in (0, 1] (required)")
	steps := fs.Int("steps", 0, "number of steps to run, ≥ 1 (required)")
	var prior phaseList
	fs.Var(&prior, "prior-phase", "a phase `sigma,q,steps` already run (e.g. before a resume); repeat in order")
	rf := addRunFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := flagsSet(fs)
	if err := rf.resolve(set, q, steps, &af.delta); err != nil {
		return err
	}
	if err := requireFlags(set, "target-epsilon", "sample-rate", "steps", "delta"); err != nil {
		return err
	}
	cal, err := accountant.Calibrate(accountant.State{Accountant: af.name, Options: af.options(), Phases: prior}, *target, af.delta, *q, *steps)
	if err != nil {
		return asUsage(err)
	}
	acc, err := accountant.Restore(accountant.State{Accountant: af.name, Options: af.options(), Phases: prior})
	if err != nil {
		return asUsage(err)
	}
	if err := acc.Step(cal.Sigma, *q, *steps); err != nil {
		return err
	}
	out := newPrivacyJSON(acc, cal.Result)
	out.Sigma = &cal.Sigma
	out.TargetEpsilon = target
	if af.jsonOut {
		return writeJSON(stdout, out)
	}
	printHuman(stdout, out, &cal)
	return nil
}

// privacyJSON is the machine-readable output of both subcommands.
type privacyJSON struct {
	Sigma           *float64           `json:"sigma,omitempty"`
	TargetEpsilon   *float64           `json:"target_epsilon,omitempty"`
	Epsilon         float64            `json:"epsilon"`
	Delta           float64            `json:"delta"`
	Accountant      string             `json:"accountant"`
	Description     string             `json:"description"`
	Approximate     bool               `json:"approximate"`
	Order           *float64           `json:"order,omitempty"`
	Conversion      string             `json:"conversion,omitempty"`
	EpsilonLower    *float64           `json:"epsilon_lower,omitempty"`
	EpsilonEstimate *float64           `json:"epsilon_estimate,omitempty"`
	EpsilonUpper    *float64           `json:"epsilon_upper,omitempty"`
	EpsError        *float64           `json:"eps_error,omitempty"`
	DeltaError      *float64           `json:"delta_error,omitempty"`
	Mu              *float64           `json:"mu,omitempty"`
	Steps           int                `json:"steps"`
	Phases          []accountant.Phase `json:"phases"`
	// Runs are the reports composed (--report), PrivacyUnit what their
	// guarantee protects.
	Runs        []composedRun `json:"runs,omitempty"`
	PrivacyUnit string        `json:"privacy_unit,omitempty"`
	Assumptions string        `json:"assumptions"`
}

const assumptions = "Poisson sampling with rate q; noise multiplier sigma applied once per logical batch; add-or-remove-one adjacency"

func newPrivacyJSON(acc accountant.Accountant, r accountant.Result) *privacyJSON {
	out := &privacyJSON{
		Epsilon:     r.Epsilon,
		Delta:       r.Delta,
		Accountant:  acc.Name(),
		Description: acc.Description(),
		Approximate: r.Approximate,
		Steps:       r.Steps,
		Phases:      acc.Phases(),
		Assumptions: assumptions,
	}
	switch acc.Name() {
	case accountant.RDP:
		out.Order = &r.Order
		out.Conversion = string(r.Conversion)
	case accountant.PRV:
		out.EpsilonLower, out.EpsilonEstimate, out.EpsilonUpper = &r.EpsilonLower, &r.EpsilonEstimate, &r.EpsilonUpper
		out.EpsError, out.DeltaError = &r.EpsError, &r.DeltaError
	case accountant.GDP:
		out.Mu = &r.Mu
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printHuman(w io.Writer, o *privacyJSON, cal *accountant.Calibration) {
	fmt.Fprintf(w, "accountant:  %s\n", o.Description)
	for i, r := range o.Runs {
		fmt.Fprintf(w, "run %d:%s %s: %d phase(s), its own ε = %.4g at δ = %.3g, per %s\n", i+1, strings.Repeat(" ", max(0, 6-len(fmt.Sprint(i+1)))), r.Report, len(r.Phases), r.Epsilon, r.Delta, r.Unit)
	}
	for i, p := range o.Phases {
		label := "phase:"
		if len(o.Phases) > 1 {
			label = fmt.Sprintf("phase %d:", i+1)
		}
		fmt.Fprintf(w, "%-12s sigma=%g sample-rate=%g steps=%d\n", label, p.Sigma, p.SampleRate, p.Steps)
	}
	fmt.Fprintf(w, "assumes:     %s\n", assumptions)
	if o.PrivacyUnit != "" {
		fmt.Fprintf(w, "unit:        %s (one %s added or removed: the guarantee of each)\n", o.PrivacyUnit, o.PrivacyUnit)
	}
	fmt.Fprintf(w, "delta:       %g\n", o.Delta)
	if cal != nil {
		fmt.Fprintf(w, "sigma:       %.6g  (smallest noise multiplier found whose epsilon does not exceed the target %g)\n", cal.Sigma, *o.TargetEpsilon)
	}
	fmt.Fprintf(w, "epsilon:     %.6g", o.Epsilon)
	switch o.Accountant {
	case accountant.RDP:
		fmt.Fprintf(w, "  (optimal RDP order %g, %s conversion)\n", *o.Order, o.Conversion)
	case accountant.PRV:
		fmt.Fprintf(w, "  (upper bound; estimate %.6g, lower bound %.6g; eps_error %g, delta_error %g)\n",
			*o.EpsilonEstimate, *o.EpsilonLower, *o.EpsError, *o.DeltaError)
	case accountant.GDP:
		fmt.Fprintf(w, "  (approximate (CLT), not an upper bound; mu = %.6g)\n", *o.Mu)
	default:
		fmt.Fprintln(w)
	}
}

// searchJSON is privacy search's machine-readable output.
type searchJSON struct {
	accountant.SearchResult
	Sigma         float64  `json:"sigma"`
	SampleRate    float64  `json:"sample_rate"`
	TargetEpsilon *float64 `json:"target_epsilon,omitempty"`
	// Trials1, Trials01 are the numbers of runs exceeded with probability
	// at most 1 % and 0.01 %.
	Trials1     int    `json:"trials_p99"`
	Trials01    int    `json:"trials_p9999"`
	Assumptions string `json:"assumptions"`
}

func runPrivacySearch(args []string, stdout io.Writer) error {
	fs := newFlagSet("privacy search", "(--sigma s | --target-epsilon e) (--sample-rate q --steps n | --examples n --batch-size L --epochs E) --delta d --trials-mean M [--trials-eta η] [--score-noise-multiplier s] [--json]")
	sigma := fs.Float64("sigma", 0, "every run's noise multiplier σ (or give --target-epsilon)")
	target := fs.Float64("target-epsilon", 0, "the search's ε not to exceed: print the runs' σ for it (or give --sigma)")
	q := fs.Float64("sample-rate", 0, "every run's Poisson sampling rate q, in (0, 1]")
	steps := fs.Int("steps", 0, "every run's steps, ≥ 1")
	delta := fs.Float64("delta", 0, "δ of the (ε, δ) guarantee, in (0, 1) (required)")
	mean := fs.Float64("trials-mean", 0, "the expected number of runs, > 1 (required)")
	eta := fs.Float64("trials-eta", 1, "the shape η of the number of runs' truncated negative binomial (1: geometric, 0: logarithmic)")
	scoreSigma := fs.Float64("score-noise-multiplier", 0, "each run's score's noise multiplier σ_s (tune's --score-noise times the score data's units; 0: runs scored on public data)")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	rf := addRunFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := flagsSet(fs)
	if err := rf.resolve(set, q, steps, delta); err != nil {
		return err
	}
	if err := requireFlags(set, "sample-rate", "steps", "delta", "trials-mean"); err != nil {
		return err
	}
	if set["sigma"] == set["target-epsilon"] {
		return usagef("give one of --sigma (the search's ε follows) and --target-epsilon (the runs' σ follows)")
	}
	trials, err := accountant.NewTrials(*eta, *mean)
	if err != nil {
		return asUsage(err)
	}
	out := searchJSON{SampleRate: *q, Trials1: trials.Draw(0.99), Trials01: trials.Draw(0.9999), Assumptions: assumptions + "; the best-scored of K runs released, K secret"}
	if set["target-epsilon"] {
		s, r, err := accountant.CalibrateSearch(*target, *delta, *q, *steps, *scoreSigma, trials)
		if err != nil {
			return asUsage(err)
		}
		out.SearchResult, out.Sigma, out.TargetEpsilon = r, s, target
	} else {
		r, err := accountant.SearchEpsilon([]accountant.Phase{{Sigma: *sigma, SampleRate: *q, Steps: *steps}}, *scoreSigma, trials, *delta, accountant.Options{})
		if err != nil {
			return asUsage(err)
		}
		out.SearchResult, out.Sigma = r, *sigma
	}
	if math.IsInf(out.Epsilon, 0) || math.IsNaN(out.Epsilon) {
		return fmt.Errorf("no finite epsilon for these settings (noise multiplier too small?)")
	}
	if *jsonOut {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "search:      the best-scored of K runs, K secret, drawn from a truncated negative binomial (η = %g, γ = %.4g): %.3g in expectation, more than %d with probability 1 %%, more than %d with 0.01 %% (Papernot and Steinke 2022)\n", trials.Eta, trials.Gamma, trials.Mean(), out.Trials1, out.Trials01)
	fmt.Fprintf(stdout, "runs:        sigma=%.6g sample-rate=%g steps=%d; scores' noise multiplier %g\n", out.Sigma, *q, out.Steps, *scoreSigma)
	fmt.Fprintf(stdout, "assumes:     %s\n", out.Assumptions)
	fmt.Fprintf(stdout, "delta:       %g\n", *delta)
	if out.TargetEpsilon != nil {
		fmt.Fprintf(stdout, "sigma:       %.6g  (smallest noise multiplier found whose search epsilon does not exceed the target %g)\n", out.Sigma, *target)
	}
	fmt.Fprintf(stdout, "epsilon:     %.6g  (the search; one run alone: %.6g; RDP order %g, %s conversion)\n", out.Epsilon, out.RunEpsilon, out.Order, out.Conversion)
	return nil
}
