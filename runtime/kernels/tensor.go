package kernels

import "fmt"

// TransposeShape returns the output shape of Transpose: out[i] = shape[perm[i]].
// A nil perm reverses the axes (the ONNX default).
func TransposeShape(shape, perm []int) []int {
	perm = defaultPerm(perm, len(shape))
	out := make([]int, len(shape))
	for i, p := range perm {
		out[i] = shape[p]
	}
	return out
}

func defaultPerm(perm []int, r int) []int {
	if perm != nil {
		if len(perm) != r {
			panic(fmt.Sprintf("kernels: perm %v for rank %d", perm, r))
		}
		seen := make([]bool, r)
		for _, p := range perm {
			if p < 0 || p >= r || seen[p] {
				panic(fmt.Sprintf("kernels: invalid perm %v", perm))
			}
			seen[p] = true
		}
		return perm
	}
	perm = make([]int, r)
	for i := range perm {
		perm[i] = r - 1 - i
	}
	return perm
}

// InversePerm returns the permutation undoing perm: the backward of
// Transpose(perm) is Transpose(InversePerm(perm)).
func InversePerm(perm []int) []int {
	inv := make([]int, len(perm))
	for i, p := range perm {
		inv[p] = i
	}
	return inv
}

// Transpose permutes the axes of x (shape) into y (shape TransposeShape).
func Transpose(x []float32, shape, perm []int, y []float32) {
	perm = defaultPerm(perm, len(shape))
	n := Numel(shape)
	checkLen("x", x, n)
	checkLen("y", y, n)
	if n == 0 {
		return
	}
	out := TransposeShape(shape, perm)
	inSt := Strides(shape)
	src := make([]int, len(perm))
	for i, p := range perm {
		src[i] = inSt[p]
	}
	it := newStridedIter(out, Strides(out), src)
	in := it.inner()
	forRows(&it, func(off [maxOps]int, m int) {
		dst := y[off[0] : off[0]+m]
		if in[1] == 1 {
			copy(dst, x[off[1]:off[1]+m])
			return
		}
		s, xs := in[1], x[off[1]:]
		for j := range dst {
			dst[j] = xs[j*s]
		}
	})
}

// Concat joins inputs (with the given shapes, equal except along axis)
// along axis into y.
func Concat(inputs [][]float32, shapes [][]int, axis int, y []float32) {
	outer, inner, total := concatGeom(shapes, axis)
	checkLen("y", y, outer*total*inner)
	parallelFor(outer, max(1, elementwiseGrain/max(1, total*inner)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			off := o * total * inner
			for k, x := range inputs {
				blk := shapes[k][NormAxis(axis, len(shapes[k]))] * inner
				copy(y[off:off+blk], x[o*blk:(o+1)*blk])
				off += blk
			}
		}
	})
}

// ConcatBackward splits dy back into the inputs' gradients dxs (a nil entry
// is skipped).
func ConcatBackward(dy []float32, shapes [][]int, axis int, dxs [][]float32) {
	outer, inner, total := concatGeom(shapes, axis)
	checkLen("dy", dy, outer*total*inner)
	parallelFor(outer, max(1, elementwiseGrain/max(1, total*inner)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			off := o * total * inner
			for k, dx := range dxs {
				blk := shapes[k][NormAxis(axis, len(shapes[k]))] * inner
				if dx != nil {
					copy(dx[o*blk:(o+1)*blk], dy[off:off+blk])
				}
				off += blk
			}
		}
	})
}

func concatGeom(shapes [][]int, axis int) (outer, inner, total int) {
	if len(shapes) == 0 {
		panic("kernels: Concat of nothing")
	}
	r := len(shapes[0])
	axis = NormAxis(axis, r)
	outer, inner = 1, 1
	for i, d := range shapes[0] {
		if i < axis {
			outer *= d
		} else if i > axis {
			inner *= d
		}
	}
	for _, s := range shapes {
		if len(s) != r {
			panic(fmt.Sprintf("kernels: Concat of ranks %v", shapes))
		}
		for i := range s {
			if i != axis && s[i] != shapes[0][i] {
				panic(fmt.Sprintf("kernels: Concat shapes %v differ off axis %d", shapes, axis))
			}
		}
		total += s[axis]
	}
	return outer, inner, total
}

