package graph

import (
	"errors"
	"fmt"
	"math"
)

// expandAttention writes Attention-23/24/25 as the pattern its definition
// draws, for the inputs vision models give it:
//
//	Q4, K4, V4 = Q, K, V                       (B, heads, S, head_size)
//	             or Transpose(Reshape(X, [0, 0, heads, -1]), [0, 2, 1, 3]) for 3-D X
//	S = MatMul(Q4·√scale, Transpose(K4·√scale, [0, 1, 3, 2]))
//	S = softcap·Tanh(S / softcap)              (softcap > 0)
//	S = S + bias                               (is_causal, attn_mask)
//	Y = MatMul(Softmax(S, -1), V4)             (back to (B, S, heads·v_head_size) for 3-D)
//
// scale defaults to 1/√head_size: a constant where head_size is known at
// load, else Pow(Cast(Shape(Q4)[-1]), -1/4), which shape inference folds.
//
// The bias: is_causal adds -inf above the diagonal (query i sees keys
// j ≤ i), built from Shape, Range, Greater and Where on the sequence
// lengths so that shape inference folds it into a constant (up to the
// fold bound, 2^22 elements; beyond it the plan refuses the unfolded
// Greater); it never masks a whole row. A bool attn_mask becomes
// Where(mask, 0, -inf), a float one is added as it is. With a mask, a row
// that it masks entirely gives zeros, as the spec's errata asks, not NaN:
// the bias is clamped to the lowest finite value (Max), which keeps the
// softmax finite, and the output row is multiplied by
// keep = Min(Max(rowmax(bias) + MAX, 0), 1), which is 0 exactly for a row
// whose largest bias is -inf or the lowest finite value -MAX and 1 for any
// other. That guard reads the bias alone where the mask is made of
// constants (it folds away); where the mask is computed from parameters
// (a relative position bias passed as attn_mask) or from the input, it
// reads the scores with the bias added, keep = Min(Max(rowmax(S) + MAX/2,
// 0), 1) and S clamped, so that the mask meets the batch at its Add and
// its parameters train (a guard on the bias alone would put a ReduceMax
// between them and the batch, and the planner would freeze them). A row of
// float biases at -MAX (PyTorch's finfo.min, which some
// exporters write for padding) counts as masked, as onnxruntime 1.30
// counts it; plain arithmetic would average the values uniformly there.
//
// Refused, with the reason: a scale that is not positive (the definition
// takes its square root), GQA and MQA where the head counts of Q and K/V
// are known at load and differ (where they are not, a K/V of one head
// broadcasts over Q's in the MatMuls, which is what MQA computes, and any
// other mismatch fails shape inference at the first MatMul, naming it),
// past_key, past_value and nonpad_kv_seqlen (a key/value cache), reading
// present_key, present_value or qk_matmul_output, a mask whose last axis
// is neither the number of keys nor 1 (Attention-24 pads a shorter one
// with -inf), a mask whose type is not known at load, and the sliding
// window of Attention-25. softmax_precision is ignored: the softmax runs
// in the inputs' type.
func expandAttention(b *expansion) error {
	n := b.n
	q, k, v, y := n.Input(0), n.Input(1), n.Input(2), outputOf(n, 0)
	if q == nil || k == nil || v == nil {
		return errors.New("inputs Q, K and V are required")
	}
	if y == nil {
		return errors.New("output Y is required")
	}
	if len(n.Inputs) > 7 {
		return fmt.Errorf("%d inputs, Attention takes at most 7", len(n.Inputs))
	}
	optional := []string{4: "past_key", 5: "past_value", 6: "nonpad_kv_seqlen"}
	for i := 4; i < len(n.Inputs); i++ {
		if in := n.Inputs[i]; in != nil {
			return fmt.Errorf("input %s (%q) is not supported: the expansion keeps no key/value cache", optional[i], in.Name)
		}
	}
	if len(n.Outputs) > 4 {
		return fmt.Errorf("%d outputs, Attention has at most 4", len(n.Outputs))
	}
	outputs := []string{1: "present_key", 2: "present_value", 3: "qk_matmul_output"}
	for i := 1; i < len(n.Outputs); i++ {
		if o := n.Outputs[i]; o != nil && (len(o.Consumers) > 0 || b.g.isOutput(o)) {
			return fmt.Errorf("output %s (%q) is read: only output Y is supported", outputs[i], o.Name)
		}
	}
	if n.Opset >= 25 {
		for _, a := range []string{"left_window_size", "right_window_size"} {
			w, err := n.Int(a)
			if err != nil {
				return err
			}
			if w != -1 {
				return fmt.Errorf("attribute %s = %d: sliding-window attention is not supported (only -1, no window)", a, w)
			}
		}
	}
	causal, err := n.Int("is_causal")
	if err != nil {
		return err
	}
	if causal != 0 && causal != 1 {
		return fmt.Errorf("attribute is_causal = %d, want 0 or 1", causal)
	}
	softcap, err := n.Float("softcap")
	if err != nil {
		return err
	}
	if softcap < 0 || math.IsNaN(float64(softcap)) {
		return fmt.Errorf("attribute softcap = %g, want 0 (none) or positive", softcap)
	}
	dt, err := constType(q)
	if err != nil {
		return err
	}

	threeD := n.Has("q_num_heads") || n.Has("kv_num_heads")
	q4, k4, v4 := q, k, v
	var hq int64
	if threeD {
		hq = n.IntOr("q_num_heads", 0)
		hkv := n.IntOr("kv_num_heads", 0)
		if hq <= 0 || hkv <= 0 {
			return fmt.Errorf("3-D inputs need q_num_heads and kv_num_heads, both positive (got %d and %d)", hq, hkv)
		}
		if hq != hkv {
			return fmt.Errorf("q_num_heads %d ≠ kv_num_heads %d: grouped- and multi-query attention (GQA/MQA) are not supported", hq, hkv)
		}
		for _, x := range []*Value{q, k, v} {
			if x.Shape != nil && len(x.Shape) != 3 {
				return fmt.Errorf("with q_num_heads and kv_num_heads, Q, K and V are 3-D; %q has shape %v", x.Name, x.Shape)
			}
		}
		// (B, S, heads·size) → (B, heads, S, size): Reshape's 0 copies B
		// and S, so nothing here needs their values.
		split := func(x *Value, h int64) *Value {
			return b.op("Transpose", attrs(intsAttr("perm", 0, 2, 1, 3)), b.op("Reshape", nil, x, b.ints(0, 0, h, -1)))
		}
		q4, k4, v4 = split(q, hq), split(k, hkv), split(v, hkv)
	} else {
		for _, x := range []*Value{q, k, v} {
			if x.Shape != nil && len(x.Shape) != 4 {
				return fmt.Errorf("Q, K and V are 4-D (batch, heads, sequence, head_size), or 3-D with q_num_heads and kv_num_heads; %q has shape %v", x.Name, x.Shape)
			}
		}
		if h, hk, hv := dimAt(q, 1), dimAt(k, 1), dimAt(v, 1); h > 0 && (hk > 0 && hk != h || hv > 0 && hv != h) {
			return fmt.Errorf("Q has %d heads, K %d and V %d: grouped- and multi-query attention (GQA/MQA) are not supported", h, hk, hv)
		}
	}

	// √scale on each of Q and K, as the definition draws it: the product
	// then stays in range where Q·Kᵀ alone would overflow.
	var sq, sk *Value
	switch d, err := headSize(q, threeD, hq); {
	case err != nil:
		return err
	case n.Has("scale"):
		s, err := n.Float("scale")
		if err != nil {
			return err
		}
		if !(s > 0) || math.IsInf(float64(s), 1) {
			return fmt.Errorf("attribute scale = %g: want a positive finite value (the definition scales Q and K by √scale; onnxruntime refuses others too)", s)
		}
		sq = b.scalar(dt, math.Sqrt(float64(s)))
		sk = sq
	case d > 0:
		sq = b.scalar(dt, math.Sqrt(1/math.Sqrt(float64(d))))
		sk = sq
	default:
		size := b.op("Cast", attrs(intAttr("to", int64(dt))), b.op("Shape", attrs(intAttr("start", -1)), q4))
		sq = b.op("Pow", nil, size, b.scalar(dt, -0.25))
		sk = sq
	}
	kt := b.op("Transpose", attrs(intsAttr("perm", 0, 1, 3, 2)), b.op("Mul", nil, k4, sk))
	s := b.op("MatMul", nil, b.op("Mul", nil, q4, sq), kt)
	if softcap > 0 {
		c := b.scalar(dt, float64(softcap))
		s = b.op("Mul", nil, b.op("Tanh", nil, b.op("Div", nil, s, c)), c)
	}

	var bias, keep *Value
	guardScores := false
	big := floatMax(dt)
	if causal == 1 {
		bias = b.causalBias(q4, k4, dt)
	}
	if mask := n.Input(3); mask != nil {
		mb, err := b.maskBias(mask, k, threeD, dt)
		if err != nil {
			return err
		}
		if bias == nil {
			bias = mb
		} else {
			bias = b.op("Add", nil, bias, mb)
		}
		if constantDerived(mask) {
			// The guard on the bias alone: shape inference folds it
			// with the mask into constants.
			rowMax := b.op("ReduceMax", nil, bias, b.ints(-1))
			shifted := b.op("Add", nil, rowMax, b.scalar(dt, big))
			keep = b.op("Min", nil, b.op("Max", nil, shifted, b.scalar(dt, 0)), b.scalar(dt, 1))
			bias = b.op("Max", nil, bias, b.scalar(dt, -big))
		} else {
			guardScores = true
		}
	}
	if bias != nil {
		s = b.op("Add", nil, s, bias)
	}
	if guardScores {
		// A mask computed from parameters (Swin's and BEiT's relative
		// position biases, passed to scaled_dot_product_attention as
		// attn_mask) or from the input: the guard reads the scores, the
		// mask added, so that the mask meets the batch at that Add and
		// its parameters train like any other added bias. A row is
		// disallowed when its largest score is below -big/2 (-inf, or the
		// lowest finite value plus scores of any sane size); its
		// -inf clamped to -big keeps Softmax finite.
		rowMax := b.op("ReduceMax", nil, s, b.ints(-1))
		shifted := b.op("Add", nil, rowMax, b.scalar(dt, big/2))
		keep = b.op("Min", nil, b.op("Max", nil, shifted, b.scalar(dt, 0)), b.scalar(dt, 1))
		s = b.op("Max", nil, s, b.scalar(dt, -big))
	}
	out := b.op("MatMul", nil, b.op("Softmax", attrs(intAttr("axis", -1)), s), v4)
	if keep != nil {
		out = b.op("Mul", nil, out, keep)
	}
	if threeD {
		out = b.op("Reshape", nil, b.op("Transpose", attrs(intsAttr("perm", 0, 2, 1, 3)), out), b.ints(0, 0, -1))
	}
	// The unread outputs go with the node.
	for _, o := range n.Outputs[1:] {
		if o != nil {
			delete(b.g.Values, o.Name)
		}
	}
	b.finish(out, y)
	return nil
}

