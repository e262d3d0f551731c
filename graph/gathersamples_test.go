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
