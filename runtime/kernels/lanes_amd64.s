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
