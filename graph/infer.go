package graph

import (
	"fmt"
	"sort"
	"strings"
)

// maxFoldElements bounds the size of a folded constant, so that folding
// never materializes a large tensor that the runtime would compute cheaply.
const maxFoldElements = 1 << 22

// Folds of more than largeFold elements are data, not shape arithmetic
// (index grids, masks): the elements of all of them that one InferShapes
// evaluates are bounded by maxLargeFolds, past which they are left for
// the runtime to compute. Each is bounded on its own; an export of MViT-v2
// at a batch of 1000 builds its relative positions' index grids from
// dozens of them, and every inference of a load (a fixed batch's release
// tries several, an If's condition is read at that batch) evaluated them
// all again, gigabytes in all. A Swin's attention masks, the largest data
// folds of the suite's models, take some 6·10⁵ elements.
//
// The operators only folding computes (mustFold: Range, ConstantOfShape)
// cannot be left to the runtime: their large folds are bounded in all by
// maxMustFolds, past which the inference fails, naming the node (a model
// of hundreds of Ranges of 2²² elements each folded gigabytes; MViT-v2-S's
// index ranges at a batch of 32 take some 2·10⁶ elements).
const (
	largeFold     = 1 << 16
	maxLargeFolds = 1 << 22
	maxMustFolds  = 1 << 25
)

// InferShapes fixes the shapes of the graph inputs (by name; inputs not in
// shapes keep their declared shape), then infers the dtype and shape of every
// node output in topological order.
//
// As it goes it folds constants: a node whose inputs are all constants (and
// none of them a floating-point initializer, which training may change), or
// a Shape or Size node whose input shape is known, is evaluated, its outputs
// become constants and the node is removed. This turns the shape arithmetic
// of a dynamic-batch export (Shape, Gather, Unsqueeze, Concat, Reshape
// targets, ...) into a static graph. Initializers left unused by folding are
// dropped.
func (g *Graph) InferShapes(shapes map[string][]int64) error {
	for name, dims := range shapes {
		v, ok := g.Values[name]
		if !ok || v.Producer != nil || v.Const != nil {
			return fmt.Errorf("graph: %q is not a graph input", name)
		}
		if v.Shape != nil && len(v.Shape) != len(dims) {
			return fmt.Errorf("graph: input %q has rank %d (%v); got shape %v", name, len(v.Shape), v.Shape, dims)
		}
		for i, d := range dims {
			if d <= 0 {
				return fmt.Errorf("graph: input %q: dimension %d must be positive, got %d", name, i, d)
			}
			if v.Shape != nil && v.Shape[i].Size >= 0 && v.Shape[i].Size != d {
				return fmt.Errorf("graph: input %q: dimension %d is fixed at %d by the model, got %d", name, i, v.Shape[i].Size, d)
			}
		}
		v.Shape = StaticShape(dims...)
	}
	g.largeFolds, g.mustFolds = 0, 0
	usedBefore := map[*Value]bool{}
	for _, v := range g.Initializers {
		usedBefore[v] = len(v.Consumers) > 0
	}
	var kept []*Node
	for _, n := range g.Nodes {
		if err := g.inferNode(n); err != nil {
			return err
		}
		folded := len(n.Outputs) > 0
		for _, out := range n.Outputs {
			if out != nil && out.Const == nil {
				folded = false
			}
		}
		if folded {
			for _, out := range n.Outputs {
				if out != nil {
					out.Producer = nil
				}
			}
			continue
		}
		kept = append(kept, n)
	}
	g.Nodes = kept
	isOut := map[*Value]bool{}
	for _, v := range g.Outputs {
		isOut[v] = true
	}
	g.dropUnreadIntegers(isOut)
	g.relink()
	// Drop constants that folding left without consumers.
	var inits []*Value
	for _, v := range g.Initializers {
		if usedBefore[v] && len(v.Consumers) == 0 && !isOut[v] {
			delete(g.Values, v.Name)
			continue
		}
		inits = append(inits, v)
	}
	g.Initializers = inits
	for name, v := range g.Values {
		if v.Const != nil && !v.Initializer && len(v.Consumers) == 0 && !isOut[v] {
			delete(g.Values, name)
		}
	}
	return nil
}

// dropUnreadIntegers removes the nodes that compute only integer or
// boolean values nothing reads any more: shape arithmetic whose readers
// folding replaced by constants, such as the broadcast sum of index
// ranges whose only reader was a Shape (a slice assignment's updates
// reshaped to the grid's shape). The runtime computes only float32
// tensors, and a value no node reads need not be computed at all; the
// floating-point nodes stay, the parameters they read with them.
func (g *Graph) dropUnreadIntegers(isOut map[*Value]bool) {
	g.dropUnread(isOut, func(n *Node) bool {
		for _, o := range n.Outputs {
			if o != nil && (o.DType.IsFloat() || o.DType == Undefined) {
				return false
			}
		}
		return len(n.Outputs) > 0
	})
}

