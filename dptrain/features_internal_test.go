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
// the CPU (auto: not cached, and why; on: refused), and on a device with
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
	// 1000 examples of 512 floats: 2,048,000 bytes.
	const examples, bytes = 1000, 1000 * 512 * 4
	for _, c := range []struct {
		mode   string
		dev    runtime.Device
		maxMem int64
		cached bool
		want   string
	}{
		{FeatureCacheAuto, nil, 2*bytes + 2, true, ""},
		{FeatureCacheAuto, nil, 2*bytes - 2, false, "exceed half of --max-memory"},
		{FeatureCacheOn, nil, 2*bytes - 2, false, "--cache-features on: the 1000 examples' features"},
		{FeatureCacheAuto, nil, 0, true, ""},
		{FeatureCacheOff, nil, 0, false, "--cache-features off"},
		// CUDA's Freer: not in this package's tests; reference.Separate
		// is host memory to Freer's test, so the cache counts.
		{FeatureCacheAuto, reference.Separate{}, 2*bytes - 2, false, "exceed half of --max-memory"},
	} {
		split, rep, err := planFeatureCache(Settings{FeatureCache: c.mode, Augment: "none"}, c.dev, g, rp, opts, examples, 256, c.maxMem)
		switch {
		case c.mode == FeatureCacheOn && !c.cached:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: %v; want an error saying %q", c, err, c.want)
			}
		case err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.cached && (split == nil || rep == nil || !rep.Cached || rep.Bytes != bytes || rep.DeviceBytes != 0):
			t.Errorf("%+v: %+v; want it cached in %d bytes", c, rep, bytes)
		case !c.cached && (split != nil || rep == nil || rep.Cached || !strings.Contains(rep.Reason, c.want)):
			t.Errorf("%+v: %+v; want no cache because %q", c, rep, c.want)
		}
	}
}
