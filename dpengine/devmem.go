package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The step's state lives in device memory: every buffer a device
// operation reads or writes (accumulated and per-sample gradients, norms,
// clip factors, optimizer state, scratch) is allocated from the engine's
// device, so that a backend with memory of its own runs the step without
// host copies. Host-side by design are the input batch staging (copied in
// by Plan.SetInput), labels and per-sample losses (Plan.Loss copies them
// in and out) and the other step scalars the host reads. Fills and copies
// of device buffers run through the device's LayoutOps (Fill, Copy), the
// norms' clears and accumulations through VectorOps (ZeroNormSq,
// AddSumSq, AddDot, AddSumSqProduct), the report's counts through
// ClipOps.CountClipped, and what the host must see (reports, audits,
// book-keeping's Einsum factors, which are GEMM scalars) is copied out
// through the device's copies and additions, never read in place
// (docs/ARCHITECTURE.md, "Where the state lives").
// On the CPU and the reference backend device memory is host memory, so
// none of this copies.

// ownMemory is runtime.OwnMemory: a device of one worker with memory of
// its own batches its per-sample work (Engine.batchSamples), where a
// per-sample loop is a chain of small launches, while on a host core it
// keeps a sample's data in cache and can use the per-sample input Gram
// (inputGram).
func ownMemory(dev runtime.Device) bool { return runtime.OwnMemory(dev) }

// batchesSamples reports whether the engine batches its per-sample work
// over chunks of samples on dev, whose operations run on workers workers
// (Engine.batchSamples): a one-worker device with memory of its own (a
// GPU), where a per-sample loop is a chain of small launches.
func batchesSamples(dev runtime.Device, workers int) bool { return workers == 1 && ownMemory(dev) }

// allocOn returns n zeroed float32 elements of dev's memory (the view
// its operations take); a nil dev is the CPU, as in Config.
func allocOn(dev runtime.Device, n int, what string) ([]float32, error) {
	if dev == nil {
		dev = runtime.CPU{}
	}
	buf, err := dev.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("dpengine: allocating %s (%d elements) on %s: %w", what, n, dev.Name(), err)
	}
	return buf.Floats(), nil
}

// alloc returns n zeroed float32 elements of the engine's device.
func (e *Engine) alloc(n int, what string) ([]float32, error) { return allocOn(e.dev, n, what) }

// alloc64 returns n zeroed float64 elements of the engine's device
// (runtime.AllocFloat64).
func (e *Engine) alloc64(n int, what string) ([]float64, error) {
	f, err := runtime.AllocFloat64(e.dev, n)
	if err != nil {
		return nil, fmt.Errorf("dpengine: allocating %s: %w", what, err)
	}
	return f, nil
}

// growOn returns b resized to n elements, allocating from dev only when
// b is too small: scratch grows to the largest layer's need in the first
// step and is reused after, so that a step allocates nothing.
func growOn(dev runtime.Device, b []float32, n int) ([]float32, error) {
	if cap(b) >= n {
		return b[:n], nil
	}
	return allocOn(dev, n, "scratch")
}

// regrowOn is growOn that first frees b where it is outgrown (on a GPU
// device memory until freed): for scratch only its holder refers to.
func regrowOn(dev runtime.Device, b []float32, n int) ([]float32, error) {
	if cap(b) >= n {
		return b[:n], nil
	}
	if b != nil {
		if err := runtime.FreeFloats(dev, b[:cap(b)]); err != nil {
			return nil, fmt.Errorf("dpengine: releasing outgrown scratch: %w", err)
		}
	}
	return allocOn(dev, n, "scratch")
}

// growF64On is growOn for float64 scratch (runtime.AllocFloat64).
func growF64On(dev runtime.Device, b []float64, n int) ([]float64, error) {
	if cap(b) >= n {
		return b[:n], nil
	}
	if dev == nil {
		dev = runtime.CPU{}
	}
	f, err := runtime.AllocFloat64(dev, n)
	if err != nil {
		return nil, fmt.Errorf("dpengine: allocating float64 scratch on %s: %w", dev.Name(), err)
	}
	return f, nil
}