// dropUnread removes the nodes that may go (can) none of whose outputs a
// node that stays reads or the graph outputs (isOut), and their outputs'
// values; it relinks nothing.
func (g *Graph) dropUnread(isOut map[*Value]bool, can func(*Node) bool) {
	needed := map[*Value]bool{}
	dead := map[*Node]bool{}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		live := !can(n)
		for _, o := range n.Outputs {
			if o != nil && (needed[o] || isOut[o]) {
				live = true
			}
		}
		if !live {
			dead[n] = true
			continue
		}
		for _, in := range n.Inputs {
			if in != nil {
				needed[in] = true
			}
		}
	}
	if len(dead) == 0 {
		return
	}
	kept := g.Nodes[:0]
	for _, n := range g.Nodes {
		if !dead[n] {
			kept = append(kept, n)
			continue
		}
		for _, o := range n.Outputs {
			if o != nil {
				delete(g.Values, o.Name)
			}
		}
	}
	g.Nodes = kept
}

// relink recomputes every value's consumer list from the nodes.
func (g *Graph) relink() {
	for _, v := range g.Values {
		v.Consumers = v.Consumers[:0]
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != nil {
				in.Consumers = append(in.Consumers, n)
			}
		}
	}
}

// Constants returns the values that hold constants but are not
// initializers of the loaded model (folded values), sorted by name.
func (g *Graph) Constants() []*Value {
	var out []*Value
	for _, v := range g.Values {
		if v.Const != nil && !v.Initializer {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// inferNode sets dtypes and shapes of n's outputs and folds n if it can.
func (g *Graph) inferNode(n *Node) error {
	if n.Domain != "" {
		return fmt.Errorf("graph: node %s: operator domain %q is not supported", n, n.Domain)
	}
	castLikeAsCast(n)
	gatherNDAsGather(g, n)
	rule, ok := rules[n.OpType]
	if !ok {
		return fmt.Errorf("graph: node %s: operator %s is not supported", n, n.OpType)
	}
	if err := rule.infer(g, n); err != nil {
		return fmt.Errorf("graph: node %s: %w", n, err)
	}
	if err := checkOutputSizes(n); err != nil {
		return err
	}
	if rule.eval == nil || !g.foldable(n) {
		return nil
	}
	if big, err := foldTooLarge(n); big {
		return err // nil: left for the runtime to compute
	}
	// A Constant's data is the file's, read once: not counted.
	if elems := outputElements(n); elems > largeFold && n.OpType != "Constant" {
		switch {
		case mustFold[n.OpType] && g.mustFolds+elems > maxMustFolds:
			return fmt.Errorf("graph: node %s: folding its %d elements would take the folds of %s nodes over %d elements in all",
				n, elems, strings.Join(mustFoldOps(), " and "), maxMustFolds)
		case mustFold[n.OpType]:
			g.mustFolds += elems
		case g.largeFolds+elems > maxLargeFolds:
			return nil // left for the runtime to compute
		default:
			g.largeFolds += elems
		}
	}
	consts := make([]*Tensor, len(n.Inputs))
	for i, v := range n.Inputs {
		if v != nil {
			consts[i] = v.Const
		}
	}
	outs, err := rule.eval(g, n, consts)
	if err != nil {
		return fmt.Errorf("graph: node %s: folding: %w", n, err)
	}
	for i, t := range outs {
		if i < len(n.Outputs) && n.Outputs[i] != nil && t != nil {
			if t.Len() > maxFoldElements {
				return nil
			}
		}
	}
	for i, t := range outs {
		if i < len(n.Outputs) && n.Outputs[i] != nil && t != nil {
			v := n.Outputs[i]
			v.Const = t
			v.DType = t.DType
			v.Shape = StaticShape(t.Shape...)
		}
	}
	return nil
}

// foldable reports whether n may be evaluated now.
func (g *Graph) foldable(n *Node) bool {
	switch n.OpType {
	case "Shape", "Size":
		x := n.Input(0)
		return x != nil && x.Shape.Static()
	case "Constant":
		return true
	case "Dropout":
		return false // its mask output is random in training mode
	}
	for _, v := range n.Inputs {
		if v == nil {
			continue
		}
		if v.Const == nil || v.IsParam() {
			return false
		}
	}
	return true
}

// outputElements returns the elements of n's outputs of known shape.
func outputElements(n *Node) int64 {
	var total int64
	for _, v := range n.Outputs {
		if v != nil && v.Shape.Static() {
			e, _ := ShapeElements(v.Shape.Ints())
			total += e
		}
	}
	return total
}
