//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// emuDevice returns a Device on the emulated driver, or skips the test.
func emuDevice(t testing.TB) *Device {
	t.Helper()
	drv := emuDriver(t)
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// placer puts a test's operands where the operations under test take
// them: host slices, or the Floats of buffers of a Device (written with
// CopyIn, read with CopyOut, as on a GPU).
type placer struct {
	dev  *Device // nil: host slices
	bufs map[uintptr]runtime.Buffer
}

func place[T any](p *placer, v []T) []T {
	out := append([]T(nil), v...)
	if p.dev == nil || len(v) == 0 {
		return out
	}
	var z T
	bytes := len(v) * int(unsafe.Sizeof(z))
	b, err := p.dev.Alloc((bytes + 3) / 4)
	if err != nil {
		panic(err)
	}
	host := make([]float32, b.Len())
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), bytes), unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), bytes))
	if err := p.dev.CopyIn(b, 0, host); err != nil {
		panic(err)
	}
	s := unsafe.Slice((*T)(unsafe.Pointer(&b.Floats()[0])), len(v))
	p.bufs[uintptr(unsafe.Pointer(&s[0]))] = b
	return s
}

func fetch[T any](p *placer, s []T) []T {
	if p.dev == nil || len(s) == 0 {
		return append([]T(nil), s...)
	}
	b := p.bufs[uintptr(unsafe.Pointer(&s[0]))]
	host := make([]float32, b.Len())
	if err := p.dev.CopyOut(host, b, 0); err != nil {
		panic(err)
	}
	out := make([]T, len(s))
	var z T
	bytes := len(s) * int(unsafe.Sizeof(z))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), bytes), unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), bytes))
	return out
}

// randFloats returns n values: mostly normal, some large, small, zero or
// negative zero, so that rounding and signs are exercised.
func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch r.Intn(20) {
		case 0:
			v[i] = 0
		case 1:
			v[i] = float32(math.Copysign(0, -1))
		case 2:
			v[i] = float32(r.NormFloat64() * 1e4)
		case 3:
			v[i] = float32(r.NormFloat64() * 1e-4)
		default:
			v[i] = float32(r.NormFloat64())
		}
	}
	return v
}