// ResolveSlice applies the ONNX Slice rules to starts, ends, axes (nil: the
// first len(starts) axes; negative allowed) and steps (nil: all 1) for an
// input of the given shape, returning per input axis the first index, the
// step and the output length. Negative starts/ends count from the end and
// out-of-range ones (including INT64_MAX/MIN sentinels) are clamped:
// to [0, dim] for positive steps and [0, dim−1] / [−1, dim−1] for negative
// steps.
func ResolveSlice(shape []int, starts, ends, axes, steps []int64) (start, step, count []int, err error) {
	r := len(shape)
	start, step, count = make([]int, r), make([]int, r), make([]int, r)
	for i := range shape {
		start[i], step[i], count[i] = 0, 1, shape[i]
	}
	if len(ends) != len(starts) || axes != nil && len(axes) != len(starts) || steps != nil && len(steps) != len(starts) {
		return nil, nil, nil, fmt.Errorf("kernels: Slice starts/ends/axes/steps lengths differ")
	}
	seen := make([]bool, r)
	for k := range starts {
		a := k
		if axes != nil {
			a = int(axes[k])
			if a < -r || a >= r {
				return nil, nil, nil, fmt.Errorf("kernels: Slice axis %d out of range for rank %d", a, r)
			}
			if a < 0 {
				a += r
			}
		}
		if a >= r || seen[a] {
			return nil, nil, nil, fmt.Errorf("kernels: Slice axis %d invalid or repeated", a)
		}
		seen[a] = true
		st := int64(1)
		if steps != nil {
			st = steps[k]
		}
		if st == 0 {
			return nil, nil, nil, fmt.Errorf("kernels: Slice step 0")
		}
		d := int64(shape[a])
		s, e := starts[k], ends[k]
		if s < 0 {
			s += d
		}
		if e < 0 {
			e += d
		}
		var n int64
		if st > 0 {
			s = clamp64(s, 0, d)
			e = clamp64(e, 0, d)
			if e > s {
				n = (e - s + st - 1) / st
			}
		} else {
			s = clamp64(s, 0, d-1)
			e = clamp64(e, -1, d-1)
			if s > e {
				n = (s - e + (-st) - 1) / (-st)
			}
		}
		start[a], step[a], count[a] = int(s), int(st), int(n)
	}
	return start, step, count, nil
}

func clamp64(v, lo, hi int64) int64 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// sliceIter walks the output of a resolved slice with the matching input
// offsets.
func sliceIter(shape, start, step, count []int) (bcastIter, int) {
	inSt := Strides(shape)
	src := make([]int, len(shape))
	base := 0
	for i := range shape {
		src[i] = inSt[i] * step[i]
		base += start[i] * inSt[i]
	}
	return newStridedIter(count, Strides(count), src), base
}

// Slice copies the resolved slice (see ResolveSlice) of x (shape) into y
// (shape count).
func Slice(x []float32, shape, start, step, count []int, y []float32) {
	n := Numel(count)
	checkLen("x", x, Numel(shape))
	checkLen("y", y, n)
	if n == 0 {
		return
	}
	it, base := sliceIter(shape, start, step, count)
	in := it.inner()
	forRows(&it, func(off [maxOps]int, m int) {
		dst := y[off[0] : off[0]+m]
		s, i0 := in[1], base+off[1]
		if s == 1 {
			copy(dst, x[i0:i0+m])
			return
		}
		for j := range dst {
			dst[j] = x[i0+j*s]
		}
	})
}

