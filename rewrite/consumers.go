package rewrite

import (
	"fmt"
	"slices"
	"sort"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Consumer rules: how the plan classifies a node that reads a trainable
// parameter (or a value derived from parameters only) where it meets the
// batch. Each operator registers one rule, as the DP engine registers its
// per-sample rule for the same operator (dpengine/rules.go), so that a
// new consumer is one rule here, one there, and their tests.

// consumer is what a consumer rule sees: node n reads the parameter-derived
// value q as its input k; u is the use being built (Node, Op, Operand,
// Path, Out are set).
type consumer struct {
	a  *analyzer
	n  *graph.Node
	k  int
	q  *graph.Value
	u  *Use
	at string // "Op name (input k)", for messages
	// data marks input i as the use's batch-carrying input (u.Data,
	// u.In), or says why it cannot be.
	data func(i int) string
}

// A consumerRule sets c.u.Kind (and c.u.Layer for a linear use) and
// reports handled; why, if not empty, says why the parameter cannot be
// trained there. A rule that does not handle input c.k reports false, and
// the parameter is frozen with "no per-sample rule for this operator and
// input".
type consumerRule func(c *consumer) (why string, handled bool)

var consumerRules = map[string]consumerRule{}

// registerConsumer registers the consumer rule of ops (from init; two
// rules for one operator is a programming error).
func registerConsumer(r consumerRule, ops ...string) {
	for _, op := range ops {
		if consumerRules[op] != nil {
			panic("rewrite: two consumer rules for " + op)
		}
		consumerRules[op] = r
	}
}

// ConsumerOps lists, sorted, the operators with a consumer rule.
func ConsumerOps() []string {
	var ops []string
	for op := range consumerRules {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

func init() {
	registerConsumer(convConsumer, "Conv")
	registerConsumer(gemmConsumer, "Gemm")
	registerConsumer(matmulConsumer, "MatMul")
	registerConsumer(arithmeticConsumer, "Add", "Sub", "Mul", "Div")
	registerConsumer(concatConsumer, "Concat")
	registerConsumer(normConsumer, "LayerNormalization", "InstanceNormalization", "GroupNormalization")
	registerConsumer(func(c *consumer) (string, bool) {
		return fmt.Sprintf("read by %s: rewrite BatchNorm with --bn groupnorm or --bn freeze", c.at), true
	}, "BatchNormalization")
}

// linear makes the use linear with the layer annotate gives it.
func (c *consumer) linear(annotate func(*graph.Node, *Use) string) (string, bool) {
	c.u.Kind = KindLinear
	return annotate(c.n, c.u), true
}

// elementwise makes the use elementwise with input i as its data.
func (c *consumer) elementwise(i int) (string, bool) {
	if r := c.data(i); r != "" {
		return r, true
	}
	c.u.Kind = KindElementwise
	return "", true
}

// convConsumer: the weight (1) is linear, the bias (2) elementwise.
func convConsumer(c *consumer) (string, bool) {
	switch c.k {
	case 1:
		if r := c.data(0); r != "" {
			return r, true
		}
		return c.linear(c.a.convLayer)
	case 2:
		return c.elementwise(0)
	}
	return "", false
}

// gemmConsumer: B (1) is a linear weight, C (2) an elementwise bias.
func gemmConsumer(c *consumer) (string, bool) {
	switch c.k {
	case 1:
		if r := c.data(0); r != "" {
			return r, true
		}
		return c.linear(c.a.gemmLayer)
	case 2:
		return c.elementwise(0)
	}
	return "", false
}

// matmulConsumer: a 2-D operand is a linear weight, the other operand
// the data; so is a stack of them (G, D, P) as the second operand, one
// weight for each of the data's (G, rows, D) matrices (matmulLayer).
func matmulConsumer(c *consumer) (string, bool) {
	if r := len(c.q.Shape); r < 2 || r > 2 && c.k != 1 {
		return fmt.Sprintf("read by %s as a rank-%d operand; MatMul weights are 2-D, or stacks of them as the second operand", c.at, r), true
	}
	if r := c.data(1 - c.k); r != "" {
		return r, true
	}
	return c.linear(c.a.matmulLayer)
}

// arithmeticConsumer: either operand of a binary op, the other the data,
// which the operand meets broadcast over the batch (or a sample's rows of
// a folded batch: sampleExtent).
func arithmeticConsumer(c *consumer) (string, bool) {
	if r, handled := c.elementwise(1 - c.k); r != "" || !handled {
		return r, handled
	}
	return c.sampleExtent(1 - c.k), true
}

// sampleExtent refuses an operand that, right-aligned against the data
// (input i), spans more of the batch's axis than one sample does without
// carrying the batch: a value of the batch's size computed from
// parameters alone, such as a position embedding resized to the whole
// shape of the activations it is added to (their Shape, the batch's size
// included). A sample's gradient reaches only its own part of it, which
// is no reduction of the sample's output gradient (dpengine's
// arithmeticOperand refuses it too, should a plan let one through).
func (c *consumer) sampleExtent(i int) string {
	if c.a.li.state(c.q).kind == batched || expandedFrom(c.q) {
		// Carries the batch itself (a class token expanded over it, which
		// the runtime follows as a batch axis): a sample's rows.
		return ""
	}
	ds, qs := c.n.Input(i).Shape, c.q.Shape
	ax := c.u.In.Axis - (len(ds) - len(qs))
	if ax < 0 || ax >= len(qs) || c.u.In.Axis >= len(ds) {
		return ""
	}
	per := c.u.In.Outer * c.u.In.Inner
	if n, d := qs[ax].Size, ds[c.u.In.Axis].Size; n > 1 && n != per && d > per {
		return fmt.Sprintf("read by %s as an operand of shape %v, %d along the batch's axis where a sample spans %d of the data's %d: a value of the batch's size computed from parameters, whose per-sample gradients are not supported", c.at, qs.Ints(), n, per, d)
	}
	return ""
}

// concatConsumer: a tensor joined to batch data (a class token).
func concatConsumer(c *consumer) (string, bool) {
	for i := range c.n.Inputs {
		if c.a.li.state(c.n.Inputs[i]).kind == batched {
			return c.elementwise(i)
		}
	}
	c.u.Kind = KindElementwise
	return "", true
}

// normConsumer: the scale (1) and bias (2) of a native normalization
// node are elementwise, from the normalized input and the output gradient
// of each sample.
func normConsumer(c *consumer) (string, bool) {
	if c.k == 1 || c.k == 2 {
		return c.elementwise(0)
	}
	return "", false
}

func (a *analyzer) convLayer(n *graph.Node, u *Use) string {
	w, ok2 := dims(n.Input(1))
	y, ok3 := dims(n.Outputs[0])
	if !ok2 || !ok3 || len(w) < 3 || len(y) != len(w) {
		return fmt.Sprintf("Conv %s: shapes unknown", nodeLabel(n))
	}
	if u.In.Axis != 0 {
		return fmt.Sprintf("Conv %s: batch on %v of its input", nodeLabel(n), u.In)
	}
	g := n.IntOr("group", 1)
	u.Layer = &Layer{Node: n.Name, Output: u.Output, Op: n.OpType, Operand: 1,
		T: u.In.Outer * u.In.Inner * prod(y[2:]), D: prod(w[1:]), P: w[0] / g, Groups: g, Taps: prod(w[2:])}
	if x, ok := dims(n.Input(0)); ok && len(x) == len(y) {
		u.Layer.InPositions = prod(x[2:])
	}
	if b := n.Input(2); b != nil {
		u.Layer.Bias = b.Name
	}
	return ""
}

func (a *analyzer) gemmLayer(n *graph.Node, u *Use) string {
	x, ok1 := dims(n.Input(0))
	y, ok2 := dims(n.Outputs[0])
	if !ok1 || !ok2 || len(x) != 2 {
		return fmt.Sprintf("Gemm %s: shapes unknown", nodeLabel(n))
	}
	kAxis := 1
	if n.IntOr("transA", 0) != 0 {
		kAxis = 0
	}
	if u.In.Axis != 1-kAxis {
		return fmt.Sprintf("Gemm %s: batch on the contracted axis", nodeLabel(n))
	}
	u.Layer = &Layer{Node: n.Name, Output: u.Output, Op: n.OpType, Operand: 1,
		T: u.In.Outer * u.In.Inner, D: x[kAxis], P: y[1], Groups: 1}
	if b := n.Input(2); b != nil {
		u.Layer.Bias = b.Name
	}
	return ""
}

func (a *analyzer) matmulLayer(n *graph.Node, u *Use) string {
	x, ok1 := dims(n.Input(u.Data))
	if !ok1 || len(x) < 2 {
		return fmt.Sprintf("MatMul %s: data operand shape unknown or 1-D", nodeLabel(n))
	}
	var kdim int64
	var p int64
	w := u.OperandShape
	if u.Operand == 1 { // y = x · W, W (K, N)
		kdim, p = x[len(x)-1], w[len(w)-1]
	} else { // y = W · x, W (M, K), x (…, K, N)
		kdim, p = x[len(x)-2], w[0]
	}
	// A stack of weights (G…, D, P) multiplies each of the data's
	// matrices (G…, rows, D) by its own (MViT-v2's temporal relative
	// positions, (t, B·heads·h·w, c) · (t, c, k)): G independent layers,
	// each sample's rows of matrix g its a_i for weight g. The batch must
	// lie among the rows: along a stacked axis it would meet one weight
	// of the stack per sample. Leading ones are one weight.
	groups := prod(w[:len(w)-2])
	if groups > 1 {
		if len(x) != len(w) || !slices.Equal(x[:len(x)-2], w[:len(w)-2]) {
			return fmt.Sprintf("MatMul %s: a stack of weights %v needs data of the same leading axes, got %v", nodeLabel(n), w, x)
		}
		if u.In.Axis != len(x)-2 {
			return fmt.Sprintf("MatMul %s: the batch is on axis %d of the data %v, not among the rows of each weight of the stack %v", nodeLabel(n), u.In.Axis, x, w)
		}
	}
	t := prod(x) / (a.ab * kdim * groups)
	u.Layer = &Layer{Node: n.Name, Output: u.Output, Op: n.OpType, Operand: u.Operand, T: t, D: kdim, P: p, Groups: groups}
	return ""
}

// expandedFrom reports whether v is computed through an Expand (the
// runtime's batch tracking takes an Expand of a value without the batch
// to the batch's size for a batch axis), reading the shape inputs of
// Shape and Size no further. Any Expand upstream counts, which is broader
// than the runtime's rule: what it lets through that the runtime does not
// follow, the engine still refuses at its first step (reducesTo).
func expandedFrom(v *graph.Value) bool {
	seen := map[*graph.Node]bool{}
	var walk func(v *graph.Value) bool
	walk = func(v *graph.Value) bool {
		n := v.Producer
		if n == nil || seen[n] || n.OpType == "Shape" || n.OpType == "Size" {
			return false
		}
		seen[n] = true
		if n.OpType == "Expand" {
			return true
		}
		for _, in := range n.Inputs {
			if in != nil && walk(in) {
				return true
			}
		}
		return false
	}
	return walk(v)
}
