package dptrain_test

import (
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// smallFMNIST returns the first 96 images of testdata/fmnist-small as the
// fixture CNN's 1×28×28 inputs (the data set's normalization): three
// Poisson batches of 32 in expectation, for short runs.
func smallFMNIST(t *testing.T) *data.View {
	t.Helper()
	imgs, err := data.LoadString("idx:../testdata/fmnist-small:limit=96")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// cnnGraph loads the fixture CNN (testdata/models/cnn.onnx) as a graph of
// its own, initializers included.
func cnnGraph(t *testing.T) *graph.Graph {
	t.Helper()
	m, err := onnx.Load("../testdata/models/cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestResumeAfterCompleteEpoch trains one epoch with a checkpoint, then
// resumes with two epochs: the checkpoint records one completed epoch, and
// the resumed run does the second epoch only — three steps more, two epoch
// records in all, and ε within the target that σ was calibrated for.
func TestResumeAfterCompleteEpoch(t *testing.T) {
	ds := smallFMNIST(t)
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	var rep *dptrain.Report
	for _, epochs := range []int{1, 2} {
		g := cnnGraph(t)
		seed := uint64(3)
		var err error
		rep, err = dptrain.Run(dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: epochs, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
				Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
			},
			Graph: g, Train: ds, Checkpoint: ckpt, Resume: epochs == 2,
		})
		if err != nil {
			t.Fatalf("%d epochs: %v", epochs, err)
		}
		if epochs == 1 {
			c, err := dpengine.ReadCheckpoint(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if c.Epoch != 1 || c.EpochStep != 0 || c.Step != 3 {
				t.Fatalf("after one epoch the checkpoint records epoch %d, step %d of it, %d steps; want 1, 0, 3", c.Epoch, c.EpochStep, c.Step)
			}
		}
	}
	if len(rep.Epochs) != 2 || rep.Epochs[0].Epoch != 1 || rep.Epochs[1].Epoch != 2 || rep.Epochs[1].Steps != 6 {
		t.Fatalf("resumed run's epochs: %+v; want epochs 1 and 2, 6 steps in all", rep.Epochs)
	}
	if rep.Privacy == nil || rep.Privacy.Epsilon > 8 {
		t.Fatalf("privacy spent %+v, target ε = 8", rep.Privacy)
	}
}
