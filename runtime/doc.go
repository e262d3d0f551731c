// Package runtime compiles a graph into an executable plan and runs its
// forward and reverse-mode backward passes in float32, behind a device
// interface (allocate, copy, run a kernel) that a CUDA backend can implement
// beside the CPU one.
//
// Package runtime imports only packages onnx, graph and rewrite.
package runtime
