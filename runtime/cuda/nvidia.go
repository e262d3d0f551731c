//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/internal/dl"
	"github.com/ebitengine/purego"
)

// EnvNVRTC names the NVRTC library to load before the usual names.
const EnvNVRTC = "DPFINETUNE_NVRTC"

// EnvLibCUDA names the driver library to load before libcuda.so.1.
const EnvLibCUDA = "DPFINETUNE_LIBCUDA"

// EnvCUBLAS names the cuBLAS library to load before the usual names.
const EnvCUBLAS = "DPFINETUNE_CUBLAS"

// nvrtcPrelude is what NVRTC compiles before a kernel source: the fixed
// width integers (NVRTC has no <stdint.h>) and DYN_SHARED, which the
// emulation header defines its own way; only under NVRTC (__CUDACC_RTC__),
// so that the test's stand-in driver can compile the same text on the host.
const nvrtcPrelude = `#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define DYN_SHARED(T, name) extern __shared__ T name[]
#endif
`

// nvrtcSource is what NVRTC compiles for a kernel source: the prelude and
// the source, its lines numbered as in its file.
func nvrtcSource(name, source string) string {
	return nvrtcPrelude + "#line 1 \"" + name + "\"\n" + source
}

// nvrtcOpts are the options of a compilation for sm_<major><minor>.
func nvrtcOpts(major, minor int) []string {
	return append([]string{fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor)}, nvrtcOptions...)
}

// nvrtcOptions are the compile options besides the architecture: no FMA
// contraction, so that every product and sum rounds on its own, as the
// CPU's code and the emulation do (the bit-for-bit contracts of the
// optimizer and the noise); IEEE division and square root are NVRTC's
// defaults (no fast math).
var nvrtcOptions = []string{"--fmad=false", "--std=c++17"}

// The driver API's entry points (cuda.h), by symbol.
type cudaFuncs struct {
	init, driverGetVersion, deviceGetCount, deviceGet, deviceGetName, deviceGetAttribute        uintptr
	deviceTotalMem                                                                              uintptr
	primaryCtxRetain, primaryCtxRelease, ctxSetCurrent, ctxSynchronize                          uintptr
	memAlloc, memFree, memsetD8, memcpyHtoD, memcpyDtoH, memcpyDtoD                             uintptr
	moduleLoadData, moduleUnload, moduleGetFunction, launchKernel, getErrorName, getErrorString uintptr
}

// nvrtc is NVRTC, the runtime compiler of CUDA C (nvrtc.h): it needs no
// GPU, so that the kernel sources' compilation is tested wherever the
// library is (TestNVRTCCompiles).
type nvrtc struct {
	version, createProgram, compileProgram, getProgramLogSize, getProgramLog uintptr
	getCUBINSize, getCUBIN, destroyProgram, getErrorString                   uintptr
	getPTXSize, getPTX                                                       uintptr
	// archs are the sm_XY the library compiles for (XY), when it says
	// (nvrtcGetSupportedArchs, NVRTC 11.2 on).
	archs []int
	// ver is the library's version, "12.4".
	ver string
}

// nvidia is the Driver of a real GPU: the CUDA driver API of libcuda.so.1
// and NVRTC, called through purego (no cgo). It uses device 0's primary
// context, made current on the calling thread by every call (a goroutine
// may run on any thread).
type nvidia struct {
	cu      cudaFuncs
	rtc     *nvrtc
	dev     int32
	ctx     uintptr
	props   Properties
	cache   string
	modules []uintptr
	// blas is cuBLAS and handle its handle on the primary context; ptrs
	// holds the pointer arrays of batched GEMMs (ptrsLen of them).
	blas    *cublas
	handle  uintptr
	ptrs    DevicePtr
	ptrsLen int
	// tf32 is the handle's math mode: TF32 tensor-core products (set
	// before a GEMM whose GemmArgs.TF32 differs).
	tf32 bool
	// ab holds a GEMM's (or a convolution's) α and β, which cuBLAS and
	// cuDNN read through host pointers during the call (the default
	// pointer mode): on the heap, where the call's uintptrs keep them, one
	// pair for the serialized calls.
	ab *[2]float32
	// dnn is cuDNN (cudnn.go), nil where it is not found or turned off;
	// its handle is created at the first convolution, its plans kept per
	// shape, its workspace grown as an algorithm needs.
	dnn        *cudnn
	dnnHandle  uintptr
	dnnPlans   map[dnnKey]*dnnPlan
	dnnWork    DevicePtr
	dnnWorkLen int
	// dnnFound counts the algorithms chosen by cuDNN's measurement
	// (EnvCUDNNAlgo), dnnChoices the ones kept on disk (read at the first
	// measured choice).
	dnnFound   int
	dnnChoices *dnnChoices
}

