package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// A standardized convolution weight (rewrite.Standardized: weight
// standardization, D = s·γ ⊙ x̂(W) row by row, x̂_o = (W_o − μ_o)/σ_o) has
// per-sample gradients whose norms need no trip through the computation:
// with g_o the sample's gradient of the weight the layer reads (row o, K
// elements), W's row gradient is LayerNormalization's vector-Jacobian
// product (sγ_o/σ_o)·(g_o − (1ᵀg_o/K)·1 − (x̂_oᵀg_o/K)·x̂_o), the gain's
// s_o·x̂_oᵀg_o. Each sample's g is instantiated in the rule's scratch, one
// sample (or one chunk of samples) at a time, and the two squared norms
// are taken from it at once (runtime.PerSampleOps.StandardizedNormTerms)
// — the B per-sample gradients of the weight (B·O·K floats) and the
// computation's backward pass over them are never formed. In ghost and
// mixed mode the second backward pass sums the clipped gradients through
// the computation as it does every parameter's; in book-keeping the
// layer's kept input and output gradient give Σ_i C_i g_i of the weight
// it reads, which the same vector-Jacobian product (linear in g) takes to
// W and the gain (stdClippedSum). Where the layer's decision is ghost,
// not even g is formed: the norms come from a ghost norm and two sums a
// row (convStdGhost). Instantiate mode keeps the general path
// (useGroup.virt), the oracle of this one.

// stdApplies reports whether the engine takes the closed form for a
// standardized weight in cfg's mode: where norms alone are needed (ghost,
// mixed), or book-keeping's one clipped sum (not per-layer clipping,
// whose factors differ between W and its gain).
func stdApplies(cfg Config) bool {
	switch cfg.Mode {
	case Ghost, Mixed:
		return true
	case BK:
		return !cfg.PerLayer
	}
	return false
}

// stdState is a standardized weight's closed form (useGroup.std).
type stdState struct {
	rows, k, B int
	// xhat (rows×k) and inv (1/σ_o, rows) are the model's own
	// LayerNormalization of W's rows and its statistics, as the forward
	// pass left them (runtime.Options.KeepValues, Plan.NormStats); stat
	// computes coefW = (s·γ/σ)² (rows), and coefG = s² where there is a
	// gain, from them and the gain (refreshDerived).
	stat         *runtime.Plan
	xhat, inv    []float32
	coefW, coefG []float32
	// cA and cB are the ghost form's coefficients, a row each
	// (runtime.PerSampleOps.StandardizedGhostTerms); scaleW is c_o =
	// Scale·γ_o/σ_o (coefW = c²: the ghost form's scaling of the output
	// gradient, and the factor of book-keeping's closed-form
	// vector-Jacobian product, runtime.PerSampleOps.StandardizedVJP) and
	// gainScale the gain's factor s_o.
	cA, cB, scaleW, gainScale []float32
	// ghost takes the norms without instantiating the gradient
	// (convStdGhost) where the layer's decision is ghost (in ghost mode,
	// every standardized weight's but a depthwise one's); groups is the
	// convolution's. gus is the layer as an ordinary weight of the
	// convolution whose squared norms are W's, through which the ghost
	// norm of the scaled output gradient runs; uShape is the convolution
	// by a row of ones a group, whose output is the patches' sums.
	ghost  bool
	groups int
	gus    *useState
	uShape *runtime.ConvShape
	// tW and tG hold the per-row terms, rows × B (a row's samples
	// consecutive, SumNormRows' layout); sums one sample's totals.
	tW, tG []float64
	sums   []float64
	w      *param
	gain   *param
	// sumD is book-keeping's Σ_i C_i g_i of the weight the layer reads,
	// then W's (StandardizedVJP in place), and gainD the gain's.
	sumD, gainD []float32
}

