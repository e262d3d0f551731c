package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Conv weights (1-D/2-D/3-D, groups, depthwise) and Conv biases.

func init() {
	registerLinear(&linearRule{perSample: convUse, weightedSum: convWeightedSum}, "Conv")
	registerElementwise(&elementwiseRule{operandGrad: convBiasOperand, batch: convBias}, "Conv")
}

// convUse handles a Conv weight: a_i is the unfolded input of sample i and
// group g (T×D), and the output gradient of the group is already laid out
// p×T, i.e. g_iᵀ.
func convUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	return convUseOn(e, us, ev.Conv, &ev.Inputs[0], &ev.DOut)
}

// convUseOn is convUse for the convolution s with input x and output
// gradient dy (a ConvTranspose passes the Conv it is the adjoint of, its
// output gradient as x and its input as dy).
func convUseOn(e *Engine, us *useState, s *runtime.ConvShape, x, dy *runtime.View) error {
	ls, p := us.linear, us.p
	if s == nil {
		return fmt.Errorf("no convolution geometry")
	}
	if x.BatchAxis != 0 || dy.BatchAxis != 0 {
		return fmt.Errorf("convolution without a leading batch axis")
	}
	rows, err := convRowsOf(s.N, e.cfg.PhysicalBatch, x, dy)
	if err != nil {
		return err
	}
	B := s.N
	groups := max(s.Group, 1)
	T, D := s.T, s.D
	P := s.M / groups
	inLen, outLen := len(x.Data)/B, len(dy.Data)/B
	ls.conv, ls.convRows = s, rows
	if e.cfg.Mode == BK && p.ps == nil {
		// The input and output gradient stay alive (KeepHooked) for
		// Σ_i C_i g_i once the clip factors are known.
		ls.x, ls.dy = x.Data, dy.Data
	}
	if rows.folded() {
		if e.batchSamples && rows.batchable() {
			if ok, err := convFoldedBatched(e, ls, us, s, x, dy, rows); ok || err != nil {
				return err
			}
		}
		return convFoldedUse(e, ls, us, s, x, dy, rows)
	}
	size := s.M * s.D // the operand's: the parameter's unless through a path
	if s.IsDepthwise() {
		// A depthwise group is one input channel and its M/C output
		// channels of K taps: the per-sample gradient (M·K values) comes
		// directly from the input planes and the output gradient,
		// without unfolding or a GEMM per group, whatever the layer's
		// ghost/instantiate decision (both give this norm).
		if size != s.M*s.K {
			return fmt.Errorf("depthwise weight of %d values, want %d", size, s.M*s.K)
		}
		if e.batchSamples {
			return depthwiseBatched(e, us, s, x, dy)
		}
		scratch := e.ops.DepthwiseScratchSize(s)
		bufs, err := e.workerBufs(scratch + size)
		if err != nil {
			return err
		}
		e.forSamples(e.n, func(w, i int) {
			buf := bufs[w]
			inst := buf[scratch : scratch+size]
			e.ops.DepthwisePerSampleGrad(s, x.Data[i*inLen:(i+1)*inLen], dy.Data[i*outLen:(i+1)*outLen], inst, buf[:scratch])
			us.addSample(e.ops, i, 0, inst)
		})
		return nil
	}
	if us.std != nil && us.std.ghost {
		return e.convStdGhost(us.std, s, x, dy)
	}
	if e.batchSamples {
		if ok, err := convBatched(e, ls, us, s, x, dy, outLen); ok || err != nil {
			return err
		}
	}
	if !ls.gramTried {
		ls.gram, ls.gramTried = inputGramFor(s, groups, ls.decision), true
	}
	if gm := ls.gram; gm != nil {
		return convGhostByGram(e, ls, us, gm, x, dy, inLen, outLen)
	}
	// Each sample's input is unfolded as col = a_iᵀ (D×T, the runtime's
	// im2col layout, which the gather-map path fills fastest); then
	// a_i a_iᵀ = colᵀcol and g_iᵀa_i = gT·colᵀ. A pointwise convolution's
	// col is its input group as it lies: read in place, nothing unfolded.
	plane, colLen := s.PlaneSize(), T*D
	pointwise := s.Pointwise()
	if pointwise {
		plane, colLen = 0, 0
	}
	need := plane + colLen + 2*T*T
	if ls.decision == rewrite.Instantiate {
		need = plane + colLen + P*D
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	e.forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		pl, col, rest := buf[:plane], buf[plane:plane+colLen], buf[plane+colLen:]
		xi := x.Data[i*inLen : (i+1)*inLen]
		for gr := 0; gr < groups; gr++ {
			if pointwise {
				col = xi[gr*D*T : (gr+1)*D*T]
			} else {
				e.ops.Im2ColPlane(s, xi, gr, col, pl)
			}
			gT := dy.Data[i*outLen+gr*P*T : i*outLen+(gr+1)*P*T]
			if ls.decision == rewrite.Ghost {
				aa, gg := rest[:T*T], rest[T*T:2*T*T]
				e.ops.GemmSerial(true, false, T, T, D, 1, col, T, col, T, 0, aa, T)
				e.ops.GemmSerial(true, false, T, T, P, 1, gT, T, gT, T, 0, gg, T)
				e.ops.AddDot(1, aa, gg, p.normSq[i:i+1])
				continue
			}
			inst := rest[:P*D]
			e.ops.GemmSerial(false, true, P, D, T, 1, gT, T, col, T, 0, inst, D)
			us.addSample(e.ops, i, gr*P*D, inst)
		}
	})
	return nil
}

