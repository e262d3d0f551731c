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

// func maxPoolRow2x2S1SSE(r0, r1 []float32, base int32, yr []float32, ar []int32) float32
//
// maxPoolRow2x2's loop for stride 1 on the first len(yr) &^ 3 outputs,
// four windows per step, branch-free: the windows' taps a = r0[j],
// b = r0[j+1], c = r1[j], d = r1[j+1] are four unaligned loads; the
// selects "b > a", "d > c", then "cd > ab" (CMPPS less-than, so ties keep
// the earlier tap, and the winner's bits are ANDed and ORed through as the
// Go code carries them) pick the value and its offset 0, 1, W or W+1,
// stored as base + j + offset. It returns the sum of every tap (the lanes
// in their own order), which is NaN when a tap is NaN (or +Inf meets
// −Inf), as the Go loop's sum is: the caller then redoes the row by the
// NaN rule. r0 and r1 are two consecutive input rows of W = len(r0)
// elements (base the flat index of r0[0], r1's W further); the caller
// checks the lengths: W ≥ len(yr)+1, len(r1) ≥ W, len(ar) ≥ len(yr) &^ 3
// or ar empty (no argmax stored).
TEXT ·maxPoolRow2x2S1SSE(SB), NOSPLIT, $0-108
	MOVQ r0_base+0(FP), SI
	MOVQ r1_base+24(FP), DX
	MOVQ r0_len+8(FP), R10          // R10 = W
	MOVL base+48(FP), R9
	MOVQ yr_base+56(FP), DI
	MOVQ yr_len+64(FP), CX
	MOVQ ar_base+80(FP), R8
	MOVQ ar_len+88(FP), R11         // 0: no argmax to store
	ANDQ $-4, CX
	XORQ AX, AX
	XORPS X15, X15                  // tap sums
	MOVQ R10, X14
	PSHUFD $0, X14, X14             // X14 = W in each lane
	MOVQ R9, X13
	PSHUFD $0, X13, X13
	MOVOU mpIota<>(SB), X12
	PADDL X12, X13                  // X13 = base + j + lane
	MOVOU mpFour<>(SB), X12

mpLoop:
	CMPQ   AX, CX
	JGE    mpDone
	MOVUPS (SI)(AX*4), X0           // a
	MOVUPS 4(SI)(AX*4), X1          // b
	MOVUPS (DX)(AX*4), X2           // c
	MOVUPS 4(DX)(AX*4), X3          // d
	MOVAPS X0, X4
	ADDPS  X1, X4
	ADDPS  X2, X4
	ADDPS  X3, X4
	ADDPS  X4, X15

	// ab = b > a ? b : a, ka = b > a ? 1 : 0
	MOVAPS X0, X4
	CMPPS  X1, X4, $1               // X4 = a < b
	MOVAPS X4, X5
	ANDPS  X1, X5
	MOVAPS X4, X6
	ANDNPS X0, X6
	ORPS   X6, X5                   // X5 = ab
	PXOR   X7, X7
	PSUBL  X4, X7                   // X7 = ka

	// cd = d > c ? d : c, kc = W + (d > c ? 1 : 0)
	MOVAPS X2, X8
	CMPPS  X3, X8, $1               // X8 = c < d
	MOVAPS X8, X9
	ANDPS  X3, X9
	MOVAPS X8, X10
	ANDNPS X2, X10
	ORPS   X10, X9                  // X9 = cd
	MOVOU  X14, X10
	PSUBL  X8, X10                  // X10 = kc

	// cd > ab ? (cd, kc) : (ab, ka)
	MOVAPS X5, X11
	CMPPS  X9, X11, $1              // X11 = ab < cd
	MOVAPS X11, X6
	ANDPS  X9, X6
	MOVAPS X11, X8
	ANDNPS X5, X8
	ORPS   X8, X6                   // X6 = y
	PAND   X11, X10
	PANDN  X7, X11
	POR    X11, X10                 // X10 = offset
	PADDL  X13, X10
	MOVUPS X6, (DI)(AX*4)
	TESTQ  R11, R11
	JZ     mpNext
	MOVOU  X10, (R8)(AX*4)

mpNext:
	PADDL  X12, X13
	ADDQ   $4, AX
	JMP    mpLoop

mpDone:
	MOVAPS X15, X0
	SHUFPS $0x4e, X0, X0
	ADDPS  X0, X15
	MOVAPS X15, X0
	SHUFPS $0xb1, X0, X0
	ADDPS  X0, X15
	MOVSS  X15, ret+104(FP)
	RET

DATA mpIota<>+0(SB)/4, $0
DATA mpIota<>+4(SB)/4, $1
DATA mpIota<>+8(SB)/4, $2
DATA mpIota<>+12(SB)/4, $3
GLOBL mpIota<>(SB), RODATA|NOPTR, $16

DATA mpFour<>+0(SB)/4, $4
DATA mpFour<>+4(SB)/4, $4
DATA mpFour<>+8(SB)/4, $4
DATA mpFour<>+12(SB)/4, $4
GLOBL mpFour<>(SB), RODATA|NOPTR, $16
