package runtime

import "fmt"

func to64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

func toInt(s []int64) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[i] = int(v)
	}
	return out
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func buildConv(p *Plan, nd *node) error {
	x, w, b, err := floatIn3(nd)
	if err != nil {
		return err
	}
	y := nd.out[0]
	if len(x.shape) < 3 || len(x.shape) > 5 || len(w.shape) != len(x.shape) {
		return fmt.Errorf("input %v and weight %v: want 1-3 spatial dims", x.shape, w.shape)
	}
	wp, err := nd.g.Window(to64(x.shape[2:]), to64(w.shape[2:]))
	if err != nil {
		return err
	}
	s := &ConvShape{
		N: x.shape[0], C: x.shape[1], M: w.shape[0], Group: int(nd.g.IntOr("group", 1)),
		In: x.shape[2:], Kernel: w.shape[2:], Strides: toInt(wp.Strides), Dilations: toInt(wp.Dilations), Pads: toInt(wp.Pads),
	}
	if err := s.Init(); err != nil {
		return err
	}
	if s.C/s.Group != w.shape[1] {
		return fmt.Errorf("weight %v does not match %d input channels in %d groups", w.shape, s.C, s.Group)
	}
	if want := append([]int{s.N, s.M}, s.Out...); !sameInts(want, y.shape) {
		return fmt.Errorf("output shape %v, kernel computes %v", y.shape, want)
	}
	p.needWS(p.ops.ConvScratchSize(s))
	nd.conv = s
	nd.saveIn[0], nd.saveIn[1] = true, true
	nd.fwd = func() {
		var bias []float32
		if b != nil {
			bias = b.data
		}
		p.ops.Conv(s, x.data, w.data, bias, y.data, p.ws)
	}
	nd.bwd = func() {
		var db []float32
		if len(nd.dIn) > 2 {
			db = nd.dIn[2]
		}
		p.ops.ConvBackward(s, x.data, w.data, y.grad, nd.dIn[0], nd.dIn[1], db, p.ws)
	}
	return nil
}

func buildGemm(p *Plan, nd *node) error {
	a, b, c, err := floatIn3(nd)
	if err != nil {
		return err
	}
	if len(a.shape) != 2 || len(b.shape) != 2 {
		return fmt.Errorf("Gemm needs 2-D operands, got %v and %v", a.shape, b.shape)
	}
	alpha, _ := nd.g.Float("alpha")
	beta, _ := nd.g.Float("beta")
	if nd.g.Attr("alpha") == nil {
		alpha = 1
	}
	if nd.g.Attr("beta") == nil {
		beta = 1
	}
	tA, tB := nd.g.IntOr("transA", 0) != 0, nd.g.IntOr("transB", 0) != 0
	M, K := a.shape[0], a.shape[1]
	if tA {
		M, K = K, M
	}
	K2, N := b.shape[0], b.shape[1]
	if tB {
		K2, N = N, K2
	}
	y := nd.out[0]
	if K != K2 || !sameInts(y.shape, []int{M, N}) {
		return fmt.Errorf("shapes %v (transA %v) × %v (transB %v) → %v do not match", a.shape, tA, b.shape, tB, y.shape)
	}
	lda, ldb := a.shape[1], b.shape[1]
	nd.saveIn[0], nd.saveIn[1] = true, true
	nd.fwd = func() {
		cb := float32(0)
		if c != nil && beta != 0 {
			p.ops.GemmBias(beta, c.data, c.shape, y.data, y.shape)
			cb = 1
		}
		p.ops.Gemm(tA, tB, M, N, K, alpha, a.data, lda, b.data, ldb, cb, y.data, N)
	}
	nd.bwd = func() {
		dy := y.grad
		if da := nd.dIn[0]; da != nil {
			if !tA { // dA (M×K) = α dY · op(B)ᵀ
				p.ops.Gemm(false, !tB, M, K, N, alpha, dy, N, b.data, ldb, 0, da, K)
			} else { // dA (K×M) = α op(B) · dYᵀ
				p.ops.Gemm(tB, true, K, M, N, alpha, b.data, ldb, dy, N, 0, da, M)
			}
		}
		if db := nd.dIn[1]; db != nil {
			if !tB { // dB (K×N) = α op(A)ᵀ · dY
				p.ops.Gemm(!tA, false, K, N, M, alpha, a.data, lda, dy, N, 0, db, N)
			} else { // dB (N×K) = α dYᵀ · op(A)
				p.ops.Gemm(true, tA, N, K, M, alpha, dy, N, a.data, lda, 0, db, K)
			}
		}
		if len(nd.dIn) > 2 && nd.dIn[2] != nil {
			p.ops.GemmBiasBackward(beta, dy, y.shape, nd.dIn[2], c.shape)
		}
	}
	return nil
}

