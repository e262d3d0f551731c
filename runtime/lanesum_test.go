package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLaneOrder holds SumSqLanes and DotLanes to the lane order written
// out term by term (chunk, lane, halves, chunks in order) on lengths
// around the lane and chunk sizes, bit for bit, and checks that the
// inputs tell the lane order from the order of the terms (so that a sum
// in order would fail the comparison).
func TestLaneOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	literal := func(n int, term func(k int) float64) float64 {
		var s float64
		for c := 0; c < n; c += SumChunk {
			var lane [SumLanes]float64
			for k := c; k < min(c+SumChunk, n); k++ {
				lane[(k-c)%SumLanes] += term(k)
			}
			for w := SumLanes / 2; w >= 1; w /= 2 {
				for l := 0; l < w; l++ {
					lane[l] += lane[l+w]
				}
			}
			s += lane[0]
		}
		return s
	}
	differs := 0
	for _, n := range []int{0, 1, 31, 32, 33, 100, SumChunk - 1, SumChunk, SumChunk + 1, 3*SumChunk + 45} {
		a, b := make([]float32, n), make([]float32, n+3)
		for i := range a {
			a[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
		}
		for i := range b {
			b[i] = float32(r.NormFloat64())
		}
		sq := func(k int) float64 { return float64(a[k]) * float64(a[k]) }
		dot := func(k int) float64 { return float64(a[k]) * float64(b[k]) }
		if got, want := SumSqLanes(a), literal(n, sq); math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("n=%d: SumSqLanes = %v, the lane order gives %v", n, got, want)
		}
		if got, want := DotLanes(a, b), literal(n, dot); math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("n=%d: DotLanes = %v, the lane order gives %v", n, got, want)
		}
		// The float32 sums of AddRunSums, the same order in float32.
		var s32 float32
		for c := 0; c < n; c += SumChunk {
			var lane [SumLanes]float32
			for k := c; k < min(c+SumChunk, n); k++ {
				lane[(k-c)%SumLanes] += a[k]
			}
			for w := SumLanes / 2; w >= 1; w /= 2 {
				for l := 0; l < w; l++ {
					lane[l] += lane[l+w]
				}
			}
			s32 += lane[0]
		}
		if got := SumLanes32(a); math.Float32bits(got) != math.Float32bits(s32) {
			t.Errorf("n=%d: SumLanes32 = %v, the lane order gives %v", n, got, s32)
		}
		var inOrder float64
		for k := range a {
			inOrder += dot(k)
		}
		if inOrder != DotLanes(a, b) {
			differs++
		}
	}
	if differs == 0 {
		t.Error("no input tells the lane order from the order of the terms")
	}
}

var laneSink float64

// BenchmarkLaneSums times SumSqLanes and DotLanes beside the sum in the
// order of the terms they replaced, on 2¹⁶ elements:
//
//	go test ./runtime -run XXX -bench LaneSums
func BenchmarkLaneSums(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%97) * 0.01
	}
	b.Run("in-order", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var s float64
			for _, v := range x {
				s += float64(v) * float64(v)
			}
			laneSink = s
		}
	})
	b.Run("SumSqLanes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			laneSink = SumSqLanes(x)
		}
	})
	b.Run("DotLanes", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			laneSink = DotLanes(x, x)
		}
	})
}
