package audit

import (
	"math"
	"testing"
)

// TestPValue compares PValue at ε = log 3 (randomized-response accuracy
// p = 3/4) with an exact rational recomputation of the same formula
// (testdata/pvalue_ref.py, Python fractions): relative error 1e-12.
func TestPValue(t *testing.T) {
	for _, c := range []struct {
		m, r, v int
		delta   float64
		want    float64
	}{
		{100, 50, 40, 0, 0.2622023101895092},
		{100, 50, 40, 1e-5, 0.2624521997590525},
		{1000, 200, 150, 1e-5, 0.5391809124340649},
		{10, 10, 10, 0.01, 0.10428428649902344},
	} {
		got := PValue(c.m, c.r, c.v, math.Log(3), c.delta)
		if !(math.Abs(got-c.want) <= 1e-12*c.want) { // NaN fails too
			t.Errorf("PValue(%d, %d, %d, log 3, %g) = %.16g, want %.16g", c.m, c.r, c.v, c.delta, got, c.want)
		}
	}
}

// TestEpsilonLowerBound: with δ = 0 and every guess right the bound has a
// closed form, P[Bin(r, p) ≥ r] = p^r = 1 - confidence, so
// ε = log(p/(1-p)) with p = (1-confidence)^(1/r): about 5.81 for 1000
// guesses at 95 % (the saturation the docs quote). Chance-level guessing
// gives 0, more correct guesses never lower the bound, δ > 0 only lowers
// it, and bad arguments are errors.
func TestEpsilonLowerBound(t *testing.T) {
	for _, r := range []int{10, 200, 1000} {
		got, err := EpsilonLowerBound(r, r, r, 0, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		p := math.Pow(0.05, 1/float64(r))
		if want := math.Log(p / (1 - p)); math.Abs(got-want) > 1e-5 {
			t.Errorf("r = v = %d: bound %.6f, closed form %.6f", r, got, want)
		}
	}
	if got, _ := EpsilonLowerBound(1000, 1000, 1000, 0, 0.95); math.Abs(got-5.81) > 0.01 {
		t.Errorf("1000 correct guesses: bound %.4f, want about 5.81", got)
	}
	if got, _ := EpsilonLowerBound(1000, 500, 250, 1e-5, 0.95); got != 0 {
		t.Errorf("chance-level guesses: bound %v, want 0", got)
	}
	prev := 0.0
	for v := 250; v <= 500; v += 10 {
		got, _ := EpsilonLowerBound(1000, 500, v, 1e-5, 0.95)
		if got < prev {
			t.Errorf("v = %d: bound %v below %v at fewer correct guesses", v, got, prev)
		}
		prev = got
	}
	a, _ := EpsilonLowerBound(1000, 500, 480, 0, 0.95)
	b, _ := EpsilonLowerBound(1000, 500, 480, 1e-4, 0.95)
	if !(b <= a && b > 0) {
		t.Errorf("δ = 1e-4 gives %v, δ = 0 gives %v: want 0 < δ's ≤ δ=0's", b, a)
	}
	for _, c := range []struct {
		m, r, v      int
		delta, level float64
	}{{10, 11, 5, 0, 0.95}, {10, 5, 6, 0, 0.95}, {0, 0, 0, 0, 0.95}, {10, 5, 5, -1, 0.95}, {10, 5, 5, 0, 1}, {10, 5, 5, 0, 0}} {
		if _, err := EpsilonLowerBound(c.m, c.r, c.v, c.delta, c.level); err == nil {
			t.Errorf("EpsilonLowerBound%+v: want an error", c)
		}
	}
}

// TestGuess: the k+ highest scores are guessed in, the k− lowest out.
func TestGuess(t *testing.T) {
	scores := []float64{5, -1, 3, 0, -7, 2}
	in := []bool{true, false, false, true, false, true}
	// Ranked: 5(in) 3(out) 2(in) 0(in) -1(out) -7(out).
	for _, c := range []struct{ kp, km, r, v int }{{1, 1, 2, 2}, {2, 2, 4, 3}, {3, 0, 3, 2}, {0, 3, 3, 2}, {3, 3, 6, 4}} {
		r, v := Guess(scores, in, c.kp, c.km)
		if r != c.r || v != c.v {
			t.Errorf("k+ %d k- %d: r %d v %d, want %d %d", c.kp, c.km, r, v, c.r, c.v)
		}
	}
}
