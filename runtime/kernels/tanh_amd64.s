//go:build amd64 && !purego

#include "textflag.h"

// tanhSSE: tanhScalar (fastmath.go) on four float32 lanes with SSE2, the
// amd64 baseline, so no CPU feature check. It performs the same IEEE
// operations in the same order as tanhScalar (MINPS on the clamp, then
// MULPS/ADDPS/SUBPS/DIVPS where the Go code multiplies, adds, subtracts
// and divides), so the results agree bit for bit. Constants live in
// tanhConst, one value in the four lanes of each 16-byte entry, as the
// float32 bit patterns of tanhScalar's constants; R8 holds its address.

#define T_ABS      0(R8)
#define T_SIGN     16(R8)
#define T_TWENTY   32(R8)
#define T_LOG2E    48(R8)
#define T_HALF     64(R8)
#define T_MAGIC    80(R8)
#define T_C1       96(R8)
#define T_C2       112(R8)
#define T_P9       128(R8)
#define T_P8       144(R8)
#define T_P7       160(R8)
#define T_P6       176(R8)
#define T_P5       192(R8)
#define T_P4       208(R8)
#define T_P3       224(R8)
#define T_P2       240(R8)
#define T_EXPBIAS  256(R8)
#define T_ONE      272(R8)
#define T_TWO      288(R8)

// func tanhSSE(x, y []float32)
TEXT ·tanhSSE(SB), NOSPLIT, $0-48
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	LEAQ tanhConst<>(SB), R8
	ANDQ $-4, CX
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE  done
	MOVUPS (SI)(AX*4), X0            // x

	// t = 2·min(|x|, 20): MINPS returns its second operand (20) when
	// the first is NaN, like the integer min on the bits in Go.
	MOVUPS T_ABS, X1
	ANDPS  X0, X1
	MOVUPS T_TWENTY, X2
	MINPS  X2, X1
	ADDPS  X1, X1                    // X1 = t

	// fn = (t·log2e − 0.5) + magic, nf = fn − magic
	MOVUPS T_LOG2E, X4
	MULPS  X1, X4
	MOVUPS T_HALF, X2
	SUBPS  X2, X4
	MOVUPS T_MAGIC, X3
	ADDPS  X3, X4                    // X4 = fn
	MOVAPS X4, X5
	SUBPS  X3, X5                    // X5 = nf

	// r = (t − nf·c1) − nf·c2
	MOVUPS T_C1, X6
	MULPS  X5, X6
	SUBPS  X6, X1
	MOVUPS T_C2, X6
	MULPS  X5, X6
	SUBPS  X6, X1                    // X1 = r

	// p = (q0 + r²·q1) + r⁴·(q2 + r²·q3), qk = P(2k+2) + r·P(2k+3)
	// (Estrin), em = p·r² + r
	MOVAPS X1, X8
	MULPS  X1, X8                    // X8 = r²
	MOVAPS X8, X2
	MULPS  X8, X2                    // X2 = r⁴
	MOVUPS T_P3, X7
	MULPS  X1, X7
	MOVUPS T_P2, X6
	ADDPS  X6, X7                    // X7 = q0
	MOVUPS T_P5, X9
	MULPS  X1, X9
	MOVUPS T_P4, X6
	ADDPS  X6, X9                    // X9 = q1
	MOVUPS T_P7, X10
	MULPS  X1, X10
	MOVUPS T_P6, X6
	ADDPS  X6, X10                   // X10 = q2
	MOVUPS T_P9, X11
	MULPS  X1, X11
	MOVUPS T_P8, X6
	ADDPS  X6, X11                   // X11 = q3
	MULPS  X8, X9
	ADDPS  X7, X9                    // X9 = q0 + r²·q1
	MULPS  X8, X11
	ADDPS  X10, X11                  // X11 = q2 + r²·q3
	MULPS  X2, X11
	ADDPS  X9, X11                   // X11 = p
	MULPS  X8, X11
	ADDPS  X1, X11                   // X11 = em

	// s = 2ⁿ from the bits of fn; e = (s − 1) + s·em
	MOVUPS T_EXPBIAS, X6
	PSUBL  X6, X4
	PSLLL  $23, X4                   // X4 = s
	MOVAPS X4, X9
	MOVUPS T_ONE, X6
	SUBPS  X6, X9
	MULPS  X4, X11
	ADDPS  X11, X9                   // X9 = e

	// e/(e+2) with the sign of x; a NaN x passes through.
	MOVUPS T_TWO, X10
	ADDPS  X9, X10
	DIVPS  X10, X9
	MOVUPS T_SIGN, X6
	ANDPS  X0, X6
	ORPS   X6, X9
	MOVAPS X0, X11
	CMPPS  X0, X11, $3               // unordered: x is NaN
	ANDPS  X11, X0
	ANDNPS X9, X11
	ORPS   X0, X11
	MOVUPS X11, (DI)(AX*4)

	ADDQ $4, AX
	JMP  loop

done:
	RET

