package kernels

import (
	"fmt"
	"math"
	"testing"
)

// unravel returns the multi-index of flat index i in shape.
func unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for a := len(shape) - 1; a >= 0; a-- {
		idx[a] = i % shape[a]
		i /= shape[a]
	}
	return idx
}

// bcastIndex returns the flat index into shape (right-aligned, broadcast)
// of the output multi-index idx.
func bcastIndex(idx, shape []int) int {
	off := len(idx) - len(shape)
	f := 0
	for a, d := range shape {
		v := idx[off+a]
		if d == 1 {
			v = 0
		}
		f = f*d + v
	}
	return f
}

var bcastPairs = [][2][]int{
	{{2, 3, 4}, {2, 3, 4}},
	{{2, 3, 4}, {4}},
	{{4}, {2, 3, 4}},
	{{2, 1, 4}, {1, 3, 1}},
	{{3, 1}, {1, 5}},
	{{2, 3, 4, 5}, {1, 3, 1, 1}},
	{{1, 3, 1, 1}, {2, 3, 4, 5}},
	{{5}, {}},
	{{}, {}},
	{{2, 1, 3}, {2, 4, 3}},
	{{6, 7}, {6, 1}},
}

func TestBinary(t *testing.T) {
	r := newRand(5)
	for _, op := range []BinaryOp{Add, Sub, Mul, Div, Pow} {
		for _, pr := range bcastPairs {
			as, bs := pr[0], pr[1]
			ys := mustBroadcast(as, bs)
			name := fmt.Sprintf("%v %v %v", op, as, bs)
			a := randn(r, Numel(as))
			b := randn(r, Numel(bs))
			if op == Pow {
				for i := range a {
					a[i] = float32(math.Abs(float64(a[i]))) + 0.5
				}
			}
			if op == Div {
				for i := range b {
					b[i] = float32(math.Copysign(math.Abs(float64(b[i]))+0.5, float64(b[i])))
				}
			}
			y := make([]float32, Numel(ys))
			Binary(op, a, as, b, bs, y, ys)
			want := make([]float64, len(y))
			for i := range want {
				idx := unravel(i, ys)
				av, bv := float64(a[bcastIndex(idx, as)]), float64(b[bcastIndex(idx, bs)])
				switch op {
				case Add:
					want[i] = av + bv
				case Sub:
					want[i] = av - bv
				case Mul:
					want[i] = av * bv
				case Div:
					want[i] = av / bv
				case Pow:
					want[i] = math.Pow(av, bv)
				}
			}
			allClose(t, name, y, want, 1e-6, 1e-5)
			da, db := make([]float32, len(a)), make([]float32, len(b))
			gradCheck(t, name, r, []*param{{"a", a, da}, {"b", b, db}}, func() []float32 {
				Binary(op, a, as, b, bs, y, ys)
				return y
			}, func(dy []float32) {
				BinaryBackward(op, a, as, b, bs, y, dy, ys, da, db)
			})
		}
	}
}

func TestPowSpecialCases(t *testing.T) {
	a := []float32{0, 0, 2, -2}
	b := []float32{2, 0.5, 3, 2}
	y := make([]float32, 4)
	Binary(Pow, a, []int{4}, b, []int{4}, y, []int{4})
	allClose32(t, "pow", y, []float32{0, 0, 8, 4}, 0, 0)
	da, db := make([]float32, 4), make([]float32, 4)
	BinaryBackward(Pow, a, []int{4}, b, []int{4}, y, []float32{1, 1, 1, 1}, []int{4}, da, db)
	// d/db at a == 0, b ≥ 0 is 0 (PyTorch), not NaN.
	if db[0] != 0 || db[1] != 0 {
		t.Fatalf("Pow db at a=0: %v", db)
	}
	if math.Abs(float64(db[2])-8*math.Log(2)) > 1e-5 || da[2] != 12 || da[3] != -4 {
		t.Fatalf("Pow grads: da %v db %v", da, db)
	}
}

func TestReduceToShapeAndExpand(t *testing.T) {
	r := newRand(6)
	cases := [][2][]int{
		{{2, 3, 4}, {3, 4}},
		{{2, 3, 4}, {1, 3, 1}},
		{{2, 3, 4}, {2, 1, 1}}, // keep the batch axis: per-sample reduction
		{{2, 3, 4}, {}},
		{{5, 6}, {5, 6}},
		{{4, 1, 3}, {1, 1, 3}},
	}
	// Extra leading unit axes on the target are accepted.
	tt := make([]float32, 3)
	ReduceToShape([]float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, tt, []int{1, 1, 3})
	allClose32(t, "reduce to higher rank", tt, []float32{5, 7, 9}, 0, 0)
	for _, c := range cases {
		xs, ts := c[0], c[1]
		x := randn(r, Numel(xs))
		tt := make([]float32, Numel(ts))
		ReduceToShape(x, xs, tt, ts)
		want := make([]float64, len(tt))
		for i, v := range x {
			want[bcastIndex(unravel(i, xs), ts)] += float64(v)
		}
		allClose(t, fmt.Sprint("reduce ", c), tt, want, 1e-5, 1e-5)
		// Expand is the adjoint.
		e := make([]float32, len(x))
		Expand(tt, ts, e, xs)
		for i := range e {
			if e[i] != tt[bcastIndex(unravel(i, xs), ts)] {
				t.Fatalf("Expand %v: wrong value at %d", c, i)
			}
		}
	}
}