func widen32(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// opCase is one operation under test: run draws its inputs from seed and
// n (the same for every implementation), applies the operation of ops
// (runtime.CPU, reference.Device or the CUDA Device) to operands placed by
// p, and returns its outputs; ok is false when ops lacks the operation.
type opCase struct {
	name string
	run  func(ops any, p *placer, n int, seed int64) (out []float64, ok bool)
	// tol is the relative tolerance against the reference backend,
	// which computes in float64 and rounds once.
	tol float64
}

var opCases = []opCase{
	{"SumSq", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		x := randFloats(rand.New(rand.NewSource(seed)), n)
		return []float64{o.SumSq(place(p, x))}, true
	}, 1e-12},
	{"SquaredNorms", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		rows := 1 + n%7
		x := randFloats(r, rows*n)
		dst := place(p, make([]float64, rows))
		o.SquaredNorms(place(p, x), dst)
		return fetch(p, dst), true
	}, 1e-12},
	{"Dot", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		a, b := randFloats(r, n), randFloats(r, n+3)
		return []float64{o.Dot(place(p, a), place(p, b))}, true
	}, 1e-9},
	{"Scale", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		x := place(p, randFloats(r, n))
		o.Scale(float32(r.NormFloat64()), x)
		return widen32(fetch(p, x)), true
	}, 1e-6},
	{"Add", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		x, y := randFloats(r, n), place(p, randFloats(r, n+2))
		o.Add(place(p, x), y)
		return widen32(fetch(p, y)), true
	}, 1e-6},
	{"AddRunSums", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		runs := 1 + n%5
		x, dst := randFloats(r, runs*n), place(p, randFloats(r, runs))
		o.AddRunSums(place(p, x), dst)
		return widen32(fetch(p, dst)), true
	}, 1e-4},
	{"ScatterAdd", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		m := max(1, n/3) // several sources per destination
		src, dst := randFloats(r, n+1), place(p, randFloats(r, m))
		idx := make([]int32, n)
		for j := range idx {
			idx[j] = int32(r.Intn(m+1)) - 1 // −1: skipped
		}
		o.ScatterAdd(dst, place(p, src), place(p, idx))
		return widen32(fetch(p, dst)), true
	}, 1e-4},
	{"SumNormRows", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		rows := n % 7
		x, dst := make([]float64, rows*n), make([]float64, n)
		for i := range x {
			x[i] = r.ExpFloat64() * math.Pow(10, float64(r.Intn(9)-4))
		}
		for i := range dst {
			dst[i] = 123 // overwritten
		}
		pd := place(p, dst)
		o.SumNormRows(place(p, x), pd)
		return fetch(p, pd), true
	}, 1e-12},
	{"AddNormSq", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		x, y := make([]float64, n), make([]float64, n+1)
		for i := range x {
			x[i], y[i] = r.ExpFloat64(), r.ExpFloat64()
		}
		yy := place(p, y)
		o.AddNormSq(place(p, x), yy)
		return fetch(p, yy), true
	}, 1e-15},
	{"SumRows", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		T := 1 + n%9
		g, out := randFloats(r, T*n), place(p, randFloats(r, n)) // overwritten
		o.SumRows(place(p, g), T, n, out)
		return widen32(fetch(p, out)), true
	}, 1e-4},
	{"ZeroNormSq", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		y := make([]float64, n+2)
		for i := range y {
			y[i] = r.ExpFloat64()
		}
		yy := place(p, y)
		o.ZeroNormSq(yy[1 : n+1])
		return fetch(p, yy), true
	}, 0},
	{"AddSumSq", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		x := randFloats(r, n)
		dst := place(p, []float64{r.ExpFloat64(), r.ExpFloat64()})
		o.AddSumSq(place(p, x), dst[1:])
		return fetch(p, dst), true
	}, 1e-12},
	{"AddDot", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		a, b := randFloats(r, n), randFloats(r, n+3)
		dst := place(p, []float64{r.ExpFloat64(), r.ExpFloat64()})
		o.AddDot(1, place(p, a), place(p, b), dst[:1])
		o.AddDot(r.ExpFloat64(), place(p, a), place(p, b), dst[1:])
		return fetch(p, dst), true
	}, 1e-9},
	rowsCase("AddSumSqProducts", func(n int) int { return n/2 + 1 }, runtime.VectorOps.AddSumSqProducts, 1e-12),
	rowsCase("AddDots", func(n int) int { return n }, runtime.VectorOps.AddDots, 1e-9),
	// Rows of n terms (past a chunk from 2049), a few samples, a gain or
	// none; x̂'s rows standardized, g's with a large mean and a component
	// along x̂ (the terms' cancellation), entries past the written ones kept.
	{"StandardizedNormTerms", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		rows, samples := 1+n%3, 1+n%2
		ld := samples + 1
		xhat, g := randFloats(r, rows*n), randFloats(r, samples*rows*n)
		for k := range g {
			g[k] += 3 + 2*xhat[k%(rows*n)]
		}
		coefW, coefG := randFloats(r, rows), randFloats(r, rows)
		tW, tG := make([]float64, rows*ld), make([]float64, rows*ld)
		for k := range tW {
			tW[k], tG[k] = r.ExpFloat64(), r.ExpFloat64()
		}
		pw, pg := place(p, tW), place(p, tG)
		if seed%2 == 0 {
			o.StandardizedNormTerms(place(p, g), place(p, xhat), place(p, coefW), nil, rows, n, samples, ld, pw, nil)
			return fetch(p, pw), true
		}
		o.StandardizedNormTerms(place(p, g), place(p, xhat), place(p, coefW), place(p, coefG), rows, n, samples, ld, pw, pg)
		return append(fetch(p, pw), fetch(p, pg)...), true
	}, 1e-9},
	// Rows of n positions (past a chunk from 2049) in one to three groups
	// of one to three rows, a few samples, a gain or none; entries past
	// the written ones kept.
	{"StandardizedGhostTerms", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		groups, samples := 1+n%3, 1+n%2
		rows := groups * (1 + (n/3)%3)
		ld := samples + 1
		dy, z, u := randFloats(r, samples*rows*n), randFloats(r, samples*rows*n), randFloats(r, samples*groups*n)
		cA, cB, coefG := randFloats(r, rows), randFloats(r, rows), randFloats(r, rows)
		tW, tG := make([]float64, rows*ld), make([]float64, rows*ld)
		for k := range tW {
			tW[k], tG[k] = r.ExpFloat64(), r.ExpFloat64()
		}
		pw, pg := place(p, tW), place(p, tG)
		if seed%2 == 0 {
			o.StandardizedGhostTerms(place(p, dy), place(p, z), place(p, u), place(p, cA), place(p, cB), nil, rows, groups, n, samples, ld, pw, nil)
			return fetch(p, pw), true
		}
		o.StandardizedGhostTerms(place(p, dy), place(p, z), place(p, u), place(p, cA), place(p, cB), place(p, coefG), rows, groups, n, samples, ld, pw, pg)
		return append(fetch(p, pw), fetch(p, pg)...), true
	}, 1e-9},
	// Rows of n elements (past a chunk from 2049), one to three, with a
	// large mean and a component along x̂; a gain or none.
	{"StandardizedVJP", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		rows := 1 + n%3
		xhat, s := randFloats(r, rows*n), randFloats(r, rows*n)
		for k := range s {
			s[k] += 3 + 2*xhat[k]
		}
		c, gs := randFloats(r, rows), randFloats(r, rows)
		ps := place(p, s)
		var out []float64
		if seed%2 == 0 {
			o.StandardizedVJP(ps, place(p, xhat), place(p, c), nil, rows, n, nil)
		} else {
			gain := place(p, make([]float32, rows))
			o.StandardizedVJP(ps, place(p, xhat), place(p, c), place(p, gs), rows, n, gain)
			out = widen32(fetch(p, gain))
		}
		return append(widen32(fetch(p, ps)), out...), true
	}, 1e-5},
	{"AddSumSqProduct", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		a, b := randFloats(r, n), randFloats(r, n/2+1)
		dst := place(p, []float64{r.ExpFloat64(), r.ExpFloat64()})
		o.AddSumSqProduct(r.ExpFloat64(), place(p, a), place(p, b), dst[1:])
		return fetch(p, dst), true
	}, 1e-12},
	{"AddScaledRows", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		rows := 1 + n%6
		c, x, y := randFloats(r, rows), randFloats(r, rows*n), place(p, randFloats(r, n))
		for i := 1; i < rows; i += 2 {
			c[i] = 0 // skipped: its row's ∞ adds nothing
			if n > 0 {
				x[i*n] = float32(math.Inf(1))
			}
		}
		o.AddScaledRows(place(p, c), place(p, x), y)
		return widen32(fetch(p, y)), true
	}, 1e-4},
	{"ClipFactors", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.ClipOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		normSq := make([]float64, n)
		for i := range normSq {
			switch r.Intn(14) {
			case 0:
				normSq[i] = math.NaN()
			case 1:
				normSq[i] = math.Inf(1)
			case 2:
				normSq[i] = 0
			case 12:
				normSq[i] = -1e-9 // a ghost norm rounding made negative: 0, not NaN
			case 13:
				normSq[i] = math.Inf(-1) // an overflow: dropped
			case 3:
				normSq[i] = 1 // ‖g‖ = R: the boundary of Abadi's and global clipping
			default:
				normSq[i] = r.ExpFloat64() * 2
			}
		}
		var out []float64
		for _, rule := range []runtime.ClipRule{{Fn: runtime.ClipAbadi, R: 1}, {Fn: runtime.ClipAutomatic, R: 0.7, Gamma: 0.01}, {Fn: runtime.ClipGlobal, R: 1}} {
			dst := place(p, make([]float32, n+1))
			o.ClipFactors(rule, place(p, normSq), dst)
			out = append(out, widen32(fetch(p, dst))...)
		}
		return out, true
	}, 1e-7},
	{"ScaleRows", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		var out []float64
		// Samples of 4 rows of 3 (batch axis first), and rows of 3 with
		// the batch of 5 innermost (stride 3: sample r mod 5).
		for _, g := range []struct{ row, stride, b int }{{3, 12, 1 + n/12}, {3, 3, 5}} {
			c, x := randFloats(r, g.b), place(p, randFloats(r, n))
			o.ScaleRows(place(p, c), 0.5, x, g.row, g.stride)
			out = append(out, widen32(fetch(p, x))...)
		}
		return out, true
	}, 1e-6},
	{"Contract", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		// ik = ij·jk with j of n (a matrix product summing n terms per
		// output), and a diagonal ii = ij·ji.
		m := max(n, 1)
		a, b := randFloats(r, 3*m), randFloats(r, 3*m)
		var out []float64
		for _, l := range []runtime.ContractLoop{
			{Dims: []int{3, n, 3}, Out: []int{3, 0, 1}, A: []int{n, 1, 0}, B: []int{0, 3, 1}},
			{Dims: []int{3, n}, Out: []int{1, 0}, A: []int{n, 1}, B: []int{1, 3}},
		} {
			res := place(p, make([]float32, 9))
			o.Contract(&l, place(p, a), place(p, b), place(p, make([]float64, 9)), res)
			out = append(out, widen32(fetch(p, res))...)
		}
		return out, true
	}, 1e-7},
	{"NormAffineSampleGrad+NormAffineGrads", normAffineRun(func(n, B int) []normRowsCase {
		sp, D, T := 1+n%7, 1+n%13, 1+n%5
		return []normRowsCase{
			{runtime.NewGroupNormRows(B, 4, sp, 2, false, 1e-5), 2 * 2 * sp},
			{runtime.NewGroupNormRows(B, 4, sp, 2, true, 1e-5), 2 * 2 * sp},
			{runtime.NewInstanceNormRows(B, 3, sp, 1e-5), 3 * sp},
			{runtime.NewLayerNormRows(T*B, D, 1e-5), D}, // (T, B, D): the batch in the middle
			// Runs of 2100 (per channel) and 4200 (per group) terms: the
			// lane order's chunks of 2048 end inside a run.
			{runtime.NewGroupNormRows(B, 4, 2100, 2, false, 1e-5), 4 * 2100},
			{runtime.NewGroupNormRows(B, 4, 2100, 2, true, 1e-5), 4 * 2100},
		}
	}), 1e-5},
	// LayerNorm's 2100 rows a sample (one term of each element a row,
	// norm_affine_tiles on the GPU): the chunks end inside a sample. The
	// backends sum the forward's float32 terms, the reference float64
	// ones; over 2100 rows of random data, 37 sums a sample, some sums
	// cancel to a small part of their terms, where the two part by up to
	// about 1e-5 of the sum. The CPU's bits hold as for every case.
	{"NormAffineGrads, LayerNorm's long rows", normAffineRun(func(n, B int) []normRowsCase {
		return []normRowsCase{
			{runtime.NewLayerNormRows(2100*B, 37, 1e-5), 2100 * 37},
			{runtime.NewLayerNormRows(2100*B, 37, 1e-5), 37},
		}
	}), 5e-5},
	{"CountNonFinite", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		x := randFloats(r, n)
		for i := range x {
			switch r.Intn(40) {
			case 0:
				x[i] = float32(math.NaN())
			case 1:
				x[i] = float32(math.Inf(1 - 2*r.Intn(2)))
			case 2:
				x[i] = math.MaxFloat32
			}
		}
		return []float64{float64(o.CountNonFinite(place(p, x)))}, true
	}, 0},
	{"CountClipped", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.ClipOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		normSq, factors := make([]float64, n), make([]float32, n/2+1)
		for i := range normSq {
			switch r.Intn(6) {
			case 0:
				normSq[i] = math.NaN()
			case 1:
				normSq[i] = math.Inf(1)
			default:
				normSq[i] = r.ExpFloat64()
			}
		}
		for i := range factors {
			factors[i] = float32(min(1, 2*r.Float64()))
		}
		var out []float64
		for _, f := range [][]float32{nil, factors} {
			bad, clipped := o.CountClipped(place(p, normSq), place(p, f))
			out = append(out, float64(bad), float64(clipped))
		}
		return out, true
	}, 0},
	{"AdamUpdate", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.OptimOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		var out []float64
		for _, l2 := range []float32{0, 0.01} {
			pp, g, m := place(p, randFloats(r, n)), randFloats(r, n+1), place(p, randFloats(r, n+1))
			v0 := randFloats(r, n+1)
			for i := range v0 {
				v0[i] *= v0[i]
			}
			v := place(p, v0)
			c := runtime.AdamCoeffs{GradScale: 0.5, L2: l2, Decay: 1 - 1e-3*(1-l2*100), Beta1: 0.9, OneMinusBeta1: 0.1, Beta2: 0.999, OneMinusBeta2: 1 - float32(0.999), StepSize: 1e-3 / (1 - 0.9*0.9), SqrtBC2: float32(math.Sqrt(1 - 0.999*0.999)), Eps: 1e-8}
			o.AdamUpdate(pp, place(p, g), m, v, c)
			out = append(append(append(out, widen32(fetch(p, pp))...), widen32(fetch(p, m))...), widen32(fetch(p, v))...)
		}
		return out, true
	}, 1e-5},
	{"SGDUpdate", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.OptimOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		var out []float64
		for _, c := range []runtime.SGDCoeffs{
			{LR: 0.1, GradScale: 0.25, WeightDecay: 1e-4},
			{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3, GradScale: 2, First: true},
			{LR: 0.05, Momentum: 0.9, GradScale: 1},
		} {
			pp, g, vel := place(p, randFloats(r, n)), randFloats(r, n+1), place(p, randFloats(r, n+2))
			o.SGDUpdate(pp, place(p, g), vel, c)
			out = append(append(out, widen32(fetch(p, pp))...), widen32(fetch(p, vel))...)
		}
		return out, true
	}, 1e-5},
	{"AverageUpdate", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.OptimOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		avg := place(p, randFloats(r, n))
		for _, w := range []float32{0.9, 1e-3} {
			o.AverageUpdate(avg, place(p, randFloats(r, n+1)), w)
		}
		return widen32(fetch(p, avg)), true
	}, 1e-5},
	{"Axpy", func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(interface {
			Axpy(float32, []float32, []float32)
		})
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		x, y := randFloats(r, n), place(p, randFloats(r, n+1))
		o.Axpy(float32(r.NormFloat64()), place(p, x), y)
		return widen32(fetch(p, y)), true
	}, 1e-5},
}

