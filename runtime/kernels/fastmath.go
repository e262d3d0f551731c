package kernels

import "math"

// Expf returns e^x in float32 to within 2 ulp (Cephes expf: range
// reduction by ln 2 and a degree-5 polynomial), about 3× faster than
// float32(math.Exp(float64(x))). It returns 0 below −87.3 (where the
// result would be subnormal) and +Inf above 88.7; NaN propagates.
func Expf(x float32) float32 {
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
	fn := x*log2e + 0.5
	n := int32(fn)
	if fn < 0 && float32(n) != fn {
		n-- // floor
	}
	r := x - float32(n)*c1 - float32(n)*c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	// 2^n for n in [−126, 128]: split n = 128 into two factors.
	if n > 127 {
		return y * 2 * math.Float32frombits(uint32(n-1+127)<<23)
	}
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// Erff returns erf(x) in float32 (Eigen's rational approximation on
// [−4, 4], ±1 outside; within a few ulp), several times faster than
// float32(math.Erf(float64(x))).
func Erff(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, -4), 4)
	x2 := x * x
	p := float32(-2.72614225801306e-10)
	p = p*x2 + 2.77068142495902e-08
	p = p*x2 + -2.10102402082508e-06
	p = p*x2 + -5.69250639462346e-05
	p = p*x2 + -7.34990630326855e-04
	p = p*x2 + -2.95459980854025e-03
	p = p*x2 + -1.60960333262415e-02
	p *= x
	q := float32(-1.45660718464996e-05)
	q = q*x2 + -2.13374055278905e-04
	q = q*x2 + -1.68282697438203e-03
	q = q*x2 + -7.37332916720468e-03
	q = q*x2 + -1.42647390514189e-02
	return p / q
}

// Tanhf returns tanh(x) in float32 within 1.8e-7 relative error (about
// 2 ulp; checked over all float32), ±1 where float32 rounds to it (|x|
// beyond 9 or so), and NaN for NaN. Slices should go through tanhSlice
// (Unary), which gives the same results four lanes at a time with SSE2,
// about 4× faster than this scalar function (itself faster than
// float32(math.Tanh(float64(x)))).
func Tanhf(x float32) float32 {
	return tanhScalar(x)
}

// tanhSlice sets y[i] = Tanhf(x[i]) for every element of x; y may alias x.
// The SSE2 kernel, where built in, does the same operations in the same
// order as tanhScalar, so the results are identical bit for bit whichever
// elements fall in the scalar tail (and so do not depend on how the work
// is split).
func tanhSlice(x, y []float32) {
	y = y[:len(x)]
	if haveTanhAVX2 {
		n := len(x) &^ 7
		tanhAVX2(x[:n], y[:n])
		x, y = x[n:], y[n:]
	}
	if haveTanhSSE {
		n := len(x) &^ 3
		tanhSSE(x[:n], y[:n])
		x, y = x[n:], y[n:]
	}
	for i, v := range x {
		y[i] = tanhScalar(v)
	}
}

// Constants of tanhScalar (and of tanhSSE in tanh_amd64.s, which holds
// them as float32 bit patterns: keep the two in step).
const (
	tanhLog2e = 1.44269504088896341 // 1/ln 2
	tanhC1    = 0.693359375         // ln 2 = tanhC1 + tanhC2, tanhC1 exact in few bits
	tanhC2    = -2.12194440e-4
	tanhMagic = 12582912 // 1.5·2²³: adding it rounds to an integer in the low mantissa bits
)

// tanhScalar is tanh(x) as
//
//	tanh|x| = E/(E+2),  E = e^{2|x|} − 1 = (2ⁿ − 1) + 2ⁿ·(e^r − 1),
//
// with t = 2|x| = n·ln2 + r, n = ⌊t/ln2⌋ and 0 ≤ r < ln2 (the floor, not
// the nearest integer, so that no term is negative and nothing cancels
// near 0, where E = e^r − 1 itself), e^r − 1 its Taylor polynomial of
// degree 9 (truncation below 1e-8 relative) and 2ⁿ built in the exponent
// bits. One formula for all |x| needs no branch: Cephes' split (polynomial
// below 0.55, exponential above) branches on the data, which for typical
// activations mispredicts about every other element. |x| is clamped to 20,
// where E/(E+2) is exactly 1 and nothing overflows, through the bits so that
// a NaN clamps too (like MINPS); it is passed through at the end.
func tanhScalar(v float32) float32 {
	ux := math.Float32bits(v)
	t := 2 * math.Float32frombits(min(ux&0x7fffffff, 0x41a00000)) // 2·min(|x|, 20)
	fn := (t*tanhLog2e - 0.5) + tanhMagic                         // n + magic
	nf := fn - tanhMagic
	r := (t - nf*tanhC1) - nf*tanhC2
	// p = Σ r^(k−2)/k! for k = 2..9 by Estrin's scheme: a shorter
	// dependency chain than Horner's, which bounded the SSE loop (2.6 →
	// 2.2 ns per element).
	r2 := r * r
	r4 := r2 * r2
	q0 := 0.5 + r*(1.0/6)
	q1 := 1.0/24 + r*(1.0/120)
	q2 := 1.0/720 + r*(1.0/5040)
	q3 := 1.0/40320 + r*(1.0/362880)
	p := (q0 + r2*q1) + r4*(q2+r2*q3)
	em := p*r2 + r                                                               // e^r − 1
	s := math.Float32frombits((math.Float32bits(fn) - (0x4b400000 - 127)) << 23) // 2ⁿ
	e := (s - 1) + s*em
	res := math.Float32bits(e/(e+2)) | ux&0x80000000
	if ux&0x7fffffff > 0x7f800000 {
		res = ux // NaN
	}
	return math.Float32frombits(res)
}
