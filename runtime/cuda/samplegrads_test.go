//go:build linux && (amd64 || arm64)

package cuda

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestConvSampleWeightGrads: samples as the groups of one grouped
// convolution give each sample's weight gradient, as the CPU's per-sample
// product does, through the stand-in cuDNN; without a library (the
// emulation) the Device says it cannot.
func TestConvSampleWeightGrads(t *testing.T) {
	drv := fakeDriver(t)
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// The emulation itself (emuDevice is the GPU's under DPFINETUNE_CUDA=gpu,
	// which has cuDNN).
	var emu *Device
	if drv, err := EmulatedGuarded(); err == nil {
		if emu, err = New(drv); err != nil {
			t.Fatal(err)
		}
		defer emu.Close()
	}
	rng := rand.New(rand.NewSource(7))
	for _, s := range []runtime.ConvShape{
		{N: 4, C: 3, M: 5, In: []int{7, 7}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 3, C: 4, M: 6, Group: 2, In: []int{9, 8}, Kernel: []int{3, 2}, Strides: []int{2, 1}},
		{N: 5, C: 2, M: 3, In: []int{11}, Kernel: []int{4}, Strides: []int{3}, Dilations: []int{2}},
	} {
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("N%d_C%d_M%d_G%d_in%v", s.N, s.C, s.M, s.Group, s.In), func(t *testing.T) {
			x := uniform(rng, s.N*s.C*s.InSize, -1, 1)
			dy := uniform(rng, s.N*s.M*s.T, -1, 1)
			size := s.M * s.D
			// The CPU's, one sample at a time.
			one := s
			one.N = 1
			if err := one.Init(); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, s.N*size)
			ws := make([]float32, runtime.CPU{}.ConvScratchSize(&one))
			for i := 0; i < s.N; i++ {
				runtime.CPU{}.ConvWeightGrad(&one, x[i*s.C*s.InSize:(i+1)*s.C*s.InSize], dy[i*s.M*s.T:(i+1)*s.M*s.T], want[i*size:(i+1)*size], ws)
			}
			dev := func(v []float32) runtime.Buffer {
				b, err := d.Alloc(len(v))
				if err != nil {
					t.Fatal(err)
				}
				if err := d.CopyIn(b, 0, v); err != nil {
					t.Fatal(err)
				}
				return b
			}
			px, pdy := dev(x).Floats(), dev(dy).Floats()
			for _, c := range [][2]int{{0, s.N}, {1, s.N - 1}, {s.N - 1, 1}} {
				i0, n := c[0], c[1]
				inst := dev(make([]float32, n*size))
				runs := d.dnnRuns
				if !d.ConvSampleWeightGrads(&s, px, pdy, i0, n, inst.Floats()) || d.dnnRuns != runs+1 {
					t.Fatalf("samples %d…%d: not through the library (%v)", i0, i0+n-1, d.dnnRefused)
				}
				got := make([]float32, n*size)
				if err := d.CopyOut(got, inst, 0); err != nil {
					t.Fatal(err)
				}
				for k, w := range want[i0*size : (i0+n)*size] {
					if !(math.Abs(float64(got[k]-w)) <= 1e-5*(1+math.Abs(float64(w)))) { // NaN fails too
						t.Fatalf("samples %d…%d: element %d (sample %d) %g, want %g", i0, i0+n-1, k, i0+k/size, got[k], w)
					}
				}
			}
			if emu != nil && emu.ConvSampleWeightGrads(&s, x, dy, 0, 1, make([]float32, size)) {
				t.Error("the emulation (no convolution library) formed them")
			}
		})
	}
}