// headSize returns Q's head size where the loader knows it, else 0.
func headSize(q *Value, threeD bool, heads int64) (int64, error) {
	if !threeD {
		return max(dimAt(q, 3), 0), nil
	}
	hidden := dimAt(q, 2)
	if hidden <= 0 {
		return 0, nil
	}
	if hidden%heads != 0 {
		return 0, fmt.Errorf("Q's hidden size %d is not a multiple of q_num_heads %d", hidden, heads)
	}
	return hidden / heads, nil
}

// dimAt returns dimension i of x's load-time shape, or -1 if unknown.
func dimAt(x *Value, i int) int64 {
	if i >= 0 && i < len(x.Shape) {
		return x.Shape[i].Size
	}
	return -1
}

// causalBias returns the (Sq, Skv) bias that is -inf where key j > query i,
// computed from the sequence lengths of Q4 and K4 by operators that shape
// inference folds into one constant.
func (b *expansion) causalBias(q4, k4 *Value, dt DType) *Value {
	length := func(x *Value) *Value {
		return b.op("Squeeze", nil, b.op("Shape", attrs(intAttr("start", 2), intAttr("end", 3)), x), b.ints(0))
	}
	rows := b.op("Range", nil, b.intScalar(0), length(q4), b.intScalar(1))
	cols := b.op("Range", nil, b.intScalar(0), length(k4), b.intScalar(1))
	future := b.op("Greater", nil, cols, b.op("Unsqueeze", nil, rows, b.ints(1)))
	return b.op("Where", nil, future, b.scalar(dt, math.Inf(-1)), b.scalar(dt, 0))
}

