package kernels

import (
	"math"
	"testing"
)

// TestRowNormBackwardParts: the backward that keeps its per-run sums gives
// RowNormBackward's dx to float32 rounding (its row sums are formed per run
// and scaled, not per term), and the parameter gradients from those sums
// are RowNormParamGrads', bit for bit; for per-channel (GroupNorm,
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
			dx, dxp := make([]float32, n), make([]float32, n)
			RowNormBackward(&r, x, scale, mean, inv, dy, dx, 0, r.Rows)
			parts := make([]float64, 2*r.Rows*r.Runs())
			// Two halves, as the workers split rows.
			RowNormBackwardParts(&r, x, scale, mean, inv, dy, dxp, parts, 0, r.Rows/2)
			RowNormBackwardParts(&r, x, scale, mean, inv, dy, dxp, parts, r.Rows/2, r.Rows)
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
