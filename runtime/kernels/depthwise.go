package kernels

// Depthwise convolution. When Group == C > 1 every output channel m reads
// the single input channel m/mult (mult = M/C, the channel multiplier) and
// its weights are K taps, so the grouped path's im2col + GEMM per group and
// sample is a 1×K×T product dominated by call and unfold overhead
// (MobileNetV2's 3×3 depthwise layers, up to 960 channels). The direct
// kernels below slide the K taps over a channel plane instead: the input
// plane is copied into a zero-padded plane (when the convolution pads), so
// that every tap of every output position lies inside it and the inner
// loops are branch-free rows.
//
// 2-D 3×3 kernels, the common case, go through SSE2 kernels
// (depthwise_amd64.s) that take a whole plane per call and sum the nine
// taps of four output columns at a time. With a width stride s > 1 their
// padded planes store each row's columns by phase modulo s (all columns
// ≡ 0, then all ≡ 1, …), so that the columns a kernel column reads for
// consecutive outputs are again consecutive. The input gradient of a
// unit-stride convolution is the same kind of correlation, of the padded
// output gradient with the flipped taps; strided ones scatter each
// output's taps back into a padded accumulator, one contiguous run per tap
// and row on the 3×3 path.
//
// Work is split over runs of (sample, channel) planes in memory order;
// the weight gradient is summed per worker and the partials added in worker
// order, so that results are reproducible for a given Workers(). Each
// worker keeps its padded planes for the whole call and rewrites only their
// interiors: their borders are cleared once.

// dwOff sends depthwise shapes down the grouped im2col + GEMM path (tests
// and benchmarks compare the two).
var dwOff bool

// IsDepthwise reports whether the convolution is depthwise (Group == C > 1,
// any channel multiplier M/C), the shapes that take the direct kernels.
func (s *ConvShape) IsDepthwise() bool { return s.Group > 1 && s.Group == s.C }

// corrGeom is a sliding-window correlation over a plane of extent pd that
// holds every tap: output position o (extent out) reads p[o·st + k·dl].
// On the 3×3 path (nine) kernel column j of a row starts at c_j (c_0 = 0)
// and the outputs of a row read consecutive elements from there.
type corrGeom struct {
	k, st, dl, out, pd [3]int
	nine               bool
	c1, c2             int
}

// winSpec copies a plane of extent sd into one of extent dd so that
// dst[q] = src[q − off]: the box [lo, hi) of dst is covered (empty when
// some lo ≥ hi). With split > 1 the rows of the source (splitSrc) or of
// the destination are stored by column phase modulo split.
type winSpec struct {
	sd, dd, off, lo, hi [3]int
	empty               bool
	split               int
	splitSrc            bool
}

func newWin(sd, dd, off [3]int) winSpec {
	w := winSpec{sd: sd, dd: dd, off: off, split: 1}
	for a := 0; a < 3; a++ {
		w.lo[a] = min(max(off[a], 0), dd[a])
		w.hi[a] = min(max(off[a]+sd[a], 0), dd[a])
		w.empty = w.empty || w.lo[a] >= w.hi[a]
	}
	return w
}

// splitCol returns where column col of a row of width W stored by phase
// modulo s lies: the phases before col's, then col/s.
func splitCol(col, W, s int) int {
	at := 0
	for ph := 0; ph < col%s; ph++ {
		at += (W - ph + s - 1) / s
	}
	return at + col/s
}

// dwPlan is the geometry of the depthwise kernels, built by Init.
type dwPlan struct {
	padded bool     // the input is copied into a padded plane
	unit   bool     // unit strides: dx correlates the padded dy
	xWin   winSpec  // input → padded input plane
	fwd    corrGeom // forward and dw
	dyWin  winSpec  // output gradient → padded output-gradient plane (unit)
	bwd    corrGeom // dx as a correlation of that plane (unit)
	scat   corrGeom // dx scattered into a padded accumulator (strided)
	accWin winSpec  // that accumulator → dx (strided)
	xPlane int      // padded input plane (0 when not padded)
	dPlane int      // dx's plane: padded dy (unit) or accumulator
}

