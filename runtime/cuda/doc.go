// Package cuda is the CUDA backend of the device operation set
// (runtime.Ops, DESIGN.md §8; issue 14): a runtime.Device whose buffers are
// GPU memory and whose operations are CUDA C kernels, loaded at run time
// with purego — no cgo in the binary (CGO_ENABLED=0 builds keep working)
// and no CUDA toolkit at build time.
//
// # Driver
//
// Everything the backend asks of the GPU goes through Driver (driver.go), a
// small interface: memory (Alloc, Free, the three copies), modules
// (LoadModule compiles a CUDA C source, Function looks a kernel up),
// Launch with CUDA's argument packing (Args: an array of pointers, one per
// argument value), Gemm (batched row-major SGEMM, GemmArgs) and
// Synchronize. It has two implementations:
//
//   - the real driver (nvidia.go): libcuda.so.1 (the driver API: cuInit,
//     the primary context of the GPU asked for — RealDevice's ordinal,
//     --device cuda:N, among those the driver shows, 0 for --device
//     cuda —, cuMemAlloc, cuMemcpy*, cuModuleLoadData, cuLaunchKernel)
//     and NVRTC (libnvrtc.so, .so.13, .so.12), which
//     compiles each kernel source for the device's architecture at first
//     use with --fmad=false (a cubin for sm_XY; PTX for the newest
//     compute_XY below it when that NVRTC does not know the device, which
//     the driver then compiles); the result is cached on disk under the
//     hash of the source, the options, the NVRTC and driver versions and
//     the architecture (os.UserCacheDir()/dpfinetune/cuda, or EnvCache).
//     The GEMMs are cuBLAS's (libcublas.so.13, .12, or EnvCUBLAS), on the
//     default stream as the kernels. Convolutions run through cuDNN
//     (cudnn.go: libcudnn.so.9 or .8, or EnvCUDNN; "off" leaves it out)
//     where it is found: its legacy convolution API, one plan of
//     descriptors per shape, an algorithm by its measurement (kept on
//     disk) or heuristics per product — a deterministic one unless the
//     run allows others (SetDeterministic, EnvCUDNNDeterministic) —,
//     CUDNN_FMA_MATH for float32 and CUDNN_TENSOR_OP_MATH for
//     TF32 (never for weight gradients). It is optional (Driver.Conv's
//     ErrNoConvLibrary): without it, and for a shape it refuses (padding
//     that differs between an axis's ends) or fails, the Device runs its
//     own GEMM path below. NVRTC and cuBLAS are looked for on
//     the loader's path, then where a pip-installed PyTorch keeps them
//     (site-packages/nvidia/*/lib of a virtualenv, conda, ~/.local or the
//     system Pythons) and under /usr/local/cuda*, their companions
//     (libcublasLt, libnvrtc-builtins) loaded from the same directory
//     (libraryDirs). cuBLAS is column-major, so a
//     row-major C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ on the
//     same memory (operands and sizes swapped); a batch is
//     cublasSgemmBatched on device arrays of the products' addresses,
//     since cublasSgemmStridedBatched's 18 arguments exceed the 15 that
//     purego.SyscallN passes. The Device writes those arrays with a
//     kernel (gemm_ptrs, GemmArgs.Ptrs) in stream order, so that no host
//     copy waits for the device between a step's kernels.
//   - the emulation (emulate.go): the same kernel sources, compiled by the
//     host's g++ against emu/cuda_emu.h into a shared library (cached the
//     same way under cuda-emu/) and loaded with purego.Dlopen. The header
//     defines the CUDA built-ins the kernels use — threadIdx, blockIdx,
//     blockDim, gridDim, __shared__, __syncthreads, the atomics, the warp
//     shuffles, the bit casts — and a launcher per kernel that runs the
//     grid's blocks one after another, a block's threads as real threads
//     (a pool kept from launch to launch) with barriers; its comment lists the restrictions the kernels follow
//     (all of them CUDA's own rules). Barriers are its main cost, so
//     common.cuh's warp_sum, five shuffles on a GPU, is one exchange there
//     (CUDA_EMU, emu_warp_sum: the same tree, bit for bit, TestEmuWarpSum).
//     Device memory is C memory outside
//     the Go heap. It is selected with DPFINETUNE_CUDA=emulate (Open) and
//     is what the tests run on a machine without a GPU. Its Gemm is the
//     CPU's SGEMM (runtime/blas) over the emulated memory. Its guarded
//     form (EmulatedGuarded, DPFINETUNE_CUDA=emulate-guarded; emuguard.go)
//     keeps device memory in one reserved mapping that is inaccessible
//     but during the driver's own calls: a host read of a device value,
//     which the plain emulation lets pass and a GPU faults on, faults
//     there too, with the reader's stack. This package's tests, the DP
//     engine's operator-rule tests, dptrain's TestRunOnCUDA and the CLI's
//     CUDA tests run on it; the engine tests that read device buffers in
//     place keep the plain emulation.
//
// Both compile without contracting a·b + c into an FMA (-ffp-contract=off,
// --fmad=false) and without fast math, so that float arithmetic rounds
// each operation alone on both: the optimizer's update and the noise are
// the CPU's bit for bit on the emulation, and so on the GPU.
//
// # Kernel sources
//
// kernels/<group>.cu holds the kernels of one operation group (vector.cu:
// runtime.VectorOps, clip.cu: ClipOps, optim.cu: OptimOps, noise.cu:
// NoiseOps, linalg.cu: LinalgOps but the GEMMs and Binary, persample.cu:
// PerSampleOps, layout.cu: LayoutOps, elementwise.cu: ElementwiseOps and
// LinalgOps.Binary, nn.cu: NNOps, reduce.cu: ReduceOps), embedded in the
// binary; kernels/common.cuh holds what several modules share (FOR_EACH,
// WARP_FOR_EACH and warp_sum, Layout, d_exp and d_log) and is put before every module's source when
// it is loaded (moduleSource), so that each module still compiles alone
// and both drivers' cache keys cover the header. Kernels are
// extern "C" __global__ functions, found by name (KernelNames); NVRTC gets
// a short prelude first (the fixed-width integer types, DYN_SHARED), the
// emulation its header. Elementwise kernels are grid-stride loops on
// blocks of up to 256 threads (32 on the emulation, whose block threads
// are real threads), the grid capped at 16 blocks per multiprocessor.
// Sums whose order the contract fixes run that order, so that they are
// the CPU's bit for bit. The float64 norms and dot products (SumSq,
// SquaredNorms, Dot, and AddSumSq, AddDot, AddDots, AddSumSqProduct
// accumulated into device slots) are in the lane order of
// runtime/lanesum.go, which a warp follows: a warp per chunk of 2048
// terms, lane l summing terms l, l + 32, …, the lanes combined by
// warp_sum's halves (lane_chunks), then a thread per result adding the
// chunks in order (lane_finish). NormAffineSampleGrad's sums are a thread
// per parameter element, each in the order of the rows. AddRunSums's
// float32 sums follow the lane order too (runtime.SumLanes32), a warp per
// run.
// SumRows and AddScaledRows row after row, ScatterAdd in index order,
// Contract's float64 sums and ClipOps.CountClipped run on one thread per
// result, parallel across results only.
//
// The noise kernel (noise.cu) is runtime/noise's specification (its
// doc.go) in CUDA C: AES-128 (S-box computed on the host from its
// definition, key schedule on the device once a key), one thread per
// domain-0 counter block (four elements), the ziggurat's tables copied
// from noise.Tables, and the slow path's wedge test through expf and the
// tail through ln, both ported from noise/mathf.go operation by
// operation. TestNoiseMatchesCPU holds it to runtime.CPU, noise.Reference
// and the reference backend bit for bit.
//
// The graph's and the per-sample operations are one thread per element
// written, a reduction summed in double in a fixed order and rounded once,
// so that no atomics decide a result: by that element's thread where it
// has few terms, by a warp (WARP_FOR_EACH or LANES_FOR_EACH, lane l taking
// terms l, l + 32, …, warp_sum) where it has many — ReduceToShape's
// elements and the normalizations' statistics from 64 terms on
// (reduceWide; a block per row from 8192 terms, launchRows, block_sum's
// fixed tree; a ReduceToShape that keeps x's innermost axis stays a
// thread per element when its elements fill the device, each warp then
// reading consecutive addresses), a bias's channel sums, the direct
// kernels' weight gradients. Convolutions go to cuDNN where the driver
// has it (dnnConv; the stand-in's cuDNN holds the binding to the CPU,
// TestConvLibraryOnFake) — for a shape the GEMM path takes too, cuDNN or
// the GEMM path, whichever this machine measured faster for the shape and
// product at its first use, kept on disk beside cuDNN's algorithms
// (libOrGEMM, EnvCUDNNGEMM, TestConvPathOnFake: an H100's profile put a
// few hundred microseconds of host time in some of cuDNN's legacy calls,
// more than a small product's device time), its algorithms' workspace
// bounded by EnvCUDNNWorkspace (a sixteenth of the device's memory, at
// most 4 GiB; beyond 256 MiB only for a 1.25× faster product, pickAlgo)
// and taken from the workspace the caller passes (the plan's: lend,
// ConvArgs.Work) where that is large enough, so that the driver's own
// grows only for the algorithms that need more (TestConvLibraryLentWorkspace)
// — else they are GEMMs
// (conv.go): per group,
// a chunk of samples' unfolded inputs (conv_unfold, D × nb·T in the
// scratch ConvScratchSize reports) times the weight in one batched
// cuBLAS call, the input gradient Wᵀ·dy batched the same way and folded
// back (conv_fold, gathering each input element's taps), the weight
// gradient one GEMM over the chunk's positions with the output gradient
// packed beside the unfolded input (conv_pack_out), β = 1 across chunks;
// pointwise convolutions read x and write dx in place. The unfoldings
// (conv_unfold, and im2col for the per-sample norms) run a warp per
// segment of a row's positions, the row's channel and tap divided out
// once a segment, a lane's position in 32 bits. A convolution's
// per-sample gradients (the engine's instantiated layers) come from
// cuDNN's filter gradient of the samples as groups
// (ConvSampleWeightGrads) or from the engine's unfolding path, whichever
// this machine measured faster per sample at the shape's first use
// (PreferSampleGrads), kept on disk beside the other choices under
// "per-sample " keys (TestPreferSampleGrads). A ghost-norm
// convolution's a_i a_iᵀ comes from its input's Gram where that is
// cheaper than the unfolding (ConvTapGrams, conv_tap_grams: a thread per
// Gram element summing its taps, after one batched GEMM of S×S×C).
// Depthwise and
// narrow convolutions (D < 16 or fewer than 8 output channels per group)
// keep the direct kernels (conv_fwd, conv_dx, conv_dw), whose few terms
// per element cost less than a GEMM's launch; TestConvPaths runs every
// shape on both paths. Their values, not the CPU's bits, are the
// contract: the tests hold them to the reference backend and the
// CPU within a tolerance. Activations compute in double with CUDA's math
// library, whose functions contain fused multiply-adds by design
// (elementwise.cu is the one module TestNVRTCNoFMA exempts, mathModules).
//
// Compile-time parameters reach the kernels two ways. Shapes are
// by-value kernel arguments built per call on the host: a broadcast or a
// permutation as Layout (linalg.go's iterLayout: unit axes dropped,
// axes contiguous in every operand merged, at most 8, the threads' axes
// before a reduction's), a convolution's geometry as ConvGeom
// (persample.go), RowBlocks as a launch per part — nothing to keep. An
// IndexMap, whose element map can be large, is copied to the device at
// its first use with its adjoint's inverse (each source element's
// readers, in order) and kept keyed by the map's pointer until Close:
// plans are read-only and live as long as the plan (layout.go).
//
// NNOps and ReduceOps (nn.cu, reduce.cu) follow the same rules: a
// thread (or warp) per element written, statistics a thread or a warp per
// channel or row (launchLanes) kept in float64 scratch for the
// elementwise pass; a gradient that
// several outputs feed (a convolution's or pooling's input) is gathered
// by the input element's thread over the window positions that read it;
// ScatterReduce runs in order on one thread; ReduceSum and ReduceMean sum
// in float32, as their contract says. exp and log are written out in
// double there (common.cuh's d_exp, d_log: a Taylor series after range
// reduction, atanh's series), so that those modules keep no FMA (TestNVRTCNoFMA);
// TestExpLog holds them to Go's math within a float32 ulp.
//
// Their compile-time plans reach the kernels a third way: as device
// copies made at first use and kept on the Device until Close, keyed by
// the plan's pointer (planCopy; the map keeps the plan alive, so that no
// other plan reuses the address while its copy is cached): a
// convolution's or pooling's geometry (ConvShape, PoolShape: sizes and
// each axis's window, lifted to three axes, as int32s, one copy per plan
// rather than an argument per call) and a row normalization's parameter
// table (NormRows: the parameter of element j of row r is row_off[r] +
// col_off[j], checked for every element when the table is built, with
// each column offset's columns listed for the parameter gradients).
// GemmBias's and a reduction's shapes go to the device at their first
// use, one copy per distinct pair of shapes (stageShapes).
//
// # Device and operands
//
// Device is the runtime.Device: Alloc returns device memory, and a
// buffer's Floats is a []float32 view of it (unsafe.Slice over the device
// address; only the device's operations dereference it). An operation
// passes an operand that lies in the Device's memory to its kernel as it
// is and stages any other slice — host memory, such as a compile-time
// index map, a loop nest or a host scalar (the engine's norms, factors and
// counts are device memory) — through a scratch area, copying it back if
// written.
// Under unified addressing the two kinds of address never coincide; under
// emulation device memory is C memory, apart from Go's.
//
// # Precision
//
// Every product is float32 (cuBLAS's default math mode, which never trades
// mantissa bits), the norms summed in float64, unless SetTF32 turns on
// TF32 for the GEMMs of convolutions' forward passes and input gradients
// (runtime.TF32Device, --tf32): GemmArgs.TF32, which the driver turns into
// cublasSetMathMode(CUBLAS_TF32_TENSOR_OP_MATH) for those calls and the
// emulation into operands rounded to TF32. Weight gradients and every
// other product stay float32; docs/PRIVACY.md says why the clip bound then
// still holds, and why dpengine refuses TF32 in ghost and mixed modes. The
// tensor cores read 16 bytes at a time, and a batched call's addresses lie
// in device memory where cuBLAS cannot check them: a batch of TF32
// products runs on a 16-byte-aligned copy of a misaligned shared weight,
// or in float32 (alignForTF32); the emulation faults on a misaligned one,
// as an H100 did.
//
// # Tests
//
// go test ./runtime/cuda/ runs on the emulation (skipping when there is no
// g++): the header's built-ins through test kernels (testdata/emu_test.cu),
// every operation against runtime.CPU bit for bit and against the
// reference backend, with host and device operands and sizes 0, 1 and
// around the block and grid sizes, the noise bit for bit, the Driver's
// errors (compile errors with the compiler's log, bad launches, copies out
// of bounds) and the real driver's error without libcuda.so.1. The real
// driver's own code runs too, on testdata/fakecuda.c: a stand-in for
// libcuda.so.1 and NVRTC built with gcc (DPFINETUNE_LIBCUDA and
// DPFINETUNE_NVRTC point the driver at it), with the entry points' C
// signatures over host memory, that checks the current context on each
// call and NVRTC's options and runs the "cubin" (the source) on the
// emulation: every operation and the noise are the CPU's bit for bit
// through it. Where NVRTC itself is at hand (DPFINETUNE_NVRTC, no GPU
// needed), TestNVRTCCompiles compiles every kernel source with it and
// TestNVRTCNoFMA finds no fused multiply-add in their PTX. With
// DPFINETUNE_CUDA=gpu the tests run on the GPU's driver.
//
// Whole computations run on the emulated Device too: TestPlanOnCUDA
// compiles every fixture of testdata/models, fused and unfused, and holds
// its logits, per-sample losses and gradients to the reference backend's
// (runtime/reference's metric and bound); dpengine's TestEngineOnCUDA runs
// the DP engine on cnn and vit in bk and ghost modes against the CPU's
// (norms, clipped sums, and a noisy step's gradients, parameters and
// updates); cmd/dpfinetune's TestNormsCUDAEmulated runs dpfinetune norms
// --device cuda. runtime.OpenDevice("cuda") opens the Device (register.go:
// this package's init registers it, and the binary imports the package).
//
// # Profile
//
// DPFINETUNE_CUDA_PROFILE=1 (EnvProfile) times every operation and kernel
// alone, the device waited for before and after each, and Close writes
// the table — per operation and per kernel: calls, total, share, longest
// call — with the convolution library's products and refusals to standard
// error (profile.go). The waits slow the step down; the table says where
// its time goes. scripts/gpu-check.sh's profile part runs it on the suite.
// It found the first real GPU's worst step: a per-channel scale's gradient
// over a batch of feature maps summed by one thread per channel (193 ms a
// call on ResNet-50), now a block per result where the terms are many
// (launchSums, block_sum).
//
// DPFINETUNE_CUDA_PEAK=1 (EnvPeak) keeps the allocations the Device held
// at its memory peak, each with the code that asked for it, and Close
// writes them summed by asker, with the convolution library's workspace
// (peaklog.go; gpu-check's bench part records bk's on ResNet-50): the
// emulation's record of ResNet-50's bk step is what moved its per-sample
// gradients into the plan's arena.
//
// # What remains (issue 14)
//
//   - Speed. On an H100 (docs/BENCHMARKS.md, fifth loan) the whole test
//     suite passes and the norms equal the CPU's; book-keeping's step is
//     1.05× (VGG-16) and 0.99× (VGG-19/CIFAR) PyTorch's non-DP step, the
//     target (1.2×) met, and 1.24× (ResNet-50), 1.35× (ViT-B/16) not yet
//     (the fourth loan: 1.49×, 1.43×; the changes below are in those
//     figures, timed together), its peak memory within 1.1× of PyTorch's
//     on all four. At the fourth loan
//     ResNet-50's profile put a bk step's time in the convolutions
//     (≈ 32 ms of 79 profiled), GroupNorm (≈ 17 ms: forward, backward,
//     the per-sample γ/β sums) and the norms' GEMMs and unfolding; ViT-B/16's
//     in its GEMMs (101 of 141 ms), where nondp is already 1.21× PyTorch's
//     step. The loan found nondp's GroupNorm γ/β gradient summed by one
//     lane (row_param_grads, fixed: ResNet-50 nondp 134.9 → 53.9 ms);
//     after it, the same shape of problem in channel_sums (a convolution's
//     bias gradient, a warp per channel: now launchSums' blocks) and
//     64-bit divisions in norm_affine_grads' row scan (now counted, the
//     rows of other groups skipped, γ's and β's sums from one pass), and
//     column sums
//     read a row apart by a warp or block per result (ReduceToShape, a
//     broadcast operand's gradient, LayerNorm's γ/β over the batch: now
//     column tiles, cols_total), timed only together by the fifth loan.
//     bk with --tf32 ran slower than in float32 on every convolutional
//     model (nondp faster), on the same operations (the emulation's
//     profile): bk's order had put the loans' 10-class head bias first in
//     the parameter block and every weight 8 bytes off a 16-byte boundary,
//     nondp's kept them aligned; every parameter now starts at a 256-byte
//     boundary (runtime.BlockOffsets), not timed yet. The sixth loan's
//     profiles (nineteenth session) put the non-DP step's gap to PyTorch's
//     outside the convolutions, which are at par: GroupNorm against
//     BatchNorm (11.4 against 6.0 ms a ResNet-50 step; its γ/β gradients
//     a pass of their own, row_param_grads, 2.9 ms — since the
//     twenty-fifth session folded into the backward's as on the CPU: the
//     backward keeps each channel's sums, row_affine_bwd_runs_block, and
//     a thread per parameter adds them, row_param_grads_runs), the activations (the kernel of every operator, at
//     2.2× PyTorch's time on ReLU: one-operator kernels since,
//     unary_relu, …), an Add's gradient over one shape (the reduction
//     kernel's layout walk: a device copy since) and its forward sum
//     (binary_same_add, …, no layout); and ViT-B/16's bk step
//     at the per-sample LayerNorm γ/β sums, a thread per sample and
//     element (column tiles since, norm_affine_tiles), and its summed
//     biases, 24 blocks for 132 multiprocessors (runs of terms since,
//     reduce_to_shape_split) — none of these timed yet. TF32 products read
//     a misaligned weight through an aligned copy (alignForTF32). Also
//     still a thread per result: ReduceOps' other reductions and the
//     in-order sums with few terms (SumRows, AddScaledRows, ScatterAdd,
//     ScatterReduce, Contract, a broadcast MaxMin input's gradient);
//     direct depthwise convolutions without cuDNN (the fixtures' steps
//     copy nothing but their input and labels in and losses and
//     clipping counts out, TestCUDAStepCopies); the engine's per-sample
//     loops where a rule has no batched form yet (paths that compute
//     rather than copy; an Einsum weight whose batch's layouts outgrow
//     the batched rules' 64 MiB; dpengine's TestNoSampleLoops holds every
//     fixture to none, TestEinsumBatched the Einsum weights); a stream
//     per worker instead of the default stream.
//   - Memory: bk's device peak at batch 32 is 1.14× PyTorch's non-DP peak
//     on ResNet-50 (1.15× with PyTorch's 1000-class head, which the
//     loans' rows had only on PyTorch's side), 1.06× on ViT-B/16
//     (attention's probabilities recomputed), 0.88× on VGG-16 (target
//     1.1×), 1.13× on VGG-19/CIFAR at batch 64; mixed fits at least 32×
//     the batch of Opacus's method on VGG-19/CIFAR. Since then, not timed
//     on a GPU: bk's large per-sample gradients in the plan's arena, the
//     norm rules' scratch and cuDNN's workspace in the plan's workspace
//     (the emulated ResNet-50 bk peak at batch 32: 3363.2 → 3190.2 MiB;
//     DPFINETUNE_CUDA_PEAK says what the device holds at its peak).
package cuda