func TestWhere(t *testing.T) {
	r := newRand(7)
	shapes := [][3][]int{
		{{2, 3}, {2, 3}, {2, 3}},
		{{3}, {2, 3}, {1}},
		{{2, 1}, {}, {1, 4}},
	}
	for _, s := range shapes {
		cs, xs, ys := s[0], s[1], s[2]
		os := mustBroadcast(cs, xs, ys)
		cb := make([]bool, Numel(cs))
		for i := range cb {
			cb[i] = r.IntN(2) == 0
		}
		cond := BoolsAsBytes(cb)
		x, y := randn(r, Numel(xs)), randn(r, Numel(ys))
		out := make([]float32, Numel(os))
		Where(cond, cs, x, xs, y, ys, out, os)
		for i := range out {
			idx := unravel(i, os)
			w := y[bcastIndex(idx, ys)]
			if cb[bcastIndex(idx, cs)] {
				w = x[bcastIndex(idx, xs)]
			}
			if out[i] != w {
				t.Fatalf("Where %v: [%d] = %v, want %v", s, i, out[i], w)
			}
		}
		dx, dy := make([]float32, len(x)), make([]float32, len(y))
		ws := make([]float32, len(out))
		gradCheck(t, fmt.Sprint("where ", s), r, []*param{{"x", x, dx}, {"y", y, dy}}, func() []float32 {
			Where(cond, cs, x, xs, y, ys, out, os)
			return out
		}, func(g []float32) { WhereBackward(cond, cs, xs, ys, g, os, dx, dy, ws) })
	}
}

func TestUnary(t *testing.T) {
	r := newRand(8)
	ref := map[UnaryOp]func(float64) float64{
		Relu:       func(v float64) float64 { return math.Max(v, 0) },
		Sigmoid:    func(v float64) float64 { return 1 / (1 + math.Exp(-v)) },
		Tanh:       math.Tanh,
		Erf:        math.Erf,
		Exp:        math.Exp,
		Log:        math.Log,
		Sqrt:       math.Sqrt,
		Neg:        func(v float64) float64 { return -v },
		Abs:        math.Abs,
		Reciprocal: func(v float64) float64 { return 1 / v },
		Identity:   func(v float64) float64 { return v },
	}
	for op := Relu; op <= Identity; op++ {
		x := randAway(r, 57, 0.05, 0)
		switch op {
		case Log, Sqrt:
			for i := range x {
				x[i] = float32(math.Abs(float64(x[i]))) + 0.2
			}
		case Reciprocal: // keep central differences off the pole
			for i := range x {
				x[i] = float32(math.Copysign(math.Abs(float64(x[i]))+0.5, float64(x[i])))
			}
		}
		y := make([]float32, len(x))
		Unary(op, x, y)
		want := make([]float64, len(x))
		for i, v := range x {
			want[i] = ref[op](float64(v))
		}
		allClose(t, op.String(), y, want, 1e-6, 1e-6)
		dx := make([]float32, len(x))
		gradCheck(t, op.String(), r, []*param{{"x", x, dx}}, func() []float32 {
			Unary(op, x, y)
			return y
		}, func(dy []float32) { UnaryBackward(op, x, y, dy, dx) })
	}
	// Large inputs: sigmoid must not overflow.
	y := make([]float32, 2)
	Unary(Sigmoid, []float32{-1000, 1000}, y)
	allClose32(t, "sigmoid extremes", y, []float32{0, 1}, 0, 0)
}

func TestClip(t *testing.T) {
	r := newRand(9)
	x := randAway(r, 40, 0.05, -0.5, 0.7)
	y := make([]float32, len(x))
	Clip(x, -0.5, 0.7, y)
	for i, v := range x {
		if w := math.Min(math.Max(float64(v), -0.5), 0.7); float64(y[i]) != float64(float32(w)) {
			t.Fatalf("clip %v = %v", v, y[i])
		}
	}
	dx := make([]float32, len(x))
	gradCheck(t, "clip", r, []*param{{"x", x, dx}}, func() []float32 {
		Clip(x, -0.5, 0.7, y)
		return y
	}, func(dy []float32) { ClipBackward(x, -0.5, 0.7, dy, dx) })
	// Missing bounds and min > max.
	Clip([]float32{-3, 3}, float32(math.Inf(-1)), 1, y)
	allClose32(t, "clip no min", y, []float32{-3, 1}, 0, 0)
	Clip([]float32{-3, 3}, 2, 1, y)
	allClose32(t, "clip min>max", y, []float32{1, 1}, 0, 0)
}

