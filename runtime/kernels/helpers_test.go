package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// forEachBackend runs f once per available BLAS backend.
func forEachBackend(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, be := range blas.Available() {
		t.Run(be, func(t *testing.T) {
			prev, err := blas.SetBackend(be)
			if err != nil {
				t.Fatal(err)
			}
			defer blas.SetBackend(prev)
			f(t)
		})
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

func randn(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// randAway returns normal samples at least margin away from every kink in
// kinks, so finite differences do not straddle a non-differentiable point.
func randAway(r *rand.Rand, n int, margin float64, kinks ...float64) []float32 {
	s := make([]float32, n)
	for i := range s {
	again:
		v := r.NormFloat64()
		for _, k := range kinks {
			if math.Abs(v-k) < margin {
				goto again
			}
		}
		s[i] = float32(v)
	}
	return s
}

// distinct returns a random permutation of evenly spaced values, so max
// operations have no ties.
func distinct(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i, p := range r.Perm(n) {
		s[i] = float32(p)*0.05 - float32(n)*0.025
	}
	return s
}

func allClose(t *testing.T, name string, got []float32, want []float64, atol, rtol float64) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s: got %d values, want %d", name, len(got), len(want))
	}
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > atol+rtol*math.Abs(w) {
			t.Fatalf("%s: [%d] = %g, want %g", name, i, g, w)
		}
	}
}

func allClose32(t *testing.T, name string, got, want []float32, atol, rtol float64) {
	t.Helper()
	w := make([]float64, len(want))
	for i, v := range want {
		w[i] = float64(v)
	}
	allClose(t, name, got, w, atol, rtol)
}

// param is one float input of an op under a gradient check.
type param struct {
	name string
	x    []float32 // perturbed in place
	grad []float32 // analytic gradient (filled by the backward closure)
}

// gradCheck compares analytic gradients with central differences of the
// scalar L = Σ r·y for a random r. fwd recomputes the output from the
// params' current values; bwd receives dy = r and must fill each param's
// grad. At most maxCoords coordinates per param are probed.
func gradCheck(t *testing.T, name string, r *rand.Rand, params []*param, fwd func() []float32, bwd func(dy []float32)) {
	t.Helper()
	gradCheckTol(t, name, r, params, fwd, bwd, 1e-2, 2e-3, 2e-2)
}

func gradCheckTol(t *testing.T, name string, r *rand.Rand, params []*param, fwd func() []float32, bwd func(dy []float32), h, atol, rtol float64) {
	t.Helper()
	y0 := fwd()
	dy := randn(r, len(y0))
	loss := func() float64 {
		y := fwd()
		var s float64
		for i, v := range y {
			s += float64(dy[i]) * float64(v)
		}
		return s
	}
	bwd(dy)
	const maxCoords = 24
	for _, p := range params {
		idx := r.Perm(len(p.x))
		if len(idx) > maxCoords {
			idx = idx[:maxCoords]
		}
		for _, i := range idx {
			v := p.x[i]
			step := float32(h)
			p.x[i] = v + step
			lp := loss()
			p.x[i] = v - step
			lm := loss()
			p.x[i] = v
			num := (lp - lm) / (2 * float64(step))
			ana := float64(p.grad[i])
			if math.Abs(num-ana) > atol+rtol*math.Max(math.Abs(num), math.Abs(ana)) || math.IsNaN(ana) {
				t.Fatalf("%s: d/d%s[%d]: analytic %g, numeric %g", name, p.name, i, ana, num)
			}
		}
	}
}

func fmtShape(s []int) string { return fmt.Sprint(s) }
