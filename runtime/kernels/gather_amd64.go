//go:build amd64 && !purego

package kernels

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// haveGatherAVX512 reports whether gatherAVX512 may run: the CPU has
// AVX-512F and the operating system saves the opmask and ZMM registers.
var haveGatherAVX512 = cpufeat.AVX512F

// gatherAVX512 writes dst[j] = src[m[j]] for the first len(m) &^ 15
// indices, which must all lie in src; len(dst) ≥ len(m).
//
//go:noescape
func gatherAVX512(dst, src []float32, m []int32)

// addToAVX adds src into dst for the first len(src) &^ 15 elements; only
// call it when haveAdamAVX.
//
//go:noescape
func addToAVX(dst, src []float32)
