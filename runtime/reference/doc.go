// Package reference is the reference backend of the device operation set
// (runtime.Ops, DESIGN.md §8): every operation in the plainest Go, computed
// in float64 from the float32 operands and rounded once to float32 on the
// way out, one goroutine, no blocking, no assembly, and no code shared with
// the CPU backend (it imports neither runtime/kernels, runtime/blas nor
// runtime/noise — its noise is written from runtime/noise/doc.go's
// specification; internal/archtest checks it).
//
// It exists to be different from the CPU backend: the engine and the plans
// run unchanged on it, and the tests hold the CPU backend — and the CUDA
// backend's emulated kernels — against it on every fixture (per-sample
// norms, clipped gradients, updates, logits, losses). It is slow; it is a
// test oracle, not a product device.
//
// The files follow runtime's groups: device.go (buffers, copies, kernels),
// linalg.go (runtime.LinalgOps), and one file per further group.
package reference
