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
			}
		}
	}
}
