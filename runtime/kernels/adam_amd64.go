//go:build amd64 && !purego

package kernels

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
