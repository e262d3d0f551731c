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
	// PrepareNoise readies the noise of (key, step) for the
	// AddGaussianNoise calls of one step, which may run on several
	// workers at once: on the CPU, the AES key schedule, once a step
	// rather than once a chunk.
	PrepareNoise(key NoiseKey, step uint64) Noise
	// AddGaussianNoise sets x[k] ← (x[k] + σ·z_{offset+k})·post for every
	// k, z_j element j of the noise n: the noise and the division by the
	// expected batch size (post) in one pass. offset is the index of x[0]
	// in the step's noise vector (the parameters laid out one after
	// another); offset + len(x) must not exceed 2⁴⁸. σ is rounded to
	// float32. It runs on one worker; the engine splits a step's
	// parameters over its workers.
	AddGaussianNoise(x []float32, n Noise, offset uint64, std float64, post float32)
}

// Noise is one step's noise as PrepareNoise readied it: the key and step
// every device draws from, and the CPU's generator for them.
type Noise struct {
	Key  NoiseKey
	Step uint64
	gen  *noise.Generator
}

// PrepareNoise implements NoiseOps.
func (CPU) PrepareNoise(key NoiseKey, step uint64) Noise {
	return Noise{Key: key, Step: step, gen: noise.New(key, step)}
}

// AddGaussianNoise implements NoiseOps with noise.Generator.Add (a Noise
// not made by PrepareNoise gets its generator here).
func (CPU) AddGaussianNoise(x []float32, n Noise, offset uint64, std float64, post float32) {
	g := n.gen
	if g == nil {
		g = noise.New(n.Key, n.Step)
	}
	g.Add(x, offset, std, post)
}
