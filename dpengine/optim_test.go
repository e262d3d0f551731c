package dpengine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// legacyAdamStep is the scalar update Adam.Step ran before the SSE2 kernel
// (PyTorch's formulation), with every product rounded on its own as amd64
// computes it.
func legacyAdamStep(o *Adam, step int64, p, g, m, v []float32) {
	b1, b2 := o.Beta1, o.Beta2
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	stepSize := float32(o.LR / bc1)
	sqrtBC2 := float32(math.Sqrt(bc2))
	eps, wd, lr := float32(o.Eps), float32(o.WeightDecay), float32(o.LR)
	fb1, fb2 := float32(b1), float32(b2)
	for i := range p {
		d := g[i]
		if o.Decoupled {
			p[i] = float32(p[i] * (1 - float32(lr*wd)))
		} else {
			d += float32(wd * p[i])
		}
		m[i] = float32(fb1*m[i]) + float32((1-fb1)*d)
		v[i] = float32(fb2*v[i]) + float32(float32((1-fb2)*d)*d)
		p[i] -= float32(stepSize*m[i]) / (float32(math.Sqrt(float64(v[i])))/sqrtBC2 + eps)
	}
}

func randSlices(r *rand.Rand, sizes []int, scale float64) [][]float32 {
	out := make([][]float32, len(sizes))
	for k, n := range sizes {
		out[k] = make([]float32, n)
		for i := range out[k] {
			out[k][i] = float32(r.NormFloat64() * scale)
		}
	}
	return out
}

// TestAdamMatchesLegacyScalar: Adam and AdamW, with and without weight
// decay, over several steps on tensors spread over the cores, give the
// previous scalar update's results bit for bit; stepScaled(s) on g gives
// Step on the rounded s·g bit for bit.
func TestAdamMatchesLegacyScalar(t *testing.T) {
	sizes := []int{3, spanGrain*2 + 5, 0, 1000, 17}
	for _, decoupled := range []bool{false, true} {
		for _, wd := range []float64{0, 0.05} {
			t.Run(fmt.Sprintf("decoupled=%v/wd=%v", decoupled, wd), func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, 2))
				p := randSlices(r, sizes, 1)
				ref := copyLists(p)
				scaled := copyLists(p)
				m, v := zerosLike(p), zerosLike(p)
				o, os := NewAdam(1e-2, wd, decoupled), NewAdam(1e-2, wd, decoupled)
				const s = float32(1.0 / 12)
				for step := int64(1); step <= 4; step++ {
					g := randSlices(r, sizes, math.Pow(10, float64(step-3)))
					gs := copyLists(g)
					for k := range g {
						for i := range g[k] {
							gs[k][i] *= s
						}
					}
					if err := o.Step(p, gs); err != nil {
						t.Fatal(err)
					}
					if err := os.stepScaled(scaled, g, s); err != nil {
						t.Fatal(err)
					}
					for k := range ref {
						legacyAdamStep(o, step, ref[k], gs[k], m[k], v[k])
					}
				}
				for k := range ref {
					for i := range ref[k] {
						if !sameBits(p[k][i], ref[k][i]) || !sameBits(o.m.views[k][i], m[k][i]) || !sameBits(o.v.views[k][i], v[k][i]) {
							t.Fatalf("[%d][%d]: θ %v m %v v %v, legacy θ %v m %v v %v", k, i, p[k][i], o.m.views[k][i], o.v.views[k][i], ref[k][i], m[k][i], v[k][i])
						}
						if !sameBits(scaled[k][i], p[k][i]) {
							t.Fatalf("[%d][%d]: scaled step θ %v, pre-scaled %v", k, i, scaled[k][i], p[k][i])
						}
					}
				}
			})
		}
	}
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// TestSGDScaled: stepScaled(s) on g is Step on the rounded s·g.
func TestSGDScaled(t *testing.T) {
	sizes := []int{spanGrain + 3, 9}
	for _, mu := range []float64{0, 0.9} {
		r := rand.New(rand.NewPCG(3, 4))
		p := randSlices(r, sizes, 1)
		q := copyLists(p)
		a := &SGD{LR: 0.1, Momentum: mu, WeightDecay: 0.01}
		b := &SGD{LR: 0.1, Momentum: mu, WeightDecay: 0.01}
		for range 3 {
			g := randSlices(r, sizes, 1)
			gs := copyLists(g)
			for k := range gs {
				for i := range gs[k] {
					gs[k][i] *= 0.125
				}
			}
			a.Step(p, gs)
			b.stepScaled(q, g, 0.125)
		}
		for k := range p {
			for i := range p[k] {
				if !sameBits(p[k][i], q[k][i]) {
					t.Fatalf("momentum %v [%d][%d]: scaled %v, pre-scaled %v", mu, k, i, q[k][i], p[k][i])
				}
			}
		}
	}
}

