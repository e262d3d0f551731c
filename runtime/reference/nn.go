package reference

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

var _ runtime.NNOps = Device{}

// window is the geometry of a convolution or pooling window over the
// spatial axes: input, kernel and output sizes, strides, dilations and the
// begin and end pads (ONNX's attributes).
type window struct {
	in, k, out, s, d, pb, pe []int
}

func newWindow(in, kernel, out, strides, dilations, pads []int) window {
	r := len(in)
	w := window{in: in, k: kernel, out: out, s: make([]int, r), d: make([]int, r), pb: make([]int, r), pe: make([]int, r)}
	for a := 0; a < r; a++ {
		w.s[a], w.d[a] = 1, 1
		if strides != nil {
			w.s[a] = strides[a]
		}
		if dilations != nil {
			w.d[a] = dilations[a]
		}
		if pads != nil {
			w.pb[a], w.pe[a] = pads[a], pads[r+a]
		}
	}
	return w
}

// tap returns the flat index in the input plane of tap k of the window at
// output position o (both flat, row-major), whether it lies in the input,
// and whether it lies in the padded input [−pb, in+pe).
func (w window) tap(o, k int) (idx int, inside, padded bool) {
	inside, padded = true, true
	st := 1
	for a := len(w.in) - 1; a >= 0; a-- {
		oa, ka := o%w.out[a], k%w.k[a]
		o, k = o/w.out[a], k/w.k[a]
		i := oa*w.s[a] - w.pb[a] + ka*w.d[a]
		if i < 0 || i >= w.in[a] {
			inside = false
		}
		if i < -w.pb[a] || i >= w.in[a]+w.pe[a] {
			padded = false
		}
		idx += i * st
		st *= w.in[a]
	}
	if !inside {
		idx = -1
	}
	return idx, inside, padded
}

func convWindow(s *runtime.ConvShape) window {
	return newWindow(s.In, s.Kernel, s.Out, s.Strides, s.Dilations, s.Pads)
}

func poolWindow(s *runtime.PoolShape) window {
	return newWindow(s.In, s.Kernel, s.Out, s.Strides, s.Dilations, s.Pads)
}

// convProducts calls fn(n, m, o, c, kw, xi) for every product of the
// convolution s: sample n, output channel m at output position o, input
// channel c at input position xi (flat in the plane), read through weight
// element kw (flat in w).
func convProducts(s *runtime.ConvShape, fn func(n, m, o, c, kw, xi int)) {
	w := convWindow(s)
	G := max(s.Group, 1)
	Cg, Mg := s.C/G, s.M/G
	T, K := numel(s.Out), numel(s.Kernel)
	for n := 0; n < s.N; n++ {
		for m := 0; m < s.M; m++ {
			g := m / Mg
			for o := 0; o < T; o++ {
				for cg := 0; cg < Cg; cg++ {
					for k := 0; k < K; k++ {
						xi, inside, _ := w.tap(o, k)
						if inside {
							fn(n, m, o, g*Cg+cg, (m*Cg+cg)*K+k, xi)
						}
					}
				}
			}
		}
	}
}

func round(dst []float32, acc []float64) {
	for i, v := range acc {
		dst[i] = float32(v)
	}
}

// ConvScratchSize implements runtime.NNOps: the reference allocates its
// own.
func (Device) ConvScratchSize(*runtime.ConvShape) int { return 0 }

// Conv implements runtime.NNOps from ONNX Conv's definition: y[n,m,o] =
// bias[m] + Σ over the window's taps inside the input and the group's
// input channels of w·x, in float64.
func (Device) Conv(s *runtime.ConvShape, x, w, bias, y, _ []float32) {
	T, In := numel(s.Out), numel(s.In)
	acc := make([]float64, s.N*s.M*T)
	if bias != nil {
		for i := range acc {
			acc[i] = float64(bias[i/T%s.M])
		}
	}
	convProducts(s, func(n, m, o, c, kw, xi int) {
		acc[(n*s.M+m)*T+o] += float64(w[kw]) * float64(x[(n*s.C+c)*In+xi])
	})
	round(y, acc)
}

