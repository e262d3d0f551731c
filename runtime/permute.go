package runtime

import (
	"cmp"
	"slices"
)

// Data movement without arithmetic: Transpose, and the index maps of
// Slice, Gather, Tile and Pad. In transformer exports these run on every
// attention block ((B,T,D) ↔ (T,B,D), head splits, the key transpose, the
// q/k/v slices of the packed projection), so they are compiled into block
// copies instead of an element-by-element walk.

// IndexMap is a compiled gather y[i] = x[idx[i]] (Fill where idx[i] < 0)
// of LayoutOps.IndexGather: the index map of Slice, Gather, Pad and Tile,
// computed once at compile time. It holds the map either element by
// element (Idx) or, when the map moves contiguous blocks (slices, gathers
// of rows, pads: runs of 8 elements or more on average), as those blocks
// (Runs), which a device copies block by block.
type IndexMap struct {
	// Len is the number of elements of y (the length of the map), SrcLen
	// that of x.
	Len, SrcLen int
	// Fill is the value of y where the map reads nothing (Pad's constant).
	Fill float32
	// Idx is the map element by element; nil when Runs holds it.
	Idx []int32
	// Runs is the map as blocks; nil when Idx holds it.
	Runs *IndexRuns
}

// NewIndexMap compiles the map idx (y has len(idx) elements, x srcLen,
// every idx[i] < srcLen; idx[i] < 0 reads fill). The map keeps idx when
// its runs of consecutive indices are shorter than 8 elements on average,
// and replaces it by the runs otherwise.
func NewIndexMap(idx []int32, srcLen int, fill float32) *IndexMap {
	m := &IndexMap{Len: len(idx), SrcLen: srcLen, Fill: fill}
	if r := runsOf(idx, srcLen); len(r.N)*8 <= len(idx) {
		m.Runs = r
	} else {
		m.Idx = idx
	}
	return m
}

// gather is the CPU's IndexGather on the element map.
func (m *IndexMap) gather(x, y []float32) {
	y = y[:m.Len] // the contract's m.Len elements, not a longer y's tail
	if m.Runs != nil {
		m.Runs.forward(x, y, m.Fill)
		return
	}
	fill := m.Fill
	for i, j := range m.Idx {
		if j < 0 {
			y[i] = fill
		} else {
			y[i] = x[j]
		}
	}
}

// gatherBackward is the CPU's IndexGatherBackward.
func (m *IndexMap) gatherBackward(dy, dx []float32) {
	dx = dx[:m.SrcLen] // the contract's m.SrcLen elements
	if m.Runs != nil {
		m.Runs.backward(dy, dx)
		return
	}
	clear(dx)
	for i, j := range m.Idx {
		if j >= 0 {
			dx[j] += dy[i]
		}
	}
}

// IndexRuns is an index map y[i] = x[idx[i]] compressed into maximal runs
// of consecutive indices: y[Dst[k] : Dst[k]+N[k]] = x[Src[k] : Src[k]+N[k]].
// Elements with idx < 0 (padding) belong to no run and hold the fill.
type IndexRuns struct {
	Dst, Src, N []int32
	Disjoint    bool // no two runs read the same x element
	Covers      bool // the runs read every x element
	Padded      bool // some y elements are fill
}

// runsOf compresses idx (x has nx elements).
func runsOf(idx []int32, nx int) *IndexRuns {
	r := &IndexRuns{}
	for i := 0; i < len(idx); {
		if idx[i] < 0 {
			r.Padded = true
			i++
			continue
		}
		j := i + 1
		for j < len(idx) && idx[j] == idx[j-1]+1 {
			j++
		}
		r.Dst = append(r.Dst, int32(i))
		r.Src = append(r.Src, idx[i])
		r.N = append(r.N, int32(j-i))
		i = j
	}
	r.setCoverage(nx)
	return r
}

// setCoverage sets Disjoint and Covers for a source of nx elements.
func (r *IndexRuns) setCoverage(nx int) {
	// Disjoint and Covers from the runs sorted by source: the runs do not
	// overlap when each starts at or after the previous one's end, and
	// then cover the source when their lengths add up to it. Only runs
	// that overlap need the union's length.
	order := make([]int32, len(r.Src))
	for k := range order {
		order[k] = int32(k)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(r.Src[a], r.Src[b]) })
	r.Disjoint = true
	total, end := 0, int32(0)
	for _, k := range order {
		if r.Src[k] < end {
			r.Disjoint = false
		}
		end = max(end, r.Src[k]+r.N[k])
		total += int(r.N[k])
	}
	if r.Disjoint {
		r.Covers = total == nx
		return
	}
	covered := 0 // the union's length, the runs by source
	end = 0
	for _, k := range order {
		lo, hi := max(r.Src[k], end), r.Src[k]+r.N[k]
		if hi > lo {
			covered += int(hi - lo)
		}
		end = max(end, hi)
	}
	r.Covers = covered == nx
}

