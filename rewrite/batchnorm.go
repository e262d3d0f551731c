package rewrite

import (
	"fmt"
	"math"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// BNMode selects how BatchNormalization nodes are rewritten. Batch
// statistics make every sample's output depend on the whole batch, which
// breaks per-sample gradient clipping, so DP training never keeps them.
type BNMode string

const (
	// BNGroupNorm replaces BatchNormalization by group normalization with
	// the BN's affine parameters as its initial scale and shift (the
	// paper's choice, 16 groups). Not exact: the model computes something
	// else, to be fine-tuned.
	BNGroupNorm BNMode = "groupnorm"
	// BNFreeze evaluates BatchNormalization with its running statistics
	// (from public pretraining, so DP-safe) as a fixed per-channel affine
	// map, folded into the preceding Conv where possible. Exact: the model
	// computes what it computes in eval mode.
	BNFreeze BNMode = "freeze"
)

// GroupRule decides the number of groups when the channel count C is not
// divisible by the requested number of groups G.
type GroupRule string

const (
	// GroupsDivisor uses the largest divisor of C not above G (the
	// default: as close to G as the channels allow).
	GroupsDivisor GroupRule = "divisor"
	// GroupsGCD uses gcd(C, G).
	GroupsGCD GroupRule = "gcd"
	// GroupsError refuses the rewrite.
	GroupsError GroupRule = "error"
)

// The beginnings of the actions RewriteBatchNorm's changes state, which
// BatchNormCounts counts.
const (
	actionBNGroupNorm = "BatchNormalization → GroupNorm"
	actionBNFrozen    = "BatchNormalization frozen with its running statistics"
)

// BatchNormCounts counts the BatchNormalization nodes changes (Prepare's,
// Plan.Changes) replaced by GroupNorm and those they froze with their
// running statistics, folded into a convolution or not.
func BatchNormCounts(changes []Change) (groupNorm, frozen int) {
	for _, c := range changes {
		switch {
		case c.Pass != "batchnorm":
		case strings.HasPrefix(c.Action, actionBNGroupNorm):
			groupNorm++
		case strings.HasPrefix(c.Action, actionBNFrozen):
			frozen++
		}
	}
	return groupNorm, frozen
}

// MovedStatistics counts g's BatchNormalization nodes in training mode
// (training_mode = 1; before opset 14, the running statistics among the
// outputs) whose momentum is not 1, and returns PyTorch's momentum of the
// first (1 − ONNX's). torch.onnx.export in TrainingMode.TRAINING runs the
// module's forward in training mode once, which moves each BatchNorm's
// running statistics by that momentum toward the batch statistics of
// the dummy input, and writes the moved ones (PyTorch 1.13, checked): a
// model frozen with them (BNFreeze) freezes statistics of no data. A
// BatchNorm whose PyTorch momentum was set to 0 for the export (ONNX
// momentum 1) kept its own.
func MovedStatistics(g *graph.Graph) (n int, momentum float64) {
	for _, nd := range g.Nodes {
		if nd.OpType != "BatchNormalization" || nd.Domain != "" {
			continue
		}
		training := len(nd.Outputs) > 1
		if g.Opsets[""] >= 14 {
			tm, _ := nd.Int("training_mode")
			training = tm == 1
		}
		m, err := nd.Float("momentum")
		if err != nil {
			m = 0.9 // the operator's default
		}
		if training && m != 1 {
			if n == 0 {
				momentum = 1 - float64(m)
			}
			n++
		}
	}
	return n, momentum
}

// DefaultGroups is the GroupNorm group count of the paper's appendix.
const DefaultGroups = 16

// BNOptions configures RewriteBatchNorm.
type BNOptions struct {
	Mode BNMode `json:"mode"`
	// Groups is the requested GroupNorm group count (0: DefaultGroups).
	Groups int64 `json:"groups"`
	// Rule applies when Groups does not divide the channels ("": divisor).
	Rule GroupRule `json:"rule"`
}

// GroupsFor returns the group count for c channels.
func GroupsFor(c, groups int64, rule GroupRule) (int64, error) {
	if groups <= 0 {
		return 0, fmt.Errorf("group count must be positive, got %d", groups)
	}
	if c <= 0 {
		return 0, fmt.Errorf("channel count must be positive, got %d", c)
	}
	if c%groups == 0 {
		return groups, nil
	}
	switch rule {
	case GroupsDivisor, "":
		for d := min(groups, c); d >= 1; d-- {
			if c%d == 0 {
				return d, nil
			}
		}
	case GroupsGCD:
		a, b := c, groups
		for b != 0 {
			a, b = b, a%b
		}
		return a, nil
	case GroupsError:
		return 0, fmt.Errorf("%d channels are not divisible into %d groups", c, groups)
	}
	return 0, fmt.Errorf("unknown group rule %q (want divisor, gcd or error)", rule)
}

// bnTraining reports whether a BatchNormalization node computes batch
// statistics.
func bnTraining(n *graph.Node) bool {
	switch {
	case n.Opset >= 14:
		return n.IntOr("training_mode", 0) != 0
	case n.Opset >= 7:
		// Opsets 7–13: the optional mean/var outputs mean training.
		for _, o := range n.Outputs[1:] {
			if o != nil {
				return true
			}
		}
		return false
	default:
		return n.IntOr("is_test", 0) == 0
	}
}

// RewriteBatchNorm rewrites every BatchNormalization node of g as
// opts.Mode says. shapes, when not nil, gives static shapes by value name
// (from a clone of g with inferred shapes; see StaticShapes): they tell the
// rank of a BN input that the dynamic graph leaves unknown.
//
// GroupNorm is emitted as a decomposition in opset-14 operators, the same
// ones the PyTorch exporter uses for LayerNorm, so that any runtime that
// runs the transformer fixtures runs it too, and the model stays valid at
// its own opset (GroupNormalization needs opset 18, and 21 for per-channel
// scale; bumping the opset changes other operators' semantics):
//
//	xr = Reshape(x, [0, G, -1])          (N, G, C/G·spatial)
//	d  = xr - ReduceMean(xr, axes=[2])
//	xn = d / Sqrt(ReduceMean(d^2, axes=[2]) + eps)
//	y  = Reshape(xn, Shape(x)) * gamma + beta      gamma, beta: (C,1,…,1)
//
// gamma and beta are initializers read by Mul and Add, i.e. elementwise
// parameters for the per-sample engine; they keep the BN's scale and bias
// names (reshaped from (C) to (C,1,…,1)) and start from their values.
//
// Freeze computes scale = gamma/sqrt(var+eps) and shift = beta - mean·scale
// in float64. If the BN reads the only output of a Conv with a constant
// weight, the affine is folded into that Conv (weight·scale per output
// channel, bias·scale+shift; a bias is added if the Conv had none, named
// <conv>.bias); otherwise it becomes Mul(scale) and Add(shift) with
// scale and shift stored under the BN's scale and bias names. Either way
// the running statistics are dropped, and the remaining affine
// parameters are trainable like any other Conv/Mul/Add parameter: what is
// frozen is the normalization statistics.
func RewriteBatchNorm(g *graph.Graph, opts BNOptions, shapes map[string]graph.Shape) ([]Change, error) {
	if opts.Mode != BNGroupNorm && opts.Mode != BNFreeze {
		return nil, fmt.Errorf("rewrite: unknown BatchNorm mode %q (want groupnorm or freeze)", opts.Mode)
	}
	if opts.Groups == 0 {
		opts.Groups = DefaultGroups
	}
	relink(g)
	nm := newNamer(g)
	var changes []Change
	batched := g.InputDerived()
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.OpType != "BatchNormalization" || n.Domain != "" {
			continue
		}
		var ch Change
		var err error
		switch {
		case n.Input(0) != nil && !batched[n.Input(0)]:
			ch, err = bnOnParams(g, nm, n, shapes)
		case opts.Mode == BNGroupNorm:
			ch, err = bnToGroupNorm(g, nm, n, opts, shapes)
		default:
			ch, err = bnFreeze(g, nm, n, shapes)
		}
		if err != nil {
			return changes, fmt.Errorf("rewrite: BatchNormalization %s: %w", nodeLabel(n), err)
		}
		changes = append(changes, ch)
		relink(g)
	}
	return changes, g.Validate()
}

