//go:build !amd64 || purego

package kernels

// havePoolSSE reports whether maxPoolBackS1SSE is built in; elsewhere
// maxPoolBackRowS1 does all the work in Go.
const havePoolSSE = false

func maxPoolBackS1SSE(r0, r1, y, dy, d0, d1 []float32, n int, carry *[2]float32) {
	panic("kernels: no SIMD kernels")
}

func maxPoolRow2x2S1SSE(r0, r1 []float32, base int32, yr []float32, ar []int32) float32 {
	panic("kernels: no SIMD kernels")
}
