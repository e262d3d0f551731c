package dpengine

import (
	"crypto/aes"
	"math"
	"testing"
)

// TestGaussianIntoMatchesScalar: gaussianInto (zigFastSSE for the fast
// groups on amd64) gives zigDraw's values bit for bit from the same
// keystream, slow draws and tails included, and leaves the keystream at
// the same place.
func TestGaussianIntoMatchesScalar(t *testing.T) {
	block, err := aes.NewCipher(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3, 4, 7, 4096, 4099, 3*4096 + 5, 100003} {
		for _, sp := range [][2]float32{{1, 1}, {0.37, 1.0 / 24}} {
			x, y := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i] = float32(i%17) - 8
				y[i] = x[i]
			}
			var g, h noiseBits
			g.reset(block, uint64(n))
			h.reset(block, uint64(n))
			gaussianInto(&g, x, sp[0], sp[1])
			for rest := y; len(rest) > 0; {
				words := h.take(len(rest))
				zigDraw(&h, words, rest, sp[0], sp[1])
				rest = rest[len(words):]
			}
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
					t.Fatalf("n %d std %v post %v [%d]: %v, scalar %v", n, sp[0], sp[1], i, x[i], y[i])
				}
			}
			if g.take(1)[0] != h.take(1)[0] || g.aux() != h.aux() {
				t.Fatalf("n %d: the keystreams diverge after the draws", n)
			}
		}
	}
}
