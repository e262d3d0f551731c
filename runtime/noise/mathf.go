package noise

import "math"

// The slow path's two elementary functions are written out here, every
// product rounded explicitly (a conversion forbids Go from fusing it into
// an FMA, which arm64, ppc64 and GOAMD64=v3 builds would otherwise do):
// math.Exp and math.Log are assembly on some platforms and may round
// differently from the Go code on others, and a backend has to be able to
// reproduce every draw bit for bit from the steps in doc.go.

// expf returns e^x in float32 to within 2 ulp (Cephes expf: range
// reduction by ln 2 and a degree-5 polynomial; the same steps as
// runtime/kernels.Expf, with every product rounded on its own). It returns
// 0 below −87.3 and +Inf above 88.7; NaN propagates.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	}
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	fn := float32(x*log2e) + 0.5
	n := int32(fn)
	if fn < 0 && float32(n) != fn {
		n-- // floor
	}
	r := float32(x-float32(float32(n)*c1)) - float32(float32(n)*c2)
	p := float32(1.9875691500e-4)
	p = float32(p*r) + 1.3981999507e-3
	p = float32(p*r) + 8.3334519073e-3
	p = float32(p*r) + 4.1665795894e-2
	p = float32(p*r) + 1.6666665459e-1
	p = float32(p*r) + 5.0000001201e-1
	y := float32(float32(float32(p*r)*r)+r) + 1
	// 2^n for n in [−126, 128]: split n = 128 into two factors.
	if n > 127 {
		return float32(y*2) * math.Float32frombits(uint32(n-1+127)<<23)
	}
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// ln returns the natural logarithm of x ∈ (0, 1] (the tail's only use),
// to within a few ulp: x = m·2^e with m ∈ [√½, √2), s = (m−1)/(m+1),
// ln m = 2·atanh(s) = 2·(s + s³/3 + s⁵/5 + …) summed to s²³ (|s| ≤ 0.172,
// so the next term is below 2⁻⁵⁸ of the sum), and e·ln 2 added in two
// parts. It returns −Inf for 0 and NaN for x < 0 or NaN, never reached by
// the noise.
func ln(x float64) float64 {
	switch {
	case x == 0:
		return math.Inf(-1)
	case !(x > 0):
		return math.NaN()
	}
	const (
		ln2Hi = 6.93147180369123816490e-01 // ln 2's top 32 bits
		ln2Lo = 1.90821492927058770002e-10 // ln 2 − ln2Hi
	)
	m, e := math.Frexp(x) // m ∈ [½, 1)
	if m < math.Sqrt2/2 {
		m *= 2
		e--
	}
	s := (m - 1) / (m + 1)
	s2 := float64(s * s)
	// Horner on 1 + s²/3 + s⁴/5 + … + s²²/23.
	p := 1.0 / 23
	for k := 21; k >= 1; k -= 2 {
		p = float64(p*s2) + 1/float64(k)
	}
	fe := float64(e)
	return float64(fe*ln2Hi) + (float64(float64(2*s)*p) + float64(fe*ln2Lo))
}