// cublas is cuBLAS (cublas_api.h), which runs the GEMMs. The batched
// products go through cublasSgemmBatched and its device arrays of
// pointers: cublasSgemmStridedBatched takes 18 arguments, beyond the 15
// that purego.SyscallN passes.
type cublas struct {
	create, destroy, sgemm, sgemmBatched, setMathMode uintptr
}

// cuBLAS's math modes (cublasMath_t): float32 products as asked, and TF32
// tensor-core products of float32 operands (GemmArgs.TF32).
const (
	cublasDefaultMath      = 0
	cublasTF32TensorOpMath = 3
)

// libraryDirs are the globs of directories that hold CUDA's libraries
// outside the loader's path: the NVIDIA wheels a pip-installed PyTorch
// brings (site-packages/nvidia/<component>/lib, nvidia/cu13/lib), conda's
// lib, and the toolkits under /usr/local. Each starts with an environment
// variable's value, skipped where it is unset.
var libraryDirs = []struct{ env, glob string }{
	{"VIRTUAL_ENV", "lib/python3*/site-packages/nvidia/*/lib"},
	{"CONDA_PREFIX", "lib/python3*/site-packages/nvidia/*/lib"},
	{"CONDA_PREFIX", "lib"},
	{"HOME", ".local/lib/python3*/site-packages/nvidia/*/lib"},
	{"", "/usr/local/lib/python3*/dist-packages/nvidia/*/lib"},
	{"", "/usr/local/lib/python3*/site-packages/nvidia/*/lib"},
	{"", "/usr/lib/python3/dist-packages/nvidia/*/lib"},
	{"", "/opt/conda/lib/python3*/site-packages/nvidia/*/lib"},
	{"", "/opt/conda/lib"},
	{"", "/usr/local/cuda*/lib64"},
	{"", "/usr/local/cuda*/targets/*-linux/lib"},
}

// libraryFiles returns the files named by the glob name (libcublas.so.*)
// in libraryDirs, in their order, newest version first within a
// directory.
func libraryFiles(name string) []string {
	if name == "" {
		return nil
	}
	var out []string
	for _, d := range libraryDirs {
		glob := d.glob
		if d.env != "" {
			v := os.Getenv(d.env)
			if v == "" {
				continue
			}
			glob = filepath.Join(v, glob)
		}
		dirs, _ := filepath.Glob(glob)
		for _, dir := range dirs {
			files, _ := filepath.Glob(filepath.Join(dir, name))
			sort.Sort(sort.Reverse(sort.StringSlice(files)))
			out = append(out, files...)
		}
	}
	return out
}

// dlopenFound loads the first library that opens: the path in the
// environment variable env where it is set, then names (on the loader's
// path), then the files libraryFiles finds for the glob file (none for
// ""). It returns the handle and the name that opened, or every
// attempt's error. Before a
// library given by its path it loads the companions (globs, such as
// cuBLAS's libcublasLt.so.*) beside it, which it needs and whose directory
// may be on no loader path.
func dlopenFound(env, file string, companions []string, names ...string) (uintptr, string, error) {
	var cands []string
	if p := os.Getenv(env); p != "" {
		cands = append(cands, p)
	}
	cands = append(append(cands, names...), libraryFiles(file)...)
	var errs []error
	for _, f := range cands {
		if strings.Contains(f, "/") {
			for _, c := range companions {
				deps, _ := filepath.Glob(filepath.Join(filepath.Dir(f), c))
				sort.Sort(sort.Reverse(sort.StringSlice(deps)))
				for _, dep := range deps {
					if _, err := dl.Open(dep, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
						break
					}
				}
			}
		}
		h, err := dl.Open(f, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return h, f, nil
		}
		errs = append(errs, err)
	}
	return 0, "", errors.Join(errs...)
}