// buildStd gives group g, a Conv weight computed by weight
// standardization from its parameters (sub, the computation, whose
// shapes it reads; no plan of it is compiled), the closed form: the
// operand as a parameter of its own whose rule's per-sample gradients go
// to the norm terms (g.virt, without per-sample rows).
func (e *Engine) buildStd(sub *graph.Graph, g *useGroup) error {
	st := g.uses[0].use.Standardized
	B := e.cfg.PhysicalBatch
	s := &stdState{rows: int(st.Rows), k: int(st.K), B: B}
	for _, us := range g.uses {
		switch us.p.name {
		case st.Weight:
			s.w = us.p
		case st.Gain:
			s.gain = us.p
		default:
			return fmt.Errorf("dpengine: %s is not the standardized weight %s or its gain", us.p.name, st.Weight)
		}
		// Book-keeping's sum is the group's (clipPhysical), not a
		// linear use's of its own.
		us.p.linear = nil
	}
	if s.w == nil || (st.Gain != "") != (s.gain != nil) {
		return fmt.Errorf("dpengine: the standardized weight %s's parameters are not all trained", st.Weight)
	}
	sg, err := statGraph(sub, st)
	if err != nil {
		return fmt.Errorf("dpengine: standardized weight %s: %w", st.Weight, err)
	}
	if s.stat, err = runtime.Compile(sg, &runtime.Options{Device: e.cfg.Device, ForwardOnly: true}); err != nil {
		return fmt.Errorf("dpengine: standardized weight %s: %w", st.Weight, err)
	}
	// x̂ and 1/σ are what the model's forward computes anyway (the same
	// kernel on the same rows): kept by the plan (compileOptions), not
	// computed again.
	s.xhat = e.plan.Value(st.Output)
	_, s.inv = e.plan.NormStats(st.Output)
	if len(s.xhat) != s.rows*s.k || len(s.inv) != s.rows {
		return fmt.Errorf("dpengine: standardized weight %s: x̂ %q is not a kept LayerNormalization of its %d rows (%d values, %d statistics)", st.Weight, st.Output, s.rows, len(s.xhat), len(s.inv))
	}
	if s.tW, err = e.alloc64(s.rows*B, "the norm terms of "+st.Weight); err != nil {
		return err
	}
	if s.sums, err = e.alloc64(B, "the norm terms of "+st.Weight); err != nil {
		return err
	}
	if s.gain != nil {
		if s.tG, err = e.alloc64(s.rows*B, "the norm terms of "+st.Gain); err != nil {
			return err
		}
	}
	ov := sub.Outputs[0]
	if !ov.Shape.Static() || ov.Shape.NumElements() != st.Rows*st.K {
		return fmt.Errorf("dpengine: standardized weight %s: the computation gives %v values, want %d×%d", st.Weight, ov.Shape, s.rows, s.k)
	}
	var shape []int
	for _, d := range ov.Shape.Ints() {
		shape = append(shape, int(d))
	}
	if e.cfg.Mode == BK { // the clipped sum, taken back in closed form
		if s.sumD, err = e.alloc(s.rows*s.k, "the clipped sum of "+g.uses[0].use.OperandValue); err != nil {
			return err
		}
		if s.gain != nil {
			if s.gainD, err = e.alloc(s.rows, "the clipped sum of "+st.Gain); err != nil {
				return err
			}
		}
	}
	us := g.uses[0]
	v := &param{name: us.use.OperandValue, shape: shape}
	g.virt = &useState{use: us.use, p: v, std: s}
	g.virt.linear = &linearState{ops: e.ops, lay: e.lay, dev: e.dev, rule: g.linear, layer: us.use.Layer, decision: rewrite.Instantiate, mapBuf: &e.mapScratch}
	g.std = s
	if l := us.use.Layer; l != nil && g.op == "Conv" && (e.cfg.Mode == Ghost && !(l.Groups > 1 && l.D == l.Taps) || e.cfg.Mode != Ghost && l.Decision == rewrite.Ghost) {
		s.ghost, s.groups = true, int(max(l.Groups, 1))
		if s.rows%s.groups != 0 {
			return fmt.Errorf("dpengine: standardized weight %s: %d rows in %d groups", st.Weight, s.rows, s.groups)
		}
		gp := &param{name: v.name, shape: shape}
		s.gus = &useState{use: us.use, p: gp}
		s.gus.linear = &linearState{ops: e.ops, lay: e.lay, dev: e.dev, rule: g.linear, layer: us.use.Layer, decision: rewrite.Ghost, mapBuf: &e.mapScratch}
	}
	return nil
}

