package cuda

import (
	"github.com/dpfinetune/dpfinetune/runtime"
)

// The ReduceOps of the device (runtime/device_reduce.go; kernels in
// kernels/reduce.cu): one thread per output (a reduction's element)
// summing in the order of the input, a warp per long contiguous softmax
// line or sample's logits (launchLanes), and one thread per input element
// for the gradients. A reduction's groups come from its
// shapes, copied to the device once per distinct pair (stageShapes);
// grp is not read.

// reduceShapes stages xShape and yShape for kernels/reduce.cu (d.mu
// held).
func (d *Device) reduceShapes(xShape, yShape []int) DevicePtr {
	return d.stageShapes(xShape, yShape)
}

// ReduceAxes implements runtime.ReduceOps: a thread per output, summing
// its group in increasing order of x (ReduceSum and ReduceMean in float32,
// the others in float64, as the contract says).
func (d *Device) ReduceAxes(op runtime.ReduceOp, x []float32, xShape []int, y []float32, yShape []int, _ []int32, state []float64) {
	nx, ny := numel(xShape), numel(yShape)
	if ny == 0 {
		return
	}
	count, scale := reduceCount(op, nx, ny)
	d.begin()
	defer d.end("ReduceAxes")
	d.reduceAxes(op, f32(x[:nx], opIn, d), d.reduceShapes(xShape, yShape), len(xShape), f32(y[:ny], opOut, d), d.reduceState(op, ny, state, opOut), ny, count, scale)
}

// reduceCount returns how many elements of x reduce into each of y's
// (nx of them into ny, ny > 0) and the factor the kernels apply to a sum:
// 1/count in float32 for ReduceMean (as the CPU computes it), else 1.
func reduceCount(op runtime.ReduceOp, nx, ny int) (count int, scale float32) {
	count = nx / ny
	scale = 1
	if op == runtime.ReduceMean {
		scale = 1 / float32(count)
	}
	return count, scale
}

// reduceState returns the device address of a reduction's state: state's,
// or scratch when the caller passes less than runtime.ReduceStateLen (d.mu
// held).
func (d *Device) reduceState(op runtime.ReduceOp, ny int, state []float64, kind int) DevicePtr {
	n := runtime.ReduceStateLen(op, ny)
	if n == 0 {
		return 0
	}
	if len(state) < n {
		return d.scratch64(n)
	}
	return f64(state[:n], kind, d)
}

// reduceAxes launches reduce_axes (d.mu held).
func (d *Device) reduceAxes(op runtime.ReduceOp, x, sh DevicePtr, rank int, y, state DevicePtr, ny, count int, scale float32) {
	d.args.Reset()
	d.args.I32(int32(op)).Ptr(x).Ptr(sh).I32(int32(rank)).Ptr(y).Ptr(state).I64(int64(ny)).I64(int64(count)).F32(scale)
	d.launch("reduce_axes", int64(ny))
}

// ReduceAxesBackward implements runtime.ReduceOps: a thread per element
// of dx.
func (d *Device) ReduceAxesBackward(op runtime.ReduceOp, x []float32, xShape []int, y, dy []float32, yShape []int, _ []int32, state []float64, dx []float32) {
	nx, ny := numel(xShape), numel(yShape)
	if nx == 0 {
		return
	}
	count, scale := reduceCount(op, nx, ny)
	d.begin()
	defer d.end("ReduceAxesBackward")
	sh := d.reduceShapes(xShape, yShape)
	var px, py, ps DevicePtr
	if op != runtime.ReduceSum && op != runtime.ReduceMean {
		px = f32(x[:nx], opIn, d)
	}
	switch op {
	case runtime.ReduceL2, runtime.ReduceLogSum, runtime.ReduceLogSumExp:
		py = f32(y[:ny], opIn, d)
	}
	switch need := runtime.ReduceStateLen(op, ny); {
	case op != runtime.ReduceMax && op != runtime.ReduceMin && op != runtime.ReduceProd:
	case len(state) >= need:
		ps = f64(state[:need], opIn, d)
	default:
		// No state from the forward: run it again into scratch.
		ps = d.scratch64(need)
		yy, err := d.take(4 * ny)
		if err != nil {
			fault(err)
		}
		d.reduceAxes(op, px, sh, len(xShape), yy, ps, ny, count, scale)
	}
	a := d.args
	a.Reset()
	a.I32(int32(op)).Ptr(px).Ptr(sh).I32(int32(len(xShape))).Ptr(py).Ptr(f32(dy[:ny], opIn, d))
	a.Ptr(ps).I64(int64(ny)).Ptr(f32(dx[:nx], opOut, d)).I64(int64(nx)).F32(scale)
	d.launch("reduce_axes_bwd", int64(nx))
}

// softmax launches softmax (d.mu held by begin).
func (d *Device) softmax(op string, x []float32, outer, n, inner int, y []float32, log bool) {
	m := outer * n * inner
	if m == 0 {
		return
	}
	a := d.begin()
	defer d.end(op)
	a.Ptr(f32(x[:m], opIn, d)).I64(int64(outer)).I64(int64(n)).I64(int64(inner)).Ptr(f32(y[:m], opOut, d)).I32(flag(log)).I32(flag(softmaxRegs))
	d.launchLanes("softmax", outer*inner, softmaxTerms(n, inner))
}

