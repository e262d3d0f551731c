package kernels

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// MatMulShape describes a numpy-style MatMul (ONNX MatMul): A (…, M, K) ×
// B (…, K, N) → (…, M, N) with the batch dimensions broadcast; a 1-D A is
// promoted to (1, K) and a 1-D B to (K, 1), and the promoted axis is removed
// from the output. Fill A and B and call Init.
type MatMulShape struct {
	A, B []int // operand shapes

	// Derived by Init.
	Out     []int // output shape
	M, K, N int   // matrix dims of each product
	Batch   int   // number of products (∏ of the broadcast batch shape)

	aOff, bOff           []int // per product, offset of its A and B matrix
	aStride, bStride     int   // uniform offset step (−1 when not uniform)
	aDistinct, bDistinct bool  // every product has its own A (B) matrix
	ready                bool
}

// Init validates the shapes and computes the output shape and per-product
// operand offsets.
func (s *MatMulShape) Init() error {
	if len(s.A) == 0 || len(s.B) == 0 {
		return fmt.Errorf("kernels: MatMul of a scalar")
	}
	a, b := s.A, s.B
	if len(a) == 1 {
		a = []int{1, a[0]}
	}
	if len(b) == 1 {
		b = []int{b[0], 1}
	}
	s.M, s.K = a[len(a)-2], a[len(a)-1]
	if b[len(b)-2] != s.K {
		return fmt.Errorf("kernels: MatMul shapes %v and %v: inner dims differ", s.A, s.B)
	}
	s.N = b[len(b)-1]
	ab, bb := a[:len(a)-2], b[:len(b)-2]
	batch, err := BroadcastShape(ab, bb)
	if err != nil {
		return fmt.Errorf("kernels: MatMul shapes %v and %v: %w", s.A, s.B, err)
	}
	s.Out = append([]int{}, batch...)
	if len(s.A) > 1 {
		s.Out = append(s.Out, s.M)
	}
	if len(s.B) > 1 {
		s.Out = append(s.Out, s.N)
	}
	s.Batch = Numel(batch)
	s.aOff = batchOffsets(batch, ab, s.M*s.K)
	s.bOff = batchOffsets(batch, bb, s.K*s.N)
	s.aStride, s.aDistinct = uniformStride(s.aOff, s.M*s.K, Numel(ab))
	s.bStride, s.bDistinct = uniformStride(s.bOff, s.K*s.N, Numel(bb))
	s.ready = true
	return nil
}

// batchOffsets returns, for each index of the broadcast batch shape, the
// element offset of the matching matrix of an operand with batch shape ob.
func batchOffsets(batch, ob []int, mat int) []int {
	n := Numel(batch)
	offs := make([]int, n)
	if n == 0 {
		return offs
	}
	it := newBcastIter(batch, batch, ob)
	nrows, rowLen := it.rows()
	st := it.inner()[1]
	it.each(0, nrows, func(off [maxOps]int) {
		for j := 0; j < rowLen; j++ {
			offs[off[0]+j] = (off[1] + j*st) * mat
		}
	})
	return offs
}

// uniformStride reports the constant offset step (0 when the operand is
// shared by every product, mat when each has its own consecutive matrix,
// −1 otherwise) and whether the operand is not broadcast at all.
func uniformStride(offs []int, mat, operandBatch int) (int, bool) {
	distinct := operandBatch == len(offs)
	if len(offs) <= 1 {
		return mat, true
	}
	for _, step := range []int{0, mat} {
		ok := true
		for q, o := range offs {
			if o != q*step {
				ok = false
				break
			}
		}
		if ok {
			return step, distinct
		}
	}
	return -1, distinct
}

func (s *MatMulShape) check() {
	if !s.ready {
		panic("kernels: MatMulShape used before Init")
	}
}

// MatMul computes y = a·b (shapes from s). A shared right operand (a weight
// against (B, T, D) tokens) becomes one GEMM over all rows; uniform batches
// go through blas.SgemmStrided; other broadcasts loop.
func MatMul(s *MatMulShape, a, b, y []float32) {
	s.check()
	M, K, N := s.M, s.K, s.N
	checkLen("a", a, Numel(s.A))
	checkLen("b", b, Numel(s.B))
	checkLen("y", y, s.Batch*M*N)
	switch {
	case s.Batch == 0 || M == 0 || N == 0:
	case s.bStride == 0 && s.aStride == M*K:
		blas.Sgemm(false, false, s.Batch*M, N, K, 1, a, K, b, N, 0, y, N)
	case s.aStride >= 0 && s.bStride >= 0:
		blas.SgemmStrided(false, false, M, N, K, 1, a, K, s.aStride, b, N, s.bStride, 0, y, N, M*N, s.Batch)
	default:
		for q := 0; q < s.Batch; q++ {
			blas.Sgemm(false, false, M, N, K, 1, a[s.aOff[q]:], K, b[s.bOff[q]:], N, 0, y[q*M*N:], N)
		}
	}
}

