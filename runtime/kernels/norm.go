package kernels

import (
	"fmt"
	"math"
)

// Normalization kernels. Statistics use two passes in float64 (mean, then
// Σ(x−μ)²): the one-pass E[x²]−E[x]² cancels catastrophically in float32
// when |μ| ≫ σ. Variances are population variances (divided by the count),
// as in ONNX and PyTorch normalization.
//
// GroupNormalization, InstanceNormalization and LayerNormalization share one
// layout: x is viewed as (n, groups, cg, spatial), statistics are taken per
// (n, group) over cg·spatial elements, and scale/bias are per channel
// (groups·cg of them) broadcast over spatial. InstanceNorm is groups = C;
// LayerNorm is n = outer rows, groups = 1, cg = normalized size, spatial = 1.

// groupStats computes mean and 1/sqrt(var+eps) of each (n, group).
func groupStats(x []float32, n, groups, gsize int, eps float32, mean, invStd []float32) {
	parallelFor(n*groups, max(1, 4096/max(1, gsize)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			seg := x[q*gsize : (q+1)*gsize]
			var s float64
			for _, v := range seg {
				s += float64(v)
			}
			mu := s / float64(gsize)
			var ss float64
			for _, v := range seg {
				d := float64(v) - mu
				ss += d * d
			}
			mean[q] = float32(mu)
			invStd[q] = float32(1 / math.Sqrt(ss/float64(gsize)+float64(eps)))
		}
	})
}

// normApply writes y = (x−μ)·inv·scale + bias for the shared layout.
func normApply(x []float32, n, groups, cg, spatial int, scale, bias, mean, invStd, y []float32) {
	c := groups * cg
	parallelFor(n*c, max(1, 4096/max(1, spatial)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			ch := q % c
			grp := q / cg // (n, group) index
			inv := invStd[grp]
			a := inv
			if scale != nil {
				a *= scale[ch]
			}
			b := -mean[grp] * a
			if bias != nil {
				b += bias[ch]
			}
			src := x[q*spatial : (q+1)*spatial]
			dst := y[q*spatial : (q+1)*spatial]
			for i, v := range src {
				dst[i] = v*a + b
			}
		}
	})
}

// NormParamGrads computes the gradients of the per-channel scale and bias of
// the shared layout, summed per sample: dscale and dbias (either may be nil)
// have samples × (groups·cg) elements, sample k covering the n/samples
// consecutive rows of x starting at k·n/samples. samples = 1 gives the usual
// batch gradient; samples = N gives the per-sample gradients the DP engine
// needs for norm parameters (for LayerNorm over (B, T, D), n = B·T rows and
// samples = B).
func NormParamGrads(x []float32, n, groups, cg, spatial int, mean, invStd, dy []float32, samples int, dscale, dbias []float32) {
	c := groups * cg
	if samples < 1 || n%samples != 0 {
		panic(fmt.Sprintf("kernels: %d rows do not split into %d samples", n, samples))
	}
	total := n * c * spatial
	checkLen("x", x, total)
	checkLen("dy", dy, total)
	if dscale != nil {
		checkLen("dscale", dscale, samples*c)
	}
	if dbias != nil {
		checkLen("dbias", dbias, samples*c)
	}
	per := n / samples
	parallelFor(samples*c, max(1, 4096/max(1, per*spatial)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			k, ch := q/c, q%c
			var sg, sb float64
			for r := k * per; r < (k+1)*per; r++ {
				grp := r*groups + ch/cg
				mu, inv := mean[grp], invStd[grp]
				off := (r*c + ch) * spatial
				g := dy[off : off+spatial]
				xs := x[off : off+spatial]
				var pg, pb float32
				for i, v := range g {
					pg += v * (xs[i] - mu)
					pb += v
				}
				sg += float64(pg) * float64(inv)
				sb += float64(pb)
			}
			if dscale != nil {
				dscale[q] = float32(sg)
			}
			if dbias != nil {
				dbias[q] = float32(sb)
			}
		}
	})
}