// convWeightedSum is book-keeping's Σ_i c_i g_i of a Conv weight: the
// convolution's own weight-gradient kernel on the kept input and the
// output gradient scaled per sample (see linearState.weightedSum).
func convWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	if ls.convRows.folded() {
		scaleConvRows(ls.ops, ls.convRows, c, ls.dy, len(ls.dy)/ls.conv.N)
		return convWeightGradInto(ls, accum, overwrite, scratch, ws)
	}
	outLen := len(ls.dy) / B
	ls.ops.ScaleRows(c[:B], 1, ls.dy[:B*outLen], outLen, outLen) // sample i's rows by C_i
	return convWeightGradInto(ls, accum, overwrite, scratch, ws)
}

// convWeightGradInto runs the convolution's weight-gradient kernel on the
// kept ls.x and ls.dy (already scaled per sample) and writes the result to
// accum (overwrite) or adds it there, with the kernel's workspace taken from
// ws when large enough, else from scratch.
func convWeightGradInto(ls *linearState, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	need := ls.ops.ConvWorkspaceSize(ls.conv)
	dwLen := len(accum)
	if overwrite {
		dwLen = 0
	}
	extra := 0
	if len(ws) < need {
		extra = need
	}
	buf, err := growOn(ls.dev, *scratch, dwLen+extra)
	if err != nil {
		return err
	}
	*scratch = buf
	dw := (*scratch)[:dwLen]
	if extra > 0 {
		ws = (*scratch)[dwLen:]
	}
	if overwrite {
		dw = accum
	}
	ls.ops.ConvWeightGrad(ls.conv, ls.x, ls.dy, dw, ws)
	if !overwrite {
		ls.ops.Add(dw, accum)
	}
	return nil
}

// convBias handles the commonest elementwise parameter, a convolution's
// bias read by nothing else: sample i's gradient is its output gradient
// summed over positions, read in place and split over the cores (or, on a
// device of one worker, summed for the whole batch in one call). The
// general path (a gathered copy and one sequential sum per channel, on one
// core) cost 34 ms of a 730 ms book-keeping step of VGG-19 at batch 16.
// It reports false, doing nothing, for any other case.
func convBias(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if len(g.uses) != 1 || g.sub != nil || g.uses[0].use.Operand != 2 {
		return false
	}
	p, dy := g.uses[0].p, &ev.DOut
	M := len(p.data)
	B := e.cfg.PhysicalBatch
	if dy.BatchAxis != 0 || len(dy.Shape) == 0 || M == 0 {
		return false
	}
	if dy.Shape[0] != B {
		// A sample over several rows (convRows): summed per sample on
		// a device that batches samples, else by the general path
		// (convBiasOperand).
		return e.batchSamples && convBiasFolded(e, p, dy, M)
	}
	if dy.BatchStride*B != len(dy.Data) || dy.BatchStride%M != 0 {
		return false
	}
	if e.ops.Workers() > 1 {
		return convBiasBySample(e, p, dy, M)
	}
	// On a device of one worker (a GPU), the samples at once: their rows
	// are consecutive, each M runs of T positions, and one AddRunSums over
	// the batch keeps every run's sum as a sample's own.
	rows := dy.Data[:e.n*dy.BatchStride]
	if p.ps != nil {
		e.ops.AddRunSums(rows, p.ps[:e.n*M])
		return true
	}
	buf, err := growOn(e.dev, e.affineScratch, e.n*M)
	if err != nil {
		return false // the general path reports it
	}
	e.affineScratch = buf
	sums := buf[:e.n*M]
	e.lay.Fill(0, sums)
	e.ops.AddRunSums(rows, sums)
	return e.addSampleRows(p, 0, sums)
}