// bnOnParams writes out a BatchNormalization that normalizes no sample:
// its input is computed from parameters and constants only, as timm's
// StdConv2d standardizes a convolution's weight per output channel with
// F.batch_norm(w.reshape(1, C, −1), training=True). No batch statistics
// mix samples there: the node becomes its computation — with the input's
// own statistics over every axis but the channels' in training mode, with
// the given mean and variance otherwise — (x − μ)/√(σ² + ε)·γ + β, which
// the runtime runs and differentiates. The parameter behind it is then
// transformed before it meets the batch, and the plan freezes it and
// says so.
func bnOnParams(g *graph.Graph, nm *namer, n *graph.Node, shapes map[string]graph.Shape) (Change, error) {
	if len(n.Inputs) < 5 || n.Inputs[1] == nil || n.Inputs[2] == nil {
		return Change{}, fmt.Errorf("has %d inputs, want 5", len(n.Inputs))
	}
	x := n.Inputs[0]
	sh := shapes[x.Name]
	if sh == nil {
		sh = x.Shape
	}
	if len(sh) < 2 {
		return Change{}, fmt.Errorf("the rank of its input %q is unknown", x.Name)
	}
	for _, o := range n.Outputs[1:] {
		if o != nil && len(o.Consumers) > 0 {
			return Change{}, fmt.Errorf("normalizes parameters (no batch), and its running statistics %q are read", o.Name)
		}
	}
	eps, err := n.Float("epsilon")
	if err != nil {
		return Change{}, err
	}
	rank := len(sh)
	training := n.IntOr("training_mode", 0) == 1
	if n.Opset < 14 {
		for _, o := range n.Outputs[1:] {
			training = training || o != nil
		}
	}
	dt := graph.Float32
	if x.DType.IsFloat() {
		dt = x.DType
	}
	b := newBuilder(g, nm, nodeLabel(n)+"/params")
	perChannel := func(v *graph.Value) *graph.Value {
		shape := append([]int64{-1}, channelShape(1, rank)[1:]...)
		return b.op("Reshape", nil, v, b.constant(int64Tensor([]int64{int64(len(shape))}, shape...)))
	}
	if training {
		if bnOnParamsRows(b, n, sh, float64(eps), dt, perChannel) {
			return bnOnParamsDone(g, n, b, training), nil
		}
	}
	var d, va *graph.Value
	if training {
		axes := []int64{0}
		for a := 2; a < rank; a++ {
			axes = append(axes, int64(a))
		}
		mean := func(v *graph.Value) *graph.Value {
			if b.opset >= 18 {
				return b.op("ReduceMean", nil, v, b.constant(int64Tensor([]int64{int64(len(axes))}, axes...)))
			}
			return b.op("ReduceMean", []*onnxpb.AttributeProto{attrInts("axes", axes...)}, v)
		}
		d = b.op("Sub", nil, x, mean(x))
		va = mean(b.op("Mul", nil, d, d))
	} else {
		d = b.op("Sub", nil, x, perChannel(n.Inputs[3]))
		va = perChannel(n.Inputs[4])
	}
	sd := b.op("Sqrt", nil, b.op("Add", nil, va, b.constant(floatTensor(dt, nil, []float64{float64(eps)}))))
	y := b.op("Mul", nil, b.op("Div", nil, d, sd), perChannel(n.Inputs[1]))
	b.opInto(n.Outputs[0], "Add", nil, y, perChannel(n.Inputs[2]))
	return bnOnParamsDone(g, n, b, training), nil
}

