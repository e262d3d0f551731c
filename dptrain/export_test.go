package dptrain

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
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
