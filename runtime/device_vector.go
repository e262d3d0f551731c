package runtime

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// VectorOps is the vector arithmetic of the DP operation set (DPOps): the
// squared norms, scalings and sums of per-sample gradients that the engine
// performs between GEMMs (DESIGN.md §3; the paper §3–§4), accumulated in
// their device slots (AddSumSq, AddDot, AddSumSqProduct) so that the host
// reads no norm; the per-sample gradients of the rules that are not GEMMs
// (Contract, NormAffineSampleGrad); and the trainer's divergence count.
// Norms are summed in float64 in one order every backend follows, the
// lane order (lanesum.go), so that every device gives the engine's clip
// factors bit for bit.
type VectorOps interface {
	// SumSq returns ‖x‖² = Σ_k x_k², accumulated in float64 in the lane
	// order (SumSqLanes): the squared norm of one sample's gradient (or of one piece of
	// it). It runs on one worker.
	SumSq(x []float32) float64
	// SquaredNorms writes dst[i] = ‖x_i‖² (as SumSq) for the len(dst)
	// samples x_i stacked in x, each len(x)/len(dst) elements: the
	// per-sample squared norms of instantiated gradients (B×size).
	SquaredNorms(x []float32, dst []float64)
	// Dot returns Σ_k a_k·b_k accumulated in float64 in the lane order
	// (DotLanes; len(b) ≥ len(a)):
	// the inner product ⟨a_i a_iᵀ, g_i g_iᵀ⟩ of the ghost norm (the
	// paper's eq. 3.1). It runs on one worker.
	Dot(a, b []float32) float64
	// Scale computes x ← α·x: a sample's output gradient scaled by its
	// clip factor C_i before book-keeping's GEMM (Σ_i C_i g_iᵀa_i), or a
	// derivative's sign. It runs on one worker.
	Scale(alpha float32, x []float32)
	// Add computes y ← y + x over len(x) elements (len(y) ≥ len(x)): a
	// sample's gradient added to its per-sample gradient, or a clipped
	// sum to the sum over physical batches. It runs on one worker.
	Add(x, y []float32)
	// AddRunSums adds to dst[m] the sum of run m of x, x being len(dst)
	// runs of len(x)/len(dst) elements: one sample's gradient of a
	// convolution's bias from its output gradient (M channels × T
	// positions). Each run is summed in float32 in the lane order
	// (SumLanes32), which a GPU follows a warp per run. It runs on one
	// worker.
	AddRunSums(x, dst []float32)
	// ScatterAdd adds src[j] to dst[idx[j]] for every j with idx[j] ≥ 0:
	// a gradient with respect to an operand that reaches its parameter
	// through layout-only operators, mapped back to the parameter
	// (len(idx) ≤ len(src)). It runs on one worker.
	ScatterAdd(dst, src []float32, idx []int32)
	// AddNormSq computes y ← y + x over len(x) float64 elements: the
	// squared norms of one parameter's per-sample gradients added to the
	// samples' total squared norms.
	AddNormSq(x, y []float64)
	// SumNormRows overwrites dst (n elements) with the column sums of x,
	// len(x)/n rows of n float64 values: dst[j] = Σ_k x[k·n + j], added
	// from 0 in the order of k. The samples' total squared norms from the
	// parameters' (a row each, in the engine's order of them), in one call.
	SumNormRows(x, dst []float64)
	// SumRows overwrites out (p elements) with Σ_t g[t,:] for g a T×p
	// row-major matrix: the gradient of a bias shared by T rows.
	SumRows(g []float32, T, p int, out []float32)
	// ZeroNormSq sets the float64 elements of x to 0: the per-sample
	// squared norms cleared before a physical batch's backward pass.
	ZeroNormSq(x []float64)
	// AddSumSq computes dst[0] ← dst[0] + SumSq(x), the sum of squares
	// summed from 0 in float64 in the lane order and then added: one
	// sample's squared gradient norm (or a piece of it) accumulated into
	// its slot of device memory, so that the host reads no scalar. It
	// runs on one worker.
	AddSumSq(x []float32, dst []float64)
	// AddDot computes dst[0] ← dst[0] + alpha·Dot(a, b), the dot product
	// summed from 0 in float64 in the lane order (len(b) ≥ len(a)), multiplied by
	// alpha and then added: a ghost norm ⟨a_i a_iᵀ, g_i g_iᵀ⟩ (the paper's
	// eq. 3.1; alpha is a Gemm's α², else 1) accumulated into the sample's
	// squared norm. It runs on one worker.
	AddDot(alpha float64, a, b []float32, dst []float64)
	// AddDots computes dst[i] ← dst[i] + alpha·Dot(a_i, b_i) for the
	// len(dst) rows a_i and b_i of len(a)/len(dst) elements stacked in a
	// and b (len(b) ≥ len(a)), each as AddDot: the ghost norms of a batch
	// of samples at once, for a device whose per-sample loop would be a
	// chain of small launches.
	AddDots(alpha float64, a, b []float32, dst []float64)
	// AddSumSqProduct computes dst[0] ← dst[0] + alpha·(SumSq(a)·SumSq(b)):
	// the ghost norm of a rank-one gradient g aᵀ (one row: ‖g aᵀ‖² =
	// ‖a‖²‖g‖²), accumulated as AddDot. It runs on one worker.
	AddSumSqProduct(alpha float64, a, b []float32, dst []float64)
	// AddSumSqProducts computes dst[i] ← dst[i] + alpha·(SumSq(a_i)·
	// SumSq(b_i)) for the len(dst) rows a_i of len(a)/len(dst) and b_i of
	// len(b)/len(dst) elements, each as AddSumSqProduct: the rank-one
	// ghost norms of a batch at once.
	AddSumSqProducts(alpha float64, a, b []float32, dst []float64)
	// AddScaledRows computes y ← y + Σ_i c_i·x_i over the len(c) rows x_i
	// of x (len(y) elements each), row after row in the order of i, each
	// as Axpy (the product rounded to float32, then added), and skips the
	// rows whose c_i is 0: the clipped sum Σ_i C_i g_i of instantiated
	// per-sample gradients (the paper's Algorithm 1), where a sample of
	// factor 0 (non-finite, or clipped away) adds nothing, not even the
	// NaN of 0·∞.
	AddScaledRows(c, x, y []float32)
	// ScaleRows scales row r of x (len(x)/row rows of row elements) by
	// c_s·alpha, s = (r·row/stride) mod len(c), the product rounded to
	// float32 first, as Scale(c_s·alpha, row r): book-keeping's scaling
	// of each sample's output gradient by its clip factor C_s (and a
	// Gemm's α) before its one GEMM for Σ_i C_i g_iᵀa_i, wherever the
	// batch sits in the rows (stride is the batch stride, len(c) the
	// batch). It runs on one worker.
	ScaleRows(c []float32, alpha float32, x []float32, row, stride int)
	// CountNonFinite returns the number of NaN or infinite elements of x:
	// the trainer's check, after each step, that no parameter diverged,
	// one scalar instead of a host read of the model.
	CountNonFinite(x []float32) int
	// Contract computes out[w] = Σ a[i_a]·b[i_b] over the loop nest l,
	// the products and the sum in float64 in the loop's order (its last
	// loop fastest), each output rounded once; acc is float64 scratch of
	// len(out) elements: a weight's per-sample gradient through a general
	// two-operand Einsum (one that is not a grouped linear layer), the
	// equation's contraction of the other operand with the output
	// gradient. It runs on one worker.
	Contract(l *ContractLoop, a, b []float32, acc []float64, out []float32)
	// NormAffineSampleGrad overwrites out (n.NumParams() elements) with
	// sample i's gradient with respect to the scale (scale true: Σ dy·x̂)
	// or the bias (Σ dy) of the normalization n (LayerNormalization,
	// GroupNormalization, InstanceNormalization), from the sample's x and
	// dy gathered as the engine gathers a sample (blocks i, i+B, … of
	// stride elements of the whole tensor; x may be nil for the bias) and
	// the statistics mean and invStd of the whole tensor's rows from the
	// forward (n.StatsData; nil for the bias): each term the
	// float32 dy·(x − mean)·(1/σ), as the forward rounds x̂, a parameter
	// element's terms in the order of the rows and their elements summed
	// in float64 in the lane order (lanesum.go), rounded once. acc is
	// float64 scratch of len(out) elements. It runs on one worker.
	NormAffineSampleGrad(n *NormRows, scale bool, i, B, stride int, x, mean, invStd, dy []float32, acc []float64, out []float32)
	// NormAffineGrads writes the gradients NormAffineSampleGrad computes
	// for the samples i < len(out)/n.NumParams() at once, sample i's to
	// out[i·NumParams():], reading the whole tensors x (nil for the
	// bias) and dy (B samples in blocks of stride elements) in place
	// instead of a sample's gathered copy: the same terms, summed in the
	// same order. acc is float64 scratch of len(out) elements. Where scale
	// is true and outBias is not nil (len(out) elements), outBias receives
	// the bias's gradients too, as a call with scale false would write
	// them (a device may take both from one pass over dy).
	NormAffineGrads(n *NormRows, scale bool, B, stride int, x, mean, invStd, dy []float32, acc []float64, out, outBias []float32)
}