// maskBias returns attn_mask as a bias to add to the scores: a bool mask
// (true: attend) as Where(mask, 0, -inf), a float mask as it is.
func (b *expansion) maskBias(mask, k *Value, threeD bool, dt DType) (*Value, error) {
	last := dimAt(mask, len(mask.Shape)-1)
	keys := dimAt(k, 2)
	if threeD {
		keys = dimAt(k, 1)
	}
	if last > 1 && keys > 0 && last != keys {
		return nil, fmt.Errorf("attn_mask %q has %d positions on its last axis for %d keys: padding a shorter mask with -inf is not supported", mask.Name, last, keys)
	}
	switch mdt := loadDType(mask); mdt {
	case Bool:
		return b.op("Where", nil, mask, b.scalar(dt, 0), b.scalar(dt, math.Inf(-1))), nil
	case Float32, Float64:
		if mdt != dt {
			return nil, fmt.Errorf("attn_mask %q is %v, Q is %v: a float mask has the type of Q", mask.Name, mdt, dt)
		}
		return mask, nil
	case Undefined:
		return nil, fmt.Errorf("the element type of attn_mask %q is not known at load (a bool and a float mask mean different things): declare it in the model's value_info", mask.Name)
	default:
		return nil, fmt.Errorf("attn_mask %q is %v: only bool and float masks are supported", mask.Name, mdt)
	}
}

// isOutput reports whether v is an output of the graph.
func (g *Graph) isOutput(v *Value) bool {
	for _, o := range g.Outputs {
		if o == v {
			return true
		}
	}
	return false
}

// constantDerived reports whether v is computed from constants alone
// (initializers the loader does not take for parameters, Constant nodes),
// so that shape inference folds it: not from a graph input or a float
// initializer a run may train. Unknown producers count as not constant.
func constantDerived(v *Value) bool {
	seen := map[*Value]bool{}
	stack := []*Value{v}
	for len(stack) > 0 && len(seen) < 1<<12 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == nil || seen[x] {
			continue
		}
		seen[x] = true
		switch {
		case x.Initializer:
			if x.IsParam() {
				return false
			}
		case x.Producer == nil:
			if x.Const == nil {
				return false // a graph input
			}
		default:
			stack = append(stack, x.Producer.Inputs...)
		}
	}
	return len(stack) == 0
}
