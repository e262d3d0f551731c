package kernels

// GELU kernels for the runtime's fused activation (the decomposed
// Div → Erf → Add → Mul → Mul chain that torch exports for nn.GELU, and the
// Mul/Add/Tanh chain of approximate="tanh"). One pass forward and one pass
// backward replace five (or nine) elementwise passes and their broadcast
// machinery. The functions work on one contiguous range; callers split the
// work across goroutines.

const (
	invSqrt2    = 0.70710678118654752440 // 1/√2
	invSqrt2Pi  = 0.39894228040143267794 // 1/√(2π)
	sqrt2OverPi = 0.79788456080286535588 // √(2/π)
	geluKappa   = 0.044715
)

// GeluErf writes y = x·Φ(x) = ½x(1 + erf(x/√2)) for len(x) elements
// (y may alias x).
func GeluErf(x, y []float32) {
	y = y[:len(x)]
	n := 0
	if haveSIMD {
		n = len(x) &^ 3
		m := 0
		if haveAVX2 {
			m = len(x) &^ 7
			geluErfAVX2(x[:m], y[:m])
		}
		geluErfSSE(x[m:n], y[m:n])
	}
	geluErfGo(x[n:], y[n:])
}

func geluErfGo(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		h := 0.5 * v
		y[i] = h + h*Erff(v*invSqrt2)
	}
}

// GeluErfBackward writes dx = dy·(Φ(x) + x·φ(x)) with φ the standard normal
// density, for len(dy) elements (dx may alias dy).
func GeluErfBackward(x, dy, dx []float32) {
	x, dx = x[:len(dy)], dx[:len(dy)]
	n := 0
	if haveSIMD {
		n = len(dy) &^ 3
		m := 0
		if haveAVX2 {
			m = len(dy) &^ 7
			geluErfBackwardAVX2(x[:m], dy[:m], dx[:m])
		}
		geluErfBackwardSSE(x[m:n], dy[m:n], dx[m:n])
	}
	geluErfBackwardGo(x[n:], dy[n:], dx[n:])
}

func geluErfBackwardGo(x, dy, dx []float32) {
	x, dx = x[:len(dy)], dx[:len(dy)]
	for i, g := range dy {
		v := x[i]
		cdf := 0.5 + 0.5*Erff(v*invSqrt2)
		pdf := invSqrt2Pi * Expf(-0.5*v*v)
		dx[i] = g * (cdf + v*pdf)
	}
}

// Expfs writes y = Expf(x) elementwise (y may alias x) for arguments up to
// 88; larger arguments give e^88 instead of overflowing. Softmax, whose
// arguments are x − max x ≤ 0, uses it; on amd64 it runs four lanes at a
// time.
func Expfs(x, y []float32) {
	y = y[:len(x)]
	n := 0
	if haveSIMD {
		n = len(x) &^ 3
		m := 0
		if haveAVX2 {
			m = len(x) &^ 7
			expAVX2(x[:m], y[:m])
		}
		expSSE(x[m:n], y[m:n])
	}
	for i, v := range x[n:] {
		y[n+i] = Expf(min(v, 88))
	}
}

// GeluTanh writes y = ½x(1 + tanh(√(2/π)(x + 0.044715x³))) for len(x)
// elements.
func GeluTanh(x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		u := sqrt2OverPi * (v + geluKappa*v*v*v)
		y[i] = 0.5 * v * (1 + Tanhf(u))
	}
}

// GeluTanhBackward writes the gradient of GeluTanh: dx = dy·(½(1 + t) +
// ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)) with t = tanh(√(2/π)(x + 0.044715x³)).
func GeluTanhBackward(x, dy, dx []float32) {
	x, dx = x[:len(dy)], dx[:len(dy)]
	for i, g := range dy {
		v := x[i]
		v2 := v * v
		t := Tanhf(sqrt2OverPi * (v + geluKappa*v2*v))
		d := 0.5*(1+t) + 0.5*v*(1-t*t)*sqrt2OverPi*(1+3*geluKappa*v2)
		dx[i] = g * d
	}
}
