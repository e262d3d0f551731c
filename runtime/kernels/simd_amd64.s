//go:build amd64 && !purego

#include "textflag.h"

// SSE2 kernels (the amd64 baseline, so no CPU feature check): four float32
// lanes per instruction for the transcendental-heavy elementwise kernels,
// where scalar Go spends ~10 ns per element. Each function handles
// len(x) &^ 3 elements; the Go wrappers finish the tail with the scalar
// code, which uses the same approximations (Erff, Expf).
//
// Constants live in simdConst, one value repeated in the four lanes of
// each 16-byte entry; R8 holds its address.

#define K_INVSQRT2 0(R8)
#define K_M4       16(R8)
#define K_P4       32(R8)
#define K_EP0      48(R8)
#define K_EP1      64(R8)
#define K_EP2      80(R8)
#define K_EP3      96(R8)
#define K_EP4      112(R8)
#define K_EP5      128(R8)
#define K_EP6      144(R8)
#define K_EQ0      160(R8)
#define K_EQ1      176(R8)
#define K_EQ2      192(R8)
#define K_EQ3      208(R8)
#define K_EQ4      224(R8)
#define K_HALF     240(R8)
#define K_MHALF    256(R8)
#define K_EXPLO    272(R8)
#define K_EXPHI    288(R8)
#define K_LOG2E    304(R8)
#define K_C1       320(R8)
#define K_C2       336(R8)
#define K_X0       352(R8)
#define K_X1       368(R8)
#define K_X2       384(R8)
#define K_X3       400(R8)
#define K_X4       416(R8)
#define K_X5       432(R8)
#define K_ONE      448(R8)
#define K_I127     464(R8)
#define K_INVSQRT2PI 480(R8)

// ERF sets X5 = erf(X1): Eigen's rational approximation p(x)/q(x) on
// [−4, 4] (±1 outside), as Erff. MAXPS/MINPS return their source operand
// when either is NaN, so the clamp keeps a NaN argument. Clobbers X2–X4,
// X6 and X9.
#define ERF \
	MOVUPS K_M4, X2; MAXPS X1, X2; \
	MOVUPS K_P4, X3; MINPS X2, X3; \
	MOVAPS X3, X4; MULPS X3, X4; \
	MOVUPS K_EP0, X5; \
	MULPS X4, X5; MOVUPS K_EP1, X9; ADDPS X9, X5; \
	MULPS X4, X5; MOVUPS K_EP2, X9; ADDPS X9, X5; \
	MULPS X4, X5; MOVUPS K_EP3, X9; ADDPS X9, X5; \
	MULPS X4, X5; MOVUPS K_EP4, X9; ADDPS X9, X5; \
	MULPS X4, X5; MOVUPS K_EP5, X9; ADDPS X9, X5; \
	MULPS X4, X5; MOVUPS K_EP6, X9; ADDPS X9, X5; \
	MULPS X3, X5; \
	MOVUPS K_EQ0, X6; \
	MULPS X4, X6; MOVUPS K_EQ1, X9; ADDPS X9, X6; \
	MULPS X4, X6; MOVUPS K_EQ2, X9; ADDPS X9, X6; \
	MULPS X4, X6; MOVUPS K_EQ3, X9; ADDPS X9, X6; \
	MULPS X4, X6; MOVUPS K_EQ4, X9; ADDPS X9, X6; \
	DIVPS X6, X5

