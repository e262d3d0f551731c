package cuda

import (
	"fmt"
	"unsafe"
)

// The LinalgOps of the device (runtime/device_linalg.go): the GEMMs through
// the Driver (cuBLAS on the GPU), Binary in elementwise.go (its Pow calls
// the math library), the rest as kernels of kernels/linalg.cu.

// Axpy implements runtime.LinalgOps.Axpy (kernels/linalg.cu): y ← y + α·x,
// the product rounded before the sum, as the CPU's.
func (d *Device) Axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("Axpy")
	a.F32(alpha).Ptr(f32(x, opIn, d)).Ptr(f32(y, opInOut, d)).I64(int64(len(x)))
	d.launch("axpy", int64(len(x)))
}

// Gemm implements runtime.LinalgOps: one product through Driver.Gemm.
func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	d.GemmStrided(transA, transB, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)
}

// GemmSerial implements runtime.LinalgOps: the device has one worker, so
// it is Gemm.
func (d *Device) GemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	d.GemmStrided(transA, transB, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)
}

// GemmStrided implements runtime.LinalgOps through Driver.Gemm (cuBLAS's
// batched SGEMM on the GPU). A product with K = 0 or α = 0 is C ← β·C,
// a kernel (cuBLAS rejects the leading dimensions of empty operands).
func (d *Device) GemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int, batch int) {
	if m < 0 || n < 0 || k < 0 || batch < 0 || strideA < 0 || strideB < 0 || strideC < 0 {
		panic(fmt.Sprintf("cuda: GEMM of m=%d n=%d k=%d batch=%d strides %d, %d, %d", m, n, k, batch, strideA, strideB, strideC))
	}
	if m == 0 || n == 0 || batch == 0 {
		return
	}
	g := GemmArgs{TransA: transA, TransB: transB, M: m, N: n, K: k, Alpha: alpha, Beta: beta,
		LDA: lda, LDB: ldb, LDC: ldc, StrideA: strideA, StrideB: strideB, StrideC: strideC, Batch: batch}
	la, lb, lc := g.extents()
	args := d.begin()
	defer d.end("Gemm")
	// C is staged in and out even where β = 0: the elements between its
	// rows (ldc > n) are not the product's and must come back unchanged.
	g.C = f32(c[:lc], opInOut, d)
	if k == 0 || alpha == 0 {
		args.F32(beta).Ptr(g.C).I64(int64(m)).I64(int64(n)).I64(int64(ldc)).I64(int64(strideC)).I64(int64(batch))
		d.launch("gemm_scale", int64(batch*m*n))
		return
	}
	g.A, g.B = f32(a[:la], opIn, d), f32(b[:lb], opIn, d)
	d.gemm(g, "Gemm")
}

// ReduceToShape implements runtime.LinalgOps (kernels/linalg.cu): one
// thread per element of t, summing its terms in double in row-major
// order and rounding once (no atomics: the sum's order is fixed).
func (d *Device) ReduceToShape(x []float32, xShape []int, t []float32, tShape []int) {
	for len(tShape) > len(xShape) && tShape[0] == 1 {
		tShape = tShape[1:]
	}
	nt, nx := numElems(tShape), numElems(xShape)
	if nt == 0 {
		return
	}
	if nx == 0 {
		d.Fill(0, t[:nt])
		return
	}
	if nt == nx { // nothing to sum: the same elements in the same order
		var rb [stackRank]bool
		reducedAxes(xShape, tShape, rb[:]) // validates
		d.Copy(x[:nx], t[:nt])
		return
	}
	d.reduceTo(x[:nx], xShape, t[:nt], tShape, "ReduceToShape")
}

// reduceWide is the number of terms from which a result of ReduceToShape
// or of the normalizations' statistics is a warp's (lanesFor; tests lower
// it to run both kernels).
var reduceWide = 64

