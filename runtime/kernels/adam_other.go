//go:build !amd64 || purego

package kernels

// haveAdamSSE reports whether the SSE2 Adam kernels are built in;
// elsewhere adamScalar does all the work.
const haveAdamSSE = false

func adamSSE(p, g, m, v []float32, k *[12]float32)   { panic("kernels: no SSE Adam") }
func adamL2SSE(p, g, m, v []float32, k *[12]float32) { panic("kernels: no SSE Adam") }

// haveAdamAVX reports whether the AVX Adam kernels may run: never here.
var haveAdamAVX = false

func adamAVX(p, g, m, v []float32, k *[12]float32)   { panic("kernels: no AVX Adam") }
func adamL2AVX(p, g, m, v []float32, k *[12]float32) { panic("kernels: no AVX Adam") }
