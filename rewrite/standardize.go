package rewrite

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Standardized describes a convolution weight computed by weight
// standardization (BiT's and timm's StdConv2d, NFNet's ScaledStdConv2d,
// as the BatchNormalization rewrite leaves it: bnOnParamsRows): the
// parameter W's rows of K elements, one an output channel, standardized
// by a LayerNormalization without affine, x̂_o = (W_o − μ_o)/σ_o with
// σ_o² = v_o + ε, each row then scaled by γ_o, a constant or a gain
// parameter times a constant, and reshaped into the weight the Conv
// reads. The per-sample gradient of W's row is then the
// LayerNormalization's vector-Jacobian product of γ_o·g_o (g the
// gradient of the weight the layer reads), (γ_o/σ_o)·(g_o − (1ᵀg_o/K)·1 −
// (x̂_oᵀg_o/K)·x̂_o), and the gain's is s_o·x̂_oᵀg_o: the engine takes
// both squared norms from each sample's g in closed form
// (runtime.PerSampleOps.StandardizedNormTerms), or where the layer's
// decision is ghost from a ghost norm and two sums a row without forming
// g (StandardizedGhostTerms, Layer.decideStandardized), instead of keeping B
// per-sample gradients of the weight and taking them back through the
// computation (Use.Transform), and book-keeping's clipped sum from the
// layer's kept input and output gradient, taken back through the
// standardization once by its vector-Jacobian product in closed form
// (StandardizedVJP).
type Standardized struct {
	// Weight names W; Gain the gain parameter, "" where γ is a constant
	// or absent.
	Weight string `json:"weight"`
	Gain   string `json:"gain,omitempty"`
	// Rows and K are W's rows (output channels) and their length (the
	// layer's D).
	Rows int64 `json:"rows"`
	K    int64 `json:"k"`
	// Epsilon is the LayerNormalization's ε; Input its input (W's
	// elements in order) and Output its output, x̂.
	Epsilon float32 `json:"epsilon"`
	Input   string  `json:"input"`
	Output  string  `json:"output"`
	// Gamma names γ, the value the standardized rows are multiplied by
	// ("" for none), and Scaled the product's shape, over whose leading
	// axes γ varies (row by row) and over whose trailing ones (K elements)
	// it is constant.
	Gamma  string  `json:"gamma,omitempty"`
	Scaled []int64 `json:"scaled,omitempty"`
	// Scale is the product of the scalar constants the weight is
	// multiplied by besides γ (timm's 1/√fan-in).
	Scale float32 `json:"scale"`
	// GainScale is s (Rows values): Scale·γ = s ⊙ gain, row by row.
	GainScale []float32 `json:"gain_scale,omitempty"`
}

// throughReshapes follows v back through reshapes (and Identity), which
// copy their first input's elements in order, whose other inputs are
// constants.
func throughReshapes(v *graph.Value) *graph.Value {
	for v.Producer != nil && (reshapeOps[v.Producer.OpType] || v.Producer.OpType == "Identity") && len(v.Producer.Outputs) == 1 {
		for _, in := range v.Producer.Inputs[1:] {
			if in != nil && in.Const == nil {
				return v
			}
		}
		v = v.Producer.Inputs[0]
	}
	return v
}

// throughShifts follows v back through reshapes and additions of
// constants (a BatchNormalization's β), which leave the weight's
// vector-Jacobian product as it is.
func throughShifts(g *graph.Graph, v *graph.Value) *graph.Value {
	for {
		v = throughReshapes(v)
		n := v.Producer
		if n == nil || len(n.Inputs) != 2 || len(n.Outputs) != 1 || !n.Outputs[0].Shape.Static() || !n.Inputs[0].Shape.Static() {
			return v
		}
		switch {
		case (n.OpType == "Add" || n.OpType == "Sub") && constant(g, n.Inputs[1]) && sameShape(n.Inputs[0], n.Outputs[0]):
			v = n.Inputs[0]
		case n.OpType == "Add" && constant(g, n.Inputs[0]) && n.Inputs[1].Shape.Static() && sameShape(n.Inputs[1], n.Outputs[0]):
			v = n.Inputs[1]
		default:
			return v
		}
	}
}

