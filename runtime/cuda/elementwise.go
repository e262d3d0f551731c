package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The ElementwiseOps of the device (runtime/device_elementwise.go) and
// LinalgOps.Binary, kernels in kernels/elementwise.cu: one thread per
// element written; activations in double from their definitions, rounded
// once; gradients reduced over broadcast axes summed per element of the
// gradient in a fixed order (no atomics).

// mathModules are the kernel modules that call CUDA's math library, whose
// functions contain fused multiply-adds by design: their contracts are
// values within a tolerance, not the CPU's bits (TestNVRTCNoFMA skips
// them; the rest must have none).
var mathModules = map[string]bool{"elementwise.cu": true}

// Binary implements runtime.LinalgOps (kernels/elementwise.cu): one thread
// per element of y, whose operands' offsets come from the broadcast
// layout. Add, Sub, Mul and Div are the CPU's bit for bit; Pow
// special-cases the exponents the CPU does and takes others in double,
// rounded once.
func (d *Device) Binary(op runtime.BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y []float32, yShape []int) {
	n := numElems(yShape)
	if n == 0 {
		return
	}
	if k, ok := binarySame[op]; ok && numElems(aShape) == n && numElems(bShape) == n {
		args := d.begin()
		defer d.end("Binary")
		args.Ptr(f32(a[:n], opIn, d)).Ptr(f32(b[:n], opIn, d)).Ptr(f32(y[:n], opOut, d)).I64(int64(n))
		d.launch(k, int64(n))
		return
	}
	l := newLayout(yShape, nil, aShape, bShape)
	args := d.begin()
	defer d.end("Binary")
	args.I32(int32(op)).Ptr(f32(a[:numElems(aShape)], opIn, d)).Ptr(f32(b[:numElems(bShape)], opIn, d)).Ptr(f32(y[:n], opOut, d)).I64(int64(n))
	l.arg(args)
	d.launch("binary", int64(n))
}

// binarySame names the kernels of operands of one shape (elementwise.cu's
// binary_same_one), by operator; Pow runs binary.
var binarySame = map[runtime.BinaryOp]string{
	runtime.BinaryAdd: "binary_same_add", runtime.BinarySub: "binary_same_sub",
	runtime.BinaryMul: "binary_same_mul", runtime.BinaryDiv: "binary_same_div",
}

// BinaryBackward implements runtime.ElementwiseOps: one thread per element
// of each gradient.
func (d *Device) BinaryBackward(op runtime.BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y, dy []float32, yShape []int, da, db []float32) {
	ny := numElems(yShape)
	for wrt, t := range [][]float32{da, db} {
		tShape := aShape
		if wrt == 1 {
			tShape = bShape
		}
		nt := numElems(tShape)
		if t == nil || nt == 0 {
			continue
		}
		if wrt == 0 && (op == runtime.BinaryAdd || op == runtime.BinarySub) && nt == ny && aliased(t, dy) {
			continue // da is dy, in place (runtime.ElementwiseOps.BinaryBackward)
		}
		if ny == 0 {
			d.Fill(0, t[:nt])
			continue
		}
		if (op == runtime.BinaryAdd || op == runtime.BinarySub && wrt == 0) && nt == ny {
			// dy itself (a residual connection's skip): a copy at the
			// memory's speed, where the kernel below walked the layout of
			// each element's one term (the fifth loan's profile: ResNet-50's
			// 16 a step at 3.7× a copy's time).
			d.copyGrad(dy[:ny], t[:nt])
			continue
		}
		var rb [stackRank]bool
		red := reducedAxes(yShape, tShape, rb[:])
		l := newLayout(yShape, red, yShape, aShape, bShape)
		var yy []float32 // read by Div's d/db and Pow only (may be nil otherwise)
		if op == runtime.BinaryDiv && wrt == 1 || op == runtime.BinaryPow {
			yy = y[:ny]
		}
		args := d.begin()
		args.I32(int32(op)).I32(int32(wrt)).Ptr(f32(a[:numElems(aShape)], opIn, d)).Ptr(f32(b[:numElems(bShape)], opIn, d))
		args.Ptr(f32(yy, opIn, d)).Ptr(f32(dy[:ny], opIn, d)).Ptr(f32(t[:nt], opOut, d)).I64(int64(nt)).I64(int64(ny / nt))
		l.arg(args)
		if m := ny / nt; nt >= 32 && m >= 64 && innerKept(yShape, red) {
			// A bias over a batch of tokens: t's elements run along y's
			// innermost axis, column tiles read them coalesced.
			d.launchCols("binary_backward_cols", int64(nt), int64(m))
		} else {
			d.launchSums("binary_backward", "binary_backward_block", int64(nt), int64(ny/nt))
		}
		d.end("BinaryBackward")
	}
}