// ConvBackward implements runtime.NNOps: each gradient is the float64 sum
// of its products over the taps.
func (Device) ConvBackward(s *runtime.ConvShape, x, w, dy, dx, dw, db, _ []float32) {
	T, In := numel(s.Out), numel(s.In)
	var adx, adw []float64
	if dx != nil {
		adx = make([]float64, s.N*s.C*In)
	}
	if dw != nil {
		adw = make([]float64, s.M*(s.C/max(s.Group, 1))*numel(s.Kernel))
	}
	convProducts(s, func(n, m, o, c, kw, xi int) {
		g := float64(dy[(n*s.M+m)*T+o])
		if adx != nil {
			adx[(n*s.C+c)*In+xi] += g * float64(w[kw])
		}
		if adw != nil {
			adw[kw] += g * float64(x[(n*s.C+c)*In+xi])
		}
	})
	if dx != nil {
		round(dx, adx)
	}
	if dw != nil {
		round(dw, adw)
	}
	if db != nil {
		round(db, channelSums(dy, s.N, s.M, T))
	}
}

// channelSums returns the sum over samples and positions of each of the
// C channels of x (N×C×P).
func channelSums(x []float32, N, C, P int) []float64 {
	acc := make([]float64, C)
	for n := 0; n < N; n++ {
		for c := 0; c < C; c++ {
			for _, v := range x[(n*C+c)*P : (n*C+c+1)*P] {
				acc[c] += float64(v)
			}
		}
	}
	return acc
}

// ConvTranspose implements runtime.NNOps from ONNX ConvTranspose's
// definition, the adjoint of the convolution s: every input element x[n,m,o]
// scatters x·w into the outputs y[n,c,i] its taps reach, plus bias[c].
func (Device) ConvTranspose(s *runtime.ConvShape, x, w, bias, y, _ []float32) {
	T, In := numel(s.Out), numel(s.In)
	acc := make([]float64, s.N*s.C*In)
	if bias != nil {
		for i := range acc {
			acc[i] = float64(bias[i/In%s.C])
		}
	}
	convProducts(s, func(n, m, o, c, kw, xi int) {
		acc[(n*s.C+c)*In+xi] += float64(x[(n*s.M+m)*T+o]) * float64(w[kw])
	})
	round(y, acc)
}

// ConvTransposeBackward implements runtime.NNOps: dx[n,m,o] = Σ w·dy over
// the taps (the convolution s of dy), dw = Σ x·dy, db = Σ dy per channel.
func (Device) ConvTransposeBackward(s *runtime.ConvShape, x, w, dy, dx, dw, db, _ []float32) {
	T, In := numel(s.Out), numel(s.In)
	var adx, adw []float64
	if dx != nil {
		adx = make([]float64, s.N*s.M*T)
	}
	if dw != nil {
		adw = make([]float64, s.M*(s.C/max(s.Group, 1))*numel(s.Kernel))
	}
	convProducts(s, func(n, m, o, c, kw, xi int) {
		g := float64(dy[(n*s.C+c)*In+xi])
		if adx != nil {
			adx[(n*s.M+m)*T+o] += g * float64(w[kw])
		}
		if adw != nil {
			adw[kw] += g * float64(x[(n*s.M+m)*T+o])
		}
	})
	if dx != nil {
		round(dx, adx)
	}
	if dw != nil {
		round(dw, adw)
	}
	if db != nil {
		round(db, channelSums(dy, s.N, s.C, In))
	}
}

// maxWinner returns the index in the plane xp of the winner of the window
// at output position o: the first maximum, or the first NaN; −1 for a
// window with no input element.
func maxWinner(w window, xp []float32, o int) int {
	best := -1
	for k := 0; k < numel(w.k); k++ {
		i, inside, _ := w.tap(o, k)
		if !inside {
			continue
		}
		v := xp[i]
		if best < 0 || v > xp[best] || (v != v && xp[best] == xp[best]) {
			best = i
		}
	}
	return best
}