// scalar returns the value of a constant of one element, no parameter.
func scalar(g *graph.Graph, v *graph.Value) (float32, bool) {
	if v == nil || v.IsParam() {
		return 0, false
	}
	f, ok := scalarOf(g, v)
	return float32(f), ok
}

// constant reports whether v is a constant (constOf), no parameter.
func constant(g *graph.Graph, v *graph.Value) bool {
	return v != nil && !v.IsParam() && constOf(g, v) != nil
}

// sameShape reports whether a and b have the same static shape (a shift
// that broadcasts its data would sum the weight's gradient).
func sameShape(a, b *graph.Value) bool {
	return a.Shape.Static() && b.Shape.Static() && slices.Equal(a.Shape.Ints(), b.Shape.Ints())
}

// matchStandardized reports how the Conv weight operand (of graph g) is computed by
// weight standardization with rows of k elements, or nil where it is
// computed otherwise.
func matchStandardized(g *graph.Graph, operand *graph.Value, k int64) *Standardized {
	if k < 2 || !operand.Shape.Static() {
		return nil
	}
	numel := operand.Shape.NumElements()
	st := &Standardized{K: k, Rows: numel / k}
	if st.Rows*k != numel {
		return nil
	}
	// Outward from the LayerNormalization: reshapes, constant shifts,
	// scalar constant factors and at most one product by γ, row by row.
	st.Scale = 1
	var ln *graph.Node
	for y := operand; ln == nil; {
		y = throughShifts(g, y)
		n := y.Producer
		switch {
		case n == nil:
			return nil
		case n.OpType == "LayerNormalization":
			ln = n
			continue
		case n.OpType != "Mul" || len(n.Inputs) != 2 || !y.Shape.Static():
			return nil
		}
		data, other := n.Inputs[0], n.Inputs[1]
		if !sameShape(data, y) {
			data, other = other, data
		}
		if !sameShape(data, y) {
			return nil
		}
		if c, ok := scalar(g, other); ok {
			st.Scale *= c
			y = data
			continue
		}
		if st.Gamma != "" || !perRow(other, y.Shape.Ints(), k) || !st.gainOf(g, other) {
			return nil
		}
		st.Gamma, st.Scaled = other.Name, y.Shape.Ints()
		y = data
	}
	if len(ln.Inputs) < 2 || len(ln.Outputs) > 1 && ln.Outputs[1] != nil || len(ln.Outputs) > 2 && ln.Outputs[2] != nil {
		return nil
	}
	for o := range st.GainScale {
		st.GainScale[o] *= st.Scale
	}
	x := ln.Inputs[0]
	if !constantOf(g, ln.Inputs[1], 1) || len(ln.Inputs) > 2 && ln.Inputs[2] != nil && !constantOf(g, ln.Inputs[2], 0) || !x.Shape.Static() || x.Shape.NumElements() != numel {
		return nil
	}
	dims := x.Shape.Ints()
	axis := ln.IntOr("axis", -1)
	if axis < 0 {
		axis += int64(len(dims))
	}
	if axis < 0 || axis >= int64(len(dims)) || prod(dims[axis:]) != k {
		return nil
	}
	eps, err := ln.Float("epsilon")
	if err != nil {
		return nil
	}
	w := throughReshapes(x)
	if !w.IsParam() || w.Producer != nil {
		return nil
	}
	st.Weight, st.Epsilon, st.Input, st.Output = w.Name, eps, x.Name, ln.Outputs[0].Name
	return st
}

// perRow reports whether gamma, multiplied into values of shape scaled
// whose rows are k trailing elements, is constant over each row.
func perRow(gamma *graph.Value, scaled []int64, k int64) bool {
	if !gamma.Shape.Static() || len(gamma.Shape) > len(scaled) {
		return false
	}
	split := len(scaled)
	for p := int64(1); p < k; {
		if split == 0 {
			return false
		}
		split--
		p *= scaled[split]
	}
	if prod(scaled[split:]) != k {
		return false
	}
	g := gamma.Shape.Ints()
	for d := split; d < len(scaled); d++ {
		if e := d - (len(scaled) - len(g)); e >= 0 && g[e] != 1 {
			return false
		}
	}
	return true
}