// ContractLoop is the loop nest of VectorOps.Contract: one loop per
// einsum label, with its extent and, per tensor, the stride that a step
// along it moves that tensor's offset by (0 where the tensor lacks the
// label or broadcasts it; a sum of strides where a label repeats, a
// diagonal). Compile-time shape arithmetic, built on the host.
type ContractLoop struct {
	// Dims are the loops' extents, the last loop innermost.
	Dims []int
	// Out, A and B are the strides of out, a and b per loop.
	Out, A, B []int
}

// SumSq implements VectorOps.
func (CPU) SumSq(x []float32) float64 { return SumSqLanes(x) }

// SquaredNorms implements VectorOps.
func (c CPU) SquaredNorms(x []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	size := len(x) / len(dst)
	for i := range dst {
		dst[i] = c.SumSq(x[i*size : (i+1)*size])
	}
}

// Dot implements VectorOps.
func (CPU) Dot(a, b []float32) float64 { return DotLanes(a, b) }

// Scale implements VectorOps.
func (CPU) Scale(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// Add implements VectorOps.
func (CPU) Add(x, y []float32) {
	y = y[:len(x)] // one bounds check, not one per element
	for i, v := range x {
		y[i] += v
	}
}

// AddRunSums implements VectorOps.
func (CPU) AddRunSums(x, dst []float32) {
	if len(dst) == 0 {
		return
	}
	T := len(x) / len(dst)
	for m := range dst {
		dst[m] += SumLanes32(x[m*T : (m+1)*T])
	}
}

// ScatterAdd implements VectorOps.
func (CPU) ScatterAdd(dst, src []float32, idx []int32) {
	for j, k := range idx {
		if k >= 0 {
			dst[k] += src[j]
		}
	}
}

// AddNormSq implements VectorOps.
func (CPU) AddNormSq(x, y []float64) {
	y = y[:len(x)] // one bounds check, not one per element
	for i, v := range x {
		y[i] += v
	}
}

// SumNormRows implements VectorOps.
func (CPU) SumNormRows(x, dst []float64) {
	n := len(dst)
	clear(dst)
	if n == 0 {
		return
	}
	for k := 0; k+n <= len(x); k += n {
		row := x[k : k+n]
		for j, v := range row {
			dst[j] += v
		}
	}
}

// ZeroNormSq implements VectorOps.
func (CPU) ZeroNormSq(x []float64) { clear(x) }

// AddSumSq implements VectorOps.
func (c CPU) AddSumSq(x []float32, dst []float64) { dst[0] += c.SumSq(x) }

// AddDot implements VectorOps.
func (c CPU) AddDot(alpha float64, a, b []float32, dst []float64) {
	dst[0] += alpha * c.Dot(a, b)
}

// AddDots implements VectorOps.
func (c CPU) AddDots(alpha float64, a, b []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	size := len(a) / len(dst)
	for i := range dst {
		c.AddDot(alpha, a[i*size:(i+1)*size], b[i*size:(i+1)*size], dst[i:i+1])
	}
}

// AddSumSqProduct implements VectorOps.
func (c CPU) AddSumSqProduct(alpha float64, a, b []float32, dst []float64) {
	dst[0] += alpha * (c.SumSq(a) * c.SumSq(b))
}

// AddSumSqProducts implements VectorOps.
func (c CPU) AddSumSqProducts(alpha float64, a, b []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	na, nb := len(a)/len(dst), len(b)/len(dst)
	for i := range dst {
		c.AddSumSqProduct(alpha, a[i*na:(i+1)*na], b[i*nb:(i+1)*nb], dst[i:i+1])
	}
}

// AddScaledRows implements VectorOps: one Axpy per row of non-zero factor.
func (CPU) AddScaledRows(c, x, y []float32) {
	n := len(y)
	for i, ci := range c {
		if ci != 0 {
			kernels.Axpy(ci, x[i*n:(i+1)*n], y)
		}
	}
}

// ScaleRows implements VectorOps: one Scale per row.
func (c CPU) ScaleRows(f []float32, alpha float32, x []float32, row, stride int) {
	if row == 0 || len(f) == 0 {
		return
	}
	for r := 0; r < len(x)/row; r++ {
		c.Scale(f[(r*row/stride)%len(f)]*alpha, x[r*row:(r+1)*row])
	}
}

// Contract implements VectorOps: the loop nest as an odometer (the last
// coordinate fastest, the offsets moved by the strides), on the caller's
// goroutine.
func (CPU) Contract(l *ContractLoop, a, b []float32, acc []float64, out []float32) {
	acc = acc[:len(out)]
	clear(acc)
	empty := false
	for _, d := range l.Dims {
		empty = empty || d == 0
	}
	var small [16]int // no allocation for up to 16 labels
	coord := small[:min(len(l.Dims), len(small))]
	if len(l.Dims) > len(small) {
		coord = make([]int, len(l.Dims))
	}
	for w, ia, ib := 0, 0, 0; !empty; {
		acc[w] += float64(a[ia]) * float64(b[ib])
		k := len(l.Dims) - 1
		for ; k >= 0; k-- {
			coord[k]++
			w, ia, ib = w+l.Out[k], ia+l.A[k], ib+l.B[k]
			if coord[k] < l.Dims[k] {
				break
			}
			w, ia, ib = w-coord[k]*l.Out[k], ia-coord[k]*l.A[k], ib-coord[k]*l.B[k]
			coord[k] = 0
		}
		empty = k < 0
	}
	for j, v := range acc {
		out[j] = float32(v)
	}
}

// NormAffineSampleGrad implements VectorOps, row after row on the
// caller's goroutine.
func (CPU) NormAffineSampleGrad(n *NormRows, scale bool, i, B, stride int, x, mean, invStd, dy []float32, acc []float64, out []float32) {
	acc = acc[:len(out)]
	normAffineSample(n, scale, i, B, stride/n.r.L, len(dy)/n.r.L, false, x, mean, invStd, dy, acc)
	for k, v := range acc {
		out[k] = float32(v)
	}
}

// normAffineSample sums sample i's gradient with respect to n's scale
// (Σ dy·x̂, each term rounded to float32 as the forward rounds x̂) or bias
// (Σ dy) into acc, one parameter element at a time: its terms in the order
// of the rows and their elements, summed in float64 in the lane order
// (lanesum.go: chunks of SumChunk terms, SumLanes interleaved partial sums
// each), which a GPU follows with a warp per element. Its row q < rows is
// whole-tensor row q mod perBlock of block i + (q / perBlock)·B (the
// gather takes blocks i, i+B, …); the row's data lie at q·L in the
// sample's gathered copy, or with whole at the whole-tensor row's offset.
// Element j of row r uses parameter (r mod G)·CpG + j/S (NormRows.ParamMap).
func normAffineSample(n *NormRows, scale bool, i, B, perBlock, rows int, whole bool, x, mean, invStd, dy []float32, acc []float64) {
	a := normAffineArgs{n: n, scale: scale, B: B, perBlock: perBlock, rows: rows, whole: whole, x: x, mean: mean, invStd: invStd, dy: dy}
	for k := range acc {
		acc[k] = a.sum(i, k)
	}
}

// normAffineArgs are normAffineSample's operands, for its sums one at a
// time (NormAffineGrads splits them over the CPU's workers).
type normAffineArgs struct {
	n                   *NormRows
	scale, whole        bool
	B, perBlock, rows   int
	x, mean, invStd, dy []float32
}

// sum is sample i's gradient with respect to parameter element k
// (normAffineSample).
func (a *normAffineArgs) sum(i, k int) float64 {
	L := a.n.r.L
	G, CpG, S := a.n.ParamMap()
	var s laneAcc
	// Where a block holds whole groups of rows (perBlock a multiple of
	// G), row q's group is q mod G: only every G-th row has k.
	q0, step := 0, 1
	if CpG > 0 && a.perBlock%G == 0 {
		q0, step = k/CpG, G
	}
	for q := q0; q < a.rows; q += step {
		global := (i+q/a.perBlock*a.B)*a.perBlock + q%a.perBlock
		d := k - global%G*CpG
		if d < 0 || d*S >= L {
			continue
		}
		j0, j1 := d*S, min(d*S+S, L)
		off := q * L
		if a.whole {
			off = global * L
		}
		if a.scale {
			s.addScaled(a.dy[off+j0:off+j1], a.x[off+j0:off+j1], a.mean[global], a.invStd[global])
		} else {
			s.addScaled(a.dy[off+j0:off+j1], nil, 0, 0)
		}
	}
	return s.sum()
}

// rowsBlock writes sample i's sums (sum) of the parameter elements k0 …
// k0+SumLanes−1 (those below L) to out[i·L+k0:], in LayerNorm's layout
// (NormRows.ParamMap 1, 0, 1: element k of every row is term k's): the
// rows in order, row q each element's term q, so lane q mod SumLanes of
// every element, the chunks at every SumChunk rows — the lane order of
// sum, whose laneAcc takes the terms one at a time. The rows are read
// SumLanes elements at a time rather than one element of each.
func (a *normAffineArgs) rowsBlock(i, k0 int, out []float32) {
	L := a.n.r.L
	w := min(SumLanes, L-k0)
	var lanes [SumLanes][SumLanes]float64 // [lane][k−k0]
	var total [SumLanes]float64
	for q := 0; q < a.rows; q++ {
		global := (i+q/a.perBlock*a.B)*a.perBlock + q%a.perBlock
		off := global*L + k0
		ln := &lanes[q%SumLanes]
		g := a.dy[off : off+w]
		if a.scale {
			x, m, iv := a.x[off:off+w], a.mean[global], a.invStd[global]
			for kk, v := range g {
				ln[kk] += float64(v * (x[kk] - m) * iv)
			}
		} else {
			for kk, v := range g {
				ln[kk] += float64(v)
			}
		}
		if (q+1)%SumChunk == 0 || q == a.rows-1 {
			for kk := 0; kk < w; kk++ {
				var col [SumLanes]float64
				for l := range col {
					col[l] = lanes[l][kk]
				}
				total[kk] += laneTree(&col)
			}
			if q < a.rows-1 {
				lanes = [SumLanes][SumLanes]float64{}
			}
		}
	}
	for kk, v := range total[:w] {
		out[i*L+k0+kk] = float32(v)
	}
}

// NormAffineGrads implements VectorOps: the samples' and parameter
// elements' sums split over the CPU's workers, each sum on one; in
// LayerNorm's layout (every row one term of each element), a sample's
// sums SumLanes elements at a time along the rows (rowsBlock).
func (c CPU) NormAffineGrads(n *NormRows, scale bool, B, stride int, x, mean, invStd, dy []float32, acc []float64, out, outBias []float32) {
	L, P := n.r.L, n.NumParams()
	if P == 0 {
		return
	}
	if !scale {
		outBias = nil
	}
	if G, CpG, S := n.ParamMap(); G == 1 && CpG == 0 && S == 1 && P == L {
		if outBias != nil { // a second pass: rowsBlock's lanes hold one sum a term
			defer c.NormAffineGrads(n, false, B, stride, nil, mean, invStd, dy, acc, outBias[:len(out)], nil)
		}
		blocks := (P + SumLanes - 1) / SumLanes
		runJob(len(out)/P*blocks, 1, func(j *cpuJob, lo, hi int) {
			for e := lo; e < hi; e++ {
				j.na.rowsBlock(e/j.n, e%j.n*SumLanes, j.f[0])
			}
		}, func(j *cpuJob) {
			j.na = normAffineArgs{n: n, scale: scale, B: B, perBlock: stride / L, rows: len(dy) / L / B, whole: true, x: x, mean: mean, invStd: invStd, dy: dy}
			j.f[0], j.n = out, blocks
		})
		return
	}
	items := len(out) / P * P
	runJob(items, max(1, 4096/max(1, len(dy)/B/P)), func(j *cpuJob, lo, hi int) {
		bias := j.na
		bias.scale, bias.x = false, nil
		for e := lo; e < hi; e++ {
			j.f[0][e] = float32(j.na.sum(e/j.n, e%j.n))
			if j.f[1] != nil { // the same runs of dy again, from the cache
				j.f[1][e] = float32(bias.sum(e/j.n, e%j.n))
			}
		}
	}, func(j *cpuJob) {
		j.na = normAffineArgs{n: n, scale: scale, B: B, perBlock: stride / L, rows: len(dy) / L / B, whole: true, x: x, mean: mean, invStd: invStd, dy: dy}
		j.f[0], j.f[1], j.n = out, outBias, P
	})
}

// CountNonFinite implements VectorOps.
func (CPU) CountNonFinite(x []float32) int {
	n := 0
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			n++
		}
	}
	return n
}

// SumRows implements VectorOps.
func (CPU) SumRows(g []float32, T, p int, out []float32) {
	out = out[:p]
	clear(out)
	for t := 0; t < T; t++ {
		row := g[t*p : (t+1)*p]
		for j, v := range row {
			out[j] += v
		}
	}
}
