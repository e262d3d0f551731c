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
//     use with --fmad=false; the cubin is cached on disk under the hash of
//     the source, the options, the NVRTC and driver versions and the
//     architecture (os.UserCacheDir()/dpfinetune/cuda, or EnvCache).
//   - the emulation (emulate.go): the same kernel sources, compiled by the
//     host's g++ against emu/cuda_emu.h into a shared library (cached the
//     same way under cuda-emu/) and loaded with purego.Dlopen. The header
//     defines the CUDA built-ins the kernels use — threadIdx, blockIdx,
//     blockDim, gridDim, __shared__, __syncthreads, the atomics, the warp
//     shuffles, the bit casts — and a launcher per kernel that runs the
//     grid's blocks one after another, a block's threads as real threads
//     with barriers; its comment lists the restrictions the kernels follow
//     (all of them CUDA's own rules). Device memory is C memory outside
//     the Go heap. It is selected with DPFINETUNE_CUDA=emulate (Open) and
//     is what the tests run on a machine without a GPU.
//
// Both compile without contracting a·b + c into an FMA (-ffp-contract=off,
// --fmad=false) and without fast math, so that float arithmetic rounds
// each operation alone on both: the optimizer's update and the noise are
// the CPU's bit for bit on the emulation, and so on the GPU.
package cuda
