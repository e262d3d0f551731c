package dptrain_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

// recordingSet is a data.Dataset that records what each Fill call asked
// for and what it wrote.
type recordingSet struct {
	data.Dataset
	calls   [][]int
	samples [][]float32 // per call, the filled values
	labels  []bool      // per call, whether Fill wrote labels
}

func (r *recordingSet) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	if err := r.Dataset.Fill(x, y, indices, rng); err != nil {
		return err
	}
	per := 1
	for _, d := range r.Dataset.SampleShape() {
		per *= d
	}
	r.calls = append(r.calls, slices.Clone(indices))
	r.samples = append(r.samples, slices.Clone(x[:len(indices)*per]))
	r.labels = append(r.labels, y != nil)
	return nil
}

// TestRunAugmentMultiplicity: with AugmentMultiplicity 3, every training
// Fill asks for each sampled example three times in a row, each view
// augmented afresh (flips and crops: at least one of a sample's views
// differs from another), labels from Label rather than one per view; the
// settings record the multiplicity, the default physical batch holds 64
// views, the norm check ran on the views, and ε stays within its target.
// Without an augmentation the run is refused.
func TestRunAugmentMultiplicity(t *testing.T) {
	const views = 3
	base := smallFMNIST(t)
	imgs, err := data.LoadString("idx:../testdata/fmnist-small:limit=96")
	if err != nil {
		t.Fatal(err)
	}
	aug, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm(), Augment: data.Augment{CropPad: 3, Flip: true}})
	if err != nil {
		t.Fatal(err)
	}
	settings := func(augment string) dptrain.Settings {
		seed := uint64(4)
		return dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 1, BatchSize: 32,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
			Augment: augment, AugmentMultiplicity: views,
		}
	}
	if _, err := dptrain.Run(dptrain.Config{Settings: settings("none"), Graph: cnnGraph(t), Train: base}); err == nil || !strings.Contains(err.Error(), "needs an augmentation") {
		t.Fatalf("no augmentation: err = %v", err)
	}
	rec := &recordingSet{Dataset: aug}
	rep, err := dptrain.Run(dptrain.Config{Settings: settings("crop=3,flip"), Graph: cnnGraph(t), Train: rec})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Settings.AugmentMultiplicity != views || rep.Settings.PhysicalBatch != 32/views {
		t.Errorf("settings record multiplicity %d, physical batch %d; want %d and %d", rep.Settings.AugmentMultiplicity, rep.Settings.PhysicalBatch, views, 32/views)
	}
	if rep.NormCheck == nil || rep.Privacy == nil || rep.Privacy.Epsilon > 8 {
		t.Fatalf("norm check %+v, privacy %+v", rep.NormCheck, rep.Privacy)
	}
	per := 28 * 28
	var fills, differ int
	for c, idx := range rec.calls {
		if len(idx) == 0 {
			continue
		}
		fills++
		if rec.labels[c] {
			t.Errorf("fill %d asked the dataset for a label a view", c)
		}
		if len(idx)%views != 0 {
			t.Fatalf("fill %d of %d positions, not whole samples of %d views", c, len(idx), views)
		}
		for s := 0; s < len(idx); s += views {
			x := rec.samples[c]
			for v := 1; v < views; v++ {
				if idx[s+v] != idx[s] {
					t.Fatalf("fill %d: sample at %d has views of examples %v", c, s/views, idx[s:s+views])
				}
				if !slices.Equal(x[s*per:(s+1)*per], x[(s+v)*per:(s+v+1)*per]) {
					differ++
				}
			}
		}
	}
	if fills == 0 {
		t.Fatal("no training fill recorded")
	}
	if differ == 0 {
		t.Error("every view equals its sample's first: the augmentation is not drawn a view")
	}
}