func (s *ConvShape) initDepthwise() {
	g := &s.g
	var d dwPlan
	var ext, dext, doff, negPad [3]int
	d.unit = true
	xp, dp := 1, 1
	for a := 0; a < 3; a++ {
		ext[a] = (g.out[a]-1)*g.s[a] + (g.k[a]-1)*g.d[a] + 1
		d.padded = d.padded || g.pb[a] != 0 || ext[a] > g.in[a]
		d.unit = d.unit && g.s[a] == 1
		// dx[q] = Σ_k w[k]·dy[q + pb − k·d] = Σ_k w[K−1−k]·dyP[q + k·d]
		// with dyP[q] = dy[q − doff].
		dext[a] = g.in[a] + (g.k[a]-1)*g.d[a]
		doff[a] = (g.k[a]-1)*g.d[a] - g.pb[a]
		negPad[a] = -g.pb[a]
		xp *= ext[a]
		dp *= dext[a]
	}
	nine := g.k[0] == 1 && g.k[1] == 3 && g.k[2] == 3
	split := 1
	if nine && g.s[2] > 1 {
		split = g.s[2]
		d.padded = true // the split plane is needed even without pads
	}
	d.fwd = corrGeom{k: g.k, st: g.s, dl: g.d, out: g.out, pd: g.in, nine: nine}
	if d.padded {
		d.xWin = newWin(g.in, ext, g.pb)
		d.xWin.split = split
		d.fwd.pd = ext
		d.xPlane = xp
	}
	if nine {
		d.fwd.c1 = splitCol(g.d[2], d.fwd.pd[2], split)
		d.fwd.c2 = splitCol(2*g.d[2], d.fwd.pd[2], split)
	}
	if d.unit {
		d.dyWin = newWin(g.out, dext, doff)
		d.bwd = corrGeom{k: g.k, st: [3]int{1, 1, 1}, dl: g.d, out: g.in, pd: dext, nine: nine, c1: g.d[2], c2: 2 * g.d[2]}
		d.dPlane = dp
	} else {
		d.scat = d.fwd
		d.scat.pd = ext
		if nine {
			d.scat.c1 = splitCol(g.d[2], ext[2], split)
			d.scat.c2 = splitCol(2*g.d[2], ext[2], split)
		}
		d.accWin = newWin(ext, g.in, negPad)
		d.accWin.split, d.accWin.splitSrc = split, true
		d.dPlane = xp
	}
	s.dw = d
}

// dwForwardWS and dwBackwardWS are the per-worker workspaces of the
// depthwise forward and backward passes.
func (s *ConvShape) dwForwardWS() int  { return s.dw.xPlane }
func (s *ConvShape) dwBackwardWS() int { return s.dw.xPlane + s.dw.dPlane + s.K }

// dwWorkspaceSize is ConvWorkspaceSize for depthwise shapes: each
// worker's planes, and a weight-gradient partial per worker beyond the
// first.
func dwWorkspaceSize(s *ConvShape) int {
	w := max(1, min(Workers(), s.N*s.C))
	return w*max(s.dwForwardWS(), s.dwBackwardWS()) + (w-1)*s.M*s.K
}

// DepthwiseScratchSize returns the scratch DepthwisePerSampleGrad needs,
// in float32 elements.
func DepthwiseScratchSize(s *ConvShape) int {
	s.check()
	return s.dwForwardWS()
}

// DepthwisePerSampleGrad writes the weight gradient of one sample of a
// depthwise convolution (IsDepthwise) to dw (M·K elements, the weight's
// layout): dw[m, k] = Σ_t dyi[m, t] · xi[m/mult, t ⊕ k], where t ⊕ k is the
// input position tap k reads for output position t (zero in the padding).
// xi is the sample's input (C·InSize), dyi its output gradient (M·T) and
// ws scratch of DepthwiseScratchSize(s) elements (any contents). It runs
// serially: the DP engine calls it for many samples at once.
func DepthwisePerSampleGrad(s *ConvShape, xi, dyi, dw, ws []float32) {
	s.check()
	if !s.IsDepthwise() {
		panic("kernels: DepthwisePerSampleGrad of a convolution that is not depthwise")
	}
	checkLen("xi", xi, s.C*s.InSize)
	checkLen("dyi", dyi, s.M*s.T)
	checkLen("dw", dw, s.M*s.K)
	d := &s.dw
	checkLen("ws", ws, d.xPlane)
	plane := ws[:d.xPlane]
	clear(plane)
	mult, K, T, in := s.M/s.C, s.K, s.T, s.InSize
	clear(dw[:s.M*K])
	for c := 0; c < s.C; c++ {
		p := xi[c*in : (c+1)*in]
		if d.padded {
			d.xWin.into(p, plane)
			p = plane
		}
		for j := 0; j < mult; j++ {
			m := c*mult + j
			dwDot(p, dyi[m*T:(m+1)*T], dw[m*K:(m+1)*K], &d.fwd)
		}
	}
}

