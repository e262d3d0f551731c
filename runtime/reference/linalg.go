package reference

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// Gemm implements runtime.LinalgOps: every entry of C is one float64 dot
// product, rounded once.
func (Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	// op(A)[i, p] is a[i·ai + p·ap] and op(B)[p, j] is b[p·bp + j·bj].
	ai, ap := lda, 1
	if transA {
		ai, ap = 1, lda
	}
	bp, bj := ldb, 1
	if transB {
		bp, bj = 1, ldb
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			if alpha != 0 {
				ia, ib := i*ai, j*bj
				for p := 0; p < k; p++ {
					s += float64(a[ia]) * float64(b[ib])
					ia += ap
					ib += bp
				}
				s *= float64(alpha)
			}
			if beta != 0 {
				s += float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(s)
		}
	}
}

// GemmSerial implements runtime.LinalgOps.
func (d Device) GemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	d.Gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmStrided implements runtime.LinalgOps: one Gemm per product, on the
// sub-slices the strides give.
func (d Device) GemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	for i := 0; i < batch; i++ {
		d.Gemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	}
}

// Axpy implements runtime.LinalgOps.
func (Device) Axpy(alpha float32, x, y []float32) {
	for i, v := range x {
		y[i] = float32(float64(y[i]) + float64(alpha)*float64(v))
	}
}

// strides returns the row-major strides of shape.
func strides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// broadcastIndex returns, for element i of an array of shape out, the
// index of the element of an operand of shape in (right-aligned, numpy
// broadcasting) that it reads.
func broadcastIndex(i int, out, in []int) int {
	idx, st := 0, 1
	for ax := len(out) - 1; ax >= 0; ax-- {
		c := i % out[ax]
		i /= out[ax]
		k := ax - (len(out) - len(in))
		if k < 0 {
			continue
		}
		if in[k] != 1 {
			idx += c * st
		}
		st *= in[k]
	}
	return idx
}

// binary64 is op on float64 operands.
func binary64(op runtime.BinaryOp, a, b float64) float64 {
	switch op {
	case runtime.BinaryAdd:
		return a + b
	case runtime.BinarySub:
		return a - b
	case runtime.BinaryMul:
		return a * b
	case runtime.BinaryDiv:
		return a / b
	case runtime.BinaryPow:
		return math.Pow(a, b)
	}
	panic("reference: unknown binary operator " + op.String())
}

// Binary implements runtime.LinalgOps.
func (Device) Binary(op runtime.BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y []float32, yShape []int) {
	n := numel(yShape)
	for i := 0; i < n; i++ {
		av := float64(a[broadcastIndex(i, yShape, aShape)])
		bv := float64(b[broadcastIndex(i, yShape, bShape)])
		y[i] = float32(binary64(op, av, bv))
	}
}

// ReduceToShape implements runtime.LinalgOps: each output element is a
// float64 sum of the elements that broadcast from it.
func (Device) ReduceToShape(x []float32, xShape []int, t []float32, tShape []int) {
	acc := make([]float64, numel(tShape))
	n := numel(xShape)
	for i := 0; i < n; i++ {
		acc[broadcastIndex(i, xShape, tShape)] += float64(x[i])
	}
	for i, v := range acc {
		t[i] = float32(v)
	}
}
