//go:build amd64 && !purego

#include "textflag.h"

// encryptBlocksAESNI: AES-128 on independent blocks in place, eight at a
// time (X0–X7) so that AESENC's latency is hidden behind the other seven
// (two issue per cycle here); each round key is loaded into X8 in turn.
// The last up to seven blocks go one at a time.

#define ROUND8(off) \
	MOVUPS off(AX), X8; \
	AESENC X8, X0; \
	AESENC X8, X1; \
	AESENC X8, X2; \
	AESENC X8, X3; \
	AESENC X8, X4; \
	AESENC X8, X5; \
	AESENC X8, X6; \
	AESENC X8, X7

#define ROUND1(off) \
	MOVUPS off(AX), X8; \
	AESENC X8, X0

// func encryptBlocksAESNI(rk *roundKeys, bs *block, n int)
TEXT ·encryptBlocksAESNI(SB), NOSPLIT, $0-24
	MOVQ rk+0(FP), AX
	MOVQ bs+8(FP), BX
	MOVQ n+16(FP), CX

eight:
	CMPQ       CX, $8
	JB         one
	MOVUPS     0(AX), X8
	MOVUPS     0(BX), X0
	MOVUPS     16(BX), X1
	MOVUPS     32(BX), X2
	MOVUPS     48(BX), X3
	MOVUPS     64(BX), X4
	MOVUPS     80(BX), X5
	MOVUPS     96(BX), X6
	MOVUPS     112(BX), X7
	PXOR       X8, X0
	PXOR       X8, X1
	PXOR       X8, X2
	PXOR       X8, X3
	PXOR       X8, X4
	PXOR       X8, X5
	PXOR       X8, X6
	PXOR       X8, X7
	ROUND8(16)
	ROUND8(32)
	ROUND8(48)
	ROUND8(64)
	ROUND8(80)
	ROUND8(96)
	ROUND8(112)
	ROUND8(128)
	ROUND8(144)
	MOVUPS     160(AX), X8
	AESENCLAST X8, X0
	AESENCLAST X8, X1
	AESENCLAST X8, X2
	AESENCLAST X8, X3
	AESENCLAST X8, X4
	AESENCLAST X8, X5
	AESENCLAST X8, X6
	AESENCLAST X8, X7
	MOVUPS     X0, 0(BX)
	MOVUPS     X1, 16(BX)
	MOVUPS     X2, 32(BX)
	MOVUPS     X3, 48(BX)
	MOVUPS     X4, 64(BX)
	MOVUPS     X5, 80(BX)
	MOVUPS     X6, 96(BX)
	MOVUPS     X7, 112(BX)
	ADDQ       $128, BX
	SUBQ       $8, CX
	JMP        eight

one:
	TESTQ      CX, CX
	JZ         done
	MOVUPS     0(AX), X8
	MOVUPS     0(BX), X0
	PXOR       X8, X0
	ROUND1(16)
	ROUND1(32)
	ROUND1(48)
	ROUND1(64)
	ROUND1(80)
	ROUND1(96)
	ROUND1(112)
	ROUND1(128)
	ROUND1(144)
	MOVUPS     160(AX), X8
	AESENCLAST X8, X0
	MOVUPS     X0, 0(BX)
	ADDQ       $16, BX
	DECQ       CX
	JMP        one

done:
	RET