// EXP sets X11 = e^X8 as Expf does (Cephes: n = round(x·log2 e),
// r = x − n·ln 2 in two parts, a degree-5 polynomial, times 2^n built in
// the exponent bits), for arguments up to 88 (larger ones are clamped to
// 88); arguments below −87.34 give 0 and NaN stays NaN. X8 is kept.
// Clobbers X9, X10 and X12–X14.
#define EXP \
	MOVUPS K_EXPLO, X10; MAXPS X8, X10; \
	MOVUPS K_EXPHI, X9; MINPS X10, X9; MOVAPS X9, X10; \
	MOVUPS K_LOG2E, X11; MULPS X10, X11; \
	CVTPS2PL X11, X12; CVTPL2PS X12, X13; \
	MOVUPS K_C1, X14; MULPS X13, X14; SUBPS X14, X10; \
	MOVUPS K_C2, X14; MULPS X13, X14; SUBPS X14, X10; \
	MOVUPS K_X0, X11; \
	MULPS X10, X11; MOVUPS K_X1, X9; ADDPS X9, X11; \
	MULPS X10, X11; MOVUPS K_X2, X9; ADDPS X9, X11; \
	MULPS X10, X11; MOVUPS K_X3, X9; ADDPS X9, X11; \
	MULPS X10, X11; MOVUPS K_X4, X9; ADDPS X9, X11; \
	MULPS X10, X11; MOVUPS K_X5, X9; ADDPS X9, X11; \
	MULPS X10, X11; MULPS X10, X11; ADDPS X10, X11; \
	MOVUPS K_ONE, X9; ADDPS X9, X11; \
	MOVUPS K_I127, X9; PADDL X9, X12; PSLLL $23, X12; MULPS X12, X11; \
	MOVUPS K_EXPLO, X14; MOVAPS X8, X9; CMPPS X14, X9, $1; \
	ANDNPS X11, X9; MOVAPS X9, X11

// func geluErfSSE(x, y []float32)
TEXT ·geluErfSSE(SB), NOSPLIT, $0-48
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	LEAQ simdConst<>(SB), R8
	ANDQ $-4, CX
	XORQ AX, AX

geluLoop:
	CMPQ AX, CX
	JGE  geluDone
	MOVUPS (SI)(AX*4), X0
	MOVUPS K_INVSQRT2, X1
	MULPS  X0, X1
	ERF
	// y = ½x + ½x·erf(x/√2)
	MOVUPS K_HALF, X7
	MULPS  X0, X7
	MULPS  X7, X5
	ADDPS  X7, X5
	MOVUPS X5, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    geluLoop

geluDone:
	RET

// func geluErfBackwardSSE(x, dy, dx []float32)
TEXT ·geluErfBackwardSSE(SB), NOSPLIT, $0-72
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ dy_base+24(FP), DX
	MOVQ dx_base+48(FP), DI
	LEAQ simdConst<>(SB), R8
	ANDQ $-4, CX
	XORQ AX, AX

geluBwdLoop:
	CMPQ AX, CX
	JGE  geluBwdDone
	MOVUPS (SI)(AX*4), X0
	MOVUPS K_INVSQRT2, X1
	MULPS  X0, X1
	ERF
	// X8 = −x²/2, X11 = e^X8
	MOVAPS X0, X8
	MULPS  X0, X8
	MOVUPS K_MHALF, X9
	MULPS  X9, X8
	EXP
	// Φ(x) = ½ + ½·erf(x/√2); x·φ(x) = x·e^(−x²/2)/√(2π)
	MOVUPS K_HALF, X7
	MULPS  X7, X5
	ADDPS  X7, X5
	MOVUPS K_INVSQRT2PI, X9
	MULPS  X9, X11
	MULPS  X0, X11
	ADDPS  X11, X5
	MOVUPS (DX)(AX*4), X6
	MULPS  X6, X5
	MOVUPS X5, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    geluBwdLoop

geluBwdDone:
	RET

// func expSSE(x, y []float32)
TEXT ·expSSE(SB), NOSPLIT, $0-48
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	LEAQ simdConst<>(SB), R8
	ANDQ $-4, CX
	XORQ AX, AX

expLoop:
	CMPQ AX, CX
	JGE  expDone
	MOVUPS (SI)(AX*4), X8
	EXP
	MOVUPS X11, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    expLoop

expDone:
	RET

