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
// argument value) and Synchronize. It has two implementations:
//
//   - the real driver (nvidia.go): libcuda.so.1 (the driver API: cuInit,
//     the primary context, cuMemAlloc, cuMemcpy*, cuModuleLoadData,
//     cuLaunchKernel) and NVRTC (libnvrtc.so, .so.13, .so.12), which
//     compiles each kernel source for the device's architecture at first
//     use with --fmad=false (a cubin for sm_XY; PTX for the newest
//     compute_XY below it when that NVRTC does not know the device, which
//     the driver then compiles); the result is cached on disk under the
//     hash of the source, the options, the NVRTC and driver versions and
//     the architecture (os.UserCacheDir()/dpfinetune/cuda, or EnvCache).
//   - the emulation (emulate.go): the same kernel sources, compiled by the
//     host's g++ against emu/cuda_emu.h into a shared library (cached the
//     same way under cuda-emu/) and loaded with purego.Dlopen. The header
//     defines the CUDA built-ins the kernels use — threadIdx, blockIdx,
//     blockDim, gridDim, __shared__, __syncthreads, the atomics, the warp
//     shuffles, the bit casts — and a launcher per kernel that runs the
//     grid's blocks one after another, a block's threads as real threads
//     (a pool kept from launch to launch) with barriers; its comment lists the restrictions the kernels follow
//     (all of them CUDA's own rules). Device memory is C memory outside
//     the Go heap. It is selected with DPFINETUNE_CUDA=emulate (Open) and
//     is what the tests run on a machine without a GPU.
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
// NoiseOps, linalg.cu: LinalgOps.Axpy, nn.cu: NNOps, reduce.cu:
// ReduceOps), embedded in the binary. Kernels are
// extern "C" __global__ functions, found by name (KernelNames); NVRTC gets
// a short prelude first (the fixed-width integer types, DYN_SHARED), the
// emulation its header. Elementwise kernels are grid-stride loops on
// blocks of 256 threads, the grid capped at 16 blocks per multiprocessor.
// Sums whose order the contract fixes (SumSq, SquaredNorms and Dot in
// float64 in order, AddRunSums's four running sums, SumRows, ScatterAdd in
// index order) run that order on one thread per result, parallel across
// results only, so that they are the CPU's bit for bit.
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
// NNOps and ReduceOps (nn.cu, reduce.cu) are correct and simple first:
// one thread per element written, its sum in float64 in a fixed order
// rounded once (ReduceSum and ReduceMean in float32, as their contract
// says), statistics a thread per channel or row kept in float64 scratch
// for the elementwise pass; a gradient that several outputs feed (a
// convolution's or pooling's input) is gathered by the input element's
// thread over the window positions that read it, never scattered with
// atomics; ScatterReduce runs in order on one thread. Their values, not
// the CPU's bits, are the contract (TestNNReduceOps: the reference backend
// and the CPU within a tolerance). exp and log are written out in double
// (d_exp, d_log: a Taylor series after range reduction, atanh's series),
// so that these modules keep no FMA (TestNVRTCNoFMA).
//
// Their compile-time parameters reach the kernels as device copies made
// at first use and kept on the Device until Close, keyed by the plan's
// pointer (planCopy; the map keeps the plan alive, so that no other plan
// reuses the address while its copy is cached): a convolution's or
// pooling's geometry (ConvShape, PoolShape: sizes and each axis's window,
// lifted to three axes, as int32s) and a row normalization's parameter
// table (NormRows: the parameter of element j of row r is row_off[r] +
// col_off[j], checked for every element when the table is built, with
// each column offset's columns listed for the parameter gradients). Plans
// are read-only and live as long as the plan, so one copy serves every
// call. Shapes passed per call (GemmBias's, a reduction's) are staged
// with the call (stageShapes).
//
// # Device and operands
//
// Device is the runtime.Device: Alloc returns device memory, and a
// buffer's Floats is a []float32 view of it (unsafe.Slice over the device
// address; only the device's operations dereference it). An operation
// passes an operand that lies in the Device's memory to its kernel as it
// is and stages any other slice — host memory, such as the engine's
// float64 norms — through a scratch area, copying it back if written.
// Under unified addressing the two kinds of address never coincide; under
// emulation device memory is C memory, apart from Go's.
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
// # What remains (issue 14)
//
//   - LinalgOps' GEMMs: cuBLAS (libcublas through purego, cublasSgemm on
//     column-major operands) in the real driver and a CPU SGEMM in the
//     emulation, behind one more Driver method; Binary and ReduceToShape.
//   - PerSampleOps: Im2ColPlane, ConvWeightGrad, DepthwisePerSampleGrad.
//   - LayoutOps and ElementwiseOps (in progress beside this work); with
//     them and the above the Device implements runtime.Ops. runtime's
//     "cuda" device is registered (register.go) and opens the Device, on
//     which Compile fails until then. The integration tests
//     (TestPlanOnCUDA, dpengine's TestEngineOnCUDA) lend runtime.CPU's
//     groups meanwhile, which on the emulation can compute on device
//     memory.
//   - Speed: the in-order sums on one thread per result (exact but slow
//     for one long vector: SumSq, Dot, ScatterAdd, ScatterReduce; a
//     channel's or row's statistics; a GemmBias gradient), one thread per
//     output in the convolutions (tiles in shared memory, or im2col and
//     the GEMM), staging of host
//     operands (the engine's scalars could live on the device), a stream
//     per worker instead of the default stream.
//   - The real driver has run on the stand-in and NVRTC 11.8 only, not on
//     a GPU: DPFINETUNE_CUDA=gpu go test ./runtime/cuda/ on one is its
//     first real check.
package cuda
