package accountant

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalid is wrapped by every error caused by an invalid argument (a
// negative noise multiplier, a sampling rate outside (0, 1], a δ outside
// (0, 1), a non-positive step count, an unknown accountant name, ...), so
// that callers can tell bad input from a numerical failure with errors.Is.
var ErrInvalid = errors.New("invalid argument")

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Names of the accountants accepted by New.
const (
	RDP = "rdp"
	PRV = "prv"
	GDP = "gdp"
)

// Names lists the accountant names New accepts.
func Names() []string { return []string{RDP, PRV, GDP} }

// Conversion selects how an RDP curve is converted to (ε, δ)-DP.
type Conversion string

const (
	// ConversionImproved is ε = min_α [ rdp(α) + log((α-1)/α) -
	// (log δ + log α)/(α-1) ] (Balle et al. 2020, Theorem 21; Canonne,
	// Kamath, Steinke 2020, Proposition 12), together with the bound
	// δ ≤ sqrt(1 - exp(-rdp(α))) that gives ε = 0 for tiny RDP. Default.
	ConversionImproved Conversion = "improved"
	// ConversionClassic is ε = min_α [ rdp(α) + log(1/δ)/(α-1) ] (Mironov
	// 2017, Proposition 3), as used by the moments accountant of Abadi et
	// al. 2016 and by older TensorFlow Privacy and Opacus releases.
	ConversionClassic Conversion = "classic"
)

// Phase is a run of Steps consecutive steps with the same noise multiplier
// Sigma and Poisson sampling rate SampleRate.
type Phase struct {
	Sigma      float64 `json:"sigma"`
	SampleRate float64 `json:"sample_rate"`
	Steps      int     `json:"steps"`
}

// Options tunes an accountant. The zero value selects the defaults; fields
// that do not apply to an accountant must be left zero.
type Options struct {
	// Orders is the RDP order grid (each > 1, finite). Default:
	// DefaultOrders().
	Orders []float64 `json:"orders,omitempty"`
	// Conversion is the RDP-to-(ε, δ) conversion. Default:
	// ConversionImproved.
	Conversion Conversion `json:"conversion,omitempty"`
	// EpsError is the PRV accountant's ε error budget: the reported upper
	// and lower bounds are EpsError from the estimate (plus the δ error).
	// Default 0.01.
	EpsError float64 `json:"eps_error,omitempty"`
	// DeltaErrorFraction is the PRV accountant's δ error budget as a
	// fraction of the δ asked for, in (0, 1). Default 1e-3.
	DeltaErrorFraction float64 `json:"delta_error_fraction,omitempty"`
}

// Defaults of Options.
const (
	DefaultEpsError           = 0.01
	DefaultDeltaErrorFraction = 1e-3
)

// State is the serialisable state of an accountant: its name, options and
// the phases composed so far. It is part of a training checkpoint; Restore
// turns it back into an accountant that reports the identical ε.
type State struct {
	Accountant string  `json:"accountant"`
	Options    Options `json:"options,omitzero"`
	Phases     []Phase `json:"phases"`
}

// Result is the privacy guarantee of the steps composed so far: the
// mechanism is (Epsilon, Delta)-DP under add-or-remove-one adjacency with
// Poisson sampling. Fields that do not apply to the accountant are zero.
type Result struct {
	// Accountant is the accountant's name ("rdp", "prv" or "gdp").
	Accountant string `json:"accountant"`
	// Epsilon is the reported ε: for "prv" the upper bound EpsilonUpper.
	Epsilon float64 `json:"epsilon"`
	// Delta is the δ asked for.
	Delta float64 `json:"delta"`
	// Steps is the total number of steps composed.
	Steps int `json:"steps"`

	// Order is the RDP order α at which the minimum was attained ("rdp").
	Order float64 `json:"order,omitempty"`
	// Conversion is the RDP-to-(ε, δ) conversion used ("rdp").
	Conversion Conversion `json:"conversion,omitempty"`

	// EpsilonLower, EpsilonEstimate and EpsilonUpper bound and estimate the
	// true ε ("prv"): EpsilonLower ≤ ε ≤ EpsilonUpper given the error
	// budgets EpsError and DeltaError (Gopi et al. 2021, Theorem 5.5).
	EpsilonLower    float64 `json:"epsilon_lower,omitempty"`
	EpsilonEstimate float64 `json:"epsilon_estimate,omitempty"`
	EpsilonUpper    float64 `json:"epsilon_upper,omitempty"`
	// EpsError and DeltaError are the error budgets used ("prv").
	EpsError   float64 `json:"eps_error,omitempty"`
	DeltaError float64 `json:"delta_error,omitempty"`

	// Mu is the μ of μ-GDP ("gdp").
	Mu float64 `json:"mu,omitempty"`
	// Approximate is true when Epsilon is an approximation rather than an
	// upper bound ("gdp").
	Approximate bool `json:"approximate"`
}

// Accountant accumulates the phases of a run and reports the privacy spent.
type Accountant interface {
	// Name is "rdp", "prv" or "gdp".
	Name() string
	// Description is a one-line human-readable description; for the GDP
	// accountant it contains "approximate (CLT)".
	Description() string
	// Step composes steps more steps with noise multiplier sigma and
	// sampling rate q. Consecutive calls with equal sigma and q extend the
	// same phase.
	Step(sigma, q float64, steps int) error
	// Phases returns a copy of the phases composed so far.
	Phases() []Phase
	// TotalSteps is the number of steps composed so far.
	TotalSteps() int
	// Epsilon returns the ε spent at the given δ.
	Epsilon(delta float64) (Result, error)
	// State returns the serialisable state (a deep copy).
	State() State
}

// New returns an empty accountant with default options: name is "rdp",
// "prv" or "gdp".
func New(name string) (Accountant, error) { return NewWithOptions(name, Options{}) }

// NewWithOptions returns an empty accountant with the given options.
func NewWithOptions(name string, opts Options) (Accountant, error) {
	if err := validateOptions(name, opts); err != nil {
		return nil, err
	}
	b := base{opts: cloneOptions(opts)}
	switch name {
	case RDP:
		return &rdpAccountant{base: b}, nil
	case PRV:
		return &prvAccountant{base: b}, nil
	case GDP:
		return &gdpAccountant{base: b}, nil
	}
	return nil, invalidf("unknown accountant %q (want one of rdp, prv, gdp)", name)
}

// Restore rebuilds an accountant from a State, validating every field.
func Restore(s State) (Accountant, error) {
	a, err := NewWithOptions(s.Accountant, s.Options)
	if err != nil {
		return nil, fmt.Errorf("restoring accountant state: %w", err)
	}
	for i, p := range s.Phases {
		if err := a.Step(p.Sigma, p.SampleRate, p.Steps); err != nil {
			return nil, fmt.Errorf("restoring accountant state: phase %d: %w", i, err)
		}
	}
	return a, nil
}

// maxTotalSteps bounds the number of steps an accountant accepts, far above
// any real run, so that step counts cannot overflow.
const maxTotalSteps = 1 << 40

// ValidatePhase reports whether (sigma, q, steps) is a valid phase: sigma
// positive and finite, q in (0, 1], steps ≥ 1.
func ValidatePhase(sigma, q float64, steps int) error {
	if math.IsNaN(sigma) || sigma <= 0 || math.IsInf(sigma, 0) {
		return invalidf("noise multiplier sigma must be positive and finite, got %v", sigma)
	}
	if math.IsNaN(q) || q <= 0 || q > 1 {
		return invalidf("sampling rate q must be in (0, 1], got %v", q)
	}
	if steps <= 0 {
		return invalidf("number of steps must be at least 1, got %d", steps)
	}
	if steps > maxTotalSteps {
		return invalidf("number of steps %d exceeds the limit %d", steps, maxTotalSteps)
	}
	return nil
}

// ValidateDelta reports whether delta is in (0, 1).
func ValidateDelta(delta float64) error {
	if math.IsNaN(delta) || delta <= 0 || delta >= 1 {
		return invalidf("delta must be in (0, 1), got %v", delta)
	}
	return nil
}

func validateOptions(name string, o Options) error {
	if name != RDP && (len(o.Orders) > 0 || o.Conversion != "") {
		return invalidf("RDP options (orders, conversion) given to accountant %q", name)
	}
	if name != PRV && (o.EpsError != 0 || o.DeltaErrorFraction != 0) {
		return invalidf("PRV options (eps_error, delta_error_fraction) given to accountant %q", name)
	}
	for _, a := range o.Orders {
		if math.IsNaN(a) || a <= 1 || math.IsInf(a, 0) {
			return invalidf("RDP orders must be finite and > 1, got %v", a)
		}
	}
	switch o.Conversion {
	case "", ConversionImproved, ConversionClassic:
	default:
		return invalidf("unknown RDP conversion %q (want improved or classic)", o.Conversion)
	}
	if math.IsNaN(o.EpsError) || o.EpsError < 0 || math.IsInf(o.EpsError, 0) {
		return invalidf("eps_error must be positive, got %v", o.EpsError)
	}
	if math.IsNaN(o.DeltaErrorFraction) || o.DeltaErrorFraction < 0 || o.DeltaErrorFraction >= 1 {
		return invalidf("delta_error_fraction must be in (0, 1), got %v", o.DeltaErrorFraction)
	}
	return nil
}

func cloneOptions(o Options) Options {
	o.Orders = slices.Clone(o.Orders)
	return o
}

// base holds what every accountant shares: options and phases.
type base struct {
	opts   Options
	phases []Phase
	total  int
}

func (b *base) Step(sigma, q float64, steps int) error {
	if err := ValidatePhase(sigma, q, steps); err != nil {
		return err
	}
	if b.total+steps > maxTotalSteps {
		return invalidf("total number of steps would exceed the limit %d", maxTotalSteps)
	}
	b.total += steps
	if n := len(b.phases); n > 0 && b.phases[n-1].Sigma == sigma && b.phases[n-1].SampleRate == q {
		b.phases[n-1].Steps += steps
		return nil
	}
	b.phases = append(b.phases, Phase{Sigma: sigma, SampleRate: q, Steps: steps})
	return nil
}

func (b *base) Phases() []Phase { return slices.Clone(b.phases) }

func (b *base) TotalSteps() int { return b.total }

func (b *base) state(name string) State {
	return State{Accountant: name, Options: cloneOptions(b.opts), Phases: append([]Phase{}, b.phases...)}
}

// groupPhases merges phases with equal (sigma, q) wherever they occur:
// composition is commutative, so only the step count per distinct mechanism
// matters. The order of first occurrence is kept, so results are
// deterministic.
func groupPhases(ps []Phase) []Phase {
	var out []Phase
outer:
	for _, p := range ps {
		for i := range out {
			if out[i].Sigma == p.Sigma && out[i].SampleRate == p.SampleRate {
				out[i].Steps += p.Steps
				continue outer
			}
		}
		out = append(out, p)
	}
	return out
}
