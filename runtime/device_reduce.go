package runtime

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// ReduceOps is the group of GraphOps for reductions over axes, softmax and
// log-softmax, the per-sample softmax cross-entropy head, and the
// reductions of updates into scattered elements (ScatterND).
type ReduceOps interface {
	// ReduceAxes computes y = op(x) over the axes along which yShape (x's
	// shape with the reduced axes kept as 1, same rank) is 1: the ONNX
	// Reduce* operators. grp maps every element of x to the element of y
	// it reduces into (ReduceGroups; ReduceSum and ReduceMean do not read
	// it and take nil). state is ReduceStateLen(op, len(y)) float64
	// elements that the forward leaves for ReduceAxesBackward (the
	// extremes' winners, the product's factors). Sums accumulate in
	// float64, except ReduceSum's and ReduceMean's, which sum in float32
	// as ReduceToShape does.
	ReduceAxes(op ReduceOp, x []float32, xShape []int, y []float32, yShape []int, grp []int32, state []float64)
	// ReduceAxesBackward computes dx from dy for the forward that left y
	// and state: the extremes send each output's gradient to the first
	// element that attains it; the others multiply by their derivative
	// (1, 1/count, sign(x), x/y, 2x, 1/Σx, e^(x−y), and for the product
	// the product of the other elements, exact with zeros).
	ReduceAxesBackward(op ReduceOp, x []float32, xShape []int, y, dy []float32, yShape []int, grp []int32, state []float64, dx []float32)
	// Softmax computes y = exp(x − max)/Σ exp(x − max) along the middle
	// axis of x viewed as outer × n × inner (ONNX Softmax: inner is the
	// product of the axes after the softmax axis from opset 13, and 1
	// before, where n is the product of the axes from it on), the sums in
	// float64.
	Softmax(x []float32, outer, n, inner int, y []float32)
	// LogSoftmax computes y = x − max − log Σ exp(x − max) along the
	// middle axis of outer × n × inner, as Softmax.
	LogSoftmax(x []float32, outer, n, inner int, y []float32)
	// SoftmaxBackward computes dx = y ⊙ (dy − Σ dy ⊙ y) along the middle
	// axis from Softmax's output y.
	SoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32)
	// LogSoftmaxBackward computes dx = dy − exp(y)·Σ dy along the middle
	// axis from LogSoftmax's output y.
	LogSoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32)
	// SoftmaxCrossEntropy computes the plan's loss head for n samples of k
	// logits (n×k row-major) and their class labels (in [0, k): the
	// caller checks them): the per-sample loss against the label
	// smoothed by alpha ∈ [0, 1), target t_j = (1−α)·[j = label] + α/k,
	// loss_i = log Σ_j exp(z_ij) − Σ_j t_j·z_ij (α = 0: − z_i,label_i),
	// into losses (n), and the softmax of each row into probs (n×k),
	// which the backward reads.
	SoftmaxCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, losses, probs []float32)
	// SoftmaxCrossEntropyBackward writes the gradient of Σ_i w_i·loss_i
	// with respect to the logits, the seed of the backward pass:
	// dlogits_i = w_i·(probs_i − t_i), t_i the smoothed target above
	// (onehot(label_i) at α = 0); weights (n) are the DP engine's clip
	// factors C_i in its second pass, or all ones.
	SoftmaxCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, dlogits []float32)
	// SigmoidCrossEntropy computes the multi-label loss head for n
	// samples of k logits and their label sets, LabelWords(k) = 2·V
	// 64-bit words a sample, V = ⌈k/64⌉: label j of sample i applies where
	// bit j%64 of labels[i·2V + j/64] is set and is ignored — its term
	// left out of the sum, its gradient 0, its sigmoid still written —
	// where bit j%64 of labels[i·2V + V + j/64] is (the caller checks
	// them; internal/labelset's partial sets) — unless uncertain_j (k
	// values) is in (0, 1): then the ignored label is uncertain, its
	// target uncertain_j (label smoothing regularization of uncertain
	// labels, Pham et al. 2021; 0 leaves it out) —, each label's target
	// smoothed by alpha ∈ [0, 1) towards ½, t_ij = (1−α)·[bit j] + α/2,
	// and each label's positive term weighed by posWeight_j (k values;
	// all 1 for the plain loss): the per-sample binary cross-entropy of
	// each logit's sigmoid, −p·t·log σ(z) − (1−t)·log(1−σ(z)), averaged
	// over the labels, loss_i = (1/k) Σ_j [a_ij·max(z_ij, 0) − p_j·t_ij·z_ij
	// + a_ij·log(1 + exp(−|z_ij|))] with a_ij = 1 + (p_j − 1)·t_ij
	// (PyTorch's BCEWithLogitsLoss(pos_weight=p) of a sample at α = 0),
	// into losses (n), and σ(z_ij) into probs (n×k), which the backward
	// reads. At p_j = 1 the terms are the plain loss's, bit for bit.
	SigmoidCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, posWeight, uncertain, losses, probs []float32)
	// SigmoidCrossEntropyBackward writes the gradient of Σ_i w_i·loss_i
	// with respect to the logits: dlogits_ij = w_i/k·(a_ij·probs_ij −
	// p_j·t_ij), in float32 as w_i/k·((probs_ij − t_ij) + (p_j −
	// 1)·t_ij·(probs_ij − 1)), which does not cancel near probs_ij = 1
	// (w_i/k·(probs_ij − t_ij) at p_j = 1); an ignored label's 0, or with
	// uncertain_j > 0 its target's.
	SigmoidCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, posWeight, uncertain, dlogits []float32)
	// ScatterReduce combines the updates u into y at the compile-time
	// element offsets idx, in increasing i: y[idx[i]] = u[i] (ScatterReduceNone),
	// or y[idx[i]] = y[idx[i]] op u[i] for the other reductions (ONNX
	// ScatterND's reduction attribute; Max and Min propagate NaN). y
	// holds the data before (a copy of ScatterND's data input).
	ScatterReduce(red ScatterReduction, u []float32, idx []int32, y []float32)
}