// plainOptimizer hides an optimizer's stepScaled, so the engine divides the
// gradient in a pass of its own.
type plainOptimizer struct{ Optimizer }

// TestNonDPFusedScale: in nondp mode the engine leaves the gradient in the
// plan and the division by the expected batch size to the optimizer; its
// update and Gradient equal those of an optimizer that gets the divided
// gradient, bit for bit, for empty, one- and multi-physical-batch logical
// batches, and Gradient is the mean gradient (the physical batches'
// ClippedSum, summed and divided).
func TestNonDPFusedScale(t *testing.T) {
	gd := loadGolden(t, "cnn")
	sl := len(gd.x) / len(gd.y)
	fill := func(idx []int, xs []float32, ys []int64) error {
		for k, i := range idx {
			i %= len(gd.y)
			copy(xs[k*sl:(k+1)*sl], gd.x[i*sl:(i+1)*sl])
			ys[k] = gd.y[i]
		}
		return nil
	}
	cfg := Config{Mode: NonDP, ExpectedBatch: 10, PhysicalBatch: 8}
	for _, opt := range []string{"adamw", "sgd"} {
		cfg.Optimizer, _ = NewOptimizer(opt, 1e-2, 0.9, 0.01)
		fused := buildEngine(t, "cnn", cfg)
		o, _ := NewOptimizer(opt, 1e-2, 0.9, 0.01)
		cfg.Optimizer = plainOptimizer{o}
		plain := buildEngine(t, "cnn", cfg)
		for _, n := range []int{8, 0, 16, 11, 3} {
			batch := make([]int, n)
			for i := range batch {
				batch[i] = i
			}
			// The mean gradient at the current weights, physical batch by
			// physical batch.
			want := map[string][]float32{}
			for _, phys := range Split(batch, 8) {
				x, y := make([]float32, len(phys)*sl), make([]int64, len(phys))
				fill(phys, x, y)
				sums, _, err := plain.ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				for name, g := range sums {
					if w := want[name]; w != nil {
						runtime.CPU{}.Add(g, w)
					} else {
						want[name] = g
					}
				}
			}
			for _, w := range want {
				runtime.CPU{}.Scale(float32(1.0/10), w)
			}
			if _, err := fused.Step(batch, fill); err != nil {
				t.Fatal(err)
			}
			if _, err := plain.Step(batch, fill); err != nil {
				t.Fatal(err)
			}
			for k, name := range fused.ParamNames() {
				a, b := fused.Params()[k], plain.Params()[k]
				for i := range a {
					if !sameBits(a[i], b[i]) {
						t.Fatalf("%s batch %d %s[%d]: fused %v, plain %v", opt, n, name, i, a[i], b[i])
					}
				}
				ga, gb := fused.Gradient(name), plain.Gradient(name)
				for i := range ga {
					if !sameBits(ga[i], gb[i]) {
						t.Fatalf("%s batch %d gradient %s[%d]: fused %v, plain %v", opt, n, name, i, ga[i], gb[i])
					}
					w := float32(0) // an empty batch
					if want[name] != nil {
						w = want[name][i]
					}
					if !sameBits(ga[i], w) {
						t.Fatalf("%s batch %d gradient %s[%d]: %v, want the mean gradient %v", opt, n, name, i, ga[i], w)
					}
				}
			}
		}
	}
}

