package kernels

import (
	"fmt"
	"math"
)

// UnaryOp selects an elementwise unary operator.
type UnaryOp int

// Elementwise unary operators (ONNX names).
const (
	Relu UnaryOp = iota
	Sigmoid
	Tanh
	Erf
	Exp
	Log
	Sqrt
	Neg
	Abs
	Reciprocal
	Identity

	// The parameterized and less common activations below are evaluated
	// by Activation and ActivationBackward (activation.go), element by
	// element in float64 where their definition needs a transcendental
	// function; Unary and UnaryBackward do not take them.
	LeakyRelu
	Elu
	HardSigmoid
	HardSwish
	Softplus
	Gelu
	GeluTanhApprox
	Selu
	Celu
	Sign
	Shrink
	Softsign
	ThresholdedRelu
	Mish
	Floor
	Ceil
	Round
	Sin
	Cos
	Scale
)

// String returns the ONNX operator name (GeluTanh is Gelu with
// approximate="tanh"; Scale is the experimental ONNX Scale, y = α·x).
func (op UnaryOp) String() string {
	names := [...]string{"Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Identity",
		"LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Softplus", "Gelu", "GeluTanh", "Selu", "Celu", "Sign",
		"Shrink", "Softsign", "ThresholdedRelu", "Mish", "Floor", "Ceil", "Round", "Sin", "Cos", "Scale"}
	if op >= 0 && int(op) < len(names) {
		return names[op]
	}
	return fmt.Sprintf("UnaryOp(%d)", int(op))
}

// Unary computes y = op(x) elementwise over len(x) elements (y may alias x).
func Unary(op UnaryOp, x, y []float32) {
	checkLen("y", y, len(x))
	parallelFor(len(x), elementwiseGrain, func(lo, hi int) {
		unaryRange(op, x[lo:hi], y[lo:hi])
	})
}

func unaryRange(op UnaryOp, x, y []float32) {
	y = y[:len(x)]
	switch op {
	case Relu:
		if haveSIMD {
			n := len(x) &^ 3
			reluSSE(x[:n], y[:n])
			x, y = x[n:], y[n:]
		}
		for i, v := range x {
			// v < 0 (not v > 0) so that NaN propagates as in PyTorch.
			if v < 0 {
				v = 0
			}
			y[i] = v
		}
	case Sigmoid:
		for i, v := range x {
			y[i] = sigmoid(v)
		}
	case Tanh:
		tanhSlice(x, y)
	case Erf:
		for i, v := range x {
			y[i] = Erff(v)
		}
	case Exp:
		for i, v := range x {
			y[i] = float32(math.Exp(float64(v)))
		}
	case Log:
		for i, v := range x {
			y[i] = float32(math.Log(float64(v)))
		}
	case Sqrt:
		for i, v := range x {
			y[i] = float32(math.Sqrt(float64(v)))
		}
	case Neg:
		for i, v := range x {
			y[i] = -v
		}
	case Abs:
		for i, v := range x {
			y[i] = float32(math.Abs(float64(v)))
		}
	case Reciprocal:
		for i, v := range x {
			y[i] = 1 / v
		}
	case Identity:
		copy(y, x)
	default:
		panic(fmt.Sprintf("kernels: unknown unary op %d", op))
	}
}

// sigmoid evaluates 1/(1+e^-x) through e^-|x| so that neither branch
// overflows for large |x|.
func sigmoid(v float32) float32 {
	x := float64(v)
	if x >= 0 {
		return float32(1 / (1 + math.Exp(-x)))
	}
	e := math.Exp(x)
	return float32(e / (1 + e))
}

// UnaryBackward computes dx = dy·op'(x). Depending on op it reads the input
// x (Erf, Log, Abs) or the forward output y (Relu, Sigmoid, Tanh, Exp,
// Sqrt, Reciprocal); the slice it does not read may be nil. dx may alias
// dy. Relu reads y (y > 0 exactly when x > 0, NaN included), as PyTorch
// does: the layer after a Relu keeps y for its own backward anyway, so the
// Relu's input can be freed once the forward has passed.
func UnaryBackward(op UnaryOp, x, y, dy, dx []float32) {
	n := len(dy)
	checkLen("dx", dx, n)
	switch op {
	case Erf, Log, Abs:
		checkLen("x", x, n)
	case Relu, Sigmoid, Tanh, Exp, Sqrt, Reciprocal:
		checkLen("y", y, n)
	}
	parallelFor(n, elementwiseGrain, func(lo, hi int) {
		unaryGradRange(op, x, y, dy[lo:hi], dx[lo:hi], lo)
	})
}

