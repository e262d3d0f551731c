package dpengine

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/dpfinetune/dpfinetune/graph"
	par "github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// useGroup is the set of parameter uses that read the same operand of the
// same consumer node: usually one, several when a derived operand (a qkv
// bias concatenated from q_bias and v_bias) carries several parameters.
type useGroup struct {
	output  string // consumer's first output: the hook key
	op      string
	operand int
	uses    []*useState
	// linear or elem is the consumer's per-sample rule (rules.go).
	linear *linearRule
	elem   *elementwiseRule
	// sub back-propagates an elementwise operand's per-sample gradient
	// through the parameter-only path to the parameters (nil for direct
	// uses; a linear operand's uses map back through useState.idx).
	sub     *runtime.Plan
	subBase []float32 // zero-filled operand-shaped buffer for batched operands
	// bcast is the shape [B, …] an operand's batch gradient reduces to,
	// sample by sample, where the path only reshapes the parameter and
	// broadcasts it over the batch (broadcastPath); nil elsewhere.
	// split and splitOut are concatBatch's layout of the operand in the
	// output and its one destination; foldFrom and foldTo its reduction's
	// shapes where a sample spans several rows ([B, k, …] to [B, 1, …]:
	// a class token prepended to each of a sample's augmented views).
	bcast            []int
	split            *runtime.RowBlocks
	splitOut         [][]float32
	foldFrom, foldTo []int
	// slopeShape is a PRelu slope's shape right-aligned against its
	// input's, without the batch axis (preluBatch, set at its first step).
	slopeShape []int
	// contract is a general Einsum weight's contraction over the whole
	// batch (einsumOperandBatch, built at its first step).
	contract *runtime.ContractLoop
	// derived marks an operand computed from its parameters
	// (rewrite.Use.Transform: weight standardization, a position-bias
	// MLP): sub's forward pass depends on the parameters' values, and
	// refreshDerived reruns it on the current ones before each physical
	// batch. virt is the operand as a parameter of its own, whose
	// per-sample gradients (virt.p.ps) the consumer's rule writes and
	// deriveBack takes back through the computation to the parameters
	// after the backward pass.
	derived bool
	virt    *useState
	// lift, where the computation lifts over samples (liftSamples),
	// computes it for liftN samples at once: deriveBack takes liftN
	// samples' products in one backward pass instead of one each through
	// sub (which a linear operand's then drops).
	lift  *runtime.Plan
	liftN int
	// direct, for an elementwise operand computed from parameters, is
	// the group its rule sees instead where the operand carries no batch
	// (every computation of parameters alone): virt as a parameter read
	// directly, whose per-sample gradients the rule writes as it would a
	// bias's (in one batched call where the device batches samples);
	// virtFilled records that it did in this backward pass, and deriveBack
	// then takes them back. An operand that carries the batch (a
	// computation expanded over it) keeps the per-sample path through
	// sub. The first backward pass settles which (hook), and the other
	// path's state is dropped.
	direct     *useGroup
	virtFilled bool
	// std, for a Conv weight computed by weight standardization
	// (rewrite.Standardized) where the mode needs only its norms and one
	// clipped sum (stdApplies), takes the norms in closed form from the
	// virt's per-sample gradients as the rule forms them, which virt
	// then does not keep (standardized.go).
	std *stdState
}

// serialOpBelow is the per-sample output-gradient size below which the
// kernels operandGrad calls run on one core (twice their elementwise
// grain, 2¹⁵), so that elementwiseGroup splits samples over the cores
// instead. A variable for tests only.
var serialOpBelow = 1 << 16

// opScratch is one worker's buffers for operandGrad: the operand-shaped
// result and the gathered sample slices it works on.
type opScratch struct {
	// Device memory (grown with growOn, gatherOn and growF64On): acc
	// holds the float64 sums of a general Einsum's contraction and of a
	// normalization's affine gradient.
	buf, gi, other, self, d, q []float32
	acc                        []float64
}

type useState struct {
	use    *rewrite.Use
	p      *param
	linear *linearState
	// idx maps the operand of a linear use through a path back to the
	// parameter (buildPathMap); nil for direct uses.
	idx []int32
	// std is the closed form that takes this (virtual) use's per-sample
	// gradients where it is set (useGroup.std).
	std *stdState
	// rowsMap, on a device that batches its per-sample work, is an
	// elementwise use's layout-only path as an index map (buildPathMap),
	// through which arithmeticBatch maps the samples' operand gradients
	// back at once instead of running the group's sub-plan sample by
	// sample; nil elsewhere.
	rowsMap *runtime.IndexMap
}

// addSample adds inst, the per-sample gradient of sample i with respect to
// the elements off… of the use's operand, to the parameter: to its
// per-sample gradient (through idx, for a use through a path) or, where
// the parameter keeps none, its squared norm to the sample's.
func (us *useState) addSample(ops runtime.DPOps, i, off int, inst []float32) {
	p := us.p
	size := len(p.data)
	switch {
	case us.std != nil:
		us.std.add(ops, i, 1, off, inst)
	case us.idx != nil && us.linear != nil && us.linear.pathMap != nil && off == 0 && len(inst) == len(us.idx):
		// The whole operand, on a GPU: mapped back by the device-resident
		// adjoint (pathMap), then added.
		g := (*us.linear.gatherBuf)[:size]
		us.linear.lay.IndexGatherBackward(inst, us.linear.pathMap, g)
		ops.Add(g, p.ps[i*size:(i+1)*size])
	case us.idx != nil:
		ops.ScatterAdd(p.ps[i*size:(i+1)*size], inst, us.idx[off:off+len(inst)])
	case p.ps != nil:
		ops.Add(inst, p.ps[i*size+off:i*size+off+len(inst)])
	default:
		ops.AddSumSq(inst, p.normSq[i:i+1])
	}
}

// useDecision is how the engine obtains a linear use's per-sample norm in
// mode m: the plan's layerwise decision in mixed and bk mode, ghost
// everywhere in ghost mode, instantiation in instantiate mode, and
// instantiation wherever a ghost norm would not be the parameter's (see
// rewrite.Use.GhostAllowed: shared parameters, paths that do not keep
// the norm), whatever the mode.
func useDecision(m Mode, u *rewrite.Use) rewrite.Decision {
	switch {
	case m == Instantiate || !u.GhostAllowed():
		return rewrite.Instantiate
	case m == Ghost:
		return rewrite.Ghost
	}
	return u.Layer.Decision
}

