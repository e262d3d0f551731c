package kernels

import (
	"math"
	"testing"
)

// TestRowNormBackwardParts: the backward of the run layouts, which keeps
// its per-run sums, gives dx within float32 rounding of the definition
// (float64, term by term: rowNormBackwardRef), split over workers as the
// CPU backend splits rows, and the parameter gradients from those sums are
// RowNormParamGrads', bit for bit; for per-channel (GroupNorm,
// InstanceNorm) and per-group (GroupNormalization-18) parameters, runs of
// lengths that are and are not multiples of sixteen.
func TestRowNormBackwardParts(t *testing.T) {
	for _, c := range []struct {
		name string
		r    RowNorm
		np   int
	}{
		{"groupnorm", RowNorm{Rows: 3 * 4, L: 2 * 49, Mode: NormChannel, G: 4, CpG: 2, S: 49}, 8},
		{"groupnorm_long", RowNorm{Rows: 2 * 2, L: 3 * 64, Mode: NormChannel, G: 2, CpG: 3, S: 64}, 6},
		{"instancenorm", RowNorm{Rows: 2 * 5, L: 17, Mode: NormChannel, G: 5, CpG: 1, S: 17}, 5},
		{"per_group", RowNorm{Rows: 2 * 3, L: 40, Mode: NormGroup, G: 3, CpG: 2, S: 20}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			r.Eps = 1e-5
			rng := newRand(11)
			n := r.Rows * r.L
			x, dy := randn(rng, n), randn(rng, n)
			scale, bias := randn(rng, c.np), randn(rng, c.np)
			y := make([]float32, n)
			mean, inv := make([]float32, r.Rows), make([]float32, r.Rows)
			RowNormForward(&r, x, scale, bias, y, mean, inv, 0, r.Rows)
			dx := rowNormBackwardRef(&r, x, scale, mean, inv, dy)
			dxp := make([]float32, n)
			parts := make([]float64, 2*r.Rows*r.Runs())
			// Two halves, as the workers split rows.
			RowNormBackward(&r, x, scale, mean, inv, dy, dxp, parts, 0, r.Rows/2)
			RowNormBackward(&r, x, scale, mean, inv, dy, dxp, parts, r.Rows/2, r.Rows)
			var scaleMax float64
			for _, v := range dx {
				scaleMax = math.Max(scaleMax, math.Abs(float64(v)))
			}
			for i := range dx {
				if d := math.Abs(float64(dx[i] - dxp[i])); d > 1e-5*scaleMax {
					t.Fatalf("dx[%d] = %v, RowNormBackward %v", i, dxp[i], dx[i])
				}
			}
			ds, db := make([]float32, c.np), make([]float32, c.np)
			dsp, dbp := make([]float32, c.np), make([]float32, c.np)
			accS, accB := make([]float64, c.np), make([]float64, c.np)
			RowNormParamGrads(&r, x, mean, inv, dy, ds, db, accS, accB)
			RowNormParamGradsFromParts(&r, parts, dsp, dbp, accS, accB)
			for k := range ds {
				if ds[k] != dsp[k] || db[k] != dbp[k] {
					t.Errorf("param %d: (%v, %v) from the parts, (%v, %v) from x and dy", k, dsp[k], dbp[k], ds[k], db[k])
				}
			}
		})
	}
}

// rowNormBackwardRef is the row normalization's input gradient by its
// definition, in float64: dx = iv·(g·γ − mean(g·γ) − x̂·mean(g·γ·x̂)), γ each
// element's parameter (RowNorm.Param).
func rowNormBackwardRef(r *RowNorm, x, scale, mean, inv, dy []float32) []float32 {
	dx := make([]float32, len(x))
	for row := 0; row < r.Rows; row++ {
		m, iv := float64(mean[row]), float64(inv[row])
		var sg, sgx float64
		for j := 0; j < r.L; j++ {
			i := row*r.L + j
			a := float64(dy[i]) * float64(scale[r.Param(row, j)])
			sg += a
			sgx += a * (float64(x[i]) - m) * iv
		}
		mg, mgx := sg/float64(r.L), sgx/float64(r.L)
		for j := 0; j < r.L; j++ {
			i := row*r.L + j
			a := float64(dy[i]) * float64(scale[r.Param(row, j)])
			dx[i] = float32(iv * (a - mg - (float64(x[i])-m)*iv*mgx))
		}
	}
	return dx
}
