package kernels

import (
	"fmt"
	"math"
)

// UnaryParams holds the attributes of the parameterized unary operators,
// under their ONNX meaning per operator: LeakyRelu, Elu, Celu and
// ThresholdedRelu read Alpha; HardSigmoid Alpha and Beta; Selu Alpha and
// Gamma; Shrink Alpha (lambd) and Beta (bias); Scale Alpha (the factor).
// The others read none.
type UnaryParams struct {
	Alpha, Beta, Gamma float32
}

// Activation writes y = op(x) for len(x) elements (y may alias x), for the
// operators from LeakyRelu on (the ones Unary does not take). It works on
// one contiguous range; callers split the work across goroutines. The
// operator switch is outside the loops, and each element is computed as
// its ONNX definition reads, in float64 where a transcendental function
// is involved.
func Activation(op UnaryOp, p UnaryParams, x, y []float32) {
	y = y[:len(x)]
	switch op {
	case LeakyRelu:
		a := p.Alpha
		for i, v := range x {
			if v < 0 {
				y[i] = a * v
			} else {
				y[i] = v
			}
		}
	case Elu:
		a := float64(p.Alpha)
		for i, v := range x {
			if v < 0 {
				y[i] = float32(a * math.Expm1(float64(v)))
			} else {
				y[i] = v
			}
		}
	case HardSigmoid:
		a, b := p.Alpha, p.Beta
		for i, v := range x {
			y[i] = min(max(a*v+b, 0), 1)
		}
	case HardSwish:
		for i, v := range x {
			y[i] = v * min(max(v/6+0.5, 0), 1)
		}
	case Softplus:
		for i, v := range x {
			if float64(v) > 20 {
				y[i] = v
			} else {
				y[i] = float32(math.Log1p(math.Exp(float64(v))))
			}
		}
	case Gelu:
		for i, x := range x {
			v := float64(x)
			y[i] = float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
		}
	case GeluTanhApprox:
		const c = 0.7978845608028654 // √(2/π)
		for i, x := range x {
			v := float64(x)
			y[i] = float32(0.5 * v * (1 + math.Tanh(c*(v+0.044715*v*v*v))))
		}
	case Selu:
		a, g := float64(p.Alpha), float64(p.Gamma)
		for i, v := range x {
			if v > 0 {
				y[i] = float32(g * float64(v))
			} else {
				y[i] = float32(g * a * math.Expm1(float64(v)))
			}
		}
	case Celu:
		a := float64(p.Alpha)
		for i, v := range x {
			if v > 0 {
				y[i] = v
			} else {
				y[i] = float32(a * math.Expm1(float64(v)/a))
			}
		}
	case Sign:
		for i, v := range x {
			switch {
			case v > 0:
				y[i] = 1
			case v < 0:
				y[i] = -1
			default:
				y[i] = v // 0, −0 and NaN map to themselves
			}
		}
	case Shrink:
		l, b := p.Alpha, p.Beta
		for i, v := range x {
			switch {
			case v < -l:
				y[i] = v + b
			case v > l:
				y[i] = v - b
			default:
				y[i] = 0
			}
		}
	case Softsign:
		for i, v := range x {
			y[i] = v / (1 + float32(math.Abs(float64(v))))
		}
	case ThresholdedRelu:
		a := p.Alpha
		for i, v := range x {
			if v > a {
				y[i] = v
			} else {
				y[i] = 0
			}
		}
	case Mish:
		for i, x := range x {
			v := float64(x)
			y[i] = float32(v * math.Tanh(softplus64(v)))
		}
	case Floor:
		for i, v := range x {
			y[i] = float32(math.Floor(float64(v)))
		}
	case Ceil:
		for i, v := range x {
			y[i] = float32(math.Ceil(float64(v)))
		}
	case Round:
		for i, v := range x {
			y[i] = float32(math.RoundToEven(float64(v)))
		}
	case Sin:
		for i, v := range x {
			y[i] = float32(math.Sin(float64(v)))
		}
	case Cos:
		for i, v := range x {
			y[i] = float32(math.Cos(float64(v)))
		}
	case Scale:
		a := p.Alpha
		for i, v := range x {
			y[i] = v * a
		}
	default:
		panic(fmt.Sprintf("kernels: Activation does not take %v", op))
	}
}