// opSizes are the sizes each operation runs at: empty, one, around the
// block size (256 on a GPU, 32 on the emulation) and the capped grid's
// reach (emulation: 16·2 blocks of 32; the fake GPU's 16·3 of 256), and
// odd.
var opSizes = []int{0, 1, 3, 255, 256, 257, 1000, 8193, 9001}

// TestOpsMatchCPU holds every operation of the Device to runtime.CPU's
// bits, with host operands (staged through the scratch) and with device
// buffers' Floats, and to the reference backend's values where it has the
// operation.
func TestOpsMatchCPU(t *testing.T) {
	d := emuDevice(t)
	for _, c := range opCases {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range opSizes {
				seed := int64(n)*7919 + int64(len(c.name))
				want, _ := c.run(runtime.CPU{}, &placer{}, n, seed)
				for _, dev := range []bool{false, true} {
					p := &placer{bufs: map[uintptr]runtime.Buffer{}}
					if dev {
						p.dev = d
					}
					got, _ := c.run(d, p, n, seed)
					if err := sameBits(got, want); err != nil {
						t.Fatalf("n=%d device operands=%v: %v", n, dev, err)
					}
					for _, b := range p.bufs {
						d.Free(b)
					}
				}
				if ref, ok := c.run(reference.Device{}, &placer{}, n, seed); ok {
					got, _ := c.run(d, &placer{}, n, seed)
					if err := near(got, ref, c.tol); err != nil {
						t.Errorf("n=%d: against the reference backend: %v", n, err)
					}
				} else if n == 0 {
					t.Logf("the reference backend has no %s", c.name)
				}
			}
		})
	}
}

