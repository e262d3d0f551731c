//go:build linux && (amd64 || arm64)

package cuda

import (
	"io"
	"math"
	"math/rand"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// unaryOps are the operators of ElementwiseOps.Unary, with their
// parameters and the input range their definitions need.
var unaryOps = []struct {
	op       runtime.UnaryOp
	par      runtime.UnaryParams
	positive bool // the input must be > 0 (Log, Sqrt)
}{
	{op: runtime.UnaryRelu}, {op: runtime.UnarySigmoid}, {op: runtime.UnaryTanh}, {op: runtime.UnaryErf},
	{op: runtime.UnaryExp}, {op: runtime.UnaryLog, positive: true}, {op: runtime.UnarySqrt, positive: true},
	{op: runtime.UnaryNeg}, {op: runtime.UnaryAbs}, {op: runtime.UnaryReciprocal, positive: true}, {op: runtime.UnaryIdentity},
	{op: runtime.UnaryLeakyRelu, par: runtime.UnaryParams{Alpha: 0.01}}, {op: runtime.UnaryElu, par: runtime.UnaryParams{Alpha: 1.2}},
	{op: runtime.UnaryHardSigmoid, par: runtime.UnaryParams{Alpha: 0.2, Beta: 0.5}}, {op: runtime.UnaryHardSwish},
	{op: runtime.UnarySoftplus}, {op: runtime.UnaryGelu}, {op: runtime.UnaryGeluTanh},
	{op: runtime.UnarySelu, par: runtime.UnaryParams{Alpha: 1.6732632, Gamma: 1.050701}}, {op: runtime.UnaryCelu, par: runtime.UnaryParams{Alpha: 0.8}},
	{op: runtime.UnarySign}, {op: runtime.UnaryShrink, par: runtime.UnaryParams{Alpha: 0.5, Beta: 0.1}}, {op: runtime.UnarySoftsign},
	{op: runtime.UnaryThresholdedRelu, par: runtime.UnaryParams{Alpha: 0.3}}, {op: runtime.UnaryMish},
	{op: runtime.UnaryFloor}, {op: runtime.UnaryCeil}, {op: runtime.UnaryRound}, {op: runtime.UnarySin}, {op: runtime.UnaryCos},
	{op: runtime.UnaryScale, par: runtime.UnaryParams{Alpha: -0.7}},
}

// unaryReads says which forward slices UnaryBackward reads for op: the
// output only, neither, or the input only (the other may be nil).
func unaryReads(op runtime.UnaryOp) (x, y bool) {
	switch op {
	case runtime.UnaryRelu, runtime.UnarySigmoid, runtime.UnaryTanh, runtime.UnaryExp, runtime.UnarySqrt, runtime.UnaryReciprocal:
		return false, true
	case runtime.UnaryNeg, runtime.UnaryIdentity, runtime.UnaryScale:
		return false, false
	}
	return true, false
}

// actInput draws n inputs of an activation: mostly in [−4, 4], some
// exact zeros, halves and integers (the corners of Round, Sign, Relu).
func actInput(r *rand.Rand, n int, positive bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch r.Intn(10) {
		case 0:
			x[i] = float32(r.Intn(7)-3) / 2
		default:
			x[i] = 8*r.Float32() - 4
		}
		if positive {
			x[i] = float32(math.Abs(float64(x[i]))) + 0.05
		}
	}
	return x
}