// copyGrad writes t = dy on the device, as BinaryBackward.
func (d *Device) copyGrad(dy, t []float32) {
	d.begin()
	defer d.end("BinaryBackward")
	pt, pdy := f32(t, opOut, d), f32(dy, opIn, d)
	if pt == pdy {
		return
	}
	if err := d.drv.CopyDtoD(pt, pdy, 4*len(t)); err != nil {
		fault(fmt.Errorf("cuda: BinaryBackward: %w", err))
	}
}

// unaryKernels names the kernels of one operator each (elementwise.cu's
// unary_one and unary_backward_one): unary+suffix and
// unary_backward+suffix; the other operators run the kernels of every
// operator.
var unaryKernels = map[runtime.UnaryOp]string{
	runtime.UnaryRelu: "_relu", runtime.UnaryGelu: "_gelu", runtime.UnaryGeluTanh: "_gelu_tanh",
	runtime.UnarySigmoid: "_sigmoid", runtime.UnaryTanh: "_tanh",
}

// unaryArgs adds op and its parameters.
func unaryArgs(a *Args, op runtime.UnaryOp, par runtime.UnaryParams) *Args {
	return a.I32(int32(op)).F32(par.Alpha).F32(par.Beta).F32(par.Gamma)
}

// Unary implements runtime.ElementwiseOps: op in double from its
// definition, rounded once.
func (d *Device) Unary(op runtime.UnaryOp, par runtime.UnaryParams, x, y []float32) {
	if len(x) == 0 {
		return
	}
	y = y[:len(x)]
	a := d.begin()
	defer d.end("Unary")
	xk, yk := opIn, opOut
	if aliased(x, y) {
		xk, yk = opInOut, opInOut
	}
	px := f32(x, xk, d)
	py := px
	if !aliased(x, y) {
		py = f32(y, yk, d)
	}
	unaryArgs(a, op, par).Ptr(px).Ptr(py).I64(int64(len(x)))
	d.launch("unary"+unaryKernels[op], int64(len(x)))
}

// aliased reports whether two operands start at one address (an operation
// in place): staged once, so that the kernel sees one array.
func aliased(x, y []float32) bool {
	return len(x) > 0 && len(y) > 0 && unsafe.Pointer(&x[0]) == unsafe.Pointer(&y[0])
}

// UnaryBackward implements runtime.ElementwiseOps: the derivative in
// double from the slice the operator reads (the other may be nil).
func (d *Device) UnaryBackward(op runtime.UnaryOp, par runtime.UnaryParams, x, y, dy, dx []float32) {
	n := len(dy)
	if n == 0 {
		return
	}
	dx = dx[:n]
	var xs, ys []float32
	if x != nil {
		xs = x[:n]
	}
	if y != nil {
		ys = y[:n]
	}
	a := d.begin()
	defer d.end("UnaryBackward")
	pdy, pdx := d.inOut(dy, dx)
	unaryArgs(a, op, par).Ptr(f32(xs, opIn, d)).Ptr(f32(ys, opIn, d)).Ptr(pdy).Ptr(pdx).I64(int64(n))
	d.launch("unary_backward"+unaryKernels[op], int64(n))
}

// inOut stages an input x and an output y of one length that may be one
// array (d.mu held).
func (d *Device) inOut(x, y []float32) (px, py DevicePtr) {
	if aliased(x, y) {
		p := f32(x, opInOut, d)
		return p, p
	}
	return f32(x, opIn, d), f32(y, opOut, d)
}

// Clip implements runtime.ElementwiseOps.
func (d *Device) Clip(x []float32, lo, hi float32, y []float32) {
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("Clip")
	px, py := d.inOut(x, y[:len(x)])
	a.Ptr(px).F32(lo).F32(hi).Ptr(py).I64(int64(len(x)))
	d.launch("clip_f", int64(len(x)))
}

