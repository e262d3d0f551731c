package reference

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// The reference sums in float64 and rounds once; the CPU sums in float32
// (blocked GEMMs, running sums): sums of tens to hundreds of terms of
// magnitude ≤ 1 agree to a few units in 1e-5 of their scale.
const nnTol = 1e-4

func TestNNOpsVsCPU(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	var cases []vsCPU[runtime.NNOps]
	add := func(name string, tol float64, want [][]float32, run func(ops runtime.NNOps) [][]float32) {
		cases = append(cases, vsCPU[runtime.NNOps]{name: name, run: run, want: want, tol: tol})
	}

	convs := []runtime.ConvShape{
		{N: 2, C: 3, M: 4, Group: 1, In: []int{7, 6}, Kernel: []int{3, 3}},
		{N: 2, C: 4, M: 6, Group: 2, In: []int{9, 8}, Kernel: []int{3, 2}, Strides: []int{2, 1}, Dilations: []int{1, 2}, Pads: []int{1, 0, 2, 1}},
		{N: 1, C: 6, M: 6, Group: 6, In: []int{10, 10}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, // depthwise
		{N: 3, C: 2, M: 3, Group: 1, In: []int{11}, Kernel: []int{4}, Strides: []int{3}, Dilations: []int{2}, Pads: []int{2, 3}},
		{N: 1, C: 2, M: 2, Group: 1, In: []int{4, 5, 3}, Kernel: []int{2, 3, 2}, Pads: []int{1, 1, 0, 0, 1, 1}},
		{N: 2, C: 8, M: 4, Group: 1, In: []int{1, 1}, Kernel: []int{1, 1}}, // 1×1 as a GEMM
	}
	for _, s := range convs {
		s := s
		if err := s.Init(); err != nil {
			t.Fatalf("conv %v: %v", s, err)
		}
		In, T := prod(s.In), prod(s.Out)
		x := randFloats(rng, s.N*s.C*In)
		w := randFloats(rng, s.M*s.C/s.Group*prod(s.Kernel))
		b := randFloats(rng, s.M)
		cb := randFloats(rng, s.C)
		dy := randFloats(rng, s.N*s.M*T)
		dyT := randFloats(rng, s.N*s.C*In)
		name := fmt.Sprintf("N%d C%d M%d G%d in%v k%v s%v d%v p%v", s.N, s.C, s.M, s.Group, s.In, s.Kernel, s.Strides, s.Dilations, s.Pads)
		add("Conv/"+name, nnTol, nil, func(ops runtime.NNOps) [][]float32 {
			ws := make([]float32, ops.ConvScratchSize(&s))
			y, dx, dw, db := stale(s.N*s.M*T), stale(len(x)), stale(len(w)), stale(s.M)
			ops.Conv(&s, x, w, b, y, ws)
			ops.ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			y0 := stale(s.N * s.M * T)
			ops.Conv(&s, x, w, nil, y0, ws)
			return [][]float32{y, dx, dw, db, y0}
		})
		add("ConvTranspose/"+name, nnTol, nil, func(ops runtime.NNOps) [][]float32 {
			ws := make([]float32, ops.ConvScratchSize(&s))
			// The ConvTranspose's input is the convolution's output.
			xt := dy
			y, dx, dw, db := stale(len(dyT)), stale(len(xt)), stale(len(w)), stale(s.C)
			ops.ConvTranspose(&s, xt, w, cb, y, ws)
			ops.ConvTransposeBackward(&s, xt, w, dyT, dx, dw, db, ws)
			return [][]float32{y, dx, dw, db}
		})
	}
	// Hand-computed: a 1-D convolution with a pad and a stride.
	{
		s := runtime.ConvShape{N: 1, C: 1, M: 1, Group: 1, In: []int{4}, Kernel: []int{2}, Strides: []int{2}, Pads: []int{1, 1}}
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		// Padded input 0 1 2 3 4 0, windows (0,1) (2,3) (4,0).
		add("Conv/hand", 1e-7, [][]float32{{0.5 + 2*1, 0.5 + 2 + 2*3, 0.5 + 4}}, func(ops runtime.NNOps) [][]float32 {
			y := stale(3)
			ops.Conv(&s, []float32{1, 2, 3, 4}, []float32{1, 2}, []float32{0.5}, y, make([]float32, ops.ConvScratchSize(&s)))
			return [][]float32{y}
		})
	}

	pools := []runtime.PoolShape{
		{N: 2, C: 3, In: []int{7, 6}, Kernel: []int{3, 3}, Strides: []int{2, 2}},
		{N: 1, C: 2, In: []int{8, 9}, Kernel: []int{3, 2}, Strides: []int{2, 2}, Pads: []int{1, 0, 1, 1}, CeilMode: true},
		{N: 1, C: 2, In: []int{8, 9}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, CeilMode: true, CountIncludePad: true},
		{N: 2, C: 2, In: []int{6, 6}, Kernel: []int{2, 2}, Strides: []int{2, 2}},
		{N: 2, C: 1, In: []int{9, 7}, Kernel: []int{2, 2}, Dilations: []int{2, 1}, Pads: []int{1, 1, 0, 0}},
		{N: 2, C: 2, In: []int{10}, Kernel: []int{3}, Strides: []int{2}, Pads: []int{1, 1}, CountIncludePad: true},
	}
	for _, s := range pools {
		s := s
		if err := s.Init(); err != nil {
			t.Fatalf("pool %v: %v", s, err)
		}
		In, T := prod(s.In), prod(s.Out)
		x := randFloats(rng, s.N*s.C*In)
		dy := randFloats(rng, s.N*s.C*T)
		name := fmt.Sprintf("N%d C%d in%v k%v s%v d%v p%v ceil=%v incl=%v", s.N, s.C, s.In, s.Kernel, s.Strides, s.Dilations, s.Pads, s.CeilMode, s.CountIncludePad)
		add("MaxPool/"+name, 0, nil, func(ops runtime.NNOps) [][]float32 {
			y, dx, dx2 := stale(s.N*s.C*T), stale(len(x)), stale(len(x))
			arg := make([]int32, s.N*s.C*T)
			ops.MaxPool(&s, x, y, arg)
			ops.MaxPoolBackward(&s, dy, arg, dx)
			ops.MaxPoolBackwardFromOutput(&s, x, y, dy, dx2)
			return [][]float32{y, dx, dx2}
		})
		add("AveragePool/"+name, 1e-6, nil, func(ops runtime.NNOps) [][]float32 {
			y, dx := stale(s.N*s.C*T), stale(len(x))
			ops.AveragePool(&s, x, y)
			ops.AveragePoolBackward(&s, dy, dx)
			return [][]float32{y, dx}
		})
	}
	{
		s := runtime.PoolShape{N: 1, C: 1, In: []int{5}, Kernel: []int{2}, Strides: []int{2}, CeilMode: true}
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		add("Pools/hand", 1e-7, [][]float32{{3, 4, 5}, {2, 3, 5}}, func(ops runtime.NNOps) [][]float32 {
			x := []float32{1, 3, 4, 2, 5}
			ym, ya := stale(3), stale(3)
			ops.MaxPool(&s, x, ym, nil)
			ops.AveragePool(&s, x, ya)
			return [][]float32{ym, ya}
		})
	}

	{
		const planes, L = 6, 50
		x, dy := randFloats(rng, planes*L), randFloats(rng, planes)
		add("GlobalPools", 1e-5, nil, func(ops runtime.NNOps) [][]float32 {
			ya, dxa, ym, dxm := stale(planes), stale(planes*L), stale(planes), stale(planes*L)
			arg := make([]int32, planes)
			ops.GlobalAveragePool(planes, L, x, ya)
			ops.GlobalAveragePoolBackward(planes, L, dy, dxa)
			ops.GlobalMaxPool(planes, L, x, ym, arg)
			ops.GlobalMaxPoolBackward(planes, L, dy, arg, dxm)
			return [][]float32{ya, dxa, ym, dxm}
		})
	}

	for _, training := range []bool{false, true} {
		s := runtime.BatchNormShape{N: 3, C: 4, S: 10, Epsilon: 1e-5, Momentum: 0.9, Training: training}
		n := s.N * s.C * s.S
		x, dy := randFloats(rng, n), randFloats(rng, n)
		scale, bias, rm := randFloats(rng, s.C), randFloats(rng, s.C), randFloats(rng, s.C)
		rv := make([]float32, s.C)
		for i := range rv {
			rv[i] = 0.5 + rng.Float32()
		}
		add(fmt.Sprint("BatchNorm/training=", training), nnTol, nil, func(ops runtime.NNOps) [][]float32 {
			y, mean, inv, nm, nv := stale(n), stale(s.C), stale(s.C), stale(s.C), stale(s.C)
			dx, ds, db := stale(n), stale(s.C), stale(s.C)
			if !training {
				nm, nv = nil, nil
			}
			ops.BatchNorm(&s, x, scale, bias, rm, rv, y, mean, inv, nm, nv)
			ops.BatchNormBackward(&s, x, scale, mean, inv, dy, dx, ds, db)
			out := [][]float32{y, mean, inv, dx, ds, db}
			if training {
				out = append(out, nm, nv)
			}
			return out
		})
	}

	{
		const rows, L = 7, 24
		x, dy := randFloats(rng, rows*L), randFloats(rng, rows*L)
		for i := range x[:L] {
			x[i] += 30 // a row with |μ| ≫ σ
		}
		add("NormalizeRows", nnTol, nil, func(ops runtime.NNOps) [][]float32 {
			y, inv, dx := stale(rows*L), stale(rows), stale(rows*L)
			ops.NormalizeRows(x, y, L, 1e-5, inv)
			ops.NormalizeRowsBackward(y, dy, inv, L, dx)
			return [][]float32{y, inv, dx}
		})
	}
	for _, nc := range []struct {
		name string
		nr   *runtime.NormRows
	}{
		{"LayerNorm", runtime.NewLayerNormRows(6, 20, 1e-5)},
		{"InstanceNorm", runtime.NewInstanceNormRows(2, 3, 15, 1e-5)},
		{"GroupNorm", runtime.NewGroupNormRows(2, 6, 8, 3, false, 1e-5)},
		{"GroupNorm/per-group", runtime.NewGroupNormRows(2, 6, 8, 3, true, 1e-5)},
	} {
		nr := nc.nr
		n, np := nr.Rows()*nr.RowLen(), nr.NumParams()
		x, dy := randFloats(rng, n), randFloats(rng, n)
		scale, bias := randFloats(rng, np), randFloats(rng, np)
		add("NormalizeRowsAffine/"+nc.name, nnTol, nil, func(ops runtime.NNOps) [][]float32 {
			y, mean, inv, dx := stale(n), stale(nr.Rows()), stale(nr.Rows()), stale(n)
			ds, db, y0 := stale(np), stale(np), stale(n)
			ops.NormalizeRowsAffine(nr, x, scale, bias, y, mean, inv)
			ops.NormalizeRowsAffineBackward(nr, x, scale, mean, inv, dy, dx)
			ops.NormalizeRowsAffineParamGrads(nr, x, mean, inv, dy, ds, db)
			ops.NormalizeRowsAffine(nr, x, scale, nil, y0, mean, inv)
			return [][]float32{y, mean, inv, dx, ds, db, y0}
		})
	}

	for _, s := range []runtime.LRNShape{
		{N: 2, C: 7, Inner: 6, Size: 3, Alpha: 1e-2, Beta: 0.75, Bias: 1},
		{N: 1, C: 5, Inner: 4, Size: 4, Alpha: 0.5, Beta: 0.6, Bias: 2},
	} {
		s := s
		n := s.N * s.C * s.Inner
		x, dy := randFloats(rng, n), randFloats(rng, n)
		add(fmt.Sprint("LRN/size=", s.Size), nnTol, nil, func(ops runtime.NNOps) [][]float32 {
			y, dx := stale(n), stale(n)
			ops.LRN(&s, x, y, make([]float32, n))
			ops.LRNBackward(&s, x, dy, dx, make([]float32, n))
			return [][]float32{y, dx}
		})
	}

	for _, gc := range []struct {
		beta   float32
		cShape []int
	}{{1, []int{5}}, {0.5, []int{3, 1}}, {2, []int{3, 5}}} {
		gc := gc
		yShape := []int{3, 5}
		c, dy := randFloats(rng, prod(gc.cShape)), randFloats(rng, 15)
		add(fmt.Sprint("GemmBias/", gc.beta, gc.cShape), 1e-6, nil, func(ops runtime.NNOps) [][]float32 {
			y, dc := stale(15), stale(len(c))
			ops.GemmBias(gc.beta, c, gc.cShape, y, yShape)
			ops.GemmBiasBackward(gc.beta, dy, yShape, dc, gc.cShape)
			return [][]float32{y, dc}
		})
	}

	testVsCPU[runtime.NNOps](t, Device{}, runtime.CPU{}, cases)
}

// TestGemmStridedVsCPU holds LinalgOps.GemmStrided of the reference
// against the CPU's: per-product operands, a shared operand (stride 0),
// transposes and β ≠ 0.
func TestGemmStridedVsCPU(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var cases []vsCPU[runtime.LinalgOps]
	for _, c := range []struct {
		tA, tB         bool
		m, n, k, batch int
		shareA, shareB bool
		alpha, beta    float32
	}{
		{false, false, 3, 4, 5, 6, false, false, 1, 0},
		{true, false, 4, 2, 7, 3, false, true, 0.5, 0},
		{false, true, 5, 3, 4, 4, true, false, 1, 1},
		{true, true, 2, 6, 3, 5, false, false, -2, 0.25},
	} {
		c := c
		sa, sb := c.m*c.k, c.k*c.n
		na, nb := c.batch*sa, c.batch*sb
		if c.shareA {
			sa, na = 0, c.m*c.k
		}
		if c.shareB {
			sb, nb = 0, c.k*c.n
		}
		a, b, c0 := randFloats(rng, na), randFloats(rng, nb), randFloats(rng, c.batch*c.m*c.n)
		lda, ldb := c.k, c.n
		if c.tA {
			lda = c.m
		}
		if c.tB {
			ldb = c.k
		}
		cases = append(cases, vsCPU[runtime.LinalgOps]{name: fmt.Sprintf("%+v", c), tol: nnTol, run: func(ops runtime.LinalgOps) [][]float32 {
			y := append([]float32(nil), c0...)
			ops.GemmStrided(c.tA, c.tB, c.m, c.n, c.k, c.alpha, a, lda, sa, b, ldb, sb, c.beta, y, c.n, c.m*c.n, c.batch)
			return [][]float32{y}
		}})
	}
	cases = append(cases, vsCPU[runtime.LinalgOps]{name: "hand", want: [][]float32{{1 * 5, 2 * 5, 3 * 7, 4 * 7}}, run: func(ops runtime.LinalgOps) [][]float32 {
		// Two 1×2 · 2×1… products: [1 2]ᵀ·5 and [3 4]ᵀ·7 as (2×1)(1×1).
		y := stale(4)
		ops.GemmStrided(false, false, 2, 1, 1, 1, []float32{1, 2, 3, 4}, 1, 2, []float32{5, 7}, 1, 1, 0, y, 1, 2, 2)
		return [][]float32{y}
	}})
	testVsCPU[runtime.LinalgOps](t, Device{}, runtime.CPU{}, cases)
}
