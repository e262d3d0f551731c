package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func decodeJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
	return m
}

func libEpsilon(t *testing.T, name string, opts accountant.Options, ps []accountant.Phase, delta float64) accountant.Result {
	t.Helper()
	a, err := accountant.NewWithOptions(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := a.Step(p.Sigma, p.SampleRate, p.Steps); err != nil {
			t.Fatal(err)
		}
	}
	r, err := a.Epsilon(delta)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPrivacyEpsilonJSON: the JSON output of each accountant carries the
// required keys and the library's values (to the last bit: JSON float64
// round-trips exactly).
func TestPrivacyEpsilonJSON(t *testing.T) {
	phase := []accountant.Phase{{Sigma: 1.1, SampleRate: 0.01, Steps: 500}}
	for _, name := range accountant.Names() {
		code, out, errs := runCLI(t, "privacy", "epsilon", "--sample-rate", "0.01", "--sigma", "1.1", "--steps", "500", "--delta", "1e-5", "--accountant", name, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errs)
		}
		m := decodeJSON(t, out)
		want := libEpsilon(t, name, accountant.Options{}, phase, 1e-5)
		if m["epsilon"] != want.Epsilon || m["delta"] != 1e-5 || m["accountant"] != name {
			t.Errorf("%s: got %v", name, out)
		}
		switch name {
		case accountant.RDP:
			if m["order"] != want.Order || m["conversion"] != "improved" {
				t.Errorf("rdp: order/conversion wrong: %s", out)
			}
		case accountant.PRV:
			if m["epsilon_upper"] != want.EpsilonUpper || m["epsilon_lower"] != want.EpsilonLower || m["epsilon_estimate"] != want.EpsilonEstimate || m["eps_error"] != 0.01 {
				t.Errorf("prv: bounds wrong: %s", out)
			}
		case accountant.GDP:
			if m["approximate"] != true || !strings.Contains(m["description"].(string), "approximate (CLT)") || m["mu"] != want.Mu {
				t.Errorf("gdp: not labelled approximate: %s", out)
			}
		}
		if name != accountant.GDP && m["approximate"] != false {
			t.Errorf("%s: approximate = %v", name, m["approximate"])
		}
	}
}

// TestPrivacyEpsilonHuman: the default output is readable and labels what
// it prints; the classic conversion reproduces the TensorFlow Privacy
// README's 3.01 (see the accountant package tests for the source).
func TestPrivacyEpsilonHuman(t *testing.T) {
	code, out, errs := runCLI(t, "privacy", "epsilon", "--sample-rate", "0.004266666666666667", "--sigma", "1.1", "--steps", "14063", "--delta", "1e-5", "--conversion", "classic")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"RDP", "classic conversion", "epsilon:     3.00", "optimal RDP order", "Poisson sampling", "delta:       1e-05"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	code, out, _ = runCLI(t, "privacy", "epsilon", "--sample-rate", "0.01", "--sigma", "1", "--steps", "100", "--delta", "1e-5", "--accountant", "gdp")
	if code != 0 || strings.Count(out, "approximate (CLT)") < 2 {
		t.Errorf("gdp output must say approximate (CLT) in the description and next to epsilon:\n%s", out)
	}
	code, out, _ = runCLI(t, "privacy", "epsilon", "--sample-rate", "0.01", "--sigma", "1", "--steps", "100", "--delta", "1e-5", "--accountant", "prv")
	if code != 0 || !strings.Contains(out, "upper bound; estimate") {
		t.Errorf("prv output must report the bounds:\n%s", out)
	}
}

