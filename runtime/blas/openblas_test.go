//go:build (linux || darwin) && (amd64 || arm64)

package blas

import (
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