// ClipBackward implements runtime.ElementwiseOps.
func (d *Device) ClipBackward(x []float32, lo, hi float32, dy, dx []float32) {
	n := len(dy)
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("ClipBackward")
	pdy, pdx := d.inOut(dy, dx[:n])
	a.Ptr(f32(x[:n], opIn, d)).F32(lo).F32(hi).Ptr(pdy).Ptr(pdx).I64(int64(n))
	d.launch("clip_backward", int64(n))
}

// u8 stages a byte operand the kernel reads (d.mu held).
func u8(s []uint8, d *Device) DevicePtr {
	if len(s) == 0 {
		return 0
	}
	return d.operand(unsafe.Pointer(&s[0]), len(s), true, false)
}

// Where implements runtime.ElementwiseOps: one thread per element of out.
func (d *Device) Where(cond []uint8, condShape []int, x []float32, xShape []int, y []float32, yShape []int, out []float32, outShape []int) {
	n := numElems(outShape)
	if n == 0 {
		return
	}
	l := newLayout(outShape, nil, condShape, xShape, yShape)
	a := d.begin()
	defer d.end("Where")
	a.Ptr(u8(cond[:numElems(condShape)], d)).Ptr(f32(x[:numElems(xShape)], opIn, d)).Ptr(f32(y[:numElems(yShape)], opIn, d)).Ptr(f32(out[:n], opOut, d)).I64(int64(n))
	l.arg(a)
	d.launch("where_f", int64(n))
}

// WhereBackward implements runtime.ElementwiseOps: one thread per element
// of each gradient; it needs no scratch (ws is not used).
func (d *Device) WhereBackward(cond []uint8, condShape []int, xShape, yShape []int, dout []float32, outShape []int, dx, dy, ws []float32) {
	n := numElems(outShape)
	for k, t := range [][]float32{dx, dy} {
		tShape := xShape
		if k == 1 {
			tShape = yShape
		}
		nt := numElems(tShape)
		if t == nil || nt == 0 {
			continue
		}
		if n == 0 {
			d.Fill(0, t[:nt])
			continue
		}
		var rb [stackRank]bool
		l := newLayout(outShape, reducedAxes(outShape, tShape, rb[:]), outShape, condShape)
		a := d.begin()
		a.Ptr(u8(cond[:numElems(condShape)], d)).Ptr(f32(dout[:n], opIn, d)).I32(int32(1 - k)).Ptr(f32(t[:nt], opOut, d)).I64(int64(nt)).I64(int64(n / nt))
		l.arg(a)
		d.launch("where_backward", int64(nt))
		d.end("WhereBackward")
	}
}

// geluOp is the Unary operator of the fused GELU.
func geluOp(tanh bool) runtime.UnaryOp {
	if tanh {
		return runtime.UnaryGeluTanh
	}
	return runtime.UnaryGelu
}

// Gelu implements runtime.ElementwiseOps as Unary's Gelu (in double,
// rounded once), not the CPU's vectorized float32 kernel.
func (d *Device) Gelu(tanh bool, x, y []float32) { d.Unary(geluOp(tanh), runtime.UnaryParams{}, x, y) }

// GeluBackward implements runtime.ElementwiseOps as UnaryBackward's Gelu.
func (d *Device) GeluBackward(tanh bool, x, dy, dx []float32) {
	d.UnaryBackward(geluOp(tanh), runtime.UnaryParams{}, x, nil, dy, dx)
}

// i32s stages an index operand the kernel reads (d.mu held).
func i32s(s []int32, n int, d *Device) DevicePtr {
	if s == nil {
		return 0
	}
	return i32(s[:n], d)
}

// slopeLen is the number of slope elements PRelu reads.
func slopeLen(slope []float32, sIdx []int32, n int) int {
	if sIdx == nil {
		return n
	}
	return len(slope)
}

// PRelu implements runtime.ElementwiseOps.
func (d *Device) PRelu(x, slope []float32, sIdx []int32, y []float32) {
	n := len(x)
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("PRelu")
	px, py := d.inOut(x, y[:n])
	a.Ptr(px).Ptr(f32(slope[:slopeLen(slope, sIdx, n)], opIn, d)).Ptr(i32s(sIdx, n, d)).Ptr(py).I64(int64(n))
	d.launch("prelu", int64(n))
}

