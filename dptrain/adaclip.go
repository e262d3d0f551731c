package dptrain

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/dpengine"
)

// Adaptive clipping (Andrew et al., "Differentially Private Learning with
// Adaptive Clipping", NeurIPS 2021; Settings.ClipQuantile): after every
// step the clip norm moves geometrically towards the γ-quantile of the
// per-sample gradient norms,
//
//	R ← R·exp(−η·(b̃ − γ)),  b̃ = (Σ_i (b_i − ½) + N(0, σ_b²))/L + ½,
//
// b_i = 1 where sample i was not clipped (‖g_i‖ ≤ R), L the expected
// batch size. Adding or removing a sample changes Σ_i (b_i − ½) by ½, so
// the count's release is a Gaussian mechanism of noise multiplier 2σ_b,
// and with the gradient's σ_g the step's two releases are one Gaussian
// mechanism of σ = (σ_g⁻² + (2σ_b)⁻²)^(−1/2) (their Theorem 1): the
// accountant's σ is that σ, and the gradient is noised with the σ_g that
// gives it (gradientSigma). R itself is computed from released values
// only.

// Adaptive clipping's defaults: the clip norm's learning rate η (Andrew
// et al.'s geometric update) and the count noise σ_b as a fraction of the
// expected batch size (their L/20).
const (
	DefaultClipLR         = 0.2
	defaultCountNoiseFrac = 1.0 / 20
)

// gradientSigma returns σ_g such that the gradient's noise multiplier σ_g
// and the count's 2σ_b compose to σ; an error where 2σ_b ≤ σ leaves the
// gradient nothing (the count alone would spend the budget).
func gradientSigma(sigma, countNoise float64) (float64, error) {
	rest := math.Pow(sigma, -2) - math.Pow(2*countNoise, -2)
	if !(rest > 0) {
		return 0, fmt.Errorf("adaptive clipping: the clip count's noise σ_b = %g must be more than σ/2 = %g: its release alone would spend the whole budget", countNoise, sigma/2)
	}
	return 1 / math.Sqrt(rest), nil
}

// unclippedFraction returns b̃, the noisy fraction of a step's samples
// that were not clipped: unclipped of samples, their centred count noised
// with σ_b from src (the noise's secure keystream), over the expected
// batch size L.
func unclippedFraction(src *dpengine.Source, countNoise float64, unclipped, samples int, L float64) float64 {
	c := []float32{float32(float64(unclipped) - float64(samples)/2)}
	src.AddGaussian(countNoise, c)
	return float64(c[0])/L + 0.5
}

// nextClipNorm is the geometric update of the clip norm R after a step
// whose noisy unclipped fraction was b̃, towards quantile γ at rate η.
func nextClipNorm(r, frac, quantile, lr float64) float64 {
	return r * math.Exp(-lr*(frac-quantile))
}

// checkAdaptive checks the settings of adaptive clipping and fills its
// defaults: a quantile in (0, 1), a private run clipping all parameters
// together with Abadi's min(1, R/‖g‖), whose factor is 1 exactly for the
// samples it does not clip.
func checkAdaptive(set *Settings, fn dpengine.ClipFn, L int) error {
	switch {
	case !(set.ClipQuantile > 0 && set.ClipQuantile < 1):
		return fmt.Errorf("adaptive clipping: --clip-quantile %v must be in (0, 1)", set.ClipQuantile)
	case set.NonPrivate:
		return fmt.Errorf("adaptive clipping: --non-private clips nothing")
	case fn != dpengine.Abadi:
		return fmt.Errorf("adaptive clipping: --clip-fn %s: it adapts Abadi's clipping, min(1, R/‖g‖) (--clip-fn abadi)", fn)
	case set.PerLayer:
		return fmt.Errorf("adaptive clipping: --per-layer: it adapts one clip norm for all parameters")
	}
	if set.ClipLR == 0 {
		set.ClipLR = DefaultClipLR
	}
	if !(set.ClipLR > 0) || math.IsInf(set.ClipLR, 0) {
		return fmt.Errorf("adaptive clipping: --clip-lr %v must be positive and finite", set.ClipLR)
	}
	if set.ClipCountNoise == 0 {
		set.ClipCountNoise = defaultCountNoiseFrac * float64(L)
	}
	if !(set.ClipCountNoise > 0) || math.IsInf(set.ClipCountNoise, 0) {
		return fmt.Errorf("adaptive clipping: --clip-count-noise %v must be positive and finite", set.ClipCountNoise)
	}
	return nil
}
