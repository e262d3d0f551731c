package runtime

import "github.com/dpfinetune/dpfinetune/runtime/kernels"

// AdamCoeffs are the step's scalars of OptimOps.AdamUpdate
// (kernels.AdamCoeffs), PyTorch's formulation:
//
//	θ ← θ·Decay
//	d ← g·GradScale + L2·θ
//	m ← Beta1·m + OneMinusBeta1·d
//	v ← Beta2·v + OneMinusBeta2·d·d
//	θ ← θ − StepSize·m / (√v / SqrtBC2 + Eps)
type AdamCoeffs = kernels.AdamCoeffs

// OptimOps is the optimizer part of the DP operation set (DPOps): the
// update applied to the noisy clipped gradient (DESIGN.md §5).
type OptimOps interface {
	// AdamUpdate applies one Adam or AdamW update to p (len(p) elements)
	// with gradient g and moments m, v (at least len(p) elements each),
	// every product and sum rounded to float32 on its own, so that the
	// result is the same bit for bit on every device. It runs on one
	// worker; the engine splits a step's parameters over Workers().
	AdamUpdate(p, g, m, v []float32, c AdamCoeffs)
	// SGDUpdate applies one SGD update to p (len(p) elements) with
	// gradient g and, when c.Momentum ≠ 0, velocity vel (at least len(p)
	// elements each): PyTorch's SGD,
	//
	//	d ← float32(g·GradScale) + WeightDecay·θ
	//	v ← d on the first step (c.First), Momentum·v + d after
	//	θ ← θ − LR·v   (θ ← θ − LR·d without momentum; vel unused)
	//
	// in float32. It runs on one worker, like AdamUpdate.
	SGDUpdate(p, g, vel []float32, c SGDCoeffs)
	// AverageUpdate moves the running average avg (len(avg) elements)
	// towards the parameters p (at least len(avg) elements) by the weight
	// w ∈ (0, 1]:
	//
	//	avg ← avg + w·(p − avg)
	//
	// each difference, product and sum rounded to float32 on its own, so
	// that every device keeps the same average bit for bit: one step of
	// the exponential moving average of the parameters (w = 1 − β, the
	// decay β), whose result the trainer evaluates and exports. It runs
	// on one worker, like AdamUpdate.
	AverageUpdate(avg, p []float32, w float32)
}

// SGDCoeffs are the step's scalars of OptimOps.SGDUpdate.
type SGDCoeffs struct {
	// LR is the learning rate η, Momentum μ, WeightDecay the L2
	// coefficient λ added to the gradient.
	LR, Momentum, WeightDecay float32
	// GradScale multiplies the gradient as it is read.
	GradScale float32
	// First is set on the optimizer's first step: the velocity is then
	// the gradient itself, not μ·v + d.
	First bool
}

// AdamUpdate implements OptimOps with kernels.AdamUpdate.
func (CPU) AdamUpdate(p, g, m, v []float32, c AdamCoeffs) { kernels.AdamUpdate(p, g, m, v, c) }

// AverageUpdate implements OptimOps.
func (CPU) AverageUpdate(avg, p []float32, w float32) {
	p = p[:len(avg)]
	for i := range avg {
		// The conversions keep each operation rounded on its own (Go may
		// otherwise fuse the product and the sum).
		avg[i] += float32(w * float32(p[i]-avg[i]))
	}
}

// SGDUpdate implements OptimOps.
func (CPU) SGDUpdate(p, g, vel []float32, c SGDCoeffs) {
	lr, mu, wd, gs := c.LR, c.Momentum, c.WeightDecay, c.GradScale
	g = g[:len(p)] // one bounds check, not one per element
	if mu == 0 {
		for i := range p {
			p[i] -= lr * (float32(g[i]*gs) + wd*p[i])
		}
		return
	}
	vel = vel[:len(p)]
	for i := range p {
		d := float32(g[i]*gs) + wd*p[i]
		if c.First {
			vel[i] = d
		} else {
			vel[i] = mu*vel[i] + d
		}
		p[i] -= lr * vel[i]
	}
}
