package dptrain

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// WrapOptimizer makes Run wrap the optimizer it builds with wrap, until
// the returned function is called.
func WrapOptimizer(wrap func(dpengine.Optimizer) dpengine.Optimizer) (restore func()) {
	wrapOptimizer = wrap
	return func() { wrapOptimizer = nil }
}

// FixtureGraph loads testdata/models/NAME.onnx as a graph of its own, for
// the tests of both packages.
func FixtureGraph(t *testing.T, name string) *graph.Graph {
	t.Helper()
	m, err := onnx.Load("../testdata/models/" + name + ".onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// FMNISTSlice returns the first 96 images of testdata/fmnist-small as
// inputs of shape sample (C,H,W), with the data set's normalization: three
// Poisson batches of 32 in expectation, for short runs, for the tests of
// both packages.
func FMNISTSlice(t *testing.T, sample []int64) *data.View {
	t.Helper()
	imgs, err := data.LoadString("idx:../testdata/fmnist-small:limit=96")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.NewView(imgs, data.Preprocess{Channels: int(sample[0]), Height: int(sample[1]), Width: int(sample[2]), Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
