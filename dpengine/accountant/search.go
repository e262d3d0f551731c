package accountant

import (
	"fmt"
	"math"
)

// Trials is the distribution of the number K of runs of a private random
// search: Papernot and Steinke's (2022) truncated negative binomial
// D_{η,γ}, P(K = k) ∝ (1−γ)^k · Γ(k+η)/(Γ(η)·k!) for k ≥ 1 (η > −1,
// γ ∈ (0, 1)). η = 1 is the geometric distribution (E[K] = 1/γ), η = 0
// the logarithmic one (P(K = k) ∝ (1−γ)^k/k).
//
// The number of runs must be drawn from it, independently of the data,
// and every drawn run must be made: the guarantee of SearchEpsilon is for
// the best of K runs with K so drawn, and a search that stops early or
// runs a fixed number of times is another mechanism.
type Trials struct {
	Eta   float64 `json:"eta"`
	Gamma float64 `json:"gamma"`
}

// NewTrials returns the distribution with shape η whose mean is mean
// (> 1): γ found by bisection, E[K] falling as γ rises.
func NewTrials(eta, mean float64) (Trials, error) {
	if !(eta > -1) || math.IsInf(eta, 0) {
		return Trials{}, invalidf("the trials' shape η must be finite and above −1, got %v", eta)
	}
	if !(mean > 1) || math.IsInf(mean, 0) || mean > 1e6 {
		return Trials{}, invalidf("the trials' mean must be above 1 and at most 1e6, got %v", mean)
	}
	lo, hi := 0.0, 1.0
	for range 200 {
		mid := (lo + hi) / 2
		if (Trials{Eta: eta, Gamma: mid}).Mean() > mean {
			lo = mid
		} else {
			hi = mid
		}
	}
	t := Trials{Eta: eta, Gamma: (lo + hi) / 2}
	if err := t.Validate(); err != nil {
		return Trials{}, err
	}
	return t, nil
}

// Validate checks η > −1 and γ ∈ (0, 1).
func (t Trials) Validate() error {
	if !(t.Eta > -1) || math.IsInf(t.Eta, 0) {
		return invalidf("the trials' shape η must be finite and above −1, got %v", t.Eta)
	}
	if !(t.Gamma > 0 && t.Gamma < 1) {
		return invalidf("the trials' γ must be in (0, 1), got %v", t.Gamma)
	}
	return nil
}

// Mean is E[K]: η(1−γ)/(γ(1−γ^η)), and (1/γ−1)/log(1/γ) at η = 0.
func (t Trials) Mean() float64 {
	g := t.Gamma
	if math.Abs(t.Eta) < 1e-12 {
		return (1/g - 1) / math.Log(1/g)
	}
	return t.Eta * (1 - g) / (g * -math.Expm1(t.Eta*math.Log(g)))
}

// pmf1 is P(K = 1): (1−γ)·η/(γ^(−η)−1), and (1−γ)/log(1/γ) at η = 0.
func (t Trials) pmf1() float64 {
	g := t.Gamma
	if math.Abs(t.Eta) < 1e-12 {
		return (1 - g) / math.Log(1/g)
	}
	return (1 - g) * t.Eta / math.Expm1(-t.Eta*math.Log(g))
}

// Draw returns the K whose cumulative probability first exceeds u, a
// uniform draw from [0, 1): inversion, P(K = k+1) = P(K = k)·(1−γ)(k+η)/(k+1).
// The tail beyond the first k of cumulative probability 1 − 1e-15 (the
// sum's rounding) is given the last such k.
func (t Trials) Draw(u float64) int {
	p := t.pmf1()
	cdf := p
	k := 1
	for u >= cdf && cdf < 1-1e-15 && p > 0 {
		p *= (1 - t.Gamma) * (float64(k) + t.Eta) / float64(k+1)
		cdf += p
		k++
	}
	return k
}

// SearchResult is the guarantee of a private random search.
type SearchResult struct {
	Result
	// RunEpsilon is one run's ε at the same δ (its training and its noisy
	// score composed): what the search spends beyond it is the price of
	// choosing the best of a random number of runs.
	RunEpsilon float64 `json:"run_epsilon"`
	// Trials is the distribution of the number of runs, and MeanTrials
	// its mean.
	Trials     Trials  `json:"trials"`
	MeanTrials float64 `json:"mean_trials"`
	// ScoreSigma is the noise multiplier of each run's score (the
	// standard deviation of its Gaussian noise over the score's
	// sensitivity); 0 where runs are not scored on private data.
	ScoreSigma float64 `json:"score_sigma,omitempty"`
}

