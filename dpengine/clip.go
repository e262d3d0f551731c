package dpengine

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// ClipFn maps a per-sample gradient norm to the factor C_i its gradient is
// multiplied by. Every ClipFn keeps ‖C_i g_i‖ ≤ R, which is what bounds the
// sensitivity of Σ_i C_i g_i by R.
type ClipFn int

const (
	// Abadi is C_i = min(1, R/‖g_i‖) (Abadi et al. 2016).
	Abadi ClipFn = iota
	// Automatic is C_i = R/(‖g_i‖ + γ) (Bu et al. 2022, "automatic
	// clipping"): every gradient is normalized, so R acts as a learning
	// rate scale and needs no tuning.
	Automatic
	// Global is C_i = 1[‖g_i‖ < R] (Bu et al. 2021, global clipping):
	// samples with large gradients are dropped rather than scaled.
	Global
)

func (c ClipFn) String() string {
	switch c {
	case Abadi:
		return "abadi"
	case Automatic:
		return "automatic"
	case Global:
		return "global"
	}
	return fmt.Sprintf("ClipFn(%d)", int(c))
}

// ParseClipFn reads "abadi", "automatic" or "global".
func ParseClipFn(s string) (ClipFn, error) {
	for _, c := range []ClipFn{Abadi, Automatic, Global} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown clip function %q (want abadi, automatic or global)", s)
}

// Clipping configures per-sample clipping.
type Clipping struct {
	Fn ClipFn
	// R is the clip norm.
	R float64
	// Gamma is the stability constant of automatic clipping (default 0.01).
	Gamma float64
}

// Validate checks the configuration.
func (c Clipping) Validate() error {
	if !(c.R > 0) || math.IsInf(c.R, 0) {
		return fmt.Errorf("clip norm %v must be positive and finite", c.R)
	}
	if c.Fn == Automatic && !(c.Gamma > 0) {
		return fmt.Errorf("automatic clipping needs γ > 0, got %v", c.Gamma)
	}
	return nil
}

// Factor returns C_i for a per-sample gradient norm. A NaN or infinite
// norm gets factor 0: that sample contributes nothing, which keeps the
// sensitivity bound (the caller reports it).
func (c Clipping) Factor(norm float64) float64 { return c.rule().Factor(norm) }

// rule is the clipping as the device computes it.
func (c Clipping) rule() runtime.ClipRule {
	fn := runtime.ClipAbadi
	switch c.Fn {
	case Automatic:
		fn = runtime.ClipAutomatic
	case Global:
		fn = runtime.ClipGlobal
	}
	return runtime.ClipRule{Fn: fn, R: c.R, Gamma: c.Gamma}
}

// Factors fills dst with C_i for norms and returns it.
func (c Clipping) Factors(norms []float64, dst []float32) []float32 {
	dst = dst[:0]
	for _, n := range norms {
		dst = append(dst, float32(c.Factor(n)))
	}
	return dst
}

// SetClipNorm sets the clip norm R of the steps from the next one on: the
// norm adaptive clipping moves after every step (dptrain's
// Settings.ClipQuantile), the noise of each step σ·R at the R it clipped
// with.
func (e *Engine) SetClipNorm(r float64) error {
	c := e.cfg.Clipping
	c.R = r
	if err := c.Validate(); err != nil {
		return fmt.Errorf("dpengine: %w", err)
	}
	e.cfg.Clipping = c
	return nil
}

// ClipNorm returns the clip norm R the next step clips with.
func (e *Engine) ClipNorm() float64 { return e.cfg.Clipping.R }

// NoiseMultiplier returns σ as the engine noises each step: noise of
// standard deviation σ·R on the clipped sum.
func (e *Engine) NoiseMultiplier() float64 { return e.cfg.NoiseMultiplier }
