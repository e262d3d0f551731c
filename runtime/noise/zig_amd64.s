//go:build amd64 && !purego

#include "textflag.h"

// zigFastSSE: the ziggurat's fast path (Generator.Add, ziggurat.go) on four
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

// zigFastAVX2: zigFastSSE on eight lanes with AVX2 (zigPaths checks the
// CPU first). The same operations in the same order, VEX encoded:
// VCVTDQ2PS, VMULPS by W, VPXOR of the sign, VMULPS by std, VADDPS to x,
// VMULPS by post, and no FMA (it would round once where the scalar loop
// rounds twice), so the results agree bit for bit.
//
// The table lookup is scalar: each lane's (zigK, zigW) pair is one 8-byte
// load, two to an XMM register, the registers joined into Y1 = pairs
// 0 1 | 4 5 and Y2 = pairs 2 3 | 6 7 and split by VSHUFPS into a K and a W
// vector in lane order. On the EPYC (Zen 3) this was tuned on, two
// VPGATHERDDs made the routine 2× slower, and taking the layer bytes out
// of 8-byte loads of the words (half the loads) made the whole draw ~5 %
// faster than a byte load per lane.
//
// A group with a draw outside its rectangle (1 − 0.985⁸ ≈ 11 % of groups)
// costs no branch: every group blends its accepted lanes into x (rejected
// lanes are written back unchanged) and stores its eight candidate slow
// indices to slow[DX:DX+8] from zigSlowLanes (the rejected lanes of each
// 8-bit mask, packed), then advances DX by the mask's popcount. A branch
// on the mask, as in zigFastSSE, is mispredicted on about one group in
// ten: the branch-free form made the whole draw 3–4 % faster (storing
// the first index from a bit scan, and branching only for a second, was
// slower than the table, with BSF or TZCNT).
// The store stays inside slow: DX ≤ CX and CX + 8 ≤ len(words) ≤ len(slow).

// ZIG_PAIRS loads the (K, W) pairs of the four lanes whose words start at
// byte o from CX into XA (first two) and XB (last two).
#define ZIG_PAIRS(o, XA, XB) \
	MOVQ    o+0(SI)(CX*4), R9; \
	MOVQ    o+8(SI)(CX*4), R11; \
	MOVBLZX R9B, R10; \
	SHRQ    $32, R9; \
	MOVBLZX R9B, R9; \
	MOVBLZX R11B, R12; \
	SHRQ    $32, R11; \
	MOVBLZX R11B, R11; \
	VMOVQ   (R8)(R10*8), XA; \
	VPINSRQ $1, (R8)(R9*8), XA, XA; \
	VMOVQ   (R8)(R12*8), XB; \
	VPINSRQ $1, (R8)(R11*8), XB, XB

// func zigFastAVX2(words []uint32, x []float32, tab *[256][2]uint32, std, post float32, slow []int32) int
TEXT ·zigFastAVX2(SB), NOSPLIT, $0-96
	MOVQ         words_base+0(FP), SI
	MOVQ         words_len+8(FP), BX
	MOVQ         x_base+24(FP), DI
	MOVQ         tab+48(FP), R8
	VBROADCASTSS std+56(FP), Y15
	VBROADCASTSS post+60(FP), Y14
	MOVQ         slow_base+64(FP), R13
	LEAQ         ·zigSlowLanes(SB), R14
	MOVL         $0x100, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13              // the sign bit of the words
	MOVL         $8, AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Y11
	VPXOR        Y10, Y10, Y10         // CX in every lane
	ANDQ         $-8, BX
	XORQ         CX, CX
	XORQ         DX, DX                // slow draws so far

loop:
	CMPQ CX, BX
	JGE  done
	ZIG_PAIRS(0, X1, X2)
	ZIG_PAIRS(16, X3, X4)
	VINSERTI128 $1, X3, Y1, Y1
	VINSERTI128 $1, X4, Y2, Y2
	VSHUFPS     $0x88, Y2, Y1, Y3      // K
	VSHUFPS     $0xDD, Y2, Y1, Y4      // W
	VMOVDQU     (SI)(CX*4), Y0
	VPSRLD      $9, Y0, Y5             // m
	VPCMPGTD    Y5, Y3, Y1             // accepted: K > m
	VMOVMSKPS   Y1, AX
	VCVTDQ2PS   Y5, Y5
	VMULPS      Y4, Y5, Y5
	VPAND       Y13, Y0, Y0
	VPSLLD      $23, Y0, Y0
	VPXOR       Y0, Y5, Y5             // z
	VMULPS      Y15, Y5, Y5            // std·z
	VMOVUPS     (DI)(CX*4), Y7
	VADDPS      Y5, Y7, Y6             // x + std·z
	VMULPS      Y14, Y6, Y6
	VBLENDVPS   Y1, Y6, Y7, Y6
	VMOVUPS     Y6, (DI)(CX*4)
	XORL        $0xff, AX              // the rejected lanes
	VPMOVZXBD   (R14)(AX*8), Y9
	VPADDD      Y10, Y9, Y9
	VMOVDQU     Y9, (R13)(DX*4)
	POPCNTL     AX, AX
	ADDQ        AX, DX
	VPADDD      Y11, Y10, Y10
	ADDQ        $8, CX
	JMP         loop

done:
	VZEROUPPER
	MOVQ DX, ret+88(FP)
	RET
