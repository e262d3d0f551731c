package blas

import (
	"fmt"

	par "github.com/dpfinetune/dpfinetune/internal/workers"
)

// The AVX-512 backend: GotoBLAS blocking around a 12×32 micro-kernel in
// assembly (gemm_avx512_amd64.s). OpenBLAS 0.3.21 runs its Skylake-X
// kernel on AMD Zen 5 at about 45 % of the core's peak (60 of 133 GMAC/s
// measured on one core), where a kernel that keeps a 12×32 tile in 24 ZMM
// registers and issues two FMAs per broadcast reaches most of it. The B
// panel (kcA × 32) stays in L1, the A block (mcA × kcA) in L2.
const (
	mrA = 12
	nrA = 32
	kcA = 256
	mcA = 16 * mrA
	ncA = 32 * nrA
)

// avxBufs recycles the packing buffers of avxSgemmSerial, as packBufs does
// for the Go kernel.
var avxBufs = make(chan *[]float32, 64)

func getAVXBuf() *[]float32 {
	select {
	case b := <-avxBufs:
		return b
	default:
		buf := make([]float32, kcA*ncA+mcA*kcA)
		return &buf
	}
}

func putAVXBuf(b *[]float32) {
	select {
	case avxBufs <- b:
	default:
	}
}

// avxSgemmSerial is the single-goroutine AVX-512 Sgemm on validated
// arguments with m, n, k > 0 and alpha != 0. Every element of C is a sum
// over k in increasing order within each kcA block, blocks in order, so
// the result depends on the sizes only, not on the operands' layout.
func avxSgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m*n*k <= smallMACs {
		scaleC(m, n, beta, c, ldc)
		smallGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	avxGemm(nil, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// avxGemm is avxSgemmSerial's blocking; packed, when not nil, is
// alpha·op(A) already packed by PackA (a, lda, transA and alpha unused).
func avxGemm(packed []float32, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	avxGemmIdx(packed, transA, transB, m, n, k, alpha, a, lda, b, ldb, nil, beta, c, ldc)
}

// avxGemmIdx is avxGemm with op(B)'s unit-stride index remapped through
// bidx when not nil (SgemmIdxB).
func avxGemmIdx(packed []float32, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bidx []int32, beta float32, c []float32, ldc int) {
	if beta != 0 && beta != 1 {
		scaleC(m, n, beta, c, ldc)
		beta = 1
	}
	mPad := (m + mrA - 1) / mrA * mrA
	bufp := getAVXBuf()
	buf := *bufp
	bp, ap := buf[:kcA*ncA], buf[kcA*ncA:]
	for jc := 0; jc < n; jc += ncA {
		nb := min(ncA, n-jc)
		for pc := 0; pc < k; pc += kcA {
			kb := min(kcA, k-pc)
			if bidx != nil {
				avxPackBIdx(transB, kb, nb, b, ldb, bidx, pc, jc, bp)
			} else {
				avxPackB(transB, kb, nb, b, ldb, pc, jc, bp)
			}
			acc := 0
			if pc > 0 || beta == 1 {
				acc = 1
			}
			for ic := 0; ic < m; ic += mcA {
				mb := min(mcA, m-ic)
				// A row-major A with alpha 1 is read in place, twelve
				// rows at a time (sgemmKernel12x32U): packing it
				// transposes it element by element, which cost as much
				// as the product on resnet18-cifar's convolutions. Only
				// a last panel of fewer rows is packed.
				inPlace := packed == nil && !transA && alpha == 1
				full := mb
				switch {
				case packed != nil:
					ap = packed[pc*mPad+ic*kb:]
				case inPlace:
					full = mb / mrA * mrA
					if full < mb {
						avxPackA(false, mb-full, kb, 1, a, lda, ic+full, pc, ap)
					}
				default:
					avxPackA(transA, mb, kb, alpha, a, lda, ic, pc, ap)
				}
				for jr := 0; jr < nb; jr += nrA {
					cols := min(nrA, nb-jr)
					mask := uint64(1)<<cols - 1
					bpan := &bp[jr*kb]
					for ir := 0; ir < mb; ir += mrA {
						rows := min(mrA, mb-ir)
						ct := &c[(ic+ir)*ldc+jc+jr]
						switch {
						case !inPlace:
							sgemmKernel12x32(kb, &ap[ir*kb], bpan, ct, ldc, rows, mask, acc)
						case ir < full:
							sgemmKernel12x32U(kb, &a[(ic+ir)*lda+pc], lda, bpan, ct, ldc, mask, acc)
						default:
							sgemmKernel12x32(kb, &ap[0], bpan, ct, ldc, rows, mask, acc)
						}
					}
				}
			}
		}
	}
	putAVXBuf(bufp)
}

// PackedSize returns the length of the buffer PackA needs for an m×k
// op(A) under the AVX-512 backend, or 0 where Sgemm would not run an m×n×k
// product with a packed op(A) on it (another backend, or a product it
// leaves to OpenBLAS): then PackA must not be used. A row-major A that a
// product reads in place gains nothing from packing: PackA is for Aᵀ.
func PackedSize(m, n, k int) int {
	setup()
	if sel.Load() != selAVX512 || m*n*k <= smallMACs || !avxTakes(true, 1, m, n, k) {
		return 0
	}
	return (m + mrA - 1) / mrA * mrA * k
}

// PackA packs alpha·op(A) (m×k, op(A) = Aᵀ when transA) into dst
// (PackedSize(m, n, k) elements) for SgemmPackedSerial: a weight that
// several products share is then packed once instead of once a product.
func PackA(transA bool, m, k int, alpha float32, a []float32, lda int, dst []float32) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	if lda < max(1, ac) || len(a) < (ar-1)*lda+ac {
		panic(fmt.Sprintf("blas: PackA of %d×%d with lda %d from %d elements", ar, ac, lda, len(a)))
	}
	mPad := (m + mrA - 1) / mrA * mrA
	if len(dst) < mPad*k {
		panic(fmt.Sprintf("blas: PackA into %d elements, want %d", len(dst), mPad*k))
	}
	// The blocks are independent: split them over the workers when the
	// operand is large (a convolution's weight, packed once a call while
	// the other core would wait).
	blocks := (m + mcA - 1) / mcA
	pack := func(lo, hi int) {
		for pc := 0; pc < k; pc += kcA {
			kb := min(kcA, k-pc)
			for ic := lo * mcA; ic < min(m, hi*mcA); ic += mcA {
				avxPackA(transA, min(mcA, m-ic), kb, alpha, a, lda, ic, pc, dst[pc*mPad+ic*kb:])
			}
		}
	}
	w := min(Threads(), blocks, max(1, m*k/(1<<16)))
	if w <= 1 {
		pack(0, blocks)
		return
	}
	var wg par.Group
	for i := 1; i < w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pack(i*blocks/w, (i+1)*blocks/w)
		}()
	}
	pack(0, blocks/w)
	wg.Wait()
}