// normInputGrad computes dx for the shared layout:
// dx = inv·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = dy·scale.
func normInputGrad(x []float32, n, groups, cg, spatial int, scale, mean, invStd, dy, dx []float32) {
	gsize := cg * spatial
	parallelFor(n*groups, max(1, 4096/max(1, gsize)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			mu, inv := mean[q], invStd[q]
			g0 := (q % groups) * cg
			var sg, sgx float64
			for cc := 0; cc < cg; cc++ {
				off := q*gsize + cc*spatial
				gamma := float32(1)
				if scale != nil {
					gamma = scale[g0+cc]
				}
				var pg, pgx float32
				xs := x[off : off+spatial]
				for i, v := range dy[off : off+spatial] {
					gh := v * gamma
					pg += gh
					pgx += gh * (xs[i] - mu)
				}
				sg += float64(pg)
				sgx += float64(pgx)
			}
			mg := float32(sg / float64(gsize))
			mgx := float32(sgx/float64(gsize)) * inv // mean(ĝ·x̂)
			for cc := 0; cc < cg; cc++ {
				off := q*gsize + cc*spatial
				gamma := float32(1)
				if scale != nil {
					gamma = scale[g0+cc]
				}
				xs := x[off : off+spatial]
				d := dx[off : off+spatial]
				for i, v := range dy[off : off+spatial] {
					xh := (xs[i] - mu) * inv
					d[i] = inv * (v*gamma - mg - xh*mgx)
				}
			}
		}
	})
}

func checkNorm(x []float32, n, c, spatial int, scale, bias, y []float32) {
	checkLen("x", x, n*c*spatial)
	if y != nil {
		checkLen("y", y, n*c*spatial)
	}
	if scale != nil {
		checkLen("scale", scale, c)
	}
	if bias != nil {
		checkLen("bias", bias, c)
	}
}

// statsBuffers returns mean and invStd, or pooled scratch when they are nil
// (inference, where the statistics are not needed afterwards).
func statsBuffers(mean, invStd []float32, n int) ([]float32, []float32, func()) {
	if mean != nil && invStd != nil {
		checkLen("mean", mean, n)
		checkLen("invStd", invStd, n)
		return mean, invStd, func() {}
	}
	if mean != nil || invStd != nil {
		panic("kernels: pass both mean and invStd, or neither")
	}
	p := getScratch(2 * n)
	buf := *p
	return buf[:n], buf[n : 2*n], func() { scratchPool.Put(p) }
}

// GroupNormForward normalizes x (n × c × spatial) over groups of c/groups
// channels (ONNX GroupNormalization opset ≥ 21 and PyTorch GroupNorm: scale
// and bias per channel, either may be nil). mean and invStd (n·groups
// elements, 1/sqrt(var+eps)) are written for the backward pass; both may be
// nil when no backward follows. The opset-18
// per-group scale is expressed by repeating each group's value over its
// channels (and summing the channel gradients back).
func GroupNormForward(x []float32, n, c, spatial, groups int, scale, bias []float32, eps float32, y, mean, invStd []float32) {
	if groups < 1 || c%groups != 0 {
		panic(fmt.Sprintf("kernels: %d channels in %d groups", c, groups))
	}
	checkNorm(x, n, c, spatial, scale, bias, y)
	mean, invStd, release := statsBuffers(mean, invStd, n*groups)
	defer release()
	groupStats(x, n, groups, c/groups*spatial, eps, mean, invStd)
	normApply(x, n, groups, c/groups, spatial, scale, bias, mean, invStd, y)
}

// GroupNormBackward computes dx, dscale and dbias (each may be nil) from the
// saved mean and invStd.
func GroupNormBackward(x []float32, n, c, spatial, groups int, scale, mean, invStd, dy, dx, dscale, dbias []float32) {
	if groups < 1 || c%groups != 0 {
		panic(fmt.Sprintf("kernels: %d channels in %d groups", c, groups))
	}
	checkNorm(x, n, c, spatial, scale, nil, dx)
	checkLen("dy", dy, n*c*spatial)
	checkLen("mean", mean, n*groups)
	checkLen("invStd", invStd, n*groups)
	if dscale != nil || dbias != nil {
		NormParamGrads(x, n, groups, c/groups, spatial, mean, invStd, dy, 1, dscale, dbias)
	}
	if dx != nil {
		normInputGrad(x, n, groups, c/groups, spatial, scale, mean, invStd, dy, dx)
	}
}

