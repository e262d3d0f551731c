//go:build !amd64 || purego

package dpengine

// haveZigSSE reports whether zigFastSSE is built in; elsewhere zigDraw
// draws every value.
const haveZigSSE = false

func zigFastSSE(words []uint32, x []float32, tab *[zigLayers][2]uint32, std, post float32, slow []int32) int {
	panic("dpengine: no SSE ziggurat")
}