// convBiasBySample is convBias split over the device's workers, sample by
// sample.
func convBiasBySample(e *Engine, p *param, dy *runtime.View, M int) bool {
	stride := dy.BatchStride
	var bufs [][]float32
	if p.ps == nil {
		var err error
		if bufs, err = e.workerBufs(M); err != nil {
			return false // the general path reports it
		}
	}
	e.forSamples(e.n, func(w, i int) {
		row := dy.Data[i*stride : (i+1)*stride]
		if p.ps != nil {
			e.ops.AddRunSums(row, p.ps[i*M:(i+1)*M])
			return
		}
		gi := bufs[w][:M]
		e.lay.Fill(0, gi)
		e.ops.AddRunSums(row, gi)
		e.ops.AddSumSq(gi, p.normSq[i:i+1])
	})
	return true
}

// convBiasOperand is sample s.i's gradient with respect to a Conv's bias:
// the output gradient summed over positions, per channel, and over the
// sample's rows where it spans several (convRows: the gathered sample is
// its rows one after another, gShape's leading axis their count).
func convBiasOperand(_ *runtime.HookEvent, s sampleGrad, _ *opScratch) error {
	if s.k != 2 {
		return fmt.Errorf("Conv operand %d is not a bias", s.k)
	}
	M := s.opShape[0]
	rows := 1
	if len(s.gShape) > 0 {
		rows = max(1, s.gShape[0])
	}
	row := len(s.gi) / rows
	if M == 0 || row%M != 0 {
		return fmt.Errorf("Conv bias of %d channels: output gradient of %d elements in %d rows", M, len(s.gi), rows)
	}
	out := s.out[:M]
	s.lay.Fill(0, out)
	for r := range rows {
		s.ops.AddRunSums(s.gi[r*row:(r+1)*row], out) // as convBias sums
	}
	return nil
}

// inputGram is a convolution's ghost norm term a_i a_iᵀ computed from the
// sample's input without unfolding it. Row t of a_i holds x_i[c, p_k(t)]
// for every channel c and tap k (zero where tap k of output position t
// falls on the padding), so
//
//	(a_i a_iᵀ)[t, t'] = Σ_k Σ_c x_i[c, p_k(t)]·x_i[c, p_k(t')] = Σ_k X_i[p_k(t), p_k(t')]
//
// with X_i = x_iᵀx_i the S×S Gram of the input's positions over its
// channels: S²·C multiply-adds and K·T² additions instead of unfolding
// (D·T copies) and T²·D multiply-adds, K times fewer for a stride-1
// convolution whose output is as large as its input (ResNet-18's 3×3
// convolutions: 9×).
type inputGram struct {
	S, C, K, T     int
	m              *runtime.IndexMap // K·T·T entries: p_k(t)·S + p_k(t'), or −1
	gShape, aShape []int             // [K, T, T] and [1, T, T]
}

// inputGramFor returns the input-Gram form of a ghost-norm convolution
// where it does fewer operations than the unfolded one, nil otherwise
// (grouped convolutions, instantiated layers, strided convolutions whose
// input is much larger than their output, maps too large for the gather).
func inputGramFor(s *runtime.ConvShape, groups int, d rewrite.Decision) *inputGram {
	if d != rewrite.Ghost || groups != 1 {
		return nil
	}
	S, T, K, C, D := s.InSize, s.T, s.K, s.C, s.D
	if !rewrite.InputGramFits(int64(S), int64(C), int64(K), int64(T), int64(D)) {
		return nil
	}
	idx := tapGramIndex(s)
	return &inputGram{S: S, C: C, K: K, T: T, m: runtime.NewIndexMap(idx, S*S, 0), gShape: []int{K, T, T}, aShape: []int{1, T, T}}
}