// InstanceNormForward normalizes each (sample, channel) plane (ONNX
// InstanceNormalization); mean and invStd have n·c elements.
func InstanceNormForward(x []float32, n, c, spatial int, scale, bias []float32, eps float32, y, mean, invStd []float32) {
	GroupNormForward(x, n, c, spatial, c, scale, bias, eps, y, mean, invStd)
}

// InstanceNormBackward is the backward of InstanceNormForward.
func InstanceNormBackward(x []float32, n, c, spatial int, scale, mean, invStd, dy, dx, dscale, dbias []float32) {
	GroupNormBackward(x, n, c, spatial, c, scale, mean, invStd, dy, dx, dscale, dbias)
}

// LayerNormForward normalizes each of the outer rows of size elements (ONNX
// LayerNormalization with the axis folded into outer = ∏shape[:axis], size
// = ∏shape[axis:]); scale and bias (size elements, either may be nil) are
// applied elementwise. mean and invStd (outer elements: the optional Mean
// and InvStdDev outputs, which the backward needs) may both be nil.
func LayerNormForward(x []float32, outer, size int, scale, bias []float32, eps float32, y, mean, invStd []float32) {
	checkNorm(x, outer, size, 1, scale, bias, y)
	mean, invStd, release := statsBuffers(mean, invStd, outer)
	defer release()
	groupStats(x, outer, 1, size, eps, mean, invStd)
	normApply(x, outer, 1, size, 1, scale, bias, mean, invStd, y)
}

// LayerNormBackward computes dx, dscale and dbias (each may be nil).
func LayerNormBackward(x []float32, outer, size int, scale, mean, invStd, dy, dx, dscale, dbias []float32) {
	checkNorm(x, outer, size, 1, scale, nil, dx)
	checkLen("dy", dy, outer*size)
	if dscale != nil || dbias != nil {
		NormParamGrads(x, outer, 1, size, 1, mean, invStd, dy, 1, dscale, dbias)
	}
	if dx != nil {
		normInputGrad(x, outer, 1, size, 1, scale, mean, invStd, dy, dx)
	}
}

// BatchNormInference computes y = (x−mean)/sqrt(var+eps)·scale + bias per
// channel of x (n × c × spatial) with given statistics (ONNX
// BatchNormalization, training_mode = 0).
func BatchNormInference(x []float32, n, c, spatial int, scale, bias, mean, variance []float32, eps float32, y []float32) {
	checkNorm(x, n, c, spatial, scale, bias, y)
	checkLen("mean", mean, c)
	checkLen("variance", variance, c)
	parallelFor(n*c, max(1, 4096/max(1, spatial)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			ch := q % c
			a := scale[ch] / float32(math.Sqrt(float64(variance[ch])+float64(eps)))
			b := bias[ch] - mean[ch]*a
			dst := y[q*spatial : (q+1)*spatial]
			for i, v := range x[q*spatial : (q+1)*spatial] {
				dst[i] = v*a + b
			}
		}
	})
}

// BatchNormInferenceBackward computes dx = dy·scale/sqrt(var+eps) and the
// scale and bias gradients with the statistics held constant (each output
// may be nil).
func BatchNormInferenceBackward(x []float32, n, c, spatial int, scale, mean, variance []float32, eps float32, dy, dx, dscale, dbias []float32) {
	checkNorm(x, n, c, spatial, scale, nil, dx)
	checkLen("dy", dy, n*c*spatial)
	if dscale != nil || dbias != nil {
		parallelFor(c, 1, func(lo, hi int) {
			for ch := lo; ch < hi; ch++ {
				inv := float32(1 / math.Sqrt(float64(variance[ch])+float64(eps)))
				var sg, sb float64
				for i := 0; i < n; i++ {
					off := (i*c + ch) * spatial
					xs := x[off : off+spatial]
					var pg, pb float32
					for j, v := range dy[off : off+spatial] {
						pg += v * (xs[j] - mean[ch])
						pb += v
					}
					sg += float64(pg)
					sb += float64(pb)
				}
				if dscale != nil {
					dscale[ch] = float32(sg) * inv
				}
				if dbias != nil {
					dbias[ch] = float32(sb)
				}
			}
		})
	}
	if dx != nil {
		parallelFor(n*c, max(1, 4096/max(1, spatial)), func(lo, hi int) {
			for q := lo; q < hi; q++ {
				ch := q % c
				a := scale[ch] / float32(math.Sqrt(float64(variance[ch])+float64(eps)))
				d := dx[q*spatial : (q+1)*spatial]
				for i, v := range dy[q*spatial : (q+1)*spatial] {
					d[i] = v * a
				}
			}
		})
	}
}