// SliceBackward scatters dy (shape count) into dx (shape), zero elsewhere.
func SliceBackward(dy []float32, shape, start, step, count []int, dx []float32) {
	nx := Numel(shape)
	checkLen("dx", dx, nx)
	checkLen("dy", dy, Numel(count))
	clear(dx[:nx])
	if Numel(count) == 0 {
		return
	}
	it, base := sliceIter(shape, start, step, count)
	in := it.inner()
	forRows(&it, func(off [maxOps]int, m int) {
		src := dy[off[0] : off[0]+m]
		s, i0 := in[1], base+off[1]
		for j, v := range src {
			dx[i0+j*s] = v
		}
	})
}

// GatherShape returns the output shape of Gather: data[:axis] ++
// indices ++ data[axis+1:].
func GatherShape(dataShape, indShape []int, axis int) []int {
	axis = NormAxis(axis, len(dataShape))
	out := append([]int{}, dataShape[:axis]...)
	out = append(out, indShape...)
	return append(out, dataShape[axis+1:]...)
}

// Gather takes slices of data along axis at indices (ONNX Gather; negative
// indices count from the end) into y (shape GatherShape). An out-of-range
// index is an error.
func Gather(data []float32, dataShape []int, indices []int64, indShape []int, axis int, y []float32) error {
	outer, n, inner := axisSplit(dataShape, axis)
	ni := Numel(indShape)
	checkLen("data", data, outer*n*inner)
	checkLen("y", y, outer*ni*inner)
	if len(indices) < ni {
		panic("kernels: indices too short")
	}
	for _, ix := range indices[:ni] {
		if ix < -int64(n) || ix >= int64(n) {
			return fmt.Errorf("kernels: Gather index %d out of range [%d, %d)", ix, -n, n)
		}
	}
	parallelFor(outer*ni, max(1, elementwiseGrain/max(1, inner)), func(lo, hi int) {
		for w := lo; w < hi; w++ {
			o, k := w/ni, w%ni
			ix := int(indices[k])
			if ix < 0 {
				ix += n
			}
			copy(y[w*inner:(w+1)*inner], data[(o*n+ix)*inner:(o*n+ix+1)*inner])
		}
	})
	return nil
}

// GatherBackward scatter-adds dy into dx (shape dataShape, overwritten):
// repeated indices accumulate. Indices must have been validated by Gather.
func GatherBackward(dy []float32, dataShape []int, indices []int64, indShape []int, axis int, dx []float32) {
	outer, n, inner := axisSplit(dataShape, axis)
	ni := Numel(indShape)
	checkLen("dx", dx, outer*n*inner)
	checkLen("dy", dy, outer*ni*inner)
	clear(dx[:outer*n*inner])
	// Parallel over the outer axis only: within it indices may repeat.
	parallelFor(outer, max(1, elementwiseGrain/max(1, ni*inner)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			for k := 0; k < ni; k++ {
				ix := int(indices[k])
				if ix < 0 {
					ix += n
				}
				dst := dx[(o*n+ix)*inner : (o*n+ix+1)*inner]
				for j, v := range dy[(o*ni+k)*inner : (o*ni+k+1)*inner] {
					dst[j] += v
				}
			}
		}
	})
}

// PadMode selects how Pad fills the border.
type PadMode int

// Pad modes of ONNX Pad.
const (
	PadConstant PadMode = iota // the constant value
	PadReflect                 // mirror without repeating the edge
	PadEdge                    // repeat the edge
	PadWrap                    // periodic (opset 19)
)

// ParsePadMode maps the ONNX mode attribute to a PadMode.
func ParsePadMode(mode string) (PadMode, error) {
	switch mode {
	case "", "constant":
		return PadConstant, nil
	case "reflect":
		return PadReflect, nil
	case "edge":
		return PadEdge, nil
	case "wrap":
		return PadWrap, nil
	}
	return 0, fmt.Errorf("kernels: unknown pad mode %q", mode)
}

