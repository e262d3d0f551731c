//go:build amd64 && !purego

#include "textflag.h"

// encryptBlocksAESNI: AES-128 on independent blocks in place. The eleven
// round keys stay in X0–X10; four blocks (X11–X14) go through each round
// together, so that AESENC's latency is hidden behind the other three.

#define ROUND4(k) \
	AESENC k, X11; \
	AESENC k, X12; \
	AESENC k, X13; \
	AESENC k, X14

#define ROUND1(k) \
	AESENC k, X11

// func encryptBlocksAESNI(rk *roundKeys, bs *block, n int)
TEXT ·encryptBlocksAESNI(SB), NOSPLIT, $0-24
	MOVQ   rk+0(FP), AX
	MOVQ   bs+8(FP), BX
	MOVQ   n+16(FP), CX
	MOVUPS 0(AX), X0
	MOVUPS 16(AX), X1
	MOVUPS 32(AX), X2
	MOVUPS 48(AX), X3
	MOVUPS 64(AX), X4
	MOVUPS 80(AX), X5
	MOVUPS 96(AX), X6
	MOVUPS 112(AX), X7
	MOVUPS 128(AX), X8
	MOVUPS 144(AX), X9
	MOVUPS 160(AX), X10

four:
	CMPQ       CX, $4
	JB         one
	MOVUPS     0(BX), X11
	MOVUPS     16(BX), X12
	MOVUPS     32(BX), X13
	MOVUPS     48(BX), X14
	PXOR       X0, X11
	PXOR       X0, X12
	PXOR       X0, X13
	PXOR       X0, X14
	ROUND4(X1)
	ROUND4(X2)
	ROUND4(X3)
	ROUND4(X4)
	ROUND4(X5)
	ROUND4(X6)
	ROUND4(X7)
	ROUND4(X8)
	ROUND4(X9)
	AESENCLAST X10, X11
	AESENCLAST X10, X12
	AESENCLAST X10, X13
	AESENCLAST X10, X14
	MOVUPS     X11, 0(BX)
	MOVUPS     X12, 16(BX)
	MOVUPS     X13, 32(BX)
	MOVUPS     X14, 48(BX)
	ADDQ       $64, BX
	SUBQ       $4, CX
	JMP        four

one:
	TESTQ      CX, CX
	JZ         done
	MOVUPS     0(BX), X11
	PXOR       X0, X11
	ROUND1(X1)
	ROUND1(X2)
	ROUND1(X3)
	ROUND1(X4)
	ROUND1(X5)
	ROUND1(X6)
	ROUND1(X7)
	ROUND1(X8)
	ROUND1(X9)
	AESENCLAST X10, X11
	MOVUPS     X11, 0(BX)
	ADDQ       $16, BX
	DECQ       CX
	JMP        one

done:
	RET