// MaxPool implements runtime.NNOps from ONNX MaxPool's definition, the
// maximum over the window's taps inside the input (−Inf and index −1 for
// a window with none).
func (Device) MaxPool(s *runtime.PoolShape, x, y []float32, argmax []int32) {
	w := poolWindow(s)
	T, In := numel(s.Out), numel(s.In)
	for pl := 0; pl < s.N*s.C; pl++ {
		xp := x[pl*In : (pl+1)*In]
		for o := 0; o < T; o++ {
			b := maxWinner(w, xp, o)
			v := float32(math.Inf(-1))
			if b >= 0 {
				v = xp[b]
			}
			y[pl*T+o] = v
			if argmax != nil {
				argmax[pl*T+o] = int32(b)
			}
		}
	}
}

// MaxPoolBackward implements runtime.NNOps.
func (Device) MaxPoolBackward(s *runtime.PoolShape, dy []float32, argmax []int32, dx []float32) {
	T, In := numel(s.Out), numel(s.In)
	acc := make([]float64, s.N*s.C*In)
	for pl := 0; pl < s.N*s.C; pl++ {
		for o := 0; o < T; o++ {
			if i := argmax[pl*T+o]; i >= 0 {
				acc[pl*In+int(i)] += float64(dy[pl*T+o])
			}
		}
	}
	round(dx, acc)
}

// MaxPoolBackwardFromOutput implements runtime.NNOps: the winners found
// again from x.
func (d Device) MaxPoolBackwardFromOutput(s *runtime.PoolShape, x, _, dy, dx []float32) {
	w := poolWindow(s)
	T, In := numel(s.Out), numel(s.In)
	arg := make([]int32, s.N*s.C*T)
	for pl := 0; pl < s.N*s.C; pl++ {
		for o := 0; o < T; o++ {
			arg[pl*T+o] = int32(maxWinner(w, x[pl*In:(pl+1)*In], o))
		}
	}
	d.MaxPoolBackward(s, dy, arg, dx)
}

// avgTaps returns the input taps of the window at o and its divisor: the
// taps inside the input, or with count_include_pad those inside the
// padded input.
func avgTaps(w window, o int, includePad bool) (taps []int, div int) {
	for k := 0; k < numel(w.k); k++ {
		i, inside, padded := w.tap(o, k)
		if inside {
			taps = append(taps, i)
		}
		if inside || (includePad && padded) {
			div++
		}
	}
	return taps, div
}

// AveragePool implements runtime.NNOps from ONNX AveragePool's
// definition (0 for a window with no element).
func (Device) AveragePool(s *runtime.PoolShape, x, y []float32) {
	w := poolWindow(s)
	T, In := numel(s.Out), numel(s.In)
	for pl := 0; pl < s.N*s.C; pl++ {
		for o := 0; o < T; o++ {
			taps, div := avgTaps(w, o, s.CountIncludePad)
			var sum float64
			for _, i := range taps {
				sum += float64(x[pl*In+i])
			}
			if div > 0 {
				sum /= float64(div)
			}
			y[pl*T+o] = float32(sum)
		}
	}
}

// AveragePoolBackward implements runtime.NNOps.
func (Device) AveragePoolBackward(s *runtime.PoolShape, dy, dx []float32) {
	w := poolWindow(s)
	T, In := numel(s.Out), numel(s.In)
	acc := make([]float64, s.N*s.C*In)
	for pl := 0; pl < s.N*s.C; pl++ {
		for o := 0; o < T; o++ {
			taps, div := avgTaps(w, o, s.CountIncludePad)
			for _, i := range taps {
				acc[pl*In+i] += float64(dy[pl*T+o]) / float64(div)
			}
		}
	}
	round(dx, acc)
}

