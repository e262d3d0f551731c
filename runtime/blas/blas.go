package blas

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	par "github.com/dpfinetune/dpfinetune/internal/workers"
)

// Backend names reported by Backend.
const (
	// OpenBLAS is the backend that calls the run-time loaded OpenBLAS library.
	OpenBLAS = "openblas"
	// Go is the pure-Go backend.
	Go = "go"
	// AVX512 is the backend whose micro-kernel is AVX-512 assembly
	// (gemm_avx512.go), on CPUs that have AVX-512F.
	AVX512 = "avx512"
)

// EnvBackend is the environment variable that selects the backend: "go"
// forces the pure-Go kernel, "openblas" OpenBLAS (when it loads) and
// "avx512" the AVX-512 kernel (when the CPU has it). Unset (or anything
// else), the AVX-512 kernel runs where the CPU has it, else OpenBLAS where
// it loads, else Go.
const EnvBackend = "DPFINETUNE_BLAS"

// EnvLibrary is the environment variable naming an OpenBLAS shared library
// (a path or a soname) to try before the default names.
const EnvLibrary = "DPFINETUNE_OPENBLAS"

// Below this many multiply-adds a product runs in the calling goroutine:
// spawning workers costs a few microseconds, which is what such a product
// takes on one core.
const (
	goParallelMACs = 1 << 17
	obParallelMACs = 1 << 19
	// Products this small skip OpenBLAS: the foreign call costs more than a
	// direct loop.
	obMinMACs = 1 << 10
)

// avxTakes reports whether the AVX-512 backend runs an m×n×k product
// itself rather than leave it to OpenBLAS (when loaded). Both need two
// tiles of rows (24): below, most of a tile's rows are padding
// (cnn-fmnist's 16×64×676 weight gradient: 36 GMAC/s against OpenBLAS's
// 42). A row-major op(A) with alpha 1 is read in place
// (sgemmKernel12x32U), so only op(B) is packed, and the backend wins from
// 16 columns on (256×16×2304: 54 against 46; 48×96×96: 81 against 59) but
// not at 8 (20 against 41). Any other op(A) is packed in Go, which costs
// as much as the product for narrow or small products: there it needs 48
// columns and 2¹⁹ multiply-adds (256×32×2304 with Aᵀ packed: 51 against
// 56; BenchmarkBackends, one core).
func avxTakes(transA bool, alpha float32, m, n, k int) bool {
	if !obLoaded {
		return true
	}
	if m < 2*mrA {
		return false
	}
	if !transA && alpha == 1 {
		return n >= 16
	}
	return n >= 48 && m*n*k >= 1<<19
}

// backend values of sel.
const (
	selGo int32 = iota
	selOpenBLAS
	selAVX512
)

var (
	initOnce sync.Once
	sel      atomic.Int32 // the selected backend
	obLoaded bool         // OpenBLAS loaded (selectable)
	loadErr  error
	nthreads atomic.Int64
)

func setup() {
	initOnce.Do(func() {
		nthreads.Store(int64(runtime.GOMAXPROCS(0)))
		env := os.Getenv(EnvBackend)
		if env == Go {
			loadErr = fmt.Errorf("blas: %s=go", EnvBackend)
			sel.Store(selGo)
			return
		}
		loadErr = loadOpenBLAS()
		obLoaded = loadErr == nil
		switch {
		case haveAVX512 && env != OpenBLAS:
			sel.Store(selAVX512)
		case obLoaded:
			sel.Store(selOpenBLAS)
		default:
			sel.Store(selGo)
		}
	})
}

// Backend reports the backend Sgemm uses: AVX512, OpenBLAS or Go.
func Backend() string {
	setup()
	switch sel.Load() {
	case selAVX512:
		return AVX512
	case selOpenBLAS:
		return OpenBLAS
	}
	return Go
}

// OpenBLASError returns why OpenBLAS is not in use (nil when it is loaded).
func OpenBLASError() error {
	setup()
	return loadErr
}

// Available lists the backends that can be selected with SetBackend: Go
// always, OpenBLAS when the library was loaded, AVX512 when the CPU has
// it.
func Available() []string {
	setup()
	var a []string
	if haveAVX512 {
		a = append(a, AVX512)
	}
	if obLoaded {
		a = append(a, OpenBLAS)
	}
	return append(a, Go)
}

// SetBackend switches the backend (OpenBLAS or Go) and returns the previous
// one. It exists for tests and benchmarks that compare backends; it must not
// race with running products.
func SetBackend(name string) (prev string, err error) {
	prev = Backend()
	switch name {
	case Go:
		sel.Store(selGo)
	case OpenBLAS:
		if !obLoaded {
			return prev, fmt.Errorf("blas: OpenBLAS not available: %v", loadErr)
		}
		sel.Store(selOpenBLAS)
	case AVX512:
		if !haveAVX512 {
			return prev, fmt.Errorf("blas: the CPU has no AVX-512")
		}
		sel.Store(selAVX512)
	default:
		return prev, fmt.Errorf("blas: unknown backend %q", name)
	}
	return prev, nil
}

// Threads returns the number of workers Sgemm splits a large product over.
func Threads() int {
	setup()
	return int(nthreads.Load())
}

// SetThreads sets the number of workers Sgemm uses (n < 1 means
// GOMAXPROCS) and returns the previous value.
func SetThreads(n int) int {
	setup()
	if n < 1 {
		n = runtime.GOMAXPROCS(0)
	}
	return int(nthreads.Swap(int64(n)))
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices, where
// op(X) is X or Xᵀ, op(A) is m×k, op(B) is k×n and C is m×n. lda, ldb and
// ldc are row strides. As in BLAS, beta == 0 overwrites C without reading it
// (NaNs in C do not propagate) and alpha == 0 does not read A or B. Large
// products are split over Threads() goroutines; Sgemm is safe for concurrent
// use on disjoint outputs. It panics on inconsistent sizes or short slices.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, Threads())
}

