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
