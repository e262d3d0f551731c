//go:build linux && (amd64 || arm64)

package cuda

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

//go:embed testdata/fakecuda.c
var fakeCUDASource string

// fakeDriver returns the real driver (nvidia.go) on testdata/fakecuda.c, a
// stand-in for libcuda.so.1 and NVRTC built with gcc: the purego calls,
// their arguments, the context binding, the compile options and the cubin
// cache run as on a GPU, the kernels on the emulation. It skips without
// gcc and g++.
func fakeDriver(t *testing.T) Driver {
	t.Helper()
	for _, c := range []string{"gcc", "g++"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("no %s for the stand-in driver: %v", c, err)
		}
	}
	dir, err := cacheDir(filepath.Join("cuda-fake", cacheKey(fakeCUDASource, emuHeader)))
	if err != nil {
		t.Fatal(err)
	}
	lib, hdr := filepath.Join(dir, "libfakecuda.so"), filepath.Join(dir, "cuda_emu.h")
	if _, err := os.Stat(lib); err != nil {
		src := filepath.Join(t.TempDir(), "fakecuda.c")
		if err := os.WriteFile(src, []byte(fakeCUDASource), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(t.TempDir(), "libfakecuda.so")
		if out, err := exec.Command("gcc", "-O1", "-shared", "-fPIC", "-o", tmp, src, "-ldl").CombinedOutput(); err != nil {
			t.Fatalf("building the stand-in driver: %v\n%s", err, out)
		}
		data, err := os.ReadFile(tmp)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeAtomic(hdr, []byte(emuHeader)); err != nil {
			t.Fatal(err)
		}
		if err := writeAtomic(lib, data); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(EnvLibCUDA, lib)
	t.Setenv(EnvNVRTC, lib)
	t.Setenv(EnvCUBLAS, lib)
	t.Setenv(EnvCUDNN, lib)
	t.Setenv("FAKECUDA_HEADER", hdr)
	t.Setenv("FAKECUDA_CACHE", dir)
	t.Setenv(EnvCache, t.TempDir()) // the cubins: compiled afresh, cached here
	d, err := Real()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRealDriverOnFake runs the real driver on the stand-in: properties,
// the Device's operations bit for bit against the CPU (host and device
// operands), the noise, compile errors with NVRTC's log, driver errors
// with their names, and the cubin cache.
func TestRealDriverOnFake(t *testing.T) {
	drv := fakeDriver(t)
	p := drv.Properties()
	if p.Name != "Fake GPU" || p.Major != 8 || p.Minor != 6 || p.Multiprocessors != 3 || p.TotalMem != 3<<30 || p.DriverVersion != 12040 || p.Emulated {
		t.Errorf("properties %+v", p)
	}
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range opCases {
		for _, n := range []int{0, 1, 257, 3001} {
			seed := int64(n) + 11
			want, _ := c.run(runtime.CPU{}, &placer{}, n, seed)
			for _, dev := range []bool{false, true} {
				pl := &placer{bufs: map[uintptr]runtime.Buffer{}}
				if dev {
					pl.dev = d
				}
				got, _ := c.run(d, pl, n, seed)
				if err := sameBits(got, want); err != nil {
					t.Fatalf("%s n=%d device operands=%v: %v", c.name, n, dev, err)
				}
				for _, b := range pl.bufs {
					if err := d.Free(b); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	key := noise.Key{3, 1, 4}
	x, want := make([]float32, 5003), make([]float32, 5003)
	runtime.CPU{}.AddGaussianNoise(want, runtime.CPU{}.PrepareNoise(key, 9), 2, 1.5, 0.5)
	d.AddGaussianNoise(x, d.PrepareNoise(key, 9), 2, 1.5, 0.5)
	if err := sameBits(widen32(x), widen32(want)); err != nil {
		t.Errorf("noise: %v", err)
	}

	_, err = drv.LoadModule("broken.cu", "extern \"C\" __global__ void broken(float *x) {\n  x[0] = undefined_name;\n}\n")
	if err == nil || !strings.Contains(err.Error(), "NVRTC_ERROR_COMPILATION") || !strings.Contains(err.Error(), "undefined_name") {
		t.Errorf("compile error: %v", err)
	}
	if err := drv.Free(12345); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_VALUE") {
		t.Errorf("free of a bad pointer: %v", err)
	}
	m, err := drv.LoadModule("emu_test.cu", emuTestSource)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Function(m, "nope"); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NOT_FOUND") {
		t.Errorf("missing kernel: %v", err)
	}
	// The cubins are cached: a second load reads them back.
	cached, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "*.cubin"))
	if len(cached) != len(deviceKernels)+1 {
		t.Errorf("%d cubins cached, want %d", len(cached), len(deviceKernels)+1)
	}
	if _, err := drv.LoadModule("emu_test.cu", emuTestSource); err != nil {
		t.Errorf("loading a cached cubin: %v", err)
	}
	if err := drv.Synchronize(); err != nil {
		t.Error(err)
	}
}

// TestConvLibraryOnFake runs the convolutions through the cuDNN binding
// (cudnn.go, the Device's dnnConv) on the stand-in's cuDNN: the
// convolution cases of TestNNReduceOps (Conv, ConvBackward, ConvTranspose
// and its backward on random shapes: 1 to 3 spatial axes, groups,
// depthwise, strides, dilations, pads) and ConvWeightGrad's, held to the
// reference backend and the CPU. The library ran products, and refused
// only what it cannot take (padding that differs between an axis's ends),
// which the Device's own path then computed; its workspace counts in the
// Device's memory; with DPFINETUNE_CUDNN=off the driver loads none and
// says so.
func TestConvLibraryOnFake(t *testing.T) {
	// cuDNN wherever it runs a shape: the GEMM path's rival measurement
	// (TestConvPathOnFake) would leave some shapes' products to the GEMM
	// path by the stand-in's times.
	t.Setenv(EnvCUDNNGEMM, "off")
	drv := fakeDriver(t)
	if lib := drv.Properties().ConvLibrary; !strings.HasPrefix(lib, "cuDNN 90100 (") {
		t.Fatalf("ConvLibrary %q", lib)
	}
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range nnCases() {
		if strings.HasPrefix(c.name, "Conv") {
			t.Run(c.name, func(t *testing.T) { checkGraphCase(t, d, c) })
		}
	}
	for _, c := range persampleCases {
		if c.name == "ConvWeightGrad" {
			testValueCases(t, d, []valueCase{c}, 30)
		}
	}
	if d.dnnRuns == 0 {
		t.Fatal("cuDNN ran no convolution")
	}
	for s, err := range d.dnnRefused {
		if !strings.Contains(err.Error(), "pads") {
			t.Errorf("cuDNN refused %+v: %v", s, err)
		}
	}
	t.Logf("%d products through cuDNN, %d shapes refused (asymmetric pads)", d.dnnRuns, len(d.dnnRefused))
	// The deterministic algorithm's workspace (the stand-in's 1 MiB)
	// counts in the Device's memory.
	ws := drv.ConvWorkspace()
	if inUse, _ := d.MemoryStats(); ws < 1<<20 || inUse != d.inUse+int64(ws) {
		t.Errorf("cuDNN's workspace %d bytes (want at least 1 MiB), in use %d beside the Device's %d", ws, inUse, d.inUse)
	}
	// The default choice is cuDNN's measurement, kept on disk per GPU
	// model, driver and cuDNN.
	if lib := drv.Properties().ConvLibrary; !strings.HasSuffix(lib, ", algorithms by measurement") {
		t.Errorf("ConvLibrary by default: %q, want the measurement", lib)
	}
	measured := drv.(*nvidia).dnnFound
	kept, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "cudnn-algos-*.json"))
	if measured == 0 || len(kept) != 1 {
		t.Fatalf("%d algorithms chosen by cudnnFind…, kept in %q", measured, kept)
	}
	var file dnnChoicesFile
	if b, err := os.ReadFile(kept[0]); err != nil || json.Unmarshal(b, &file) != nil || len(file.Choices) != measured || !strings.HasPrefix(file.GPU, drv.Properties().Name) {
		t.Fatalf("kept choices %s: %d of %d, GPU %q (%v)", kept[0], len(file.Choices), measured, file.GPU, err)
	}
	// A later run takes the kept choices and measures nothing: made
	// visible by keeping the stand-in's other algorithm (not deterministic,
	// no workspace), which the measurement never chooses.
	for k, ch := range file.Choices {
		ch.Algo, ch.Workspace = 1, 0
		file.Choices[k] = ch
	}
	if b, err := json.Marshal(&file); err != nil || os.WriteFile(kept[0], b, 0o644) != nil {
		t.Fatal("rewriting the kept choices", err)
	}
	t.Run("kept", func(t *testing.T) {
		nv, d := convCasesOnReal(t, ", algorithms by measurement")
		if d.dnnRuns == 0 || nv.dnnFound != 0 {
			t.Errorf("%d products through cuDNN, %d algorithms measured again", d.dnnRuns, nv.dnnFound)
		}
		for k, p := range nv.dnnPlans {
			for kind, a := range p.algo {
				if a >= 0 && a != 1 {
					t.Errorf("%s: algorithm %d, not the kept 1", dnnChoiceKey(k, ConvKind(kind)), a)
				}
			}
		}
	})
	// Nondeterministic algorithms allowed: the stand-in's other one
	// (no workspace, as fast by its measurement) is chosen, and kept in a
	// file of its own.
	t.Run("nondeterministic", func(t *testing.T) {
		t.Setenv(EnvCUDNNDeterministic, "off")
		nv, d := convCasesOnReal(t, ", nondeterministic ones allowed")
		if d.dnnRuns == 0 || nv.dnnFound == 0 {
			t.Errorf("%d products through cuDNN, %d algorithms measured (the deterministic choices' file is not this one's)", d.dnnRuns, nv.dnnFound)
		}
		for k, p := range nv.dnnPlans {
			for kind, a := range p.algo {
				if a >= 0 && a != 1 {
					t.Errorf("%s: algorithm %d, want the stand-in's nondeterministic 1", dnnChoiceKey(k, ConvKind(kind)), a)
				}
			}
		}
		if kept, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "cudnn-algos-*.json")); len(kept) != 2 {
			t.Errorf("choices kept in %q, want the deterministic file and this one", kept)
		}
		badValueNamed(t, EnvCUDNNDeterministic, "sometimes")
	})
	// Nondeterministic algorithms allowed by the run (SetDeterministic:
	// train without --seed), the variable unset: chosen and kept as under
	// the variable; determinism asked again chooses every shape again.
	t.Run("SetDeterministic", func(t *testing.T) {
		t.Setenv(EnvCache, t.TempDir())
		d := realDevice(t, func(lib string) bool { return strings.HasSuffix(lib, ", algorithms by measurement") }, "deterministic by default")
		nv := d.drv.(*nvidia)
		for _, on := range []bool{false, true} {
			d.SetDeterministic(on)
			if lib := d.props.ConvLibrary; strings.HasSuffix(lib, ", nondeterministic ones allowed") == on {
				t.Errorf("SetDeterministic(%v): ConvLibrary %q", on, lib)
			}
			convCases(t, d)
			want := int32(1) // the stand-in's nondeterministic algorithm
			if on {
				want = 0
			}
			for k, p := range nv.dnnPlans {
				for kind, a := range p.algo {
					if a >= 0 && a != want {
						t.Errorf("SetDeterministic(%v): %s: algorithm %d, want %d", on, dnnChoiceKey(k, ConvKind(kind)), a, want)
					}
				}
			}
		}
		if kept, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "cudnn-algos-*.json")); len(kept) != 2 {
			t.Errorf("choices kept in %q, want a file for each setting", kept)
		}
		// The variable, set, wins over the run's setting.
		t.Setenv(EnvCUDNNDeterministic, "on")
		d = realDevice(t, func(lib string) bool { return strings.HasSuffix(lib, ", algorithms by measurement") }, "deterministic")
		d.SetDeterministic(false)
		convCases(t, d)
		if lib := d.props.ConvLibrary; strings.Contains(lib, "nondeterministic") {
			t.Errorf("%s=on, SetDeterministic(false): ConvLibrary %q", EnvCUDNNDeterministic, lib)
		}
		for k, p := range d.drv.(*nvidia).dnnPlans {
			for kind, a := range p.algo {
				if a > 0 {
					t.Errorf("%s=on, SetDeterministic(false): %s: algorithm %d", EnvCUDNNDeterministic, dnnChoiceKey(k, ConvKind(kind)), a)
				}
			}
		}
	})
	// The heuristics, asked for: nothing measured, nothing kept.
	t.Run("heuristic", func(t *testing.T) {
		t.Setenv(EnvCUDNNAlgo, "heuristic")
		t.Setenv(EnvCache, t.TempDir())
		nv, d := convCasesOnReal(t, ", algorithms by heuristics")
		kept, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "cudnn-algos-*.json"))
		if n := nv.dnnFound; d.dnnRuns == 0 || n != 0 || len(kept) != 0 {
			t.Errorf("%d products through cuDNN, %d algorithms measured, kept in %q", d.dnnRuns, n, kept)
		}
		badValueNamed(t, EnvCUDNNAlgo, "fastest")
	})
	// A workspace bound below the stand-in's deterministic algorithm's
	// 1 MiB: no algorithm fits, every shape takes the GEMM path (the
	// results still the reference's) and says why; a bound the variable
	// does not take is named.
	t.Run("workspace bound", func(t *testing.T) {
		t.Setenv(EnvCUDNNWorkspace, "0")
		t.Setenv(EnvCache, t.TempDir())
		nv, d := convCasesOnReal(t, ", algorithms by measurement")
		if d.dnnRuns != 0 || len(d.dnnRefused) == 0 || nv.ConvWorkspace() != 0 {
			t.Errorf("%d products through cuDNN, %d shapes refused, workspace %d bytes; want none, all, none", d.dnnRuns, len(d.dnnRefused), nv.ConvWorkspace())
		}
		for s, err := range d.dnnRefused {
			if msg := err.Error(); !strings.Contains(msg, "pads") && !strings.Contains(msg, EnvCUDNNWorkspace) {
				t.Errorf("refused %+v: %v, want the bound named", s, err)
			}
		}
		badValueNamed(t, EnvCUDNNWorkspace, "lots")
	})
	// A memory cap (Device.LimitMemory, --max-memory) bounds the
	// workspace by a sixteenth of it: here below the stand-in's 1 MiB,
	// after the products had chosen its algorithm. The workspace is
	// released, the products choose again and find none: the GEMM path
	// from then on.
	t.Run("memory cap", func(t *testing.T) {
		t.Setenv(EnvCache, t.TempDir())
		nv, d := convCasesOnReal(t, ", algorithms by measurement")
		if d.dnnRuns == 0 || nv.ConvWorkspace() < 1<<20 {
			t.Fatalf("%d products through cuDNN, workspace %d bytes before the cap", d.dnnRuns, nv.ConvWorkspace())
		}
		d.LimitMemory(16<<20 - 16)
		if ws := nv.ConvWorkspace(); ws != 0 {
			t.Errorf("workspace %d bytes after a cap of 16 MiB − 16", ws)
		}
		runs := d.dnnRuns
		convCases(t, d)
		if d.dnnRuns != runs {
			t.Errorf("%d products through cuDNN after the cap", d.dnnRuns-runs)
		}
		named := 0
		for _, err := range d.dnnRefused {
			if strings.Contains(err.Error(), EnvCUDNNWorkspace) {
				named++
			}
		}
		if named == 0 {
			t.Errorf("no shape refused for the workspace bound: %v", d.dnnRefused)
		}
	})
	t.Setenv(EnvCUDNN, "off")
	off, err := Real()
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if lib := off.Properties().ConvLibrary; !strings.Contains(lib, "off") {
		t.Errorf("ConvLibrary with %s=off: %q", EnvCUDNN, lib)
	}
	if err := off.Conv(&ConvArgs{}); !errors.Is(err, ErrNoConvLibrary) {
		t.Errorf("Conv with %s=off: %v", EnvCUDNN, err)
	}
}

