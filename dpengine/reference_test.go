package dpengine

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// refTolerance bounds the error (numcheck.RelErr) of the engine on the
// reference backend, or on another device, against the engine on the CPU.
// Quantities that are analytically zero on some parameters (attention key
// biases, to which softmax is invariant) get rounding noise for gradients
// and norms on both devices, different noise on each, which per-layer
// automatic clipping multiplies by R/(√K·γ): compareEngines floors those
// comparisons at 1e-3 of the model's largest value, so that such a tensor
// may differ by 1e-7 of it (float32's rounding unit), the absolute
// allowance runtime's TestGoldens gives against PyTorch.
const refTolerance = 1e-4

// engineBatch returns the first n samples of fixture name's golden data,
// their indices as a batch, and the Fill that copies them into a physical
// batch.
func engineBatch(t testing.TB, name string, n int) (x []float32, y []int64, batch []int, fill Fill) {
	t.Helper()
	gd := loadGolden(t, name)
	sl := len(gd.x) / len(gd.y)
	x, y = gd.x[:n*sl], gd.y[:n]
	batch = make([]int, n)
	for i := range batch {
		batch[i] = i
	}
	fill = func(idx []int, xs []float32, ys []int64) error {
		for k, i := range idx {
			copy(xs[k*sl:(k+1)*sl], x[i*sl:(i+1)*sl])
			ys[k] = y[i]
		}
		return nil
	}
	return x, y, batch, fill
}

// compareConfig is the Config of the device comparisons on dev: mode,
// clip (per layer or not), σ = 1 with a seeded noise source (every device
// draws the same noise bits), a batch of n, and SGD with momentum and
// weight decay (opt "sgd") or AdamW (otherwise) with ε = 1e-3 (see
// TestEngineOnReferenceBackend).
func compareConfig(dev runtime.Device, mode Mode, clip Clipping, perLayer bool, opt string, n int) Config {
	adamW := NewAdam(1e-2, 0.01, true)
	adamW.Eps = 1e-3
	var o Optimizer = adamW
	if opt == "sgd" {
		o = &SGD{LR: 1e-2, Momentum: 0.9, WeightDecay: 0.01}
	}
	return Config{Device: dev, Mode: mode, Clipping: clip, PerLayer: perLayer, NoiseMultiplier: 1,
		ExpectedBatch: float64(n), PhysicalBatch: n, Source: NewSeededSource(5), Optimizer: o}
}

