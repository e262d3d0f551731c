package accountant

import "math"

// Numerical helpers shared by the accountants. Everything that can overflow
// or underflow in linear space is done in log space.

const (
	ln2       = math.Ln2
	sqrt2     = math.Sqrt2
	logSqrtPi = 0.5723649429247001 // log(sqrt(pi))
)

// logAdd returns log(exp(a) + exp(b)).
func logAdd(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(b, -1) {
		return a
	}
	if math.IsInf(a, 1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// logSub returns log(exp(a) - exp(b)) for a >= b; it returns -Inf when a == b
// and NaN when a < b.
func logSub(a, b float64) float64 {
	switch {
	case a < b:
		return math.NaN()
	case math.IsInf(b, -1):
		return a
	case a == b:
		return math.Inf(-1)
	}
	return a + math.Log1p(-math.Exp(b-a))
}

// logSumExp returns log(sum(exp(xs))).
func logSumExp(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		if x > m {
			m = x
		}
	}
	if math.IsInf(m, 0) {
		return m
	}
	s := 0.0
	for _, x := range xs {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// logErfcSwitch is where logErfc stops using math.Erfc (which underflows
// near x = 27.2) and uses the asymptotic expansion instead. At x = 26 the
// expansion's first omitted term is below 1e-17 relative, and math.Erfc is
// still a normal float64 (about 1e-296).
const logErfcSwitch = 26

// logErfc returns log(erfc(x)) accurately for all x, including arguments so
// large that erfc(x) underflows float64.
func logErfc(x float64) float64 {
	if math.IsNaN(x) {
		return x
	}
	if x < logErfcSwitch {
		return math.Log(math.Erfc(x))
	}
	if math.IsInf(x, 1) {
		return math.Inf(-1)
	}
	// erfc(x) = exp(-x²)/(x√π) · (1 + Σ_{k≥1} (-1)^k (2k-1)!! / (2x²)^k).
	// The series is asymptotic; for x ≥ 26 the terms fall below 1e-17 of
	// the sum well before they start to grow, so eight terms suffice.
	y := 1 / (2 * x * x)
	sum, term := 1.0, 1.0
	for k := 1; k <= 8; k++ {
		term *= -float64(2*k-1) * y
		sum += term
	}
	return -x*x - math.Log(x) - logSqrtPi + math.Log(sum)
}

// logNormCDF returns log(Φ(x)) for the standard normal CDF Φ.
func logNormCDF(x float64) float64 { return logErfc(-x/sqrt2) - ln2 }

// normCDF returns Φ(x), accurate in the lower tail.
func normCDF(x float64) float64 { return 0.5 * math.Erfc(-x/sqrt2) }

// normSF returns 1 - Φ(x), accurate in the upper tail.
func normSF(x float64) float64 { return 0.5 * math.Erfc(x/sqrt2) }

// lchoose returns log(n choose k) for integers 0 <= k <= n.
func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}