// tapGramIndex is the input-Gram form's gather table of s (ungrouped):
// entry (k·T + t)·T + u is p_k(t)·S + p_k(u), the element of the input's
// Gram X that tap k adds to a_i a_iᵀ[t][u], or −1 where either position
// lies on the padding.
func tapGramIndex(s *runtime.ConvShape) []int32 {
	S, T, K := s.InSize, s.T, s.K
	// p[k·T+t]: the input position tap k of output position t reads, or
	// −1 on the padding.
	nd := len(s.In)
	p := make([]int, K*T)
	for k := 0; k < K; k++ {
		for t := 0; t < T; t++ {
			pos, kr, tr := 0, k, t
			ok := true
			for a := nd - 1; a >= 0; a-- {
				ka, ta := kr%s.Kernel[a], tr%s.Out[a]
				kr, tr = kr/s.Kernel[a], tr/s.Out[a]
				st, dl := 1, 1
				if s.Strides != nil {
					st = s.Strides[a]
				}
				if s.Dilations != nil {
					dl = s.Dilations[a]
				}
				pb := 0
				if s.Pads != nil {
					pb = s.Pads[a]
				}
				i := ta*st + ka*dl - pb
				if i < 0 || i >= s.In[a] {
					ok = false
				}
				stride := 1
				for b := a + 1; b < nd; b++ {
					stride *= s.In[b]
				}
				pos += i * stride
			}
			if !ok {
				pos = -1
			}
			p[k*T+t] = pos
		}
	}
	idx := make([]int32, K*T*T)
	for k := 0; k < K; k++ {
		for t := 0; t < T; t++ {
			for u := 0; u < T; u++ {
				a, b := p[k*T+t], p[k*T+u]
				v := int32(-1)
				if a >= 0 && b >= 0 {
					v = int32(a*S + b)
				}
				idx[(k*T+t)*T+u] = v
			}
		}
	}
	return idx
}

// convBatched is convUseOn's per-sample norms (or gradients) for chunks of
// samples at once, on a device of one worker with memory of its own (a
// GPU; Engine.batchSamples), where the per-sample loop is a chain of
// small launches: per chunk and group, the
// samples' unfolded inputs in one Im2ColBatch, then either their Grams
// a_i a_iᵀ and g_i g_iᵀ as two batched GEMMs and the ghost norms as one
// AddDots, or their gradients g_iᵀa_i as one batched GEMM into the
// samples' rows, added to the parameter at once (addRows: through a
// path, mapped back by its index map in one call). A ghost norm's
// a_i a_iᵀ comes from the samples' input Grams instead where the device
// forms their taps' sums (newConvChunk). The gradients come
// from the device's convolution library instead (convSampleGrads) where
// one sample's unfolded input does not fit batchedScratch, or where the
// device chose the library (sampleGradsByLibrary). It reports false,
// doing nothing, when one sample's share exceeds batchedScratch and the
// library does not take the shape; the per-sample loop then runs.
func convBatched(e *Engine, ls *linearState, us *useState, s *runtime.ConvShape, x, dy *runtime.View, outLen int) (bool, error) {
	ghost := ls.decision == rewrite.Ghost
	c := newConvChunk(e, s, ghost, outLen)
	nb := min(e.n, e.fitWorkspace(batchedScratch/max(c.per, 1), c.plane, c.per))
	if cs, ok := e.ops.(runtime.ConvSampleGrads); ok && !ghost && sampleGradsFit(e, s, x, dy) {
		// On VGG-16 at 224×224 one sample's unfolded input is more than
		// the scratch in an early layer, and cuDNN's products of the
		// samples as groups outrun the unfolding in the others.
		if nb < 1 || e.sampleGradsByLibrary(cs, c, x, dy, nb) {
			if ok, err := convSampleGrads(e, us, cs, s, x, dy); ok || err != nil {
				return ok, err
			}
		}
	}
	if nb < 1 {
		return false, nil
	}
	bufs, err := e.workerBufs(c.plane + nb*c.per)
	if err != nil {
		return false, err
	}
	pl, col, rest := c.carve(bufs[0], nb)
	for i0 := 0; i0 < e.n; i0 += nb {
		n := min(nb, e.n-i0)
		e.convChunks++
		var normSq []float64
		if ghost {
			normSq = us.p.normSq[i0 : i0+n]
		}
		c.run(e, x, dy, i0, n, pl, col, rest, normSq)
		if !ghost {
			e.addRows(us, i0, n, rest[:n*s.M*s.D])
		}
	}
	return true, nil
}

