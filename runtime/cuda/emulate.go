//go:build linux && (amd64 || arm64)

package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/internal/dl"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
	"github.com/ebitengine/purego"
)

//go:embed emu/cuda_emu.h
var emuHeader string

// EnvCXX names the C++ compiler of the emulation (default g++).
const EnvCXX = "DPFINETUNE_CUDA_CXX"

// emuFlags are the emulation's compiler flags: no contraction of a·b + c
// into an FMA and no fast math, so that float arithmetic rounds each
// operation as NVRTC's --fmad=false code does (the bit-for-bit contracts of
// the optimizer and the noise hold on both); hidden symbols but the
// launchers, so that a kernel named like a function of another library
// (add, scale, dot) is called as itself.
var emuFlags = []string{"-x", "c++", "-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread", "-ffp-contract=off", "-fno-fast-math", "-w"}

// emuLaunchMu serializes emulated launches process-wide: a module's launch
// state and shared arrays are per library, and a library is loaded once
// per process however many drivers load it.
var emuLaunchMu sync.Mutex

// emulated is the Driver that runs the kernel sources on the host: each
// module is compiled with g++ against emu/cuda_emu.h into a shared library
// (cached under cacheDir("cuda-emu")) and loaded with purego.Dlopen, no
// cgo. Device memory is C memory (libc's aligned_alloc, reached through
// purego): outside the Go heap, so the garbage collector neither moves
// nor frees it and the kernels, running on their own threads, may keep
// addresses into it; the host reads it directly, so the copies are Go
// copies.
type emulated struct {
	cxx, cxxVersion string
	cache           string
	allocFn, freeFn uintptr
	allocs          map[DevicePtr]int
	// cfg is a launch's configuration as emu_run reads it, on the heap so
	// that its address stays put during the call.
	cfg *[7]uint32
	// tfA and tfB hold a TF32 GEMM's operands rounded (Gemm), reused.
	tfA, tfB []float32
	// guard, in the guarded emulation (EmulatedGuarded), is the device
	// memory, closed to the host outside the driver's calls; nil in the
	// plain one, whose device memory is libc's.
	guard *guardArena
}

var (
	libcOnce            sync.Once
	libcAlloc, libcFree uintptr
	libcErr             error
)

func loadLibc() {
	var h uintptr
	for _, name := range []string{"libc.so.6", "libc.so"} {
		if h, libcErr = dl.Open(name, purego.RTLD_NOW|purego.RTLD_GLOBAL); libcErr == nil {
			break
		}
	}
	if libcErr != nil {
		libcErr = fmt.Errorf("cuda: emulation: libc: %w", libcErr)
		return
	}
	if libcAlloc, libcErr = purego.Dlsym(h, "aligned_alloc"); libcErr != nil {
		return
	}
	libcFree, libcErr = purego.Dlsym(h, "free")
}

// Emulated returns the emulated driver. It fails when there is no C++
// compiler (EnvCXX, default g++) or no libc to load.
func Emulated() (Driver, error) {
	e, err := newEmulated()
	if err != nil {
		return nil, err
	}
	return e, nil
}

// EmulatedGuarded returns the emulated driver with device memory the host
// cannot touch, as on a GPU: a read or write of it outside the driver's
// calls (a device pointer dereferenced as a host slice) faults, where the
// plain emulation, whose device memory is C memory, lets it pass. Go
// reports the fault with the faulting goroutine's stack, or as a panic
// under debug.SetPanicOnFault. DPFINETUNE_CUDA=emulate-guarded selects it
// (Open).
func EmulatedGuarded() (Driver, error) {
	e, err := newEmulated()
	if err != nil {
		return nil, err
	}
	if e.guard, err = newGuardArena(); err != nil {
		return nil, err
	}
	return e, nil
}

func newEmulated() (*emulated, error) {
	cxx := os.Getenv(EnvCXX)
	if cxx == "" {
		cxx = "g++"
	}
	path, err := exec.LookPath(cxx)
	if err != nil {
		return nil, fmt.Errorf("cuda: the emulation compiles kernels with a C++ compiler: %s not found (set %s)", cxx, EnvCXX)
	}
	ver, err := exec.Command(path, "-dumpfullversion", "-dumpversion").Output()
	if err != nil {
		return nil, fmt.Errorf("cuda: emulation: %s -dumpversion: %w", cxx, err)
	}
	libcOnce.Do(loadLibc)
	if libcErr != nil {
		return nil, libcErr
	}
	dir, err := cacheDir("cuda-emu")
	if err != nil {
		return nil, err
	}
	return &emulated{
		cxx: path, cxxVersion: strings.TrimSpace(string(ver)), cache: dir,
		allocFn: libcAlloc, freeFn: libcFree,
		allocs: map[DevicePtr]int{}, cfg: new([7]uint32),
	}, nil
}