// BatchNormTrainOptions are the training-mode attributes of ONNX
// BatchNormalization.
type BatchNormTrainOptions struct {
	Epsilon float32 // added to the variance
	// Momentum weighs the old running statistics (ONNX: running =
	// input·momentum + current·(1−momentum); PyTorch's momentum m exports
	// as 1−m).
	Momentum float32
	// UnbiasedRunningVar updates the running variance with the unbiased
	// batch variance (PyTorch) instead of the population variance (the
	// ONNX reference). Normalization always uses the population variance.
	UnbiasedRunningVar bool
}

// BatchNormTrainForward normalizes x (n × c × spatial) with the batch
// statistics of each channel (ONNX BatchNormalization, training_mode = 1,
// opset 14/15). It writes y, the updated running statistics newMean and
// newVar (either may be nil) from the inputs runMean and runVar, and
// saveMean / saveInvStd (c elements each) for the backward pass.
func BatchNormTrainForward(x []float32, n, c, spatial int, scale, bias, runMean, runVar []float32, opt BatchNormTrainOptions, y, newMean, newVar, saveMean, saveInvStd []float32) {
	checkNorm(x, n, c, spatial, scale, bias, y)
	checkLen("saveMean", saveMean, c)
	checkLen("saveInvStd", saveInvStd, c)
	count := n * spatial
	parallelFor(c, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			var s float64
			for i := 0; i < n; i++ {
				for _, v := range x[(i*c+ch)*spatial : (i*c+ch+1)*spatial] {
					s += float64(v)
				}
			}
			mu := s / float64(count)
			var ss float64
			for i := 0; i < n; i++ {
				for _, v := range x[(i*c+ch)*spatial : (i*c+ch+1)*spatial] {
					d := float64(v) - mu
					ss += d * d
				}
			}
			v := ss / float64(count)
			saveMean[ch] = float32(mu)
			saveInvStd[ch] = float32(1 / math.Sqrt(v+float64(opt.Epsilon)))
			m := float64(opt.Momentum)
			if newMean != nil {
				newMean[ch] = float32(float64(runMean[ch])*m + mu*(1-m))
			}
			if newVar != nil {
				rv := v
				if opt.UnbiasedRunningVar && count > 1 {
					rv = ss / float64(count-1)
				}
				newVar[ch] = float32(float64(runVar[ch])*m + rv*(1-m))
			}
		}
	})
	parallelFor(n*c, max(1, 4096/max(1, spatial)), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			ch := q % c
			a := scale[ch] * saveInvStd[ch]
			b := bias[ch] - saveMean[ch]*a
			dst := y[q*spatial : (q+1)*spatial]
			for i, v := range x[q*spatial : (q+1)*spatial] {
				dst[i] = v*a + b
			}
		}
	})
}

