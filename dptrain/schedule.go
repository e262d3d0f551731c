package dptrain

import (
	"fmt"
	"math"
)

// Schedules are the learning-rate schedules a run can follow
// (Settings.LRSchedule; "" is constant).
var Schedules = []string{"constant", "cosine", "linear"}

// Schedule is a learning-rate schedule over a run's steps: a linear
// warm-up, then the peak rate held (constant) or decayed to a floor
// (cosine, linear), as timm's and Hugging Face's schedulers shape them.
// The rate depends on the step number alone, never on data, so a schedule
// is post-processing: the privacy guarantee does not depend on it.
type Schedule struct {
	// Kind is "constant", "cosine" or "linear" ("" is constant).
	Kind string
	// Warmup is the number of steps over which the rate rises to its
	// peak: step t < Warmup (from 0) takes peak·(t+1)/Warmup, so that no
	// step — each one spends privacy — runs at rate 0.
	Warmup int
	// Min is the floor a decay ends at (cosine and linear).
	Min float64
}

// Check refuses a schedule that cannot run over steps steps at peak rate
// lr: an unknown kind, a negative warm-up or one that leaves no step to
// decay over, a floor outside [0, lr) or one given to a constant rate.
func (s Schedule) Check(lr float64, steps int) error {
	switch s.Kind {
	case "", "constant":
		if s.Min != 0 {
			return fmt.Errorf("--min-lr %g needs --lr-schedule cosine or linear: a constant rate has no floor", s.Min)
		}
		if s.Warmup > steps {
			return fmt.Errorf("--warmup-steps %d is more than the run's %d steps", s.Warmup, steps)
		}
	case "cosine", "linear":
		if !(s.Min >= 0 && s.Min < lr) {
			return fmt.Errorf("--min-lr %g must be in [0, --lr %g)", s.Min, lr)
		}
		if s.Warmup >= steps {
			return fmt.Errorf("--warmup-steps %d leaves no step of the run's %d to decay over (--lr-schedule %s)", s.Warmup, steps, s.Kind)
		}
	default:
		return fmt.Errorf("unknown --lr-schedule %q (want constant, cosine or linear)", s.Kind)
	}
	if s.Warmup < 0 {
		return fmt.Errorf("--warmup-steps %d must not be negative", s.Warmup)
	}
	return nil
}

// At returns the rate of step t (from 0) of a run of steps steps at peak
// rate lr. After the warm-up, with p = (t − Warmup)/(steps − Warmup) the
// decay's progress (0 at its first step):
//
//	cosine: Min + (lr − Min)·(1 + cos πp)/2
//	linear: Min + (lr − Min)·(1 − p)
//
// A step past the run's end (a resume with fewer epochs) takes the
// floor.
func (s Schedule) At(lr float64, t, steps int) float64 {
	if t < s.Warmup {
		return lr * float64(t+1) / float64(s.Warmup)
	}
	if s.Kind == "" || s.Kind == "constant" {
		return lr
	}
	p := math.Min(1, float64(t-s.Warmup)/float64(max(steps-s.Warmup, 1)))
	if s.Kind == "cosine" {
		return s.Min + (lr-s.Min)*(1+math.Cos(math.Pi*p))/2
	}
	return s.Min + (lr-s.Min)*(1-p)
}

// String describes the schedule for the run's log.
func (s Schedule) String() string {
	out := "constant"
	if s.Kind != "" {
		out = s.Kind
	}
	if s.Kind == "cosine" || s.Kind == "linear" {
		out += fmt.Sprintf(" to %g", s.Min)
	}
	if s.Warmup > 0 {
		out += fmt.Sprintf(" after %d warm-up steps", s.Warmup)
	}
	return out
}