// softmaxRegs lets a warp keep its line in registers (the kernels'
// SOFTMAX_REGS path; tests turn it off to compare the two paths' bits).
var softmaxRegs = true

// softmaxTerms is the terms per line that launchLanes weighs: n along a
// contiguous line; 1 (a thread per line) when the lines interleave
// (inner > 1), where a thread's neighbours read the next addresses.
func softmaxTerms(n, inner int) int {
	if inner > 1 {
		return 1
	}
	return n
}

func (d *Device) softmaxBackward(op string, y, dy []float32, outer, n, inner int, dx []float32, log bool) {
	m := outer * n * inner
	if m == 0 {
		return
	}
	a := d.begin()
	defer d.end(op)
	a.Ptr(f32(y[:m], opIn, d)).Ptr(f32(dy[:m], opIn, d)).I64(int64(outer)).I64(int64(n)).I64(int64(inner)).Ptr(f32(dx[:m], opOut, d)).I32(flag(log)).I32(flag(softmaxRegs))
	d.launchLanes("softmax_bwd", outer*inner, softmaxTerms(n, inner))
}

// Softmax implements runtime.ReduceOps: a warp per long contiguous line,
// else a thread.
func (d *Device) Softmax(x []float32, outer, n, inner int, y []float32) {
	d.softmax("Softmax", x, outer, n, inner, y, false)
}

// LogSoftmax implements runtime.ReduceOps as Softmax.
func (d *Device) LogSoftmax(x []float32, outer, n, inner int, y []float32) {
	d.softmax("LogSoftmax", x, outer, n, inner, y, true)
}

// SoftmaxBackward implements runtime.ReduceOps as Softmax.
func (d *Device) SoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32) {
	d.softmaxBackward("SoftmaxBackward", y, dy, outer, n, inner, dx, false)
}

// LogSoftmaxBackward implements runtime.ReduceOps as Softmax.
func (d *Device) LogSoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32) {
	d.softmaxBackward("LogSoftmaxBackward", y, dy, outer, n, inner, dx, true)
}

// SoftmaxCrossEntropy implements runtime.ReduceOps: a warp per sample
// from reduceWide classes on, else a thread.
func (d *Device) SoftmaxCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, losses, probs []float32) {
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("SoftmaxCrossEntropy")
	a.Ptr(f32(logits[:n*k], opIn, d)).Ptr(i64In(labels[:n], d)).I64(int64(n)).I64(int64(k)).F32(alpha).Ptr(f32(losses[:n], opOut, d)).Ptr(f32(probs[:n*k], opOut, d))
	d.launchLanes("softmax_xent", n, k)
}

// SoftmaxCrossEntropyBackward implements runtime.ReduceOps: a thread per
// logit.
func (d *Device) SoftmaxCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, dlogits []float32) {
	if n*k == 0 {
		return
	}
	a := d.begin()
	defer d.end("SoftmaxCrossEntropyBackward")
	a.Ptr(f32(probs[:n*k], opIn, d)).Ptr(i64In(labels[:n], d)).Ptr(f32(weights[:n], opIn, d)).I64(int64(n)).I64(int64(k)).F32(alpha).Ptr(f32(dlogits[:n*k], opOut, d))
	d.launch("softmax_xent_bwd", int64(n*k))
}

// SigmoidCrossEntropy implements runtime.ReduceOps: a thread per sample,
// each term in double as the CPU's.
func (d *Device) SigmoidCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, posWeight, uncertain, losses, probs []float32) {
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("SigmoidCrossEntropy")
	a.Ptr(f32(logits[:n*k], opIn, d)).Ptr(i64In(labels[:n*runtime.LabelWords(k)], d)).I64(int64(n)).I64(int64(k)).F32(alpha).Ptr(f32(posWeight[:k], opIn, d)).
		Ptr(f32(uncertain[:k], opIn, d)).Ptr(f32(losses[:n], opOut, d)).Ptr(f32(probs[:n*k], opOut, d))
	d.launch("sigmoid_xent", int64(n))
}

// SigmoidCrossEntropyBackward implements runtime.ReduceOps: a thread per
// logit.
func (d *Device) SigmoidCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, posWeight, uncertain, dlogits []float32) {
	if n*k == 0 {
		return
	}
	a := d.begin()
	defer d.end("SigmoidCrossEntropyBackward")
	a.Ptr(f32(probs[:n*k], opIn, d)).Ptr(i64In(labels[:n*runtime.LabelWords(k)], d)).Ptr(f32(weights[:n], opIn, d)).I64(int64(n)).I64(int64(k)).F32(alpha).
		Ptr(f32(posWeight[:k], opIn, d)).Ptr(f32(uncertain[:k], opIn, d)).Ptr(f32(dlogits[:n*k], opOut, d))
	d.launch("sigmoid_xent_bwd", int64(n*k))
}

// ScatterReduce implements runtime.ReduceOps on one thread, in increasing
// i (two updates may land on one element).
func (d *Device) ScatterReduce(red runtime.ScatterReduction, u []float32, idx []int32, y []float32) {
	if len(idx) == 0 {
		return
	}
	a := d.begin()
	defer d.end("ScatterReduce")
	a.I32(int32(red)).Ptr(f32(u[:len(idx)], opIn, d)).Ptr(i32(idx, d)).I64(int64(len(idx))).Ptr(f32(y, opInOut, d))
	d.launchOne("scatter_reduce")
}
