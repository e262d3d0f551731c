package reference_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// dpAdamCoeffs are PyTorch's Adam (l2) or AdamW (decoupled) coefficients
// of step t.
func dpAdamCoeffs(lr, wd, gradScale float64, t int, decoupled bool) runtime.AdamCoeffs {
	b1, b2 := 0.9, 0.999
	c := runtime.AdamCoeffs{
		GradScale: float32(gradScale), Decay: 1,
		Beta1: float32(b1), OneMinusBeta1: float32(1 - b1), Beta2: float32(b2), OneMinusBeta2: float32(1 - b2),
		StepSize: float32(lr / (1 - math.Pow(b1, float64(t)))), SqrtBC2: float32(math.Sqrt(1 - math.Pow(b2, float64(t)))), Eps: 1e-8,
	}
	if decoupled {
		c.Decay = float32(1 - lr*wd)
	} else {
		c.L2 = float32(wd)
	}
	return c
}

// TestOptimOps: the reference backend's Adam, AdamW and SGD updates and
// the parameters' average are
// the CPU's bit for bit (the contract: every operation rounded to
// float32), over several steps of random gradients, with and without
// weight decay and momentum, on lengths that are and are not multiples of
// the CPU's vector width.
func TestOptimOps(t *testing.T) {
	ref, cpu := reference.Device{}, runtime.CPU{}
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 7, 64, 1003} {
		for _, adam := range []struct {
			name      string
			wd        float64
			decoupled bool
		}{{"adam", 0, false}, {"adam-l2", 0.01, false}, {"adamw", 0.05, true}} {
			t.Run(fmt.Sprintf("%s/%d", adam.name, n), func(t *testing.T) {
				p := dpRand(r, n)
				m, v := make([]float32, n+2), make([]float32, n+2)
				pc, mc, vc := dpClone(p), dpClone(m), dpClone(v)
				for step := 1; step <= 4; step++ {
					g := dpRand(r, n+2)
					c := dpAdamCoeffs(1e-2, adam.wd, 0.25, step, adam.decoupled)
					ref.AdamUpdate(p, g, m, v, c)
					cpu.AdamUpdate(pc, g, mc, vc, c)
					dpSameBits(t, "θ", p, pc)
					dpSameBits(t, "m", m, mc)
					dpSameBits(t, "v", v, vc)
				}
			})
		}
		for _, sgd := range []runtime.SGDCoeffs{
			{LR: 0.1, GradScale: 1},
			{LR: 0.03, WeightDecay: 1e-3, GradScale: 0.125},
			{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-4, GradScale: 0.5},
		} {
			t.Run(fmt.Sprintf("sgd-mu%g-wd%g/%d", sgd.Momentum, sgd.WeightDecay, n), func(t *testing.T) {
				p := dpRand(r, n)
				vel := dpRand(r, n) // stale: the first step must overwrite it
				pc, velc := dpClone(p), dpClone(vel)
				for step := 1; step <= 4; step++ {
					g := dpRand(r, n)
					c := sgd
					c.First = step == 1
					ref.SGDUpdate(p, g, vel, c)
					cpu.SGDUpdate(pc, g, velc, c)
					dpSameBits(t, "θ", p, pc)
					dpSameBits(t, "velocity", vel, velc)
				}
			})
		}
		t.Run(fmt.Sprintf("average/%d", n), func(t *testing.T) {
			avg := dpRand(r, n)
			avgc := dpClone(avg)
			// The warm-up's weights (0.9 first) and the decays' (a few
			// thousandths), on parameters far from and near the average.
			for _, w := range []float32{0.9, 0.5, 1e-3, 1e-4} {
				p := dpRand(r, n+1)
				ref.AverageUpdate(avg, p, w)
				cpu.AverageUpdate(avgc, p, w)
				dpSameBits(t, "average", avg, avgc)
			}
		})
	}
}

// TestOptimOpsByHand: one SGD step with momentum and one Adam step worked
// out by hand.
func TestOptimOpsByHand(t *testing.T) {
	d := reference.Device{}
	p, vel := []float32{1}, []float32{0.5}
	// d = 2·0.5 + 0.5·1 = 1.5; v = 0.5·0.5 + 1.5 = 1.75; θ = 1 − 0.5·1.75.
	d.SGDUpdate(p, []float32{2}, vel, runtime.SGDCoeffs{LR: 0.5, Momentum: 0.5, WeightDecay: 0.5, GradScale: 0.5})
	dpSameBits(t, "SGD θ", p, []float32{0.125})
	dpSameBits(t, "SGD v", vel, []float32{1.75})
	// Adam's first step with β₁ = β₂ = ½ and g = 2: m = ½·2 = 1, v = ½·4 =
	// 2; SqrtBC2 = √2 makes √v/SqrtBC2 = 1 (to rounding) and ε = 0, so θ =
	// 3 − 1·m/1 = 2.
	p, m, v := []float32{3}, []float32{0}, []float32{0}
	d.AdamUpdate(p, []float32{2}, m, v, runtime.AdamCoeffs{GradScale: 1, Decay: 1, Beta1: 0.5, OneMinusBeta1: 0.5, Beta2: 0.5, OneMinusBeta2: 0.5, StepSize: 1, SqrtBC2: float32(math.Sqrt2)})
	dpSameBits(t, "Adam m", m, []float32{1})
	dpSameBits(t, "Adam v", v, []float32{2})
	if !(math.Abs(float64(p[0])-2) <= 1e-6) { // NaN fails too
		t.Errorf("Adam θ = %v, want 2", p[0])
	}
}
