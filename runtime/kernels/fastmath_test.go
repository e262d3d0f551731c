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

// TestTanhf bounds the error of Tanhf against math.Tanh over [−12, 12]:
// relative 4e-7 (a few float32 ulp) wherever |tanh x| ≥ 1e-30.
func TestTanhf(t *testing.T) {
	var worst float64
	for i := -1200000; i <= 1200000; i++ {
		x := float32(i) * 1e-5
		want := math.Tanh(float64(x))
		got := float64(Tanhf(x))
		if want == 0 {
			if got != 0 {
				t.Fatalf("Tanhf(0) = %v", got)
			}
			continue
		}
		worst = math.Max(worst, math.Abs(got-want)/math.Abs(want))
	}
	if worst > 4e-7 {
		t.Errorf("Tanhf: max relative error %.3g", worst)
	}
	if Tanhf(float32(math.Inf(1))) != 1 || Tanhf(float32(math.Inf(-1))) != -1 || !math.IsNaN(float64(Tanhf(float32(math.NaN())))) {
		t.Error("Tanhf at ±Inf/NaN")
	}
}
