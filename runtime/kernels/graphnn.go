package kernels

import "math"

// The graph's own forms of BatchNormalization, LRN, the global poolings
// and ConvTranspose's bias, as the runtime compiled them inline before its
// nodes ran on device operations (runtime.NNOps): their arithmetic and
// summation orders are the runtime's goldens', so they stay apart from
// this package's other normalization and pooling kernels. Like
// NormalizeRows, each works on a range [lo, hi) of independent items
// (channels, samples, rows), which the caller splits over its workers.

// BatchNormShape is a compiled BatchNormalization: N samples of C
// channels of S spatial elements; Training selects batch statistics
// (training_mode, or opset < 14 with running-statistics outputs) over the
// running ones.
type BatchNormShape struct {
	N, C, S           int
	Epsilon, Momentum float32
	Training          bool
}

// BatchNorm computes y = (x − μ_c)·σ_c⁻¹·scale_c + bias_c per channel c,
// with the batch's statistics (two-pass, float64) when s.Training, else
// runMean and runVar; it stores μ_c and σ_c⁻¹ in mean and invStd, and,
// training, the updated running statistics in newMean and newVar when
// they are not nil, for channels [lo, hi).
func BatchNorm(s *BatchNormShape, x, scale, bias, runMean, runVar, y, mean, invStd, newMean, newVar []float32, lo, hi int) {
	N, C, S := s.N, s.C, s.S
	M := float64(N * S)
	eps, mom := s.Epsilon, s.Momentum
	for c := lo; c < hi; c++ {
		if s.Training {
			var sum, ss float64
			for n := 0; n < N; n++ {
				for _, v := range x[(n*C+c)*S : (n*C+c+1)*S] {
					sum += float64(v)
				}
			}
			m := sum / M
			for n := 0; n < N; n++ {
				for _, v := range x[(n*C+c)*S : (n*C+c+1)*S] {
					d := float64(v) - m
					ss += d * d
				}
			}
			vr := ss / M
			mean[c], invStd[c] = float32(m), float32(1/math.Sqrt(vr+float64(eps)))
			if newMean != nil {
				newMean[c] = runMean[c]*mom + float32(m)*(1-mom)
			}
			if newVar != nil {
				newVar[c] = runVar[c]*mom + float32(vr)*(1-mom)
			}
		} else {
			mean[c], invStd[c] = runMean[c], float32(1/math.Sqrt(float64(runVar[c])+float64(eps)))
		}
		a := invStd[c] * scale[c]
		b := bias[c] - mean[c]*a
		for n := 0; n < N; n++ {
			o := (n*C + c) * S
			for j, v := range x[o : o+S] {
				y[o+j] = v*a + b
			}
		}
	}
}

