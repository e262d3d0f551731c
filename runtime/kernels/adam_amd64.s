//go:build amd64 && !purego

#include "textflag.h"

// adamSSE and adamL2SSE: adamScalar (adam.go) on four float32 lanes with
// SSE2, the amd64 baseline, so no CPU feature check. They perform the same
// IEEE operations in the same order as adamScalar (SQRTPS and DIVPS are
// correctly rounded, like float32(math.Sqrt(float64(v))) and the float32
// division), so the results agree bit for bit. The ten coefficients are
// broadcast into X5–X14 once; X0–X4 are scratch.

// ADAM_LOAD broadcasts k[0..9] (k's address in R8) into X5..X14:
// X5 GradScale, X6 L2, X7 Decay, X8 β₁, X9 1−β₁, X10 β₂, X11 1−β₂,
// X12 StepSize, X13 SqrtBC2, X14 Eps.
#define ADAM_LOAD \
	MOVSS 0(R8), X5; SHUFPS $0, X5, X5; \
	MOVSS 4(R8), X6; SHUFPS $0, X6, X6; \
	MOVSS 8(R8), X7; SHUFPS $0, X7, X7; \
	MOVSS 12(R8), X8; SHUFPS $0, X8, X8; \
	MOVSS 16(R8), X9; SHUFPS $0, X9, X9; \
	MOVSS 20(R8), X10; SHUFPS $0, X10, X10; \
	MOVSS 24(R8), X11; SHUFPS $0, X11, X11; \
	MOVSS 28(R8), X12; SHUFPS $0, X12, X12; \
	MOVSS 32(R8), X13; SHUFPS $0, X13, X13; \
	MOVSS 36(R8), X14; SHUFPS $0, X14, X14

// ADAM_MOMENTS: with X0 = θ·Decay and X1 = d, update m and v at index CX
// (m in DX, v in SI) and θ in X0, then store θ (p in DI).
#define ADAM_MOMENTS \
	MOVUPS (DX)(CX*4), X2; MULPS X8, X2; \
	MOVAPS X1, X3; MULPS X9, X3; ADDPS X3, X2; \
	MOVUPS X2, (DX)(CX*4); \
	MOVUPS (SI)(CX*4), X3; MULPS X10, X3; \
	MOVAPS X1, X4; MULPS X11, X4; MULPS X1, X4; ADDPS X4, X3; \
	MOVUPS X3, (SI)(CX*4); \
	SQRTPS X3, X4; DIVPS X13, X4; ADDPS X14, X4; \
	MULPS X12, X2; DIVPS X4, X2; \
	SUBPS X2, X0; \
	MOVUPS X0, (DI)(CX*4)

// func adamSSE(p, g, m, v []float32, k *[12]float32)
TEXT ·adamSSE(SB), NOSPLIT, $0-104
	MOVQ p_base+0(FP), DI
	MOVQ p_len+8(FP), BX
	MOVQ g_base+24(FP), AX
	MOVQ m_base+48(FP), DX
	MOVQ v_base+72(FP), SI
	MOVQ k+96(FP), R8
	ADAM_LOAD
	XORQ CX, CX
	CMPQ BX, $0
	JLE  done

loop:
	MOVUPS (DI)(CX*4), X0
	MULPS  X7, X0
	MOVUPS (AX)(CX*4), X1
	MULPS  X5, X1
	ADAM_MOMENTS
	ADDQ   $4, CX
	CMPQ   CX, BX
	JLT    loop

done:
	RET

// func adamL2SSE(p, g, m, v []float32, k *[12]float32)
TEXT ·adamL2SSE(SB), NOSPLIT, $0-104
	MOVQ p_base+0(FP), DI
	MOVQ p_len+8(FP), BX
	MOVQ g_base+24(FP), AX
	MOVQ m_base+48(FP), DX
	MOVQ v_base+72(FP), SI
	MOVQ k+96(FP), R8
	ADAM_LOAD
	XORQ CX, CX
	CMPQ BX, $0
	JLE  done

loop:
	MOVUPS (DI)(CX*4), X0
	MULPS  X7, X0
	MOVUPS (AX)(CX*4), X1
	MULPS  X5, X1
	MOVAPS X0, X2
	MULPS  X6, X2
	ADDPS  X2, X1
	ADAM_MOMENTS
	ADDQ   $4, CX
	CMPQ   CX, BX
	JLT    loop

