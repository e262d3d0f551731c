package reference_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// dpLinalgCase is one linear-algebra operation run on a device: it
// returns the operation's output for the case's operands (which it must
// not modify other than the output it returns).
type dpLinalgCase struct {
	name string
	run  func(d runtime.LinalgOps) []float32
}

// dpLinalgCases are the LinalgOps cases on random operands from r: GEMMs
// of every transpose with α, β (β = 0 must not read C, α = 0 not A or B:
// those hold NaN there) and row strides wider than the rows; Axpy; every
// binary operator under broadcasting; and ReduceToShape onto broadcast
// shapes.
func dpLinalgCases(r *rand.Rand) []dpLinalgCase {
	var cs []dpLinalgCase
	for _, g := range []struct {
		m, n, k     int
		ta, tb      bool
		alpha, beta float32
	}{
		{1, 1, 1, false, false, 1, 0},
		{5, 7, 3, false, false, 1, 0},
		{6, 4, 9, true, false, 0.5, 1},
		{3, 8, 5, false, true, -2, 0.25},
		{7, 5, 6, true, true, 1, -1},
		{4, 4, 33, false, false, 0, 0.5},
		{2, 9, 1, true, true, 1.5, 0},
	} {
		lda, ldb, ldc := g.k+2, g.n+1, g.n+3
		aRows, bRows := g.m, g.k
		if g.ta {
			lda, aRows = g.m+1, g.k
		}
		if g.tb {
			ldb, bRows = g.k+3, g.n
		}
		a, b, c := dpRand(r, aRows*lda), dpRand(r, bRows*ldb), dpRand(r, g.m*ldc)
		if g.beta == 0 {
			for i := range c {
				c[i] = float32(math.NaN())
			}
		}
		if g.alpha == 0 {
			for i := range a {
				a[i], b[i%len(b)] = float32(math.NaN()), float32(math.NaN())
			}
		}
		for _, serial := range []bool{false, true} {
			name := fmt.Sprintf("Gemm/%dx%dx%d/t%v%v/a%g/b%g", g.m, g.n, g.k, g.ta, g.tb, g.alpha, g.beta)
			if serial {
				name = "GemmSerial" + name[4:]
			}
			cs = append(cs, dpLinalgCase{name, func(d runtime.LinalgOps) []float32 {
				out := dpClone(c)
				if serial {
					d.GemmSerial(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, out, ldc)
				} else {
					d.Gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a, lda, b, ldb, g.beta, out, ldc)
				}
				for i := range out { // the padding columns of C untouched
					if i%ldc >= g.n && math.Float32bits(out[i]) != math.Float32bits(c[i]) {
						out[i] = float32(math.Inf(1))
					}
				}
				return out
			}})
		}
	}
	x, y := dpRand(r, 1001), dpRand(r, 1005)
	cs = append(cs, dpLinalgCase{"Axpy", func(d runtime.LinalgOps) []float32 {
		out := dpClone(y)
		d.Axpy(-0.75, x, out)
		return out
	}})
	for _, sh := range []struct{ a, b, y []int }{
		{[]int{2, 3, 4}, []int{2, 3, 4}, []int{2, 3, 4}},
		{[]int{2, 3, 4}, []int{4}, []int{2, 3, 4}},
		{[]int{3, 1}, []int{1, 5}, []int{3, 5}},
		{[]int{1}, []int{2, 1, 3}, []int{2, 1, 3}},
		{[]int{4, 1, 3}, []int{2, 1}, []int{4, 2, 3}},
	} {
		a, b := dpRand(r, dpNumel(sh.a)), dpRand(r, dpNumel(sh.b))
		pos := make([]float32, len(a)) // Pow's bases: positive
		for i, v := range a {
			pos[i] = 0.1 + float32(math.Abs(float64(v)))
		}
		for _, op := range []runtime.BinaryOp{runtime.BinaryAdd, runtime.BinarySub, runtime.BinaryMul, runtime.BinaryDiv, runtime.BinaryPow} {
			lhs := a
			if op == runtime.BinaryPow {
				lhs = pos
			}
			cs = append(cs, dpLinalgCase{fmt.Sprintf("Binary/%v/%v%v", op, sh.a, sh.b), func(d runtime.LinalgOps) []float32 {
				out := dpRand(rand.New(rand.NewPCG(1, 1)), dpNumel(sh.y)) // stale
				d.Binary(op, lhs, sh.a, b, sh.b, out, sh.y)
				return out
			}})
		}
		for _, t := range [][]int{sh.a, sh.b} {
			xs := dpRand(r, dpNumel(sh.y))
			cs = append(cs, dpLinalgCase{fmt.Sprintf("ReduceToShape/%v/%v", sh.y, t), func(d runtime.LinalgOps) []float32 {
				out := dpRand(rand.New(rand.NewPCG(2, 2)), dpNumel(t)) // overwritten
				d.ReduceToShape(xs, sh.y, out, t)
				return out
			}})
		}
	}
	return cs
}

func dpNumel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// TestLinalgOps holds every LinalgOps operation of the reference backend
// to the CPU's on random operands: within 1e-5 of the largest output
// element (numcheck.RelErr), NaN where the CPU has NaN.
func TestLinalgOps(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, c := range dpLinalgCases(r) {
		t.Run(c.name, func(t *testing.T) {
			got, want := c.run(reference.Device{}), c.run(runtime.CPU{})
			if e := numcheck.RelErr(got, want, 0); e > 1e-5 {
				t.Errorf("error %.3g > 1e-5", e)
			}
		})
	}
}

// TestLinalgOpsByHand: a GEMM, a broadcast and a reduction worked out by
// hand.
func TestLinalgOpsByHand(t *testing.T) {
	d := reference.Device{}
	// [1 2; 3 4]·[5 6; 7 8] = [19 22; 43 50], then 2·that + 1·C.
	c := []float32{1, 1, 1, 1}
	d.Gemm(false, false, 2, 2, 2, 2, []float32{1, 2, 3, 4}, 2, []float32{5, 6, 7, 8}, 2, 1, c, 2)
	dpSameBits(t, "Gemm", c, []float32{39, 45, 87, 101})
	// Aᵀ·Bᵀ with A = [1 2; 3 4], B = [5 6; 7 8]: [1 3; 2 4]·[5 7; 6 8].
	d.Gemm(true, true, 2, 2, 2, 1, []float32{1, 2, 3, 4}, 2, []float32{5, 6, 7, 8}, 2, 0, c, 2)
	dpSameBits(t, "Gemm transposed", c, []float32{23, 31, 34, 46})
	y := make([]float32, 6)
	d.Binary(runtime.BinarySub, []float32{10, 20}, []int{2, 1}, []float32{1, 2, 3}, []int{3}, y, []int{2, 3})
	dpSameBits(t, "Binary", y, []float32{9, 8, 7, 19, 18, 17})
	s := make([]float32, 3)
	d.ReduceToShape([]float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, s, []int{3})
	dpSameBits(t, "ReduceToShape", s, []float32{5, 7, 9})
}