// PReluBackward implements runtime.ElementwiseOps.
func (d *Device) PReluBackward(x, slope []float32, sIdx []int32, dy, dx, ds []float32) {
	n := len(x)
	if n == 0 || dx == nil && ds == nil {
		return
	}
	a := d.begin()
	defer d.end("PReluBackward")
	pdy := f32(dy[:n], opIn, d)
	var pdx, pds, pslope, pidx DevicePtr
	if dx != nil { // the slope is read for dx only: the engine's ds alone passes none
		pslope, pidx = f32(slope[:slopeLen(slope, sIdx, n)], opIn, d), i32s(sIdx, n, d)
		if aliased(dy, dx) {
			pdy = f32(dy[:n], opInOut, d)
			pdx = pdy
		} else {
			pdx = f32(dx[:n], opOut, d)
		}
	}
	if ds != nil {
		pds = f32(ds[:n], opOut, d)
	}
	a.Ptr(f32(x[:n], opIn, d)).Ptr(pslope).Ptr(pidx).Ptr(pdy).Ptr(pdx).Ptr(pds).I64(int64(n))
	d.launch("prelu_backward", int64(n))
}

// maxMinInputs stages the inputs of MaxMin and their maps as device
// arrays of pointers (d.mu held): input i's element j is
// xs[i][idx[i][j]], or xs[i][j].
func (d *Device) maxMinInputs(xs [][]float32, idx [][]int32, n int) (pxs, pidx DevicePtr) {
	ptrs := make([]uint64, 2*len(xs))
	for i, x := range xs {
		if idx[i] != nil {
			ptrs[len(xs)+i] = uint64(i32(idx[i][:n], d))
			ptrs[i] = uint64(f32(x, opIn, d))
		} else {
			ptrs[i] = uint64(f32(x[:n], opIn, d))
		}
	}
	p, err := d.take(8 * len(ptrs))
	if err == nil {
		err = d.drv.CopyHtoD(p, unsafe.Pointer(&ptrs[0]), 8*len(ptrs))
	}
	if err != nil {
		fault(fmt.Errorf("cuda: MaxMin's inputs: %w", err))
	}
	return p, p + DevicePtr(8*len(xs))
}

// MaxMin implements runtime.ElementwiseOps: one thread per element of y.
func (d *Device) MaxMin(min bool, xs [][]float32, idx [][]int32, y []float32) {
	n := len(y)
	if n == 0 || len(xs) == 0 {
		return
	}
	a := d.begin()
	defer d.end("MaxMin")
	pxs, pidx := d.maxMinInputs(xs, idx, n)
	a.I32(b2i(min)).I32(int32(len(xs))).Ptr(pxs).Ptr(pidx).Ptr(f32(y, opOut, d)).I64(int64(n))
	d.launch("maxmin", int64(n))
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// MaxMinBackward implements runtime.ElementwiseOps: the winners of the
// elements first, then each gradient: a thread per element for an input
// not broadcast, one thread adding in the order of the elements for a
// broadcast one.
func (d *Device) MaxMinBackward(min bool, xs [][]float32, idx [][]int32, dy []float32, dxs [][]float32) {
	n := len(dy)
	if len(xs) == 0 {
		return
	}
	if n == 0 {
		for _, dx := range dxs {
			d.Fill(0, dx)
		}
		return
	}
	a := d.begin()
	defer d.end("MaxMinBackward")
	pxs, pidx := d.maxMinInputs(xs, idx, n)
	w, err := d.take(4 * n)
	if err != nil {
		fault(err)
	}
	a.I32(b2i(min)).I32(int32(len(xs))).Ptr(pxs).Ptr(pidx).Ptr(w).I64(int64(n))
	d.launch("maxmin_winners", int64(n))
	pdy := f32(dy, opIn, d)
	for i, dx := range dxs {
		if dx == nil {
			continue
		}
		a.Reset()
		if idx[i] == nil {
			a.Ptr(w).I32(int32(i)).Ptr(pdy).Ptr(f32(dx[:n], opOut, d)).I64(int64(n))
			d.launch("maxmin_grad_direct", int64(n))
			continue
		}
		if len(dx) == 0 {
			continue
		}
		a.Ptr(w).I32(int32(i)).Ptr(i32(idx[i][:n], d)).Ptr(pdy).Ptr(f32(dx, opOut, d)).I64(int64(len(dx))).I64(int64(n))
		d.launchOne("maxmin_grad_scatter")
	}
}
