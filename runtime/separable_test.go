package runtime

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestSeparableMap: the runs newSeparableMap builds from the axes' tables
// are the element map's (NewIndexMap of separableIndex, runsOf's maximal
// runs, coverage and padding; the coverage, from the runs sorted by
// source, equal to a count element by element) on random Slice-, Pad-
// and Gather-like
// tables: steps, reversed axes, padding at either end, repeated and
// consecutive indices, rows that continue each other, a Gather's inner
// elements as a nil table; most of the maps keep runs, the rest are
// element maps alike.
func TestSeparableMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	withRuns := 0
	for trial := range 2000 {
		rank := 1 + r.IntN(4)
		shape := make([]int, rank)
		src := make([]int, rank)
		for k := range shape {
			shape[k] = 1 + r.IntN(6)
			src[k] = 1 + r.IntN(7)
		}
		// A long last axis, so that many maps keep runs.
		shape[rank-1] = 1 + r.IntN(32)
		src[rank-1] = shape[rank-1] + r.IntN(8)
		st := strides(src)
		tables := make([][]int32, rank)
		for k := range tables {
			tables[k] = make([]int32, shape[k])
			switch r.IntN(6) {
			case 0: // Gather: any indices, repeats among them
				for c := range tables[k] {
					tables[k][c] = int32(r.IntN(src[k]) * st[k])
				}
				continue
			case 1: // Pad: padding at either end
				lo := r.IntN(3)
				for c := range tables[k] {
					if v := c - lo; v < 0 || v >= src[k] {
						tables[k][c] = -1
					} else {
						tables[k][c] = int32(v * st[k])
					}
				}
				continue
			}
			// Slice: a start and a step (mostly 1; 2, −1 and 0, a
			// repeated index, sometimes), wrapped into the axis.
			step := [...]int{1, 1, 1, 2, -1, 0}[r.IntN(6)]
			start := r.IntN(src[k])
			for c := range tables[k] {
				v := ((start+c*step)%src[k] + src[k]) % src[k]
				tables[k][c] = int32(v * st[k])
			}
		}
		if r.IntN(4) == 0 { // a Gather's inner elements: the identity, as nil
			src[rank-1] = shape[rank-1]
			st = strides(src)
			for k := range tables[:rank-1] {
				for c := range tables[k] {
					if tables[k][c] >= 0 {
						tables[k][c] = int32(r.IntN(src[k]) * st[k])
					}
				}
			}
			tables[rank-1] = nil
		}
		n := numel(src)
		want := NewIndexMap(separableIndex(shape, tables), n, 0.5)
		got := newSeparableMap(shape, tables, n, 0.5)
		if want.Runs == nil {
			// An element map: the separable form gives the same one.
			if got.Runs != nil || !reflect.DeepEqual(got.Idx, want.Idx) {
				t.Fatalf("trial %d: shape %v tables %v: element map %v, want %v (runs %+v)", trial, shape, tables, got.Idx, want.Idx, got.Runs)
			}
			continue
		}
		withRuns++
		// Disjoint and Covers, counted element by element.
		seen, disjoint, count := make([]bool, n), true, 0
		for k := range want.Runs.Src {
			for e := want.Runs.Src[k]; e < want.Runs.Src[k]+want.Runs.N[k]; e++ {
				if seen[e] {
					disjoint = false
				} else {
					count++
				}
				seen[e] = true
			}
		}
		if want.Runs.Disjoint != disjoint || want.Runs.Covers != (count == n) {
			t.Fatalf("trial %d: runs %+v of %d elements: Disjoint %v, Covers %v; counted %v, %v", trial, want.Runs, n, want.Runs.Disjoint, want.Runs.Covers, disjoint, count == n)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: shape %v tables %v:\n got %+v %+v\nwant %+v %+v", trial, shape, tables, got, got.Runs, want, want.Runs)
		}
	}
	if withRuns < 200 {
		t.Errorf("only %d of 2000 maps kept runs", withRuns)
	}
}
