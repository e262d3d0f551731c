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

// ctrVAES: the counter-mode keystream of domain 0, sixteen blocks an
// iteration on ZMM registers (VAES: four blocks an instruction), the
// round keys broadcast into Z16–Z26. The four counters of a register are
// kept as native quadwords (step, block) in Z28 and turned into the
// big-endian counter blocks by a byte shuffle per quadword (Z27); only
// the block quadword is incremented, which is the 128-bit increment of
// counter mode as long as it does not wrap (indices stay below 2⁴⁸).

DATA ctrBswap<>+0(SB)/8, $0x0001020304050607
DATA ctrBswap<>+8(SB)/8, $0x08090a0b0c0d0e0f
DATA ctrBswap<>+16(SB)/8, $0x0001020304050607
DATA ctrBswap<>+24(SB)/8, $0x08090a0b0c0d0e0f
DATA ctrBswap<>+32(SB)/8, $0x0001020304050607
DATA ctrBswap<>+40(SB)/8, $0x08090a0b0c0d0e0f
DATA ctrBswap<>+48(SB)/8, $0x0001020304050607
DATA ctrBswap<>+56(SB)/8, $0x08090a0b0c0d0e0f
GLOBL ctrBswap<>(SB), RODATA|NOPTR, $64

DATA ctrStep4<>+0(SB)/8, $0
DATA ctrStep4<>+8(SB)/8, $4
DATA ctrStep4<>+16(SB)/8, $0
DATA ctrStep4<>+24(SB)/8, $4
DATA ctrStep4<>+32(SB)/8, $0
DATA ctrStep4<>+40(SB)/8, $4
DATA ctrStep4<>+48(SB)/8, $0
DATA ctrStep4<>+56(SB)/8, $4
GLOBL ctrStep4<>(SB), RODATA|NOPTR, $64

// func ctrVAES(rk *roundKeys, ctr *[8]uint64, dst *byte, n int)
//
// dst receives n blocks (n a multiple of 4) of E(counter), the counters
// of the first four blocks given as native quadwords (step, block) in
// ctr, each later one the block quadword plus one. Only call it when
// haveVAES.
TEXT ·ctrVAES(SB), NOSPLIT, $0-32
	MOVQ rk+0(FP), AX
	MOVQ ctr+8(FP), BX
	MOVQ dst+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTI32X4 0(AX), Z16
	VBROADCASTI32X4 16(AX), Z17
	VBROADCASTI32X4 32(AX), Z18
	VBROADCASTI32X4 48(AX), Z19
	VBROADCASTI32X4 64(AX), Z20
	VBROADCASTI32X4 80(AX), Z21
	VBROADCASTI32X4 96(AX), Z22
	VBROADCASTI32X4 112(AX), Z23
	VBROADCASTI32X4 128(AX), Z24
	VBROADCASTI32X4 144(AX), Z25
	VBROADCASTI32X4 160(AX), Z26
	VMOVDQU64 ctrBswap<>(SB), Z27
	VMOVDQU64 (BX), Z28
	VMOVDQU64 ctrStep4<>(SB), Z29

sixteen:
	CMPQ CX, $16
	JB four
	VPSHUFB Z27, Z28, Z0
	VPADDQ Z29, Z28, Z28
	VPSHUFB Z27, Z28, Z1
	VPADDQ Z29, Z28, Z28
	VPSHUFB Z27, Z28, Z2
	VPADDQ Z29, Z28, Z28
	VPSHUFB Z27, Z28, Z3
	VPADDQ Z29, Z28, Z28
	VPXORQ Z16, Z0, Z0
	VPXORQ Z16, Z1, Z1
	VPXORQ Z16, Z2, Z2
	VPXORQ Z16, Z3, Z3
	VAESENC Z17, Z0, Z0
	VAESENC Z17, Z1, Z1
	VAESENC Z17, Z2, Z2
	VAESENC Z17, Z3, Z3
	VAESENC Z18, Z0, Z0
	VAESENC Z18, Z1, Z1
	VAESENC Z18, Z2, Z2
	VAESENC Z18, Z3, Z3
	VAESENC Z19, Z0, Z0
	VAESENC Z19, Z1, Z1
	VAESENC Z19, Z2, Z2
	VAESENC Z19, Z3, Z3
	VAESENC Z20, Z0, Z0
	VAESENC Z20, Z1, Z1
	VAESENC Z20, Z2, Z2
	VAESENC Z20, Z3, Z3
	VAESENC Z21, Z0, Z0
	VAESENC Z21, Z1, Z1
	VAESENC Z21, Z2, Z2
	VAESENC Z21, Z3, Z3
	VAESENC Z22, Z0, Z0
	VAESENC Z22, Z1, Z1
	VAESENC Z22, Z2, Z2
	VAESENC Z22, Z3, Z3
	VAESENC Z23, Z0, Z0
	VAESENC Z23, Z1, Z1
	VAESENC Z23, Z2, Z2
	VAESENC Z23, Z3, Z3
	VAESENC Z24, Z0, Z0
	VAESENC Z24, Z1, Z1
	VAESENC Z24, Z2, Z2
	VAESENC Z24, Z3, Z3
	VAESENC Z25, Z0, Z0
	VAESENC Z25, Z1, Z1
	VAESENC Z25, Z2, Z2
	VAESENC Z25, Z3, Z3
	VAESENCLAST Z26, Z0, Z0
	VAESENCLAST Z26, Z1, Z1
	VAESENCLAST Z26, Z2, Z2
	VAESENCLAST Z26, Z3, Z3
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z2, 128(DI)
	VMOVDQU64 Z3, 192(DI)
	ADDQ $256, DI
	SUBQ $16, CX
	JMP sixteen

four:
	CMPQ CX, $4
	JB done
	VPSHUFB Z27, Z28, Z0
	VPADDQ Z29, Z28, Z28
	VPXORQ Z16, Z0, Z0
	VAESENC Z17, Z0, Z0
	VAESENC Z18, Z0, Z0
	VAESENC Z19, Z0, Z0
	VAESENC Z20, Z0, Z0
	VAESENC Z21, Z0, Z0
	VAESENC Z22, Z0, Z0
	VAESENC Z23, Z0, Z0
	VAESENC Z24, Z0, Z0
	VAESENC Z25, Z0, Z0
	VAESENCLAST Z26, Z0, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ $64, DI
	SUBQ $4, CX
	JMP four

done:
	VZEROUPPER
	RET
