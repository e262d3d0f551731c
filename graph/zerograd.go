package graph

import "slices"

// markMaskedOut sets NoGradient on the float initializers onlyMasks
// cannot clear by structure alone: the data of a mask that also reaches
// the model as values, each element masked out again by a condition
// computed from the same data. Swin's shifted-window mask in PyTorch's
// dynamo export is the case: fill values scattered into zeros (sub =
// m[i] − m[j]), then masked_fill twice —
//
//	Where(Equal(sub, 0), 0, Where(Not(Equal(sub, 0)), −100, sub))
//
// — so sub reaches the attention logits through the inner Where's data
// slot, but every element the inner Where takes from sub the outer one
// replaces by 0: the gradient reaching the fill values is zero for every
// input, and training them as parameters would only add noise to the
// mask (and leave its comparisons to run time, which the runtime refuses).
//
// The proof is by evaluation, not by pattern: with the candidates held
// constant (the conclusion the proof must then agree with) the graph's
// constant part is folded on a clone, and for each candidate a mask of
// the elements it reaches (a flag tensor, 1 where the element depends on
// it) is carried forward through the nodes that do not read the input —
// data movement by the node's own fold on the flags, elementwise
// arithmetic as the union of its operands' flags, Where by its folded
// condition (its other operand may be a parameter). A candidate is no
// parameter when no flagged element reaches a value computed from the
// input, through a slot that takes a gradient, or a graph output.
// Anything else (an operator the flags do not cover, indices, shapes or
// a condition that did not fold) keeps it a parameter. A candidate whose
// proof leaned on another candidate's value (a condition it reaches)
// holds only while that one is no parameter either: the analysis repeats
// without the ones found to be parameters until it agrees with itself.
//
// The work is bounded, so that no model can make loading it expensive: at
// most maskedOutRounds rounds (each a clone and an inference, what loading
// costs anyway), and maskedOutWork flag elements over all candidates; past
// either, what is not proven stays a parameter.
func markMaskedOut(g *Graph) {
	cands := maskedOutCandidates(g)
	work := maskedOutWork
	for round := 0; len(cands) > 0 && round < maskedOutRounds; round++ {
		c := g.Clone()
		cv := make([]*Value, len(cands))
		for i, v := range cands {
			cv[i] = c.Values[v.Name]
			cv[i].NoGradient = true
		}
		nodes := append([]*Node(nil), c.Nodes...)
		outs := map[*Value]bool{}
		for _, o := range c.Outputs {
			outs[o] = true
		}
		runtime := c.InputDerived()
		// Inference and folding take a validated graph (every node's
		// arity): the loader validates later, after this.
		if err := c.Validate(); err != nil {
			return
		}
		if err := c.InferShapes(unitShapes(c)); err != nil {
			return // nothing proven: every candidate stays a parameter
		}
		var dead []*Value
		for i, v := range cv {
			if !gradientReaches(c, nodes, outs, runtime, v, &work) {
				dead = append(dead, cands[i])
			}
		}
		if len(dead) == len(cands) {
			for _, v := range dead {
				v.NoGradient = true
			}
			return
		}
		cands = dead
	}
}

// The bounds of markMaskedOut's work: its rounds, and the flag elements
// it may compute in all (a Swin-T's masks take some 10⁵). Variables for
// the tests.
var (
	maskedOutRounds = 3
	maskedOutWork   = 1 << 26
)

// maskedOutCandidates returns the float initializers still counted as
// parameters that reach a comparison within the graph's constant part
// (the values computed from initializers and shapes alone): the only
// ones markMaskedOut can prove no parameter, found by structure so that
// a model without such a comparison costs nothing more to load.
func maskedOutCandidates(g *Graph) []*Value {
	konst := map[*Value]bool{}
	for _, v := range g.Values {
		if v.Const != nil || v.Initializer {
			konst[v] = true
		}
	}
	for _, n := range g.Nodes {
		all := n.OpType == "Shape" || n.OpType == "Size"
		if !all {
			all = true
			for _, in := range n.Inputs {
				if in != nil && !konst[in] {
					all = false
					break
				}
			}
		}
		if all {
			for _, o := range n.Outputs {
				if o != nil {
					konst[o] = true
				}
			}
		}
	}
	// toCmp: the constant-part values a comparison within that part reads,
	// or that reach one; one pass against the nodes' (topological) order.
	toCmp := map[*Value]bool{}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if len(n.Outputs) == 0 || n.Outputs[0] == nil || !konst[n.Outputs[0]] {
			continue
		}
		reach := n.Domain == "" && noGradOps[n.OpType]
		for _, o := range n.Outputs {
			reach = reach || o != nil && toCmp[o]
		}
		if reach {
			for _, in := range n.Inputs {
				if in != nil {
					toCmp[in] = true
				}
			}
		}
	}
	var out []*Value
	for _, v := range g.Initializers {
		if v.IsParam() && v.Const != nil && toCmp[v] {
			out = append(out, v)
		}
	}
	return out
}

// flagMoves are the folding operators that only move, copy or select
// elements: a flag tensor goes through the node's own fold. flagMix are
// the elementwise ones whose output element depends on the elements its
// operands broadcast to it.
var (
	flagMoves = map[string]bool{
		"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true,
		"Transpose": true, "Slice": true, "Gather": true, "GatherND": true, "ScatterND": true,
		"Expand": true, "Tile": true, "Concat": true, "Where": true,
	}
	flagMix = map[string]bool{
		"Add": true, "Sub": true, "Mul": true, "Div": true, "Max": true, "Min": true, "Sum": true,
		"Neg": true, "Abs": true, "Relu": true, "Clip": true, "Cast": true, "CastLike": true,
	}
)

