//go:build !amd64 || purego

package kernels

// haveTanhSSE reports whether tanhSSE is built in; elsewhere tanhSlice
// runs tanhScalar on every element.
const haveTanhSSE = false

func tanhSSE(x, y []float32) { panic("kernels: no SSE tanh") }

// haveTanhAVX2 reports whether tanhAVX2 may run: never here.
var haveTanhAVX2 = false

func tanhAVX2(x, y []float32) { panic("kernels: no AVX2 tanh") }