func (e *emulated) Properties() Properties {
	kind := "emulated"
	if e.guard != nil {
		kind = "emulated, guarded memory"
	}
	return Properties{
		Name:  kind + " (" + filepath.Base(e.cxx) + " " + e.cxxVersion + ")",
		Major: 8, Minor: 0,
		TotalMem:        1 << 32,
		Multiprocessors: 2,
		Emulated:        true,
		ConvLibrary:     "none: the emulation's convolutions are its own",
	}
}

// emuAlign is the alignment of emulated allocations, as cuMemAlloc's.
const emuAlign = 256

func (e *emulated) Alloc(bytes int) (DevicePtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("cuda: emulation: allocation of %d bytes", bytes)
	}
	size := (bytes + emuAlign - 1) / emuAlign * emuAlign
	var p uintptr
	if e.guard != nil {
		defer e.guard.open()()
		if off, ok := e.guard.alloc(size); ok {
			p = uintptr(unsafe.Pointer(&e.guard.mem[off]))
		}
	} else {
		p, _, _ = purego.SyscallN(e.allocFn, emuAlign, uintptr(size))
	}
	if p == 0 {
		return 0, fmt.Errorf("cuda: emulation: out of memory allocating %d bytes", bytes)
	}
	clear(hostBytes(DevicePtr(p), size))
	e.allocs[DevicePtr(p)] = bytes
	return DevicePtr(p), nil
}

func (e *emulated) Free(p DevicePtr) error {
	if _, ok := e.allocs[p]; !ok {
		return fmt.Errorf("cuda: emulation: free of %#x, not an allocation", uintptr(p))
	}
	e.release(p)
	return nil
}

// release returns allocation p's memory (its entry in allocs still there).
func (e *emulated) release(p DevicePtr) {
	bytes := e.allocs[p]
	delete(e.allocs, p)
	if e.guard == nil {
		purego.SyscallN(e.freeFn, uintptr(p))
		return
	}
	off := int(uintptr(p) - uintptr(unsafe.Pointer(&e.guard.mem[0])))
	e.guard.release(gspan{off, (bytes + emuAlign - 1) / emuAlign * emuAlign})
}

// opened opens the guarded emulation's memory for a driver call that
// touches it and returns the function that closes it again (nothing to
// do in the plain emulation).
func (e *emulated) opened() func() {
	if e.guard == nil {
		return func() {}
	}
	return e.guard.open()
}

// check returns an error unless [p, p+bytes) lies in one allocation, as a
// GPU would fault on it.
func (e *emulated) check(p DevicePtr, bytes int) error {
	for base, n := range e.allocs {
		if p >= base && uintptr(p)+uintptr(bytes) <= uintptr(base)+uintptr(n) {
			return nil
		}
	}
	return fmt.Errorf("cuda: emulation: %d bytes at %#x are not device memory", bytes, uintptr(p))
}

func (e *emulated) CopyHtoD(dst DevicePtr, src unsafe.Pointer, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := e.check(dst, bytes); err != nil {
		return err
	}
	defer e.opened()()
	copy(hostBytes(dst, bytes), unsafe.Slice((*byte)(src), bytes))
	return nil
}

func (e *emulated) CopyDtoH(dst unsafe.Pointer, src DevicePtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := e.check(src, bytes); err != nil {
		return err
	}
	defer e.opened()()
	copy(unsafe.Slice((*byte)(dst), bytes), hostBytes(src, bytes))
	return nil
}

func (e *emulated) CopyDtoD(dst, src DevicePtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if err := errors.Join(e.check(dst, bytes), e.check(src, bytes)); err != nil {
		return err
	}
	defer e.opened()()
	copy(hostBytes(dst, bytes), hostBytes(src, bytes))
	return nil
}

// emuSource is what the emulation compiles for a kernel source: the
// header, the source (its lines numbered as in its file, for the
// compiler's messages) and a launcher per kernel.
func emuSource(name, source string) string {
	var b strings.Builder
	b.WriteString(emuHeader)
	fmt.Fprintf(&b, "\n#line 1 %q\n", name)
	b.WriteString(source)
	b.WriteString("\n")
	for _, k := range KernelNames(source) {
		fmt.Fprintf(&b, "EMU_EXPORT(%s)\n", k)
	}
	return b.String()
}

func (e *emulated) LoadModule(name, source string) (Module, error) {
	src := emuSource(name, source)
	key := cacheKey(src, e.cxxVersion, strings.Join(emuFlags, " "), runtime.GOARCH)
	lib := filepath.Join(e.cache, key+".so")
	if _, err := os.Stat(lib); err != nil {
		if err := e.compile(name, src, lib); err != nil {
			return 0, err
		}
	}
	h, err := dl.Open(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, fmt.Errorf("cuda: emulation: loading module %s: %w", name, err)
	}
	return Module(h), nil
}

