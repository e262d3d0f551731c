package runtime

import (
	"fmt"
	"math/rand"
	"testing"
)

// naiveTranspose is the definition: y[c] = x[c permuted back].
func naiveTranspose(x []float32, xs, perm []int) []float32 {
	ys := make([]int, len(perm))
	for k, a := range perm {
		ys[k] = xs[a]
	}
	st := strides(xs)
	y := make([]float32, len(x))
	forCoords(ys, func(i int, c []int) {
		j := 0
		for k, ck := range c {
			j += ck * st[perm[k]]
		}
		y[i] = x[j]
	})
	return y
}

// TestPermPlan checks compiled transposes (row copies and tiled) against
// the definition, forward and scattered back, on the transformer shapes
// and random ones, split into parallel ranges at arbitrary points.
func TestPermPlan(t *testing.T) {
	cases := []struct{ shape, perm []int }{
		{[]int{32, 65, 192}, []int{1, 0, 2}}, // (B,T,D) → (T,B,D): rows
		{[]int{65, 96, 64}, []int{1, 2, 0}},  // the key transpose: tiles
		{[]int{65, 96, 64}, []int{1, 0, 2}},
		{[]int{32, 192, 64}, []int{0, 2, 1}},
		{[]int{1, 7, 1, 5}, []int{3, 2, 1, 0}},
		{[]int{3, 1, 4}, []int{1, 0, 2}}, // identity after dropping the unit axis
		{[]int{5}, []int{0}},
		{[]int{1}, []int{0}},
		{[]int{2, 3, 4, 5}, []int{0, 3, 1, 2}},
		{[]int{17, 33}, []int{1, 0}}, // ragged tiles
		{[]int{2, 3, 4, 5, 6}, []int{4, 1, 0, 3, 2}},
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		r := 1 + rng.Intn(5)
		shape := make([]int, r)
		for k := range shape {
			shape[k] = 1 + rng.Intn(6)
		}
		cases = append(cases, struct{ shape, perm []int }{shape, rng.Perm(r)})
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.shape, c.perm), func(t *testing.T) {
			n := numel(c.shape)
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(i + 1)
			}
			want := naiveTranspose(x, c.shape, c.perm)
			pp := newPermPlan(c.shape, c.perm)
			units := pp.units()
			cut := rng.Intn(units + 1)
			y := make([]float32, n)
			pp.run(y, x, false, 0, cut)
			pp.run(y, x, false, cut, units)
			back := make([]float32, n)
			pp.run(back, y, true, cut, units)
			pp.run(back, y, true, 0, cut)
			for i := range want {
				if y[i] != want[i] {
					t.Fatalf("y[%d] = %v, want %v (rows %v)", i, y[i], want[i], pp.srcRow != nil)
				}
				if back[i] != x[i] {
					t.Fatalf("scattered back [%d] = %v, want %v", i, back[i], x[i])
				}
			}
		})
	}
}

// TestIndexMapRuns checks the block-copy form of index maps against the
// element form: slices (disjoint runs), gathers with repeated rows
// (overlapping: the backward sums) and pads (fill, partial cover).
func TestIndexMapRuns(t *testing.T) {
	cases := []struct {
		name string
		nx   int
		idx  []int32
	}{
		{"slice", 40, func() []int32 {
			var idx []int32
			for r := 0; r < 4; r++ {
				for j := 2; j < 8; j++ {
					idx = append(idx, int32(r*10+j))
				}
			}
			return idx
		}()},
		{"gather_repeat", 30, func() []int32 {
			var idx []int32
			for _, row := range []int{2, 0, 2, 1} {
				for j := 0; j < 10; j++ {
					idx = append(idx, int32(row*10+j))
				}
			}
			return idx
		}()},
		{"pad", 12, []int32{-1, -1, 0, 1, 2, 3, -1, 4, 5, 6, 7, -1, 8, 9, 10, 11, -1, -1}},
		{"permutation", 6, []int32{3, 4, 5, 0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := make([]float32, c.nx)
			for i := range x {
				x[i] = float32(i) + 0.5
			}
			dy := make([]float32, len(c.idx))
			for i := range dy {
				dy[i] = float32(i*i%7) - 3
			}
			const fill = -9
			wantY, wantDx := make([]float32, len(c.idx)), make([]float32, c.nx)
			for i, j := range c.idx {
				if j < 0 {
					wantY[i] = fill
					continue
				}
				wantY[i] = x[j]
				wantDx[j] += dy[i]
			}
			r := runsOf(c.idx, c.nx)
			y, dx := make([]float32, len(c.idx)), make([]float32, c.nx)
			for i := range dx {
				dx[i] = 123 // stale: backward must overwrite
			}
			r.forward(x, y, fill)
			r.backward(dy, dx)
			for i := range wantY {
				if y[i] != wantY[i] {
					t.Errorf("y[%d] = %v, want %v", i, y[i], wantY[i])
				}
			}
			for i := range wantDx {
				if dx[i] != wantDx[i] {
					t.Errorf("dx[%d] = %v, want %v", i, dx[i], wantDx[i])
				}
			}
		})
	}
}

// TestIndexGatherKeepsTail: IndexGather writes the map's Len elements of
// y and IndexGatherBackward its SrcLen elements of dx, as LayoutOps says,
// and leave a longer operand's tail alone — with an element map and with
// runs (padded and not).
func TestIndexGatherKeepsTail(t *testing.T) {
	const n = 32 // long runs, so that the map compiles to runs
	ramp := func(from int32) []int32 {
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = from + int32(i)
			if idx[i] >= n {
				idx[i] = -1
			}
		}
		return idx
	}
	short := []int32{2, -1, 0, 1} // an element map
	for _, idx := range [][]int32{ramp(0), ramp(3), short} {
		m := NewIndexMap(idx, n, 9)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i + 1)
		}
		y := make([]float32, len(idx)+2)
		y[len(idx)], y[len(idx)+1] = 7, 7
		CPU{}.IndexGather(x, m, y)
		dy := make([]float32, len(idx))
		dx := make([]float32, n+2)
		dx[n], dx[n+1] = 5, 5
		CPU{}.IndexGatherBackward(dy, m, dx)
		if y[len(idx)] != 7 || y[len(idx)+1] != 7 || dx[n] != 5 || dx[n+1] != 5 {
			t.Errorf("idx %v (runs %v): tails y %v, dx %v, want 7 7 and 5 5 untouched", idx, m.Runs != nil, y[len(idx):], dx[n:])
		}
	}
}
