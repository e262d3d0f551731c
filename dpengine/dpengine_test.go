package dpengine

import (
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// bruteGrad computes gᵀa in float64.
func bruteGrad(a []float32, T, D int, g []float32, p int) []float64 {
	out := make([]float64, p*D)
	for j := 0; j < p; j++ {
		for d := 0; d < D; d++ {
			var s float64
			for t := 0; t < T; t++ {
				s += float64(g[t*p+j]) * float64(a[t*D+d])
			}
			out[j*D+d] = s
		}
	}
	return out
}

// TestGhostEqualsInstantiate: the ghost norm, the instantiated gradient's
// norm and a float64 brute force agree, and the book-keeping weighted sum
// equals Σ c_i g_iᵀa_i.
func TestGhostEqualsInstantiate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ B, T, D, p int }{{3, 1, 7, 5}, {2, 9, 12, 4}, {4, 16, 27, 8}, {1, 49, 5, 3}} {
		a := randSlice(r, c.B*c.T*c.D)
		g := randSlice(r, c.B*c.T*c.p)
		ws := make([]float32, 2*c.T*c.T)
		inst := make([]float32, c.p*c.D)
		coef := randSlice(r, c.B)
		want := make([]float64, c.p*c.D)
		for i := 0; i < c.B; i++ {
			ai, gi := a[i*c.T*c.D:(i+1)*c.T*c.D], g[i*c.T*c.p:(i+1)*c.T*c.p]
			ref := bruteGrad(ai, c.T, c.D, gi, c.p)
			var refSq float64
			for k, v := range ref {
				refSq += v * v
				want[k] += float64(coef[i]) * v
			}
			ghost := GhostNormSq(ai, c.T, c.D, gi, c.p, ws)
			in := InstantiateGrad(ai, c.T, c.D, gi, c.p, inst)
			if rel(ghost, refSq) > 1e-4 || rel(in, refSq) > 1e-4 {
				t.Errorf("%+v sample %d: ghost %v, instantiate %v, brute %v", c, i, ghost, in, refSq)
			}
		}
		out := make([]float32, c.p*c.D)
		WeightedGradSum(a, g, coef, c.B, c.T, c.D, c.p, make([]float32, c.B*c.T*c.p), out)
		for k := range out {
			if !(math.Abs(float64(out[k])-want[k]) <= 1e-4*(1+math.Abs(want[k]))) { // NaN fails too
				t.Fatalf("%+v: weighted sum [%d] = %v, want %v", c, k, out[k], want[k])
			}
		}
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Max(math.Abs(b), 1e-12) }

func TestClipFactors(t *testing.T) {
	cases := []struct {
		c    Clipping
		norm float64
		want float64
	}{
		{Clipping{Fn: Abadi, R: 1}, 0.5, 1},
		{Clipping{Fn: Abadi, R: 1}, 4, 0.25},
		{Clipping{Fn: Automatic, R: 1, Gamma: 0.01}, 0.99, 1},
		{Clipping{Fn: Global, R: 1}, 0.99, 1},
		{Clipping{Fn: Global, R: 1}, 1.5, 0},
		{Clipping{Fn: Abadi, R: 1}, math.NaN(), 0},
		{Clipping{Fn: Abadi, R: 1}, math.Inf(1), 0},
	}
	for _, c := range cases {
		got := c.c.Factor(c.norm)
		if !(math.Abs(got-c.want) <= 1e-12) { // NaN fails too
			t.Errorf("%v R=%v: factor(%v) = %v, want %v", c.c.Fn, c.c.R, c.norm, got, c.want)
		}
		// Whatever the function, the clipped norm never exceeds R.
		if n := got * c.norm; n > c.c.R*(1+1e-12) {
			t.Errorf("%v: clipped norm %v exceeds R", c.c.Fn, n)
		}
	}
	if _, err := ParseClipFn("nope"); err == nil {
		t.Error("unknown clip function accepted")
	}
	if err := (Clipping{Fn: Abadi, R: 0}).Validate(); err == nil {
		t.Error("R = 0 accepted")
	}
}

