package reference_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// planTolerance bounds the error (numcheck.RelErr, gradients floored at
// numcheck.GradFloor of the model's largest) of the reference plan's
// logits, per-sample losses and parameter gradients against the CPU
// plan's: some gradients are analytically zero (attention key biases, to
// which softmax is invariant) and both devices give float rounding noise
// for them, different on each, which the floor absorbs.
const planTolerance = 1e-4

// TestPlanOnReferenceBackend compiles every fixture model of
// testdata/models on the reference backend and on the CPU, for the batch
// of its golden input (testdata/golden), fused and unfused, and holds the
// reference plan's logits, per-sample losses (on the golden labels) and
// parameter gradients to the CPU plan's: numcheck.RelErr ≤ 1e-4 for every tensor
// (gradients floored at 1e-3 of the model's largest).
// The plan's nodes compute only through the device's GraphOps, so this is
// the whole forward and backward pass of every fixture computed twice,
// by independent code.
func TestPlanOnReferenceBackend(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata")
	names, err := numcheck.FixtureNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g, gold, err := numcheck.LoadFixture(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, noFusion := range []bool{false, true} {
				mode := "fused"
				if noFusion {
					mode = "unfused"
				}
				want := numcheck.RunPlan(t, g, gold, runtime.CPU{}, noFusion, nil)
				got := numcheck.RunPlan(t, g, gold, reference.Device{}, noFusion, nil)
				numcheck.ComparePlans(t, mode, got, want, planTolerance)
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
func checkPyTorch(t *testing.T, got numcheck.PlanRun, gold map[string]*npy.Array) {
	t.Helper()
	if e := numcheck.RelErr(got.Logits, gold["logits"].F32, 0); e > 1e-4 {
		t.Errorf("logits against PyTorch: error %.3g > 1e-4", e)
	}
	if e := numcheck.RelErr(got.Losses, gold["loss"].F32, 0); e > 1e-4 {
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
	if n != len(got.Grads) {
		t.Errorf("%d golden gradients, %d trainable parameters", n, len(got.Grads))
	}
	for name, gr := range got.Grads {
		want, ok := gold["grad/"+name]
		if !ok {
			t.Errorf("%s: no golden gradient", name)
			continue
		}
		if e := numcheck.RelErr(gr, want.F32, 1e-4*largest); e > 1e-3 {
			t.Errorf("gradient %s against PyTorch: error %.3g > 1e-3", name, e)
		}
	}
}
