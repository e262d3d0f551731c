package runtime

import "github.com/dpfinetune/dpfinetune/runtime/kernels"

// LayoutOps is the group of GraphOps that move elements without
// arithmetic (but for the sums of backward scatters): copies, index maps
// (Gather, Slice, Pad, Tile as one gather by a precomputed index map),
// transposes, broadcasting copies, concatenation and split, and their
// backwards. Their compile-time plans (IndexMap, PermPlan, RowBlocks) are
// built once by the plan; a device may keep its own form of them keyed by
// the pointer.
type LayoutOps interface {
	// Copy computes y[i] = x[i] for i < len(x) (len(y) ≥ len(x)): the
	// shape-only operators (Reshape, Flatten, Squeeze, Unsqueeze,
	// Identity, Dropout as identity) and their backwards.
	Copy(x, y []float32)
	// Fill sets every element of y to v: gradients cleared before a
	// backward pass accumulates into them.
	Fill(v float32, y []float32)
	// IndexGather computes y[i] = x[idx[i]], or m.Fill where idx[i] < 0,
	// for the m.Len elements of y (x holds m.SrcLen): ONNX Slice, Gather
	// with constant indices, Pad, Tile.
	IndexGather(x []float32, m *IndexMap, y []float32)
	// IndexGatherBackward is IndexGather's adjoint: it overwrites dx (the
	// m.SrcLen elements of x) with dx[j] = Σ_{i: idx[i] = j} dy[i], the
	// sum taken in increasing i (zero where no element reads j).
	IndexGatherBackward(dy []float32, m *IndexMap, dx []float32)
	// IndexGatherBackwardRows is IndexGatherBackward on each of rows
	// rows at once: dy's row r (m.Len elements from r·m.Len) to dx's row
	// r (m.SrcLen elements from r·m.SrcLen), each row's sums those of
	// IndexGatherBackward. The DP engine maps a chunk of samples'
	// gradients with respect to an operand back to a parameter the
	// operand copies (a packed projection's slice, a gathered table).
	IndexGatherBackwardRows(dy []float32, m *IndexMap, rows int, dx []float32)
	// Transpose computes y = transpose(x, pp.Perm) for x of shape
	// pp.Shape (ONNX Transpose).
	Transpose(x []float32, pp *PermPlan, y []float32)
	// TransposeBackward is Transpose's adjoint, the inverse permutation:
	// dx = transpose(dy, pp.Perm⁻¹), dy having the transposed shape.
	TransposeBackward(dy []float32, pp *PermPlan, dx []float32)
	// Expand broadcasts x (shape xShape) to y (shape yShape, numpy
	// broadcasting, as ONNX Expand). Its backward is
	// LinalgOps.ReduceToShape.
	Expand(x []float32, xShape []int, y []float32, yShape []int)
	// Concat writes the parts into y (b.Outer rows of b.Row): row o of
	// part k (xs[k], b.Outer rows of b.Size[k]) goes to elements
	// [b.Off[k], b.Off[k]+b.Size[k]) of y's row o. A nil part, and the
	// elements no part covers, are zero. ONNX Concat, and the backward of
	// Split.
	Concat(xs [][]float32, b *RowBlocks, y []float32)
	// Split is Concat's adjoint: part k (ys[k], skipped when nil) gets
	// elements [b.Off[k], b.Off[k]+b.Size[k]) of each of x's b.Outer rows.
	// ONNX Split and Slices along one axis, and the backward of Concat.
	Split(x []float32, b *RowBlocks, ys [][]float32)
}

// Copy implements LayoutOps.
func (CPU) Copy(x, y []float32) { copy(y, x) }

// Fill implements LayoutOps.
func (CPU) Fill(v float32, y []float32) {
	if v == 0 {
		clear(y)
		return
	}
	for i := range y {
		y[i] = v
	}
}

// IndexGather implements LayoutOps: block copies when m holds runs.
func (CPU) IndexGather(x []float32, m *IndexMap, y []float32) { m.gather(x, y) }

// IndexGatherBackward implements LayoutOps: block copies when the runs of
// m are disjoint and cover x.
func (CPU) IndexGatherBackward(dy []float32, m *IndexMap, dx []float32) { m.gatherBackward(dy, dx) }

// IndexGatherBackwardRows implements LayoutOps: IndexGatherBackward row
// by row.
func (CPU) IndexGatherBackwardRows(dy []float32, m *IndexMap, rows int, dx []float32) {
	for r := 0; r < rows; r++ {
		m.gatherBackward(dy[r*m.Len:(r+1)*m.Len], dx[r*m.SrcLen:(r+1)*m.SrcLen])
	}
}

// Transpose implements LayoutOps with pp's row copies or tiles, split
// over the workers.
func (CPU) Transpose(x []float32, pp *PermPlan, y []float32) { pp.parallel(y, x, false) }

// TransposeBackward implements LayoutOps.
func (CPU) TransposeBackward(dy []float32, pp *PermPlan, dx []float32) { pp.parallel(dx, dy, true) }

// Expand implements LayoutOps with kernels.Expand.
func (CPU) Expand(x []float32, xShape []int, y []float32, yShape []int) {
	kernels.Expand(x, xShape, y, yShape)
}

// Concat implements LayoutOps, rows split over the workers.
func (CPU) Concat(xs [][]float32, b *RowBlocks, y []float32) { b.parallel(y, xs, false) }

// Split implements LayoutOps, rows split over the workers.
func (CPU) Split(x []float32, b *RowBlocks, ys [][]float32) { b.parallel(x, ys, true) }
