package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dptrain/audit"
	"github.com/dpfinetune/dpfinetune/internal/testhook"
)

// auditArgs is the audit of the acceptance tests: the fixture CNN on 1000
// images of the shipped Fashion-MNIST slice, 10 epochs of expected batch
// 64 (240 steps), 1000 canaries with 250 + 250 guesses, δ = 1e-5, seeded.
// With all 500 guesses right the bound could reach 5.09, so a claimed ε of
// 2 can be refuted; 1000 gradient canaries need 1000 of the CNN's 26 010
// parameters.
func auditArgs(eps string, extra ...string) []string {
	args := []string{"audit", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=1000", "--test-data", "none",
		"--epsilon", eps, "--delta", "1e-5", "--epochs", "10", "--batch-size", "64", "--lr", "0.002", "--seed", "3", "--quiet",
		"--canaries", "1000"}
	return append(args, extra...)
}

func auditResult(t *testing.T, args []string) (*audit.Result, string, int) {
	t.Helper()
	out, e, code := run(t, append(args, "--json")...)
	var r audit.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("exit %d, stdout %q is not the JSON result: %v; stderr %s", code, out, err, e)
	}
	if r.Canaries != 1000 || r.Guesses != 500 || r.Correct > r.Guesses || r.Included < 400 || r.Included > 600 || r.Report == nil {
		t.Errorf("counts: %+v", r)
	}
	return &r, e, code
}

// TestAuditHonest: with the mechanism as calibrated, the gradient-canary
// (white box) audit's lower bound stays below the claimed ε at ε = 2 and
// ε = 8, also with adaptive clipping (the canaries counted as samples,
// the clip norm moving under them), and the input-canary (black box) one
// at ε = 8.
func TestAuditHonest(t *testing.T) {
	for _, c := range []struct {
		kind, eps string
		extra     []string
	}{{"gradient", "2", nil}, {"gradient", "8", nil}, {"input", "8", nil}, {"gradient", "2", []string{"--clip-quantile", "0.5"}}} {
		name := c.kind + " ε=" + c.eps
		if c.extra != nil {
			name += " adaptive"
		}
		t.Run(name, func(t *testing.T) {
			r, e, code := auditResult(t, auditArgs(c.eps, append([]string{"--canary-kind", c.kind}, c.extra...)...))
			t.Logf("%s ε=%s: %d/%d correct, bound %.3f (claimed %.3f, at most %.3f)", c.kind, c.eps, r.Correct, r.Guesses, r.Bound, r.Claimed, r.MaxBound)
			if code != 0 || r.Violation || !(r.Bound <= r.Claimed) || r.Claimed <= 0 {
				t.Errorf("exit %d, bound %v, claimed %v, violation %v: %s", code, r.Bound, r.Claimed, r.Violation, e)
			}
			if r.MaxBound <= 2 {
				t.Errorf("the audit could never refute ε = 2: max bound %v", r.MaxBound)
			}
		})
	}
}

// TestAuditBroken: with σ divided by 10 behind the accountant's back (a
// test-only hook; no flag reaches it), the gradient-canary audit's bound
// exceeds the claimed ε = 2, the command says so and exits 1 — with a
// fixed clip norm and with adaptive clipping's moving one.
func TestAuditBroken(t *testing.T) {
	testhook.NoiseDivisor = 10
	defer func() { testhook.NoiseDivisor = 0 }()
	for _, extra := range [][]string{nil, {"--clip-quantile", "0.5"}} {
		r, e, code := auditResult(t, auditArgs("2", extra...))
		t.Logf("σ/10 %v: %d/%d correct, bound %.3f (claimed %.3f)", extra, r.Correct, r.Guesses, r.Bound, r.Claimed)
		if code != 1 || !r.Violation || !(r.Bound > r.Claimed) || !strings.Contains(e, "exceeds the ε the accountant claims") ||
			!strings.Contains(r.Statement, "VIOLATION") {
			t.Errorf("%v: exit %d, bound %v, claimed %v, violation %v, statement %q: %s", extra, code, r.Bound, r.Claimed, r.Violation, r.Statement, e)
		}
	}
}

// TestAuditText: the human-readable output carries the counts, the bound
// and the plain statement, after the training log of train.
func TestAuditText(t *testing.T) {
	out, e, code := run(t, auditArgs("8", "--canaries", "40", "--epochs", "1")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, want := range []string{"epoch 1/1", "m = 40", "10 \"included\"", "ε ≥", "95 % confidence", "no violation found", "not a proof"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestAuditBadInput: what cannot be audited is a usage error or a clear
// message.
func TestAuditBadInput(t *testing.T) {
	base := []string{"audit", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=64", "--epsilon", "2", "--quiet"}
	for _, c := range []struct {
		name  string
		extra []string
		code  int
		want  string
	}{
		{"resume", []string{"--resume"}, 2, "--resume"},
		{"non-private", []string{"--non-private"}, 2, "--non-private"},
		{"dry run", []string{"--dry-run"}, 2, "an audit is its run"},
		{"kind", []string{"--canary-kind", "loud"}, 2, "--canary-kind"},
		{"guesses", []string{"--canaries", "10", "--k-plus", "8", "--k-minus", "8"}, 2, "--k-plus"},
		{"confidence", []string{"--confidence", "1"}, 2, "--confidence"},
		{"pool too small", []string{"--canary-kind", "input", "--canary-data", fmnist + ":test:limit=10"}, 1, "canary pool has 10"},
		{"more canaries than parameters", []string{"--canaries", "30000"}, 1, "26010 trainable parameters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, e, code := run(t, append(append([]string{}, base...), c.extra...)...)
			if code != c.code || !strings.Contains(e, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, e, c.code, c.want)
			}
		})
	}
}
