package runtime

import "github.com/dpfinetune/dpfinetune/runtime/kernels"

// ElementwiseOps is the group of GraphOps for unary, binary and
// parameterized activations, Where, Clip and their derivatives: every
// elementwise operator of the graph, and the gradients of the broadcasting
// binary operators (whose forward is LinalgOps.Binary).
type ElementwiseOps interface {
	// Unary computes y = op(x) elementwise over len(x) elements (y may
	// alias x), op's attributes in par (see UnaryParams): the ONNX unary
	// operators and activations (Relu, Sigmoid, Tanh, Erf, Exp, Log,
	// Sqrt, Neg, Abs, Reciprocal, LeakyRelu, Elu, HardSigmoid, HardSwish,
	// Softplus, Gelu, Selu, Celu, Sign, Shrink, Softsign,
	// ThresholdedRelu, Mish, Floor, Ceil, Round, Sin, Cos), Identity (a
	// copy) and Scale (y = α·x: variadic Mean's 1/n).
	Unary(op UnaryOp, par UnaryParams, x, y []float32)
	// UnaryBackward computes dx = dy·op'(x) over len(dy) elements (dx may
	// alias dy). Relu, Sigmoid, Tanh, Exp, Sqrt and Reciprocal read only
	// the forward output y (Relu's y > 0 exactly where x > 0, NaN
	// included, as in PyTorch); Neg, Identity and Scale read neither; all
	// others read only the input x. The slice an operator does not read
	// may be nil.
	UnaryBackward(op UnaryOp, par UnaryParams, x, y, dy, dx []float32)
	// BinaryBackward computes the gradients of y = a op b (LinalgOps.Binary,
	// numpy broadcasting): da (aShape) and db (bShape), each dy times the
	// partial derivative, summed over the axes its operand was broadcast
	// along. Div's d/db and Pow read the forward output y; for Pow, d/db
	// is taken as 0 where a = 0 and b ≥ 0 (PyTorch's convention instead
	// of 0·log 0). A nil da or db is skipped. For Add and Sub, da may be
	// dy itself (one array; a of y's shape): the plan's gradient in place,
	// left as it is.
	BinaryBackward(op BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y, dy []float32, yShape []int, da, db []float32)
	// Clip computes y = min(max(x, lo), hi) over len(x) elements (ONNX
	// Clip: ±Inf for a missing bound; lo > hi gives hi everywhere).
	Clip(x []float32, lo, hi float32, y []float32)
	// ClipBackward computes dx = dy where lo ≤ x ≤ hi and 0 elsewhere
	// (inclusive bounds, as PyTorch's clamp).
	ClipBackward(x []float32, lo, hi float32, dy, dx []float32)
	// Where computes out = cond ? x : y (ONNX Where) with numpy
	// broadcasting of all three onto outShape; cond is a compile-time
	// boolean mask, one byte per element, nonzero for true.
	Where(cond []uint8, condShape []int, x []float32, xShape []int, y []float32, yShape []int, out []float32, outShape []int)
	// WhereBackward computes dx (xShape) and dy (yShape) from dout: dout
	// where cond holds (for dx) or fails (for dy), summed over the axes
	// the operand was broadcast along. A nil dx or dy is skipped; ws is
	// scratch of numel(outShape) elements.
	WhereBackward(cond []uint8, condShape []int, xShape, yShape []int, dout []float32, outShape []int, dx, dy, ws []float32)
	// Gelu computes y = x·Φ(x) = ½x(1 + erf(x/√2)), or with tanh true
	// ½x(1 + tanh(√(2/π)(x + 0.044715x³))), over len(x) elements: the
	// runtime's fused GELU (the Div → Erf → Add → Mul → Mul chain that
	// torch exports for nn.GELU, and the tanh form's chain). The ONNX
	// Gelu operator itself goes through Unary, which the CPU evaluates in
	// float64 where this is its vectorized float32 kernel.
	Gelu(tanh bool, x, y []float32)
	// GeluBackward computes dx = dy·GELU'(x) over len(dy) elements from
	// the input x.
	GeluBackward(tanh bool, x, dy, dx []float32)
	// PRelu computes y = x where x > 0 and s·x elsewhere (ONNX PRelu),
	// the slope s broadcast onto x: element j reads slope[sIdx[j]], or
	// slope[j] when sIdx is nil (the compile-time broadcast map).
	PRelu(x, slope []float32, sIdx []int32, y []float32)
	// PReluBackward computes dx = dy where x > 0 and dy·s elsewhere, and
	// ds (len(x) elements, before the reduction onto the slope's shape,
	// which the caller does with ReduceToShape) = dy·x where x ≤ 0 and 0
	// elsewhere. A nil dx or ds is skipped.
	PReluBackward(x, slope []float32, sIdx []int32, dy, dx, ds []float32)
	// MaxMin computes the ONNX variadic Max (or Min, with min true) of the
	// inputs xs onto len(y) elements: element j of input i is
	// xs[i][idx[i][j]] (numpy broadcasting as compile-time maps), or
	// xs[i][j] when idx[i] is nil. A NaN input wins (the first NaN).
	MaxMin(min bool, xs [][]float32, idx [][]int32, y []float32)
	// MaxMinBackward sends dy[j] to the first input whose element j
	// attains the extreme (the first NaN if any), added into dxs[i] at
	// idx[i][j] (or j); every non-nil dxs[i] is overwritten, nil ones are
	// skipped. PyTorch splits ties; ties have measure zero on real data.
	MaxMinBackward(min bool, xs [][]float32, idx [][]int32, dy []float32, dxs [][]float32)
}

