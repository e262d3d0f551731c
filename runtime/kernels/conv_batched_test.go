package kernels

import "testing"

// TestConvBatchedChunks checks the batched convolution path with chunks
// that do not divide the batch against the per-sample path.
func TestConvBatchedChunks(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := newRand(3)
		s := ConvShape{N: 5, C: 3, M: 4, In: []int{6, 5}, Kernel: []int{3, 3}, Strides: []int{2, 1}, Pads: []int{1, 1, 1, 1}}
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		if convBatch(&s) == 0 {
			t.Fatal("shape does not take the batched path")
		}
		x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		dy := randn(r, s.N*s.M*s.T)
		one := make([]float32, s.ColSize()) // per-sample path
		y0, y1 := make([]float32, len(dy)), make([]float32, len(dy))
		ConvForward(&s, x, w, b, y0, one)
		ws := make([]float32, batchedWS(&s, 2))
		convForwardBatched(&s, 2, x, w, b, y1, ws)
		allClose32(t, "forward", y1, y0, 1e-5, 1e-5)
		dx0, dw0 := make([]float32, len(x)), make([]float32, len(w))
		dx1, dw1 := make([]float32, len(x)), make([]float32, len(w))
		ConvBackward(&s, x, w, dy, dx0, dw0, nil, one)
		convBackwardBatched(&s, 2, x, w, dy, dx1, dw1, ws)
		allClose32(t, "dx", dx1, dx0, 1e-5, 1e-5)
		allClose32(t, "dw", dw1, dw0, 1e-5, 1e-5)
		clear(dw1)
		convBackwardBatched(&s, 2, x, w, dy, nil, dw1, ws)
		allClose32(t, "dw only", dw1, dw0, 1e-5, 1e-5)
	})
}
