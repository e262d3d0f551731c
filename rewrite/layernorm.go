package rewrite

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// FuseLayerNorm replaces every decomposed LayerNorm of g by one
// LayerNormalization node while training. Before opset 17 ONNX has no
// LayerNormalization, and torch exports nn.LayerNorm over the last axis as
//
//	m  = ReduceMean(x, axes=[-1])
//	d  = Sub(x, m)
//	v  = ReduceMean(Pow(d, 2), axes=[-1])
//	n  = Div(d, Sqrt(Add(v, eps)))
//	y  = Add(Mul(n, γ), β)                γ, β: initializers of shape (D)
//
// (ViT, DeiT, BEiT, CrossViT: two per block). Run op by op that is nine
// passes over the activation forward and as many backward, and the DP
// engine takes γ and β's per-sample gradients from the Mul and the Add as
// elementwise parameters; as one node the runtime normalizes and applies
// the affine in one pass (NormalizeRowsAffine), and the engine's
// normalization rule takes γ and β's per-sample gradients from the rows'
// statistics. The operands may come in either order where the operator
// commutes (Mul(γ, n), Add(β, ·)), the square may be Mul(d, d), the
// shift may be absent (a LayerNorm without bias: Mul only). A chain whose
// intermediate values anything else reads, or that is a graph output, is
// left alone; so is one without the affine Mul (nothing to train: the
// runtime fuses its normalization itself).
//
// γ and β keep their names and values. ExportGraph writes the
// decomposition back for a model whose opset has no LayerNormalization
// (before 17; from 17 on the node is valid and stays), with the node
// names the exporter gave it (the LayerNormalization node
// is named <scope>/LayerNormalization after the chain's first
// ReduceMean, <scope>/ReduceMean). shapes (StaticShapes) gives the rank
// and last extent of each chain's input.
func FuseLayerNorm(g *graph.Graph, shapes map[string]graph.Shape) ([]Change, error) {
	relink(g)
	nm := newNamer(g)
	var changes []Change
	reason := "one pass instead of one per node; the model file keeps the decomposition"
	if g.Opsets[""] >= 17 {
		reason = "one pass instead of one per node; valid at the model's opset, the model file has the node"
	}
	gone := map[*graph.Node]bool{} // nodes of chains already fused
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if gone[n] {
			continue
		}
		m := matchLayerNorm(g, n, shapes)
		if m == nil {
			continue
		}
		for _, old := range m.nodes {
			gone[old] = true
		}
		scope := strings.TrimSuffix(n.Name, "/ReduceMean")
		if scope == n.Name || scope == "" {
			scope = nodeLabel(n) + "/layernorm"
		}
		b := newBuilder(g, nm, scope)
		in := []*graph.Value{m.x, m.gamma}
		if m.beta != nil {
			in = append(in, m.beta)
		}
		b.opInto(m.y, "LayerNormalization", []*onnxpb.AttributeProto{attrInt("axis", -1), attrFloat("epsilon", m.eps)}, in...)
		replaceChain(g, m.nodes, b.nodes, m.y, m.consts)
		shift := ""
		if m.beta != nil {
			shift = " and shift " + m.beta.Name
		}
		changes = append(changes, Change{Pass: "layernorm", Target: scope,
			Action: fmt.Sprintf("decomposed LayerNorm (%d nodes) → one LayerNormalization node with scale %s%s while training", len(m.nodes), m.gamma.Name, shift),
			Reason: reason})
	}
	return changes, g.Validate()
}

// layerNormChain is one decomposed LayerNorm FuseLayerNorm matched.
type layerNormChain struct {
	x, y, gamma, beta *graph.Value
	eps               float64
	nodes             []*graph.Node  // first the ReduceMean of x
	consts            []*graph.Value // constant operands only the chain reads
}

