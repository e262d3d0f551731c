package kernels

import "fmt"

// Numel returns the number of elements of a tensor of the given shape (1 for
// a scalar, shape of length 0).
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("kernels: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// Strides returns the row-major element strides of shape.
func Strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// NormAxis maps a possibly negative axis into [0, rank) and panics when it
// is out of range.
func NormAxis(axis, rank int) int {
	if axis < -rank || axis >= rank {
		panic(fmt.Sprintf("kernels: axis %d out of range for rank %d", axis, rank))
	}
	if axis < 0 {
		axis += rank
	}
	return axis
}

// BroadcastShape returns the multidirectional (numpy) broadcast of shapes.
func BroadcastShape(shapes ...[]int) ([]int, error) {
	r := 0
	for _, s := range shapes {
		r = max(r, len(s))
	}
	out := make([]int, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case d == o || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("kernels: shapes %v are not broadcastable", shapes)
			}
		}
	}
	// A zero-size dimension wins over 1.
	for _, s := range shapes {
		off := r - len(s)
		for i, d := range s {
			if d == 0 {
				out[off+i] = 0
			}
		}
	}
	return out, nil
}

func mustBroadcast(shapes ...[]int) []int {
	s, err := BroadcastShape(shapes...)
	if err != nil {
		panic(err)
	}
	return s
}

func checkLen(name string, s []float32, n int) {
	if len(s) < n {
		panic(fmt.Sprintf("kernels: %s has length %d, need %d", name, len(s), n))
	}
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// maxOps is the most operands (output included) an iterator walks together.
const maxOps = 4

// maxRank is the highest tensor rank the strided iterators accept.
const maxRank = 12

// bcastIter walks an output shape together with up to maxOps operands whose
// shapes broadcast to it, one innermost row at a time. Adjacent dimensions
// are merged whenever every operand is contiguous across them, so the common
// cases (same shape, scalar, per-channel (1,C,1,1)) become a few long rows.
// Fixed-size arrays keep it off the heap.
type bcastIter struct {
	nd   int                  // merged rank (≥ 1); dims[nd-1] is the row length
	dims [maxRank]int         // merged dims
	st   [maxOps][maxRank]int // per-operand strides over dims (0 = broadcast)
	nops int
}

// newBcastIter builds an iterator over out for operands of the given shapes,
// each right-aligned and broadcastable to out (dimension 1 or equal).
func newBcastIter(out []int, shapes ...[]int) bcastIter {
	if len(shapes) > maxOps {
		panic("kernels: too many operands")
	}
	r := len(out)
	if r > maxRank {
		panic(fmt.Sprintf("kernels: rank %d > %d", r, maxRank))
	}
	var strides [maxOps][maxRank]int
	for k, s := range shapes {
		if len(s) > r {
			panic(fmt.Sprintf("kernels: shape %v has higher rank than %v", s, out))
		}
		acc := 1
		for i := r - 1; i >= 0; i-- {
			j := i - (r - len(s))
			if j < 0 {
				continue
			}
			d := s[j]
			switch d {
			case out[i]:
				if d != 1 {
					strides[k][i] = acc
				}
			case 1:
			default:
				panic(fmt.Sprintf("kernels: shape %v does not broadcast to %v", s, out))
			}
			acc *= d
		}
	}
	return mergeIter(out, len(shapes), &strides)
}

// newStridedIter builds an iterator over dims for operands with arbitrary
// element strides (one stride per dim each).
func newStridedIter(dims []int, strides ...[]int) bcastIter {
	if len(dims) > maxRank || len(strides) > maxOps {
		panic(fmt.Sprintf("kernels: rank %d or %d operands unsupported", len(dims), len(strides)))
	}
	var st [maxOps][maxRank]int
	for k, s := range strides {
		copy(st[k][:], s)
	}
	return mergeIter(dims, len(strides), &st)
}

// mergeIter drops unit dims and merges neighbours across which every
// operand is contiguous.
func mergeIter(dims []int, nops int, strides *[maxOps][maxRank]int) bcastIter {
	it := bcastIter{nops: nops}
	for i, d := range dims {
		if d == 1 {
			continue
		}
		n := it.nd
		if n > 0 {
			merge := true
			for k := 0; k < nops; k++ {
				if it.st[k][n-1] != strides[k][i]*d {
					merge = false
					break
				}
			}
			if merge {
				it.dims[n-1] *= d
				for k := 0; k < nops; k++ {
					it.st[k][n-1] = strides[k][i]
				}
				continue
			}
		}
		it.dims[n] = d
		for k := 0; k < nops; k++ {
			it.st[k][n] = strides[k][i]
		}
		it.nd++
	}
	if it.nd == 0 {
		it.nd, it.dims[0] = 1, 1
	}
	return it
}

// rows returns the number of innermost rows and the row length.
func (it *bcastIter) rows() (nrows, rowLen int) {
	rowLen = it.dims[it.nd-1]
	nrows = 1
	for _, d := range it.dims[:it.nd-1] {
		nrows *= d
	}
	return nrows, rowLen
}

// inner returns each operand's stride along the row.
func (it *bcastIter) inner() (s [maxOps]int) {
	for k := 0; k < it.nops; k++ {
		s[k] = it.st[k][it.nd-1]
	}
	return s
}

// each calls fn with the operands' base offsets of rows [lo, hi).
func (it *bcastIter) each(lo, hi int, fn func(off [maxOps]int)) {
	no := it.nd - 1
	outer := it.dims[:no]
	var ix [maxRank]int
	rem := lo
	for i := no - 1; i >= 0; i-- {
		ix[i] = rem % outer[i]
		rem /= outer[i]
	}
	var off [maxOps]int
	for k := 0; k < it.nops; k++ {
		for i := 0; i < no; i++ {
			off[k] += ix[i] * it.st[k][i]
		}
	}
	for r := lo; r < hi; r++ {
		fn(off)
		for i := no - 1; i >= 0; i-- {
			ix[i]++
			for k := 0; k < it.nops; k++ {
				off[k] += it.st[k][i]
			}
			if ix[i] < outer[i] {
				break
			}
			for k := 0; k < it.nops; k++ {
				off[k] -= ix[i] * it.st[k][i]
			}
			ix[i] = 0
		}
	}
}

// shortRow is the row length below which the loops over an iterator's
// rows go by runs (eachRun): one iterator step and one call per run of
// rows instead of per row. A per-channel γ on a 2×2 or 4×4 map makes rows
// of 4 or 16 elements, where the per-row walk cost several times the row
// (BenchmarkChannelAffine: 7× on 256 channels of 2×2); rows of a few
// hundred still gain a little, and longer rows are split for the workers
// by forRows instead.
const shortRow = 1024

// runStrides returns each operand's stride from one row to the next
// along the second-innermost dimension (zeros with one dimension).
func (it *bcastIter) runStrides() (s [maxOps]int) {
	if it.nd < 2 {
		return s
	}
	for k := 0; k < it.nops; k++ {
		s[k] = it.st[k][it.nd-2]
	}
	return s
}

// eachRun calls fn for rows [lo, hi) in runs along the second-innermost
// dimension: fn(off, n) stands for the n rows at off + r·runStrides() (r <
// n), in row order.
func (it *bcastIter) eachRun(lo, hi int, fn func(off [maxOps]int, n int)) {
	if it.nd < 2 {
		it.each(lo, hi, func(off [maxOps]int) { fn(off, 1) })
		return
	}
	R := it.dims[it.nd-2]
	for r := lo; r < hi; {
		n := min(R-r%R, hi-r)
		it.each(r, r+1, func(off [maxOps]int) { fn(off, n) })
		r += n
	}
}
