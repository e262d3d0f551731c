package rewrite

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

// BatchLayout locates the batch inside a tensor. Axis Axis has size
// Outer·B·Inner, and its index is (o·B + b)·Inner + i for sample b: the
// batch is the middle digit of that axis. A plain (B, …) tensor has Axis 0
// and Outer = Inner = 1. Exports put the batch elsewhere: torchvision's
// nn.MultiheadAttention runs its input projection on (T, B, D) tokens
// (Axis 1) and its output projection as a Gemm on (T·B, D) rows (Axis 0,
// Outer T); attention heads are (B·H, T, d) (Axis 0, Inner H).
type BatchLayout struct {
	Axis  int   `json:"axis"`
	Outer int64 `json:"outer"`
	Inner int64 `json:"inner"`
}

// Plain reports whether the batch is axis 0 on its own.
func (l BatchLayout) Plain() bool { return l.Axis == 0 && l.Outer == 1 && l.Inner == 1 }

// String describes the layout, e.g. "axis 0 (17×B×1)".
func (l BatchLayout) String() string {
	s := fmt.Sprintf("axis %d", l.Axis)
	if l.Outer != 1 || l.Inner != 1 {
		s += fmt.Sprintf(" (%d×B×%d)", l.Outer, l.Inner)
	}
	return s
}

type layoutKind int

const (
	indep   layoutKind = iota // does not depend on the batch (constants, parameters)
	batched                   // carries the batch as described by the layout
	mixed                     // samples interact: per-sample gradients are undefined
	unknown                   // the batch could not be followed
)

type bstate struct {
	kind layoutKind
	l    BatchLayout
	why  string // origin of mixed/unknown
}

// layoutInfo is the result of the batch-axis analysis of a graph with
// static shapes.
type layoutInfo struct {
	batch     int64
	states    map[*graph.Value]bstate
	problems  []string      // samples interact
	warnings  []string      // batch lost track of
	problemAt []*graph.Node // the node of each problem
}

func (li *layoutInfo) state(v *graph.Value) bstate {
	if v == nil {
		return bstate{kind: indep}
	}
	return li.states[v]
}

// analyzeLayout follows the batch axis from the graph inputs (batch on
// axis 0) through every node of g, whose shapes must be inferred for the
// given batch size (≥ 2, so that the batch is told apart from unit axes).
func analyzeLayout(g *graph.Graph, batch int64) *layoutInfo {
	li := &layoutInfo{batch: batch, states: map[*graph.Value]bstate{}}
	for _, v := range g.Inputs {
		li.states[v] = bstate{kind: batched, l: BatchLayout{Axis: 0, Outer: 1, Inner: 1}}
	}
	for _, n := range g.Nodes {
		worst := indep
		var why string
		for _, in := range n.Inputs {
			s := li.state(in)
			// mixed beats unknown beats batched beats indep
			rank := map[layoutKind]int{indep: 0, batched: 1, unknown: 2, mixed: 3}
			if rank[s.kind] > rank[worst] {
				worst, why = s.kind, s.why
			}
		}
		var outs []bstate
		switch worst {
		case indep:
			outs = nil // all outputs independent
		case mixed, unknown:
			outs = []bstate{{kind: worst, why: why}}
		default:
			s := li.rule(n)
			if s.kind == mixed || s.kind == unknown {
				s.why = fmt.Sprintf("%s %s: %s", n.OpType, nodeLabel(n), s.why)
				if s.kind == mixed {
					li.problems = append(li.problems, s.why+" (samples interact)")
					li.problemAt = append(li.problemAt, n)
				} else {
					li.warnings = append(li.warnings, s.why)
				}
			}
			outs = []bstate{s}
		}
		for _, o := range n.Outputs {
			if o == nil {
				continue
			}
			if outs == nil {
				li.states[o] = bstate{kind: indep}
				continue
			}
			li.states[o] = outs[0]
		}
	}
	return li
}

var sameLayoutOps = set("Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
	"Tanh", "Erf", "Exp", "Log", "Softplus", "Softsign", "Mish", "Gelu", "Sin", "Cos", "Round", "Sign",
	"Neg", "Abs", "Sqrt", "Reciprocal", "Floor", "Ceil", "Not", "IsNaN", "IsInf", "Identity", "Cast",
	"CastLike", "Dropout", "Shrink", "ThresholdedRelu")

