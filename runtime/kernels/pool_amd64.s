//go:build amd64 && !purego

#include "textflag.h"

// maxPoolBackS1SSE: MaxPoolBackwardFromOutput on one output row of 2×2
// windows with stride 1 along the row (pool.go, maxPoolBackRowS1), four
// windows per step. Window i's taps are A = r0[i], B = r0[i+1], C = r1[i],
// D = r1[i+1]; the winner is the first whose bits equal y[i] (PCMPEQL on
// the bits, later matches masked off). Each tap receives dy[i] if it won
// and −0 otherwise (adding −0 changes nothing), and d0[i] gets window
// i−1's B before window i's A, d1[i] window i−1's D before window i's C:
// the order of MaxPoolBackward's additions, so the sums are the same bit
// for bit. The B and D vectors shifted up one lane supply window i−1's
// share; lane 3 carries into the next step (and out, in carry).

// func maxPoolBackS1SSE(r0, r1, y, dy, d0, d1 []float32, n int, carry *[2]float32)
TEXT ·maxPoolBackS1SSE(SB), NOSPLIT, $0-160
	MOVQ r0_base+0(FP), R8
	MOVQ r1_base+24(FP), R9
	MOVQ y_base+48(FP), R10
	MOVQ dy_base+72(FP), R11
	MOVQ d0_base+96(FP), R12
	MOVQ d1_base+120(FP), R13
	MOVQ n+144(FP), CX
	MOVQ carry+152(FP), DX
	MOVSS 0(DX), X14 // ct in lane 0, zeros above
	MOVSS 4(DX), X13 // cb
	MOVL  $0x80000000, AX
	MOVL  AX, X15
	PSHUFL $0, X15, X15 // −0 in every lane
	XORQ  AX, AX

loop:
	CMPQ AX, CX
	JGE  done
	MOVUPS (R10)(AX*4), X0  // y
	MOVUPS (R11)(AX*4), X1  // dy
	MOVUPS (R8)(AX*4), X2   // A
	MOVUPS 4(R8)(AX*4), X3  // B
	MOVUPS (R9)(AX*4), X4   // C
	PCMPEQL X0, X2          // EA
	PCMPEQL X0, X3
	PCMPEQL X0, X4
	MOVO    X2, X5
	PANDN   X3, X5          // EB = B &^ EA
	MOVO    X2, X6
	POR     X5, X6          // EA | EB
	MOVO    X6, X7
	PANDN   X4, X7          // EC = C &^ (EA | EB)
	POR     X7, X6          // EA | EB | EC; ED is its complement
	// S = dy where E, else −0.
	MOVO  X2, X8
	PAND  X1, X8
	PANDN X15, X2
	POR   X8, X2            // SA
	MOVO  X5, X8
	PAND  X1, X8
	PANDN X15, X5
	POR   X8, X5            // SB
	MOVO  X7, X8
	PAND  X1, X8
	PANDN X15, X7
	POR   X8, X7            // SC
	MOVO  X6, X8
	PANDN X1, X8
	PAND  X15, X6
	POR   X8, X6            // SD
	// Window i−1's B and D, lane 0 from the carry.
	MOVO   X5, X8
	PSLLO  $4, X8
	POR    X14, X8
	MOVO   X5, X14
	PSRLO  $12, X14
	MOVO   X6, X9
	PSLLO  $4, X9
	POR    X13, X9
	MOVO   X6, X13
	PSRLO  $12, X13
	MOVUPS (R12)(AX*4), X10
	ADDPS  X8, X10
	ADDPS  X2, X10
	MOVUPS X10, (R12)(AX*4)
	MOVUPS (R13)(AX*4), X11
	ADDPS  X9, X11
	ADDPS  X7, X11
	MOVUPS X11, (R13)(AX*4)
	ADDQ   $4, AX
	JMP    loop

done:
	MOVSS X14, 0(DX)
	MOVSS X13, 4(DX)
	RET
