package kernels

import (
	"fmt"
	"math"
	"unsafe"
)

// BinaryOp selects an elementwise binary operator.
type BinaryOp int

// Elementwise binary operators (ONNX Add, Sub, Mul, Div, Pow).
const (
	Add BinaryOp = iota
	Sub
	Mul
	Div
	Pow
)

// String returns the ONNX operator name.
func (op BinaryOp) String() string {
	switch op {
	case Add:
		return "Add"
	case Sub:
		return "Sub"
	case Mul:
		return "Mul"
	case Div:
		return "Div"
	case Pow:
		return "Pow"
	}
	return fmt.Sprintf("BinaryOp(%d)", int(op))
}

// forRows runs fn over all innermost rows of it in parallel. fn receives the
// operands' base offsets and the row length n; when there are few rows, long
// rows are cut into segments (offsets advanced by the inner strides).
func forRows(it *bcastIter, fn func(off [maxOps]int, n int)) {
	nrows, rowLen := it.rows()
	if nrows*rowLen < elementwiseGrain || nrows >= Workers()*4 {
		grain := max(1, elementwiseGrain/max(rowLen, 1))
		parallelFor(nrows, grain, func(lo, hi int) {
			it.each(lo, hi, func(off [maxOps]int) { fn(off, rowLen) })
		})
		return
	}
	// Few long rows: split each row into segments.
	inner := it.inner()
	seg := max(elementwiseGrain/2, (rowLen+Workers()-1)/Workers())
	nseg := (rowLen + seg - 1) / seg
	parallelFor(nrows*nseg, 1, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			r, s := w/nseg, w%nseg
			it.each(r, r+1, func(off [maxOps]int) {
				start := s * seg
				for k := 0; k < it.nops; k++ {
					off[k] += start * inner[k]
				}
				fn(off, min(seg, rowLen-start))
			})
		}
	})
}

// Binary computes y = a op b with multidirectional (numpy) broadcasting;
// yShape must be the broadcast of aShape and bShape.
func Binary(op BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y []float32, yShape []int) {
	if want := mustBroadcast(aShape, bShape); !sameShape(want, yShape) {
		panic(fmt.Sprintf("kernels: %v output shape %v, want %v", op, yShape, want))
	}
	checkLen("a", a, Numel(aShape))
	checkLen("b", b, Numel(bShape))
	checkLen("y", y, Numel(yShape))
	if Numel(yShape) == 0 {
		return
	}
	it := newBcastIter(yShape, yShape, aShape, bShape)
	in := it.inner()
	sa, sb := in[1], in[2]
	if nrows, rowLen := it.rows(); rowLen < shortRow && it.nd >= 2 {
		rs := it.runStrides()
		parallelFor(nrows, max(1, shortGrain/rowLen), func(lo, hi int) {
			it.eachRun(lo, hi, func(off [maxOps]int, n int) {
				binaryRun(op, y, a, b, off, rs, n, rowLen, sa, sb)
			})
		})
		return
	}
	forRows(&it, func(off [maxOps]int, n int) {
		binaryRow(op, y[off[0]:off[0]+n], a[off[1]:], sa, b[off[2]:], sb)
	})
}

// shortGrain is the elements per worker of the loops over short rows,
// whose per-row work makes an element cost several times a long row's.
const shortGrain = elementwiseGrain / 8

// chanRun reports whether a run of n rows of length L is the pattern of a
// per-channel operand (a γ or β of shape C×1×1): y and the full operand
// (strides yr, xr) advance L per row and hold their rows contiguously,
// while the other operand (stride cs along the row, cr across rows) is one
// value per row, consecutive.
func chanRun(L, yr, xr, xs, cs, cr int) bool {
	return yr == L && xr == L && xs == 1 && cs == 0 && cr == 1
}

