//go:build amd64 && !purego

#include "textflag.h"

// func gatherAVX512(dst, src []float32, m []int32)
//
// dst[j] = src[m[j]] for j < len(m) &^ 15, sixteen lanes per VGATHERDPS
// (a masked gather for the tail measured slower than the scalar loop on
// tails of 9 lanes, so the caller finishes it). Only call it when
// haveGatherAVX512; the caller guarantees every m[j] indexes src (no
// bounds check here) and len(dst) ≥ len(m).
TEXT ·gatherAVX512(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ m_base+48(FP), DX
	MOVQ m_len+56(FP), CX
	ANDQ $-16, CX
	XORQ AX, AX

loop:
	CMPQ       AX, CX
	JGE        done
	VMOVDQU32  (DX)(AX*4), Z1
	KXNORW     K0, K0, K1
	VGATHERDPS (SI)(Z1*4), K1, Z0
	VMOVUPS    Z0, (DI)(AX*4)
	ADDQ       $16, AX
	JMP        loop

done:
	VZEROUPPER
	RET

// func addToAVX(dst, src []float32)
//
// dst[j] += src[j] for j < len(src) &^ 15, two YMM additions per step (the
// same IEEE float32 addition per element as the scalar loop). Only call it
// when haveAdamAVX (the CPU and OS have AVX); len(dst) ≥ len(src).
TEXT ·addToAVX(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	ANDQ $-16, CX
	XORQ AX, AX

addLoop:
	CMPQ    AX, CX
	JGE     addDone
	VMOVUPS (DI)(AX*4), Y0
	VMOVUPS 32(DI)(AX*4), Y1
	VADDPS  (SI)(AX*4), Y0, Y0
	VADDPS  32(SI)(AX*4), Y1, Y1
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	ADDQ    $16, AX
	JMP     addLoop

addDone:
	VZEROUPPER
	RET

// func permRowsAVX512(dst []float32, dstStep int, src []float32, srcStep int, rows int, idx *[16]int32, masks uint64)
//
// For r < rows: the lanes of the store mask (masks bits 0–15) of
// dst[r·dstStep:] get src[r·srcStep+idx[l]] (idx[l] < 32): a zero-masked
// load of the row's first 16 floats (load mask bits 16–31) and of the
// next 16 (bits 32–47), one VPERMI2PS over the two and one masked store
// per row. Masked-off lanes are neither read nor written (no fault), so
// the caller guarantees only that the loads' lanes lie in src and the
// store's in dst. Only call it when haveGatherAVX512.
TEXT ·permRowsAVX512(SB), NOSPLIT, $0-88
	MOVQ      dst_base+0(FP), DI
	MOVQ      dstStep+24(FP), R8
	SHLQ      $2, R8
	MOVQ      src_base+32(FP), SI
	MOVQ      srcStep+56(FP), R9
	SHLQ      $2, R9
	MOVQ      rows+64(FP), CX
	MOVQ      idx+72(FP), AX
	VMOVDQU32 (AX), Z0
	MOVQ      masks+80(FP), BX
	KMOVW     BX, K1
	SHRQ      $16, BX
	KMOVW     BX, K2
	SHRQ      $16, BX
	KMOVW     BX, K3

permLoop:
	TESTQ     CX, CX
	JLE       permDone
	VMOVDQU32 Z0, Z1
	VMOVUPS.Z (SI), K2, Z2
	VMOVUPS.Z 64(SI), K3, Z3
	VPERMI2PS Z3, Z2, Z1
	VMOVUPS   Z1, K1, (DI)
	ADDQ      R9, SI
	ADDQ      R8, DI
	DECQ      CX
	JMP       permLoop

permDone:
	VZEROUPPER
	RET

// func scatterAddAVX512(dst, src []float32, m []int32)
//
// dst[m[j]] += src[j] for j < len(m) &^ 15: a gather of dst, an addition
// and a scatter back per sixteen lanes, which is the scalar loop's result
// only because the indices of each sixteen-lane group are distinct (the
// caller guarantees it, and that every m[j] indexes dst).
TEXT ·scatterAddAVX512(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ m_base+48(FP), DX
	MOVQ m_len+56(FP), CX
	ANDQ $-16, CX
	XORQ AX, AX

scatterLoop:
	CMPQ        AX, CX
	JGE         scatterDone
	VMOVDQU32   (DX)(AX*4), Z1
	KXNORW      K0, K0, K1
	VGATHERDPS  (DI)(Z1*4), K1, Z0
	VADDPS      (SI)(AX*4), Z0, Z0
	KXNORW      K0, K0, K2
	VSCATTERDPS Z0, K2, (DI)(Z1*4)
	ADDQ        $16, AX
	JMP         scatterLoop

scatterDone:
	VZEROUPPER
	RET