// SearchEpsilon returns the (ε, δ) guarantee of a random search on private
// data: K runs, K drawn from t, each the phases' mechanism (its training:
// T steps of the subsampled Gaussian) followed by a score on private data
// with Gaussian noise of noise multiplier scoreSigma (0: none, the score
// is not private), of which only the best-scored run's output and score
// are released (Papernot and Steinke 2022, Theorem 2).
//
// One run's RDP is the phases' at each order plus the score's α/(2σ_s²).
// The search is (λ, ε′)-RDP with
//
//	ε′(λ) = ε(λ) + (1+η)(1−1/λ̂)·ε(λ̂) + (1+η)·log(1/γ)/λ̂ + log(E[K])/(λ−1)
//
// for every λ̂ ≥ 1 (the least over the order grid is taken), and
// ε′ is converted to (ε, δ) as the RDP accountant converts its own curve
// (opts as the RDP accountant's; the zero value: the default grid and
// conversion). The settings of the runs may differ (a random search draws
// them independently of the data) where they leave the phases unchanged.
func SearchEpsilon(phases []Phase, scoreSigma float64, t Trials, delta float64, opts Options) (SearchResult, error) {
	return SearchEpsilonOf([][]Phase{phases}, scoreSigma, t, delta, opts)
}

// SearchEpsilonOf is SearchEpsilon for a search whose runs draw among
// several mechanisms (settings that change σ, the sample rate or the
// steps: the batch size, the epochs), one phase list each, independently
// of the data. A run is then a mixture of them, and its RDP at each order
// is at most the largest of theirs (Rényi divergence is jointly
// quasi-convex, and a mixture labelled by its component is no worse): the
// bound takes the pointwise maximum of the mechanisms' curves. RunEpsilon
// and Steps are the maximum's and the most steps of one.
func SearchEpsilonOf(runs [][]Phase, scoreSigma float64, t Trials, delta float64, opts Options) (SearchResult, error) {
	if err := ValidateDelta(delta); err != nil {
		return SearchResult{}, err
	}
	if err := t.Validate(); err != nil {
		return SearchResult{}, err
	}
	if len(runs) == 0 {
		return SearchResult{}, invalidf("a search needs the phases of its runs")
	}
	for _, phases := range runs {
		if len(phases) == 0 {
			return SearchResult{}, invalidf("a search needs the phases of its runs")
		}
		for _, p := range phases {
			if err := ValidatePhase(p.Sigma, p.SampleRate, p.Steps); err != nil {
				return SearchResult{}, err
			}
		}
	}
	if math.IsNaN(scoreSigma) || scoreSigma < 0 || math.IsInf(scoreSigma, 0) {
		return SearchResult{}, invalidf("the score's noise multiplier must be ≥ 0 and finite, got %v", scoreSigma)
	}
	if err := validateOptions(RDP, opts); err != nil {
		return SearchResult{}, err
	}
	orders := opts.Orders
	if len(orders) == 0 {
		orders = DefaultOrders()
	}
	conv := opts.Conversion
	if conv == "" {
		conv = ConversionImproved
	}
	run := composeRDP(runs[0], orders)
	for _, phases := range runs[1:] {
		for i, v := range composeRDP(phases, orders) {
			run[i] = math.Max(run[i], v)
		}
	}
	if scoreSigma > 0 {
		for i, a := range orders {
			run[i] += a / (2 * scoreSigma * scoreSigma)
		}
	}
	// The least over the grid's λ̂ of the terms that do not depend on λ
	// (λ̂ = 1 itself, which the theorem also allows, is left out: near it
	// the grid's least order gives about as much).
	logInvGamma := -math.Log(t.Gamma)
	hat := math.Inf(1)
	for i, a := range orders {
		if v := (1 + t.Eta) * ((1-1/a)*run[i] + logInvGamma/a); v < hat {
			hat = v
		}
	}
	logMean := math.Log(t.Mean())
	search := make([]float64, len(orders))
	for i, a := range orders {
		search[i] = run[i] + hat + logMean/(a-1)
	}
	r := SearchResult{Trials: t, MeanTrials: t.Mean(), ScoreSigma: scoreSigma}
	r.Result = Result{Accountant: RDP, Delta: delta, Conversion: conv}
	for _, phases := range runs {
		steps := 0
		for _, p := range phases {
			steps += p.Steps
		}
		r.Steps = max(r.Steps, steps)
	}
	r.Epsilon, r.Order = rdpToEpsilon(orders, search, delta, conv)
	r.RunEpsilon, _ = rdpToEpsilon(orders, run, delta, conv)
	return r, nil
}

