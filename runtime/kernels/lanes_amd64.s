//go:build amd64 && !purego

#include "textflag.h"

// The lane-order sums' whole rows (runtime/lanesum.go: laneAcc), eight
// AVX registers of four float64 lanes each holding the 32 lanes: row r of
// 32 terms adds term l to lane l, row after row, so that every lane gets
// its terms in the scalar loop's order; the float32 products are the
// scalar code's, in its order, without fused multiply-adds.

// LANEROW adds the eight terms in Y8 (float32) to the lanes in A and B
// (float64, four each).
#define LANEROW(A, B) \
	VCVTPS2PD    X8, Y10; \
	VEXTRACTF128 $1, Y8, X11; \
	VCVTPS2PD    X11, Y11; \
	VADDPD       Y10, A, A; \
	VADDPD       Y11, B, B

// LOADLANES and STORELANES move the 32 lanes at DI to and from Y0–Y7.
#define LOADLANES \
	VMOVUPD 0(DI), Y0; \
	VMOVUPD 32(DI), Y1; \
	VMOVUPD 64(DI), Y2; \
	VMOVUPD 96(DI), Y3; \
	VMOVUPD 128(DI), Y4; \
	VMOVUPD 160(DI), Y5; \
	VMOVUPD 192(DI), Y6; \
	VMOVUPD 224(DI), Y7

#define STORELANES \
	VMOVUPD Y0, 0(DI); \
	VMOVUPD Y1, 32(DI); \
	VMOVUPD Y2, 64(DI); \
	VMOVUPD Y3, 96(DI); \
	VMOVUPD Y4, 128(DI); \
	VMOVUPD Y5, 160(DI); \
	VMOVUPD Y6, 192(DI); \
	VMOVUPD Y7, 224(DI)

// func laneRowsAVX(g []float32, lanes *[32]float64)
//
// Lane l += g[32·r + l] for the len(g)/32 whole rows r.
TEXT ·laneRowsAVX(SB), NOSPLIT, $0-32
	MOVQ g_base+0(FP), SI
	MOVQ g_len+8(FP), CX
	MOVQ lanes+24(FP), DI
	SHRQ $5, CX
	LOADLANES

laneRowsLoop:
	TESTQ CX, CX
	JZ    laneRowsDone
	VMOVUPS 0(SI), Y8
	LANEROW(Y0, Y1)
	VMOVUPS 32(SI), Y8
	LANEROW(Y2, Y3)
	VMOVUPS 64(SI), Y8
	LANEROW(Y4, Y5)
	VMOVUPS 96(SI), Y8
	LANEROW(Y6, Y7)
	ADDQ $128, SI
	DECQ CX
	JMP  laneRowsLoop

laneRowsDone:
	STORELANES
	VZEROUPPER
	RET

// SCALEDROW loads the eight terms g·(x − m)·iv at offset OFF into Y8.
#define SCALEDROW(OFF) \
	VMOVUPS OFF(SI), Y8; \
	VMOVUPS OFF(DX), Y9; \
	VSUBPS  Y12, Y9, Y9; \
	VMULPS  Y9, Y8, Y8; \
	VMULPS  Y13, Y8, Y8

// func laneRowsScaledAVX(g, x []float32, m, iv float32, lanes *[32]float64)
//
// Lane l += g[32·r + l]·(x[32·r + l] − m)·iv (the product rounded to
// float32 as it goes, left to right) for the len(g)/32 whole rows r.
TEXT ·laneRowsScaledAVX(SB), NOSPLIT, $0-64
	MOVQ         g_base+0(FP), SI
	MOVQ         g_len+8(FP), CX
	MOVQ         x_base+24(FP), DX
	VBROADCASTSS m+48(FP), Y12
	VBROADCASTSS iv+52(FP), Y13
	MOVQ         lanes+56(FP), DI
	SHRQ         $5, CX
	LOADLANES

laneScaledLoop:
	TESTQ CX, CX
	JZ    laneScaledDone
	SCALEDROW(0)
	LANEROW(Y0, Y1)
	SCALEDROW(32)
	LANEROW(Y2, Y3)
	SCALEDROW(64)
	LANEROW(Y4, Y5)
	SCALEDROW(96)
	LANEROW(Y6, Y7)
	ADDQ $128, SI
	ADDQ $128, DX
	DECQ CX
	JMP  laneScaledLoop