// binaryRun is binaryRow over a run of n rows of length L (eachRun): the
// rows of y, a and b start at off and advance by rs. Per-channel Mul and
// Add take one loop over the run, the rest go row by row; either way each
// element is the same float32 operation as binaryRow's.
func binaryRun(op BinaryOp, y, a, b []float32, off, rs [maxOps]int, n, L, sa, sb int) {
	full, ch, fo, co := a, b, off[1], off[2]
	ok := chanRun(L, rs[0], rs[1], sa, sb, rs[2])
	if !ok && chanRun(L, rs[0], rs[2], sb, sa, rs[1]) {
		full, ch, fo, co, ok = b, a, off[2], off[1], true
	}
	if ok && (op == Mul || op == Add) {
		ys, xs, cs := y[off[0]:off[0]+n*L], full[fo:fo+n*L], ch[co:co+n]
		for r, v := range cs {
			yr, xr := ys[r*L:(r+1)*L], xs[r*L:(r+1)*L]
			if op == Mul {
				for l, x := range xr {
					yr[l] = x * v
				}
			} else {
				for l, x := range xr {
					yr[l] = x + v
				}
			}
		}
		return
	}
	for r := 0; r < n; r++ {
		binaryRow(op, y[off[0]:off[0]+L], a[off[1]:], sa, b[off[2]:], sb)
		off[0] += rs[0]
		off[1] += rs[1]
		off[2] += rs[2]
	}
}

func binaryRow(op BinaryOp, y []float32, a []float32, sa int, b []float32, sb int) {
	n := len(y)
	switch {
	case sa == 1 && sb == 1:
		a, b = a[:n], b[:n]
		switch op {
		case Add:
			for i := range y {
				y[i] = a[i] + b[i]
			}
		case Sub:
			for i := range y {
				y[i] = a[i] - b[i]
			}
		case Mul:
			for i := range y {
				y[i] = a[i] * b[i]
			}
		case Div:
			for i := range y {
				y[i] = a[i] / b[i]
			}
		case Pow:
			for i := range y {
				y[i] = powf(a[i], b[i])
			}
		}
	case sa == 1 && sb == 0:
		a = a[:n]
		bv := b[0]
		switch op {
		case Add:
			for i := range y {
				y[i] = a[i] + bv
			}
		case Sub:
			for i := range y {
				y[i] = a[i] - bv
			}
		case Mul:
			for i := range y {
				y[i] = a[i] * bv
			}
		case Div:
			for i := range y {
				y[i] = a[i] / bv
			}
		case Pow:
			for i := range y {
				y[i] = powf(a[i], bv)
			}
		}
	case sa == 0 && sb == 1:
		b = b[:n]
		av := a[0]
		switch op {
		case Add:
			for i := range y {
				y[i] = av + b[i]
			}
		case Sub:
			for i := range y {
				y[i] = av - b[i]
			}
		case Mul:
			for i := range y {
				y[i] = av * b[i]
			}
		case Div:
			for i := range y {
				y[i] = av / b[i]
			}
		case Pow:
			for i := range y {
				y[i] = powf(av, b[i])
			}
		}
	default: // both broadcast along the row
		v := binaryScalar(op, a[0], b[0])
		for i := range y {
			y[i] = v
		}
	}
}

func binaryScalar(op BinaryOp, a, b float32) float32 {
	switch op {
	case Add:
		return a + b
	case Sub:
		return a - b
	case Mul:
		return a * b
	case Div:
		return a / b
	case Pow:
		return powf(a, b)
	}
	panic("kernels: unknown binary op")
}

// powf special-cases the exponents that dominate in exported graphs (x², √x
// from Pow(x, 0.5) in some LayerNorm exports) so they stay exact and fast.
func powf(a, b float32) float32 {
	switch b {
	case 2:
		return a * a
	case 1:
		return a
	case 3:
		return a * a * a
	case 0.5:
		return float32(math.Sqrt(float64(a)))
	}
	return float32(math.Pow(float64(a), float64(b)))
}