// UnaryOp selects an elementwise operator of ElementwiseOps.Unary.
type UnaryOp = kernels.UnaryOp

// The operators of ElementwiseOps.Unary (ONNX names; GeluTanh is Gelu with
// approximate="tanh", Scale the experimental ONNX Scale).
const (
	UnaryRelu            = kernels.Relu
	UnarySigmoid         = kernels.Sigmoid
	UnaryTanh            = kernels.Tanh
	UnaryErf             = kernels.Erf
	UnaryExp             = kernels.Exp
	UnaryLog             = kernels.Log
	UnarySqrt            = kernels.Sqrt
	UnaryNeg             = kernels.Neg
	UnaryAbs             = kernels.Abs
	UnaryReciprocal      = kernels.Reciprocal
	UnaryIdentity        = kernels.Identity
	UnaryLeakyRelu       = kernels.LeakyRelu
	UnaryElu             = kernels.Elu
	UnaryHardSigmoid     = kernels.HardSigmoid
	UnaryHardSwish       = kernels.HardSwish
	UnarySoftplus        = kernels.Softplus
	UnaryGelu            = kernels.Gelu
	UnaryGeluTanh        = kernels.GeluTanhApprox
	UnarySelu            = kernels.Selu
	UnaryCelu            = kernels.Celu
	UnarySign            = kernels.Sign
	UnaryShrink          = kernels.Shrink
	UnarySoftsign        = kernels.Softsign
	UnaryThresholdedRelu = kernels.ThresholdedRelu
	UnaryMish            = kernels.Mish
	UnaryFloor           = kernels.Floor
	UnaryCeil            = kernels.Ceil
	UnaryRound           = kernels.Round
	UnarySin             = kernels.Sin
	UnaryCos             = kernels.Cos
	UnaryScale           = kernels.Scale
)

// UnaryParams holds the attributes of ElementwiseOps.Unary's parameterized
// operators: LeakyRelu, Elu, Celu and ThresholdedRelu read Alpha;
// HardSigmoid Alpha and Beta; Selu Alpha and Gamma; Shrink Alpha (lambd)
// and Beta (bias); Scale Alpha.
type UnaryParams = kernels.UnaryParams

// activationGrain is the parallel grain of the activations that
// kernels.Activation evaluates (a few µs of transcendental work).
const activationGrain = 1 << 14

// Unary implements ElementwiseOps with kernels.Unary, or kernels.Activation
// over the runtime's workers for the operators from LeakyRelu on.
func (CPU) Unary(op UnaryOp, par UnaryParams, x, y []float32) {
	if op <= kernels.Identity {
		kernels.Unary(op, x, y)
		return
	}
	runJob(len(x), activationGrain, activationKernel, func(j *cpuJob) {
		j.op, j.par, j.f[0], j.f[1] = op, par, x, y
	})
}

func activationKernel(j *cpuJob, lo, hi int) {
	kernels.Activation(j.op, j.par, j.f[0][lo:hi], j.f[1][lo:hi])
}

// UnaryBackward implements ElementwiseOps with kernels.UnaryBackward or
// kernels.ActivationBackward.
func (CPU) UnaryBackward(op UnaryOp, par UnaryParams, x, y, dy, dx []float32) {
	if op <= kernels.Identity {
		kernels.UnaryBackward(op, x, y, dy, dx)
		return
	}
	runJob(len(dy), activationGrain, activationBackwardKernel, func(j *cpuJob) {
		j.op, j.par, j.f[0], j.f[1], j.f[2] = op, par, x, dy, dx
	})
}

func activationBackwardKernel(j *cpuJob, lo, hi int) {
	var x []float32
	if j.f[0] != nil {
		x = j.f[0][lo:hi]
	}
	kernels.ActivationBackward(j.op, j.par, x, j.f[1][lo:hi], j.f[2][lo:hi])
}

// BinaryBackward implements ElementwiseOps with kernels.BinaryBackward.
func (CPU) BinaryBackward(op BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y, dy []float32, yShape []int, da, db []float32) {
	kernels.BinaryBackward(op, a, aShape, b, bShape, y, dy, yShape, da, db)
}

// Clip implements ElementwiseOps with kernels.Clip.
func (CPU) Clip(x []float32, lo, hi float32, y []float32) { kernels.Clip(x, lo, hi, y) }

// ClipBackward implements ElementwiseOps with kernels.ClipBackward.
func (CPU) ClipBackward(x []float32, lo, hi float32, dy, dx []float32) {
	kernels.ClipBackward(x, lo, hi, dy, dx)
}

