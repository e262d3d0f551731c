package blas

// Blocking of the pure-Go kernel (GotoBLAS loop order). The micro-kernel
// keeps an mr×nr tile of C in registers: Go does not vectorize and amd64
// leaves 15 usable X registers, so 2×4 accumulators plus the 6 operands of
// one k step is the largest tile that does not spill (measured: 2×4 runs at
// ~6 GFLOP/s per core, 4×4 and 3×4 at 3–4 because of spills). kc·nr and
// kc·mr slivers stay in L1, an mc×kc block of A in L2.
const (
	mr = 2
	nr = 4
	kc = 256
	mc = 64
	nc = 512
)

// packBufs recycles the packing buffers (576 KiB each) of goSgemmSerial:
// as many exist as products have run at once. A sync.Pool missed now and
// then (its per-P caches miss when goroutines move between Ps, and it
// empties at GC), and every miss allocated a whole buffer, which the
// steady-state allocation tests saw as hundreds of KiB per step.
var packBufs = make(chan *[]float32, 64)

func getPackBuf() *[]float32 {
	select {
	case b := <-packBufs:
		return b
	default:
		buf := make([]float32, kc*nc+mc*kc)
		return &buf
	}
}

func putPackBuf(b *[]float32) {
	select {
	case packBufs <- b:
	default:
	}
}

// smallMACs bounds the products done by direct loops: packing costs more
// than it saves below it.
const smallMACs = 4096

// goSgemmSerial is the single-goroutine pure-Go Sgemm on validated
// arguments with m, n, k > 0 and alpha != 0.
func goSgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	scaleC(m, n, beta, c, ldc)
	if m*n*k <= smallMACs {
		smallGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	bufp := getPackBuf()
	buf := *bufp
	bp := buf[:kc*nc]
	ap := buf[kc*nc:]
	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			packB(transB, kb, nb, b, ldb, pc, jc, bp)
			for ic := 0; ic < m; ic += mc {
				mb := min(mc, m-ic)
				packA(transA, mb, kb, alpha, a, lda, ic, pc, ap)
				macroKernel(mb, nb, kb, ap, bp, c[ic*ldc+jc:], ldc)
			}
		}
	}
	putPackBuf(bufp)
}

// smallGemm accumulates C += alpha·op(A)·op(B) with plain loops.
func smallGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		crow := c[i*ldc : i*ldc+n]
		for p := 0; p < k; p++ {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			if av == 0 {
				continue
			}
			if transB {
				for j := range crow {
					crow[j] += av * b[j*ldb+p]
				}
			} else {
				brow := b[p*ldb : p*ldb+n]
				for j, bv := range brow {
					crow[j] += av * bv
				}
			}
		}
	}
}

// packA copies the mb×kb block of alpha·op(A) at (i0, p0) into mr-row
// panels, each stored k-major (mr values per k), zero-padding the last panel.
// Folding alpha in here costs mb·kb multiplies instead of mb·nb at the end.
func packA(transA bool, mb, kb int, alpha float32, a []float32, lda, i0, p0 int, dst []float32) {
	for ir := 0; ir < mb; ir += mr {
		rows := min(mr, mb-ir)
		panel := dst[ir*kb : ir*kb+mr*kb]
		if transA {
			// A is stored k×m: the mr values of one k step are adjacent.
			for p := 0; p < kb; p++ {
				src := a[(p0+p)*lda+i0+ir:]
				d := panel[p*mr : p*mr+mr]
				if rows == mr {
					d[0] = alpha * src[0]
					d[1] = alpha * src[1]
				} else {
					d[0] = alpha * src[0]
					d[1] = 0
				}
			}
			continue
		}
		for r := 0; r < mr; r++ {
			if r >= rows {
				for p := 0; p < kb; p++ {
					panel[p*mr+r] = 0
				}
				continue
			}
			src := a[(i0+ir+r)*lda+p0 : (i0+ir+r)*lda+p0+kb]
			for p, v := range src {
				panel[p*mr+r] = alpha * v
			}
		}
	}
}

// packB copies the kb×nb block of op(B) at (p0, j0) into nr-column panels,
// each stored k-major (nr values per k), zero-padding the last panel.
func packB(transB bool, kb, nb int, b []float32, ldb, p0, j0 int, dst []float32) {
	for jr := 0; jr < nb; jr += nr {
		cols := min(nr, nb-jr)
		panel := dst[jr*kb : jr*kb+nr*kb]
		if !transB {
			if cols == nr {
				for p := 0; p < kb; p++ {
					src := b[(p0+p)*ldb+j0+jr : (p0+p)*ldb+j0+jr+nr]
					d := panel[p*nr : p*nr+nr]
					d[0], d[1], d[2], d[3] = src[0], src[1], src[2], src[3]
				}
				continue
			}
			for p := 0; p < kb; p++ {
				d := panel[p*nr : p*nr+nr]
				for j := 0; j < nr; j++ {
					if j < cols {
						d[j] = b[(p0+p)*ldb+j0+jr+j]
					} else {
						d[j] = 0
					}
				}
			}
			continue
		}
		// B is stored n×k: each column of op(B) is a contiguous row.
		for j := 0; j < nr; j++ {
			if j >= cols {
				for p := 0; p < kb; p++ {
					panel[p*nr+j] = 0
				}
				continue
			}
			src := b[(j0+jr+j)*ldb+p0 : (j0+jr+j)*ldb+p0+kb]
			for p, v := range src {
				panel[p*nr+j] = v
			}
		}
	}
}

// macroKernel accumulates the packed mb×kb by kb×nb product into C.
func macroKernel(mb, nb, kb int, ap, bp []float32, c []float32, ldc int) {
	var tile [mr * nr]float32
	for jr := 0; jr < nb; jr += nr {
		cols := min(nr, nb-jr)
		bpan := bp[jr*kb : jr*kb+nr*kb]
		for ir := 0; ir < mb; ir += mr {
			rows := min(mr, mb-ir)
			apan := ap[ir*kb : ir*kb+mr*kb]
			microKernel(kb, apan, bpan, &tile)
			if rows == mr && cols == nr {
				c0 := c[ir*ldc+jr : ir*ldc+jr+nr]
				c1 := c[(ir+1)*ldc+jr : (ir+1)*ldc+jr+nr]
				c0[0] += tile[0]
				c0[1] += tile[1]
				c0[2] += tile[2]
				c0[3] += tile[3]
				c1[0] += tile[4]
				c1[1] += tile[5]
				c1[2] += tile[6]
				c1[3] += tile[7]
				continue
			}
			for r := 0; r < rows; r++ {
				crow := c[(ir+r)*ldc+jr : (ir+r)*ldc+jr+cols]
				for j := range crow {
					crow[j] += tile[r*nr+j]
				}
			}
		}
	}
}

// microKernel computes the 2×4 tile Σ_p a[p]ᵀ b[p] of two packed slivers.
// Advancing the slices (rather than indexing by p) lets the compiler drop
// the bounds checks; the loads are interleaved with the updates so that the
// 8 accumulators and 6 operands fit in registers.
func microKernel(kb int, a, b []float32, tile *[mr * nr]float32) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	a = a[:kb*mr]
	b = b[:kb*nr]
	for len(a) >= 2 && len(b) >= 4 {
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a0, a1 := a[0], a[1]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a = a[2:]
		b = b[4:]
	}
	*tile = [mr * nr]float32{c00, c01, c02, c03, c10, c11, c12, c13}
}
