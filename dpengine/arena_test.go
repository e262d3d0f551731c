package dpengine

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// namedDevice is a device a test runs an engine on.
type namedDevice struct {
	name string
	dev  runtime.Device
}

// cpuAndEmulatedCUDA returns the CPU and, where g++ builds it, the CUDA
// emulation.
func cpuAndEmulatedCUDA(t *testing.T) []namedDevice {
	devs := []namedDevice{{"cpu", nil}}
	drv, err := cuda.Emulated()
	if err != nil {
		t.Logf("no CUDA emulation here (%v): the CPU only", err)
		return devs
	}
	d, err := cuda.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return append(devs, namedDevice{"cuda-emulated", d})
}

// stepResults are an engine's clipped sums and per-sample norms over
// physical batches whose buffers hold what the one before left there: the
// n samples of x and y, the first n−2, the n again.
type stepResults struct {
	sums  []map[string][]float32
	norms [][]float64
}

func clippedSums(t *testing.T, e *Engine, x []float32, y []int64) stepResults {
	t.Helper()
	n := len(y)
	sl := len(x) / n
	var r stepResults
	for _, k := range []int{n, n - 2, n} {
		sum, norms, err := e.ClippedSum(x[:k*sl], y[:k])
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for p, g := range sum {
			out[p] = append([]float32(nil), g...)
		}
		r.sums = append(r.sums, out)
		r.norms = append(r.norms, append([]float64(nil), norms...))
	}
	return r
}

// sameBits fails t where got and want differ in any bit; how names the
// two ways.
func (got stepResults) sameBits(t *testing.T, want stepResults, how string) {
	t.Helper()
	for s := range want.sums {
		for i := range want.norms[s] {
			if math.Float64bits(got.norms[s][i]) != math.Float64bits(want.norms[s][i]) {
				t.Fatalf("batch %d, sample %d: norm² %v %s", s, i, got.norms[s][i], fmt.Sprintf(how, want.norms[s][i]))
			}
		}
		for p, w := range want.sums[s] {
			for j := range w {
				if g := got.sums[s][p][j]; math.Float32bits(g) != math.Float32bits(w[j]) {
					t.Fatalf("batch %d, %s[%d] = %v %s", s, p, j, g, fmt.Sprintf(how, w[j]))
				}
			}
		}
	}
}

// TestArenaPerSample: per-sample gradients kept in the runtime plan's
// hook buffers (arenaPerSample) give psAll's clipped sums and norms bit
// for bit, over physical batches whose hook buffers hold what the last
// step's forward and backward left there (a full batch, a partly filled
// one, the full one again), in bk (the threshold lowered so that the
// fixtures' instantiated convolutions and position embedding qualify) and
// instantiate, on the CPU and the CUDA emulation; and psAll holds the
// rest only.
func TestArenaPerSample(t *testing.T) {
	defer func(m int64) { arenaPerSampleMin = m }(arenaPerSampleMin)
	arenaPerSampleMin = 64
	const n = 6
	for _, d := range cpuAndEmulatedCUDA(t) {
		for _, c := range []struct {
			name  string
			modes []Mode
		}{
			{"resnet_train", []Mode{BK, Instantiate}},
			{"vit", []Mode{BK, Instantiate}},
			// A shared projection: psAll beside the hook buffers.
			{"packedqkv", []Mode{Instantiate}},
		} {
			name := c.name
			for _, mode := range c.modes {
				t.Run(fmt.Sprintf("%s/%s/%s", d.name, name, mode), func(t *testing.T) {
					x, y, _, _ := engineBatch(t, name, n)
					run := func(arena bool) (stepResults, int) {
						arenaPerSampleOff = !arena
						defer func() { arenaPerSampleOff = false }()
						e := buildEngine(t, name, compareConfig(d.dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n))
						if arena != (len(e.hookPS) > 0) {
							t.Fatalf("arena %v: %d hook buffers of per-sample gradients", arena, len(e.hookPS))
						}
						return clippedSums(t, e, x, y), len(e.psAll)
					}
					got, gotPS := run(true)
					want, wantPS := run(false)
					if gotPS >= wantPS {
						t.Errorf("psAll %d floats with hook buffers, %d without", gotPS, wantPS)
					}
					got.sameBits(t, want, "with hook buffers, %v in psAll")
				})
			}
		}
	}
}