// TestRealDriverNewerGPU runs the stand-in with an NVRTC that does not
// know the device's sm_86: the driver compiles PTX for compute_80 and
// loads that.
func TestRealDriverNewerGPU(t *testing.T) {
	t.Setenv("FAKECUDA_ARCHS", "70,75,80")
	drv := fakeDriver(t)
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	x := []float32{1, 2, 3}
	d.Scale(2, x)
	if x[0] != 2 || x[2] != 6 {
		t.Errorf("Scale on PTX modules: %v", x)
	}
	ptx, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "*.ptx"))
	cubins, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "*.cubin"))
	if len(ptx) != len(deviceKernels) || len(cubins) != 0 {
		t.Errorf("%d PTX and %d cubin modules cached, want %d and 0", len(ptx), len(cubins), len(deviceKernels))
	}
}

// TestLibraryDiscovery: where a library is on no loader path, the driver
// finds it among a Python's NVIDIA wheels (here a virtualenv's
// site-packages/nvidia/cublas/lib, holding a stand-in: a copy of libm),
// newest version first, its companion loaded beside it.
func TestLibraryDiscovery(t *testing.T) {
	libm, _ := filepath.Glob("/lib/*/libm.so.6")
	if more, _ := filepath.Glob("/usr/lib/*/libm.so.6"); len(libm) == 0 {
		libm = more
	}
	if len(libm) == 0 {
		t.Skip("no libm.so.6 to stand in for a wheel's library")
	}
	data, err := os.ReadFile(libm[0])
	if err != nil {
		t.Fatal(err)
	}
	venv := t.TempDir()
	dir := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cublas", "lib")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"libcublas.so.12", "libcublas.so.13", "libcublasLt.so.13", "README"} {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("VIRTUAL_ENV", venv)
	files := libraryFiles("libcublas.so.1[1-9]*")
	want := []string{filepath.Join(dir, "libcublas.so.13"), filepath.Join(dir, "libcublas.so.12")}
	if len(files) < 2 || files[0] != want[0] || files[1] != want[1] {
		t.Fatalf("libraryFiles = %v, want %v first", files, want)
	}
	_, lib, err := dlopenFound("DPFINETUNE_TEST_UNSET", "libcublas.so.1[1-9]*", []string{"libcublasLt.so.1[1-9]*"}, "libdpfinetune-absent.so.13")
	if err != nil || lib != want[0] {
		t.Errorf("dlopenFound = %q, %v; want %s", lib, err, want[0])
	}
	t.Setenv("VIRTUAL_ENV", t.TempDir())
	if _, _, err := dlopenFound("DPFINETUNE_TEST_UNSET", "libdpfinetune-absent.so.1[1-9]*", nil, "libdpfinetune-absent.so.13"); err == nil || !strings.Contains(err.Error(), "libdpfinetune-absent.so.13") {
		t.Errorf("dlopenFound of nothing: %v, want the loader's error", err)
	}
}