func TestAxpy(t *testing.T) {
	y := []float32{1, 2, 3}
	Axpy(2, []float32{1, 1, 1}, y)
	allClose32(t, "axpy", y, []float32{3, 4, 5}, 0, 0)
}

func TestLargeElementwiseParallel(t *testing.T) {
	// Sizes above the parallel grain, including a single long row that is
	// split into segments.
	r := newRand(10)
	n := 3*elementwiseGrain + 17
	a, b := randn(r, n), randn(r, 1)
	y := make([]float32, n)
	Binary(Mul, a, []int{n}, b, []int{1}, y, []int{n})
	for i := range y {
		if y[i] != a[i]*b[0] {
			t.Fatalf("long row Mul wrong at %d", i)
		}
	}
	x2 := randn(r, 2*n)
	y2 := make([]float32, 2*n)
	Binary(Add, x2, []int{2, n}, a, []int{n}, y2, []int{2, n})
	for i := range y2 {
		if y2[i] != x2[i]+a[i%n] {
			t.Fatalf("two long rows Add wrong at %d", i)
		}
	}
	db := make([]float32, 1)
	BinaryBackward(Mul, a, []int{n}, b, []int{1}, y, a, []int{n}, nil, db)
	var want float64
	for _, v := range a {
		want += float64(v) * float64(v)
	}
	allClose(t, "long reduce", db, []float64{want}, 1e-3, 1e-5)
}

func TestLargeReductionsParallel(t *testing.T) {
	r := newRand(24)
	for _, c := range [][2][]int{
		{{64, 2048}, {2048}},
		{{8, 16, 32, 32}, {1, 16, 1, 1}},
		{{8, 16, 32, 32}, {8, 1, 1, 1}},
	} {
		xs, ts := c[0], c[1]
		x := randn(r, Numel(xs))
		tt := make([]float32, Numel(ts))
		ReduceToShape(x, xs, tt, ts)
		want := make([]float64, len(tt))
		for i, v := range x {
			want[bcastIndex(unravel(i, xs), ts)] += float64(v)
		}
		allClose(t, fmt.Sprint("large reduce ", c), tt, want, 1e-3, 1e-4)

		// Mul backward into the broadcast operand takes the same path.
		b := randn(r, Numel(ts))
		y := make([]float32, len(x))
		Binary(Mul, x, xs, b, ts, y, xs)
		dy := randn(r, len(x))
		db := make([]float32, len(b))
		BinaryBackward(Mul, x, xs, b, ts, y, dy, xs, nil, db)
		for i := range want {
			want[i] = 0
		}
		for i, v := range x {
			want[bcastIndex(unravel(i, xs), ts)] += float64(v) * float64(dy[i])
		}
		allClose(t, fmt.Sprint("large mul backward ", c), db, want, 1e-3, 1e-4)
	}
}

// TestReluBits: Relu and its gradient (the SSE2 kernels where built, and
// the scalar tails) agree bit for bit with the definitions — negative → +0,
// ±0 and NaN (either sign) pass through; the gradient passes dy where
// y > 0 and is +0 elsewhere, NaN y included — on every length.
func TestReluBits(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), -float32(math.NaN()), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32}
	r := newRand(5)
	for n := 0; n < 40; n++ {
		x, dy := randn(r, n), randn(r, n)
		for i := range x {
			if r.IntN(2) == 0 {
				x[i] = special[r.IntN(len(special))]
			}
			if r.IntN(4) == 0 {
				dy[i] = special[r.IntN(len(special))]
			}
		}
		y, dx := make([]float32, n), make([]float32, n)
		unaryRange(Relu, x, y)
		unaryGradRange(Relu, x, y, dy, dx, 0)
		for i, v := range x {
			want := v
			if v < 0 {
				want = 0
			}
			if math.Float32bits(y[i]) != math.Float32bits(want) {
				t.Fatalf("n=%d: Relu(%v) = %v (%#x), want %#x", n, v, y[i], math.Float32bits(y[i]), math.Float32bits(want))
			}
			var g float32
			if y[i] > 0 {
				g = dy[i]
			}
			if math.Float32bits(dx[i]) != math.Float32bits(g) {
				t.Fatalf("n=%d: Relu gradient at y=%v, dy=%v: %#x, want %#x", n, y[i], dy[i], math.Float32bits(dx[i]), math.Float32bits(g))
			}
		}
	}
}
