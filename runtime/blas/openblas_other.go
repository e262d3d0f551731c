//go:build !((linux || darwin) && (amd64 || arm64))

package blas

import "errors"

func loadOpenBLAS() error {
	return errors.New("blas: run-time loading of OpenBLAS is not supported on this platform")
}

func obSgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("blas: OpenBLAS backend unavailable")
}