// forSamples runs fn(w, i) for i in [0, n) on up to the device's Workers()
// goroutines; w identifies the worker, so fn can use per-worker buffers.
// Each sample is handled by exactly one worker, which therefore owns that
// sample's norm and per-sample gradient slots.
func (e *Engine) forSamples(n int, fn func(w, i int)) {
	e.countSampleLoop()
	forSamplesOn(e.ops.Workers(), n, fn)
}

// forSamplesOn is forSamples on at most workers goroutines.
func forSamplesOn(workers, n int, fn func(w, i int)) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var wg par.Group
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				fn(w, i)
			}
		}(w)
	}
	wg.Wait()
}

// linearState is a linear use's layer and book-keeping storage.
type linearState struct {
	rule     *linearRule
	layer    *rewrite.Layer
	decision rewrite.Decision
	// bk: the layer's input and output gradient as the runtime holds
	// them (Options.KeepHooked keeps them alive until the next Forward):
	// for Conv (N, C, …) and (N, M, …); for Gemm/MatMul rows of D and p
	// features, sample of row r given by the batch stride.
	x, dy             []float32
	xStride, dyStride int
	conv              *runtime.ConvShape
	convRows          convRows    // how conv's rows hold the samples
	foldCols          [][]float32 // per worker, a folded sample's unfolded rows (convFoldedUse)
	ops               runtime.DPOps
	lay               runtime.GraphOps // the device's fills, copies, gathers and scatters
	dev               runtime.Device   // where its scratch is allocated
	einsum            *einsumGeom
	// idx maps the operand back to the parameter for a use through a
	// path (ghost norm and book-keeping's weighted sum on the operand);
	// mapBuf is the engine's operand-shaped scratch for it. pathMap is
	// idx as an IndexMap where the engine batches samples (a GPU): the
	// weighted sum then maps back with IndexGatherBackward, a thread per
	// parameter element reading a device-resident adjoint, instead of
	// ScatterAdd's one thread over the operand; gatherBuf, the engine's
	// parameter-shaped scratch, holds it before it is added.
	idx       []int32
	mapBuf    *[]float32
	pathMap   *runtime.IndexMap
	gatherBuf *[]float32
	T         int
	// weightLayoutPD is true when the parameter is laid out p×D (Conv,
	// Gemm with transB) rather than D×p (MatMul, Gemm without transB).
	weightLayoutPD bool
	alpha          float32
	// gram is the convolution's ghost norm from its input's Gram
	// (rule_conv.go, inputGramFor), built at the first use; gramTried
	// records that the layer was looked at.
	gram      *inputGram
	gramTried bool
	// permA and permG gather a Gemm's or MatMul's input and output
	// gradient sample by sample for matrixBatched (rule_matmul.go).
	permA, permG *runtime.PermPlan
}

// needPerSample reports whether a parameter keeps B per-sample gradients.
func needPerSample(cfg Config, rp *rewrite.Param) bool {
	if rp.Shared || cfg.Mode == Instantiate {
		return true
	}
	for _, u := range rp.Uses {
		if u.Standardized != nil && stdApplies(cfg) {
			continue // norms in closed form (useGroup.std)
		}
		if u.Kind == rewrite.KindElementwise && (cfg.Mode == BK || len(u.Path) > 0) {
			return true
		}
		// An instantiated gradient through a path is mapped back into
		// the parameter's per-sample gradient before its norm.
		if u.Kind == rewrite.KindLinear && len(u.Path) > 0 && cfg.Mode != NonDP && useDecision(cfg.Mode, u) == rewrite.Instantiate {
			return true
		}
		// Book-keeping keeps a layer's output gradient (T·p per group and
		// sample) and input for Σ_i C_i a_iᵀg_i; where the instantiated
		// per-sample gradient (p·D) is no larger, keeping it instead saves
		// memory and the second pass over the layer (D ≤ T: early conv
		// layers with large feature maps).
		if u.Kind == rewrite.KindLinear && cfg.Mode == BK && u.Layer != nil && u.Layer.Decision == rewrite.Instantiate && u.Layer.D <= u.Layer.T {
			return true
		}
	}
	return false
}

// arenaPerSampleMin is the size, in floats, from which a parameter's
// per-sample gradients are kept in the runtime plan's arena rather than
// in psAll (arenaPerSample): below it the memory is small, and the
// parameter's own zeroing, norm and clipped-sum calls would cost more
// launches than its share of psAll's. The tests lower it;
// arenaPerSampleOff (tests only) keeps every one in psAll.
var (
	arenaPerSampleMin int64 = 4096
	arenaPerSampleOff bool
)

// arenaPerSample reports whether the per-sample gradients of rp live in a
// hook buffer of the runtime plan (runtime.Options.HookBuffers) rather
// than in psAll: in book-keeping and instantiation, which read them only
// after the backward pass, for a parameter of one use (whose hook fills
// them; a shared parameter's several hooks would each have to find the
// first) of at least arenaPerSampleMin floats that keeps them — in
// book-keeping an elementwise use or a direct linear one instantiated
// (needPerSample), the per-sample terms rewrite.Plan.MemoryAt counts. The
// buffer is live from the use's hook to the end of the step, in memory
// the backward pass has freed by then: an early layer's per-sample
// gradients are formed after the activations of the layers behind it are
// gone (ResNet-50 at batch 32: 125 MB of them, 10 MB more arena).
func arenaPerSample(cfg Config, rp *rewrite.Param) bool {
	if arenaPerSampleOff || rp.Shared || len(rp.Uses) != 1 || rp.Size < arenaPerSampleMin || !needPerSample(cfg, rp) {
		return false
	}
	if u := rp.Uses[0]; u.Kind == rewrite.KindLinear && u.Transform {
		// Filled after the backward pass (deriveBack), not by a hook.
		return false
	}
	switch u := rp.Uses[0]; cfg.Mode {
	case Instantiate:
		return true
	case BK:
		return u.Kind == rewrite.KindElementwise || len(u.Path) == 0
	}
	return false
}

