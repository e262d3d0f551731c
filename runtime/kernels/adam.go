package kernels

import "math"

// AdamCoeffs are the per-step constants of one Adam/AdamW update (PyTorch's
// formulation), all in float32:
//
//	θ ← θ·Decay
//	d ← g·GradScale + L2·θ
//	m ← Beta1·m + OneMinusBeta1·d
//	v ← Beta2·v + OneMinusBeta2·d·d
//	θ ← θ − StepSize·m / (√v / SqrtBC2 + Eps)
//
// Decay is 1 − lr·λ for AdamW's decoupled weight decay (1 otherwise), L2 is
// λ for Adam's L2 penalty (0 otherwise), StepSize is lr/(1 − β₁ᵗ) and
// SqrtBC2 is √(1 − β₂ᵗ). GradScale multiplies the gradient as it is read
// (1 leaves it as it is), so that a caller need not rescale the gradient in
// a separate pass.
type AdamCoeffs struct {
	GradScale, L2, Decay                       float32
	Beta1, OneMinusBeta1, Beta2, OneMinusBeta2 float32
	StepSize, SqrtBC2, Eps                     float32
}

// AdamUpdate applies one Adam update to p with gradient g and moments m
// and v, all of len(p) elements (g, m and v may be longer; the rest is
// untouched). The result is the same, bit for bit, on every architecture
// and with or without the SSE2 and AVX kernels: every product and sum is rounded to
// float32 on its own (no fused multiply-add) and √v is correctly rounded.
func AdamUpdate(p, g, m, v []float32, c AdamCoeffs) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	n := 0
	if haveAdamSSE && len(p) >= 4 {
		k := [12]float32{c.GradScale, c.L2, c.Decay, c.Beta1, c.OneMinusBeta1, c.Beta2, c.OneMinusBeta2, c.StepSize, c.SqrtBC2, c.Eps}
		// Eight lanes where the CPU has AVX (the loop is bound by the
		// divider, whose YMM throughput per element is about twice its
		// XMM one), then four, then the scalar tail.
		if haveAdamAVX {
			if n = len(p) &^ 7; n > 0 {
				if c.L2 == 0 {
					adamAVX(p[:n], g, m, v, &k)
				} else {
					adamL2AVX(p[:n], g, m, v, &k)
				}
			}
		}
		if n4 := len(p) &^ 3; n4 > n {
			if c.L2 == 0 {
				adamSSE(p[n:n4], g[n:], m[n:], v[n:], &k)
			} else {
				adamL2SSE(p[n:n4], g[n:], m[n:], v[n:], &k)
			}
			n = n4
		}
	}
	adamScalar(p[n:], g[n:], m[n:], v[n:], c)
}

// adamScalar is AdamUpdate in Go: the reference of the SSE2 kernel, which
// performs the same float32 operations in the same order. The explicit
// float32 conversions keep the compiler from fusing a product into the
// following sum (the Go spec allows it, and arm64 does it).
func adamScalar(p, g, m, v []float32, c AdamCoeffs) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	l2 := c.L2 != 0
	for i := range p {
		x := float32(p[i] * c.Decay)
		d := float32(g[i] * c.GradScale)
		if l2 {
			d += float32(c.L2 * x)
		}
		mi := float32(c.Beta1*m[i]) + float32(c.OneMinusBeta1*d)
		vi := float32(c.Beta2*v[i]) + float32(float32(c.OneMinusBeta2*d)*d)
		m[i], v[i] = mi, vi
		den := float32(float32(math.Sqrt(float64(vi)))/c.SqrtBC2) + c.Eps
		p[i] = x - float32(c.StepSize*mi)/den
	}
}
