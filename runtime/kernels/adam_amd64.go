//go:build amd64 && !purego

package kernels

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// haveAdamSSE reports whether the SSE2 Adam kernels (adam_amd64.s) are
// built in.
const haveAdamSSE = true

// adamSSE is adamScalar with L2 = 0 on four lanes at a time; len(p) must
// be a multiple of 4 and g, m, v at least as long. k holds the AdamCoeffs
// in field order.
//
//go:noescape
func adamSSE(p, g, m, v []float32, k *[12]float32)

// adamL2SSE is adamSSE with the L2 term.
//
//go:noescape
func adamL2SSE(p, g, m, v []float32, k *[12]float32)

// haveAdamAVX reports whether adamAVX and adamL2AVX may run: the CPU has
// AVX and the operating system saves the YMM registers.
var haveAdamAVX = cpufeat.AVX

// adamAVX is adamSSE on eight lanes at a time (YMM registers), bit for bit
// the same result; len(p) must be a multiple of 8. Only call it when
// haveAdamAVX.
//
//go:noescape
func adamAVX(p, g, m, v []float32, k *[12]float32)

// adamL2AVX is adamAVX with the L2 term.
//
//go:noescape
func adamL2AVX(p, g, m, v []float32, k *[12]float32)