// gainOf follows γ back to a constant, or to a gain parameter of one
// value a row through reshapes and products with scalar constants (s),
// and records it; false for any other computation.
func (st *Standardized) gainOf(g *graph.Graph, gamma *graph.Value) bool {
	s := float32(1)
	v := gamma
	for {
		v = throughReshapes(v)
		if v.Producer == nil {
			break
		}
		n := v.Producer
		if n.OpType != "Mul" || len(n.Inputs) != 2 {
			return false
		}
		c, ok := scalar(g, n.Inputs[1])
		v = n.Inputs[0]
		if !ok {
			c, ok = scalar(g, n.Inputs[0])
			v = n.Inputs[1]
		}
		if !ok {
			return false
		}
		s *= c
	}
	switch {
	case v.IsParam():
		if !v.Shape.Static() || v.Shape.NumElements() != st.Rows {
			return false
		}
		st.Gain = v.Name
		st.GainScale = make([]float32, st.Rows)
		for o := range st.GainScale {
			st.GainScale[o] = s
		}
		return true
	case v.Const != nil:
		return v == throughReshapes(gamma) // a constant γ, read as it is
	}
	return false
}

// markStandardized sets Use.Standardized on the uses of every Conv weight
// operand computed by weight standardization (matchStandardized) from
// parameters that reach nothing else, and says so in the layer's reason.
func markStandardized(g *graph.Graph, p *Plan) {
	type key struct {
		out     string
		operand int
	}
	groups := map[key][]*Use{}
	var order []key
	owner := map[*Use]*Param{}
	for _, prm := range p.Params {
		if !prm.Trainable() {
			continue
		}
		for _, u := range prm.Uses {
			if !u.Transform || u.Op != "Conv" || u.Operand != 1 || u.Layer == nil {
				continue
			}
			k := key{u.Output, u.Operand}
			if groups[k] == nil {
				order = append(order, k)
			}
			groups[k] = append(groups[k], u)
			owner[u] = prm
		}
	}
	for _, k := range order {
		uses := groups[k]
		v := g.Values[uses[0].OperandValue]
		if v == nil {
			continue
		}
		st := matchStandardized(g, v, uses[0].Layer.D)
		if st == nil {
			continue
		}
		want := map[string]bool{st.Weight: true}
		if st.Gain != "" {
			want[st.Gain] = true
		}
		ok := len(uses) == len(want)
		for _, u := range uses {
			prm := owner[u]
			ok = ok && want[prm.Name] && !prm.Shared && len(prm.Uses) == 1
		}
		if !ok {
			continue
		}
		for _, u := range uses {
			u.Standardized = st
			u.Layer.decideStandardized(st, p.Priority)
		}
	}
}

// decideStandardized marks l as reading the standardized weight st and
// makes its layerwise decision (Decide) in ghost, mixed and bk, where the
// norms come in closed form: a ghost decision takes them from a ghost norm
// of the output gradient scaled row by row and two sums a row (dpengine's
// ghost form), an instantiate decision from each sample's instantiated
// gradient. A depthwise convolution's (one input channel a group) is
// always instantiated, as its own rule does for every weight; instantiate
// mode and book-keeping's per-layer clipping take the gradient back
// through the computation whatever the decision.
func (l *Layer) decideStandardized(st *Standardized, pr Priority) {
	l.Standardized = true
	const back = "(in instantiate mode, and bk with per-layer clipping, taken back through the computation)"
	if l.Groups > 1 && l.D == l.Taps {
		l.Decision = Instantiate
		l.Reason = fmt.Sprintf("a standardized depthwise weight (of %s): each sample's gradient is instantiated and its norm taken through the standardization in closed form %s", st.Weight, back)
		return
	}
	d, why := Decide(l.T, l.D, l.P, pr)
	l.Decision = d
	if d == Ghost {
		l.Reason = fmt.Sprintf("a standardized weight (of %s), %s: its norm through the standardization from a ghost norm of the output gradient scaled by the rows' coefficients, and each row's 1ᵀg and x̂ᵀg from the input convolved with x̂ %s", st.Weight, why, back)
		return
	}
	l.Reason = fmt.Sprintf("a standardized weight (of %s), %s: each sample's gradient is instantiated and its norm taken through the standardization in closed form %s", st.Weight, why, back)
}