// BinaryBackward computes the gradients of y = a op b: da (shape aShape) and
// db (shape bShape), each reduced over the axes it was broadcast along. y is
// the forward output (read by Div and Pow; may be nil for the others). A nil
// da or db is skipped. For Add and Sub da may be dy itself (a of y's shape,
// the gradient in place): it is left as it is.
//
// Pow follows PyTorch at the singular points: d/db is taken as 0 where
// a == 0 and b ≥ 0 (instead of 0·log 0 = NaN).
func BinaryBackward(op BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y, dy []float32, yShape []int, da, db []float32) {
	if want := mustBroadcast(aShape, bShape); !sameShape(want, yShape) {
		panic(fmt.Sprintf("kernels: %v output shape %v, want %v", op, yShape, want))
	}
	ny := Numel(yShape)
	checkLen("dy", dy, ny)
	it := newBcastIter(yShape, yShape, aShape, bShape)
	for wrt := 0; wrt < 2; wrt++ {
		t, tShape := da, aShape
		if wrt == 1 {
			t, tShape = db, bShape
		}
		if t == nil {
			continue
		}
		nt := Numel(tShape)
		checkLen("gradient", t, nt)
		if wrt == 0 && (op == Add || op == Sub) && nt == ny && &t[0] == &dy[0] {
			continue // da is dy, in place: nothing to write
		}
		switch op {
		case Add:
			ReduceToShape(dy, yShape, t, tShape)
			continue
		case Sub:
			ReduceToShape(dy, yShape, t, tShape)
			if wrt == 1 {
				for i := range t[:nt] {
					t[i] = -t[i]
				}
			}
			continue
		case Div, Pow:
			if op == Pow || wrt == 1 {
				checkLen("y", y, ny)
			}
		}
		checkLen("a", a, Numel(aShape))
		checkLen("b", b, Numel(bShape))
		in := it.inner()
		full := nt == ny
		nrows, rowLen := it.rows()
		short := rowLen < shortRow && it.nd >= 2 && op == Mul
		rs := it.runStrides()
		// o is the operand the gradient multiplies by.
		o, oo, os, or := b, 2, in[2], rs[2]
		if wrt == 1 {
			o, oo, os, or = a, 1, in[1], rs[1]
		}
		if full {
			if short && chanRun(rowLen, rs[0], rs[0], 1, os, or) {
				// d(x·γ)/dx = dy·γ, one γ per row.
				parallelFor(nrows, max(1, shortGrain/rowLen), func(lo, hi int) {
					it.eachRun(lo, hi, func(off [maxOps]int, n int) {
						ds, ts, cs := dy[off[0]:off[0]+n*rowLen], t[off[0]:off[0]+n*rowLen], o[off[oo]:off[oo]+n]
						for r, v := range cs {
							dr, tr := ds[r*rowLen:(r+1)*rowLen], ts[r*rowLen:(r+1)*rowLen]
							for l, g := range dr {
								tr[l] = g * v
							}
						}
					})
				})
				continue
			}
			forRows(&it, func(off [maxOps]int, n int) {
				gradRow(op, wrt, dy[off[0]:off[0]+n], y, off[0], a[off[1]:], in[1], b[off[2]:], in[2], t[off[0]:], 1, false)
			})
			continue
		}
		st := in[1+wrt]
		if short && st == 0 && rs[1+wrt] == 1 && chanRun(rowLen, rs[0], or, os, 0, 1) {
			// d(x·γ)/dγ = Σ dy·x, a row's sum in float64 added to its γ
			// in row order: gradRow's sums, without its per-row call.
			reduceParallel(nrows, rowLen, nt, t, func(lo, hi int, dst []float32) {
				it.eachRun(lo, hi, func(off [maxOps]int, n int) {
					ds, xs, ts := dy[off[0]:off[0]+n*rowLen], o[off[oo]:off[oo]+n*rowLen], dst[off[1+wrt]:off[1+wrt]+n]
					for r := range ts {
						var sum float64
						xr := xs[r*rowLen : (r+1)*rowLen]
						for l, g := range ds[r*rowLen : (r+1)*rowLen] {
							sum += float64(g * xr[l])
						}
						ts[r] += float32(sum)
					}
				})
			})
			continue
		}
		reduceParallel(nrows, rowLen, nt, t, func(lo, hi int, dst []float32) {
			it.each(lo, hi, func(off [maxOps]int) {
				gradRow(op, wrt, dy[off[0]:off[0]+rowLen], y, off[0], a[off[1]:], in[1], b[off[2]:], in[2], dst[off[1+wrt]:], st, true)
			})
		})
	}
}

// gradRow writes (acc == false) or adds (acc == true) one row of the
// gradient of a op b with respect to operand wrt into t with stride st.
// Rows reduced to one element (st == 0) are summed in float64 first.
func gradRow(op BinaryOp, wrt int, dy, y []float32, yoff int, a []float32, sa int, b []float32, sb int, t []float32, st int, acc bool) {
	if st == 1 && op != Pow && gradRowFast(op, wrt, dy, y[min(yoff, len(y)):], a, sa, b, sb, t[:len(dy)], acc) {
		return
	}
	var sum float64
	for j, g := range dy {
		av, bv := a[j*sa], b[j*sb]
		var v float32
		switch op {
		case Mul:
			if wrt == 0 {
				v = g * bv
			} else {
				v = g * av
			}
		case Div:
			if wrt == 0 {
				v = g / bv
			} else {
				v = -g * y[yoff+j] / bv
			}
		case Pow:
			if wrt == 0 {
				v = g * bv * powf(av, bv-1)
			} else if av == 0 && bv >= 0 {
				v = 0
			} else {
				v = g * y[yoff+j] * float32(math.Log(float64(av)))
			}
		}
		switch {
		case st == 0:
			sum += float64(v)
		case acc:
			t[j*st] += v
		default:
			t[j*st] = v
		}
	}
	if st == 0 {
		t[0] += float32(sum)
	}
}