// syms resolves the symbols into the uintptr fields of dst, in order.
func syms(h uintptr, lib string, dst []*uintptr, names []string) error {
	for i, n := range names {
		p, err := purego.Dlsym(h, n)
		if err != nil {
			return fmt.Errorf("cuda: %s has no %s (too old?): %w", lib, n, err)
		}
		*dst[i] = p
	}
	return nil
}

// Real returns the driver of the machine's first GPU. Without the NVIDIA
// driver it fails with "no CUDA driver: libcuda.so.1 not found".
func Real() (Driver, error) { return RealDevice(0) }

// RealDevice returns the driver of the GPU of the given ordinal among those
// the driver makes visible (in CUDA_VISIBLE_DEVICES's order where that is
// set, as every CUDA program numbers them), or says how many there are.
func RealDevice(ordinal int) (Driver, error) {
	h, _, err := dlopenFound(EnvLibCUDA, "", nil, "libcuda.so.1", "libcuda.so") // the driver's: on the loader's path
	if err != nil {
		return nil, fmt.Errorf("cuda: no CUDA driver: libcuda.so.1 not found (is the NVIDIA driver installed?): %w", err)
	}
	c := &nvidia{ab: new([2]float32)}
	f := &c.cu
	if err := syms(h, "libcuda.so.1", []*uintptr{
		&f.init, &f.driverGetVersion, &f.deviceGetCount, &f.deviceGet, &f.deviceGetName, &f.deviceGetAttribute, &f.deviceTotalMem,
		&f.primaryCtxRetain, &f.primaryCtxRelease, &f.ctxSetCurrent, &f.ctxSynchronize,
		&f.memAlloc, &f.memFree, &f.memsetD8, &f.memcpyHtoD, &f.memcpyDtoH, &f.memcpyDtoD,
		&f.moduleLoadData, &f.moduleUnload, &f.moduleGetFunction, &f.launchKernel, &f.getErrorName, &f.getErrorString,
	}, []string{
		"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceGetAttribute", "cuDeviceTotalMem_v2",
		"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuCtxSynchronize",
		"cuMemAlloc_v2", "cuMemFree_v2", "cuMemsetD8_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
		"cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel", "cuGetErrorName", "cuGetErrorString",
	}); err != nil {
		return nil, err
	}
	if err := c.call("cuInit", f.init, 0); err != nil {
		return nil, err
	}
	var ver int32
	if err := c.call("cuDriverGetVersion", f.driverGetVersion, uintptr(unsafe.Pointer(&ver))); err != nil {
		return nil, err
	}
	count := new(int32)
	if err := c.call("cuDeviceGetCount", f.deviceGetCount, uintptr(unsafe.Pointer(count))); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(*count) {
		return nil, fmt.Errorf("cuda: no GPU %d: %s", ordinal, visibleGPUs(int(*count)))
	}
	if err := c.call("cuDeviceGet", f.deviceGet, uintptr(unsafe.Pointer(&c.dev)), uintptr(ordinal)); err != nil {
		return nil, fmt.Errorf("%w (GPU %d of %d visible)", err, ordinal, *count)
	}
	if err := c.call("cuDevicePrimaryCtxRetain", f.primaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(c.dev)); err != nil {
		return nil, err
	}
	// The results live on the heap (new): the driver writes them through
	// addresses the garbage collector does not see as pointers.
	name := new([256]byte)
	major, minor, sms, total := new(int32), new(int32), new(int32), new(uint64)
	err = errors.Join(
		c.call("cuDeviceGetName", f.deviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(c.dev)),
		c.call("cuDeviceGetAttribute", f.deviceGetAttribute, uintptr(unsafe.Pointer(major)), 75, uintptr(c.dev)), // compute capability major
		c.call("cuDeviceGetAttribute", f.deviceGetAttribute, uintptr(unsafe.Pointer(minor)), 76, uintptr(c.dev)), // minor
		c.call("cuDeviceGetAttribute", f.deviceGetAttribute, uintptr(unsafe.Pointer(sms)), 16, uintptr(c.dev)),   // multiprocessors
		c.call("cuDeviceTotalMem", f.deviceTotalMem, uintptr(unsafe.Pointer(total)), uintptr(c.dev)))
	if err != nil {
		c.Close()
		return nil, err
	}
	c.props = Properties{
		Name: goString(name[:]), Major: int(*major), Minor: int(*minor), TotalMem: int64(*total),
		Multiprocessors: int(*sms), DriverVersion: int(ver),
	}
	if c.rtc, err = loadNVRTC(); err != nil {
		c.Close()
		return nil, err
	}
	if c.cache, err = cacheDir("cuda"); err != nil {
		c.Close()
		return nil, err
	}
	if c.blas, err = loadCUBLAS(); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.createHandle(); err != nil {
		c.Close()
		return nil, err
	}
	// cuDNN is optional: without it the convolutions run as GEMMs.
	if c.dnn, err = loadCUDNN(c.props.TotalMem); err != nil {
		c.props.ConvLibrary = "none: " + err.Error()
	} else if c.dnn != nil {
		c.props.ConvLibrary = c.dnn.describe()
	} else {
		c.props.ConvLibrary = "none: " + EnvCUDNN + "=off"
	}
	return c, nil
}