// convChunk is convBatched's work on a chunk of samples: the shape,
// the scratch it takes (a plane, then per sample the unfolded input —
// or the input's Gram — and the Grams or the gradient) and how its
// samples lie.
type convChunk struct {
	s                 *runtime.ConvShape
	ghost, pointwise  bool
	outLen, colStride int
	plane, colLen     int
	per               int // scratch floats a sample
	// grams, where set, forms a ghost norm's a_i a_iᵀ from the input's
	// Gram X_i = x_iᵀx_i (colLen = S² floats a sample) instead of the
	// unfolded input.
	grams runtime.ConvTapGrams
}

// newConvChunk returns s's chunk geometry (outLen: a sample's output
// gradient).
func newConvChunk(e *Engine, s *runtime.ConvShape, ghost bool, outLen int) convChunk {
	c := convChunk{s: s, ghost: ghost, outLen: outLen, pointwise: s.Pointwise(),
		plane: s.PlaneSize(), colLen: s.D * s.T, colStride: s.D * s.T}
	// A pointwise convolution's unfolded input is its input: the GEMMs
	// read a sample's group in place, at the input's sample stride.
	if c.pointwise {
		c.plane, c.colLen, c.colStride = 0, 0, s.C*s.InSize
	}
	// A ghost norm from the input's Gram where the device forms the taps'
	// sums (a 3×3 convolution of stride 1: nine times fewer products)
	// and the Gram is no larger than the unfolded input, so that the
	// plan's scratch estimate (rewrite.EngineScratch) still bounds it.
	S := s.InSize
	if tg, ok := e.ops.(runtime.ConvTapGrams); ok && ghost && max(s.Group, 1) == 1 && S*S <= s.D*s.T &&
		rewrite.InputGramCheaper(int64(S), int64(s.C), int64(s.K), int64(s.T), int64(s.D)) {
		c.grams, c.plane, c.colLen = tg, 0, S*S
	}
	c.per = c.colLen
	if ghost {
		c.per += 2 * s.T * s.T
	} else {
		c.per += s.M * s.D
	}
	return c
}

// carve splits buf (at least plane + nb·per floats) into the plane, the
// unfolded inputs and the rest (Grams, or gradients in rows of M·D).
func (c *convChunk) carve(buf []float32, nb int) (pl, col, rest []float32) {
	return buf[:c.plane], buf[c.plane : c.plane+nb*c.colLen], buf[c.plane+nb*c.colLen : c.plane+nb*c.per]
}

