package runtime

// VectorOps is the vector arithmetic of the DP operation set (DPOps): the
// squared norms, scalings and sums of per-sample gradients that the engine
// performs between GEMMs (DESIGN.md §3; the paper §3–§4). Norms are summed
// in float64, element by element in order, so that every device gives the
// engine's clip factors bit for bit.
type VectorOps interface {
	// SumSq returns ‖x‖² = Σ_k x_k², accumulated in float64 in the order
	// of x: the squared norm of one sample's gradient (or of one piece of
	// it). It runs on one worker.
	SumSq(x []float32) float64
	// SquaredNorms writes dst[i] = ‖x_i‖² (as SumSq) for the len(dst)
	// samples x_i stacked in x, each len(x)/len(dst) elements: the
	// per-sample squared norms of instantiated gradients (B×size).
	SquaredNorms(x []float32, dst []float64)
	// Dot returns Σ_k a_k·b_k accumulated in float64 (len(b) ≥ len(a)):
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
	// positions). Each run is summed in float32 with four running sums.
	// It runs on one worker.
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
	// SumRows overwrites out (p elements) with Σ_t g[t,:] for g a T×p
	// row-major matrix: the gradient of a bias shared by T rows.
	SumRows(g []float32, T, p int, out []float32)
}

// SumSq implements VectorOps.
func (CPU) SumSq(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

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
func (CPU) Dot(a, b []float32) float64 {
	b = b[:len(a)] // one bounds check, not one per element
	var s float64
	for i, v := range a {
		s += float64(v) * float64(b[i])
	}
	return s
}

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
		dst[m] += sum4(x[m*T : (m+1)*T])
	}
}

// sum4 sums x with four running sums, so that the additions do not wait
// on one another.
func sum4(x []float32) float32 {
	var a, b, c, d float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a += x[i]
		b += x[i+1]
		c += x[i+2]
		d += x[i+3]
	}
	for ; i < len(x); i++ {
		a += x[i]
	}
	return (a + b) + (c + d)
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