// forward writes y from x (fill outside the runs).
func (r *IndexRuns) forward(x, y []float32, fill float32) {
	if r.Padded {
		for i := range y {
			y[i] = fill
		}
	}
	for k := range r.Dst {
		d, s, n := r.Dst[k], r.Src[k], r.N[k]
		copy(y[d:d+n], x[s:s+n])
	}
}

// backward writes dx from dy: a copy where the runs are disjoint, a sum
// otherwise (Gather with repeated indices, Tile).
func (r *IndexRuns) backward(dy, dx []float32) {
	if !r.Covers || !r.Disjoint {
		clear(dx)
	}
	for k := range r.Src {
		d, s, n := r.Dst[k], r.Src[k], r.N[k]
		if r.Disjoint {
			copy(dx[s:s+n], dy[d:d+n])
			continue
		}
		g := dy[d : d+n]
		for i, v := range dx[s : s+n] {
			dx[s+int32(i)] = v + g[i]
		}
	}
}

// PermPlan is a compiled Transpose of LayoutOps.Transpose: y =
// transpose(x, Perm) for x of shape Shape. The CPU runs the permutation
// with unit axes dropped and axes that stay adjacent merged, either as row
// copies (the last output axis is contiguous in the input) or as tiled 2-D
// transposes, split over its workers.
type PermPlan struct {
	// Shape is x's shape, Perm the permutation (output axis k is input
	// axis Perm[k]), as ONNX Transpose's perm.
	Shape, Perm []int

	n int
	// Row copies: output row r (of rowLen elements) is input
	// [srcRow[r], srcRow[r]+rowLen).
	rowLen int
	srcRow []int32
	// Tiles: for each outer index o, the A×C block with
	// y[dOut[o] + i·dA + j] = x[sOut[o] + i + j·sC].
	A, C, dA, sC int
	dOut, sOut   []int32
}

// NewPermPlan compiles y = transpose(x, perm) for x of shape shape.
func NewPermPlan(shape, perm []int) *PermPlan {
	pp := newPermPlan(shape, perm)
	pp.Shape = append([]int(nil), shape...)
	pp.Perm = append([]int(nil), perm...)
	return pp
}

// parallel runs the plan (or its inverse, with scatter) over the CPU's
// workers.
func (pp *PermPlan) parallel(dst, src []float32, scatter bool) {
	runJob(pp.units(), pp.grain(), func(j *cpuJob, lo, hi int) {
		j.pp.run(j.f[0], j.f[1], j.flag, lo, hi)
	}, func(j *cpuJob) { j.pp, j.f[0], j.f[1], j.flag = pp, dst, src, scatter })
}

const permTile = 16

// newPermPlan compiles the CPU part of a PermPlan for x of shape xs.
func newPermPlan(xs []int, perm []int) *PermPlan {
	st := strides(xs)
	// Output axes with their sizes and input strides, unit axes dropped.
	var shape, ss []int
	for _, a := range perm {
		if xs[a] != 1 {
			shape = append(shape, xs[a])
			ss = append(ss, st[a])
		}
	}
	// Merge output axes k, k+1 that are adjacent in the input too.
	for k := len(shape) - 2; k >= 0; k-- {
		if ss[k] == ss[k+1]*shape[k+1] {
			shape[k] *= shape[k+1]
			ss[k] = ss[k+1]
			shape = append(shape[:k+1], shape[k+2:]...)
			ss = append(ss[:k+1], ss[k+2:]...)
		}
	}
	pp := &PermPlan{n: numel(xs)}
	r := len(shape)
	if r <= 1 || ss[r-1] == 1 {
		pp.rowLen = 1
		if r >= 1 {
			pp.rowLen = shape[r-1]
		}
		rows := pp.n / max(pp.rowLen, 1)
		pp.srcRow = make([]int32, rows)
		if r >= 1 {
			forCoords(shape[:r-1], func(i int, c []int) {
				o := 0
				for k, ck := range c {
					o += ck * ss[k]
				}
				pp.srcRow[i] = int32(o)
			})
		}
		return pp
	}
	// The input's innermost axis is output axis a (stride 1); tile the
	// (a, last) plane and loop over the other axes.
	a := -1
	for k := range ss {
		if ss[k] == 1 {
			a = k
		}
	}
	ds := strides(shape)
	pp.A, pp.C, pp.dA, pp.sC = shape[a], shape[r-1], ds[a], ss[r-1]
	var outer, outerSS, outerDS []int
	for k := 0; k < r-1; k++ {
		if k != a {
			outer = append(outer, shape[k])
			outerSS = append(outerSS, ss[k])
			outerDS = append(outerDS, ds[k])
		}
	}
	no := numel(outer)
	pp.dOut, pp.sOut = make([]int32, no), make([]int32, no)
	forCoords(outer, func(i int, c []int) {
		d, s := 0, 0
		for k, ck := range c {
			d += ck * outerDS[k]
			s += ck * outerSS[k]
		}
		pp.dOut[i], pp.sOut[i] = int32(d), int32(s)
	})
	return pp
}

