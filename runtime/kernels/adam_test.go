package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// adamData returns n values mixing ordinary normals with the awkward
// cases: zeros of both signs, tiny (down to subnormal) and huge
// magnitudes; with nonneg, their absolute values (a second moment).
func adamData(r *rand.Rand, n int, nonneg bool) []float32 {
	s := make([]float32, n)
	for i := range s {
		x := float32(r.NormFloat64())
		switch r.IntN(10) {
		case 0:
			x = 0
		case 1:
			x = float32(math.Copysign(0, -1))
		case 2:
			x *= 1e-30
		case 3:
			x *= 1e-41 // subnormal
		case 4:
			x *= 1e30
		case 5:
			x *= 1e-4
		}
		if nonneg {
			x = float32(math.Abs(float64(x)))
		}
		s[i] = x
	}
	return s
}

// adamCoeffs returns the coefficients of step t of Adam (decoupled: AdamW)
// as dpengine computes them.
func adamCoeffs(lr, wd float64, decoupled bool, t int, gradScale float32) AdamCoeffs {
	b1, b2 := 0.9, 0.999
	c := AdamCoeffs{
		GradScale: gradScale, Decay: 1,
		Beta1: float32(b1), OneMinusBeta1: 1 - float32(b1),
		Beta2: float32(b2), OneMinusBeta2: 1 - float32(b2),
		StepSize: float32(lr / (1 - math.Pow(b1, float64(t)))),
		SqrtBC2:  float32(math.Sqrt(1 - math.Pow(b2, float64(t)))),
		Eps:      1e-8,
	}
	if decoupled {
		c.Decay = 1 - float32(lr)*float32(wd)
	} else {
		c.L2 = float32(wd)
	}
	return c
}

func sameFloat32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// TestAdamUpdateMatchesScalar: the AVX and SSE2 kernels (where built and
// usable, each on its own) and the Go reference agree bit for bit, on
// every length (tails included), with and without weight decay, decoupled
// or not, with a gradient scale.
func TestAdamUpdateMatchesScalar(t *testing.T) {
	testAdamUpdateMatchesScalar(t)
	if haveAdamAVX {
		// The SSE2 kernel alone, as on a CPU without AVX.
		haveAdamAVX = false
		defer func() { haveAdamAVX = true }()
		testAdamUpdateMatchesScalar(t)
	}
}

func testAdamUpdateMatchesScalar(t *testing.T) {
	r := newRand(1)
	for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 33, 1000} {
		for _, decoupled := range []bool{false, true} {
			for _, wd := range []float64{0, 0.01} {
				for _, gs := range []float32{1, 1.0 / 16} {
					for _, step := range []int{1, 10, 1000} {
						name := fmt.Sprintf("n%d/decoupled=%v/wd%v/gs%v/t%d", n, decoupled, wd, gs, step)
						c := adamCoeffs(1e-3, wd, decoupled, step, gs)
						p, g := adamData(r, n, false), adamData(r, n, false)
						m, v := adamData(r, n, false), adamData(r, n, true)
						p2, m2, v2 := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
						AdamUpdate(p, g, m, v, c)
						adamScalar(p2, g, m2, v2, c)
						for i := range p {
							if !sameFloat32(p[i], p2[i]) || !sameFloat32(m[i], m2[i]) || !sameFloat32(v[i], v2[i]) {
								t.Fatalf("%s [%d]: kernel θ %v m %v v %v, scalar θ %v m %v v %v", name, i, p[i], m[i], v[i], p2[i], m2[i], v2[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestAdamUpdateAccuracy compares the float32 update with the same
// formula in float64 (from the same float32 gradient d): the moments within 2 ulps of the sum of their terms'
// magnitudes, the step Δθ (from the float32 moments) within 4 ulps.
func TestAdamUpdateAccuracy(t *testing.T) {
	r := newRand(2)
	const ulp = 1.0 / (1 << 23)
	const n = 4099
	for _, decoupled := range []bool{false, true} {
		for _, wd := range []float64{0, 0.1} {
			c := adamCoeffs(1e-3, wd, decoupled, 7, 0.25)
			p, g := randn(r, n), randn(r, n)
			m, v := randn(r, n), randn(r, n)
			for i := range v {
				v[i] *= v[i]
			}
			p0, m0, v0 := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
			AdamUpdate(p, g, m, v, c)
			for i := range p {
				x := float64(p0[i]) * float64(c.Decay)
				// d as the kernel rounds it: its cancellation is not the
				// moments' error.
				x32 := p0[i] * c.Decay
				d := float64(float32(g[i]*c.GradScale) + float32(c.L2*x32))
				mt := [2]float64{float64(c.Beta1) * float64(m0[i]), float64(c.OneMinusBeta1) * d}
				vt := [2]float64{float64(c.Beta2) * float64(v0[i]), float64(c.OneMinusBeta2) * d * d}
				if e := math.Abs(float64(m[i]) - (mt[0] + mt[1])); e > 2*ulp*(math.Abs(mt[0])+math.Abs(mt[1])) {
					t.Fatalf("m[%d] = %v, want %v", i, m[i], mt[0]+mt[1])
				}
				if e := math.Abs(float64(v[i]) - (vt[0] + vt[1])); e > 2*ulp*(vt[0]+vt[1]) {
					t.Fatalf("v[%d] = %v, want %v", i, v[i], vt[0]+vt[1])
				}
				step := float64(c.StepSize) * float64(m[i]) / (math.Sqrt(float64(v[i]))/float64(c.SqrtBC2) + float64(c.Eps))
				want := x - step
				if e := math.Abs(float64(p[i]) - want); e > 4*ulp*math.Abs(step)+ulp*math.Abs(want) {
					t.Fatalf("θ[%d] = %v, want %v (step %v)", i, p[i], want, step)
				}
			}
		}
	}
}

// BenchmarkAdamUpdate: one AdamW update of 2²⁰ parameters on one core.
func BenchmarkAdamUpdate(b *testing.B) {
	const n = 1 << 20
	r := newRand(3)
	p, g, m, v := randn(r, n), randn(r, n), make([]float32, n), make([]float32, n)
	c := adamCoeffs(1e-3, 0.01, true, 3, 1)
	b.SetBytes(7 * 4 * n)
	for i := 0; i < b.N; i++ {
		AdamUpdate(p, g, m, v, c)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
}

func BenchmarkAdamScalar(b *testing.B) {
	const n = 1 << 20
	r := newRand(3)
	p, g, m, v := randn(r, n), randn(r, n), make([]float32, n), make([]float32, n)
	c := adamCoeffs(1e-3, 0.01, true, 3, 1)
	b.SetBytes(7 * 4 * n)
	for i := 0; i < b.N; i++ {
		adamScalar(p, g, m, v, c)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
}