// TestPreferSampleGrads runs the measured choice between cuDNN's
// per-sample gradients (the samples as groups) and the engine's
// unfolding path on the stand-in, with the timer replaced so that either
// wins: the first ask of a shape measures both (the engine's path through
// its closure), answers the winner, and asks of the same shape after it
// measure nothing; the choice is kept on disk under a "per-sample " key
// with both times per sample, and a second run takes it unmeasured. With
// EnvCUDNNGEMM=off the library runs unmeasured; without a library (the
// emulation) the answer is no and nothing runs.
func TestPreferSampleGrads(t *testing.T) {
	fakeDriver(t).Close() // the stand-in's environment
	s := runtime.ConvShape{N: 4, C: 3, M: 5, In: []int{7, 7}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(8))
	x, dy := uniform(rng, s.N*s.C*s.InSize, -1, 1), uniform(rng, s.N*s.M*s.T, -1, 1)
	const n = 4
	var libWins bool
	old := pathTimer
	pathTimer = func(d *Device, kind ConvKind, lib bool, run func()) time.Duration {
		run()
		if lib == libWins {
			return time.Millisecond
		}
		return 3 * time.Millisecond
	}
	t.Cleanup(func() { pathTimer = old })
	// ask opens a Device on the driver of the test's environment and asks
	// twice, returning the answers and how often the engine's path ran.
	ask := func(t *testing.T, d *Device) (first, second bool, owns int) {
		t.Helper()
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		px, pdy, inst := place(p, x), place(p, dy), place(p, make([]float32, n*s.M*s.D))
		own := func() { owns++ }
		first = d.PreferSampleGrads(&s, px, pdy, n, inst, 2, own)
		second = d.PreferSampleGrads(&s, px, pdy, n, inst, 2, own)
		return first, second, owns
	}
	keptPaths := func(t *testing.T) map[string]pathChoice {
		t.Helper()
		kept, _ := filepath.Glob(filepath.Join(os.Getenv(EnvCache), "cuda", "cudnn-algos-*.json"))
		if len(kept) != 1 {
			t.Fatalf("choices kept in %q", kept)
		}
		var file dnnChoicesFile
		if b, err := os.ReadFile(kept[0]); err != nil || json.Unmarshal(b, &file) != nil {
			t.Fatalf("reading %s: %v", kept[0], err)
		}
		return file.Paths
	}
	for _, win := range []bool{true, false} {
		t.Run(fmt.Sprintf("library wins %v", win), func(t *testing.T) {
			libWins = win
			t.Setenv(EnvCache, t.TempDir())
			measuring := realDevice(t, func(lib string) bool { return strings.Contains(lib, "whichever measures faster") }, "to measure")
			first, second, owns := ask(t, measuring)
			if first != win || second != win || owns != 2 || measuring.samplesMeasured != 1 {
				t.Errorf("measuring: answers %v, %v, the engine's path ran %d times, %d measured; want %v twice, 2 runs, 1 measured", first, second, owns, measuring.samplesMeasured, win)
			}
			paths := keptPaths(t)
			if len(paths) != 1 {
				t.Fatalf("kept paths %v, want one", paths)
			}
			for k, ch := range paths {
				if !strings.HasPrefix(k, "per-sample backward-filter n=1 c=12 m=20 group=4 ") || ch.Library != win || ch.LibraryMS <= 0 || ch.GEMMMS <= 0 {
					t.Errorf("kept %q: %+v, want the per-sample filter gradient of 4 samples as groups, cuDNN=%v and both times", k, ch, win)
				}
				// Per sample: the library's 4 samples against the
				// engine's 2, the winner 3 times as fast a run.
				want := 6.0 // (3 ms / 2) / (1 ms / 4)
				if !win {
					want = 2.0 / 3 // (1 ms / 2) / (3 ms / 4)
				}
				if r := ch.GEMMMS / ch.LibraryMS; math.Abs(float64(r)-want) > 1e-3 {
					t.Errorf("kept %q: times %g and %g a sample", k, ch.LibraryMS, ch.GEMMMS)
				}
			}
			again := realDevice(t, func(lib string) bool { return true }, "")
			if first, _, owns := ask(t, again); first != win || owns != 0 || again.samplesMeasured != 0 {
				t.Errorf("second run: answer %v, the engine's path ran %d times, %d measured; want %v, none", first, owns, again.samplesMeasured, win)
			}
		})
	}
	t.Run("unmeasured", func(t *testing.T) {
		t.Setenv(EnvCache, t.TempDir())
		t.Setenv(EnvCUDNNGEMM, "off")
		libOnly := realDevice(t, func(lib string) bool { return !strings.Contains(lib, "whichever") }, "not to measure")
		if first, second, owns := ask(t, libOnly); !first || !second || owns != 0 || libOnly.samplesMeasured != 0 {
			t.Errorf("%s=off: answers %v, %v, the engine's path ran %d times; want the library, unmeasured", EnvCUDNNGEMM, first, second, owns)
		}
	})
	t.Run("no library", func(t *testing.T) {
		drv, err := EmulatedGuarded()
		if err != nil {
			t.Skip(err)
		}
		emu, err := New(drv)
		if err != nil {
			t.Fatal(err)
		}
		defer emu.Close()
		if first, _, owns := ask(t, emu); first || owns != 0 {
			t.Errorf("the emulation (no convolution library): answer %v, the engine's path ran %d times", first, owns)
		}
	})
}
