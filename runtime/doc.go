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
// DP part of the device operation set (DESIGN.md §8): the GEMMs of ghost
// norms, per-sample instantiation and book-keeping's clipped sums, the
// elementwise ops of the per-sample rules, the per-sample convolution ops
// and the Adam update, one interface per group, one file per group
// (device_linalg.go, device_dp.go, device_optim.go; DPOpsOf in
// device_ops.go). The DP engine computes through DPOps only, so no package
// above runtime imports kernels or blas (internal/archtest checks it).
//
// The CPU is the worked example of a backend: CPU implements Device and
// DPOps, each operation one call of a kernel. A backend implements the same
// interfaces and registers an opener under its name (devices.go).
//
// What is still host-slice based: the forward and backward kernels are CPU
// closures (CPUKernel) compiled by this package, every Buffer is a host
// slice, the DP operations take []float32, and the engine's own scalar
// passes (clip factors, the noise, SGD, scaling and sums of per-sample
// gradients) run on the host. The next step is device buffers: operations
// on Buffers, the plan compiled to device operations (docs/ROADMAP.md).
//
// Package runtime imports only packages onnx, graph and rewrite, and its
// own subpackages kernels and blas.
package runtime