// ReduceToShape sums x (shape xShape) over the axes along which tShape was
// broadcast to xShape and writes the result to t (shape tShape). tShape must
// broadcast to xShape (right-aligned, each dim 1 or equal); leading axes
// missing from tShape are summed too. This is the "unbroadcast" of every
// broadcasting op's backward, and with tShape keeping the batch axis it gives
// per-sample gradients of elementwise parameters (DESIGN §3). tShape may
// carry extra leading unit axes.
func ReduceToShape(x []float32, xShape []int, t []float32, tShape []int) {
	// Leading unit axes beyond x's rank carry no data.
	for len(tShape) > len(xShape) && tShape[0] == 1 {
		tShape = tShape[1:]
	}
	nx, nt := Numel(xShape), Numel(tShape)
	checkLen("x", x, nx)
	checkLen("t", t, nt)
	if nt == nx {
		if len(tShape) > len(xShape) {
			panic(fmt.Sprintf("kernels: cannot reduce %v to %v", xShape, tShape))
		}
		newBcastIter(xShape, tShape) // validates
		copy(t[:nt], x[:nx])
		return
	}
	if nx == 0 {
		clear(t[:nt])
		return
	}
	it := newBcastIter(xShape, xShape, tShape)
	nrows, rowLen := it.rows()
	st := it.inner()[1]
	if rs := it.runStrides(); rowLen < shortRow && it.nd >= 2 && st == 0 && rs[0] == rowLen && rs[1] == 1 {
		// Each short row folds into its own, consecutive element (a β's
		// gradient): the same float64 row sums, one call per run.
		reduceParallel(nrows, rowLen, nt, t, func(lo, hi int, dst []float32) {
			it.eachRun(lo, hi, func(off [maxOps]int, n int) {
				xs, ts := x[off[0]:off[0]+n*rowLen], dst[off[1]:off[1]+n]
				for r := range ts {
					ts[r] += float32(sumFloat64(xs[r*rowLen : (r+1)*rowLen]))
				}
			})
		})
		return
	}
	reduceParallel(nrows, rowLen, nt, t, func(lo, hi int, dst []float32) {
		it.each(lo, hi, func(off [maxOps]int) {
			row := x[off[0] : off[0]+rowLen]
			if st == 0 {
				// The row folds into one element: sum it in float64.
				dst[off[1]] += float32(sumFloat64(row))
				return
			}
			d := dst[off[1] : off[1]+rowLen]
			for j, v := range row {
				d[j] += v
			}
		})
	})
}

// Expand broadcasts x (shape xShape) to y (shape yShape, the broadcast of
// xShape with the requested shape, as ONNX Expand). Its backward is
// ReduceToShape(dy, yShape, dx, xShape).
func Expand(x []float32, xShape []int, y []float32, yShape []int) {
	checkLen("x", x, Numel(xShape))
	checkLen("y", y, Numel(yShape))
	if Numel(yShape) == 0 {
		return
	}
	it := newBcastIter(yShape, yShape, xShape)
	sx := it.inner()[1]
	forRows(&it, func(off [maxOps]int, n int) {
		dst := y[off[0] : off[0]+n]
		if sx == 0 {
			v := x[off[1]]
			for i := range dst {
				dst[i] = v
			}
			return
		}
		copy(dst, x[off[1]:off[1]+n])
	})
}

// BoolsAsBytes reinterprets a []bool as []uint8 (false = 0, true = 1)
// without copying, for Where.
func BoolsAsBytes(b []bool) []uint8 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint8)(unsafe.Pointer(&b[0])), len(b))
}

