package graph

import "testing"

func TestGatherSampleStride(t *testing.T) {
	seq := func(n int64) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(i)
		}
		return s
	}
	cases := []struct {
		name             string
		idx              []int64
		dim, inner, b, s int64 // s = 0: refused
	}{
		{"identity", seq(12), 12, 3, 4, 3},
		{"permuted within samples", []int64{2, 0, 1, 5, 3, 4, 8, 6, 7, 11, 9, 10}, 12, 3, 4, 3},
		{"negative indices", []int64{-12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1}, 12, 3, 4, 3},
		{"a subset of each sample", []int64{0, 3, 6, 9}, 12, 3, 4, 1},
		{"each sample twice", []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12, 3, 4, 3},
		{"inner samples (o·B + b)·2 + i", []int64{0, 1, 2, 3, 4, 5, 6, 7}, 8, 2, 2, 2},
		{"batch of one", []int64{2, 0, 1}, 3, 3, 1, 3},
		{"one element moved to the next sample", []int64{0, 1, 2, 3, 4, 5, 6, 7, 9, 8, 10, 11}, 12, 3, 4, 0},
		{"starts in sample 1", []int64{3, 4, 5, 0, 1, 2, 6, 7, 8, 9, 10, 11}, 12, 3, 4, 0},
		{"one sample only", []int64{0, 1, 2}, 12, 3, 4, 0},
		{"not whole cycles", []int64{0, 1, 2, 3, 4, 5}, 12, 3, 4, 0},
		{"out of range", []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12}, 12, 3, 4, 0},
		{"below range", []int64{-13, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12, 3, 4, 0},
		{"axis not a whole number of samples", seq(10), 10, 3, 4, 0},
		{"no indices", nil, 12, 3, 4, 0},
	}
	for _, c := range cases {
		s, ok := GatherSampleStride(c.idx, c.dim, c.inner, c.b)
		if ok != (c.s > 0) || s != c.s {
			t.Errorf("%s: stride %d %v, want %d", c.name, s, ok, c.s)
		}
	}
}

// TestScatterKeepsSamples: a ScatterND's constant index tuples keep the
// samples where each tuple's batch coordinate is its own position along
// the updates' batch axis.
func TestScatterKeepsSamples(t *testing.T) {
	// x[:, 1:, :] = u for x (2, 3, 2): tuples (b, r, c) over u (2, 2, 2).
	grid := func(b func(b int64) int64) []int64 {
		var idx []int64
		for bb := range int64(2) {
			for r := int64(1); r < 3; r++ {
				for c := range int64(2) {
					idx = append(idx, b(bb), r, c)
				}
			}
		}
		return idx
	}
	shape := []int64{2, 2, 2, 3}
	for _, c := range []struct {
		name     string
		idx      []int64
		shape    []int64
		dataAxis int
		dim      int64
		updAxis  int
		want     bool
	}{
		{"slice assignment", grid(func(b int64) int64 { return b }), shape, 0, 2, 0, true},
		{"negative batch index", grid(func(b int64) int64 { return b - 2 }), shape, 0, 2, 0, true},
		{"samples swapped", grid(func(b int64) int64 { return 1 - b }), shape, 0, 2, 0, false},
		{"every update into sample 0", grid(func(int64) int64 { return 0 }), shape, 0, 2, 0, false},
		{"updates' batch on another axis", grid(func(b int64) int64 { return b }), shape, 0, 2, 1, false},
		{"batch axis not addressed", grid(func(b int64) int64 { return b }), shape, 3, 2, 0, false},
		{"batch size differs", grid(func(b int64) int64 { return b }), shape, 0, 3, 0, false},
		// Tuples (r, b) over updates (rows 2, batch 2): the batch is the
		// updates' axis 1.
		{"batch second", []int64{0, 0, 0, 1, 2, 0, 2, 1}, []int64{2, 2, 2}, 1, 2, 1, true},
		{"batch second, wrong axis", []int64{0, 0, 0, 1, 2, 0, 2, 1}, []int64{2, 2, 2}, 1, 2, 0, false},
	} {
		if got := ScatterKeepsSamples(c.idx, c.shape, c.dataAxis, c.dim, c.updAxis); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
