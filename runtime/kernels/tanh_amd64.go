//go:build amd64 && !purego

package kernels

import "github.com/dpfinetune/dpfinetune/internal/cpufeat"

// haveTanhSSE reports whether tanhSSE (tanh_amd64.s) is built in.
const haveTanhSSE = true

// tanhSSE writes tanhScalar of each element of x to y, four lanes at a
// time; len(x) must be a multiple of 4 and len(y) at least len(x).
//
//go:noescape
func tanhSSE(x, y []float32)

// haveTanhAVX2 reports whether tanhAVX2 may run: the CPU has AVX2 and the
// operating system saves the YMM registers.
var haveTanhAVX2 = cpufeat.AVX2

// tanhAVX2 is tanhSSE on eight lanes, bit for bit the same results;
// len(x) must be a multiple of 8. Only call it when haveTanhAVX2.
//
//go:noescape
func tanhAVX2(x, y []float32)
