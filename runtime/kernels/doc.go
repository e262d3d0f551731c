// Package kernels owns the float32 CPU compute kernels of the runtime: the
// forward and backward (gradient with respect to every float input) of each
// ONNX operator the engine supports, on flat row-major slices with explicit
// shape parameters.
//
// Conventions, in the style of gonum:
//   - shapes are passed explicitly; tensors are dense row-major []float32;
//   - outputs, gradients and workspaces are provided by the caller, so that
//     no kernel allocates in the hot path (sizes come from functions such as
//     ConvWorkspaceSize; a few small per-call index slices are the exception
//     and are noted where they occur);
//   - backward kernels overwrite their gradient outputs (they do not
//     accumulate) and a nil gradient output is skipped;
//   - inconsistent shapes or short slices are programming errors and panic;
//     data-dependent errors (an out-of-range Gather index or class label) are
//     returned as errors.
//
// Work is split over Workers() goroutines (blas.Threads(), GOMAXPROCS by
// default) by batch sample, channel plane or contiguous range, with static
// partitions so that results are bitwise reproducible for a given worker
// count. Matrix products go through package blas.
//
// For differential privacy the package exposes the per-sample unfolded
// convolution input (Im2Col, Im2ColPlane) and depthwise per-sample weight
// gradients (DepthwisePerSampleGrad): the DP engine builds per-sample ghost
// norms and per-sample gradients from them (DESIGN §3).
package kernels