// compareEngines holds engine got to engine want (the CPU's), built from
// the same Config but the device, with numcheck.RelErr ≤ refTolerance:
// the per-sample total norms and each parameter's per-sample norms
// (ParamNorms; floored at 1e-3 of the largest) and clipped sums (floored
// at 1e-3 of the largest sum) of ClippedSum(x, y); then, after a Step of
// both on batch, the private gradients (floored at 1e-3 of the largest),
// the updated parameters, and the updates Δθ (scaled by the largest |Δθ|
// of the model). label starts every message; the worst error of each kind
// is logged.
func compareEngines(t *testing.T, label string, want, got *Engine, x []float32, y []int64, batch []int, fill Fill) {
	t.Helper()
	wantSum, wantNorms, err := want.ClippedSum(x, y)
	if err != nil {
		t.Fatal(err)
	}
	gotSum, gotNorms, err := got.ClippedSum(x, y)
	if err != nil {
		t.Fatal(err)
	}
	// worst is the largest error of each comparison: norms, clipped sums,
	// private gradients, parameters, updates.
	var worst [5]float64
	check := func(kind int, what string, e float64) {
		worst[kind] = math.Max(worst[kind], e)
		if e > refTolerance {
			t.Errorf("%s: %s: error %.3g > %g", label, what, e, refTolerance)
		}
	}
	check(0, "per-sample norms", numcheck.RelErr(gotNorms, wantNorms, 0))
	wantPN, gotPN := want.ParamNorms(), got.ParamNorms()
	pnFloor, sumFloor := 1e-3*numcheck.Largest(wantPN), 1e-3*numcheck.Largest(wantSum)
	for _, p := range want.ParamNames() {
		check(0, "per-sample norms of "+p, numcheck.RelErr(gotPN[p], wantPN[p], pnFloor))
		check(1, "clipped sum of "+p, numcheck.RelErr(gotSum[p], wantSum[p], sumFloor))
	}

	before := map[string][]float32{}
	for k, p := range want.ParamNames() {
		before[p] = append([]float32(nil), want.Params()[k]...)
	}
	for _, e := range []*Engine{want, got} {
		if _, err := e.Step(batch, fill); err != nil {
			t.Fatal(err)
		}
	}
	wantGrad, gotGrad := map[string][]float32{}, map[string][]float32{}
	for _, p := range want.ParamNames() {
		wantGrad[p], gotGrad[p] = want.Gradient(p), got.Gradient(p)
	}
	gradFloor := 1e-3 * numcheck.Largest(wantGrad)
	if gradFloor == 0 {
		t.Errorf("%s: the step's private gradient is zero", label)
	}
	wantP, gotP := want.Params(), got.Params()
	wantDelta, gotDelta := map[string][]float32{}, map[string][]float32{}
	for k, p := range want.ParamNames() {
		check(2, "private gradient of "+p, numcheck.RelErr(gotGrad[p], wantGrad[p], gradFloor))
		check(3, "updated "+p, numcheck.RelErr(gotP[k], wantP[k], 0))
		wantDelta[p], gotDelta[p] = make([]float32, len(before[p])), make([]float32, len(before[p]))
		for i, b := range before[p] {
			wantDelta[p][i], gotDelta[p][i] = wantP[k][i]-b, gotP[k][i]-b
		}
	}
	deltaScale := numcheck.Largest(wantDelta)
	if deltaScale == 0 {
		t.Errorf("%s: the step did not move the parameters", label)
	}
	for _, p := range want.ParamNames() {
		check(4, "update of "+p, numcheck.RelErr(gotDelta[p], wantDelta[p], deltaScale))
	}
	t.Logf("%s: worst errors: norms %.3g, clipped sums %.3g, private gradients %.3g, parameters %.3g, updates %.3g", label, worst[0], worst[1], worst[2], worst[3], worst[4])
}

// TestEngineOnReferenceBackend runs the engine, unchanged, with
// Config.Device = reference.Device{} and with the CPU on every fixture
// of engineFixtures, in every DP mode (instantiate, ghost, mixed, bk, and
// per-layer clipping in the single-pass modes), and holds the reference
// engine to the CPU engine (compareEngines, numcheck.RelErr ≤ 1e-4):
//
//   - the noise-free clipped sum Σ_i C_i g_i of every parameter (ClippedSum,
//     clipping that binds), floored at 1e-3 of the largest sum of the
//     model;
//   - the per-sample total gradient norms, and every parameter's per-sample
//     norms (ParamNorms, floored at 1e-3 of the largest);
//   - after a Step with σ = 1 and a seeded noise source (both devices draw
//     the same noise bits): the private gradient (noisy, divided by the
//     expected batch size; floored at 1e-3 of the largest), the updated
//     parameters, and the updates Δθ (scaled by the largest |Δθ| of the
//     model).
//
// Each mode runs with SGD (momentum, weight decay) on half of the fixtures
// and AdamW on the other half, alternating, so that every mode meets both
// optimizers and every fixture both, at half the cost of all pairs (the
// optimizer does not enter the clipped sum). AdamW's ε is 1e-3, not
// PyTorch's 1e-8: its first update lr·g/(|g| + ε) is ill-conditioned where
// the noisy gradient g happens to come within ε of 0 (with ε = 1e-8, a
// gradient of 2e-7 on cnn moved its update by 1.5e-4 between devices that
// agreed on g to 3e-10), and the test is of the devices, not of that.
func TestEngineOnReferenceBackend(t *testing.T) {
	type mode struct {
		mode     Mode
		perLayer bool
	}
	modes := []mode{{Instantiate, false}, {Ghost, false}, {Mixed, false}, {BK, false}, {Instantiate, true}, {BK, true}}
	for fi, name := range engineFixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const n = 8
			x, y, batch, fill := engineBatch(t, name, n)
			for mi, m := range modes {
				opt := [2]string{"sgd", "adamw"}[(fi+mi)%2]
				label := fmt.Sprintf("%s/%s", m.mode, opt)
				clip := Clipping{Fn: Abadi, R: 0.5}
				if m.perLayer {
					label += "/perlayer"
					// γ = 0.1 > R/√K: the factor R/(√K·γ) by which
					// automatic clipping multiplies a gradient that is
					// rounding noise (see refTolerance) stays below 1 on
					// the attention models.
					clip = Clipping{Fn: Automatic, R: 0.5, Gamma: 0.1}
				}
				cpu := buildEngine(t, name, compareConfig(runtime.CPU{}, m.mode, clip, m.perLayer, opt, n))
				ref := buildEngine(t, name, compareConfig(reference.Device{}, m.mode, clip, m.perLayer, opt, n))
				if _, ok := ref.Plan().Device().(reference.Device); !ok {
					t.Fatalf("%s: the engine's plan runs on %s, not the reference backend", label, ref.Plan().Device().Name())
				}
				compareEngines(t, label, cpu, ref, x, y, batch, fill)
			}
		})
	}
}