// hookPerSample returns, per consumer output name, the per-sample floats
// of the parameters whose per-sample gradients that node's hook buffer
// holds (arenaPerSample), and their sum over all parameters.
func hookPerSample(cfg Config, rp *rewrite.Plan) (map[string]int, int64) {
	var byOut map[string]int
	var total int64
	for _, prm := range rp.Params {
		if prm.Kind == rewrite.KindFrozen || !arenaPerSample(cfg, prm) {
			continue
		}
		if byOut == nil {
			byOut = map[string]int{}
		}
		byOut[prm.Uses[0].Output] += int(prm.Size)
		total += prm.Size
	}
	return byOut, total
}

// hookPS is the hook buffer of one consumer node holding per-sample
// gradients (arenaPerSample): its hook clears it before the rules add
// into it; filled records that it did in this backward pass.
type hookPS struct {
	buf    []float32
	filled bool
}

// psRun is a run of parameters of one size that keep per-sample
// gradients, back to back in psAll (B rows each) and in paramNormSq (a
// row of B each): one SquaredNorms call gives all their per-sample norms.
// A parameter whose per-sample gradients are in a hook buffer
// (arenaPerSample) is a run of its own.
type psRun struct {
	ps     []float32
	normSq []float64
	// accum spans the run's accumulators, stride floats apart in
	// accumAll (runtime.BlockOffsets), where they are in order
	// (trainableOrder), and params the run's parameters: clipRuns forms
	// their clipped sums as one product.
	accum  []float32
	stride int
	params []*param
}

// layPerSample lays out the per-sample gradients of the parameters that
// keep them (needPerSample): the large ones of one use in their
// consumer's hook buffer in the plan's arena (arenaPerSample), the others
// in one block, psAll, in the parameters' order — grouped by size, as
// trainableOrder put them — and gives those parameters the first rows of
// paramNormSq in the same order, so that their norms are one
// SquaredNorms call per size (psRuns): a ViT's LayerNorm affines and
// biases are a few sizes. The others keep the rows after, in the
// parameters' order.
func (e *Engine) layPerSample() error {
	B := e.cfg.PhysicalBatch
	var keep []*param
	inArena := map[*param]string{} // the consumer output whose hook buffer holds p.ps
	for _, p := range e.params {
		rp := e.rp.Param(p.name)
		if rp == nil || rp.Kind == rewrite.KindFrozen || !needPerSample(e.cfg, rp) {
			continue
		}
		keep = append(keep, p)
		if arenaPerSample(e.cfg, rp) {
			inArena[p] = rp.Uses[0].Output
		}
	}
	// trainableOrder put them first, by size: their accumulators are then
	// accumAll's first elements, a run's a padded size apart.
	prefix := true
	total := 0
	for k, p := range keep {
		prefix = prefix && e.params[k] == p
		if _, ok := inArena[p]; !ok {
			total += B * len(p.data)
		}
	}
	// The hook buffers, filled in the parameters' order.
	used := map[string]int{}
	for _, p := range keep {
		out, ok := inArena[p]
		if !ok {
			continue
		}
		buf := e.plan.HookBuffer(out)
		n := B * len(p.data)
		if used[out]+n > len(buf) {
			return fmt.Errorf("dpengine: the hook buffer of %s holds %d floats, not the per-sample gradients of %s (%d more after %d)", out, len(buf), p.name, n, used[out])
		}
		p.ps = buf[used[out] : used[out]+n : used[out]+n]
		used[out] += n
		if e.hookPS == nil {
			e.hookPS = map[string]*hookPS{}
		}
		if e.hookPS[out] == nil {
			e.hookPS[out] = &hookPS{buf: buf}
		}
	}
	if total > 0 {
		var err error
		if e.psAll, err = e.alloc(total, "the per-sample gradients"); err != nil {
			return err
		}
		e.psAll = e.psAll[:total:total]
	}
	row, off := 0, 0
	rowOf := func(p *param) {
		p.normSq = e.paramNormSq[row*B : (row+1)*B : (row+1)*B]
		row++
	}
	for k, p := range keep {
		n := B * len(p.data)
		_, arena := inArena[p]
		if arena {
			e.psRuns = append(e.psRuns, psRun{ps: p.ps[:0], normSq: e.paramNormSq[row*B : row*B]})
		} else {
			p.ps = e.psAll[off : off+n : off+n]
			if _, after := inArena[keep[max(k-1, 0)]]; k == 0 || after || len(p.data) != len(keep[k-1].data) {
				e.psRuns = append(e.psRuns, psRun{ps: e.psAll[off:off], normSq: e.paramNormSq[row*B : row*B]})
			}
			off += n
		}
		r := &e.psRuns[len(e.psRuns)-1]
		r.ps = r.ps[:len(r.ps)+n]
		r.normSq = r.normSq[:len(r.normSq)+B]
		r.params = append(r.params, p)
		rowOf(p)
	}
	// A run's accumulators, one padded size apart in accumAll where the
	// kept parameters come first (else clipRuns steps aside).
	for k := range e.psRuns {
		if r := &e.psRuns[k]; prefix {
			first, last := r.params[0], r.params[len(r.params)-1]
			r.accum = e.accumAll[first.off : last.off+len(last.data)]
			r.stride = runtime.BlockSpan(len(first.data))
		}
	}
	for _, p := range e.params {
		if p.ps == nil {
			rowOf(p)
		}
	}
	return nil
}

