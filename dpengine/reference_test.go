package dpengine

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// refTolerance bounds the error (refErr) of the engine on the reference
// backend against the engine on the CPU.
const refTolerance = 1e-4

// refErr is max_k |got_k − want_k| / max(max_k |want_k|, floor): the
// largest absolute difference scaled by the largest magnitude of the CPU's
// values, floored for quantities that are analytically zero on some
// parameters: attention key biases (softmax is invariant to them) get
// rounding noise for gradients and norms on both devices, different noise
// on each, which per-layer automatic clipping multiplies by R/(√K·γ).
// The floors below are 1e-3 of the model's largest value, so that such a
// tensor may differ by 1e-7 of it (float32's rounding unit), the absolute
// allowance runtime's TestGoldens gives against PyTorch. A NaN on one side
// only, or different lengths, is +Inf.
func refErr[T float32 | float64](got, want []T, floor float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) != math.IsNaN(w) {
			return math.Inf(1)
		}
		if math.IsNaN(w) {
			continue
		}
		d = math.Max(d, math.Abs(g-w))
		m = math.Max(m, math.Abs(w))
	}
	if d == 0 {
		return 0
	}
	return d / math.Max(m, floor)
}

// refLargest is the largest magnitude over every slice of m.
func refLargest[T float32 | float64](m map[string][]T) float64 {
	var l float64
	for _, v := range m {
		for _, x := range v {
			l = math.Max(l, math.Abs(float64(x)))
		}
	}
	return l
}

// TestEngineOnReferenceBackend runs the engine, unchanged, with
// Config.Device = reference.Device{} and with the CPU on every fixture
// of engineFixtures, in every DP mode (instantiate, ghost, mixed, bk, and
// per-layer clipping in the single-pass modes), with SGD (momentum,
// weight decay) and AdamW, and holds the reference engine to the CPU
// engine (refErr ≤ 1e-4):
//
//   - the noise-free clipped sum Σ_i C_i g_i of every parameter (ClippedSum,
//     clipping that binds), floored at 1e-3 of the largest sum of the
//     model;
//   - the per-sample total gradient norms, and every parameter's per-sample
//     norms (ParamNorms, floored at 1e-3 of the largest);
//   - the update Δθ of every parameter after a Step with σ = 1 and a seeded
//     noise source (both devices draw the same noise bits), scaled by the
//     largest |Δθ| of the model.
//
// On the CPU plans' kernels until the graph's operators move onto
// GraphOps, the reference engine computes the DP operations on the
// reference backend already.
func TestEngineOnReferenceBackend(t *testing.T) {
	type mode struct {
		mode     Mode
		perLayer bool
	}
	modes := []mode{{Instantiate, false}, {Ghost, false}, {Mixed, false}, {BK, false}, {Instantiate, true}, {BK, true}}
	for _, name := range engineFixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gd := loadGolden(t, name)
			const n = 8
			sl := len(gd.x) / len(gd.y)
			x, y := gd.x[:n*sl], gd.y[:n]
			batch := []int{0, 1, 2, 3, 4, 5, 6, 7}
			fill := func(idx []int, xs []float32, ys []int64) error {
				for k, i := range idx {
					copy(xs[k*sl:(k+1)*sl], x[i*sl:(i+1)*sl])
					ys[k] = y[i]
				}
				return nil
			}
			for _, m := range modes {
				for _, opt := range []string{"sgd", "adamw"} {
					label := fmt.Sprintf("%s/%s", m.mode, opt)
					if m.perLayer {
						label += "/perlayer"
					}
					cfg := func(dev runtime.Device) Config {
						var o Optimizer = NewAdam(1e-2, 0.01, true)
						if opt == "sgd" {
							o = &SGD{LR: 1e-2, Momentum: 0.9, WeightDecay: 0.01}
						}
						clip := Clipping{Fn: Abadi, R: 0.5}
						if m.perLayer {
							// γ = 0.1 > R/√K: the factor R/(√K·γ) by which
							// automatic clipping multiplies a gradient that
							// is rounding noise (see refErr) stays below 1
							// on the attention models.
							clip = Clipping{Fn: Automatic, R: 0.5, Gamma: 0.1}
						}
						return Config{Device: dev, Mode: m.mode, Clipping: clip, PerLayer: m.perLayer, NoiseMultiplier: 1,
							ExpectedBatch: n, PhysicalBatch: n, Source: NewSeededSource(5), Optimizer: o}
					}
					cpu := buildEngine(t, name, cfg(runtime.CPU{}))
					ref := buildEngine(t, name, cfg(reference.Device{}))
					if _, ok := ref.Plan().Device().(reference.Device); !ok {
						t.Fatalf("%s: the engine's plan runs on %s, not the reference backend", label, ref.Plan().Device().Name())
					}

					wantSum, wantNorms, err := cpu.ClippedSum(x, y)
					if err != nil {
						t.Fatal(err)
					}
					gotSum, gotNorms, err := ref.ClippedSum(x, y)
					if err != nil {
						t.Fatal(err)
					}
					if e := refErr(gotNorms, wantNorms, 0); e > refTolerance {
						t.Errorf("%s: per-sample norms: error %.3g > %g", label, e, refTolerance)
					}
					wantPN, gotPN := cpu.ParamNorms(), ref.ParamNorms()
					pnFloor, sumFloor := 1e-3*refLargest(wantPN), 1e-3*refLargest(wantSum)
					worst := 0.0
					for _, p := range cpu.ParamNames() {
						if e := refErr(gotPN[p], wantPN[p], pnFloor); e > refTolerance {
							t.Errorf("%s: per-sample norms of %s: error %.3g > %g", label, p, e, refTolerance)
						}
						e := refErr(gotSum[p], wantSum[p], sumFloor)
						if e > refTolerance {
							t.Errorf("%s: clipped sum of %s: error %.3g > %g", label, p, e, refTolerance)
						}
						worst = math.Max(worst, e)
					}

					before := map[string][]float32{}
					for k, p := range cpu.ParamNames() {
						before[p] = append([]float32(nil), cpu.Params()[k]...)
					}
					for _, e := range []*Engine{cpu, ref} {
						if _, err := e.Step(batch, fill); err != nil {
							t.Fatal(err)
						}
					}
					wantDelta, gotDelta := map[string][]float32{}, map[string][]float32{}
					for k, p := range cpu.ParamNames() {
						wantDelta[p], gotDelta[p] = make([]float32, len(before[p])), make([]float32, len(before[p]))
						for i, b := range before[p] {
							wantDelta[p][i] = cpu.Params()[k][i] - b
							gotDelta[p][i] = ref.Params()[k][i] - b
						}
					}
					scale := refLargest(wantDelta)
					if scale == 0 {
						t.Errorf("%s: the step did not move the parameters", label)
					}
					for _, p := range cpu.ParamNames() {
						if e := refErr(gotDelta[p], wantDelta[p], scale); e > refTolerance {
							t.Errorf("%s: update of %s: error %.3g > %g", label, p, e, refTolerance)
						}
					}
					t.Logf("%s: worst clipped-sum error %.3g", label, worst)
				}
			}
		})
	}
}
