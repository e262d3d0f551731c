package dpengine

import (
	"github.com/dpfinetune/dpfinetune/runtime"
)

// The per-sample contract for a linear layer (DESIGN.md §3; the paper §3):
// sample i has unfolded input a_i (T×D) and output gradient g_i (T×p), and
// its weight gradient is g_iᵀa_i (p×D). A Conv is such a layer once its
// input is unfolded (T = output positions, D = C_in/groups·k_H·k_W, one
// layer per group); a Gemm has T = 1; a MatMul on (B,T,D) tokens has T
// tokens.

// GhostNormSq returns ‖g_iᵀa_i‖²_F without forming the p×D gradient: by the
// ghost norm trick (paper eq. 3.1) it equals ⟨a_i a_iᵀ, g_i g_iᵀ⟩, two T×T
// Gram matrices, so it costs 2T² space instead of pD. ws must hold 2·T·T
// floats (T > 1). It runs on the CPU device; the engine computes it on its
// own device.
func GhostNormSq(a []float32, T, D int, g []float32, p int, ws []float32) float64 {
	var s [1]float64
	addGhostNormSq(runtime.CPU{}, 1, a, T, D, g, p, ws, s[:])
	return s[0]
}

// addGhostNormSq adds alpha·GhostNormSq to dst[0] on the device of ops: a
// sample's squared norm accumulated in device memory (alpha is a Gemm's
// α², else 1, which leaves the norm's bits as they are).
func addGhostNormSq(ops runtime.DPOps, alpha float64, a []float32, T, D int, g []float32, p int, ws []float32, dst []float64) {
	if T == 1 {
		// Rank one: ‖g aᵀ‖² = ‖a‖²‖g‖².
		ops.AddSumSqProduct(alpha, a[:D], g[:p], dst)
		return
	}
	aa, gg := ws[:T*T], ws[T*T:2*T*T]
	ops.GemmSerial(false, true, T, T, D, 1, a, D, a, D, 0, aa, T)
	ops.GemmSerial(false, true, T, T, p, 1, g, p, g, p, 0, gg, T)
	ops.AddDot(alpha, aa, gg, dst)
}

// InstantiateGrad writes g_iᵀa_i (p×D) to out and returns its squared
// Frobenius norm, on the CPU device.
func InstantiateGrad(a []float32, T, D int, g []float32, p int, out []float32) float64 {
	runtime.CPU{}.GemmSerial(true, false, p, D, T, 1, g, p, a, D, 0, out[:p*D], D)
	return runtime.CPU{}.SumSq(out[:p*D])
}

// BiasGradSq returns the squared norm of a bias's per-sample gradient
// Σ_t g_i[t,:] and writes that gradient to out (length p), on the CPU
// device.
func BiasGradSq(g []float32, T, p int, out []float32) float64 {
	cpu := runtime.CPU{}
	cpu.SumRows(g, T, p, out)
	return cpu.SumSq(out[:p])
}

// WeightedGradSum adds Σ_i c_i g_iᵀa_i (p×D) to out, for B samples stacked
// as a (B·T×D) and g (B·T×p): the book-keeping clipped gradient (Bu et al.
// 2023), one GEMM over the whole batch instead of B. ws must hold B·T·p
// floats. It runs on the CPU device.
func WeightedGradSum(a []float32, g []float32, c []float32, B, T, D, p int, ws []float32, out []float32) {
	scaled := ws[:B*T*p]
	for i := 0; i < B; i++ {
		ci := c[i]
		src := g[i*T*p : (i+1)*T*p]
		dst := scaled[i*T*p : (i+1)*T*p]
		for k, v := range src {
			dst[k] = ci * v
		}
	}
	runtime.CPU{}.Gemm(true, false, p, D, B*T, 1, scaled, p, a, D, 1, out, D)
}

// PreferGhost is the paper's layerwise rule (eq. 4.1, memory priority): use
// the ghost norm iff its 2T² space is smaller than the pD of instantiation.
func PreferGhost(T, D, p int) bool { return 2*T*T < p*D }
