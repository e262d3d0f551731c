package audit

import (
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/internal/testhook"
)

// TestAuditClassWeights: a run that weighs classes is audited with
// gradient canaries, which have no class and weigh 1 — the worst case the
// guarantee bounds: no violation as calibrated, one with σ divided by 10
// behind the accountant's back (250 images, 1000 canaries, 10 epochs,
// ε = 2); input canaries, whose wrong classes would weigh less, are
// refused.
func TestAuditClassWeights(t *testing.T) {
	ds := view(t, "idx:../../testdata/fmnist-small:limit=250")
	weights := []float64{0.1, 1, 0.1, 1, 0.1, 1, 0.1, 1, 0.1, 1}
	o := Options{Kind: Gradient, Canaries: 1000, KPlus: 250, KMinus: 250, Confidence: 0.95, Source: dpengine.NewSeededSource(4)}
	for _, div := range []float64{0, 10} {
		cfg := cnnConfig(t, ds, 2, 10)
		cfg.Settings.ClassWeights = weights
		testhook.NoiseDivisor = div
		r, err := Run(cfg, o)
		testhook.NoiseDivisor = 0
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("σ divided by %v: %d/%d correct, bound %.3f (claimed %.3f, at most %.3f)", div, r.Correct, r.Guesses, r.Bound, r.Claimed, r.MaxBound)
		if len(r.Report.Settings.ClassWeights) != 10 {
			t.Fatalf("the audited run weighs classes %v", r.Report.Settings.ClassWeights)
		}
		if r.Violation != (div > 0) {
			t.Errorf("σ divided by %v: violation %v (bound %v, claimed %v)", div, r.Violation, r.Bound, r.Claimed)
		}
	}
	cfg := cnnConfig(t, ds, 8, 1)
	cfg.Settings.ClassWeights = weights
	oi := Options{Kind: Input, Canaries: 8, KPlus: 2, KMinus: 2, Confidence: 0.95, Pool: ds}
	if _, err := Run(cfg, oi); err == nil || !strings.Contains(err.Error(), "audit it with gradient canaries") {
		t.Errorf("input canaries of a run with class weights: %v", err)
	}
}
