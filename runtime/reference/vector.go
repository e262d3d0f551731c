package reference

import "github.com/dpfinetune/dpfinetune/runtime"

// The vector operations (runtime.VectorOps). Sums of squares and dot
// products are the contract's own: float64 in the lane order (runtime.SumSqLanes),
// so that the clip factors are the CPU's bit for bit. Every other result
// is a float64 sum or product rounded once to float32.

// SumSq implements runtime.VectorOps.
func (Device) SumSq(x []float32) float64 {
	return laneOrderSum(len(x), func(k int) float64 { return float64(x[k]) * float64(x[k]) })
}

// laneOrderSum sums term(k) for k < n in float64 in the contract's lane
// order (runtime.SumSqLanes), written as the contract says it: chunk by
// chunk, lane by lane, then the lanes by halves.
func laneOrderSum(n int, term func(k int) float64) float64 {
	var s float64
	for c := 0; c < n; c += runtime.SumChunk {
		lanes := make([]float64, runtime.SumLanes)
		for l := range lanes {
			for k := c + l; k < n && k < c+runtime.SumChunk; k += runtime.SumLanes {
				lanes[l] += term(k)
			}
		}
		for w := runtime.SumLanes / 2; w >= 1; w /= 2 {
			for l := 0; l < w; l++ {
				lanes[l] += lanes[l+w]
			}
		}
		s += lanes[0]
	}
	return s
}

// SquaredNorms implements runtime.VectorOps.
func (d Device) SquaredNorms(x []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	size := len(x) / len(dst)
	for i := range dst {
		dst[i] = d.SumSq(x[i*size : (i+1)*size])
	}
}

// Dot implements runtime.VectorOps.
func (Device) Dot(a, b []float32) float64 {
	return laneOrderSum(len(a), func(k int) float64 { return float64(a[k]) * float64(b[k]) })
}

// Scale implements runtime.VectorOps.
func (Device) Scale(alpha float32, x []float32) {
	for i, v := range x {
		x[i] = float32(float64(alpha) * float64(v))
	}
}

// Add implements runtime.VectorOps.
func (Device) Add(x, y []float32) {
	for i, v := range x {
		y[i] = float32(float64(y[i]) + float64(v))
	}
}

// AddRunSums implements runtime.VectorOps: each run is summed in float64
// and the sum added to dst[m] once. (The CPU's four float32 running sums
// are its order, not a result every device must reproduce: the bias
// gradient it gives is within float32 rounding of this one.)
func (Device) AddRunSums(x, dst []float32) {
	if len(dst) == 0 {
		return
	}
	T := len(x) / len(dst)
	for m := range dst {
		var s float64
		for _, v := range x[m*T : (m+1)*T] {
			s += float64(v)
		}
		dst[m] = float32(float64(dst[m]) + float64(float32(s)))
	}
}

// ScatterAdd implements runtime.VectorOps: the additions are made in the
// order of idx, each rounded once.
func (Device) ScatterAdd(dst, src []float32, idx []int32) {
	for j, k := range idx {
		if k >= 0 {
			dst[k] = float32(float64(dst[k]) + float64(src[j]))
		}
	}
}

// AddNormSq implements runtime.VectorOps.
func (Device) AddNormSq(x, y []float64) {
	for i, v := range x {
		y[i] += v
	}
}

// SumRows implements runtime.VectorOps: each column a float64 sum,
// rounded once.
func (Device) SumRows(g []float32, T, p int, out []float32) {
	for j := 0; j < p; j++ {
		var s float64
		for t := 0; t < T; t++ {
			s += float64(g[t*p+j])
		}
		out[j] = float32(s)
	}
}

// ZeroNormSq implements runtime.VectorOps.
func (Device) ZeroNormSq(x []float64) {
	for i := range x {
		x[i] = 0
	}
}

// AddSumSq implements runtime.VectorOps: the contract's float64 sum in
// order, then one addition.
func (d Device) AddSumSq(x []float32, dst []float64) {
	dst[0] += d.SumSq(x)
}

// AddDot implements runtime.VectorOps: the contract's float64 dot
// product in the lane order, scaled, then added.
func (d Device) AddDot(alpha float64, a, b []float32, dst []float64) {
	s := d.Dot(a, b)
	dst[0] += alpha * s
}

// AddDots implements runtime.VectorOps: AddDot row by row.
func (d Device) AddDots(alpha float64, a, b []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	size := len(a) / len(dst)
	for i := range dst {
		d.AddDot(alpha, a[i*size:(i+1)*size], b[i*size:(i+1)*size], dst[i:i+1])
	}
}

// AddSumSqProduct implements runtime.VectorOps.
func (d Device) AddSumSqProduct(alpha float64, a, b []float32, dst []float64) {
	s := d.SumSq(a) * d.SumSq(b)
	dst[0] += alpha * s
}

// SumNormRows implements runtime.VectorOps: each column summed from 0
// down the rows.
func (Device) SumNormRows(x, dst []float64) {
	n := len(dst)
	for j := range dst {
		var s float64
		for k := 0; n > 0 && k < len(x)/n; k++ {
			s += x[k*n+j]
		}
		dst[j] = s
	}
}

