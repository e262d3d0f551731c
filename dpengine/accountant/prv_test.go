package accountant

import (
	"math"
	"testing"
	"time"
)

// exactGaussianEpsilon returns the exact ε of μ-GDP — which T steps of the
// Gaussian mechanism (q = 1) with noise multiplier σ are, exactly, with
// μ = sqrt(T)/σ (Dong, Roth, Su 2019) — at δ, by bisection on the
// closed-form privacy curve δ(ε) = Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ)
// (Balle and Wang 2018, Theorem 8). Written here independently of the
// package's GDP code (plain math.Erfc, no log space: fine for the moderate
// ε used).
func exactGaussianEpsilon(mu, delta float64) float64 {
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	d := func(e float64) float64 { return phi(mu/2-e/mu) - math.Exp(e)*phi(-mu/2-e/mu) }
	lo, hi := 0.0, 100.0
	for range 200 {
		mid := (lo + hi) / 2
		if d(mid) > delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

func prvWith(t testing.TB, opts Options, ps []Phase, delta float64) Result {
	t.Helper()
	a, err := NewWithOptions(PRV, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := a.Step(p.Sigma, p.SampleRate, p.Steps); err != nil {
			t.Fatal(err)
		}
	}
	r, err := a.Epsilon(delta)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPRVAnalyticGaussian follows microsoft/prv_accountant
// tests/test_accountant.py (test_gaussian_mechanism_analytic_homogeneous
// and _heterogeneous): with q = 1 the composition is exactly μ-GDP, so the
// exact ε is known. The PRV bounds must contain it — that is what they
// promise, so there is no extra tolerance — and the estimate must be within
// the ε error budget 0.01 of it.
func TestPRVAnalyticGaussian(t *testing.T) {
	cases := []struct {
		name   string
		phases []Phase
		mu     float64
		delta  float64
	}{
		{"homogeneous σ=100 T=10000", []Phase{{100, 1, 10000}}, 1, 1e-5},
		{"heterogeneous σ=10×50 + σ=5×50", []Phase{{10, 1, 50}, {5, 1, 50}}, math.Sqrt(50.0/100 + 50.0/25), 1e-6},
		{"single σ=0.9", []Phase{{0.9, 1, 1}}, 1 / 0.9, 1e-5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := prvWith(t, Options{}, c.phases, c.delta)
			exact := exactGaussianEpsilon(c.mu, c.delta)
			if !(r.EpsilonLower <= exact && exact <= r.EpsilonUpper) {
				t.Errorf("exact ε %.6f not in [%.6f, %.6f]", exact, r.EpsilonLower, r.EpsilonUpper)
			}
			if !(math.Abs(r.EpsilonEstimate-exact) <= 0.01) { // NaN fails too
				t.Errorf("estimate %.6f, exact %.6f", r.EpsilonEstimate, exact)
			}
			if r.Epsilon != r.EpsilonUpper {
				t.Errorf("Epsilon %v is not the upper bound %v", r.Epsilon, r.EpsilonUpper)
			}
		})
	}
}

// TestPRVPublishedValues compares with independent numerical accountants.
//
// TensorFlow Privacy compute_dp_sgd_privacy_test.py reports dp_accounting's
// PLD accountant (a different discretisation of the same privacy loss
// distribution; pessimistic, value grid 1e-4):
//   - test_compute_dp_sgd_example_privacy, no_microbatching_with_subsampling_pld:
//     σ=0.7, q=0.01, steps=ceil(1.2/0.01)=120, δ=1e-5 → 2.4612381;
//   - microbatching_with_subsampling_pld (σ halved to 0.35) → 18.6977407;
//   - test_dp_sgd_privacy_statement_no_user_dp_with_pld: σ=2.0/2=1.0,
//     q=64/10000, steps=ceil(5/0.0064)=782, δ=1e-6 → "1.199" (3 decimals).
//
// DPBayes/PLD-Accountant (Koskela, Jälkö, Honkela 2020, the Fourier
// accountant) tests/test_compute_delta.py, get_delta_R regression values
// (add/remove relation, nx=1e6, L=20): δ at a given ε, so here ε at that δ
// must come back to the given ε:
//   - ε=1.0, σ=2.0, q=0.01, 1e4 compositions → δ=0.010224911209191894;
//   - ε=1.0, σ=1.0, q=0.01, 1e4 compositions → δ=0.2391763947364977.
//
// Tolerance: the reference ε must lie in our [EpsilonLower, EpsilonUpper]
// (what the bounds promise; the references' own discretisation errors are
// far smaller than its 0.02 width), and our estimate must be within 5e-4
// of it. Observed: 5e-7 and 6e-5 from dp_accounting, 3.5e-4 from "1.199"
// (itself rounded to ±5e-4), 2e-6 and 1.6e-4 from Koskela et al. The
// references are themselves discretised (dp_accounting: pessimistic value
// grid 1e-4; Koskela: 1e6 points on [-20, 20]), so differences of 1e-4 are
// expected and 5e-4 leaves a margin while staying 20 times tighter than
// our error budget.
func TestPRVPublishedValues(t *testing.T) {
	cases := []struct {
		name  string
		phase Phase
		delta float64
		want  float64
	}{
		{"tfp pld σ=0.7", Phase{0.7, 0.01, 120}, 1e-5, 2.4612381},
		{"tfp pld σ=0.35", Phase{0.35, 0.01, 120}, 1e-5, 18.6977407},
		{"tfp pld statement", Phase{1.0, 64.0 / 10000, 782}, 1e-6, 1.199},
		{"koskela σ=2", Phase{2.0, 0.01, 10000}, 0.010224911209191894, 1.0},
		{"koskela σ=1", Phase{1.0, 0.01, 10000}, 0.2391763947364977, 1.0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := prvWith(t, Options{}, []Phase{c.phase}, c.delta)
			if !(r.EpsilonLower <= c.want && c.want <= r.EpsilonUpper) {
				t.Errorf("reference ε %v not in [%.6f, %.6f]", c.want, r.EpsilonLower, r.EpsilonUpper)
			}
			if !(math.Abs(r.EpsilonEstimate-c.want) <= 5e-4) { // NaN fails too
				t.Errorf("estimate %.7f, reference %v", r.EpsilonEstimate, c.want)
			}
		})
	}
}

// TestPRVLargeDomain: σ = 0.6, q = 0.04, 10 000 steps, δ = 1e-5 needs a
// grid of 1.1e7 points at eps_error 0.01 (domain ±169, mesh 3.1e-5), over
// maxPRVGrid. The accountant answers on a coarser grid and reports the
// larger ε error that grid implies (about 0.0127). Opacus 1.4's PRV
// accountant (eps_error 0.01, delta_error δ/1000, which returns its upper
// bound) answers 129.77 there, found by comparing the two on a grid of
// settings. Checked: 129.77 lies in our [EpsilonLower, EpsilonUpper] widened
// by the 0.005 rounding of the two decimals, our upper bound is within the
// reported ε error of it, and that error stays below 0.02.
func TestPRVLargeDomain(t *testing.T) {
	if testing.Short() {
		t.Skip("composes a grid of 2²³ points (about 3 s)")
	}
	const opacus = 129.77
	r := prvWith(t, Options{}, []Phase{{0.6, 0.04, 10000}}, 1e-5)
	t.Logf("ε in [%.4f, %.4f], estimate %.4f, ε error %.4g", r.EpsilonLower, r.EpsilonUpper, r.EpsilonEstimate, r.EpsError)
	if !(r.EpsError > DefaultEpsError && r.EpsError < 0.02) {
		t.Errorf("ε error %v: want the coarser grid's, in (0.01, 0.02)", r.EpsError)
	}
	if !(r.EpsilonLower-0.005 <= opacus && opacus <= r.EpsilonUpper+0.005) {
		t.Errorf("Opacus's %v not in [%.4f, %.4f]", opacus, r.EpsilonLower, r.EpsilonUpper)
	}
	if !(math.Abs(r.Epsilon-opacus) <= r.EpsError+0.005) { // NaN fails too
		t.Errorf("ε %.4f, Opacus %v: more than the ε error %.4g apart", r.Epsilon, opacus, r.EpsError)
	}
}

// TestPRVBelowRDP: the PRV upper bound should not exceed RDP's (RDP is
// loose); this is how the two are used in practice. Not a theorem (the PRV
// bound carries +0.01), so only checked where RDP is clearly looser.
func TestPRVBelowRDP(t *testing.T) {
	for _, p := range []Phase{{1.1, 256.0 / 60000, 2000}, {0.8, 0.02, 500}, {2, 0.1, 300}} {
		prv := mustEpsilon(t, PRV, []Phase{p}, 1e-5)
		rdp := mustEpsilon(t, RDP, []Phase{p}, 1e-5)
		if prv.Epsilon > rdp.Epsilon {
			t.Errorf("%+v: PRV ε %v > RDP ε %v", p, prv.Epsilon, rdp.Epsilon)
		}
	}
}

// TestPRVErrorBudget: a smaller eps_error narrows the reported interval
// and the estimates agree within the larger budget.
func TestPRVErrorBudget(t *testing.T) {
	p := []Phase{{1.0, 0.02, 300}}
	coarse := prvWith(t, Options{EpsError: 0.05}, p, 1e-5)
	fine := prvWith(t, Options{EpsError: 0.005}, p, 1e-5)
	if fine.EpsilonUpper-fine.EpsilonLower >= coarse.EpsilonUpper-coarse.EpsilonLower {
		t.Errorf("interval did not narrow: coarse [%v, %v], fine [%v, %v]", coarse.EpsilonLower, coarse.EpsilonUpper, fine.EpsilonLower, fine.EpsilonUpper)
	}
	if !(math.Abs(fine.EpsilonEstimate-coarse.EpsilonEstimate) <= 0.05) { // NaN fails too
		t.Errorf("estimates disagree: %v vs %v", coarse.EpsilonEstimate, fine.EpsilonEstimate)
	}
	if !(coarse.EpsilonLower <= fine.EpsilonEstimate && fine.EpsilonEstimate <= coarse.EpsilonUpper) {
		t.Errorf("fine estimate %v outside coarse bounds [%v, %v]", fine.EpsilonEstimate, coarse.EpsilonLower, coarse.EpsilonUpper)
	}
}

// TestPRVSpeed: the issue asks for < 1 s at 10k steps. Timing tests are
// fragile on loaded CI machines, so the limit checked is 5 s and the time
// is logged.
func TestPRVSpeed(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	start := time.Now()
	mustEpsilon(t, PRV, []Phase{{1.0, 0.01, 10000}}, 1e-5)
	d := time.Since(start)
	t.Logf("PRV, 10000 steps: %v", d)
	if d > 5*time.Second {
		t.Errorf("PRV took %v for 10000 steps", d)
	}
}

// TestPRVSmallDelta: a δ too small to resolve on the grid is an error, not
// a wrong number.
func TestPRVSmallDelta(t *testing.T) {
	a, _ := New(PRV)
	_ = a.Step(1, 0.01, 1000)
	if _, err := a.Epsilon(1e-14); err == nil {
		t.Error("δ=1e-14: want an error")
	}
}
