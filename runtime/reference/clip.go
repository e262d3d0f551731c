package reference

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// clipFactor is the clip factor C_i of a per-sample gradient norm under rule
// r, from the clip functions' definitions (runtime.ClipFn): Abadi et
// al.'s min(1, R/‖g‖), Bu et al.'s automatic R/(‖g‖ + γ) and global
// 1[‖g‖ < R]. A NaN or infinite norm gets 0, so that the sample adds
// nothing and the sensitivity bound R holds.
func clipFactor(r runtime.ClipRule, norm float64) float64 {
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 0
	}
	switch r.Fn {
	case runtime.ClipAbadi:
		if norm <= r.R {
			return 1
		}
		return r.R / norm
	case runtime.ClipAutomatic:
		return r.R / (norm + r.Gamma)
	case runtime.ClipGlobal:
		if norm < r.R {
			return 1
		}
		return 0
	}
	panic("reference: unknown clip function")
}

// ClipFactors implements runtime.ClipOps: float64 factors rounded once.
func (Device) ClipFactors(r runtime.ClipRule, normSq []float64, dst []float32) {
	for i, s := range normSq {
		dst[i] = float32(clipFactor(r, runtime.SampleNorm(s)))
	}
}

// CountClipped implements runtime.ClipOps.
func (Device) CountClipped(normSq []float64, factors []float32) (nonFinite, clipped int) {
	for _, s := range normSq {
		if norm := runtime.SampleNorm(s); math.IsNaN(norm) || math.IsInf(norm, 0) {
			nonFinite++
		}
	}
	for _, f := range factors {
		if float64(f) < 1 {
			clipped++
		}
	}
	return nonFinite, clipped
}