// BenchmarkAdamStep: one AdamW step over 2²² parameters in two tensors,
// on all cores.
func BenchmarkAdamStep(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	p := randSlices(r, []int{3 << 20, 1 << 20}, 1)
	g := randSlices(r, []int{3 << 20, 1 << 20}, 1e-3)
	o := NewAdam(1e-3, 0.01, true)
	b.SetBytes(7 * 4 << 22)
	for i := 0; i < b.N; i++ {
		o.Step(p, g)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(1<<22), "ns/elem")
}

// TestNoiseFusedWithUpdate: in DP modes the engine draws each piece's noise
// and runs the optimizer on it right away. Against an optimizer that only
// offers the plain Step (noise pass, then update), with the same seed, the
// parameters and the private gradient are bitwise equal, for Adam, AdamW
// and SGD, over several steps and batch sizes (one and two physical
// batches, and an empty one, which still draws noise and updates).
func TestNoiseFusedWithUpdate(t *testing.T) {
	gd := loadGolden(t, "cnn")
	sl := len(gd.x) / len(gd.y)
	fill := func(idx []int, xs []float32, ys []int64) error {
		for k, i := range idx {
			i %= len(gd.y)
			copy(xs[k*sl:(k+1)*sl], gd.x[i*sl:(i+1)*sl])
			ys[k] = gd.y[i]
		}
		return nil
	}
	for _, opt := range []string{"adam", "adamw", "sgd"} {
		mk := func(plain bool) *Engine {
			o, _ := NewOptimizer(opt, 1e-2, 0.9, 0.01)
			if plain {
				o = plainOptimizer{o}
			}
			cfg := Config{Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 0.7,
				ExpectedBatch: 10, PhysicalBatch: 8, Source: NewSeededSource(9), Optimizer: o}
			return buildEngine(t, "cnn", cfg)
		}
		fused, plain := mk(false), mk(true)
		for _, n := range []int{8, 16, 0, 11} {
			batch := make([]int, n)
			for i := range batch {
				batch[i] = i
			}
			for _, e := range []*Engine{fused, plain} {
				if _, err := e.Step(batch, fill); err != nil {
					t.Fatal(err)
				}
			}
			for k, name := range fused.ParamNames() {
				a, b := fused.Params()[k], plain.Params()[k]
				ga, gb := fused.Gradient(name), plain.Gradient(name)
				for i := range a {
					if !sameBits(a[i], b[i]) || !sameBits(ga[i], gb[i]) {
						t.Fatalf("%s batch %d %s[%d]: fused %v (gradient %v), plain %v (gradient %v)", opt, n, name, i, a[i], ga[i], b[i], gb[i])
					}
				}
			}
		}
	}
}

// TestSetLR: an optimizer whose rate is set between steps (a schedule)
// updates as one built with that rate from the start — the state it
// carries aside — bit for bit, for SGD with momentum, Adam and AdamW
// (whose decoupled decay follows the rate).
func TestSetLR(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sizes := []int{5, 70}
	for _, name := range []string{"sgd", "adam", "adamw"} {
		a, _ := NewOptimizer(name, 0.1, 0.9, 0.01)
		b, _ := NewOptimizer(name, 0.1, 0.9, 0.01)
		pa := randSlices(r, sizes, 1)
		pb := copyLists(pa)
		for step, lr := range []float64{0.1, 0.03, 0.007} {
			g := randSlices(r, sizes, 1)
			a.SetLR(lr)
			if step > 0 {
				// b: a fresh optimizer of rate lr with a's state.
				st := b.State()
				b, _ = NewOptimizer(name, lr, 0.9, 0.01)
				if err := b.SetState(st); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Step(pa, g); err != nil {
				t.Fatal(err)
			}
			if err := b.Step(pb, g); err != nil {
				t.Fatal(err)
			}
			for k := range pa {
				if !numcheck.SameBits(pa[k], pb[k]) {
					t.Fatalf("%s step %d (rate %v): SetLR's update differs from an optimizer built with the rate", name, step, lr)
				}
			}
		}
	}
}
