//go:build amd64 && !purego

package kernels

// haveTanhSSE reports whether tanhSSE (tanh_amd64.s) is built in.
const haveTanhSSE = true

// tanhSSE writes tanhScalar of each element of x to y, four lanes at a
// time; len(x) must be a multiple of 4 and len(y) at least len(x).
//
//go:noescape
func tanhSSE(x, y []float32)