func buildMatMul(p *Plan, nd *node) error {
	a, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	b, err := floatIn(nd, 1)
	if err != nil {
		return err
	}
	y := nd.out[0]
	as, bs := a.shape, b.shape
	if len(as) == 0 || len(bs) == 0 {
		return fmt.Errorf("MatMul of scalars")
	}
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	M, K := as[len(as)-2], as[len(as)-1]
	K2, N := bs[len(bs)-2], bs[len(bs)-1]
	if K != K2 {
		return fmt.Errorf("inner dimensions of %v and %v differ", a.shape, b.shape)
	}
	ba, bb := as[:len(as)-2], bs[:len(bs)-2]
	batch, err := broadcastShape(ba, bb)
	if err != nil {
		return err
	}
	nb := numel(batch)
	if nb*M*N != y.n {
		return fmt.Errorf("output %v does not hold %d×%d×%d elements", y.shape, nb, M, N)
	}
	nd.saveIn[0], nd.saveIn[1] = true, true
	if len(bb) == 0 { // (…, M, K) × (K, N): one product over all rows
		R := nb * M
		nd.fwd = func() { p.ops.Gemm(false, false, R, N, K, 1, a.data, K, b.data, N, 0, y.data, N) }
		nd.bwd = func() {
			if da := nd.dIn[0]; da != nil {
				p.ops.Gemm(false, true, R, K, N, 1, y.grad, N, b.data, N, 0, da, K)
			}
			if db := nd.dIn[1]; db != nil {
				p.ops.Gemm(true, false, K, N, R, 1, a.data, K, y.grad, N, 0, db, N)
			}
		}
		return nil
	}
	// General batched product with broadcasting of the batch axes.
	aOff, bOff := make([]int, nb), make([]int, nb)
	stA, stB := bcastStrides(ba, batch), bcastStrides(bb, batch)
	forCoords(batch, func(i int, c []int) {
		for k, ck := range c {
			aOff[i] += ck * stA[k] * M * K
			bOff[i] += ck * stB[k] * K * N
		}
	})
	aFull, bFull := numel(ba) == nb, numel(bb) == nb
	// Uniform batches (every product its own A and B, or one side shared:
	// attention's per-head products) go to SgemmStrided, which spreads
	// products too small to split over the workers whole.
	sa, sb := uniformStep(aOff, M*K), uniformStep(bOff, K*N)
	if sa >= 0 && sb >= 0 {
		nd.fwd = func() {
			p.ops.GemmStrided(false, false, M, N, K, 1, a.data, K, sa, b.data, N, sb, 0, y.data, N, M*N, nb)
		}
		nd.bwd = func() {
			if da := nd.dIn[0]; da != nil {
				if aFull {
					p.ops.GemmStrided(false, true, M, K, N, 1, y.grad, N, M*N, b.data, N, sb, 0, da, K, M*K, nb)
				} else {
					p.ops.Fill(0, da)
					for i := 0; i < nb; i++ {
						p.ops.Gemm(false, true, M, K, N, 1, y.grad[i*M*N:], N, b.data[bOff[i]:], N, 1, da[aOff[i]:], K)
					}
				}
			}
			if db := nd.dIn[1]; db != nil {
				if bFull {
					p.ops.GemmStrided(true, false, K, N, M, 1, a.data, K, sa, y.grad, N, M*N, 0, db, N, K*N, nb)
				} else {
					p.ops.Fill(0, db)
					for i := 0; i < nb; i++ {
						p.ops.Gemm(true, false, K, N, M, 1, a.data[aOff[i]:], K, y.grad[i*M*N:], N, 1, db[bOff[i]:], N)
					}
				}
			}
		}
		return nil
	}
	nd.fwd = func() {
		for i := 0; i < nb; i++ {
			p.ops.Gemm(false, false, M, N, K, 1, a.data[aOff[i]:], K, b.data[bOff[i]:], N, 0, y.data[i*M*N:], N)
		}
	}
	nd.bwd = func() {
		if da := nd.dIn[0]; da != nil {
			beta := float32(0)
			if !aFull {
				p.ops.Fill(0, da)
				beta = 1
			}
			for i := 0; i < nb; i++ {
				p.ops.Gemm(false, true, M, K, N, 1, y.grad[i*M*N:], N, b.data[bOff[i]:], N, beta, da[aOff[i]:], K)
			}
		}
		if db := nd.dIn[1]; db != nil {
			beta := float32(0)
			if !bFull {
				p.ops.Fill(0, db)
				beta = 1
			}
			for i := 0; i < nb; i++ {
				p.ops.Gemm(true, false, K, N, M, 1, a.data[aOff[i]:], K, y.grad[i*M*N:], N, beta, db[bOff[i]:], N)
			}
		}
	}
	return nil
}