done:
	RET

// adamAVX and adamL2AVX: adamSSE and adamL2SSE on eight lanes (YMM), for
// CPUs with AVX (haveAdamAVX checks the CPU and the OS). The operations
// are the same IEEE float32 operations in the same order — VEX-encoded
// multiplies, adds, VSQRTPS and VDIVPS, never a fused multiply-add — so the
// results agree with adamScalar bit for bit; only the divider's throughput
// per element changes (the SSE2 loop is bound by DIVPS and SQRTPS).
// The coefficients are broadcast into Y5–Y14; Y0–Y4 are scratch.

// ADAM_LOAD_AVX broadcasts k[0..9] (k's address in R8) into Y5..Y14, in
// ADAM_LOAD's order.
#define ADAM_LOAD_AVX \
	VBROADCASTSS 0(R8), Y5; \
	VBROADCASTSS 4(R8), Y6; \
	VBROADCASTSS 8(R8), Y7; \
	VBROADCASTSS 12(R8), Y8; \
	VBROADCASTSS 16(R8), Y9; \
	VBROADCASTSS 20(R8), Y10; \
	VBROADCASTSS 24(R8), Y11; \
	VBROADCASTSS 28(R8), Y12; \
	VBROADCASTSS 32(R8), Y13; \
	VBROADCASTSS 36(R8), Y14

// ADAM_MOMENTS_AVX is ADAM_MOMENTS on eight lanes: with Y0 = θ·Decay and
// Y1 = d, m ← β₁·m + (1−β₁)·d, v ← β₂·v + ((1−β₂)·d)·d,
// θ ← θ − (StepSize·m)/(√v/SqrtBC2 + Eps).
#define ADAM_MOMENTS_AVX \
	VMULPS (DX)(CX*4), Y8, Y2; \
	VMULPS Y1, Y9, Y3; \
	VADDPS Y3, Y2, Y2; \
	VMOVUPS Y2, (DX)(CX*4); \
	VMULPS (SI)(CX*4), Y10, Y3; \
	VMULPS Y1, Y11, Y4; \
	VMULPS Y1, Y4, Y4; \
	VADDPS Y4, Y3, Y3; \
	VMOVUPS Y3, (SI)(CX*4); \
	VSQRTPS Y3, Y4; \
	VDIVPS Y13, Y4, Y4; \
	VADDPS Y14, Y4, Y4; \
	VMULPS Y12, Y2, Y2; \
	VDIVPS Y4, Y2, Y2; \
	VSUBPS Y2, Y0, Y0; \
	VMOVUPS Y0, (DI)(CX*4)

// func adamAVX(p, g, m, v []float32, k *[12]float32)
TEXT ·adamAVX(SB), NOSPLIT, $0-104
	MOVQ p_base+0(FP), DI
	MOVQ p_len+8(FP), BX
	MOVQ g_base+24(FP), AX
	MOVQ m_base+48(FP), DX
	MOVQ v_base+72(FP), SI
	MOVQ k+96(FP), R8
	ADAM_LOAD_AVX
	XORQ CX, CX
	CMPQ BX, $0
	JLE  done

loop:
	VMULPS (DI)(CX*4), Y7, Y0
	VMULPS (AX)(CX*4), Y5, Y1
	ADAM_MOMENTS_AVX
	ADDQ   $8, CX
	CMPQ   CX, BX
	JLT    loop

done:
	VZEROUPPER
	RET

// func adamL2AVX(p, g, m, v []float32, k *[12]float32)
TEXT ·adamL2AVX(SB), NOSPLIT, $0-104
	MOVQ p_base+0(FP), DI
	MOVQ p_len+8(FP), BX
	MOVQ g_base+24(FP), AX
	MOVQ m_base+48(FP), DX
	MOVQ v_base+72(FP), SI
	MOVQ k+96(FP), R8
	ADAM_LOAD_AVX
	XORQ CX, CX
	CMPQ BX, $0
	JLE  done

loop:
	VMULPS (DI)(CX*4), Y7, Y0
	VMULPS (AX)(CX*4), Y5, Y1
	VMULPS Y0, Y6, Y2
	VADDPS Y2, Y1, Y1
	ADAM_MOMENTS_AVX
	ADDQ   $8, CX
	CMPQ   CX, BX
	JLT    loop

done:
	VZEROUPPER
	RET
