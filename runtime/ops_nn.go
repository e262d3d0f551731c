package runtime

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

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
	s := &kernels.ConvShape{
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
	p.needWS(kernels.ConvWorkspaceSize(s))
	nd.conv = s
	nd.saveIn[0], nd.saveIn[1] = true, true
	nd.fwd = func() {
		var bias []float32
		if b != nil {
			bias = b.data
		}
		kernels.ConvForward(s, x.data, w.data, bias, y.data, p.ws)
	}
	nd.bwd = func() {
		var db []float32
		if len(nd.dIn) > 2 {
			db = nd.dIn[2]
		}
		kernels.ConvBackward(s, x.data, w.data, y.grad, nd.dIn[0], nd.dIn[1], db, p.ws)
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
			kernels.Expand(c.data, c.shape, y.data, y.shape)
			if beta != 1 {
				for i := range y.data {
					y.data[i] *= beta
				}
			}
			cb = 1
		}
		blas.Sgemm(tA, tB, M, N, K, alpha, a.data, lda, b.data, ldb, cb, y.data, N)
	}
	nd.bwd = func() {
		dy := y.grad
		if da := nd.dIn[0]; da != nil {
			if !tA { // dA (M×K) = α dY · op(B)ᵀ
				blas.Sgemm(false, !tB, M, K, N, alpha, dy, N, b.data, ldb, 0, da, K)
			} else { // dA (K×M) = α op(B) · dYᵀ
				blas.Sgemm(tB, true, K, M, N, alpha, b.data, ldb, dy, N, 0, da, M)
			}
		}
		if db := nd.dIn[1]; db != nil {
			if !tB { // dB (K×N) = α op(A)ᵀ · dY
				blas.Sgemm(!tA, false, K, N, M, alpha, a.data, lda, dy, N, 0, db, N)
			} else { // dB (N×K) = α dYᵀ · op(A)
				blas.Sgemm(true, tA, N, K, M, alpha, dy, N, a.data, lda, 0, db, K)
			}
		}
		if len(nd.dIn) > 2 && nd.dIn[2] != nil {
			dc := nd.dIn[2]
			kernels.ReduceToShape(dy, y.shape, dc, c.shape)
			if beta != 1 {
				for i := range dc {
					dc[i] *= beta
				}
			}
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
	batch, err := kernels.BroadcastShape(ba, bb)
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
		nd.fwd = func() { blas.Sgemm(false, false, R, N, K, 1, a.data, K, b.data, N, 0, y.data, N) }
		nd.bwd = func() {
			if da := nd.dIn[0]; da != nil {
				blas.Sgemm(false, true, R, K, N, 1, y.grad, N, b.data, N, 0, da, K)
			}
			if db := nd.dIn[1]; db != nil {
				blas.Sgemm(true, false, K, N, R, 1, a.data, K, y.grad, N, 0, db, N)
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
			blas.SgemmStrided(false, false, M, N, K, 1, a.data, K, sa, b.data, N, sb, 0, y.data, N, M*N, nb)
		}
		nd.bwd = func() {
			if da := nd.dIn[0]; da != nil {
				if aFull {
					blas.SgemmStrided(false, true, M, K, N, 1, y.grad, N, M*N, b.data, N, sb, 0, da, K, M*K, nb)
				} else {
					clear(da)
					for i := 0; i < nb; i++ {
						blas.Sgemm(false, true, M, K, N, 1, y.grad[i*M*N:], N, b.data[bOff[i]:], N, 1, da[aOff[i]:], K)
					}
				}
			}
			if db := nd.dIn[1]; db != nil {
				if bFull {
					blas.SgemmStrided(true, false, K, N, M, 1, a.data, K, sa, y.grad, N, M*N, 0, db, N, K*N, nb)
				} else {
					clear(db)
					for i := 0; i < nb; i++ {
						blas.Sgemm(true, false, K, N, M, 1, a.data[aOff[i]:], K, y.grad[i*M*N:], N, 1, db[bOff[i]:], N)
					}
				}
			}
		}
		return nil
	}
	nd.fwd = func() {
		for i := 0; i < nb; i++ {
			blas.Sgemm(false, false, M, N, K, 1, a.data[aOff[i]:], K, b.data[bOff[i]:], N, 0, y.data[i*M*N:], N)
		}
	}
	nd.bwd = func() {
		if da := nd.dIn[0]; da != nil {
			beta := float32(0)
			if !aFull {
				clear(da)
				beta = 1
			}
			for i := 0; i < nb; i++ {
				blas.Sgemm(false, true, M, K, N, 1, y.grad[i*M*N:], N, b.data[bOff[i]:], N, beta, da[aOff[i]:], K)
			}
		}
		if db := nd.dIn[1]; db != nil {
			beta := float32(0)
			if !bFull {
				clear(db)
				beta = 1
			}
			for i := 0; i < nb; i++ {
				blas.Sgemm(true, false, K, N, M, 1, a.data[aOff[i]:], K, y.grad[i*M*N:], N, beta, db[bOff[i]:], N)
			}
		}
	}
	return nil
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
	ps := &kernels.PoolShape{N: x.shape[0], C: x.shape[1], In: x.shape[2:], Kernel: toInt(ks),
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
		nd.fwd = func() { kernels.MaxPoolForward(ps, x.data, y.data, arg) }
		nd.bwd = func() {
			if arg == nil {
				kernels.MaxPoolBackwardFromOutput(ps, x.data, y.data, y.grad, nd.dIn[0])
				return
			}
			kernels.MaxPoolBackward(ps, y.grad, arg, nd.dIn[0])
		}
		nd.planned = func() {
			// The argmax (one int32 per output) is only for the
			// backward, and not even there when x and y are both
			// still intact at it: book-keeping keeps the output of a
			// pool feeding a trained layer, and the winners can be
			// found again from it (−2.9 MB on the cnn-fmnist step).
			at := p.backStep(nd.idx)
			if nd.needBwd && (x.dataEnd < at || y.dataEnd < at) {
				arg = make([]int32, y.n)
				nd.auxBytes = 4 * int64(y.n)
			}
		}
		return nil
	}
	nd.fwd = func() { kernels.AveragePoolForward(ps, x.data, y.data) }
	nd.bwd = func() { kernels.AveragePoolBackward(ps, y.grad, nd.dIn[0]) }
	return nil
}

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
	inv := 1 / float32(L)
	fwd := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var s float32
			for _, v := range x.data[i*L : (i+1)*L] {
				s += v
			}
			y.data[i] = s * inv
		}
	}
	bwd := func(lo, hi int) {
		dx := nd.dIn[0]
		for i := lo; i < hi; i++ {
			g := y.grad[i] * inv
			row := dx[i*L : (i+1)*L]
			for j := range row {
				row[j] = g
			}
		}
	}
	grain := grainFor(L)
	nd.fwd = func() { parFor(planes, grain, fwd) }
	nd.bwd = func() { parFor(planes, grain, bwd) }
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
	mean, inv := make([]float32, C), make([]float32, C)
	sdy, sdyx := make([]float64, C), make([]float64, C)
	M := float64(N * S)
	nd.saveIn[0] = true
	grain := grainFor(N * S)
	fwd := func(lo, hi int) {
		xd, yd := x.data, y.data
		for c := lo; c < hi; c++ {
			if training {
				var s, ss float64
				for n := 0; n < N; n++ {
					for _, v := range xd[(n*C+c)*S : (n*C+c+1)*S] {
						s += float64(v)
					}
				}
				m := s / M
				for n := 0; n < N; n++ {
					for _, v := range xd[(n*C+c)*S : (n*C+c+1)*S] {
						d := float64(v) - m
						ss += d * d
					}
				}
				vr := ss / M
				mean[c], inv[c] = float32(m), float32(1/math.Sqrt(vr+float64(eps)))
				if len(nd.out) > 1 && nd.out[1] != nil {
					nd.out[1].data[c] = rmean.data[c]*mom + float32(m)*(1-mom)
				}
				if len(nd.out) > 2 && nd.out[2] != nil {
					nd.out[2].data[c] = rvar.data[c]*mom + float32(vr)*(1-mom)
				}
			} else {
				mean[c], inv[c] = rmean.data[c], float32(1/math.Sqrt(float64(rvar.data[c])+float64(eps)))
			}
			a := inv[c] * scale.data[c]
			b := bias.data[c] - mean[c]*a
			for n := 0; n < N; n++ {
				o := (n*C + c) * S
				for j, v := range xd[o : o+S] {
					yd[o+j] = v*a + b
				}
			}
		}
	}
	bwd := func(lo, hi int) {
		xd, dy, dx := x.data, y.grad, nd.dIn[0]
		for c := lo; c < hi; c++ {
			var s1, s2 float64
			m, iv := mean[c], inv[c]
			for n := 0; n < N; n++ {
				o := (n*C + c) * S
				for j, g := range dy[o : o+S] {
					s1 += float64(g)
					s2 += float64(g * (xd[o+j] - m) * iv)
				}
			}
			sdy[c], sdyx[c] = s1, s2
			if dx == nil {
				continue
			}
			sc := scale.data[c]
			if training {
				k := float32(1/M) * iv * sc
				for n := 0; n < N; n++ {
					o := (n*C + c) * S
					for j, g := range dy[o : o+S] {
						xh := (xd[o+j] - m) * iv
						dx[o+j] = k * (float32(M)*g - float32(s1) - xh*float32(s2))
					}
				}
			} else {
				k := iv * sc
				for n := 0; n < N; n++ {
					o := (n*C + c) * S
					for j, g := range dy[o : o+S] {
						dx[o+j] = k * g
					}
				}
			}
		}
	}
	nd.fwd = func() { parFor(C, grain, fwd) }
	nd.bwd = func() {
		parFor(C, grain, bwd)
		if d := nd.dIn[1]; d != nil {
			for c := range d {
				d[c] = float32(sdyx[c])
			}
		}
		if d := nd.dIn[2]; d != nil {
			for c := range d {
				d[c] = float32(sdy[c])
			}
		}
	}
	return nil
}