// MatMulBackward computes da = dy·bᵀ and db = aᵀ·dy, summed over the batch
// dimensions each operand was broadcast along (nil outputs are skipped).
func MatMulBackward(s *MatMulShape, a, b, dy, da, db []float32) {
	s.check()
	M, K, N := s.M, s.K, s.N
	checkLen("dy", dy, s.Batch*M*N)
	if da != nil {
		checkLen("b", b, Numel(s.B))
		checkLen("da", da, Numel(s.A))
		switch {
		case s.aDistinct && s.bStride == 0 && s.aStride == M*K:
			blas.Sgemm(false, true, s.Batch*M, K, N, 1, dy, N, b, N, 0, da, K)
		case s.aDistinct && s.aStride >= 0 && s.bStride >= 0:
			blas.SgemmStrided(false, true, M, K, N, 1, dy, N, M*N, b, N, s.bStride, 0, da, K, M*K, s.Batch)
		default:
			clear(da[:Numel(s.A)])
			for q := 0; q < s.Batch; q++ {
				blas.Sgemm(false, true, M, K, N, 1, dy[q*M*N:], N, b[s.bOff[q]:], N, 1, da[s.aOff[q]:], K)
			}
		}
	}
	if db != nil {
		checkLen("a", a, Numel(s.A))
		checkLen("db", db, Numel(s.B))
		switch {
		case s.bStride == 0 && s.aStride == M*K && s.aDistinct:
			// Shared B: one product over all rows, Σ_q A_qᵀ dY_q = A_flatᵀ dY_flat.
			blas.Sgemm(true, false, K, N, s.Batch*M, 1, a, K, dy, N, 0, db, N)
		case s.bDistinct && s.aStride >= 0 && s.bStride >= 0:
			blas.SgemmStrided(true, false, K, N, M, 1, a, K, s.aStride, dy, N, M*N, 0, db, N, K*N, s.Batch)
		default:
			clear(db[:Numel(s.B)])
			for q := 0; q < s.Batch; q++ {
				blas.Sgemm(true, false, K, N, M, 1, a[s.aOff[q]:], K, dy[q*M*N:], N, 1, db[s.bOff[q]:], N)
			}
		}
	}
}

// Gemm computes y = alpha·op(a)·op(b) + beta·c (ONNX Gemm): op(a) is m×k
// (a stored k×m when transA), op(b) is k×n, and c (may be nil) has a shape
// unidirectionally broadcastable to (m, n) (a bias of shape (n) typically).
func Gemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32, cShape []int, y []float32) {
	checkLen("y", y, m*n)
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	if c != nil && beta != 0 {
		Expand(c, cShape, y, []int{m, n})
		if beta != 1 {
			for i := range y[:m*n] {
				y[i] *= beta
			}
		}
		blas.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, y, n)
		return
	}
	blas.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, 0, y, n)
}

// GemmBackward computes the gradients of Gemm: da (in a's stored layout),
// db (in b's stored layout) and dc = beta·dy reduced to cShape. Nil outputs
// are skipped.
func GemmBackward(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, cShape []int, dy, da, db, dc []float32) {
	checkLen("dy", dy, m*n)
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	if da != nil {
		if transA { // dA (k×m) = alpha·op(B)·dYᵀ
			blas.Sgemm(transB, true, k, m, n, alpha, b, ldb, dy, n, 0, da, m)
		} else { // dA (m×k) = alpha·dY·op(B)ᵀ
			blas.Sgemm(false, !transB, m, k, n, alpha, dy, n, b, ldb, 0, da, k)
		}
	}
	if db != nil {
		if transB { // dB (n×k) = alpha·dYᵀ·op(A)
			blas.Sgemm(true, transA, n, k, m, alpha, dy, n, a, lda, 0, db, k)
		} else { // dB (k×n) = alpha·op(A)ᵀ·dY
			blas.Sgemm(!transA, false, k, n, m, alpha, a, lda, dy, n, 0, db, n)
		}
	}
	if dc != nil {
		ReduceToShape(dy, []int{m, n}, dc, cShape)
		if beta != 1 {
			for i := range dc[:Numel(cShape)] {
				dc[i] *= beta
			}
		}
	}
}
