package cuda

import (
	"math/rand/v2"
	"testing"
)

// TestLayoutMagic checks layoutMagic's division by multiply-high, as
// layout_offsets computes it, against the division: every divisor up to
// 4096, powers of two and their neighbours, and random ones up to 2³¹−1,
// at the indices next to multiples of the divisor (where a floor could be
// off by one), at the top of the range and at random.
func TestLayoutMagic(t *testing.T) {
	div := func(i uint32, m uint32, s uint8) uint32 {
		hi := uint32((uint64(i) * uint64(m)) >> 32)
		return (hi + i) >> s
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var divisors []int
	for d := 1; d <= 4096; d++ {
		divisors = append(divisors, d)
	}
	for k := 12; k < 31; k++ {
		divisors = append(divisors, 1<<k-1, 1<<k, 1<<k+1)
	}
	for range 2000 {
		divisors = append(divisors, 1+rng.IntN(1<<31-1))
	}
	const top = 1<<31 - 1
	for _, d := range divisors {
		m, s := layoutMagic(d)
		check := func(i int) {
			if i < 0 || i > top {
				return
			}
			if got, want := div(uint32(i), m, s), uint32(i/d); got != want {
				t.Fatalf("%d / %d: %d by multiply-high (m %d, s %d), want %d", i, d, got, m, s, want)
			}
		}
		for _, i := range []int{0, 1, d - 1, d, d + 1, top, top - 1, top - top%d, top - top%d - 1} {
			check(i)
		}
		for range 64 {
			k := rng.IntN(top/d + 1)
			check(k*d - 1)
			check(k * d)
			check(k*d + d - 1)
			check(rng.IntN(top + 1))
		}
	}
}

// TestLayoutWide runs the operations that iterate over a Layout
// (broadcast binaries and their gradients, Where, Expand, transposes,
// ReduceToShape) through layout_offsets' 64-bit divisions, which layouts
// of 2³¹ elements or more take, on the value cases the multiply-high
// path passes.
func TestLayoutWide(t *testing.T) {
	defer func(w bool) { layoutWide = w }(layoutWide)
	layoutWide = true
	d := emuDevice(t)
	t.Run("elementwise", func(t *testing.T) { testValueCases(t, d, elementwiseCases, 6) })
	t.Run("layout", func(t *testing.T) { testValueCases(t, d, layoutCases, 25) })
	t.Run("linalg", func(t *testing.T) { testValueCases(t, d, linalgCases, 40) })
}