var broadcastOps = set("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less",
	"LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu", "Clip", "BitShift")

// perImage ops treat each index of axis 0 separately; perChannel ops also
// treat each index of axis 1 separately.
var perImageOps = set("Conv", "ConvTranspose", "LRN", "GroupNormalization", "DepthToSpace", "SpaceToDepth")
var perChannelOps = set("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
	"GlobalLpPool", "InstanceNormalization", "BatchNormalization")

var reduceOps = set("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
	"ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")

var reshapeOps = set("Reshape", "Flatten", "Squeeze", "Unsqueeze")

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// resizeLayout: Resize and Upsample interpolate along each axis
// separately, so samples stay apart unless the batch axis itself is
// resized (any axis but the batch's may be, the channels included).
func resizeLayout(n *graph.Node, x bstate) bstate {
	if x.kind != batched {
		return lost("a parameter input carries the batch")
	}
	in, okd := dims(n.Input(0))
	if !okd {
		return lost("input shape unknown")
	}
	s, err := n.ResizeSpec(in)
	if err != nil {
		return lost("%v", err)
	}
	a, err := s.Axis(x.l.Axis)
	if err != nil {
		return lost("%v", err)
	}
	if !a.Identity() {
		return mix("resizes the batch axis %d (%d → %d)", x.l.Axis, a.In, a.Out)
	}
	return ok(x.l)
}

func ok(l BatchLayout) bstate       { return bstate{kind: batched, l: l} }
func mix(f string, a ...any) bstate { return bstate{kind: mixed, why: fmt.Sprintf(f, a...)} }
func lost(f string, a ...any) bstate {
	return bstate{kind: unknown, why: fmt.Sprintf(f, a...)}
}

func dims(v *graph.Value) ([]int64, bool) {
	if v == nil || !v.Shape.Static() {
		return nil, false
	}
	return v.Shape.Ints(), true
}

