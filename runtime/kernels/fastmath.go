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

// Tanhf returns tanh(x) in float32 (Cephes tanhf): an odd polynomial below
// |x| = 0.5493 (where 1 − 2/(e^{2x}+1) would cancel), Expf above, ±1 where
// float32 saturates. About 3× faster than float32(math.Tanh(float64(x))).
func Tanhf(x float32) float32 {
	a := x
	if a < 0 {
		a = -a
	}
	switch {
	case x != x:
		return x
	case a > 9.01:
		if x > 0 {
			return 1
		}
		return -1
	case a >= 0.5493:
		z := 1 - 2/(Expf(2*a)+1)
		if x < 0 {
			return -z
		}
		return z
	}
	z := x * x
	return ((((-5.70498872745e-3*z+2.06390887954e-2)*z-5.37397155531e-2)*z+1.33314422036e-1)*z-3.33332819422e-1)*z*x + x
}
