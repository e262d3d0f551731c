package accountant

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestNewNames(t *testing.T) {
	for _, n := range Names() {
		a, err := New(n)
		if err != nil {
			t.Fatalf("New(%q): %v", n, err)
		}
		if a.Name() != n {
			t.Errorf("New(%q).Name() = %q", n, a.Name())
		}
		if a.Description() == "" {
			t.Errorf("%s: empty description", n)
		}
		// Nothing composed yet: nothing spent.
		r, err := a.Epsilon(1e-5)
		if err != nil || r.Epsilon != 0 {
			t.Errorf("%s: empty accountant gives ε=%v, err=%v; want 0, nil", n, r.Epsilon, err)
		}
	}
}

// TestInvalidInput: every invalid argument is an error wrapping ErrInvalid
// whose message names the offending quantity.
func TestInvalidInput(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	steps := []struct {
		sigma, q float64
		steps    int
		mention  string
	}{
		{-1, 0.01, 10, "sigma"}, {0, 0.01, 10, "sigma"}, {nan, 0.01, 10, "sigma"}, {inf, 0.01, 10, "sigma"},
		{1, 0, 10, "sampling rate"}, {1, -0.1, 10, "sampling rate"}, {1, 1.5, 10, "sampling rate"}, {1, nan, 10, "sampling rate"},
		{1, 0.01, 0, "steps"}, {1, 0.01, -5, "steps"},
	}
	for _, n := range Names() {
		a, _ := New(n)
		for _, c := range steps {
			err := a.Step(c.sigma, c.q, c.steps)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.mention) {
				t.Errorf("%s: Step(%v, %v, %d) = %v; want ErrInvalid mentioning %q", n, c.sigma, c.q, c.steps, err, c.mention)
			}
		}
		if a.TotalSteps() != 0 {
			t.Errorf("%s: invalid steps were composed", n)
		}
		_ = a.Step(1, 0.01, 10)
		for _, d := range []float64{0, 1, -1e-5, 1.5, nan} {
			if _, err := a.Epsilon(d); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "delta") {
				t.Errorf("%s: Epsilon(%v) = %v; want ErrInvalid mentioning delta", n, d, err)
			}
		}
	}
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"nope", Options{}},
		{RDP, Options{Orders: []float64{2, 1}}},
		{RDP, Options{Orders: []float64{nan}}},
		{RDP, Options{Conversion: "bogus"}},
		{RDP, Options{EpsError: 0.1}},
		{PRV, Options{EpsError: -1}},
		{PRV, Options{DeltaErrorFraction: 1}},
		{PRV, Options{Conversion: ConversionClassic}},
		{GDP, Options{Orders: []float64{2}}},
	} {
		if _, err := NewWithOptions(c.name, c.opts); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewWithOptions(%q, %+v) = %v; want ErrInvalid", c.name, c.opts, err)
		}
	}
	if _, err := Restore(State{Accountant: RDP, Phases: []Phase{{1, 0.01, 10}, {-1, 0.01, 10}}}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "phase 1") {
		t.Errorf("Restore with a bad phase: %v", err)
	}
}

