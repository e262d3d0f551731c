package dpengine

import (
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestConvRowsOf: the layouts of a convolution's rows read from the batch
// strides — a row per sample, a sample's windows contiguous or
// interleaved, and the rows each sample owns — and the refusals: a row
// holding parts of two samples, and input and output gradient disagreeing.
func TestConvRowsOf(t *testing.T) {
	view := func(rows, row, stride int) *runtime.View {
		return &runtime.View{BatchAxis: 0, BatchStride: stride, Data: make([]float32, rows*row)}
	}
	for _, c := range []struct {
		name      string
		N, B      int
		x, dy     *runtime.View
		want      convRows
		rows      [][]int // sample i's rows, in order
		wantError string
	}{
		{"a row per sample", 4, 4, view(4, 6, 6), view(4, 2, 2), convRows{B: 4, k: 1, run: 1}, [][]int{{0}, {1}, {2}, {3}}, ""},
		{"contiguous windows", 6, 2, view(6, 6, 18), view(6, 2, 6), convRows{B: 2, k: 3, run: 3}, [][]int{{0, 1, 2}, {3, 4, 5}}, ""},
		{"interleaved windows", 6, 2, view(6, 6, 6), view(6, 2, 2), convRows{B: 2, k: 3, run: 1}, [][]int{{0, 2, 4}, {1, 3, 5}}, ""},
		{"blocks of two, interleaved", 8, 2, view(8, 6, 12), view(8, 2, 4), convRows{B: 2, k: 4, run: 2}, [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}}, ""},
		{"a row over two samples", 6, 2, view(6, 6, 9), view(6, 2, 3), convRows{}, nil, "parts of two samples"},
		{"x and dy disagree", 6, 2, view(6, 6, 18), view(6, 2, 2), convRows{}, nil, "assign its rows to samples differently"},
	} {
		f, err := convRowsOf(c.N, c.B, c.x, c.dy)
		if c.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantError) {
				t.Errorf("%s: %+v, %v; want an error with %q", c.name, f, err, c.wantError)
			}
			continue
		}
		if err != nil || f != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, f, err, c.want)
			continue
		}
		for i, rows := range c.rows {
			for j, r := range rows {
				if got := f.row(i, j); got != r {
					t.Errorf("%s: sample %d's row %d is %d, want %d", c.name, i, j, got, r)
				}
				// In the data's order, chunkRow over the batch is row.
				if got := f.chunkRow(c.B, i, j); got != r {
					t.Errorf("%s: chunkRow(B, %d, %d) = %d, want the row %d", c.name, i, j, got, r)
				}
			}
		}
		// The batched forms take every valid layout, and a chunk's
		// scratch rows, as rowBlocks copies them from the data, hold row
		// j of the chunk's sample i at chunkRow(n, i, j).
		if !f.batchable() {
			t.Errorf("%s: not batchable", c.name)
		}
		for i0 := 0; i0 < c.B; i0++ {
			for n := 1; i0+n <= c.B; n++ {
				scratch := map[int]int{} // scratch row → data row
				f.rowBlocks(i0, n, func(slot, first, count int) {
					for r := 0; r < count; r++ {
						scratch[slot+r] = first + r
					}
				})
				if len(scratch) != n*f.k {
					t.Errorf("%s: chunk %d+%d: %d scratch rows, want %d", c.name, i0, n, len(scratch), n*f.k)
				}
				for i := 0; i < n; i++ {
					for j := 0; j < f.k; j++ {
						if got, ok := scratch[f.chunkRow(n, i, j)]; !ok || got != f.row(i0+i, j) {
							t.Errorf("%s: chunk %d+%d: scratch row %d holds data row %d (%v), want sample %d's row %d, %d", c.name, i0, n, f.chunkRow(n, i, j), got, ok, i0+i, j, f.row(i0+i, j))
						}
					}
				}
			}
		}
	}
}