// run computes samples i0 … i0+n−1: their ghost norms, added to normSq,
// from their input Grams (grams), or per group from their unfolded inputs
// (pointwise: the input itself), or from these their gradients, written
// to rest in rows of M·D.
func (c *convChunk) run(e *Engine, x, dy *runtime.View, i0, n int, pl, col, rest []float32, normSq []float64) {
	s := c.s
	groups := max(s.Group, 1)
	T, D, M := s.T, s.D, s.M
	P := M / groups
	if c.grams != nil {
		// a_i a_iᵀ[t][u] = Σ_k X_i[p_k(t)][p_k(u)] (inputGram): the
		// samples' input Grams in one batched GEMM, their taps' sums in
		// one call.
		S, inLen := s.InSize, s.C*s.InSize
		X, aa, gg := col[:n*S*S], rest[:n*T*T], rest[n*T*T:2*n*T*T]
		xi := x.Data[i0*inLen:]
		e.ops.GemmStrided(true, false, S, S, s.C, 1, xi, S, inLen, xi, S, inLen, 0, X, S, S*S, n)
		c.grams.ConvTapGrams(s, X, n, aa)
		gT := dy.Data[i0*c.outLen:]
		e.ops.GemmStrided(true, false, T, T, M, 1, gT, T, c.outLen, gT, T, c.outLen, 0, gg, T, T*T, n)
		e.ops.AddDots(1, aa, gg, normSq)
		return
	}
	for gr := 0; gr < groups; gr++ {
		if c.pointwise {
			col = x.Data[i0*c.colStride+gr*D*T:]
		} else {
			e.ops.Im2ColBatch(s, x.Data, i0, n, gr, col[:n*D*T], pl)
		}
		gT := dy.Data[i0*c.outLen+gr*P*T:] // sample j's group: P×T at j·outLen
		if !c.ghost {
			e.ops.GemmStrided(false, true, P, D, T, 1, gT, T, c.outLen, col, T, c.colStride, 0, rest[gr*P*D:], D, M*D, n)
			continue
		}
		aa, gg := rest[:n*T*T], rest[n*T*T:2*n*T*T]
		e.ops.GemmStrided(true, false, T, T, D, 1, col, T, c.colStride, col, T, c.colStride, 0, aa, T, T*T, n)
		e.ops.GemmStrided(true, false, T, T, P, 1, gT, T, c.outLen, gT, T, c.outLen, 0, gg, T, T*T, n)
		e.ops.AddDots(1, aa, gg, normSq)
	}
}

// sampleGradsByLibrary reports whether the device's convolution library
// is to form c's per-sample gradients (convSampleGrads) rather than
// convBatched's unfolding path in chunks of nb samples: the device's
// choice (runtime.ConvSampleGrads.PreferSampleGrads), asked at the
// convolution's first use with the step's own samples — a GPU measures
// both there — and kept for the engine's life.
func (e *Engine) sampleGradsByLibrary(cs runtime.ConvSampleGrads, c convChunk, x, dy *runtime.View, nb int) bool {
	s := c.s
	if lib, ok := e.sampleLib[s]; ok {
		return lib
	}
	size := s.M * s.D
	libN := sampleGradsChunk(s.N, e.fitWorkspace(batchedScratch/max(size, 1), 0, size))
	bufs, err := e.workerBufs(max(c.plane+nb*c.per, libN*size))
	if err != nil {
		return false // the unfolding path asks again and reports it
	}
	buf := bufs[0]
	pl, col, rest := c.carve(buf, nb)
	own := func() { c.run(e, x, dy, 0, nb, pl, col, rest, nil) }
	lib := cs.PreferSampleGrads(s, x.Data, dy.Data, libN, buf[:libN*size], nb, own)
	if e.sampleLib == nil {
		e.sampleLib = map[*runtime.ConvShape]bool{}
	}
	e.sampleLib[s] = lib
	return lib
}

// sampleGradsFit reports whether x and dy lie as convSampleGrads reads
// them: the batch first, the physical batch's s.N samples (e.n of them
// the step's, the rest the padding, physical).
func sampleGradsFit(e *Engine, s *runtime.ConvShape, x, dy *runtime.View) bool {
	return x.BatchAxis == 0 && dy.BatchAxis == 0 && e.n <= s.N && len(x.Data) == s.N*s.C*s.InSize && len(dy.Data) == s.N*s.M*s.T
}

// sampleGradsChunk is convSampleGrads's chunk for a physical batch of N
// samples: at most most samples (the gradients the scratch holds, at
// least one), and no more than the fewest such chunks need, so that the
// last chunk's overlap with the one before (its samples formed twice)
// stays below the count of chunks — 32 samples of VGG-16's conv3_3, 28 to
// the scratch, are two chunks of 16, not 28 and 28.
func sampleGradsChunk(N, most int) int {
	nb := max(1, min(N, most))
	chunks := (N + nb - 1) / nb
	return max(1, (N+chunks-1)/max(chunks, 1))
}