// statGraph is the closed form's coefficients from the rows' 1/σ_o (graph
// input 0, rows×1: the InvStdDev of the model's own LayerNormalization of
// W's rows, Plan.NormStats) and the gain (input 1): coefW = c_o² a row,
// the ghost form's cA and cB, c_o = Scale·γ_o/σ_o itself (stdState), and
// where there is a gain coefG = GainScale_o² and GainScale. x̂ is the
// model's (Plan.Value): nothing here reads W. sub, the weight's
// computation, gives the gain's shape and a constant γ.
func statGraph(sub *graph.Graph, st *rewrite.Standardized) (*graph.Graph, error) {
	g := sub.Clone()
	g.Nodes, g.Inputs, g.Outputs, g.Initializers = nil, nil, nil, nil
	g.Values = map[string]*graph.Value{}
	g.Opsets = map[string]int64{"": 17}
	b := &statBuilder{valueMaker{g: g}}
	// Each input a row of values in order (refresh copies it in).
	input := func(name string, shape graph.Shape) (*graph.Value, error) {
		if v := sub.Values[name]; v == nil || !v.Shape.Static() || v.Shape.NumElements() != shape.NumElements() {
			return nil, fmt.Errorf("%q is not a parameter of the computation of %v elements", name, shape)
		}
		in := &graph.Value{Name: name, DType: graph.Float32, Shape: shape}
		g.Values[name], g.Inputs = in, append(g.Inputs, in)
		return in, nil
	}
	inv := &graph.Value{Name: "std/inv", DType: graph.Float32, Shape: graph.StaticShape(st.Rows, 1)}
	g.Values[inv.Name], g.Inputs = inv, append(g.Inputs, inv)
	invK := b.constant("std", []int64{1}, 1/float32(st.K))
	// Scale·γ_o, a row each: GainScale_o·gain_o, a constant γ's rows, or
	// Scale alone.
	var num *graph.Value
	switch {
	case st.Gain != "":
		gain, err := input(st.Gain, graph.StaticShape(st.Rows, 1))
		if err != nil {
			return nil, err
		}
		num = b.op("Mul", nil, gain, b.constant("std", []int64{st.Rows, 1}, st.GainScale...))
	case st.Gamma != "":
		gm := sub.Values[st.Gamma]
		if gm == nil || gm.Const == nil {
			return nil, fmt.Errorf("γ %q is neither a gain nor a constant", st.Gamma)
		}
		r, err := gammaRows(gm.Const, st.Scaled, st.Rows, st.Scale)
		if err != nil {
			return nil, err
		}
		num = b.constant("std", []int64{st.Rows, 1}, r...)
	default:
		num = b.constant("std", []int64{1}, st.Scale)
	}
	c := b.op("Mul", nil, num, inv)
	coefW := b.op("Mul", nil, c, c)
	// The ghost form's (runtime.PerSampleOps.StandardizedGhostTerms):
	// cA = c²/K and cB = c²·(2 − ‖x̂_o‖²/K)/K, with ‖x̂_o‖²/K = v/(v + ε)
	// = 1 − ε/(v + ε) and 1ᵀx̂_o = 0 (the instantiated form sums x̂'s own:
	// the two differ by x̂'s rounding), from the rows' statistics alone —
	// no pass over x̂: cB = cA·(1 + ε·(1/σ)²).
	cK := b.op("Mul", nil, coefW, invK)
	epsInv2 := b.op("Mul", nil, b.op("Mul", nil, inv, inv), b.constant("std", []int64{1}, st.Epsilon))
	cB := b.op("Mul", nil, cK, b.op("Add", nil, b.constant("std", []int64{1}, 1), epsInv2))
	perRow := func(v *graph.Value) *graph.Value { return b.op("Reshape", nil, v, b.ints("std", st.Rows)) }
	g.Outputs = []*graph.Value{perRow(coefW), perRow(cK), perRow(cB), perRow(c)}
	if st.Gain != "" {
		sq := make([]float32, len(st.GainScale))
		for o, v := range st.GainScale {
			sq[o] = v * v
		}
		g.Outputs = append(g.Outputs, b.op("Identity", nil, b.constant("std", []int64{st.Rows}, sq...)),
			b.op("Identity", nil, b.constant("std", []int64{st.Rows}, st.GainScale...)))
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			in.Consumers = append(in.Consumers, n)
		}
	}
	if err := g.InferShapes(nil); err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return g, nil
}

