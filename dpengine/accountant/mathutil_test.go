package accountant

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"
)

// TestLogErfc compares logErfc with log(erfc(x)) computed by mpmath at 50
// digits (mpmath.log(mpmath.erfc(x)), run once offline; values pasted
// here). Tolerance: 1e-14 relative, i.e. a few ulps — both branches
// (math.Erfc below 26, the asymptotic series above) are that accurate, and
// the comparison across the switch at 26 checks there is no jump.
func TestLogErfc(t *testing.T) {
	cases := []struct{ x, want float64 }{
		{0.5, -0.73501112983708440303},
		{5, -27.200889545537434422},
		{20, -403.56934333410423496},
		{25.9, -674.63735189531917897},
		{26.1, -685.04503290330944939},
		{30, -903.97411711064387808},
		{100, -10005.177585122664333},
		{1e3, -1000007.4801207219062},
		{1e5, -10000000012.085290408},
	}
	for _, c := range cases {
		got := logErfc(c.x)
		if rel := math.Abs(got-c.want) / math.Abs(c.want); rel > 1e-14 {
			t.Errorf("logErfc(%v) = %.17g, want %.17g (rel err %.2g)", c.x, got, c.want, rel)
		}
	}
	if got := logErfc(-40); math.Abs(got-math.Ln2) > 1e-15 {
		t.Errorf("logErfc(-40) = %v, want log 2", got)
	}
	if got := logErfc(math.Inf(1)); !math.IsInf(got, -1) {
		t.Errorf("logErfc(+Inf) = %v, want -Inf", got)
	}
	// Continuity across the switch point.
	a, b := logErfc(math.Nextafter(logErfcSwitch, 0)), logErfc(logErfcSwitch)
	if !(math.Abs(a-b) <= 1e-12*math.Abs(b)) { // NaN fails too
		t.Errorf("logErfc jumps at %v: %v vs %v", logErfcSwitch, a, b)
	}
}

func TestLogAddSub(t *testing.T) {
	if got, want := logAdd(math.Log(2), math.Log(3)), math.Log(5); math.Abs(got-want) > 1e-15 {
		t.Errorf("logAdd = %v, want %v", got, want)
	}
	if got := logAdd(math.Inf(-1), 1); got != 1 {
		t.Errorf("logAdd(-Inf, 1) = %v", got)
	}
	if got, want := logSub(math.Log(5), math.Log(3)), math.Log(2); math.Abs(got-want) > 1e-15 {
		t.Errorf("logSub = %v, want %v", got, want)
	}
	if got := logSub(1, 1); !math.IsInf(got, -1) {
		t.Errorf("logSub(1, 1) = %v, want -Inf", got)
	}
	if got := logSub(1, 2); !math.IsNaN(got) {
		t.Errorf("logSub(1, 2) = %v, want NaN", got)
	}
}

// TestFFT checks the FFT against a direct O(n²) DFT (error bound: rounding,
// 1e-12 absolute for unit-size inputs) and that inverse(forward(x))/n = x.
func TestFFT(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 8, 64, 512} {
		x := make([]complex128, n)
		for i := range x {
			x[i] = complex(rng.Float64()-0.5, rng.Float64()-0.5)
		}
		want := make([]complex128, n)
		for k := range n {
			for j := range n {
				// reduce j·k mod n so that the reference angle is exact
				want[k] += x[j] * cmplx.Exp(complex(0, -2*math.Pi*float64(j*k%n)/float64(n)))
			}
		}
		got := append([]complex128(nil), x...)
		p := newFFTPlan(n)
		p.transform(got, false)
		for k := range n {
			if cmplx.Abs(got[k]-want[k]) > 1e-12 {
				t.Fatalf("n=%d: X[%d] = %v, want %v", n, k, got[k], want[k])
			}
		}
		p.transform(got, true)
		for k := range n {
			if cmplx.Abs(got[k]/complex(float64(n), 0)-x[k]) > 1e-14 {
				t.Fatalf("n=%d: round trip x[%d] = %v, want %v", n, k, got[k]/complex(float64(n), 0), x[k])
			}
		}
	}
}

func TestPowInt(t *testing.T) {
	z := complex(0.6, -0.7)
	for _, k := range []int{0, 1, 2, 7, 1000} {
		want := cmplx.Pow(z, complex(float64(k), 0))
		if got := powInt(z, k); cmplx.Abs(got-want) > 1e-12*math.Max(1, cmplx.Abs(want)) {
			t.Errorf("powInt(%v, %d) = %v, want %v", z, k, got, want)
		}
	}
}
