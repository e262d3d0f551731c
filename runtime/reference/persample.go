package reference

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The per-sample convolution operations (runtime.PerSampleOps), written
// from ONNX Conv's definition: output position o (a multi-index over
// s.Out) of kernel tap k (a multi-index over s.Kernel) reads input
// position o·stride + k·dilation − padBegin along every spatial axis, or
// zero where that lies in the padding. A Conv of group g is then a linear
// layer on the D×T matrix whose row (c, k) and column o hold that input
// element of channel g·C/Group + c (the paper's unfolded a_iᵀ). Scratch is
// never needed: the reference backend allocates what it uses.

// planeTaps returns, for every kernel tap k and output position t, the
// offset in one channel plane (s.InSize elements) of the input element
// that tap k reads for output position t, or −1 where it lies in the
// padding: taps[k·T+t].
func planeTaps(s *runtime.ConvShape) []int {
	d := len(s.In)
	if len(s.Kernel) != d || len(s.Out) != d {
		panic(fmt.Sprintf("reference: convolution of input %v, kernel %v and output %v: ranks differ (shape not initialised?)", s.In, s.Kernel, s.Out))
	}
	at := func(v []int, a, def int) int {
		if v == nil {
			return def
		}
		return v[a]
	}
	taps := make([]int, s.K*s.T)
	kIdx := make([]int, d)
	oIdx := make([]int, d)
	for k := 0; k < s.K; k++ {
		unravelIndex(k, s.Kernel, kIdx)
		for t := 0; t < s.T; t++ {
			unravelIndex(t, s.Out, oIdx)
			off := 0
			for a := 0; a < d; a++ {
				p := oIdx[a]*at(s.Strides, a, 1) + kIdx[a]*at(s.Dilations, a, 1) - at(s.Pads, a, 0)
				if p < 0 || p >= s.In[a] {
					off = -1
					break
				}
				off = off*s.In[a] + p
			}
			taps[k*s.T+t] = off
		}
	}
	return taps
}

// unravelIndex writes the row-major multi-index of flat index i in shape to idx.
func unravelIndex(i int, shape, idx []int) {
	for a := len(shape) - 1; a >= 0; a-- {
		idx[a] = i % shape[a]
		i /= shape[a]
	}
}

// Im2ColBatch implements runtime.PerSampleOps: Im2ColPlane sample by
// sample.
func (d Device) Im2ColBatch(s *runtime.ConvShape, x []float32, i0, n, g int, col, plane []float32) {
	xs, cs := s.C*s.InSize, s.D*s.T
	for j := 0; j < n; j++ {
		d.Im2ColPlane(s, x[(i0+j)*xs:(i0+j+1)*xs], g, col[j*cs:(j+1)*cs], plane)
	}
}

// Im2ColPlane implements runtime.PerSampleOps: col[(c·K+k)·T+t] is the
// input element of channel g·C/Group + c that tap k reads for output
// position t (zero in the padding). plane is not used.
func (Device) Im2ColPlane(s *runtime.ConvShape, xi []float32, g int, col, plane []float32) {
	taps := planeTaps(s)
	cg := s.C / s.Group
	if len(xi) < s.C*s.InSize || len(col) < s.D*s.T {
		panic(fmt.Sprintf("reference: Im2ColPlane: input %d (want %d) or col %d (want %d) too short", len(xi), s.C*s.InSize, len(col), s.D*s.T))
	}
	for c := 0; c < cg; c++ {
		xc := xi[(g*cg+c)*s.InSize : (g*cg+c+1)*s.InSize]
		for k := 0; k < s.K; k++ {
			row := col[(c*s.K+k)*s.T : (c*s.K+k+1)*s.T]
			for t := range row {
				if off := taps[k*s.T+t]; off >= 0 {
					row[t] = xc[off]
				} else {
					row[t] = 0
				}
			}
		}
	}
}

// convWeightGradSum overwrites dw (M×D) with Σ_i Σ_t dy[i, m, t]·x[i, channel of
// (m, c), tap (k, t)] over the n samples of x (n×C×InSize) and dy
// (n×M×T): the weight gradient of Conv, one float64 sum per weight,
// rounded once.
func convWeightGradSum(s *runtime.ConvShape, n int, x, dy, dw []float32) {
	taps := planeTaps(s)
	cg, mg := s.C/s.Group, s.M/s.Group
	xs, ys := s.C*s.InSize, s.M*s.T
	if len(x) < n*xs || len(dy) < n*ys || len(dw) < s.M*s.D {
		panic(fmt.Sprintf("reference: conv weight gradient: x %d (want %d), dy %d (want %d) or dw %d (want %d) too short", len(x), n*xs, len(dy), n*ys, len(dw), s.M*s.D))
	}
	for m := 0; m < s.M; m++ {
		g := m / mg
		for c := 0; c < cg; c++ {
			ch := g*cg + c
			for k := 0; k < s.K; k++ {
				var sum float64
				for i := 0; i < n; i++ {
					xc := x[i*xs+ch*s.InSize : i*xs+(ch+1)*s.InSize]
					dym := dy[i*ys+m*s.T : i*ys+(m+1)*s.T]
					for t, v := range dym {
						if off := taps[k*s.T+t]; off >= 0 {
							sum += float64(v) * float64(xc[off])
						}
					}
				}
				dw[m*s.D+c*s.K+k] = float32(sum)
			}
		}
	}
}