// TestPrivacyPhases: --phase accounts a run whose settings changed as the
// composition of its phases.
func TestPrivacyPhases(t *testing.T) {
	code, out, errs := runCLI(t, "privacy", "epsilon", "--phase", "1.0,0.01,300", "--phase", "2.0,0.02,100", "--delta", "1e-5", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m := decodeJSON(t, out)
	want := libEpsilon(t, "rdp", accountant.Options{}, []accountant.Phase{{Sigma: 1, SampleRate: 0.01, Steps: 300}, {Sigma: 2, SampleRate: 0.02, Steps: 100}}, 1e-5)
	if m["epsilon"] != want.Epsilon || m["steps"] != 400.0 || len(m["phases"].([]any)) != 2 {
		t.Errorf("got %s, want ε=%v", out, want.Epsilon)
	}
}

// TestPrivacySigma: calibration through the CLI meets the target and lands
// within 1 % of it, for each accountant.
func TestPrivacySigma(t *testing.T) {
	for _, name := range accountant.Names() {
		code, out, errs := runCLI(t, "privacy", "sigma", "--target-epsilon", "2", "--sample-rate", "0.02", "--steps", "200", "--delta", "1e-5", "--accountant", name, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errs)
		}
		m := decodeJSON(t, out)
		sigma, ok := m["sigma"].(float64)
		if !ok || m["delta"] != 1e-5 || m["accountant"] != name || m["target_epsilon"] != 2.0 {
			t.Fatalf("%s: %s", name, out)
		}
		e := libEpsilon(t, name, accountant.Options{}, []accountant.Phase{{Sigma: sigma, SampleRate: 0.02, Steps: 200}}, 1e-5).Epsilon
		if e != m["epsilon"] || e > 2 || e < 1.98 {
			t.Errorf("%s: σ=%v gives ε=%v (reported %v)", name, sigma, e, m["epsilon"])
		}
		if name == accountant.RDP {
			if _, ok := m["order"]; !ok {
				t.Errorf("rdp: no order in %s", out)
			}
		}
	}
	code, out, errs := runCLI(t, "privacy", "sigma", "--target-epsilon", "2", "--sample-rate", "0.02", "--steps", "200", "--delta", "1e-5")
	if code != 0 || !strings.Contains(out, "sigma:") || !strings.Contains(out, "epsilon:") {
		t.Errorf("human sigma output (exit %d, %s):\n%s", code, errs, out)
	}
	// With phases already spent.
	code, out, errs = runCLI(t, "privacy", "sigma", "--target-epsilon", "3", "--sample-rate", "0.02", "--steps", "200", "--delta", "1e-5", "--prior-phase", "1.0,0.01,500", "--json")
	if code != 0 {
		t.Fatalf("prior phase: exit %d: %s", code, errs)
	}
	m := decodeJSON(t, out)
	if e := m["epsilon"].(float64); e > 3 || e < 2.97 || len(m["phases"].([]any)) != 2 {
		t.Errorf("prior phase: %s", out)
	}
}

