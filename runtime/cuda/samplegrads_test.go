//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

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
					if math.Abs(float64(got[k]-w)) > 1e-5*(1+math.Abs(float64(w))) {
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
