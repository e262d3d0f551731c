package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestReduceBlock: ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum
// over adjacent axes (the groups split over the workers) give the bits of
// the one pass over x, on shapes and axis sets of every kind (reduced
// blocks with axes of size 1 inside, non-adjacent axes through the one
// pass, nothing reduced, everything reduced), and their gradients, taken
// over the workers, the one pass's too.
func TestReduceBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	ops := []ReduceOp{ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum}
	cases := []struct {
		x    []int
		axes []int
	}{
		{[]int{64, 197, 32}, []int{2}},     // F.normalize over the last axis
		{[]int{96, 300}, []int{1}},         // a standardized weight's rows
		{[]int{8, 33, 40}, []int{1}},       // a middle axis
		{[]int{8, 1, 33, 40}, []int{1, 2}}, // a block with an axis of size 1
		{[]int{6, 7, 1, 9}, []int{0, 3}},   // not adjacent: the one pass
		{[]int{300, 70}, []int{0, 1}},      // everything
		{[]int{5, 4}, nil},                 // nothing
	}
	blocks := 0
	for _, c := range cases {
		n := numel(c.x)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64()) + 0.05
			if i%7 == 0 {
				x[i] = float32(math.Abs(float64(x[i]))) // positive sums for ReduceLogSum
			}
		}
		kept := append([]int(nil), c.x...)
		for _, a := range c.axes {
			kept[a] = 1
		}
		if _, _, _, ok := reduceBlock(c.x, kept); ok {
			blocks++
		}
		grp := ReduceGroups(c.x, kept)
		m := numel(kept)
		for _, op := range ops {
			xx := x
			if op == ReduceLogSum {
				xx = make([]float32, n)
				for i, v := range x {
					xx[i] = float32(math.Abs(float64(v))) + 0.01
				}
			}
			got, want := make([]float32, m), make([]float32, m)
			st1, st2 := make([]float64, ReduceStateLen(op, m)), make([]float64, ReduceStateLen(op, m))
			for range 2 { // its state reused, as a plan's each forward
				CPU{}.ReduceAxes(op, xx, c.x, got, kept, grp, st1)
			}
			reduceAxesSerial(op, xx, want, grp, st2)
			if !sameBits(got, want) {
				t.Errorf("%v of %v over %v: not the one pass's bits", op, c.x, c.axes)
			}
			dy := make([]float32, m)
			for i := range dy {
				dy[i] = float32(rng.NormFloat64())
			}
			dx, dxSerial := make([]float32, n), make([]float32, n)
			CPU{}.ReduceAxesBackward(op, xx, c.x, got, dy, kept, grp, st1, dx)
			reduceBackwardRange(op, xx, want, dy, grp, st2, dxSerial, 0, n)
			if !sameBits(dx, dxSerial) {
				t.Errorf("%v of %v over %v: gradient not the one pass's bits", op, c.x, c.axes)
			}
		}
	}
	if blocks != len(cases)-1 {
		t.Errorf("%d of %d cases taken as one block, want all but the non-adjacent one", blocks, len(cases))
	}
}

// BenchmarkReduceL2Block: F.normalize's ReduceL2 over the last axis of
// Swin V2's queries (64 × 197 × 32), forward and backward, as ReduceAxes
// runs it (block) and as the one pass over x (serial).
func BenchmarkReduceL2Block(b *testing.B) {
	xs, kept := []int{64, 197, 32}, []int{64, 197, 1}
	x := make([]float32, numel(xs))
	for i := range x {
		x[i] = float32(i%13) * 0.1
	}
	y, dy := make([]float32, numel(kept)), make([]float32, numel(kept))
	dx := make([]float32, len(x))
	grp := ReduceGroups(xs, kept)
	st := make([]float64, ReduceStateLen(ReduceL2, len(y)))
	b.Run("block", func(b *testing.B) {
		for range b.N {
			CPU{}.ReduceAxes(ReduceL2, x, xs, y, kept, grp, st)
			CPU{}.ReduceAxesBackward(ReduceL2, x, xs, y, dy, kept, grp, st, dx)
		}
	})
	b.Run("serial", func(b *testing.B) {
		for range b.N {
			reduceAxesSerial(ReduceL2, x, y, grp, st)
			reduceBackwardRange(ReduceL2, x, y, dy, grp, st, dx, 0, len(x))
		}
	})
}