// batchDevice is the reference backend with memory of its own
// (reference.Separate, where the engine batches its per-sample work)
// counting its calls of the batched
// operations: AddDots and AddSumSqProducts (batched ghost norms),
// Im2ColBatch (batched convolutions), DepthwiseGradBatch (batched
// depthwise convolutions) and GemmStrided of more than one product (the
// batched Grams and gradients).
type batchDevice struct {
	reference.Separate
	dots, unfolds, depthwise, strided *atomic.Int64
}

func (d batchDevice) DepthwiseGradBatch(s *runtime.ConvShape, x, dy []float32, i0, n int, dw, ws []float32) {
	d.depthwise.Add(1)
	d.Separate.DepthwiseGradBatch(s, x, dy, i0, n, dw, ws)
}

func (d batchDevice) AddDots(alpha float64, a, b []float32, dst []float64) {
	d.dots.Add(1)
	d.Separate.AddDots(alpha, a, b, dst)
}

func (d batchDevice) AddSumSqProducts(alpha float64, a, b []float32, dst []float64) {
	d.dots.Add(1)
	d.Separate.AddSumSqProducts(alpha, a, b, dst)
}

func (d batchDevice) Im2ColBatch(s *runtime.ConvShape, x []float32, i0, n, g int, col, plane []float32) {
	d.unfolds.Add(1)
	d.Separate.Im2ColBatch(s, x, i0, n, g, col, plane)
}

func (d batchDevice) GemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	if batch > 1 {
		d.strided.Add(1)
	}
	d.Separate.GemmStrided(transA, transB, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC, batch)
}

