//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

func TestRoundTF32(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, c := range []struct{ in, want float32 }{
		{1, 1},
		{0, 0},
		{-2.5, -2.5},
		{1 + 1.0/2048, 1},                       // a tie below the last kept bit: to even (down)
		{1 + 3.0/2048, 1 + 4.0/2048},            // a tie above an odd kept bit: to even (up)
		{1 + 1.0/1024 + 1.0/4096, 1 + 1.0/1024}, // below half: down
		{math.Float32frombits(0x3f800fff), 1},   // just below the half: down
		{math.Float32frombits(0x3f801001), 1 + 1.0/1024}, // just above: up
		{inf, inf},
	} {
		if got := roundTF32(c.in); got != c.want {
			t.Errorf("roundTF32(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if v := roundTF32(float32(math.NaN())); v == v {
		t.Errorf("roundTF32(NaN) = %v", v)
	}
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 1000; i++ {
		x := float32(r.NormFloat64() * math.Exp(r.NormFloat64()*5))
		y := roundTF32(x)
		if math.Float32bits(y)&0x1fff != 0 || math.Abs(float64(y-x)) > math.Abs(float64(x))/2048 {
			t.Fatalf("roundTF32(%v) = %v: not a TF32 within half a unit", x, y)
		}
	}
}

// TestTF32Conv holds SetTF32's convolutions to the CPU: in TF32 the
// forward passes and input gradients are the float32 convolutions of
// TF32-rounded operands (within TF32's error bound on a GPU, which may
// truncate), and the weight gradients are the float32 ones, bit for bit
// the same as with TF32 off. On the emulation (a GPU with
// DPFINETUNE_CUDA=gpu) and through the real driver's code on the stand-in.
func TestTF32Conv(t *testing.T) {
	t.Run("device", func(t *testing.T) { checkTF32Conv(t, emuDevice(t), os.Getenv(EnvDriver) != "gpu") })
	t.Run("stand-in", func(t *testing.T) {
		d, err := New(fakeDriver(t))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		checkTF32Conv(t, d, true)
	})
}

// checkTF32Conv is TestTF32Conv on d; rounds says that d's TF32 products
// round to nearest (the emulation's and the stand-in's), which the CPU
// then reproduces to float32 accuracy.
func checkTF32Conv(t *testing.T, d *Device, rounds bool) {
	defer d.SetTF32(false)
	rng := rand.New(rand.NewSource(5))
	path := convPath
	defer func() { convPath = path }()
	// Every product's operands 16-byte aligned (positions and per-sample
	// sizes multiples of 4) but those marked unaligned, whose batched
	// products the Device runs in float32 (GemmArgs.TF32).
	// weightOff places the weight 4 bytes into its buffer, as bk's
	// parameter block may: the Device copies it to aligned memory and the
	// products stay TF32.
	for _, c := range []struct {
		s         *runtime.ConvShape
		unaligned bool
		weightOff bool
	}{
		{s: &runtime.ConvShape{N: 3, C: 4, M: 8, Group: 1, In: []int{8, 6}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
		{s: &runtime.ConvShape{N: 2, C: 16, M: 8, Group: 1, In: []int{4, 5}, Kernel: []int{1, 1}}},
		{s: &runtime.ConvShape{N: 2, C: 16, M: 8, Group: 1, In: []int{4, 5}, Kernel: []int{1, 1}}, weightOff: true},
		{s: &runtime.ConvShape{N: 3, C: 4, M: 8, Group: 1, In: []int{8, 6}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}, weightOff: true},
		{s: &runtime.ConvShape{N: 2, C: 8, M: 16, Group: 2, In: []int{16}, Kernel: []int{5}, Strides: []int{2}, Pads: []int{2, 2}}},
		// A pointwise convolution's products are batched over the samples,
		// 17·25 and 9·25 elements apart.
		{s: &runtime.ConvShape{N: 2, C: 17, M: 9, Group: 1, In: []int{5, 5}, Kernel: []int{1, 1}}, unaligned: true},
	} {
		s := c.s
		convPath = path
		if c.unaligned || c.weightOff { // the Device's own GEMM path, not cuDNN's (or the stand-in's)
			convPath = convGEMMs
		}
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		if !convByGEMM(s) {
			t.Fatalf("%v: not on the GEMM path", s.In)
		}
		In, T := numel(s.In), numel(s.Out)
		x := uniform(rng, s.N*s.C*In, -1, 1)
		w := uniform(rng, s.M*s.C/s.Group*numel(s.Kernel), -1, 1)
		b := uniform(rng, s.M, -1, 1)
		dy := uniform(rng, s.N*s.M*T, -1, 1)
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		run := func(tf32 bool) ([]float32, []float32, []float32, []float32, []float32, []float32) {
			d.SetTF32(tf32)
			if d.TF32() != tf32 {
				t.Fatalf("TF32() = %v after SetTF32(%v)", !tf32, tf32)
			}
			ws := make([]float32, d.ConvScratchSize(s))
			px, pw, pdy := place(p, x), place(p, w), place(p, dy)
			if c.weightOff {
				pw = place(p, append([]float32{0}, w...))[1:]
			}
			y, dx, dw, db := place(p, stale(len(dy))), place(p, stale(len(x))), place(p, stale(len(w))), place(p, stale(s.M))
			d.Conv(s, px, pw, place(p, b), y, ws)
			d.ConvBackward(s, px, pw, pdy, dx, dw, db, ws)
			// ConvTranspose of dy (its input, N×M×T) back to N×C×In.
			ty, tdx, tdw := place(p, stale(len(x))), place(p, stale(len(dy))), place(p, stale(len(w)))
			d.ConvTranspose(s, pdy, pw, nil, ty, ws)
			d.ConvTransposeBackward(s, pdy, pw, px, tdx, tdw, nil, ws)
			out := fetchAll(p, y, dx, dw, ty, tdx, tdw)
			return out[0], out[1], out[2], out[3], out[4], out[5]
		}
		y0, dx0, dw0, ty0, tdx0, tdw0 := run(false)
		before, staged := d.tf32Unaligned, d.tf32Staged
		y1, dx1, dw1, ty1, tdx1, tdw1 := run(true)
		y2, _, _, _, _, _ := run(false)
		name := func(what string) string {
			return fmt.Sprintf("%s N%d C%d M%d G%d in%v k%v", what, s.N, s.C, s.M, s.Group, s.In, s.Kernel)
		}
		if c.unaligned {
			// Float32 in place of TF32, bit for bit, rather than a fault.
			if d.tf32Unaligned == before {
				t.Errorf("%s: no product counted as unaligned", name("every convolution"))
			}
			for _, r := range []struct {
				what string
				a, b []float32
			}{{"Conv", y1, y0}, {"ConvBackward dx", dx1, dx0}, {"ConvTranspose", ty1, ty0}, {"ConvTransposeBackward dx", tdx1, tdx0}} {
				if maxAbsDiff(r.a, r.b) != 0 {
					t.Errorf("%s (TF32 on, unaligned): not the float32 result bit for bit (max |Δ| %g)", name(r.what), maxAbsDiff(r.a, r.b))
				}
			}
			continue
		}
		if d.tf32Unaligned != before {
			t.Errorf("%s: %d products counted as unaligned", name("every convolution"), d.tf32Unaligned-before)
		}
		if got := d.tf32Staged > staged; got != c.weightOff {
			t.Errorf("%s: the weight copied to aligned memory %d times, want some: %v", name("every convolution"), d.tf32Staged-staged, c.weightOff)
		}

		// The CPU: exact float32, its TF32 bound, and on rounded operands.
		cpu := runtime.CPU{}
		ws := make([]float32, cpu.ConvScratchSize(s))
		abs := func(v []float32) []float32 {
			a := make([]float32, len(v))
			for i, e := range v {
				a[i] = float32(math.Abs(float64(e)))
			}
			return a
		}
		round := func(v []float32) []float32 {
			r := make([]float32, len(v))
			for i, e := range v {
				r[i] = roundTF32(e)
			}
			return r
		}
		conv := func(x, w, b []float32) []float32 {
			y := make([]float32, len(dy))
			cpu.Conv(s, x, w, b, y, ws)
			return y
		}
		convT := func(dy, w []float32) []float32 {
			dx := make([]float32, len(x))
			cpu.ConvTranspose(s, dy, w, nil, dx, ws)
			return dx
		}
		// |TF32 - exact| ≤ 2⁻⁹·Σ|w||x|: each operand within 2⁻¹⁰ of itself.
		within := func(what string, got, exact, mag []float32) {
			for i := range got {
				if e := math.Abs(float64(got[i] - exact[i])); e > float64(mag[i])/512+1e-5 {
					t.Fatalf("%s[%d] = %v, float32 %v: |Δ| %g beyond TF32's bound %g", name(what), i, got[i], exact[i], e, mag[i]/512)
				}
			}
		}
		within("Conv", y1, conv(x, w, b), conv(abs(x), abs(w), nil))
		within("ConvBackward dx", dx1, convT(dy, w), convT(abs(dy), abs(w)))
		within("ConvTranspose", ty1, convT(dy, w), convT(abs(dy), abs(w)))
		within("ConvTransposeBackward dx", tdx1, conv(x, w, nil), conv(abs(x), abs(w), nil))
		if rounds {
			for _, c := range []struct {
				what      string
				got, want []float32
			}{
				{"Conv", y1, conv(round(x), round(w), b)},
				{"ConvBackward dx", dx1, convT(round(dy), round(w))},
				{"ConvTranspose", ty1, convT(round(dy), round(w))},
				{"ConvTransposeBackward dx", tdx1, conv(round(x), round(w), nil)},
			} {
				if err := maxRel(c.got, c.want, 1e-5); err != "" {
					t.Errorf("%s against the CPU on TF32 operands: %s", name(c.what), err)
				}
			}
			// TF32 took effect: the rounding moved the results.
			if maxAbsDiff(y1, y0) == 0 || maxAbsDiff(dx1, dx0) == 0 || maxAbsDiff(ty1, ty0) == 0 || maxAbsDiff(tdx1, tdx0) == 0 {
				t.Errorf("%s: the TF32 results equal the float32 ones", name("every convolution"))
			}
		}
		for _, c := range []struct {
			what string
			a, b []float32
		}{{"ConvBackward dw (TF32 on)", dw1, dw0}, {"ConvTransposeBackward dw (TF32 on)", tdw1, tdw0}, {"Conv (TF32 off again)", y2, y0}} {
			if maxAbsDiff(c.a, c.b) != 0 {
				t.Errorf("%s: not the float32 result bit for bit (max |Δ| %g)", name(c.what), maxAbsDiff(c.a, c.b))
			}
		}
	}
}

// maxRel returns "" if got is want within tol·(1+|want|) everywhere,
// else the first element that is not.
func maxRel(got, want []float32, tol float64) string {
	for i := range got {
		if e := math.Abs(float64(got[i] - want[i])); e > tol*(1+math.Abs(float64(want[i]))) {
			return fmt.Sprintf("[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	return ""
}

func maxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}
