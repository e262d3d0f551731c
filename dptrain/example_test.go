package dptrain_test

import (
	"fmt"
	"log"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// Example fine-tunes the fixture CNN on 512 Fashion-MNIST images at
// ε = 3, following the run through its events, and exports the model.
func Example() {
	m, err := onnx.Load("../testdata/models/cnn.onnx")
	if err != nil {
		log.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		log.Fatal(err)
	}
	imgs, err := data.LoadString("idx:../testdata/fmnist-small:limit=512")
	if err != nil {
		log.Fatal(err)
	}
	train, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		log.Fatal(err)
	}
	seed := uint64(1) // reproducible for the example; leave it nil for secure noise
	rep, err := dptrain.Run(dptrain.Config{
		Settings: dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 3, Epochs: 2, BatchSize: 64,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "adam", LR: 2e-3, InputShape: []int64{1, 28, 28}, Seed: &seed,
		},
		Graph: g,
		Train: train,
		Out:   "", // the trained weights stay in g; a path writes the ONNX model
		Events: func(ev dptrain.Event) {
			if ev.Kind == dptrain.EpochDone {
				fmt.Printf("epoch %d done after %d steps\n", ev.Epoch+1, ev.Step)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("σ calibrated: %v; ε spent within [2.9, 3]: %v\n", rep.Settings.Sigma > 0, rep.Privacy.Epsilon >= 2.9 && rep.Privacy.Epsilon <= 3)
	// Output:
	// epoch 1 done after 8 steps
	// epoch 2 done after 16 steps
	// σ calibrated: true; ε spent within [2.9, 3]: true
}

// Example_recipe runs the same fine-tune with the recipes of the DP
// literature, none of which changes ε: a cosine learning-rate schedule
// after a warm-up, the parameters' moving average as the released model,
// and a clip norm that follows the median per-sample gradient norm
// (adaptive clipping, its count's noise taken out of the same σ).
func Example_recipe() {
	m, err := onnx.Load("../testdata/models/cnn.onnx")
	if err != nil {
		log.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		log.Fatal(err)
	}
	imgs, err := data.LoadString("idx:../testdata/fmnist-small:limit=512")
	if err != nil {
		log.Fatal(err)
	}
	train, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		log.Fatal(err)
	}
	seed := uint64(1) // reproducible for the example; leave it nil for secure noise
	rep, err := dptrain.Run(dptrain.Config{
		Settings: dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 3, Epochs: 2, BatchSize: 64,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "adam", LR: 2e-3, InputShape: []int64{1, 28, 28}, Seed: &seed,
			LRSchedule: "cosine", WarmupSteps: 2, EMADecay: 0.9, ClipQuantile: 0.5,
		},
		Graph: g,
		Train: train,
	})
	if err != nil {
		log.Fatal(err)
	}
	last := rep.Epochs[len(rep.Epochs)-1]
	fmt.Printf("ε spent within [2.9, 3]: %v; the clip norm moved: %v; the gradient's σ above the accounted σ: %v\n",
		rep.Privacy.Epsilon >= 2.9 && rep.Privacy.Epsilon <= 3, last.ClipNorm != 1, rep.Settings.GradientSigma > rep.Settings.Sigma)
	// Output:
	// ε spent within [2.9, 3]: true; the clip norm moved: true; the gradient's σ above the accounted σ: true
}
