//go:build linux && (amd64 || arm64)

package dpengine

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// emulatedCUDA returns the emulated CUDA device, or skips without g++ (and
// under DPFINETUNE_CUDA=gpu: the test reads the engine's parameters and
// gradients in place, which device memory allows on the emulation only).
func emulatedCUDA(t *testing.T) runtime.Device {
	t.Helper()
	if os.Getenv(cuda.EnvDriver) == "gpu" {
		t.Skip("the engine test runs on the emulation")
	}
	drv, err := cuda.Emulated()
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	d, err := cuda.New(drv)
	if err != nil {
		drv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestEngineOnCUDA runs the engine, unchanged, on the emulated CUDA device
// and on the CPU for cnn and vit in bk and ghost modes (AdamW on one,
// SGD with momentum on the other), and holds the CUDA engine to the CPU
// engine with TestEngineOnReferenceBackend's metric and bound (refErr ≤
// 1e-4): per-sample total and per-parameter norms, the clipped sums, and
// after a Step with σ = 1 and a seeded noise source (the CUDA noise is the
// CPU's bit for bit) the private gradients, parameters and updates.
func TestEngineOnCUDA(t *testing.T) {
	dev := emulatedCUDA(t)
	for fi, name := range []string{"cnn", "vit"} {
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
		for mi, mode := range []Mode{BK, Ghost} {
			opt := [2]string{"sgd", "adamw"}[(fi+mi)%2]
			label := fmt.Sprintf("%s/%s/%s", name, mode, opt)
			t.Run(label, func(t *testing.T) {
				cfg := func(dev runtime.Device) Config {
					adamW := NewAdam(1e-2, 0.01, true)
					adamW.Eps = 1e-3
					var o Optimizer = adamW
					if opt == "sgd" {
						o = &SGD{LR: 1e-2, Momentum: 0.9, WeightDecay: 0.01}
					}
					return Config{Device: dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: 0.5}, NoiseMultiplier: 1,
						ExpectedBatch: n, PhysicalBatch: n, Source: NewSeededSource(5), Optimizer: o}
				}
				cpu := buildEngine(t, name, cfg(runtime.CPU{}))
				gpu := buildEngine(t, name, cfg(dev))
				if gpu.Plan().Device() != dev {
					t.Fatalf("the engine's plan runs on %s", gpu.Plan().Device().Name())
				}
				var worst [5]float64
				check := func(kind int, what string, e float64) {
					worst[kind] = math.Max(worst[kind], e)
					if e > refTolerance {
						t.Errorf("%s: error %.3g > %g", what, e, refTolerance)
					}
				}
				wantSum, wantNorms, err := cpu.ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				gotSum, gotNorms, err := gpu.ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				check(0, "per-sample norms", refErr(gotNorms, wantNorms, 0))
				wantPN, gotPN := cpu.ParamNorms(), gpu.ParamNorms()
				pnFloor, sumFloor := 1e-3*refLargest(wantPN), 1e-3*refLargest(wantSum)
				for _, p := range cpu.ParamNames() {
					check(0, "per-sample norms of "+p, refErr(gotPN[p], wantPN[p], pnFloor))
					check(1, "clipped sum of "+p, refErr(gotSum[p], wantSum[p], sumFloor))
				}
				before := map[string][]float32{}
				for k, p := range cpu.ParamNames() {
					before[p] = append([]float32(nil), cpu.Params()[k]...)
				}
				for _, e := range []*Engine{cpu, gpu} {
					if _, err := e.Step(batch, fill); err != nil {
						t.Fatal(err)
					}
				}
				wantGrad, gotGrad := map[string][]float32{}, map[string][]float32{}
				for _, p := range cpu.ParamNames() {
					wantGrad[p], gotGrad[p] = cpu.Gradient(p), gpu.Gradient(p)
				}
				gradFloor := 1e-3 * refLargest(wantGrad)
				wantP, gotP := cpu.Params(), gpu.Params()
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
					t.Error("the step did not move the parameters")
				}
				for _, p := range cpu.ParamNames() {
					check(4, "update of "+p, refErr(gotDelta[p], wantDelta[p], deltaScale))
				}
				t.Logf("worst errors: norms %.3g, clipped sums %.3g, private gradients %.3g, parameters %.3g, updates %.3g", worst[0], worst[1], worst[2], worst[3], worst[4])
			})
		}
	}
}
