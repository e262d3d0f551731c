package dpengine

import (
	"fmt"
	"math"
)

// The exponential moving average of the parameters (Config.EMADecay):
// a copy of every trainable tensor on the engine's device, moved towards
// the parameters after every update,
//
//	θ̄ ← θ̄ + (1 − β_t)·(θ − θ̄),  β_t = min(β, (1 + t)/(10 + t)),
//
// t the updates averaged before (TensorFlow's ExponentialMovingAverage
// with num_updates, which De et al. 2022 use for DP image classification:
// the warm-up keeps the average from clinging to the pretrained weights
// for the first 1/(1 − β) steps). The average is computed from the
// released parameters alone, after each noisy update: post-processing,
// the guarantee is unchanged (docs/PRIVACY.md).

// checkEMADecay refuses a decay outside [0, 1): 0 keeps no average, 1
// would keep the starting weights forever.
func checkEMADecay(beta float64) error {
	if !(beta >= 0 && beta < 1) {
		return fmt.Errorf("dpengine: EMA decay %v must be in [0, 1) (0: no average)", beta)
	}
	return nil
}

// emaWeight returns 1 − β_t, the weight of the parameters in the t-th
// update of the average (t from 0).
func emaWeight(beta float64, t int64) float32 {
	warm := (1 + float64(t)) / (10 + float64(t))
	return float32(1 - math.Min(beta, warm))
}

// averageParams folds the parameters, just updated, into their average;
// the first call starts the average at the parameters as they were before
// that update (beginAverage).
func (e *Engine) averageParams() {
	w := emaWeight(e.cfg.EMADecay, e.avgSteps)
	e.averageWith(w)
	e.avgSteps++
}

// beginAverage starts the average at the current parameters if it has not
// started: Step calls it before its update, so that the first update's
// average weighs the starting weights (β_0 = 0.1) as the definition does.
// A resumed run's average comes from its checkpoint (SetAverage); one
// resumed without it starts from the checkpoint's parameters.
func (e *Engine) beginAverage() error {
	if e.avg != nil {
		return nil
	}
	d := onDevice{ops: e.ops, dev: e.dev}
	avg, err := d.zeros(e.Params())
	if err != nil {
		return fmt.Errorf("dpengine: the parameters' average: %w", err)
	}
	e.avg = avg
	// From zeros, weight 1 gives the parameters exactly: 0 + 1·(θ − 0).
	e.averageWith(1)
	return nil
}

// averageWith runs AverageUpdate(θ̄, θ, w) over every parameter: in one
// call over the blocks where the device takes whole slices (the padding
// between tensors is averaged too and read by no one), else tensor by
// tensor over the device's workers.
func (e *Engine) averageWith(w float32) {
	if e.whole {
		e.ops.AverageUpdate(e.avg.all, e.paramAll, w)
		return
	}
	params := e.Params()
	spans(e.ops.Workers(), params, func(k, lo, hi int) {
		e.ops.AverageUpdate(e.avg.views[k][lo:hi], params[k][lo:hi], w)
	})
}

// Averaging reports whether the engine keeps an average of the
// parameters (Config.EMADecay > 0).
func (e *Engine) Averaging() bool { return e.cfg.EMADecay > 0 }

// AverageSteps returns the number of updates the average has taken in,
// which its warm-up depends on (0 before the first step).
func (e *Engine) AverageSteps() int64 { return e.avgSteps }

// HostAverage returns a host copy of the parameters' average in
// ParamNames order: the current parameters before the first step, nil
// without Config.EMADecay.
func (e *Engine) HostAverage() ([][]float32, error) {
	if !e.Averaging() {
		return nil, nil
	}
	if err := e.beginAverage(); err != nil {
		return nil, err
	}
	out := make([][]float32, len(e.params))
	for k, v := range e.avg.views {
		out[k] = make([]float32, len(v))
		if err := e.dev.CopyOut(out[k], e.avg.buf, e.avg.offs[k]); err != nil {
			return nil, fmt.Errorf("dpengine: reading the parameters' average from %s: %w", e.dev.Name(), err)
		}
	}
	return out, nil
}

// SetAverage restores an average saved by a checkpoint (HostAverage and
// AverageSteps), matching its tensors to the parameters by name as
// SetParams does.
func (e *Engine) SetAverage(names []string, values [][]float32, steps int64) error {
	if !e.Averaging() {
		return fmt.Errorf("dpengine: the engine keeps no average of the parameters (Config.EMADecay is 0)")
	}
	if steps < 0 {
		return fmt.Errorf("dpengine: the average's %d updates must not be negative", steps)
	}
	avg := e.avg
	if avg == nil {
		var err error
		if avg, err = (&onDevice{ops: e.ops, dev: e.dev}).zeros(e.Params()); err != nil {
			return fmt.Errorf("dpengine: the parameters' average: %w", err)
		}
	}
	err := e.byNames("averaged", "the average", names, values, func(p *param, v []float32) error {
		// The average is laid out as the accumulators: p at p.off.
		if err := e.dev.CopyIn(avg.buf, p.off, v); err != nil {
			return fmt.Errorf("dpengine: loading the parameters' average: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.avg, e.avgSteps = avg, steps
	return nil
}