// rowNorm normalizes rows of L contiguous elements (LayerNormalization,
// InstanceNormalization, GroupNormalization) and applies a per-element
// affine transform whose parameter index depends on mode.
type rowNorm struct {
	rows, L int
	eps     float64
	mode    int // normLast: index j; normChan: channel of element; normGroup: group
	G, CpG  int // groups, channels per group
	S       int // spatial size
	mean    []float32
	inv     []float32
	accS    []float64
	accB    []float64
}

const (
	normLast = iota
	normChan
	normGroup
)

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

// Param is the scale/bias element that element j of row row uses.
func (n *NormRows) Param(row, j int) int { return n.r.pidx(row, j) }

// Stats is row row's mean and 1/σ from the last Forward (rows numbered
// over the whole input, in its flat order).
func (n *NormRows) Stats(row int) (mean, inv float32) { return n.r.mean[row], n.r.inv[row] }

func (r *rowNorm) pidx(row, j int) int {
	switch r.mode {
	case normChan:
		return (row%r.G)*r.CpG + j/r.S
	case normGroup:
		return row % r.G
	}
	return j
}

func (r *rowNorm) forward(x, scale, bias, y []float32, lo, hi int) {
	for row := lo; row < hi; row++ {
		xr, yr := x[row*r.L:(row+1)*r.L], y[row*r.L:(row+1)*r.L]
		var s float64
		for _, v := range xr {
			s += float64(v)
		}
		m := s / float64(r.L)
		var ss float64
		for _, v := range xr {
			d := float64(v) - m
			ss += d * d
		}
		iv := 1 / math.Sqrt(ss/float64(r.L)+r.eps)
		r.mean[row], r.inv[row] = float32(m), float32(iv)
		mf, ivf := float32(m), float32(iv)
		for j, v := range xr {
			k := r.pidx(row, j)
			yv := (v - mf) * ivf * scale[k]
			if bias != nil {
				yv += bias[k]
			}
			yr[j] = yv
		}
	}
}

