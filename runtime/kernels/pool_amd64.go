//go:build amd64 && !purego

package kernels

// havePoolSSE reports whether maxPoolBackS1SSE (pool_amd64.s) is built in.
const havePoolSSE = true

// maxPoolBackS1SSE is maxPoolBackRowS1's loop on the first n outputs (n a
// multiple of 4, bounds checked by it), four windows per step; carry holds
// the right-column sums riding into the next window, in and out.
//
//go:noescape
func maxPoolBackS1SSE(r0, r1, y, dy, d0, d1 []float32, n int, carry *[2]float32)
