package runtime

import "github.com/dpfinetune/dpfinetune/runtime/kernels"

// ConvShape is the compiled geometry of a convolution (HookEvent.Conv):
// batch, channels, groups, spatial sizes, and T (output positions) and D
// ((C/Group)·kernel size), the rows and columns of one sample's unfolded
// input.
type ConvShape = kernels.ConvShape

// PerSampleOps is the per-sample part of the DP operation set (DPOps): what
// the engine needs, beyond GEMMs, to form the per-sample norms and the
// clipped sums of convolutions (DESIGN.md §3; the paper §3, where a Conv is
// a linear layer on its unfolded input).
type PerSampleOps interface {
	// Im2ColPlane unfolds group g of one sample's input xi (C·InSize) into
	// col, the sample's a_i transposed: D×T, row-major. plane is scratch
	// of s.PlaneSize() elements (any contents). It runs on one worker.
	Im2ColPlane(s *ConvShape, xi []float32, g int, col, plane []float32)
	// Im2ColBatch unfolds group g of the n samples i0, i0+1, … of x
	// (N×C×In) into col, sample j's D×T (as Im2ColPlane's) at j·D·T: a
	// chunk of the batch at once, for a device whose per-sample loop is
	// a chain of small launches. plane is scratch of s.PlaneSize()
	// elements.
	Im2ColBatch(s *ConvShape, x []float32, i0, n, g int, col, plane []float32)
	// ConvWeightGrad overwrites dw (M×D) with the weight gradient of the
	// convolution s summed over the batch: Σ_i g_iᵀa_i for input x
	// (N×C×In) and output gradient dy (N×M×Out). ws is scratch of
	// ConvWorkspaceSize(s) elements. Book-keeping takes its clipped sum
	// this way, dy scaled per sample by C_i.
	ConvWeightGrad(s *ConvShape, x, dy, dw, ws []float32)
	// ConvWorkspaceSize is the scratch ConvWeightGrad needs, in elements.
	ConvWorkspaceSize(s *ConvShape) int
	// DepthwisePerSampleGrad writes one sample's weight gradient of a
	// depthwise convolution to dw (M·K elements, the weight's layout),
	// for input xi (C·InSize) and output gradient dyi (M·T); ws is scratch
	// of DepthwiseScratchSize(s) elements. It runs on one worker.
	DepthwisePerSampleGrad(s *ConvShape, xi, dyi, dw, ws []float32)
	// DepthwiseGradBatch writes the depthwise weight gradients of the n
	// samples i0, i0+1, … of x (N×C×InSize) and dy (N×M×T), sample j's
	// M·K (DepthwisePerSampleGrad's) at j·M·K of dw: a chunk of the batch
	// at once, for a device whose per-sample loop is a chain of small
	// launches. ws is scratch of DepthwiseScratchSize(s) elements.
	DepthwiseGradBatch(s *ConvShape, x, dy []float32, i0, n int, dw, ws []float32)
	// DepthwiseScratchSize is the scratch DepthwisePerSampleGrad needs, in
	// elements.
	DepthwiseScratchSize(s *ConvShape) int
	// StandardizedNormTerms writes the per-row squared norms of the
	// per-sample gradients of a standardized weight (weight
	// standardization: row o of W standardized to x̂_o = (W_o − μ_o)/σ_o,
	// σ_o² = v_o + ε, then scaled by γ_o), from g, the gradients of the
	// weight the layer reads, γ⊙x̂: for the n samples j and the rows o <
	// rows of g (sample j's rows at j·rows·k, k elements each; xhat rows×k)
	// tW[o·ld + j] = coefW_o·‖g_o − (1ᵀg_o/k)·1 − (x̂_oᵀg_o/k)·x̂_o‖²
	// (coefW = (γ/σ)², LayerNormalization's vector-Jacobian product: W's
	// row gradient) and, where tG is not nil, tG[o·ld + j] =
	// coefG_o·(x̂_oᵀg_o)² (a gain γ = s·gain's, coefG = s²). The residual's
	// norm is expanded from the float64 sums Σg², Σg, Σg·x̂, Σx̂², Σx̂, each
	// in the lane order (StdRowSums) — exact for float32 terms, so that a
	// gradient along 1 and x̂ cancels in float64, not float32 — and
	// combined as StdResidualSq. It runs on one worker.
	StandardizedNormTerms(g, xhat, coefW, coefG []float32, rows, k, n, ld int, tW, tG []float64)
	// StandardizedGhostTerms writes the per-row terms that turn a ghost
	// norm of a standardized weight into its norms without instantiating
	// a gradient: for the n samples j and the rows o < rows of the
	// convolution's output gradient dy (sample j's rows×t at j·rows·t, in
	// groups of rows/groups rows), z, the samples' input convolved with
	// x̂'s rows (dy's layout), and u, their patch sums (the input convolved
	// with a row of ones a group: sample j's groups×t at j·groups·t), the
	// sums a = Σ_t dy_{o,t}·u_{r,t} (1ᵀg_o, r the row's group) and b =
	// Σ_t dy_{o,t}·z_{o,t} (x̂_oᵀg_o), each in float64 in
	// the lane order (DotLanes), give tW[o·ld + j] = −cA_o·(a·a) −
	// cB_o·(b·b) (StdGhostTerm) and, where tG is not nil, tG[o·ld + j] =
	// coefG_o·(b·b). With cA = c/K and cB = c·(2 − ‖x̂_o‖²/K)/K (c = coefW
	// of StandardizedNormTerms; 1ᵀx̂_o = 0), W's row norm c·‖g_o −
	// (1ᵀg_o/K)·1 − (x̂_oᵀg_o/K)·x̂_o‖² is c·‖g_o‖² plus tW's term: the
	// ghost norm of dy scaled by √c gives the first. It runs on one
	// worker.
	StandardizedGhostTerms(dy, z, u, cA, cB, coefG []float32, rows, groups, t, n, ld int, tW, tG []float64)
	// StandardizedVJP takes s, a gradient of the standardized weight the
	// layer reads (rows×k: book-keeping's clipped sum Σ_i C_i g_i), back
	// through the standardization in closed form: it overwrites row o of
	// s with c_o·(s_o − (1ᵀs_o/k)·1 − (x̂_oᵀs_o/k)·x̂_o), W's gradient (c =
	// Scale·γ/σ, signed), and where gain is not nil writes gain[o] =
	// gs_o·x̂_oᵀs_o (gs = GainScale), the gain's. The row sums are
	// StdRowSums' Σs and Σs·x̂; each element is formed in float64 as
	// StdVJP does and rounded once. It may use all of the device.
	StandardizedVJP(s, xhat, c, gs []float32, rows, k int, gain []float32)
}

