package reference

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The optimizer updates (runtime.OptimOps). Their contract asks for every
// product and sum rounded to float32 on its own, so that every device
// gives the same parameters bit for bit: each operation below is made in
// float64 on float32 operands and rounded to float32 at once, which is the
// correctly rounded float32 operation (a float64 product of two float32
// values is exact, and a float64 sum, quotient or square root rounded to
// float32 is the float32 one: 53 ≥ 2·24 + 2).

// mul32, add32, sub32 and div32 are the float32 operations, each rounded once.
func mul32(a, b float32) float32 { return float32(float64(a) * float64(b)) }
func add32(a, b float32) float32 { return float32(float64(a) + float64(b)) }
func sub32(a, b float32) float32 { return float32(float64(a) - float64(b)) }
func div32(a, b float32) float32 { return float32(float64(a) / float64(b)) }

// AdamUpdate implements runtime.OptimOps, PyTorch's Adam/AdamW step in the
// order runtime.AdamCoeffs states it: θ ← θ·Decay; d ← g·GradScale (+
// L2·θ when L2 ≠ 0, Adam's penalty); m ← β₁·m + (1−β₁)·d; v ← β₂·v +
// ((1−β₂)·d)·d; θ ← θ − (StepSize·m) / (√v/SqrtBC2 + ε).
func (Device) AdamUpdate(p, g, m, v []float32, c runtime.AdamCoeffs) {
	for i := range p {
		x := mul32(p[i], c.Decay)
		d := mul32(g[i], c.GradScale)
		if c.L2 != 0 {
			d = add32(d, mul32(c.L2, x))
		}
		mi := add32(mul32(c.Beta1, m[i]), mul32(c.OneMinusBeta1, d))
		vi := add32(mul32(c.Beta2, v[i]), mul32(mul32(c.OneMinusBeta2, d), d))
		m[i], v[i] = mi, vi
		den := add32(div32(float32(math.Sqrt(float64(vi))), c.SqrtBC2), c.Eps)
		p[i] = sub32(x, div32(mul32(c.StepSize, mi), den))
	}
}

// SGDUpdate implements runtime.OptimOps, PyTorch's SGD in the order
// runtime.SGDCoeffs states it: d ← g·GradScale + λ·θ; v ← d on the first
// step, μ·v + d after; θ ← θ − η·v (θ ← θ − η·d without momentum).
func (Device) SGDUpdate(p, g, vel []float32, c runtime.SGDCoeffs) {
	for i := range p {
		d := add32(mul32(g[i], c.GradScale), mul32(c.WeightDecay, p[i]))
		if c.Momentum == 0 {
			p[i] = sub32(p[i], mul32(c.LR, d))
			continue
		}
		if c.First {
			vel[i] = d
		} else {
			vel[i] = add32(mul32(c.Momentum, vel[i]), d)
		}
		p[i] = sub32(p[i], mul32(c.LR, vel[i]))
	}
}

// AverageUpdate implements runtime.OptimOps in the order it states: avg ←
// avg + w·(p − avg), each operation rounded to float32.
func (Device) AverageUpdate(avg, p []float32, w float32) {
	for i := range avg {
		avg[i] = add32(avg[i], mul32(w, sub32(p[i], avg[i])))
	}
}
