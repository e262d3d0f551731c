package dptrain

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestFeatureCacheBudget: the cache is held to half of --max-memory on
// the CPU (auto: not cached, and why; on: refused), the frozen part's
// passes are halved until their plan fits --max-memory, and on a device with
// memory of its own the frozen part's pass, which stays allocated there,
// is counted instead of the cache (host memory).
func TestFeatureCacheBudget(t *testing.T) {
	m, err := onnx.Load("../testdata/models/cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	opts := rewrite.PlanOptions{InputShape: []int64{1, 28, 28}, Batch: 8, Train: regexp.MustCompile(`^classifier\.`)}
	rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	// 100 examples of 512 floats: 204,800 bytes.
	const examples, bytes = 100, 100 * 512 * 4
	for _, c := range []struct {
		mode   string
		dev    runtime.Device
		maxMem int64
		cached bool
		want   string
	}{
		{FeatureCacheAuto, nil, 2*bytes + 2, true, ""},
		{FeatureCacheAuto, nil, 2*bytes - 2, false, "exceed half of --max-memory"},
		{FeatureCacheOn, nil, 2*bytes - 2, false, "--cache-features on: the 100 examples' features"},
		{FeatureCacheAuto, nil, 0, true, ""},
		{FeatureCacheOff, nil, 0, false, "--cache-features off"},
		// CUDA's Freer: not in this package's tests; reference.Separate
		// is host memory to Freer's test, so the cache counts.
		{FeatureCacheAuto, reference.Separate{}, 2*bytes - 2, false, "exceed half of --max-memory"},
	} {
		split, rep, err := planFeatureCache(Settings{FeatureCache: c.mode, Augment: "none"}, c.dev, g, rp, opts, examples, 64, c.maxMem)
		switch {
		case c.mode == FeatureCacheOn && !c.cached:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: %v; want an error saying %q", c, err, c.want)
			}
		case err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.cached && (split == nil || rep == nil || !rep.Cached || rep.Bytes != bytes || rep.DeviceBytes != 0):
			t.Errorf("%+v: %+v; want it cached in %d bytes", c, rep, bytes)
		case c.cached && c.maxMem == 0 && rep.PassBatch != 64:
			t.Errorf("%+v: passes of %d examples, want 64", c, rep.PassBatch)
		case c.cached && c.maxMem > 0 && !(rep.PassBatch >= 1 && rep.PassBatch < 64):
			// The CNN's frozen part at 64 examples takes more than the
			// 400 kB: the pass is halved until it fits.
			t.Errorf("%+v: passes of %d examples, want fewer than 64", c, rep.PassBatch)
		case !c.cached && (split != nil || rep == nil || rep.Cached || !strings.Contains(rep.Reason, c.want)):
			t.Errorf("%+v: %+v; want no cache because %q", c, rep, c.want)
		}
	}
}