laneScaledDone:
	STORELANES
	VZEROUPPER
	RET

// The row normalizations' float64 sums (graphnn.go: sums16), sixteen
// interleaved chains in four AVX registers: term j of the len &^ 15
// terms to chain j mod 16, each chain's terms in order; the float32 terms
// are the scalar code's expressions, in its order, without fused
// multiply-adds, and a float64 deviation squared is (x − m)·(x − m).

// ADD8(XS, YS, A, B) converts the eight float32 terms in YS (XS its
// lower half) to float64 and adds the lower four to A, the upper four to
// B (clobbers Y10, Y11).
#define ADD8(XS, YS, A, B) \
	VCVTPS2PD    XS, Y10; \
	VEXTRACTF128 $1, YS, X11; \
	VCVTPS2PD    X11, Y11; \
	VADDPD       Y10, A, A; \
	VADDPD       Y11, B, B

#define LOAD16(P, A, B, C, D) \
	VMOVUPD 0(P), A; \
	VMOVUPD 32(P), B; \
	VMOVUPD 64(P), C; \
	VMOVUPD 96(P), D

#define STORE16(P, A, B, C, D) \
	VMOVUPD A, 0(P); \
	VMOVUPD B, 32(P); \
	VMOVUPD C, 64(P); \
	VMOVUPD D, 96(P)

// func sum16AVX(x []float32, acc *[16]float64)
TEXT ·sum16AVX(SB), NOSPLIT, $0-32
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVQ acc+24(FP), DI
	SHRQ $4, CX
	LOAD16(DI, Y0, Y1, Y2, Y3)

sum16Loop:
	TESTQ CX, CX
	JZ    sum16Done
	VMOVUPS 0(SI), Y8
	VMOVUPS 32(SI), Y9
	ADD8(X8, Y8, Y0, Y1)
	ADD8(X9, Y9, Y2, Y3)
	ADDQ $64, SI
	DECQ CX
	JMP  sum16Loop

sum16Done:
	STORE16(DI, Y0, Y1, Y2, Y3)
	VZEROUPPER
	RET

// SQDEV4(S, A) adds (S − m)² (four float64 in S, m in Y12) to A.
#define SQDEV4(S, A) \
	VSUBPD Y12, S, S; \
	VMULPD S, S, S; \
	VADDPD S, A, A

// func sqdev16AVX(x []float32, m float64, acc *[16]float64)
TEXT ·sqdev16AVX(SB), NOSPLIT, $0-40
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VBROADCASTSD m+24(FP), Y12
	MOVQ         acc+32(FP), DI
	SHRQ         $4, CX
	LOAD16(DI, Y0, Y1, Y2, Y3)

sqdev16Loop:
	TESTQ CX, CX
	JZ    sqdev16Done
	VCVTPS2PD 0(SI), Y8
	VCVTPS2PD 16(SI), Y9
	VCVTPS2PD 32(SI), Y10
	VCVTPS2PD 48(SI), Y11
	SQDEV4(Y8, Y0)
	SQDEV4(Y9, Y1)
	SQDEV4(Y10, Y2)
	SQDEV4(Y11, Y3)
	ADDQ $64, SI
	DECQ CX
	JMP  sqdev16Loop

sqdev16Done:
	STORE16(DI, Y0, Y1, Y2, Y3)
	VZEROUPPER
	RET

// PARAM8(OFF, A, B, C, D): the eight terms at OFF: g·(x − m)·iv (left to
// right; m in Y12, iv in Y13) to A, B; g to C, D.
#define PARAM8(OFF, A, B, C, D) \
	VMOVUPS OFF(SI), Y8; \
	VMOVUPS OFF(DX), Y9; \
	VSUBPS  Y12, Y9, Y9; \
	VMULPS  Y9, Y8, Y9; \
	VMULPS  Y13, Y9, Y9; \
	ADD8(X9, Y9, A, B); \
	ADD8(X8, Y8, C, D)

