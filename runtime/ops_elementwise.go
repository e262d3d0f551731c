package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Elementwise operators of older and Caffe2-era exports and of the ONNX
// backend tests: PRelu (with a trainable slope), Selu, Celu, Sign, Shrink,
// Softsign, ThresholdedRelu, Mish, Floor, Ceil, Round, Sin, Cos, and the
// variadic Sum, Mean, Max, Min.

func init() {
	opTable["PRelu"] = buildPRelu
	opTable["Selu"] = buildActivation(UnarySelu, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "alpha", 1.67326319217681884765625), Gamma: attrF(n, "gamma", 1.05070102214813232421875)}
	})
	opTable["Celu"] = buildActivation(UnaryCelu, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "alpha", 1)}
	})
	opTable["Sign"] = buildActivation(UnarySign, nil)
	opTable["Shrink"] = buildActivation(UnaryShrink, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "lambd", 0.5), Beta: attrF(n, "bias", 0)}
	})
	opTable["Softsign"] = buildActivation(UnarySoftsign, nil)
	opTable["ThresholdedRelu"] = buildActivation(UnaryThresholdedRelu, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "alpha", 1)}
	})
	opTable["Mish"] = buildActivation(UnaryMish, nil)
	// Piecewise-constant maps: gradient zero almost everywhere.
	opTable["Floor"] = buildActivation(UnaryFloor, nil)
	opTable["Ceil"] = buildActivation(UnaryCeil, nil)
	opTable["Round"] = buildActivation(UnaryRound, nil)
	opTable["Sin"] = buildActivation(UnarySin, nil)
	opTable["Cos"] = buildActivation(UnaryCos, nil)
	opTable["Sum"] = buildVariadic("Sum")
	opTable["Mean"] = buildVariadic("Mean")
	opTable["Max"] = buildVariadic("Max")
	opTable["Min"] = buildVariadic("Min")
}

// broadcastMap returns, for every element of a tensor of shape out, the
// element of a tensor of shape in (numpy-broadcast onto out) it reads; nil
// when the shapes are equal.
func broadcastMap(in, out []int) []int32 {
	if sameInts(in, out) {
		return nil
	}
	st := strides(in)
	off := len(out) - len(in)
	idx := make([]int32, numel(out))
	forCoords(out, func(i int, c []int) {
		j := 0
		for k := off; k < len(out); k++ {
			if in[k-off] != 1 {
				j += c[k] * st[k-off]
			}
		}
		idx[i] = int32(j)
	})
	return idx
}

// buildVariadic compiles Sum, Mean, Max and Min of one or more inputs with
// numpy broadcasting. Max and Min send the gradient of each element to the
// first input that attains it (PyTorch splits ties; ties have measure zero
// on real data).
func buildVariadic(op string) builder {
	return func(p *Plan, nd *node) error {
		if len(nd.in) == 0 {
			return fmt.Errorf("%s needs at least one input", op)
		}
		y := nd.out[0]
		xs := make([]*tensor, len(nd.in))
		maps := make([][]int32, len(nd.in))
		for i := range nd.in {
			x, err := floatIn(nd, i)
			if err != nil {
				return err
			}
			xs[i] = x
			if len(x.shape) > len(y.shape) {
				return fmt.Errorf("input %d %v has a higher rank than the output %v", i, x.shape, y.shape)
			}
			if op == "Max" || op == "Min" {
				maps[i] = broadcastMap(x.shape, y.shape)
			}
		}
		if op == "Sum" || op == "Mean" {
			scale := float32(1)
			if op == "Mean" {
				scale = 1 / float32(len(xs))
			}
			// The vectorized broadcasting Binary: x₀ + x₁, then + xᵢ in
			// place (each output element reads only its own position).
			nd.fwd = func() {
				if len(xs) == 1 {
					p.ops.Expand(xs[0].data, xs[0].shape, y.data, y.shape)
				} else {
					p.ops.Binary(BinaryAdd, xs[0].data, xs[0].shape, xs[1].data, xs[1].shape, y.data, y.shape)
				}
				for _, x := range xs[min(2, len(xs)):] {
					p.ops.Binary(BinaryAdd, y.data, y.shape, x.data, x.shape, y.data, y.shape)
				}
				if scale != 1 {
					p.ops.Unary(UnaryScale, UnaryParams{Alpha: scale}, y.data, y.data)
				}
			}
			nd.bwd = func() {
				for i, x := range xs {
					dx := nd.dIn[i]
					if dx == nil {
						continue
					}
					// A copy where the shapes agree.
					p.ops.ReduceToShape(y.grad, y.shape, dx, x.shape)
					if scale != 1 {
						p.ops.Unary(UnaryScale, UnaryParams{Alpha: scale}, dx, dx)
					}
				}
			}
			return nil
		}
		// Max and Min: the operand lists are filled at each call (the
		// tensors' slices and the gradients present) into lists made here.
		isMin := op == "Min"
		vals, grads := make([][]float32, len(xs)), make([][]float32, len(xs))
		for i := range nd.saveIn {
			nd.saveIn[i] = true
		}
		nd.fwd = func() {
			for i, x := range xs {
				vals[i] = x.data
			}
			p.ops.MaxMin(isMin, vals, maps, y.data)
		}
		nd.bwd = func() {
			for i, x := range xs {
				vals[i], grads[i] = x.data, nd.dIn[i]
			}
			p.ops.MaxMinBackward(isMin, vals, maps, y.grad, grads)
		}
		return nil
	}
}

// buildPRelu compiles y = x for x > 0 and slope·x otherwise, the slope
// broadcast onto x (numpy rules from opset 7; opset 6 and earlier also
// take a per-channel slope of shape (C) against (N, C, …)). The slope is
// usually a trainable parameter: its gradient is Σ dy·x over x ≤ 0,
// reduced onto its shape.
func buildPRelu(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	s, err := floatIn(nd, 1)
	if err != nil {
		return err
	}
	sShape, err := preluSlopeShape(nd, x.shape, s.shape)
	if err != nil {
		return err
	}
	y := nd.out[0]
	sm := broadcastMap(sShape, x.shape)
	nd.saveIn[0], nd.saveIn[1] = true, true
	if sm != nil {
		p.needWS(x.n)
	}
	nd.fwd = func() { p.ops.PRelu(x.data, s.data, sm, y.data) }
	nd.bwd = func() {
		ds := nd.dIn[1]
		t := ds // the slope's gradient before the reduction onto its shape
		if ds != nil && sm != nil {
			t = p.ws[:x.n]
		}
		p.ops.PReluBackward(x.data, s.data, sm, y.grad, nd.dIn[0], t)
		if ds != nil && sm != nil {
			p.ops.ReduceToShape(t, x.shape, ds, sShape)
		}
	}
	return nil
}

// preluSlopeShape is graph.PReluSlopeShape on the runtime's shapes.
func preluSlopeShape(nd *node, xs, ss []int) ([]int, error) {
	sh, err := graph.PReluSlopeShape(nd.g.Opset, to64(xs), to64(ss))
	if err != nil {
		return nil, err
	}
	return toInt(sh), nil
}