var elementwiseCases = []valueCase{
	{"Unary", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		n := r.Intn(700) // up to 3 blocks: 31 operators
		var out [][]float32
		for k, u := range unaryOps {
			x := actInput(r, n, u.positive)
			y := place(p, filled(n, 7))
			o.Unary(u.op, u.par, place(p, x), y)
			out = append(out, fetch(p, y))
			if k%4 == 0 {
				xy := place(p, x) // in place
				o.Unary(u.op, u.par, xy, xy)
				out = append(out, fetch(p, xy))
			}
		}
		return out, true
	}, 2e-6},
	{"UnaryBackward", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		n := r.Intn(700)
		var out [][]float32
		for k, u := range unaryOps {
			x := actInput(r, n, u.positive)
			y := make([]float32, n)
			runtime.CPU{}.Unary(u.op, u.par, x, y) // one forward output for all
			var xs, ys []float32
			if rx, ry := unaryReads(u.op); rx {
				xs = place(p, x)
			} else if ry {
				ys = place(p, y)
			}
			dx := place(p, filled(n, 7))
			o.UnaryBackward(u.op, u.par, xs, ys, place(p, unif(r, n)), dx)
			out = append(out, fetch(p, dx))
			if k%4 == 0 {
				dd := place(p, unif(r, n)) // dx aliasing dy
				o.UnaryBackward(u.op, u.par, xs, ys, dd, dd)
				out = append(out, fetch(p, dd))
			}
		}
		return out, true
	}, 2e-5},
	{"BinaryBackward", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		shape, s := randBroadcast(r, 2)
		var out [][]float32
		for _, op := range binaryOps {
			a, b := unif(r, shapeNumel(s[0])), unif(r, shapeNumel(s[1]))
			for i := range b {
				b[i] += float32(math.Copysign(0.5, float64(b[i])))
			}
			if op == runtime.BinaryPow {
				powOperands(r, a, b)
				a[0] = 0 // d/db is 0 at a = 0, b ≥ 0
			}
			y := make([]float32, shapeNumel(shape))
			runtime.CPU{}.Binary(op, a, s[0], b, s[1], y, shape)
			da, db := place(p, filled(len(a), 7)), place(p, filled(len(b), 7))
			yy := place(p, y)
			if op != runtime.BinaryDiv && op != runtime.BinaryPow {
				yy = nil // not read
			}
			switch r.Intn(4) {
			case 0:
				da = nil
			case 1:
				db = nil
			}
			o.BinaryBackward(op, place(p, a), s[0], place(p, b), s[1], yy, place(p, unif(r, len(y))), shape, da, db)
			for _, g := range [][]float32{da, db} {
				if g != nil {
					out = append(out, fetch(p, g))
				}
			}
		}
		return out, true
	}, 1e-5},
	// A per-channel scale and shift of feature maps and a per-feature one
	// of tokens: few gradient elements with many terms each, which the
	// Device sums with a block per element (launchSums).
	{"BinaryBackwardSums", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		var out [][]float32
		for _, c := range []struct{ y, b []int }{{[]int{2, 6, 20, 30}, []int{1, 6, 1, 1}}, {[]int{4, 49, 24}, []int{24}}, {[]int{3, 2, 40}, []int{3, 1, 1}}} {
			for _, op := range []runtime.BinaryOp{runtime.BinaryMul, runtime.BinaryAdd, runtime.BinaryDiv} {
				a, b := unif(r, shapeNumel(c.y)), unif(r, shapeNumel(c.b))
				for i := range b {
					b[i] += float32(math.Copysign(0.5, float64(b[i])))
				}
				y := make([]float32, len(a))
				runtime.CPU{}.Binary(op, a, c.y, b, c.b, y, c.y)
				da, db := place(p, filled(len(a), 7)), place(p, filled(len(b), 7))
				o.BinaryBackward(op, place(p, a), c.y, place(p, b), c.b, place(p, y), place(p, unif(r, len(y))), c.y, da, db)
				out = append(out, fetch(p, da), fetch(p, db))
			}
		}
		return out, true
	}, 1e-5},
	// Operands of one shape (a residual connection): Add's gradients and
	// Sub's first are dy, copied (one of them dy's own buffer).
	{"BinaryBackwardSameShape", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		var out [][]float32
		shape := []int{2, 3, 1 + r.Intn(40)}
		n := shapeNumel(shape)
		for _, op := range []runtime.BinaryOp{runtime.BinaryAdd, runtime.BinarySub} {
			a, b, dy := unif(r, n), unif(r, n), unif(r, n)
			dy[0] = float32(math.Copysign(0, -1))
			da, db := place(p, filled(n, 7)), place(p, filled(n, 7))
			o.BinaryBackward(op, place(p, a), shape, place(p, b), shape, nil, place(p, dy), shape, da, db)
			out = append(out, fetch(p, da), fetch(p, db))
			pdy := place(p, dy) // the second operand's gradient in dy's buffer
			o.BinaryBackward(op, place(p, a), shape, place(p, b), shape, nil, pdy, shape, nil, pdy)
			out = append(out, fetch(p, pdy))
		}
		return out, true
	}, 0},
	{"Clip", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		n := r.Intn(3000)
		x := actInput(r, n, false)
		if n > 0 {
			x[0] = float32(math.NaN())
		}
		lo, hi := float32(r.NormFloat64()), float32(r.NormFloat64()) // lo > hi half the time
		if r.Intn(4) == 0 {
			lo, hi = float32(math.Inf(-1)), 1
		}
		y, dx := place(p, filled(n, 7)), place(p, filled(n, 7))
		o.Clip(place(p, x), lo, hi, y)
		o.ClipBackward(place(p, x), lo, hi, place(p, unif(r, n)), dx)
		return [][]float32{fetch(p, y), fetch(p, dx)}, true
	}, 0},
	{"Where", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		shape, s := randBroadcast(r, 3)
		cond := make([]uint8, shapeNumel(s[0]))
		for i := range cond {
			cond[i] = uint8(r.Intn(2) * (1 + r.Intn(3)))
		}
		out := place(p, filled(shapeNumel(shape), 7))
		o.Where(cond, s[0], place(p, unif(r, shapeNumel(s[1]))), s[1], place(p, unif(r, shapeNumel(s[2]))), s[2], out, shape)
		dx, dy := place(p, filled(shapeNumel(s[1]), 7)), place(p, filled(shapeNumel(s[2]), 7))
		o.WhereBackward(cond, s[0], s[1], s[2], place(p, unif(r, shapeNumel(shape))), shape, dx, dy, place(p, make([]float32, shapeNumel(shape))))
		return [][]float32{fetch(p, out), fetch(p, dx), fetch(p, dy)}, true
	}, 1e-5},
	{"Gelu", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		n := r.Intn(9000) // beyond the emulation's grid (32 blocks of 256)
		var out [][]float32
		for _, tanh := range []bool{false, true} {
			x := actInput(r, n, false)
			y, dx := place(p, filled(n, 7)), place(p, filled(n, 7))
			o.Gelu(tanh, place(p, x), y)
			o.GeluBackward(tanh, place(p, x), place(p, unif(r, n)), dx)
			out = append(out, fetch(p, y), fetch(p, dx))
		}
		return out, true
	}, 1e-5},
	{"PRelu", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		n := r.Intn(3000)
		x := actInput(r, n, false)
		var slope []float32
		var sIdx []int32
		if r.Intn(2) == 0 {
			slope = unif(r, n)
		} else {
			slope = unif(r, 1+r.Intn(5))
			sIdx = make([]int32, n)
			for j := range sIdx {
				sIdx[j] = int32(j % len(slope))
			}
		}
		y, dx, ds := place(p, filled(n, 7)), place(p, filled(n, 7)), place(p, filled(n, 7))
		o.PRelu(place(p, x), place(p, slope), sIdx, y)
		o.PReluBackward(place(p, x), place(p, slope), sIdx, place(p, unif(r, n)), dx, ds)
		dx2 := place(p, filled(n, 7))
		o.PReluBackward(place(p, x), place(p, slope), sIdx, place(p, unif(r, n)), dx2, nil)
		// ds alone, with no slope: the DP engine's slope gradient.
		ds2 := place(p, filled(n, 7))
		o.PReluBackward(place(p, x), nil, nil, place(p, unif(r, n)), nil, ds2)
		return [][]float32{fetch(p, y), fetch(p, dx), fetch(p, ds), fetch(p, dx2), fetch(p, ds2)}, true
	}, 1e-6},
	{"MaxMin", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.ElementwiseOps)
		if !ok {
			return nil, false
		}
		n, k := r.Intn(3000), 1+r.Intn(4)
		xs, idx, dxs := make([][]float32, k), make([][]int32, k), make([][]float32, k)
		for i := range xs {
			if r.Intn(3) == 0 { // broadcast: a few elements read by many
				m := 1 + r.Intn(4)
				xs[i] = unif(r, m)
				idx[i] = make([]int32, n)
				for j := range idx[i] {
					idx[i][j] = int32(r.Intn(m))
				}
			} else {
				xs[i] = unif(r, n)
				if n > 0 && r.Intn(3) == 0 {
					xs[i][r.Intn(n)] = float32(math.NaN())
				}
			}
			if r.Intn(4) != 0 {
				dxs[i] = place(p, filled(len(xs[i]), 7))
			}
			xs[i] = place(p, xs[i])
			if idx[i] != nil {
				idx[i] = place(p, idx[i])
			}
		}
		var out [][]float32
		for _, min := range []bool{false, true} {
			y := place(p, filled(n, 7))
			o.MaxMin(min, xs, idx, y)
			o.MaxMinBackward(min, xs, idx, place(p, unif(r, n)), dxs)
			out = append(out, fetch(p, y))
			for _, dx := range dxs {
				if dx != nil {
					out = append(out, fetch(p, dx))
				}
			}
		}
		return out, true
	}, 1e-4}, // a broadcast input's gradient: float sums in order, as the CPU's
}