// FuseStandardization writes every weight standardization decomposed as
// torch.var_mean exports it (BiT's original StdConv2d: v, m =
// var_mean(w, dim=[1, 2, 3], keepdim=True, unbiased=False); (w − m)/√(v + ε)),
//
//	mA = ReduceMean(x, A); d = Sub(x, mA); v = ReduceMean(d·d, A)
//	mB = ReduceMean(x, A); e = Sub(x, mB)          (or e = d)
//	y  = Div(e, Sqrt(Add(v, ε)))                   (or Mul(e, Reciprocal(Sqrt(…))))
//
// over the trailing axes A of a value x computed from initializers and
// constants alone (axes of extent 1 aside: BatchNormalization's (0, 2) of
// a (1, C, K) weight; the square may be Pow(d, 2)), as bnOnParamsRows writes
// the BatchNormalization form: x's rows reshaped, one LayerNormalization
// without affine, reshaped back — one node instead of ten, and the form
// the plan reads as weight standardization (Use.Standardized: its norms
// in closed form). ExportGraph writes the LayerNormalization's
// decomposition back before opset 17. A chain whose intermediate values
// anything else reads is left alone. shapes (StaticShapes) gives x's
// shape.
func FuseStandardization(g *graph.Graph, shapes map[string]graph.Shape) ([]Change, error) {
	relink(g)
	nm := newNamer(g)
	var changes []Change
	batch := g.InputDerived()
	for _, div := range append([]*graph.Node(nil), g.Nodes...) {
		m := matchStdChain(g, div, shapes, batch)
		if m == nil {
			continue
		}
		// The module's scope ("/conv/Div" → "/conv/standardize").
		scope := nodeLabel(m.r1) + "/standardize"
		if div := m.nodes[len(m.nodes)-1]; strings.LastIndex(div.Name, "/") > 0 {
			scope = div.Name[:strings.LastIndex(div.Name, "/")] + "/standardize"
		}
		b := newBuilder(g, nm, scope)
		rows := b.op("Reshape", nil, m.x, b.constant(int64Tensor([]int64{2}, m.lead, m.k)))
		ones := make([]float64, m.k)
		for i := range ones {
			ones[i] = 1
		}
		ln := b.op("LayerNormalization", []*onnxpb.AttributeProto{attrInt("axis", -1), attrFloat("epsilon", m.eps)},
			rows, b.constant(floatTensor(graph.Float32, []int64{m.k}, ones)))
		b.opInto(m.y, "Reshape", nil, ln, b.constant(int64Tensor([]int64{int64(len(m.dims))}, m.dims...)))
		replaceChain(g, m.nodes, b.nodes, m.y, m.consts)
		changes = append(changes, Change{Pass: "standardize", Target: scope,
			Action: fmt.Sprintf("decomposed weight standardization (%d nodes) → one LayerNormalization of %s's %d rows while training", len(m.nodes), m.x.Name, m.lead),
			Reason: "one pass instead of one per node, and the form whose per-sample norms come in closed form; the model file keeps the decomposition"})
	}
	return changes, g.Validate()
}

// stdChain is one decomposed standardization FuseStandardization matched.
type stdChain struct {
	x, y    *graph.Value
	r1      *graph.Node // x's first mean
	dims    []int64
	lead, k int64
	eps     float64
	nodes   []*graph.Node // the chain's nodes, div (writing y) last
	consts  []*graph.Value
}

