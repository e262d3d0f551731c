package kernels

import (
	"math"
	"testing"
)

func TestExpfErff(t *testing.T) {
	var maxExp, maxErf float64
	for i := -2000000; i <= 2000000; i++ {
		x := float32(i) * 4.4e-5 // [−88, 88]
		want := math.Exp(float64(x))
		if got := float64(Expf(x)); want > 1e-37 {
			maxExp = max(maxExp, math.Abs(got-want)/want)
		}
		xe := float32(i) * 3e-6 // [−6, 6]
		maxErf = max(maxErf, math.Abs(float64(Erff(xe))-math.Erf(float64(xe))))
	}
	if maxExp > 3e-7 {
		t.Errorf("Expf relative error %g", maxExp)
	}
	if maxErf > 5e-7 {
		t.Errorf("Erff absolute error %g", maxErf)
	}
	t.Logf("Expf max rel err %g, Erff max abs err %g", maxExp, maxErf)
	if Expf(float32(math.NaN())) == Expf(float32(math.NaN())) || !math.IsInf(float64(Expf(100)), 1) || Expf(-100) != 0 || Expf(0) != 1 {
		t.Error("Expf special values")
	}
	if Erff(10) != 1 || Erff(-10) != -1 || Erff(0) != 0 {
		t.Error("Erff special values")
	}
}

// TestTanhf bounds the error of Tanhf against math.Tanh over [−12, 12]
// and over a sample of every float32 (one bit pattern in 4099, all
// exponents, NaN payloads among them): relative 4e-7 (a few float32 ulp)
// wherever |tanh x| ≥ 1e-30. It also checks the special values and that
// tanhSlice, which Unary runs (eight lanes at a time with AVX2, four with
// SSE2), agrees with Tanhf bit for bit, in place and for every alignment of
// the scalar tail.
func TestTanhf(t *testing.T) {
	var worst float64
	var xs []float32
	for i := -1200000; i <= 1200000; i++ {
		xs = append(xs, float32(i)*1e-5)
	}
	for b := uint64(0); b < 1<<32; b += 4099 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	ys := make([]float32, len(xs))
	tanhSlice(xs, ys)
	for i, x := range xs {
		want := math.Tanh(float64(x))
		got := float64(ys[i])
		if math.IsNaN(want) || math.IsNaN(got) {
			if math.IsNaN(want) != math.IsNaN(got) {
				t.Fatalf("Tanhf(%g) = %g, want %g", x, got, want)
			}
			continue
		}
		if math.Abs(want) < 1e-30 {
			if !(math.Abs(got-want) <= 1e-36) { // NaN fails too
				t.Fatalf("Tanhf(%g) = %g, want %g", x, got, want)
			}
			continue
		}
		worst = math.Max(worst, math.Abs(got-want)/math.Abs(want))
	}
	// The SSE kernel and the scalar tail agree bit for bit, NaNs included.
	for i, x := range xs {
		if s := Tanhf(x); math.Float32bits(s) != math.Float32bits(ys[i]) {
			t.Fatalf("Tanhf(%g) = %g (%#x), tanhSlice %g (%#x)", x, s, math.Float32bits(s), ys[i], math.Float32bits(ys[i]))
		}
	}
	if worst > 4e-7 {
		t.Errorf("Tanhf: max relative error %.3g", worst)
	}
	t.Logf("Tanhf: max relative error %.3g", worst)
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct{ x, want float32 }{
		{0, 0}, {negZero, negZero}, {1e-40, 1e-40}, {-1e-40, -1e-40},
		{9.5, 1}, {-9.5, -1}, {20, 1}, {1e30, 1}, {-1e30, -1},
		{float32(math.Inf(1)), 1}, {float32(math.Inf(-1)), -1},
	} {
		if got := Tanhf(c.x); math.Float32bits(got) != math.Float32bits(c.want) {
			t.Errorf("Tanhf(%g) = %g, want %g", c.x, got, c.want)
		}
	}
	if !math.IsNaN(float64(Tanhf(float32(math.NaN())))) {
		t.Error("Tanhf(NaN) is not NaN")
	}
	for off := 0; off < 4; off++ {
		in := append([]float32(nil), xs[off:off+1001]...)
		tanhSlice(in, in)
		for i := range in {
			if math.Float32bits(in[i]) != math.Float32bits(ys[off+i]) {
				t.Fatalf("in-place tanhSlice at offset %d differs at %d", off, i)
			}
		}
	}
}

// TestTanhSliceSSE: with the AVX2 kernel off (as on a CPU without it),
// tanhSlice's SSE2 kernel and scalar tail agree with Tanhf bit for bit.
func TestTanhSliceSSE(t *testing.T) {
	if !haveTanhAVX2 {
		t.Skip("the AVX2 kernel is not in use here; TestTanhf covers tanhSlice")
	}
	haveTanhAVX2 = false
	defer func() { haveTanhAVX2 = true }()
	var xs []float32
	for b := uint64(0); b < 1<<32; b += 40009 {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	ys := make([]float32, len(xs))
	tanhSlice(xs, ys)
	for i, x := range xs {
		if s := Tanhf(x); math.Float32bits(s) != math.Float32bits(ys[i]) {
			t.Fatalf("Tanhf(%g) = %#x, tanhSlice %#x", x, math.Float32bits(s), math.Float32bits(ys[i]))
		}
	}
}