// SgemmPackedSerial computes C = P·op(B) + beta·C on the calling
// goroutine, P the m×k matrix PackA packed into packed; m, n and k must be
// those PackedSize was asked for.
func SgemmPackedSerial(m, n, k int, packed []float32, transB bool, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m*n*k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if len(packed) < (m+mrA-1)/mrA*mrA*k {
		panic("blas: SgemmPackedSerial: packed operand too short")
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if ldb < max(1, bc) || len(b) < (br-1)*ldb+bc || ldc < max(1, n) || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("blas: SgemmPackedSerial %d×%d×%d: B (%d elements, ldb %d) or C (%d, ldc %d) too short", m, n, k, len(b), ldb, len(c), ldc))
	}
	avxGemm(packed, false, transB, m, n, k, 1, nil, 0, b, ldb, beta, c, ldc)
}

// avxPackBIdx is avxPackB for SgemmIdxB: B's unit-stride index goes
// through idx (B[p][j] = b[p·ldb + idx[j]], or with transB
// b[j·ldb + idx[p]]).
func avxPackBIdx(transB bool, kb, nb int, b []float32, ldb int, idx []int32, pc, jc int, dst []float32) {
	for jr := 0; jr < nb; jr += nrA {
		cols := min(nrA, nb-jr)
		pan := dst[jr*kb : jr*kb+kb*nrA]
		if !transB {
			ix := idx[jc+jr : jc+jr+cols]
			for p := 0; p < kb; p++ {
				row := pan[p*nrA : (p+1)*nrA]
				src := b[(pc+p)*ldb:]
				for j, o := range ix {
					row[j] = src[o]
				}
				clear(row[cols:])
			}
			continue
		}
		ix := idx[pc : pc+kb]
		for j := 0; j < cols; j++ {
			src := b[(jc+jr+j)*ldb:]
			d := pan[j:]
			for p, o := range ix {
				d[p*nrA] = src[o]
			}
		}
		if cols < nrA {
			for p := 0; p < kb; p++ {
				clear(pan[p*nrA+cols : (p+1)*nrA])
			}
		}
	}
}

// IdxB reports whether SgemmIdxB may be called: the AVX-512 backend is
// selected.
func IdxB() bool {
	setup()
	return sel.Load() == selAVX512
}

