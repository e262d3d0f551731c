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
// liveness over the timeline forward → loss → backward (greedily, in a few
// orders, the smallest arena kept): an activation lives until the last
// node that reads it, forward or backward (only the inputs or outputs a
// node's backward actually reads are kept), a gradient from its
// first contribution to its producer's backward. Some buffers are shared
// outright: a reshape's output is its input's buffer, and in the backward
// its input's gradient is its output's (or its output gradient is added
// straight into the input's), as an Add's first operand's gradient is the
// sum's and an elementwise operator's input gradient overwrites its output
// gradient where that dies there. Attention's probabilities
// are the exception: a Softmax of a MatMul's product (through one scaling
// by a constant at most) read only by MatMuls is recomputed, MatMul to
// Softmax, just before the backward of its last reader, from the q and k
// their MatMul's backward keeps anyway, rather than kept through the
// whole backward (their buffers are live twice, another's in between) —
// by default on a device with memory of its own, where memory bounds the
// batch; Options.Probabilities chooses. A caller's hook buffers
// (Options.HookBuffers: the DP engine's large per-sample gradients) are
// arena buffers too, live from their node's hook to the next Forward, as
// are the values it names in Options.KeepValues (Plan.Value; a
// normalization's row statistics are its node's own, Plan.NormStats).
// Nothing is allocated per step by
// the plan itself (see TestSteadyStateAllocations for what the kernels
// allocate).
//
// # Fusion
//
// Compile runs some decomposed operator chains as single nodes, without
// changing the graph: the LayerNorm normalization torch 1.13 exports as
// ReduceMean → Sub → Pow → ReduceMean → Add → Sqrt → Div (its Mul(γ) and
// Add(β) stay separate nodes, hooked as before), the exact and tanh GELU
// chains, Slices that split one value into disjoint parts along one axis
// (the q, k, v of a packed attention projection), and the Transposes (and
// the query's scaling) around an attention's batched products — a
// sequence-first export's, and the key's last-two-axes swap of a timm
// one — which read and write through the product's row pitch and item
// stride instead (fuse_matmul.go: no parameter is read there, so no
// hook). A chain fuses only
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
// gradients (book-keeping and ghost-norm passes compute their own) and
// those of values computed from parameters alone, whose nodes' backward
// (and hooks) it skips with them, and
// Options.KeepActivations allows a second Backward after one Forward.
//
// Exporters store equal-valued parameters once and read the copies through
// Identity nodes; call graph.UntieIdentityParams before compiling so that
// each parameter is read directly by the operator that uses it (otherwise
// the hook fires on the Identity).
//
// # Devices and the operation set
//
// A Device holds a plan's buffers and runs its compiled nodes (Compile's
// Options.Device; OpenDevice opens one by its --device name). What a
// training step computes is one named operation set, Ops (DESIGN.md §8;
// docs/ARCHITECTURE.md), one interface per group and one file per group:
//
//   - GraphOps (device_graph.go), what the compiled forward and backward
//     passes and the loss head perform: LinalgOps (device_linalg.go: GEMMs,
//     strided-batched GEMMs, broadcasting binary ops), LayoutOps
//     (device_layout.go: copies, index maps, transposes, concatenation),
//     NNOps (device_nn.go: convolutions, pooling, normalizations, LRN),
//     ElementwiseOps (device_elementwise.go: activations and their
//     derivatives) and ReduceOps (device_reduce.go: reductions, softmax,
//     the cross-entropy head). Compile requires them of its device
//     (GraphOpsOf), and a compiled node's closures touch tensor data only
//     through them.
//   - DPOps (device_ops.go), what the DP engine computes outside the
//     passes: LinalgOps; PerSampleOps (device_dp.go: per-sample
//     convolution unfolding and weight gradients); VectorOps
//     (device_vector.go: per-sample squared norms, the ghost norm's inner
//     product, scalings by clip factors, sums); ClipOps (device_clip.go:
//     the factors C_i); OptimOps (device_optim.go: SGD, Adam, AdamW, the
//     parameters' moving average); and
//     NoiseOps (device_noise.go: runtime/noise's keyed counter-based
//     Gaussian noise).
//
// Operands are []float32 views of device buffers (Buffer.Floats): host
// memory on the CPU and the reference backend, device memory that only the
// device's operations dereference on an accelerator. Float initializers are
// adopted by the device at compile time (AdoptHost: the same memory on a
// host device, a copy elsewhere; Plan.SyncParams and Plan.LoadParams move
// parameters between the device and the graph's initializers), and the
// engine allocates its step state from the device.
//
// Backends: CPU (this package; each operation one call of a kernel of
// runtime/kernels or runtime/blas, no allocation per step) is the product
// device and the worked example; runtime/reference is the float64
// reference backend the tests hold the others to; runtime/cuda is the CUDA
// backend, tested through its emulation. A backend implements the groups
// and registers an opener under its name (devices.go). No package above
// runtime imports kernels or blas, and the reference backend imports
// neither (internal/archtest checks both).
//
// Package runtime imports only package graph, its own subpackages kernels,
// blas and noise, and internal/sysmem and internal/workers; backends that
// live in subpackages (runtime/reference, runtime/cuda) import runtime,
// never the other way round (they register with RegisterDevice).
package runtime