// PadShape returns the output shape of Pad: shape[i] + pads[i] + pads[r+i].
func PadShape(shape, pads []int) []int {
	r := len(shape)
	if len(pads) != 2*r {
		panic(fmt.Sprintf("kernels: %d pads for rank %d", len(pads), r))
	}
	out := make([]int, r)
	for i, d := range shape {
		out[i] = d + pads[i] + pads[r+i]
		if out[i] < 0 {
			panic(fmt.Sprintf("kernels: pads %v crop %v below zero", pads, shape))
		}
	}
	return out
}

// padMaps returns, per axis, the input index each output coordinate reads
// (−1: the constant).
func padMaps(shape, pads []int, mode PadMode) [][]int {
	r := len(shape)
	out := PadShape(shape, pads)
	maps := make([][]int, r)
	for a := 0; a < r; a++ {
		d := shape[a]
		m := make([]int, out[a])
		for o := range m {
			i := o - pads[a]
			switch {
			case i >= 0 && i < d:
			case d == 0:
				i = -1
			case mode == PadConstant:
				i = -1
			case mode == PadEdge:
				i = min(max(i, 0), d-1)
			case mode == PadWrap:
				i = ((i % d) + d) % d
			case mode == PadReflect:
				if d == 1 {
					i = 0
					break
				}
				period := 2 * (d - 1)
				i = ((i % period) + period) % period
				if i >= d {
					i = period - i
				}
			}
			m[o] = i
		}
		maps[a] = m
	}
	return maps
}

// Pad pads (or, with negative pads, crops) x (shape) into y (shape
// PadShape(shape, pads)); pads are [begin_1..begin_r, end_1..end_r].
func Pad(x []float32, shape, pads []int, mode PadMode, value float32, y []float32) {
	out := PadShape(shape, pads)
	checkLen("x", x, Numel(shape))
	checkLen("y", y, Numel(out))
	if Numel(out) == 0 {
		return
	}
	maps := padMaps(shape, pads, mode)
	padWalk(shape, out, maps, func(yoff int, row []int, xbase int, ok bool) {
		dst := y[yoff : yoff+len(row)]
		if !ok {
			for j := range dst {
				dst[j] = value
			}
			return
		}
		for j, i := range row {
			if i < 0 {
				dst[j] = value
			} else {
				dst[j] = x[xbase+i]
			}
		}
	})
}

// PadBackward adds each dy element to the input position it was read from
// (several for reflect/edge/wrap); dx (shape) is overwritten.
func PadBackward(dy []float32, shape, pads []int, mode PadMode, dx []float32) {
	out := PadShape(shape, pads)
	nx := Numel(shape)
	checkLen("dx", dx, nx)
	checkLen("dy", dy, Numel(out))
	clear(dx[:nx])
	if Numel(out) == 0 || nx == 0 {
		return
	}
	maps := padMaps(shape, pads, mode)
	padWalk(shape, out, maps, func(yoff int, row []int, xbase int, ok bool) {
		if !ok {
			return
		}
		for j, i := range row {
			if i >= 0 {
				dx[xbase+i] += dy[yoff+j]
			}
		}
	})
}

// padWalk visits the output rows (last axis) in order, with the input base
// offset of the row's outer coordinates (ok == false when one of them reads
// the constant). It runs serially: for reflect/edge/wrap several output rows
// feed one input row, which the backward accumulates into.
func padWalk(shape, out []int, maps [][]int, fn func(yoff int, row []int, xbase int, ok bool)) {
	r := len(out)
	if r == 0 {
		fn(0, []int{0}, 0, true)
		return
	}
	inSt := Strides(shape)
	last := out[r-1]
	nrows := Numel(out) / max(1, last)
	idx := make([]int, r-1)
	for row := 0; row < nrows; row++ {
		base, ok := 0, true
		for a := 0; a < r-1; a++ {
			i := maps[a][idx[a]]
			if i < 0 {
				ok = false
				break
			}
			base += i * inSt[a]
		}
		fn(row*last, maps[r-1], base, ok)
		for a := r - 2; a >= 0; a-- {
			idx[a]++
			if idx[a] < out[a] {
				break
			}
			idx[a] = 0
		}
	}
}
