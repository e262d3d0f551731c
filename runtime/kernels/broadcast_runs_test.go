package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// TestChannelRuns checks the run loops of short rows (shortRow) on the
// per-channel pattern of a GroupNorm's affine (x of N×C×H×W with γ of
// C×1×1 or 1×C×1×1, either operand order) and on short rows that are not
// that pattern: the forward and the full-size gradient bit for bit against
// the element-wise definition, the reduced gradients (Mul's dγ, Add's dβ
// through ReduceToShape) bit for bit against the row sums in row order on
// one worker and within float32 rounding on several.
func TestChannelRuns(t *testing.T) {
	type tc struct {
		x, c []int
	}
	cases := []tc{
		{[]int{5, 7, 2, 2}, []int{7, 1, 1}},
		{[]int{3, 9, 4, 4}, []int{1, 9, 1, 1}},
		{[]int{2, 64, 3, 5}, []int{64, 1, 1}},
		{[]int{33, 40, 2, 3}, []int{40, 1, 1}},
		{[]int{4, 6, 5}, []int{6, 1}},
		{[]int{3, 5, 4}, []int{3, 1, 4}}, // short rows, not per-channel
		{[]int{2, 3, 40, 40}, []int{3, 1, 1}},
	}
	for _, threads := range []int{1, 2} {
		prev := blas.SetThreads(threads)
		for ci, c := range cases {
			r := newRand(uint64(40 + ci))
			n, nc := Numel(c.x), Numel(c.c)
			x, g, dy := randn(r, n), randn(r, nc), randn(r, n)
			// idx maps an element of x to its γ.
			idx := make([]int, n)
			it := newBcastIter(c.x, c.x, c.c)
			nrows, rowLen := it.rows()
			in := it.inner()
			it.each(0, nrows, func(off [maxOps]int) {
				for l := 0; l < rowLen; l++ {
					idx[off[0]+l] = off[1] + l*in[1]
				}
			})
			name := fmt.Sprintf("case %d threads %d", ci, threads)
			for _, op := range []BinaryOp{Mul, Add, Sub, Div} {
				y := make([]float32, n)
				Binary(op, x, c.x, g, c.c, y, c.x)
				y2 := make([]float32, n)
				Binary(op, g, c.c, x, c.x, y2, c.x)
				for i := range y {
					if want := binaryScalar(op, x[i], g[idx[i]]); math.Float32bits(y[i]) != math.Float32bits(want) {
						t.Fatalf("%s %v: y[%d] = %v, want %v", name, op, i, y[i], want)
					}
					if want := binaryScalar(op, g[idx[i]], x[i]); math.Float32bits(y2[i]) != math.Float32bits(want) {
						t.Fatalf("%s %v swapped: y[%d] = %v, want %v", name, op, i, y2[i], want)
					}
				}
			}
			dx, dg, dg2 := make([]float32, n), make([]float32, nc), make([]float32, nc)
			BinaryBackward(Mul, x, c.x, g, c.c, nil, dy, c.x, dx, dg)
			dgs := make([]float32, nc) // swapped operands: γ·x
			dxs := make([]float32, n)
			BinaryBackward(Mul, g, c.c, x, c.x, nil, dy, c.x, dgs, dxs)
			ReduceToShape(dy, c.x, dg2, c.c)
			var wantG, wantB []float32
			if threads == 1 {
				// Row sums in float64, added to their element in row order.
				wantG, wantB = make([]float32, nc), make([]float32, nc)
				it.each(0, nrows, func(off [maxOps]int) {
					if in[1] != 0 {
						for l := 0; l < rowLen; l++ {
							wantG[off[1]+l*in[1]] += dy[off[0]+l] * x[off[0]+l]
							wantB[off[1]+l*in[1]] += dy[off[0]+l]
						}
						return
					}
					var sg, sb float64
					for l := 0; l < rowLen; l++ {
						sg += float64(dy[off[0]+l] * x[off[0]+l])
						sb += float64(dy[off[0]+l])
					}
					wantG[off[1]] += float32(sg)
					wantB[off[1]] += float32(sb)
				})
			}
			refG, refB := make([]float64, nc), make([]float64, nc)
			for i := range x {
				if want := dy[i] * g[idx[i]]; math.Float32bits(dx[i]) != math.Float32bits(want) || math.Float32bits(dxs[i]) != math.Float32bits(want) {
					t.Fatalf("%s: dx[%d] = %v (swapped %v), want %v", name, i, dx[i], dxs[i], want)
				}
				refG[idx[i]] += float64(dy[i]) * float64(x[i])
				refB[idx[i]] += float64(dy[i])
			}
			allClose(t, name+" dγ", dg, refG, 1e-4, 1e-5)
			allClose(t, name+" dβ", dg2, refB, 1e-4, 1e-5)
			for k := range dg {
				if dg[k] != dgs[k] {
					t.Fatalf("%s: dγ[%d] = %v with γ second, %v with γ first", name, k, dg[k], dgs[k])
				}
				if wantG != nil && (dg[k] != wantG[k] || dg2[k] != wantB[k]) {
					t.Fatalf("%s: dγ[%d], dβ[%d] = %v, %v; row sums in order give %v, %v", name, k, k, dg[k], dg2[k], wantG[k], wantB[k])
				}
			}
		}
		blas.SetThreads(prev)
	}
}
