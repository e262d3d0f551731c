package graph

// noGradSlots lists, per operator, the input slots gradients never flow
// into: shapes, axes, indices, bounds, a condition.
var noGradSlots = map[string][]int{
	"Reshape": {1}, "Expand": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 2, 3},
	"Squeeze": {1}, "Unsqueeze": {1}, "Clip": {1, 2}, "BatchNormalization": {3, 4},
	"Gather": {1}, "ScatterND": {1}, "Where": {0}, "Dropout": {1, 2}, "ReduceMean": {1}, "ReduceSum": {1},
	"ReduceMax": {1}, "ReduceMin": {1}, "ReduceProd": {1}, "ReduceL1": {1}, "ReduceL2": {1},
	"ReduceSumSquare": {1}, "ReduceLogSum": {1}, "ReduceLogSumExp": {1},
	"Resize": {1, 2, 3}, "Upsample": {1},
}

// noGradOps are the operators no gradient flows through at all: their
// outputs are booleans, indices or shapes.
var noGradOps = map[string]bool{
	"Equal": true, "Less": true, "LessOrEqual": true, "Greater": true, "GreaterOrEqual": true,
	"Not": true, "And": true, "Or": true, "Xor": true, "IsNaN": true, "IsInf": true,
	"Shape": true, "Size": true, "ArgMax": true, "ArgMin": true, "NonZero": true,
}

// GradientFlows reports whether a gradient can flow from node n's outputs
// into its input slot i.
func GradientFlows(n *Node, i int) bool {
	if n.Domain == "" && noGradOps[n.OpType] {
		return false
	}
	for _, s := range noGradSlots[n.OpType] {
		if s == i {
			return false
		}
	}
	return true
}

// onlyMasks reports whether every use of v ends in an operator no
// gradient passes (noGradOps: a comparison, a boolean, a shape) before
// any output: v is the data of a mask — Swin's shifted-window mask, fill
// values scattered into zeros and compared with Equal — and no gradient
// can reach it. A value with no use, one read at a slot that takes no
// gradient (a shape, a BatchNorm statistic, a Resize scale: their
// operators' own rules), or one whose type is not known to be
// non-floating at an operator it does not know stays as it was.
func onlyMasks(g *Graph, v *Value) bool {
	if len(v.Consumers) == 0 {
		return false
	}
	out := map[*Value]bool{}
	for _, o := range g.Outputs {
		out[o] = true
	}
	seen := map[*Value]bool{v: true}
	stack := []*Value{v}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if out[x] {
			return false
		}
		for _, n := range x.Consumers {
			if n.Domain == "" && noGradOps[n.OpType] {
				continue
			}
			for k, in := range n.Inputs {
				if in == x && !GradientFlows(n, k) {
					return false
				}
			}
			for _, o := range n.Outputs {
				if o == nil || seen[o] || o.DType != Undefined && !o.DType.IsFloat() {
					continue
				}
				seen[o] = true
				stack = append(stack, o)
			}
		}
	}
	return true
}
