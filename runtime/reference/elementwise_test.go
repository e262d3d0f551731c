package reference

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// randIn returns n uniform values in [lo, hi), from a generator seeded by
// seed so that both devices of a comparison see the same inputs.
func randIn(seed uint64, n int, lo, hi float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 17))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return x
}

// awayFromZero returns n values with lo ≤ |x| < hi and random signs.
func awayFromZero(seed uint64, n int, lo, hi float64) []float32 {
	x := randIn(seed, n, lo, hi)
	s := randIn(seed+1, n, -1, 1)
	for i := range x {
		if s[i] < 0 {
			x[i] = -x[i]
		}
	}
	return x
}

// closeTo reports the first element of got that differs from want by
// more than abs + tol·(|want| + 10⁻³·max|want|): relative, with a floor
// that scales with the output (for sums whose terms cancel), plus an
// absolute error for the CPU's float32 approximations of erf and tanh.
func closeTo(got, want []float32, tol, abs float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	var scale float64
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		if math.Abs(g-w) > abs+tol*(math.Abs(w)+1e-3*scale) || math.IsNaN(g) != math.IsNaN(w) {
			return fmt.Errorf("element %d: got %v, want %v", i, g, w)
		}
	}
	return nil
}

// opCase is one operation run on a device: run returns its outputs (each
// a fresh slice), from inputs the case fixes.
type opCase struct {
	name string
	tol  float64 // relative tolerance (1e-5 if 0)
	abs  float64 // absolute tolerance
	run  func(d runtime.GraphOps) [][]float32
}

// compareWithCPU runs every case on the reference device and on the CPU
// and compares the outputs.
func compareWithCPU(t *testing.T, cases []opCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tol := c.tol
			if tol == 0 {
				tol = 1e-5
			}
			ref, cpu := c.run(Device{}), c.run(runtime.CPU{})
			if len(ref) != len(cpu) {
				t.Fatalf("%d outputs on the reference, %d on the CPU", len(ref), len(cpu))
			}
			for k := range ref {
				if err := closeTo(ref[k], cpu[k], tol, c.abs); err != nil {
					t.Errorf("output %d: %v", k, err)
				}
			}
		})
	}
}