// TestBatchedRules holds the engine's batched per-sample rules on a
// one-worker device with memory of its own (reference.Separate) — Gemm and MatMul weights (matrixBatched) and
// convolutions (convBatched, and depthwiseBatched whatever the scratch:
// a chunk is at least one sample) — to the CPU's per-sample loops
// (compareEngines), in ghost and instantiate mode: on the attention
// fixtures with a sample's rows read in place where they lie at one
// stride and with every operand gathered first, on the convolutional ones
// (groups, strides, padding); with the default scratch (one chunk), a
// scratch of a few samples (several chunks, or the per-sample loop where
// one sample does not fit) and a scratch of none (the per-sample loop
// everywhere but the rank-one ghost norms, which need none), checking
// that the device was asked for the batched operations where they run.
// The subtests run in order: a run's scratch-0 count of batched products
// is the baseline of its later ones.
func TestBatchedRules(t *testing.T) {
	defer func(s int) { batchedScratch = s }(batchedScratch)
	defer func() { sampleRowsOff = false }()
	type run struct {
		name   string
		mode   Mode
		conv   bool
		gather bool // every Gemm/MatMul operand gathered (sampleRowsOff)
	}
	var runs []run
	for _, name := range []string{"vit", "packedqkv", "crossvit", "beit"} {
		for _, mode := range []Mode{Ghost, Instantiate} {
			runs = append(runs, run{name, mode, false, false}, run{name, mode, false, true})
		}
	}
	for _, name := range []string{"cnn", "resnet_eval", "mobilenet", "vgg"} {
		runs = append(runs, run{name, Ghost, true, false}, run{name, Instantiate, true, false})
	}
	// The graph's own batched products (attention) count too: the
	// batched rules show as more of them than with no scratch, which runs
	// first.
	base := map[string]int64{}
	for _, scratch := range []int{0, batchedScratch, 1 << 15} {
		batchedScratch = scratch
		for _, r := range runs {
			label := fmt.Sprintf("%s/%s/scratch %d", r.name, r.mode, scratch)
			if r.gather {
				label += "/gathered"
			}
			sampleRowsOff = r.gather
			t.Run(label, func(t *testing.T) {
				const n = 6
				x, y, batch, fill := engineBatch(t, r.name, n)
				clip := Clipping{Fn: Abadi, R: 0.5}
				var dots, unfolds, depthwise, strided atomic.Int64
				cpu := buildEngine(t, r.name, compareConfig(runtime.CPU{}, r.mode, clip, false, "sgd", n))
				one := buildEngine(t, r.name, compareConfig(batchDevice{reference.Separate{}, &dots, &unfolds, &depthwise, &strided}, r.mode, clip, false, "sgd", n))
				compareEngines(t, label, cpu, one, x, y, batch, fill)
				key := fmt.Sprintf("%s/%s/%v", r.name, r.mode, r.gather)
				switch {
				case r.conv && scratch == 0 && (unfolds.Load() != 0 || one.convChunks != 0):
					t.Errorf("%s: the batched convolutions ran without scratch", label)
				case r.conv && scratch > 0 && one.convChunks == 0:
					t.Errorf("%s: the batched convolutions did not run", label)
				case !r.conv && scratch == 0:
					base[key] = strided.Load()
				case !r.conv && strided.Load() <= base[key]:
					t.Errorf("%s: %d batched products, as many as with no scratch: the batched rules did not run", label, strided.Load())
				}
				if scratch == 1<<24 && !r.gather && one.sampleLoops != 0 {
					t.Errorf("%s: %d per-sample loops on a device that batches its per-sample work", label, one.sampleLoops)
				}
				if r.name == "mobilenet" && depthwise.Load() == 0 {
					t.Errorf("%s: the batched depthwise gradients did not run", label)
				}
				if !r.conv && r.mode == Ghost && scratch > 0 && dots.Load() == 0 {
					t.Errorf("%s: no batched ghost norm", label)
				}
			})
		}
	}
}

// TestNoSampleLoops: on a one-worker device with memory of its own
// (reference.Separate, as a GPU) every fixture's DP step in every DP mode
// runs without a per-sample loop (Engine.sampleLoops: each would be a
// chain of small launches per sample on a GPU) — linear weights, direct or
// through a path (packedqkv's slices of a packed projection), depthwise
// convolutions, biases and affines, parameters reaching an Add through a
// layout-only path (BEiT's relative-position table and concatenated q/v
// bias) — and gives the CPU's results (compareEngines).
func TestNoSampleLoops(t *testing.T) {
	for _, name := range engineFixtures {
		for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
			label := name + "/" + string(mode)
			t.Run(label, func(t *testing.T) {
				const n = 6
				x, y, batch, fill := engineBatch(t, name, n)
				clip := Clipping{Fn: Abadi, R: 0.5}
				cpu := buildEngine(t, name, compareConfig(runtime.CPU{}, mode, clip, false, "sgd", n))
				one := buildEngine(t, name, compareConfig(reference.Separate{}, mode, clip, false, "sgd", n))
				compareEngines(t, label, cpu, one, x, y, batch, fill)
				if one.sampleLoops != 0 {
					t.Errorf("%d per-sample loops", one.sampleLoops)
				}
			})
		}
	}
}

