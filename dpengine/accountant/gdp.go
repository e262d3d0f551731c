package accountant

import "math"

type gdpAccountant struct{ base }

func (a *gdpAccountant) Name() string { return GDP }

func (a *gdpAccountant) Description() string {
	return "GDP (Gaussian DP, central limit theorem): approximate (CLT), not an upper bound"
}

func (a *gdpAccountant) String() string { return a.Description() }

func (a *gdpAccountant) State() State { return a.state(GDP) }

func (a *gdpAccountant) Epsilon(delta float64) (Result, error) {
	if err := ValidateDelta(delta); err != nil {
		return Result{}, err
	}
	r := Result{Accountant: GDP, Delta: delta, Steps: a.total, Approximate: true}
	if len(a.phases) == 0 {
		return r, nil
	}
	r.Mu = gdpMu(a.phases)
	r.Epsilon = gdpEpsilon(r.Mu, delta)
	return r, nil
}

// gdpMu returns μ of the CLT approximation to the composition of the
// phases: T steps of the Poisson-subsampled Gaussian with rate q and noise
// multiplier σ are asymptotically μ-GDP with μ = q·sqrt(T·(exp(1/σ²) - 1))
// (Bu, Dong, Long, Su 2020, Corollary 5), and GDP composes by adding μ².
func gdpMu(phases []Phase) float64 {
	mu2 := 0.0
	for _, p := range phases {
		mu2 += p.SampleRate * p.SampleRate * float64(p.Steps) * math.Expm1(1/(p.Sigma*p.Sigma))
	}
	return math.Sqrt(mu2)
}

// gdpDelta returns δ(ε) of μ-GDP (Dong, Roth, Su 2019, Corollary 2.13):
// δ = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2), evaluated in log space.
func gdpDelta(eps, mu float64) float64 {
	a := logNormCDF(-eps/mu + mu/2)
	b := eps + logNormCDF(-eps/mu-mu/2)
	if !(b < a) {
		return 0
	}
	return math.Exp(logSub(a, b))
}

// gdpEpsilon inverts gdpDelta by bisection: δ(ε) decreases in ε.
func gdpEpsilon(mu, delta float64) float64 {
	if math.IsInf(mu, 1) || math.IsNaN(mu) {
		return math.Inf(1)
	}
	if mu == 0 || gdpDelta(0, mu) <= delta {
		return 0
	}
	lo, hi := 0.0, 1.0
	for gdpDelta(hi, mu) > delta {
		lo, hi = hi, 2*hi
		if hi > 1e12 {
			return math.Inf(1)
		}
	}
	for range 200 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if gdpDelta(mid, mu) > delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