// ConvWeightGrad implements runtime.PerSampleOps: dw = Σ_i g_iᵀa_i over
// the batch, each weight one float64 sum. ws is not used.
func (Device) ConvWeightGrad(s *runtime.ConvShape, x, dy, dw, ws []float32) {
	convWeightGradSum(s, s.N, x, dy, dw)
}

// ConvWorkspaceSize implements runtime.PerSampleOps: the reference backend
// needs no scratch.
func (Device) ConvWorkspaceSize(s *runtime.ConvShape) int { return 0 }

// DepthwisePerSampleGrad implements runtime.PerSampleOps: one sample's
// weight gradient dw[m, k] = Σ_t dyi[m, t]·xi[m/(M/C), tap (k, t)] of a
// depthwise convolution (Group = C), the general convolution's with one
// input channel per group. ws is not used.
func (Device) DepthwisePerSampleGrad(s *runtime.ConvShape, xi, dyi, dw, ws []float32) {
	if s.Group != s.C {
		panic(fmt.Sprintf("reference: DepthwisePerSampleGrad of a convolution with %d groups and %d channels, not depthwise", s.Group, s.C))
	}
	convWeightGradSum(s, 1, xi, dyi, dw)
}

// DepthwiseGradBatch implements runtime.PerSampleOps:
// DepthwisePerSampleGrad sample by sample.
func (d Device) DepthwiseGradBatch(s *runtime.ConvShape, x, dy []float32, i0, n int, dw, ws []float32) {
	xs, ys, size := s.C*s.InSize, s.M*s.T, s.M*s.K
	for j := 0; j < n; j++ {
		i := i0 + j
		d.DepthwisePerSampleGrad(s, x[i*xs:(i+1)*xs], dy[i*ys:(i+1)*ys], dw[j*size:(j+1)*size], ws)
	}
}

// DepthwiseScratchSize implements runtime.PerSampleOps: the reference
// backend needs no scratch.
func (Device) DepthwiseScratchSize(s *runtime.ConvShape) int { return 0 }

// StandardizedNormTerms implements runtime.PerSampleOps by the
// definition: the residual g_o − (1ᵀg_o/k)·1 − (x̂_oᵀg_o/k)·x̂_o formed
// element by element in float64 and its squared norm summed in order
// (the CPU expands it from five sums instead).
func (Device) StandardizedNormTerms(g, xhat, coefW, coefG []float32, rows, k, n, ld int, tW, tG []float64) {
	for j := 0; j < n; j++ {
		for o := 0; o < rows; o++ {
			gr, xr := g[(j*rows+o)*k:(j*rows+o+1)*k], xhat[o*k:(o+1)*k]
			var sg, sgx float64
			for e := range gr {
				sg += float64(gr[e])
				sgx += float64(gr[e]) * float64(xr[e])
			}
			var uu float64
			if k > 0 {
				a, c := sg/float64(k), sgx/float64(k)
				for e := range gr {
					u := float64(gr[e]) - a - c*float64(xr[e])
					uu += u * u
				}
			}
			tW[o*ld+j] = float64(coefW[o]) * uu
			if tG != nil {
				tG[o*ld+j] = float64(coefG[o]) * sgx * sgx
			}
		}
	}
}

// StandardizedGhostTerms implements runtime.PerSampleOps by the
// definition: a = 1ᵀg_o and b = x̂_oᵀg_o summed in float64 in the order of
// the positions (the CPU in the lane order), the row's term
// −cA·a² − cB·b².
func (Device) StandardizedGhostTerms(dy, z, u, cA, cB, coefG []float32, rows, groups, t, n, ld int, tW, tG []float64) {
	P := rows / groups
	for j := 0; j < n; j++ {
		for o := 0; o < rows; o++ {
			d, zr, ur := dy[(j*rows+o)*t:], z[(j*rows+o)*t:], u[(j*groups+o/P)*t:]
			var a, b float64
			for q := 0; q < t; q++ {
				a += float64(d[q]) * float64(ur[q])
				b += float64(d[q]) * float64(zr[q])
			}
			tW[o*ld+j] = -float64(cA[o])*a*a - float64(cB[o])*b*b
			if tG != nil {
				tG[o*ld+j] = float64(coefG[o]) * b * b
			}
		}
	}
}

// StandardizedVJP implements runtime.PerSampleOps by the definition: the
// row sums in float64 in order, each element c·(s − Σs/k − (Σs·x̂/k)·x̂)
// in float64 (the CPU sums in the lane order).
func (Device) StandardizedVJP(s, xhat, c, gs []float32, rows, k int, gain []float32) {
	for o := 0; o < rows; o++ {
		r, x := s[o*k:(o+1)*k], xhat[o*k:(o+1)*k]
		var sa, sb float64
		for e := range r {
			sa += float64(r[e])
			sb += float64(r[e]) * float64(x[e])
		}
		for e := range r {
			r[e] = float32(float64(c[o]) * (float64(r[e]) - sa/float64(k) - sb/float64(k)*float64(x[e])))
		}
		if gain != nil {
			gain[o] = float32(float64(gs[o]) * sb)
		}
	}
}