// func tanhAVX2(x, y []float32)
//
// tanhSSE on eight lanes (YMM) for CPUs with AVX2 (haveTanhAVX2): the same
// IEEE operations in the same order, VEX-encoded, never fused, so the
// results agree with tanhScalar bit for bit. Each constant is broadcast
// from the first lane of its tanhConst entry; len(x) must be a multiple
// of 8.
TEXT ·tanhAVX2(SB), NOSPLIT, $0-48
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ y_base+24(FP), DI
	LEAQ tanhConst<>(SB), R8
	ANDQ $-8, CX
	XORQ AX, AX

avxLoop:
	CMPQ    AX, CX
	JGE     avxDone
	VMOVUPS (SI)(AX*4), Y0           // x

	// t = 2·min(|x|, 20)
	VBROADCASTSS T_ABS, Y1
	VANDPS       Y0, Y1, Y1
	VBROADCASTSS T_TWENTY, Y2
	VMINPS       Y2, Y1, Y1
	VADDPS       Y1, Y1, Y1          // Y1 = t

	// fn = (t·log2e − 0.5) + magic, nf = fn − magic
	VBROADCASTSS T_LOG2E, Y4
	VMULPS       Y1, Y4, Y4
	VBROADCASTSS T_HALF, Y2
	VSUBPS       Y2, Y4, Y4
	VBROADCASTSS T_MAGIC, Y3
	VADDPS       Y3, Y4, Y4          // Y4 = fn
	VSUBPS       Y3, Y4, Y5          // Y5 = nf

	// r = (t − nf·c1) − nf·c2
	VBROADCASTSS T_C1, Y6
	VMULPS       Y5, Y6, Y6
	VSUBPS       Y6, Y1, Y1
	VBROADCASTSS T_C2, Y6
	VMULPS       Y5, Y6, Y6
	VSUBPS       Y6, Y1, Y1          // Y1 = r

	// p (Estrin, as tanhSSE), em = p·r² + r
	VMULPS       Y1, Y1, Y8          // Y8 = r²
	VMULPS       Y8, Y8, Y2          // Y2 = r⁴
	VBROADCASTSS T_P3, Y7
	VMULPS       Y1, Y7, Y7
	VBROADCASTSS T_P2, Y6
	VADDPS       Y6, Y7, Y7          // Y7 = q0
	VBROADCASTSS T_P5, Y9
	VMULPS       Y1, Y9, Y9
	VBROADCASTSS T_P4, Y6
	VADDPS       Y6, Y9, Y9          // Y9 = q1
	VBROADCASTSS T_P7, Y10
	VMULPS       Y1, Y10, Y10
	VBROADCASTSS T_P6, Y6
	VADDPS       Y6, Y10, Y10        // Y10 = q2
	VBROADCASTSS T_P9, Y11
	VMULPS       Y1, Y11, Y11
	VBROADCASTSS T_P8, Y6
	VADDPS       Y6, Y11, Y11        // Y11 = q3
	VMULPS       Y8, Y9, Y9
	VADDPS       Y7, Y9, Y9          // Y9 = q0 + r²·q1
	VMULPS       Y8, Y11, Y11
	VADDPS       Y10, Y11, Y11       // Y11 = q2 + r²·q3
	VMULPS       Y2, Y11, Y11
	VADDPS       Y9, Y11, Y11        // Y11 = p
	VMULPS       Y8, Y11, Y11
	VADDPS       Y1, Y11, Y11        // Y11 = em

	// s = 2ⁿ from the bits of fn; e = (s − 1) + s·em
	VBROADCASTSS T_EXPBIAS, Y6
	VPSUBD       Y6, Y4, Y4
	VPSLLD       $23, Y4, Y4         // Y4 = s
	VBROADCASTSS T_ONE, Y6
	VSUBPS       Y6, Y4, Y9
	VMULPS       Y4, Y11, Y11
	VADDPS       Y11, Y9, Y9         // Y9 = e

	// e/(e+2) with the sign of x; a NaN x passes through.
	VBROADCASTSS T_TWO, Y10
	VADDPS       Y9, Y10, Y10
	VDIVPS       Y10, Y9, Y9
	VBROADCASTSS T_SIGN, Y6
	VANDPS       Y0, Y6, Y6
	VORPS        Y6, Y9, Y9
	VCMPPS       $3, Y0, Y0, Y11     // unordered: x is NaN
	VANDPS       Y11, Y0, Y0
	VANDNPS      Y9, Y11, Y11
	VORPS        Y0, Y11, Y11
	VMOVUPS      Y11, (DI)(AX*4)

	ADDQ $8, AX
	JMP  avxLoop

avxDone:
	VZEROUPPER
	RET