// TestElementwiseOps holds every ElementwiseOps operation of the
// reference device against the CPU's on random inputs, broadcasting
// shapes included, forward and backward.
func TestElementwiseOps(t *testing.T) {
	const n = 3000 // over the CPU's parallel grains
	var cases []opCase
	type unaryCase struct {
		op  runtime.UnaryOp
		par runtime.UnaryParams
		x   []float32
	}
	wide := randIn(1, n, -4, 4)
	unaries := []unaryCase{
		{runtime.UnaryRelu, runtime.UnaryParams{}, wide},
		{runtime.UnarySigmoid, runtime.UnaryParams{}, wide},
		{runtime.UnaryTanh, runtime.UnaryParams{}, wide},
		{runtime.UnaryErf, runtime.UnaryParams{}, wide},
		{runtime.UnaryExp, runtime.UnaryParams{}, wide},
		{runtime.UnaryLog, runtime.UnaryParams{}, randIn(2, n, 0.05, 5)},
		{runtime.UnarySqrt, runtime.UnaryParams{}, randIn(3, n, 0.05, 5)},
		{runtime.UnaryNeg, runtime.UnaryParams{}, wide},
		{runtime.UnaryAbs, runtime.UnaryParams{}, wide},
		{runtime.UnaryReciprocal, runtime.UnaryParams{}, awayFromZero(4, n, 0.1, 4)},
		{runtime.UnaryIdentity, runtime.UnaryParams{}, wide},
		{runtime.UnaryLeakyRelu, runtime.UnaryParams{Alpha: 0.03}, wide},
		{runtime.UnaryElu, runtime.UnaryParams{Alpha: 1.3}, wide},
		{runtime.UnaryHardSigmoid, runtime.UnaryParams{Alpha: 0.2, Beta: 0.5}, wide},
		{runtime.UnaryHardSwish, runtime.UnaryParams{}, wide},
		{runtime.UnarySoftplus, runtime.UnaryParams{}, wide},
		{runtime.UnaryGelu, runtime.UnaryParams{}, wide},
		{runtime.UnaryGeluTanh, runtime.UnaryParams{}, wide},
		{runtime.UnarySelu, runtime.UnaryParams{Alpha: 1.6732632, Gamma: 1.050701}, wide},
		{runtime.UnaryCelu, runtime.UnaryParams{Alpha: 0.7}, wide},
		{runtime.UnarySign, runtime.UnaryParams{}, wide},
		{runtime.UnaryShrink, runtime.UnaryParams{Alpha: 0.5, Beta: 0.25}, wide},
		{runtime.UnarySoftsign, runtime.UnaryParams{}, wide},
		{runtime.UnaryThresholdedRelu, runtime.UnaryParams{Alpha: 0.8}, wide},
		{runtime.UnaryMish, runtime.UnaryParams{}, wide},
		{runtime.UnaryFloor, runtime.UnaryParams{}, wide},
		{runtime.UnaryCeil, runtime.UnaryParams{}, wide},
		{runtime.UnaryRound, runtime.UnaryParams{}, wide},
		{runtime.UnarySin, runtime.UnaryParams{}, wide},
		{runtime.UnaryCos, runtime.UnaryParams{}, wide},
		{runtime.UnaryScale, runtime.UnaryParams{Alpha: -0.37}, wide},
		// Beyond the CPU's cut-over to x at 20.
		{runtime.UnarySoftplus, runtime.UnaryParams{}, randIn(6, n, -40, 40)},
		{runtime.UnaryMish, runtime.UnaryParams{}, randIn(7, n, -40, 40)},
	}
	dy := randIn(5, n, -1, 1)
	for _, u := range unaries {
		// The backward reads the reference's forward output on both
		// devices, so that it is compared alone (1 − y² of Tanh near
		// y = ±1 amplifies the forward's rounding).
		yRef := make([]float32, n)
		Device{}.Unary(u.op, u.par, u.x, yRef)
		var abs float64
		if u.op == runtime.UnaryErf || u.op == runtime.UnaryTanh {
			abs = 1e-6 // the CPU's float32 erf and tanh: within 5e-7
		}
		cases = append(cases, opCase{name: "Unary/" + u.op.String(), abs: abs, run: func(d runtime.GraphOps) [][]float32 {
			y, dx := make([]float32, n), make([]float32, n)
			d.Unary(u.op, u.par, u.x, y)
			d.UnaryBackward(u.op, u.par, u.x, yRef, dy, dx)
			return [][]float32{y, dx}
		}})
	}
	for _, g := range []bool{false, true} {
		// The CPU's fused GELU is a float32 kernel, within
		// 3e-7·max(1, |x|) (kernels.TestGeluKernels).
		cases = append(cases, opCase{name: fmt.Sprintf("Gelu/tanh=%v", g), abs: 1.5e-6, run: func(d runtime.GraphOps) [][]float32 {
			y, dx := make([]float32, n), make([]float32, n)
			d.Gelu(g, wide, y)
			d.GeluBackward(g, wide, dy, dx)
			return [][]float32{y, dx}
		}})
	}
	shapes := []struct{ a, b, y []int }{
		{[]int{4, 5, 6}, []int{4, 5, 6}, []int{4, 5, 6}},
		{[]int{4, 5, 6}, []int{6}, []int{4, 5, 6}},
		{[]int{4, 1, 6}, []int{1, 5, 1}, []int{4, 5, 6}},
		{[]int{1}, []int{3, 40, 50}, []int{3, 40, 50}},
		{[]int{8, 1, 1}, []int{8, 64, 9}, []int{8, 64, 9}},
	}
	for si, s := range shapes {
		for _, op := range []runtime.BinaryOp{runtime.BinaryAdd, runtime.BinarySub, runtime.BinaryMul, runtime.BinaryDiv, runtime.BinaryPow} {
			a := randIn(uint64(10+si), numel(s.a), 0.2, 2)
			b := awayFromZero(uint64(20+si), numel(s.b), 0.2, 2)
			ny := numel(s.y)
			dy := randIn(uint64(30+si), ny, -1, 1)
			cases = append(cases, opCase{name: fmt.Sprintf("BinaryBackward/%v/%v*%v", op, s.a, s.b), tol: 1e-4, run: func(d runtime.GraphOps) [][]float32 {
				y := make([]float32, ny)
				da, db := make([]float32, len(a)), make([]float32, len(b))
				d.Binary(op, a, s.a, b, s.b, y, s.y)
				d.BinaryBackward(op, a, s.a, b, s.b, y, dy, s.y, da, db)
				return [][]float32{y, da, db}
			}})
		}
		cond := make([]uint8, numel(s.a))
		for i, v := range randIn(uint64(40+si), len(cond), 0, 1) {
			if v < 0.4 {
				cond[i] = 1
			}
		}
		x, y := randIn(uint64(50+si), numel(s.b), -1, 1), randIn(uint64(60+si), numel(s.y), -1, 1)
		dout := randIn(uint64(70+si), numel(s.y), -1, 1)
		cases = append(cases, opCase{name: fmt.Sprintf("Where/%v,%v", s.a, s.b), tol: 1e-4, run: func(d runtime.GraphOps) [][]float32 {
			out := make([]float32, numel(s.y))
			dx, dyv, ws := make([]float32, len(x)), make([]float32, len(y)), make([]float32, len(out))
			d.Where(cond, s.a, x, s.b, y, s.y, out, s.y)
			d.WhereBackward(cond, s.a, s.b, s.y, dout, s.y, dx, dyv, ws)
			return [][]float32{out, dx, dyv}
		}})
	}
	for _, b := range [][2]float32{{-0.5, 0.7}, {float32(math.Inf(-1)), 0}, {0.3, float32(math.Inf(1))}, {1, -1}} {
		cases = append(cases, opCase{name: fmt.Sprintf("Clip/%v", b), run: func(d runtime.GraphOps) [][]float32 {
			y, dx := make([]float32, n), make([]float32, n)
			d.Clip(wide, b[0], b[1], y)
			d.ClipBackward(wide, b[0], b[1], dy, dx)
			return [][]float32{y, dx}
		}})
	}
	// PRelu: a slope per channel of (N, C, H, W), and one of x's shape.
	xs, ss := []int{3, 4, 5, 5}, []int{4, 1, 1}
	px := randIn(80, numel(xs), -2, 2)
	pdy := randIn(81, numel(xs), -1, 1)
	for _, full := range []bool{false, true} {
		var slope []float32
		var sIdx []int32
		if full {
			slope = randIn(82, len(px), 0, 0.5)
		} else {
			slope = randIn(83, numel(ss), 0, 0.5)
			sIdx = make([]int32, len(px))
			for j := range sIdx {
				sIdx[j] = int32(j / 25 % 4)
			}
		}
		cases = append(cases, opCase{name: fmt.Sprintf("PRelu/full=%v", full), run: func(d runtime.GraphOps) [][]float32 {
			y, dx, ds := make([]float32, len(px)), make([]float32, len(px)), make([]float32, len(px))
			d.PRelu(px, slope, sIdx, y)
			d.PReluBackward(px, slope, sIdx, pdy, dx, ds)
			return [][]float32{y, dx, ds}
		}})
	}
	// MaxMin of three inputs: full, a broadcast row, a broadcast scalar
	// (ties with the row on purpose), and a NaN.
	const rows, cols = 20, 30
	m0 := randIn(90, rows*cols, -1, 1)
	m0[7] = float32(math.NaN())
	m1 := randIn(91, cols, -1, 1)
	m2 := []float32{m1[3]}
	idx1, idx2 := make([]int32, rows*cols), make([]int32, rows*cols)
	for j := range idx1 {
		idx1[j] = int32(j % cols)
	}
	mdy := randIn(92, rows*cols, -1, 1)
	for _, isMin := range []bool{false, true} {
		cases = append(cases, opCase{name: fmt.Sprintf("MaxMin/min=%v", isMin), run: func(d runtime.GraphOps) [][]float32 {
			xs, idx := [][]float32{m0, m1, m2}, [][]int32{nil, idx1, idx2}
			y := make([]float32, rows*cols)
			dxs := [][]float32{make([]float32, len(m0)), nil, make([]float32, 1)}
			d.MaxMin(isMin, xs, idx, y)
			d.MaxMinBackward(isMin, xs, idx, mdy, dxs)
			return [][]float32{y, dxs[0], dxs[2]}
		}})
	}
	compareWithCPU(t, cases)
}