// BatchNormTrainBackward computes dx, dscale and dbias (each may be nil) of
// training-mode batch normalization, with the gradient flowing through the
// batch statistics.
func BatchNormTrainBackward(x []float32, n, c, spatial int, scale, saveMean, saveInvStd, dy, dx, dscale, dbias []float32) {
	checkNorm(x, n, c, spatial, scale, nil, dx)
	checkLen("dy", dy, n*c*spatial)
	count := float64(n * spatial)
	parallelFor(c, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			mu, inv := saveMean[ch], saveInvStd[ch]
			var sg, sgx float64
			for i := 0; i < n; i++ {
				off := (i*c + ch) * spatial
				xs := x[off : off+spatial]
				var pg, pgx float32
				for j, v := range dy[off : off+spatial] {
					pg += v
					pgx += v * (xs[j] - mu)
				}
				sg += float64(pg)
				sgx += float64(pgx)
			}
			if dscale != nil {
				dscale[ch] = float32(sgx) * inv
			}
			if dbias != nil {
				dbias[ch] = float32(sg)
			}
			if dx == nil {
				continue
			}
			gamma := scale[ch]
			mg := float32(sg / count)
			mgx := float32(sgx/count) * inv // mean(dy·x̂)
			for i := 0; i < n; i++ {
				off := (i*c + ch) * spatial
				xs := x[off : off+spatial]
				d := dx[off : off+spatial]
				for j, v := range dy[off : off+spatial] {
					xh := (xs[j] - mu) * inv
					d[j] = gamma * inv * (v - mg - xh*mgx)
				}
			}
		}
	})
}

// NormalizeRows writes y = (x − μ)/√(σ² + eps) for rows [lo, hi) of x, each
// of L contiguous elements (LayerNormalization over the last axis without
// scale and bias: the runtime's fusion of the decomposed ReduceMean → Sub →
// Pow → ReduceMean → Add → Sqrt → Div chain that torch exports), and stores
// 1/√(σ² + eps) of row r in invStd[r]. Statistics are two-pass in float64,
// as in the other normalizations.
func NormalizeRows(x, y []float32, L int, eps float32, invStd []float32, lo, hi int) {
	for r := lo; r < hi; r++ {
		xr, yr := x[r*L:(r+1)*L], y[r*L:(r+1)*L]
		var s0, s1 float64
		j := 0
		for ; j+1 < len(xr); j += 2 {
			s0 += float64(xr[j])
			s1 += float64(xr[j+1])
		}
		if j < len(xr) {
			s0 += float64(xr[j])
		}
		mu := (s0 + s1) / float64(L)
		var q0, q1 float64
		for j = 0; j+1 < len(xr); j += 2 {
			d0, d1 := float64(xr[j])-mu, float64(xr[j+1])-mu
			q0 += d0 * d0
			q1 += d1 * d1
		}
		if j < len(xr) {
			d := float64(xr[j]) - mu
			q0 += d * d
		}
		inv := 1 / math.Sqrt((q0+q1)/float64(L)+float64(eps))
		invStd[r] = float32(inv)
		// x − μ in float64: with μ rounded to float32 first, rows with
		// |μ| ≫ σ would carry a shift of (μ − float32(μ))·inv.
		for j, v := range xr {
			yr[j] = float32((float64(v) - mu) * inv)
		}
	}
}

// NormalizeRowsBackward computes dx for rows [lo, hi) of NormalizeRows from
// its output y and invStd: dx = inv·(dy − mean(dy) − y·mean(dy·y)), the
// gradient of the normalization alone (the affine transform, if any, is
// applied by separate nodes).
func NormalizeRowsBackward(y, dy, invStd []float32, L int, dx []float32, lo, hi int) {
	for r := lo; r < hi; r++ {
		yr, gr, dr := y[r*L:(r+1)*L], dy[r*L:(r+1)*L], dx[r*L:(r+1)*L]
		var sg0, sg1, sy0, sy1 float64
		j := 0
		for ; j+1 < len(gr); j += 2 {
			g0, g1 := gr[j], gr[j+1]
			sg0 += float64(g0)
			sg1 += float64(g1)
			sy0 += float64(g0 * yr[j])
			sy1 += float64(g1 * yr[j+1])
		}
		if j < len(gr) {
			sg0 += float64(gr[j])
			sy0 += float64(gr[j] * yr[j])
		}
		mg := float32((sg0 + sg1) / float64(L))
		mgy := float32((sy0 + sy1) / float64(L))
		inv := invStd[r]
		for j, g := range gr {
			dr[j] = inv * (g - mg - yr[j]*mgy)
		}
	}
}
