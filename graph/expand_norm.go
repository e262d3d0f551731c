package graph

import (
	"errors"
	"fmt"
)

// expandSwish writes Swish-24, y = x·sigmoid(alpha·x), as
// Mul(x, Sigmoid(x)) when alpha is 1 (the SiLU every exporter means) and
// Mul(x, Sigmoid(Mul(x, alpha))) otherwise.
func expandSwish(b *expansion) error {
	n := b.n
	x, y := n.Input(0), outputOf(n, 0)
	if x == nil || y == nil {
		return errors.New("input X and output Y are required")
	}
	alpha, err := n.Float("alpha")
	if err != nil {
		return err
	}
	arg := x
	if alpha != 1 {
		dt, err := constType(x)
		if err != nil {
			return err
		}
		arg = b.op("Mul", nil, x, b.scalar(dt, float64(alpha)))
	}
	b.finish(b.op("Mul", nil, x, b.op("Sigmoid", nil, arg)), y)
	return nil
}

// expandRMSNorm writes RMSNormalization-23 as its definition:
//
//	Normalized = X / Sqrt(ReduceMean(X·X, axes = axis..rank-1) + epsilon)
//	Y = Mul(Normalized, scale)
//
// with stage one computed in stash_type: X is cast to it and Normalized
// back where X's type (known at load, else taken as float32) differs.
// scale stays the Mul's second operand, the form under which the DP engine
// takes a trainable scale's per-sample gradient (an elementwise
// parameter). The axes are [axis, …, -1] for a negative axis, which needs
// no rank; a non-negative one needs X's rank at load.
func expandRMSNorm(b *expansion) error {
	n := b.n
	x, scale, y := n.Input(0), n.Input(1), outputOf(n, 0)
	if x == nil || scale == nil || y == nil {
		return errors.New("inputs X and scale and output Y are required")
	}
	axis, err := n.Int("axis")
	if err != nil {
		return err
	}
	eps, err := n.Float("epsilon")
	if err != nil {
		return err
	}
	stash, err := n.Int("stash_type")
	if err != nil {
		return err
	}
	var axes []int64
	switch {
	case x.Shape != nil:
		r := int64(len(x.Shape))
		a := axis
		if a < 0 {
			a += r
		}
		if a < 0 || a >= r {
			return fmt.Errorf("axis %d is out of range for X of rank %d", axis, r)
		}
		for i := a; i < r; i++ {
			axes = append(axes, i)
		}
	case axis < 0:
		for i := axis; i < 0; i++ {
			axes = append(axes, i)
		}
	default:
		return fmt.Errorf("axis %d counts from the front and X's rank is not known at load: declare X's shape (value_info) or use a negative axis", axis)
	}
	sdt := DType(stash)
	if sdt != Float32 && sdt != Float64 {
		return fmt.Errorf("stash_type %d (%v) is not supported (float32 or float64)", stash, sdt)
	}
	xdt := loadDType(x)
	if xdt == Undefined {
		xdt = Float32
	}
	if !xdt.IsFloat() {
		return fmt.Errorf("input X %q is %v, want a floating-point type", x.Name, xdt)
	}
	xs := x
	if xdt != sdt {
		xs = b.op("Cast", attrs(intAttr("to", int64(sdt))), x)
	}
	mean := b.op("ReduceMean", nil, b.op("Mul", nil, xs, xs), b.ints(axes...))
	rms := b.op("Sqrt", nil, b.op("Add", nil, mean, b.scalar(sdt, float64(eps))))
	norm := b.op("Div", nil, xs, rms)
	if xdt != sdt {
		norm = b.op("Cast", attrs(intAttr("to", int64(xdt))), norm)
	}
	b.finish(b.op("Mul", nil, norm, scale), y)
	return nil
}

// outputOf returns output i of n, or nil.
func outputOf(n *Node, i int) *Value {
	if i < len(n.Outputs) {
		return n.Outputs[i]
	}
	return nil
}
