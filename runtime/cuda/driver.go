package cuda

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"unsafe"
)

// DevicePtr is an address in device memory (CUDA's CUdeviceptr). Under
// CUDA's unified virtual addressing it never equals a host address of the
// process, which lets the Device tell a device operand from a host one by
// its address alone.
type DevicePtr uintptr

// Module is a loaded kernel module: a cubin on the GPU, a shared library
// under emulation.
type Module uintptr

// Function is a kernel of a loaded module, ready to launch.
type Function uintptr

// Dim3 is a grid or block size, as CUDA's dim3.
type Dim3 struct{ X, Y, Z uint32 }

// D1 is the one-dimensional Dim3 {n, 1, 1}.
func D1(n int) Dim3 { return Dim3{uint32(n), 1, 1} }

// Properties describes the device a Driver runs on.
type Properties struct {
	// Name is the device's name, e.g. "NVIDIA H100 80GB HBM3".
	Name string
	// Major and Minor are the compute capability (sm_<Major><Minor>).
	Major, Minor int
	// TotalMem is the device memory in bytes.
	TotalMem int64
	// Multiprocessors is the number of streaming multiprocessors, which
	// sizes grid-stride launches.
	Multiprocessors int
	// DriverVersion is the CUDA driver's version (12040 for 12.4).
	DriverVersion int
	// Emulated is set for the emulated driver.
	Emulated bool
	// ConvLibrary names the convolution library Driver.Conv runs on
	// ("cuDNN 90100 (path)"), or says why there is none ("none: …").
	ConvLibrary string
}

// Driver is the host side of a CUDA device: memory, copies, kernel modules
// and launches, each call synchronous with respect to the host's view of
// the results (copies and Synchronize wait). It is small on purpose: two
// implementations, the real driver API reached through purego (nvidia.go)
// and the emulation that compiles the same kernel sources with the host
// C++ compiler (emulate.go), and everything above it (Device, the
// operations) is shared.
//
// A Driver is not safe for concurrent use; Device serializes its calls.
type Driver interface {
	// Properties describes the device.
	Properties() Properties
	// Alloc returns bytes bytes of device memory, zeroed.
	Alloc(bytes int) (DevicePtr, error)
	// Free releases memory Alloc returned.
	Free(p DevicePtr) error
	// CopyHtoD copies bytes bytes from host memory src to device memory
	// dst.
	CopyHtoD(dst DevicePtr, src unsafe.Pointer, bytes int) error
	// CopyDtoH copies bytes bytes from device memory src to host memory
	// dst.
	CopyDtoH(dst unsafe.Pointer, src DevicePtr, bytes int) error
	// CopyDtoD copies bytes bytes between device buffers.
	CopyDtoD(dst, src DevicePtr, bytes int) error
	// LoadModule compiles CUDA C source (named name in messages) and
	// loads it: NVRTC on the GPU, g++ under emulation, each cached on
	// disk by the hash of what it depends on. A compile error returns
	// the compiler's log.
	LoadModule(name, source string) (Module, error)
	// Function looks up kernel name (an extern "C" __global__ function)
	// in m.
	Function(m Module, name string) (Function, error)
	// Launch runs f on a grid of blocks of threads with sharedBytes of
	// dynamic shared memory and the arguments args. The emulated driver
	// returns when the kernel has run; the real one may return before
	// (the next copy or Synchronize waits).
	Launch(f Function, grid, block Dim3, sharedBytes int, args *Args) error
	// Gemm runs the products g describes on device memory, ordered after
	// the launches before it: cuBLAS on the GPU, the CPU's SGEMM under
	// emulation. M, N, K and Batch are positive (the Device handles
	// empty products and K = 0 itself).
	Gemm(g *GemmArgs) error
	// Conv runs one product of a convolution c describes through the
	// GPU's convolution library (cuDNN), ordered after the launches before
	// it. It returns ErrNoConvLibrary where there is none (the emulation;
	// a GPU without cuDNN, or with DPFINETUNE_CUDNN=off), and any other
	// error where the library refuses or fails: the Device then computes
	// the product itself (conv.go).
	Conv(c *ConvArgs) error
	// ConvWorkspace is the device memory Conv holds as workspace, in
	// bytes (0 where it has none).
	ConvWorkspace() int
	// Synchronize waits for every launch to finish and returns the first
	// error one met.
	Synchronize() error
	// Close releases the device (its memory, modules and context).
	Close() error
}