// unitShapes fixes the graph inputs' unknown dimensions at 1, so that
// inference runs through a dynamic-batch export; what it folds from those
// sizes is no proof of anything (inputDerived).
func unitShapes(g *Graph) map[string][]int64 {
	shapes := map[string][]int64{}
	for _, v := range g.Inputs {
		if v.Const != nil || v.Shape == nil || v.Shape.Static() {
			continue
		}
		dims := v.Shape.Ints()
		for i, d := range dims {
			if d <= 0 {
				dims[i] = 1
			}
		}
		shapes[v.Name] = dims
	}
	return shapes
}

// InputDerived returns the values g computes from its inputs, shapes and
// sizes included: whatever folds of them holds for one input shape only,
// and a node none of whose inputs is among them sees no sample.
func (g *Graph) InputDerived() map[*Value]bool {
	d := map[*Value]bool{}
	for _, v := range g.Inputs {
		if v.Const == nil {
			d[v] = true
		}
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if d[in] {
				for _, o := range n.Outputs {
					if o != nil {
						d[o] = true
					}
				}
				break
			}
		}
	}
	return d
}

// gradientReaches reports whether a gradient can reach v in c, a clone
// whose constant part InferShapes has folded with v held constant; nodes
// are c's nodes before the fold, in topological order, outs its outputs
// and runtime the values computed from its inputs (a node reading one is
// computed at run time, whatever the fold made of it for one shape). It
// charges the flag elements it computes to *work, and answers true (no
// proof) once that is spent.
func gradientReaches(c *Graph, nodes []*Node, outs, runtime map[*Value]bool, v *Value, work *int) bool {
	if v.Const == nil || v.Const.Len() > maxFoldElements || v.Const.Len() > *work {
		return true
	}
	*work -= v.Const.Len()
	flags := map[*Value]*Tensor{v: flagTensor(v.Const.Shape, 1)}
	for _, n := range nodes {
		carried := false
		for i, in := range n.Inputs {
			if f := flags[in]; f != nil && GradientFlows(n, i) && anyFlag(f) {
				carried = true
			}
		}
		if !carried {
			continue
		}
		if n.Domain != "" || len(n.Outputs) == 0 {
			return true
		}
		for _, o := range n.Outputs {
			if o != nil && runtime[o] {
				return true // a flagged element reaches a run-time value
			}
		}
		outFlags, ok := propagateFlags(c, n, flags)
		if !ok {
			return true
		}
		for _, f := range outFlags {
			if f != nil {
				if *work -= f.Len(); *work < 0 {
					return true
				}
			}
		}
		for i, o := range n.Outputs {
			if o != nil && i < len(outFlags) && outFlags[i] != nil && o.DType.IsFloat() {
				flags[o] = outFlags[i]
			}
		}
	}
	for o := range outs {
		if f := flags[o]; f != nil && anyFlag(f) {
			return true
		}
	}
	return false
}

// propagateFlags returns the flags of node n's outputs from its inputs'
// (flags; an input without them has none, a constant or not: a parameter
// beside a candidate in a Where's other slot, say); ok is false where the
// flags do not cover n, or where what moves the elements (indices, shapes,
// a condition) is not a constant.
func propagateFlags(c *Graph, n *Node, flags map[*Value]*Tensor) (outs []*Tensor, ok bool) {
	in := make([]*Tensor, len(n.Inputs))
	for i, x := range n.Inputs {
		switch {
		case x == nil:
		case !GradientFlows(n, i) || !x.DType.IsFloat():
			if x.Const == nil {
				return nil, false
			}
			in[i] = x.Const // indices, shapes, a condition: the node's own
		case flags[x] != nil:
			in[i] = flags[x]
		case x.Const != nil:
			in[i] = flagTensor(x.Const.Shape, 0)
		case x.Shape.Static() && x.Shape.NumElements() <= maxFoldElements:
			in[i] = flagTensor(x.Shape.Ints(), 0)
		default:
			return nil, false
		}
	}
	for _, o := range n.Outputs {
		if o != nil && (!o.Shape.Static() || o.Shape.NumElements() > maxFoldElements) {
			return nil, false // the node's own fold reads its output's shape; flags as large as a fold may be
		}
	}
	switch {
	case flagMoves[n.OpType]:
		if n.OpType == "Identity" {
			return in[:1], true
		}
		r, ok := rules[n.OpType]
		if !ok || r.eval == nil {
			return nil, false
		}
		out, err := r.eval(c, n, in)
		return out, err == nil
	case flagMix[n.OpType]:
		// Only the operands a gradient flows into count: Clip's bounds do not.
		var ops []*Tensor
		for i, t := range in {
			if t != nil && GradientFlows(n, i) {
				ops = append(ops, t)
			}
		}
		acc := ops[0]
		for _, t := range ops[1:] {
			out, err := evalBinary(c, &Node{OpType: "Max"}, []*Tensor{acc, t})
			if err != nil {
				return nil, false
			}
			acc = out[0]
		}
		if !slices.Equal(acc.Shape, n.Outputs[0].Shape.Ints()) {
			return nil, false
		}
		return []*Tensor{acc}, true
	}
	return nil, false
}

// flagTensor is a float32 tensor of shape with every element x.
func flagTensor(shape []int64, x float32) *Tensor {
	t := newTensor(Float32, shape)
	if x != 0 {
		for i := range t.F32 {
			t.F32[i] = x
		}
	}
	return t
}

func anyFlag(t *Tensor) bool {
	for _, x := range t.F32 {
		if x != 0 {
			return true
		}
	}
	return false
}