DATA tanhConst<>+0(SB)/4, $0x7fffffff
DATA tanhConst<>+4(SB)/4, $0x7fffffff
DATA tanhConst<>+8(SB)/4, $0x7fffffff
DATA tanhConst<>+12(SB)/4, $0x7fffffff
DATA tanhConst<>+16(SB)/4, $0x80000000
DATA tanhConst<>+20(SB)/4, $0x80000000
DATA tanhConst<>+24(SB)/4, $0x80000000
DATA tanhConst<>+28(SB)/4, $0x80000000
DATA tanhConst<>+32(SB)/4, $0x41a00000
DATA tanhConst<>+36(SB)/4, $0x41a00000
DATA tanhConst<>+40(SB)/4, $0x41a00000
DATA tanhConst<>+44(SB)/4, $0x41a00000
DATA tanhConst<>+48(SB)/4, $0x3fb8aa3b
DATA tanhConst<>+52(SB)/4, $0x3fb8aa3b
DATA tanhConst<>+56(SB)/4, $0x3fb8aa3b
DATA tanhConst<>+60(SB)/4, $0x3fb8aa3b
DATA tanhConst<>+64(SB)/4, $0x3f000000
DATA tanhConst<>+68(SB)/4, $0x3f000000
DATA tanhConst<>+72(SB)/4, $0x3f000000
DATA tanhConst<>+76(SB)/4, $0x3f000000
DATA tanhConst<>+80(SB)/4, $0x4b400000
DATA tanhConst<>+84(SB)/4, $0x4b400000
DATA tanhConst<>+88(SB)/4, $0x4b400000
DATA tanhConst<>+92(SB)/4, $0x4b400000
DATA tanhConst<>+96(SB)/4, $0x3f318000
DATA tanhConst<>+100(SB)/4, $0x3f318000
DATA tanhConst<>+104(SB)/4, $0x3f318000
DATA tanhConst<>+108(SB)/4, $0x3f318000
DATA tanhConst<>+112(SB)/4, $0xb95e8083
DATA tanhConst<>+116(SB)/4, $0xb95e8083
DATA tanhConst<>+120(SB)/4, $0xb95e8083
DATA tanhConst<>+124(SB)/4, $0xb95e8083
DATA tanhConst<>+128(SB)/4, $0x3638ef1d
DATA tanhConst<>+132(SB)/4, $0x3638ef1d
DATA tanhConst<>+136(SB)/4, $0x3638ef1d
DATA tanhConst<>+140(SB)/4, $0x3638ef1d
DATA tanhConst<>+144(SB)/4, $0x37d00d01
DATA tanhConst<>+148(SB)/4, $0x37d00d01
DATA tanhConst<>+152(SB)/4, $0x37d00d01
DATA tanhConst<>+156(SB)/4, $0x37d00d01
DATA tanhConst<>+160(SB)/4, $0x39500d01
DATA tanhConst<>+164(SB)/4, $0x39500d01
DATA tanhConst<>+168(SB)/4, $0x39500d01
DATA tanhConst<>+172(SB)/4, $0x39500d01
DATA tanhConst<>+176(SB)/4, $0x3ab60b61
DATA tanhConst<>+180(SB)/4, $0x3ab60b61
DATA tanhConst<>+184(SB)/4, $0x3ab60b61
DATA tanhConst<>+188(SB)/4, $0x3ab60b61
DATA tanhConst<>+192(SB)/4, $0x3c088889
DATA tanhConst<>+196(SB)/4, $0x3c088889
DATA tanhConst<>+200(SB)/4, $0x3c088889
DATA tanhConst<>+204(SB)/4, $0x3c088889
DATA tanhConst<>+208(SB)/4, $0x3d2aaaab
DATA tanhConst<>+212(SB)/4, $0x3d2aaaab
DATA tanhConst<>+216(SB)/4, $0x3d2aaaab
DATA tanhConst<>+220(SB)/4, $0x3d2aaaab
DATA tanhConst<>+224(SB)/4, $0x3e2aaaab
DATA tanhConst<>+228(SB)/4, $0x3e2aaaab
DATA tanhConst<>+232(SB)/4, $0x3e2aaaab
DATA tanhConst<>+236(SB)/4, $0x3e2aaaab
DATA tanhConst<>+240(SB)/4, $0x3f000000
DATA tanhConst<>+244(SB)/4, $0x3f000000
DATA tanhConst<>+248(SB)/4, $0x3f000000
DATA tanhConst<>+252(SB)/4, $0x3f000000
DATA tanhConst<>+256(SB)/4, $0x4b3fff81
DATA tanhConst<>+260(SB)/4, $0x4b3fff81
DATA tanhConst<>+264(SB)/4, $0x4b3fff81
DATA tanhConst<>+268(SB)/4, $0x4b3fff81
DATA tanhConst<>+272(SB)/4, $0x3f800000
DATA tanhConst<>+276(SB)/4, $0x3f800000
DATA tanhConst<>+280(SB)/4, $0x3f800000
DATA tanhConst<>+284(SB)/4, $0x3f800000
DATA tanhConst<>+288(SB)/4, $0x40000000
DATA tanhConst<>+292(SB)/4, $0x40000000
DATA tanhConst<>+296(SB)/4, $0x40000000
DATA tanhConst<>+300(SB)/4, $0x40000000
GLOBL tanhConst<>(SB), RODATA|NOPTR, $304