// TestWholeUpdateNonDP: non-private training on a one-worker device with
// memory of its own updates every parameter in one optimizer call over
// the plan's gradient block (runtime.Plan.GradBlock) — or, where
// physical batches accumulate, the accumulators' block — and lands where
// the CPU's per-parameter updates do.
func TestWholeUpdateNonDP(t *testing.T) {
	for _, c := range []struct {
		name, opt string
		phys      int // physical batch: n (the plan's gradients) or less (accumulated)
	}{{"vit", "adamw", 6}, {"resnet_eval", "sgd", 6}, {"vit", "adamw", 4}} {
		t.Run(fmt.Sprintf("%s/%s/phys=%d", c.name, c.opt, c.phys), func(t *testing.T) {
			const n = 6
			_, _, batch, fill := engineBatch(t, c.name, n)
			var updates, noises atomic.Int64
			dev := wholeDevice{reference.Separate{}, &updates, &noises}
			engines := make([]*Engine, 2)
			for i, d := range []runtime.Device{runtime.CPU{}, dev} {
				cfg := compareConfig(d, NonDP, Clipping{}, false, c.opt, c.phys)
				cfg.ExpectedBatch = n
				engines[i] = buildEngine(t, c.name, cfg)
			}
			cpu, one := engines[0], engines[1]
			if !one.whole || len(one.plan.GradBlock()) != len(one.paramAll) {
				t.Fatalf("whole %v: a gradient block of %d, a parameter block of %d", one.whole, len(one.plan.GradBlock()), len(one.paramAll))
			}
			for step := 0; step < 2; step++ {
				updates.Store(0)
				for _, e := range engines {
					if _, err := e.Step(batch, fill); err != nil {
						t.Fatal(err)
					}
				}
				if updates.Load() != 1 {
					t.Errorf("step %d made %d optimizer updates, want 1", step, updates.Load())
				}
			}
			sameParamsAsCPU(t, cpu, one, "after two steps")
		})
	}
}

// sameParamsAsCPU holds the parameters of one (on a device with memory of
// its own) to those of cpu within 1e-4 relative.
func sameParamsAsCPU(t *testing.T, cpu, one *Engine, when string) {
	t.Helper()
	if err := one.plan.SyncParams(); err != nil {
		t.Fatal(err)
	}
	for _, p := range cpu.params {
		got, want := one.plan.HostParam(p.name), p.data
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s[%d] %s: %v, the CPU's %v", p.name, i, when, got[i], want[i])
			}
		}
	}
}

// wholeDevice is reference.Separate counting the optimizer updates and
// noise draws it is asked for.
type wholeDevice struct {
	reference.Separate
	updates, noises *atomic.Int64
}

func (d wholeDevice) AdamUpdate(p, g, m, v []float32, c runtime.AdamCoeffs) {
	d.updates.Add(1)
	d.Separate.AdamUpdate(p, g, m, v, c)
}

func (d wholeDevice) SGDUpdate(p, g, v []float32, c runtime.SGDCoeffs) {
	d.updates.Add(1)
	d.Separate.SGDUpdate(p, g, v, c)
}

func (d wholeDevice) AddGaussianNoise(x []float32, n runtime.Noise, offset uint64, std float64, post float32) {
	d.noises.Add(1)
	d.Separate.AddGaussianNoise(x, n, offset, std, post)
}

