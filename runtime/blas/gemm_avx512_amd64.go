//go:build amd64 && !purego

package blas

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// haveAVX512 reports whether the AVX-512 backend may run: the CPU has
// AVX-512F and the operating system saves the ZMM and opmask registers.
var haveAVX512 = cpufeat.AVX512F

//go:noescape
func sgemmKernel12x32(kc int, a, b, c *float32, ldc, rows int, mask uint64, acc int)

//go:noescape
func sgemmKernel12x32U(kc int, a *float32, lda int, b, c *float32, ldc int, mask uint64, acc int)
