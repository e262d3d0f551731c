package accountant

import (
	"errors"
	"fmt"
	"math"
)

// ErrUnreachable is wrapped by the error Calibrate returns when no noise
// multiplier in its search range meets the target.
var ErrUnreachable = errors.New("target epsilon cannot be reached")

// Calibration is the outcome of Calibrate.
type Calibration struct {
	// Sigma is the noise multiplier found; Result.Epsilon ≤ the target.
	Sigma float64
	// Result is the accountant's result at Sigma (including any prior
	// phases).
	Result Result
	// Evaluations is the number of ε evaluations the search made.
	Evaluations int
}

// Search range and tolerances of Calibrate.
const (
	minCalibSigma = 1e-3
	maxCalibSigma = 1e4
	// relative width of the final bracket [σ_lo, σ_hi]
	calibRelTol    = 1e-6
	calibRelTolPRV = 2e-4
)

// CalibrateSigma returns the noise multiplier for steps steps at sampling
// rate q such that the named accountant (default options) reports
// ε ≤ targetEpsilon at delta, as small as the search tolerance allows.
func CalibrateSigma(name string, targetEpsilon, delta, q float64, steps int) (Calibration, error) {
	return Calibrate(State{Accountant: name}, targetEpsilon, delta, q, steps)
}

// Calibrate is CalibrateSigma for a run that already spent the phases in
// prior (whose accountant name and options are used): it finds σ for the
// steps still to run so that the whole run meets the target.
//
// The search is a bisection on σ between a σ whose ε exceeds the target (or
// could not be evaluated) and a σ whose ε was evaluated and does not; the
// latter is returned, so the returned σ never exceeds the budget, whatever
// the shape of ε(σ). The bracket is narrowed to a relative width of 1e-6
// (2e-4 for the PRV accountant, whose evaluations are slower). An error
// wrapping ErrInvalid reports bad arguments; one wrapping ErrUnreachable a
// target that no σ ≤ 1e4 meets (for example because the prior phases have
// already spent it, or because the PRV upper bound includes its ε error).
func Calibrate(prior State, targetEpsilon, delta, q float64, steps int) (Calibration, error) {
	if math.IsNaN(targetEpsilon) || targetEpsilon <= 0 || math.IsInf(targetEpsilon, 0) {
		return Calibration{}, invalidf("target epsilon must be positive and finite, got %v", targetEpsilon)
	}
	if err := ValidateDelta(delta); err != nil {
		return Calibration{}, err
	}
	if err := ValidatePhase(1, q, steps); err != nil {
		return Calibration{}, err
	}
	if _, err := Restore(prior); err != nil {
		return Calibration{}, err
	}
	if len(prior.Phases) > 0 {
		a, _ := Restore(prior)
		r, err := a.Epsilon(delta)
		if err != nil {
			return Calibration{}, err
		}
		if r.Epsilon >= targetEpsilon {
			return Calibration{}, fmt.Errorf("%w: the prior phases alone already spend ε = %.6g ≥ %v at δ = %v", ErrUnreachable, r.Epsilon, targetEpsilon, delta)
		}
	}
	c := Calibration{}
	eval := func(sigma float64) (Result, error) {
		c.Evaluations++
		a, err := Restore(prior)
		if err != nil {
			return Result{}, err
		}
		if err := a.Step(sigma, q, steps); err != nil {
			return Result{}, err
		}
		return a.Epsilon(delta)
	}
	ok := func(r Result, err error) bool { return err == nil && r.Epsilon <= targetEpsilon }

	tol, factor, guess := calibRelTol, 2.0, 1.0
	if prior.Accountant == PRV {
		// PRV evaluations are expensive: start from the RDP calibration
		// (PRV is usually a little tighter) and expand the bracket slowly.
		tol, factor = calibRelTolPRV, 1.25
		rdpPrior := State{Accountant: RDP, Phases: prior.Phases}
		if rc, err := Calibrate(rdpPrior, targetEpsilon, delta, q, steps); err == nil {
			guess = rc.Sigma
		}
	}

	var lo, hi float64
	var hiRes Result
	r, err := eval(guess)
	var lastErr error
	if ok(r, err) {
		hi, hiRes = guess, r
		for {
			s := hi / factor
			if s < minCalibSigma {
				// Even the smallest σ searched meets the target.
				c.Sigma, c.Result = hi, hiRes
				return c, nil
			}
			r, err := eval(s)
			if !ok(r, err) {
				lo = s
				break
			}
			hi, hiRes = s, r
		}
	} else {
		lo = guess
		lastErr = err
		for {
			s := lo * factor
			if s > maxCalibSigma {
				return Calibration{}, unreachable(targetEpsilon, delta, lo, r, lastErr)
			}
			r, err = eval(s)
			if ok(r, err) {
				hi, hiRes = s, r
				break
			}
			lo, lastErr = s, err
		}
	}
	c.Sigma = narrow(lo, hi, tol, func(s float64) bool {
		r, err := eval(s)
		if ok(r, err) {
			hiRes = r
			return true
		}
		return false
	})
	c.Result = hiRes
	return c, nil
}

// narrow bisects between bad, where ok is false, and good, where it is
// true, until they are within rel of good, and returns the good end: the
// answer is always a point ok was true at, whatever the function's shape
// between them. A caller that keeps what ok computed keeps it where ok
// returned true: the good end only moves there.
func narrow(bad, good, rel float64, ok func(float64) bool) float64 {
	for math.Abs(good-bad) > rel*math.Abs(good) {
		mid := bad + (good-bad)/2
		if mid == bad || mid == good {
			break
		}
		if ok(mid) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

func unreachable(target, delta, sigma float64, r Result, err error) error {
	if err != nil {
		return fmt.Errorf("%w: ε ≤ %v at δ = %v: evaluating σ = %.4g failed: %v", ErrUnreachable, target, delta, sigma, err)
	}
	return fmt.Errorf("%w: ε ≤ %v at δ = %v: even σ = %.4g gives ε = %.6g", ErrUnreachable, target, delta, sigma, r.Epsilon)
}