// bnOnParamsDone splices b's nodes in for the BatchNormalization n of
// parameters and reports the change.
func bnOnParamsDone(g *graph.Graph, n *graph.Node, b *builder, training bool) Change {
	for _, o := range n.Outputs[1:] {
		if o != nil {
			delete(g.Values, o.Name)
		}
	}
	g.ReplaceNode(n, b.nodes)
	relink(g)
	stats := "its input's own statistics"
	if !training {
		stats = "its given mean and variance"
	}
	return Change{Pass: "batchnorm", Target: nodeLabel(n),
		Action: "written as its computation (" + stats + ")",
		Reason: "it normalizes parameters, not samples (weight standardization): no batch statistics to replace"}
}

// bnOnParamsRows writes the training-mode BatchNormalization n of a
// (1, C, …) input of static shape sh — weight standardization: each
// output channel's weights normalized by their own statistics — as a
// LayerNormalization of its C rows, then γ and β per channel (perChannel
// reshapes them) where they are not the constants 1 and 0 (F.batch_norm
// without weight and bias),
// into n's output, and reports true; false, adding nothing, for any other
// input. Both compute (x − μ)/√(σ² + ε) with the biased variance; one node
// runs and differentiates in one pass where the decomposition took nine,
// and the engine takes every sample's gradient back through it once a
// step (docs/REWRITES.md, "Parameters computed before they meet the
// batch"). A model whose opset has no LayerNormalization gets the
// decomposition back on export (ExportGraph).
func bnOnParamsRows(b *builder, n *graph.Node, sh graph.Shape, eps float64, dt graph.DType, perChannel func(*graph.Value) *graph.Value) bool {
	if !sh.Static() || len(sh) < 3 || sh[0].Size != 1 {
		return false
	}
	dims := sh.Ints()
	k := prod(dims[2:])
	if k < 2 {
		return false // one element a channel: no statistics to normalize by
	}
	rows := b.op("Flatten", []*onnxpb.AttributeProto{attrInt("axis", 2)}, n.Inputs[0]) // (C, K)
	ones := make([]float64, k)
	for i := range ones {
		ones[i] = 1
	}
	y := b.op("LayerNormalization", []*onnxpb.AttributeProto{attrInt("axis", -1), attrFloat("epsilon", eps)},
		rows, b.constant(floatTensor(dt, []int64{k}, ones)))
	// Back to the input's shape, then γ and β; the last step writes n's
	// output.
	type step struct {
		op  string
		arg *graph.Value
	}
	steps := []step{{"Reshape", b.constant(int64Tensor([]int64{int64(len(dims))}, dims...))}}
	if !constantOf(b.g, n.Inputs[1], 1) {
		steps = append(steps, step{"Mul", perChannel(n.Inputs[1])})
	}
	if !constantOf(b.g, n.Inputs[2], 0) {
		steps = append(steps, step{"Add", perChannel(n.Inputs[2])})
	}
	for i, st := range steps {
		if i == len(steps)-1 {
			b.opInto(n.Outputs[0], st.op, nil, y, st.arg)
			break
		}
		y = b.op(st.op, nil, y, st.arg)
	}
	return true
}