// TestWholeUpdate: on a one-worker device with memory of its own
// (reference.Separate, as a GPU) the plan holds the trainable parameters
// in one block (runtime.Plan.ParamBlock) and the engine its accumulators
// in another, each tensor at a multiple of runtime.BlockAlign, so that a step's noise is one draw and its optimizer update
// one call (AdamW and SGD with momentum), not one per parameter, and the
// clipped sums of the parameters that keep per-sample gradients one
// product per size (psRun); the result is the CPU engine's (compareEngines: the noise is positional, so
// its bits do not change), and so is a second step after the optimizer
// state went through a checkpoint (State, SetState).
func TestWholeUpdate(t *testing.T) {
	for _, c := range []struct{ name, opt string }{{"vit", "adamw"}, {"resnet_eval", "sgd"}} {
		t.Run(c.name+"/"+c.opt, func(t *testing.T) {
			const n = 6
			x, y, batch, fill := engineBatch(t, c.name, n)
			clip := Clipping{Fn: Abadi, R: 0.5}
			var updates, noises atomic.Int64
			dev := wholeDevice{reference.Separate{}, &updates, &noises}
			cpu := buildEngine(t, c.name, compareConfig(runtime.CPU{}, BK, clip, false, c.opt, n))
			one := buildEngine(t, c.name, compareConfig(dev, BK, clip, false, c.opt, n))
			if !one.whole || len(one.paramAll) == 0 || len(one.params) < 2 {
				t.Fatalf("whole %v, a block of %d parameters over %d tensors", one.whole, len(one.paramAll), len(one.params))
			}
			// Each parameter at a multiple of runtime.BlockAlign of the
			// blocks, whatever the sizes before it (the fixtures' heads
			// have 10-element biases).
			sizes := make([]int, len(one.params))
			for k, p := range one.params {
				sizes[k] = len(p.data)
			}
			offs, _ := runtime.BlockOffsets(sizes)
			for k, p := range one.params {
				off := offs[k]
				if off%runtime.BlockAlign != 0 || &p.data[0] != &one.paramAll[off] || &p.accum[0] != &one.accumAll[off] {
					t.Fatalf("%s is not at %d of the blocks", p.name, off)
				}
			}
			// The parameters that keep per-sample gradients, a run per size
			// with its accumulators back to back (clipRuns).
			if len(one.psRuns) == 0 {
				t.Fatal("no parameter keeps per-sample gradients")
			}
			for _, r := range one.psRuns {
				size := len(r.params[0].data)
				if r.accum == nil || r.stride%runtime.BlockAlign != 0 || len(r.accum) != (len(r.params)-1)*r.stride+size {
					t.Fatalf("a run of %d parameters of %d elements has accumulators %d long, %d apart", len(r.params), size, len(r.accum), r.stride)
				}
			}
			compareEngines(t, c.name, cpu, one, x, y, batch, fill)
			if updates.Load() != 1 || noises.Load() != 1 {
				t.Errorf("a step made %d optimizer updates and %d noise draws, want 1 and 1", updates.Load(), noises.Load())
			}
			// The optimizer's state through a checkpoint, then a step more.
			for _, e := range []*Engine{cpu, one} {
				st := e.cfg.Optimizer.State()
				if err := e.cfg.Optimizer.SetState(st); err != nil {
					t.Fatal(err)
				}
				if _, err := e.Step(batch, fill); err != nil {
					t.Fatal(err)
				}
			}
			sameParamsAsCPU(t, cpu, one, "after a second step")
		})
	}
}

// gatherDevice is reference.Separate counting IndexGatherBackward and
// ScatterAdd calls.
type gatherDevice struct {
	reference.Separate
	gathers, scatters *atomic.Int64
}

func (d gatherDevice) IndexGatherBackward(dy []float32, m *runtime.IndexMap, dx []float32) {
	d.gathers.Add(1)
	d.Separate.IndexGatherBackward(dy, m, dx)
}

func (d gatherDevice) ScatterAdd(dst, src []float32, idx []int32) {
	d.scatters.Add(1)
	d.Separate.ScatterAdd(dst, src, idx)
}

// TestPathMapOnDevice: on a one-worker device with memory of its own (a
// GPU; here reference.Separate) the weighted sums and the per-sample
// gradients of weights reached through layout paths (packedqkv: a packed
// QKV weight sliced three ways, weights through Transpose) map back with
// IndexGatherBackward, a thread per parameter element on a GPU, not
// ScatterAdd, one thread for all; the results are the CPU's
// (compareEngines).
func TestPathMapOnDevice(t *testing.T) {
	const n = 6
	x, y, batch, fill := engineBatch(t, "packedqkv", n)
	clip := Clipping{Fn: Abadi, R: 0.5}
	var gathers, scatters atomic.Int64
	cpu := buildEngine(t, "packedqkv", compareConfig(runtime.CPU{}, BK, clip, false, "adamw", n))
	dev := buildEngine(t, "packedqkv", compareConfig(gatherDevice{reference.Separate{}, &gathers, &scatters}, BK, clip, false, "adamw", n))
	compareEngines(t, "packedqkv", cpu, dev, x, y, batch, fill)
	if gathers.Load() == 0 || scatters.Load() != 0 {
		t.Errorf("%d IndexGatherBackward and %d ScatterAdd calls; want some and none", gathers.Load(), scatters.Load())
	}
}

// sampleGradsDevice is reference.Separate with a convolution library's
// per-sample weight gradients (runtime.ConvSampleGrads), formed one
// sample at a time by the CPU's kernel; calls counts the chunks asked
// for, asked the engine's questions (PreferSampleGrads). Where prefer is
// set it answers yes after running both paths as a GPU's measurement
// does (owns counts the runs of the engine's own), else no.
type sampleGradsDevice struct {
	reference.Separate
	calls, asked, owns *atomic.Int64
	prefer             bool
}