// Im2ColPlane implements PerSampleOps with kernels.Im2ColPlane.
func (CPU) Im2ColPlane(s *ConvShape, xi []float32, g int, col, plane []float32) {
	kernels.Im2ColPlane(s, xi, g, col, plane)
}

// Im2ColBatch implements PerSampleOps: Im2ColPlane sample by sample.
func (c CPU) Im2ColBatch(s *ConvShape, x []float32, i0, n, g int, col, plane []float32) {
	xs, cs := s.C*s.InSize, s.D*s.T
	for j := 0; j < n; j++ {
		c.Im2ColPlane(s, x[(i0+j)*xs:(i0+j+1)*xs], g, col[j*cs:(j+1)*cs], plane)
	}
}

// ConvWeightGrad implements PerSampleOps with kernels.ConvBackward.
func (CPU) ConvWeightGrad(s *ConvShape, x, dy, dw, ws []float32) {
	kernels.ConvBackward(s, x, nil, dy, nil, dw, nil, ws)
}

// ConvWorkspaceSize implements PerSampleOps with kernels.ConvWorkspaceSize.
func (CPU) ConvWorkspaceSize(s *ConvShape) int { return kernels.ConvWorkspaceSize(s) }

// DepthwisePerSampleGrad implements PerSampleOps with
// kernels.DepthwisePerSampleGrad.
func (CPU) DepthwisePerSampleGrad(s *ConvShape, xi, dyi, dw, ws []float32) {
	kernels.DepthwisePerSampleGrad(s, xi, dyi, dw, ws)
}

// DepthwiseGradBatch implements PerSampleOps: DepthwisePerSampleGrad
// sample by sample.
func (c CPU) DepthwiseGradBatch(s *ConvShape, x, dy []float32, i0, n int, dw, ws []float32) {
	xs, ys, size := s.C*s.InSize, s.M*s.T, s.M*s.K
	for j := 0; j < n; j++ {
		i := i0 + j
		c.DepthwisePerSampleGrad(s, x[i*xs:(i+1)*xs], dy[i*ys:(i+1)*ys], dw[j*size:(j+1)*size], ws)
	}
}

// StandardizedGhostTerms implements PerSampleOps.
func (CPU) StandardizedGhostTerms(dy, z, u, cA, cB, coefG []float32, rows, groups, t, n, ld int, tW, tG []float64) {
	P := rows / groups
	for j := 0; j < n; j++ {
		for o := 0; o < rows; o++ {
			r := (j*rows + o) * t
			d := dy[r : r+t]
			a, b := DotLanes(d, u[(j*groups+o/P)*t:]), DotLanes(d, z[r:])
			tW[o*ld+j] = StdGhostTerm(a, b, cA[o], cB[o])
			if tG != nil {
				tG[o*ld+j] = float64(coefG[o]) * (b * b)
			}
		}
	}
}

// StandardizedVJP implements PerSampleOps, rows split over the workers.
func (CPU) StandardizedVJP(s, xhat, c, gs []float32, rows, k int, gain []float32) {
	parFor(rows, max(1, (1<<15)/max(k, 1)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			r, x := s[o*k:(o+1)*k], xhat[o*k:(o+1)*k]
			sums := StdRowSums(r, x)
			a, b := sums[1]/float64(k), sums[2]/float64(k)
			// Eight at a time where the CPU has AVX2, the same bits.
			for e := kernels.StdVJPRows(r, x, a, b, float64(c[o])); e < k; e++ {
				r[e] = StdVJP(r[e], x[e], a, b, c[o])
			}
			if gain != nil {
				gain[o] = float32(float64(gs[o]) * sums[2])
			}
		}
	})
}

// DepthwiseScratchSize implements PerSampleOps with
// kernels.DepthwiseScratchSize.
func (CPU) DepthwiseScratchSize(s *ConvShape) int { return kernels.DepthwiseScratchSize(s) }

// StandardizedNormTerms implements PerSampleOps.
func (CPU) StandardizedNormTerms(g, xhat, coefW, coefG []float32, rows, k, n, ld int, tW, tG []float64) {
	for j := 0; j < n; j++ {
		for o := 0; o < rows; o++ {
			r := (j*rows + o) * k
			s := StdRowSums(g[r:r+k], xhat[o*k:(o+1)*k])
			tW[o*ld+j] = float64(coefW[o]) * StdResidualSq(s, k)
			if tG != nil {
				tG[o*ld+j] = float64(coefG[o]) * (s[2] * s[2])
			}
		}
	}
}