// constantOf reports whether v is a constant (constOf: an initializer, or
// the output of a Constant node of g, not folded yet when the
// BatchNormalization rewrite runs — TorchScript's F.batch_norm without
// weight or bias exports its ones and zeros so), no parameter, whose every
// element is c.
func constantOf(g *graph.Graph, v *graph.Value, c float32) bool {
	if v == nil || v.IsParam() {
		return false
	}
	t := constOf(g, v)
	if t == nil || t.F32 == nil && t.Len() > 0 {
		return false
	}
	for _, x := range t.F32 {
		if x != c {
			return false
		}
	}
	return true
}

// bnParts are the inputs of a BatchNormalization node, checked.
type bnParts struct {
	x                     *graph.Value
	scale, bias, mean, vr *graph.Value
	s, b, mu, va          []float64
	c                     int64
	rank                  int
	eps                   float64
	dt                    graph.DType
}

func bnInputs(n *graph.Node, shapes map[string]graph.Shape, needStats bool) (*bnParts, error) {
	if len(n.Inputs) < 5 {
		return nil, fmt.Errorf("has %d inputs, want 5", len(n.Inputs))
	}
	p := &bnParts{x: n.Inputs[0], scale: n.Inputs[1], bias: n.Inputs[2], mean: n.Inputs[3], vr: n.Inputs[4]}
	if sp := n.IntOr("spatial", 1); sp == 0 {
		return nil, fmt.Errorf("spatial=0 (per-activation statistics) is not supported")
	}
	eps, err := n.Float("epsilon")
	if err != nil {
		return nil, err
	}
	p.eps = float64(eps)
	need := []*graph.Value{p.scale, p.bias}
	if needStats {
		need = append(need, p.mean, p.vr)
	}
	for i, v := range need {
		switch {
		case v == nil:
			return nil, fmt.Errorf("input %d is missing", i+1)
		case v.Const == nil:
			return nil, fmt.Errorf("input %q is not an initializer", v.Name)
		}
	}
	if p.s, err = floats(p.scale.Const); err != nil {
		return nil, err
	}
	if p.b, err = floats(p.bias.Const); err != nil {
		return nil, err
	}
	p.c = int64(len(p.s))
	if int64(len(p.b)) != p.c {
		return nil, fmt.Errorf("scale has %d channels, bias %d", p.c, len(p.b))
	}
	if needStats {
		if p.mu, err = floats(p.mean.Const); err != nil {
			return nil, err
		}
		if p.va, err = floats(p.vr.Const); err != nil {
			return nil, err
		}
		if int64(len(p.mu)) != p.c || int64(len(p.va)) != p.c {
			return nil, fmt.Errorf("running statistics have %d and %d channels, want %d", len(p.mu), len(p.va), p.c)
		}
	}
	p.dt = p.scale.DType
	p.rank = rankOf(p.x, shapes)
	for i, o := range n.Outputs {
		if i > 0 && o != nil && (len(o.Consumers) > 0) {
			return nil, fmt.Errorf("its running-statistics output %q is read by %s", o.Name, nodeLabel(o.Consumers[0]))
		}
	}
	return p, nil
}

