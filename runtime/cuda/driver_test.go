//go:build linux && (amd64 || arm64)

package cuda

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// TestRealDriverAbsent checks the error of the GPU's driver on a machine
// without one: it names what is missing.
func TestRealDriverAbsent(t *testing.T) {
	t.Setenv(EnvLibCUDA, "")
	if _, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
		t.Skip("this machine has libcuda.so.1: the error path is not reachable")
	}
	d, err := Real()
	if err == nil {
		d.Close()
		t.Fatal("Real() succeeded without libcuda.so.1")
	}
	if msg := err.Error(); !strings.Contains(msg, "no CUDA driver") || !strings.Contains(msg, "libcuda.so.1") {
		t.Errorf("error %q does not say that libcuda.so.1 is missing", msg)
	}
	t.Setenv(EnvDriver, "")
	if _, err := Open(); err == nil || !strings.Contains(err.Error(), "no CUDA driver") {
		t.Errorf("Open() without a driver: %v", err)
	}
}

// TestOpenEmulated checks that DPFINETUNE_CUDA=emulate opens the device on
// the emulation.
func TestOpenEmulated(t *testing.T) {
	emuDriver(t) // skips without g++
	t.Setenv(EnvDriver, "emulate")
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !d.Properties().Emulated || !strings.HasPrefix(d.Name(), "cuda (emulated") {
		t.Errorf("Open() with %s=emulate gave %q, %+v", EnvDriver, d.Name(), d.Properties())
	}
}