// CalibrateSearch returns the smallest noise multiplier (to a relative
// 1e-6) for runs of steps steps at sample rate q such that a random search
// of them (SearchEpsilon with the score's noise multiplier scoreSigma and
// the trials t) spends at most targetEpsilon at delta. The σ returned has
// been checked to meet the target; an error wrapping ErrUnreachable says
// that no σ ≤ 1e4 does (the score's or the trials' part alone may exceed
// it).
func CalibrateSearch(targetEpsilon, delta, q float64, steps int, scoreSigma float64, t Trials) (float64, SearchResult, error) {
	if math.IsNaN(targetEpsilon) || targetEpsilon <= 0 || math.IsInf(targetEpsilon, 0) {
		return 0, SearchResult{}, invalidf("target epsilon must be positive and finite, got %v", targetEpsilon)
	}
	if err := ValidatePhase(1, q, steps); err != nil {
		return 0, SearchResult{}, err
	}
	eval := func(sigma float64) (SearchResult, bool, error) {
		r, err := SearchEpsilon([]Phase{{Sigma: sigma, SampleRate: q, Steps: steps}}, scoreSigma, t, delta, Options{})
		return r, err == nil && r.Epsilon <= targetEpsilon, err
	}
	hi := maxCalibSigma
	hiRes, ok, err := eval(hi)
	if err != nil {
		return 0, SearchResult{}, err
	}
	if !ok {
		return 0, SearchResult{}, fmt.Errorf("%w: a search of ε ≤ %v at δ = %v: even σ = %.4g gives ε = %.6g (the choice among %.3g runs in expectation and the scores' noise alone spend about that)", ErrUnreachable, targetEpsilon, delta, hi, hiRes.Epsilon, t.Mean())
	}
	// ε falls as σ rises: narrow the bracket between a σ that misses the
	// target and one that meets it.
	if r, ok, _ := eval(minCalibSigma); ok {
		return minCalibSigma, r, nil
	}
	sigma := narrow(minCalibSigma, hi, calibRelTol, func(s float64) bool {
		r, ok, _ := eval(s)
		if ok {
			hiRes = r
		}
		return ok
	})
	return sigma, hiRes, nil
}

// Mechanism is one of a search's runs' mechanisms before σ is known: its
// sample rate and steps.
type Mechanism struct {
	SampleRate float64 `json:"sample_rate"`
	Steps      int     `json:"steps"`
}

// CalibrateSearchOf finds σ for each of a search's mechanisms such that
// the search (SearchEpsilonOf) spends at most targetEpsilon at delta: each
// mechanism's σ is the least that holds one run of it to a common ε_run
// (CalibrateSigma, RDP), and ε_run is the largest, to a relative 1e-4, for
// which the search meets the target (bisection: the search's ε rises with
// ε_run). The σs returned have been checked to meet the target. One
// mechanism is CalibrateSearch's: its least σ, to a relative 1e-6.
func CalibrateSearchOf(targetEpsilon, delta float64, mechs []Mechanism, scoreSigma float64, t Trials) ([]float64, SearchResult, error) {
	if len(mechs) == 0 {
		return nil, SearchResult{}, invalidf("a search needs its runs' mechanisms")
	}
	if len(mechs) == 1 {
		s, r, err := CalibrateSearch(targetEpsilon, delta, mechs[0].SampleRate, mechs[0].Steps, scoreSigma, t)
		if err != nil {
			return nil, SearchResult{}, err
		}
		return []float64{s}, r, nil
	}
	if math.IsNaN(targetEpsilon) || targetEpsilon <= 0 || math.IsInf(targetEpsilon, 0) {
		return nil, SearchResult{}, invalidf("target epsilon must be positive and finite, got %v", targetEpsilon)
	}
	for _, m := range mechs {
		if err := ValidatePhase(1, m.SampleRate, m.Steps); err != nil {
			return nil, SearchResult{}, err
		}
	}
	eval := func(epsRun float64) ([]float64, SearchResult, bool) {
		sigmas := make([]float64, len(mechs))
		runs := make([][]Phase, len(mechs))
		for i, m := range mechs {
			c, err := CalibrateSigma(RDP, epsRun, delta, m.SampleRate, m.Steps)
			if err != nil {
				return nil, SearchResult{}, false
			}
			sigmas[i] = c.Sigma
			runs[i] = []Phase{{Sigma: c.Sigma, SampleRate: m.SampleRate, Steps: m.Steps}}
		}
		r, err := SearchEpsilonOf(runs, scoreSigma, t, delta, Options{})
		return sigmas, r, err == nil && r.Epsilon <= targetEpsilon
	}
	// One run spends less than the search: ε_run lies below the target,
	// found by halving from half of it.
	lo, hi := targetEpsilon/2, targetEpsilon
	best, bestRes, ok := eval(lo)
	for !ok {
		if lo < targetEpsilon/1024 {
			return nil, SearchResult{}, fmt.Errorf("%w: a search of ε ≤ %v at δ = %v: even runs of ε = %.3g each give more (the choice among %.3g runs in expectation and the scores' noise alone spend about that)", ErrUnreachable, targetEpsilon, delta, lo, t.Mean())
		}
		hi, lo = lo, lo/2
		best, bestRes, ok = eval(lo)
	}
	narrow(hi, lo, 1e-4, func(e float64) bool {
		s, r, ok := eval(e)
		if ok {
			best, bestRes = s, r
		}
		return ok
	})
	return best, bestRes, nil
}
