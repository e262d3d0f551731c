package dptrain

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestFeatureCacheBudget: the cache is held to half of --max-memory on
// the CPU (auto: not cached, and why; on: refused), the frozen part's
// passes are halved until their plan fits --max-memory, and on a device with
// memory of its own the frozen part's pass, which runs there beside the
// engine, is counted instead of the cache (host memory).
func TestFeatureCacheBudget(t *testing.T) {
	g := FixtureGraph(t, "cnn")
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
		split, rep, err := planFeatureCache(Settings{FeatureCache: c.mode, Augment: "none"}, c.dev, g, rp, opts, examples, 64, c.maxMem, "")
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

// TestFeatureCacheOnDisk: a cache over the memory budget goes to disk, in
// Config.FeatureCacheDir (a file removed as soon as it is open: the folder
// is empty during the run and after it), and trains exactly as the cache
// in memory does: the same weights bit for bit. A folder whose free space
// cannot be known is no place for it: auto trains the whole model and
// says why.
func TestFeatureCacheOnDisk(t *testing.T) {
	ds := FMNISTSlice(t, []int64{1, 28, 28})
	run := func(dir string, budget int64) (*Report, *graph.Graph) {
		saved := availableMemory
		defer func() { availableMemory = saved }()
		if budget > 0 {
			availableMemory = func() (int64, string, bool) { return budget, "test", true }
		}
		g := FixtureGraph(t, "cnn")
		seed := uint64(3)
		entries := -1
		rep, err := Run(Config{
			Settings: Settings{Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 2, BatchSize: 32, Accountant: "rdp", Sampling: "poisson",
				Mode: "bk", Clip: 1, ClipFn: "abadi", Optimizer: "adam", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed},
			Graph: g, Train: ds, Test: ds, EvalBatch: 32, FeatureCacheDir: dir,
			Rewrite: rewrite.Options{PlanOptions: rewrite.PlanOptions{Train: regexp.MustCompile(`^classifier\.`)}},
			Events: func(e Event) {
				if e.Kind == StepDone && entries < 0 && dir != "" {
					es, _ := os.ReadDir(dir)
					entries = len(es)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if entries > 0 {
			t.Errorf("%d files in %s during the run", entries, dir)
		}
		return rep, g
	}
	dir := t.TempDir()
	// 192 examples of 512 floats: 393,216 bytes, over half of 400,000.
	disk, gd := run(dir, 400_000)
	mem, gm := run("", 0)
	if fc := disk.FeatureCache; fc == nil || !fc.Cached || fc.Disk != dir || fc.Bytes != 192*512*4 {
		t.Fatalf("the run reports %+v; want the cache on disk in %s", fc, dir)
	}
	if fc := mem.FeatureCache; fc == nil || !fc.Cached || fc.Disk != "" {
		t.Fatalf("the run in memory reports %+v", fc)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("%d files left in %s", len(es), dir)
	}
	for _, v := range gm.Initializers {
		if v.Const != nil && v.Const.F32 != nil && !numcheck.SameBits(v.Const.F32, gd.Values[v.Name].Const.F32) {
			t.Errorf("%s differs between the cache on disk and in memory", v.Name)
		}
	}
	if disk.Epochs[1].Test.Accuracy != mem.Epochs[1].Test.Accuracy {
		t.Errorf("test accuracy %v on disk, %v in memory", disk.Epochs[1].Test.Accuracy, mem.Epochs[1].Test.Accuracy)
	}
	nowhere, _ := run(filepath.Join(dir, "missing"), 400_000)
	if fc := nowhere.FeatureCache; fc == nil || fc.Cached || !strings.Contains(fc.Reason, "free space of") {
		t.Errorf("a cache for a missing folder: %+v", fc)
	}
}