// gammaRows returns scale·γ row by row: γ (a constant) broadcast over the
// leading axes of scaled whose product is rows, constant over the rest.
func gammaRows(gamma *graph.Tensor, scaled []int64, rows int64, scale float32) ([]float32, error) {
	// γ's shape right-aligned against scaled, and its strides.
	gs := make([]int64, len(scaled))
	for d := range gs {
		gs[d] = 1
	}
	copy(gs[len(scaled)-len(gamma.Shape):], gamma.Shape)
	strides := make([]int64, len(gs))
	for d, st := len(gs)-1, int64(1); d >= 0; d-- {
		strides[d] = st
		st *= gs[d]
	}
	lead := 0
	for p := int64(1); p < rows && lead < len(scaled); lead++ {
		p *= scaled[lead]
	}
	out := make([]float32, rows)
	for r := range rows {
		rem, at := r, int64(0)
		for d := lead - 1; d >= 0; d-- {
			i := rem % scaled[d]
			rem /= scaled[d]
			if gs[d] != 1 {
				at += i * strides[d]
			}
		}
		if at >= int64(gamma.Len()) {
			return nil, fmt.Errorf("γ of shape %v against %v", gamma.Shape, scaled)
		}
		out[r] = scale * float32(gamma.At(int(at)))
	}
	return out, nil
}

// statBuilder appends statGraph's nodes (opset 17: ReduceMean's axes an
// attribute).
type statBuilder struct{ valueMaker }

func (b *statBuilder) op(op string, attrs []*onnxpb.AttributeProto, in ...*graph.Value) *graph.Value {
	out := b.value("std")
	n := &graph.Node{Name: "std/" + op + fmt.Sprint(b.fresh), OpType: op, Opset: 17, Inputs: in, Outputs: []*graph.Value{out}, Attrs: attrs}
	out.Producer = n
	b.g.Nodes = append(b.g.Nodes, n)
	return out
}

// refresh clears the terms and, with stats, recomputes x̂ and the
// coefficients on the parameters' current values (once a logical batch:
// Engine.stdCurrent).
func (s *stdState) refresh(e *Engine, stats bool) error {
	e.ops.ZeroNormSq(s.tW)
	if s.tG != nil {
		e.ops.ZeroNormSq(s.tG)
	}
	if !stats {
		return nil
	}
	e.stdRefreshes++
	d, _ := s.stat.Input(0)
	e.lay.Copy(s.inv, d)
	if s.gain != nil {
		d, _ := s.stat.Input(1)
		e.lay.Copy(s.gain.data, d)
	}
	if err := s.stat.Forward(); err != nil {
		return fmt.Errorf("dpengine: the standardization of %s: %w", s.w.name, err)
	}
	s.coefW, _ = s.stat.Output(0)
	s.cA, _ = s.stat.Output(1)
	s.cB, _ = s.stat.Output(2)
	s.scaleW, _ = s.stat.Output(3)
	if s.gain != nil {
		s.coefG, _ = s.stat.Output(4)
		s.gainScale, _ = s.stat.Output(5)
	}
	return nil
}

// add takes the norm terms of n samples' gradients g of the weight the
// layer reads (from sample i0; each sample's rows from the element off of
// the weight, whole rows).
func (s *stdState) add(ops runtime.DPOps, i0, n, off int, g []float32) {
	B := s.B
	r0 := off / s.k
	rows := len(g) / (n * s.k)
	var cg []float32
	var tg []float64
	if s.tG != nil {
		cg, tg = s.coefG[r0:r0+rows], s.tG[r0*B+i0:]
	}
	ops.StandardizedNormTerms(g, s.xhat[r0*s.k:(r0+rows)*s.k], s.coefW[r0:r0+rows], cg, rows, s.k, n, B, s.tW[r0*B+i0:], tg)
}

// finish adds each sample's terms to the parameters' squared norms once
// the layer's rule has run on every sample.
func (s *stdState) finish(ops runtime.DPOps) {
	ops.SumNormRows(s.tW, s.sums)
	ops.AddNormSq(s.sums, s.w.normSq)
	if s.gain != nil {
		ops.SumNormRows(s.tG, s.sums)
		ops.AddNormSq(s.sums, s.gain.normSq)
	}
}

