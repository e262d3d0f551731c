package runtime

import "fmt"

// DPOps is the DP part of the device operation set: every operation the DP
// engine (package dpengine) performs outside the compiled forward and
// backward passes — per-sample norms, per-sample gradients, their clipped
// sums and the optimizer update (DESIGN.md §3–§5, §8). The engine calls
// nothing else to compute, so a backend that implements DPOps runs the
// whole DP step; no package above runtime imports runtime/kernels or
// runtime/blas.
//
// The operations are grouped by file, one interface per group, so that a
// backend is one file per group: LinalgOps (device_linalg.go), PerSampleOps
// (device_dp.go) and OptimOps (device_optim.go). CPU implements them with
// the kernels of runtime/kernels and runtime/blas, one call each, with no
// copy and no allocation.
//
// Operands are host slices today, as the plan's buffers are (Buffer is a
// host slice on the CPU): the next step towards a GPU backend replaces them
// with device buffers (docs/ROADMAP.md). Sizes are the caller's contract:
// like the kernels, an operation panics on short slices or inconsistent
// sizes, which the engine rules out when it compiles a plan.
type DPOps interface {
	LinalgOps
	PerSampleOps
	OptimOps
	// Workers is the number of goroutines the device's operations split
	// work over; the engine runs that many samples at once, each on its
	// own scratch, with the serial operations (GemmSerial, …).
	Workers() int
}

// DPOpsOf returns the DP operations of d (nil is the CPU), or an error
// naming the device if it has none.
func DPOpsOf(d Device) (DPOps, error) {
	if d == nil {
		return CPU{}, nil
	}
	ops, ok := d.(DPOps)
	if !ok {
		return nil, fmt.Errorf("runtime: device %s does not implement the DP operations (runtime.DPOps)", d.Name())
	}
	return ops, nil
}

var _ DPOps = CPU{}