func (d sampleGradsDevice) ConvSampleWeightGrads(s *runtime.ConvShape, x, dy []float32, i0, n int, inst []float32) bool {
	d.calls.Add(1)
	one := *s
	one.N = 1
	if one.Init() != nil {
		return false
	}
	ws := make([]float32, runtime.CPU{}.ConvScratchSize(&one))
	cx, cy, size := s.C*s.InSize, s.M*s.T, s.M*s.D
	for i := 0; i < n; i++ {
		j := i0 + i
		runtime.CPU{}.ConvWeightGrad(&one, x[j*cx:(j+1)*cx], dy[j*cy:(j+1)*cy], inst[i*size:(i+1)*size], ws)
	}
	return true
}

func (d sampleGradsDevice) PreferSampleGrads(s *runtime.ConvShape, x, dy []float32, n int, inst []float32, ownN int, own func()) bool {
	d.asked.Add(1)
	if !d.prefer {
		return false
	}
	for range 2 {
		own()
		d.owns.Add(1)
		d.ConvSampleWeightGrads(s, x, dy, 0, n, inst)
	}
	return true
}

// tapGramsDevice is reference.Separate with runtime.ConvTapGrams, the
// taps' sums of the samples' input Grams in float64 (calls counts the
// chunks asked for).
type tapGramsDevice struct {
	reference.Separate
	calls *atomic.Int64
}

func (d tapGramsDevice) ConvTapGrams(s *runtime.ConvShape, X []float32, n int, aa []float32) {
	d.calls.Add(1)
	idx := tapGramIndex(s)
	S, T := s.InSize, s.T
	for i := 0; i < n; i++ {
		for e := 0; e < T*T; e++ {
			var sum float64
			for k := 0; k < s.K; k++ {
				if v := idx[k*T*T+e]; v >= 0 {
					sum += float64(X[i*S*S+int(v)])
				}
			}
			aa[i*T*T+e] = float32(sum)
		}
	}
}

// TestConvTapGrams: on a device that forms a ghost norm's Grams from its
// input's (runtime.ConvTapGrams, a GPU), the batched rule takes them
// where they are cheaper than the unfolding, with the CPU's results
// (compareEngines) in ghost, mixed and bk mode — on resnet_eval's and
// vgg's 3×3 convolutions; cnn's (one input channel) unfold cheaper.
func TestConvTapGrams(t *testing.T) {
	for _, name := range []string{"cnn", "resnet_eval", "vgg"} {
		for _, mode := range []Mode{Ghost, Mixed, BK} {
			label := fmt.Sprintf("%s/%s", name, mode)
			t.Run(label, func(t *testing.T) {
				const n = 5
				x, y, batch, fill := engineBatch(t, name, n)
				clip := Clipping{Fn: Abadi, R: 0.5}
				var calls atomic.Int64
				cpu := buildEngine(t, name, compareConfig(runtime.CPU{}, mode, clip, false, "sgd", n))
				dev := buildEngine(t, name, compareConfig(tapGramsDevice{reference.Separate{}, &calls}, mode, clip, false, "sgd", n))
				compareEngines(t, label, cpu, dev, x, y, batch, fill)
				switch c := calls.Load(); {
				case name == "cnn" && c != 0:
					t.Errorf("%s: %d chunks' Grams from the inputs' Grams, where the unfolding is cheaper", label, c)
				case name != "cnn" && mode == Ghost && c == 0:
					t.Errorf("%s: no Grams from the inputs' Grams", label)
				}
				t.Logf("%d chunks' Grams from the inputs' Grams", calls.Load())
			})
		}
	}
}