// rule computes the layout of n's outputs when at least one input carries
// the batch and none is mixed or unknown.
func (li *layoutInfo) rule(n *graph.Node) bstate {
	if n.Domain != "" {
		return lost("operator domain %q has no batch rule", n.Domain)
	}
	x := li.state(n.Input(0))
	op := n.OpType
	switch {
	case op == "Einsum":
		return li.einsumLayout(n)
	case sameLayoutOps[op]:
		if x.kind != batched {
			return lost("only a secondary input carries the batch")
		}
		return ok(x.l)
	case broadcastOps[op]:
		return li.broadcast(n)
	case op == "Resize" || op == "Upsample":
		return resizeLayout(n, x)
	case perImageOps[op] || perChannelOps[op]:
		if x.kind != batched {
			return lost("a parameter input carries the batch")
		}
		if op == "BatchNormalization" && bnTraining(n) {
			return mix("computes batch statistics (training_mode); rewrite it with --bn groupnorm or --bn freeze")
		}
		if x.l.Axis == 0 || (x.l.Axis == 1 && perChannelOps[op]) {
			return ok(x.l)
		}
		return mix("the batch is on axis %d, which %s combines", x.l.Axis, op)
	case op == "LayerNormalization":
		if x.kind != batched {
			return lost("a parameter input carries the batch")
		}
		a, _ := n.Int("axis")
		ax := int(a)
		if in, okd := dims(n.Input(0)); okd && ax < 0 {
			ax += len(in)
		}
		if x.l.Axis >= ax {
			return mix("normalizes over axes ≥ %d, which include the batch axis %d", ax, x.l.Axis)
		}
		return ok(x.l)
	case op == "Pad":
		in, okd := dims(n.Input(0))
		pads, err := n.PadAmounts(len(in))
		if !okd || err != nil {
			return lost("pads unknown")
		}
		if pads[x.l.Axis] != 0 || pads[x.l.Axis+len(in)] != 0 {
			return lost("pads the batch axis")
		}
		return ok(x.l)
	case reduceOps[op]:
		in, okd := dims(n.Input(0))
		if !okd {
			return lost("input shape unknown")
		}
		axes, noop, err := n.ReduceAxes(len(in))
		if err != nil {
			return lost("axes unknown: %v", err)
		}
		if noop {
			return ok(x.l)
		}
		return reduceLayout(x.l, axes, n.IntOr("keepdims", 1) != 0)
	case op == "ArgMax" || op == "ArgMin":
		in, okd := dims(n.Input(0))
		if !okd {
			return lost("input shape unknown")
		}
		a, _ := n.Int("axis")
		if a < 0 {
			a += int64(len(in))
		}
		return reduceLayout(x.l, []int{int(a)}, n.IntOr("keepdims", 1) != 0)
	case op == "Softmax" || op == "LogSoftmax" || op == "Hardmax":
		in, okd := dims(n.Input(0))
		if !okd {
			return lost("input shape unknown")
		}
		a, _ := n.Int("axis")
		if a < 0 {
			a += int64(len(in))
		}
		if n.Opset < 13 { // coerced to 2-D at axis
			if x.l.Axis >= int(a) {
				return mix("normalizes over axes ≥ %d, which include the batch axis %d", a, x.l.Axis)
			}
			return ok(x.l)
		}
		if x.l.Axis == int(a) {
			return mix("normalizes over the batch axis %d", a)
		}
		return ok(x.l)
	case op == "CumSum":
		in, okd := dims(n.Input(0))
		ax := n.Input(1)
		if !okd || ax == nil || ax.Const == nil || ax.Const.Len() != 1 {
			return lost("axis unknown")
		}
		a := int(ax.Const.At(0))
		if a < 0 {
			a += len(in)
		}
		if a == x.l.Axis {
			return mix("accumulates along the batch axis")
		}
		return ok(x.l)
	case op == "MatMul":
		return li.matmul(n)
	case op == "Gemm":
		return li.gemm(n)
	case op == "Transpose":
		in, okd := dims(n.Input(0))
		if !okd {
			return lost("input shape unknown")
		}
		perm, err := n.Perm(len(in))
		if err != nil {
			return lost("%v", err)
		}
		for j, p := range perm {
			if p == x.l.Axis {
				l := x.l
				l.Axis = j
				return ok(l)
			}
		}
		return lost("bad perm")
	case reshapeOps[op]:
		if x.kind != batched {
			return lost("the shape input carries the batch")
		}
		in, ok1 := dims(n.Input(0))
		out, ok2 := dims(n.Outputs[0])
		if !ok1 || !ok2 {
			return lost("shapes unknown")
		}
		l, found := reshapeLayout(in, x.l, out, li.batch)
		if !found {
			return lost("reshapes %v to %v, splitting the batch across axes", in, out)
		}
		return ok(l)
	case op == "Concat":
		a, _ := n.Int("axis")
		out, okd := dims(n.Outputs[0])
		if !okd {
			return lost("output shape unknown")
		}
		if a < 0 {
			a += int64(len(out))
		}
		var res *BatchLayout
		for _, in := range n.Inputs {
			s := li.state(in)
			if s.kind != batched {
				continue
			}
			if s.l.Axis == int(a) {
				return lost("concatenates along the batch axis")
			}
			if res == nil {
				l := s.l
				res = &l
			} else if *res != s.l {
				return mix("concatenates inputs whose batch layouts differ (%v, %v)", *res, s.l)
			}
		}
		return ok(*res)
	case op == "Split":
		in, okd := dims(n.Input(0))
		if !okd || x.kind != batched {
			return lost("input shape unknown")
		}
		a, _ := n.Int("axis")
		if a < 0 {
			a += int64(len(in))
		}
		if int(a) == x.l.Axis {
			return lost("splits the batch axis")
		}
		return ok(x.l)
	case op == "Slice":
		in, okd := dims(n.Input(0))
		if !okd || x.kind != batched {
			return lost("input shape unknown, or the slice bounds carry the batch")
		}
		sp, err := n.ResolveSlice(in)
		if err != nil {
			return lost("%v", err)
		}
		a := x.l.Axis
		if sp.Start[a] != 0 || sp.Step[a] != 1 || sp.Count[a] != in[a] {
			return lost("slices the batch axis")
		}
		return ok(x.l)
	case op == "Gather":
		data, idx := li.state(n.Input(0)), li.state(n.Input(1))
		in, okd := dims(n.Input(0))
		id, oki := dims(n.Input(1))
		if !okd || !oki {
			return lost("shapes unknown")
		}
		a, _ := n.Int("axis")
		if a < 0 {
			a += int64(len(in))
		}
		switch {
		case data.kind == batched && idx.kind == batched:
			return lost("both data and indices carry the batch")
		case data.kind == batched:
			if data.l.Axis == int(a) {
				return gatherBatchAxis(n, in, data.l, int(a), li.batch)
			}
			l := data.l
			if l.Axis > int(a) {
				l.Axis += len(id) - 1
			}
			return ok(l)
		default:
			l := idx.l
			l.Axis += int(a)
			return ok(l)
		}
	case op == "Expand":
		if x.kind != batched {
			return lost("the shape input carries the batch")
		}
		in, ok1 := dims(n.Input(0))
		out, ok2 := dims(n.Outputs[0])
		if !ok1 || !ok2 {
			return lost("shapes unknown")
		}
		l := x.l
		l.Axis += len(out) - len(in)
		return ok(l)
	case op == "Tile":
		r := n.Input(1)
		if x.kind != batched || r == nil || r.Const == nil || x.l.Axis >= r.Const.Len() {
			return lost("repeats unknown")
		}
		if r.Const.At(x.l.Axis) != 1 {
			return lost("tiles the batch axis")
		}
		return ok(x.l)
	case op == "Shape" || op == "Size":
		return bstate{kind: indep}
	case op == "ScatterND":
		// Samples stay in place when only data carries the batch, on an
		// axis below the ones the indices address; or when constant
		// indices write each sample's updates into the same sample
		// (graph.ScatterKeepsSamples).
		idx, upd := n.Input(1), li.state(n.Input(2))
		id, okd := dims(idx)
		if x.kind == batched && upd.kind != batched && okd && len(id) > 0 && int64(x.l.Axis) >= id[len(id)-1] {
			return ok(x.l)
		}
		in, okx := dims(n.Input(0))
		if x.kind == batched && upd.kind == batched && okd && okx && idx.Const != nil && x.l.Outer == 1 && x.l.Inner == 1 &&
			upd.l.Outer == 1 && upd.l.Inner == 1 && in[x.l.Axis] == li.batch {
			ints, err := idx.Const.Ints()
			if err == nil && graph.ScatterKeepsSamples(ints, id, x.l.Axis, in[x.l.Axis], upd.l.Axis) {
				return ok(x.l)
			}
		}
		return mix("scatters across the batch axis")
	}
	return lost("no batch rule for operator %s", op)
}

