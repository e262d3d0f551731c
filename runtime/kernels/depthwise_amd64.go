//go:build amd64 && !purego

package kernels

// conv9SSE and dot9SSE are the SSE2 kernels of depthwise_amd64.s; call
// them through corr9 and dot9, which check the bounds.
//
//go:noescape
func conv9SSE(y, p []float32, w *[9]float32, rows, n, ys, ps, rd, c1, c2 int)

//go:noescape
func dot9SSE(g, p []float32, acc *[9]float32, rows, n, gs, ps, rd, c1, c2 int)
