package rewrite

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Consumer rules of ConvTranspose and PRelu (dpengine/rule_convtranspose.go
// and rule_prelu.go are their per-sample rules).

func init() {
	registerConsumer(convTransposeConsumer, "ConvTranspose")
	registerConsumer(preluConsumer, "PRelu")
}

// convTransposeConsumer: the weight (1) is linear, the bias (2)
// elementwise, as a Conv's.
func convTransposeConsumer(c *consumer) (string, bool) {
	switch c.k {
	case 1:
		if r := c.data(0); r != "" {
			return r, true
		}
		return c.linear(c.a.convTransposeLayer)
	case 2:
		return c.elementwise(0)
	}
	return "", false
}

// preluConsumer: the slope (1) is elementwise, from the sample's input and
// output gradient.
func preluConsumer(c *consumer) (string, bool) {
	if c.k == 1 {
		return c.elementwise(0)
	}
	return "", false
}

// convTransposeLayer describes a ConvTranspose weight as the Conv it is
// the adjoint of (runtime.HookEvent.TransposedConv): that Conv reads the
// output gradient and produces the ConvTranspose's input, so T is the
// input's positions, D = (Cout/group)·k, p = Cin/group.
func (a *analyzer) convTransposeLayer(n *graph.Node, u *Use) string {
	w, ok2 := dims(n.Input(1))
	x, ok1 := dims(n.Input(0))
	if !ok1 || !ok2 || len(w) < 3 || len(x) != len(w) {
		return fmt.Sprintf("ConvTranspose %s: shapes unknown", nodeLabel(n))
	}
	if u.In.Axis != 0 {
		return fmt.Sprintf("ConvTranspose %s: batch on %v of its input", nodeLabel(n), u.In)
	}
	g := n.IntOr("group", 1)
	u.Layer = &Layer{Node: n.Name, Output: u.Output, Op: n.OpType, Operand: 1,
		T: u.In.Outer * u.In.Inner * prod(x[2:]), D: prod(w[1:]), P: w[0] / g, Groups: g, Taps: prod(w[2:])}
	if y, ok := dims(n.Outputs[0]); ok && len(y) == len(x) {
		u.Layer.InPositions = prod(y[2:])
	}
	if b := n.Input(2); b != nil {
		u.Layer.Bias = b.Name
	}
	return ""
}
