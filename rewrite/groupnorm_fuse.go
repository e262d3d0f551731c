package rewrite

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// FuseGroupNorm replaces every decomposed GroupNorm of g by one
// GroupNormalization node while training, as RewriteBatchNorm trains the
// GroupNorms it makes. A model carries GroupNorm decomposed in one of two
// forms, over x of shape (N, C, …) in G groups:
//
//	xr = Reshape(x, [0, G, -1])
//	n  = xr normalized along its last axis       (RewriteBatchNorm's written form, and
//	     (ReduceMean, Sub, Pow, ReduceMean,        a model dpfinetune trained: normalizeAlong)
//	     Add eps, Sqrt, Div), or
//	n  = InstanceNormalization(xr, 1…, 0…, eps)   (PyTorch's exporters' nn.GroupNorm
//	                                               before GroupNormalization-21)
//	y  = Add(Mul(Reshape(n, Shape(x)), γ), β)      γ, β: initializers of shape (C,1,…,1)
//
// Run op by op that is a normalization pass and four elementwise passes
// forward and backward, and the DP engine takes γ and β's per-sample
// gradients from the Mul and the Add; as one node the runtime normalizes
// and applies the affine in one pass, and the engine's normalization rule
// takes their per-sample gradients from the rows' statistics (a model
// trained again, after a first run wrote it, trains as fast as the first
// run did). A chain whose intermediate values anything else reads is left
// alone, as is one whose γ or β is not of that shape (γ and β read through
// an Unsqueeze of their (C) tensors, an export without constant folding,
// are taken: the node reads the Unsqueeze).
//
// γ and β keep their names and values. ExportGraph writes the node back
// as RewriteBatchNorm's decomposition, under the names of the chain it
// replaced where the chain is that form (the node is named
// <scope>/GroupNormalization after the chain's first Reshape,
// <scope>/Reshape). shapes (StaticShapes) gives each chain's input
// shape.
func FuseGroupNorm(g *graph.Graph, shapes map[string]graph.Shape) ([]Change, error) {
	relink(g)
	nm := newNamer(g)
	var changes []Change
	gone := map[*graph.Node]bool{}
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if gone[n] {
			continue
		}
		m := matchGroupNorm(g, n, shapes)
		if m == nil {
			continue
		}
		for _, old := range m.nodes {
			gone[old] = true
		}
		scope := strings.TrimSuffix(n.Name, "/Reshape")
		if scope == n.Name || scope == "" {
			scope = nodeLabel(n) + "/groupnorm"
		}
		b := newBuilder(g, nm, scope)
		b.opInto(m.y, "GroupNormalization", []*onnxpb.AttributeProto{attrInt("num_groups", m.groups), attrFloat("epsilon", m.eps)}, m.x, m.gamma, m.beta)
		replaceChain(g, m.nodes, b.nodes, m.y, m.consts)
		changes = append(changes, Change{Pass: "groupnorm", Target: scope,
			Action: fmt.Sprintf("decomposed GroupNorm (%s, %d nodes, %d groups) → one GroupNormalization node with scale %s and shift %s while training",
				m.form, len(m.nodes), m.groups, affineName(m.gamma), affineName(m.beta)),
			Reason: "one pass instead of one per node; the model file keeps the decomposition"})
	}
	return changes, g.Validate()
}

// groupNormChain is one decomposed GroupNorm FuseGroupNorm matched.
type groupNormChain struct {
	x, y, gamma, beta *graph.Value
	groups            int64
	eps               float64
	form              string
	nodes             []*graph.Node  // first the Reshape of x
	consts            []*graph.Value // constant operands only the chain reads
}