// dwForward is ConvForward for depthwise shapes; it reports false (and does
// nothing) when ws cannot hold one worker's plane.
func dwForward(s *ConvShape, x, w, bias, y, ws []float32) bool {
	d := &s.dw
	per := d.xPlane
	units := s.N * s.C
	workers := max(1, min(Workers(), units))
	if per > 0 {
		workers = min(workers, len(ws)/per)
		if workers < 1 {
			return false
		}
	}
	mult, K, T, in := s.M/s.C, s.K, s.T, s.InSize
	parallelWorkers(workers, units, func(wk, lo, hi int) {
		plane := ws[wk*per : (wk+1)*per]
		clear(plane)
		for u := lo; u < hi; u++ {
			n, c := u/s.C, u%s.C
			p := x[u*in : (u+1)*in]
			if d.padded {
				d.xWin.into(p, plane)
				p = plane
			}
			for j := 0; j < mult; j++ {
				m := c*mult + j
				ym := y[(n*s.M+m)*T : (n*s.M+m+1)*T]
				var b float32
				if bias != nil {
					b = bias[m]
				}
				for t := range ym {
					ym[t] = b
				}
				dwCorr(p, w[m*K:(m+1)*K], ym, &d.fwd)
			}
		}
	})
	return true
}

// dwBackward is ConvBackward's dx and dw for depthwise shapes; it reports
// false (and does nothing) when ws cannot hold one worker's scratch.
// Workers take runs of (sample, channel) planes in memory order, as the
// forward pass does (small planes taken channel by channel across the
// samples would each be a cache miss), and sum the weight gradient of
// their planes privately; the partials are added in worker order.
func dwBackward(s *ConvShape, x, w, dy, dx, dw, ws []float32) bool {
	d := &s.dw
	per, wSize := s.dwBackwardWS(), s.M*s.K
	units := s.N * s.C
	extra := 0
	if dw != nil {
		extra = wSize
	}
	if per > len(ws) {
		return false
	}
	workers := max(1, min(Workers(), units))
	for workers > 1 && workers*per+(workers-1)*extra > len(ws) {
		workers--
	}
	mult, K, T, in := s.M/s.C, s.K, s.T, s.InSize
	parallelWorkers(workers, units, func(wk, lo, hi int) {
		buf := ws[wk*per : (wk+1)*per]
		xp, dp, wf := buf[:d.xPlane], buf[d.xPlane:d.xPlane+d.dPlane], buf[d.xPlane+d.dPlane:]
		clear(xp)
		clear(dp)
		dwp := workerGrad(dw, ws, workers, per, wSize, wk)
		for u := lo; u < hi; u++ {
			n, c := u/s.C, u%s.C
			if dw != nil {
				p := x[u*in : (u+1)*in]
				if d.padded {
					d.xWin.into(p, xp)
					p = xp
				}
				for j := 0; j < mult; j++ {
					m := c*mult + j
					dwDot(p, dy[(n*s.M+m)*T:(n*s.M+m+1)*T], dwp[m*K:(m+1)*K], &d.fwd)
				}
			}
			if dx == nil {
				continue
			}
			dxc := dx[u*in : (u+1)*in]
			if d.unit {
				clear(dxc)
				for j := 0; j < mult; j++ {
					m := c*mult + j
					d.dyWin.into(dy[(n*s.M+m)*T:(n*s.M+m+1)*T], dp)
					wm := w[m*K : (m+1)*K]
					for k := range wf {
						wf[k] = wm[K-1-k]
					}
					dwCorr(dp, wf, dxc, &d.bwd)
				}
				continue
			}
			clear(dp)
			for j := 0; j < mult; j++ {
				m := c*mult + j
				dwScatter(dy[(n*s.M+m)*T:(n*s.M+m+1)*T], w[m*K:(m+1)*K], dp, &d.scat)
			}
			clear(dxc)
			d.accWin.into(dp, dxc)
		}
	})
	sumWorkerGrads(dw, ws, workers, per, wSize)
	return true
}