// loadCUBLAS loads cuBLAS: EnvCUBLAS's path, else the usual names.
func loadCUBLAS() (*cublas, error) {
	h, lib, err := dlopenFound(EnvCUBLAS, "libcublas.so.1[1-9]*", []string{"libcublasLt.so.1[1-9]*"},
		"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so")
	if err != nil {
		return nil, fmt.Errorf("cuda: cuBLAS, which runs the GEMMs, not found (libcublas.so.13 or .12 on the loader's path, beside a Python's NVIDIA wheels or under /usr/local/cuda; or set %s): %w", EnvCUBLAS, err)
	}
	b := &cublas{}
	if err := syms(h, lib, []*uintptr{&b.create, &b.destroy, &b.sgemm, &b.sgemmBatched, &b.setMathMode},
		[]string{"cublasCreate_v2", "cublasDestroy_v2", "cublasSgemm_v2", "cublasSgemmBatched", "cublasSetMathMode"}); err != nil {
		return nil, err
	}
	return b, nil
}

// cublasStatus names cuBLAS's status codes (cublasStatus_t).
var cublasStatus = map[uintptr]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// call is nvidia.call for cuBLAS's functions and their cublasStatus_t.
//
//go:uintptrescapes
func (b *cublas) call(op string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if r == 0 {
		return nil
	}
	name := cublasStatus[r]
	if name == "" {
		name = "CUBLAS_STATUS_UNKNOWN"
	}
	return fmt.Errorf("cuda: %s: %s (%d)", op, name, r)
}

// createHandle creates the cuBLAS handle on the primary context. Its
// stream is the default stream, the kernels' own, so that the GEMMs and
// the launches run in the order they are issued.
func (c *nvidia) createHandle() error {
	done, err := c.bind()
	if err != nil {
		return err
	}
	defer done()
	h := new(uintptr)
	if err := c.blas.call("cublasCreate", c.blas.create, uintptr(unsafe.Pointer(h))); err != nil {
		return err
	}
	c.handle = *h
	return nil
}

// cublasOp is cuBLAS's operation of a transposed operand or not
// (CUBLAS_OP_T, CUBLAS_OP_N).
func cublasOp(trans bool) uintptr {
	if trans {
		return 1
	}
	return 0
}

