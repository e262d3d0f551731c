package rewrite

import (
	"fmt"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// ExportGraph returns the graph a model file holds for g, the graph a run
// trained: g itself, or where RewriteBatchNorm left GroupNormalization
// nodes (trained as one node each, their scale and shift of shape
// (C,1,…,1), which no ONNX GroupNormalization takes) or FuseLayerNorm
// LayerNormalization nodes the model's opset does not have (before 17), a
// clone of g with each written as the decomposition RewriteBatchNorm or
// FuseLayerNorm documents, so that the model stays valid at its own
// opset and runs in onnxruntime and PyTorch. The clone shares g's initializers: the weights a run
// trained into g are the ones it writes. Where Prepare added LoRA
// adapters, each is merged into the weight it adapts (scale·A·B added
// to it) and removed: the model is written with the layers it was
// exported with. A model loaded in half precision
// (g.HalfFrom) is written back in it (a clone, graph.NarrowHalf).
func ExportGraph(g *graph.Graph) (*graph.Graph, error) {
	brs, err := findLoRA(g)
	if err != nil {
		return nil, fmt.Errorf("rewrite: exporting: %w", err)
	}
	if len(brs) > 0 {
		g = g.Clone()
		if err := mergeLoRA(g); err != nil {
			return nil, fmt.Errorf("rewrite: exporting: %w", err)
		}
	}
	c, err := exportDecomposed(g)
	if err != nil || g.HalfFrom == graph.Undefined {
		return c, err
	}
	if c == g {
		c = g.Clone()
	}
	if err := c.NarrowHalf(); err != nil {
		return nil, fmt.Errorf("rewrite: exporting in %v: %w", g.HalfFrom, err)
	}
	return c, nil
}

// exportDecomposed is ExportGraph's decompositions.
func exportDecomposed(g *graph.Graph) (*graph.Graph, error) {
	n := 0
	for _, nd := range g.Nodes {
		if ownGroupNorm(nd) || ownLayerNorm(nd) {
			n++
		}
	}
	if n == 0 {
		return g, nil
	}
	c := g.Clone()
	relink(c)
	nm := newNamer(c)
	for _, nd := range append([]*graph.Node(nil), c.Nodes...) {
		if ownLayerNorm(nd) {
			eps, err := nd.Float("epsilon")
			if err != nil {
				return nil, fmt.Errorf("rewrite: exporting %s: %w", nodeLabel(nd), err)
			}
			// The names the exporter gave the decomposition (FuseLayerNorm).
			b := newBuilder(c, nm, strings.TrimSuffix(nd.Name, "/LayerNormalization"))
			decomposeLayerNorm(b, nd.Inputs[0], nd.Inputs[1], nd.Input(2), float64(eps), nd.Outputs[0])
			c.ReplaceNode(nd, b.nodes)
			relink(c)
			continue
		}
		if !ownGroupNorm(nd) {
			continue
		}
		groups, err := nd.Int("num_groups")
		if err != nil {
			return nil, fmt.Errorf("rewrite: exporting %s: %w", nodeLabel(nd), err)
		}
		eps, err := nd.Float("epsilon")
		if err != nil {
			return nil, fmt.Errorf("rewrite: exporting %s: %w", nodeLabel(nd), err)
		}
		// The names the decomposition had when RewriteBatchNorm emitted it.
		scope := strings.TrimSuffix(nd.Name, "/GroupNormalization")
		if scope == nd.Name {
			scope = nodeLabel(nd) + "/groupnorm"
		}
		gamma := nd.Inputs[1]
		b := newBuilder(c, nm, scope)
		dt := graph.Float32
		if t := gamma.Const; t != nil {
			dt = t.DType
		} else if t := gamma.Producer.Input(0).Const; t != nil { // ownGroupNorm: an Unsqueeze of a constant
			dt = t.DType
		}
		decomposeGroupNorm(b, nd.Inputs[0], gamma, nd.Inputs[2], groups, float64(eps), dt, nd.Outputs[0])
		c.ReplaceNode(nd, b.nodes)
		relink(c)
	}
	return c, c.Validate()
}

// ownGroupNorm reports whether n is a GroupNormalization node as
// RewriteBatchNorm and FuseGroupNorm emit it: a per-channel scale and
// shift of shape (C,1,…,1), constant, or an Unsqueeze of a constant (C)
// (FuseGroupNorm of an export without constant folding).
func ownGroupNorm(n *graph.Node) bool {
	if n.OpType != "GroupNormalization" || n.Domain != "" || len(n.Inputs) != 3 {
		return false
	}
	for _, v := range n.Inputs[1:] {
		switch {
		case v == nil:
			return false
		case v.Const != nil:
			if len(v.Const.Shape) < 2 {
				return false
			}
		case v.Producer != nil && v.Producer.OpType == "Unsqueeze" && v.Producer.Input(0) != nil && v.Producer.Input(0).Const != nil:
		default:
			return false
		}
	}
	return true
}