// TestPrivacyErrors: invalid input is a clear error with exit status 2;
// an unreachable target is a failure with status 1.
func TestPrivacyErrors(t *testing.T) {
	base := []string{"privacy", "epsilon", "--sample-rate", "0.01", "--sigma", "1", "--steps", "100", "--delta", "1e-5"}
	with := func(flag, value string) []string {
		args := append([]string(nil), base...)
		for i := range args {
			if args[i] == flag {
				args[i+1] = value
				return args
			}
		}
		return append(args, flag, value)
	}
	cases := []struct {
		args    []string
		code    int
		mention string
	}{
		{with("--sigma", "-1"), 2, "sigma"},
		{with("--sigma", "0"), 2, "sigma"},
		{with("--sample-rate", "1.5"), 2, "sampling rate"},
		{with("--sample-rate", "0"), 2, "sampling rate"},
		{with("--delta", "1"), 2, "delta"},
		{with("--delta", "0"), 2, "delta"},
		{with("--steps", "0"), 2, "steps"},
		{with("--accountant", "moments"), 2, "unknown accountant"},
		{with("--conversion", "fancy"), 2, "conversion"},
		{with("--sigma", "abc"), 2, "invalid value"},
		{[]string{"privacy", "epsilon", "--sample-rate", "0.01", "--sigma", "1", "--steps", "100"}, 2, "--delta"},
		{[]string{"privacy", "epsilon", "--delta", "1e-5"}, 2, "--sample-rate"},
		{with("--phase", "1,0.01,10"), 2, "--phase"},
		{[]string{"privacy", "epsilon", "--phase", "1,0.01", "--delta", "1e-5"}, 2, "sigma,q,steps"},
		{[]string{"privacy", "epsilon", "--phase", "-1,0.01,5", "--delta", "1e-5"}, 2, "sigma"},
		{[]string{"privacy"}, 2, "missing subcommand"},
		{[]string{"privacy", "budget"}, 2, "unknown subcommand"},
		{[]string{"privacy", "sigma", "--target-epsilon", "-1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"}, 2, "target epsilon"},
		{[]string{"privacy", "sigma", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"}, 2, "--target-epsilon"},
		{[]string{"privacy", "sigma", "--target-epsilon", "0.01", "--sample-rate", "1", "--steps", "1000000", "--delta", "1e-5"}, 1, "cannot be reached"},
		{[]string{"privacy", "sigma", "--target-epsilon", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5", "--prior-phase", "0.8,0.05,1000"}, 1, "already spend"},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.mention) || out != "" {
			t.Errorf("%q: exit %d (want %d), stderr %q (want mention of %q), stdout %q", c.args, code, c.code, errs, c.mention, out)
		}
	}
}

func TestPrivacyHelp(t *testing.T) {
	for _, args := range [][]string{{"privacy", "-h"}, {"privacy", "help"}, {"privacy", "epsilon", "-h"}, {"privacy", "sigma", "-h"}} {
		if code, _, _ := runCLI(t, args...); code != 0 {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
	}
	_, out, _ := runCLI(t, "privacy", "-h")
	if !strings.Contains(out, "epsilon") || !strings.Contains(out, "approximate (CLT)") {
		t.Errorf("privacy help:\n%s", out)
	}
	_, _, errs := runCLI(t, "help")
	if !strings.Contains(errs, "privacy") {
		t.Errorf("top-level help does not list privacy:\n%s", errs)
	}
}

// TestPrivacyRunFlags: both subcommands take a run as train describes it —
// --examples, --batch-size, --epochs — for the sample rate and steps train
// gives the accountant: the same figures as --sample-rate and --steps
// worked out by hand (q = L/n, ⌈n/L⌉ steps an epoch; the batch capped at
// n), δ defaulting to train's 1/(10·n), and ε equal to what train reports
// for that run at a fixed σ; mixed or partial descriptions are usage
// errors.
func TestPrivacyRunFlags(t *testing.T) {
	eps := func(args ...string) float64 {
		t.Helper()
		code, out, e := runCLI(t, append([]string{"privacy"}, append(args, "--json")...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		return decodeJSON(t, out)["epsilon"].(float64)
	}
	// 1000 examples, batch 64: q = 0.064, ⌈1000/64⌉ = 16 steps an epoch.
	if a, b := eps("epsilon", "--sigma", "1.2", "--examples", "1000", "--batch-size", "64", "--epochs", "3", "--delta", "1e-5"),
		eps("epsilon", "--sigma", "1.2", "--sample-rate", "0.064", "--steps", "48", "--delta", "1e-5"); a != b {
		t.Errorf("the run's ε %v, by hand %v", a, b)
	}
	// δ = 1/(10·n) by default; a batch over n is n (q = 1, a step an epoch).
	if a, b := eps("epsilon", "--sigma", "3", "--examples", "500", "--batch-size", "800", "--epochs", "4"),
		eps("epsilon", "--sigma", "3", "--sample-rate", "1", "--steps", "4", "--delta", "2e-4"); a != b {
		t.Errorf("the default δ or the capped batch: %v, by hand %v", a, b)
	}
	code, out, e := runCLI(t, "privacy", "sigma", "--target-epsilon", "2", "--examples", "1000", "--batch-size", "64", "--epochs", "3", "--delta", "1e-5", "--json")
	code2, out2, _ := runCLI(t, "privacy", "sigma", "--target-epsilon", "2", "--sample-rate", "0.064", "--steps", "48", "--delta", "1e-5", "--json")
	if code != 0 || code2 != 0 || decodeJSON(t, out)["sigma"] != decodeJSON(t, out2)["sigma"] {
		t.Errorf("sigma: exit %d (%s) and %d; %s vs %s", code, e, code2, out, out2)
	}

	// What train reports for such a run at σ fixed.
	dir := t.TempDir()
	rep := dir + "/r.json"
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist+":limit=300", "--test-data", "none",
		"--noise-multiplier", "1.3", "--epochs", "2", "--batch-size", "64", "--seed", "1", "--quiet", "--out", dir+"/m.onnx", "--report", rep); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	var r runReport
	b, _ := os.ReadFile(rep)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if got := eps("epsilon", "--sigma", "1.3", "--examples", "300", "--batch-size", "64", "--epochs", "2"); r.Privacy == nil || got != r.Privacy.Epsilon {
		t.Errorf("privacy epsilon says %v, train reported %+v", got, r.Privacy)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"epsilon", "--sigma", "1", "--examples", "100", "--batch-size", "10"}, "--epochs"},
		{[]string{"epsilon", "--sigma", "1", "--examples", "100", "--batch-size", "10", "--epochs", "2", "--steps", "5"}, "give one or the other"},
		{[]string{"epsilon", "--sigma", "1", "--examples", "0", "--batch-size", "10", "--epochs", "2"}, "must be positive"},
		{[]string{"epsilon", "--phase", "1,0.1,10", "--examples", "100", "--batch-size", "10", "--epochs", "2"}, "--phase cannot be combined"},
		{[]string{"sigma", "--target-epsilon", "1", "--examples", "100", "--epochs", "2"}, "--batch-size"},
	} {
		code, _, e := runCLI(t, append([]string{"privacy"}, c.args...)...)
		if code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d, %q; want a usage error containing %q", c.args, code, e, c.want)
		}
	}
}

// TestPrivacySearch: privacy search gives the accountant's bound for a
// random search of runs described either way (q and steps, or train's
// examples, batch and epochs), calibrates the runs' σ for a target (the
// least that meets it), and refuses --sigma and --target-epsilon together
// or neither, and a mean of at most one run.
func TestPrivacySearch(t *testing.T) {
	tr, _ := accountant.NewTrials(0, 10)
	want, err := accountant.SearchEpsilon([]accountant.Phase{{Sigma: 1, SampleRate: 256.0 / 60000, Steps: 3290}}, 50, tr, 1e-5, accountant.Options{})
	if err != nil {
		t.Fatal(err)
	}
	code, out, e := runCLI(t, "privacy", "search", "--sigma", "1", "--examples", "60000", "--batch-size", "256", "--epochs", "14",
		"--delta", "1e-5", "--trials-mean", "10", "--trials-eta", "0", "--score-noise-multiplier", "50", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	m := decodeJSON(t, out)
	if m["epsilon"].(float64) != want.Epsilon || m["run_epsilon"].(float64) != want.RunEpsilon || m["steps"].(float64) != 3290 || m["trials_p99"].(float64) != float64(tr.Draw(0.99)) {
		t.Errorf("privacy search: %v; want ε %v (one run %v), 3290 steps (⌈60000/256⌉ an epoch)", m, want.Epsilon, want.RunEpsilon)
	}
	code, out, e = runCLI(t, "privacy", "search", "--target-epsilon", "3", "--sample-rate", "0.01", "--steps", "2000", "--delta", "1e-5", "--trials-mean", "5", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	m = decodeJSON(t, out)
	sigma := m["sigma"].(float64)
	tr5, _ := accountant.NewTrials(1, 5)
	at, _ := accountant.SearchEpsilon([]accountant.Phase{{Sigma: sigma, SampleRate: 0.01, Steps: 2000}}, 0, tr5, 1e-5, accountant.Options{})
	below, _ := accountant.SearchEpsilon([]accountant.Phase{{Sigma: sigma * (1 - 1e-5), SampleRate: 0.01, Steps: 2000}}, 0, tr5, 1e-5, accountant.Options{})
	if at.Epsilon > 3 || below.Epsilon <= 3 || m["epsilon"].(float64) != at.Epsilon {
		t.Errorf("σ %v for a search of ε 3: spends %v (reported %v); σ·(1−1e-5) spends %v", sigma, at.Epsilon, m["epsilon"], below.Epsilon)
	}
	for _, bad := range [][]string{
		{"--sigma", "1", "--target-epsilon", "3"},
		{},
		{"--sigma", "1", "--trials-mean", "1"},
	} {
		args := append([]string{"privacy", "search", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"}, bad...)
		if !slices.Contains(bad, "--trials-mean") {
			args = append(args, "--trials-mean", "5")
		}
		if code, _, e := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d: %s; want a usage error", bad, code, e)
		}
	}
}
