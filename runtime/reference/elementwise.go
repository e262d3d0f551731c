package reference

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// softplus is log(1 + eˣ), written as max(x, 0) + log(1 + e^−|x|) so
// that it does not overflow for large x.
func softplus(x float64) float64 {
	return math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x)))
}

// unary64 is op(x) in float64, from the ONNX operator definitions.
func unary64(op runtime.UnaryOp, p runtime.UnaryParams, x float64) float64 {
	a, b, g := float64(p.Alpha), float64(p.Beta), float64(p.Gamma)
	switch op {
	case runtime.UnaryRelu:
		if x < 0 {
			return 0
		}
		return x
	case runtime.UnarySigmoid:
		return 1 / (1 + math.Exp(-x))
	case runtime.UnaryTanh:
		return math.Tanh(x)
	case runtime.UnaryErf:
		return math.Erf(x)
	case runtime.UnaryExp:
		return math.Exp(x)
	case runtime.UnaryLog:
		return math.Log(x)
	case runtime.UnarySqrt:
		return math.Sqrt(x)
	case runtime.UnaryNeg:
		return -x
	case runtime.UnaryAbs:
		return math.Abs(x)
	case runtime.UnaryReciprocal:
		return 1 / x
	case runtime.UnaryIdentity:
		return x
	case runtime.UnaryLeakyRelu:
		if x < 0 {
			return a * x
		}
		return x
	case runtime.UnaryElu:
		if x < 0 {
			return a * (math.Exp(x) - 1)
		}
		return x
	case runtime.UnaryHardSigmoid:
		return math.Max(0, math.Min(1, a*x+b))
	case runtime.UnaryHardSwish:
		return x * math.Max(0, math.Min(1, x/6+0.5))
	case runtime.UnarySoftplus:
		return softplus(x)
	case runtime.UnaryGelu:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt(2)))
	case runtime.UnaryGeluTanh:
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	case runtime.UnarySelu:
		if x > 0 {
			return g * x
		}
		return g * (a*math.Exp(x) - a)
	case runtime.UnaryCelu:
		return math.Max(0, x) + math.Min(0, a*(math.Exp(x/a)-1))
	case runtime.UnarySign:
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return x
	case runtime.UnaryShrink:
		switch {
		case x < -a:
			return x + b
		case x > a:
			return x - b
		}
		return 0
	case runtime.UnarySoftsign:
		return x / (1 + math.Abs(x))
	case runtime.UnaryThresholdedRelu:
		if x > a {
			return x
		}
		return 0
	case runtime.UnaryMish:
		return x * math.Tanh(softplus(x))
	case runtime.UnaryFloor:
		return math.Floor(x)
	case runtime.UnaryCeil:
		return math.Ceil(x)
	case runtime.UnaryRound:
		return math.RoundToEven(x)
	case runtime.UnarySin:
		return math.Sin(x)
	case runtime.UnaryCos:
		return math.Cos(x)
	case runtime.UnaryScale:
		return a * x
	}
	panic("reference: unknown unary operator " + op.String())
}

// unaryGrad64 is op'(x) in float64, given the input x and the output y
// (each operator reads the one ElementwiseOps.UnaryBackward gives it).
func unaryGrad64(op runtime.UnaryOp, p runtime.UnaryParams, x, y float64) float64 {
	a, b, g := float64(p.Alpha), float64(p.Beta), float64(p.Gamma)
	switch op {
	case runtime.UnaryRelu:
		if y > 0 {
			return 1
		}
		return 0
	case runtime.UnarySigmoid:
		return y * (1 - y)
	case runtime.UnaryTanh:
		return 1 - y*y
	case runtime.UnaryErf:
		return 2 / math.Sqrt(math.Pi) * math.Exp(-x*x)
	case runtime.UnaryExp:
		return y
	case runtime.UnaryLog:
		return 1 / x
	case runtime.UnarySqrt:
		return 1 / (2 * y)
	case runtime.UnaryNeg:
		return -1
	case runtime.UnaryAbs:
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return 0
	case runtime.UnaryReciprocal:
		return -y * y
	case runtime.UnaryIdentity:
		return 1
	case runtime.UnaryLeakyRelu:
		if x < 0 {
			return a
		}
		return 1
	case runtime.UnaryElu:
		if x < 0 {
			return a * math.Exp(x)
		}
		return 1
	case runtime.UnaryHardSigmoid:
		if v := a*x + b; v > 0 && v < 1 {
			return a
		}
		return 0
	case runtime.UnaryHardSwish:
		switch {
		case x <= -3:
			return 0
		case x >= 3:
			return 1
		}
		return x/3 + 0.5
	case runtime.UnarySoftplus:
		return 1 / (1 + math.Exp(-x))
	case runtime.UnaryGelu:
		return 0.5*(1+math.Erf(x/math.Sqrt(2))) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
	case runtime.UnaryGeluTanh:
		c := math.Sqrt(2 / math.Pi)
		t := math.Tanh(c * (x + 0.044715*x*x*x))
		return 0.5*(1+t) + 0.5*x*(1-t*t)*c*(1+3*0.044715*x*x)
	case runtime.UnarySelu:
		if x > 0 {
			return g
		}
		return g * a * math.Exp(x)
	case runtime.UnaryCelu:
		if x > 0 {
			return 1
		}
		return math.Exp(x / a)
	case runtime.UnarySign, runtime.UnaryFloor, runtime.UnaryCeil, runtime.UnaryRound:
		return 0
	case runtime.UnaryShrink:
		if x < -a || x > a {
			return 1
		}
		return 0
	case runtime.UnarySoftsign:
		d := 1 + math.Abs(x)
		return 1 / (d * d)
	case runtime.UnaryThresholdedRelu:
		if x > a {
			return 1
		}
		return 0
	case runtime.UnaryMish:
		t := math.Tanh(softplus(x))
		return t + x*(1-t*t)*(1/(1+math.Exp(-x)))
	case runtime.UnarySin:
		return math.Cos(x)
	case runtime.UnaryCos:
		return -math.Sin(x)
	case runtime.UnaryScale:
		return a
	}
	panic("reference: unknown unary operator " + op.String())
}

