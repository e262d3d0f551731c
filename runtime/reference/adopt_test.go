package reference_test

import (
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestAdoptHost checks that reference.Device adopts host memory (like the
// CPU) and reference.Separate copies it into memory of its own, which is
// what makes Separate catch a forgotten Plan.SyncParams.
func TestAdoptHost(t *testing.T) {
	host := []float32{1, 2, 3, 4}
	b, err := runtime.AdoptHost(reference.Device{}, host)
	if err != nil {
		t.Fatal(err)
	}
	if !runtime.SameMemory(host, b.Floats()) {
		t.Fatal("reference.Device copied a host slice it should adopt")
	}
	s, err := runtime.AdoptHost(reference.Separate{}, host)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.SameMemory(host, s.Floats()) {
		t.Fatal("reference.Separate adopted a host slice: its memory must be its own")
	}
	out := make([]float32, len(host))
	if err := (reference.Separate{}).CopyOut(out, s, 0); err != nil {
		t.Fatal(err)
	}
	for i := range host {
		if out[i] != host[i] {
			t.Fatalf("copy %v, want %v", out, host)
		}
	}
	f, err := runtime.AllocFloat64(reference.Separate{}, 5)
	if err != nil || len(f) != 5 {
		t.Fatalf("AllocFloat64 on the reference backend: %d elements, %v", len(f), err)
	}
	if _, err := runtime.GraphOpsOf(reference.Separate{}); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.DPOpsOf(reference.Separate{}); err != nil {
		t.Fatal(err)
	}
}

// loadModel reads fixture model name of testdata/models and its golden
// input; each call gives a graph of its own (initializers included).
func loadModel(t *testing.T, name string) (*graph.Graph, map[string]*npy.Array) {
	t.Helper()
	g, gold, err := numcheck.LoadFixture(filepath.Join("..", "..", "testdata"), name)
	if err != nil {
		t.Fatal(err)
	}
	return g, gold
}

// TestPlanOnSeparateMemory compiles the cnn fixture on reference.Separate,
// whose parameters are copies of the graph's initializers, and checks that
// a training step computes what it computes on reference.Device (bit for
// bit: the same arithmetic), that an update of the device's parameters
// leaves the initializers alone until SyncParams, which then brings them
// to the device's values, and that LoadParams brings a host change of the
// initializers to the device. The per-sample losses, which Loss computes
// in device memory from the labels it copies in, come out the same.
func TestPlanOnSeparateMemory(t *testing.T) {
	lossesOn := map[string][]float32{}
	run := func(dev runtime.Device) (*runtime.Plan, *graph.Graph, map[string][]float32) {
		g, gold := loadModel(t, "cnn")
		in := gold["input"]
		p, err := runtime.CompileForBatch(g, in.Shape[0], nil, &runtime.Options{Device: dev})
		if err != nil {
			t.Fatalf("%s: %v", dev.Name(), err)
		}
		if err := p.SetInput(0, in.F32); err != nil {
			t.Fatal(err)
		}
		if err := p.Forward(); err != nil {
			t.Fatal(err)
		}
		losses := make([]float32, in.Shape[0])
		if err := p.Loss(gold["labels"].I64, losses); err != nil {
			t.Fatal(err)
		}
		lossesOn[dev.Name()] = losses
		if err := p.Backward(nil, nil); err != nil {
			t.Fatal(err)
		}
		ops := dev.(runtime.DPOps)
		for _, name := range p.Params() {
			data, _ := p.Param(name)
			ops.Axpy(-0.1, p.Grad(name), data) // an SGD update on the device
		}
		want := map[string][]float32{}
		for _, name := range p.Params() {
			data, _ := p.Param(name)
			want[name] = dpClone(data)
		}
		return p, g, want
	}
	_, gRef, ref := run(reference.Device{})
	p, g, got := run(reference.Separate{})
	lr, ls := lossesOn[reference.Device{}.Name()], lossesOn[reference.Separate{}.Name()]
	if !numcheck.SameBits(ls, lr) || len(lr) == 0 || lr[0] <= 0 {
		t.Fatalf("per-sample losses %v on reference.Separate, %v on reference.Device", ls, lr)
	}
	orig, _ := loadModel(t, "cnn")
	for name, w := range ref {
		if !numcheck.SameBits(got[name], w) {
			t.Fatalf("parameter %q after a step differs between reference.Separate and reference.Device", name)
		}
		if !numcheck.SameBits(gRef.Values[name].Const.F32, w) {
			t.Fatalf("parameter %q: on reference.Device the initializer is not the updated parameter", name)
		}
		data, _ := p.Param(name)
		if runtime.SameMemory(data, g.Values[name].Const.F32) {
			t.Fatalf("parameter %q: reference.Separate adopted the initializer", name)
		}
		if !numcheck.SameBits(g.Values[name].Const.F32, orig.Values[name].Const.F32) {
			t.Fatalf("parameter %q: the initializer changed before SyncParams: the memory is not separate", name)
		}
	}
	if err := p.SyncParams(); err != nil {
		t.Fatal(err)
	}
	for name, w := range ref {
		if !numcheck.SameBits(g.Values[name].Const.F32, w) {
			t.Fatalf("parameter %q: after SyncParams the initializer is not the device's parameter", name)
		}
	}
	name := p.Params()[0]
	host := g.Values[name].Const.F32
	for i := range host {
		host[i] = float32(i)
	}
	if err := p.LoadParams(); err != nil {
		t.Fatal(err)
	}
	data, _ := p.Param(name)
	if !numcheck.SameBits(data, host) {
		t.Fatalf("parameter %q: LoadParams did not bring the initializer to the device", name)
	}
}
