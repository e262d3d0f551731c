//go:build amd64 && !purego

#include "textflag.h"

// SSE2 kernels of the 3×3 depthwise convolution (see depthwise.go): four
// output columns per step, the nine taps broadcast in registers. Rows are
// r < rows, columns o < n (a multiple of 4, checked by the Go wrappers
// along with the slice bounds); strides and offsets are in elements: ys
// (output rows), ps (input rows), rd (kernel rows), and c1 and c2, where
// kernel columns 1 and 2 start in an input row (column 0 starts at 0):
// d and 2d for unit width stride, elsewhere offsets into a row stored by
// column phase so that every tap is again a unit-stride run.

// BCAST loads float32 off(R8) into the four lanes of X.
#define BCAST(off, X) MOVSS off(R8), X; SHUFPS $0, X, X

// func conv9SSE(y, p []float32, w *[9]float32, rows, n, ys, ps, rd, c1, c2 int)
//
// y[r·ys + o] += Σ_{i,j<3} w[3i+j]·p[r·ps + i·rd + c_j + o], c_0 = 0.
TEXT ·conv9SSE(SB), NOSPLIT, $0-112
	MOVQ y_base+0(FP), DI
	MOVQ p_base+24(FP), SI
	MOVQ w+48(FP), R8
	MOVQ rows+56(FP), CX
	MOVQ ys+72(FP), R9
	MOVQ ps+80(FP), R10
	MOVQ rd+88(FP), R11
	MOVQ c1+96(FP), R12
	MOVQ c2+104(FP), DX
	SHLQ $2, R9
	SHLQ $2, R10
	SHLQ $2, R11
	SHLQ $2, R12
	SHLQ $2, DX
	BCAST(0, X0)
	BCAST(4, X1)
	BCAST(8, X2)
	BCAST(12, X3)
	BCAST(16, X4)
	BCAST(20, X5)
	BCAST(24, X6)
	BCAST(28, X7)
	BCAST(32, X8)
	MOVQ  n+64(FP), AX
	TESTQ CX, CX
	JLE   convDone
	TESTQ AX, AX
	JLE   convDone

convRow:
	MOVQ SI, R13
	LEAQ (SI)(R11*1), R14
	LEAQ (R14)(R11*1), R8
	MOVQ DI, BX
	MOVQ n+64(FP), AX

convCol:
	MOVUPS (BX), X9
	MOVUPS (R13), X10
	MULPS  X0, X10
	ADDPS  X10, X9
	MOVUPS (R13)(R12*1), X11
	MULPS  X1, X11
	ADDPS  X11, X9
	MOVUPS (R13)(DX*1), X12
	MULPS  X2, X12
	ADDPS  X12, X9
	MOVUPS (R14), X13
	MULPS  X3, X13
	MOVUPS (R14)(R12*1), X10
	MULPS  X4, X10
	ADDPS  X10, X13
	MOVUPS (R14)(DX*1), X11
	MULPS  X5, X11
	ADDPS  X11, X13
	MOVUPS (R8), X14
	MULPS  X6, X14
	MOVUPS (R8)(R12*1), X12
	MULPS  X7, X12
	ADDPS  X12, X14
	MOVUPS (R8)(DX*1), X10
	MULPS  X8, X10
	ADDPS  X10, X14
	ADDPS  X14, X13
	ADDPS  X13, X9
	MOVUPS X9, (BX)
	ADDQ   $16, BX
	ADDQ   $16, R13
	ADDQ   $16, R14
	ADDQ   $16, R8
	SUBQ   $4, AX
	JG     convCol

	ADDQ R9, DI
	ADDQ R10, SI
	DECQ CX
	JG   convRow

convDone:
	RET

// HSUM adds the four lanes of X (clobbering it and X15) to off(R8).
#define HSUM(X, off) \
	MOVAPS X, X15; SHUFPS $0x4E, X15, X15; ADDPS X15, X; \
	MOVAPS X, X15; SHUFPS $0xB1, X15, X15; ADDPS X15, X; \
	ADDSS off(R8), X; MOVSS X, off(R8)

// func dot9SSE(g, p []float32, acc *[9]float32, rows, n, gs, ps, rd, c1, c2 int)
//
// acc[3i+j] += Σ_{r,o} g[r·gs + o]·p[r·ps + i·rd + c_j + o], c_0 = 0.
TEXT ·dot9SSE(SB), NOSPLIT, $0-112
	MOVQ g_base+0(FP), DI
	MOVQ p_base+24(FP), SI
	MOVQ rows+56(FP), CX
	MOVQ gs+72(FP), R9
	MOVQ ps+80(FP), R10
	MOVQ rd+88(FP), R11
	MOVQ c1+96(FP), R12
	MOVQ c2+104(FP), DX
	SHLQ $2, R9
	SHLQ $2, R10
	SHLQ $2, R11
	SHLQ $2, R12
	SHLQ $2, DX
	XORPS X0, X0
	XORPS X1, X1
	XORPS X2, X2
	XORPS X3, X3
	XORPS X4, X4
	XORPS X5, X5
	XORPS X6, X6
	XORPS X7, X7
	XORPS X8, X8
	MOVQ  n+64(FP), AX
	TESTQ CX, CX
	JLE   dotSum
	TESTQ AX, AX
	JLE   dotSum

dotRow:
	MOVQ SI, R13
	LEAQ (SI)(R11*1), R14
	LEAQ (R14)(R11*1), R8
	MOVQ DI, BX
	MOVQ n+64(FP), AX

dotCol:
	MOVUPS (BX), X9
	MOVUPS (R13), X10
	MULPS  X9, X10
	ADDPS  X10, X0
	MOVUPS (R13)(R12*1), X11
	MULPS  X9, X11
	ADDPS  X11, X1
	MOVUPS (R13)(DX*1), X12
	MULPS  X9, X12
	ADDPS  X12, X2
	MOVUPS (R14), X13
	MULPS  X9, X13
	ADDPS  X13, X3
	MOVUPS (R14)(R12*1), X14
	MULPS  X9, X14
	ADDPS  X14, X4
	MOVUPS (R14)(DX*1), X10
	MULPS  X9, X10
	ADDPS  X10, X5
	MOVUPS (R8), X11
	MULPS  X9, X11
	ADDPS  X11, X6
	MOVUPS (R8)(R12*1), X12
	MULPS  X9, X12
	ADDPS  X12, X7
	MOVUPS (R8)(DX*1), X13
	MULPS  X9, X13
	ADDPS  X13, X8
	ADDQ   $16, BX
	ADDQ   $16, R13
	ADDQ   $16, R14
	ADDQ   $16, R8
	SUBQ   $4, AX
	JG     dotCol

	ADDQ R9, DI
	ADDQ R10, SI
	DECQ CX
	JG   dotRow

dotSum:
	MOVQ acc+48(FP), R8
	HSUM(X0, 0)
	HSUM(X1, 4)
	HSUM(X2, 8)
	HSUM(X3, 12)
	HSUM(X4, 16)
	HSUM(X5, 20)
	HSUM(X6, 24)
	HSUM(X7, 28)
	HSUM(X8, 32)
	RET