// reduceTo launches reduce_to_shape (x and t non-empty).
func (d *Device) reduceTo(x []float32, xShape []int, t []float32, tShape []int, op string) {
	var rb [stackRank]bool
	red := reducedAxes(xShape, tShape, rb[:])
	l := newLayout(xShape, red, xShape)
	args := d.begin()
	defer d.end(op)
	m := len(x) / len(t)
	lanes := lanesFor(m) // not launchLanes: the Layout is the last argument
	// Where x's innermost axis is kept (a bias's sums over the tokens of
	// B × T × D), neighbouring results read neighbouring addresses: column
	// tiles read x coalesced (launchCols), where a warp each would read 32
	// addresses a row apart, and split a result's terms over threads where
	// a thread each would leave the device idle when the results are few
	// (ViT-B/16's summed biases: 768) and sum them in long chains when
	// they are not (its per-sample ones: 32 × 768 of 197 terms).
	cols := lanes > 1 && innerKept(xShape, red)
	px, pt := f32(x, opIn, d), f32(t, opOut, d)
	if cols {
		if segs := d.reduceSegs(int64(len(t)), int64(m)); segs > 1 {
			// Too few tiles of results to fill the device: their terms
			// in runs, a block each (reduce_to_shape_split).
			part := d.scratch64(int(segs) * len(t))
			args.Ptr(px).Ptr(part).I64(int64(len(t))).I64(int64(m)).I64(segs)
			l.arg(args)
			tiles := (int64(len(t)) + 31) / 32
			d.launchGrid("reduce_to_shape_split", D1(int(min(tiles*segs, int64(d.maxGrid)))), Dim3{32, uint32(d.colRows(int64(m) / segs)), 1})
			args.Reset()
			args.Ptr(part).Ptr(pt).I64(int64(len(t))).I64(segs)
			d.launch("reduce_parts", int64(len(t)))
			return
		}
		args.Ptr(px).Ptr(pt).I64(int64(len(t))).I64(int64(m)).I32(lanes)
		l.arg(args)
		d.launchCols("reduce_to_shape_cols", int64(len(t)), int64(m))
		return
	}
	args.Ptr(px).Ptr(pt).I64(int64(len(t))).I64(int64(m)).I32(lanes)
	l.arg(args)
	d.launch("reduce_to_shape", int64(lanes)*int64(len(t)))
}

// reduceSegs is the number of runs reduce_to_shape_split cuts each of n
// results' m terms into: enough blocks of 32 results and a run for two a
// multiprocessor, a thread's share of a run at least 16 terms; 1 where
// the tiles alone are enough (reduce_to_shape_cols).
func (d *Device) reduceSegs(n, m int64) int64 {
	tiles := (n + 31) / 32
	want := 2 * int64(max(1, d.props.Multiprocessors))
	if tiles >= want {
		return 1
	}
	return max(1, min((want+tiles-1)/tiles, m/(d.colRows(m)*16)))
}

