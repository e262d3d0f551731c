package dptrain

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestNormCheckDrawsLoRA: a fresh LoRA run's B factors are zero, and so
// is every A factor's per-sample gradient; the norm check runs with the B
// factors drawn (withDrawnLoRA), so that the engine's norms of A are
// checked on samples whose A gradients are not zero, and puts the zeros
// back — on the engine's device (memory of its own here) and in the graph.
func TestNormCheckDrawsLoRA(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "testdata", "models", "cnn.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: []int64{1, 28, 28}, Batch: n},
		LoRA: rewrite.LoRAOptions{Rank: 2}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := dpengine.New(g, rp, dpengine.Config{Device: reference.Separate{}, Mode: dpengine.BK, Clipping: dpengine.Clipping{Fn: dpengine.Abadi, R: 1},
		NoiseMultiplier: 1, ExpectedBatch: n, PhysicalBatch: n, Source: dpengine.NewSeededSource(1), Optimizer: &dpengine.SGD{LR: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, n*28*28)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := []int64{0, 1, 2}
	bZero := func() bool {
		if err := e.SyncParams(); err != nil {
			t.Fatal(err)
		}
		host := e.HostParams()
		zero := true
		for k, name := range e.ParamNames() {
			if strings.Contains(name, ".lora_B") {
				for _, v := range host[k] {
					zero = zero && v == 0
				}
			}
		}
		return zero
	}
	aNorms := func() (zero, nonzero int) {
		if _, _, err := e.ClippedSum(x, y); err != nil {
			t.Fatal(err)
		}
		for name, norms := range e.ParamNorms() {
			if strings.Contains(name, ".lora_A") {
				for _, v := range norms {
					if v == 0 {
						zero++
					} else {
						nonzero++
					}
				}
			}
		}
		return
	}
	if !bZero() {
		t.Fatal("a fresh adapter's B is not zero")
	}
	if z, nz := aNorms(); nz != 0 || z == 0 {
		t.Fatalf("at B = 0: %d A norms zero, %d not", z, nz)
	}
	called := false
	err = withDrawnLoRA(e, rp.Adapters, func() error {
		called = true
		if bZero() {
			t.Error("the check runs with B = 0")
		}
		if z, nz := aNorms(); z != 0 || nz == 0 {
			t.Errorf("in the check: %d A norms zero, %d not", z, nz)
		}
		for _, ad := range rp.Adapters {
			if c := g.Values[ad.B].Const; !strings.Contains(ad.B, ".lora_B") || c.F32[0] == 0 {
				t.Errorf("%s: the graph's B is not the drawn one", ad.B)
			}
		}
		return nil
	})
	if err != nil || !called {
		t.Fatalf("withDrawnLoRA: %v (called %v)", err, called)
	}
	if !bZero() {
		t.Error("B not put back to zero after the check")
	}
	for _, ad := range rp.Adapters {
		for _, v := range g.Values[ad.B].Const.F32 {
			if v != 0 {
				t.Fatalf("%s: the graph's B not put back", ad.B)
			}
		}
	}
}
