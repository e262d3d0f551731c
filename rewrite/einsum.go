package rewrite

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Einsum: following the batch through it, and a weight read by it.

func init() {
	registerConsumer(einsumConsumer, "Einsum")
}

// einsumSpec parses n's equation for its inputs' shapes.
func einsumSpec(n *graph.Node) (*graph.EinsumSpec, [][]int64, error) {
	eq, err := n.Str("equation")
	if err != nil {
		return nil, nil, err
	}
	var shapes [][]int64
	var ranks []int
	for _, in := range n.Inputs {
		d, okd := dims(in)
		if !okd {
			return nil, nil, fmt.Errorf("input shapes unknown")
		}
		shapes = append(shapes, d)
		ranks = append(ranks, len(d))
	}
	s, err := graph.ParseEinsum(eq, ranks)
	return s, shapes, err
}

// einsumLayout follows the batch through an Einsum: the batch axis's label
// must be the same in every batch-carrying operand (a plain batch axis),
// absent from the others, and kept by the output, where it is the batch
// axis.
func (li *layoutInfo) einsumLayout(n *graph.Node) bstate {
	s, _, err := einsumSpec(n)
	if err != nil {
		return lost("%v", err)
	}
	var label rune
	found := false
	for i, in := range n.Inputs {
		st := li.state(in)
		if st.kind != batched {
			continue
		}
		if st.l.Outer != 1 || st.l.Inner != 1 {
			return lost("the batch of input %d is folded into axis %v", i, st.l)
		}
		l := s.Inputs[i][st.l.Axis]
		if found && l != label {
			return mix("contracts the batch of one operand with another axis (labels %q and %q)", label, l)
		}
		label, found = l, true
		for a, o := range s.Inputs[i] {
			if o == l && a != st.l.Axis {
				return mix("takes a diagonal across the batch axis (label %q)", l)
			}
		}
	}
	for i, in := range n.Inputs {
		if li.state(in).kind != batched {
			for _, o := range s.Inputs[i] {
				if o == label {
					return mix("pairs the batch (label %q) with input %d, which does not carry it", label, i)
				}
			}
		}
	}
	for j, o := range s.Output {
		if o == label {
			return ok(BatchLayout{Axis: j, Outer: 1, Inner: 1})
		}
	}
	return mix("sums over the batch (label %q is not in the output)", label)
}

// EinsumLabels sorts the labels of a two-operand Einsum whose operand w is
// a weight and the other operand x the data, its batch label b: G are in
// x, w and the output (groups, e.g. heads), K in x and w only
// (contracted: D), N in w and the output only (features: p), R in x and
// the output only, b excluded (rows: T). Any other label, a repeated label
// or a broadcast size-1 axis has no per-sample rule here.
type EinsumLabels struct {
	G, K, N, R []rune
	Batch      rune
}

// SplitEinsum classifies the labels of s (operands of shapes) for weight
// operand w and batch label b, or says why it cannot.
func SplitEinsum(s *graph.EinsumSpec, shapes [][]int64, w int, b rune) (*EinsumLabels, error) {
	if len(s.Inputs) != 2 {
		return nil, fmt.Errorf("%d operands; a weight needs exactly one data operand", len(s.Inputs))
	}
	x := 1 - w
	in := func(ls []rune, l rune) bool {
		for _, o := range ls {
			if o == l {
				return true
			}
		}
		return false
	}
	size := map[rune]int64{}
	for i, ls := range s.Inputs {
		seen := map[rune]bool{}
		for a, l := range ls {
			if seen[l] {
				return nil, fmt.Errorf("operand %d repeats label %q (a diagonal)", i, l)
			}
			seen[l] = true
			if d, ok := size[l]; ok && d != shapes[i][a] {
				return nil, fmt.Errorf("label %q has sizes %d and %d (broadcasting)", l, d, shapes[i][a])
			}
			size[l] = shapes[i][a]
		}
	}
	e := &EinsumLabels{Batch: b}
	for _, l := range s.Inputs[w] {
		inX, inY := in(s.Inputs[x], l), in(s.Output, l)
		switch {
		case inX && inY:
			e.G = append(e.G, l)
		case inX:
			e.K = append(e.K, l)
		case inY:
			e.N = append(e.N, l)
		default:
			return nil, fmt.Errorf("weight label %q is summed on its own", l)
		}
	}
	if in(s.Inputs[w], b) {
		return nil, fmt.Errorf("the weight carries the batch label %q", b)
	}
	for _, l := range s.Inputs[x] {
		if l == b || in(s.Inputs[w], l) {
			continue
		}
		if !in(s.Output, l) {
			return nil, fmt.Errorf("data label %q is summed on its own", l)
		}
		e.R = append(e.R, l)
	}
	return e, nil
}

func einsumConsumer(c *consumer) (string, bool) {
	s, shapes, err := einsumSpec(c.n)
	if err != nil {
		return fmt.Sprintf("read by %s: %v", c.at, err), true
	}
	if len(c.n.Inputs) != 2 {
		return fmt.Sprintf("read by %s: a weight needs exactly one data operand, not %d", c.at, len(c.n.Inputs)-1), true
	}
	if r := c.data(1 - c.k); r != "" {
		return r, true
	}
	if c.u.In.Outer != 1 || c.u.In.Inner != 1 {
		return fmt.Sprintf("read by %s whose data carries the batch folded into %v", c.at, c.u.In), true
	}
	b := s.Inputs[1-c.k][c.u.In.Axis]
	e, err := SplitEinsum(s, shapes, c.k, b)
	if err != nil {
		for _, l := range s.Inputs[c.k] {
			if l == b {
				return fmt.Sprintf("read by %s: %v", c.at, err), true
			}
		}
		// Not a grouped linear layer: the per-sample gradient is
		// instantiated from the equation (dpengine/rule_einsum_general.go).
		c.u.Kind = KindElementwise
		return "", true
	}
	size := map[rune]int64{}
	for i, ls := range s.Inputs {
		for a, l := range ls {
			size[l] = shapes[i][a]
		}
	}
	prodOf := func(ls []rune) int64 {
		p := int64(1)
		for _, l := range ls {
			p *= size[l]
		}
		return p
	}
	c.u.Kind = KindLinear
	c.u.Layer = &Layer{Node: c.n.Name, Output: c.u.Output, Op: "Einsum", Operand: c.k,
		T: prodOf(e.R), D: prodOf(e.K), P: prodOf(e.N), Groups: prodOf(e.G)}
	return "", true
}
