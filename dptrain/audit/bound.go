package audit

import (
	"fmt"
	"math"
)

// PValue returns the probability, under an (ε, δ)-DP mechanism, that an
// auditor who guesses on r of m canaries (each included independently with
// probability ½) gets at least v right: the (ε, δ) form of the main result
// of Steinke, Nasr & Jagielski 2023, computed as their p-value algorithm
// does:
//
//	P ≤ β + 2mδ·α,  β = P[Bin(r, p) ≥ v],
//	α = max_{1≤i≤v} P[v-i ≤ Bin(r, p) < v] / i,  p = e^ε/(1+e^ε),
//
// p being the accuracy of ε-DP randomized response. The result is capped
// at 1.
func PValue(m, r, v int, eps, delta float64) float64 {
	if v <= 0 {
		return 1
	}
	// log p and log(1-p) without overflow for large ε.
	logP := -math.Log1p(math.Exp(-eps))
	log1mP := -eps + logP
	logPMF := func(k int) float64 {
		return lchoose(r, k) + float64(k)*logP + float64(r-k)*log1mP
	}
	var beta float64
	for k := v; k <= r; k++ {
		beta += math.Exp(logPMF(k))
	}
	var alpha, sum float64
	for i := 1; i <= v; i++ {
		sum += math.Exp(logPMF(v - i))
		alpha = math.Max(alpha, sum/float64(i))
	}
	return math.Min(1, beta+2*float64(m)*delta*alpha)
}

// EpsilonLowerBound returns the largest ε (to 1e-6) such that v or more
// correct guesses out of r on m canaries would happen with probability
// below 1 - confidence if the mechanism were (ε, δ)-DP: with that
// confidence, the mechanism is not (ε', δ)-DP for any ε' below it. It is 0
// when v correct guesses are not unlikely even at ε = 0.
func EpsilonLowerBound(m, r, v int, delta, confidence float64) (float64, error) {
	if !(m >= 1 && r >= 0 && r <= m && v >= 0 && v <= r) {
		return 0, fmt.Errorf("audit: need 0 ≤ v ≤ r ≤ m, m ≥ 1; got m=%d r=%d v=%d", m, r, v)
	}
	if !(delta >= 0 && delta < 1) {
		return 0, fmt.Errorf("audit: δ %v must be in [0, 1)", delta)
	}
	if !(confidence > 0 && confidence < 1) {
		return 0, fmt.Errorf("audit: confidence %v must be in (0, 1)", confidence)
	}
	alpha := 1 - confidence
	if PValue(m, r, v, 0, delta) >= alpha {
		return 0, nil
	}
	// PValue grows with ε (p does); find hi with PValue(hi) ≥ α, then
	// bisect. With v ≤ r, β → 1 as ε → ∞, so hi exists.
	lo, hi := 0.0, 1.0
	for PValue(m, r, v, hi, delta) < alpha {
		lo, hi = hi, 2*hi
		if hi > 1e4 {
			return lo, nil
		}
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		if PValue(m, r, v, mid, delta) < alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// lchoose returns log C(n, k).
func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}