// Gemm implements Driver with cuBLAS. cuBLAS is column-major: a row-major
// C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, whose operands
// are the same memory read column-major, so the call swaps A and B (and
// M and N) and keeps the transpositions and leading dimensions. A batch
// of one is cublasSgemm; more are cublasSgemmBatched on arrays of the
// products' addresses, copied to device memory (in stream order, so a
// running product's array is not overwritten under it).
func (c *nvidia) Gemm(g *GemmArgs) error {
	done, err := c.bind()
	if err != nil {
		return err
	}
	defer done()
	if g.TF32 != c.tf32 {
		mode := uintptr(cublasDefaultMath)
		if g.TF32 {
			mode = cublasTF32TensorOpMath
		}
		if err := c.blas.call("cublasSetMathMode", c.blas.setMathMode, c.handle, mode); err != nil {
			return err
		}
		c.tf32 = g.TF32
	}
	ab := c.ab
	ab[0], ab[1] = g.Alpha, g.Beta
	ta, tb := cublasOp(g.TransA), cublasOp(g.TransB)
	if g.Batch == 1 {
		err := c.blas.call("cublasSgemm", c.blas.sgemm, c.handle, tb, ta, uintptr(g.N), uintptr(g.M), uintptr(g.K),
			uintptr(unsafe.Pointer(&ab[0])), uintptr(g.B), uintptr(g.LDB), uintptr(g.A), uintptr(g.LDA),
			uintptr(unsafe.Pointer(&ab[1])), uintptr(g.C), uintptr(g.LDC))
		runtime.KeepAlive(ab)
		return err
	}
	n := 3 * g.Batch
	if g.Ptrs != 0 {
		err = c.blas.call("cublasSgemmBatched", c.blas.sgemmBatched, c.handle, tb, ta, uintptr(g.N), uintptr(g.M), uintptr(g.K),
			uintptr(unsafe.Pointer(&ab[0])), uintptr(g.Ptrs), uintptr(g.LDB), uintptr(g.Ptrs)+uintptr(8*g.Batch), uintptr(g.LDA),
			uintptr(unsafe.Pointer(&ab[1])), uintptr(g.Ptrs)+uintptr(16*g.Batch), uintptr(g.LDC), uintptr(g.Batch))
		runtime.KeepAlive(ab)
		return err
	}
	if n > c.ptrsLen {
		if c.ptrs != 0 {
			c.call("cuMemFree", c.cu.memFree, uintptr(c.ptrs))
			c.ptrs, c.ptrsLen = 0, 0
		}
		size := max(n, 2*c.ptrsLen, 768)
		var p uint64
		if err := c.call("cuMemAlloc", c.cu.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(8*size)); err != nil {
			return err
		}
		c.ptrs, c.ptrsLen = DevicePtr(p), size
	}
	// The arrays of B's, A's and C's addresses, in the order of the call.
	arr := make([]uint64, n)
	for i := 0; i < g.Batch; i++ {
		arr[i] = uint64(g.B) + uint64(4*i*g.StrideB)
		arr[g.Batch+i] = uint64(g.A) + uint64(4*i*g.StrideA)
		arr[2*g.Batch+i] = uint64(g.C) + uint64(4*i*g.StrideC)
	}
	if err := c.call("cuMemcpyHtoD", c.cu.memcpyHtoD, uintptr(c.ptrs), uintptr(unsafe.Pointer(&arr[0])), uintptr(8*n)); err != nil {
		return err
	}
	runtime.KeepAlive(arr)
	err = c.blas.call("cublasSgemmBatched", c.blas.sgemmBatched, c.handle, tb, ta, uintptr(g.N), uintptr(g.M), uintptr(g.K),
		uintptr(unsafe.Pointer(&ab[0])), uintptr(c.ptrs), uintptr(g.LDB), uintptr(c.ptrs)+uintptr(8*g.Batch), uintptr(g.LDA),
		uintptr(unsafe.Pointer(&ab[1])), uintptr(c.ptrs)+uintptr(16*g.Batch), uintptr(g.LDC), uintptr(g.Batch))
	runtime.KeepAlive(ab)
	return err
}

