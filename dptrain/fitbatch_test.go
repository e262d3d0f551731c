package dptrain_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// TestFitBatch: with the compiled plan's activations measured, FitBatch
// picks the largest batch whose estimate fits the cap less its headroom
// (the next one's does not) — on the transformers over twice the batch the
// count of every activation allowed (on the small convolutional fixtures
// the CPU kernels' workspace, which that count left out, is as large as
// the activations); the engine built at that batch holds no more
// besides its parameters than the estimate's activation term; and a cap
// below one sample is an error naming it.
func TestFitBatch(t *testing.T) {
	for _, c := range []struct {
		model  string
		sample []int64
		mode   dpengine.Mode
		cap    int64
		larger bool // than counting every activation
	}{
		{"vit", []int64{3, 32, 32}, dpengine.BK, 24 << 20, true},
		{"vit", []int64{3, 32, 32}, dpengine.Ghost, 24 << 20, true},
		{"crossvit", []int64{3, 32, 32}, dpengine.NonDP, 16 << 20, true},
		{"cnn", []int64{1, 28, 28}, dpengine.Instantiate, 8 << 20, false},
		{"resnet_eval", []int64{3, 32, 32}, dpengine.Mixed, 12 << 20, false},
	} {
		t.Run(c.model+"/"+string(c.mode), func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("..", "testdata", "models", c.model+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: c.sample, Batch: 32}})
			if err != nil {
				t.Fatal(err)
			}
			const limit = 4096
			countAll, err := dptrain.FitBatch(rp, string(c.mode), c.cap, limit)
			if err != nil {
				t.Fatal(err)
			}
			if err := dpengine.MeasureActivations(g, rp, nil, c.mode); err != nil {
				t.Fatal(err)
			}
			P, err := dptrain.FitBatch(rp, string(c.mode), c.cap, limit)
			if err != nil {
				t.Fatal(err)
			}
			est := func(b int) rewrite.ModeMemory {
				for _, m := range rp.MemoryAt(int64(b)) {
					if m.Mode == string(c.mode) {
						return m
					}
				}
				t.Fatalf("no estimate for mode %s", c.mode)
				return rewrite.ModeMemory{}
			}
			usable := dptrain.Usable(c.cap)
			if P >= limit || est(P).Total > usable || est(P+1).Total <= usable {
				t.Errorf("batch %d: estimate %d, the next %d; usable %d of %d", P, est(P).Total, est(P+1).Total, usable, c.cap)
			}
			if c.larger && P <= 2*countAll {
				t.Errorf("batch %d with the compiled plan's activations, %d counting every activation: want over twice as large", P, countAll)
			}
			e, err := dpengine.New(g, rp, dpengine.Config{Mode: c.mode, Clipping: dpengine.Clipping{Fn: dpengine.Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: float64(P), PhysicalBatch: P})
			if err != nil {
				t.Fatal(err)
			}
			if held := e.Plan().BatchBytes(); est(P).Activations < held {
				t.Errorf("batch %d: estimated activations %d, the engine's plan holds %d", P, est(P).Activations, held)
			}
			t.Logf("batch %d (every activation counted: %d), estimate %d of usable %d", P, countAll, est(P).Total, usable)
			if _, err := dptrain.FitBatch(rp, string(c.mode), est(1).Total, limit); err == nil || !strings.Contains(err.Error(), "even a physical batch of 1") {
				t.Errorf("a cap the headroom leaves too small for one sample: %v", err)
			}
		})
	}
}
