package reference_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// dpVectorCase is one vector operation run on a device: it returns the
// operation's float32 and float64 results for the given inputs (which it
// must not modify). exact says the contract makes the result the same on
// every device: float64 sums in order, or one rounding per element.
type dpVectorCase struct {
	name  string
	exact bool
	run   func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64)
}

// dpVectorIn are the random operands of one vector case.
type dpVectorIn struct {
	a, b  []float32
	n64   []float64
	rows  int
	idx   []int32
	alpha float32
}

// contractLoops are Contract's test loop nests over operands of at least
// 6 elements and an output of 4: ik = ij·jk (2×3×2), a diagonal ii = ij·ji
// with b read transposed, and a broadcast of b along i with j summed.
var contractLoops = []runtime.ContractLoop{
	{Dims: []int{2, 3, 2}, Out: []int{2, 0, 1}, A: []int{3, 1, 0}, B: []int{0, 2, 1}},
	{Dims: []int{2, 3}, Out: []int{1, 0}, A: []int{3, 1}, B: []int{1, 2}},
	{Dims: []int{4, 6}, Out: []int{1, 0}, A: []int{0, 1}, B: []int{0, 1}},
}

func dpVectorCases() []dpVectorCase {
	return []dpVectorCase{
		{"SumSq", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			return nil, []float64{d.SumSq(in.a)}
		}},
		{"SquaredNorms", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			dst := make([]float64, in.rows)
			d.SquaredNorms(in.a, dst)
			return nil, dst
		}},
		{"Dot", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			return nil, []float64{d.Dot(in.a[:len(in.a)-3], in.b)}
		}},
		{"Scale", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			x := dpClone(in.a)
			d.Scale(in.alpha, x)
			return x, nil
		}},
		{"Add", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.b)
			d.Add(in.a[:len(in.a)-5], y)
			return y, nil
		}},
		{"AddRunSums", false, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			dst := dpClone(in.b[:in.rows])
			d.AddRunSums(in.a, dst)
			return dst, nil
		}},
		{"ScatterAdd", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			dst := dpClone(in.b[:7])
			d.ScatterAdd(dst, in.a, in.idx)
			return dst, nil
		}},
		{"SumNormRows", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64[:2]) // overwritten: the column sums of rows of 2
			d.SumNormRows(in.n64[:len(in.n64)/2*2], y)
			return nil, y
		}},
		{"AddNormSq", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64)
			d.AddNormSq(in.n64[:len(in.n64)-2], y)
			return nil, y
		}},
		{"SumRows", false, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			out := dpRand(rand.New(rand.NewPCG(9, 9)), len(in.a)/in.rows) // overwritten
			d.SumRows(in.a, in.rows, len(in.a)/in.rows, out)
			return out, nil
		}},
		{"ScaleRows", false, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			x := dpClone(in.a)
			cols := len(x) / in.rows
			d.ScaleRows(in.b[:in.rows], in.alpha, x, cols, cols) // a sample per row
			y := dpClone(in.a)
			d.ScaleRows(in.b[:3], 1, y, 1, 1) // the batch innermost
			return append(x, y...), nil
		}},
		{"Contract", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			var out []float32
			for _, l := range contractLoops {
				o := make([]float32, 4)
				d.Contract(&l, in.a, in.b, make([]float64, 4), o)
				out = append(out, o...)
			}
			return out, nil
		}},
		{"CountNonFinite", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			x := dpClone(in.a)
			for i := 0; i < len(x); i += 5 {
				x[i] = [...]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, 0}[i/5%5]
			}
			return nil, []float64{float64(d.CountNonFinite(x))}
		}},
		{"ZeroNormSq", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64)
			d.ZeroNormSq(y[1 : len(y)-1])
			return nil, y
		}},
		{"AddSumSq", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64)
			d.AddSumSq(in.a, y[1:2])
			return nil, y
		}},
		{"AddDot", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64)
			d.AddDot(1, in.a[:len(in.a)-3], in.b, y[0:1])
			d.AddDot(float64(in.alpha*in.alpha), in.a, in.b, y[1:2])
			return nil, y
		}},
		{"AddSumSqProducts", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64[:in.rows])
			d.AddSumSqProducts(float64(in.alpha*in.alpha), in.a, in.b, y)
			return nil, y
		}},
		{"AddDots", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64[:in.rows])
			d.AddDots(float64(in.alpha*in.alpha), in.a, in.b, y)
			return nil, y
		}},
		{"AddSumSqProduct", true, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			y := dpClone(in.n64)
			d.AddSumSqProduct(1, in.a, in.b[:len(in.b)/2], y[0:1])
			d.AddSumSqProduct(float64(in.alpha*in.alpha), in.a[:1], in.b, y[1:2])
			return nil, y
		}},
		{"AddScaledRows", false, func(d runtime.VectorOps, in dpVectorIn) ([]float32, []float64) {
			cols := len(in.a) / in.rows
			x := dpClone(in.a)
			c := make([]float32, in.rows)
			for i := range c {
				c[i] = in.b[i] // some rows of factor 0, whose non-finite gradient adds nothing
				if i%2 == 1 {
					c[i] = 0
					x[i*cols] = float32(math.Inf(1))
				}
			}
			y := dpClone(in.b[:cols])
			d.AddScaledRows(c, x, y)
			return y, nil
		}},
	}
}