// TestElementwiseHand checks the reference device on hand-computed cases.
func TestElementwiseHand(t *testing.T) {
	var d Device
	nan := float32(math.NaN())
	run := func(f func(y []float32), n int) []float32 {
		y := make([]float32, n)
		f(y)
		return y
	}
	for _, c := range []struct {
		name      string
		got, want []float32
	}{
		{"Relu", run(func(y []float32) { d.Unary(runtime.UnaryRelu, runtime.UnaryParams{}, []float32{-1, 0, 2}, y) }, 3), []float32{0, 0, 2}},
		{"LeakyRelu", run(func(y []float32) {
			d.Unary(runtime.UnaryLeakyRelu, runtime.UnaryParams{Alpha: 0.1}, []float32{-2, 3}, y)
		}, 2), []float32{-0.2, 3}},
		{"HardSigmoid", run(func(y []float32) {
			d.Unary(runtime.UnaryHardSigmoid, runtime.UnaryParams{Alpha: 0.2, Beta: 0.5}, []float32{-5, 0, 1, 5}, y)
		}, 4), []float32{0, 0.5, 0.7, 1}},
		{"Shrink", run(func(y []float32) {
			d.Unary(runtime.UnaryShrink, runtime.UnaryParams{Alpha: 1, Beta: 0.5}, []float32{-2, 0.5, 3}, y)
		}, 3), []float32{-1.5, 0, 2.5}},
		{"TanhBackward", run(func(dx []float32) {
			d.UnaryBackward(runtime.UnaryTanh, runtime.UnaryParams{}, nil, []float32{0.5}, []float32{2}, dx)
		}, 1), []float32{1.5}},
		{"Clip", run(func(y []float32) { d.Clip([]float32{-3, 0.25, 9}, -1, 1, y) }, 3), []float32{-1, 0.25, 1}},
		{"Where", run(func(y []float32) {
			d.Where([]uint8{1, 0}, []int{2}, []float32{1, 2}, []int{2}, []float32{7}, []int{1}, y, []int{2})
		}, 2), []float32{1, 7}},
		{"WhereBackward.dy", run(func(dy []float32) {
			d.WhereBackward([]uint8{1, 0, 0}, []int{3}, []int{3}, []int{1}, []float32{1, 2, 4}, []int{3}, nil, dy, nil)
		}, 1), []float32{6}},
		{"BinaryBackward.db", run(func(db []float32) {
			// y = a/b with b = 2 broadcast: d/db = Σ −a·dy/b² = −(1 + 3)/4.
			d.BinaryBackward(runtime.BinaryDiv, []float32{1, 3}, []int{2}, []float32{2}, []int{1}, nil, []float32{1, 1}, []int{2}, nil, db)
		}, 1), []float32{-1}},
		{"PRelu", run(func(y []float32) { d.PRelu([]float32{-2, 3, -1}, []float32{0.5}, []int32{0, 0, 0}, y) }, 3), []float32{-1, 3, -0.5}},
		{"Max", run(func(y []float32) {
			d.MaxMin(false, [][]float32{{1, 5, nan}, {4, 2, 0}}, [][]int32{nil, nil}, y)
		}, 3), []float32{4, 5, nan}},
		{"MinBackward", run(func(dx []float32) {
			d.MaxMinBackward(true, [][]float32{{1, 5}, {1, 2}}, [][]int32{nil, nil}, []float32{3, 4}, [][]float32{nil, dx})
		}, 2), []float32{0, 4}},
	} {
		if err := closeTo(c.got, c.want, 1e-6, 0); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
