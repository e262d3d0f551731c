package accountant

import (
	"fmt"
	"math"
)

// DefaultOrders returns the default RDP order grid: 1.1, 1.2, …, 10.9 (the
// fractional orders of Opacus and TensorFlow Privacy), every integer from 11
// to 64, and a sparse set of larger integers up to 1024 for very small
// sampling rates or very large ε. Adding orders can only lower the reported
// ε, since every order gives a valid bound.
func DefaultOrders() []float64 {
	var o []float64
	for x := 1; x < 100; x++ {
		o = append(o, 1+float64(x)/10)
	}
	for a := 11; a <= 64; a++ {
		o = append(o, float64(a))
	}
	for _, a := range []float64{72, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024} {
		o = append(o, a)
	}
	return o
}

type rdpAccountant struct{ base }

func (a *rdpAccountant) Name() string { return RDP }

func (a *rdpAccountant) Description() string {
	return fmt.Sprintf("RDP (Rényi DP of the Poisson-subsampled Gaussian, %s conversion)", a.conversion())
}

func (a *rdpAccountant) String() string { return a.Description() }

func (a *rdpAccountant) State() State { return a.state(RDP) }

func (a *rdpAccountant) orders() []float64 {
	if len(a.opts.Orders) > 0 {
		return a.opts.Orders
	}
	return DefaultOrders()
}

func (a *rdpAccountant) conversion() Conversion {
	if a.opts.Conversion == "" {
		return ConversionImproved
	}
	return a.opts.Conversion
}

func (a *rdpAccountant) Epsilon(delta float64) (Result, error) {
	if err := ValidateDelta(delta); err != nil {
		return Result{}, err
	}
	r := Result{Accountant: RDP, Delta: delta, Steps: a.total, Conversion: a.conversion()}
	if len(a.phases) == 0 {
		return r, nil
	}
	orders := a.orders()
	rdp := composeRDP(a.phases, orders)
	r.Epsilon, r.Order = rdpToEpsilon(orders, rdp, delta, r.Conversion)
	return r, nil
}

// composeRDP returns the RDP of the composition of the phases at each order.
func composeRDP(phases []Phase, orders []float64) []float64 {
	total := make([]float64, len(orders))
	for _, p := range groupPhases(phases) {
		for i, a := range orders {
			total[i] += float64(p.Steps) * rdpSubsampledGaussian(p.SampleRate, p.Sigma, a)
		}
	}
	return total
}

// rdpToEpsilon converts an RDP curve to (ε, δ)-DP: it returns the smallest
// ε over the orders and the order attaining it. Orders whose RDP is not
// finite are skipped; if none is usable ε is +Inf and the order 0.
func rdpToEpsilon(orders, rdp []float64, delta float64, conv Conversion) (eps, order float64) {
	eps = math.Inf(1)
	logDelta := math.Log(delta)
	for i, a := range orders {
		r := rdp[i]
		if math.IsNaN(r) || math.IsInf(r, 1) {
			continue
		}
		var e float64
		switch conv {
		case ConversionClassic:
			e = r - logDelta/(a-1)
		default:
			if r <= 0 || delta*delta+math.Expm1(-r) > 0 {
				// The total variation distance is at most
				// sqrt(1 - exp(-KL)) ≤ sqrt(1 - exp(-rdp(α)))
				// (Bretagnolle–Huber; D_α ≥ KL for α ≥ 1), so the
				// mechanism is (0, δ)-DP.
				e = 0
			} else {
				e = r + math.Log1p(-1/a) - (logDelta+math.Log(a))/(a-1)
			}
		}
		if e < eps {
			eps, order = e, a
		}
	}
	if eps < 0 {
		eps = 0
	}
	return eps, order
}

// rdpSubsampledGaussian returns the RDP at order alpha of one step of the
// Poisson-subsampled Gaussian mechanism with sampling rate q and noise
// multiplier sigma: log(A_α)/(α-1) with A_α = E_{z~N(0,σ²)}[((1-q) +
// q·exp((2z-1)/(2σ²)))^α] (Mironov, Talwar, Zhang 2019). It is never below
// the true value: for fractional α it is the series' upper bound described
// at logAFrac, and +Inf (the order is then ignored) if even that bound is
// not available.
func rdpSubsampledGaussian(q, sigma, alpha float64) float64 {
	if q == 1 {
		return alpha / (2 * sigma * sigma)
	}
	var logA float64
	if alpha == math.Trunc(alpha) && alpha <= 1<<20 {
		logA = logAInt(q, sigma, int(alpha))
	} else {
		logA = logAFrac(q, sigma, alpha)
	}
	return logA / (alpha - 1)
}