// TestElementwiseOps holds the Device's ElementwiseOps to the reference
// backend and the CPU, through the emulation.
func TestElementwiseOps(t *testing.T) {
	testValueCases(t, emuDevice(t), elementwiseCases, 6)
}

// TestUnaryKernelsOfOneOperator: the kernels of one operator each
// (unaryKernels) give the bits of the kernels of every operator, forward
// and backward, over values that reach each case (signed zeros, the
// infinities, NaN, the tails).
func TestUnaryKernelsOfOneOperator(t *testing.T) {
	t.Setenv(EnvProfile, "1") // the kernel table says which kernels ran
	d := emuDevice(t)
	d.prof.out = io.Discard
	rng := rand.New(rand.NewSource(3))
	const n = 1000
	x := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, -1e-30, 40, -40, 1e30, -1e30}
	for len(x) < n {
		x = append(x, float32(rng.NormFloat64()*3))
	}
	dy := make([]float32, n)
	for i := range dy {
		dy[i] = float32(rng.NormFloat64())
	}
	dy[0], dy[1] = float32(math.Copysign(0, -1)), -2 // −0 and a negative gradient at x = 0
	run := func(op runtime.UnaryOp) (y, dx []float32) {
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		px, py, pdy, pdx := place(p, x), place(p, make([]float32, n)), place(p, dy), place(p, make([]float32, n))
		d.Unary(op, runtime.UnaryParams{}, px, py)
		d.UnaryBackward(op, runtime.UnaryParams{}, px, py, pdy, pdx)
		return fetch(p, py), fetch(p, pdx)
	}
	if len(unaryKernels) == 0 {
		t.Fatal("no operator has kernels of its own")
	}
	for op, suffix := range unaryKernels {
		d.ResetProfile()
		y1, dx1 := run(op)
		for _, k := range []string{"unary" + suffix, "unary_backward" + suffix} {
			if e := d.prof.kernels[k]; e == nil || e.n != 1 {
				t.Errorf("op %d: kernel %s did not run once", op, k)
			}
		}
		saved := unaryKernels
		unaryKernels = nil
		y2, dx2 := run(op)
		unaryKernels = saved
		for i := range x {
			if math.Float32bits(y1[i]) != math.Float32bits(y2[i]) || math.Float32bits(dx1[i]) != math.Float32bits(dx2[i]) {
				t.Errorf("unary%s at x = %v: y %v dx %v, the kernels of every operator %v %v", suffix, x[i], y1[i], dx1[i], y2[i], dx2[i])
				break
			}
		}
	}
}