// TestGuardedMemory checks the guarded emulation: DPFINETUNE_CUDA=
// emulate-guarded opens it; device memory written by a kernel and read
// back through the driver's copy holds the values, while a host read of
// it (a buffer's Floats view, as an engine's stray c[i] would be) faults,
// as on a GPU; and its allocator reuses freed memory, merged, with every
// allocation zeroed.
func TestGuardedMemory(t *testing.T) {
	if os.Getenv(EnvDriver) == "gpu" {
		t.Skip("the guarded emulation is no GPU")
	}
	emuDriver(t) // skips without g++
	t.Setenv(EnvDriver, "emulate-guarded")
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !strings.Contains(d.Name(), "guarded") {
		t.Errorf("Open() with %s=emulate-guarded gave %q", EnvDriver, d.Name())
	}
	b, err := d.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	d.Fill(2.5, b.Floats())
	host := make([]float32, 1000)
	if err := d.CopyOut(host, b, 0); err != nil {
		t.Fatal(err)
	}
	if host[0] != 2.5 || host[999] != 2.5 {
		t.Fatalf("read back %v … %v, want 2.5", host[0], host[999])
	}
	faulted := func() (ok bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				e, isErr := r.(interface{ Addr() uintptr })
				ok = isErr && e.Addr() >= uintptr(b.(*buffer).p) && e.Addr() < uintptr(b.(*buffer).p)+4000
			}
		}()
		guardSink = b.Floats()[10]
		return false
	}
	if !faulted() {
		t.Fatal("a host read of guarded device memory did not fault at its address")
	}
	// The allocator: freed spans are reused (merged with their
	// neighbours) and handed out zeroed.
	drv, err := EmulatedGuarded()
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	var ps []DevicePtr
	for i := 0; i < 4; i++ {
		p, err := drv.Alloc(1000)
		if err != nil {
			t.Fatal(err)
		}
		ones := make([]float32, 250)
		for j := range ones {
			ones[j] = 1
		}
		if err := drv.CopyHtoD(p, unsafe.Pointer(&ones[0]), 1000); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps[1:3] {
		if err := drv.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	p, err := drv.Alloc(2000) // the two freed neighbours, merged
	if err != nil {
		t.Fatal(err)
	}
	if p != ps[1] {
		t.Errorf("an allocation of two freed neighbours' size went to %#x, not to the first of them at %#x", uintptr(p), uintptr(ps[1]))
	}
	got := make([]float32, 500)
	if err := drv.CopyDtoH(unsafe.Pointer(&got[0]), p, 2000); err != nil {
		t.Fatal(err)
	}
	for j, v := range got {
		if v != 0 {
			t.Fatalf("reused memory not zeroed: [%d] = %v", j, v)
		}
	}
	if err := drv.Free(ps[1] + 1); err == nil {
		t.Error("freeing an address inside an allocation succeeded")
	}
}

// TestDriverProperties checks and logs the driver's properties: on a GPU
// (DPFINETUNE_CUDA=gpu) the device, its driver and the convolution
// library found, for gpu-check's log.
func TestDriverProperties(t *testing.T) {
	p := emuDriver(t).Properties()
	if p.Name == "" || p.Multiprocessors <= 0 || p.TotalMem <= 0 || p.Major <= 0 {
		t.Errorf("properties %+v", p)
	}
	t.Logf("%+v", p)
}

// guardSink keeps TestGuardedMemory's host read from being optimized away.
var guardSink float32

// TestArgsPacking checks the argument array: one pointer per argument, to
// its value's bytes, structs over consecutive slots.
func TestArgsPacking(t *testing.T) {
	var a Args
	a.I32(-2).F32(1.5).U64(1 << 40).Bytes([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}).F64(0.25).Ptr(0x1000)
	if a.Len() != 6 {
		t.Fatalf("%d arguments, want 6", a.Len())
	}
	if _, err := a.pointers(); err != nil {
		t.Fatal(err)
	}
	want := []uint8{0, 1, 2, 3, 5, 6}
	for i, w := range want {
		if a.first[i] != w || a.ptrs[i] == 0 {
			t.Errorf("argument %d in slot %d, want %d", i, a.first[i], w)
		}
	}
	if int32(a.vals[0]) != -2 || a.vals[2] != 1<<40 || a.vals[3] != 0x0807060504030201 || a.vals[4] != 0x0c0b0a09 || a.vals[6] != 0x1000 {
		t.Errorf("slots %x", a.vals[:7])
	}
	a.Reset()
	if a.Len() != 0 {
		t.Error("Reset left arguments")
	}
}

func TestKernelNames(t *testing.T) {
	src := `extern "C" __global__ void a(int x) {}
__device__ void helper() {}
extern "C"  __global__  void __launch_bounds__(256) b_2 (float *y) {}
__global__ void mangled() {}`
	if got := strings.Join(KernelNames(src), ","); got != "a,b_2" {
		t.Errorf("KernelNames = %s, want a,b_2", got)
	}
}

// TestNVRTCCompiles compiles every kernel source, and the emulation's test
// kernels, with NVRTC for two architectures it supports, as the real driver does: it
// needs the library (DPFINETUNE_NVRTC or the usual names), not a GPU, and
// skips without it.
func TestNVRTCCompiles(t *testing.T) {
	rtc, err := loadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC here: %v", err)
	}
	t.Logf("NVRTC %s, architectures %v", rtc.ver, rtc.archs)
	srcs := map[string]string{"emu_test.cu": emuTestSource}
	for mod := range deviceKernels {
		src, err := moduleSource(mod)
		if err != nil {
			t.Fatal(err)
		}
		srcs[mod] = src
	}
	// Two architectures the library compiles for: sm_70 and sm_80 where it
	// says nothing of its list, else its oldest from sm_70 on (the kernels'
	// double atomicAdd needs sm_60; CUDA 13's NVRTC has dropped sm_70) and
	// its newest up to sm_80.
	targets := [][2]int{{7, 0}, {8, 0}}
	lo, hi := 0, 0
	for _, a := range rtc.archs {
		if a >= 70 && (lo == 0 || a < lo) {
			lo = a
		}
		if a >= 70 && a <= 80 {
			hi = max(hi, a)
		}
	}
	if lo > 0 {
		targets = [][2]int{{lo / 10, lo % 10}, {max(hi, lo) / 10, max(hi, lo) % 10}}
	}
	for name, src := range srcs {
		for _, arch := range targets {
			cubin, err := rtc.compile(name, nvrtcSource(name, src), nvrtcOpts(arch[0], arch[1]), false)
			if err != nil {
				t.Errorf("sm_%d%d: %v", arch[0], arch[1], err)
				continue
			}
			if len(cubin) < 4 || string(cubin[1:4]) != "ELF" {
				t.Errorf("%s sm_%d%d: %d bytes that are not an ELF cubin", name, arch[0], arch[1], len(cubin))
			}
		}
	}
	_, err = rtc.compile("broken.cu", nvrtcSource("broken.cu", "extern \"C\" __global__ void broken(float *x) {\n  x[0] = undefined_name;\n}\n"), nvrtcOpts(targets[1][0], targets[1][1]), false)
	if err == nil || !strings.Contains(err.Error(), "undefined_name") || !strings.Contains(err.Error(), "broken.cu") {
		t.Errorf("compile error: %v, want NVRTC's log naming broken.cu and undefined_name", err)
	}
}