// TestVectorOps holds every vector operation of the reference backend to
// the CPU's on random inputs of several sizes: bit for bit where the
// contract fixes the result, within 1e-5 of the largest element (numcheck.RelErr)
// for the sums whose order is the device's.
func TestVectorOps(t *testing.T) {
	ref, cpu := reference.Device{}, runtime.CPU{}
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range dpVectorCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, size := range []struct{ rows, cols int }{{1, 8}, {3, 17}, {5, 64}, {4, 1001}, {1, runtime.SumChunk}, {2, 2*runtime.SumChunk + 37}} {
				n := size.rows * size.cols
				in := dpVectorIn{a: dpRand(r, n), b: dpRand(r, n), rows: size.rows, alpha: float32(r.NormFloat64())}
				for i := 0; i < n; i += 1 + r.IntN(3) {
					in.a[i] *= 1e3 // a range of magnitudes
				}
				in.n64 = make([]float64, size.rows+2)
				for i := range in.n64 {
					in.n64[i] = r.ExpFloat64()
				}
				in.idx = make([]int32, n)
				for i := range in.idx {
					in.idx[i] = int32(r.IntN(9) - 2) // −2 … 6: some skipped, repeats
				}
				keep := dpClone(in.a)
				g32, g64 := c.run(ref, in)
				w32, w64 := c.run(cpu, in)
				dpSameBits(t, "input", in.a, keep)
				if c.exact {
					dpSameBits(t, c.name, g32, w32)
				} else if e := numcheck.RelErr(g32, w32, 0); e > 1e-5 {
					t.Errorf("%d×%d: error %.3g > 1e-5", size.rows, size.cols, e)
				}
				for k := range w64 {
					if math.Float64bits(g64[k]) != math.Float64bits(w64[k]) {
						t.Errorf("%d×%d: element %d is %v, the CPU's %v", size.rows, size.cols, k, g64[k], w64[k])
					}
				}
			}
		})
	}
}

// TestVectorOpsByHand: a few results worked out by hand.
func TestVectorOpsByHand(t *testing.T) {
	d := reference.Device{}
	if got := d.SumSq([]float32{3, 4}); got != 25 {
		t.Errorf("SumSq(3, 4) = %v, want 25", got)
	}
	if got := d.Dot([]float32{1, 2}, []float32{3, 4, 5}); got != 11 {
		t.Errorf("Dot = %v, want 11", got)
	}
	out := make([]float32, 2)
	d.SumRows([]float32{1, 2, 3, 4, 5, 6}, 3, 2, out)
	dpSameBits(t, "SumRows", out, []float32{9, 12})
	dst := []float32{1, 1}
	d.AddRunSums([]float32{1, 2, 3, 4, 5, 6}, dst)
	dpSameBits(t, "AddRunSums", dst, []float32{7, 16})
	dst = []float32{0, 0, 0}
	d.ScatterAdd(dst, []float32{1, 2, 4, 8}, []int32{2, -1, 2, 0})
	dpSameBits(t, "ScatterAdd", dst, []float32{8, 0, 5})
	n := []float64{1, 2}
	d.AddSumSq([]float32{3, 4}, n[1:])
	d.AddDot(0.5, []float32{1, 2}, []float32{3, 4}, n[:1])
	if n[0] != 6.5 || n[1] != 27 {
		t.Errorf("AddDot, AddSumSq = %v, want [6.5 27]", n)
	}
	d.AddSumSqProduct(2, []float32{3, 4}, []float32{1, 1}, n[:1])
	if n[0] != 106.5 {
		t.Errorf("AddSumSqProduct = %v, want 106.5", n[0])
	}
	d.ZeroNormSq(n)
	if n[0] != 0 || n[1] != 0 {
		t.Errorf("ZeroNormSq left %v", n)
	}
	y := []float32{1, 1}
	d.AddScaledRows([]float32{2, 0, -1}, []float32{1, 2, float32(math.NaN()), 5, 3, 1}, y)
	dpSameBits(t, "AddScaledRows", y, []float32{0, 4})
	x := []float32{1, 2, 3, 4, 5, 6}
	d.ScaleRows([]float32{2, -1}, 0.5, x, 1, 3) // samples of 3 rows of 1
	dpSameBits(t, "ScaleRows", x, []float32{1, 2, 3, -2, -2.5, -3})
	// (1 2; 3 4)·(5 6; 7 8) = (19 22; 43 50).
	out = make([]float32, 4)
	mm := runtime.ContractLoop{Dims: []int{2, 2, 2}, Out: []int{2, 0, 1}, A: []int{2, 1, 0}, B: []int{0, 2, 1}}
	d.Contract(&mm, []float32{1, 2, 3, 4}, []float32{5, 6, 7, 8}, nil, out)
	dpSameBits(t, "Contract", out, []float32{19, 22, 43, 50})
}