// matchStdChain matches FuseStandardization's chain ending in div; nil
// where div does not end one or normalizes a value computed from the
// graph's inputs (batch, Graph.InputDerived).
func matchStdChain(g *graph.Graph, div *graph.Node, shapes map[string]graph.Shape, batch map[*graph.Value]bool) *stdChain {
	if !isBinary(div, "Div") && !isBinary(div, "Mul") {
		return nil
	}
	producer := func(v *graph.Value, op string) *graph.Node {
		if n := v.Producer; n != nil && n.OpType == op && n.Domain == "" && len(n.Outputs) == 1 {
			return n
		}
		return nil
	}
	// e/√(v + ε), or e·(1/√(v + ε)) as a decomposition of rsqrt writes it.
	var recip *graph.Node
	den, e := div.Inputs[1], div.Inputs[0]
	if div.OpType == "Mul" {
		if recip = producer(den, "Reciprocal"); recip == nil {
			den, e = e, den
			recip = producer(den, "Reciprocal")
		}
		if recip == nil {
			return nil
		}
		den = recip.Inputs[0]
	}
	sqrt := producer(den, "Sqrt")
	if sqrt == nil {
		return nil
	}
	add := producer(sqrt.Inputs[0], "Add")
	if !isBinary(add, "Add") {
		return nil
	}
	v, epsV := add.Inputs[0], add.Inputs[1]
	eps, ok := scalarOf(g, epsV)
	if !ok {
		v, epsV = epsV, v
		eps, ok = scalarOf(g, epsV)
	}
	if !ok || !(eps >= 0) || math.IsInf(eps, 0) {
		return nil
	}
	r2 := producer(v, "ReduceMean")
	if r2 == nil || r2.Input(0) == nil {
		return nil
	}
	m := &stdChain{y: div.Outputs[0], eps: eps, consts: []*graph.Value{epsV}}
	sq := r2.Input(0).Producer
	var d *graph.Value
	switch {
	case isBinary(sq, "Mul") && sq.Inputs[0] == sq.Inputs[1]:
		d = sq.Inputs[0]
	case isBinary(sq, "Pow") && scalarConst(g, sq.Inputs[1], 2):
		d = sq.Inputs[0]
		m.consts = append(m.consts, sq.Inputs[1])
	default:
		return nil
	}
	subA, subB := producer(d, "Sub"), producer(e, "Sub")
	if !isBinary(subA, "Sub") || !isBinary(subB, "Sub") || subA.Inputs[0] != subB.Inputs[0] {
		return nil
	}
	x := subA.Inputs[0]
	r1, rB := producer(subA.Inputs[1], "ReduceMean"), producer(subB.Inputs[1], "ReduceMean")
	if r1 == nil || rB == nil || r1.Input(0) != x || rB.Input(0) != x {
		return nil
	}
	dims := shapeOf(x, shapes)
	if !dims.Static() || len(dims) < 2 {
		return nil
	}
	m.dims = dims.Ints()
	a := -1
	for _, r := range []*graph.Node{r1, rB, r2} {
		from, ok := trailingFrom(g, r, m.dims)
		if !ok || a >= 0 && from != a {
			return nil
		}
		a = from
		if ax := r.Input(1); ax != nil {
			m.consts = append(m.consts, ax)
		}
	}
	m.k, m.lead = prod(m.dims[a:]), prod(m.dims[:a])
	if m.k < 2 || batch[x] {
		return nil
	}
	// The chain's nodes, once each, div last; nothing outside reads
	// their values.
	set := map[*graph.Node]bool{}
	for _, n := range []*graph.Node{r1, rB, subA, subB, sq, r2, add, sqrt, recip} {
		if n != nil && !set[n] {
			set[n] = true
			m.nodes = append(m.nodes, n)
		}
	}
	for _, n := range m.nodes {
		for _, o := range n.Outputs {
			if isGraphOutput(g, o) {
				return nil
			}
			for _, c := range o.Consumers {
				if !set[c] && c != div {
					return nil
				}
			}
		}
	}
	m.x, m.r1, m.nodes = x, r1, append(m.nodes, div)
	return m
}

// trailingFrom returns a where ReduceMean n (keeping its axes) reduces the
// axes a … rank−1 of its input of shape dims, axes of extent 1 aside
// (BatchNormalization's (0, 2) of a (1, C, K) weight is its rows').
func trailingFrom(g *graph.Graph, n *graph.Node, dims []int64) (int, bool) {
	rank := len(dims)
	axes, ok := keptMeanAxes(g, n, rank)
	if !ok {
		return 0, false
	}
	red := make([]bool, rank)
	for _, ax := range axes {
		red[ax] = true
	}
	// The reduced axes, unit ones aside, are a trailing run from a.
	a := rank
	for a > 0 && (red[a-1] || dims[a-1] == 1) {
		a--
	}
	for d := 0; d < a; d++ {
		if red[d] && dims[d] != 1 {
			return 0, false
		}
	}
	// Leading unit axes of the run belong to the rows (its first reduced
	// axis of extent above 1 starts it).
	for a < rank && dims[a] == 1 {
		a++
	}
	if a == rank {
		return 0, false
	}
	return a, true
}