// AddSumSqProducts implements runtime.VectorOps: AddSumSqProduct row by
// row.
func (d Device) AddSumSqProducts(alpha float64, a, b []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	na, nb := len(a)/len(dst), len(b)/len(dst)
	for i := range dst {
		d.AddSumSqProduct(alpha, a[i*na:(i+1)*na], b[i*nb:(i+1)*nb], dst[i:i+1])
	}
}

// AddScaledRows implements runtime.VectorOps: each element of y is
// y + Σ_i c_i·x_i[j] over the rows of non-zero factor, summed in float64
// and rounded once. (The CPU rounds each product and each partial sum to
// float32, as Axpy does: within float32 rounding of this.)
func (Device) AddScaledRows(c, x, y []float32) {
	n := len(y)
	for j := range y {
		s := float64(y[j])
		for i, ci := range c {
			if ci != 0 {
				s += float64(ci) * float64(x[i*n+j])
			}
		}
		y[j] = float32(s)
	}
}

// ScaleRows implements runtime.VectorOps: each element the float64
// product x·c_s·α rounded once (the CPU rounds c_s·α first, then the
// product: within float32 rounding of this).
func (Device) ScaleRows(c []float32, alpha float32, x []float32, row, stride int) {
	if row == 0 || len(c) == 0 {
		return
	}
	for r := 0; r < len(x)/row; r++ {
		f := float64(c[(r*row/stride)%len(c)]) * float64(alpha)
		for k := r * row; k < (r+1)*row; k++ {
			x[k] = float32(float64(x[k]) * f)
		}
	}
}

// Contract implements runtime.VectorOps from the definition: every point
// of the loop nest in row-major order (the last loop fastest), its
// offsets the dot products of its coordinates with the strides, the
// products summed in float64 and rounded once.
func (Device) Contract(l *runtime.ContractLoop, a, b []float32, acc []float64, out []float32) {
	sum := make([]float64, len(out))
	total := 1
	for _, d := range l.Dims {
		total *= d
	}
	for t := 0; t < total; t++ {
		w, ia, ib := 0, 0, 0
		rest := t
		for k := len(l.Dims) - 1; k >= 0; k-- {
			c := rest % l.Dims[k]
			rest /= l.Dims[k]
			w += c * l.Out[k]
			ia += c * l.A[k]
			ib += c * l.B[k]
		}
		sum[w] += float64(a[ia]) * float64(b[ib])
	}
	for j, v := range sum {
		out[j] = float32(v)
	}
}

// NormAffineSampleGrad implements runtime.VectorOps from the definition:
// sample i's rows are the rows of blocks i, i+B, … of the whole tensor,
// each element's x̂ = (x − mean)·(1/σ) with its row's statistics, and the
// gradient Σ dy·x̂ (or Σ dy) per parameter element in float64, rounded
// once. (The CPU rounds each term to float32 first, as the forward
// rounds x̂: within float32 rounding of this.)
func (Device) NormAffineSampleGrad(n *runtime.NormRows, scale bool, i, B, stride int, x, mean, invStd, dy []float32, acc []float64, out []float32) {
	L := n.RowLen()
	perBlock := stride / L
	sum := make([]float64, len(out))
	for q := 0; q < len(dy)/L; q++ {
		block, within := i+q/perBlock*B, q%perBlock
		row := block*perBlock + within
		for j := 0; j < L; j++ {
			g := float64(dy[q*L+j])
			if scale {
				g *= (float64(x[q*L+j]) - float64(mean[row])) * float64(invStd[row])
			}
			sum[n.Param(row, j)] += g
		}
	}
	for k, v := range sum {
		out[k] = float32(v)
	}
}

// NormAffineGrads implements runtime.VectorOps: NormAffineSampleGrad of
// each sample, on its rows gathered from the whole tensors.
func (d Device) NormAffineGrads(n *runtime.NormRows, scale bool, B, stride int, x, mean, invStd, dy []float32, acc []float64, out, outBias []float32) {
	P := n.NumParams()
	if P == 0 {
		return
	}
	if scale && outBias != nil {
		d.NormAffineGrads(n, false, B, stride, nil, mean, invStd, dy, acc, outBias[:len(out)], nil)
	}
	for i := 0; i < len(out)/P; i++ {
		var xi, gi []float32
		for b := i; b < len(dy)/stride; b += B {
			gi = append(gi, dy[b*stride:(b+1)*stride]...)
			if scale {
				xi = append(xi, x[b*stride:(b+1)*stride]...)
			}
		}
		d.NormAffineSampleGrad(n, scale, i, B, stride, xi, mean, invStd, gi, acc[i*P:(i+1)*P], out[i*P:(i+1)*P])
	}
}

// CountNonFinite implements runtime.VectorOps: an element is finite when
// it minus itself is 0 (NaN − NaN and ∞ − ∞ are NaN).
func (Device) CountNonFinite(x []float32) int {
	n := 0
	for _, v := range x {
		if float64(v)-float64(v) != 0 {
			n++
		}
	}
	return n
}
