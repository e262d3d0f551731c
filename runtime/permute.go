package runtime

// Data movement without arithmetic: Transpose, and the index maps of
// Slice, Gather, Tile and Pad. In transformer exports these run on every
// attention block ((B,T,D) ↔ (T,B,D), head splits, the key transpose, the
// q/k/v slices of the packed projection), so they are compiled into block
// copies instead of an element-by-element walk.

// runs is an index map y[i] = x[idx[i]] compressed into maximal runs of
// consecutive indices: y[dst[k] : dst[k]+n[k]] = x[src[k] : src[k]+n[k]].
// Elements with idx < 0 (padding) belong to no run and hold fill.
type runs struct {
	dst, src, n []int32
	disjoint    bool // no two runs read the same x element
	covers      bool // the runs read every x element
	padded      bool // some y elements are fill
}

// runsOf compresses idx (x has nx elements).
func runsOf(idx []int32, nx int) *runs {
	r := &runs{}
	for i := 0; i < len(idx); {
		if idx[i] < 0 {
			r.padded = true
			i++
			continue
		}
		j := i + 1
		for j < len(idx) && idx[j] == idx[j-1]+1 {
			j++
		}
		r.dst = append(r.dst, int32(i))
		r.src = append(r.src, idx[i])
		r.n = append(r.n, int32(j-i))
		i = j
	}
	seen := make([]bool, nx)
	r.disjoint = true
	count := 0
	for k := range r.src {
		for s := r.src[k]; s < r.src[k]+r.n[k]; s++ {
			if seen[s] {
				r.disjoint = false
			} else {
				count++
			}
			seen[s] = true
		}
	}
	r.covers = count == nx
	return r
}

// forward writes y from x (fill outside the runs).
func (r *runs) forward(x, y []float32, fill float32) {
	if r.padded {
		for i := range y {
			y[i] = fill
		}
	}
	for k := range r.dst {
		d, s, n := r.dst[k], r.src[k], r.n[k]
		copy(y[d:d+n], x[s:s+n])
	}
}

// backward writes dx from dy: a copy where the runs are disjoint, a sum
// otherwise (Gather with repeated indices, Tile).
func (r *runs) backward(dy, dx []float32) {
	if !r.covers || !r.disjoint {
		clear(dx)
	}
	for k := range r.src {
		d, s, n := r.dst[k], r.src[k], r.n[k]
		if r.disjoint {
			copy(dx[s:s+n], dy[d:d+n])
			continue
		}
		g := dy[d : d+n]
		for i, v := range dx[s : s+n] {
			dx[s+int32(i)] = v + g[i]
		}
	}
}

// permPlan is a compiled Transpose: the permutation with unit axes dropped
// and axes that stay adjacent merged, run either as row copies (the last
// output axis is contiguous in the input) or as tiled 2-D transposes.
type permPlan struct {
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

const permTile = 16

// newPermPlan compiles y = transpose(x, perm) for x of shape xs.
func newPermPlan(xs []int, perm []int) *permPlan {
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
	pp := &permPlan{n: numel(xs)}
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
func (pp *permPlan) units() int {
	if pp.srcRow != nil {
		return len(pp.srcRow)
	}
	return len(pp.dOut) * ((pp.A + permTile - 1) / permTile)
}

// grain is the number of units holding about 16K elements.
func (pp *permPlan) grain() int {
	per := pp.rowLen
	if pp.srcRow == nil {
		per = permTile * pp.C
	}
	return grainFor(per)
}

// run moves units [lo, hi): y from x, or with scatter x-shaped dst from
// y-shaped src (the backward, the inverse permutation).
func (pp *permPlan) run(dst, src []float32, scatter bool, lo, hi int) {
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
