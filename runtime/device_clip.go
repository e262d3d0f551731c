package runtime

import "math"

// ClipFn selects the clip function of a ClipRule.
type ClipFn int

// The clip functions of ClipRule.
const (
	// ClipAbadi is C_i = min(1, R/‖g_i‖) (Abadi et al. 2016).
	ClipAbadi ClipFn = iota
	// ClipAutomatic is C_i = R/(‖g_i‖ + γ) (Bu et al. 2022).
	ClipAutomatic
	// ClipGlobal is C_i = 1[‖g_i‖ < R] (Bu et al. 2021).
	ClipGlobal
)

// ClipRule is a per-sample clip function with its clip norm R and, for
// automatic clipping, its stability constant γ. The engine's per-layer
// clipping passes R/√K for K parameters.
type ClipRule struct {
	Fn       ClipFn
	R, Gamma float64
}

// Factor returns C_i for a per-sample gradient norm, in float64. A NaN or
// infinite norm gets factor 0: that sample contributes nothing, which keeps
// the sensitivity bound R of Σ_i C_i g_i.
func (r ClipRule) Factor(norm float64) float64 {
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return 0
	}
	switch r.Fn {
	case ClipAutomatic:
		return r.R / (norm + r.Gamma)
	case ClipGlobal:
		if norm < r.R {
			return 1
		}
		return 0
	}
	if norm <= r.R {
		return 1
	}
	return r.R / norm
}

// ClipOps is the clipping of the DP operation set (DPOps): the factors C_i
// of the clipped sum Σ_i C_i g_i (the paper's Algorithm 1; DESIGN.md §3).
type ClipOps interface {
	// ClipFactors writes dst[i] = float32(r.Factor(SampleNorm(normSq[i]))) for every
	// i < len(normSq) (len(dst) ≥ len(normSq)): the clip factors of the
	// samples from their squared gradient norms, computed in float64 and
	// rounded once, so that every device gives the same factors.
	ClipFactors(r ClipRule, normSq []float64, dst []float32)
	// CountClipped returns the step's report counts: nonFinite, the
	// number of samples whose norm SampleNorm(normSq[i]) is NaN or infinite (their
	// factor is 0), and clipped, the number of factors[i] < 1 (len(factors)
	// may be 0, where the factors are per layer). One small operation per
	// step, so that the host reads two scalars, not the norms.
	CountClipped(normSq []float64, factors []float32) (nonFinite, clipped int)
}

// SampleNorm is the norm √normSq of a squared per-sample gradient norm as
// the clipping takes it: a squared norm that rounding made negative — a
// ghost norm ⟨a aᵀ, g gᵀ⟩ whose terms cancel, where a GroupNorm of one
// value a group makes the true gradient vanish — counts as 0, not NaN
// (which would drop the sample as non-finite); a NaN stays NaN, and so
// does −Inf (an overflow: dropped, whatever its sign).
func SampleNorm(normSq float64) float64 {
	if normSq < 0 && !math.IsInf(normSq, -1) {
		normSq = 0
	}
	return math.Sqrt(normSq)
}

// CountClipped implements ClipOps.
func (CPU) CountClipped(normSq []float64, factors []float32) (nonFinite, clipped int) {
	for _, s := range normSq {
		norm := SampleNorm(s)
		if math.IsNaN(norm) || math.IsInf(norm, 0) {
			nonFinite++
		}
	}
	for _, f := range factors {
		if f < 1 {
			clipped++
		}
	}
	return nonFinite, clipped
}

// ClipFactors implements ClipOps.
func (CPU) ClipFactors(r ClipRule, normSq []float64, dst []float32) {
	dst = dst[:len(normSq)]
	for i, s := range normSq {
		dst[i] = float32(r.Factor(SampleNorm(s)))
	}
}
