package graph

import (
	"errors"
	"fmt"
	"math"
)

// Elementwise operators with more than the numpy rules: variadic Sum,
// Mean, Max, Min; PRelu's one-way broadcasting and its legacy per-channel
// slope; the broadcast attribute of opsets 1–6.

func init() {
	for _, op := range []string{"Sum", "Mean", "Max", "Min"} {
		rules[op] = rule{infer: broadcastInfer(false), eval: evalVariadic}
	}
	rules["PRelu"] = rule{infer: inferPRelu}
	rules["LRN"] = rule{infer: sameAsInput}
	rules["ReduceLogSum"] = rule{infer: inferReduce}
}

// legacyBroadcast checks the broadcast and axis attributes that binary
// operators carry before opset 7. With broadcast=1, B's shape lines up
// with a run of A's axes starting at axis; numpy broadcasting agrees when
// that run ends at A's last axis (the default), which is the only form
// accepted.
func legacyBroadcast(n *Node) error {
	if n.Opset == 0 || n.Opset >= 7 || n.IntOr("broadcast", 0) == 0 || !n.Has("axis") {
		return nil
	}
	a, b := n.Input(0), n.Input(1)
	if a == nil || b == nil || a.Shape == nil || b.Shape == nil {
		return nil
	}
	ax := n.IntOr("axis", 0)
	if ax < 0 {
		ax += int64(len(a.Shape))
	}
	if int(ax)+len(b.Shape) != len(a.Shape) {
		return fmt.Errorf("opset %d broadcasting of B %v onto A %v from axis %d is not supported (only B aligned with A's last axes, as numpy broadcasts)", n.Opset, b.Shape, a.Shape, n.IntOr("axis", 0))
	}
	return nil
}

// PReluSlopeShape returns the shape a PRelu slope broadcasts onto X with.
// Opset 7 on, the slope broadcasts one way (numpy rules, the output has X's
// shape); opset 6 and earlier also take a per-channel slope of shape (C)
// against X (N, C, …), returned as (C, 1, …).
func PReluSlopeShape(opset int64, x, slope []int64) ([]int64, error) {
	if opset > 0 && opset <= 6 && len(slope) == 1 && len(x) >= 2 && slope[0] == x[1] && slope[0] != 1 {
		out := []int64{slope[0]}
		for range x[2:] {
			out = append(out, 1)
		}
		return out, nil
	}
	if len(slope) > len(x) {
		return nil, fmt.Errorf("slope %v has a higher rank than X %v", slope, x)
	}
	off := len(x) - len(slope)
	for i, d := range slope {
		if d >= 0 && x[off+i] >= 0 && d != 1 && d != x[off+i] {
			hint := ""
			if len(slope) == 1 && len(x) >= 2 && d == x[1] {
				hint = "; a per-channel slope of shape (C) is the opset ≤ 6 form"
			}
			return nil, fmt.Errorf("slope %v does not broadcast to X %v at opset %d%s", slope, x, opset, hint)
		}
	}
	return slope, nil
}

func inferPRelu(g *Graph, n *Node) error {
	x, s := n.Input(0), n.Input(1)
	if x == nil || s == nil {
		return errors.New("PRelu needs X and slope")
	}
	if x.Shape != nil && s.Shape != nil {
		if _, err := PReluSlopeShape(n.Opset, x.Shape.Ints(), s.Shape.Ints()); err != nil {
			return err
		}
	}
	setOut(n, 0, x.DType, x.Shape)
	return nil
}

// evalVariadic folds Sum, Mean, Max and Min of constants.
func evalVariadic(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	shapes := make([]Shape, len(in))
	for i, t := range in {
		if t == nil {
			return nil, fmt.Errorf("input %d is missing", i)
		}
		if t.F32 == nil && t.F64 == nil && t.I64 == nil {
			return nil, fmt.Errorf("cannot fold %s on %v", n.OpType, t.DType)
		}
		shapes[i] = StaticShape(t.Shape...)
	}
	sh, err := broadcastShapes(shapes...)
	if err != nil {
		return nil, err
	}
	out := sh.Ints()
	vals := make([]float64, numel(out))
	for i, t := range in {
		idx := broadcastIndex(out, t.Shape)
		for j, k := range idx {
			v := t.At(k)
			switch {
			case i == 0:
				vals[j] = v
			case n.OpType == "Max":
				vals[j] = math.Max(vals[j], v)
			case n.OpType == "Min":
				vals[j] = math.Min(vals[j], v)
			default:
				vals[j] += v
			}
		}
	}
	if n.OpType == "Mean" {
		for j := range vals {
			vals[j] /= float64(len(in))
		}
	}
	o := newTensor(in[0].DType, out)
	return []*Tensor{o}, o.setFloat64s(vals)
}