func sameBits(got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			return fmt.Errorf("output %d = %v (%#x), want %v (%#x)", i, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
		}
	}
	return nil
}

func near(got, want []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g == w || math.IsNaN(g) && math.IsNaN(w) {
			continue
		}
		if !(math.Abs(g-w) <= tol*math.Max(1, math.Abs(w))) { // NaN fails too
			return fmt.Errorf("output %d = %v, want %v (tolerance %g)", i, g, w, tol)
		}
	}
	return nil
}

// rowsCase is the case of a VectorOps method that adds α times a sum over
// each of rows rows of a (n elements) and b (bn(n) elements, plus 3 past
// the last row) to the row's dst: AddDots, AddSumSqProducts.
func rowsCase(name string, bn func(n int) int, call func(runtime.VectorOps, float64, []float32, []float32, []float64), tol float64) opCase {
	return opCase{name, func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		rows := 1 + n%5
		a, b := randFloats(r, rows*n), randFloats(r, rows*bn(n)+3)
		dst := make([]float64, rows)
		for i := range dst {
			dst[i] = r.ExpFloat64()
		}
		pd := place(p, dst)
		call(o, r.ExpFloat64(), place(p, a), place(p, b[:rows*bn(n)]), pd)
		return fetch(p, pd), true
	}, tol}
}