// TestWorkerBufsInPlanWorkspace: the norm rules' scratch taken from the
// runtime plan's workspace (workerBufs, between the plan's nodes) gives
// the clipped sums and norms of the engine's own buffers bit for bit,
// over several physical batches, in every DP mode, on the CPU and the
// CUDA emulation; and where every layer's scratch fits there, the engine
// allocates none of its own.
func TestWorkerBufsInPlanWorkspace(t *testing.T) {
	const n = 6
	inWorkspace := 0 // cases whose scratch was the workspace's alone
	defer func() {
		if inWorkspace == 0 {
			t.Error("no case took its norm scratch from the plan's workspace alone: the test exercises nothing")
		}
	}()
	for _, d := range cpuAndEmulatedCUDA(t) {
		for _, name := range []string{"resnet_train", "vit"} {
			for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
				t.Run(fmt.Sprintf("%s/%s/%s", d.name, name, mode), func(t *testing.T) {
					x, y, _, _ := engineBatch(t, name, n)
					run := func(shared bool) (stepResults, *Engine) {
						wsBufsOff = !shared
						defer func() { wsBufsOff = false }()
						e := buildEngine(t, name, compareConfig(d.dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n))
						return clippedSums(t, e, x, y), e
					}
					got, e := run(true)
					want, own := run(false)
					// Each layer's scratch is the workspace or, where it does
					// not fit there, the engine's own as before.
					ws := int64(len(e.plan.Scratch()))
					if e.normScratchPeak > own.normScratchPeak || own.normScratchPeak <= ws && e.normScratchPeak != 0 {
						t.Errorf("the engine's own norm scratch: %d floats sharing the plan's workspace (%d floats), %d without", e.normScratchPeak, ws, own.normScratchPeak)
					}
					if own.normScratchPeak > 0 && e.normScratchPeak == 0 {
						inWorkspace++
					}
					got.sameBits(t, want, "in the plan's workspace, %v in the engine's")
				})
			}
		}
	}
}

// TestFitWorkspace: where the plan's workspace holds at least half the
// batched rules' chunk bound (batchedScratch, lowered here to twice the
// workspace, as a GPU's 64 MiB of unfolded columns is to its 64 MiB
// bound), the rules' chunks shrink to fit it (fitWorkspace): the engine
// holds no scratch of its own where, with chunks of the bound, it held
// more than the workspace, and the clipped sums and norms are the same
// bits (the CUDA emulation, whose rules batch the samples).
func TestFitWorkspace(t *testing.T) {
	devs := cpuAndEmulatedCUDA(t)
	if len(devs) < 2 {
		t.Skip("no CUDA emulation here")
	}
	dev := devs[1].dev
	defer func(s int) { batchedScratch = s }(batchedScratch)
	const n = 6
	fitted := 0
	for _, name := range []string{"resnet_train", "packedqkv"} {
		x, y, _, _ := engineBatch(t, name, n)
		for _, mode := range []Mode{Ghost, Mixed, BK, Instantiate} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", n)
				ws := len(buildEngine(t, name, cfg).plan.Scratch())
				batchedScratch = 2 * ws
				run := func(fit bool) (stepResults, *Engine) {
					wsBufsOff = !fit
					defer func() { wsBufsOff = false }()
					e := buildEngine(t, name, cfg)
					return clippedSums(t, e, x, y), e
				}
				got, e := run(true)
				want, own := run(false)
				if own.normScratchPeak > int64(ws) {
					fitted++
					if e.normScratchPeak != 0 {
						t.Errorf("own norm scratch %d floats with chunks fitted to the %d-float workspace (%d without)", e.normScratchPeak, ws, own.normScratchPeak)
					}
				}
				got.sameBits(t, want, "with chunks fitted to the workspace, %v without")
			})
		}
	}
	if fitted == 0 {
		t.Error("no case's scratch outgrew the workspace: the test exercises nothing")
	}
}