// buildUses indexes the plan's parameter uses by consumer node, looks up
// each consumer's per-sample rule and prepares the paths: sub-plans for
// elementwise operands, index maps for linear ones.
func (e *Engine) buildUses(cg *graph.Graph) error {
	B := e.cfg.PhysicalBatch
	type key struct{ out, operand string }
	byKey := map[key]*useGroup{}
	if err := e.layPerSample(); err != nil {
		return err
	}
	for _, rp := range e.rp.Params {
		if rp.Kind == rewrite.KindFrozen {
			continue
		}
		p := e.byName[rp.Name]
		if p == nil {
			return fmt.Errorf("dpengine: trainable parameter %q is not in the compiled plan", rp.Name)
		}
		for _, u := range rp.Uses {
			k := key{u.Output, u.OperandValue}
			g := byKey[k]
			if g == nil {
				g = &useGroup{output: u.Output, op: u.Op, operand: u.Operand}
				var err error
				if u.Kind == rewrite.KindLinear {
					g.linear, err = linearRuleFor(u.Op)
				} else {
					g.elem, err = elementwiseRuleFor(u.Op)
				}
				if err != nil {
					return fmt.Errorf("dpengine: %s of %s: %w", rp.Name, u.Output, err)
				}
				byKey[k] = g
				e.groups[u.Output] = append(e.groups[u.Output], g)
			}
			us := &useState{use: u, p: p}
			if u.Kind == rewrite.KindLinear {
				ls := &linearState{ops: e.ops, lay: e.lay, dev: e.dev, rule: g.linear, layer: u.Layer, decision: useDecision(e.cfg.Mode, u), mapBuf: &e.mapScratch}
				us.linear = ls
				p.linear = append(p.linear, ls)
			}
			g.uses = append(g.uses, us)
		}
	}
	for _, gs := range e.groups {
		for _, g := range gs {
			if len(g.uses[0].use.Path) == 0 {
				continue
			}
			for _, us := range g.uses {
				if len(us.use.Path) == 0 {
					return fmt.Errorf("dpengine: operand %q of %s mixes direct and derived parameters", g.uses[0].use.OperandValue, g.output)
				}
				g.derived = g.derived || us.use.Transform
			}
			if g.linear != nil && !g.derived {
				if err := e.buildLinearPaths(cg, g); err != nil {
					return err
				}
				continue
			}
			if g.linear == nil {
				if len(g.uses) == 1 && !g.derived {
					g.bcast = broadcastPath(cg, g.uses[0], B)
				}
				if e.batchSamples && !g.derived && (g.op == "Add" || g.op == "Mul") { // arithmeticBatch's
					e.buildRowsMaps(cg, g)
				}
			}
			std := g.derived && g.linear != nil && g.uses[0].use.Standardized != nil && stdApplies(e.cfg)
			var sub *graph.Graph
			var err error
			if std {
				// Norms and book-keeping's sum in closed form: the second
				// backward pass of ghost and mixed sums through the
				// model's own computation, and nothing runs the
				// computation alone.
				sub, err = cg.Extract(g.uses[0].use.OperandValue)
			} else {
				sub, err = e.buildSub(cg, g)
			}
			if err != nil {
				return err
			}
			if g.derived {
				build := e.buildVirtual
				if std {
					build = e.buildStd
				}
				if err := build(sub, g); err != nil {
					return err
				}
				e.derived = append(e.derived, g)
			}
		}
	}
	// A parameter in several computations gets their gradients in one
	// order: its per-sample sums do not depend on the map's.
	slices.SortFunc(e.derived, func(a, b *useGroup) int {
		return cmp.Or(cmp.Compare(a.output, b.output), cmp.Compare(a.operand, b.operand))
	})
	return nil
}

// buildSub compiles the sub-plan of group g's operand: its subgraph from
// the parameters, trainable, through which per-sample gradients with
// respect to the operand go back to them. It returns the subgraph.
func (e *Engine) buildSub(cg *graph.Graph, g *useGroup) (*graph.Graph, error) {
	var names []string
	for _, u := range g.uses {
		names = append(names, u.p.name)
	}
	sub, err := cg.Extract(g.uses[0].use.OperandValue)
	if err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	g.sub, err = runtime.Compile(sub, &runtime.Options{Device: e.cfg.Device, Trainable: names, KeepActivations: true})
	if err != nil {
		return nil, fmt.Errorf("dpengine: path of %v: %w", names, err)
	}
	if err := g.sub.Forward(); err != nil {
		return nil, fmt.Errorf("dpengine: path of %v: %w", names, err)
	}
	return sub, nil
}

// buildVirtual gives group g, whose operand is computed from its
// parameters, the operand as a parameter of its own (useGroup.virt),
// with B rows of per-sample gradients — a linear one instantiated (a
// ghost norm of the operand is not the parameters'), an elementwise one
// read directly (useGroup.direct) — and the computation lifted over the
// samples where it lifts (useGroup.lift).
func (e *Engine) buildVirtual(sub *graph.Graph, g *useGroup) error {
	us := g.uses[0]
	out, shape := g.sub.Output(0)
	B := e.cfg.PhysicalBatch
	ps, err := e.alloc(B*len(out), "the per-sample gradients of "+us.use.OperandValue)
	if err != nil {
		return err
	}
	data, err := e.alloc(len(out), "the value of "+us.use.OperandValue)
	if err != nil {
		return err
	}
	v := &param{name: us.use.OperandValue, data: data, shape: shape, ps: ps}
	g.virt = &useState{use: us.use, p: v}
	if g.linear != nil {
		g.virt.linear = &linearState{ops: e.ops, lay: e.lay, dev: e.dev, rule: g.linear, layer: us.use.Layer, decision: rewrite.Instantiate, mapBuf: &e.mapScratch}
	} else {
		g.direct = &useGroup{output: g.output, op: g.op, operand: g.operand, uses: []*useState{g.virt}, elem: g.elem}
	}
	if liftOff {
		return nil
	}
	// Samples a lifted pass: as many as keep its values and their
	// gradients within the operand's per-sample gradients (B rows) or
	// liftMinFloats, whichever is more, a divisor of B so that the passes
	// tile the rows.
	var floats int
	for _, x := range sub.Values {
		if x.DType.IsFloat() && x.Shape.Static() {
			floats += int(x.Shape.NumElements())
		}
	}
	n := max(1, min(B, max(B*len(out), liftMinFloats)/max(2*floats, 1)))
	for B%n != 0 {
		n--
	}
	var names, lifted []string
	for _, u := range g.uses {
		names = append(names, u.p.name)
		lifted = append(lifted, u.p.name+liftedSuffix)
	}
	lg, err := liftSamples(sub, names, n)
	if err != nil {
		return nil // the computation keeps its per-sample loop
	}
	plan, err := runtime.Compile(lg, &runtime.Options{Device: e.cfg.Device, Trainable: lifted, KeepActivations: true})
	if err != nil {
		return nil
	}
	g.lift, g.liftN = plan, n
	if g.linear != nil {
		g.sub = nil // an elementwise operand's keeps it for a batch-carrying operand
	}
	return nil
}

// liftOff (tests only) keeps every computed operand's per-sample loop.
// liftMinFloats is the memory a lifted computation may take in any case
// (rewrite.LiftMinFloats): a small computation's samples then go in one
// pass.
var (
	liftOff       bool
	liftMinFloats = rewrite.LiftMinFloats
)