func unaryGradRange(op UnaryOp, x, y, dy, dx []float32, off int) {
	dx = dx[:len(dy)]
	switch op {
	case Relu:
		ys := y[off : off+len(dy)]
		if haveSIMD {
			n := len(dy) &^ 3
			reluGradSSE(ys[:n], dy[:n], dx[:n])
			ys, dy, dx = ys[n:], dy[n:], dx[n:]
		}
		for i, g := range dy {
			if ys[i] > 0 {
				dx[i] = g
			} else {
				dx[i] = 0
			}
		}
	case Sigmoid:
		ys := y[off : off+len(dy)]
		for i, g := range dy {
			dx[i] = g * ys[i] * (1 - ys[i])
		}
	case Tanh:
		ys := y[off : off+len(dy)]
		for i, g := range dy {
			dx[i] = g * (1 - ys[i]*ys[i])
		}
	case Erf:
		xs := x[off : off+len(dy)]
		const c = 2 / 1.7724538509055160272981674833411 // 2/√π
		for i, g := range dy {
			v := xs[i]
			dx[i] = g * (c * Expf(-v*v))
		}
	case Exp:
		ys := y[off : off+len(dy)]
		for i, g := range dy {
			dx[i] = g * ys[i]
		}
	case Log:
		xs := x[off : off+len(dy)]
		for i, g := range dy {
			dx[i] = g / xs[i]
		}
	case Sqrt:
		ys := y[off : off+len(dy)]
		for i, g := range dy {
			dx[i] = g / (2 * ys[i])
		}
	case Neg:
		for i, g := range dy {
			dx[i] = -g
		}
	case Abs:
		xs := x[off : off+len(dy)]
		for i, g := range dy {
			switch {
			case xs[i] > 0:
				dx[i] = g
			case xs[i] < 0:
				dx[i] = -g
			default:
				dx[i] = 0
			}
		}
	case Reciprocal:
		ys := y[off : off+len(dy)]
		for i, g := range dy {
			dx[i] = -g * ys[i] * ys[i]
		}
	case Identity:
		copy(dx, dy)
	default:
		panic(fmt.Sprintf("kernels: unknown unary op %d", op))
	}
}

// Clip computes y = min(max(x, lo), hi) (ONNX Clip; pass ±Inf for a missing
// bound; when lo > hi every value becomes hi, as the ONNX spec states).
func Clip(x []float32, lo, hi float32, y []float32) {
	checkLen("y", y, len(x))
	parallelFor(len(x), elementwiseGrain, func(a, b int) {
		ys := y[a:b]
		for i, v := range x[a:b] {
			if v < lo {
				v = lo
			}
			if v > hi {
				v = hi
			}
			ys[i] = v
		}
	})
}

// ClipBackward computes dx = dy where lo ≤ x ≤ hi and 0 elsewhere (the
// bounds are inclusive, as in PyTorch's clamp).
func ClipBackward(x []float32, lo, hi float32, dy, dx []float32) {
	checkLen("x", x, len(dy))
	checkLen("dx", dx, len(dy))
	parallelFor(len(dy), elementwiseGrain, func(a, b int) {
		xs, dxs := x[a:b], dx[a:b]
		for i, g := range dy[a:b] {
			if xs[i] >= lo && xs[i] <= hi {
				dxs[i] = g
			} else {
				dxs[i] = 0
			}
		}
	})
}

// Axpy computes y += alpha·x, for accumulating gradients of tensors with
// several consumers.
func Axpy(alpha float32, x, y []float32) {
	checkLen("y", y, len(x))
	parallelFor(len(x), elementwiseGrain, func(lo, hi int) {
		ys := y[lo:hi]
		for i, v := range x[lo:hi] {
			ys[i] += alpha * v
		}
	})
}
