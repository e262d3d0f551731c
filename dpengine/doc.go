// Package dpengine turns a compiled model into differentially private
// training: Poisson sampling into logical and physical batches, per-sample
// gradient norms (ghost norm or instantiation, layer by layer), clipping,
// Gaussian noise once per logical batch, DP optimizers and privacy
// accounting.
//
// Per-sample rules. What the engine computes where a parameter meets the
// batch depends on the consumer operator only, and each operator's rule
// lives in its own file, registered by op type (rules.go): rule_conv.go
// (Conv weights and biases), rule_matmul.go (Gemm and MatMul weights, Gemm
// biases), rule_elementwise.go (Add, Sub, Mul, Div), rule_concat.go
// (Concat), rule_norm.go (LayerNormalization, GroupNormalization and
// InstanceNormalization scale and bias) and rule_einsum.go (an Einsum
// weight: a grouped linear layer read through index maps). A linear rule computes each
// sample's ghost norm or instantiated gradient, and book-keeping's
// weighted sum; an elementwise rule gives a sample's gradient with respect
// to one operand. The planner registers its classification of the same
// operator in package rewrite (consumers.go). Supporting a new consumer is
// one rule file here, its consumer rule there, and their tests.
// A weight that reaches its consumer through layout-only operators
// (Transpose, Reshape, Slice of a packed tensor, …) gets its per-sample
// gradient mapped back through an index map built once (path.go).
//
// Device. The engine computes through Config.Device (nil: the CPU): the
// plan's forward and backward kernels, and every GEMM, per-sample
// convolution op, elementwise rule op and Adam update of the DP step
// through the device's runtime.DPOps. It never calls runtime/kernels or
// runtime/blas (internal/archtest fails if a package above runtime does).
// Its own scalar passes over host slices (clip factors, the noise, SGD, the
// scaling and sums of per-sample gradients) are not device operations yet.
//
// Package dpengine imports only packages to its left in the data flow:
// onnx, graph, rewrite and runtime.
package dpengine
