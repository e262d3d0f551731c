//go:build amd64 && !purego

package dpengine

// haveZigSSE reports whether zigFastSSE (gaussian_amd64.s) is built in.
const haveZigSSE = true

// zigFastSSE runs gaussianInto's fast path four draws at a time over the
// first len(words) &^ 3 words: every draw inside its layer's rectangle
// sets x[i] ← (x[i] + std·z_i)·post, with the same float32 operations as
// zigDraw (so the same bits); the index of every other draw goes, in
// increasing order, to slow (x[i] untouched), and their count is returned.
// x must be at least as long as words and slow hold len(words) indices;
// tab is zigKW.
//
//go:noescape
func zigFastSSE(words []uint32, x []float32, tab *[zigLayers][2]uint32, std, post float32, slow []int32) int
