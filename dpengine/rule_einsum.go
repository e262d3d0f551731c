package dpengine

import (
	"fmt"
	"slices"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Einsum with one weight and one data operand. Its labels split as
// rewrite.SplitEinsum says: groups G (weight, data and output: heads),
// contracted K (D), features N (p), rows R (T, with the batch label b in
// the data and the output only). Per group, sample i's weight gradient is
// a_iᵀg_i with a_i its data rows (T×D) and g_i its output-gradient rows
// (T×p): a grouped linear layer, with the ghost norm or instantiation of
// any other, gathered through index maps built at the first hook.

func init() {
	registerLinear(&linearRule{perSample: einsumUse, weightedSum: einsumWeightedSum}, "Einsum")
}

// einsumGeom is one Einsum use's geometry and index maps: aIdx (G·T·D)
// and gIdx (G·T·P) are offsets into a sample of the data operand and of
// the output gradient, wIdx (G·D·P) into the weight, each in (group, row,
// column) order.
type einsumGeom struct {
	G, T, D, P       int
	aIdx, gIdx, wIdx []int32
	// aMap and gMap are aIdx and gIdx as the device's index gathers from
	// a gathered sample of the data operand and of the output gradient
	// (built by einsumUse once the samples' sizes are known).
	aMap, gMap *runtime.IndexMap
	// hostC is host memory for book-keeping's clip factors, copied from
	// the device once per physical batch: each sample's factor is its
	// GEMM's α (a host scalar) and a factor of 0 skips the sample.
	hostC []float32
	// bk: the data operand and output gradient as the runtime holds them.
	x, dy runtime.View
	// The batched rules' label orders (einsumBatched, weightedSumBatched),
	// as permutations of the whole tensors' axes: xSample and ySample lay
	// the data operand and the output gradient out sample by sample, (b,
	// G, R, K) and (b, G, R, N); xGroup and yGroup group by group, (G, b,
	// R, K) and (G, b, R, N). wPerm lays a (G, K, N) product, one axis a
	// label, out as the weight; wShape is that product's shape.
	xSample, ySample, xGroup, yGroup, wPerm []int
	wShape                                  []int
	// plans caches the Transposes' plans by operand, order and samples.
	plans map[einsumPlanKey]*runtime.PermPlan
	// batched is set where the engine batches its per-sample work
	// (Engine.batchSamples): book-keeping's sum is then batched too.
	batched bool
	// chunks counts the chunks of samples the batched rules ran (tests).
	chunks int
}

// einsumPlanKey names a cached Transpose plan: an operand's (x or dy)
// chunk of b samples in one of its orders, or the products' (weight).
type einsumPlanKey struct {
	what  byte // 'x', 'y' or 'w'
	group bool // the group-major order (xGroup, yGroup)
	b     int
}

// labelOffsets lists, for every coordinate of the labels ls (row-major),
// the offset of that element in a tensor with labels of and shape shape
// (strides of shape; labels of of absent from ls are at 0).
func labelOffsets(ls []rune, size map[rune]int, of []rune, shape []int) []int32 {
	stride := map[rune]int{}
	s := 1
	for a := len(of) - 1; a >= 0; a-- {
		stride[of[a]] = s
		s *= shape[a]
	}
	n := 1
	for _, l := range ls {
		n *= size[l]
	}
	out := make([]int32, n)
	coord := make([]int, len(ls))
	for j := range out {
		off := 0
		for a, l := range ls {
			off += coord[a] * stride[l]
		}
		out[j] = int32(off)
		for a := len(ls) - 1; a >= 0; a-- {
			coord[a]++
			if coord[a] < size[ls[a]] {
				break
			}
			coord[a] = 0
		}
	}
	return out
}

func concatRunes(parts ...[]rune) []rune {
	var out []rune
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// newEinsumGeom builds the geometry of weight operand w of an Einsum node
// whose data operand x carries the batch on x.BatchAxis.
func newEinsumGeom(n *graph.Node, w int, x, dy *runtime.View, weightShape []int, B int) (*einsumGeom, error) {
	eq, err := n.Str("equation")
	if err != nil {
		return nil, err
	}
	if len(n.Inputs) != 2 || w < 0 || w > 1 {
		return nil, fmt.Errorf("a weight as operand %d of %d", w, len(n.Inputs))
	}
	full := [][]int{nil, nil}
	full[w], full[1-w] = weightShape, x.Shape
	shapes := make([][]int64, 2)
	ranks := make([]int, 2)
	for k, sh := range full {
		for _, d := range sh {
			shapes[k] = append(shapes[k], int64(d))
		}
		ranks[k] = len(sh)
	}
	sampleShapes := [][]int{nil, nil}
	sampleShapes[w], sampleShapes[1-w] = weightShape, sampleShape(x, B)
	s, err := graph.ParseEinsum(eq, ranks)
	if err != nil {
		return nil, err
	}
	if x.BatchAxis < 0 || dy.BatchAxis < 0 {
		return nil, fmt.Errorf("data or output gradient without a batch axis")
	}
	b := s.Inputs[1-w][x.BatchAxis]
	if s.Output[dy.BatchAxis] != b {
		return nil, fmt.Errorf("the batch is on output axis %d, label %q, not %q", dy.BatchAxis, s.Output[dy.BatchAxis], b)
	}
	e, err := rewrite.SplitEinsum(s, shapes, w, b)
	if err != nil {
		return nil, err
	}
	size := map[rune]int{}
	for i, ls := range s.Inputs {
		for a, l := range ls {
			size[l] = sampleShapes[i][a]
		}
	}
	prod := func(ls []rune) int {
		p := 1
		for _, l := range ls {
			p *= size[l]
		}
		return p
	}
	g := &einsumGeom{G: prod(e.G), T: prod(e.R), D: prod(e.K), P: prod(e.N)}
	g.aIdx = labelOffsets(concatRunes(e.G, e.R, e.K), size, s.Inputs[1-w], sampleShapes[1-w])
	g.gIdx = labelOffsets(concatRunes(e.G, e.R, e.N), size, s.Output, sampleShape(dy, B))
	g.wIdx = labelOffsets(concatRunes(e.G, e.K, e.N), size, s.Inputs[w], weightShape)
	bl := []rune{b}
	g.xSample = labelPerm(s.Inputs[1-w], concatRunes(bl, e.G, e.R, e.K))
	g.ySample = labelPerm(s.Output, concatRunes(bl, e.G, e.R, e.N))
	g.xGroup = labelPerm(s.Inputs[1-w], concatRunes(e.G, bl, e.R, e.K))
	g.yGroup = labelPerm(s.Output, concatRunes(e.G, bl, e.R, e.N))
	gkn := concatRunes(e.G, e.K, e.N)
	g.wPerm = labelPerm(gkn, s.Inputs[w])
	for _, l := range gkn {
		g.wShape = append(g.wShape, size[l])
	}
	return g, nil
}

// labelPerm returns the permutation that lays a tensor with labels of
// out in the order to (the same labels): axis j of the result is axis
// perm[j] of the tensor, as runtime.NewPermPlan takes it.
func labelPerm(of, to []rune) []int {
	perm := make([]int, len(to))
	for j, l := range to {
		perm[j] = slices.Index(of, l)
	}
	return perm
}

// isIdentity reports whether perm leaves every axis in place.
func isIdentity(perm []int) bool {
	for j, a := range perm {
		if a != j {
			return false
		}
	}
	return true
}

// plan returns the plan cached under key k, or builds it as the
// Transpose of a tensor of shape shape by perm and caches it (shape is
// only read then: a caller with the key at hand passes nil).
func (g *einsumGeom) plan(k einsumPlanKey, shape, perm []int) *runtime.PermPlan {
	if pp := g.plans[k]; pp != nil || shape == nil {
		return pp
	}
	if g.plans == nil {
		g.plans = map[einsumPlanKey]*runtime.PermPlan{}
	}
	pp := runtime.NewPermPlan(shape, perm)
	g.plans[k] = pp
	return pp
}

// chunkable reports whether the batched rules can take operand v (B
// samples on its batch axis) a chunk of samples at a time: the batch is
// its outermost axis. Any other operand is taken whole.
func chunkable(v *runtime.View, B int) bool {
	return v.BatchAxis == 0 && len(v.Shape) > 0 && v.Shape[0] == B && len(v.Data) == B*v.BatchStride
}

// operand returns samples [i0, i0+b) of operand v (what: 'x' or 'y',
// in order perm: the sample- or group-major one, group telling which),
// contiguous: v's own memory where perm keeps v's order, else transposed
// into dst. An operand that is not chunkable is taken whole (i0 = 0,
// b = B).
func (g *einsumGeom) operand(lay runtime.LayoutOps, v *runtime.View, what byte, group bool, perm []int, B, i0, b int, dst []float32) []float32 {
	whole := !chunkable(v, B)
	src := v.Data
	if !whole {
		src = v.Data[i0*v.BatchStride : (i0+b)*v.BatchStride]
	}
	if isIdentity(perm) {
		return src
	}
	k := einsumPlanKey{what, group, b}
	pp := g.plan(k, nil, perm)
	if pp == nil {
		shape := slices.Clone(v.Shape)
		if !whole {
			shape[0] = b
		}
		pp = g.plan(k, shape, perm)
	}
	lay.Transpose(src, pp, dst[:len(src)])
	return dst[:len(src)]
}

// rows gathers sample i's a_i and g_i, group after group, into a and gg:
// the sample's blocks, then the device's index gathers over aMap and gMap.
func (g *einsumGeom) rows(lay runtime.GraphOps, x, dy *runtime.View, B, i int, xs, ys, a, gg []float32) ([]float32, []float32) {
	xs = gatherSample(lay, x, B, i, xs)
	ys = gatherSample(lay, dy, B, i, ys)
	lay.IndexGather(xs, g.aMap, a[:len(g.aIdx)])
	lay.IndexGather(ys, g.gMap, gg[:len(g.gIdx)])
	return xs, ys
}

// inst writes sample i's weight gradient, in the weight's layout, to out
// (scaled by c), from a and gg; tmp holds D·P floats. Each group's D×P
// product lands in the weight's layout through the device's scatter.
func (g *einsumGeom) inst(ops runtime.DPOps, lay runtime.GraphOps, a, gg []float32, c float32, tmp, out []float32) {
	T, D, P := g.T, g.D, g.P
	for gr := 0; gr < g.G; gr++ {
		ops.GemmSerial(true, false, D, P, T, c, a[gr*T*D:(gr+1)*T*D], D, gg[gr*T*P:(gr+1)*T*P], P, 0, tmp, P)
		lay.ScatterReduce(runtime.ScatterReduceNone, tmp[:D*P], g.wIdx[gr*D*P:(gr+1)*D*P], out)
	}
}

// einsumUse is the per-sample rule of an Einsum weight.
func einsumUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	ls, p := us.linear, us.p
	B := e.cfg.PhysicalBatch
	x, dy := &ev.Inputs[us.use.Data], &ev.DOut
	w := us.use.Operand
	if ls.einsum == nil {
		g, err := newEinsumGeom(ev.Node, w, x, dy, ev.Inputs[w].Shape, B)
		if err != nil {
			return err
		}
		g.batched = e.batchSamples
		ls.einsum = g
	}
	g := ls.einsum
	xLen, yLen := len(x.Data)/B, len(dy.Data)/B
	if g.G*g.T*g.D != xLen || g.G*g.T*g.P != yLen {
		return fmt.Errorf("samples of %d and %d values for %d groups of %d rows, D=%d, p=%d", xLen, yLen, g.G, g.T, g.D, g.P)
	}
	if g.aMap == nil {
		g.aMap = runtime.NewIndexMap(g.aIdx, xLen, 0)
		g.gMap = runtime.NewIndexMap(g.gIdx, yLen, 0)
		g.hostC = make([]float32, B)
	}
	if e.cfg.Mode == BK && p.ps == nil {
		g.x, g.dy = *x, *dy
		ls.x = x.Data
	}
	if e.batchSamples {
		if ok, err := einsumBatched(e, ls, us, x, dy); ok || err != nil {
			return err
		}
	}
	size := g.G * g.D * g.P // the operand's: the parameter's unless through a path
	rows := g.G * g.T * (g.D + g.P)
	need := xLen + yLen + rows + 2*g.T*g.T
	if ls.decision == rewrite.Instantiate {
		need = xLen + yLen + rows + g.D*g.P + size
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	e.forSamples(e.n, func(wk, i int) {
		buf := bufs[wk]
		xs, ys := buf[:0:xLen], buf[xLen:xLen:xLen+yLen]
		rest := buf[xLen+yLen:]
		a, gg := rest[:g.G*g.T*g.D], rest[g.G*g.T*g.D:rows]
		rest = rest[rows:]
		g.rows(e.lay, x, dy, B, i, xs, ys, a, gg)
		if ls.decision == rewrite.Ghost {
			for gr := 0; gr < g.G; gr++ {
				addGhostNormSq(e.ops, 1, a[gr*g.T*g.D:(gr+1)*g.T*g.D], g.T, g.D, gg[gr*g.T*g.P:(gr+1)*g.T*g.P], g.P, rest, p.normSq[i:i+1])
			}
			return
		}
		full := rest[g.D*g.P : g.D*g.P+size]
		g.inst(e.ops, e.lay, a, gg, 1, rest[:g.D*g.P], full)
		us.addSample(e.ops, i, 0, full)
	})
	return nil
}

// einsumBatched is einsumUse's per-sample work for chunks of samples at
// once, on a device of one worker with memory of its own (a GPU;
// Engine.batchSamples), as matrixBatched's for a Gemm or MatMul weight:
// the data operand and the output gradient laid out sample by sample,
// (b, G, R, K) and (b, G, R, N) — in place where that is their own
// order, else by one Transpose each, of a chunk where the batch is the
// outermost axis, of the whole batch once where it is not — and then, per
// sample and group, a_i's and g_i's rows at one stride. The ghost norms
// are the Grams of every (sample, group) as two batched GEMMs, each
// sample's G Grams added as one AddDots row (one row a sample and no
// groups: ‖a_i‖²‖g_i‖², AddSumSqProducts); the instantiated gradients are
// the (G, K, N) products as one batched GEMM, laid out as the weight by
// one Transpose and added at once (addRows). It reports false, doing
// nothing, where the scratch of a chunk of one sample (or of the whole
// batch, for an operand whose batch is not outermost) exceeds
// batchedScratch, for the per-sample loop to run.
func einsumBatched(e *Engine, ls *linearState, us *useState, x, dy *runtime.View) (bool, error) {
	g, p := ls.einsum, us.p
	B, n := e.cfg.PhysicalBatch, e.n
	G, T, D, P := g.G, g.T, g.D, g.P
	if x.Shape[x.BatchAxis] != B || dy.Shape[dy.BatchAxis] != B {
		return false, nil
	}
	ghost := ls.decision == rewrite.Ghost
	rankOne := ghost && T == 1 && G == 1
	size := G * D * P // the operand's: the parameter's unless through a path
	// fixed: the whole batch of an operand that cannot be chunked; per:
	// a sample's share of a chunk (its operands' layouts, then the work).
	xFixed, yFixed, xPer, yPer := 0, 0, 0, 0
	if !isIdentity(g.xSample) {
		if chunkable(x, B) {
			xPer = G * T * D
		} else {
			xFixed = B * G * T * D
		}
	}
	if !isIdentity(g.ySample) {
		if chunkable(dy, B) {
			yPer = G * T * P
		} else {
			yFixed = B * G * T * P
		}
	}
	fixed, per := xFixed+yFixed, xPer+yPer
	switch {
	case rankOne:
	case ghost:
		per += 2 * G * T * T
	default:
		per += size
		if !isIdentity(g.wPerm) {
			per += size
		}
	}
	if fixed > batchedScratch {
		return false, nil
	}
	nb := n
	if per > 0 {
		nb = min(n, e.fitWorkspace((batchedScratch-fixed)/per, fixed, per))
	}
	if nb < 1 {
		return false, nil
	}
	bufs, err := e.workerBufs(fixed + nb*per)
	if err != nil {
		return false, err
	}
	buf := bufs[0]
	cx, cy, work := buf[fixed:fixed+nb*xPer], buf[fixed+nb*xPer:fixed+nb*(xPer+yPer)], buf[fixed+nb*(xPer+yPer):]
	// An operand that cannot be chunked is laid out once, whole.
	var xWhole, yWhole []float32
	if !chunkable(x, B) {
		xWhole = g.operand(e.lay, x, 'x', false, g.xSample, B, 0, B, buf[:xFixed])
	}
	if !chunkable(dy, B) {
		yWhole = g.operand(e.lay, dy, 'y', false, g.ySample, B, 0, B, buf[xFixed:fixed])
	}
	for i0 := 0; i0 < n; i0 += nb {
		b := min(nb, n-i0)
		var a, gy []float32
		if xWhole != nil {
			a = xWhole[i0*G*T*D : (i0+b)*G*T*D]
		} else {
			a = g.operand(e.lay, x, 'x', false, g.xSample, B, i0, b, cx)
		}
		if yWhole != nil {
			gy = yWhole[i0*G*T*P : (i0+b)*G*T*P]
		} else {
			gy = g.operand(e.lay, dy, 'y', false, g.ySample, B, i0, b, cy)
		}
		g.chunks++
		items := b * G // (sample, group) pairs, a_i's and g_i's rows of one group each
		switch {
		case rankOne:
			e.ops.AddSumSqProducts(1, a[:b*D], gy[:b*P], p.normSq[i0:i0+b])
		case ghost:
			aa, gg := work[:items*T*T], work[nb*G*T*T:nb*G*T*T+items*T*T]
			e.ops.GemmStrided(false, true, T, T, D, 1, a, D, T*D, a, D, T*D, 0, aa, T, T*T, items)
			e.ops.GemmStrided(false, true, T, T, P, 1, gy, P, T*P, gy, P, T*P, 0, gg, T, T*T, items)
			e.ops.AddDots(1, aa, gg, p.normSq[i0:i0+b])
		default:
			prod := work[:b*size]
			e.ops.GemmStrided(true, false, D, P, T, 1, a, D, T*D, gy, P, T*P, 0, prod, P, D*P, items)
			inst := prod
			if !isIdentity(g.wPerm) {
				inst = work[nb*size : nb*size+b*size]
				e.lay.Transpose(prod, g.productsPlan(b), inst)
			}
			e.addRows(us, i0, b, inst)
		}
	}
	return true, nil
}

// productsPlan returns the plan of the Transpose that lays b samples'
// (G, K, N) products out as the weight.
func (g *einsumGeom) productsPlan(b int) *runtime.PermPlan {
	k := einsumPlanKey{'w', false, b}
	if pp := g.plan(k, nil, nil); pp != nil {
		return pp
	}
	perm := make([]int, 1+len(g.wPerm))
	for j, a := range g.wPerm {
		perm[1+j] = 1 + a
	}
	return g.plan(k, append([]int{b}, g.wShape...), perm)
}

// einsumWeightedSum is book-keeping's Σ_i c_i g_i of an Einsum weight
// from the kept data and output gradient: on a device that batches its
// per-sample work, weightedSumBatched's GEMMs where their scratch fits;
// else one sample at a time (each sample's factor copied to the host as
// its GEMM's α; the CPU's workers split each GEMM).
func einsumWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, _ []float32) error {
	g := ls.einsum
	if g == nil {
		return fmt.Errorf("no Einsum geometry")
	}
	if ok, err := g.weightedSumBatched(ls, c, B, accum, overwrite, scratch); ok || err != nil {
		return err
	}
	if overwrite {
		ls.lay.Fill(0, accum)
	}
	xLen, yLen := len(g.x.Data)/B, len(g.dy.Data)/B
	rows := g.G * g.T * (g.D + g.P)
	size := g.G * g.D * g.P
	buf, err := growOn(ls.dev, *scratch, xLen+yLen+rows+g.D*g.P+size)
	if err != nil {
		return err
	}
	*scratch = buf
	xs, ys := buf[:0:xLen], buf[xLen:xLen:xLen+yLen]
	a, gg := buf[xLen+yLen:xLen+yLen+g.G*g.T*g.D], buf[xLen+yLen+g.G*g.T*g.D:xLen+yLen+rows]
	tmp, full := buf[xLen+yLen+rows:xLen+yLen+rows+g.D*g.P], buf[xLen+yLen+rows+g.D*g.P:]
	// The factors are step scalars here: one copy to the host through the
	// device's copy (staged where the memory is the device's).
	hc := g.hostC[:B]
	ls.lay.Copy(c[:B], hc)
	for i := 0; i < B; i++ {
		if hc[i] == 0 {
			continue
		}
		g.rows(ls.lay, &g.x, &g.dy, B, i, xs, ys, a, gg)
		g.inst(ls.ops, ls.lay, a, gg, hc[i], tmp, full)
		ls.ops.Add(full, accum)
	}
	return nil
}

// weightedSumBatched is book-keeping's Σ_i c_i g_i of an Einsum weight as
// matrixWeightedSum's is for a Gemm or MatMul weight: per group, Σ_i c_i
// a_iᵀg_i is one product over the rows of every sample, once the output
// gradient's rows are scaled by their samples' factors (ScaleRows: the
// factors stay on the device). The data operand and the output gradient
// are laid out group by group, (G, b, R, K) and (G, b, R, N) — in place
// where that is their own order, else transposed a chunk of samples at a
// time where the batch is their outermost axis, whole where it is not —
// so that each group's rows lie at one stride: the groups' products are
// one batched GEMM a chunk, added up over the chunks in (G, K, N) and laid
// out as the weight by one Transpose. The output gradient is scaled
// where it lies when it is used in place: book-keeping reads it no more.
// It reports false, doing nothing, where the scratch exceeds
// batchedScratch (for a chunk of one sample, or the whole batch).
func (g *einsumGeom) weightedSumBatched(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32) (bool, error) {
	x, dy := &g.x, &g.dy
	G, T, D, P := g.G, g.T, g.D, g.P
	if !g.batched || x.Shape[x.BatchAxis] != B || dy.Shape[dy.BatchAxis] != B {
		return false, nil
	}
	xIn, yIn, wIn := isIdentity(g.xGroup), isIdentity(g.yGroup), isIdentity(g.wPerm)
	size := G * D * P
	fixed, per := 0, 0
	if !wIn {
		fixed = 2 * size // the products, and their weight layout
	}
	if !xIn {
		per += G * T * D
	}
	if !yIn {
		per += G * T * P
	}
	nb := B
	if per > 0 {
		nb = min(B, (batchedScratch-fixed)/per)
	}
	// An operand whose batch is not outermost is taken whole (in place,
	// a group's rows of every sample lie at one stride only then).
	if !chunkable(x, B) || !chunkable(dy, B) {
		nb = B
	}
	if nb < 1 || fixed+nb*per > batchedScratch {
		return false, nil
	}
	buf, err := growOn(ls.dev, *scratch, fixed+nb*per)
	if err != nil {
		return false, err
	}
	*scratch = buf
	prod, laid := buf[:fixed/2], buf[fixed/2:fixed]
	cx, cy := buf[fixed:fixed], buf[fixed:fixed+nb*per]
	if !xIn {
		cx, cy = cy[:nb*G*T*D], cy[nb*G*T*D:]
	}
	out, ldc := prod, P
	if wIn {
		out = accum
	}
	for i0 := 0; i0 < B; i0 += nb {
		b := min(nb, B-i0)
		a := g.operand(ls.lay, x, 'x', true, g.xGroup, B, i0, b, cx)
		gy := g.operand(ls.lay, dy, 'y', true, g.yGroup, B, i0, b, cy)
		// Row r of the chunk's (G, b, R, N) output gradient is sample
		// (r/T) mod b's.
		ls.ops.ScaleRows(c[i0:i0+b], 1, gy, P, T*P)
		g.chunks++
		beta := float32(1)
		if i0 == 0 && (overwrite || !wIn) {
			beta = 0
		}
		ls.ops.GemmStrided(true, false, D, P, b*T, 1, a, D, b*T*D, gy, P, b*T*P, beta, out, ldc, D*P, G)
	}
	if wIn {
		return true, nil
	}
	k := einsumPlanKey{'w', true, 0}
	pp := g.plan(k, nil, nil)
	if pp == nil {
		pp = g.plan(k, g.wShape, g.wPerm)
	}
	if overwrite {
		ls.lay.Transpose(prod, pp, accum[:size])
		return true, nil
	}
	ls.lay.Transpose(prod, pp, laid)
	ls.ops.Add(laid, accum[:size])
	return true, nil
}