// backwardX computes dx for rows [lo, hi).
func (r *rowNorm) backwardX(x, scale, dy, dx []float32, lo, hi int) {
	for row := lo; row < hi; row++ {
		xr, gr := x[row*r.L:(row+1)*r.L], dy[row*r.L:(row+1)*r.L]
		m, iv := r.mean[row], r.inv[row]
		var sg, sgx float64
		for j, g := range gr {
			k := r.pidx(row, j)
			xh := (xr[j] - m) * iv
			gs := g * scale[k]
			sg += float64(gs)
			sgx += float64(gs * xh)
		}
		mg, mgx := float32(sg/float64(r.L)), float32(sgx/float64(r.L))
		dr := dx[row*r.L : (row+1)*r.L]
		for j, g := range gr {
			k := r.pidx(row, j)
			xh := (xr[j] - m) * iv
			dr[j] = iv * (g*scale[k] - mg - xh*mgx)
		}
	}
}

// backwardParams computes the scale and bias gradients (either may be
// nil), summed over rows.
func (r *rowNorm) backwardParams(x, dy, dscale, dbias []float32) {
	if dscale == nil && dbias == nil {
		return
	}
	clear(r.accS)
	clear(r.accB)
	for row := 0; row < r.rows; row++ {
		xr, gr := x[row*r.L:(row+1)*r.L], dy[row*r.L:(row+1)*r.L]
		m, iv := r.mean[row], r.inv[row]
		for j, g := range gr {
			k := r.pidx(row, j)
			r.accS[k] += float64(g * (xr[j] - m) * iv)
			r.accB[k] += float64(g)
		}
	}
	if dscale != nil {
		for k := range dscale {
			dscale[k] = float32(r.accS[k])
		}
	}
	if dbias != nil {
		for k := range dbias {
			dbias[k] = float32(r.accB[k])
		}
	}
}