// Where computes out = cond ? x : y with multidirectional broadcasting of all
// three; cond is an ONNX bool tensor as bytes (nonzero = true; see
// BoolsAsBytes).
func Where(cond []uint8, condShape []int, x []float32, xShape []int, y []float32, yShape []int, out []float32, outShape []int) {
	if want := mustBroadcast(condShape, xShape, yShape); !sameShape(want, outShape) {
		panic(fmt.Sprintf("kernels: Where output shape %v, want %v", outShape, want))
	}
	if len(cond) < Numel(condShape) {
		panic("kernels: cond too short")
	}
	checkLen("x", x, Numel(xShape))
	checkLen("y", y, Numel(yShape))
	checkLen("out", out, Numel(outShape))
	if Numel(outShape) == 0 {
		return
	}
	it := newBcastIter(outShape, outShape, condShape, xShape, yShape)
	in := it.inner()
	forRows(&it, func(off [maxOps]int, n int) {
		dst := out[off[0] : off[0]+n]
		for j := range dst {
			if cond[off[1]+j*in[1]] != 0 {
				dst[j] = x[off[2]+j*in[2]]
			} else {
				dst[j] = y[off[3]+j*in[3]]
			}
		}
	})
}

// WhereBackward computes dx (shape xShape) and dy (shape yShape) from dout:
// the gradient flows to x where cond holds and to y elsewhere, then is
// reduced over broadcast axes. A nil dx or dy is skipped. ws must hold
// Numel(outShape) elements.
func WhereBackward(cond []uint8, condShape []int, xShape, yShape []int, dout []float32, outShape []int, dx, dy, ws []float32) {
	n := Numel(outShape)
	checkLen("dout", dout, n)
	checkLen("ws", ws, n)
	it := newBcastIter(outShape, outShape, condShape)
	sc := it.inner()[1]
	for k, t := range [][]float32{dx, dy} {
		if t == nil {
			continue
		}
		want := uint8(1)
		if k == 1 {
			want = 0
		}
		forRows(&it, func(off [maxOps]int, m int) {
			dst := ws[off[0] : off[0]+m]
			for j := range dst {
				c := uint8(0)
				if cond[off[1]+j*sc] != 0 {
					c = 1
				}
				if c == want {
					dst[j] = dout[off[0]+j]
				} else {
					dst[j] = 0
				}
			}
		})
		tShape := xShape
		if k == 1 {
			tShape = yShape
		}
		ReduceToShape(ws, outShape, t, tShape)
	}
}

// gradRowFast is gradRow for a contiguous row (stride 1) of Mul or Div
// with the operator switch hoisted out of the loop: written (acc false),
// or added (acc true: a row of a gradient reduced over broadcast rows,
// such as a LayerNorm γ's). It reports false where it does not apply.
func gradRowFast(op BinaryOp, wrt int, dy, y, a []float32, sa int, b []float32, sb int, t []float32, acc bool) bool {
	n := len(dy)
	if n == 0 {
		return true
	}
	// o is the operand the gradient multiplies by (b for d/da of a·b, a
	// for d/db), so is its stride.
	o, so := b, sb
	if wrt == 1 {
		o, so = a, sa
	}
	t = t[:n]
	switch {
	case op == Mul && so == 1:
		o = o[:n]
		if acc {
			for j, g := range dy {
				t[j] += g * o[j]
			}
			return true
		}
		for j, g := range dy {
			t[j] = g * o[j]
		}
	case op == Mul && so == 0:
		v := o[0]
		if acc {
			for j, g := range dy {
				t[j] += g * v
			}
			return true
		}
		for j, g := range dy {
			t[j] = g * v
		}
	case op == Div && wrt == 0 && sb == 1:
		b = b[:n]
		if acc {
			for j, g := range dy {
				t[j] += g / b[j]
			}
			return true
		}
		for j, g := range dy {
			t[j] = g / b[j]
		}
	case op == Div && wrt == 0 && sb == 0:
		v := b[0]
		if acc {
			for j, g := range dy {
				t[j] += g / v
			}
			return true
		}
		for j, g := range dy {
			t[j] = g / v
		}
	case op == Div && wrt == 1 && sb == 1 && len(y) >= n:
		b, y = b[:n], y[:n]
		if acc {
			for j, g := range dy {
				t[j] += -g * y[j] / b[j]
			}
			return true
		}
		for j, g := range dy {
			t[j] = -g * y[j] / b[j]
		}
	default:
		return false
	}
	return true
}

// sumFloat64 returns the sum of x in float64, in four independent partial
// sums: a single running sum waits on the add's latency at every element.
func sumFloat64(x []float32) float64 {
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+3 < len(x); j += 4 {
		s0 += float64(x[j])
		s1 += float64(x[j+1])
		s2 += float64(x[j+2])
		s3 += float64(x[j+3])
	}
	for ; j < len(x); j++ {
		s0 += float64(x[j])
	}
	return (s0 + s1) + (s2 + s3)
}
