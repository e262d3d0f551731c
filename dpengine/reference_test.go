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
// per-layer clipping in the single-pass modes), and holds the reference
// engine to the CPU engine (refErr ≤ 1e-4):
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
			for mi, m := range modes {
				opt := [2]string{"sgd", "adamw"}[(fi+mi)%2]
				label := fmt.Sprintf("%s/%s", m.mode, opt)
				if m.perLayer {
					label += "/perlayer"
				}
				cfg := func(dev runtime.Device) Config {
					adamW := NewAdam(1e-2, 0.01, true)
					adamW.Eps = 1e-3
					var o Optimizer = adamW
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
				// worst is the largest error of each comparison: norms,
				// clipped sums, private gradients, parameters, updates.
				var worst [5]float64
				check := func(kind int, what string, e float64) {
					worst[kind] = math.Max(worst[kind], e)
					if e > refTolerance {
						t.Errorf("%s: %s: error %.3g > %g", label, what, e, refTolerance)
					}
				}
				check(0, "per-sample norms", refErr(gotNorms, wantNorms, 0))
				wantPN, gotPN := cpu.ParamNorms(), ref.ParamNorms()
				pnFloor, sumFloor := 1e-3*refLargest(wantPN), 1e-3*refLargest(wantSum)
				for _, p := range cpu.ParamNames() {
					check(0, "per-sample norms of "+p, refErr(gotPN[p], wantPN[p], pnFloor))
					check(1, "clipped sum of "+p, refErr(gotSum[p], wantSum[p], sumFloor))
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
				wantGrad, gotGrad := map[string][]float32{}, map[string][]float32{}
				for _, p := range cpu.ParamNames() {
					wantGrad[p], gotGrad[p] = cpu.Gradient(p), ref.Gradient(p)
				}
				gradFloor := 1e-3 * refLargest(wantGrad)
				if gradFloor == 0 {
					t.Errorf("%s: the step's private gradient is zero", label)
				}
				wantP, gotP := cpu.Params(), ref.Params()
				wantDelta, gotDelta := map[string][]float32{}, map[string][]float32{}
				for k, p := range cpu.ParamNames() {
					check(2, "private gradient of "+p, refErr(gotGrad[p], wantGrad[p], gradFloor))
					check(3, "updated "+p, refErr(gotP[k], wantP[k], 0))
					wantDelta[p], gotDelta[p] = make([]float32, len(before[p])), make([]float32, len(before[p]))
					for i, b := range before[p] {
						wantDelta[p][i], gotDelta[p][i] = wantP[k][i]-b, gotP[k][i]-b
					}
				}
				deltaScale := refLargest(wantDelta)
				if deltaScale == 0 {
					t.Errorf("%s: the step did not move the parameters", label)
				}
				for _, p := range cpu.ParamNames() {
					check(4, "update of "+p, refErr(gotDelta[p], wantDelta[p], deltaScale))
				}
				t.Logf("%s: worst errors: norms %.3g, clipped sums %.3g, private gradients %.3g, parameters %.3g, updates %.3g", label, worst[0], worst[1], worst[2], worst[3], worst[4])
			}
		})
	}
}
