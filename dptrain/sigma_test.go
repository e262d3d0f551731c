package dptrain_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// TestRunNoiseMultiplier: with σ fixed (Settings.NoiseMultiplier) the run
// adds noise of that σ, records as its ε the one the accountant gives
// for σ over the planned steps — before the first step and after the
// last, and after a resume that adds an epoch, where σ stays and the ε
// is the composition of both phases — and refuses a σ beside a target ε
// or one that is not a positive finite number.
func TestRunNoiseMultiplier(t *testing.T) {
	ds := smallFMNIST(t)
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	const sigma, delta = 1.3, 1e-3
	settings := func(epochs int) dptrain.Settings {
		seed := uint64(2)
		return dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", NoiseMultiplier: sigma, Delta: delta, Epochs: epochs, BatchSize: 32,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
		}
	}
	// The ε of σ at q = 32/96 over the given steps, by the accountant
	// alone.
	epsOf := func(steps int) float64 {
		a, _ := accountant.New("rdp")
		if err := a.Step(sigma, 32.0/96, steps); err != nil {
			t.Fatal(err)
		}
		r, err := a.Epsilon(delta)
		if err != nil {
			t.Fatal(err)
		}
		return r.Epsilon
	}
	for _, epochs := range []int{1, 2} {
		rep, err := dptrain.Run(dptrain.Config{Settings: settings(epochs), Graph: cnnGraph(t), Train: ds, Checkpoint: ckpt, Resume: epochs == 2})
		if err != nil {
			t.Fatalf("%d epochs: %v", epochs, err)
		}
		want := epsOf(3 * epochs)
		if rep.Settings.Sigma != sigma || rep.Settings.Epsilon != want || rep.Privacy == nil || math.Abs(rep.Privacy.Epsilon-want) > 1e-12*want {
			t.Errorf("%d epochs: σ %v, planned ε %v, spent %+v; want σ %v and ε %v", epochs, rep.Settings.Sigma, rep.Settings.Epsilon, rep.Privacy, sigma, want)
		}
	}
	for _, tc := range []struct {
		eps, sigma float64
		want       string
	}{
		{3, sigma, "give one"},
		{0, -1, "must be positive and finite"},
		{0, math.Inf(1), "must be positive and finite"},
		{0, math.NaN(), "must be positive and finite"},
	} {
		s := settings(1)
		s.Epsilon, s.NoiseMultiplier = tc.eps, tc.sigma
		if _, err := dptrain.Run(dptrain.Config{Settings: s, Graph: cnnGraph(t), Train: ds}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ε %v, σ %v: %v, want an error containing %q", tc.eps, tc.sigma, err, tc.want)
		}
	}
}

// TestRunLabelSmoothing: a run with the label smoothed trains on the
// smoothed loss — its training losses are not the plain run's, with the
// same seed — records α in the model's metadata, spends the same ε, and
// refuses an α outside [0, 1).
func TestRunLabelSmoothing(t *testing.T) {
	ds := smallFMNIST(t)
	run := func(alpha float64) *dptrain.Report {
		seed := uint64(5)
		out := filepath.Join(t.TempDir(), "m.onnx")
		rep, err := dptrain.Run(dptrain.Config{Settings: dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 4, Epochs: 1, BatchSize: 32,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed, LabelSmoothing: alpha,
		}, Graph: cnnGraph(t), Train: ds, Out: out})
		if err != nil {
			t.Fatalf("α = %v: %v", alpha, err)
		}
		m, err := onnx.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, kv := range m.Proto.GetMetadataProps() {
			found = found || kv.GetKey() == dptrain.MetaPrefix+"label_smoothing" && kv.GetValue() == fmt.Sprint(alpha)
		}
		if found != (alpha > 0) {
			t.Errorf("α = %v: label_smoothing in the metadata: %v", alpha, found)
		}
		return rep
	}
	plain, smoothed := run(0), run(0.3)
	if plain.Epochs[0].TrainLoss == smoothed.Epochs[0].TrainLoss {
		t.Errorf("the smoothed run's training loss %v is the plain run's", smoothed.Epochs[0].TrainLoss)
	}
	if plain.Privacy.Epsilon != smoothed.Privacy.Epsilon {
		t.Errorf("ε %v with smoothing, %v without", smoothed.Privacy.Epsilon, plain.Privacy.Epsilon)
	}
	seed := uint64(5)
	if _, err := dptrain.Run(dptrain.Config{Settings: dptrain.Settings{
		Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 4, Epochs: 1, BatchSize: 32,
		Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
		Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed, LabelSmoothing: -0.1,
	}, Graph: cnnGraph(t), Train: ds}); err == nil || !strings.Contains(err.Error(), "--label-smoothing -0.1") {
		t.Errorf("α = −0.1: %v", err)
	}
}