// convCasesOnReal opens the real driver under the test's environment,
// checks that its ConvLibrary ends with suffix, and runs nnCases'
// convolutions on a Device over it: the driver's and the Device's
// counts are the caller's to check (both closed at the test's end).
func convCasesOnReal(t *testing.T, suffix string) (*nvidia, *Device) {
	t.Helper()
	d := realDevice(t, func(lib string) bool { return strings.HasSuffix(lib, suffix) }, "to end with "+suffix)
	convCases(t, d)
	return d.drv.(*nvidia), d
}

// convCases runs nnCases' convolutions on d.
func convCases(t *testing.T, d *Device) {
	t.Helper()
	for _, c := range nnCases() {
		if strings.HasPrefix(c.name, "Conv/") {
			t.Run(c.name, func(t *testing.T) { checkGraphCase(t, d, c) })
		}
	}
}

// realDevice opens the real driver under the test's environment, checks
// its ConvLibrary with ok (want says what it wants, in the error), and
// returns a Device over it, closed at the test's end.
func realDevice(t *testing.T, ok func(lib string) bool, want string) *Device {
	t.Helper()
	drv, err := Real()
	if err != nil {
		t.Fatal(err)
	}
	if lib := drv.Properties().ConvLibrary; !ok(lib) {
		t.Errorf("ConvLibrary %q, want it %s", lib, want)
	}
	d, err := New(drv)
	if err != nil {
		drv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestConvPathOnFake runs the measured choice between cuDNN and the
// Device's GEMM path (libOrGEMM, EnvCUDNNGEMM) on the stand-in, with the
// timer replaced so that the GEMM path wins the forward and filter
// products and cuDNN the data products: every product of a shape both
// take is measured once and runs the winner (the results still the
// reference's); the choices are kept on disk, and a second run measures
// nothing, takes them, and writes the first run's bits — the measuring
// calls wrote the winner's result too. With EnvCUDNNGEMM=off, or cuDNN's
// heuristics, nothing is measured and cuDNN runs more products; a value
// the variable does not take is named.
func TestConvPathOnFake(t *testing.T) {
	fakeDriver(t).Close() // the stand-in's environment
	libWins := func(kind ConvKind) bool { return kind == ConvBackwardData }
	old := pathTimer
	pathTimer = func(d *Device, kind ConvKind, lib bool, run func()) time.Duration {
		run()
		if lib == libWins(kind) {
			return time.Millisecond
		}
		return 2 * time.Millisecond
	}
	t.Cleanup(func() { pathTimer = old })
	var cases []graphCase
	for _, c := range nnCases() {
		if strings.HasPrefix(c.name, "Conv/") || strings.HasPrefix(c.name, "ConvTranspose/") {
			cases = append(cases, c)
		}
	}
	// run opens a Device on the real driver, checks its ConvLibrary, and
	// runs the cases with device operands, held to the reference.
	run := func(t *testing.T, libWant string) (*Device, [][][]float32) {
		t.Helper()
		d := realDevice(t, func(lib string) bool { return strings.Contains(lib, libWant) }, "to say "+libWant)
		var outs [][][]float32
		for _, c := range cases {
			p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
			got := c.run(d, p)
			for _, b := range p.bufs {
				d.Free(b)
			}
			if err := closeOutputs(got, c.run(reference.Device{}, &placer{}), c.tol); err != nil {
				t.Errorf("%s: against the reference: %v", c.name, err)
			}
			outs = append(outs, got)
		}
		return d, outs
	}
	measured, first := run(t, "or GEMMs, whichever measures faster")
	if measured.pathsMeasured == 0 || measured.pathsMeasured != len(measured.paths) {
		t.Fatalf("%d products measured, %d choices", measured.pathsMeasured, len(measured.paths))
	}
	for k, lib := range measured.paths {
		if lib != libWins(k.kind) || !convByGEMM(k.s) {
			t.Errorf("%s of %v: cuDNN=%v", dnnKindName[k.kind], k.s.In, lib)
		}
	}
	kept, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "cudnn-algos-*.json"))
	var file dnnChoicesFile
	if len(kept) != 1 {
		t.Fatalf("choices kept in %q", kept)
	}
	if b, err := os.ReadFile(kept[0]); err != nil || json.Unmarshal(b, &file) != nil || len(file.Paths) != measured.pathsMeasured {
		t.Fatalf("kept paths %s: %d of %d measured (%v)", kept[0], len(file.Paths), measured.pathsMeasured, err)
	}
	for k, ch := range file.Paths {
		if want := strings.HasPrefix(k, dnnKindName[ConvBackwardData]+" "); ch.Library != want || ch.LibraryMS <= 0 || ch.GEMMMS <= 0 {
			t.Errorf("kept %q: %+v, want cuDNN=%v and both times", k, ch, want)
		}
	}

	again, second := run(t, "or GEMMs, whichever measures faster")
	if again.pathsMeasured != 0 || len(again.paths) != len(measured.paths) {
		t.Errorf("the second run measured %d products and took %d choices, want 0 and %d", again.pathsMeasured, len(again.paths), len(measured.paths))
	}
	for i, c := range cases {
		if err := closeOutputs(second[i], first[i], 0); err != nil {
			t.Errorf("%s: the kept paths' bits differ from the measuring run's: %v", c.name, err)
		}
	}

	// Another build's GEMM path (its kernels' hash differs): measured
	// afresh, cuDNN's kept algorithms taken as they are.
	file.PathsKernels = "another build"
	if b, err := json.Marshal(&file); err != nil || os.WriteFile(kept[0], b, 0o644) != nil {
		t.Fatal("rewriting the kept choices", err)
	}
	rebuilt, _ := run(t, "or GEMMs, whichever measures faster")
	if rebuilt.pathsMeasured != measured.pathsMeasured || rebuilt.drv.(*nvidia).dnnFound != 0 {
		t.Errorf("after another build's kept paths: %d products measured (want %d), %d algorithms measured (want 0)",
			rebuilt.pathsMeasured, measured.pathsMeasured, rebuilt.drv.(*nvidia).dnnFound)
	}

	t.Setenv(EnvCUDNNGEMM, "off")
	libOnly, _ := run(t, "algorithms by measurement")
	if libOnly.pathsMeasured != 0 || len(libOnly.paths) != 0 || libOnly.dnnRuns <= again.dnnRuns {
		t.Errorf("%s=off: %d measured, %d choices, %d cuDNN products (with the GEMM path's: %d)", EnvCUDNNGEMM, libOnly.pathsMeasured, len(libOnly.paths), libOnly.dnnRuns, again.dnnRuns)
	}
	t.Setenv(EnvCUDNNGEMM, "")
	t.Setenv(EnvCUDNNAlgo, "heuristic")
	if heur, _ := run(t, "algorithms by heuristics"); heur.pathsMeasured != 0 {
		t.Errorf("cuDNN's heuristics: %d products measured against the GEMM path", heur.pathsMeasured)
	}
	t.Setenv(EnvCUDNNAlgo, "")
	badValueNamed(t, EnvCUDNNGEMM, "sometimes")
}