// rankOf returns the rank of v from its shape, the given static shapes, or
// the weight of the Conv producing it; 0 if unknown.
func rankOf(v *graph.Value, shapes map[string]graph.Shape) int {
	if v.Shape != nil {
		return len(v.Shape)
	}
	if s, ok := shapes[v.Name]; ok && s != nil {
		return len(s)
	}
	if p := v.Producer; p != nil && (p.OpType == "Conv" || p.OpType == "ConvTranspose") && p.Input(1) != nil && p.Input(1).Shape != nil {
		return len(p.Input(1).Shape)
	}
	return 0
}

// channelShape is (c, 1, …, 1) broadcasting over a rank-r NC… tensor.
func channelShape(c int64, rank int) []int64 {
	sh := []int64{c}
	for i := 2; i < rank; i++ {
		sh = append(sh, 1)
	}
	return sh
}

// channelParam stores vals with the given shape under v's name if this
// node is v's only reader, else under a fresh name.
func channelParam(g *graph.Graph, nm *namer, v *graph.Value, dt graph.DType, shape []int64, vals []float64, suffix string) *graph.Value {
	t := floatTensor(dt, shape, vals)
	if len(v.Consumers) == 1 && !isGraphOutput(g, v) {
		setInitializer(v, t)
		return v
	}
	return addInitializer(g, nm.value(v.Name+suffix), t)
}