// ScatterReduction selects how ReduceOps.ScatterReduce combines an update
// with the element it lands on (ONNX ScatterND's reduction: "none",
// "add", "mul", "max", "min").
type ScatterReduction int

// The reductions of ReduceOps.ScatterReduce.
const (
	ScatterReduceNone ScatterReduction = iota
	ScatterReduceAdd
	ScatterReduceMul
	ScatterReduceMax
	ScatterReduceMin
)

// ScatterReductionNamed returns the reduction of ScatterND's reduction
// attribute value.
func ScatterReductionNamed(name string) (ScatterReduction, error) {
	for i, n := range []string{"none", "add", "mul", "max", "min"} {
		if n == name {
			return ScatterReduction(i), nil
		}
	}
	return 0, fmt.Errorf("unknown scatter reduction %q", name)
}

// ReduceOp selects the reduction of ReduceOps.ReduceAxes (the ONNX
// Reduce* operators).
type ReduceOp int

// The reductions of ReduceOps.ReduceAxes.
const (
	ReduceSum ReduceOp = iota
	ReduceMean
	ReduceMax
	ReduceMin
	ReduceProd
	ReduceL1
	ReduceL2
	ReduceSumSquare
	ReduceLogSum
	ReduceLogSumExp
)

var reduceNames = [...]string{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
	"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}

// String returns the ONNX operator name.
func (op ReduceOp) String() string {
	if op >= 0 && int(op) < len(reduceNames) {
		return reduceNames[op]
	}
	return fmt.Sprintf("ReduceOp(%d)", int(op))
}

// ReduceOpNamed returns the reduction of an ONNX operator name.
func ReduceOpNamed(name string) (ReduceOp, bool) {
	for i, n := range reduceNames {
		if n == name {
			return ReduceOp(i), true
		}
	}
	return 0, false
}

// ReduceStateLen returns the float64 elements ReduceAxes keeps for its
// backward (or uses as scratch) for a reduction to m outputs: none for
// ReduceSum and ReduceMean, 2m for ReduceProd (the product of the nonzero
// elements and the count of zeros), m for the others.
func ReduceStateLen(op ReduceOp, m int) int {
	switch op {
	case ReduceSum, ReduceMean:
		return 0
	case ReduceProd:
		return 2 * m
	}
	return m
}

// ReduceGroups returns, for every element of an array of shape xShape,
// the element of the reduction of shape yShape (same rank, reduced axes
// 1) it belongs to: ReduceAxes's grp.
func ReduceGroups(xShape, yShape []int) []int32 {
	st := strides(yShape)
	grp := make([]int32, numel(xShape))
	forCoords(xShape, func(i int, c []int) {
		j := 0
		for k, ck := range c {
			if yShape[k] != 1 {
				j += ck * st[k]
			}
		}
		grp[i] = int32(j)
	})
	return grp
}

// reduceCount returns the number of elements of x (xShape) that each
// element of the reduction (yShape) gathers.
func reduceCount(xShape, yShape []int) int {
	cnt := 1
	for a, d := range yShape {
		if d == 1 {
			cnt *= xShape[a]
		}
	}
	return cnt
}

// scaleMean multiplies v in place by ReduceMean's factor 1/count, count
// the elements of xShape that reduce into each of yShape's (in float32,
// skipped when it is 1): the sum's, or the sum gradient's, scaling.
func scaleMean(v []float32, xShape, yShape []int) {
	if scale := 1 / float32(reduceCount(xShape, yShape)); scale != 1 {
		for i := range v {
			v[i] *= scale
		}
	}
}

// ReduceAxes implements ReduceOps: ReduceSum and ReduceMean with
// kernels.ReduceToShape (and the mean's scaling in place); ReduceL1,
// ReduceL2, ReduceSumSquare and ReduceLogSum over one block of adjacent
// axes (F.normalize's ReduceL2 over the last) with the groups split over
// the workers, each group's terms added in the order of the one pass
// (the same bits); the others in one pass over x on the calling
// goroutine.
func (CPU) ReduceAxes(op ReduceOp, x []float32, xShape []int, y []float32, yShape []int, grp []int32, state []float64) {
	if op == ReduceSum || op == ReduceMean {
		kernels.ReduceToShape(x, xShape, y, yShape)
		if op == ReduceMean {
			scaleMean(y, xShape, yShape)
		}
		return
	}
	if outer, red, inner, ok := reduceBlock(xShape, yShape); ok && reduceSums(op) && len(x) > 0 {
		acc := state[:len(y)]
		runJob(outer, grainFor(red*inner), func(j *cpuJob, lo, hi int) {
			reduceSumsBlock(j.rop, j.f[0], j.f64, j.red, lo, hi)
		}, func(j *cpuJob) {
			j.rop, j.f[0], j.f64, j.red = op, x, acc, [3]int{outer, red, inner}
		})
		finishSums(op, acc, y)
		return
	}
	reduceAxesSerial(op, x, y, grp, state)
}

// finishSums writes the results of the sums acc of op to y: ReduceL2's
// square roots, ReduceLogSum's logarithms, the others as they are.
func finishSums(op ReduceOp, acc []float64, y []float32) {
	for g, a := range acc {
		switch op {
		case ReduceL2:
			a = math.Sqrt(a)
		case ReduceLogSum:
			a = math.Log(a)
		}
		y[g] = float32(a)
	}
}

// reduceSums reports whether op is a sum of a function of each term,
// which reduceSumsBlock takes.
func reduceSums(op ReduceOp) bool {
	return op == ReduceL1 || op == ReduceL2 || op == ReduceSumSquare || op == ReduceLogSum
}

// reduceBlock returns the geometry of a reduction whose reduced axes
// (those where yShape is 1 and xShape is not) lie in one block of
// adjacent axes, axes of size 1 between them aside: x as outer × red ×
// inner, y as outer × inner; ok is false otherwise.
func reduceBlock(xShape, yShape []int) (outer, red, inner int, ok bool) {
	if len(xShape) != len(yShape) {
		return 0, 0, 0, false
	}
	lo, hi := -1, -1
	for d := range xShape {
		if yShape[d] != xShape[d] {
			if yShape[d] != 1 {
				return 0, 0, 0, false
			}
			if lo < 0 {
				lo = d
			}
			hi = d
		}
	}
	if lo < 0 {
		return numel(xShape), 1, 1, true
	}
	for d := lo; d <= hi; d++ {
		if yShape[d] == xShape[d] && xShape[d] != 1 {
			return 0, 0, 0, false
		}
	}
	return numel(xShape[:lo]), numel(xShape[lo : hi+1]), numel(xShape[hi+1:]), true
}

// reduceSumsBlock adds the terms of op (|v|, v², v) of the groups of
// outer indices [lo, hi) into acc (zeroed first), x as outer × red ×
// inner: each group's terms in increasing element order, as the one pass
// over x adds them.
func reduceSumsBlock(op ReduceOp, x []float32, acc []float64, geom [3]int, lo, hi int) {
	red, inner := geom[1], geom[2]
	if inner == 1 { // a group's terms consecutive: one sum in a register
		for o := lo; o < hi; o++ {
			var a float64
			xs := x[o*red : (o+1)*red]
			switch op {
			case ReduceL1:
				for _, v := range xs {
					a += math.Abs(float64(v))
				}
			case ReduceL2, ReduceSumSquare:
				for _, v := range xs {
					f := float64(v)
					a += f * f
				}
			default: // ReduceLogSum
				for _, v := range xs {
					a += float64(v)
				}
			}
			acc[o] = a
		}
		return
	}
	for o := lo; o < hi; o++ {
		a := acc[o*inner : (o+1)*inner]
		clear(a)
		for r := range red {
			xs := x[(o*red+r)*inner:][:inner]
			switch op {
			case ReduceL1:
				for c, v := range xs {
					a[c] += math.Abs(float64(v))
				}
			case ReduceL2, ReduceSumSquare:
				for c, v := range xs {
					f := float64(v)
					a[c] += f * f
				}
			default: // ReduceLogSum
				for c, v := range xs {
					a[c] += float64(v)
				}
			}
		}
	}
}

// reduceAxesSerial is ReduceAxes' one pass over x, element by element
// into its group grp[i] (every operator but ReduceSum and ReduceMean).
func reduceAxesSerial(op ReduceOp, x []float32, y []float32, grp []int32, state []float64) {
	switch op {
	case ReduceMax, ReduceMin:
		arg := state[:len(y)] // the winning element of each output
		for g := range arg {
			arg[g] = -1
		}
		for i, v := range x {
			g := grp[i]
			a := int(arg[g])
			switch {
			case a < 0, v != v && x[a] == x[a],
				op == ReduceMax && v > x[a], op == ReduceMin && v < x[a]:
				arg[g] = float64(i)
			}
		}
		for g, a := range arg {
			y[g] = x[int(a)]
		}
	case ReduceProd:
		nz, zeros := state[:len(y)], state[len(y):2*len(y)] // product of the nonzero elements, count of zeros
		for g := range nz {
			nz[g], zeros[g] = 1, 0
		}
		for i, v := range x {
			if v == 0 {
				zeros[grp[i]]++
			} else {
				nz[grp[i]] *= float64(v)
			}
		}
		for g := range nz {
			if zeros[g] > 0 {
				y[g] = 0
			} else {
				y[g] = float32(nz[g])
			}
		}
	case ReduceLogSumExp:
		// Shifted by each group's maximum, so that large inputs do not
		// overflow.
		acc := state[:len(y)]
		for g := range acc {
			acc[g] = math.Inf(-1)
		}
		for i, v := range x {
			acc[grp[i]] = math.Max(acc[grp[i]], float64(v))
		}
		for g := range acc {
			y[g] = float32(acc[g]) // the maximum, for now
			acc[g] = 0
		}
		for i, v := range x {
			acc[grp[i]] += math.Exp(float64(v - y[grp[i]]))
		}
		for g := range acc {
			y[g] += float32(math.Log(acc[g]))
		}
	case ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum:
		acc := state[:len(y)]
		clear(acc)
		for i, v := range x {
			f := float64(v)
			switch op {
			case ReduceL1:
				acc[grp[i]] += math.Abs(f)
			case ReduceL2, ReduceSumSquare:
				acc[grp[i]] += f * f
			case ReduceLogSum:
				acc[grp[i]] += f
			}
		}
		finishSums(op, acc, y)
	default:
		panic(fmt.Sprintf("runtime: unknown reduction %v", op))
	}
}

// ReduceAxesBackward implements ReduceOps: ReduceSum and ReduceMean with
// kernels.Expand (and the mean's scaling in place), ReduceMax and
// ReduceMin from the winners on the calling goroutine, the others
// element by element over the workers.
func (CPU) ReduceAxesBackward(op ReduceOp, x []float32, xShape []int, y, dy []float32, yShape []int, grp []int32, state []float64, dx []float32) {
	switch op {
	case ReduceSum, ReduceMean:
		kernels.Expand(dy, yShape, dx, xShape)
		if op == ReduceMean {
			scaleMean(dx, xShape, yShape)
		}
		return
	case ReduceMax, ReduceMin:
		clear(dx)
		for g, a := range state[:len(y)] {
			dx[int(a)] += dy[g]
		}
		return
	}
	// Each element's gradient from its own term and its group's result:
	// ranges of elements over the workers.
	runJob(len(x), 1<<14, func(j *cpuJob, lo, hi int) {
		reduceBackwardRange(j.rop, j.f[0], j.f[1], j.f[2], j.arg, j.f64, j.f[3], lo, hi)
	}, func(j *cpuJob) {
		j.rop, j.f[0], j.f[1], j.f[2], j.arg, j.f64, j.f[3] = op, x, y, dy, grp, state, dx
	})
}

// reduceBackwardRange computes dx[i] for i in [lo, hi) of the reductions
// whose gradient is elementwise given the group's result (ReduceProd,
// ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp).
func reduceBackwardRange(op ReduceOp, x, y, dy []float32, grp []int32, state []float64, dx []float32, lo, hi int) {
	var nz, zeros []float64
	if op == ReduceProd {
		nz, zeros = state[:len(y)], state[len(y):2*len(y)]
	}
	for i := lo; i < hi; i++ {
		v := x[i]
		g := grp[i]
		yg, d := y[g], dy[g]
		switch op {
		case ReduceProd:
			switch {
			case zeros[g] == 0:
				dx[i] = d * float32(nz[g]/float64(v))
			case zeros[g] == 1 && v == 0:
				dx[i] = d * float32(nz[g])
			default:
				dx[i] = 0
			}
		case ReduceL1:
			switch {
			case v > 0:
				dx[i] = d
			case v < 0:
				dx[i] = -d
			default:
				dx[i] = 0
			}
		case ReduceL2:
			if yg == 0 {
				dx[i] = 0
			} else {
				dx[i] = d * v / yg
			}
		case ReduceSumSquare:
			dx[i] = 2 * d * v
		case ReduceLogSum:
			dx[i] = d * float32(math.Exp(-float64(yg)))
		case ReduceLogSumExp:
			dx[i] = d * float32(math.Exp(float64(v-yg)))
		default:
			panic(fmt.Sprintf("runtime: unknown reduction %v", op))
		}
	}
}

// Softmax implements ReduceOps over the runtime's workers (cpuSoftmax).
func (CPU) Softmax(x []float32, outer, n, inner int, y []float32) {
	cpuSoftmax(x, outer, n, inner, y, false)
}

// LogSoftmax implements ReduceOps over the runtime's workers (cpuSoftmax).
func (CPU) LogSoftmax(x []float32, outer, n, inner int, y []float32) {
	cpuSoftmax(x, outer, n, inner, y, true)
}

// SoftmaxBackward implements ReduceOps over the runtime's workers.
func (CPU) SoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32) {
	cpuSoftmaxBackward(y, dy, outer, n, inner, dx, false)
}

