//go:build !amd64 || purego

package kernels

func conv9SSE(y, p []float32, w *[9]float32, rows, n, ys, ps, rd, c1, c2 int) {
	panic("kernels: no SIMD kernels")
}

func dot9SSE(g, p []float32, acc *[9]float32, rows, n, gs, ps, rd, c1, c2 int) {
	panic("kernels: no SIMD kernels")
}