// into copies src into the box of dst it covers; the rest of dst keeps its
// contents (the zero border of a padded plane).
func (w *winSpec) into(src, dst []float32) {
	if w.empty {
		return
	}
	if w.split > 1 {
		w.intoSplit(src, dst)
		return
	}
	sd, dd, off := &w.sd, &w.dd, &w.off
	lo2, n := w.lo[2], w.hi[2]-w.lo[2]
	for a := w.lo[0]; a < w.hi[0]; a++ {
		for b := w.lo[1]; b < w.hi[1]; b++ {
			row := dst[(a*dd[1]+b)*dd[2]+lo2:][:n]
			sr := src[((a-off[0])*sd[1]+b-off[1])*sd[2]+lo2-off[2]:][:n]
			// Short rows (small feature maps) as one move, not a call.
			switch n {
			case 4:
				*(*[4]float32)(row) = *(*[4]float32)(sr)
			case 8:
				*(*[8]float32)(row) = *(*[8]float32)(sr)
			default:
				copy(row, sr)
			}
		}
	}
}

// intoSplit is into with the rows of one side stored by column phase.
func (w *winSpec) intoSplit(src, dst []float32) {
	sd, dd, off, s := &w.sd, &w.dd, &w.off, w.split
	o2 := off[2]
	// The box's columns [clo, chi) in the split side's coordinates.
	clo, chi := w.lo[2], w.hi[2]
	W := dd[2]
	if w.splitSrc {
		clo, chi = clo-o2, chi-o2
		W = sd[2]
	}
	for a := w.lo[0]; a < w.hi[0]; a++ {
		for b := w.lo[1]; b < w.hi[1]; b++ {
			drow := dst[(a*dd[1]+b)*dd[2]:][:dd[2]]
			srow := src[((a-off[0])*sd[1]+b-off[1])*sd[2]:][:sd[2]]
			// Walk the split side's columns phase by phase: column
			// col = ph + q·s sits at at+q in a split row.
			at := 0
			for ph := 0; ph < s; ph++ {
				qlo := 0
				if clo > ph {
					qlo = (clo - ph + s - 1) / s
				}
				qhi := 0
				if chi > ph {
					qhi = (chi - ph + s - 1) / s
				}
				if qlo < qhi {
					// The split side's run, and the plain side's elements
					// every s from pl.
					run, span := qhi-qlo, (qhi-qlo-1)*s+1
					if w.splitSrc {
						unsplitRun(srow[at+qlo:][:run], drow[ph+qlo*s+o2:][:span], s)
					} else {
						splitRun(drow[at+qlo:][:run], srow[ph+qlo*s-o2:][:span], s)
					}
				}
				at += (W - ph + s - 1) / s
			}
		}
	}
}

// splitRun gathers every s-th element of pl into sp.
func splitRun(sp, pl []float32, s int) {
	if s == 2 {
		for i := range sp {
			sp[i] = pl[2*i]
		}
		return
	}
	for i := range sp {
		sp[i] = pl[i*s]
	}
}

// unsplitRun scatters sp to every s-th element of pl.
func unsplitRun(sp, pl []float32, s int) {
	if s == 2 {
		for i, v := range sp {
			pl[2*i] = v
		}
		return
	}
	for i, v := range sp {
		pl[i*s] = v
	}
}

// corr9 adds to y[r·ys + o] the nine taps w[3i+j]·p[r·ps + i·rd + c_j + o]
// (c_0 = 0) for rows r and columns o < n.
func corr9(y []float32, ys int, p []float32, ps, rd, c1, c2 int, w *[9]float32, rows, n int) {
	if rows <= 0 || n <= 0 {
		return
	}
	n4 := 0
	if haveSIMD && n >= 4 {
		n4 = n &^ 3
		_ = y[(rows-1)*ys+n4-1]
		_ = p[(rows-1)*ps+2*rd+max(c1, c2)+n4-1]
		conv9SSE(y, p, w, rows, n4, ys, ps, rd, c1, c2)
	}
	for r := 0; n4 < n && r < rows; r++ {
		b := r*ps + n4
		corrRow9(y[r*ys+n4:r*ys+n], p[b:], p[b+rd:], p[b+2*rd:], w, c1, c2)
	}
}

