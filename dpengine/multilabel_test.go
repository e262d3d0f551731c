package dpengine

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestMultiLabelNorms: with the multi-label loss head (Config.MultiLabel:
// each of the fixtures' ten logits a label, a sample's labels the bits of
// its label), the engine's per-sample norms in every mode, on the CPU and
// a device with memory of its own, are each sample's own gradient's (the
// norm check's oracle: a plain backward pass of the same loss a sample at
// a time); a step's clipped sum and losses are finite; label smoothing is
// refused beside it, and so are label sets with bits beyond the labels.
func TestMultiLabelNorms(t *testing.T) {
	forEachEngine(t, []string{"cnn", "resnet_eval", "vit", "crossvit", "windowconv"}, func(t *testing.T, name string, dev runtime.Device, mode Mode) {
		const n = 3
		x, _, _, _ := engineBatch(t, name, n)
		rng := rand.New(rand.NewPCG(uint64(len(name)), 3))
		y := make([]int64, n)
		for i := range y {
			y[i] = int64(rng.IntN(1 << 10))
		}
		y[0] = 0 // no label applies
		g, rp := preparedFixture(t, name, 4)
		cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
		cfg.MultiLabel = true
		checkedNorms(t, g, rp, cfg, x, y)
	})
	g, rp := preparedFixture(t, "cnn", 4)
	cfg := compareConfig(runtime.CPU{}, BK, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
	cfg.MultiLabel, cfg.LabelSmoothing = true, 0.1
	if _, err := New(g, rp, cfg); err == nil || !strings.Contains(err.Error(), "label smoothing") {
		t.Errorf("multi-label with label smoothing: %v", err)
	}
	cfg.LabelSmoothing = 0
	e, err := New(g, rp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	x, _, _, _ := engineBatch(t, "cnn", 2)
	if _, _, err := e.ClippedSum(x, []int64{1 << 10, 3}); err == nil || !strings.Contains(err.Error(), "beyond its 10 labels") {
		t.Errorf("a label set beyond the labels: %v", err)
	}
}