// GlobalAveragePool implements runtime.NNOps: float64 means.
func (Device) GlobalAveragePool(planes, spatial int, x, y []float32) {
	for pl := 0; pl < planes; pl++ {
		var sum float64
		for _, v := range x[pl*spatial : (pl+1)*spatial] {
			sum += float64(v)
		}
		y[pl] = float32(sum / float64(spatial))
	}
}

// GlobalAveragePoolBackward implements runtime.NNOps.
func (Device) GlobalAveragePoolBackward(planes, spatial int, dy, dx []float32) {
	for pl := 0; pl < planes; pl++ {
		g := float32(float64(dy[pl]) / float64(spatial))
		for i := pl * spatial; i < (pl+1)*spatial; i++ {
			dx[i] = g
		}
	}
}

// GlobalMaxPool implements runtime.NNOps: the first maximum of each
// plane, or its last NaN.
func (Device) GlobalMaxPool(planes, spatial int, x, y []float32, argmax []int32) {
	for pl := 0; pl < planes; pl++ {
		row := x[pl*spatial : (pl+1)*spatial]
		b := 0
		for j, v := range row {
			if v != v || v > row[b] {
				b = j
			}
		}
		y[pl], argmax[pl] = row[b], int32(b)
	}
}

// GlobalMaxPoolBackward implements runtime.NNOps.
func (Device) GlobalMaxPoolBackward(planes, spatial int, dy []float32, argmax []int32, dx []float32) {
	for pl := 0; pl < planes; pl++ {
		for j := 0; j < spatial; j++ {
			dx[pl*spatial+j] = 0
		}
		dx[pl*spatial+int(argmax[pl])] = dy[pl]
	}
}

// BatchNorm implements runtime.NNOps from ONNX BatchNormalization's
// definition, statistics and output in float64.
func (Device) BatchNorm(s *runtime.BatchNormShape, x, scale, bias, runMean, runVar, y, mean, invStd, newMean, newVar []float32) {
	N, C, S := s.N, s.C, s.S
	M := float64(N * S)
	for c := 0; c < C; c++ {
		var m, v float64
		if s.Training {
			for n := 0; n < N; n++ {
				for _, e := range x[(n*C+c)*S : (n*C+c+1)*S] {
					m += float64(e)
				}
			}
			m /= M
			for n := 0; n < N; n++ {
				for _, e := range x[(n*C+c)*S : (n*C+c+1)*S] {
					v += (float64(e) - m) * (float64(e) - m)
				}
			}
			v /= M
			mom := float64(s.Momentum)
			if newMean != nil {
				newMean[c] = float32(float64(runMean[c])*mom + m*(1-mom))
			}
			if newVar != nil {
				newVar[c] = float32(float64(runVar[c])*mom + v*(1-mom))
			}
		} else {
			m, v = float64(runMean[c]), float64(runVar[c])
		}
		iv := 1 / math.Sqrt(v+float64(s.Epsilon))
		mean[c], invStd[c] = float32(m), float32(iv)
		for n := 0; n < N; n++ {
			for i := (n*C + c) * S; i < (n*C+c+1)*S; i++ {
				y[i] = float32((float64(x[i])-m)*iv*float64(scale[c]) + float64(bias[c]))
			}
		}
	}
}