// refreshDerived reruns the sub-plans of the operands computed from
// parameters on the parameters' current values (copied in), so that
// their backward passes differentiate the computation where the step's
// forward pass did, and clears the linear ones' per-sample gradients; a
// standardized weight's statistics it recomputes at a logical batch's
// first physical batch only (Engine.stdCurrent), its norm terms it clears
// every time.
func (e *Engine) refreshDerived() error {
	for _, g := range e.derived {
		for _, plan := range []*runtime.Plan{g.sub, g.lift} {
			if plan == nil {
				continue
			}
			for _, us := range g.uses {
				if plan == g.sub {
					d, _ := g.sub.Param(us.p.name)
					e.lay.Copy(us.p.data, d)
					continue
				}
				// liftN copies, one a sample, in one call.
				d, _ := g.lift.Param(us.p.name + liftedSuffix)
				n := len(us.p.data)
				e.lay.Expand(us.p.data, []int{1, n}, d, []int{g.liftN, n})
			}
			if err := plan.Forward(); err != nil {
				return fmt.Errorf("dpengine: the computation of %s: %w", g.uses[0].use.OperandValue, err)
			}
		}
		if g.std != nil {
			if err := g.std.refresh(e, !e.stdCurrent || stdStatsEveryBatch); err != nil {
				return err
			}
			continue
		}
		if g.virt != nil {
			e.lay.Fill(0, g.virt.p.ps)
		}
		g.virtFilled = g.linear != nil
	}
	e.stdCurrent = true
	return nil
}

// stdStatsEveryBatch, set only by tests, recomputes the standardized
// weights' statistics every physical batch (the oracle of computing them
// once a logical batch).
var stdStatsEveryBatch bool

// deriveBack takes the per-sample gradients of every operand computed
// from parameters that its rule wrote in this backward pass back to the
// parameters' per-sample gradients: the computation's vector-Jacobian
// products, liftN samples a backward pass of the lifted computation, or
// one a pass of its sub-plan.
func (e *Engine) deriveBack() error {
	for _, g := range e.derived {
		if g.virt == nil || !g.virtFilled {
			continue
		}
		size := len(g.virt.p.data)
		if g.lift != nil {
			// liftN samples a pass: their rows of the operand's
			// gradients in, theirs of each parameter's out.
			N := g.liftN
			if e.n > N {
				e.countSampleLoop()
			}
			for i0 := 0; i0 < e.n; i0 += N {
				if err := g.lift.BackwardFrom(g.virt.p.ps[i0*size:(i0+N)*size], nil); err != nil {
					return fmt.Errorf("dpengine: the computation of %s: %w", g.virt.p.name, err)
				}
				k := min(N, e.n-i0)
				for _, us := range g.uses {
					n := len(us.p.data)
					e.ops.Add(g.lift.Grad(us.p.name + liftedSuffix)[:k*n], us.p.ps[i0*n:(i0+k)*n])
				}
			}
			continue
		}
		e.countSampleLoop()
		for i := 0; i < e.n; i++ {
			if err := g.sub.BackwardFrom(g.virt.p.ps[i*size:(i+1)*size], nil); err != nil {
				return fmt.Errorf("dpengine: the computation of %s: %w", g.virt.p.name, err)
			}
			for _, us := range g.uses {
				n := len(us.p.data)
				e.ops.Add(g.sub.Grad(us.p.name), us.p.ps[i*n:(i+1)*n])
			}
		}
	}
	return nil
}

// buildRowsMaps gives each use of elementwise group g its path as an
// index map (useState.rowsMap) when every use's path is layout-only, and
// leaves them all nil otherwise (a path that computes, such as an
// exponentiated scale, keeps the sub-plan).
func (e *Engine) buildRowsMaps(cg *graph.Graph, g *useGroup) {
	maps := make([]*runtime.IndexMap, len(g.uses))
	for k, us := range g.uses {
		idx, err := usePathMap(cg, g, us)
		if err != nil {
			return
		}
		maps[k] = runtime.NewIndexMap(idx, len(us.p.data), 0)
	}
	for k, us := range g.uses {
		us.rowsMap = maps[k]
	}
}

// usePathMap is buildPathMap for use us of group g: the operand's
// elements that copy us's parameter, the group's other parameters told
// apart from it.
func usePathMap(cg *graph.Graph, g *useGroup, us *useState) ([]int32, error) {
	var others []string
	for _, o := range g.uses {
		if o != us {
			others = append(others, o.p.name)
		}
	}
	return buildPathMap(cg, us.use.OperandValue, us.p.name, others)
}

// addRows adds the per-sample gradients inst (n rows of the use's operand
// size, of the samples i0, i0+1, …) to the parameter, as addSample does
// row by row: in one or two calls for a direct use (addSampleRows), mapped
// back through the path's device-resident adjoint for a linear use
// through a path (addPathRows), sample by sample otherwise.
func (e *Engine) addRows(us *useState, i0, n int, inst []float32) {
	if n == 0 {
		return
	}
	size := len(inst) / n
	switch {
	case us.std != nil:
		us.std.add(e.ops, i0, n, 0, inst)
		return
	case us.idx == nil:
		if e.addSampleRows(us.p, i0, inst) {
			return
		}
	case us.linear != nil && us.linear.pathMap != nil && size == len(us.idx):
		if e.addPathRows(us.p, us.linear.pathMap, i0, n, inst) {
			return
		}
	}
	e.countSampleLoop()
	for j := 0; j < n; j++ {
		us.addSample(e.ops, i0+j, 0, inst[j*size:(j+1)*size])
	}
}

// countSampleLoop counts a per-sample loop on a device that batches its
// per-sample work (Engine.sampleLoops).
func (e *Engine) countSampleLoop() {
	if e.batchSamples {
		e.sampleLoops++
	}
}

// reservePathRows grows the scratch of addPathRows and addSampleRows for
// n samples of parameters of up to size elements, so that neither then
// fails: a batched rule that adds several parameters checks once, before
// it adds any.
func (e *Engine) reservePathRows(n, size int) bool {
	buf, err := growOn(e.dev, e.pathRows, n*size)
	if err != nil {
		return false
	}
	e.pathRows = buf
	norms, err := growF64On(e.dev, e.rowNorms, n)
	if err != nil {
		return false
	}
	e.rowNorms = norms
	return true
}

