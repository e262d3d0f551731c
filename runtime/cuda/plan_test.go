//go:build linux && (amd64 || arm64)

package cuda

import (
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// planTolerance bounds planErr of the CUDA plan's logits, per-sample
// losses and gradients against the reference backend's: both sum in
// float64 and round once, but in different orders and with CUDA's math
// library's activations, GEMMs that sum in float32 (cuBLAS, the CPU's
// SGEMM on the emulation), and ReduceSum's float32 sums: the bound of
// runtime/reference's own test against the CPU.
const planTolerance = 1e-4

// planErr is runtime/reference's metric: max_k |got_k − want_k| over
// max(max_k |want_k|, floor); a NaN on one side only, or another length,
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

type planRun struct {
	logits, losses []float32
	grads          map[string][]float32
}

// readBack copies s to the host: through the driver when it is d's
// memory (on a GPU the host cannot read it in place), else as it is.
func readBack(d runtime.Device, s []float32) []float32 {
	out := make([]float32, len(s))
	if cd, ok := d.(*Device); ok && len(s) > 0 {
		p := DevicePtr(uintptr(unsafe.Pointer(&s[0])))
		cd.mu.Lock()
		defer cd.mu.Unlock()
		if cd.isDevice(p, 4*len(s)) {
			if err := cd.drv.CopyDtoH(unsafe.Pointer(&out[0]), p, 4*len(s)); err != nil {
				panic(err)
			}
			return out
		}
	}
	copy(out, s)
	return out
}

func runPlan(t *testing.T, g *graph.Graph, gold map[string]*npy.Array, dev runtime.Device, noFusion bool) planRun {
	t.Helper()
	in := gold["input"]
	p, err := runtime.CompileForBatch(g, in.Shape[0], nil, &runtime.Options{Device: dev, NoFusion: noFusion})
	if err != nil {
		t.Fatalf("%s: compile: %v", dev.Name(), err)
	}
	if err := p.SetInput(0, in.F32); err != nil {
		t.Fatal(err)
	}
	if err := p.Forward(); err != nil {
		t.Fatalf("%s: forward: %v", dev.Name(), err)
	}
	var r planRun
	_, shape := p.Output(0)
	r.logits = make([]float32, numel(shape))
	if err := p.ReadOutput(0, r.logits); err != nil {
		t.Fatal(err)
	}
	r.losses = make([]float32, in.Shape[0])
	if err := p.Loss(gold["labels"].I64, r.losses); err != nil {
		t.Fatalf("%s: loss: %v", dev.Name(), err)
	}
	if err := p.Backward(nil, nil); err != nil {
		t.Fatalf("%s: backward: %v", dev.Name(), err)
	}
	r.grads = map[string][]float32{}
	for _, name := range p.Params() {
		r.grads[name] = readBack(dev, p.Grad(name))
	}
	return r
}

// TestPlanOnCUDA compiles fixture models of testdata/models on the
// emulated CUDA Device and on the reference backend, fused and unfused,
// and holds the CUDA plan's logits, per-sample losses and parameter
// gradients to the reference's with runtime/reference's metric and bound
// (gradients floored at 1e-3 of the model's largest). The fixtures cover
// every NNOps and ReduceOps operation the models use (convolutions,
// poolings, BatchNormalization, LayerNormalization, softmax, the loss
// head). -short runs cnn and vit only.
func TestPlanOnCUDA(t *testing.T) {
	var dev runtime.Device = emuDevice(t)
	dir := filepath.Join("..", "..", "testdata")
	models, err := filepath.Glob(filepath.Join(dir, "models", "*.onnx"))
	if err != nil || len(models) == 0 {
		t.Fatalf("no fixture models (%v)", err)
	}
	for _, mp := range models {
		name := strings.TrimSuffix(filepath.Base(mp), ".onnx")
		if testing.Short() && name != "cnn" && name != "vit" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			m, err := onnx.Load(mp)
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			gold, err := npy.ReadNPZ(filepath.Join(dir, "golden", name+".npz"))
			if err != nil {
				t.Fatal(err)
			}
			for _, noFusion := range []bool{false, true} {
				mode := map[bool]string{false: "fused", true: "unfused"}[noFusion]
				want := runPlan(t, g, gold, reference.Device{}, noFusion)
				got := runPlan(t, g, gold, dev, noFusion)
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
				worst, worstName := 0.0, ""
				for _, n := range names {
					e := planErr(got.grads[n], want.grads[n], 1e-3*largest)
					if e > planTolerance {
						t.Errorf("%s: gradient %s: error %.3g > %g", mode, n, e, planTolerance)
					}
					if e > worst {
						worst, worstName = e, n
					}
				}
				t.Logf("%s: %d gradients, worst error %.3g (%s)", mode, len(names), worst, worstName)
			}
		})
	}
}