// matchLayerNorm matches the decomposition FuseLayerNorm documents from
// its first ReduceMean r1; nil where r1 does not begin one.
func matchLayerNorm(g *graph.Graph, r1 *graph.Node, shapes map[string]graph.Shape) *layerNormChain {
	if r1.OpType != "ReduceMean" || r1.Domain != "" || len(r1.Outputs) != 1 {
		return nil
	}
	x := r1.Input(0) // float32 where γ is (the dynamic graph leaves x's type to inference)
	if x == nil {
		return nil
	}
	xs := shapeOf(x, shapes)
	rank := len(xs)
	if rank < 2 || !lastAxisOnly(g, r1, rank) {
		return nil
	}
	last := xs[rank-1].Size
	if xs[rank-1].Param != "" || last <= 0 {
		return nil
	}
	inner := func(v *graph.Value) *graph.Node { return onlyReader(g, v) }
	m := &layerNormChain{x: x}
	nc := matchNormalize(g, r1, x, rank)
	if nc == nil {
		return nil
	}
	div := nc.nodes[len(nc.nodes)-1]
	m.eps, m.consts = nc.eps, nc.consts
	mul := inner(div.Outputs[0])
	if !isBinary(mul, "Mul") {
		return nil
	}
	m.gamma = otherOperand(mul, div.Outputs[0])
	if !affineParam(m.gamma, last) {
		return nil
	}
	m.nodes = append(nc.nodes, mul)
	m.y = mul.Outputs[0]
	if shift := inner(mul.Outputs[0]); isBinary(shift, "Add") {
		if beta := otherOperand(shift, mul.Outputs[0]); affineParam(beta, last) {
			m.beta, m.y = beta, shift.Outputs[0]
			m.nodes = append(m.nodes, shift)
		}
	}
	if sh := shapeOf(m.y, shapes); len(sh) != rank {
		return nil // a γ or β that broadcasts x up
	}
	return m
}

// replaceChain puts repl where the node of the chain that writes y was
// (the chain's last: it reads the others, so every input of the chain,
// its affine's included, is computed before it), drops the chain's other
// nodes and every value they made but y (which repl now writes), and the
// constants only the chain read.
func replaceChain(g *graph.Graph, chain, repl []*graph.Node, y *graph.Value, consts []*graph.Value) {
	var last *graph.Node // y.Producer is repl's node already (builder.opInto)
	for _, old := range chain {
		if slices.Contains(old.Outputs, y) {
			last = old
		}
	}
	for _, old := range chain {
		if old != last {
			g.ReplaceNode(old, nil)
		}
	}
	g.ReplaceNode(last, repl)
	for _, old := range chain {
		for _, o := range old.Outputs {
			if o != nil && o != y {
				delete(g.Values, o.Name)
			}
		}
	}
	relink(g)
	for _, c := range consts {
		removeConstIfUnused(g, c)
	}
}

// onlyReader is v's only reader, where v has one and is no graph output.
func onlyReader(g *graph.Graph, v *graph.Value) *graph.Node {
	if v == nil || len(v.Consumers) != 1 || isGraphOutput(g, v) {
		return nil
	}
	return v.Consumers[0]
}

// normChain is x normalized along its last axis as torch exports it,
// d = x − ReduceMean(x), d / Sqrt(ReduceMean(d²) + eps): LayerNorm's
// decomposition before the affine, and GroupNorm's over (N, G, C/G·…).
type normChain struct {
	nodes  []*graph.Node  // r1, Sub, the square, ReduceMean, Add, Sqrt, Div (last)
	consts []*graph.Value // constant operands only the chain reads
	eps    float64
}

