//go:build (linux || darwin) && (amd64 || arm64)

package blas

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// TestCblasFloatArgs checks that purego passes float32 arguments (alpha and
// beta, which travel in XMM registers on amd64) correctly to cblas_sgemm.
// The backend itself uses the all-pointer sgemm_ entry point; this test
// records that the float route works too.
func TestCblasFloatArgs(t *testing.T) {
	if OpenBLASError() != nil {
		t.Skip(OpenBLASError())
	}
	fn, err := purego.Dlsym(obHandle, "cblas_sgemm")
	if err != nil {
		t.Skip(err)
	}
	var cblasSgemm func(order, ta, tb, m, n, k int32, alpha float32, a unsafe.Pointer, lda int32, b unsafe.Pointer, ldb int32, beta float32, c unsafe.Pointer, ldc int32)
	purego.RegisterFunc(&cblasSgemm, fn)
	a := []float32{1, 2, 3, 4}
	b := []float32{5, 6, 7, 8}
	c := []float32{1, 1, 1, 1}
	const rowMajor, noTrans = 101, 111
	cblasSgemm(rowMajor, noTrans, noTrans, 2, 2, 2, 2, unsafe.Pointer(&a[0]), 2, unsafe.Pointer(&b[0]), 2, 0.5, unsafe.Pointer(&c[0]), 2)
	want := []float32{38.5, 44.5, 86.5, 100.5}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("cblas_sgemm via purego: got %v, want %v", c, want)
		}
	}
}

// BenchmarkThreadPolicy compares the package's policy (OpenBLAS pinned to
// one thread, the product split into bands over goroutines) with OpenBLAS's
// own pool at Threads() threads, on the same square product.
func BenchmarkThreadPolicy(b *testing.B) {
	if OpenBLASError() != nil {
		b.Skip(OpenBLASError())
	}
	prev, _ := SetBackend(OpenBLAS)
	defer SetBackend(prev)
	for _, n := range []int{256, 512, 1024} {
		x, y, z := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
		for i := range x {
			x[i], y[i] = float32(i%7)-3, float32(i%5)-2
		}
		report := func(b *testing.B) {
			b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		b.Run(fmt.Sprintf("split/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
			}
			report(b)
		})
		b.Run(fmt.Sprintf("openblas-pool/n=%d", n), func(b *testing.B) {
			purego.SyscallN(obSetThreads, uintptr(Threads()))
			defer purego.SyscallN(obSetThreads, 1)
			for b.Loop() {
				obSgemmSerial(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
			}
			report(b)
		})
	}
}