// loadNVRTC loads NVRTC: EnvNVRTC's path, else the usual names.
func loadNVRTC() (*nvrtc, error) {
	h, lib, err := dlopenFound(EnvNVRTC, "libnvrtc.so.1[1-9]*", []string{"libnvrtc-builtins.so.1[1-9]*"},
		"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2")
	if err != nil {
		return nil, fmt.Errorf("cuda: NVRTC, which compiles the kernels, not found (libnvrtc.so on the loader's path, beside a Python's NVIDIA wheels or under /usr/local/cuda; or set %s): %w", EnvNVRTC, err)
	}
	f := &nvrtc{}
	if err := syms(h, lib, []*uintptr{
		&f.version, &f.createProgram, &f.compileProgram, &f.getProgramLogSize, &f.getProgramLog,
		&f.getCUBINSize, &f.getCUBIN, &f.destroyProgram, &f.getErrorString, &f.getPTXSize, &f.getPTX,
	}, []string{
		"nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
		"nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcDestroyProgram", "nvrtcGetErrorString", "nvrtcGetPTXSize", "nvrtcGetPTX",
	}); err != nil {
		return nil, err
	}
	var major, minor int32
	if err := f.call("nvrtcVersion", f.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))); err != nil {
		return nil, err
	}
	f.ver = fmt.Sprintf("%d.%d", major, minor)
	num, e1 := purego.Dlsym(h, "nvrtcGetNumSupportedArchs")
	list, e2 := purego.Dlsym(h, "nvrtcGetSupportedArchs")
	var n int32
	if e1 == nil && e2 == nil && f.call("nvrtcGetNumSupportedArchs", num, uintptr(unsafe.Pointer(&n))) == nil && n > 0 && n < 1000 {
		archs := make([]int32, n)
		if f.call("nvrtcGetSupportedArchs", list, uintptr(unsafe.Pointer(&archs[0]))) == nil {
			for _, a := range archs {
				f.archs = append(f.archs, int(a))
			}
		}
	}
	return f, nil
}

// target returns the options that compile for a device of compute
// capability major.minor, and whether the result is PTX: a cubin for
// sm_XY when NVRTC knows the architecture, else PTX for the newest
// compute_XY it knows below it, which the driver compiles (a GPU newer
// than the NVRTC at hand).
func (f *nvrtc) target(major, minor int) (opts []string, ptx bool) {
	arch := 10*major + minor
	best := 0
	for _, a := range f.archs {
		if a == arch {
			return nvrtcOpts(major, minor), false
		}
		if a < arch && a > best {
			best = a
		}
	}
	if len(f.archs) == 0 || best == 0 {
		return nvrtcOpts(major, minor), false
	}
	return append([]string{fmt.Sprintf("--gpu-architecture=compute_%d", best)}, nvrtcOptions...), true
}

// goString is the Go string of a NUL-terminated byte array.
func goString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// cString reads the NUL-terminated C string at p.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := ptrOf(DevicePtr(p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// call calls a driver API function and turns its CUresult into an error
// naming op. Like purego.SyscallN, it takes pointers converted to uintptr
// in its arguments and keeps what they point to alive and in place.
//
//go:uintptrescapes
func (c *nvidia) call(op string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if r == 0 {
		return nil
	}
	var name, desc uintptr
	purego.SyscallN(c.cu.getErrorName, r, uintptr(unsafe.Pointer(&name)))
	purego.SyscallN(c.cu.getErrorString, r, uintptr(unsafe.Pointer(&desc)))
	return fmt.Errorf("cuda: %s: %s (%d): %s", op, cString(name), r, cString(desc))
}

// visibleGPUs says how many GPUs the driver shows, and why that may be
// fewer than the machine has.
func visibleGPUs(n int) string {
	var what string
	switch n {
	case 0:
		what = "the driver shows no GPU"
	case 1:
		what = "the driver shows one GPU, 0"
	default:
		what = fmt.Sprintf("the driver shows %d GPUs, 0 to %d", n, n-1)
	}
	if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		what += fmt.Sprintf(" (CUDA_VISIBLE_DEVICES=%q)", v)
	}
	return what
}