// LogSoftmaxBackward implements ReduceOps over the runtime's workers.
func (CPU) LogSoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32) {
	cpuSoftmaxBackward(y, dy, outer, n, inner, dx, true)
}

// cpuSoftmax computes the softmax (or log-softmax) of x viewed as outer ×
// L × inner along L, split over the runtime's workers by outer index:
// contiguous rows (inner = 1) through softmaxRows, strided ones with
// kernels.Expf element by element.
func cpuSoftmax(x []float32, outer, L, inner int, y []float32, logSoftmax bool) {
	runJob(outer, grainFor(L*inner), softmaxKernel, func(j *cpuJob) {
		j.f[0], j.f[1], j.n, j.k, j.flag = x, y, L, inner, logSoftmax
	})
}

func softmaxKernel(job *cpuJob, lo, hi int) {
	x, y, L, inner, logSoftmax := job.f[0], job.f[1], job.n, job.k, job.flag
	if inner == 1 {
		softmaxRows(x, y, L, lo, hi, logSoftmax)
		return
	}
	for o := lo; o < hi; o++ {
		for in := 0; in < inner; in++ {
			base := o*L*inner + in
			m := float32(math.Inf(-1))
			for j := 0; j < L; j++ {
				if v := x[base+j*inner]; v > m {
					m = v
				}
			}
			var s float64
			for j := 0; j < L; j++ {
				e := float64(kernels.Expf(x[base+j*inner] - m))
				s += e
				if !logSoftmax {
					y[base+j*inner] = float32(e)
				}
			}
			if logSoftmax {
				ls := float32(math.Log(s))
				for j := 0; j < L; j++ {
					y[base+j*inner] = x[base+j*inner] - m - ls
				}
			} else {
				inv := float32(1 / s)
				for j := 0; j < L; j++ {
					y[base+j*inner] *= inv
				}
			}
		}
	}
}

