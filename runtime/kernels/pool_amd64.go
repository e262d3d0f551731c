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

// maxPoolRow2x2S1SSE is maxPoolRow2x2 with stride 1 on the first
// len(yr) &^ 3 outputs, four windows per step and branch-free; it returns
// the sum of their taps (NaN when the row needs the NaN rule). r0 and r1
// are consecutive input rows of W = len(r0) elements, base r0[0]'s flat
// index; the caller checks the lengths (W ≥ len(yr)+1, len(r1) ≥ W,
// len(ar) ≥ len(yr) &^ 3, or ar empty: no argmax stored).
//
//go:noescape
func maxPoolRow2x2S1SSE(r0, r1 []float32, base int32, yr []float32, ar []int32) float32
