//go:build !amd64 || purego

package kernels

// haveSIMD reports whether the SSE2 kernels of simd_amd64.s are built in;
// elsewhere the scalar code does all the work.
const haveSIMD = false

// haveAVX2: no eight-lane kernels either.
const haveAVX2 = false

func geluErfSSE(x, y []float32)               { panic("kernels: no SIMD kernels") }
func geluErfBackwardSSE(x, dy, dx []float32)  { panic("kernels: no SIMD kernels") }
func expSSE(x, y []float32)                   { panic("kernels: no SIMD kernels") }
func reluSSE(x, y []float32)                  { panic("kernels: no SIMD kernels") }
func reluGradSSE(y, dy, dx []float32)         { panic("kernels: no SIMD kernels") }
func geluErfAVX2(x, y []float32)              { panic("kernels: no SIMD kernels") }
func geluErfBackwardAVX2(x, dy, dx []float32) { panic("kernels: no SIMD kernels") }
func expAVX2(x, y []float32)                  { panic("kernels: no SIMD kernels") }

func normScaleSSE(x, y []float32, m, iv, sc float32)     { panic("kernels: no SIMD kernels") }
func normAffineSSE(x, y []float32, m, iv, sc, b float32) { panic("kernels: no SIMD kernels") }
func normScaleVecSSE(x, scale, y []float32, m, iv float32) {
	panic("kernels: no SIMD kernels")
}
func normAffineVecSSE(x, scale, bias, y []float32, m, iv float32) {
	panic("kernels: no SIMD kernels")
}
func normBackSSE(x, g, dx []float32, m, iv, sc, mg, mgx float32) {
	panic("kernels: no SIMD kernels")
}
func normBackVecSSE(x, g, scale, dx []float32, m, iv, mg, mgx float32) {
	panic("kernels: no SIMD kernels")
}
