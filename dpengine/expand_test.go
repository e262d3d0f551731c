package dpengine

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestExpandedOperatorsBatchOfOne: a token model written with the
// standard function operators the loader expands (Attention-23 with 3-D
// inputs and a causal mask, RMSNormalization-23, Swish-24) trains in every
// DP mode like any other graph: each parameter's per-sample norms equal
// the norms of its batch-of-1 gradients (the plain backward pass on one
// sample), with the projections as linear parameters and the
// RMSNormalization scale as an elementwise one; on the CPU, the reference
// backend with memory of its own, and the guarded CUDA emulation (where
// it can be had).
func TestExpandedOperatorsBatchOfOne(t *testing.T) {
	const B = 4
	sample := []int64{4, 8}
	build := func() *graph.Graph {
		m := newTestModel(24)
		q := m.node("MatMul", []string{"input", m.param("wq", 8, 8)}, "q")
		k := m.node("MatMul", []string{"input", m.param("wk", 8, 8)}, "k")
		v := m.node("MatMul", []string{"input", m.param("wv", 8, 8)}, "v")
		x := m.node("Attention", []string{q, k, v}, "attn", intAttr("q_num_heads", 2), intAttr("kv_num_heads", 2), intAttr("is_causal", 1))
		x = m.node("RMSNormalization", []string{x, m.param("scale", 8)}, "norm")
		x = m.node("Swish", []string{x}, "act")
		x = m.node("ReduceMean", []string{x, m.ints("axes", 1)}, "pool", intAttr("keepdims", 0))
		x = m.node("Gemm", []string{x, m.param("fc.w", 8, 3), m.param("fc.b", 3)}, "logits")
		return m.graph(t, sample, x, 3)
	}
	x := testInput(B*32, 0.3)
	y := []int64{0, 2, 1, 2}
	engine := func(mode Mode, batch int, dev runtime.Device) *Engine {
		g := build()
		rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: int64(batch)}})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]rewrite.Kind{"wq": rewrite.KindLinear, "wk": rewrite.KindLinear, "wv": rewrite.KindLinear,
			"fc.w": rewrite.KindLinear, "fc.b": rewrite.KindElementwise, "scale": rewrite.KindElementwise}
		for _, prm := range rp.Params {
			if prm.Kind != kinds[prm.Name] {
				t.Fatalf("%s is %s (%s), want %s", prm.Name, prm.Kind, prm.Reason, kinds[prm.Name])
			}
		}
		e, err := New(g, rp, Config{Device: dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1e9}, ExpectedBatch: float64(batch), PhysicalBatch: batch})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		return e
	}
	want := batchOfOneNorms(t, engine(NonDP, 1, nil), x, y)
	if len(want) != 6 {
		t.Fatalf("%d parameters trained, want 6", len(want))
	}
	devices := []runtime.Device{nil, reference.Separate{}}
	if gpu := guardedCUDA(t); gpu != nil {
		devices = append(devices, gpu)
	}
	for _, dev := range devices {
		for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
			label := string(mode)
			if dev != nil {
				label += "/" + dev.Name()
			}
			t.Run(label, func(t *testing.T) {
				checkBatchNorms(t, engine(mode, B, dev), x, y, want)
			})
		}
	}
}
