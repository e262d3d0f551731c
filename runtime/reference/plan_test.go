package reference_test

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// planTolerance bounds the error (planErr) of the reference plan's
// logits, per-sample losses and parameter gradients against the CPU
// plan's.
const planTolerance = 1e-4

// planErr is the error metric of TestPlanOnReferenceBackend: max_k
// |got_k − want_k| / max(max_k |want_k|, floor), the largest absolute
// difference scaled by the largest magnitude of the CPU's tensor. For
// parameter gradients the floor is 1e-3 × the largest CPU gradient of the
// model: some gradients are analytically zero (attention key biases, to
// which softmax is invariant) and both devices give float rounding noise
// for them, different on each, which has no scale of its own; with the
// floor such a tensor may differ by 1e-7 of the model's largest gradient
// (float32's rounding unit), the absolute allowance runtime's TestGoldens
// gives against PyTorch. A NaN on one side only, or a different length,
// is +Inf.
func planErr(got, want []float32, floor float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) != math.IsNaN(w) {
			return math.Inf(1)
		}
		if math.IsNaN(w) {
			continue
		}
		d = math.Max(d, math.Abs(g-w))
		m = math.Max(m, math.Abs(w))
	}
	if d == 0 {
		return 0
	}
	return d / math.Max(m, floor)
}

// planRun is one fixture's forward, loss and backward on one device.
type planRun struct {
	logits, losses []float32
	grads          map[string][]float32
}

// runPlan compiles g for the golden input's batch on dev and runs the
// forward pass, the loss head on the golden labels and the backward pass,
// returning copies of what they computed.
func runPlan(t *testing.T, g *graph.Graph, gold map[string]*npy.Array, dev runtime.Device, noFusion bool) planRun {
	t.Helper()
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
	var r planRun
	logits, _ := p.Output(0)
	r.logits = dpClone(logits)
	r.losses = make([]float32, in.Shape[0])
	if err := p.Loss(gold["labels"].I64, r.losses); err != nil {
		t.Fatalf("%s: loss: %v", dev.Name(), err)
	}
	if err := p.Backward(nil, nil); err != nil {
		t.Fatalf("%s: backward: %v", dev.Name(), err)
	}
	r.grads = map[string][]float32{}
	for _, name := range p.Params() {
		r.grads[name] = dpClone(p.Grad(name))
	}
	return r
}

// TestPlanOnReferenceBackend compiles every fixture model of
// testdata/models on the reference backend and on the CPU, for the batch
// of its golden input (testdata/golden), fused and unfused, and holds the
// reference plan's logits, per-sample losses (on the golden labels) and
// parameter gradients to the CPU plan's: planErr ≤ 1e-4 for every tensor
// (gradients floored at 1e-3 of the model's largest).
// The plan's nodes compute only through the device's GraphOps, so this is
// the whole forward and backward pass of every fixture computed twice,
// by independent code.
func TestPlanOnReferenceBackend(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata")
	models, err := filepath.Glob(filepath.Join(dir, "models", "*.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if len(models) == 0 {
		t.Fatal("no fixture models in testdata/models")
	}
	for _, mp := range models {
		name := strings.TrimSuffix(filepath.Base(mp), ".onnx")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := onnx.Load(mp)
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			gp := filepath.Join(dir, "golden", name+".npz")
			if _, err := os.Stat(gp); err != nil {
				t.Fatalf("fixture %s has no golden input (%v)", name, err)
			}
			gold, err := npy.ReadNPZ(gp)
			if err != nil {
				t.Fatal(err)
			}
			for _, noFusion := range []bool{false, true} {
				mode := "fused"
				if noFusion {
					mode = "unfused"
				}
				want := runPlan(t, g, gold, runtime.CPU{}, noFusion)
				got := runPlan(t, g, gold, reference.Device{}, noFusion)
				if e := planErr(got.logits, want.logits, 0); e > planTolerance {
					t.Errorf("%s: logits: error %.3g > %g", mode, e, planTolerance)
				}
				if e := planErr(got.losses, want.losses, 0); e > planTolerance {
					t.Errorf("%s: losses: error %.3g > %g", mode, e, planTolerance)
				}
				var names []string
				var largest float64
				for n, gr := range want.grads {
					names = append(names, n)
					for _, v := range gr {
						largest = math.Max(largest, math.Abs(float64(v)))
					}
				}
				sort.Strings(names)
				if len(names) == 0 {
					t.Errorf("%s: no trainable parameters", mode)
				}
				worst, worstName := 0.0, ""
				for _, n := range names {
					gr, ok := got.grads[n]
					if !ok {
						t.Errorf("%s: parameter %s has no gradient on the reference plan", mode, n)
						continue
					}
					e := planErr(gr, want.grads[n], 1e-3*largest)
					if e > planTolerance {
						t.Errorf("%s: gradient %s: error %.3g > %g", mode, n, e, planTolerance)
					}
					if e > worst {
						worst, worstName = e, n
					}
				}
				t.Logf("%s: %d gradients, worst error %.3g (%s)", mode, len(names), worst, worstName)
				if !noFusion {
					checkPyTorch(t, got, gold)
				}
			}
		})
	}
}

// checkPyTorch holds the reference plan's results to PyTorch's
// (testdata/golden, the values runtime's TestGoldens holds the CPU to),
// with TestGoldens' metric and bounds: logits and per-sample losses within
// 1e-4 of the largest golden value; every gradient within 1e-3 of its
// largest golden value, floored at 1e-4 of the model's largest golden
// gradient. The reference backend is then checked against an
// implementation that shares no code with either backend.
func checkPyTorch(t *testing.T, got planRun, gold map[string]*npy.Array) {
	t.Helper()
	if e := planErr(got.logits, gold["logits"].F32, 0); e > 1e-4 {
		t.Errorf("logits against PyTorch: error %.3g > 1e-4", e)
	}
	if e := planErr(got.losses, gold["loss"].F32, 0); e > 1e-4 {
		t.Errorf("losses against PyTorch: error %.3g > 1e-4", e)
	}
	var largest float64
	n := 0
	for k, a := range gold {
		if strings.HasPrefix(k, "grad/") {
			n++
			for _, v := range a.F32 {
				largest = math.Max(largest, math.Abs(float64(v)))
			}
		}
	}
	if n != len(got.grads) {
		t.Errorf("%d golden gradients, %d trainable parameters", n, len(got.grads))
	}
	for name, gr := range got.grads {
		want, ok := gold["grad/"+name]
		if !ok {
			t.Errorf("%s: no golden gradient", name)
			continue
		}
		if e := planErr(gr, want.F32, 1e-4*largest); e > 1e-3 {
			t.Errorf("gradient %s against PyTorch: error %.3g > 1e-3", name, e)
		}
	}
}