// BatchNormBackward implements runtime.NNOps: with x̂ = (x − μ)·σ⁻¹,
// dscale = Σ dy·x̂, dbias = Σ dy and, training, dx = scale·σ⁻¹·(dy −
// mean(dy) − x̂·mean(dy·x̂)), else dx = scale·σ⁻¹·dy.
func (Device) BatchNormBackward(s *runtime.BatchNormShape, x, scale, mean, invStd, dy, dx, dscale, dbias []float32) {
	N, C, S := s.N, s.C, s.S
	M := float64(N * S)
	for c := 0; c < C; c++ {
		m, iv := float64(mean[c]), float64(invStd[c])
		var sg, sgx float64
		for n := 0; n < N; n++ {
			for i := (n*C + c) * S; i < (n*C+c+1)*S; i++ {
				sg += float64(dy[i])
				sgx += float64(dy[i]) * (float64(x[i]) - m) * iv
			}
		}
		if dscale != nil {
			dscale[c] = float32(sgx)
		}
		if dbias != nil {
			dbias[c] = float32(sg)
		}
		if dx == nil {
			continue
		}
		k := float64(scale[c]) * iv
		for n := 0; n < N; n++ {
			for i := (n*C + c) * S; i < (n*C+c+1)*S; i++ {
				g := float64(dy[i])
				if s.Training {
					xh := (float64(x[i]) - m) * iv
					g = g - sg/M - xh*sgx/M
				}
				dx[i] = float32(k * g)
			}
		}
	}
}

// rowStats returns the mean and 1/√(variance + eps) of row r.
func rowStats(r []float32, eps float64) (m, iv float64) {
	for _, v := range r {
		m += float64(v)
	}
	m /= float64(len(r))
	var ss float64
	for _, v := range r {
		ss += (float64(v) - m) * (float64(v) - m)
	}
	return m, 1 / math.Sqrt(ss/float64(len(r))+eps)
}

// NormalizeRows implements runtime.NNOps.
func (Device) NormalizeRows(x, y []float32, L int, eps float32, invStd []float32) {
	for r := range invStd {
		m, iv := rowStats(x[r*L:(r+1)*L], float64(eps))
		invStd[r] = float32(iv)
		for i := r * L; i < (r+1)*L; i++ {
			y[i] = float32((float64(x[i]) - m) * iv)
		}
	}
}

// NormalizeRowsBackward implements runtime.NNOps.
func (Device) NormalizeRowsBackward(y, dy, invStd []float32, L int, dx []float32) {
	for r := range invStd {
		var mg, mgy float64
		for i := r * L; i < (r+1)*L; i++ {
			mg += float64(dy[i])
			mgy += float64(dy[i]) * float64(y[i])
		}
		mg, mgy = mg/float64(L), mgy/float64(L)
		for i := r * L; i < (r+1)*L; i++ {
			dx[i] = float32(float64(invStd[r]) * (float64(dy[i]) - mg - float64(y[i])*mgy))
		}
	}
}

// NormalizeRowsAffine implements runtime.NNOps.
func (Device) NormalizeRowsAffine(n *runtime.NormRows, x, scale, bias, y, mean, invStd []float32) {
	L := n.RowLen()
	for r := 0; r < n.Rows(); r++ {
		m, iv := rowStats(x[r*L:(r+1)*L], n.Epsilon())
		mean[r], invStd[r] = float32(m), float32(iv)
		for j := 0; j < L; j++ {
			k := n.Param(r, j)
			v := (float64(x[r*L+j]) - m) * iv * float64(scale[k])
			if bias != nil {
				v += float64(bias[k])
			}
			y[r*L+j] = float32(v)
		}
	}
}

// NormalizeRowsAffineBackward implements runtime.NNOps: with g = dy·scale
// and x̂ = (x − mean)·invStd, dx = invStd·(g − mean(g) − x̂·mean(g·x̂)) per
// row.
func (Device) NormalizeRowsAffineBackward(n *runtime.NormRows, x, scale, mean, invStd, dy, dx []float32) {
	L := n.RowLen()
	for r := 0; r < n.Rows(); r++ {
		m, iv := float64(mean[r]), float64(invStd[r])
		var sg, sgx float64
		for j := 0; j < L; j++ {
			g := float64(dy[r*L+j]) * float64(scale[n.Param(r, j)])
			sg += g
			sgx += g * (float64(x[r*L+j]) - m) * iv
		}
		sg, sgx = sg/float64(L), sgx/float64(L)
		for j := 0; j < L; j++ {
			g := float64(dy[r*L+j]) * float64(scale[n.Param(r, j)])
			xh := (float64(x[r*L+j]) - m) * iv
			dx[r*L+j] = float32(iv * (g - sg - xh*sgx))
		}
	}
}

