package dpengine

import (
	"fmt"
	"math"
)

// DiracCanary is a gradient canary of the white-box privacy audit
// (Steinke, Nasr & Jagielski 2023): a training example whose per-sample
// gradient is given instead of computed, zero everywhere but at one
// coordinate, Index, of the parameter Param (in ParamNames order). It is
// clipped like a sample's gradient and added to the clipped sum before the
// noise, so it goes through the same clipping and noise as real examples.
type DiracCanary struct {
	Param, Index int
	// Value is the gradient's only non-zero entry; a Value above the clip
	// norm is clipped to it.
	Value float64
}

// CheckCanary reports whether c names a coordinate of a trainable
// parameter.
func (e *Engine) CheckCanary(c DiracCanary) error {
	if c.Param < 0 || c.Param >= len(e.params) {
		return fmt.Errorf("dpengine: canary parameter %d out of range [0,%d)", c.Param, len(e.params))
	}
	if p := e.params[c.Param]; c.Index < 0 || c.Index >= len(p.data) {
		return fmt.Errorf("dpengine: canary coordinate %d out of range of %q (%d values)", c.Index, p.name, len(p.data))
	}
	if math.IsNaN(c.Value) || math.IsInf(c.Value, 0) {
		return fmt.Errorf("dpengine: canary value %v is not finite", c.Value)
	}
	return nil
}

// InjectCanaries makes the next Step's logical batch contain the given
// gradient canaries besides its examples: the caller samples them as
// examples (ExpectedBatch counts them), they have no loss, and mode nondp
// ignores them. The slice is read during that Step only; the canaries must
// have passed CheckCanary.
func (e *Engine) InjectCanaries(cs []DiracCanary) { e.canaries = cs }

// addCanaries adds the queued canaries' clipped gradients to the clipped
// sum (the accumulators, already settled) and forgets them.
func (e *Engine) addCanaries() {
	c := e.cfg.Clipping
	if e.cfg.PerLayer {
		c.R /= math.Sqrt(float64(len(e.params)))
	}
	for _, k := range e.canaries {
		f := c.Factor(math.Abs(k.Value))
		if f < 1 {
			e.clipped++
		}
		e.params[k.Param].accum[k.Index] += float32(f * k.Value) // host write: one element of a device accumulator
	}
	e.canaries = nil
}