// func paramSums16AVX(g, x []float32, m, iv float32, s, b *[16]float64)
TEXT ·paramSums16AVX(SB), NOSPLIT, $0-72
	MOVQ         g_base+0(FP), SI
	MOVQ         g_len+8(FP), CX
	MOVQ         x_base+24(FP), DX
	VBROADCASTSS m+48(FP), Y12
	VBROADCASTSS iv+52(FP), Y13
	MOVQ         s+56(FP), DI
	MOVQ         b+64(FP), R8
	SHRQ         $4, CX
	LOAD16(DI, Y0, Y1, Y2, Y3)
	LOAD16(R8, Y4, Y5, Y6, Y7)

paramSumsLoop:
	TESTQ CX, CX
	JZ    paramSumsDone
	PARAM8(0, Y0, Y1, Y4, Y5)
	PARAM8(32, Y2, Y3, Y6, Y7)
	ADDQ $64, SI
	ADDQ $64, DX
	DECQ CX
	JMP  paramSumsLoop

paramSumsDone:
	STORE16(DI, Y0, Y1, Y2, Y3)
	STORE16(R8, Y4, Y5, Y6, Y7)
	VZEROUPPER
	RET

// GRADV8(OFF, A, B, C, D): the eight terms at OFF: a = g·scale (scale at
// BX + OFF) to A, B; a·((x − m)·iv) (m in Y12, iv in Y13) to C, D.
#define GRADV8(OFF, A, B, C, D) \
	VMOVUPS OFF(SI), Y8; \
	VMOVUPS OFF(BX), Y15; \
	VMULPS  Y15, Y8, Y8; \
	VMOVUPS OFF(DX), Y9; \
	VSUBPS  Y12, Y9, Y9; \
	VMULPS  Y13, Y9, Y9; \
	VMULPS  Y9, Y8, Y9; \
	ADD8(X8, Y8, A, B); \
	ADD8(X9, Y9, C, D)

// func gradSumsVec16AVX(g, x, scale []float32, m, iv float32, sg, sgx *[16]float64)
TEXT ·gradSumsVec16AVX(SB), NOSPLIT, $0-96
	MOVQ         g_base+0(FP), SI
	MOVQ         g_len+8(FP), CX
	MOVQ         x_base+24(FP), DX
	MOVQ         scale_base+48(FP), BX
	VBROADCASTSS m+72(FP), Y12
	VBROADCASTSS iv+76(FP), Y13
	MOVQ         sg+80(FP), DI
	MOVQ         sgx+88(FP), R8
	SHRQ         $4, CX
	LOAD16(DI, Y0, Y1, Y2, Y3)
	LOAD16(R8, Y4, Y5, Y6, Y7)

gradSumsVecLoop:
	TESTQ CX, CX
	JZ    gradSumsVecDone
	GRADV8(0, Y0, Y1, Y4, Y5)
	GRADV8(32, Y2, Y3, Y6, Y7)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, BX
	DECQ CX
	JMP  gradSumsVecLoop

gradSumsVecDone:
	STORE16(DI, Y0, Y1, Y2, Y3)
	STORE16(R8, Y4, Y5, Y6, Y7)
	VZEROUPPER
	RET

// func stdLanesAVX(g, x []float32, lanes *[5][32]float64)
//
// For the len(g)/32 whole rows r of g and x, lane l of each sum q adds
// term 32·r + l: Σg² (q = 0), Σg, Σg·x, Σx², Σx (runtime.StdRowSums).
// Eight lanes at a time (a quarter of each row, in turn), the ten
// accumulators in Y0–Y9; a product of two float32 values is exact in
// float64, so the order of the additions alone decides the bits, and it
// is the scalar loop's.
TEXT ·stdLanesAVX(SB), NOSPLIT, $0-56
	MOVQ g_base+0(FP), R8
	MOVQ g_len+8(FP), R9
	MOVQ x_base+24(FP), R10
	MOVQ lanes+48(FP), DI
	SHRQ $5, R9
	XORQ BX, BX // the quarter's byte offset in a row: 0, 32, 64, 96

