//go:build linux && (amd64 || arm64)

package dpengine

import (
	"fmt"
	"math"
	"os"
	"strings"
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
	d := cudaOn(t, cuda.Emulated)
	if d == nil {
		t.Skip("no CUDA emulation here")
	}
	return d
}

// TestEngineOnCUDA runs the engine, unchanged, on the emulated CUDA device
// and on the CPU for cnn, vit and windowconv (convolutions over windows
// folded into the batch) in bk and ghost modes (AdamW on one,
// SGD with momentum on the other), each also with every sample fed as two
// views (augmentation multiplicity), and holds the CUDA engine to the CPU
// engine with TestEngineOnReferenceBackend's comparison (compareEngines,
// numcheck.RelErr ≤ 1e-4): per-sample total and per-parameter norms, the
// clipped sums, and after a Step with σ = 1 and a seeded noise source (the
// CUDA noise is the CPU's bit for bit) the private gradients, parameters
// and updates.
func TestEngineOnCUDA(t *testing.T) {
	dev := emulatedCUDA(t)
	for fi, name := range []string{"cnn", "vit", "windowconv"} {
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
	// Augmentation multiplicity: each of 4 samples as 2 views (the
	// golden batch's rows 2i and 2i+1), the views folded into the batch
	// as the plan reads them, their mean gradient clipped as the sample's.
	for fi, name := range []string{"cnn", "vit", "windowconv"} {
		const n, views = 4, 2
		gd := loadGolden(t, name)
		per := views * len(gd.x) / len(gd.y) // a sample's views
		x := gd.x[:n*per]
		y := make([]int64, n)
		batch := make([]int, n)
		for i := range y {
			y[i], batch[i] = gd.y[i], i
		}
		fill := func(idx []int, xs []float32, ys []int64) error {
			for k, i := range idx {
				copy(xs[k*per:(k+1)*per], x[i*per:(i+1)*per])
				ys[k] = y[i]
			}
			return nil
		}
		for mi, mode := range []Mode{BK, Ghost} {
			opt := [2]string{"sgd", "adamw"}[(fi+mi)%2]
			label := fmt.Sprintf("%s/x%d/%s/%s", name, views, mode, opt)
			t.Run(label, func(t *testing.T) {
				clip := Clipping{Fn: Abadi, R: 0.5}
				engine := func(d runtime.Device) *Engine {
					g, rp := multipliedFixture(t, name, n, views)
					e, err := New(g, rp, compareConfig(d, mode, clip, false, opt, n))
					if err != nil {
						t.Fatal(err)
					}
					if e.Views() != views {
						t.Fatalf("the engine reads %d views", e.Views())
					}
					return e
				}
				compareEngines(t, label, engine(runtime.CPU{}), engine(dev), x, y, batch, fill)
			})
		}
	}
}

// countingDriver counts a Driver's kernel launches, GEMM calls (batched
// ones and TF32 ones apart) and host copies.
type countingDriver struct {
	cuda.Driver
	launches, gemms, batched, tf32, htod, dtoh int
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
	if g.TF32 {
		c.tf32++
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

// countingCUDA returns the emulated driver, a countingDriver over it and
// the CUDA device on that (closed when tb ends), or skips without the
// emulation.
func countingCUDA(tb testing.TB) (cuda.Driver, *countingDriver, *cuda.Device) {
	drv, err := cuda.Emulated()
	if err != nil {
		tb.Skipf("no CUDA emulation here: %v", err)
	}
	cd := &countingDriver{Driver: drv}
	dev, err := cuda.New(cd)
	if err != nil {
		drv.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	return drv, cd, dev
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
	drv, cd, dev := countingCUDA(b)
	for _, name := range []string{"cnn", "resnet_eval", "resnet_train", "vit", "mobilenet", "beit", "packedqkv"} {
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

// TestCUDAStepCopies holds a warm step (Engine.Step, after one step that
// copied the plans and grew the scratch) on the emulated CUDA device to
// the host copies it cannot do without: the input and the labels in, the
// losses out and, in a DP mode, the clipping report's counts out. Any
// other copy between host and device is a synchronisation in the middle
// of the step on a GPU (a copy from pageable memory waits for every
// queued kernel): GemmBias and its backward, whose shapes were staged with
// each call, made two of them per Gemm and step (ViT-B/16: 26).
func TestCUDAStepCopies(t *testing.T) {
	drv, cd, dev := countingCUDA(t)
	for _, name := range []string{"cnn", "resnet_eval", "vit", "beit"} {
		for _, mode := range []Mode{NonDP, BK, Mixed} {
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				const n = 4
				_, _, batch, fill := engineBatch(t, name, n)
				e := buildEngine(t, name, compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n))
				if _, err := e.Step(batch, fill); err != nil {
					t.Fatal(err)
				}
				*cd = countingDriver{Driver: drv}
				if _, err := e.Step(batch, fill); err != nil {
					t.Fatal(err)
				}
				wantOut := 2 // the losses and the clipping counts
				if mode == NonDP {
					wantOut = 1
				}
				if cd.htod != 2 || cd.dtoh != wantOut {
					t.Errorf("a warm step copied %d times to the device and %d times to the host; want 2 (input, labels) and %d", cd.htod, cd.dtoh, wantOut)
				}
			})
		}
	}
}

// TestTF32Engine runs the engine on the emulated CUDA device with TF32
// convolutions (runtime.TF32Device) on resnet_eval, whose convolutions
// take the GEMM path. In bk and instantiate, each sample's clipped
// gradient C_i g_i, summed alone, has the norm C_i·‖g_i‖ the engine
// reported for it to float32 accuracy (1e-5), although the TF32 products
// moved the norms themselves (by more than that, less than 1e-2): the
// clip bound holds on what is summed. Ghost and mixed, whose second
// backward pass would round afresh, are refused, at New and at a step
// after TF32 is turned on under a built engine.
func TestTF32Engine(t *testing.T) {
	if os.Getenv(cuda.EnvDriver) == "gpu" {
		t.Skip("the engine test runs on the emulation")
	}
	_, cd, dev := countingCUDA(t)
	const name, n = "resnet_eval", 4
	x, y, _, _ := engineBatch(t, name, n)
	sl := len(x) / n
	clip := Clipping{Fn: Abadi, R: 0.5}
	for _, mode := range []Mode{BK, Instantiate} {
		t.Run(string(mode), func(t *testing.T) {
			dev.SetTF32(false)
			exact := buildEngine(t, name, compareConfig(dev, mode, clip, false, "sgd", n))
			_, norms32, err := exact.ClippedSum(x, y)
			if err != nil {
				t.Fatal(err)
			}
			dev.SetTF32(true)
			defer dev.SetTF32(false)
			e := buildEngine(t, name, compareConfig(dev, mode, clip, false, "sgd", n))
			cd.tf32 = 0
			_, norms, err := e.ClippedSum(x, y)
			if err != nil {
				t.Fatal(err)
			}
			if cd.tf32 == 0 {
				t.Fatal("no TF32 GEMM ran")
			}
			moved := 0.0
			for i := range norms {
				moved = math.Max(moved, math.Abs(norms[i]-norms32[i])/norms32[i])
			}
			if moved <= 1e-5 || moved >= 1e-2 {
				t.Errorf("TF32 moved the per-sample norms by %.2g (relative), not within (1e-5, 1e-2)", moved)
			}
			for i := 0; i < n; i++ {
				sum, nu, err := e.ClippedSum(x[i*sl:(i+1)*sl], y[i:i+1])
				if err != nil {
					t.Fatal(err)
				}
				var sq float64
				for _, g := range sum {
					for _, v := range g {
						sq += float64(v) * float64(v)
					}
				}
				want := math.Min(nu[0], clip.R) // Abadi: C_i·‖g_i‖
				if got := math.Sqrt(sq); math.Abs(got-want) > 1e-5*want {
					t.Errorf("sample %d: ‖C_i g_i‖ = %.7g, the norm reported bounds it at %.7g", i, got, want)
				}
			}
		})
	}
	for _, mode := range []Mode{Ghost, Mixed} {
		dev.SetTF32(true)
		cfg := compareConfig(dev, mode, clip, false, "sgd", n)
		if _, err := New(nil, nil, cfg); err == nil || !strings.Contains(err.Error(), "TF32") {
			t.Errorf("%s with TF32 on: New gave %v, want a TF32 error", mode, err)
		}
		dev.SetTF32(false)
		e := buildEngine(t, name, cfg)
		dev.SetTF32(true)
		if _, _, err := e.ClippedSum(x, y); err == nil || !strings.Contains(err.Error(), "TF32") {
			t.Errorf("%s, TF32 turned on after New: ClippedSum gave %v, want a TF32 error", mode, err)
		}
		dev.SetTF32(false)
	}
}

// TestWorkerBufsGiveBackOutgrown: the norm scratch, outgrown layer by
// layer in the first step, gives its old buffers back to a device with
// memory of its own (on the H100 they stayed allocated until the engine
// closed: 84 MB beside the 30 MB kept on ResNet-50 at 4 samples).
func TestWorkerBufsGiveBackOutgrown(t *testing.T) {
	dev := emulatedCUDA(t)
	mr := dev.(runtime.MemoryReporter)
	e := &Engine{dev: dev, ops: dev.(runtime.Ops)}
	base, _ := mr.MemoryStats()
	largest := 0
	for _, n := range []int{1000, 5000, 3000, 20000} {
		bufs, err := e.workerBufs(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(bufs) != 1 || len(bufs[0]) < n {
			t.Fatalf("workerBufs(%d): %d buffers, the first of %d", n, len(bufs), len(bufs[0]))
		}
		largest = max(largest, n)
		want := base + 4*int64(largest)
		if inUse, _ := mr.MemoryStats(); inUse != want {
			t.Errorf("after workerBufs(%d): %d bytes in use, want %d (the largest so far only)", n, inUse-base, want-base)
		}
	}
	// The view must begin an allocation: anything else is refused.
	bufs, _ := e.workerBufs(1)
	if err := runtime.FreeFloats(dev, bufs[0][1:]); err == nil {
		t.Error("FreeFloats of a view inside an allocation succeeded")
	}
}

// TestNormBatchPair: a normalization's scale and bias taken from one
// NormAffineGrads call (normBatch's pair, one pass over the output
// gradient on a GPU) give the clipped sums and norms of a call each, bit
// for bit, with fewer launches (resnet_train's GroupNorms on the CUDA
// emulation).
func TestNormBatchPair(t *testing.T) {
	_, cd, dev := countingCUDA(t)
	const name, n = "resnet_train", 4
	x, y, _, _ := engineBatch(t, name, n)
	run := func(pair bool) (map[string][]float32, []float64, int) {
		normPairOff = !pair
		defer func() { normPairOff = false }()
		e := buildEngine(t, name, compareConfig(dev, BK, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n))
		if _, _, err := e.ClippedSum(x, y); err != nil { // first use: the plans' copies and choices
			t.Fatal(err)
		}
		cd.launches = 0
		sum, norms, err := e.ClippedSum(x, y)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for k, g := range sum {
			out[k] = append([]float32(nil), g...)
		}
		return out, append([]float64(nil), norms...), cd.launches
	}
	pairSum, pairNorms, pairLaunches := run(true)
	sum, norms, launches := run(false)
	for i := range norms {
		if math.Float64bits(pairNorms[i]) != math.Float64bits(norms[i]) {
			t.Fatalf("sample %d's norm %v paired, %v a call each", i, pairNorms[i], norms[i])
		}
	}
	if len(pairSum) != len(sum) {
		t.Fatalf("%d parameters paired, %d a call each", len(pairSum), len(sum))
	}
	for k := range sum {
		for j := range sum[k] {
			if math.Float32bits(pairSum[k][j]) != math.Float32bits(sum[k][j]) {
				t.Fatalf("%s element %d: %v paired, %v a call each", k, j, pairSum[k][j], sum[k][j])
			}
		}
	}
	if pairLaunches >= launches {
		t.Errorf("%d launches paired, %d with a call each: no pair was taken", pairLaunches, launches)
	}
	t.Logf("launches: %d paired, %d a call each", pairLaunches, launches)
}