// TestConvSampleGrads: where the device's convolution library forms a
// chunk's per-sample weight gradients (a GPU with cuDNN), the engine
// takes them instead of a loop of a product per sample where one
// sample's unfolded input does not fit the scratch, and instead of its
// unfolding path where the device prefers the library — with the CPU's
// results (compareEngines), in chunks of one shape whose last overlaps
// the one before; a device that prefers the unfolding gets it. The
// device is asked once per convolution (the measurement's runs, both
// paths', leave the results alone), and not where the unfolding cannot
// run. With physical batches of 4 that the steps fill only partly (3 of
// 4 for the clipped sum, 4 and 3 for a step of 7), the library's chunks
// keep their size, the padded samples left out. A convolution whose
// samples span several rows (windowconv's windows) is not the library's:
// it forms a gradient per row.
func TestConvSampleGrads(t *testing.T) {
	defer func(s int) { batchedScratch = s }(batchedScratch)
	for _, scratch := range []int{batchedScratch, 1 << 10} {
		for _, prefer := range []bool{false, true} {
			for _, partial := range []bool{false, true} {
				batchedScratch = scratch
				for _, name := range []string{"cnn", "resnet_eval", "vgg", "windowconv"} {
					for _, mode := range []Mode{Instantiate, BK} {
						label := fmt.Sprintf("%s/%s/scratch %d/prefer %v/partial %v", name, mode, scratch, prefer, partial)
						t.Run(label, func(t *testing.T) { sampleGradsCase(t, label, name, mode, scratch == 1<<24, prefer, partial) })
					}
				}
			}
		}
	}
}

// sampleGradsCase is one case of TestConvSampleGrads (fits: the default
// scratch, where the unfolding runs).
func sampleGradsCase(t *testing.T, label, name string, mode Mode, fits, prefer, partial bool) {
	const n = 7
	x, y, batch, fill := engineBatch(t, name, n)
	clip := Clipping{Fn: Abadi, R: 0.5}
	var calls, asked, owns atomic.Int64
	cpuCfg := compareConfig(runtime.CPU{}, mode, clip, false, "sgd", n)
	libCfg := compareConfig(sampleGradsDevice{reference.Separate{}, &calls, &asked, &owns, prefer}, mode, clip, false, "sgd", n)
	if partial {
		cpuCfg.PhysicalBatch, libCfg.PhysicalBatch = 4, 4
		sl := len(x) / n
		x, y = x[:3*sl], y[:3]
	}
	cpu, lib := buildEngine(t, name, cpuCfg), buildEngine(t, name, libCfg)
	if partial && (prefer || !fits) && mode == Instantiate {
		// A physical batch of 3 samples in 4: the library's chunks too.
		if _, _, err := lib.ClippedSum(x, y); err != nil {
			t.Fatal(err)
		}
		if calls.Load() == 0 {
			t.Errorf("%s: a partly filled physical batch took no chunk through the library", label)
		}
	}
	compareEngines(t, label, cpu, lib, x, y, batch, fill)
	convs := 0 // the convolutions the device was asked about
	for s, l := range lib.sampleLib {
		convs++
		if l != prefer {
			t.Errorf("%s: convolution %v kept %v", label, s.In, l)
		}
	}
	switch {
	case asked.Load() != int64(convs):
		t.Errorf("%s: asked %d times about %d convolutions", label, asked.Load(), convs)
	case fits && mode == Instantiate && convs == 0:
		t.Errorf("%s: the device was not asked", label)
	case fits && !prefer && calls.Load() != 0:
		t.Errorf("%s: %d chunks through the library where the device preferred the unfolding", label, calls.Load())
	case prefer && owns.Load() != 2*int64(convs):
		t.Errorf("%s: the engine's own path ran %d times for %d measurements", label, owns.Load(), convs)
	case (prefer || !fits) && mode == Instantiate && calls.Load() <= 2*int64(convs):
		t.Errorf("%s: %d chunks through the library, %d of them measuring", label, calls.Load(), 2*convs)
	}
	t.Logf("%d chunks through the library, %d convolutions asked about", calls.Load(), convs)
}

// TestSampleGradsChunk: the library's chunks are no larger than the
// scratch holds, no more of them than that size needs, and their overlap
// (samples formed twice) below their count.
func TestSampleGradsChunk(t *testing.T) {
	defer func(s int) { batchedScratch = s }(batchedScratch)
	batchedScratch = 1 << 10
	for N := 1; N <= 70; N++ {
		for _, size := range []int{1, 7, 16, 37, 100, 300, 1024, 5000} {
			nb := sampleGradsChunk(N, batchedScratch/size)
			most := max(1, min(N, batchedScratch/size))
			chunks := (N + nb - 1) / nb
			if nb < 1 || nb > most || chunks != (N+most-1)/most || chunks*nb-N >= chunks {
				t.Fatalf("N %d, size %d: chunks of %d (at most %d): %d chunks, %d samples twice", N, size, nb, most, chunks, chunks*nb-N)
			}
		}
	}
}