// softmaxRows computes the softmax (or log-softmax) of rows [lo, hi) of L
// contiguous elements: the shifted row x − max goes to y, where the
// vectorized kernels.Expfs exponentiates it in place.
func softmaxRows(x, y []float32, L, lo, hi int, logSoftmax bool) {
	for o := lo; o < hi; o++ {
		xr, yr := x[o*L:(o+1)*L], y[o*L:(o+1)*L]
		m := float32(math.Inf(-1))
		for _, v := range xr {
			if v > m {
				m = v
			}
		}
		for j, v := range xr {
			yr[j] = v - m
		}
		kernels.Expfs(yr, yr)
		var s float64
		for _, e := range yr {
			s += float64(e)
		}
		if logSoftmax {
			ls := float32(math.Log(s))
			for j, v := range xr {
				yr[j] = v - m - ls
			}
			continue
		}
		inv := float32(1 / s)
		for j := range yr {
			yr[j] *= inv
		}
	}
}

// cpuSoftmaxBackward computes the softmax's (or log-softmax's) input
// gradient from its output y, split over the runtime's workers by outer
// index.
func cpuSoftmaxBackward(yd, dy []float32, outer, L, inner int, dx []float32, logSoftmax bool) {
	runJob(outer, grainFor(L*inner), softmaxBackwardKernel, func(j *cpuJob) {
		j.f[0], j.f[1], j.f[2], j.n, j.k, j.flag = yd, dy, dx, L, inner, logSoftmax
	})
}