// matchNormalize matches the normalization of x (of rank rank) from its
// first ReduceMean r1; nil where r1 does not begin one, or where an
// intermediate value has another reader.
func matchNormalize(g *graph.Graph, r1 *graph.Node, x *graph.Value, rank int) *normChain {
	if r1 == nil || r1.OpType != "ReduceMean" || r1.Domain != "" || len(r1.Outputs) != 1 || r1.Input(0) != x || !lastAxisOnly(g, r1, rank) {
		return nil
	}
	inner := func(v *graph.Value) *graph.Node { return onlyReader(g, v) }
	m := &normChain{}
	sub := inner(r1.Outputs[0])
	if !isBinary(sub, "Sub") || sub.Inputs[0] != x || sub.Inputs[1] != r1.Outputs[0] {
		return nil
	}
	d := sub.Outputs[0]
	readers := map[*graph.Node]bool{}
	for _, c := range d.Consumers {
		readers[c] = true
	}
	if len(readers) != 2 || isGraphOutput(g, d) {
		return nil
	}
	var sq, div *graph.Node
	for c := range readers {
		switch {
		case isBinary(c, "Pow") && c.Inputs[0] == d && scalarConst(g, c.Inputs[1], 2):
			sq = c
			m.consts = append(m.consts, c.Inputs[1])
		case isBinary(c, "Mul") && c.Inputs[0] == d && c.Inputs[1] == d:
			sq = c
		case isBinary(c, "Div") && c.Inputs[0] == d:
			div = c
		}
	}
	if sq == nil || div == nil {
		return nil
	}
	r2 := inner(sq.Outputs[0])
	if r2 == nil || r2.OpType != "ReduceMean" || r2.Input(0) != sq.Outputs[0] || !lastAxisOnly(g, r2, rank) {
		return nil
	}
	if a := r2.Input(1); a != nil {
		m.consts = append(m.consts, a)
	}
	if a := r1.Input(1); a != nil {
		m.consts = append(m.consts, a)
	}
	add := inner(r2.Outputs[0])
	if !isBinary(add, "Add") {
		return nil
	}
	epsV := add.Inputs[1]
	if epsV == r2.Outputs[0] {
		epsV = add.Inputs[0]
	}
	eps, ok := scalarOf(g, epsV)
	if !ok || !(eps >= 0) || math.IsInf(eps, 0) {
		return nil
	}
	m.eps = eps
	m.consts = append(m.consts, epsV)
	sqrt := inner(add.Outputs[0])
	if sqrt == nil || sqrt.OpType != "Sqrt" || len(sqrt.Outputs) != 1 || inner(sqrt.Outputs[0]) != div || div.Inputs[1] != sqrt.Outputs[0] {
		return nil
	}
	m.nodes = []*graph.Node{r1, sub, sq, r2, add, sqrt, div}
	return m
}

// isBinary reports whether n is op of two inputs and one output.
func isBinary(n *graph.Node, op string) bool {
	return n != nil && n.OpType == op && n.Domain == "" && len(n.Inputs) == 2 && n.Inputs[0] != nil && n.Inputs[1] != nil && len(n.Outputs) == 1 && n.Outputs[0] != nil
}

// otherOperand is n's operand other than v (nil where v is neither).
func otherOperand(n *graph.Node, v *graph.Value) *graph.Value {
	switch v {
	case n.Inputs[0]:
		return n.Inputs[1]
	case n.Inputs[1]:
		return n.Inputs[0]
	}
	return nil
}

// affineParam reports whether v is a float32 initializer of d elements
// along one axis: LayerNorm's γ or β.
func affineParam(v *graph.Value, d int64) bool {
	if v == nil || !v.Initializer || v.Const == nil || v.Const.DType != graph.Float32 || int64(v.Const.Len()) != d {
		return false
	}
	for _, s := range v.Const.Shape[:max(len(v.Const.Shape)-1, 0)] {
		if s != 1 {
			return false
		}
	}
	return len(v.Const.Shape) >= 1
}

// constOf is v's value where v is a constant: an initializer, a folded
// value, or a Constant node's output (which the dynamic graph leaves
// unfolded); nil otherwise.
func constOf(g *graph.Graph, v *graph.Value) *graph.Tensor {
	switch p := v.Producer; {
	case v.Const != nil:
		return v.Const
	case p != nil && p.OpType == "Constant" && p.Domain == "" && p.Has("value"):
		t, err := p.TensorAttr(g, "value")
		if err == nil {
			return t
		}
	case p != nil && p.OpType == "Constant" && p.Domain == "" && p.Has("value_float"):
		if f, err := p.Float("value_float"); err == nil {
			return &graph.Tensor{DType: graph.Float32, F32: []float32{f}}
		}
	}
	return nil
}