// TestNVRTCNoFMA checks the PTX of the device's kernels for fused
// multiply-adds: with --fmad=false there is none, so that each product
// and sum rounds on its own on the GPU as on the CPU.
func TestNVRTCNoFMA(t *testing.T) {
	rtc, err := loadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC here: %v", err)
	}
	for mod := range deviceKernels {
		if mathModules[mod] {
			continue // CUDA's math functions use fma by design
		}
		src, err := moduleSource(mod)
		if err != nil {
			t.Fatal(err)
		}
		opts := append([]string{"--gpu-architecture=compute_80"}, nvrtcOptions...)
		ptx, err := rtc.compile(mod, nvrtcSource(mod, src), opts, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(ptx), "\n") {
			if strings.Contains(line, "fma.") || strings.Contains(line, "mad.f") || strings.Contains(line, "mad.rn.f") {
				t.Errorf("%s: a fused multiply-add in the PTX: %s", mod, strings.TrimSpace(line))
			}
		}
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv(EnvCache, "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	dir, err := cacheDir("cuda-emu")
	if err != nil || !strings.Contains(dir, "dpfinetune") {
		t.Errorf("without a home: %q, %v", dir, err)
	}
	base := t.TempDir()
	t.Setenv(EnvCache, base)
	if dir, err := cacheDir("x"); err != nil || dir != base+"/x" {
		t.Errorf("with %s: %q, %v", EnvCache, dir, err)
	}
	// A cache home that cannot hold directories (a file: refused even to
	// root): the temporary directory.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvCache, "")
	t.Setenv("XDG_CACHE_HOME", file)
	if dir, err := cacheDir("y"); err != nil || !strings.HasPrefix(dir, os.TempDir()) {
		t.Errorf("with an unwritable cache home: %q, %v; want a directory under %s", dir, err, os.TempDir())
	}
	if cacheKey("ab", "c") == cacheKey("a", "bc") {
		t.Error("cacheKey does not separate its parts")
	}
}

func TestNVRTCTarget(t *testing.T) {
	f := &nvrtc{archs: []int{52, 60, 70, 80}}
	for _, c := range []struct {
		major, minor int
		arch         string
		ptx          bool
	}{{8, 0, "sm_80", false}, {8, 6, "compute_80", true}, {9, 0, "compute_80", true}, {5, 0, "sm_50", false}} {
		opts, ptx := f.target(c.major, c.minor)
		if opts[0] != "--gpu-architecture="+c.arch || ptx != c.ptx || !strings.Contains(strings.Join(opts, " "), "--fmad=false") {
			t.Errorf("%d.%d: %v ptx=%v, want %s ptx=%v", c.major, c.minor, opts, ptx, c.arch, c.ptx)
		}
	}
	if opts, ptx := (&nvrtc{}).target(9, 0); opts[0] != "--gpu-architecture=sm_90" || ptx {
		t.Errorf("without the list: %v %v", opts, ptx)
	}
}
