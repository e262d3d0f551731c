package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// A weight often reaches its Conv, Gemm or MatMul through layout-only
// operators (rewrite.Step): a Transpose when the exporter does not fold
// constants, a Reshape or Squeeze of a weight stored in another shape, a
// Slice or Split of a packed tensor such as MultiheadAttention's
// in_proj_weight. Every element of the consumer's operand is then a copy
// of one parameter element (or of a constant, or of another parameter),
// so the parameter's per-sample gradient is the operand's per-sample
// gradient scatter-added through an index map, built once.

// pathDigit is the number of distinct codes per pass of buildPathMap: the
// codes 1…pathDigit are exact in every floating-point type a Cast on the
// path may pass through (float16 holds integers up to 2048 exactly).
const pathDigit = 2048

// buildPathMap returns, for the operand value operand of cg (computed from
// parameters and constants only), the index map of parameter param:
// idx[j] is the parameter element that operand element j copies, or -1
// where element j comes from a constant or another parameter. It runs the
// operand's subgraph forward with the parameter's elements replaced by
// codes (base-pathDigit digits of their index, positive in one pass and
// negated in another, so that constants, which do not change sign, are
// told apart), and fails if an element is not an exact copy, i.e. if an
// operator on the path is not layout-only.
func buildPathMap(cg *graph.Graph, operand, param string, others []string) ([]int32, error) {
	sub, err := cg.Extract(operand)
	if err != nil {
		return nil, err
	}
	names := append([]string{param}, others...)
	for _, name := range names {
		v := sub.Values[name]
		if v == nil || v.Const == nil {
			return nil, fmt.Errorf("parameter %q is not on the path of %q", name, operand)
		}
		if v.Const.DType != graph.Float32 {
			return nil, fmt.Errorf("parameter %q is %v, not float32", name, v.Const.DType)
		}
		// A private copy: the subgraph shares its tensors with cg.
		v.Const = &graph.Tensor{DType: graph.Float32, Shape: append([]int64(nil), v.Const.Shape...), F32: make([]float32, v.Const.Len())}
	}
	plan, err := runtime.Compile(sub, &runtime.Options{Trainable: names})
	if err != nil {
		return nil, err
	}
	data, _ := plan.Param(param)
	if data == nil {
		return nil, fmt.Errorf("parameter %q is not in the compiled path", param)
	}
	for _, o := range others {
		d, _ := plan.Param(o)
		clear(d)
	}
	n := len(data)
	var idx []int32
	for base := 1; base == 1 || base < n; base *= pathDigit {
		var pos []float32
		for _, sign := range []float32{1, -1} {
			for k := range data {
				data[k] = sign * float32((k/base)%pathDigit+1)
			}
			if err := plan.Forward(); err != nil {
				return nil, err
			}
			out, _ := plan.Output(0)
			if sign > 0 {
				pos = append(pos, out...)
				if idx == nil {
					idx = make([]int32, len(out))
					for j := range idx {
						idx[j] = -1
					}
				}
				continue
			}
			for j, v := range out {
				if pos[j] == v {
					continue // a constant: unchanged by the sign
				}
				d := pos[j] - 1
				if pos[j] != -v || d < 0 || d >= pathDigit || d != float32(int(d)) {
					return nil, fmt.Errorf("element %d of %q is not a copy of one element of %q: the path is not layout-only", j, operand, param)
				}
				if base == 1 {
					idx[j] = 0
				}
				idx[j] += int32(int(d) * base)
			}
		}
	}
	for j, k := range idx {
		if int(k) >= n {
			return nil, fmt.Errorf("element %d of %q maps to element %d of %q (of %d)", j, operand, k, param, n)
		}
	}
	return idx, nil
}