// dot9 adds to acc[3i+j] Σ_{r,o} g[r·gs + o]·p[r·ps + i·rd + c_j + o]
// over rows r and columns o < n: corr9's weight gradient.
func dot9(g []float32, gs int, p []float32, ps, rd, c1, c2 int, acc *[9]float32, rows, n int) {
	if rows <= 0 || n <= 0 {
		return
	}
	n4 := 0
	if haveSIMD && n >= 4 {
		n4 = n &^ 3
		_ = g[(rows-1)*gs+n4-1]
		_ = p[(rows-1)*ps+2*rd+max(c1, c2)+n4-1]
		dot9SSE(g, p, acc, rows, n4, gs, ps, rd, c1, c2)
	}
	for r := 0; n4 < n && r < rows; r++ {
		b := r*ps + n4
		dotRow9(g[r*gs+n4:r*gs+n], p[b:], p[b+rd:], p[b+2*rd:], c1, c2, acc)
	}
}

// dwCorr adds to y (extent cg.out) Σ_k w[k]·p[o·st + k·dl] at every output
// position o.
func dwCorr(p, w, y []float32, cg *corrGeom) {
	k, st, dl, out, pd := &cg.k, &cg.st, &cg.dl, &cg.out, &cg.pd
	if cg.nine {
		var w9 [9]float32
		copy(w9[:], w)
		for od := 0; od < out[0]; od++ {
			yo := y[od*out[1]*out[2] : (od+1)*out[1]*out[2]]
			po := p[od*st[0]*pd[1]*pd[2]:]
			corr9(yo, out[2], po, st[1]*pd[2], dl[1]*pd[2], cg.c1, cg.c2, &w9, out[1], out[2])
		}
		return
	}
	for od := 0; od < out[0]; od++ {
		for oh := 0; oh < out[1]; oh++ {
			yr := y[(od*out[1]+oh)*out[2] : (od*out[1]+oh+1)*out[2]]
			for kd := 0; kd < k[0]; kd++ {
				for kh := 0; kh < k[1]; kh++ {
					base := ((od*st[0]+kd*dl[0])*pd[1] + oh*st[1] + kh*dl[1]) * pd[2]
					corrRow(yr, p[base:], w[(kd*k[1]+kh)*k[2]:(kd*k[1]+kh+1)*k[2]], dl[2], st[2])
				}
			}
		}
	}
}

// corrRow adds Σ_kw wk[kw]·r[o·s + kw·d] to y[o].
func corrRow(y, r, wk []float32, d, s int) {
	n := len(y)
	if s == 1 {
		if len(wk) == 3 {
			a, b, c := r[:n], r[d:][:n], r[2*d:][:n]
			w0, w1, w2 := wk[0], wk[1], wk[2]
			for o := range y {
				y[o] += w0*a[o] + w1*b[o] + w2*c[o]
			}
			return
		}
		for kw, wv := range wk {
			a := r[kw*d:][:n]
			for o := range y {
				y[o] += wv * a[o]
			}
		}
		return
	}
	for kw, wv := range wk {
		a := r[kw*d : kw*d+(n-1)*s+1]
		for o := range y {
			y[o] += wv * a[o*s]
		}
	}
}

// corrRow9 adds the nine taps w of rows r0, r1 and r2 at o, c1+o and c2+o
// to y[o].
func corrRow9(y, r0, r1, r2 []float32, w *[9]float32, c1, c2 int) {
	n := len(y)
	a0, b0, e0 := r0[:n], r0[c1:][:n], r0[c2:][:n]
	a1, b1, e1 := r1[:n], r1[c1:][:n], r1[c2:][:n]
	a2, b2, e2 := r2[:n], r2[c1:][:n], r2[c2:][:n]
	w0, w1, w2, w3, w4, w5, w6, w7, w8 := w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]
	for o := range y {
		s0 := w0*a0[o] + w1*b0[o] + w2*e0[o]
		s1 := w3*a1[o] + w4*b1[o] + w5*e1[o]
		s2 := w6*a2[o] + w7*b2[o] + w8*e2[o]
		y[o] += s0 + s1 + s2
	}
}