// scalarOf is v's value where v is a constant of one element.
func scalarOf(g *graph.Graph, v *graph.Value) (float64, bool) {
	if v == nil {
		return 0, false
	}
	t := constOf(g, v)
	if t == nil || t.Len() != 1 {
		return 0, false
	}
	f, err := floats(t)
	if err != nil || len(f) != 1 {
		return 0, false
	}
	return f[0], true
}

// scalarConst reports whether v is a constant of one element within 1e-6
// (relative) of want.
func scalarConst(g *graph.Graph, v *graph.Value, want float64) bool {
	f, ok := scalarOf(g, v)
	return ok && math.Abs(f-want) <= 1e-6*math.Abs(want)
}

// lastAxisOnly reports whether the ReduceMean n averages its rank-rank
// input over the last axis only, keeping it: its axes attribute, or
// (opset 18) its constant axes input.
func lastAxisOnly(g *graph.Graph, n *graph.Node, rank int) bool {
	axes, ok := keptMeanAxes(g, n, rank)
	return ok && len(axes) == 1 && axes[0] == rank-1
}

// keptMeanAxes returns the axes (in 0 … rank−1) the reduction n of a
// rank-rank input reduces keeping them (keepdims 1), from its attribute
// or its constant axes input; false where they are not known, none, or
// not kept.
func keptMeanAxes(g *graph.Graph, n *graph.Node, rank int) ([]int, bool) {
	if n.IntOr("keepdims", 1) != 1 {
		return nil, false
	}
	if a := n.Input(1); a != nil {
		t := constOf(g, a)
		if t == nil || t.DType != graph.Int64 || len(t.I64) == 0 {
			return nil, false
		}
		var axes []int
		for _, ax := range t.I64 {
			if ax < 0 {
				ax += int64(rank)
			}
			if ax < 0 || ax >= int64(rank) {
				return nil, false
			}
			axes = append(axes, int(ax))
		}
		return axes, true
	}
	axes, noop, err := n.ReduceAxes(rank)
	return axes, err == nil && !noop && len(axes) > 0
}

// removeConstIfUnused drops a constant nothing reads any more: an
// initializer, or a Constant node and its output.
func removeConstIfUnused(g *graph.Graph, v *graph.Value) {
	if removeInitializerIfUnused(g, v) || len(v.Consumers) > 0 || isGraphOutput(g, v) {
		return
	}
	if p := v.Producer; p != nil && p.OpType == "Constant" {
		g.ReplaceNode(p, nil)
		delete(g.Values, v.Name)
	}
}

// shapeOf is v's shape from shapes (StaticShapes), else its own.
func shapeOf(v *graph.Value, shapes map[string]graph.Shape) graph.Shape {
	if s, ok := shapes[v.Name]; ok && s != nil {
		return s
	}
	return v.Shape
}

// ownLayerNorm reports whether n is a LayerNormalization node the model's
// opset does not have (before 17), its scale constant: one FuseLayerNorm
// made, which ExportGraph writes decomposed. From opset 17 on, one
// FuseLayerNorm made is valid ONNX and stays as it is.
func ownLayerNorm(n *graph.Node) bool {
	return n.OpType == "LayerNormalization" && n.Domain == "" && n.Opset < 17 &&
		len(n.Inputs) >= 2 && n.Inputs[0] != nil && n.Inputs[1] != nil &&
		(n.Inputs[1].Const != nil || n.Inputs[1].Producer != nil && n.Inputs[1].Producer.OpType == "Constant")
}

// decomposeLayerNorm adds to b the decomposition FuseLayerNorm matches,
// over the last axis of x, writing out.
func decomposeLayerNorm(b *builder, x, gamma, beta *graph.Value, eps float64, out *graph.Value) {
	dt := gamma.DType // a Constant node's (bnOnParamsRows)
	if gamma.Const != nil {
		dt = gamma.Const.DType
	}
	n := normalizeAlong(b, x, -1, eps, dt)
	if beta == nil {
		b.opInto(out, "Mul", nil, n, gamma)
		return
	}
	b.opInto(out, "Add", nil, b.op("Mul", nil, n, gamma), beta)
}