// convStdGhost takes the norms of the standardized weight of st, read by
// the convolution s with input x and output gradient dy, without
// instantiating a sample's gradient g (the layer's decision is ghost:
// T² small against p·D). W's row o contributes c_o²‖g_o − (1ᵀg_o/K)·1 −
// (x̂_oᵀg_o/K)·x̂_o‖² = c_o²‖g_o‖² + the row's StandardizedGhostTerms
// term (c = Scale·γ/σ): the first summed over the rows is the ghost norm
// of dy with row o scaled by c_o, taken by the convolution's own ghost
// rule (gus,
// whose squared norms are W's); x̂_oᵀg_o = Σ_t dy_{o,t}·x̂_oᵀa_t and 1ᵀg_o
// = Σ_t dy_{o,t}·1ᵀa_t come from the convolution of the input by x̂ (the
// layer's own, a forward pass's GEMM for the batch, in place of B thin
// products of p·D each and their rows read back) and by a row of ones a
// group. The terms are float64 sums of float32 products; the ghost norm
// is the convolution rule's, so a gradient lying along 1 or x̂ cancels
// to the Grams' rounding (as a ghost norm whose terms cancel does), not
// the instantiated form's float64: the norm check holds both to the
// same bound.
func (e *Engine) convStdGhost(st *stdState, s *runtime.ConvShape, x, dy *runtime.View) error {
	N, M, T := s.N, s.M, s.T
	if M != st.rows || s.D != st.k || max(s.Group, 1) != st.groups {
		return fmt.Errorf("convolution of %d×%d in %d groups, its standardized weight %d×%d in %d", M, s.D, max(s.Group, 1), st.rows, st.k, st.groups)
	}
	G := st.groups
	zLen, uLen := N*M*T, N*G*T
	buf, err := regrowOn(e.dev, e.stdGhostBuf, zLen+uLen)
	if err != nil {
		e.stdGhostBuf = nil
		return err
	}
	e.stdGhostBuf = buf
	if len(e.stdOnes) < G*s.D {
		if e.stdOnes, err = regrowOn(e.dev, e.stdOnes, G*s.D); err != nil {
			return err
		}
		e.lay.Fill(1, e.stdOnes)
	}
	// Σ_o c_o²‖g_o‖²: the ghost norm of dy's rows scaled by c_o, added
	// to W's squared norms.
	scaled, z, u := buf[:zLen], buf[:zLen], buf[zLen:zLen+uLen]
	e.lay.Copy(dy.Data[:zLen], scaled)
	e.ops.ScaleRows(st.scaleW, 1, scaled, T, T)
	sv := *dy
	sv.Data = scaled
	st.gus.p.normSq = st.w.normSq
	if err := convUseOn(e, st.gus, s, x, &sv); err != nil {
		return err
	}
	if st.uShape == nil {
		us := &runtime.ConvShape{N: N, C: s.C, M: G, Group: G, In: s.In, Kernel: s.Kernel, Strides: s.Strides, Dilations: s.Dilations, Pads: s.Pads}
		if err := us.Init(); err != nil {
			return fmt.Errorf("the convolution by ones: %w", err)
		}
		st.uShape = us
	}
	// The plan's workspace holds its own convolution's (s) scratch; the
	// one by ones may want more.
	ws := e.plan.Scratch()
	if need := e.lay.ConvScratchSize(st.uShape); need > len(ws) {
		if e.stdConvWS, err = regrowOn(e.dev, e.stdConvWS, need); err != nil {
			return err
		}
		ws = e.stdConvWS
	}
	e.lay.Conv(st.uShape, x.Data, e.stdOnes[:G*s.D], nil, u, ws)
	e.lay.Conv(s, x.Data, st.xhat, nil, z, e.plan.Scratch())
	var cg []float32
	if st.tG != nil {
		cg = st.coefG
	}
	e.ops.StandardizedGhostTerms(dy.Data, z, u, st.cA, st.cB, cg, M, G, T, e.n, st.B, st.tW, st.tG)
	return nil
}

// stdClippedSum adds book-keeping's Σ_i C_i g_i of W and the gain to their
// accumulators: the layer's weighted sum of the weight it reads, taken
// back through the standardization in closed form (its vector-Jacobian
// product, linear in the gradient: runtime.PerSampleOps.StandardizedVJP
// on x̂ and c of the current parameters) — no plan of the computation,
// no forward and backward pass of it a physical batch.
func (e *Engine) stdClippedSum(g *useGroup, f []float32, B int) error {
	s := g.std
	if err := g.virt.linear.weightedSum(f, B, s.sumD, true, &e.bkScratch, e.plan.Scratch()); err != nil {
		return fmt.Errorf("dpengine: %s: %w", s.w.name, err)
	}
	e.ops.StandardizedVJP(s.sumD, s.xhat, s.scaleW, s.gainScale, s.rows, s.k, s.gainD)
	s.w.accumulate(e.ops, e.lay, s.sumD)
	if s.gain != nil {
		s.gain.accumulate(e.ops, e.lay, s.gainD)
	}
	return nil
}
