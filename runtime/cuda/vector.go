package cuda

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The VectorOps of the device (runtime/device_vector.go; kernels in
// kernels/vector.cu). The sums the contract orders keep that order, so
// that they equal the CPU's bit for bit: the float64 norms and dot
// products (SumSq, SquaredNorms, Dot, AddSumSq, AddDot, AddSumSqProduct)
// in the lane order (runtime/lanesum.go), a warp per chunk of
// runtime.SumChunk terms and a thread per result adding the chunks;
// SumRows row after row and ScatterAdd in the order of its indices on one
// thread per result. AddRunSums's float32 sums follow the lane order too
// (runtime.SumLanes32), a warp per run.

// SumSq implements runtime.VectorOps.
func (d *Device) SumSq(x []float32) float64 {
	d.begin()
	defer d.end("SumSq")
	d.laneSums(f32(x, opIn, d), 0, len(x), 1, false, 1, f64(d.res[:1], opOut, d))
	d.flush("SumSq")
	return d.res[0]
}

// SquaredNorms implements runtime.VectorOps: a warp per chunk of a sample.
func (d *Device) SquaredNorms(x []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	d.begin()
	defer d.end("SquaredNorms")
	size := len(x) / len(dst)
	d.laneSums(f32(x[:size*len(dst)], opIn, d), 0, size, len(dst), false, 1, f64(dst, opOut, d))
}

// laneChunks launches lane_chunks over rows rows of size terms of a (b:
// 0 for squares) and returns the chunk sums' scratch and their number per
// row (d.mu held).
func (d *Device) laneChunks(a, b DevicePtr, size, rows int) (DevicePtr, int) {
	nch := (size + runtime.SumChunk - 1) / runtime.SumChunk
	part := d.scratch64(rows * nch)
	if nch > 0 {
		d.args.Reset()
		d.args.Ptr(a).Ptr(b).I64(int64(size)).I64(int64(rows)).I64(runtime.SumChunk).Ptr(part)
		d.launch("lane_chunks", 32*int64(rows*nch))
	}
	return part, nch
}

// laneSums computes the lane-order sums S_r of rows rows of size terms
// of a (b: 0 for squares) into dst: dst[r] = S_r, or with add dst[r] +=
// α·S_r (d.mu held).
func (d *Device) laneSums(a, b DevicePtr, size, rows int, add bool, alpha float64, dst DevicePtr) {
	part, nch := d.laneChunks(a, b, size, rows)
	d.args.Reset()
	d.args.Ptr(part).I64(int64(nch)).I64(int64(rows)).I32(b2i(add)).F64(alpha).Ptr(dst)
	d.launch("lane_finish", int64(rows))
}

// Dot implements runtime.VectorOps.
func (d *Device) Dot(a, b []float32) float64 {
	b = b[:len(a)]
	d.begin()
	defer d.end("Dot")
	d.laneSums(f32(a, opIn, d), f32(b, opIn, d), len(a), 1, false, 1, f64(d.res[:1], opOut, d))
	d.flush("Dot")
	return d.res[0]
}

// flush copies the staged outputs back now (d.mu held), for an operation
// that returns one of them.
func (d *Device) flush(op string) {
	for _, c := range d.pending {
		if err := d.drv.CopyDtoH(c.host, c.dev, c.bytes); err != nil {
			fault(fmt.Errorf("cuda: %s: %w", op, err))
		}
	}
	d.pending = d.pending[:0]
}

// Scale implements runtime.VectorOps.
func (d *Device) Scale(alpha float32, x []float32) {
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("Scale")
	a.F32(alpha).Ptr(f32(x, opInOut, d)).I64(int64(len(x)))
	d.launch("scale", int64(len(x)))
}

// Add implements runtime.VectorOps.
func (d *Device) Add(x, y []float32) {
	y = y[:len(x)]
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("Add")
	a.Ptr(f32(x, opIn, d)).Ptr(f32(y, opInOut, d)).I64(int64(len(x)))
	d.launch("add", int64(len(x)))
}

// AddRunSums implements runtime.VectorOps: a warp per run, in the lane
// order.
func (d *Device) AddRunSums(x, dst []float32) {
	if len(dst) == 0 {
		return
	}
	t := len(x) / len(dst)
	a := d.begin()
	defer d.end("AddRunSums")
	a.Ptr(f32(x[:t*len(dst)], opIn, d)).I64(int64(t)).Ptr(f32(dst, opInOut, d)).I64(int64(len(dst)))
	d.launch("add_run_sums", 32*int64(len(dst)))
}

// ScatterAdd implements runtime.VectorOps, on one thread (two indices may
// name one element, and their order decides its float32 sum).
func (d *Device) ScatterAdd(dst, src []float32, idx []int32) {
	src = src[:len(idx)]
	if len(idx) == 0 || len(dst) == 0 {
		return
	}
	a := d.begin()
	defer d.end("ScatterAdd")
	a.Ptr(f32(dst, opInOut, d)).Ptr(f32(src, opIn, d)).Ptr(i32(idx, d)).I64(int64(len(idx)))
	d.launchOne("scatter_add")
}

// AddNormSq implements runtime.VectorOps.
func (d *Device) AddNormSq(x, y []float64) {
	y = y[:len(x)]
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("AddNormSq")
	a.Ptr(f64(x, opIn, d)).Ptr(f64(y, opInOut, d)).I64(int64(len(x)))
	d.launch("add_norm_sq", int64(len(x)))
}

// SumRows implements runtime.VectorOps: one thread per column.
func (d *Device) SumRows(g []float32, T, p int, out []float32) {
	out = out[:p]
	if p == 0 {
		return
	}
	g = g[:T*p]
	a := d.begin()
	defer d.end("SumRows")
	a.Ptr(f32(g, opIn, d)).I64(int64(T)).I64(int64(p)).Ptr(f32(out, opOut, d))
	d.launch("sum_rows", int64(p))
}

// SumNormRows implements runtime.VectorOps: a thread per column, adding
// the rows in order.
func (d *Device) SumNormRows(x, dst []float64) {
	n := len(dst)
	if n == 0 {
		return
	}
	rows := len(x) / n
	a := d.begin()
	defer d.end("SumNormRows")
	a.Ptr(f64(x[:rows*n], opIn, d)).I64(int64(rows)).Ptr(f64(dst, opOut, d)).I64(int64(n))
	d.launch("sum_norm_rows", int64(n))
}

// ZeroNormSq implements runtime.VectorOps.
func (d *Device) ZeroNormSq(x []float64) {
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("ZeroNormSq")
	a.Ptr(f64(x, opOut, d)).I64(int64(len(x)))
	d.launch("zero_f64", int64(len(x)))
}

// AddSumSq implements runtime.VectorOps: a warp per chunk of x.
func (d *Device) AddSumSq(x []float32, dst []float64) {
	dst = dst[:1]
	d.begin()
	defer d.end("AddSumSq")
	d.laneSums(f32(x, opIn, d), 0, len(x), 1, true, 1, f64(dst, opInOut, d))
}

// AddDot implements runtime.VectorOps: AddDots of one row.
func (d *Device) AddDot(alpha float64, x, y []float32, dst []float64) {
	d.AddDots(alpha, x, y[:len(x)], dst[:1])
}

// AddDots implements runtime.VectorOps: a warp per chunk of a row, a
// thread per row adding its chunks.
func (d *Device) AddDots(alpha float64, x, y []float32, dst []float64) {
	if len(dst) == 0 {
		return
	}
	size := len(x) / len(dst)
	n := size * len(dst)
	d.begin()
	defer d.end("AddDots")
	d.laneSums(f32(x[:n], opIn, d), f32(y[:n], opIn, d), size, len(dst), true, alpha, f64(dst, opInOut, d))
}

// AddSumSqProduct implements runtime.VectorOps: a warp per chunk of x and
// of y, one thread for the product.
func (d *Device) AddSumSqProduct(alpha float64, x, y []float32, dst []float64) {
	d.AddSumSqProducts(alpha, x, y, dst[:1])
}

// AddSumSqProducts implements runtime.VectorOps: a warp per chunk of each
// row of x and of y, a thread per row for the products.
func (d *Device) AddSumSqProducts(alpha float64, x, y []float32, dst []float64) {
	rows := len(dst)
	if rows == 0 {
		return
	}
	nx, ny := len(x)/rows, len(y)/rows
	d.begin()
	defer d.end("AddSumSqProducts")
	pa, na := d.laneChunks(f32(x[:rows*nx], opIn, d), 0, nx, rows)
	pb, nb := d.laneChunks(f32(y[:rows*ny], opIn, d), 0, ny, rows)
	d.args.Reset()
	d.args.Ptr(pa).I64(int64(na)).Ptr(pb).I64(int64(nb)).F64(alpha).Ptr(f64(dst, opInOut, d)).I64(int64(rows))
	d.launch("lane_finish_product", int64(rows))
}

// AddScaledRows implements runtime.VectorOps: one thread per element of
// y, adding the rows in order.
func (d *Device) AddScaledRows(c, x, y []float32) {
	n := len(y)
	if n == 0 || len(c) == 0 {
		return
	}
	x = x[:len(c)*n]
	a := d.begin()
	defer d.end("AddScaledRows")
	a.Ptr(f32(c, opIn, d)).I64(int64(len(c))).Ptr(f32(x, opIn, d)).Ptr(f32(y, opInOut, d)).I64(int64(n))
	d.launch("add_scaled_rows", int64(n))
}

// ScaleRows implements runtime.VectorOps: one thread per element.
func (d *Device) ScaleRows(c []float32, alpha float32, x []float32, row, stride int) {
	if row == 0 || len(c) == 0 || len(x) < row {
		return
	}
	x = x[:len(x)/row*row]
	a := d.begin()
	defer d.end("ScaleRows")
	a.Ptr(f32(c, opIn, d)).I64(int64(len(c))).F32(alpha).Ptr(f32(x, opInOut, d)).I64(int64(len(x))).I64(int64(row)).I64(int64(stride))
	d.launch("scale_rows", int64(len(x)))
}

// Contract implements runtime.VectorOps, on one thread (the sum's order
// is the loop's): the loop nest goes to the kernel as int32s.
func (d *Device) Contract(l *runtime.ContractLoop, x, y []float32, acc []float64, out []float32) {
	nl := len(l.Dims)
	if nl > 32 {
		panic(fmt.Errorf("cuda: Contract: %d loops, more than 32", nl))
	}
	if len(out) == 0 {
		return
	}
	acc = acc[:len(out)]
	a := d.begin()
	defer d.end("Contract")
	d.loop = d.loop[:0]
	for _, s := range [][]int{l.Dims, l.Out, l.A, l.B} {
		for _, v := range s[:nl] {
			if v < 0 || v > math.MaxInt32 {
				panic(fmt.Errorf("cuda: Contract: loop value %d outside int32", v))
			}
			d.loop = append(d.loop, int32(v))
		}
	}
	a.Ptr(i32(d.loop, d)).I32(int32(nl)).Ptr(f32(x, opIn, d)).Ptr(f32(y, opIn, d)).Ptr(f64(acc, opOut, d)).Ptr(f32(out, opOut, d)).I64(int64(len(out)))
	d.launchOne("contract")
}

// NormAffineSampleGrad implements runtime.VectorOps: a thread per
// parameter element, each summing its terms in the contract's order (the
// rows, then their elements), so that the float64 scratch acc is not
// needed; the parameter map is n.ParamMap's formula.
func (d *Device) NormAffineSampleGrad(n *runtime.NormRows, scale bool, i, B, stride int, x, mean, invStd, dy []float32, _ []float64, out []float32) {
	L := n.RowLen()
	dy = dy[:len(dy)/L*L]
	if scale {
		x = x[:len(dy)]
	}
	d.normAffine(n, scale, i, 1, false, B, stride, x, mean, invStd, dy, len(dy)/L, out, nil, "NormAffineSampleGrad")
}

// NormAffineGrads implements runtime.VectorOps: a thread per sample and
// parameter element, each sum in the contract's order (acc is not used);
// the scale's and the bias's from one pass where both are asked for,
// except in LayerNorm's layout.
func (d *Device) NormAffineGrads(n *runtime.NormRows, scale bool, B, stride int, x, mean, invStd, dy []float32, _ []float64, out, outBias []float32) {
	P := n.NumParams()
	if P == 0 {
		return
	}
	if !scale {
		outBias = nil
	}
	d.normAffine(n, scale, 0, len(out)/P, true, B, stride, x, mean, invStd, dy, len(dy)/n.RowLen()/B, out, outBias, "NormAffineGrads")
}

// normAffine launches norm_affine_grads (norm_affine_tiles in LayerNorm's
// layout) for the samples i0… (samples of them, rows rows each), read from
// a gathered copy or (whole) the whole tensors, into out, and with outBias
// (scale set) the bias's gradients into outBias.
func (d *Device) normAffine(n *runtime.NormRows, scale bool, i0, samples int, whole bool, B, stride int, x, mean, invStd, dy []float32, rows int, out, outBias []float32, op string) {
	P := n.NumParams()
	if P == 0 || samples == 0 {
		return
	}
	L := n.RowLen()
	G, CpG, S := n.ParamMap()
	if !scale {
		x, mean, invStd = nil, nil, nil
	}
	a := d.begin()
	defer d.end(op)
	if G == 1 && CpG == 0 && S == 1 { // LayerNorm's layout: column tiles
		a.I32(b2i(scale)).I64(int64(i0)).I64(int64(B)).I64(int64(stride / L)).I64(int64(L))
		a.Ptr(f32(x, opIn, d)).Ptr(f32(mean, opIn, d)).Ptr(f32(invStd, opIn, d)).Ptr(f32(dy, opIn, d)).I64(int64(rows)).I32(b2i(whole))
		a.Ptr(f32(out[:samples*P], opOut, d)).I64(int64(P)).I64(int64(samples))
		if outBias != nil {
			a.Ptr(f32(outBias[:samples*P], opOut, d))
		} else {
			a.Ptr(0)
		}
		lanes := uint32(8) // threads along y, each taking 32/lanes of the sums' lanes
		if d.props.Emulated {
			lanes = 2
		}
		tiles := int64(samples) * int64((P+31)/32)
		d.launchGrid("norm_affine_tiles", D1(int(min(tiles, int64(d.maxGrid)))), Dim3{32, lanes, 1})
		return
	}
	a.I32(b2i(scale)).I64(int64(i0)).I64(int64(B)).I64(int64(stride / L)).I64(int64(L)).I64(int64(G)).I64(int64(CpG)).I64(int64(S))
	a.Ptr(f32(x, opIn, d)).Ptr(f32(mean, opIn, d)).Ptr(f32(invStd, opIn, d)).Ptr(f32(dy, opIn, d)).I64(int64(rows)).I32(b2i(whole))
	a.Ptr(f32(out[:samples*P], opOut, d)).I64(int64(P)).I64(int64(samples)).I32(32)
	if outBias != nil {
		a.Ptr(f32(outBias[:samples*P], opOut, d))
	} else {
		a.Ptr(0)
	}
	d.launch("norm_affine_grads", 32*int64(samples*P)) // a warp each
}

// CountNonFinite implements runtime.VectorOps: a grid-stride count, added
// atomically into a zeroed result slot (as a uint64).
func (d *Device) CountNonFinite(x []float32) int {
	if len(x) == 0 {
		return 0
	}
	a := d.begin()
	defer d.end("CountNonFinite")
	d.res[0] = 0 // the bits of uint64 0
	a.Ptr(f32(x, opIn, d)).I64(int64(len(x))).Ptr(f64(d.res[:1], opInOut, d))
	d.launch("count_non_finite", int64(len(x)))
	d.flush("CountNonFinite")
	return int(math.Float64bits(d.res[0]))
}
