//go:build !amd64 || purego

package kernels

// haveAdamSSE reports whether the SSE2 Adam kernels are built in;
// elsewhere adamScalar does all the work.
const haveAdamSSE = false

func adamSSE(p, g, m, v []float32, k *[12]float32)   { panic("kernels: no SSE Adam") }
func adamL2SSE(p, g, m, v []float32, k *[12]float32) { panic("kernels: no SSE Adam") }
