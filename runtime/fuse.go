package runtime

import (
	"math"
	"sort"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Compile-time fusion of decomposed operator chains.
//
// torch 1.13 exports nn.LayerNorm as ReduceMean → Sub → Pow(2) →
// ReduceMean → Add(eps) → Sqrt → Div followed by Mul(γ) and Add(β), and
// nn.GELU as Div(√2) → Erf → Add(1) → Mul(x) → Mul(0.5) (approximate="tanh":
// Mul(x,x) → Mul(x) → Mul(κ) → Add(x) → Mul(√(2/π)) → Tanh → Add(1) →
// Mul(x) → Mul(0.5)). Run op by op, each link is a full pass over the
// activation forward and backward, through the generic broadcast
// machinery, with its own saved buffers. Compile recognizes these chains
// and runs each as one node: the normalization (up to the Div) as
// FusedNormalize, the activation as FusedGelu / FusedGeluTanh. The graph is
// not changed, so an exported model keeps the exporter's nodes.
//
// The affine Mul(γ) and Add(β) after the normalization are not fused: they
// read trainable parameters, and the DP engine sees γ and β through the
// hooks of exactly those nodes (elementwise parameters, DESIGN §3).
//
// A chain is fused only when nothing outside it can observe its
// intermediate values: each has all its consumers inside the chain, is not
// a graph output, and neither it nor any constant operand of the chain is
// a trainable parameter or derived from one. The chain's input must not be
// a parameter or derived value either, so that no node of the chain would
// have been hooked (HookEvent). Hooks, KeepActivations and KeepHooked only
// ever concern the chain's input and output, which stay ordinary plan
// values. Options.NoFusion turns fusion off.
//
// The Slice nodes that split one value along one axis into disjoint parts
// (the q, k and v of a packed attention projection) run as one
// FusedSplit node: its backward writes the input gradient in one pass,
// where three Slice backwards would each clear and write a full-size
// gradient that the plan then adds up. Here nothing is hidden: every
// slice output stays a plan value.

// Operator names of fused nodes. They are not ONNX operators and never
// appear in a graph: only in plan nodes and kernel names.
const (
	fusedNormalize = "FusedNormalize"
	fusedGelu      = "FusedGelu"
	fusedGeluTanh  = "FusedGeluTanh"
	fusedSplit     = "FusedSplit"
)

// fusion is one matched chain.
type fusion struct {
	op    string
	nodes []*node // the chain (or the slices of a split)
	x, y  *tensor
	eps   float32 // FusedNormalize
	// FusedSplit: the slices' outputs, axis and starts, in the order of
	// nodes (ascending starts); y is nil.
	outs   []*tensor
	axis   int
	starts []int
}

// fuser holds the state of chain matching.
type fuser struct {
	p     *Plan
	isOut map[*tensor]bool
	taken map[*node]bool // nodes of chains already matched
}

// observed returns the values the caller reads, which no fusion may
// remove: the graph's outputs and the kept values (Options.KeepValues).
func (p *Plan) observed() map[*tensor]bool {
	m := map[*tensor]bool{}
	for t := range p.kept {
		m[t] = true
	}
	for _, t := range p.outputs {
		m[t] = true
	}
	return m
}

// fuse replaces every fusable chain of p.nodes by one node. It needs the
// consumer lists (linkConsumers), which it leaves stale.
func (p *Plan) fuse() {
	f := &fuser{p: p, isOut: p.observed(), taken: map[*node]bool{}}
	var found []*fusion
	for _, nd := range p.nodes {
		if f.taken[nd] {
			continue
		}
		var m *fusion
		switch nd.g.OpType {
		case "ReduceMean":
			m = f.matchNormalize(nd)
		case "Erf":
			m = f.matchGelu(nd)
		case "Tanh":
			m = f.matchGeluTanh(nd)
		case "Slice":
			m = f.matchSplit(nd) // hides nothing: no safety check needed
		}
		if m == nil || m.op != fusedSplit && !f.safe(m) {
			continue
		}
		for _, c := range m.nodes {
			f.taken[c] = true
		}
		found = append(found, m)
	}
	if len(found) == 0 {
		return
	}
	// A chain runs where its last node did (it produces y there); a split
	// where its first slice did (each output's consumers follow its own
	// slice, and the input is ready before the first).
	at := map[*node]*fusion{}
	for _, m := range found {
		pos := m.nodes[0]
		for _, c := range m.nodes {
			if m.op == fusedSplit && c.idx < pos.idx || m.op != fusedSplit && c.idx > pos.idx {
				pos = c
			}
		}
		at[pos] = m
	}
	nodes := p.nodes[:0:0]
	for _, nd := range p.nodes {
		if m := at[nd]; m != nil {
			nodes = append(nodes, m.node(nd))
			continue
		}
		if !f.taken[nd] {
			nodes = append(nodes, nd)
		}
	}
	for _, m := range found {
		for _, c := range m.nodes {
			for _, t := range c.out {
				if t != nil && t != m.y && m.op != fusedSplit {
					delete(p.tensors, t.v)
				}
			}
		}
	}
	p.setNodes(nodes)
}

// setNodes makes nodes the plan's, numbering them and their outputs'
// producers afresh (after a fusion replaced some).
func (p *Plan) setNodes(nodes []*node) {
	p.nodes = nodes
	for i, nd := range p.nodes {
		nd.idx = i
		for _, t := range nd.out {
			if t != nil {
				t.prod = i
			}
		}
	}
}

// node builds the plan node that replaces the matched nodes, at the place
// of at (see fuse).
func (m *fusion) node(at *node) *node {
	if m.op == fusedSplit {
		g := &graph.Node{Name: at.g.Name, OpType: m.op, Opset: at.g.Opset, Inputs: []*graph.Value{m.x.v}}
		for _, o := range m.outs {
			g.Outputs = append(g.Outputs, o.v)
		}
		return &node{g: g, in: []*tensor{m.x}, out: m.outs, fused: len(m.nodes), build: buildFusedSplit(m.axis, m.starts)}
	}
	g := &graph.Node{
		Name:    at.g.Name,
		OpType:  m.op,
		Opset:   at.g.Opset,
		Inputs:  []*graph.Value{m.x.v},
		Outputs: []*graph.Value{m.y.v},
	}
	nd := &node{g: g, in: []*tensor{m.x}, out: []*tensor{m.y}, fused: len(m.nodes)}
	switch m.op {
	case fusedNormalize:
		nd.build = buildFusedNormalize(m.eps)
	case fusedGelu:
		nd.build = buildFusedGelu(false)
	case fusedGeluTanh:
		nd.build = buildFusedGelu(true)
	}
	return nd
}

// safe checks that nothing outside the chain observes its intermediate
// values (see the comment at the top of this file).
func (f *fuser) safe(m *fusion) bool {
	x := m.x
	if x == nil || m.y == nil || x.param || x.derived || x.i64 != nil || x.b != nil {
		return false
	}
	in := map[*node]bool{}
	for _, c := range m.nodes {
		if f.taken[c] || in[c] {
			return false
		}
		in[c] = true
	}
	inner := map[*tensor]bool{}
	for _, c := range m.nodes {
		for _, t := range c.out {
			if t != nil && t != m.y {
				inner[t] = true
			}
		}
	}
	for _, c := range m.nodes {
		for _, t := range c.in {
			switch {
			case t == nil, t == x, inner[t]:
			case t.isConst && !t.param && !t.derived:
			default:
				return false
			}
		}
	}
	for t := range inner {
		if f.isOut[t] || t.param || t.derived || len(t.cons) == 0 {
			return false
		}
		for _, c := range t.cons {
			if !in[c] {
				return false
			}
		}
	}
	return true
}

// only returns the single node consuming t, or nil.
func (f *fuser) only(t *tensor) *node {
	if t == nil || len(t.cons) != 1 {
		return nil
	}
	return t.cons[0]
}

// prod returns the node producing t, or nil.
func (f *fuser) prod(t *tensor) *node {
	if t == nil || t.prod < 0 {
		return nil
	}
	return f.p.nodes[t.prod]
}

// is reports whether nd applies op to n inputs with one output.
func is(nd *node, op string, n int) bool {
	if nd == nil || nd.g.OpType != op || len(nd.in) != n || len(nd.out) != 1 || nd.out[0] == nil {
		return false
	}
	for _, t := range nd.in {
		if t == nil {
			return false
		}
	}
	return true
}

// scalar reports whether t is a non-trainable float constant of one
// element within 1e-6 (relative) of want.
func scalar(t *tensor, want float64) bool {
	v, ok := scalarValue(t)
	return ok && math.Abs(float64(v)-want) <= 1e-6*math.Abs(want)
}

func scalarValue(t *tensor) (float32, bool) {
	if t == nil || !t.isConst || t.param || t.derived || len(t.host) != 1 || t.n != 1 {
		return 0, false
	}
	return t.host[0], true
}

// withConst returns the operand of the binary node nd that is not the
// scalar constant want (nil if neither operand is; a commutative op
// accepts the constant on either side).
func withConst(nd *node, op string, want float64, commutes bool) *tensor {
	if !is(nd, op, 2) {
		return nil
	}
	if scalar(nd.in[1], want) {
		return nd.in[0]
	}
	if commutes && scalar(nd.in[0], want) {
		return nd.in[1]
	}
	return nil
}

// other returns the operand of the binary node nd other than t (nil if t is
// not an operand).
func other(nd *node, t *tensor) *tensor {
	switch {
	case nd == nil || !is(nd, nd.g.OpType, 2):
		return nil
	case nd.in[0] == t:
		return nd.in[1]
	case nd.in[1] == t:
		return nd.in[0]
	}
	return nil
}

// lastAxisMean reports whether nd is a ReduceMean of x over its last axis
// only, keeping the reduced axis.
func lastAxisMean(nd *node, x *tensor) bool {
	if nd == nil || nd.g.OpType != "ReduceMean" || len(nd.in) == 0 || nd.in[0] != x || len(nd.out) != 1 || nd.out[0] == nil {
		return false
	}
	r := len(x.shape)
	if r == 0 || nd.g.IntOr("keepdims", 1) != 1 {
		return false
	}
	axes, noop, err := nd.g.ReduceAxes(r)
	if err != nil || noop || len(axes) != 1 || axes[0] != r-1 {
		return false
	}
	want := append(append([]int(nil), x.shape[:r-1]...), 1)
	return sameInts(nd.out[0].shape, want)
}

// matchNormalize matches, from its first ReduceMean, the chain
// m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2));
// y = Div(d, Sqrt(Add(v, eps))), over the last axis.
func (f *fuser) matchNormalize(r1 *node) *fusion {
	x := r1.in[0]
	if x == nil || !lastAxisMean(r1, x) || x.n == 0 {
		return nil
	}
	sub := f.only(r1.out[0])
	if !is(sub, "Sub", 2) || sub.in[0] != x || sub.in[1] != r1.out[0] {
		return nil
	}
	d := sub.out[0]
	if !sameInts(d.shape, x.shape) || len(d.cons) != 2 {
		return nil
	}
	var sq, div *node
	for _, c := range d.cons {
		switch {
		case is(c, "Pow", 2) && c.in[0] == d && scalar(c.in[1], 2),
			is(c, "Mul", 2) && c.in[0] == d && c.in[1] == d:
			sq = c
		case is(c, "Div", 2) && c.in[0] == d:
			div = c
		}
	}
	if sq == nil || div == nil {
		return nil
	}
	r2 := f.only(sq.out[0])
	if !lastAxisMean(r2, sq.out[0]) || len(r2.in) > 1 && r2.in[1] != nil && !r2.in[1].isConst {
		return nil
	}
	add := f.only(r2.out[0])
	if !is(add, "Add", 2) {
		return nil
	}
	epsT := other(add, r2.out[0])
	eps, ok := scalarValue(epsT)
	if !ok || !(eps >= 0) || math.IsInf(float64(eps), 0) {
		return nil
	}
	sqrt := f.only(add.out[0])
	if !is(sqrt, "Sqrt", 1) || f.only(sqrt.out[0]) != div || div.in[1] != sqrt.out[0] {
		return nil
	}
	if !sameInts(div.out[0].shape, x.shape) {
		return nil
	}
	nodes := []*node{r1, sub, sq, r2, add, sqrt, div}
	// The axes of an opset-18 ReduceMean come as an input: a constant the
	// chain reads, like eps.
	return &fusion{op: fusedNormalize, nodes: nodes, x: x, y: div.out[0], eps: eps}
}

// geluTail matches the common end of both GELU chains, from o = 1 + erf(…)
// (or 1 + tanh(…)): y = Mul(Mul(x, o), 0.5) as torch's TorchScript exporter
// writes it, y = Mul(x, Mul(0.5, o)) as its dynamo exporter (onnxscript's
// torchlib) does, or y = Mul(Mul(x, 0.5), o) as hand-written
// x * 0.5 * (1 + erf(…)) exports.
func (f *fuser) geluTail(o, x *tensor) (nodes []*node, y *tensor) {
	mm := f.only(o)
	if !is(mm, "Mul", 2) {
		return nil, nil
	}
	if withConst(mm, "Mul", 0.5, true) == o { // Mul(0.5, o), then Mul(x, ·)
		last := f.only(mm.out[0])
		if !is(last, "Mul", 2) || other(last, mm.out[0]) != x {
			return nil, nil
		}
		return []*node{mm, last}, last.out[0]
	}
	switch h := other(mm, o); {
	case h == x: // Mul(x, o), then Mul(·, 0.5)
		last := f.only(mm.out[0])
		if withConst(last, "Mul", 0.5, true) != mm.out[0] {
			return nil, nil
		}
		return []*node{mm, last}, last.out[0]
	case h != nil: // Mul(Mul(x, 0.5), o)
		half := f.prod(h)
		if withConst(half, "Mul", 0.5, true) != x || f.only(h) != mm {
			return nil, nil
		}
		return []*node{half, mm}, mm.out[0]
	}
	return nil, nil
}

// matchGelu matches, from its Erf, y = ½·x·(1 + erf(x/√2)) with the
// division written as Div(x, √2) or Mul(x, 1/√2).
func (f *fuser) matchGelu(e *node) *fusion {
	if !is(e, "Erf", 1) {
		return nil
	}
	scale := f.prod(e.in[0])
	x := withConst(scale, "Div", math.Sqrt2, false)
	if x == nil {
		x = withConst(scale, "Mul", 1/math.Sqrt2, true)
	}
	if x == nil || !sameInts(x.shape, e.out[0].shape) || f.only(scale.out[0]) != e {
		return nil
	}
	add := f.only(e.out[0])
	if withConst(add, "Add", 1, true) != e.out[0] {
		return nil
	}
	tail, y := f.geluTail(add.out[0], x)
	if y == nil || !sameInts(y.shape, x.shape) {
		return nil
	}
	return &fusion{op: fusedGelu, nodes: append([]*node{scale, e, add}, tail...), x: x, y: y}
}

// matchGeluTanh matches, from its Tanh, torch's export of
// gelu(approximate="tanh"): y = ½·x·(1 + tanh(√(2/π)·(x + κ·x·(x·x)))),
// κ = 0.044715, with x³ also accepted as Pow(x, 3).
func (f *fuser) matchGeluTanh(th *node) *fusion {
	if !is(th, "Tanh", 1) {
		return nil
	}
	betaMul := f.prod(th.in[0])
	a := withConst(betaMul, "Mul", math.Sqrt(2/math.Pi), true)
	add := f.prod(a)
	if a == nil || !is(add, "Add", 2) {
		return nil
	}
	// Add(x, κ·x³): either operand may be the cubic term.
	for k := 0; k < 2; k++ {
		x, cubic := add.in[k], add.in[1-k]
		kMul := f.prod(cubic)
		c := withConst(kMul, "Mul", 0.044715, true)
		if c == nil {
			continue
		}
		cube := f.prod(c)
		var pre []*node
		switch {
		case is(cube, "Pow", 2) && cube.in[0] == x && scalar(cube.in[1], 3):
			pre = []*node{cube}
		case is(cube, "Mul", 2):
			s := other(cube, x)
			sq := f.prod(s)
			if s == nil || !is(sq, "Mul", 2) || sq.in[0] != x || sq.in[1] != x {
				continue
			}
			pre = []*node{sq, cube}
		default:
			continue
		}
		one := f.only(th.out[0])
		if withConst(one, "Add", 1, true) != th.out[0] {
			return nil
		}
		tail, y := f.geluTail(one.out[0], x)
		if y == nil || !sameInts(y.shape, x.shape) || !sameInts(th.out[0].shape, x.shape) {
			return nil
		}
		nodes := append(pre, kMul, add, betaMul, th, one)
		return &fusion{op: fusedGeluTanh, nodes: append(nodes, tail...), x: x, y: y}
	}
	return nil
}

// buildFusedNormalize compiles FusedNormalize: rows of the last axis
// normalized to zero mean and unit variance. The backward reads the output
// (the normalized rows) and the per-row 1/σ, so the input need not be kept.
func buildFusedNormalize(eps float32) builder {
	return func(p *Plan, nd *node) error {
		x, y := nd.in[0], nd.out[0]
		L := x.shape[len(x.shape)-1]
		rows := x.n / L
		// 1/σ of every row, for the backward: a node-owned device
		// buffer.
		buf, err := p.dev.Alloc(rows)
		if err != nil {
			return err
		}
		inv := buf.Floats()
		nd.saveOut = true
		nd.fwd = func() { p.ops.NormalizeRows(x.data, y.data, L, eps, inv) }
		nd.bwd = func() { p.ops.NormalizeRowsBackward(y.data, y.grad, inv, L, nd.dIn[0]) }
		return nil
	}
}

// buildFusedGelu compiles a fused GELU (ElementwiseOps.Gelu, in its tanh
// form when tanh is true); the backward reads the input.
func buildFusedGelu(tanh bool) builder {
	return func(p *Plan, nd *node) error {
		x, y := nd.in[0], nd.out[0]
		nd.saveIn[0] = true
		nd.fwd = func() { p.ops.Gelu(tanh, x.data, y.data) }
		nd.bwd = func() { p.ops.GeluBackward(tanh, x.data, y.grad, nd.dIn[0]) }
		return nil
	}
}

// sliceAlong returns the one axis along which the Slice node c takes a
// contiguous part [start, start+count) of its input (step 1, all of every
// other axis).
func sliceAlong(c *node) (axis, start int, ok bool) {
	x := c.in[0]
	if len(c.out) != 1 || c.out[0] == nil || x == nil {
		return 0, 0, false
	}
	for _, t := range c.in[1:] {
		if t != nil && !t.isConst {
			return 0, 0, false
		}
	}
	in := make([]int64, len(x.shape))
	for i, d := range x.shape {
		in[i] = int64(d)
	}
	s, err := c.g.ResolveSlice(in)
	if err != nil {
		return 0, 0, false
	}
	axis = -1
	for k := range in {
		if s.Start[k] == 0 && s.Count[k] == in[k] {
			continue
		}
		if axis >= 0 || s.Step[k] != 1 || s.Count[k] <= 0 {
			return 0, 0, false
		}
		axis, start = k, int(s.Start[k])
	}
	return axis, start, axis >= 0
}

// matchSplit gathers the Slice consumers of s0's input that take disjoint
// parts along the same axis as s0; two or more make a split. The input
// must not be a parameter or derived from parameters only, so that no
// slice was hooked.
func (f *fuser) matchSplit(s0 *node) *fusion {
	x := s0.in[0]
	if x == nil || x.param || x.derived || x.i64 != nil || x.b != nil {
		return nil
	}
	axis, _, ok := sliceAlong(s0)
	if !ok {
		return nil
	}
	type part struct {
		nd    *node
		start int
	}
	var parts []part
	for _, c := range x.cons {
		if c.g.OpType != "Slice" || c.in[0] != x || f.taken[c] {
			continue
		}
		if ax, st, ok := sliceAlong(c); ok && ax == axis {
			parts = append(parts, part{c, st})
		}
	}
	if len(parts) < 2 {
		return nil
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].start < parts[j].start })
	m := &fusion{op: fusedSplit, x: x, axis: axis}
	end := 0
	for _, pt := range parts {
		if pt.start < end {
			return nil // overlapping parts: their gradients would add
		}
		end = pt.start + pt.nd.out[0].shape[axis]
		m.nodes = append(m.nodes, pt.nd)
		m.outs = append(m.outs, pt.nd.out[0])
		m.starts = append(m.starts, pt.start)
	}
	return m
}

// buildFusedSplit compiles FusedSplit: the outputs are disjoint parts of
// the input along axis, starting at starts (ascending). The backward
// copies each output's gradient into place and zeroes the rest (gaps, and
// the parts of outputs that do not reach the loss).
func buildFusedSplit(axis int, starts []int) builder {
	return func(p *Plan, nd *node) error {
		x := nd.in[0]
		outer, inner := numel(x.shape[:axis]), numel(x.shape[axis+1:])
		rowX := x.shape[axis] * inner
		off, size := make([]int, len(nd.out)), make([]int, len(nd.out))
		for k, o := range nd.out {
			off[k], size[k] = starts[k]*inner, o.shape[axis]*inner
		}
		b := NewRowBlocks(outer, rowX, off, size)
		ys, dys := make([][]float32, len(nd.out)), make([][]float32, len(nd.out))
		nd.fwd = func() {
			for k, o := range nd.out {
				ys[k] = o.data
			}
			p.ops.Split(x.data, b, ys)
		}
		nd.bwd = func() {
			for k, o := range nd.out {
				dys[k] = o.grad
			}
			p.ops.Concat(dys, b, nd.dIn[0])
		}
		return nil
	}
}
