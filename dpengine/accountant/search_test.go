package accountant

import (
	"errors"
	"math"
	"testing"
)

// trialsPMF is P(K = k) of the truncated negative binomial computed apart
// from Trials' recursion: (1−γ)^k·Γ(k+η)/(Γ(η)·k!) over its sum,
// normalised numerically (η = 0 as the logarithmic series).
func trialsPMF(t Trials, kmax int) []float64 {
	p := make([]float64, kmax+1)
	var sum float64
	for k := 1; k <= kmax; k++ {
		var lp float64
		if t.Eta == 0 {
			lp = float64(k)*math.Log(1-t.Gamma) - math.Log(float64(k))
		} else {
			// |Γ(k+η)/Γ(η)|: for η ∈ (−1, 0) Γ(η) < 0 and so is the
			// normalising constant; the magnitudes normalise alike.
			lgk, _ := math.Lgamma(float64(k) + t.Eta)
			lge, _ := math.Lgamma(t.Eta)
			lgf, _ := math.Lgamma(float64(k) + 1)
			lp = float64(k)*math.Log(1-t.Gamma) + lgk - lge - lgf
		}
		p[k] = math.Exp(lp)
		sum += p[k]
	}
	for k := range p {
		p[k] /= sum
	}
	return p
}

func TestTrials(t *testing.T) {
	for _, tc := range []struct{ eta, mean float64 }{
		{0, 10}, {1, 10}, {1, 2}, {-0.5, 5}, {0.5, 20}, {2, 30}, {0, 1.5},
	} {
		tr, err := NewTrials(tc.eta, tc.mean)
		if err != nil {
			t.Fatalf("NewTrials(%v, %v): %v", tc.eta, tc.mean, err)
		}
		if got := tr.Mean(); math.Abs(got-tc.mean) > 1e-9*tc.mean {
			t.Errorf("η=%v: mean %v, want %v", tc.eta, got, tc.mean)
		}
		kmax := 20000
		p := trialsPMF(tr, kmax)
		var mean float64
		for k, pk := range p {
			mean += float64(k) * pk
		}
		if !(math.Abs(mean-tc.mean) <= 1e-6*tc.mean) { // NaN fails too
			t.Errorf("η=%v γ=%v: the pmf's mean %v, Mean() %v", tc.eta, tr.Gamma, mean, tr.Mean())
		}
		if !(math.Abs(tr.pmf1()-p[1]) <= 1e-9) { // NaN fails too
			t.Errorf("η=%v: P(K=1) = %v, want %v", tc.eta, tr.pmf1(), p[1])
		}
		// Inversion at evenly spaced quantiles reproduces the pmf.
		const n = 200000
		counts := make([]float64, kmax+2)
		for i := range n {
			k := tr.Draw((float64(i) + 0.5) / n)
			if k < 1 {
				t.Fatalf("η=%v: drew K = %d", tc.eta, k)
			}
			counts[min(k, kmax+1)]++
		}
		for k := 1; k <= 10; k++ {
			if got := counts[k] / n; math.Abs(got-p[k]) > 2.0/n {
				t.Errorf("η=%v: P(K=%d) drawn %v, want %v", tc.eta, k, got, p[k])
			}
		}
	}
	geo, _ := NewTrials(1, 4)
	if !(math.Abs(geo.Gamma-0.25) <= 1e-12) { // NaN fails too
		t.Errorf("the geometric distribution of mean 4 has γ = 1/4, got %v", geo.Gamma)
	}
	for _, bad := range []struct{ eta, mean float64 }{{-1, 10}, {0, 1}, {0, 0.5}, {math.NaN(), 3}, {0, math.Inf(1)}} {
		if _, err := NewTrials(bad.eta, bad.mean); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewTrials(%v, %v) = %v, want ErrInvalid", bad.eta, bad.mean, err)
		}
	}
}