// gatherBatchAxis is the rule of a Gather along the batch axis: samples
// stay apart only where constant indices take each output sample's
// elements from that sample (graph.GatherSampleStride; dynamo's as_strided
// views).
func gatherBatchAxis(n *graph.Node, in []int64, l BatchLayout, a int, batch int64) bstate {
	idx := n.Input(1).Const
	out, okd := dims(n.Outputs[0])
	if idx == nil || !okd {
		return lost("gathers along the batch axis by indices computed at run time")
	}
	ints := idx.I64
	if ints == nil {
		ints = make([]int64, idx.Len())
		for j := range ints {
			ints[j] = int64(idx.At(j))
		}
	}
	s, found := graph.GatherSampleStride(ints, in[a], l.Inner, batch)
	if !found {
		return lost("gathers along the batch axis, moving elements between samples")
	}
	for _, d := range in[a+1:] {
		s *= d
	}
	lo, found := strideLayout(out, s, batch)
	if !found {
		return lost("gathers along the batch axis into shape %v, splitting the batch across axes", out)
	}
	return ok(lo)
}

// broadcast is the rule of elementwise operators with numpy broadcasting.
func (li *layoutInfo) broadcast(n *graph.Node) bstate {
	out, okd := dims(n.Outputs[0])
	if !okd {
		return lost("output shape unknown")
	}
	var res *BatchLayout
	for _, in := range n.Inputs {
		s := li.state(in)
		if s.kind != batched {
			continue
		}
		d, _ := dims(in)
		l := s.l
		l.Axis += len(out) - len(d)
		if res == nil {
			res = &l
		} else if *res != l {
			return mix("combines operands whose batch layouts differ (%v, %v)", *res, l)
		}
	}
	return ok(*res)
}

// reduceLayout is the rule of reductions over axes.
func reduceLayout(l BatchLayout, axes []int, keep bool) bstate {
	shift := 0
	for _, a := range axes {
		if a == l.Axis {
			return mix("reduces over the batch axis %d", a)
		}
		if a < l.Axis {
			shift++
		}
	}
	if !keep {
		l.Axis -= shift
	}
	return ok(l)
}