func softmaxBackwardKernel(job *cpuJob, lo, hi int) {
	yd, dy, dx, L, inner, logSoftmax := job.f[0], job.f[1], job.f[2], job.n, job.k, job.flag
	for o := lo; o < hi; o++ {
		for in := 0; in < inner; in++ {
			base := o*L*inner + in
			var s float64
			if logSoftmax {
				for j := 0; j < L; j++ {
					s += float64(dy[base+j*inner])
				}
				for j := 0; j < L; j++ {
					k := base + j*inner
					dx[k] = dy[k] - float32(math.Exp(float64(yd[k])))*float32(s)
				}
			} else {
				for j := 0; j < L; j++ {
					k := base + j*inner
					s += float64(dy[k] * yd[k])
				}
				for j := 0; j < L; j++ {
					k := base + j*inner
					dx[k] = yd[k] * (dy[k] - float32(s))
				}
			}
		}
	}
}

// SoftmaxCrossEntropy implements ReduceOps, one sample after another on
// the calling goroutine.
func (CPU) SoftmaxCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, losses, probs []float32) {
	for i := 0; i < n; i++ {
		row, pr := logits[i*k:(i+1)*k], probs[i*k:(i+1)*k]
		m := float32(math.Inf(-1))
		for _, v := range row {
			if v > m {
				m = v
			}
		}
		var s float64
		for j, v := range row {
			e := math.Exp(float64(v - m))
			pr[j] = float32(e)
			s += e
		}
		inv := float32(1 / s)
		for j := range pr {
			pr[j] *= inv
		}
		target := float64(row[labels[i]] - m)
		if alpha != 0 {
			// Σ_j t_j (z_j − m) = (1−α)(z_y − m) + (α/k) Σ_j (z_j − m).
			var all float64
			for _, v := range row {
				all += float64(v - m)
			}
			target = (1-float64(alpha))*target + float64(alpha)/float64(k)*all
		}
		losses[i] = float32(math.Log(s) - target)
	}
}