// TestSearchEpsilon holds the search's ε to Papernot and Steinke's bound
// computed apart for the Gaussian mechanism (one step at q = 1, RDP
// α/(2σ²) in closed form) with λ̂ scanned finely over [1, 1000] (the
// grid's least can only be higher, and close), and checks the bound's
// shape: above one run's ε, below the composition of the mean number of
// runs for a DP-SGD run, growing with the mean and with the scores' noise
// falling.
func TestSearchEpsilon(t *testing.T) {
	const delta = 1e-5
	for _, tc := range []struct{ sigma, eta, mean, scoreSigma float64 }{
		{4, 0, 10, 0}, {4, 1, 10, 0}, {8, 0.5, 30, 0}, {2, -0.5, 5, 0}, {4, 0, 10, 20},
	} {
		tr, _ := NewTrials(tc.eta, tc.mean)
		got, err := SearchEpsilon([]Phase{{Sigma: tc.sigma, SampleRate: 1, Steps: 1}}, tc.scoreSigma, tr, delta, Options{})
		if err != nil {
			t.Fatal(err)
		}
		rdp := func(a float64) float64 {
			r := a / (2 * tc.sigma * tc.sigma)
			if tc.scoreSigma > 0 {
				r += a / (2 * tc.scoreSigma * tc.scoreSigma)
			}
			return r
		}
		hat := math.Inf(1)
		for a := 1.0; a <= 1000; a *= 1.0005 {
			hat = math.Min(hat, (1+tc.eta)*((1-1/a)*rdp(a)+math.Log(1/tr.Gamma)/a))
		}
		want := math.Inf(1)
		for _, a := range DefaultOrders() {
			e := rdp(a) + hat + math.Log(tr.Mean())/(a-1)
			e += math.Log1p(-1/a) - (math.Log(delta)+math.Log(a))/(a-1)
			want = math.Min(want, e)
		}
		if got.Epsilon < want-1e-9 || got.Epsilon > want*1.02 {
			t.Errorf("%+v: ε = %v, the bound with λ̂ scanned gives %v", tc, got.Epsilon, want)
		}
		if !(got.Epsilon > got.RunEpsilon) {
			t.Errorf("%+v: the search's ε %v is not above one run's %v", tc, got.Epsilon, got.RunEpsilon)
		}
		if got.MeanTrials != tr.Mean() || got.Trials != tr || got.ScoreSigma != tc.scoreSigma {
			t.Errorf("%+v: result %+v does not carry its trials", tc, got)
		}
	}

	// A DP-SGD run (σ = 1, q = 256/60000, 14 epochs): ten runs composed
	// cost far more than a search of ten in expectation.
	ph := []Phase{{Sigma: 1, SampleRate: 256.0 / 60000, Steps: 3282}}
	acc, _ := New(RDP)
	for range 10 {
		_ = acc.Step(1, 256.0/60000, 3282)
	}
	comp, _ := acc.Epsilon(delta)
	var prev float64
	for _, mean := range []float64{2, 5, 10, 100} {
		tr, _ := NewTrials(0, mean)
		r, err := SearchEpsilon(ph, 0, tr, delta, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Epsilon <= prev {
			t.Errorf("mean %v: ε %v not above the smaller mean's %v", mean, r.Epsilon, prev)
		}
		prev = r.Epsilon
		if mean == 10 && !(r.Epsilon < comp.Epsilon) {
			t.Errorf("a search of 10 runs in expectation spends ε %v, not below 10 runs composed (%v)", r.Epsilon, comp.Epsilon)
		}
		t.Logf("mean %v: one run ε %.3f, the search ε %.3f (order %v); ten runs composed %.3f", mean, r.RunEpsilon, r.Epsilon, r.Order, comp.Epsilon)
	}
	tr, _ := NewTrials(0, 10)
	a, _ := SearchEpsilon(ph, 50, tr, delta, Options{})
	b, _ := SearchEpsilon(ph, 5, tr, delta, Options{})
	c, _ := SearchEpsilon(ph, 0, tr, delta, Options{})
	if !(c.Epsilon < a.Epsilon && a.Epsilon < b.Epsilon) {
		t.Errorf("ε with the scores' noise multiplier ∞, 50, 5: %v, %v, %v: want rising", c.Epsilon, a.Epsilon, b.Epsilon)
	}

	for _, bad := range []struct {
		ph    []Phase
		s     float64
		tr    Trials
		delta float64
	}{
		{nil, 0, tr, delta},
		{ph, -1, tr, delta},
		{ph, math.NaN(), tr, delta},
		{ph, 0, Trials{Eta: 0, Gamma: 1}, delta},
		{ph, 0, tr, 0},
		{[]Phase{{Sigma: 0, SampleRate: 0.1, Steps: 1}}, 0, tr, delta},
	} {
		if _, err := SearchEpsilon(bad.ph, bad.s, bad.tr, bad.delta, Options{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("SearchEpsilon(%v, %v, %v, %v) = %v, want ErrInvalid", bad.ph, bad.s, bad.tr, bad.delta, err)
		}
	}
}

func TestCalibrateSearch(t *testing.T) {
	const delta, q, steps = 1e-5, 256.0 / 60000, 3282
	tr, _ := NewTrials(0, 10)
	for _, target := range []float64{3, 8} {
		sigma, r, err := CalibrateSearch(target, delta, q, steps, 100, tr)
		if err != nil {
			t.Fatal(err)
		}
		at, _ := SearchEpsilon([]Phase{{Sigma: sigma, SampleRate: q, Steps: steps}}, 100, tr, delta, Options{})
		if r.Epsilon > target || at.Epsilon != r.Epsilon {
			t.Errorf("target %v: σ %v spends %v (reported %v)", target, sigma, at.Epsilon, r.Epsilon)
		}
		below, _ := SearchEpsilon([]Phase{{Sigma: sigma * (1 - 1e-5), SampleRate: q, Steps: steps}}, 100, tr, delta, Options{})
		if below.Epsilon <= target {
			t.Errorf("target %v: σ %v is not the least (%v also meets it: %v)", target, sigma, sigma*(1-1e-5), below.Epsilon)
		}
		// A single run at the same target needs less noise.
		one, _ := CalibrateSigma(RDP, target, delta, q, steps)
		if !(one.Sigma < sigma) {
			t.Errorf("target %v: a search's σ %v not above one run's %v", target, sigma, one.Sigma)
		}
		t.Logf("target ε %v: σ %.4f for the search, %.4f for one run", target, sigma, one.Sigma)
	}
	// The scores' noise alone (σ_s = 0.3: ε ≈ 15) does not vanish with σ.
	if _, _, err := CalibrateSearch(1, delta, q, steps, 0.3, tr); !errors.Is(err, ErrUnreachable) {
		t.Errorf("ε 1 with scores of noise multiplier 0.3: %v, want ErrUnreachable", err)
	}
	if _, _, err := CalibrateSearch(-1, delta, q, steps, 0, tr); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative target: %v, want ErrInvalid", err)
	}
}

// TestSearchEpsilonOf: a search drawing among mechanisms spends what the
// pointwise largest of their RDP curves gives — the one with the least
// noise where the others' sample rate and steps are the same, and at
// least each mechanism's own search otherwise.
func TestSearchEpsilonOf(t *testing.T) {
	const delta = 1e-5
	tr, _ := NewTrials(1, 5)
	a := []Phase{{Sigma: 1, SampleRate: 0.01, Steps: 2000}}
	b := []Phase{{Sigma: 1.3, SampleRate: 0.01, Steps: 2000}}
	c := []Phase{{Sigma: 2, SampleRate: 0.04, Steps: 500}}
	ra, _ := SearchEpsilon(a, 20, tr, delta, Options{})
	rab, err := SearchEpsilonOf([][]Phase{b, a}, 20, tr, delta, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rab.Epsilon != ra.Epsilon || rab.RunEpsilon != ra.RunEpsilon {
		t.Errorf("σ 1 and 1.3 at the same q and steps: ε %v (one run %v), want σ 1's %v (%v)", rab.Epsilon, rab.RunEpsilon, ra.Epsilon, ra.RunEpsilon)
	}
	rc, _ := SearchEpsilon(c, 20, tr, delta, Options{})
	rac, _ := SearchEpsilonOf([][]Phase{a, c}, 20, tr, delta, Options{})
	if !(rac.Epsilon >= ra.Epsilon && rac.Epsilon >= rc.Epsilon) || rac.Steps != 2000 {
		t.Errorf("mechanisms a and c: ε %v (%d steps), each alone %v and %v", rac.Epsilon, rac.Steps, ra.Epsilon, rc.Epsilon)
	}
	if _, err := SearchEpsilonOf([][]Phase{a, nil}, 0, tr, delta, Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a mechanism without phases: %v, want ErrInvalid", err)
	}
}

// TestCalibrateSearchOf: the σ of each mechanism holds one run of it to a
// common ε, and together they meet the search's target to within the
// bisection's tolerance; one mechanism is CalibrateSearch's.
func TestCalibrateSearchOf(t *testing.T) {
	const delta = 1e-5
	tr, _ := NewTrials(1, 5)
	mechs := []Mechanism{{SampleRate: 0.01, Steps: 2000}, {SampleRate: 0.04, Steps: 500}, {SampleRate: 0.02, Steps: 3000}}
	sigmas, r, err := CalibrateSearchOf(3, delta, mechs, 20, tr)
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]Phase
	var eps []float64
	for i, m := range mechs {
		runs = append(runs, []Phase{{Sigma: sigmas[i], SampleRate: m.SampleRate, Steps: m.Steps}})
		a, _ := New(RDP)
		a.Step(sigmas[i], m.SampleRate, m.Steps)
		e, _ := a.Epsilon(delta)
		eps = append(eps, e.Epsilon)
	}
	got, _ := SearchEpsilonOf(runs, 20, tr, delta, Options{})
	if got.Epsilon > 3 || got.Epsilon < 3*(1-2e-3) || got.Epsilon != r.Epsilon {
		t.Errorf("σs %v spend %v (reported %v); want just under 3", sigmas, got.Epsilon, r.Epsilon)
	}
	for i := range eps {
		if !(math.Abs(eps[i]-eps[0]) <= 1e-4*eps[0]) { // NaN fails too
			t.Errorf("one run's ε per mechanism %v: want equal", eps)
		}
	}
	t.Logf("σs %v, one run's ε %v, the search's %v", sigmas, eps, got.Epsilon)
	one, r1, err := CalibrateSearchOf(3, delta, mechs[:1], 20, tr)
	want, w1, _ := CalibrateSearch(3, delta, 0.01, 2000, 20, tr)
	if err != nil || one[0] != want || r1.Epsilon != w1.Epsilon {
		t.Errorf("one mechanism: σ %v (%v), CalibrateSearch's %v", one, err, want)
	}
	if _, _, err := CalibrateSearchOf(1, delta, mechs, 0.3, tr); !errors.Is(err, ErrUnreachable) {
		t.Errorf("scores of noise multiplier 0.3: %v, want ErrUnreachable", err)
	}
}
