package numcheck

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// GradFloor is the floor of ComparePlans' gradient errors, as a fraction
// of the largest gradient of the trusted plan: with it, a gradient that is
// analytically zero (rounding noise on both devices) may differ by 1e-7 of
// the model's largest gradient (float32's rounding unit), the absolute
// allowance runtime's TestGoldens gives against PyTorch.
const GradFloor = 1e-3

// FixtureNames returns the names of the fixture models in dir/models
// (dir/models/<name>.onnx), sorted; an error if there are none.
func FixtureNames(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "models", "*.onnx"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no fixture models in %s", filepath.Join(dir, "models"))
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = strings.TrimSuffix(filepath.Base(p), ".onnx")
	}
	sort.Strings(names)
	return names, nil
}

// LoadFixture reads fixture model name (dir/models/<name>.onnx) as a graph
// and its golden file (dir/golden/<name>.npz: the input, labels, and
// PyTorch's logits, losses and gradients). Each call gives a graph of its
// own, initializers included.
func LoadFixture(dir, name string) (*graph.Graph, map[string]*npy.Array, error) {
	m, err := onnx.Load(filepath.Join(dir, "models", name+".onnx"))
	if err != nil {
		return nil, nil, fmt.Errorf("fixture %s: %w", name, err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		return nil, nil, fmt.Errorf("fixture %s: %w", name, err)
	}
	gold, err := npy.ReadNPZ(filepath.Join(dir, "golden", name+".npz"))
	if err != nil {
		return nil, nil, fmt.Errorf("fixture %s has no golden input: %w", name, err)
	}
	return g, gold, nil
}

// PlanRun is what one fixture's forward, loss and backward computed on one
// device, copied to the host.
type PlanRun struct {
	// Logits is the graph's first output; Losses the per-sample losses on
	// the golden labels.
	Logits, Losses []float32
	// Grads holds each trainable parameter's gradient, by name.
	Grads map[string][]float32
}

// RunPlan compiles g for the golden input's batch on dev (fused, or not
// when noFusion) and runs the forward pass, the loss head on the golden
// labels and the backward pass. read copies a gradient (a view of dev's
// memory) to the host: nil where dev's memory is host memory (the CPU,
// the reference backend), a copy through the driver where it is not.
// Failures end the test.
func RunPlan(t testing.TB, g *graph.Graph, gold map[string]*npy.Array, dev runtime.Device, noFusion bool, read func([]float32) []float32) PlanRun {
	t.Helper()
	if read == nil {
		read = func(s []float32) []float32 { return append([]float32(nil), s...) }
	}
	in := gold["input"]
	p, err := runtime.CompileForBatch(g, in.Shape[0], nil, &runtime.Options{Device: dev, NoFusion: noFusion})
	if err != nil {
		t.Fatalf("%s: compile: %v", dev.Name(), err)
	}
	if p.Device() != dev {
		t.Fatalf("the plan compiled for %s runs on %s", dev.Name(), p.Device().Name())
	}
	if err := p.SetInput(0, in.F32); err != nil {
		t.Fatalf("%s: %v", dev.Name(), err)
	}
	if err := p.Forward(); err != nil {
		t.Fatalf("%s: forward: %v", dev.Name(), err)
	}
	var r PlanRun
	_, shape := p.Output(0)
	n := 1
	for _, d := range shape {
		n *= d
	}
	r.Logits = make([]float32, n)
	if err := p.ReadOutput(0, r.Logits); err != nil {
		t.Fatalf("%s: %v", dev.Name(), err)
	}
	r.Losses = make([]float32, in.Shape[0])
	if err := p.Loss(gold["labels"].I64, r.Losses); err != nil {
		t.Fatalf("%s: loss: %v", dev.Name(), err)
	}
	if err := p.Backward(nil, nil); err != nil {
		t.Fatalf("%s: backward: %v", dev.Name(), err)
	}
	r.Grads = map[string][]float32{}
	for _, name := range p.Params() {
		r.Grads[name] = read(p.Grad(name))
	}
	return r
}

// ComparePlans holds got to want (the trusted plan) with RelErr: logits
// and per-sample losses unfloored, every gradient floored at GradFloor of
// want's largest gradient; each error above tol, a parameter of want's
// without a gradient in got, and a plan without parameters fail t (mode
// names the run in messages). It logs the worst gradient error.
func ComparePlans(t testing.TB, mode string, got, want PlanRun, tol float64) {
	t.Helper()
	if e := RelErr(got.Logits, want.Logits, 0); e > tol {
		t.Errorf("%s: logits: error %.3g > %g", mode, e, tol)
	}
	if e := RelErr(got.Losses, want.Losses, 0); e > tol {
		t.Errorf("%s: losses: error %.3g > %g", mode, e, tol)
	}
	names := make([]string, 0, len(want.Grads))
	for n := range want.Grads {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Errorf("%s: no trainable parameters", mode)
	}
	floor := GradFloor * Largest(want.Grads)
	worst, worstName := 0.0, ""
	for _, n := range names {
		gr, ok := got.Grads[n]
		if !ok {
			t.Errorf("%s: parameter %s has no gradient", mode, n)
			continue
		}
		e := RelErr(gr, want.Grads[n], floor)
		if e > tol {
			t.Errorf("%s: gradient %s: error %.3g > %g", mode, n, e, tol)
		}
		if e > worst {
			worst, worstName = e, n
		}
	}
	t.Logf("%s: %d gradients, worst error %.3g (%s)", mode, len(names), worst, worstName)
}