func bnToGroupNorm(g *graph.Graph, nm *namer, n *graph.Node, opts BNOptions, shapes map[string]graph.Shape) (Change, error) {
	p, err := bnInputs(n, shapes, false)
	if err != nil {
		return Change{}, err
	}
	if p.rank < 2 {
		return Change{}, fmt.Errorf("the rank of its input %q is unknown (give an input shape)", p.x.Name)
	}
	groups, err := GroupsFor(p.c, opts.Groups, opts.Rule)
	if err != nil {
		return Change{}, err
	}
	b := newBuilder(g, nm, nodeLabel(n)+"/groupnorm")
	cs := channelShape(p.c, p.rank)
	gamma := channelParam(g, nm, p.scale, p.dt, cs, p.s, "_groupnorm")
	beta := channelParam(g, nm, p.bias, p.dt, cs, p.b, "_groupnorm")
	if p.rank >= 3 {
		// One node while training (ExportGraph writes the decomposition):
		// the runtime normalizes and applies the affine in one pass, and
		// the engine's normalization rule takes γ and β's per-sample
		// gradients from the rows' statistics.
		b.opInto(n.Outputs[0], "GroupNormalization", []*onnxpb.AttributeProto{attrInt("num_groups", groups), attrFloat("epsilon", p.eps)}, p.x, gamma, beta)
	} else {
		decomposeGroupNorm(b, p.x, gamma, beta, groups, p.eps, p.dt, n.Outputs[0])
	}
	for _, o := range n.Outputs[1:] {
		if o != nil {
			delete(g.Values, o.Name)
		}
	}
	g.ReplaceNode(n, b.nodes)
	relink(g)
	removeInitializerIfUnused(g, p.mean)
	removeInitializerIfUnused(g, p.vr)
	why := fmt.Sprintf("%d channels, %d groups", p.c, groups)
	if groups != opts.Groups {
		why += fmt.Sprintf(" (%d requested; rule %s)", opts.Groups, ruleName(opts.Rule))
	}
	return Change{Pass: "batchnorm", Target: nodeLabel(n),
		Action: fmt.Sprintf(actionBNGroupNorm+"(%d) with scale %s and shift %s %v initialised from the BN affine", groups, gamma.Name, beta.Name, cs),
		Reason: "batch statistics mix samples; " + why}, nil
}

// decomposeGroupNorm adds to b the opset-14 decomposition of GroupNorm
// with groups groups and per-channel scale gamma and shift beta (shape
// (C,1,…,1) or (C)), writing out (RewriteBatchNorm's doc gives it).
func decomposeGroupNorm(b *builder, x, gamma, beta *graph.Value, groups int64, eps float64, dt graph.DType, out *graph.Value) {
	xr := b.op("Reshape", nil, x, b.constant(int64Tensor([]int64{3}, 0, groups, -1)))
	xn := normalizeAlong(b, xr, 2, eps, dt)
	y0 := b.op("Reshape", nil, xn, b.op("Shape", nil, x))
	y1 := b.op("Mul", nil, y0, gamma)
	b.opInto(out, "Add", nil, y1, beta)
}

// normalizeAlong adds to b the normalization of x along axis as torch
// exports LayerNorm's, d = x − ReduceMean(x) and
// d / Sqrt(ReduceMean(Pow(d, 2)) + eps) (ReduceMean's axes an attribute
// before opset 18, an input from 18; constants of type dt), and returns
// its output: GroupNorm's and LayerNorm's decompositions share it.
func normalizeAlong(b *builder, x *graph.Value, axis int64, eps float64, dt graph.DType) *graph.Value {
	mean := func(v *graph.Value) *graph.Value {
		if b.opset >= 18 {
			return b.op("ReduceMean", nil, v, b.constant(int64Tensor([]int64{1}, axis)))
		}
		return b.op("ReduceMean", []*onnxpb.AttributeProto{attrInts("axes", axis)}, v)
	}
	d := b.op("Sub", nil, x, mean(x))
	va := mean(b.op("Pow", nil, d, b.constant(floatTensor(dt, nil, []float64{2}))))
	sd := b.op("Sqrt", nil, b.op("Add", nil, va, b.constant(floatTensor(dt, nil, []float64{eps}))))
	return b.op("Div", nil, d, sd)
}

func ruleName(r GroupRule) string {
	if r == "" {
		return string(GroupsDivisor)
	}
	return string(r)
}