// logAInt computes log(A_α) for integer α by the binomial expansion
// A_α = Σ_{k=0}^{α} C(α,k) (1-q)^{α-k} q^k exp((k²-k)/(2σ²)), exact up to
// rounding (all terms are positive).
func logAInt(q, sigma float64, alpha int) float64 {
	logQ, log1mQ := math.Log(q), math.Log1p(-q)
	s2 := 2 * sigma * sigma
	terms := make([]float64, alpha+1)
	for k := 0; k <= alpha; k++ {
		fk := float64(k)
		terms[k] = lchoose(alpha, k) + fk*logQ + float64(alpha-k)*log1mQ + (fk*fk-fk)/s2
	}
	return logSumExp(terms)
}

// maxFracTerms bounds the series for fractional orders. Past i = ⌈α⌉ its
// terms alternate in sign and decrease in magnitude only polynomially
// (about i^-(α+1)) when σ is small: at σ = 0.6, q = 0.04, α = 1.3 the
// 1000th term is still e^-29. dp_accounting gives up on such an order
// after 1000 terms; we stop at a partial sum that bounds the series from
// above instead (see logAFrac), so the cap costs tightness, not validity.
const maxFracTerms = 20000

// fracTolerance is how small (relative to the sum, in log space) the last
// term must be before logAFrac stops early: e^-30 ≈ 9e-14 in log(A_α), the
// criterion of Opacus and dp_accounting, which moves ε by less than 1e-8
// per 10⁴ steps at α ≥ 1.1.
const fracTolerance = 30

// logAFrac computes log(A_α) for fractional α by splitting the integral at
// z0 = σ² log(1/q - 1) + 1/2, where q·exp((2z-1)/(2σ²)) = 1-q, and
// expanding each part as a convergent generalised binomial series
// (Mironov, Talwar, Zhang 2019, Section 3.3):
//
//	A_0 = Σ_i C(α,i) q^i (1-q)^{α-i} exp((i²-i)/(2σ²)) · ½erfc((i-z0)/(√2σ))
//	A_1 = Σ_i C(α,i) q^{α-i} (1-q)^i exp(((α-i)²-(α-i))/(2σ²)) · ½erfc((z0-(α-i))/(√2σ))
//
// The coefficients C(α,i) change sign at every i > α, so past ⌈α⌉ the
// series alternates; positive and negative terms are summed separately in
// log space and subtracted at the end. Once the magnitudes of the
// alternating terms decrease (they do for large i: |C(α,i)| ~ i^-(α+1)
// and the other factors tend to a constant and 1/i), the sum lies between
// any two consecutive partial sums (Leibniz), so a partial sum that ends on
// a positive term is an upper bound. logAFrac returns such a partial sum:
// as soon as the last term is below the sum by fracTolerance, or at the
// latest after maxFracTerms terms. It returns +Inf if the terms have not
// started to decrease by then.
func logAFrac(q, sigma, alpha float64) float64 {
	logQ, log1mQ := math.Log(q), math.Log1p(-q)
	s2 := 2 * sigma * sigma
	z0 := sigma*sigma*math.Log(1/q-1) + 0.5
	rs := sqrt2 * sigma
	neg := math.Inf(-1)
	pos0, pos1, neg0, neg1 := neg, neg, neg, neg
	lastMag := math.Inf(1)
	decreasing := 0                 // alternating terms in a row whose magnitude fell
	logC, sign := 0.0, 1.0          // log|C(α,i)| and its sign
	alternating := math.Ceil(alpha) // from this i on, the signs alternate
	for i := 0; i < maxFracTerms; i++ {
		if i > 0 {
			f := alpha - float64(i-1)
			logC += math.Log(math.Abs(f)) - math.Log(float64(i))
			if f < 0 {
				sign = -sign
			}
		}
		fi := float64(i)
		j := alpha - fi
		s0 := logC + fi*logQ + j*log1mQ + (fi*fi-fi)/s2 - ln2 + logErfc((fi-z0)/rs)
		s1 := logC + j*logQ + fi*log1mQ + (j*j-j)/s2 - ln2 + logErfc((z0-j)/rs)
		if sign > 0 {
			pos0, pos1 = logAdd(pos0, s0), logAdd(pos1, s1)
		} else {
			neg0, neg1 = logAdd(neg0, s0), logAdd(neg1, s1)
		}
		mag := logAdd(s0, s1)
		if fi > alternating {
			if mag < lastMag {
				decreasing++
			} else {
				decreasing = 0
			}
		}
		lastMag = mag
		p, n := logAdd(pos0, pos1), logAdd(neg0, neg1)
		// Stop after a positive term: the next one is negative and
		// smaller, so this partial sum is above the series.
		if sign > 0 && decreasing >= 3 && (mag < p-fracTolerance || i == maxFracTerms-1 || i == maxFracTerms-2) {
			if !(n < p) {
				return math.Inf(1)
			}
			return logSub(p, n)
		}
	}
	return math.Inf(1)
}

// rdpEpsilon returns the RDP accountant's ε (default orders, improved
// conversion) for the phases; the PRV accountant uses it to size its domain.
func rdpEpsilon(phases []Phase, delta float64) float64 {
	orders := DefaultOrders()
	e, _ := rdpToEpsilon(orders, composeRDP(phases, orders), delta, ConversionImproved)
	return e
}
