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
// Convolutions take one of four paths, chosen from the shape at Init and
// the workspace given: depthwise ones slide their taps directly
// (depthwise.go); maps of 256 positions or more unfold one sample at a
// time (im2col, one GEMM a sample); smaller maps unfold chunks of samples
// side by side (one GEMM a chunk, conv.go); and maps where a quarter or
// more of the dense product is padding (ResNet's last stages on 32×32
// inputs) group the output positions by the taps that reach the input and
// multiply over those taps only (conv_taps.go).
//
// For differential privacy the package exposes the per-sample unfolded
// convolution input (Im2Col, Im2ColPlane) and depthwise per-sample weight
// gradients (DepthwisePerSampleGrad): the DP engine builds per-sample ghost
// norms and per-sample gradients from them (DESIGN §3).
package kernels