func bnFreeze(g *graph.Graph, nm *namer, n *graph.Node, shapes map[string]graph.Shape) (Change, error) {
	p, err := bnInputs(n, shapes, true)
	if err != nil {
		return Change{}, err
	}
	scale := make([]float64, p.c)
	shift := make([]float64, p.c)
	for i := range scale {
		if p.va[i]+p.eps <= 0 {
			return Change{}, fmt.Errorf("running variance %g + eps is not positive (channel %d)", p.va[i], i)
		}
		scale[i] = p.s[i] / math.Sqrt(p.va[i]+p.eps)
		shift[i] = p.b[i] - p.mu[i]*scale[i]
	}
	y := n.Outputs[0]
	drop := func() {
		for _, o := range n.Outputs[1:] {
			if o != nil {
				delete(g.Values, o.Name)
			}
		}
	}
	reason := "running statistics come from public pretraining: no per-sample dependence on the batch"
	if conv := p.x.Producer; conv != nil && conv.OpType == "Conv" && conv.Domain == "" && len(p.x.Consumers) == 1 && !isGraphOutput(g, p.x) &&
		conv.Input(1) != nil && conv.Input(1).Const != nil && conv.Input(1).Initializer && (conv.Input(2) == nil || (conv.Input(2).Const != nil && conv.Input(2).Initializer)) &&
		len(conv.Input(1).Shape) >= 1 && conv.Input(1).Shape[0].Size == p.c {
		w := conv.Input(1)
		wv, err := floats(w.Const)
		if err != nil {
			return Change{}, err
		}
		per := len(wv) / int(p.c)
		for co := 0; co < int(p.c); co++ {
			for j := 0; j < per; j++ {
				wv[co*per+j] *= scale[co]
			}
		}
		wt := floatTensor(w.DType, w.Const.Shape, wv)
		if len(w.Consumers) == 1 {
			setInitializer(w, wt)
		} else {
			nw := addInitializer(g, nm.value(w.Name+"_bnfold"), wt)
			conv.Inputs[1] = nw
			w = nw
		}
		bv := make([]float64, p.c)
		if cb := conv.Input(2); cb != nil {
			old, err := floats(cb.Const)
			if err != nil {
				return Change{}, err
			}
			if int64(len(old)) != p.c {
				return Change{}, fmt.Errorf("conv bias %q has %d channels, want %d", cb.Name, len(old), p.c)
			}
			copy(bv, old)
		}
		for i := range bv {
			bv[i] = bv[i]*scale[i] + shift[i]
		}
		bt := floatTensor(p.dt, []int64{p.c}, bv)
		var bias *graph.Value
		if cb := conv.Input(2); cb != nil && len(cb.Consumers) == 1 {
			setInitializer(cb, bt)
			bias = cb
		} else {
			bias = addInitializer(g, nm.value(paramBase(w.Name)+".bias"), bt)
			if len(conv.Inputs) > 2 {
				conv.Inputs[2] = bias
			} else {
				conv.Inputs = append(conv.Inputs, bias)
			}
		}
		// The Conv now produces the BN's output under its name.
		delete(g.Values, p.x.Name)
		conv.Outputs[0] = y
		y.Producer = conv
		drop()
		g.ReplaceNode(n, nil)
		relink(g)
		for _, v := range []*graph.Value{p.scale, p.bias, p.mean, p.vr} {
			removeInitializerIfUnused(g, v)
		}
		return Change{Pass: "batchnorm", Target: nodeLabel(n),
			Action: fmt.Sprintf(actionBNFrozen+" and folded into Conv %s (weight %s, bias %s)", nodeLabel(conv), w.Name, bias.Name),
			Reason: reason}, nil
	}
	if p.rank < 2 {
		return Change{}, fmt.Errorf("the rank of its input %q is unknown (give an input shape)", p.x.Name)
	}
	cs := channelShape(p.c, p.rank)
	b := newBuilder(g, nm, nodeLabel(n)+"/frozen")
	sc := channelParam(g, nm, p.scale, p.dt, cs, scale, "_frozen")
	sh := channelParam(g, nm, p.bias, p.dt, cs, shift, "_frozen")
	b.opInto(y, "Add", nil, b.op("Mul", nil, p.x, sc), sh)
	drop()
	g.ReplaceNode(n, b.nodes)
	relink(g)
	removeInitializerIfUnused(g, p.mean)
	removeInitializerIfUnused(g, p.vr)
	why := "input is not the sole output of a Conv with constant weights"
	if p.x.Producer != nil && p.x.Producer.OpType == "Conv" {
		why = "the Conv output has other readers"
	}
	return Change{Pass: "batchnorm", Target: nodeLabel(n),
		Action: fmt.Sprintf(actionBNFrozen+" as Mul(%s) + Add(%s) %v (not folded: %s)", sc.Name, sh.Name, cs, why),
		Reason: reason}, nil
}