// broadcastShape is the numpy broadcast of the shapes a and b (aligned
// on the right).
func broadcastShape(a, b []int) ([]int, error) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for k := 0; k < n; k++ {
		da, db := 1, 1
		if i := k - (n - len(a)); i >= 0 {
			da = a[i]
		}
		if i := k - (n - len(b)); i >= 0 {
			db = b[i]
		}
		switch {
		case da == db || db == 1:
			out[k] = da
		case da == 1:
			out[k] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// uniformStep returns the constant step of offs (mat when each product
// has its own consecutive matrix, 0 when all share one), or −1.
func uniformStep(offs []int, mat int) int {
	for _, step := range []int{mat, 0} {
		ok := true
		for i, o := range offs {
			if o != i*step {
				ok = false
				break
			}
		}
		if ok {
			return step
		}
	}
	return -1
}

// bcastStrides returns, for each axis of out, the stride (in units of
// whole elements of s's row-major layout) of s right-aligned to out, 0
// along broadcast axes.
func bcastStrides(s, out []int) []int {
	st := make([]int, len(out))
	ss := strides(s)
	off := len(out) - len(s)
	for k := range out {
		if k >= off && s[k-off] != 1 {
			st[k] = ss[k-off]
		}
	}
	return st
}

// --- pooling ---

// buildPool compiles MaxPool (isMax) or AveragePool onto the kernels' pooling.
func buildPool(p *Plan, nd *node, isMax bool) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	if err := onlyOutput(p, nd); err != nil {
		return err
	}
	y := nd.out[0]
	ks, err := nd.g.Ints("kernel_shape", nil)
	if err != nil || len(ks) == 0 {
		return fmt.Errorf("kernel_shape is required")
	}
	wp, err := nd.g.Window(to64(x.shape[2:]), ks)
	if err != nil {
		return err
	}
	if !sameInts(toInt(wp.Out), y.shape[2:]) {
		return fmt.Errorf("output %v, window computes %v", y.shape, wp.Out)
	}
	ps := &PoolShape{N: x.shape[0], C: x.shape[1], In: x.shape[2:], Kernel: toInt(ks),
		Strides: toInt(wp.Strides), Dilations: toInt(wp.Dilations), Pads: toInt(wp.Pads), CeilMode: wp.CeilMode,
		CountIncludePad: nd.g.IntOr("count_include_pad", 0) != 0}
	if err := ps.Init(); err != nil {
		return err
	}
	if !sameInts(ps.Out, y.shape[2:]) {
		return fmt.Errorf("output %v, pooling computes %v", y.shape, ps.Out)
	}
	if isMax {
		var arg []int32
		nd.redoLen = 2 * y.n
		nd.fwd = func() { p.ops.MaxPool(ps, x.data, y.data, arg) }
		nd.bwd = func() {
			switch {
			case nd.redoItem >= 0:
				// The pool again, output and winners, into the
				// arena buffer planned for it (planned, below).
				n := y.n
				ys, win := nd.redoBuf[:n:n], int32View(nd.redoBuf[n:2*n:2*n])
				p.ops.MaxPool(ps, x.data, ys, win)
				p.ops.MaxPoolBackward(ps, y.grad, win, nd.dIn[0])
			case arg == nil:
				p.ops.MaxPoolBackwardFromOutput(ps, x.data, y.data, y.grad, nd.dIn[0])
			default:
				p.ops.MaxPoolBackward(ps, y.grad, arg, nd.dIn[0])
			}
		}
		nd.planned = func() error {
			// The argmax (one int32 per output) is only for the
			// backward, and not even there when x and y are both
			// still intact at it: book-keeping keeps the output of a
			// pool feeding a trained layer, and the winners can be
			// found again from it (−2.9 MB on the cnn-fmnist step).
			at := p.backStep(nd.idx)
			if !nd.needBwd || (x.dataEnd >= at && y.dataEnd >= at) {
				return nil
			}
			// Where x alone is intact (a Relu before the pool keeps its
			// output for its own backward: ResNet's stem), the plan gave
			// the backward an arena buffer to run the pool again into,
			// output and winners (bufferItems' redo items), in memory
			// the backward has freed by then: the same winners, so the
			// same bits, and 24.5 MiB less device memory on ResNet-50 at
			// batch 32.
			if nd.redoItem >= 0 {
				return nil
			}
			if p.opts.PlanOnly {
				nd.auxBytes = 4 * int64(y.n)
				return nil
			}
			// Written by the device's forward, read by its backward:
			// device memory.
			var err error
			if arg, err = AllocInt32(p.dev, y.n); err != nil {
				return fmt.Errorf("the winners of MaxPool: %w", err)
			}
			nd.auxBytes = 4 * int64(y.n)
			return nil
		}
		return nil
	}
	nd.fwd = func() { p.ops.AveragePool(ps, x.data, y.data) }
	nd.bwd = func() { p.ops.AveragePoolBackward(ps, y.grad, nd.dIn[0]) }
	return nil
}

// maxPoolRedoOff, set only by tests, keeps a MaxPool's winners from the
// forward where the backward would run the pool again (buildPool).
var maxPoolRedoOff bool

func buildMaxPool(p *Plan, nd *node) error { return buildPool(p, nd, true) }
func buildAvgPool(p *Plan, nd *node) error { return buildPool(p, nd, false) }

func buildGlobalAvgPool(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	y := nd.out[0]
	if len(x.shape) < 3 {
		return fmt.Errorf("input %v has no spatial axes", x.shape)
	}
	planes := x.shape[0] * x.shape[1]
	L := numel(x.shape[2:])
	nd.fwd = func() { p.ops.GlobalAveragePool(planes, L, x.data, y.data) }
	nd.bwd = func() { p.ops.GlobalAveragePoolBackward(planes, L, y.grad, nd.dIn[0]) }
	return nil
}

// --- normalization ---

func buildBatchNorm(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	var prm [5]*tensor
	for i := 1; i < 5; i++ {
		if prm[i], err = floatIn(nd, i); err != nil {
			return err
		}
	}
	y := nd.out[0]
	if len(x.shape) < 2 {
		return fmt.Errorf("input %v has no channel axis", x.shape)
	}
	if err := onlyOutput(p, nd); err != nil {
		return fmt.Errorf("%w (updated running statistics are computed but not differentiated)", err)
	}
	if nd.g.Opset < 7 && nd.g.IntOr("is_test", 0) == 0 {
		// Opset 6: is_test=0 (the default) asks for batch statistics.
		return fmt.Errorf("is_test=0 (opset %d, batch statistics) is not supported: only is_test=1", nd.g.Opset)
	}
	if nd.g.IntOr("spatial", 1) == 0 {
		// Opsets 7–8: statistics per activation, not per channel.
		return fmt.Errorf("spatial=0 (opset %d) is not supported: only per-channel statistics", nd.g.Opset)
	}
	N, C := x.shape[0], x.shape[1]
	S := numel(x.shape[2:])
	eps, _ := nd.g.Float("epsilon")
	if nd.g.Attr("epsilon") == nil {
		eps = 1e-5
	}
	mom, _ := nd.g.Float("momentum")
	if nd.g.Attr("momentum") == nil {
		mom = 0.9
	}
	training := nd.g.Opset >= 14 && nd.g.IntOr("training_mode", 0) != 0
	if nd.g.Opset < 14 && len(nd.out) > 1 && nd.out[1] != nil {
		training = true
	}
	for i := 1; i < len(nd.out); i++ {
		if t := nd.out[i]; t != nil && t.n != C {
			return fmt.Errorf("output %d has shape %v, want (%d)", i, t.shape, C)
		}
	}
	scale, bias, rmean, rvar := prm[1], prm[2], prm[3], prm[4]
	bn := &BatchNormShape{N: N, C: C, S: S, Epsilon: eps, Momentum: mom, Training: training}
	// The statistics the forward used, for the backward: node-owned
	// device buffers.
	stats, err := p.dev.Alloc(2 * C)
	if err != nil {
		return err
	}
	mean, inv := stats.Floats()[:C], stats.Floats()[C:]
	var newMean, newVar *tensor
	if len(nd.out) > 1 {
		newMean = nd.out[1]
	}
	if len(nd.out) > 2 {
		newVar = nd.out[2]
	}
	nd.saveIn[0] = true
	nd.fwd = func() {
		var nm, nv []float32
		if training && newMean != nil {
			nm = newMean.data
		}
		if training && newVar != nil {
			nv = newVar.data
		}
		p.ops.BatchNorm(bn, x.data, scale.data, bias.data, rmean.data, rvar.data, y.data, mean, inv, nm, nv)
	}
	nd.bwd = func() {
		p.ops.BatchNormBackward(bn, x.data, scale.data, mean, inv, y.grad, nd.dIn[0], nd.dIn[1], nd.dIn[2])
	}
	return nil
}

// NormRows describes a compiled normalization node to the per-sample
// rules: the node normalizes rows of RowLen consecutive elements of its
// input (a sample's rows are consecutive in its own elements), and element
// j of row r reads scale and bias element Param(r, j). Row r of the whole
// input has the mean and 1/σ Stats(r) from the last Forward, so that a
// rule forms x̂ = (x − mean)·(1/σ) with the forward's own bits instead of
// recomputing them.
type NormRows struct{ r *rowNorm }

// RowLen is the number of elements a row normalizes together.
func (n *NormRows) RowLen() int { return n.r.L }

// Rows is the number of rows of the whole input.
func (n *NormRows) Rows() int { return n.r.Rows }

// Epsilon is the ε added to each row's variance.
func (n *NormRows) Epsilon() float64 { return n.r.Eps }

// Param is the scale/bias element that element j of row row uses.
func (n *NormRows) Param(row, j int) int { return n.r.Param(row, j) }

// Stats is row row's mean and 1/σ from the last Forward (rows numbered
// over the whole input, in its flat order).
func (n *NormRows) Stats(row int) (mean, inv float32) { return n.r.mean[row], n.r.inv[row] }

// ParamMap is Param as one formula for a device's kernel: element j of
// row row uses scale/bias element (row mod G)·CpG + j/S (LayerNorm: 1, 0,
// 1; GroupNormalization's per-group affine: groups, 1, the row length;
// per channel and InstanceNormalization: groups, channels per group,
// spatial size).
func (n *NormRows) ParamMap() (G, CpG, S int) {
	switch r := n.r; r.Mode {
	case normChan:
		return r.G, r.CpG, r.S
	case normGroup:
		return r.G, 1, r.L
	}
	return 1, 0, 1
}

// StatsData is the rows' means and 1/σ from the last Forward, Rows()
// each: device memory, for the device's operations (Stats reads one row's
// on the host).
func (n *NormRows) StatsData() (mean, inv []float32) { return n.r.mean, n.r.inv }

// NewLayerNormRows describes LayerNormalization of outer rows of size
// elements, scale and bias of size elements (NNOps.NormalizeRowsAffine).
func NewLayerNormRows(outer, size int, eps float64) *NormRows {
	return newNormRows(&rowNorm{rowNormShape: rowNormShape{Rows: outer, L: size, Mode: normLast}}, size, eps)
}

// NewInstanceNormRows describes InstanceNormalization of n samples of c
// channels of spatial elements, scale and bias per channel.
func NewInstanceNormRows(n, c, spatial int, eps float64) *NormRows {
	return newNormRows(&rowNorm{rowNormShape: rowNormShape{Rows: n * c, L: spatial, Mode: normChan, G: c, CpG: 1, S: spatial}}, c, eps)
}

// NewGroupNormRows describes GroupNormalization of n samples of c
// channels of spatial elements in groups groups, scale and bias per
// channel, or per group when perGroup (opset 18).
func NewGroupNormRows(n, c, spatial, groups int, perGroup bool, eps float64) *NormRows {
	r := &rowNorm{rowNormShape: rowNormShape{Rows: n * groups, L: c / groups * spatial, G: groups, CpG: c / groups, S: spatial, Mode: normChan}}
	if perGroup {
		r.Mode = normGroup
		return newNormRows(r, groups, eps)
	}
	return newNormRows(r, c, eps)
}

func newNormRows(r *rowNorm, nParams int, eps float64) *NormRows {
	r.Eps = eps
	r.nParams = nParams
	r.accS, r.accB = make([]float64, nParams), make([]float64, nParams)
	return &NormRows{r: r}
}

// NumParams is the number of scale (and bias) elements.
func (n *NormRows) NumParams() int { return n.r.nParams }

func compileRowNorm(p *Plan, nd *node, mk func(eps float64) *NormRows) error {
	x, scale, bias, err := floatIn3(nd)
	if err != nil {
		return err
	}
	eps, _ := nd.g.Float("epsilon")
	if nd.g.Attr("epsilon") == nil {
		eps = 1e-5
	}
	nr := mk(float64(eps))
	r := nr.r
	if nParams := r.nParams; scale.n != nParams || (bias != nil && bias.n != nParams) {
		return fmt.Errorf("scale %v / bias must hold %d elements", scale.shape, nParams)
	}
	// The rows' statistics, for the backward and the per-sample rules
	// (NormRows.Stats): node-owned device buffers.
	stats, err := p.dev.Alloc(2 * r.Rows)
	if err != nil {
		return err
	}
	r.mean, r.inv = stats.Floats()[:r.Rows], stats.Floats()[r.Rows:]
	nd.norm = r
	y := nd.out[0]
	nd.saveIn[0], nd.saveIn[1] = true, true
	nd.fwd = func() {
		var b []float32
		if bias != nil {
			b = bias.data
		}
		p.ops.NormalizeRowsAffine(nr, x.data, scale.data, b, y.data, r.mean, r.inv)
		// LayerNormalization's optional Mean and InvStdDev outputs.
		if len(nd.out) > 1 && nd.out[1] != nil {
			p.ops.Copy(r.mean, nd.out[1].data)
		}
		if len(nd.out) > 2 && nd.out[2] != nil {
			p.ops.Copy(r.inv, nd.out[2].data)
		}
	}
	nd.bwd = func() {
		var db []float32
		if len(nd.dIn) > 2 {
			db = nd.dIn[2]
		}
		if nd.dIn[0] != nil {
			p.ops.NormalizeRowsAffineBackward(nr, x.data, scale.data, r.mean, r.inv, y.grad, nd.dIn[0])
		}
		if nd.dIn[1] != nil || db != nil {
			p.ops.NormalizeRowsAffineParamGrads(nr, x.data, r.mean, r.inv, y.grad, nd.dIn[1], db)
		}
	}
	return nil
}

func buildLayerNorm(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	// The optional Mean and InvStdDev outputs are the statistics the
	// forward keeps anyway (compileRowNorm copies them out); no gradient
	// flows back through them.
	for k, t := range nd.out[1:] {
		if t != nil && t.needGrad {
			return fmt.Errorf("output %d (%q) needs a gradient; only the first output's is supported", k+1, t.v.Name)
		}
	}
	rank := len(x.shape)
	a := nd.g.IntOr("axis", -1)
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || int(a) >= rank {
		return fmt.Errorf("axis %d out of range for rank %d", a, rank)
	}
	L := numel(x.shape[a:])
	outer := numel(x.shape[:a])
	return compileRowNorm(p, nd, func(eps float64) *NormRows { return NewLayerNormRows(outer, L, eps) })
}

func buildInstanceNorm(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	if len(x.shape) < 3 {
		return fmt.Errorf("input %v has no spatial axes", x.shape)
	}
	C, S := x.shape[1], numel(x.shape[2:])
	N := x.shape[0]
	return compileRowNorm(p, nd, func(eps float64) *NormRows { return NewInstanceNormRows(N, C, S, eps) })
}

func buildGroupNorm(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	if len(x.shape) < 2 {
		return fmt.Errorf("input %v has no channel axis", x.shape)
	}
	G, err := nd.g.Int("num_groups")
	if err != nil {
		return err
	}
	C, S := x.shape[1], numel(x.shape[2:])
	if G <= 0 || C%int(G) != 0 {
		return fmt.Errorf("%d channels do not split into %d groups", C, G)
	}
	// Opset 18's scale and bias hold one value per group, 21's one per
	// channel. Below 21 a per-channel pair is taken too: the BatchNorm
	// rewrite trains its GroupNormalization that way at the model's own
	// opset (and writes it back decomposed).
	perGroup := false
	if sc := nd.in[1]; sc != nil && sc.n == int(G) && int(G) != C {
		if nd.g.Opset >= 21 {
			return fmt.Errorf("scale %v holds one value per group (opset 18); from opset 21 (the model imports %d) it holds one per channel, %d", sc.shape, nd.g.Opset, C)
		}
		perGroup = true
	}
	N := x.shape[0]
	return compileRowNorm(p, nd, func(eps float64) *NormRows { return NewGroupNormRows(N, C, S, int(G), perGroup, eps) })
}
