package dpengine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
)

// TestSourceNoiseLayout: a source's noise is runtime/noise's under the key
// of its stream position, with that position as the step and the slices
// laid out one after another (offsets carried across slices of lengths
// that are not multiples of a chunk or of four), on slices long enough to
// be split into several chunks.
func TestSourceNoiseLayout(t *testing.T) {
	lens := []int{5, noiseChunk + 3, 0, 1, 2*noiseChunk - 7}
	mk := func() [][]float32 {
		xs := make([][]float32, len(lens))
		for k, n := range lens {
			xs[k] = make([]float32, n)
			for i := range xs[k] {
				xs[k][i] = float32(i%13) - 6
			}
		}
		return xs
	}
	s := NewSeededSource(77)
	s.SetStream(4)
	got := mk()
	s.addGaussianScaled(runtime.CPU{}, 0.8, 0.125, got...)
	if s.Stream() != 5 {
		t.Fatalf("stream %d after one draw, want 5", s.Stream())
	}
	want := mk()
	key := s.key(4)
	var off uint64
	for k, x := range want {
		noise.Reference(x, noise.Key(key[:16]), 4, off, 0.8, 0.125)
		off += uint64(len(x))
		for i := range x {
			if math.Float32bits(got[k][i]) != math.Float32bits(x[i]) {
				t.Fatalf("slice %d [%d]: %v, Reference %v", k, i, got[k][i], x[i])
			}
		}
	}
}

// TestGaussianGolden: a seeded source draws the same noise as when the
// hash was taken. The hash changed once on purpose, when the noise moved
// to runtime/noise's counter-based scheme (element i a function of the
// key, the step and i alone; before, each chunk's slow draws took the next
// words of one shared sequence, and the hash was
// 8b417fc5c33cf73a92d822389ac0ecd7b4a1b36505afb5e3537d7981ab6575a5). Any
// other change to the draws, however small, must be deliberate and
// documented in docs/PRIVACY.md.
func TestGaussianGolden(t *testing.T) {
	x := make([]float32, 1000003) // four chunks, the last one partial
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	NewSeededSource(42).addGaussianScaled(runtime.CPU{}, 0.7, 1.0/3, x)
	h := sha256.New()
	for _, v := range x {
		h.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
	}
	const want = "6c1afc361aef339c95fd0a9e3e94933a1929dc111c5d425064a8f20c2616e5de"
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want {
		t.Fatalf("seeded noise hash %s, want %s", got, want)
	}
}
