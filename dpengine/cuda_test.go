//go:build linux && (amd64 || arm64)

package dpengine

import (
	"fmt"
	"os"
	"testing"
	"unsafe"

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
// engine with TestEngineOnReferenceBackend's comparison (compareEngines,
// numcheck.RelErr ≤ 1e-4): per-sample total and per-parameter norms, the
// clipped sums, and after a Step with σ = 1 and a seeded noise source (the
// CUDA noise is the CPU's bit for bit) the private gradients, parameters
// and updates.
func TestEngineOnCUDA(t *testing.T) {
	dev := emulatedCUDA(t)
	for fi, name := range []string{"cnn", "vit"} {
		const n = 8
		x, y, batch, fill := engineBatch(t, name, n)
		for mi, mode := range []Mode{BK, Ghost} {
			opt := [2]string{"sgd", "adamw"}[(fi+mi)%2]
			label := fmt.Sprintf("%s/%s/%s", name, mode, opt)
			t.Run(label, func(t *testing.T) {
				clip := Clipping{Fn: Abadi, R: 0.5}
				cpu := buildEngine(t, name, compareConfig(runtime.CPU{}, mode, clip, false, opt, n))
				gpu := buildEngine(t, name, compareConfig(dev, mode, clip, false, opt, n))
				if gpu.Plan().Device() != dev {
					t.Fatalf("the engine's plan runs on %s", gpu.Plan().Device().Name())
				}
				compareEngines(t, label, cpu, gpu, x, y, batch, fill)
			})
		}
	}
}

// countingDriver counts a Driver's kernel launches, GEMM calls (batched
// ones apart) and host copies.
type countingDriver struct {
	cuda.Driver
	launches, gemms, batched, htod, dtoh int
}

func (c *countingDriver) Launch(f cuda.Function, grid, block cuda.Dim3, shared int, args *cuda.Args) error {
	c.launches++
	return c.Driver.Launch(f, grid, block, shared, args)
}

func (c *countingDriver) Gemm(g *cuda.GemmArgs) error {
	c.gemms++
	if g.Batch > 1 {
		c.batched++
	}
	return c.Driver.Gemm(g)
}

func (c *countingDriver) CopyHtoD(dst cuda.DevicePtr, src unsafe.Pointer, bytes int) error {
	c.htod++
	return c.Driver.CopyHtoD(dst, src, bytes)
}

func (c *countingDriver) CopyDtoH(dst unsafe.Pointer, src cuda.DevicePtr, bytes int) error {
	c.dtoh++
	return c.Driver.CopyDtoH(dst, src, bytes)
}

// BenchmarkCUDAStepCalls reports what one DP step (Engine.Step, bk mode,
// physical batches of 8 and 32) asks of the CUDA driver, on the emulation: kernel
// launches, GEMM calls (batched ones apart: on a GPU each is also one
// gemm_ptrs launch) and host copies per step. On a GPU a step's time
// below a few milliseconds is mostly these calls' latency, so their
// count is the figure a change to the engine's batching moves.
//
//	go test ./dpengine -run XXX -bench CUDAStepCalls -benchtime 2x
func BenchmarkCUDAStepCalls(b *testing.B) {
	drv, err := cuda.Emulated()
	if err != nil {
		b.Skipf("no CUDA emulation here: %v", err)
	}
	cd := &countingDriver{Driver: drv}
	dev, err := cuda.New(cd)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	for _, name := range []string{"cnn", "resnet_eval", "vit"} {
		for _, n := range []int{8, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", name, n), func(b *testing.B) { stepCalls(b, dev, cd, drv, name, n) })
		}
	}
}

// stepCalls is BenchmarkCUDAStepCalls on fixture name at a physical batch
// of n, the golden samples repeated to fill it.
func stepCalls(b *testing.B, dev runtime.Device, cd *countingDriver, drv cuda.Driver, name string, n int) {
	x, y, _, _ := engineBatch(b, name, 8)
	sl := len(x) / len(y)
	batch := make([]int, n)
	for i := range batch {
		batch[i] = i % len(y)
	}
	fill := func(idx []int, xs []float32, ys []int64) error {
		for k, i := range idx {
			copy(xs[k*sl:(k+1)*sl], x[i*sl:(i+1)*sl])
			ys[k] = y[i]
		}
		return nil
	}
	e := buildEngine(b, name, compareConfig(dev, BK, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n))
	if _, err := e.Step(batch, fill); err != nil { // warm: plans copied, scratch grown
		b.Fatal(err)
	}
	*cd = countingDriver{Driver: drv}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Step(batch, fill); err != nil {
			b.Fatal(err)
		}
	}
	per := func(v int) float64 { return float64(v) / float64(b.N) }
	b.ReportMetric(per(cd.launches), "launches/step")
	b.ReportMetric(per(cd.gemms), "gemms/step")
	b.ReportMetric(per(cd.batched), "batched/step")
	b.ReportMetric(per(cd.htod+cd.dtoh), "copies/step")
}