// matchGroupNorm matches a decomposition FuseGroupNorm documents from its
// first Reshape rs; nil where rs does not begin one.
func matchGroupNorm(g *graph.Graph, rs *graph.Node, shapes map[string]graph.Shape) *groupNormChain {
	if !isBinary(rs, "Reshape") {
		return nil
	}
	x := rs.Inputs[0]
	xs := shapeOf(x, shapes)
	if len(xs) < 3 || xs[1].Size <= 0 || xs[1].Param != "" {
		return nil
	}
	c := xs[1].Size
	t := constOf(g, rs.Inputs[1])
	if t == nil || t.DType != graph.Int64 || len(t.I64) != 3 || t.I64[0] != 0 || t.I64[2] != -1 || t.I64[1] <= 0 || c%t.I64[1] != 0 {
		return nil
	}
	m := &groupNormChain{x: x, groups: t.I64[1], consts: []*graph.Value{rs.Inputs[1]}}
	xr := rs.Outputs[0]
	var norm *graph.Node // the chain's last normalizing node
	switch first := onlyReader(g, xr); {
	case first != nil && first.OpType == "InstanceNormalization" && first.Domain == "" && len(first.Inputs) == 3 && len(first.Outputs) == 1:
		if !filled(g, first.Inputs[1], m.groups, 1) || !filled(g, first.Inputs[2], m.groups, 0) {
			return nil
		}
		eps, err := first.Float("epsilon")
		if err != nil {
			return nil
		}
		m.eps, m.form, norm = float64(eps), "InstanceNormalization", first
		m.nodes = []*graph.Node{rs, first}
		m.consts = append(m.consts, first.Inputs[1], first.Inputs[2])
	default:
		var r1 *graph.Node
		for _, c := range xr.Consumers {
			if c.OpType == "ReduceMean" {
				r1 = c
			}
		}
		nc := matchNormalize(g, r1, xr, 3)
		if nc == nil || len(xr.Consumers) != 2 || isGraphOutput(g, xr) {
			return nil
		}
		m.eps, m.form = nc.eps, "ReduceMean"
		norm = nc.nodes[len(nc.nodes)-1]
		m.nodes = append([]*graph.Node{rs}, nc.nodes...)
		m.consts = append(m.consts, nc.consts...)
	}
	back := onlyReader(g, norm.Outputs[0])
	if !isBinary(back, "Reshape") || back.Inputs[0] != norm.Outputs[0] {
		return nil
	}
	// The target is Shape(x), or its value where the graph folded it.
	switch sh := back.Inputs[1]; {
	case sh.Producer != nil && sh.Producer.OpType == "Shape" && sh.Producer.Input(0) == x && len(sh.Consumers) == 1 &&
		!sh.Producer.Has("start") && !sh.Producer.Has("end"):
		m.nodes = append(m.nodes, sh.Producer)
	default:
		st := constOf(g, sh)
		if st == nil || st.DType != graph.Int64 || len(st.I64) != len(xs) || !xs.Static() || !slices.Equal(st.I64, xs.Ints()) {
			return nil
		}
		m.consts = append(m.consts, sh)
	}
	mul := onlyReader(g, back.Outputs[0])
	if !isBinary(mul, "Mul") {
		return nil
	}
	add := onlyReader(g, mul.Outputs[0])
	if !isBinary(add, "Add") {
		return nil
	}
	m.gamma = otherOperand(mul, back.Outputs[0])
	m.beta = otherOperand(add, mul.Outputs[0])
	if !channelAffine(g, m.gamma, c, len(xs), shapes) || !channelAffine(g, m.beta, c, len(xs), shapes) || m.gamma == m.beta {
		return nil
	}
	m.nodes = append(m.nodes, back, mul, add)
	m.y = add.Outputs[0]
	return m
}

// channelAffine reports whether v is GroupNorm's γ or β for an input of
// the given rank, (C,1,…,1): a float32 initializer of that shape, as
// constant folding and RewriteBatchNorm write them, or the only use of an
// Unsqueeze of a (C) initializer to it, as PyTorch's exporters write
// nn.GroupNorm's weight and bias without constant folding (the fused node
// then reads the Unsqueeze, which stays: the parameter keeps its shape).
func channelAffine(g *graph.Graph, v *graph.Value, c int64, rank int, shapes map[string]graph.Shape) bool {
	if v == nil {
		return false
	}
	shape := shapeOf(v, shapes)
	if p := v.Producer; p != nil && p.OpType == "Unsqueeze" && p.Domain == "" && len(v.Consumers) == 1 && !isGraphOutput(g, v) {
		w := p.Input(0)
		if w == nil || !w.IsParam() || w.Const == nil || w.Const.DType != graph.Float32 || len(w.Const.Shape) != 1 || w.Const.Shape[0] != c {
			return false
		}
	} else if !v.IsParam() || v.Const == nil || v.Const.DType != graph.Float32 {
		return false
	} else {
		shape = graph.StaticShape(v.Const.Shape...)
	}
	if len(shape) != rank-1 || shape[0].Size != c {
		return false
	}
	for _, d := range shape[1:] {
		if d.Size != 1 {
			return false
		}
	}
	return true
}

// affineName names γ or β by the tensor trained: the initializer, or the
// one an Unsqueeze reads.
func affineName(v *graph.Value) string {
	if p := v.Producer; p != nil && p.OpType == "Unsqueeze" && p.Input(0) != nil {
		return p.Input(0).Name
	}
	return v.Name
}

// filled reports whether v is a constant of n elements, each want.
func filled(g *graph.Graph, v *graph.Value, n int64, want float64) bool {
	t := constOf(g, v)
	if t == nil || int64(t.Len()) != n {
		return false
	}
	f, err := floats(t)
	if err != nil {
		return false
	}
	for _, x := range f {
		if x != want {
			return false
		}
	}
	return true
}
