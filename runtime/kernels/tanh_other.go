//go:build !amd64 || purego

package kernels

// haveTanhSSE reports whether tanhSSE is built in; elsewhere tanhSlice
// runs tanhScalar on every element.
const haveTanhSSE = false

func tanhSSE(x, y []float32) { panic("kernels: no SSE tanh") }