// BatchNormBackward computes, from BatchNorm's mean and invStd, the
// gradients dx (training: through the batch statistics), dscale_c =
// Σ dy·x̂ and dbias_c = Σ dy, each summed in float64, for channels [lo,
// hi); a nil gradient is skipped.
func BatchNormBackward(s *BatchNormShape, x, scale, mean, invStd, dy, dx, dscale, dbias []float32, lo, hi int) {
	N, C, S := s.N, s.C, s.S
	M := float64(N * S)
	for c := lo; c < hi; c++ {
		var s1, s2 float64
		m, iv := mean[c], invStd[c]
		for n := 0; n < N; n++ {
			o := (n*C + c) * S
			for j, g := range dy[o : o+S] {
				s1 += float64(g)
				s2 += float64(g * (x[o+j] - m) * iv)
			}
		}
		if dscale != nil {
			dscale[c] = float32(s2)
		}
		if dbias != nil {
			dbias[c] = float32(s1)
		}
		if dx == nil {
			continue
		}
		sc := scale[c]
		if s.Training {
			k := float32(1/M) * iv * sc
			for n := 0; n < N; n++ {
				o := (n*C + c) * S
				for j, g := range dy[o : o+S] {
					xh := (x[o+j] - m) * iv
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

// LRNShape is a compiled LRN: N samples of C channels of Inner elements,
// the window of Size channels, and α, β and the bias k.
type LRNShape struct {
	N, C, Inner, Size int
	Alpha, Beta, Bias float64
}

// lrnScales writes s_c = k + α/size·Σ_{c′ ∈ W(c)} x_{c′}² for every
// element of sample xd into s.
func lrnScales(sh *LRNShape, xd, s []float32) {
	C, inner := sh.C, sh.Inner
	lo, hi := (sh.Size-1)/2, sh.Size/2
	scale := sh.Alpha / float64(sh.Size)
	for k := 0; k < inner; k++ {
		for c := 0; c < C; c++ {
			var sum float64
			for q := max(0, c-lo); q <= min(C-1, c+hi); q++ {
				v := float64(xd[q*inner+k])
				sum += v * v
			}
			s[c*inner+k] = float32(sh.Bias + scale*sum)
		}
	}
}

// LRN computes y_c = x_c·s_c^(−β) (ONNX LRN across channels) for
// samples [lo, hi); ws is scratch of N·C·Inner elements.
func LRN(sh *LRNShape, x, y, ws []float32, lo, hi int) {
	per := sh.C * sh.Inner
	for i := lo; i < hi; i++ {
		s := ws[i*per : (i+1)*per]
		lrnScales(sh, x[i*per:(i+1)*per], s)
		xd, yd := x[i*per:(i+1)*per], y[i*per:(i+1)*per]
		for j, v := range xd {
			yd[j] = v * float32(math.Pow(float64(s[j]), -sh.Beta))
		}
	}
}

// LRNBackward computes dx_j = dy_j·s_j^(−β) − 2αβ/size · x_j ·
// Σ_{c: j ∈ W(c)} dy_c·x_c·s_c^(−β−1) for samples [lo0, hi0); ws is
// scratch of N·C·Inner elements.
func LRNBackward(sh *LRNShape, x, dy, dx, ws []float32, lo0, hi0 int) {
	C, inner := sh.C, sh.Inner
	per := C * inner
	lo, hi := (sh.Size-1)/2, sh.Size/2
	scale, beta := sh.Alpha/float64(sh.Size), sh.Beta
	for i := lo0; i < hi0; i++ {
		s := ws[i*per : (i+1)*per]
		lrnScales(sh, x[i*per:(i+1)*per], s)
		xd, g, d := x[i*per:(i+1)*per], dy[i*per:(i+1)*per], dx[i*per:(i+1)*per]
		// s_c is read once per element: overwrite it with
		// t_c = dy_c·x_c·s_c^(−β−1) for the window sums.
		for j := range xd {
			sj := float64(s[j])
			pw := math.Pow(sj, -beta)
			d[j] = g[j] * float32(pw)
			s[j] = g[j] * xd[j] * float32(pw/sj)
		}
		for k := 0; k < inner; k++ {
			for j := 0; j < C; j++ {
				// c with j ∈ W(c): c ∈ [j−hi, j+lo].
				var acc float64
				for c := max(0, j-hi); c <= min(C-1, j+lo); c++ {
					acc += float64(s[c*inner+k])
				}
				d[j*inner+k] -= float32(2 * scale * beta * float64(xd[j*inner+k]) * acc)
			}
		}
	}
}

// GlobalAveragePoolRows averages each of the planes rows of L elements of
// x into y: a float32 running sum times 1/L (the graph's
// GlobalAveragePool; GlobalAveragePool sums in float64), rows [lo, hi).
func GlobalAveragePoolRows(L int, x, y []float32, lo, hi int) {
	inv := 1 / float32(L)
	for i := lo; i < hi; i++ {
		var s float32
		for _, v := range x[i*L : (i+1)*L] {
			s += v
		}
		y[i] = s * inv
	}
}

// GlobalAveragePoolRowsBackward spreads dy·(1/L) over rows [lo, hi) of
// dx.
func GlobalAveragePoolRowsBackward(L int, dy, dx []float32, lo, hi int) {
	inv := 1 / float32(L)
	for i := lo; i < hi; i++ {
		g := dy[i] * inv
		row := dx[i*L : (i+1)*L]
		for j := range row {
			row[j] = g
		}
	}
}

// GlobalMaxPool writes the maximum of rows [lo, hi) (of L elements) of x
// to y (the first maximum; the last NaN wins) and its position in the row
// to argmax.
func GlobalMaxPool(L int, x, y []float32, argmax []int32, lo, hi int) {
	for i := lo; i < hi; i++ {
		row := x[i*L : (i+1)*L]
		bi := 0
		for j, v := range row {
			if v > row[bi] || v != v {
				bi = j
			}
		}
		y[i], argmax[i] = row[bi], int32(bi)
	}
}

// GlobalMaxPoolBackward routes dy to the winners argmax: each of rows
// [lo, hi) of dx is zero but at its winner.
func GlobalMaxPoolBackward(L int, dy []float32, argmax []int32, dx []float32, lo, hi int) {
	for i := lo; i < hi; i++ {
		row := dx[i*L : (i+1)*L]
		clear(row)
		row[argmax[i]] = dy[i]
	}
}

// AddChannelBias adds bias[c] to every element of channel c of y (n
// samples of len(bias) channels of plane elements): ConvTranspose's bias.
func AddChannelBias(y, bias []float32, n, plane int) {
	C := len(bias)
	for i := 0; i < n; i++ {
		for c := 0; c < C; c++ {
			row := y[(i*C+c)*plane : (i*C+c+1)*plane]
			bc := bias[c]
			for k := range row {
				row[k] += bc
			}
		}
	}
}

// ChannelBiasGrad overwrites db[c] with the sum of channel c of dy over
// the n samples: each sample's plane summed in float32, the samples in
// float64.
func ChannelBiasGrad(dy []float32, n, plane int, db []float32) {
	C := len(db)
	for c := 0; c < C; c++ {
		var acc float64
		for i := 0; i < n; i++ {
			var part float32
			for _, v := range dy[(i*C+c)*plane : (i*C+c+1)*plane] {
				part += v
			}
			acc += float64(part)
		}
		db[c] = float32(acc)
	}
}

// RowNormMode says which scale and bias element an element of a
// normalized row uses (RowNorm.Param).
type RowNormMode int

// The parameter layouts of RowNorm.
const (
	// NormLast: element j of a row (LayerNormalization over the last
	// axes).
	NormLast RowNormMode = iota
	// NormChannel: the element's channel (InstanceNormalization, and
	// GroupNormalization with per-channel scale and bias).
	NormChannel
	// NormGroup: the row's group (opset-18 GroupNormalization with
	// per-group scale and bias).
	NormGroup
)

// RowNorm is a compiled row normalization with an affine transform
// (LayerNormalization, InstanceNormalization, GroupNormalization): Rows
// rows of L contiguous elements, each normalized with its own statistics
// (two-pass, float64; Eps added to the variance), then scaled and shifted
// by the parameter element Param gives.
type RowNorm struct {
	Rows, L int
	Eps     float64
	Mode    RowNormMode
	G, CpG  int // groups (rows per sample), channels per group
	S       int // spatial size
}

// Param returns the scale and bias element that element j of row row
// uses.
func (r *RowNorm) Param(row, j int) int {
	switch r.Mode {
	case NormChannel:
		return (row%r.G)*r.CpG + j/r.S
	case NormGroup:
		return row % r.G
	}
	return j
}

// segments returns how row's elements map to parameter elements as runs
// of equal index: the run starting at element off uses parameter k0 +
// (off/run)·step. NormLast has runs of one element (k = j), NormChannel one
// run per channel of S elements, NormGroup one run over the row.
func (r *RowNorm) segments(row int) (k0, step, run int) {
	switch r.Mode {
	case NormChannel:
		return (row % r.G) * r.CpG, 1, r.S
	case NormGroup:
		return row % r.G, 0, r.L
	}
	return 0, 1, 1
}

// rowMeanVar returns the mean and the population variance of xr, both
// two-pass in float64, each pass's sum in sixteen chains (sums16.go): a
// single running sum is bound by the add's latency, not by the row's
// memory, which is in cache.
func rowMeanVar(xr []float32) (mean, variance float64) {
	var c [16]float64
	sum16(xr, &c)
	m := tree16(&c) / float64(len(xr))
	c = [16]float64{}
	sqdev16(xr, m, &c)
	return m, tree16(&c) / float64(len(xr))
}

// RowNormForward normalizes rows [lo, hi) of x into y (bias may be nil)
// and stores each row's mean and 1/σ in mean and inv.
func RowNormForward(r *RowNorm, x, scale, bias, y, mean, inv []float32, lo, hi int) {
	for row := lo; row < hi; row++ {
		xr, yr := x[row*r.L:(row+1)*r.L], y[row*r.L:(row+1)*r.L]
		m, variance := rowMeanVar(xr)
		iv := 1 / math.Sqrt(variance+r.Eps)
		mean[row], inv[row] = float32(m), float32(iv)
		mf, ivf := float32(m), float32(iv)
		if r.Mode == NormLast {
			rowApplyVec(xr, scale[:len(xr)], bias, yr, mf, ivf)
			continue
		}
		k0, step, run := r.segments(row)
		for off, k := 0, k0; off < len(xr); off, k = off+run, k+step {
			var b float32
			if bias != nil {
				b = bias[k]
			}
			rowApply(xr[off:off+run], yr[off:off+run], mf, ivf, scale[k], b, bias != nil)
		}
	}
}

// rowApply writes ((x − m)·iv)·sc (+ b where hasBias) to y: the bulk
// four lanes at a time (normScaleSSE, normAffineSSE, the same float32
// operations in the same order), the tail here.
func rowApply(x, y []float32, m, iv, sc, b float32, hasBias bool) {
	y = y[:len(x)]
	j := 0
	if haveSIMD && len(x) >= 4 {
		j = len(x) &^ 3
		if hasBias {
			normAffineSSE(x, y, m, iv, sc, b)
		} else {
			normScaleSSE(x, y, m, iv, sc)
		}
	}
	if hasBias {
		for ; j < len(x); j++ {
			// The conversion keeps the compiler from fusing the last
			// product and the sum (as on arm64), which the lanes do not.
			y[j] = float32((x[j]-m)*iv*sc) + b
		}
		return
	}
	for ; j < len(x); j++ {
		y[j] = (x[j] - m) * iv * sc
	}
}

// rowApplyVec is rowApply with a scale (and bias, nil for none) per
// element: LayerNorm's rows.
func rowApplyVec(x, scale, bias, y []float32, m, iv float32) {
	y = y[:len(x)]
	j := 0
	if haveSIMD && len(x) >= 4 {
		j = len(x) &^ 3
		if bias != nil {
			normAffineVecSSE(x, scale, bias[:len(x)], y, m, iv)
		} else {
			normScaleVecSSE(x, scale, y, m, iv)
		}
	}
	if bias != nil {
		for ; j < len(x); j++ {
			y[j] = float32((x[j]-m)*iv*scale[j]) + bias[j] // not fused (rowApply)
		}
		return
	}
	for ; j < len(x); j++ {
		y[j] = (x[j] - m) * iv * scale[j]
	}
}

// RowNormBackward computes dx for rows [lo, hi) from RowNormForward's mean
// and inv. Where the parameters run per channel or group (NormChannel,
// NormGroup: Runs > 0) it also keeps what RowNormParamGrads would read x
// and dy again for: each run's Σ g·x̂ and Σ g (paramSums16's, combined by
// tree16) go to parts[2·(row·Runs+i)] and the next element, and the row's
// sums are formed from them, Σ g·γ = Σ_runs γ_k·Σ g and Σ g·γ·x̂ =
// Σ_runs γ_k·Σ g·x̂ (a run shares one γ). RowNormParamGradsFromParts then
// sums the parameter gradients from parts alone, bit for bit
// RowNormParamGrads' (the same per-run sums in the same row order): the
// backward of a GroupNorm reads its input and gradient twice instead of
// three times. parts may be nil for NormLast.
func RowNormBackward(r *RowNorm, x, scale, mean, inv, dy, dx []float32, parts []float64, lo, hi int) {
	runs := r.Runs()
	for row := lo; row < hi; row++ {
		xr, gr := x[row*r.L:(row+1)*r.L], dy[row*r.L:(row+1)*r.L]
		dr := dx[row*r.L : (row+1)*r.L]
		m, iv := mean[row], inv[row]
		if r.Mode == NormLast {
			// Σ g·γ and Σ g·γ·x̂ in sixteen chains (sums16.go), γ an
			// element's own.
			var sg, sgx [16]float64
			gradSumsVec16(gr, xr, scale, m, iv, &sg, &sgx)
			mg, mgx := float32(tree16(&sg)/float64(r.L)), float32(tree16(&sgx)/float64(r.L))
			rowBack(xr, gr, scale, dr, m, iv, 0, mg, mgx)
			continue
		}
		k0, step, run := r.segments(row)
		pr := parts[2*row*runs : 2*(row+1)*runs]
		var sg, sgx float64
		for i, off, k := 0, 0, k0; off < len(gr); i, off, k = i+1, off+run, k+step {
			var s, b [16]float64
			paramSums16(gr[off:off+run], xr[off:off+run], m, iv, &s, &b)
			ps, pb := tree16(&s), tree16(&b)
			pr[2*i], pr[2*i+1] = ps, pb
			sg += float64(scale[k]) * pb
			sgx += float64(scale[k]) * ps
		}
		mg, mgx := float32(sg/float64(r.L)), float32(sgx/float64(r.L))
		for off, k := 0, k0; off < len(gr); off, k = off+run, k+step {
			rowBack(xr[off:off+run], gr[off:off+run], nil, dr[off:off+run], m, iv, scale[k], mg, mgx)
		}
	}
}

// Runs returns the runs of equal parameter index a row has where the
// parameter is the channel's or the group's (segments), 0 for NormLast.
func (r *RowNorm) Runs() int {
	switch r.Mode {
	case NormChannel:
		return r.CpG
	case NormGroup:
		return 1
	}
	return 0
}

// RowNormParamGradsFromParts is RowNormParamGrads from the per-run sums
// RowNormBackward kept.
func RowNormParamGradsFromParts(r *RowNorm, parts []float64, dscale, dbias []float32, accS, accB []float64) {
	if dscale == nil && dbias == nil {
		return
	}
	clear(accS)
	clear(accB)
	runs := r.Runs()
	for row := 0; row < r.Rows; row++ {
		k0, step, _ := r.segments(row)
		pr := parts[2*row*runs : 2*(row+1)*runs]
		for i, k := 0, k0; i < runs; i, k = i+1, k+step {
			accS[k] += pr[2*i]
			accB[k] += pr[2*i+1]
		}
	}
	storeParamGrads(dscale, dbias, accS, accB)
}

// rowBack writes dx = iv·((g·γ − mg) − ((x − m)·iv)·mgx), γ the scale
// sc, or scale's element where scale is not nil: the bulk four lanes at a
// time (normBackSSE, normBackVecSSE, the same float32 operations in the
// same order), the tail here.
func rowBack(x, g, scale, dx []float32, m, iv, sc, mg, mgx float32) {
	g, dx = g[:len(x)], dx[:len(x)]
	j := 0
	if haveSIMD && len(x) >= 4 {
		j = len(x) &^ 3
		if scale != nil {
			normBackVecSSE(x, g, scale[:len(x)], dx, m, iv, mg, mgx)
		} else {
			normBackSSE(x, g, dx, m, iv, sc, mg, mgx)
		}
	}
	for ; j < len(x); j++ {
		xh := (x[j] - m) * iv
		gs := sc
		if scale != nil {
			gs = scale[j]
		}
		dx[j] = iv * (float32(g[j]*gs) - mg - float32(xh*mgx)) // not fused (rowApply)
	}
}

// RowNormParamGrads computes the scale and bias gradients (either may be
// nil), summed over all rows in float64 in accS and accB (scratch of the
// parameters' size).
func RowNormParamGrads(r *RowNorm, x, mean, inv, dy, dscale, dbias []float32, accS, accB []float64) {
	if dscale == nil && dbias == nil {
		return
	}
	clear(accS)
	clear(accB)
	for row := 0; row < r.Rows; row++ {
		xr, gr := x[row*r.L:(row+1)*r.L], dy[row*r.L:(row+1)*r.L]
		m, iv := mean[row], inv[row]
		if r.Mode == NormLast {
			for j, g := range gr {
				accS[j] += float64(g * (xr[j] - m) * iv)
				accB[j] += float64(g)
			}
			continue
		}
		// A run of equal parameter index sums into its own chains
		// first (sixteen each, sums16.go), not through memory.
		k0, step, run := r.segments(row)
		for off, k := 0, k0; off < len(gr); off, k = off+run, k+step {
			var s, b [16]float64
			paramSums16(gr[off:off+run], xr[off:off+run], m, iv, &s, &b)
			accS[k] += tree16(&s)
			accB[k] += tree16(&b)
		}
	}
	storeParamGrads(dscale, dbias, accS, accB)
}

// storeParamGrads rounds the float64 sums accS and accB into dscale and
// dbias (either may be nil).
func storeParamGrads(dscale, dbias []float32, accS, accB []float64) {
	for k := range dscale {
		dscale[k] = float32(accS[k])
	}
	for k := range dbias {
		dbias[k] = float32(accB[k])
	}
}
