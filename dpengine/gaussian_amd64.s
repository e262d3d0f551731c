//go:build amd64 && !purego

#include "textflag.h"

// zigFastSSE: the ziggurat's fast path (gaussianInto, gaussian.go) on four
// float32 lanes with SSE2, the amd64 baseline, so no CPU feature check.
// The layer indices are the low bytes of the words, read straight from
// memory; each lane's (zigK, zigW) pair is one 8-byte load from the
// interleaved table zigKW, transposed into a K vector and a W vector. The
// acceptance test m < K is a signed compare (both are below 2²³). Then
// z = float32(m)·W with the sign bit XORed in, and x ← (x + std·z)·post:
// CVTPL2PS, MULPS, PXOR, MULPS, ADDPS, MULPS, the operations of the scalar
// loop, so the results agree bit for bit. In a group with a draw outside
// its rectangle (about 6 % of groups) the other lanes are stored through a
// mask, and the outside ones keep x and have their index appended to slow.

// ZIG_GROUP sets X1 to the lanes' acceptance mask, X5 to their signed
// std·z and X6 to (x + std·z)·post for the group at CX; AX gets the mask's
// sign bits.
#define ZIG_GROUP \
	MOVBLZX 0(SI)(CX*4), R9; \
	MOVBLZX 4(SI)(CX*4), R10; \
	MOVBLZX 8(SI)(CX*4), R11; \
	MOVBLZX 12(SI)(CX*4), R12; \
	MOVQ    (R8)(R9*8), X1; \
	MOVQ    (R8)(R10*8), X2; \
	MOVQ    (R8)(R11*8), X3; \
	MOVQ    (R8)(R12*8), X4; \
	PUNPCKLLQ X2, X1; \
	PUNPCKLLQ X4, X3; \
	MOVO    X1, X2; \
	PUNPCKLQDQ X3, X1; \
	PUNPCKHQDQ X3, X2; \
	MOVOU   (SI)(CX*4), X0; \
	MOVO    X0, X5; \
	PSRLL   $9, X5; \
	PCMPGTL X5, X1; \
	MOVMSKPS X1, AX; \
	CVTPL2PS X5, X5; \
	MULPS   X2, X5; \
	PAND    X12, X0; \
	PSLLL   $23, X0; \
	PXOR    X0, X5; \
	MULPS   X14, X5; \
	MOVUPS  (DI)(CX*4), X6; \
	ADDPS   X5, X6; \
	MULPS   X13, X6

// func zigFastSSE(words []uint32, x []float32, tab *[256][2]uint32, std, post float32, slow []int32) int
TEXT ·zigFastSSE(SB), NOSPLIT, $0-96
	MOVQ   words_base+0(FP), SI
	MOVQ   words_len+8(FP), BX
	MOVQ   x_base+24(FP), DI
	MOVQ   tab+48(FP), R8
	MOVSS  std+56(FP), X14
	SHUFPS $0, X14, X14
	MOVSS  post+60(FP), X13
	SHUFPS $0, X13, X13
	MOVQ   slow_base+64(FP), R13
	MOVL   $0x100, AX
	MOVL   AX, X12
	PSHUFL $0, X12, X12 // the sign bit of the words
	ANDQ   $-4, BX
	XORQ   CX, CX
	XORQ   DX, DX       // slow draws so far

loop:
	CMPQ CX, BX
	JGE  done
	ZIG_GROUP
	CMPL   AX, $15
	JNE    mixed
	MOVUPS X6, (DI)(CX*4)
	ADDQ   $4, CX
	JMP    loop

mixed:
	// Store the accepted lanes only.
	MOVUPS (DI)(CX*4), X7
	PAND   X1, X6
	PANDN  X7, X1
	POR    X1, X6
	MOVUPS X6, (DI)(CX*4)
	XORL   $15, AX      // the rejected lanes

record:
	BSFL AX, R9
	LEAQ (CX)(R9*1), R10
	MOVL R10, (R13)(DX*4)
	INCQ DX
	LEAL -1(AX), R9
	ANDL R9, AX
	JNE  record
	ADDQ $4, CX
	JMP  loop

done:
	MOVQ DX, ret+88(FP)
	RET