// call is nvidia.call for NVRTC's functions and their nvrtcResult.
//
//go:uintptrescapes
func (f *nvrtc) call(op string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if r == 0 {
		return nil
	}
	s, _, _ := purego.SyscallN(f.getErrorString, r)
	return fmt.Errorf("cuda: %s: %s (%d)", op, cString(s), r)
}

// bind makes the context current on the calling thread, which stays
// locked to the goroutine until the returned function runs.
func (c *nvidia) bind() (func(), error) {
	runtime.LockOSThread()
	if err := c.call("cuCtxSetCurrent", c.cu.ctxSetCurrent, c.ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}

// boundCall is call with the context current (bind) for its duration: a
// driver operation of one call. Like call, it keeps what the pointers
// converted in its arguments point to alive and in place.
//
//go:uintptrescapes
func (c *nvidia) boundCall(op string, fn uintptr, args ...uintptr) error {
	done, err := c.bind()
	if err != nil {
		return err
	}
	defer done()
	return c.call(op, fn, args...)
}

func (c *nvidia) Properties() Properties { return c.props }

func (c *nvidia) Alloc(bytes int) (DevicePtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("cuda: allocation of %d bytes", bytes)
	}
	done, err := c.bind()
	if err != nil {
		return 0, err
	}
	defer done()
	var p uint64
	if err := c.call("cuMemAlloc", c.cu.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes)); err != nil {
		return 0, err
	}
	if err := c.call("cuMemsetD8", c.cu.memsetD8, uintptr(p), 0, uintptr(bytes)); err != nil {
		c.call("cuMemFree", c.cu.memFree, uintptr(p))
		return 0, err
	}
	return DevicePtr(p), nil
}

func (c *nvidia) Free(p DevicePtr) error {
	return c.boundCall("cuMemFree", c.cu.memFree, uintptr(p))
}

func (c *nvidia) CopyHtoD(dst DevicePtr, src unsafe.Pointer, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return c.boundCall("cuMemcpyHtoD", c.cu.memcpyHtoD, uintptr(dst), uintptr(src), uintptr(bytes))
}

func (c *nvidia) CopyDtoH(dst unsafe.Pointer, src DevicePtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return c.boundCall("cuMemcpyDtoH", c.cu.memcpyDtoH, uintptr(dst), uintptr(src), uintptr(bytes))
}

func (c *nvidia) CopyDtoD(dst, src DevicePtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return c.boundCall("cuMemcpyDtoD", c.cu.memcpyDtoD, uintptr(dst), uintptr(src), uintptr(bytes))
}

// cstr is s as a NUL-terminated C string.
func cstr(s string) []byte { return append([]byte(s), 0) }

// compile compiles source with NVRTC and returns the cubin (for an
// architecture sm_XY) or, with ptx, the PTX (for compute_XY), or the
// compiler's log as the error.
func (f *nvrtc) compile(name, source string, opts []string, ptx bool) ([]byte, error) {
	src, cname := cstr(source), cstr(name)
	var prog uintptr
	if err := f.call("nvrtcCreateProgram", f.createProgram, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); err != nil {
		return nil, err
	}
	defer purego.SyscallN(f.destroyProgram, uintptr(unsafe.Pointer(&prog)))
	copts := make([][]byte, len(opts))
	optPtrs := make([]uintptr, len(opts))
	for i, o := range opts {
		copts[i] = cstr(o)
		optPtrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	cerr := f.call("nvrtcCompileProgram", f.compileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&optPtrs[0])))
	runtime.KeepAlive(copts)
	if cerr != nil {
		var n uintptr
		log := ""
		if f.call("nvrtcGetProgramLogSize", f.getProgramLogSize, prog, uintptr(unsafe.Pointer(&n))) == nil && n > 0 {
			buf := make([]byte, n)
			if f.call("nvrtcGetProgramLog", f.getProgramLog, prog, uintptr(unsafe.Pointer(&buf[0]))) == nil {
				log = goString(buf)
			}
		}
		return nil, fmt.Errorf("cuda: compiling module %s: %w\n%s", name, cerr, log)
	}
	getSize, get, what := f.getCUBINSize, f.getCUBIN, "CUBIN"
	if ptx {
		getSize, get, what = f.getPTXSize, f.getPTX, "PTX"
	}
	var n uintptr
	if err := f.call("nvrtcGet"+what+"Size", getSize, prog, uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("cuda: compiling module %s: NVRTC returned an empty %s", name, what)
	}
	cubin := make([]byte, n)
	if err := f.call("nvrtcGet"+what, get, prog, uintptr(unsafe.Pointer(&cubin[0]))); err != nil {
		return nil, err
	}
	runtime.KeepAlive(src)
	runtime.KeepAlive(cname)
	return cubin, nil
}