// addPathRows adds the n samples' gradients with respect to an operand
// that copies parameter p's elements through the index map m (rows of
// m.Len) to p: mapped back in one IndexGatherBackwardRows (each row the
// sums of IndexGatherBackward, the order of the sample-by-sample path),
// then added in one or two calls (addSampleRows). It reports false,
// doing nothing, when its scratch cannot be had.
func (e *Engine) addPathRows(p *param, m *runtime.IndexMap, i0, n int, inst []float32) bool {
	P := len(p.data)
	if !e.reservePathRows(n, P) {
		return false
	}
	rows := e.pathRows[:n*P]
	e.lay.IndexGatherBackwardRows(inst[:n*m.Len], m, n, rows)
	return e.addSampleRows(p, i0, rows)
}

// broadcastPath returns the shape [B, …] that the batch's gradient with
// respect to us's operand reduces to sample by sample (ReduceToShape) to
// give each sample's P sums in the parameter's order, where the path only
// reshapes the parameter and then broadcasts it over the batch (Reshape,
// Unsqueeze, Squeeze, Flatten or Identity steps, Expand last: a class
// token expanded over the batch). Reshapes keep the elements' order, and
// the reduction undoes the broadcast. It returns nil for any other path.
func broadcastPath(cg *graph.Graph, us *useState, B int) []int {
	u := us.use
	n := len(u.Path)
	op := cg.Values[u.OperandValue] // compiled for the physical batch, unlike u.OperandShape
	if n == 0 || u.Path[n-1].Op != "Expand" || u.Path[n-1].Operand != 0 || op == nil || !op.Shape.Static() || len(op.Shape) == 0 {
		return nil
	}
	opShape := op.Shape.Ints()
	if B <= 0 || opShape[0] < int64(B) || opShape[0]%int64(B) != 0 {
		return nil // B rows, or k rows a sample
	}
	for _, st := range u.Path[:n-1] {
		switch st.Op {
		case "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity":
		default:
			return nil
		}
	}
	in := us.p.name
	if n > 1 {
		in = u.Path[n-2].Output
	}
	v := cg.Values[in]
	if v == nil || !v.Shape.Static() || len(v.Shape) > len(opShape) {
		return nil
	}
	r := len(opShape)
	t := make([]int, r)
	for d := range t {
		t[d] = 1
	}
	for d, x := range v.Shape.Ints() {
		t[r-len(v.Shape)+d] = int(x)
	}
	if t[0] != 1 || numel(t) != len(us.p.data) {
		return nil
	}
	for d := range t {
		if t[d] != 1 && int64(t[d]) != opShape[d] {
			return nil
		}
	}
	t[0] = B
	return t
}

// weightedSum adds Σ_i c_i g_i of a linear use to accum (or, if
// overwrite, writes it there) from the kept input and output gradient
// (book-keeping), scaling the kept output
// gradient in place (nothing reads it after this). scratch is shared by
// all layers (they run one after the other) and ws is the plan's idle
// kernel workspace: a buffer per layer would add a whole model's worth of
// weight-gradient copies and convolution workspaces to book-keeping's
// memory (111 MB on ResNet-18 at batch 32, half of the non-private step's).
func (ls *linearState) weightedSum(c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	if len(ls.x) == 0 {
		return fmt.Errorf("no kept activations")
	}
	if ls.idx == nil {
		return ls.rule.weightedSum(ls, c, B, accum, overwrite, scratch, ws)
	}
	// Through a path: the sum on the operand, mapped back (the map is
	// linear, so mapping the sum is summing the mapped gradients).
	buf, err := growOn(ls.dev, *ls.mapBuf, len(ls.idx))
	if err != nil {
		return err
	}
	*ls.mapBuf = buf
	if err := ls.rule.weightedSum(ls, c, B, buf, true, scratch, ws); err != nil {
		return err
	}
	if ls.pathMap != nil {
		// Σ over the operand elements that read each parameter element,
		// in increasing order: ScatterAdd's sums, bit for bit where each
		// element is read once.
		if overwrite {
			ls.lay.IndexGatherBackward(buf, ls.pathMap, accum)
			return nil
		}
		g, err := growOn(ls.dev, *ls.gatherBuf, len(accum))
		if err != nil {
			return err
		}
		*ls.gatherBuf = g
		ls.lay.IndexGatherBackward(buf, ls.pathMap, g)
		ls.ops.Add(g, accum)
		return nil
	}
	if overwrite {
		ls.lay.Fill(0, accum)
	}
	ls.ops.ScatterAdd(accum, buf, ls.idx)
	return nil
}

// buildLinearPaths prepares the uses of a linear operand computed from
// parameters (one, or several concatenated) through layout-only
// operators: the index maps from the operand back to each parameter.
func (e *Engine) buildLinearPaths(cg *graph.Graph, g *useGroup) error {
	for _, us := range g.uses {
		if len(us.use.Path) == 0 {
			return fmt.Errorf("dpengine: operand %q of %s mixes direct and derived parameters", us.use.OperandValue, g.output)
		}
		idx, err := usePathMap(cg, g, us)
		if err != nil {
			return fmt.Errorf("dpengine: path of %q to %s: %w", us.p.name, g.output, err)
		}
		us.idx, us.linear.idx = idx, idx
		if e.batchSamples {
			us.linear.pathMap, us.linear.gatherBuf = runtime.NewIndexMap(idx, len(us.p.data), 0), &e.gatherScratch
			// Sized here for the largest such parameter: addSample, which
			// cannot fail, takes it as it is.
			if e.gatherScratch, err = growOn(e.dev, e.gatherScratch, max(len(e.gatherScratch), len(us.p.data))); err != nil {
				return err
			}
		}
		if len(g.uses) > 1 && us.linear.decision != rewrite.Instantiate {
			return fmt.Errorf("dpengine: operand %q of %s joins %d parameters and must be instantiated", us.use.OperandValue, g.output, len(g.uses))
		}
	}
	return nil
}

