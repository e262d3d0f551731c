package accountant

import (
	"math"
	"strings"
	"testing"
)

// TestGDPPublishedValues compares the GDP (CLT) accountant with Opacus:
//   - opacus/tests/accountants_test.py, test_gdp_accountant: σ=1.5,
//     q=0.04, steps=int(90//0.04)=2249 (floor division of floats gives
//     2249), δ=1e-5 → 6.59 < ε < 6.6 (the test's own bounds);
//   - Opacus torchdp/scripts/compute_gdp_privacy.py (after the TF Privacy
//     script of Bu et al.), docstring: N=60000, batch 256, σ=1.3, 15
//     epochs "satisfies 0.227-GDP". There T = 15·60000/256 = 3515.625
//     steps; we use 3516, which changes μ by a factor 1.00005. Three
//     decimals published: tolerance 5e-4.
func TestGDPPublishedValues(t *testing.T) {
	r := mustEpsilon(t, GDP, []Phase{{1.5, 0.04, 2249}}, 1e-5)
	if !(6.59 < r.Epsilon && r.Epsilon < 6.6) {
		t.Errorf("Opacus GDP: ε = %v, want in (6.59, 6.6)", r.Epsilon)
	}
	if !r.Approximate {
		t.Error("GDP result not marked approximate")
	}
	r = mustEpsilon(t, GDP, []Phase{{1.3, 256.0 / 60000, 3516}}, 1e-5)
	if !(math.Abs(r.Mu-0.227) <= 5e-4) { // NaN fails too
		t.Errorf("μ = %v, want 0.227", r.Mu)
	}
}

// TestGDPDualInversion: gdpEpsilon inverts the μ-GDP privacy curve; checked
// against the independent closed-form bisection of prv_test.go to 1e-9
// (both bisect to machine precision on the same closed form, one in log
// space), and δ(ε(δ)) = δ to 1e-9 relative.
func TestGDPDualInversion(t *testing.T) {
	for _, mu := range []float64{0.05, 0.3, 1, 2.5, 5} {
		for _, delta := range []float64{1e-3, 1e-5, 1e-9} {
			e := gdpEpsilon(mu, delta)
			if want := exactGaussianEpsilon(mu, delta); math.Abs(e-want) > 1e-9 {
				t.Errorf("μ=%v δ=%v: ε = %.12g, want %.12g", mu, delta, e, want)
			}
			if e > 0 {
				if d := gdpDelta(e, mu); relErr(d, delta) > 1e-9 {
					t.Errorf("μ=%v δ=%v: δ(ε(δ)) = %v", mu, delta, d)
				}
			}
		}
	}
	// Large ε: e^ε·Φ(·) underflows/overflows in linear space.
	if e := gdpEpsilon(40, 1e-10); math.IsInf(e, 0) || math.IsNaN(e) || e < 100 {
		t.Errorf("μ=40: ε = %v", e)
	}
}

// TestGDPComposition: GDP composes by adding μ², so a heterogeneous run's
// μ is sqrt(Σ q²T(e^{1/σ²}-1)).
func TestGDPComposition(t *testing.T) {
	ps := []Phase{{1.0, 0.01, 1000}, {2.0, 0.02, 500}}
	r := mustEpsilon(t, GDP, ps, 1e-5)
	want := math.Sqrt(0.01*0.01*1000*math.Expm1(1) + 0.02*0.02*500*math.Expm1(0.25))
	if relErr(r.Mu, want) > 1e-14 {
		t.Errorf("μ = %v, want %v", r.Mu, want)
	}
}

func TestGDPLabelledApproximate(t *testing.T) {
	a, _ := New(GDP)
	if !strings.Contains(a.Description(), "approximate (CLT)") {
		t.Errorf("description %q lacks \"approximate (CLT)\"", a.Description())
	}
	if s, ok := a.(interface{ String() string }); !ok || !strings.Contains(s.String(), "approximate (CLT)") {
		t.Error("String() lacks \"approximate (CLT)\"")
	}
}
