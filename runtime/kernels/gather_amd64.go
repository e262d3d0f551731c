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

// scatterAddAVX512 adds src[j] into dst[m[j]] for the first len(m) &^ 15
// indices, which must all lie in dst and be distinct within each group of
// sixteen; len(src) ≥ len(m).
//
//go:noescape
func scatterAddAVX512(dst, src []float32, m []int32)

// addToAVX adds src into dst for the first len(src) &^ 15 elements; only
// call it when haveAdamAVX.
//
//go:noescape
func addToAVX(dst, src []float32)

// permRowsAVX512 writes, for r < rows, src[r·srcStep+idx[l]] to
// dst[r·dstStep+l] for the lanes l of the store mask (masks bits 0–15),
// idx[l] < 32: a permute of the row's first 32 floats, loaded under the
// load masks (bits 16–31: the first 16, bits 32–47: the next 16), which
// must cover every idx. Masked-off lanes are neither read nor written, so
// only the loaded and stored lanes need lie in src and dst.
//
//go:noescape
func permRowsAVX512(dst []float32, dstStep int, src []float32, srcStep int, rows int, idx *[16]int32, masks uint64)