// Unary implements runtime.ElementwiseOps.
func (Device) Unary(op runtime.UnaryOp, par runtime.UnaryParams, x, y []float32) {
	for i, v := range x {
		y[i] = float32(unary64(op, par, float64(v)))
	}
}

// UnaryBackward implements runtime.ElementwiseOps.
func (Device) UnaryBackward(op runtime.UnaryOp, par runtime.UnaryParams, x, y, dy, dx []float32) {
	for i, g := range dy {
		var xv, yv float64
		if x != nil {
			xv = float64(x[i])
		}
		if y != nil {
			yv = float64(y[i])
		}
		dx[i] = float32(float64(g) * unaryGrad64(op, par, xv, yv))
	}
}

// BinaryBackward implements runtime.ElementwiseOps: each gradient element
// is a float64 sum of dy times the partial derivative over the elements
// that read it. It reads a and b (not y): Div's d/db is −a/b², Pow's
// d/da b·a^(b−1) and d/db a^b·ln a (0 where a = 0 and b ≥ 0).
func (Device) BinaryBackward(op runtime.BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y, dy []float32, yShape []int, da, db []float32) {
	n := numel(yShape)
	for wrt, t := range [][]float32{da, db} {
		if t == nil {
			continue
		}
		tShape := aShape
		if wrt == 1 {
			tShape = bShape
		}
		if wrt == 0 && (op == runtime.BinaryAdd || op == runtime.BinarySub) && numel(tShape) == n && n > 0 && &t[0] == &dy[0] {
			continue // da is dy, in place
		}
		acc := make([]float64, numel(tShape))
		for i := 0; i < n; i++ {
			av := float64(a[broadcastIndex(i, yShape, aShape)])
			bv := float64(b[broadcastIndex(i, yShape, bShape)])
			var d float64
			switch {
			case op == runtime.BinaryAdd:
				d = 1
			case op == runtime.BinarySub && wrt == 0:
				d = 1
			case op == runtime.BinarySub:
				d = -1
			case op == runtime.BinaryMul && wrt == 0:
				d = bv
			case op == runtime.BinaryMul:
				d = av
			case op == runtime.BinaryDiv && wrt == 0:
				d = 1 / bv
			case op == runtime.BinaryDiv:
				d = -av / (bv * bv)
			case op == runtime.BinaryPow && wrt == 0:
				d = bv * math.Pow(av, bv-1)
			case op == runtime.BinaryPow && av == 0 && bv >= 0:
				d = 0
			case op == runtime.BinaryPow:
				d = math.Pow(av, bv) * math.Log(av)
			default:
				panic("reference: unknown binary operator " + op.String())
			}
			acc[broadcastIndex(i, yShape, tShape)] += float64(dy[i]) * d
		}
		for k, v := range acc {
			t[k] = float32(v)
		}
	}
}

// Clip implements runtime.ElementwiseOps.
func (Device) Clip(x []float32, lo, hi float32, y []float32) {
	for i, v := range x {
		y[i] = min(hi, max(lo, v))
	}
}

// ClipBackward implements runtime.ElementwiseOps.
func (Device) ClipBackward(x []float32, lo, hi float32, dy, dx []float32) {
	for i, g := range dy {
		if lo <= x[i] && x[i] <= hi {
			dx[i] = g
		} else {
			dx[i] = 0
		}
	}
}