// TestPoissonBatchSizes checks batch sizes against Binomial(n, q) with a
// chi-square-free moment test: over 2000 batches the sample mean is within
// 5 standard errors of nq (false-failure rate < 1e-6) and the variance
// within 15 % of nq(1-q) (the relative standard error of a sample variance
// over 2000 draws is about 3 %: 15 % is 5 of them).
func TestPoissonBatchSizes(t *testing.T) {
	const n, q, steps = 5000, 0.01, 2000
	s, err := NewPoissonSampler(n, q, NewSeededSource(7))
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, n)
	var sum, sumSq float64
	var buf []int
	for i := 0; i < steps; i++ {
		buf = s.Next(buf)
		for j, idx := range buf {
			if idx < 0 || idx >= n || (j > 0 && buf[j-1] >= idx) {
				t.Fatalf("bad batch %v", buf)
			}
			seen[idx] = true
		}
		sum += float64(len(buf))
		sumSq += float64(len(buf)) * float64(len(buf))
	}
	mean := sum / steps
	variance := sumSq/steps - mean*mean
	wantMean, wantVar := n*q, n*q*(1-q)
	if !(math.Abs(mean-wantMean) <= 5*math.Sqrt(wantVar/steps)) { // NaN fails too
		t.Errorf("mean batch %v, want %v", mean, wantMean)
	}
	if !(math.Abs(variance-wantVar) <= 0.15*wantVar) { // NaN fails too
		t.Errorf("batch variance %v, want %v", variance, wantVar)
	}
	// Each example appears with probability 1-(1-q)^2000 ≈ 1 - 2e-9.
	for i, ok := range seen {
		if !ok {
			t.Fatalf("example %d never sampled", i)
		}
	}
	// Tiny q gives empty batches, which are valid.
	s2, _ := NewPoissonSampler(10, 1e-6, NewSeededSource(1))
	if b := s2.Next(nil); len(b) != 0 {
		t.Logf("rare non-empty batch %v", b)
	}
	for _, bad := range []float64{0, -0.1, 1.5, math.NaN()} {
		if _, err := NewPoissonSampler(10, bad, NewSecureSource()); err == nil {
			t.Errorf("q = %v accepted", bad)
		}
	}
}

// TestGaussianNoiseMoments: noise of std σ over 2^20 draws has mean within
// 5 standard errors of 0 and variance within 1 % of σ² (the standard error
// of the sample variance is σ²·√(2/n) ≈ 0.14 %); false-failure rate < 1e-6.
// A seeded source reproduces, a secure one does not.
func TestGaussianNoiseMoments(t *testing.T) {
	const n, std = 1 << 20, 2.5
	x := make([]float32, n)
	NewSeededSource(3).AddGaussian(std, x)
	var sum, sumSq float64
	for _, v := range x {
		sum += float64(v)
		sumSq += float64(v) * float64(v)
	}
	mean := sum / n
	variance := sumSq/n - mean*mean
	if !(math.Abs(mean) <= 5*std/math.Sqrt(n)) { // NaN fails too
		t.Errorf("noise mean %v", mean)
	}
	if !(math.Abs(variance-std*std) <= 0.01*std*std) { // NaN fails too
		t.Errorf("noise variance %v, want %v", variance, std*std)
	}
	y := make([]float32, 1000)
	NewSeededSource(3).AddGaussian(std, y)
	for i := range y {
		if y[i] != x[i] {
			t.Fatal("seeded noise is not reproducible")
		}
	}
	z := make([]float32, 1000)
	NewSecureSource().AddGaussian(std, z)
	w := make([]float32, 1000)
	NewSecureSource().AddGaussian(std, w)
	if z[0] == w[0] && z[1] == w[1] {
		t.Error("two secure sources drew the same noise")
	}
}