// badValueNamed sets env to a value it does not take and checks that the
// real driver's convolution library line names the variable (cuDNN then
// stays unloaded; the driver opens).
func badValueNamed(t *testing.T, env, value string) {
	t.Helper()
	t.Setenv(env, value)
	if bad, err := Real(); err == nil {
		if lib := bad.Properties().ConvLibrary; !strings.Contains(lib, env) {
			t.Errorf("ConvLibrary with %s=%s: %q, want the variable named", env, value, lib)
		}
		bad.Close()
	}
}

// TestConvLibraryLentWorkspace: a product given device memory as its
// workspace (the plan's, ConvArgs.Work) runs cuDNN's algorithm in it
// where it is large enough — the driver's own workspace stays unallocated
// — and in the driver's own where it is too small or not at a lendable
// boundary, with the same result bit for bit either way.
func TestConvLibraryLentWorkspace(t *testing.T) {
	t.Setenv(EnvCUDNNGEMM, "off")
	s := &runtime.ConvShape{N: 2, C: 3, M: 4, In: []int{9, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	x, w := unif(r, s.N*s.C*s.InSize), unif(r, s.M*s.D)
	const stand = 1 << 20 // the stand-in's deterministic algorithm's workspace
	// run runs the product on a fresh driver with the workspace ws(d)
	// and returns y and the driver's own workspace.
	run := func(ws func(d *Device) []float32) ([]float64, int) {
		drv := fakeDriver(t)
		d, err := New(drv)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		y := make([]float32, s.N*s.M*s.T)
		d.Conv(s, x, w, nil, y, ws(d))
		if d.dnnRuns == 0 {
			t.Fatal("cuDNN did not run the product")
		}
		return widen32(y), drv.ConvWorkspace()
	}
	device := func(n, from int) func(d *Device) []float32 {
		return func(d *Device) []float32 {
			b, err := d.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			return b.Floats()[from:]
		}
	}
	want, own := run(device(stand/4, 0))
	if own != 0 {
		t.Errorf("a lent workspace of %d bytes: the driver's own grew to %d", stand, own)
	}
	for _, c := range []struct {
		name string
		ws   func(d *Device) []float32
	}{
		{"too small", device(stand/4-64, 0)},
		{"off the boundary", device(stand/4+64, 1)},
		{"host memory", func(*Device) []float32 { return make([]float32, stand/4) }},
	} {
		got, own := run(c.ws)
		if err := sameBits(got, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if own < stand {
			t.Errorf("%s: the driver's own workspace %d bytes, want the algorithm's %d", c.name, own, stand)
		}
	}
}

// TestRealDeviceOrdinals runs the real driver's choice of GPU on the
// stand-in with two GPUs visible: --device cuda:1 opens the second (its
// name, and the stand-in refuses a handle that is an ordinal), and cuda:2
// says how many the driver shows and what CUDA_VISIBLE_DEVICES holds.
func TestRealDeviceOrdinals(t *testing.T) {
	fakeDriver(t).Close() // builds the stand-in and points the driver at it
	t.Setenv("FAKECUDA_DEVICES", "2")
	t.Setenv("CUDA_VISIBLE_DEVICES", "3,5")
	t.Setenv(EnvDriver, "")
	for ord, name := range []string{"Fake GPU", "Fake GPU 1"} {
		d, err := runtime.OpenDevice(fmt.Sprintf("cuda:%d", ord))
		if err != nil {
			t.Fatalf("cuda:%d: %v", ord, err)
		}
		if got := d.(*Device).props.Name; got != name {
			t.Errorf("cuda:%d opened %q, want %q", ord, got, name)
		}
		d.(*Device).Close()
	}
	_, err := runtime.OpenDevice("cuda:2")
	want := `device "cuda:2" is not available: cuda: no GPU 2: the driver shows 2 GPUs, 0 to 1 (CUDA_VISIBLE_DEVICES="3,5")`
	if err == nil || err.Error() != want {
		t.Errorf("cuda:2: %v, want %q", err, want)
	}
	t.Setenv("FAKECUDA_DEVICES", "0")
	if _, err := RealDevice(0); err == nil || !strings.Contains(err.Error(), "no GPU 0: the driver shows no GPU") {
		t.Errorf("no GPU visible: %v", err)
	}
}
