//go:build linux && (amd64 || arm64)

package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
// kernels, with NVRTC for two architectures, as the real driver does: it
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
	for name, src := range srcs {
		for _, arch := range [][2]int{{7, 0}, {8, 0}} {
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
	_, err = rtc.compile("broken.cu", nvrtcSource("broken.cu", "extern \"C\" __global__ void broken(float *x) {\n  x[0] = undefined_name;\n}\n"), nvrtcOpts(8, 0), false)
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