// TestNormAffineSampleGrad holds the reference backend's per-sample
// normalization affine gradients to the CPU's (within 1e-5: the CPU
// rounds each term to float32) for every kind of NormRows, with the
// sample's rows in a block of their own or spread (the batch in the
// middle), and checks a LayerNorm case by hand.
func TestNormAffineSampleGrad(t *testing.T) {
	ref, cpu := reference.Device{}, runtime.CPU{}
	r := rand.New(rand.NewPCG(7, 8))
	const B = 3
	for _, c := range []struct {
		name         string
		nr           *runtime.NormRows
		stride, rows int
	}{
		{"GroupNorm", runtime.NewGroupNormRows(B, 4, 5, 2, false, 1e-5), 20, 2},
		{"GroupNorm per group", runtime.NewGroupNormRows(B, 4, 5, 2, true, 1e-5), 20, 2},
		{"InstanceNorm", runtime.NewInstanceNormRows(B, 3, 7, 1e-5), 21, 3},
		{"LayerNorm (T, B, D)", runtime.NewLayerNormRows(4*B, 6, 1e-5), 6, 4},
	} {
		L := c.nr.RowLen()
		mean, inv := dpRand(r, c.nr.Rows()), dpRand(r, c.nr.Rows())
		for k := range inv {
			inv[k] = float32(math.Abs(float64(inv[k]))) + 0.1
		}
		x, dy := dpRand(r, c.rows*L), dpRand(r, c.rows*L)
		for _, scale := range []bool{true, false} {
			got, want := make([]float32, c.nr.NumParams()), make([]float32, c.nr.NumParams())
			ref.NormAffineSampleGrad(c.nr, scale, 2, B, c.stride, x, mean, inv, dy, nil, got)
			cpu.NormAffineSampleGrad(c.nr, scale, 2, B, c.stride, x, mean, inv, dy, make([]float64, len(want)), want)
			if e := numcheck.RelErr(got, want, 0); e > 1e-5 {
				t.Errorf("%s (scale %v): error %.3g > 1e-5", c.name, scale, e)
			}
		}
	}
	// LayerNorm of rows of 2, samples of one row each (B = 2), sample 1:
	// row 1, mean 1, 1/σ 2: x̂ = (−2, 2), dy = (3, 5).
	nr := runtime.NewLayerNormRows(2, 2, 1e-5)
	out := make([]float32, 2)
	mean, inv, x, dy := []float32{0, 1}, []float32{1, 2}, []float32{0, 2}, []float32{3, 5}
	ref.NormAffineSampleGrad(nr, true, 1, 2, 2, x, mean, inv, dy, nil, out)
	dpSameBits(t, "NormAffineSampleGrad scale", out, []float32{-6, 10})
	ref.NormAffineSampleGrad(nr, false, 1, 2, 2, nil, nil, nil, dy, nil, out)
	dpSameBits(t, "NormAffineSampleGrad bias", out, []float32{3, 5})
}