// clipPhysical runs the DP backward pass(es) of one physical batch and adds
// Σ_i C_i g_i to every parameter's accumulator.
func (e *Engine) clipPhysical(B int) error {
	e.ops.ZeroNormSq(e.normSq)
	e.ops.ZeroNormSq(e.paramNormSq)
	if len(e.psAll) > 0 {
		e.lay.Fill(0, e.psAll)
	}
	for _, h := range e.hookPS {
		h.filled = false
	}
	e.hookErr = nil
	if err := e.refreshDerived(); err != nil {
		return err
	}
	opts := &runtime.BackwardOptions{Hook: e.hook, SkipParamGrads: true}
	if err := e.plan.Backward(e.weights, opts); err != nil {
		return err
	}
	if e.hookErr != nil {
		return e.hookErr
	}
	// A hook buffer no hook cleared (none ran for its node) holds another
	// buffer's memory: its per-sample gradients are zero.
	for _, h := range e.hookPS {
		if !h.filled {
			e.lay.Fill(0, h.buf)
		}
	}
	if err := e.deriveBack(); err != nil {
		return err
	}
	// Norms of parameters that kept per-sample gradients: a call per
	// size (layPerSample).
	for _, r := range e.psRuns {
		e.ops.SquaredNorms(r.ps, r.normSq)
	}
	// Clip factors: flat over all parameters, or per parameter.
	n := e.n
	K := float64(len(e.params))
	e.ops.SumNormRows(e.paramNormSq, e.normSq) // rows of PhysicalBatch, in layPerSample's order
	if e.cfg.PerLayer {
		c := e.cfg.Clipping
		c.R /= math.Sqrt(K)
		r := c.rule()
		for k, p := range e.params {
			e.ops.ClipFactors(r, p.normSq[:n], e.factors[k][:n])
			e.lay.Fill(0, e.factors[k][n:B])
		}
	}
	f := e.factors[0]
	if !e.cfg.PerLayer {
		e.ops.ClipFactors(e.cfg.Clipping.rule(), e.normSq[:n], f[:n])
		e.lay.Fill(0, f[n:B])
	}
	// Counts for the report: two step scalars, counted by the device
	// from the norms and factors it computed (per-layer clipping counts
	// no clipped samples).
	counted := f[:n]
	if e.cfg.PerLayer {
		counted = nil
	}
	nonFinite, clipped := e.ops.CountClipped(e.normSq[:n], counted)
	e.nonFinite += nonFinite
	e.clipped += clipped
	if e.unitWeights != nil {
		// The class weights multiply the factors after the count: a
		// weight below 1 shortens a sample's clipped gradient further,
		// which the report's clipped fraction does not count.
		for k := range e.factors {
			e.ops.ScaleRows(e.unitWeights[:n], 1, e.factors[k][:n], 1, 1)
		}
	}
	switch e.cfg.Mode {
	case Ghost, Mixed:
		// The second backward pass on Σ_i C_i L_i gives Σ_i C_i g_i for
		// every parameter (the paper's Algorithm 1, last line).
		if err := checkTF32(e.cfg); err != nil { // the device's setting may have changed since New
			return err
		}
		w := f
		if v := e.views; v > 1 {
			// Each of a sample's views weighs C_i/views (its loss's
			// weight, 1/views, times the sample's factor).
			e.lay.Expand(f[:B], e.viewShapes[0], e.rowFactors, e.viewShapes[1])
			e.ops.Scale(float32(1/float64(v)), e.rowFactors)
			w = e.rowFactors
		}
		if err := e.plan.Backward(w, nil); err != nil {
			return err
		}
		for _, p := range e.params {
			p.accumulate(e.ops, e.lay, e.plan.Grad(p.name))
		}
		return nil
	}
	for _, g := range e.derived {
		if g.std != nil {
			if err := e.stdClippedSum(g, f, B); err != nil {
				return err
			}
		}
	}
	runs := e.clipRuns(f, n)
	for k, p := range e.params {
		fk := f
		if e.cfg.PerLayer {
			fk = e.factors[k]
		}
		if p.ps != nil && runs {
			continue
		}
		if p.ps != nil {
			p.settle(e.lay)
			e.ops.AddScaledRows(fk[:n], p.ps[:n*len(p.data)], p.accum)
			continue
		}
		for _, ls := range p.linear {
			if err := ls.weightedSum(fk, B, p.accum, p.fresh, &e.bkScratch, e.plan.Scratch()); err != nil {
				return fmt.Errorf("dpengine: %s: %w", p.name, err)
			}
			p.fresh = false
		}
		p.settle(e.lay) // no linear use: nothing was written
	}
	return nil
}

// clipRuns adds the clipped sums Σ_i f_i g_i of the parameters that keep
// per-sample gradients, a size at a time, as one strided product per
// size (psRun: [1 × n] factors times each parameter's [n × size] rows,
// into its accumulator, β = 0 on a fresh one), where the engine batches
// samples (a GPU) and one factor vector serves every parameter; it
// reports whether it did. The CPU keeps AddScaledRows, a parameter at a
// time in its row order.
func (e *Engine) clipRuns(f []float32, n int) bool {
	if !e.batchSamples || e.cfg.PerLayer || len(e.psRuns) == 0 || n == 0 {
		return false
	}
	for _, r := range e.psRuns {
		if r.accum == nil {
			return false
		}
	}
	B := e.cfg.PhysicalBatch
	for _, r := range e.psRuns {
		size := len(r.params[0].data)
		var beta float32 = 1
		if r.params[0].fresh {
			beta = 0
		}
		e.ops.GemmStrided(false, false, 1, size, n, 1, f[:n], n, 0, r.ps, size, B*size, beta, r.accum, size, r.stride, len(r.params))
		for _, p := range r.params {
			p.fresh = false
		}
	}
	return true
}

// hook receives the runtime's backward events.
func (e *Engine) hook(ev *runtime.HookEvent) {
	if e.hookErr != nil || len(ev.Node.Outputs) == 0 || ev.Node.Outputs[0] == nil {
		return
	}
	e.pendingGroup = nil
	if h := e.hookPS[ev.Node.Outputs[0].Name]; h != nil && !h.filled {
		// The buffer was other buffers' memory until this step: the
		// rules add into it.
		e.lay.Fill(0, h.buf)
		h.filled = true
	}
	for _, g := range e.groups[ev.Node.Outputs[0].Name] {
		var err error
		if g.virt != nil && g.linear != nil {
			// One instantiation of the operand, whatever the number of
			// parameters it is computed from.
			err = g.linear.perSample(e, ev, g.virt)
			if err == nil && g.std != nil {
				g.std.finish(e.ops)
			}
		} else if g.linear != nil {
			// Several uses only where an operand joins several
			// parameters (instantiated, each mapped to its own).
			for _, us := range g.uses {
				if err = g.linear.perSample(e, ev, us); err != nil {
					break
				}
			}
		} else if g.direct != nil && ev.Inputs[g.operand].BatchAxis < 0 {
			// The operand carries no batch, in every step: where the
			// computation lifts, sub is not needed again.
			if g.lift != nil {
				g.sub = nil
			}
			err = e.elementwiseGroup(ev, g.direct)
			g.virtFilled = true
		} else {
			// It carries the batch: the per-sample path through sub,
			// in every step.
			g.direct, g.virt, g.lift = nil, nil, nil
			err = e.elementwiseGroup(ev, g)
		}
		if err != nil {
			e.hookErr = fmt.Errorf("dpengine: node %s: %w", ev.Node, err)
			return
		}
	}
}