// SgemmIdxB is Sgemm with op(B) read through an index on its unit-stride
// dimension: op(B)[p][j] = b[p·ldb + idx[j]] (transB false, len(idx) ≥ n)
// or b[j·ldb + idx[p]] (transB true, len(idx) ≥ k), every index within
// its row of b. It lets a product read the taps of a convolution weight
// that it needs where they are, instead of a packed copy of them. The
// product is split over Threads() workers by columns (each packs its
// part of B once). Only call it when IdxB reports true.
func SgemmIdxB(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, idx []int32, beta float32, c []float32, ldc int) {
	if !IdxB() {
		panic("blas: SgemmIdxB without the AVX-512 backend")
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, nIdx := k, n
	if transB {
		br, nIdx = n, k
	}
	if m < 0 || n < 0 || k < 0 || len(idx) < nIdx || lda < max(1, ac) || ldc < max(1, n) {
		panic(fmt.Sprintf("blas: SgemmIdxB %d×%d×%d: bad sizes", m, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	if len(c) < (m-1)*ldc+n {
		panic("blas: SgemmIdxB: C too short")
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if len(a) < (ar-1)*lda+ac || len(b) < (br-1)*ldb {
		panic("blas: SgemmIdxB: A or B too short")
	}
	for _, o := range idx[:nIdx] {
		if o < 0 || int(o) >= ldb || (br-1)*ldb+int(o) >= len(b) {
			panic(fmt.Sprintf("blas: SgemmIdxB: index %d outside B's rows of %d", o, ldb))
		}
	}
	w := min(Threads(), max(1, m*n*k/obParallelMACs), (n+nrA-1)/nrA)
	if w <= 1 {
		avxGemmIdx(nil, transA, transB, m, n, k, alpha, a, lda, b, ldb, idx, beta, c, ldc)
		return
	}
	chunk := ((n+w-1)/w + nrA - 1) / nrA * nrA
	runBands(n, chunk, func(lo, hi int) {
		if transB {
			avxGemmIdx(nil, transA, true, m, hi-lo, k, alpha, a, lda, b[lo*ldb:], ldb, idx, beta, c[lo:], ldc)
		} else {
			avxGemmIdx(nil, transA, false, m, hi-lo, k, alpha, a, lda, b, ldb, idx[lo:hi], beta, c[lo:], ldc)
		}
	})
}

// avxPackB packs op(B)[pc:pc+kb, jc:jc+nb] into panels of nrA columns,
// each k-major (dst[panel·kb·nrA + k·nrA + j]), the last one padded with
// zeros.
func avxPackB(transB bool, kb, nb int, b []float32, ldb, pc, jc int, dst []float32) {
	for jr := 0; jr < nb; jr += nrA {
		cols := min(nrA, nb-jr)
		pan := dst[jr*kb : jr*kb+kb*nrA]
		if !transB {
			for p := 0; p < kb; p++ {
				row := pan[p*nrA : (p+1)*nrA]
				src := b[(pc+p)*ldb+jc+jr:]
				copy(row, src[:cols])
				clear(row[cols:])
			}
			continue
		}
		j := 0
		// Four rows of B (four columns of the panel) at a time: each k
		// writes four adjacent floats of the panel row.
		for ; j+3 < cols; j += 4 {
			r0 := b[(jc+jr+j)*ldb+pc:]
			r0 = r0[:kb]
			r1 := b[(jc+jr+j+1)*ldb+pc:]
			r1 = r1[:kb]
			r2 := b[(jc+jr+j+2)*ldb+pc:]
			r2 = r2[:kb]
			r3 := b[(jc+jr+j+3)*ldb+pc:]
			r3 = r3[:kb]
			for p := range r0 {
				d := pan[p*nrA+j : p*nrA+j+4 : p*nrA+j+4]
				d[0], d[1], d[2], d[3] = r0[p], r1[p], r2[p], r3[p]
			}
		}
		for ; j < cols; j++ {
			src := b[(jc+jr+j)*ldb+pc:]
			src = src[:kb]
			for p, v := range src {
				pan[p*nrA+j] = v
			}
		}
		if cols < nrA {
			for p := 0; p < kb; p++ {
				clear(pan[p*nrA+cols : (p+1)*nrA])
			}
		}
	}
}

// avxPackA packs alpha·op(A)[ic:ic+mb, pc:pc+kb] into panels of mrA rows,
// each k-major (dst[panel·kb·mrA + k·mrA + i]), the last one padded with
// zeros.
func avxPackA(transA bool, mb, kb int, alpha float32, a []float32, lda, ic, pc int, dst []float32) {
	for ir := 0; ir < mb; ir += mrA {
		rows := min(mrA, mb-ir)
		pan := dst[ir*kb : ir*kb+kb*mrA]
		if transA {
			for p := 0; p < kb; p++ {
				src := a[(pc+p)*lda+ic+ir:]
				src = src[:rows]
				d := pan[p*mrA : (p+1)*mrA]
				if alpha == 1 {
					copy(d, src)
				} else {
					for i, v := range src {
						d[i] = alpha * v
					}
				}
				clear(d[rows:])
			}
			continue
		}
		for i := 0; i < rows; i++ {
			src := a[(ic+ir+i)*lda+pc:]
			src = src[:kb]
			d := pan[i:]
			p := 0
			if alpha == 1 {
				// Four k at a time: one bounds check per four stores
				// into the strided panel.
				for ; p+3 < kb; p += 4 {
					s4 := src[p : p+4 : p+4]
					d4 := d[p*mrA : p*mrA+3*mrA+1 : p*mrA+3*mrA+1]
					d4[0], d4[mrA], d4[2*mrA], d4[3*mrA] = s4[0], s4[1], s4[2], s4[3]
				}
			}
			for ; p < kb; p++ {
				d[p*mrA] = alpha * src[p]
			}
		}
		if rows < mrA {
			for p := 0; p < kb; p++ {
				clear(pan[p*mrA+rows : (p+1)*mrA])
			}
		}
	}
}