// TestStateRoundTrip: the state survives JSON (as in a checkpoint) and the
// restored accountant reports the identical Result, bit for bit.
func TestStateRoundTrip(t *testing.T) {
	phases := []Phase{{1.1, 0.01, 300}, {0.9, 0.02, 100}, {1.1, 0.01, 50}}
	for _, c := range []struct {
		name string
		opts Options
	}{
		{RDP, Options{}},
		{RDP, Options{Conversion: ConversionClassic, Orders: []float64{1.5, 2, 4, 8, 16, 32}}},
		{PRV, Options{}},
		{PRV, Options{EpsError: 0.05, DeltaErrorFraction: 0.01}},
		{GDP, Options{}},
	} {
		a, err := NewWithOptions(c.name, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range phases {
			if err := a.Step(p.Sigma, p.SampleRate, p.Steps); err != nil {
				t.Fatal(err)
			}
		}
		want, err := a.Epsilon(1e-5)
		if err != nil {
			t.Fatal(err)
		}
		blob, err := json.Marshal(a.State())
		if err != nil {
			t.Fatal(err)
		}
		var s State
		if err := json.Unmarshal(blob, &s); err != nil {
			t.Fatal(err)
		}
		b, err := Restore(s)
		if err != nil {
			t.Fatalf("%s: Restore(%s): %v", c.name, blob, err)
		}
		got, err := b.Epsilon(1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s %s: restored result %+v, want %+v", c.name, blob, got, want)
		}
		if b.TotalSteps() != 450 || len(b.Phases()) != 3 {
			t.Errorf("%s: restored %d steps in %d phases", c.name, b.TotalSteps(), len(b.Phases()))
		}
		if !strings.Contains(string(blob), `"phases":[{"sigma":1.1,"sample_rate":0.01,"steps":300}`) {
			t.Errorf("%s: unexpected state JSON %s", c.name, blob)
		}
	}
}

func TestStepMerging(t *testing.T) {
	a, _ := New(RDP)
	_ = a.Step(1, 0.01, 10)
	_ = a.Step(1, 0.01, 5)
	_ = a.Step(2, 0.01, 1)
	ps := a.Phases()
	if len(ps) != 2 || ps[0].Steps != 15 || ps[1].Steps != 1 || a.TotalSteps() != 16 {
		t.Errorf("phases %+v, total %d", ps, a.TotalSteps())
	}
	ps[0].Steps = 99 // Phases returns a copy
	if a.Phases()[0].Steps != 15 {
		t.Error("Phases exposes internal state")
	}
}

// TestHeterogeneousComposition: a run whose σ or q changes is the
// composition of its phases.
func TestHeterogeneousComposition(t *testing.T) {
	const delta = 1e-5
	A, B := Phase{1.0, 0.01, 400}, Phase{2.0, 0.03, 300}
	for _, n := range Names() {
		ab := mustEpsilon(t, n, []Phase{A, B}, delta).Epsilon
		ba := mustEpsilon(t, n, []Phase{B, A}, delta).Epsilon
		// Composition is commutative (up to rounding in the FFT).
		if !(math.Abs(ab-ba) <= 1e-9*ab) { // NaN fails too
			t.Errorf("%s: ε(A,B) = %v, ε(B,A) = %v", n, ab, ba)
		}
		// Interleaving the same phases gives the same result.
		half := Phase{A.Sigma, A.SampleRate, A.Steps / 2}
		aba := mustEpsilon(t, n, []Phase{half, B, half}, delta).Epsilon
		if !(math.Abs(aba-ab) <= 1e-9*ab) { // NaN fails too
			t.Errorf("%s: ε(A/2,B,A/2) = %v, ε(A,B) = %v", n, aba, ab)
		}
		// Each phase alone spends less than the run.
		if ea, eb := mustEpsilon(t, n, []Phase{A}, delta).Epsilon, mustEpsilon(t, n, []Phase{B}, delta).Epsilon; !(ab > ea && ab > eb) {
			t.Errorf("%s: ε(A,B) = %v not above ε(A) = %v and ε(B) = %v", n, ab, ea, eb)
		}
	}
	// For RDP the composed curve is exactly the sum of the phases' curves.
	orders := DefaultOrders()
	ra, rb, rab := composeRDP([]Phase{A}, orders), composeRDP([]Phase{B}, orders), composeRDP([]Phase{A, B}, orders)
	for i := range orders {
		if !(math.Abs(rab[i]-(ra[i]+rb[i])) <= 1e-12*rab[i]) { // NaN fails too
			t.Fatalf("order %v: rdp(A,B) = %v, rdp(A)+rdp(B) = %v", orders[i], rab[i], ra[i]+rb[i])
		}
	}
}

// TestMonotonicity: ε increases with the number of steps and with q and
// decreases with σ, for every accountant.
func TestMonotonicity(t *testing.T) {
	const delta = 1e-5
	base := Phase{1.0, 0.01, 500}
	vary := []struct {
		name       string
		phases     []Phase
		increasing bool
	}{
		{"steps", []Phase{{1, 0.01, 50}, {1, 0.01, 500}, {1, 0.01, 2000}}, true},
		{"q", []Phase{{1, 0.005, 500}, base, {1, 0.02, 500}, {1, 0.1, 500}}, true},
		{"sigma", []Phase{{0.7, 0.01, 500}, base, {1.5, 0.01, 500}, {4, 0.01, 500}}, false},
	}
	for _, n := range Names() {
		for _, v := range vary {
			prev := math.NaN()
			for i, p := range v.phases {
				e := mustEpsilon(t, n, []Phase{p}, delta).Epsilon
				if i > 0 && ((v.increasing && !(e > prev)) || (!v.increasing && !(e < prev))) {
					t.Errorf("%s: ε not monotone in %s: %+v gives %v after %v", n, v.name, p, e, prev)
				}
				prev = e
			}
		}
		// Smaller δ costs more ε.
		if a, b := mustEpsilon(t, n, []Phase{base}, 1e-3).Epsilon, mustEpsilon(t, n, []Phase{base}, 1e-7).Epsilon; !(a < b) {
			t.Errorf("%s: ε(δ=1e-3) = %v not below ε(δ=1e-7) = %v", n, a, b)
		}
	}
}

// TestSampleRateOne: q = 1 is the plain Gaussian mechanism; RDP is then
// α·T/(2σ²) at every order.
func TestSampleRateOne(t *testing.T) {
	for _, a := range []float64{1.5, 2, 10.5, 64} {
		if got, want := rdpSubsampledGaussian(1, 2, a), a/8; got != want {
			t.Errorf("order %v: rdp = %v, want %v", a, got, want)
		}
	}
	for _, n := range Names() {
		if r := mustEpsilon(t, n, []Phase{{2, 1, 10}}, 1e-5); !(r.Epsilon > 0) || math.IsInf(r.Epsilon, 0) {
			t.Errorf("%s: q=1 gives ε=%v", n, r.Epsilon)
		}
	}
}

// TestTinySigma: a noise multiplier so small that no finite bound exists
// gives +Inf (RDP, GDP) or an error (PRV), never a wrong finite number or a
// panic.
func TestTinySigma(t *testing.T) {
	for _, n := range Names() {
		a, _ := New(n)
		_ = a.Step(1e-3, 0.5, 100)
		r, err := a.Epsilon(1e-5)
		if err == nil && !(r.Epsilon > 1e4) {
			t.Errorf("%s: σ=1e-3 gives ε=%v", n, r.Epsilon)
		}
	}
}

// TestResultJSONKeys holds the JSON of a Result (the "privacy" object of a
// run report) to the snake_case keys of `privacy --json`.
func TestResultJSONKeys(t *testing.T) {
	r := Result{Accountant: PRV, Epsilon: 1, Delta: 1e-5, Steps: 3, Order: 2, Conversion: ConversionImproved,
		EpsilonLower: 0.9, EpsilonEstimate: 0.95, EpsilonUpper: 1, EpsError: 0.01, DeltaError: 1e-8, Mu: 0.5}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"accountant", "epsilon", "delta", "steps", "order", "conversion", "epsilon_lower",
		"epsilon_estimate", "epsilon_upper", "eps_error", "delta_error", "mu", "approximate"}
	if len(m) != len(want) {
		t.Errorf("%d keys %v, want %d", len(m), m, len(want))
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing from %s", k, b)
		}
	}
}