// TestGaussianNoiseDistribution checks the ziggurat's whole distribution,
// not only its moments: a Kolmogorov–Smirnov test of 2^20 draws against
// Φ, and the frequency of draws beyond the base strip's edge r (the tail
// algorithm) and beyond 4.5. Thresholds are set for a false-failure rate
// below 1e-6 each: KS critical value √(ln(2/α)/2n); tail counts within
// 5.5 binomial standard deviations.
func TestGaussianNoiseDistribution(t *testing.T) {
	const n = 1 << 20
	x := make([]float32, n)
	NewSeededSource(11).AddGaussian(1, x)
	v := make([]float64, n)
	for i, f := range x {
		v[i] = float64(f)
	}
	sort.Float64s(v)
	var d float64
	for i, f := range v {
		c := 0.5 * math.Erfc(-f/math.Sqrt2)
		d = max(d, math.Abs(c-float64(i)/n), math.Abs(c-float64(i+1)/n))
	}
	if crit := math.Sqrt(math.Log(2/1e-6) / (2 * n)); d > crit {
		t.Errorf("KS distance %.5f > %.5f", d, crit)
	}
	for _, edge := range []float64{3.6541528853610088, 4.5} { // r, the base strip's edge
		p := math.Erfc(edge / math.Sqrt2) // P(|z| > edge)
		var k float64
		for _, f := range v {
			if !(math.Abs(f) <= edge) { // NaN fails too
				k++
			}
		}
		want, sd := n*p, math.Sqrt(n*p*(1-p))
		if !(math.Abs(k-want) <= 5.5*sd) { // NaN fails too
			t.Errorf("%v draws beyond ±%v, want %.1f ± %.1f", k, edge, want, sd)
		}
	}
	// The shape of the tail beyond r: runtime/noise's TestDistribution.
	// Noise and scaling in one pass: (x + std·z)·post.
	y := []float32{1, 2, 3}
	z := []float32{1, 2, 3}
	NewSeededSource(5).addGaussianScaled(runtime.CPU{}, 0.5, 0.25, y)
	NewSeededSource(5).AddGaussian(0.5, z)
	for i := range y {
		if want := z[i] * 0.25; math.Abs(float64(y[i]-want)) > 1e-6 {
			t.Errorf("scaled noise [%d] = %v, want %v", i, y[i], want)
		}
	}
}

// TestAdamMatchesReference checks two Adam steps against values computed
// by hand from PyTorch's update rule.
func TestAdamMatchesReference(t *testing.T) {
	p := [][]float32{{1, -2}}
	g := [][]float32{{0.5, 0.25}}
	o := NewAdam(0.1, 0, false)
	for i := 0; i < 2; i++ {
		if err := o.Step(p, g); err != nil {
			t.Fatal(err)
		}
	}
	// With a constant gradient, m̂ = g and v̂ = g², so each step moves
	// θ by lr·g/(|g|+ε') ≈ lr·sign(g).
	for i, want := range []float64{1 - 0.2, -2 - 0.2} {
		if !(math.Abs(float64(p[0][i])-want) <= 1e-5) { // NaN fails too
			t.Errorf("θ[%d] = %v, want %v", i, p[0][i], want)
		}
	}
	st := o.State()
	o2 := NewAdam(0.1, 0, false)
	if err := o2.SetState(st); err != nil {
		t.Fatal(err)
	}
	p2 := [][]float32{{p[0][0], p[0][1]}}
	o.Step(p, g)
	o2.Step(p2, g)
	if p[0][0] != p2[0][0] || p[0][1] != p2[0][1] {
		t.Error("restored optimizer diverges")
	}
	if err := NewAdam(0.1, 0, true).SetState(st); err == nil {
		t.Error("adam state accepted by adamw")
	}
}

func TestSGDMomentum(t *testing.T) {
	p := [][]float32{{1}}
	o := &SGD{LR: 0.1, Momentum: 0.9}
	o.Step(p, [][]float32{{1}})                     // v = 1, θ = 0.9
	o.Step(p, [][]float32{{1}})                     // v = 1.9, θ = 0.71
	if !(math.Abs(float64(p[0][0])-0.71) <= 1e-6) { // NaN fails too
		t.Errorf("θ = %v, want 0.71", p[0][0])
	}
}

// TestSpansCoverEveryElementOnce: the optimizers' parallel split visits
// every element of uneven parameter lists exactly once, including lists
// that straddle the boundaries of 4 workers and empty ones.
func TestSpansCoverEveryElementOnce(t *testing.T) {
	for _, sizes := range [][]int{
		{5},
		{spanGrain*3 + 7},
		{spanGrain, 0, 3, spanGrain*2 + 1, 17},
		{1, 1, spanGrain*5 - 1},
	} {
		xs := make([][]float32, len(sizes))
		for k, n := range sizes {
			xs[k] = make([]float32, n)
		}
		var mu sync.Mutex
		spans(4, xs, func(k, lo, hi int) {
			mu.Lock()
			defer mu.Unlock()
			for i := lo; i < hi; i++ {
				xs[k][i]++
			}
		})
		for k, x := range xs {
			for i, v := range x {
				if v != 1 {
					t.Fatalf("sizes %v: element %d of list %d visited %v times", sizes, i, k, v)
				}
			}
		}
	}
}