// GemmArgs describes Batch products C_i = α·op(A_i)·op(B_i) + β·C_i of
// row-major float32 matrices in device memory, with the semantics of
// runtime.LinalgOps.GemmStrided: op(X) is X or Xᵀ as TransA, TransB say,
// op(A_i) is M×K, op(B_i) K×N and C_i M×N, with row strides LDA, LDB,
// LDC; A_i starts StrideA elements after A_{i−1} (0: one matrix shared
// by every product), and so on. β = 0 overwrites C without reading it.
type GemmArgs struct {
	TransA, TransB   bool
	M, N, K          int
	Alpha, Beta      float32
	A, B, C          DevicePtr
	LDA, LDB, LDC    int
	StrideA, StrideB int
	StrideC, Batch   int
	// Ptrs, when not 0, is device memory holding the products' operand
	// addresses as a batched call reads them — B_i's, then A_i's, then
	// C_i's, Batch each — written by a kernel before the call in stream
	// order (the Device's gemm_ptrs), so that the driver need not copy
	// them from the host, which would wait for the device. A driver may
	// ignore it.
	Ptrs DevicePtr
	// TF32 lets the product round A's and B's elements to TF32 (10-bit
	// mantissas; float32 sums), as tensor cores do: cuBLAS's
	// CUBLAS_TF32_TENSOR_OP_MATH, the emulation's rounding to nearest.
	// Only the Device's TF32 convolutions set it (runtime.TF32Device). A
	// batch of more than one product takes it only with every operand
	// address 16-byte aligned (tensorAligned): cuBLAS's tensor-core
	// kernels read 16 bytes at a time, and behind the array of addresses
	// a batched call takes it cannot check them as it checks one product's
	// (on an H100, ResNet-50's bk step faulted with a misaligned address).
	TF32 bool
}

// tensorAligned reports whether every product's A_i, B_i and C_i start
// on 16 bytes: the bases and the strides between products.
func (g *GemmArgs) tensorAligned() bool {
	const a = 16
	return uintptr(g.A)%a == 0 && uintptr(g.B)%a == 0 && uintptr(g.C)%a == 0 &&
		(4*g.StrideA)%a == 0 && (4*g.StrideB)%a == 0 && (4*g.StrideC)%a == 0
}

// ErrNoConvLibrary is Driver.Conv's error where no convolution library is
// loaded.
var ErrNoConvLibrary = errors.New("cuda: no convolution library (cuDNN)")

// ConvKind is which product of a convolution Driver.Conv runs.
type ConvKind int

const (
	// ConvForward is Y = α·conv(X, W) + β·Y.
	ConvForward ConvKind = iota
	// ConvBackwardData is X = α·convᵀ(Y, W) + β·X: the input gradient from
	// the output gradient in Y (and ConvTranspose's forward pass).
	ConvBackwardData
	// ConvBackwardFilter is W = α·Σ_n Y_n ⋆ X_n + β·W: the weight gradient
	// summed over the batch, the output gradient in Y.
	ConvBackwardFilter
)

// ConvArgs describes a convolution (ONNX Conv: cross-correlation,
// row-major NC… tensors in device memory) for Driver.Conv: X is N×C×In,
// W is M×(C/Group)×Kernel and Y is N×M×Out, with Out the size the
// strides, dilations and Pads (the same padding at both ends of an axis)
// give. 1 to 3 spatial axes. Kind names the operand written (Y, X or W),
// Alpha and Beta scale the product and the written operand's old value.
type ConvArgs struct {
	Kind               ConvKind
	N, C, M, Group     int
	In, Kernel, Out    []int
	Strides, Dilations []int
	Pads               []int // per spatial axis, at both ends
	X, W, Y            DevicePtr
	Alpha, Beta        float32
	// TF32 lets the library round X's, W's and Y's elements to TF32 for
	// the product (tensor cores), as GemmArgs.TF32; float32 otherwise.
	TF32 bool
	// Work, if not 0, is WorkBytes of device memory the caller lends for
	// the call (dnnWorkAlign-aligned): the library's workspace where its
	// algorithm needs no more, instead of the driver's own.
	Work      DevicePtr
	WorkBytes int
}

// gemmExtent is the number of elements a matrix operand of a GEMM spans:
// batch matrices of rows×cols (row stride ld) stride elements apart.
func gemmExtent(rows, cols, ld, stride, batch int) int {
	if rows == 0 || cols == 0 || batch == 0 {
		return 0
	}
	return (batch-1)*stride + (rows-1)*ld + cols
}