// Where implements ElementwiseOps with kernels.Where.
func (CPU) Where(cond []uint8, condShape []int, x []float32, xShape []int, y []float32, yShape []int, out []float32, outShape []int) {
	kernels.Where(cond, condShape, x, xShape, y, yShape, out, outShape)
}

// WhereBackward implements ElementwiseOps with kernels.WhereBackward.
func (CPU) WhereBackward(cond []uint8, condShape []int, xShape, yShape []int, dout []float32, outShape []int, dx, dy, ws []float32) {
	kernels.WhereBackward(cond, condShape, xShape, yShape, dout, outShape, dx, dy, ws)
}

// geluGrain is the parallel grain of the fused GELU: a few µs of
// transcendental work per range.
const geluGrain = 1 << 13

// Gelu implements ElementwiseOps with kernels.GeluErf or kernels.GeluTanh
// over the runtime's workers.
func (CPU) Gelu(tanh bool, x, y []float32) {
	runJob(len(x), geluGrain, geluKernel, func(j *cpuJob) { j.flag, j.f[0], j.f[1] = tanh, x, y })
}

func geluKernel(j *cpuJob, lo, hi int) {
	if j.flag {
		kernels.GeluTanh(j.f[0][lo:hi], j.f[1][lo:hi])
	} else {
		kernels.GeluErf(j.f[0][lo:hi], j.f[1][lo:hi])
	}
}

// GeluBackward implements ElementwiseOps with kernels.GeluErfBackward or
// kernels.GeluTanhBackward over the runtime's workers.
func (CPU) GeluBackward(tanh bool, x, dy, dx []float32) {
	runJob(len(dy), geluGrain, geluBackwardKernel, func(j *cpuJob) {
		j.flag, j.f[0], j.f[1], j.f[2] = tanh, x, dy, dx
	})
}

func geluBackwardKernel(j *cpuJob, lo, hi int) {
	if j.flag {
		kernels.GeluTanhBackward(j.f[0][lo:hi], j.f[1][lo:hi], j.f[2][lo:hi])
	} else {
		kernels.GeluErfBackward(j.f[0][lo:hi], j.f[1][lo:hi], j.f[2][lo:hi])
	}
}

// PRelu implements ElementwiseOps in one pass on the calling goroutine.
func (CPU) PRelu(x, slope []float32, sIdx []int32, y []float32) {
	y = y[:len(x)]
	if sIdx == nil {
		slope = slope[:len(x)]
		for j, v := range x {
			if v > 0 {
				y[j] = v
			} else {
				y[j] = slope[j] * v
			}
		}
		return
	}
	sIdx = sIdx[:len(x)]
	for j, v := range x {
		if v > 0 {
			y[j] = v
		} else {
			y[j] = slope[sIdx[j]] * v
		}
	}
}

// PReluBackward implements ElementwiseOps in one pass per gradient on the
// calling goroutine.
func (CPU) PReluBackward(x, slope []float32, sIdx []int32, dy, dx, ds []float32) {
	slopeAt := func(j int) float32 {
		if sIdx != nil {
			return slope[sIdx[j]]
		}
		return slope[j]
	}
	if dx != nil {
		for j, v := range x {
			if v > 0 {
				dx[j] = dy[j]
			} else {
				dx[j] = dy[j] * slopeAt(j)
			}
		}
	}
	if ds != nil {
		for j, v := range x {
			if v > 0 {
				ds[j] = 0
			} else {
				ds[j] = dy[j] * v
			}
		}
	}
}

// at returns element j of input i of MaxMin.
func maxMinAt(xs [][]float32, idx [][]int32, i, j int) float32 {
	if m := idx[i]; m != nil {
		return xs[i][m[j]]
	}
	return xs[i][j]
}

// MaxMin implements ElementwiseOps in one pass on the calling goroutine.
func (CPU) MaxMin(min bool, xs [][]float32, idx [][]int32, y []float32) {
	for j := range y {
		v := maxMinAt(xs, idx, 0, j)
		for i := 1; i < len(xs); i++ {
			u := maxMinAt(xs, idx, i, j)
			if min {
				if u < v || u != u {
					v = u
				}
			} else if u > v || u != u {
				v = u
			}
		}
		y[j] = v
	}
}

// MaxMinBackward implements ElementwiseOps in one pass on the calling
// goroutine.
func (CPU) MaxMinBackward(min bool, xs [][]float32, idx [][]int32, dy []float32, dxs [][]float32) {
	for _, dx := range dxs {
		clear(dx)
	}
	for j, g := range dy {
		w, v := 0, maxMinAt(xs, idx, 0, j)
		for i := 1; i < len(xs); i++ {
			u := maxMinAt(xs, idx, i, j)
			if !min && u > v || min && u < v || u != u && v == v {
				w, v = i, u
			}
		}
		dx := dxs[w]
		if dx == nil {
			continue
		}
		if m := idx[w]; m != nil {
			dx[m[j]] += g
		} else {
			dx[j] += g
		}
	}
}