// TestBinarySameShape: operands of one shape take the kernels without a
// layout (binarySame), with the CPU's bits, signed zeros, infinities and
// NaN among the operands; a broadcast operand takes binary.
func TestBinarySameShape(t *testing.T) {
	t.Setenv(EnvProfile, "1")
	d := emuDevice(t)
	d.prof.out = io.Discard
	r := rand.New(rand.NewSource(6))
	shape := []int{3, 5, 70}
	n := shapeNumel(shape)
	a, b := randFloats(r, n), randFloats(r, n)
	a[0], b[0] = float32(math.Inf(1)), float32(math.Inf(1))
	a[1], b[1] = float32(math.NaN()), 2
	a[2], b[2] = float32(math.Copysign(0, -1)), 0
	for op, kernel := range binarySame {
		want := make([]float32, n)
		runtime.CPU{}.Binary(op, a, shape, b, shape, want, shape)
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		y := place(p, filled(n, 7))
		d.ResetProfile()
		d.Binary(op, place(p, a), shape, place(p, b), shape, y, shape)
		got := fetch(p, y)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
				t.Fatalf("op %d element %d: %v, the CPU's %v", op, i, got[i], want[i])
			}
		}
		if e := d.prof.kernels[kernel]; e == nil || e.n != 1 {
			t.Errorf("op %d: kernel %s did not run once", op, kernel)
		}
	}
	p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
	d.ResetProfile()
	d.Binary(runtime.BinaryAdd, place(p, a), shape, place(p, b[:70]), []int{70}, place(p, filled(n, 7)), shape)
	if d.prof.kernels["binary"] == nil || d.prof.kernels["binary_same_add"] != nil {
		t.Error("a broadcast operand did not take binary")
	}
}