// numElems is the number of elements of a shape (1 for a scalar's []).
func numElems(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// reducedAxes marks the axes of shape along which tShape (right-aligned,
// missing or 1 there) is broadcast: the axes ReduceToShape sums over, in
// buf where it holds them (a caller's stack array: an operation's launch
// allocates nothing on the host).
func reducedAxes(shape, tShape []int, buf []bool) []bool {
	r := buf[:0]
	if cap(r) < len(shape) {
		r = make([]bool, 0, len(shape))
	}
	r = r[:len(shape)]
	clear(r)
	off := len(shape) - len(tShape)
	for a, s := range shape {
		if ta := a - off; ta < 0 || tShape[ta] == 1 && s != 1 {
			r[a] = true
		} else if tShape[ta] != s {
			panic(fmt.Sprintf("cuda: cannot reduce shape %v to %v", shape, tShape))
		}
	}
	return r
}

// Kernel layout limits (kernels' LAYOUT_MAX_RANK and LAYOUT_MAX_OPS).
const (
	layoutMaxRank = 8
	layoutMaxOps  = 4
)

// stackRank is the rank up to which a layout's host-side scratch (its
// axes, the reduced ones) lives in stack arrays; higher ranks allocate.
const stackRank = 16

// iterLayout is the kernels' Layout, field for field: an iteration over
// a broadcast shape, the threads' axes (keep of them) first, then the
// axes each thread loops over; st[k][a] is operand k's stride along axis
// a; divMul and divShr divide by dim[a] without a division where small
// (every linear index below 2³¹; layoutMagic). It is a kernel argument
// passed by value — 212 bytes, built per call on the stack from the
// shapes, nothing cached.
type iterLayout struct {
	rank, keep int32
	dim        [layoutMaxRank]int32
	st         [layoutMaxOps][layoutMaxRank]int32
	divMul     [layoutMaxRank]uint32
	divShr     [layoutMaxRank]uint8
	small      int32
}

// layoutMagic returns the multiplier m and shift s with which
// ⌊i/d⌋ = (⌊i·m/2³²⌋ + i) >> s for every 0 ≤ i < 2³¹ (common.cuh,
// layout_offsets), for 1 ≤ d < 2³¹: s = ⌈log₂ d⌉ and
// m = ⌊2³²·(2^s − d)/d⌋ + 1. Why it is exact: m' = 2³² + m =
// ⌊2^(32+s)/d⌋ + 1 makes m'·d = 2^(32+s) + e with 0 < e ≤ d, so
// i·m'/2^(32+s) = i/d + i·e/(d·2^(32+s)), and i·e < 2³¹·2^s makes the
// excess less than 1/d, the least distance from i/d up to the next
// integer: the floors agree, and ⌊(⌊i·m/2³²⌋ + i)/2^s⌋ is that floor.
// m fits 32 bits (2^s < 2d, so m ≤ 2³² − 2 for d > 1; 1 for d = 1), and
// ⌊i·m/2³²⌋ + i < 2³² does too. TestLayoutMagic checks divisors and the
// indices next to their multiples.
func layoutMagic(d int) (m uint32, s uint8) {
	if d < 1 { // an empty axis: no index to divide
		return 1, 0
	}
	for (1 << s) < d {
		s++
	}
	return uint32((uint64(1)<<32)*(uint64(1)<<s-uint64(d))/uint64(d) + 1), s
}

// arg adds l to a kernel's arguments.
func (l *iterLayout) arg(a *Args) {
	a.Bytes(unsafe.Slice((*byte)(unsafe.Pointer(l)), unsafe.Sizeof(*l)))
}

// axis is one axis of an iteration: its extent, each operand's stride
// along it, and whether the threads loop over it (a reduction's).
type axis struct {
	dim int
	st  [layoutMaxOps]int
	red bool
}

// newLayout builds the iteration over shape for operands of the given
// shapes (each broadcast onto shape, right-aligned): reduced[a] marks the
// axes the threads loop over (nil: none).
func newLayout(shape []int, reduced []bool, shapes ...[]int) iterLayout {
	if len(shapes) > layoutMaxOps {
		panic("cuda: layout of too many operands")
	}
	var ab [stackRank]axis
	axes := ab[:0]
	r := len(shape)
	for a, dim := range shape {
		ax := axis{dim: dim, red: reduced != nil && reduced[a]}
		for k, s := range shapes {
			sa := a - (r - len(s))
			if sa < 0 || s[sa] == 1 {
				continue
			}
			if s[sa] != dim {
				panic(fmt.Sprintf("cuda: shape %v does not broadcast to %v", s, shape))
			}
			ax.st[k] = numElems(s[sa+1:])
		}
		axes = append(axes, ax)
	}
	return compactLayout(axes, len(shapes), shape, nil)
}

// compactLayout turns axes into the kernels' Layout for nops operands:
// unit axes dropped, the kept axes first and then the looped ones, each
// in their order, and neighbours of one kind merged where every operand
// is contiguous across them. shape (and perm, a transpose's) name the
// iteration in a panic.
func compactLayout(axes []axis, nops int, shape, perm []int) iterLayout {
	var mb [stackRank]axis
	merged := mb[:0]
	for _, red := range []bool{false, true} {
		for _, ax := range axes {
			if ax.red != red || ax.dim == 1 {
				continue
			}
			if n := len(merged); n > 0 && merged[n-1].red == red {
				p := &merged[n-1]
				ok := true
				for k := 0; k < nops; k++ {
					ok = ok && p.st[k] == ax.st[k]*ax.dim
				}
				if ok {
					p.dim *= ax.dim
					p.st = ax.st
					continue
				}
			}
			merged = append(merged, ax)
		}
	}
	if len(merged) > layoutMaxRank {
		what := fmt.Sprint(shape)
		if perm != nil {
			what = fmt.Sprintf("transpose %v of %v", perm, shape)
		}
		panic(fmt.Sprintf("cuda: iteration over %s needs %d axes, more than the kernels' %d", what, len(merged), layoutMaxRank))
	}
	var l iterLayout
	l.rank = int32(len(merged))
	total := 1
	for a, ax := range merged {
		if !ax.red {
			l.keep++
		}
		l.dim[a] = i32Of(ax.dim)
		l.divMul[a], l.divShr[a] = layoutMagic(ax.dim)
		for k := 0; k < nops; k++ {
			l.st[k][a] = i32Of(ax.st[k])
		}
		total = min(total*ax.dim, 1<<31)
	}
	if total < 1<<31 && !layoutWide {
		l.small = 1
	}
	return l
}

// layoutWide makes every layout take the kernels' 64-bit divisions, as
// for more than 2³¹ elements (the tests set it).
var layoutWide = false

// i32Of is v as an int32 kernel argument; larger tensors are beyond the
// kernels' 32-bit shapes.
func i32Of(v int) int32 {
	if v != int(int32(v)) {
		panic(fmt.Sprintf("cuda: %d exceeds the kernels' 32-bit shapes", v))
	}
	return int32(v)
}
