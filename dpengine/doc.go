// Package dpengine turns a compiled model into differentially private
// training: Poisson sampling into logical and physical batches, per-sample
// gradient norms (ghost norm or instantiation, layer by layer), clipping,
// Gaussian noise once per logical batch, DP optimizers and privacy
// accounting.
//
// Package dpengine imports only packages to its left in the data flow:
// onnx, graph, rewrite and runtime.
package dpengine