// reshapeLayout finds the batch after a reshape from in to out: the batch
// block (stride sb, extent sb·B in row-major order) must lie within one
// output axis.
func reshapeLayout(in []int64, l BatchLayout, out []int64, batch int64) (BatchLayout, bool) {
	sb := l.Inner
	for _, d := range in[l.Axis+1:] {
		sb *= d
	}
	return strideLayout(out, sb, batch)
}

// strideLayout is the layout of a tensor of shape out whose flat element e
// belongs to sample (e / sb) mod batch: the batch block (stride sb, extent
// sb·batch) must lie within one axis.
func strideLayout(out []int64, sb, batch int64) (BatchLayout, bool) {
	block := sb * batch
	suffix := int64(1)
	for k := len(out) - 1; k >= 0; k-- {
		if out[k] <= 0 {
			return BatchLayout{}, false
		}
		pk := suffix * out[k]
		if sb%suffix == 0 && pk%block == 0 {
			return BatchLayout{Axis: k, Inner: sb / suffix, Outer: pk / block}, true
		}
		suffix = pk
	}
	return BatchLayout{}, false
}

// matmul is the rule of numpy matmul: the batch may ride on the broadcast
// batch dimensions of either operand, on A's rows or on B's columns; on
// the contracted dimension it mixes samples.
func (li *layoutInfo) matmul(n *graph.Node) bstate {
	a, b := li.state(n.Input(0)), li.state(n.Input(1))
	ad, ok1 := dims(n.Input(0))
	bd, ok2 := dims(n.Input(1))
	od, ok3 := dims(n.Outputs[0])
	if !ok1 || !ok2 || !ok3 {
		return lost("shapes unknown")
	}
	ra, rb, ro := len(ad), len(bd), len(od)
	nb := ro
	if ra > 1 {
		nb--
	}
	if rb > 1 {
		nb--
	}
	var res *BatchLayout
	put := func(l BatchLayout, axis int, inBatchDims bool) *bstate {
		l.Axis = axis
		if res == nil {
			res = &l
			return nil
		}
		if *res != l || !inBatchDims {
			s := mix("pairs rows of one sample with columns of another")
			return &s
		}
		return nil
	}
	if a.kind == batched {
		switch {
		case ra == 1 || a.l.Axis == ra-1:
			return mix("contracts over the batch axis of its first operand")
		case a.l.Axis == ra-2:
			ax := ro - 2
			if rb == 1 {
				ax = ro - 1
			}
			if s := put(a.l, ax, false); s != nil {
				return *s
			}
		default:
			if s := put(a.l, a.l.Axis+nb-(ra-2), true); s != nil {
				return *s
			}
		}
	}
	if b.kind == batched {
		switch {
		case rb == 1 || b.l.Axis == rb-2:
			return mix("contracts over the batch axis of its second operand")
		case b.l.Axis == rb-1:
			if s := put(b.l, ro-1, false); s != nil {
				return *s
			}
		default:
			if s := put(b.l, b.l.Axis+nb-(rb-2), true); s != nil {
				return *s
			}
		}
	}
	return ok(*res)
}

// gemm is the rule of Gemm: the batch rides on A's rows (M) or B's
// columns (N); C broadcasts.
func (li *layoutInfo) gemm(n *graph.Node) bstate {
	a, b, c := li.state(n.Input(0)), li.state(n.Input(1)), li.state(n.Input(2))
	var res *BatchLayout
	add := func(l BatchLayout) bool {
		if res == nil {
			res = &l
			return true
		}
		return *res == l
	}
	if a.kind == batched {
		m := 0
		if n.IntOr("transA", 0) != 0 {
			m = 1
		}
		if a.l.Axis != m {
			return mix("contracts over the batch axis of A")
		}
		l := a.l
		l.Axis = 0
		add(l)
	}
	if b.kind == batched {
		nn := 1
		if n.IntOr("transB", 0) != 0 {
			nn = 0
		}
		if b.l.Axis != nn {
			return mix("contracts over the batch axis of B")
		}
		l := b.l
		l.Axis = 1
		if !add(l) {
			return mix("pairs rows of one sample with columns of another")
		}
	}
	if c.kind == batched {
		cd, _ := dims(n.Input(2))
		l := c.l
		l.Axis += 2 - len(cd)
		if !add(l) {
			return mix("adds C with a different batch layout")
		}
	}
	return ok(*res)
}
