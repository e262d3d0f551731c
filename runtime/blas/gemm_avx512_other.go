//go:build !amd64 || purego

package blas

// haveAVX512 reports whether the AVX-512 backend may run: never here.
var haveAVX512 = false

func sgemmKernel12x32(kc int, a, b, c *float32, ldc, rows int, mask uint64, acc int) {
	panic("blas: no AVX-512 kernel")
}

func sgemmKernel12x32U(kc int, a *float32, lda int, b, c *float32, ldc int, mask uint64, acc int) {
	panic("blas: no AVX-512 kernel")
}
