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

// permRowsAVX512 writes, for r < rows, src[r·srcStep+idx[l]] to
// dst[r·dstStep+l] for the lanes l set in mask (idx[l] < 32): a permute
// of the 32 floats at each row start. The caller guarantees 32 floats
// readable at every row start and the masked lanes inside dst.
//
//go:noescape
func permRowsAVX512(dst []float32, dstStep int, src []float32, srcStep int, rows int, idx *[16]int32, mask uint64)