func compileRowNorm(p *Plan, nd *node, r *rowNorm, nParams int) error {
	x, scale, bias, err := floatIn3(nd)
	if err != nil {
		return err
	}
	if scale.n != nParams || (bias != nil && bias.n != nParams) {
		return fmt.Errorf("scale %v / bias must hold %d elements", scale.shape, nParams)
	}
	eps, _ := nd.g.Float("epsilon")
	if nd.g.Attr("epsilon") == nil {
		eps = 1e-5
	}
	r.eps = float64(eps)
	r.mean, r.inv = make([]float32, r.rows), make([]float32, r.rows)
	nd.norm = r
	r.accS, r.accB = make([]float64, nParams), make([]float64, nParams)
	y := nd.out[0]
	nd.saveIn[0], nd.saveIn[1] = true, true
	grain := grainFor(r.L)
	fwd := func(lo, hi int) {
		var b []float32
		if bias != nil {
			b = bias.data
		}
		r.forward(x.data, scale.data, b, y.data, lo, hi)
	}
	bwd := func(lo, hi int) { r.backwardX(x.data, scale.data, y.grad, nd.dIn[0], lo, hi) }
	nd.fwd = func() {
		parFor(r.rows, grain, fwd)
		// LayerNormalization's optional Mean and InvStdDev outputs.
		if len(nd.out) > 1 && nd.out[1] != nil {
			copy(nd.out[1].data, r.mean)
		}
		if len(nd.out) > 2 && nd.out[2] != nil {
			copy(nd.out[2].data, r.inv)
		}
	}
	nd.bwd = func() {
		var db []float32
		if len(nd.dIn) > 2 {
			db = nd.dIn[2]
		}
		if nd.dIn[0] != nil {
			parFor(r.rows, grain, bwd)
		}
		r.backwardParams(x.data, y.grad, nd.dIn[1], db)
	}
	return nil
}

func buildLayerNorm(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	if err := onlyOutput(p, nd); err != nil {
		return err
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
	r := &rowNorm{rows: numel(x.shape[:a]), L: L, mode: normLast}
	return compileRowNorm(p, nd, r, L)
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
	r := &rowNorm{rows: x.shape[0] * C, L: S, mode: normChan, G: C, CpG: 1, S: S}
	return compileRowNorm(p, nd, r, C)
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
	r := &rowNorm{rows: x.shape[0] * int(G), L: C / int(G) * S, G: int(G), CpG: C / int(G), S: S}
	nParams := C
	r.mode = normChan
	if s := nd.in[1]; s != nil && s.n == int(G) && int(G) != C {
		r.mode, nParams = normGroup, int(G) // opset-18 per-group scale and bias
	}
	return compileRowNorm(p, nd, r, nParams)
}
