package reference

import "github.com/dpfinetune/dpfinetune/runtime"

var _ runtime.LayoutOps = Device{}

// Copy implements runtime.LayoutOps.
func (Device) Copy(x, y []float32) {
	for i, v := range x {
		y[i] = v
	}
}

// Fill implements runtime.LayoutOps.
func (Device) Fill(v float32, y []float32) {
	for i := range y {
		y[i] = v
	}
}

// indexPairs returns the map of m as the pairs (i, j), y[i] reading x[j],
// in increasing i, and the elements of y that read nothing.
func indexPairs(m *runtime.IndexMap) (src []int, filled []bool) {
	src = make([]int, m.Len)
	for i := range src {
		src[i] = -1
	}
	if m.Runs == nil {
		for i, j := range m.Idx {
			if j >= 0 {
				src[i] = int(j)
			}
		}
	} else {
		r := m.Runs
		for k := range r.Dst {
			for e := 0; e < int(r.N[k]); e++ {
				src[int(r.Dst[k])+e] = int(r.Src[k]) + e
			}
		}
	}
	filled = make([]bool, m.Len)
	for i, j := range src {
		filled[i] = j < 0
	}
	return src, filled
}

// IndexGather implements runtime.LayoutOps element by element.
func (Device) IndexGather(x []float32, m *runtime.IndexMap, y []float32) {
	src, filled := indexPairs(m)
	for i, j := range src {
		if filled[i] {
			y[i] = m.Fill
		} else {
			y[i] = x[j]
		}
	}
}

// IndexGatherBackward implements runtime.LayoutOps: each dx element is a
// float64 sum of the dy elements that read it, rounded once.
func (Device) IndexGatherBackward(dy []float32, m *runtime.IndexMap, dx []float32) {
	acc := make([]float64, m.SrcLen)
	src, filled := indexPairs(m)
	for i, j := range src {
		if !filled[i] {
			acc[j] += float64(dy[i])
		}
	}
	for j, v := range acc {
		dx[j] = float32(v)
	}
}

// IndexGatherBackwardRows implements runtime.LayoutOps:
// IndexGatherBackward row by row.
func (d Device) IndexGatherBackwardRows(dy []float32, m *runtime.IndexMap, rows int, dx []float32) {
	for r := 0; r < rows; r++ {
		d.IndexGatherBackward(dy[r*m.Len:(r+1)*m.Len], m, dx[r*m.SrcLen:(r+1)*m.SrcLen])
	}
}

// transposeIndex returns, for element i of transpose(x, perm) (x of shape
// shape), the index of the x element it holds.
func transposeIndex(i int, shape, perm []int) int {
	st := strides(shape)
	j := 0
	for k := len(perm) - 1; k >= 0; k-- {
		d := shape[perm[k]]
		j += (i % d) * st[perm[k]]
		i /= d
	}
	return j
}

// Transpose implements runtime.LayoutOps from ONNX Transpose's
// definition: output axis k is input axis Perm[k].
func (Device) Transpose(x []float32, pp *runtime.PermPlan, y []float32) {
	n := numel(pp.Shape)
	for i := 0; i < n; i++ {
		y[i] = x[transposeIndex(i, pp.Shape, pp.Perm)]
	}
}

// TransposeBackward implements runtime.LayoutOps: every element of dy goes
// back to the element of x it was read from.
func (Device) TransposeBackward(dy []float32, pp *runtime.PermPlan, dx []float32) {
	n := numel(pp.Shape)
	for i := 0; i < n; i++ {
		dx[transposeIndex(i, pp.Shape, pp.Perm)] = dy[i]
	}
}

// Expand implements runtime.LayoutOps with numpy broadcasting.
func (Device) Expand(x []float32, xShape []int, y []float32, yShape []int) {
	n := numel(yShape)
	for i := 0; i < n; i++ {
		y[i] = x[broadcastIndex(i, yShape, xShape)]
	}
}

// Concat implements runtime.LayoutOps: zeros first, then each part's rows
// in place.
func (Device) Concat(xs [][]float32, b *runtime.RowBlocks, y []float32) {
	for i := range y[:b.Outer*b.Row] {
		y[i] = 0
	}
	for k, x := range xs {
		if x == nil {
			continue
		}
		n := b.Size[k]
		for o := 0; o < b.Outer; o++ {
			for e := 0; e < n; e++ {
				y[o*b.Row+b.Off[k]+e] = x[o*n+e]
			}
		}
	}
}

// Split implements runtime.LayoutOps.
func (Device) Split(x []float32, b *runtime.RowBlocks, ys [][]float32) {
	for k, y := range ys {
		if y == nil {
			continue
		}
		n := b.Size[k]
		for o := 0; o < b.Outer; o++ {
			for e := 0; e < n; e++ {
				y[o*n+e] = x[o*b.Row+b.Off[k]+e]
			}
		}
	}
}
