package runtime

import (
	"github.com/dpfinetune/dpfinetune/runtime/blas"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// LinalgOps is the linear algebra of the DP operation set (DPOps): the GEMMs
// behind ghost norms (the Gram matrices a_i a_iᵀ and g_i g_iᵀ of the
// paper's eq. 3.1), per-sample gradient instantiation (g_iᵀa_i) and
// book-keeping's clipped sum Σ_i C_i g_iᵀa_i, and the elementwise
// operations of the per-sample rules of elementwise parameters.
type LinalgOps interface {
	// Gemm computes C = α·op(A)·op(B) + β·C on row-major matrices, op(X)
	// being X or Xᵀ as transA, transB say: op(A) is m×k, op(B) k×n, C m×n,
	// with row strides lda, ldb, ldc. β = 0 overwrites C without reading
	// it; α = 0 does not read A or B. It may use all of the device.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	// GemmSerial is Gemm on the calling worker only, for per-sample work
	// that already runs Workers() samples at once.
	GemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	// GemmStrided computes batch products C_i = α·op(A_i)·op(B_i) + β·C_i
	// (as Gemm), A_i starting at element i·strideA of a, B_i at
	// i·strideB of b, C_i at i·strideC of c; a stride of 0 shares one
	// matrix among the products. The batched MatMul of attention (one
	// product per head, broadcast operands) and Einsum's contractions. It
	// may use all of the device, spreading products too small to split
	// over its workers whole.
	GemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int)
	// Axpy computes y += α·x over len(x) elements (len(y) ≥ len(x)): the
	// weighted accumulation Σ_i C_i g_i of instantiated per-sample
	// gradients, and the sum of gradients over physical batches.
	Axpy(alpha float32, x, y []float32)
	// Binary computes y = a op b with numpy broadcasting; yShape is the
	// broadcast of aShape and bShape.
	Binary(op BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y []float32, yShape []int)
	// ReduceToShape sums x (xShape) over the axes along which tShape is
	// broadcast to xShape and writes the result, of shape tShape, to t: a
	// per-sample gradient of a broadcast operand.
	ReduceToShape(x []float32, xShape []int, t []float32, tShape []int)
}

// BinaryOp selects an elementwise binary operator of LinalgOps.Binary.
type BinaryOp = kernels.BinaryOp

// The binary operators of LinalgOps.Binary (ONNX Add, Sub, Mul, Div, Pow).
const (
	BinaryAdd = kernels.Add
	BinarySub = kernels.Sub
	BinaryMul = kernels.Mul
	BinaryDiv = kernels.Div
	BinaryPow = kernels.Pow
)

// Gemm implements LinalgOps with blas.Sgemm.
func (CPU) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmSerial implements LinalgOps with blas.SgemmSerial.
func (CPU) GemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.SgemmSerial(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmStrided implements LinalgOps with blas.SgemmStrided.
func (CPU) GemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	blas.SgemmStrided(transA, transB, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC, batch)
}

// Axpy implements LinalgOps with kernels.Axpy.
func (CPU) Axpy(alpha float32, x, y []float32) { kernels.Axpy(alpha, x, y) }

// Binary implements LinalgOps with kernels.Binary.
func (CPU) Binary(op BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y []float32, yShape []int) {
	kernels.Binary(op, a, aShape, b, bShape, y, yShape)
}

// ReduceToShape implements LinalgOps with kernels.ReduceToShape.
func (CPU) ReduceToShape(x []float32, xShape []int, t []float32, tShape []int) {
	kernels.ReduceToShape(x, xShape, t, tShape)
}

// Workers implements DPOps: the goroutines the CPU kernels split work
// over (kernels.Workers).
func (CPU) Workers() int { return kernels.Workers() }