// compile builds src into the shared library lib.
func (e *emulated) compile(name, src, lib string) error {
	tmp, err := os.MkdirTemp(e.cache, ".build-*")
	if err != nil {
		return fmt.Errorf("cuda: emulation: %w", err)
	}
	defer os.RemoveAll(tmp)
	in, out := filepath.Join(tmp, "module.cu"), filepath.Join(tmp, "module.so")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		return fmt.Errorf("cuda: emulation: %w", err)
	}
	args := append(append([]string{}, emuFlags...), "-o", out, in)
	cmd := exec.Command(e.cxx, args...)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cuda: emulation: compiling module %s: %v\n%s", name, err, strings.ReplaceAll(string(msg), in, "module.cu"))
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("cuda: emulation: %w", err)
	}
	if err := writeAtomic(lib, data); err != nil {
		return fmt.Errorf("cuda: emulation: caching module %s: %w", name, err)
	}
	return nil
}

func (e *emulated) Function(m Module, name string) (Function, error) {
	f, err := purego.Dlsym(uintptr(m), "emu_launch_"+name)
	if err != nil {
		return 0, fmt.Errorf("cuda: emulation: no kernel %s in the module: %w", name, err)
	}
	return Function(f), nil
}

// emuMaxShared is the dynamic shared memory a launch may ask for, the
// GPU's default limit.
const emuMaxShared = 48 << 10

func (e *emulated) Launch(f Function, grid, block Dim3, sharedBytes int, args *Args) error {
	if sharedBytes < 0 || sharedBytes > emuMaxShared {
		return fmt.Errorf("cuda: emulation: %d bytes of dynamic shared memory (at most %d)", sharedBytes, emuMaxShared)
	}
	emuLaunchMu.Lock()
	defer emuLaunchMu.Unlock()
	ap, err := args.pointers()
	if err != nil {
		return err
	}
	*e.cfg = [7]uint32{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, uint32(sharedBytes)}
	closeMem := e.opened()
	rc, _, _ := purego.SyscallN(uintptr(f), uintptr(unsafe.Pointer(e.cfg)), ap)
	closeMem()
	runtime.KeepAlive(args)
	switch rc {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("cuda: emulation: invalid launch configuration grid %v block %v", grid, block)
	case 3:
		return errors.New("cuda: emulation: a pointer argument is not aligned for its element type (a GPU faults on it)")
	}
	return fmt.Errorf("cuda: emulation: could not start the %d threads of a block", block.X*block.Y*block.Z)
}

// Gemm implements Driver with the CPU's SGEMM (runtime/blas) over the
// emulated device memory, after checking that every operand lies in it
// (as a GPU would fault).
func (e *emulated) Gemm(g *GemmArgs) error {
	la, lb, lc := g.extents()
	for _, o := range []struct {
		p DevicePtr
		n int
	}{{g.A, la}, {g.B, lb}, {g.C, lc}} {
		if err := e.check(o.p, 4*o.n); err != nil {
			return fmt.Errorf("cuda: emulation: GEMM operand: %w", err)
		}
	}
	if g.TF32 && g.Batch > 1 && !g.tensorAligned() {
		return errors.New("cuda: emulation: a batched TF32 GEMM's operand is not 16-byte aligned (cuBLAS's tensor-core kernels fault on it)")
	}
	defer e.opened()()
	a, b := floatsAt(g.A, la), floatsAt(g.B, lb)
	if g.TF32 {
		e.tfA, e.tfB = roundedTF32(e.tfA, a), roundedTF32(e.tfB, b)
		a, b = e.tfA, e.tfB
	}
	blas.SgemmStrided(g.TransA, g.TransB, g.M, g.N, g.K, g.Alpha, a, g.LDA, g.StrideA,
		b, g.LDB, g.StrideB, g.Beta, floatsAt(g.C, lc), g.LDC, g.StrideC, g.Batch)
	return nil
}

// Conv implements Driver: the emulation has no convolution library, so
// the Device's own convolution path runs.
func (e *emulated) Conv(*ConvArgs) error { return ErrNoConvLibrary }

// ConvWorkspace implements Driver: none.
func (e *emulated) ConvWorkspace() int { return 0 }

// roundedTF32 returns src rounded to TF32 in dst's storage (grown as
// needed).
func roundedTF32(dst, src []float32) []float32 {
	if cap(dst) < len(src) {
		dst = make([]float32, len(src))
	}
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = roundTF32(v)
	}
	return dst
}

// Synchronize implements Driver: emulated launches have finished when
// Launch returns.
func (e *emulated) Synchronize() error { return nil }

func (e *emulated) Close() error {
	for p := range e.allocs {
		e.release(p)
	}
	if e.guard != nil {
		e.guard.close()
		e.guard = nil
	}
	return nil
}