// extents returns the elements A, B and C span.
func (g *GemmArgs) extents() (a, b, c int) {
	ar, ac := g.M, g.K
	if g.TransA {
		ar, ac = ac, ar
	}
	br, bc := g.K, g.N
	if g.TransB {
		br, bc = bc, br
	}
	return gemmExtent(ar, ac, g.LDA, g.StrideA, g.Batch), gemmExtent(br, bc, g.LDB, g.StrideB, g.Batch), gemmExtent(g.M, g.N, g.LDC, g.StrideC, g.Batch)
}

// maxArgSlots bounds a kernel's argument list, in 8-byte slots (a
// Layout by value takes 27 of them).
const maxArgSlots = 48

// Args packs a kernel's arguments as cuLaunchKernel takes them: an array
// of pointers, one to each argument's value, whose size the kernel's
// parameter type gives (the driver copies that many bytes). Each value
// sits in its own 8-byte-aligned slot, a struct over as many slots as it
// needs. An Args is reused from launch to launch (Reset), so that a launch
// allocates nothing; it must not be copied once in use.
type Args struct {
	vals  [maxArgSlots]uint64
	ptrs  [maxArgSlots]uintptr
	first [maxArgSlots]uint8 // the slot of each argument
	n     int                // arguments
	slots int                // slots used
	err   error
}

// Reset empties a for the next launch.
func (a *Args) Reset() { a.n, a.slots, a.err = 0, 0, nil }

// Len is the number of arguments.
func (a *Args) Len() int { return a.n }

func (a *Args) add(v uint64) *Args { return a.addBytes(unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)) }

func (a *Args) addBytes(b []byte) *Args {
	k := (len(b) + 7) / 8
	if a.slots+k > maxArgSlots {
		if a.err == nil {
			a.err = fmt.Errorf("cuda: more than %d bytes of kernel arguments", 8*maxArgSlots)
		}
		return a
	}
	a.first[a.n] = uint8(a.slots)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(&a.vals[a.slots])), 8*k)
	clear(dst)
	copy(dst, b)
	a.n++
	a.slots += k
	return a
}

// Ptr adds a device pointer argument (T* in the kernel).
func (a *Args) Ptr(p DevicePtr) *Args { return a.add(uint64(p)) }

// I32 adds an int argument.
func (a *Args) I32(v int32) *Args { return a.add(uint64(uint32(v))) }

// U32 adds an unsigned int argument.
func (a *Args) U32(v uint32) *Args { return a.add(uint64(v)) }

// I64 adds a long long argument.
func (a *Args) I64(v int64) *Args { return a.add(uint64(v)) }

// U64 adds an unsigned long long argument.
func (a *Args) U64(v uint64) *Args { return a.add(v) }

// F32 adds a float argument.
func (a *Args) F32(v float32) *Args { return a.add(uint64(math.Float32bits(v))) }

// F64 adds a double argument.
func (a *Args) F64(v float64) *Args { return a.add(math.Float64bits(v)) }

// Bytes adds a struct argument passed by value: b is its memory image
// (at most 8-byte alignment).
func (a *Args) Bytes(b []byte) *Args { return a.addBytes(b) }

// pointers fills and returns the pointer array the launch passes: it is
// built at launch time from the slots' current addresses.
func (a *Args) pointers() (uintptr, error) {
	if a.err != nil {
		return 0, a.err
	}
	for i := 0; i < a.n; i++ {
		a.ptrs[i] = uintptr(unsafe.Pointer(&a.vals[a.first[i]]))
	}
	return uintptr(unsafe.Pointer(&a.ptrs[0])), nil
}

// kernelDecl finds the kernels of a source: extern "C" __global__ void
// name(.
var kernelDecl = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*\(`)

// KernelNames returns the names of the kernels a CUDA C source defines
// (extern "C" __global__ void name(…)), in order.
func KernelNames(source string) []string {
	var names []string
	for _, m := range kernelDecl.FindAllStringSubmatch(source, -1) {
		names = append(names, m[1])
	}
	return names
}

// roundTF32 rounds x to TF32, a float32 with the low 13 of its 23
// mantissa bits zero, to nearest with ties to even: the operands of a
// TF32 product as the emulation forms them (a GPU may truncate instead;
// either is within 2⁻¹⁰ of x, relatively). Infinities and NaNs pass
// unchanged.
func roundTF32(x float32) float32 {
	u := math.Float32bits(x)
	if u&0x7f800000 == 0x7f800000 {
		return x
	}
	u += 0xfff + (u>>13)&1
	return math.Float32frombits(u &^ 0x1fff)
}