// convSampleGrads is convBatched's instantiated gradients from the
// device's convolution library (runtime.ConvSampleGrads: on a GPU, cuDNN's
// filter gradient of the samples as groups), without unfolding their
// inputs, in chunks of sampleGradsChunk samples. Every chunk has the same
// size whatever the step's count of samples, so that the library sees one
// shape (on a GPU each new shape is measured): the last chunk ends at the
// batch's end and overlaps the one before, whose samples it does not add
// again, and a batch smaller than a chunk (the last physical batch of a
// Poisson-sampled logical batch) is one chunk whose padded samples are not
// added. It reports false, doing nothing, where the library refuses the
// shape; the unfolding path then runs.
func convSampleGrads(e *Engine, us *useState, cs runtime.ConvSampleGrads, s *runtime.ConvShape, x, dy *runtime.View) (bool, error) {
	size := s.M * s.D
	if !sampleGradsFit(e, s, x, dy) {
		return false, nil
	}
	nb := sampleGradsChunk(s.N, e.fitWorkspace(batchedScratch/max(size, 1), 0, size))
	bufs, err := e.workerBufs(nb * size)
	if err != nil {
		return false, err
	}
	inst := bufs[0][:nb*size]
	for done := 0; done < e.n; {
		i0 := max(0, min(done, e.n-nb))
		if !cs.ConvSampleWeightGrads(s, x.Data, dy.Data, i0, nb, inst) {
			if done == 0 {
				return false, nil
			}
			// The same shape ran for the chunks before: a refusal now
			// is the library's failure, not the shape's.
			return true, fmt.Errorf("dpengine: the convolution library's per-sample gradients of samples %d…%d failed after the first chunk", i0, i0+nb-1)
		}
		skip := done - i0             // samples of this chunk already added
		add := min(nb, e.n-i0) - skip // and those to add: none of the padding
		e.addRows(us, done, add, inst[skip*size:])
		done += add
	}
	return true, nil
}

// depthwiseBatched is convUseOn's depthwise per-sample gradients on a
// device of one worker with memory of its own (Engine.batchSamples): a
// chunk of samples' gradients in one DepthwiseGradBatch, added to the
// parameter at once (addRows). The chunk is as many samples as fit
// batchedScratch, at least one.
func depthwiseBatched(e *Engine, us *useState, s *runtime.ConvShape, x, dy *runtime.View) error {
	size := s.M * s.K
	scratch := e.ops.DepthwiseScratchSize(s)
	nb := max(1, min(e.n, e.fitWorkspace(batchedScratch/max(size, 1), scratch, size)))
	bufs, err := e.workerBufs(scratch + nb*size)
	if err != nil {
		return err
	}
	ws, rows := bufs[0][:scratch], bufs[0][scratch:scratch+nb*size]
	for i0 := 0; i0 < e.n; i0 += nb {
		n := min(nb, e.n-i0)
		inst := rows[:n*size]
		e.ops.DepthwiseGradBatch(s, x.Data, dy.Data, i0, n, inst, ws)
		e.addRows(us, i0, n, inst)
	}
	return nil
}

// convGhostByGram adds each sample's ghost norm ⟨a_i a_iᵀ, g_i g_iᵀ⟩ to
// the parameter's squared norm, a_i a_iᵀ from the input's Gram.
func convGhostByGram(e *Engine, ls *linearState, us *useState, gm *inputGram, x, dy *runtime.View, inLen, outLen int) error {
	S, C, K, T := gm.S, gm.C, gm.K, gm.T
	P := ls.conv.M
	need := S*S + K*T*T + 2*T*T
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	p := us.p
	e.forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		X, G := buf[:S*S], buf[S*S:S*S+K*T*T]
		aa, gg := buf[S*S+K*T*T:S*S+K*T*T+T*T], buf[S*S+K*T*T+T*T:need]
		xi := x.Data[i*inLen : (i+1)*inLen] // C×S
		e.ops.GemmSerial(true, false, S, S, C, 1, xi, S, xi, S, 0, X, S)
		e.lay.IndexGather(X, gm.m, G)
		e.ops.ReduceToShape(G, gm.gShape, aa, gm.aShape)
		gT := dy.Data[i*outLen : i*outLen+P*T]
		e.ops.GemmSerial(true, false, T, T, P, 1, gT, T, gT, T, 0, gg, T)
		e.ops.AddDot(1, aa, gg, p.normSq[i:i+1])
	})
	return nil
}
