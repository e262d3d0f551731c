// Package runtime compiles a graph into an executable plan and runs its
// forward and reverse-mode backward passes in float32, behind a device
// interface (allocate, copy, run a kernel) that a CUDA backend can implement
// beside the CPU one.
//
// # Compiling
//
// Compile takes a graph whose values all have static shapes (run
// graph.InferShapes on a clone for a concrete batch, or call
// CompileForBatch, which does both). Each node gets a forward and a backward
// kernel; an operator without one is a compile-time error naming every such
// node. Supported operators are listed by SupportedOps, each with the opset
// versions it implements (Opsets). CheckOps looks at a freshly loaded graph,
// before any work, and lists every node of another domain, of an operator
// nothing runs, or of an opset outside its kernel's range; the commands call
// it first (docs/OPERATORS.md is generated from these tables).
//
// Buffers: every activation, gradient and accumulation scratch buffer is a
// slice of one arena allocated at compile time. Offsets are assigned by
// liveness over the timeline forward → loss → backward: an activation lives
// until the last node that reads it, forward or backward (only the inputs or
// outputs a node's backward actually reads are kept), a gradient from its
// first contribution to its producer's backward. Nothing is allocated per
// step by the plan itself (see TestSteadyStateAllocations for what the
// kernels allocate).
//
// # Fusion
//
// Compile runs some decomposed operator chains as single nodes, without
// changing the graph: the LayerNorm normalization torch 1.13 exports as
// ReduceMean → Sub → Pow → ReduceMean → Add → Sqrt → Div (its Mul(γ) and
// Add(β) stay separate nodes, hooked as before), the exact and tanh GELU
// chains, and Slices that split one value into disjoint parts along one
// axis (the q, k, v of a packed attention projection). A chain fuses only
// when its intermediate values are invisible outside it: each read only
// inside the chain, no graph output, no parameter, and no node of it
// hooked. Options.NoFusion turns this off.
//
// # Running a training step
//
//	p.SetInput(0, x)                 // (N, C, H, W)
//	p.Forward()
//	p.Loss(labels, losses)           // per-sample softmax cross-entropy
//	p.Backward(w, &BackwardOptions{Hook: h})
//	p.Grad(name)                     // Σ_i w_i ∇loss_i, summed over the batch
//
// Backward seeds dL/dlogits for Σ_i w_i·loss_i (w nil means all ones; the
// DP engine passes clip factors). Trainable parameters are every float
// initializer that reaches the output through a differentiable input, or
// Options.Trainable; parameter data is the initializer's own storage, so an
// optimizer updates it in place (Param).
//
// # Hooks for differential privacy
//
// BackwardOptions.Hook is called for every node that reads a trainable
// parameter (or a value computed from parameters only: HookEvent.Derived),
// when the node's output gradient is complete and before any of its buffers
// are reused. The event carries the node's input activations, its output
// gradient and, for Conv, its geometry (ConvShape, for DPOps.Im2ColPlane). Each View says
// where the samples are (BatchAxis, BatchStride): usually the leading axis,
// but nn.MultiheadAttention exports run their projections on (T, B, D) and
// (T·B, D) tensors. BackwardOptions.SkipParamGrads skips the parameter
// gradients (book-keeping and ghost-norm passes compute their own), and
// Options.KeepActivations allows a second Backward after one Forward.
//
// Exporters store equal-valued parameters once and read the copies through
// Identity nodes; call graph.UntieIdentityParams before compiling so that
// each parameter is read directly by the operator that uses it (otherwise
// the hook fires on the Identity).
//
// # Devices and the DP operation set
//
// A Device holds a plan's buffers and runs its kernels (Compile's
// Options.Device; OpenDevice opens one by its --device name). DPOps is the
// DP part of the device operation set (DESIGN.md §8), one interface per
// group, one file per group: the GEMMs of ghost norms, per-sample
// instantiation and book-keeping's clipped sums, and the elementwise ops
// of the per-sample rules (LinalgOps, device_linalg.go); the per-sample
// convolution ops (PerSampleOps, device_dp.go); per-sample squared norms,
// the ghost norm's inner product, scalings by clip factors, sums of
// per-sample gradients, bias and index-map sums (VectorOps,
// device_vector.go); the clip factors C_i (ClipOps, device_clip.go); the
// SGD and Adam updates (OptimOps, device_optim.go); and the Gaussian
// noise, drawn from runtime/noise's keyed counter-based generator under
// the key and step the engine picks (NoiseOps, device_noise.go). DPOpsOf
// is in device_ops.go. The DP engine computes through DPOps only, so no
// package above runtime imports kernels or blas (internal/archtest checks
// it), and every number of a DP step outside the compiled forward and
// backward passes comes from a named device operation.
//
// The CPU is the worked example of a backend: CPU implements Device and
// DPOps, each operation one call of a kernel. A backend implements the same
// interfaces and registers an opener under its name (devices.go).
//
// What is still host-slice based: the forward and backward kernels are CPU
// closures (CPUKernel) compiled by this package, every Buffer is a host
// slice and the DP operations take []float32. Left on the host: the
// engine's bookkeeping (Poisson sampling, the counts of clipped and
// non-finite samples, which read the factors back, canaries) and data
// movement (gathering a sample of a batched operand). The next step is device buffers: operations
// on Buffers, the plan compiled to device operations (docs/ROADMAP.md).
//
// Package runtime imports only packages onnx, graph and rewrite, and its
// own subpackages kernels and blas.
package runtime