// SoftmaxCrossEntropyBackward implements ReduceOps, one sample after
// another on the calling goroutine.
func (CPU) SoftmaxCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, dlogits []float32) {
	off, on := float32(float64(alpha)/float64(k)), 1-alpha // t_j off and on the label, less α/k
	for i := 0; i < n; i++ {
		w := weights[i]
		d, pr := dlogits[i*k:(i+1)*k], probs[i*k:(i+1)*k]
		if alpha == 0 {
			for j := range d {
				d[j] = w * pr[j]
			}
			d[labels[i]] -= w
			continue
		}
		for j := range d {
			d[j] = w * (pr[j] - off)
		}
		d[labels[i]] -= w * on
	}
}

// LabelWords is the 64-bit words a multi-label sample's set of k labels
// takes in the loss head's labels (ReduceOps.SigmoidCrossEntropy): the
// set's ⌈k/64⌉, then as many of the labels it ignores.
func LabelWords(k int) int { return 2 * labelset.Words(k) }

// labelBit is label j of sample i in labels of w words a sample
// (LabelWords): 1 where it applies, else 0.
func labelBit(labels []int64, w, i, j int) int64 {
	return int64(uint64(labels[i*w+j>>6]) >> uint(j&63) & 1)
}

// labelIgnored reports whether sample i ignores label j in labels of w
// words a sample (LabelWords: the ignored labels' words the second half).
func labelIgnored(labels []int64, w, i, j int) bool {
	return uint64(labels[i*w+w/2+j>>6])>>uint(j&63)&1 == 1
}