func (c *nvidia) LoadModule(name, source string) (Module, error) {
	full := nvrtcSource(name, source)
	opts, ptx := c.rtc.target(c.props.Major, c.props.Minor)
	key := cacheKey(full, strings.Join(opts, " "), c.rtc.ver, fmt.Sprint(c.props.DriverVersion))
	ext := ".cubin"
	if ptx {
		ext = ".ptx"
	}
	path := filepath.Join(c.cache, key+ext)
	cubin, err := os.ReadFile(path)
	if err != nil || len(cubin) == 0 {
		if cubin, err = c.rtc.compile(name, full, opts, ptx); err != nil {
			return 0, err
		}
		if err := writeAtomic(path, cubin); err != nil {
			return 0, fmt.Errorf("cuda: caching module %s: %w", name, err)
		}
	}
	done, err := c.bind()
	if err != nil {
		return 0, err
	}
	defer done()
	var m uintptr
	if err := c.call("cuModuleLoadData "+name, c.cu.moduleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&cubin[0]))); err != nil {
		return 0, err
	}
	runtime.KeepAlive(cubin)
	c.modules = append(c.modules, m)
	return Module(m), nil
}

func (c *nvidia) Function(m Module, name string) (Function, error) {
	done, err := c.bind()
	if err != nil {
		return 0, err
	}
	defer done()
	cname := cstr(name)
	var f uintptr
	if err := c.call("cuModuleGetFunction "+name, c.cu.moduleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0]))); err != nil {
		return 0, err
	}
	return Function(f), nil
}

func (c *nvidia) Launch(f Function, grid, block Dim3, sharedBytes int, args *Args) error {
	ap, err := args.pointers()
	if err != nil {
		return err
	}
	done, err := c.bind()
	if err != nil {
		return err
	}
	defer done()
	err = c.call("cuLaunchKernel", c.cu.launchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z), uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedBytes), 0, ap, 0)
	runtime.KeepAlive(args)
	return err
}

func (c *nvidia) Synchronize() error {
	return c.boundCall("cuCtxSynchronize", c.cu.ctxSynchronize)
}

func (c *nvidia) Close() error {
	if c.ctx == 0 {
		return nil
	}
	done, err := c.bind()
	if err != nil {
		return err
	}
	defer done()
	errs := []error{c.dnnClose()}
	if c.handle != 0 {
		errs = append(errs, c.blas.call("cublasDestroy", c.blas.destroy, c.handle))
		c.handle = 0
	}
	if c.ptrs != 0 {
		errs = append(errs, c.call("cuMemFree", c.cu.memFree, uintptr(c.ptrs)))
		c.ptrs, c.ptrsLen = 0, 0
	}
	for _, m := range c.modules {
		errs = append(errs, c.call("cuModuleUnload", c.cu.moduleUnload, m))
	}
	c.modules = nil
	errs = append(errs, c.call("cuDevicePrimaryCtxRelease", c.cu.primaryCtxRelease, uintptr(c.dev)))
	c.ctx = 0
	return errors.Join(errs...)
}