// Where implements runtime.ElementwiseOps.
func (Device) Where(cond []uint8, condShape []int, x []float32, xShape []int, y []float32, yShape []int, out []float32, outShape []int) {
	for i := range out[:numel(outShape)] {
		if cond[broadcastIndex(i, outShape, condShape)] != 0 {
			out[i] = x[broadcastIndex(i, outShape, xShape)]
		} else {
			out[i] = y[broadcastIndex(i, outShape, yShape)]
		}
	}
}

// WhereBackward implements runtime.ElementwiseOps; it needs no scratch.
func (Device) WhereBackward(cond []uint8, condShape []int, xShape, yShape []int, dout []float32, outShape []int, dx, dy, ws []float32) {
	n := numel(outShape)
	for k, t := range [][]float32{dx, dy} {
		if t == nil {
			continue
		}
		tShape := xShape
		if k == 1 {
			tShape = yShape
		}
		acc := make([]float64, numel(tShape))
		for i := 0; i < n; i++ {
			if (cond[broadcastIndex(i, outShape, condShape)] != 0) == (k == 0) {
				acc[broadcastIndex(i, outShape, tShape)] += float64(dout[i])
			}
		}
		for j, v := range acc {
			t[j] = float32(v)
		}
	}
}

// Gelu implements runtime.ElementwiseOps as Unary's Gelu.
func (d Device) Gelu(tanh bool, x, y []float32) {
	op := runtime.UnaryGelu
	if tanh {
		op = runtime.UnaryGeluTanh
	}
	d.Unary(op, runtime.UnaryParams{}, x, y)
}

// GeluBackward implements runtime.ElementwiseOps as UnaryBackward's Gelu.
func (d Device) GeluBackward(tanh bool, x, dy, dx []float32) {
	op := runtime.UnaryGelu
	if tanh {
		op = runtime.UnaryGeluTanh
	}
	d.UnaryBackward(op, runtime.UnaryParams{}, x, nil, dy, dx)
}

// slopeAt returns the slope PRelu applies to element j.
func slopeAt(slope []float32, sIdx []int32, j int) float64 {
	if sIdx != nil {
		return float64(slope[sIdx[j]])
	}
	return float64(slope[j])
}

// PRelu implements runtime.ElementwiseOps.
func (Device) PRelu(x, slope []float32, sIdx []int32, y []float32) {
	for j, v := range x {
		if v > 0 {
			y[j] = v
		} else {
			y[j] = float32(slopeAt(slope, sIdx, j) * float64(v))
		}
	}
}

// PReluBackward implements runtime.ElementwiseOps.
func (Device) PReluBackward(x, slope []float32, sIdx []int32, dy, dx, ds []float32) {
	for j, v := range x {
		pos := v > 0
		if dx != nil {
			if pos {
				dx[j] = dy[j]
			} else {
				dx[j] = float32(float64(dy[j]) * slopeAt(slope, sIdx, j))
			}
		}
		if ds != nil {
			if pos {
				ds[j] = 0
			} else {
				ds[j] = float32(float64(dy[j]) * float64(v))
			}
		}
	}
}

// maxMinWinner returns the input whose element j is the extreme of the
// inputs (the first NaN, else the first that attains the maximum or
// minimum) and its value.
func maxMinWinner(isMin bool, xs [][]float32, idx [][]int32, j int) (int, float32) {
	at := func(i int) float32 {
		if idx[i] != nil {
			return xs[i][idx[i][j]]
		}
		return xs[i][j]
	}
	for i := range xs {
		if v := at(i); math.IsNaN(float64(v)) {
			return i, v
		}
	}
	w := 0
	for i := 1; i < len(xs); i++ {
		if isMin && at(i) < at(w) || !isMin && at(i) > at(w) {
			w = i
		}
	}
	return w, at(w)
}

// MaxMin implements runtime.ElementwiseOps.
func (Device) MaxMin(isMin bool, xs [][]float32, idx [][]int32, y []float32) {
	for j := range y {
		_, y[j] = maxMinWinner(isMin, xs, idx, j)
	}
}

// MaxMinBackward implements runtime.ElementwiseOps.
func (Device) MaxMinBackward(isMin bool, xs [][]float32, idx [][]int32, dy []float32, dxs [][]float32) {
	acc := make([][]float64, len(dxs))
	for i, dx := range dxs {
		if dx != nil {
			acc[i] = make([]float64, len(dx))
		}
	}
	for j, g := range dy {
		w, _ := maxMinWinner(isMin, xs, idx, j)
		if acc[w] == nil {
			continue
		}
		k := j
		if idx[w] != nil {
			k = int(idx[w][j])
		}
		acc[w][k] += float64(g)
	}
	for i, dx := range dxs {
		for k, v := range acc[i] {
			dx[k] = float32(v)
		}
	}
}

var _ runtime.ElementwiseOps = Device{}