// gatherSample copies sample i's elements of v (N samples) into dst,
// block by block through the device's copies, and returns them; the
// samples' shape is v.Shape with the batch axis set to 1. dst's capacity
// must hold the sample (gatherOn grows it on the device; a smaller one is
// replaced by host memory, as append would).
func gatherSample(lay runtime.LayoutOps, v *runtime.View, N, i int, dst []float32) []float32 {
	stride := v.BatchStride
	blocks := len(v.Data) / stride
	n := sampleLen(v, N, i)
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	k := 0
	for b := i; b < blocks; b += N {
		lay.Copy(v.Data[b*stride:(b+1)*stride], dst[k:k+stride])
		k += stride
	}
	return dst
}

// scatterSample writes src (sample i's elements) into the zeroed full
// tensor dst with v's layout, block by block through the device's copies.
func scatterSample(lay runtime.LayoutOps, stride, N, i int, src, dst []float32) {
	blocks := len(dst) / stride
	k := 0
	for b := i; b < blocks; b += N {
		lay.Copy(src[k:k+stride], dst[b*stride:(b+1)*stride])
		k += stride
	}
}

// sampleShape is the shape of sample i's elements of v (N samples) as
// gatherSample lays them out: v's shape with the batch axis reduced to its
// share of one sample. That share is 1 for a plain (N, …) tensor, and
// Outer·Inner where the export folds more into the axis (rewrite.BatchLayout:
// Swin's windows are (N·windows, tokens, C), attention heads (N·H, T, d)),
// so that reductions over it sum all of a sample's rows.
func sampleShape(v *runtime.View, N int) []int {
	s := append([]int(nil), v.Shape...)
	if v.BatchAxis >= 0 {
		s[v.BatchAxis] = max(1, s[v.BatchAxis]/N)
	}
	return s
}

// elementwiseGroup computes the per-sample gradients of the parameters
// behind one elementwise operand.
func (e *Engine) elementwiseGroup(ev *runtime.HookEvent, g *useGroup) error {
	B := e.cfg.PhysicalBatch
	u := g.uses[0].use
	if g.elem.batch != nil && g.elem.batch(e, ev, g) {
		return nil
	}
	opView := &ev.Inputs[u.Operand]
	opShape := opView.Shape
	opLen := len(opView.Data)
	if opView.Data == nil {
		opLen = numel(opShape)
	}
	batched := opView.BatchAxis >= 0
	perSample := opLen
	if batched {
		perSample = opLen / B
	}
	workers := 1
	if g.sub == nil && len(ev.DOut.Data)/B < serialOpBelow {
		// Samples are independent and each owns its norm and
		// per-sample gradient slots: split them over the cores. Only
		// for small samples (the LayerNorm affines and biases of a
		// ViT): the kernels split a large sample's work themselves, and
		// splitting samples on top of that made MobileNetV2's GroupNorm
		// affines slower.
		workers = max(1, min(e.ops.Workers(), e.n))
	}
	if len(e.opScratch) < workers {
		e.opScratch = append(e.opScratch, make([]opScratch, workers-len(e.opScratch))...)
		e.opErrs = make([]error, len(e.opScratch))
	}
	for w := range e.opScratch[:workers] {
		buf, err := growOn(e.dev, e.opScratch[w].buf, perSample)
		if err != nil {
			return err
		}
		e.opScratch[w].buf = buf
	}
	e.countSampleLoop()
	if g.sub == nil {
		us := g.uses[0]
		size := len(us.p.data)
		errs := e.opErrs
		clear(errs)
		forSamplesOn(workers, e.n, func(w, i int) {
			sc := &e.opScratch[w]
			if errs[w] != nil {
				return
			}
			if err := e.operandGrad(ev, g, u, i, sc.buf, sc); err != nil {
				errs[w] = err
				return
			}
			if us.p.ps != nil {
				e.ops.Add(sc.buf, us.p.ps[i*size:(i+1)*size])
			} else {
				e.ops.AddSumSq(sc.buf, us.p.normSq[i:i+1])
			}
		})
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	sc := &e.opScratch[0]
	buf := sc.buf
	for i := 0; i < e.n; i++ {
		if err := e.operandGrad(ev, g, u, i, buf, sc); err != nil {
			return err
		}
		dy := buf
		if batched {
			if g.subBase == nil {
				var err error
				if g.subBase, err = e.alloc(opLen, "the path operand of "+g.output); err != nil {
					return err
				}
			}
			e.lay.Fill(0, g.subBase)
			scatterSample(e.lay, opView.BatchStride, B, i, buf, g.subBase)
			dy = g.subBase
		}
		if err := g.sub.BackwardFrom(dy, nil); err != nil {
			return err
		}
		for _, us := range g.uses {
			grad := g.sub.Grad(us.p.name)
			e.ops.Add(grad, us.p.ps[i*len(us.p.data):(i+1)*len(us.p.data)])
		}
	}
	return nil
}

// operandGrad writes sample i's gradient with respect to the operand (its
// own shape, batch axis at 1 for batched operands) to out.
func (e *Engine) operandGrad(ev *runtime.HookEvent, g *useGroup, u *rewrite.Use, i int, out []float32, sc *opScratch) error {
	B := e.cfg.PhysicalBatch
	dout := &ev.DOut
	if dout.BatchAxis < 0 {
		return fmt.Errorf("output gradient has no batch axis")
	}
	gi, err := gatherOn(e.dev, e.lay, dout, B, i, sc.gi)
	if err != nil {
		return err
	}
	sc.gi = gi
	gShape := sampleShape(dout, B)
	opView := &ev.Inputs[u.Operand]
	opShape := sampleShape(opView, B)
	k := u.Operand
	return g.elem.operandGrad(ev, sampleGrad{ops: e.ops, lay: e.lay, dev: e.dev, k: k, i: i, B: B, gi: gi, gShape: gShape, op: opView, opShape: opShape, out: out}, sc)
}