// units is the number of independent work items (rows, or outer index ×
// tile row) for a parallel split.
func (pp *PermPlan) units() int {
	if pp.srcRow != nil {
		return len(pp.srcRow)
	}
	return len(pp.dOut) * ((pp.A + permTile - 1) / permTile)
}

// grain is the number of units holding about 16K elements.
func (pp *PermPlan) grain() int {
	per := pp.rowLen
	if pp.srcRow == nil {
		per = permTile * pp.C
	}
	return grainFor(per)
}

// run moves units [lo, hi): y from x, or with scatter x-shaped dst from
// y-shaped src (the backward, the inverse permutation).
func (pp *PermPlan) run(dst, src []float32, scatter bool, lo, hi int) {
	if pp.srcRow != nil {
		L := int32(pp.rowLen)
		for r := lo; r < hi; r++ {
			o, s := int32(r)*L, pp.srcRow[r]
			if scatter {
				copy(dst[s:s+L], src[o:o+L])
			} else {
				copy(dst[o:o+L], src[s:s+L])
			}
		}
		return
	}
	tiles := (pp.A + permTile - 1) / permTile
	for u := lo; u < hi; u++ {
		o, i0 := u/tiles, (u%tiles)*permTile
		i1 := min(i0+permTile, pp.A)
		db, sb := int(pp.dOut[o]), int(pp.sOut[o])
		for j0 := 0; j0 < pp.C; j0 += permTile {
			j1 := min(j0+permTile, pp.C)
			for i := i0; i < i1; i++ {
				d := db + i*pp.dA
				s := sb + i
				if scatter {
					for j := j0; j < j1; j++ {
						dst[s+j*pp.sC] = src[d+j]
					}
				} else {
					for j := j0; j < j1; j++ {
						dst[d+j] = src[s+j*pp.sC]
					}
				}
			}
		}
	}
}

// RowBlocks is the compiled layout of LayoutOps.Concat and Split: an
// array of Outer rows of Row elements each, and parts k = 0, 1, … each
// of Outer rows of Size[k] elements, part k's row o being elements
// [Off[k], Off[k]+Size[k]) of the array's row o. ONNX Concat and Split
// along an axis are this with Outer the product of the axes before it
// and Row, Size[k] the elements from the axis on.
type RowBlocks struct {
	Outer, Row int
	Off, Size  []int

	gaps bool // the parts leave elements of a row uncovered
}

// NewRowBlocks compiles the layout of parts at offsets off, of sizes size,
// in outer rows of row elements.
func NewRowBlocks(outer, row int, off, size []int) *RowBlocks {
	b := &RowBlocks{Outer: outer, Row: row, Off: off, Size: size}
	covered := 0
	for _, s := range size {
		covered += s
	}
	b.gaps = covered != row
	return b
}

// rows moves rows [lo, hi): parts from x (split) or x from parts.
func (b *RowBlocks) rows(x []float32, parts [][]float32, split bool, lo, hi int) {
	for o := lo; o < hi; o++ {
		row := x[o*b.Row : (o+1)*b.Row]
		if !split && b.gaps {
			clear(row)
		}
		for k, t := range parts {
			off, n := b.Off[k], b.Size[k]
			switch {
			case split && t != nil:
				copy(t[o*n:(o+1)*n], row[off:off+n])
			case !split && t == nil:
				clear(row[off : off+n])
			case !split:
				copy(row[off:off+n], t[o*n:(o+1)*n])
			}
		}
	}
}

// parallel runs rows over the CPU's workers.
func (b *RowBlocks) parallel(x []float32, parts [][]float32, split bool) {
	runJob(b.Outer, grainFor(b.Row), func(j *cpuJob, lo, hi int) {
		j.rb.rows(j.f[0], j.parts, j.flag, lo, hi)
	}, func(j *cpuJob) { j.rb, j.f[0], j.parts, j.flag = b, x, parts, split })
}