// SigmoidCrossEntropy implements ReduceOps, one sample after another on
// the calling goroutine, each term in float64.
func (CPU) SigmoidCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, posWeight, uncertain, losses, probs []float32) {
	a, w := float64(alpha), LabelWords(k)
	for i := 0; i < n; i++ {
		row, pr := logits[i*k:(i+1)*k], probs[i*k:(i+1)*k]
		var s float64
		for j, v := range row {
			z := float64(v)
			t := (1-a)*float64(labelBit(labels, w, i, j)) + a/2
			if labelIgnored(labels, w, i, j) {
				if uncertain[j] <= 0 {
					pr[j] = float32(1 / (1 + math.Exp(-z)))
					continue
				}
				t = (1-a)*float64(uncertain[j]) + a/2 // an uncertain label's soft target
			}
			// p·t·softplus(−z) + (1−t)·softplus(z) = a·softplus(z) − p·t·z;
			// at p = 1, a = 1 and p·t = t exactly: the plain loss's terms.
			p := float64(posWeight[j])
			c := 1 + (p-1)*t
			// log(1 + e^{−|z|}) never overflows; σ(z) from e^{−|z|} too.
			e := math.Exp(-math.Abs(z))
			s += c*max(z, 0) - z*(p*t) + c*math.Log1p(e)
			if z >= 0 {
				pr[j] = float32(1 / (1 + e))
			} else {
				pr[j] = float32(e / (1 + e))
			}
		}
		losses[i] = float32(s / float64(k))
	}
}

// SigmoidCrossEntropyBackward implements ReduceOps, one sample after
// another on the calling goroutine.
func (CPU) SigmoidCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, posWeight, uncertain, dlogits []float32) {
	inv, lw := 1/float32(k), LabelWords(k)
	off, on := alpha/2, 1-alpha/2 // t off and on the label set
	for i := 0; i < n; i++ {
		w := weights[i] * inv
		d, pr := dlogits[i*k:(i+1)*k], probs[i*k:(i+1)*k]
		for j := range d {
			t := off
			if labelBit(labels, lw, i, j) == 1 {
				t = on
			}
			if labelIgnored(labels, lw, i, j) {
				if uncertain[j] <= 0 {
					d[j] = 0
					continue
				}
				t = (1-alpha)*uncertain[j] + off
			}
			// (1 + (p−1)·t)·σ − p·t as (σ − t) + (p−1)·t·(σ − 1): near σ = 1
			// the first form cancels in float32, both differences here are
			// exact there; at p = 1 it is σ − t.
			d[j] = w * ((pr[j] - t) + (posWeight[j]-1)*t*(pr[j]-1))
		}
	}
}

// ScatterReduce implements ReduceOps in one pass on the calling goroutine.
func (CPU) ScatterReduce(red ScatterReduction, u []float32, idx []int32, y []float32) {
	switch red {
	case ScatterReduceNone:
		for i, j := range idx {
			y[j] = u[i]
		}
	case ScatterReduceAdd:
		for i, j := range idx {
			y[j] += u[i]
		}
	case ScatterReduceMul:
		for i, j := range idx {
			y[j] *= u[i]
		}
	case ScatterReduceMax:
		for i, j := range idx {
			y[j] = max(y[j], u[i])
		}
	case ScatterReduceMin:
		for i, j := range idx {
			y[j] = min(y[j], u[i])
		}
	default:
		panic(fmt.Sprintf("runtime: unknown scatter reduction %d", red))
	}
}
