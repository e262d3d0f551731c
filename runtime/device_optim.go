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
}

// AdamUpdate implements OptimOps with kernels.AdamUpdate.
func (CPU) AdamUpdate(p, g, m, v []float32, c AdamCoeffs) { kernels.AdamUpdate(p, g, m, v, c) }