// normRowsCase is a normalization's rows and its batch stride: a block
// per sample, or rows of the batch innermost.
type normRowsCase struct {
	nr     *runtime.NormRows
	stride int
}

// normAffineRun runs NormAffineSampleGrad (sample 1's gathered rows) and
// NormAffineGrads (the batch's first samples) of each case cases gives
// for size n and a batch of 3, scale and bias, on random rows.
func normAffineRun(cases func(n, B int) []normRowsCase) func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
	return func(ops any, p *placer, n int, seed int64) ([]float64, bool) {
		o, ok := ops.(runtime.VectorOps)
		if !ok {
			return nil, false
		}
		r := rand.New(rand.NewSource(seed))
		const B = 3
		var out []float64
		for _, c := range cases(n, B) {
			P, whole := c.nr.NumParams(), c.nr.Rows()*c.nr.RowLen()
			mean, inv := randFloats(r, c.nr.Rows()), randFloats(r, c.nr.Rows())
			for k := range inv {
				inv[k] = float32(math.Abs(float64(inv[k]))) + 0.1
			}
			x, dy := randFloats(r, whole), randFloats(r, whole)
			// Sample 1's rows, gathered as the engine gathers a sample.
			var xi, gi []float32
			for blk := 1; blk < whole/c.stride; blk += B {
				xi, gi = append(xi, x[blk*c.stride:(blk+1)*c.stride]...), append(gi, dy[blk*c.stride:(blk+1)*c.stride]...)
			}
			for _, scale := range []bool{true, false} {
				res := place(p, make([]float32, P))
				o.NormAffineSampleGrad(c.nr, scale, 1, B, c.stride, place(p, xi), place(p, mean), place(p, inv), place(p, gi), place(p, make([]float64, P)), res)
				out = append(out, widen32(fetch(p, res))...)
				samples := 1 + n%B // the first samples of the batch
				all := place(p, make([]float32, samples*P))
				o.NormAffineGrads(c.nr, scale, B, c.stride, place(p, x), place(p, mean), place(p, inv), place(p, dy), place(p, make([]float64, samples*P)), all, nil)
				out = append(out, widen32(fetch(p, all))...)
			}
			// Both from one call (the bias's as a call of its own).
			samples := 1 + n%B
			all, allBias := place(p, make([]float32, samples*P)), place(p, make([]float32, samples*P))
			o.NormAffineGrads(c.nr, true, B, c.stride, place(p, x), place(p, mean), place(p, inv), place(p, dy), place(p, make([]float64, samples*P)), all, allBias)
			out = append(append(out, widen32(fetch(p, all))...), widen32(fetch(p, allBias))...)
		}
		return out, true
	}
}