// NormalizeRowsAffineParamGrads implements runtime.NNOps.
func (Device) NormalizeRowsAffineParamGrads(n *runtime.NormRows, x, mean, invStd, dy, dscale, dbias []float32) {
	L := n.RowLen()
	accS, accB := make([]float64, len(dscale)), make([]float64, len(dbias))
	for r := 0; r < n.Rows(); r++ {
		m, iv := float64(mean[r]), float64(invStd[r])
		for j := 0; j < L; j++ {
			k := n.Param(r, j)
			g := float64(dy[r*L+j])
			if dscale != nil {
				accS[k] += g * (float64(x[r*L+j]) - m) * iv
			}
			if dbias != nil {
				accB[k] += g
			}
		}
	}
	round(dscale, accS)
	round(dbias, accB)
}

// lrnScale returns s = bias + α/size·Σ x² over the window of channel c at
// element k of sample n.
func lrnScale(s *runtime.LRNShape, x []float32, n, c, k int) float64 {
	lo, hi := (s.Size-1)/2, s.Size/2
	var sum float64
	for q := max(0, c-lo); q <= min(s.C-1, c+hi); q++ {
		v := float64(x[(n*s.C+q)*s.Inner+k])
		sum += v * v
	}
	return s.Bias + s.Alpha/float64(s.Size)*sum
}

// LRN implements runtime.NNOps from ONNX LRN's definition.
func (Device) LRN(s *runtime.LRNShape, x, y, _ []float32) {
	for n := 0; n < s.N; n++ {
		for c := 0; c < s.C; c++ {
			for k := 0; k < s.Inner; k++ {
				i := (n*s.C+c)*s.Inner + k
				y[i] = float32(float64(x[i]) * math.Pow(lrnScale(s, x, n, c, k), -s.Beta))
			}
		}
	}
}

// LRNBackward implements runtime.NNOps: dx_j = dy_j·s_j^(−β) −
// 2αβ/size·x_j·Σ_{c: j ∈ W(c)} dy_c·x_c·s_c^(−β−1).
func (Device) LRNBackward(s *runtime.LRNShape, x, dy, dx, _ []float32) {
	lo, hi := (s.Size-1)/2, s.Size/2
	for n := 0; n < s.N; n++ {
		for k := 0; k < s.Inner; k++ {
			at := func(c int) int { return (n*s.C+c)*s.Inner + k }
			for j := 0; j < s.C; j++ {
				v := float64(dy[at(j)]) * math.Pow(lrnScale(s, x, n, j, k), -s.Beta)
				var acc float64
				for c := max(0, j-hi); c <= min(s.C-1, j+lo); c++ {
					sc := lrnScale(s, x, n, c, k)
					acc += float64(dy[at(c)]) * float64(x[at(c)]) * math.Pow(sc, -s.Beta-1)
				}
				v -= 2 * s.Alpha / float64(s.Size) * s.Beta * float64(x[at(j)]) * acc
				dx[at(j)] = float32(v)
			}
		}
	}
}

// GemmBias implements runtime.NNOps.
func (Device) GemmBias(beta float32, c []float32, cShape []int, y []float32, yShape []int) {
	for i := 0; i < numel(yShape); i++ {
		y[i] = float32(float64(beta) * float64(c[broadcastIndex(i, yShape, cShape)]))
	}
}

// GemmBiasBackward implements runtime.NNOps.
func (Device) GemmBiasBackward(beta float32, dy []float32, yShape []int, dc []float32, cShape []int) {
	acc := make([]float64, numel(cShape))
	for i := 0; i < numel(yShape); i++ {
		acc[broadcastIndex(i, yShape, cShape)] += float64(dy[i])
	}
	for i, v := range acc {
		dc[i] = float32(float64(beta) * v)
	}
}
