package dpengine

import (
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// memoryFixtures are the fixtures the activation estimate is held on:
// convolutional (cnn with max pools, resnet_eval, vgg, mobilenet with
// depthwise convolutions) and transformers (vit, vit17, beit with its
// relative-position tables, crossvit, packedqkv with a shared qkv
// projection).
var memoryFixtures = []string{"cnn", "resnet_eval", "vgg", "mobilenet", "vit", "vit17", "beit", "crossvit", "packedqkv", "windowconv"}

// transformerFixtures are those whose plan keeps far fewer activations
// than the graph has (attention's scores and the Add operands that no
// backward reads).
var transformerFixtures = map[string]bool{"vit": true, "vit17": true, "beit": true, "crossvit": true, "packedqkv": true}

// preparedFixture loads a fixture and plans it at batch b.
func preparedFixture(t testing.TB, name string, b int64) (*graph.Graph, *rewrite.Plan) {
	t.Helper()
	return multipliedFixture(t, name, b, 1)
}

// multipliedFixture is preparedFixture planned for views augmented views
// of each sample (rewrite.PlanOptions.Multiplicity; 1: one).
func multipliedFixture(t testing.TB, name string, b, views int64) (*graph.Graph, *rewrite.Plan) {
	t.Helper()
	return fixturePreparedWith(t, name, nil, rewrite.Options{PlanOptions: rewrite.PlanOptions{Batch: b, Multiplicity: views}})
}

// fixturePreparedWith loads a fixture, applies edit to its graph (nil:
// none) and prepares it with opts, the fixture's sample shape filled in.
func fixturePreparedWith(t testing.TB, name string, edit func(*graph.Graph), opts rewrite.Options) (*graph.Graph, *rewrite.Plan) {
	t.Helper()
	m, err := onnx.Load(filepath.Join("..", "testdata", "models", name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	opts.InputShape = []int64{3, 32, 32}
	if name == "cnn" {
		opts.InputShape = []int64{1, 28, 28}
	}
	if edit != nil {
		edit(g)
	}
	rp, err := rewrite.Prepare(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g, rp
}

// TestMeasuredActivationsMatchEngine: at the plan's batch (8), every
// mode's measured activation term is at least what the engine's own plan,
// compiled by New for that mode, holds besides the parameters
// (runtime.Plan.BatchBytes: arena, workspace, loss head, MaxPool winners),
// and within 5 % of it (1 % on most) plus the per-sample gradients the
// plan holds in hook buffers (their share of freed memory differs from
// batch to batch: packedqkv's instantiate estimate is 9 % over); the
// estimate's total uses it; and on the transformers, those per-sample
// gradients aside, it is below the count of every activation the
// estimate used before (2.0 to 2.7 times below on vit, vit17, beit and
// crossvit; 1.04 to 1.16 on packedqkv, whose kernels' workspace is a third
// of its plan at this size). The same holds with each sample fed as three
// views (augmentation multiplicity) on cnn and vit.
func TestMeasuredActivationsMatchEngine(t *testing.T) {
	const b = 8
	type fixture struct {
		name  string
		views int64
	}
	var fixtures []fixture
	for _, name := range memoryFixtures {
		fixtures = append(fixtures, fixture{name, 1})
	}
	// Augmentation multiplicity: three views a sample, a class token
	// prepended to each of them (vit).
	fixtures = append(fixtures, fixture{"cnn", 3}, fixture{"vit", 3})
	for _, fx := range fixtures {
		name := fx.name
		g, rp := multipliedFixture(t, name, b, fx.views)
		if err := MeasureActivations(g, rp, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		est := map[string]rewrite.ModeMemory{}
		for _, m := range rp.Memory {
			est[m.Mode] = m
		}
		label := name
		if fx.views > 1 {
			label = fmt.Sprintf("%s×%d", name, fx.views)
		}
		for _, mode := range Modes() {
			t.Run(fmt.Sprintf("%s/%s", label, mode), func(t *testing.T) {
				c, ok := rp.Compiled[string(mode)]
				if !ok {
					t.Fatalf("no compiled activations: %v", rp.Compiled)
				}
				e, err := New(g, rp, Config{Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: b, PhysicalBatch: b})
				if err != nil {
					t.Fatal(err)
				}
				held, arena := e.Plan().BatchBytes(), e.Plan().ArenaBytes()
				got := c.At(b)
				// Per-sample gradients in hook buffers may take freed
				// memory at this batch and less of it at the larger
				// batches the growth is measured at: up to their size
				// more.
				hooked := c.HookedPerSample * b
				if got < held || held < arena || float64(got) > 1.05*float64(held)+float64(hooked) {
					t.Errorf("estimate %d bytes, the engine's plan holds %d (arena %d, %d of per-sample gradients in hook buffers): want within [1, 1.05]× and those", got, held, arena, hooked)
				}
				if a := est[string(mode)].Activations; a != got {
					t.Errorf("rp.Memory's activations %d, compiled figure %d", a, got)
				}
				// The activations held, the kernels' workspace aside: it
				// is no activation, and its size depends on the machine's
				// BLAS (with AVX-512 and no OpenBLAS a convolution's
				// packed weight is in it: packedqkv's 160 KiB here).
				old := 4 * b * rp.ActivationsPerSample
				ws := c.ScratchAt(b)
				if transformerFixtures[name] && got-hooked-ws >= old {
					t.Errorf("estimate %d bytes (workspace %d), not below the count of every activation (%d)", got, ws, old)
				}
				t.Logf("estimate %d, engine's plan %d (arena %d), every activation %d (%.2f×)", got, held, arena, old, float64(old)/float64(got))
			})
		}
	}
}

// TestMeasuredActivationsNeverUnder: from batch 1 to 256, the fit made
// at batch 8 is never below what the plan compiled at that batch holds
// (the options measureOptions compiles with are New's:
// TestMeasuredActivationsMatchEngine), though the arena's packing, the
// rounding of its buffers and the workspace's per-worker buffers are not
// linear in the batch.
func TestMeasuredActivationsNeverUnder(t *testing.T) {
	batches := []int64{1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 31, 33, 64, 100, 256}
	if testing.Short() {
		batches = []int64{1, 3, 8, 17, 33, 100}
	}
	for _, name := range memoryFixtures {
		g, rp := preparedFixture(t, name, 8)
		if err := MeasureActivations(g, rp, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		graphs := map[int64]*graph.Graph{}
		for _, b := range batches {
			cg, err := rp.Compile(g, b)
			if err != nil {
				t.Fatal(err)
			}
			graphs[b] = cg
		}
		for _, mode := range Modes() {
			c := rp.Compiled[string(mode)]
			opts := measureOptions(Config{Mode: mode}, rp, nil)
			worst := 0.0
			for _, b := range batches {
				p, err := runtime.Compile(graphs[b], opts)
				if err != nil {
					t.Fatal(err)
				}
				if c.At(b) < p.BatchBytes() {
					t.Errorf("%s/%s at batch %d: estimate %d bytes, the plan holds %d (arena %d, workspace %d)", name, mode, b, c.At(b), p.BatchBytes(), p.ArenaBytes(), p.ScratchBytes())
				}
				worst = max(worst, float64(c.At(b))/float64(p.BatchBytes()))
			}
			t.Logf("%s/%s: %+v, at most %.2f× the compiled plan", name, mode, c, worst)
		}
	}
}

// TestMeasuredActivationsFollowDevice: on a device with memory of its own
// (reference.Separate, as a GPU) the engine's plan recomputes attention's
// probabilities (runtime.ProbabilitiesAuto) where that lowers its peak,
// and the measurement for that device counts the arena the engine
// compiles there — never more than the CPU's, smaller on vit — while
// convolutional plans do not change.
func TestMeasuredActivationsFollowDevice(t *testing.T) {
	const b = 8
	dev := reference.Separate{}
	for _, name := range []string{"cnn", "vit", "crossvit"} {
		g, rp := preparedFixture(t, name, b)
		if err := MeasureActivations(g, rp, nil, NonDP, BK); err != nil {
			t.Fatal(err)
		}
		cpu := maps.Clone(rp.Compiled)
		if err := MeasureActivations(g, rp, dev, NonDP, BK); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []Mode{NonDP, BK} {
			e, err := New(g, rp, Config{Device: dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: b, PhysicalBatch: b})
			if err != nil {
				t.Fatal(err)
			}
			c := rp.Compiled[string(mode)]
			// The workspace is the CPU kernels' (Options.Device is nil
			// when measuring): compare the rest.
			rest := c.At(b) - c.Scratch
			held := e.Plan().BatchBytes() - e.Plan().ScratchBytes()
			if rest < held || float64(rest) > 1.05*float64(held) {
				t.Errorf("%s/%s on %s: estimate %d bytes besides the workspace, the engine's plan holds %d", name, mode, dev.Name(), rest, held)
			}
			// Smaller on vit, where recomputing lowers the peak; crossvit's
			// bk peak lies elsewhere, and its plan keeps them there.
			on := c.PerSample
			cp := cpu[string(mode)].PerSample
			if on > cp || (name == "cnn" && on != cp) || (name == "vit" && on >= cp) {
				t.Errorf("%s/%s: %d bytes a sample on %s, %d on the CPU", name, mode, c.PerSample, dev.Name(), cpu[string(mode)].PerSample)
			}
		}
	}
}

// TestMeasureActivationsErrors: what cannot be measured is an error
// naming why, not a panic.
func TestMeasureActivationsErrors(t *testing.T) {
	g, rp := preparedFixture(t, "cnn", 4)
	if err := MeasureActivations(nil, rp, nil); err == nil {
		t.Error("nil graph measured")
	}
	if err := MeasureActivations(g, rp, nil, Mode("fast")); err == nil {
		t.Error("unknown mode measured")
	}
	frozen := *rp
	frozen.Params = nil
	if err := MeasureActivations(g, &frozen, nil); err == nil {
		t.Error("a plan with nothing to train measured")
	}
	bad := *rp
	bad.InputShape = []int64{3, 28, 28}
	if err := MeasureActivations(g, &bad, nil); err == nil {
		t.Error("a plan of the wrong input shape measured")
	}
}

// TestScratchEstimate holds the memory estimate's transient term, where
// it follows the engine (rewrite.EngineScratch, scratchModel), to the
// scratch the engine's norm rules really held (Engine.normScratchPeak)
// over a Step of every memory fixture in ghost, mixed and bk: never
// below it, on the CPU (a buffer per worker) and on a one-worker device
// with memory of its own (reference.Separate, chunks of samples, as a
// GPU), and at most three times it and 1 MiB more — where the paper's
// B·max_l chosen_l, which the engine never holds at once, was the term.
func TestScratchEstimate(t *testing.T) {
	const n = 8
	for _, name := range memoryFixtures {
		for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
			for _, mode := range []Mode{Ghost, Mixed, BK} {
				t.Run(fmt.Sprintf("%s/%s/%s", name, dev.Name(), mode), func(t *testing.T) {
					_, _, batch, fill := engineBatch(t, name, n)
					g, rp := preparedFixture(t, name, n)
					e, err := New(g, rp, compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := e.Step(batch, fill); err != nil {
						t.Fatal(err)
					}
					s := scratchModel(dev)
					var est int64
					for _, l := range rp.Layers {
						est = max(est, s.Floats(l, mode == Ghost || l.Decision == rewrite.Ghost, n))
					}
					peak := e.normScratchPeak
					if est < peak || est > 3*peak+1<<18 {
						t.Errorf("estimated %d floats of norm scratch (%+v), the engine held %d", est, s, peak)
					}
				})
			}
		}
	}
}
