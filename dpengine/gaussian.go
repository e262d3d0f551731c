package dpengine

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// The Gaussian noise of a logical batch is one draw per trainable
// parameter: on a VGG with 10⁸ parameters, math/rand's NormFloat64 behind
// the rand.Rand interface (~10 ns a draw) cost more than the training
// step. gaussianInto is a float32 ziggurat (Marsaglia & Tsang 2000, 256
// layers: 98.5 % of draws take the fast path) fed from a buffered AES-CTR
// keystream, one 32-bit word per draw in the common case, without a branch
// on the sign. Unlike the classic 32-bit version (and math/rand's), the
// layer index, the sign and the 23-bit magnitude come from disjoint bits of
// the word, so they are independent (Doornik 2005 showed the classic reuse
// of the low bits biases the output).
const (
	zigLayers = 256
	zigR      = 3.6541528853610088 // x of the base strip's right edge
	zigV      = 0.00492867323399   // area of each layer
	zigScale  = 1 << 23            // the magnitude is a 23-bit integer
	zigMask   = zigLayers - 1      // low 8 bits: layer
	zigSign   = zigLayers          // bit 8: sign
	zigShift  = 9                  // bits 9–31: magnitude
	zigTail   = 1.0 / zigR         // rate of the tail's exponential proposal
)

// zigK[i] is the acceptance bound of layer i on the 23-bit magnitude
// (x_{i-1}/x_i·2²³; for the base strip r·f(r)/v·2²³), zigW[i] = x_i/2²³
// turns a magnitude into x, zigF[i] = exp(-x_i²/2).
var (
	zigK [zigLayers]uint32
	zigW [zigLayers]float32
	zigF [zigLayers]float64
	// zigF32 is zigF in float32, for the wedge test.
	zigF32 [zigLayers]float32
	// zigKW interleaves zigK[i] and the bits of zigW[i], so that the SSE2
	// fast path loads both with one instruction.
	zigKW [zigLayers][2]uint32
)

func init() {
	dn, tn := float64(zigR), float64(zigR)
	q := zigV / math.Exp(-0.5*dn*dn)
	zigK[0] = uint32(dn / q * zigScale)
	zigK[1] = 0
	zigW[0] = float32(q / zigScale)
	zigW[zigLayers-1] = float32(dn / zigScale)
	zigF[0] = 1
	zigF[zigLayers-1] = math.Exp(-0.5 * dn * dn)
	for i := zigLayers - 2; i >= 1; i-- {
		dn = math.Sqrt(-2 * math.Log(zigV/dn+math.Exp(-0.5*dn*dn)))
		zigK[i+1] = uint32(dn / tn * zigScale)
		tn = dn
		zigF[i] = math.Exp(-0.5 * dn * dn)
		zigW[i] = float32(dn / zigScale)
	}
	for i, f := range zigF {
		zigF32[i] = float32(f)
		zigKW[i] = [2]uint32{zigK[i], math.Float32bits(zigW[i])}
	}
}

// gaussianInto sets x[i] ← (x[i] + std·z_i)·post with z_i ~ N(0, 1) drawn
// from g. On amd64 zigFastSSE draws the fast path four at a time, then
// zigSlow finishes the others in order: the result is the same, bit for
// bit, as zigDraw's alone (the slow draws take g's auxiliary words in the
// same order).
func gaussianInto(g *noiseBits, x []float32, std, post float32) {
	for len(x) > 0 {
		words := g.take(len(x))
		n := 0
		if haveZigSSE {
			n = len(words) &^ 3
			ns := zigFastSSE(words[:n], x[:n], &zigKW, std, post, g.slow[:n])
			for _, i := range g.slow[:ns] {
				u := words[i]
				z := zigSlow(g, u&zigMask, u>>zigShift)
				z = math.Float32frombits(math.Float32bits(z) ^ (u&zigSign)<<(31-8))
				x[i] = (x[i] + std*z) * post
			}
		}
		zigDraw(g, words[n:], x[n:], std, post)
		x = x[len(words):]
	}
}

// zigDraw is gaussianInto on the given words, one at a time.
func zigDraw(g *noiseBits, words []uint32, x []float32, std, post float32) {
	x = x[:len(words)]
	for i, u := range words {
		layer := u & zigMask
		m := u >> zigShift
		var z float32
		if m < zigK[layer] {
			z = float32(m) * zigW[layer]
		} else {
			z = zigSlow(g, layer, m)
		}
		// The sign bit moved to float32's sign: a branch here would
		// be mispredicted half the time.
		z = math.Float32frombits(math.Float32bits(z) ^ (u&zigSign)<<(31-8))
		x[i] = (x[i] + std*z) * post
	}
}

// zigSlow finishes a draw that fell outside its layer's inner rectangle:
// the wedge test for the upper layers, Marsaglia's exponential rejection
// for the tail beyond r from the base strip; on rejection it starts a fresh
// draw (whose sign bit is unused: the sign was taken from the first word).
// It returns |z|. Its bits come from g's auxiliary buffer, so that the
// words gaussianInto is iterating over stay untouched.
func zigSlow(g *noiseBits, layer, m uint32) float32 {
	for {
		if layer == 0 {
			for {
				x := -math.Log(1-g.uniform()) * zigTail
				y := -math.Log(1 - g.uniform())
				if 2*y >= x*x {
					return float32(zigR + x)
				}
			}
		}
		// The wedge test in float32 (Expf: ≤ 1e-7 relative error, 3×
		// faster than math.Exp): it decides ~1.5 % of the draws and its
		// rounding moves the density by ~1e-7 relative, below float32's own
		// resolution of the output.
		x := float32(m) * zigW[layer]
		u := float32(g.aux()>>8) * (1.0 / (1 << 24))
		if zigF32[layer]+u*(zigF32[layer-1]-zigF32[layer]) < kernels.Expf(-0.5*x*x) {
			return x
		}
		w := g.aux()
		layer, m = w&zigMask, w>>zigShift
		if m < zigK[layer] {
			return float32(m) * zigW[layer]
		}
	}
}