DATA simdConst<>+0(SB)/8, $0x3f3504f33f3504f3 // INVSQRT2
DATA simdConst<>+8(SB)/8, $0x3f3504f33f3504f3
DATA simdConst<>+16(SB)/8, $0xc0800000c0800000 // M4
DATA simdConst<>+24(SB)/8, $0xc0800000c0800000
DATA simdConst<>+32(SB)/8, $0x4080000040800000 // P4
DATA simdConst<>+40(SB)/8, $0x4080000040800000
DATA simdConst<>+48(SB)/8, $0xaf95df0baf95df0b // EP0
DATA simdConst<>+56(SB)/8, $0xaf95df0baf95df0b
DATA simdConst<>+64(SB)/8, $0x32edffee32edffee // EP1
DATA simdConst<>+72(SB)/8, $0x32edffee32edffee
DATA simdConst<>+80(SB)/8, $0xb60cff51b60cff51 // EP2
DATA simdConst<>+88(SB)/8, $0xb60cff51b60cff51
DATA simdConst<>+96(SB)/8, $0xb86ec2d2b86ec2d2 // EP3
DATA simdConst<>+104(SB)/8, $0xb86ec2d2b86ec2d2
DATA simdConst<>+112(SB)/8, $0xba40ac63ba40ac63 // EP4
DATA simdConst<>+120(SB)/8, $0xba40ac63ba40ac63
DATA simdConst<>+128(SB)/8, $0xbb41a1f6bb41a1f6 // EP5
DATA simdConst<>+136(SB)/8, $0xbb41a1f6bb41a1f6
DATA simdConst<>+144(SB)/8, $0xbc83dbd4bc83dbd4 // EP6
DATA simdConst<>+152(SB)/8, $0xbc83dbd4bc83dbd4
DATA simdConst<>+160(SB)/8, $0xb77460cdb77460cd // EQ0
DATA simdConst<>+168(SB)/8, $0xb77460cdb77460cd
DATA simdConst<>+176(SB)/8, $0xb95fbd29b95fbd29 // EQ1
DATA simdConst<>+184(SB)/8, $0xb95fbd29b95fbd29
DATA simdConst<>+192(SB)/8, $0xbadc924ebadc924e // EQ2
DATA simdConst<>+200(SB)/8, $0xbadc924ebadc924e
DATA simdConst<>+208(SB)/8, $0xbbf19bf8bbf19bf8 // EQ3
DATA simdConst<>+216(SB)/8, $0xbbf19bf8bbf19bf8
DATA simdConst<>+224(SB)/8, $0xbc69b6a7bc69b6a7 // EQ4
DATA simdConst<>+232(SB)/8, $0xbc69b6a7bc69b6a7
DATA simdConst<>+240(SB)/8, $0x3f0000003f000000 // HALF
DATA simdConst<>+248(SB)/8, $0x3f0000003f000000
DATA simdConst<>+256(SB)/8, $0xbf000000bf000000 // MHALF
DATA simdConst<>+264(SB)/8, $0xbf000000bf000000
DATA simdConst<>+272(SB)/8, $0xc2aeac4fc2aeac4f // EXPLO
DATA simdConst<>+280(SB)/8, $0xc2aeac4fc2aeac4f
DATA simdConst<>+288(SB)/8, $0x42b0000042b00000 // EXPHI
DATA simdConst<>+296(SB)/8, $0x42b0000042b00000
DATA simdConst<>+304(SB)/8, $0x3fb8aa3b3fb8aa3b // LOG2E
DATA simdConst<>+312(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA simdConst<>+320(SB)/8, $0x3f3180003f318000 // C1
DATA simdConst<>+328(SB)/8, $0x3f3180003f318000
DATA simdConst<>+336(SB)/8, $0xb95e8083b95e8083 // C2
DATA simdConst<>+344(SB)/8, $0xb95e8083b95e8083
DATA simdConst<>+352(SB)/8, $0x3950696739506967 // X0
DATA simdConst<>+360(SB)/8, $0x3950696739506967
DATA simdConst<>+368(SB)/8, $0x3ab743ce3ab743ce // X1
DATA simdConst<>+376(SB)/8, $0x3ab743ce3ab743ce
DATA simdConst<>+384(SB)/8, $0x3c0889083c088908 // X2
DATA simdConst<>+392(SB)/8, $0x3c0889083c088908
DATA simdConst<>+400(SB)/8, $0x3d2aa9c13d2aa9c1 // X3
DATA simdConst<>+408(SB)/8, $0x3d2aa9c13d2aa9c1
DATA simdConst<>+416(SB)/8, $0x3e2aaaaa3e2aaaaa // X4
DATA simdConst<>+424(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA simdConst<>+432(SB)/8, $0x3f0000003f000000 // X5
DATA simdConst<>+440(SB)/8, $0x3f0000003f000000
DATA simdConst<>+448(SB)/8, $0x3f8000003f800000 // ONE
DATA simdConst<>+456(SB)/8, $0x3f8000003f800000
DATA simdConst<>+464(SB)/8, $0x0000007f0000007f // I127
DATA simdConst<>+472(SB)/8, $0x0000007f0000007f
DATA simdConst<>+480(SB)/8, $0x3ecc422a3ecc422a // INVSQRT2PI
DATA simdConst<>+488(SB)/8, $0x3ecc422a3ecc422a
GLOBL simdConst<>(SB), RODATA|NOPTR, $496

// func reluSSE(x, y []float32)
//
// y = max(0, x) on len(x) &^ 3 elements with MAXPS 0, x: MAXPS returns its
// source operand (x) when the two compare equal (±0) or either is a NaN,
// so the result is bit for bit unaryRange's "v < 0 → 0": negative values
// become +0, and -0 and NaN pass through. Branch-free, unlike the scalar
// loop, whose branch on the sign mispredicts on normalized activations.
TEXT ·reluSSE(SB), NOSPLIT, $0-48
	MOVQ  x_base+0(FP), SI
	MOVQ  x_len+8(FP), CX
	MOVQ  y_base+24(FP), DI
	ANDQ  $-8, CX
	XORQ  AX, AX
	XORPS X2, X2

reluLoop8:
	CMPQ   AX, CX
	JGE    reluTail
	MOVUPS (SI)(AX*4), X0
	MOVUPS 16(SI)(AX*4), X1
	MOVAPS X2, X3
	MOVAPS X2, X4
	MAXPS  X0, X3
	MAXPS  X1, X4
	MOVUPS X3, (DI)(AX*4)
	MOVUPS X4, 16(DI)(AX*4)
	ADDQ   $8, AX
	JMP    reluLoop8

reluTail:
	MOVQ x_len+8(FP), CX
	ANDQ $-4, CX
	CMPQ AX, CX
	JGE  reluDone
	MOVUPS (SI)(AX*4), X0
	MOVAPS X2, X3
	MAXPS  X0, X3
	MOVUPS X3, (DI)(AX*4)

reluDone:
	RET

// func reluGradSSE(y, dy, dx []float32)
//
// dx = dy where y > 0, else +0, on len(dy) &^ 3 elements: the mask of
// 0 < y (CMPPS, false for a NaN y) ANDed with dy's bits, bit for bit
// unaryGradRange's Relu case.
TEXT ·reluGradSSE(SB), NOSPLIT, $0-72
	MOVQ  y_base+0(FP), SI
	MOVQ  dy_base+24(FP), DX
	MOVQ  dy_len+32(FP), CX
	MOVQ  dx_base+48(FP), DI
	ANDQ  $-4, CX
	XORQ  AX, AX
	XORPS X2, X2

reluGradLoop:
	CMPQ   AX, CX
	JGE    reluGradDone
	MOVUPS (SI)(AX*4), X0
	MOVAPS X2, X1
	CMPPS  X0, X1, $1 // X1 = 0 < y
	MOVUPS (DX)(AX*4), X3
	ANDPS  X3, X1
	MOVUPS X1, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    reluGradLoop

reluGradDone:
	RET

// AVX2 forms of the transcendental kernels above: the same instructions on
// eight lanes (YMM) instead of four, each lane's operations and their
// order unchanged — no fused multiply-add — so that every element has the
// SSE kernels' bits (TestSIMDWidthsAgree). The constants are simdConst's,
// broadcast from the first lane of each entry. Each function handles
// len(x) &^ 7 elements; the Go wrappers give the rest to the SSE kernels
// and the scalar tail as before. Called only where cpufeat.AVX2 is set.

// ERF8 sets Y5 = erf(Y1) as ERF does (VMAXPS/VMINPS return their second
// source, the argument, where either is NaN, as MAXPS/MINPS do).
// Clobbers Y2–Y4, Y6 and Y9.
#define ERF8 \
	VBROADCASTSS K_M4, Y2; VMAXPS Y1, Y2, Y2; \
	VBROADCASTSS K_P4, Y3; VMINPS Y2, Y3, Y3; \
	VMULPS Y3, Y3, Y4; \
	VBROADCASTSS K_EP0, Y5; \
	VMULPS Y4, Y5, Y5; VBROADCASTSS K_EP1, Y9; VADDPS Y9, Y5, Y5; \
	VMULPS Y4, Y5, Y5; VBROADCASTSS K_EP2, Y9; VADDPS Y9, Y5, Y5; \
	VMULPS Y4, Y5, Y5; VBROADCASTSS K_EP3, Y9; VADDPS Y9, Y5, Y5; \
	VMULPS Y4, Y5, Y5; VBROADCASTSS K_EP4, Y9; VADDPS Y9, Y5, Y5; \
	VMULPS Y4, Y5, Y5; VBROADCASTSS K_EP5, Y9; VADDPS Y9, Y5, Y5; \
	VMULPS Y4, Y5, Y5; VBROADCASTSS K_EP6, Y9; VADDPS Y9, Y5, Y5; \
	VMULPS Y3, Y5, Y5; \
	VBROADCASTSS K_EQ0, Y6; \
	VMULPS Y4, Y6, Y6; VBROADCASTSS K_EQ1, Y9; VADDPS Y9, Y6, Y6; \
	VMULPS Y4, Y6, Y6; VBROADCASTSS K_EQ2, Y9; VADDPS Y9, Y6, Y6; \
	VMULPS Y4, Y6, Y6; VBROADCASTSS K_EQ3, Y9; VADDPS Y9, Y6, Y6; \
	VMULPS Y4, Y6, Y6; VBROADCASTSS K_EQ4, Y9; VADDPS Y9, Y6, Y6; \
	VDIVPS Y6, Y5, Y5

// EXP8 sets Y11 = e^Y8 as EXP does. Y8 is kept. Clobbers Y9, Y10 and
// Y12–Y14.
#define EXP8 \
	VBROADCASTSS K_EXPLO, Y10; VMAXPS Y8, Y10, Y10; \
	VBROADCASTSS K_EXPHI, Y9; VMINPS Y10, Y9, Y9; VMOVAPS Y9, Y10; \
	VBROADCASTSS K_LOG2E, Y11; VMULPS Y10, Y11, Y11; \
	VCVTPS2DQ Y11, Y12; VCVTDQ2PS Y12, Y13; \
	VBROADCASTSS K_C1, Y14; VMULPS Y13, Y14, Y14; VSUBPS Y14, Y10, Y10; \
	VBROADCASTSS K_C2, Y14; VMULPS Y13, Y14, Y14; VSUBPS Y14, Y10, Y10; \
	VBROADCASTSS K_X0, Y11; \
	VMULPS Y10, Y11, Y11; VBROADCASTSS K_X1, Y9; VADDPS Y9, Y11, Y11; \
	VMULPS Y10, Y11, Y11; VBROADCASTSS K_X2, Y9; VADDPS Y9, Y11, Y11; \
	VMULPS Y10, Y11, Y11; VBROADCASTSS K_X3, Y9; VADDPS Y9, Y11, Y11; \
	VMULPS Y10, Y11, Y11; VBROADCASTSS K_X4, Y9; VADDPS Y9, Y11, Y11; \
	VMULPS Y10, Y11, Y11; VBROADCASTSS K_X5, Y9; VADDPS Y9, Y11, Y11; \
	VMULPS Y10, Y11, Y11; VMULPS Y10, Y11, Y11; VADDPS Y10, Y11, Y11; \
	VBROADCASTSS K_ONE, Y9; VADDPS Y9, Y11, Y11; \
	VBROADCASTSS K_I127, Y9; VPADDD Y9, Y12, Y12; VPSLLD $23, Y12, Y12; VMULPS Y12, Y11, Y11; \
	VBROADCASTSS K_EXPLO, Y14; VCMPPS $1, Y14, Y8, Y9; \
	VANDNPS Y11, Y9, Y11

// func geluErfAVX2(x, y []float32)
TEXT ·geluErfAVX2(SB), NOSPLIT, $0-48
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	LEAQ simdConst<>(SB), R8
	ANDQ $-8, CX
	XORQ AX, AX

gelu8Loop:
	CMPQ AX, CX
	JGE  gelu8Done
	VMOVUPS (SI)(AX*4), Y0
	VBROADCASTSS K_INVSQRT2, Y1
	VMULPS Y0, Y1, Y1
	ERF8
	// y = ½x + ½x·erf(x/√2)
	VBROADCASTSS K_HALF, Y7
	VMULPS Y0, Y7, Y7
	VMULPS Y7, Y5, Y5
	VADDPS Y7, Y5, Y5
	VMOVUPS Y5, (DI)(AX*4)
	ADDQ $8, AX
	JMP  gelu8Loop

gelu8Done:
	VZEROUPPER
	RET

// func geluErfBackwardAVX2(x, dy, dx []float32)
TEXT ·geluErfBackwardAVX2(SB), NOSPLIT, $0-72
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ dy_base+24(FP), DX
	MOVQ dx_base+48(FP), DI
	LEAQ simdConst<>(SB), R8
	ANDQ $-8, CX
	XORQ AX, AX

geluBwd8Loop:
	CMPQ AX, CX
	JGE  geluBwd8Done
	VMOVUPS (SI)(AX*4), Y0
	VBROADCASTSS K_INVSQRT2, Y1
	VMULPS Y0, Y1, Y1
	ERF8
	// Y8 = −x²/2, Y11 = e^Y8
	VMULPS Y0, Y0, Y8
	VBROADCASTSS K_MHALF, Y9
	VMULPS Y9, Y8, Y8
	EXP8
	// Φ(x) = ½ + ½·erf(x/√2); x·φ(x) = x·e^(−x²/2)/√(2π)
	VBROADCASTSS K_HALF, Y7
	VMULPS Y7, Y5, Y5
	VADDPS Y7, Y5, Y5
	VBROADCASTSS K_INVSQRT2PI, Y9
	VMULPS Y9, Y11, Y11
	VMULPS Y0, Y11, Y11
	VADDPS Y11, Y5, Y5
	VMOVUPS (DX)(AX*4), Y6
	VMULPS Y6, Y5, Y5
	VMOVUPS Y5, (DI)(AX*4)
	ADDQ $8, AX
	JMP  geluBwd8Loop

geluBwd8Done:
	VZEROUPPER
	RET

// func expAVX2(x, y []float32)
TEXT ·expAVX2(SB), NOSPLIT, $0-48
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	LEAQ simdConst<>(SB), R8
	ANDQ $-8, CX
	XORQ AX, AX

exp8Loop:
	CMPQ AX, CX
	JGE  exp8Done
	VMOVUPS (SI)(AX*4), Y8
	EXP8
	VMOVUPS Y11, (DI)(AX*4)
	ADDQ $8, AX
	JMP  exp8Loop

exp8Done:
	VZEROUPPER
	RET

// The normalizations' elementwise passes (graphnn.go: RowNormForward's
// affine, RowNormBackward's dx), four lanes at a time on len(x) &^ 3
// elements: the scalar code's float32 operations in its order, no fused
// multiply-add, so every element keeps its bits.

// func normScaleSSE(x, y []float32, m, iv, sc float32)
//
// y = ((x − m)·iv)·sc.
TEXT ·normScaleSSE(SB), NOSPLIT, $0-60
	MOVQ   x_base+0(FP), SI
	MOVQ   x_len+8(FP), CX
	MOVQ   y_base+24(FP), DI
	MOVSS  m+48(FP), X4
	SHUFPS $0, X4, X4
	MOVSS  iv+52(FP), X5
	SHUFPS $0, X5, X5
	MOVSS  sc+56(FP), X6
	SHUFPS $0, X6, X6
	ANDQ   $-4, CX
	XORQ   AX, AX

normScaleLoop:
	CMPQ   AX, CX
	JGE    normScaleDone
	MOVUPS (SI)(AX*4), X0
	SUBPS  X4, X0
	MULPS  X5, X0
	MULPS  X6, X0
	MOVUPS X0, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    normScaleLoop

normScaleDone:
	RET

// func normAffineSSE(x, y []float32, m, iv, sc, b float32)
//
// y = ((x − m)·iv)·sc + b.
TEXT ·normAffineSSE(SB), NOSPLIT, $0-64
	MOVQ   x_base+0(FP), SI
	MOVQ   x_len+8(FP), CX
	MOVQ   y_base+24(FP), DI
	MOVSS  m+48(FP), X4
	SHUFPS $0, X4, X4
	MOVSS  iv+52(FP), X5
	SHUFPS $0, X5, X5
	MOVSS  sc+56(FP), X6
	SHUFPS $0, X6, X6
	MOVSS  b+60(FP), X7
	SHUFPS $0, X7, X7
	ANDQ   $-4, CX
	XORQ   AX, AX

normAffineLoop:
	CMPQ   AX, CX
	JGE    normAffineDone
	MOVUPS (SI)(AX*4), X0
	SUBPS  X4, X0
	MULPS  X5, X0
	MULPS  X6, X0
	ADDPS  X7, X0
	MOVUPS X0, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    normAffineLoop

normAffineDone:
	RET

// func normScaleVecSSE(x, scale, y []float32, m, iv float32)
//
// y = ((x − m)·iv)·scale, element by element.
TEXT ·normScaleVecSSE(SB), NOSPLIT, $0-80
	MOVQ   x_base+0(FP), SI
	MOVQ   x_len+8(FP), CX
	MOVQ   scale_base+24(FP), DX
	MOVQ   y_base+48(FP), DI
	MOVSS  m+72(FP), X4
	SHUFPS $0, X4, X4
	MOVSS  iv+76(FP), X5
	SHUFPS $0, X5, X5
	ANDQ   $-4, CX
	XORQ   AX, AX

normScaleVecLoop:
	CMPQ   AX, CX
	JGE    normScaleVecDone
	MOVUPS (SI)(AX*4), X0
	MOVUPS (DX)(AX*4), X1
	SUBPS  X4, X0
	MULPS  X5, X0
	MULPS  X1, X0
	MOVUPS X0, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    normScaleVecLoop

normScaleVecDone:
	RET

// func normAffineVecSSE(x, scale, bias, y []float32, m, iv float32)
//
// y = ((x − m)·iv)·scale + bias, element by element.
TEXT ·normAffineVecSSE(SB), NOSPLIT, $0-104
	MOVQ   x_base+0(FP), SI
	MOVQ   x_len+8(FP), CX
	MOVQ   scale_base+24(FP), DX
	MOVQ   bias_base+48(FP), BX
	MOVQ   y_base+72(FP), DI
	MOVSS  m+96(FP), X4
	SHUFPS $0, X4, X4
	MOVSS  iv+100(FP), X5
	SHUFPS $0, X5, X5
	ANDQ   $-4, CX
	XORQ   AX, AX

normAffineVecLoop:
	CMPQ   AX, CX
	JGE    normAffineVecDone
	MOVUPS (SI)(AX*4), X0
	MOVUPS (DX)(AX*4), X1
	MOVUPS (BX)(AX*4), X2
	SUBPS  X4, X0
	MULPS  X5, X0
	MULPS  X1, X0
	ADDPS  X2, X0
	MOVUPS X0, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    normAffineVecLoop

normAffineVecDone:
	RET

// func normBackSSE(x, g, dx []float32, m, iv, sc, mg, mgx float32)
//
// dx = iv·((g·sc − mg) − ((x − m)·iv)·mgx).
TEXT ·normBackSSE(SB), NOSPLIT, $0-92
	MOVQ   x_base+0(FP), SI
	MOVQ   x_len+8(FP), CX
	MOVQ   g_base+24(FP), DX
	MOVQ   dx_base+48(FP), DI
	MOVSS  m+72(FP), X4
	SHUFPS $0, X4, X4
	MOVSS  iv+76(FP), X5
	SHUFPS $0, X5, X5
	MOVSS  sc+80(FP), X6
	SHUFPS $0, X6, X6
	MOVSS  mg+84(FP), X7
	SHUFPS $0, X7, X7
	MOVSS  mgx+88(FP), X8
	SHUFPS $0, X8, X8
	ANDQ   $-4, CX
	XORQ   AX, AX

normBackLoop:
	CMPQ   AX, CX
	JGE    normBackDone
	MOVUPS (SI)(AX*4), X0
	MOVUPS (DX)(AX*4), X1
	SUBPS  X4, X0
	MULPS  X5, X0
	MULPS  X8, X0
	MULPS  X6, X1
	SUBPS  X7, X1
	SUBPS  X0, X1
	MULPS  X5, X1
	MOVUPS X1, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    normBackLoop

normBackDone:
	RET

// func normBackVecSSE(x, g, scale, dx []float32, m, iv, mg, mgx float32)
//
// dx = iv·((g·scale − mg) − ((x − m)·iv)·mgx), element by element.
TEXT ·normBackVecSSE(SB), NOSPLIT, $0-112
	MOVQ   x_base+0(FP), SI
	MOVQ   x_len+8(FP), CX
	MOVQ   g_base+24(FP), DX
	MOVQ   scale_base+48(FP), BX
	MOVQ   dx_base+72(FP), DI
	MOVSS  m+96(FP), X4
	SHUFPS $0, X4, X4
	MOVSS  iv+100(FP), X5
	SHUFPS $0, X5, X5
	MOVSS  mg+104(FP), X7
	SHUFPS $0, X7, X7
	MOVSS  mgx+108(FP), X8
	SHUFPS $0, X8, X8
	ANDQ   $-4, CX
	XORQ   AX, AX

normBackVecLoop:
	CMPQ   AX, CX
	JGE    normBackVecDone
	MOVUPS (SI)(AX*4), X0
	MOVUPS (DX)(AX*4), X1
	MOVUPS (BX)(AX*4), X2
	SUBPS  X4, X0
	MULPS  X5, X0
	MULPS  X8, X0
	MULPS  X2, X1
	SUBPS  X7, X1
	SUBPS  X0, X1
	MULPS  X5, X1
	MOVUPS X1, (DI)(AX*4)
	ADDQ   $4, AX
	JMP    normBackVecLoop

normBackVecDone:
	RET