stdQuarter:
	CMPQ BX, $128
	JEQ  stdDone
	// lanes[q][8·quarter …]: q·256 + 2·BX bytes
	LEAQ    (DI)(BX*2), R11
	VMOVUPD 0(R11), Y0
	VMOVUPD 32(R11), Y1
	VMOVUPD 256(R11), Y2
	VMOVUPD 288(R11), Y3
	VMOVUPD 512(R11), Y4
	VMOVUPD 544(R11), Y5
	VMOVUPD 768(R11), Y6
	VMOVUPD 800(R11), Y7
	VMOVUPD 1024(R11), Y8
	VMOVUPD 1056(R11), Y9
	LEAQ    (R8)(BX*1), SI
	LEAQ    (R10)(BX*1), DX
	MOVQ    R9, CX

stdRow:
	TESTQ     CX, CX
	JZ        stdStore
	VCVTPS2PD 0(SI), Y10
	VCVTPS2PD 16(SI), Y11
	VCVTPS2PD 0(DX), Y12
	VCVTPS2PD 16(DX), Y13
	VMULPD    Y10, Y10, Y14
	VADDPD    Y14, Y0, Y0
	VMULPD    Y11, Y11, Y15
	VADDPD    Y15, Y1, Y1
	VADDPD    Y10, Y2, Y2
	VADDPD    Y11, Y3, Y3
	VMULPD    Y12, Y10, Y14
	VADDPD    Y14, Y4, Y4
	VMULPD    Y13, Y11, Y15
	VADDPD    Y15, Y5, Y5
	VMULPD    Y12, Y12, Y14
	VADDPD    Y14, Y6, Y6
	VMULPD    Y13, Y13, Y15
	VADDPD    Y15, Y7, Y7
	VADDPD    Y12, Y8, Y8
	VADDPD    Y13, Y9, Y9
	ADDQ      $128, SI
	ADDQ      $128, DX
	DECQ      CX
	JMP       stdRow

stdStore:
	VMOVUPD Y0, 0(R11)
	VMOVUPD Y1, 32(R11)
	VMOVUPD Y2, 256(R11)
	VMOVUPD Y3, 288(R11)
	VMOVUPD Y4, 512(R11)
	VMOVUPD Y5, 544(R11)
	VMOVUPD Y6, 768(R11)
	VMOVUPD Y7, 800(R11)
	VMOVUPD Y8, 1024(R11)
	VMOVUPD Y9, 1056(R11)
	ADDQ    $32, BX
	JMP     stdQuarter

stdDone:
	VZEROUPPER
	RET

// func stdVJPAVX(s, x []float32, a, b, c float64)
//
// s[e] = float32(c·((s[e] − a) − b·x[e])) in float64 for the len(s)/8·8
// leading elements, eight at a time: the scalar expression's operations in
// its order (runtime.StdVJP), no fused multiply-add, so the same bits.
TEXT ·stdVJPAVX(SB), NOSPLIT, $0-72
	MOVQ         s_base+0(FP), SI
	MOVQ         s_len+8(FP), CX
	MOVQ         x_base+24(FP), DX
	VBROADCASTSD a+48(FP), Y13
	VBROADCASTSD b+56(FP), Y14
	VBROADCASTSD c+64(FP), Y15
	SHRQ         $3, CX

vjpLoop:
	TESTQ      CX, CX
	JZ         vjpDone
	VCVTPS2PD  0(SI), Y0
	VCVTPS2PD  16(SI), Y1
	VCVTPS2PD  0(DX), Y2
	VCVTPS2PD  16(DX), Y3
	VSUBPD     Y13, Y0, Y0
	VSUBPD     Y13, Y1, Y1
	VMULPD     Y14, Y2, Y2
	VMULPD     Y14, Y3, Y3
	VSUBPD     Y2, Y0, Y0
	VSUBPD     Y3, Y1, Y1
	VMULPD     Y15, Y0, Y0
	VMULPD     Y15, Y1, Y1
	VCVTPD2PSY Y0, X0
	VCVTPD2PSY Y1, X1
	VMOVUPS    X0, 0(SI)
	VMOVUPS    X1, 16(SI)
	ADDQ       $32, SI
	ADDQ       $32, DX
	DECQ       CX
	JMP        vjpLoop

vjpDone:
	VZEROUPPER
	RET