// softplus64 is log(1 + e^v), taken as v above 20 where the two agree in
// float64 and e^v would lose the 1.
func softplus64(v float64) float64 {
	if v > 20 {
		return v
	}
	return math.Log1p(math.Exp(v))
}

// ActivationBackward writes dx = dy·op'(x) for len(dy) elements (dx may
// alias dy), for the operators Activation takes; it reads the input x
// (Scale does not: x may be nil there). The piecewise-constant maps
// (Sign, Floor, Ceil, Round) have derivative zero almost everywhere.
func ActivationBackward(op UnaryOp, p UnaryParams, x, dy, dx []float32) {
	dx = dx[:len(dy)]
	if op == Scale {
		a := p.Alpha
		for i, g := range dy {
			dx[i] = g * a
		}
		return
	}
	x = x[:len(dy)]
	switch op {
	case LeakyRelu:
		a := p.Alpha
		for i, v := range x {
			if v < 0 {
				dx[i] = dy[i] * a
			} else {
				dx[i] = dy[i] * 1
			}
		}
	case Elu:
		a := float64(p.Alpha)
		for i, v := range x {
			if v < 0 {
				dx[i] = dy[i] * float32(a*math.Exp(float64(v)))
			} else {
				dx[i] = dy[i] * 1
			}
		}
	case HardSigmoid:
		a, b := p.Alpha, p.Beta
		for i, v := range x {
			if u := a*v + b; u > 0 && u < 1 {
				dx[i] = dy[i] * a
			} else {
				dx[i] = dy[i] * 0
			}
		}
	case HardSwish:
		for i, v := range x {
			var d float32
			switch {
			case v <= -3:
				d = 0
			case v >= 3:
				d = 1
			default:
				d = v/3 + 0.5
			}
			dx[i] = dy[i] * d
		}
	case Softplus:
		for i, v := range x {
			dx[i] = dy[i] * float32(1/(1+math.Exp(-float64(v))))
		}
	case Gelu:
		for i, x := range x {
			v := float64(x)
			dx[i] = dy[i] * float32(0.5*(1+math.Erf(v/math.Sqrt2))+v*math.Exp(-0.5*v*v)/math.Sqrt(2*math.Pi))
		}
	case GeluTanhApprox:
		const c = 0.7978845608028654 // √(2/π)
		for i, x := range x {
			v := float64(x)
			u := c * (v + 0.044715*v*v*v)
			th := math.Tanh(u)
			dx[i] = dy[i] * float32(0.5*(1+th)+0.5*v*(1-th*th)*c*(1+3*0.044715*v*v))
		}
	case Selu:
		a, g := float64(p.Alpha), float64(p.Gamma)
		for i, v := range x {
			if v > 0 {
				dx[i] = dy[i] * float32(g)
			} else {
				dx[i] = dy[i] * float32(g*a*math.Exp(float64(v)))
			}
		}
	case Celu:
		a := float64(p.Alpha)
		for i, v := range x {
			if v > 0 {
				dx[i] = dy[i] * 1
			} else {
				dx[i] = dy[i] * float32(math.Exp(float64(v)/a))
			}
		}
	case Shrink:
		l := p.Alpha
		for i, v := range x {
			if v < -l || v > l {
				dx[i] = dy[i] * 1
			} else {
				dx[i] = dy[i] * 0
			}
		}
	case Softsign:
		for i, v := range x {
			d := 1 + float32(math.Abs(float64(v)))
			dx[i] = dy[i] * (1 / (d * d))
		}
	case ThresholdedRelu:
		a := p.Alpha
		for i, v := range x {
			if v > a {
				dx[i] = dy[i] * 1
			} else {
				dx[i] = dy[i] * 0
			}
		}
	case Mish:
		for i, x := range x {
			v := float64(x)
			t := math.Tanh(softplus64(v))
			dx[i] = dy[i] * float32(t+v*(1-t*t)/(1+math.Exp(-v)))
		}
	case Sign, Floor, Ceil, Round:
		for i := range x {
			dx[i] = dy[i] * 0
		}
	case Sin:
		for i, v := range x {
			dx[i] = dy[i] * float32(math.Cos(float64(v)))
		}
	case Cos:
		for i, v := range x {
			dx[i] = dy[i] * float32(-math.Sin(float64(v)))
		}
	default:
		panic(fmt.Sprintf("kernels: ActivationBackward does not take %v", op))
	}
}
