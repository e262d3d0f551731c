package runtime

import "github.com/dpfinetune/dpfinetune/runtime/noise"

// NoiseKey is the 128-bit key of a step's Gaussian noise (noise.Key).
type NoiseKey = noise.Key

// NoiseOps is the noise of the DP operation set (DPOps): the Gaussian
// mechanism's draw, added to the clipped sum where it lives (DESIGN.md §4).
// The noise is runtime/noise's keyed counter-based generator: element i of
// a step's noise vector is a function of (key, step, i) alone, so a device
// draws any range on its own, in any order, and every device draws the same
// numbers. The engine's Source decides keys and steps; the device only
// draws.
type NoiseOps interface {
	// AddGaussianNoise sets x[k] ← (x[k] + σ·z_{offset+k})·post for every
	// k, z_j element j of the noise of (key, step): the noise and the
	// division by the expected batch size (post) in one pass. offset is
	// the index of x[0] in the step's noise vector (the parameters laid
	// out one after another); offset + len(x) must not exceed 2⁴⁸. σ is
	// rounded to float32. It runs on one worker; the engine splits a
	// step's parameters over its workers.
	AddGaussianNoise(x []float32, key NoiseKey, step, offset uint64, std float64, post float32)
}

// AddGaussianNoise implements NoiseOps with noise.Generator.Add.
func (CPU) AddGaussianNoise(x []float32, key NoiseKey, step, offset uint64, std float64, post float32) {
	noise.New(key, step).Add(x, offset, std, post)
}