// dwDot adds to acc[k] Σ_o gr[o]·p[o·st + k·dl] over the output positions
// o: the weight gradient of one channel plane.
func dwDot(p, gr, acc []float32, cg *corrGeom) {
	k, st, dl, out, pd := &cg.k, &cg.st, &cg.dl, &cg.out, &cg.pd
	if cg.nine {
		var a9 [9]float32
		for od := 0; od < out[0]; od++ {
			gp := gr[od*out[1]*out[2] : (od+1)*out[1]*out[2]]
			po := p[od*st[0]*pd[1]*pd[2]:]
			dot9(gp, out[2], po, st[1]*pd[2], dl[1]*pd[2], cg.c1, cg.c2, &a9, out[1], out[2])
		}
		for i, v := range a9 {
			acc[i] += v
		}
		return
	}
	for od := 0; od < out[0]; od++ {
		for oh := 0; oh < out[1]; oh++ {
			row := gr[(od*out[1]+oh)*out[2] : (od*out[1]+oh+1)*out[2]]
			n := len(row)
			for kd := 0; kd < k[0]; kd++ {
				for kh := 0; kh < k[1]; kh++ {
					base := ((od*st[0]+kd*dl[0])*pd[1] + oh*st[1] + kh*dl[1]) * pd[2]
					r := p[base:]
					ak := acc[(kd*k[1]+kh)*k[2] : (kd*k[1]+kh+1)*k[2]]
					for kw := range ak {
						var sum float32
						if st[2] == 1 {
							a := r[kw*dl[2]:][:n]
							for o, v := range row {
								sum += v * a[o]
							}
						} else {
							a := r[kw*dl[2] : kw*dl[2]+(n-1)*st[2]+1]
							for o, v := range row {
								sum += v * a[o*st[2]]
							}
						}
						ak[kw] += sum
					}
				}
			}
		}
	}
}

// dotRow9 adds to acc the nine dot products of g with rows r0, r1 and r2
// from 0, c1 and c2.
func dotRow9(g, r0, r1, r2 []float32, c1, c2 int, acc *[9]float32) {
	n := len(g)
	a0, b0, e0 := r0[:n], r0[c1:][:n], r0[c2:][:n]
	a1, b1, e1 := r1[:n], r1[c1:][:n], r1[c2:][:n]
	a2, b2, e2 := r2[:n], r2[c1:][:n], r2[c2:][:n]
	var s0, s1, s2, s3, s4, s5, s6, s7, s8 float32
	for o, v := range g {
		s0 += v * a0[o]
		s1 += v * b0[o]
		s2 += v * e0[o]
		s3 += v * a1[o]
		s4 += v * b1[o]
		s5 += v * e1[o]
		s6 += v * a2[o]
		s7 += v * b2[o]
		s8 += v * e2[o]
	}
	acc[0] += s0
	acc[1] += s1
	acc[2] += s2
	acc[3] += s3
	acc[4] += s4
	acc[5] += s5
	acc[6] += s6
	acc[7] += s7
	acc[8] += s8
}

// dwScatter adds w[k]·gr[o] to p[o·st + k·dl]: the adjoint of dwCorr, for
// the input gradient of strided convolutions. One pass per tap: fusing the
// taps of a row would make each element's update wait for the store of the
// previous output's. On the 3×3 path each pass is a contiguous run.
func dwScatter(gr, w, p []float32, cg *corrGeom) {
	k, st, dl, out, pd := &cg.k, &cg.st, &cg.dl, &cg.out, &cg.pd
	s := st[2]
	for od := 0; od < out[0]; od++ {
		for oh := 0; oh < out[1]; oh++ {
			row := gr[(od*out[1]+oh)*out[2] : (od*out[1]+oh+1)*out[2]]
			n := len(row)
			if n == 0 {
				continue
			}
			for kd := 0; kd < k[0]; kd++ {
				for kh := 0; kh < k[1]; kh++ {
					base := ((od*st[0]+kd*dl[0])*pd[1] + oh*st[1] + kh*dl[1]) * pd[2]
					wk := w[(kd*k[1]+kh)*k[2] : (kd*k[1]+kh+1)*k[2]]
					if cg.nine {
						for kw, c := range [3]int{0, cg.c1, cg.c2} {
							a, wv := p[base+c:][:n], wk[kw]
							for o, v := range row {
								a[o] += wv * v
							}
						}
						continue
					}
					for kw, wv := range wk {
						a := p[base+kw*dl[2]:][:(n-1)*s+1]
						for o, v := range row {
							a[o*s] += wv * v
						}
					}
				}
			}
		}
	}
}