// SgemmSerial is Sgemm restricted to the calling goroutine, for callers that
// already run one goroutine per core.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	setup()
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1)
}

// SgemmStrided computes batch independent products
//
//	C_i = alpha·op(A_i)·op(B_i) + beta·C_i,  i = 0..batch-1,
//
// with A_i = a[i·strideA:], B_i = b[i·strideB:], C_i = c[i·strideC:]. A
// stride of 0 for A or B reuses one operand for every product (for example a
// weight matrix against per-sample inputs). The C_i must not overlap. Small
// products are distributed over workers whole; large ones are split
// internally, so the call uses Threads() workers either way.
func SgemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	if batch < 0 || strideA < 0 || strideB < 0 || strideC < 0 {
		panic("blas: negative batch or stride")
	}
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	if batch > 1 && strideC == 0 {
		panic("blas: SgemmStrided with strideC == 0 would write every product to one C")
	}
	last := batch - 1
	checkGemm(transA, transB, m, n, k, sub(a, last*strideA), lda, sub(b, last*strideB), ldb, sub(c, last*strideC), ldc)
	workers := Threads()
	macs := m * n * k
	one := func(i, w int) {
		gemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc, w)
	}
	if workers <= 1 || batch == 1 || macs >= parallelThreshold() {
		for i := 0; i < batch; i++ {
			one(i, workers)
		}
		return
	}
	if workers > batch {
		workers = batch
	}
	var wg par.Group
	var next atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= batch {
					return
				}
				one(i, 1)
			}
		}()
	}
	wg.Wait()
}

// sub returns s[off:], or nil when off is past the end, so that the length
// checks report the short slice instead of a slicing panic.
func sub(s []float32, off int) []float32 {
	if off > len(s) {
		return nil
	}
	return s[off:]
}

func parallelThreshold() int {
	if sel.Load() != selGo {
		return obParallelMACs
	}
	return goParallelMACs
}

// checkGemm validates sizes, strides and slice lengths so that no backend,
// in particular the foreign one, can read or write out of bounds.
func checkGemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("blas: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if lda < max(1, ac) {
		panic(fmt.Sprintf("blas: lda=%d < %d", lda, ac))
	}
	if ldb < max(1, bc) {
		panic(fmt.Sprintf("blas: ldb=%d < %d", ldb, bc))
	}
	if ldc < max(1, n) {
		panic(fmt.Sprintf("blas: ldc=%d < %d", ldc, n))
	}
	if m == 0 || n == 0 {
		return
	}
	if need := (m-1)*ldc + n; len(c) < need {
		panic(fmt.Sprintf("blas: len(c)=%d < %d", len(c), need))
	}
	if k == 0 {
		return
	}
	if need := (ar-1)*lda + ac; len(a) < need {
		panic(fmt.Sprintf("blas: len(a)=%d < %d", len(a), need))
	}
	if need := (br-1)*ldb + bc; len(b) < need {
		panic(fmt.Sprintf("blas: len(b)=%d < %d", len(b), need))
	}
}

// scaleC applies C = beta·C, writing zeros when beta == 0 so that NaNs in an
// uninitialized C do not leak into the result.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// gemm dispatches a validated product to a backend, splitting it into
// bands over up to workers goroutines.
func gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, workers int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	macs := m * n * k
	be := sel.Load()
	if be == selAVX512 && !avxTakes(transA, alpha, m, n, k) {
		be = selOpenBLAS
	}
	serial := goSgemmSerial
	threshold := goParallelMACs
	align := 4
	switch {
	case be == selAVX512:
		serial = avxSgemmSerial
		threshold = obParallelMACs
		align = 16
	case be == selOpenBLAS && macs >= obMinMACs && fitsInt32(m, n, k, lda, ldb, ldc):
		serial = obSgemmSerial
		threshold = obParallelMACs
		align = 16
	}
	if workers > 1 && macs >= threshold {
		w := min(workers, max(1, macs/threshold))
		parallelBands(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, w, align, serial)
		return
	}
	serial(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func fitsInt32(v ...int) bool {
	for _, x := range v {
		if x > 1<<31-1 {
			return false
		}
	}
	return true
}

type serialFunc func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// parallelBands splits C into workers bands of rows (when m ≥ n) or
// columns, each computed by one serial call. Band edges are aligned to the
// micro-kernel width so no band gets a ragged tile that others do not.
func parallelBands(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, workers, align int, serial serialFunc) {
	byRows := m >= n
	dim := n
	if byRows {
		dim = m
	}
	chunk := (dim + workers - 1) / workers
	chunk = (chunk + align - 1) / align * align
	if chunk >= dim {
		serial(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	runBands(dim, chunk, func(lo, hi int) {
		if byRows {
			aoff := lo * lda
			if transA {
				aoff = lo
			}
			serial(transA, transB, hi-lo, n, k, alpha, a[aoff:], lda, b, ldb, beta, c[lo*ldc:], ldc)
			return
		}
		boff := lo
		if transB {
			boff = lo * ldb
		}
		serial(transA, transB, m, hi-lo, k, alpha, a, lda, b[boff:], ldb, beta, c[lo:], ldc)
	})
}

// runBands runs band(lo, hi) over [0, n) cut into bands of chunk, each on
// a goroutine of its own but the last, which the caller's goroutine takes.
func runBands(n, chunk int, band func(lo, hi int)) {
	var wg par.Group
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		if hi == n {
			band(lo, hi)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			band(lo, hi)
		}()
	}
	wg.Wait()
}
