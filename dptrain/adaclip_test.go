package dptrain_test

import (
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dptrain"
)

// TestRunAdaptiveClipping: the epochs' clipped fractions are what the
// clip norm makes them (none, all); with ClipQuantile the clip norm moves after
// every step — from a norm that clips nothing, down at every step, towards
// the quantile — while the accounted σ and the ε spent are a fixed-clip
// run's (the count's noise takes its share of σ, the gradient's σ_g the
// rest: σ⁻² = σ_g⁻² + (2σ_b)⁻²); the epochs record the clip norm; and
// settings adaptive clipping cannot take are refused.
func TestRunAdaptiveClipping(t *testing.T) {
	ds := smallFMNIST(t)
	settings := func() dptrain.Settings {
		seed := uint64(4)
		return dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 6, Epochs: 2, BatchSize: 32,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 100, ClipFn: "abadi",
			Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
		}
	}
	fixed, err := dptrain.Run(dptrain.Config{Settings: settings(), Graph: cnnGraph(t), Train: ds})
	if err != nil {
		t.Fatal(err)
	}
	// The epochs' clipped fractions (not private): none at R = 100, all
	// at R = 1e-6.
	for _, e := range fixed.Epochs {
		if e.Clipped != 0 {
			t.Errorf("R = 100: %v of the gradients clipped, want none", e.Clipped)
		}
	}
	tiny := settings()
	tiny.Clip = 1e-6
	all, err := dptrain.Run(dptrain.Config{Settings: tiny, Graph: cnnGraph(t), Train: ds})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all.Epochs {
		if e.Clipped != 1 {
			t.Errorf("R = 1e-6: %v of the gradients clipped, want all", e.Clipped)
		}
	}

	s := settings()
	s.ClipQuantile = 0.5
	var norms []float64
	var engineSigma float64
	rep, err := dptrain.Run(dptrain.Config{Settings: s, Graph: cnnGraph(t), Train: ds, Events: func(e dptrain.Event) {
		if e.Kind == dptrain.StepDone {
			norms = append(norms, e.ClipNorm)
			engineSigma = e.Engine.NoiseMultiplier()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Settings
	if got.ClipLR != dptrain.DefaultClipLR || got.ClipCountNoise != 32.0/20 {
		t.Errorf("defaults: rate %v, count noise %v; want %v and L/20 = 1.6", got.ClipLR, got.ClipCountNoise, dptrain.DefaultClipLR)
	}
	composed := 1 / math.Sqrt(1/(got.GradientSigma*got.GradientSigma)+1/(4*got.ClipCountNoise*got.ClipCountNoise))
	if got.Sigma != fixed.Settings.Sigma || math.Abs(composed-got.Sigma) > 1e-12 || got.GradientSigma <= got.Sigma {
		t.Errorf("σ %v (fixed clip's %v), σ_g %v composing with σ_b %v to %v", got.Sigma, fixed.Settings.Sigma, got.GradientSigma, got.ClipCountNoise, composed)
	}
	if engineSigma != got.GradientSigma {
		t.Errorf("the engine noises with σ = %v, not σ_g = %v", engineSigma, got.GradientSigma)
	}
	if rep.Privacy.Epsilon != fixed.Privacy.Epsilon {
		t.Errorf("ε %v, the fixed clip's %v", rep.Privacy.Epsilon, fixed.Privacy.Epsilon)
	}
	// From 100, where no sample is clipped (b̃ ≈ 1 ± σ_b/L = ± 0.05),
	// every step lowers R by about exp(−0.2·0.5).
	if len(norms) != 6 {
		t.Fatalf("%d steps, want 6", len(norms))
	}
	prev := 100.0
	for i, r := range norms {
		if ratio := r / prev; !(ratio > math.Exp(-0.2*0.8) && ratio < math.Exp(-0.2*0.2)) {
			t.Errorf("step %d: clip norm %v after %v: ratio %v, want about exp(−0.1)", i+1, r, prev, ratio)
		}
		prev = r
	}
	if rep.Epochs[0].ClipNorm != norms[2] || rep.Epochs[1].ClipNorm != norms[5] {
		t.Errorf("the epochs record clip norms %v and %v, the steps %v", rep.Epochs[0].ClipNorm, rep.Epochs[1].ClipNorm, norms)
	}

	for _, c := range []struct {
		set  func(*dptrain.Settings)
		want string
	}{
		{func(s *dptrain.Settings) { s.ClipQuantile = 1 }, "must be in (0, 1)"},
		{func(s *dptrain.Settings) { s.ClipQuantile = -0.5 }, "must be in (0, 1)"},
		{func(s *dptrain.Settings) { s.ClipQuantile, s.ClipFn = 0.5, "automatic" }, "--clip-fn automatic"},
		{func(s *dptrain.Settings) { s.ClipQuantile, s.PerLayer = 0.5, true }, "--per-layer"},
		{func(s *dptrain.Settings) { s.ClipQuantile, s.NonPrivate = 0.5, true }, "--non-private"},
		{func(s *dptrain.Settings) { s.ClipQuantile, s.ClipLR = 0.5, -1 }, "--clip-lr -1"},
		{func(s *dptrain.Settings) { s.ClipQuantile, s.ClipCountNoise = 0.5, math.Inf(1) }, "--clip-count-noise"},
		{func(s *dptrain.Settings) { s.ClipQuantile, s.ClipCountNoise = 0.5, 0.1 }, "more than σ/2"},
	} {
		s := settings()
		c.set(&s)
		if _, err := dptrain.Run(dptrain.Config{Settings: s, Graph: cnnGraph(t), Train: ds}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", s, err, c.want)
		}
	}
}