// gatherOn is gatherSample into dst grown on dev to the sample's size.
func gatherOn(dev runtime.Device, lay runtime.LayoutOps, v *runtime.View, N, i int, dst []float32) ([]float32, error) {
	dst, err := growOn(dev, dst, sampleLen(v, N, i))
	if err != nil {
		return nil, err
	}
	return gatherSample(lay, v, N, i, dst), nil
}

// sampleLen is the number of elements of sample i of v (N samples), as
// gatherSample collects them.
func sampleLen(v *runtime.View, N, i int) int {
	stride := v.BatchStride
	blocks := len(v.Data) / stride
	if i >= blocks {
		return 0
	}
	return (blocks - i + N - 1) / N * stride
}

// workerBufs returns per-worker scratch slices of at least size elements
// of the engine's device, reused across layers and steps: the runtime
// plan's workspace where the workers' slices fit in it (its kernels are
// done with it between nodes, where the hooks run: runtime.Plan.Scratch;
// on a GPU a CNN's holds the convolutions' 64 MiB of unfolded columns, as
// large as the engine's chunks), else buffers of the engine's own, grown to the
// largest such need. Only the hooks' norm rules call it.
func (e *Engine) workerBufs(size int) ([][]float32, error) {
	workers := e.ops.Workers()
	if e.plan != nil && !wsBufsOff && workers*size <= len(e.plan.Scratch()) {
		ws := e.plan.Scratch()
		if len(e.wsBufs) != workers {
			e.wsBufs = make([][]float32, workers)
		}
		for w := range e.wsBufs {
			e.wsBufs[w] = ws[w*size : (w+1)*size : (w+1)*size]
		}
		return e.wsBufs, nil
	}
	bufs := e.normScratch
	if len(bufs) < workers || len(bufs[0]) < size {
		// The outgrown scratch goes back first: on a GPU it is device
		// memory until freed, and the first step grows it layer by layer
		// (on ResNet-50 at 4 samples, 84 MB left behind beside the 30 MB
		// kept). Every user takes the buffers anew per layer.
		for _, b := range bufs {
			if err := runtime.FreeFloats(e.dev, b); err != nil {
				return nil, fmt.Errorf("dpengine: releasing outgrown norm scratch: %w", err)
			}
		}
		e.normScratch = nil
		bufs = make([][]float32, workers)
		for w := range bufs {
			b, err := e.alloc(size, "per-worker norm scratch")
			if err != nil {
				return nil, err
			}
			bufs[w] = b
		}
		e.normScratch = bufs
		e.normScratchPeak = max(e.normScratchPeak, int64(workers)*int64(size))
	}
	return bufs, nil
}

// wsBufsOff, set only by tests, keeps workerBufs off the plan's
// workspace (and fitWorkspace from fitting chunks to it).
var wsBufsOff bool

// fitWorkspace returns nb, a batched rule's chunk of samples (per floats
// of scratch each beside fixed of its own), lowered so that the rule's
// scratch fits the plan's workspace where that is at least half of
// batchedScratch and holds one sample: workerBufs then takes it from the
// workspace rather than a buffer of the engine's own. On ResNet-50 at
// batch 32 the workspace is 63.5 MB (the convolutions' chunks of unfolded
// columns) and the first convolution's chunk of nine unfolded samples
// about 67 MB: eight at a time fit, and no buffer of 67 MB lies beside
// the workspace. The results are the same: each sample's work does not
// depend on its chunk.
func (e *Engine) fitWorkspace(nb, fixed, per int) int {
	if e.plan == nil || wsBufsOff {
		return nb
	}
	ws := len(e.plan.Scratch())
	if ws < batchedScratch/2 || per <= 0 {
		return nb
	}
	if k := (ws - fixed) / per; k >= 1 && k < nb {
		return k
	}
	return nb
}
