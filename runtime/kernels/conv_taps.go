package kernels

import "github.com/dpfinetune/dpfinetune/runtime/blas"

// Tap-class convolution. On small feature maps most kernel taps of a padded
// convolution fall on the padding: a 3×3 kernel with pad 1 on a 1×1 map
// (ResNet-18's last stage on 32×32 inputs) touches the input with one tap
// of nine, on a 2×2 map with four, on a 4×4 map with 6.25 on average. The
// im2col GEMM multiplies all those zeros; on resnet18-cifar they were 43 %
// of the convolutions' multiply-adds. Direct convolutions (oneDNN's) skip
// them by bounding the tap loops per output position.
//
// Here the output positions are grouped into classes whose windows overlap
// the input on the same taps (along each axis an output index sees a
// contiguous range of taps; positions with the same ranges on every axis
// share a class: the corners, edges and interior of a 2-D map). Each class
// is a dense convolution of its own: an unfolded input with only the valid
// taps' rows (C·|taps| × n·|positions|, every entry read from the input, no
// padding), a weight with only those taps' columns (packed once per call),
// and one GEMM. The products skip exactly the padding terms of the dense
// ones, so the results agree with the dense path up to float32 summation
// order.

// tapClass is one class of output positions.
type tapClass struct {
	pos  []int32 // output positions t, ascending
	taps []int32 // kernel taps k (row-major over kd, kh, kw), ascending
	// gidx[p·C·len(taps) + c·len(taps) + j] is the offset in a sample's
	// input of channel c under tap taps[j] at output position pos[p]: a
	// row of the class's unfolded input, transposed (one row per
	// position, distinct offsets within a row).
	gidx []int32
	// widx[c·len(taps)+j] = c·K + taps[j]: where a packed weight row's
	// entries sit in the weight's row.
	widx []int32
	wOff int // the class's M×(C·len(taps)) block in the packed weights
	// colOff and posOff are the per-sample offsets of the class's
	// unfolded input and output in a chunk (see tapPlan.colPer).
	colOff, posOff int
}

// tapPlan is the tap-class decomposition of a shape (ConvShape.taps).
type tapPlan struct {
	classes []tapClass
	wPack   int // Σ over classes of M·C·len(taps): the packed weights
	// gemm is set where the classes' products replace the dense ones
	// (buildTaps); the classes serve Im2ColPlane on every shape that has
	// them.
	gemm bool
	// colPer is one sample's unfolded input over all classes (Σ
	// C·len(taps)·len(pos)); a chunk of n samples holds class q's at
	// n·colOff, its output (or output gradient) at n·M·posOff.
	colPer int
}

// tapMinWaste is the share of padding multiply-adds in the dense product
// from which the tap-class path may replace the chunked one.
const tapMinWaste = 0.25

// tapMaxClasses caps the number of classes (27 is every axis cut into a
// beginning, an interior and an end).
const tapMaxClasses = 27

// axisTaps is one class of output indices along one axis: the indices
// whose window overlaps the input on taps [lo, hi).
type axisTaps struct {
	lo, hi int
	idx    []int
}

// axisClasses groups the output indices of axis a by their valid tap range.
func (g *geom3) axisClasses(a int) []axisTaps {
	var cls []axisTaps
	for o := 0; o < g.out[a]; o++ {
		lo, hi := g.k[a], 0
		for k := 0; k < g.k[a]; k++ {
			if i := o*g.s[a] + k*g.d[a] - g.pb[a]; i >= 0 && i < g.in[a] {
				lo, hi = min(lo, k), max(hi, k+1)
			}
		}
		if lo >= hi {
			lo, hi = 0, 0
		}
		found := false
		for c := range cls {
			if cls[c].lo == lo && cls[c].hi == hi {
				cls[c].idx = append(cls[c].idx, o)
				found = true
				break
			}
		}
		if !found {
			cls = append(cls, axisTaps{lo: lo, hi: hi, idx: []int{o}})
		}
	}
	return cls
}

// buildTaps fills s.taps when the shape takes the tap-class path: Group 1,
// a chunked-size output, and at least tapMinWaste of the dense product on
// the padding.
func (s *ConvShape) buildTaps() {
	s.taps = nil
	g := &s.g
	if s.Group != 1 || s.T >= batchedMaxT || s.K*s.T > maxGather {
		return
	}
	var ax [3][]axisTaps
	n := 1
	for a := 0; a < 3; a++ {
		ax[a] = g.axisClasses(a)
		n *= len(ax[a])
	}
	if n > tapMaxClasses {
		return
	}
	useful := 0
	for _, c0 := range ax[0] {
		for _, c1 := range ax[1] {
			for _, c2 := range ax[2] {
				useful += len(c0.idx) * len(c1.idx) * len(c2.idx) * (c0.hi - c0.lo) * (c1.hi - c1.lo) * (c2.hi - c2.lo)
			}
		}
	}
	// The products: both paths are bound by the weights as much as by
	// the products on these maps, each packing its weight operand per
	// call (the classes' blocks here, with taps shared between classes
	// repeated). Only where the classes' blocks hold no more taps than
	// the kernel does the saving in products show (gemm): 1×1 and
	// 2×2-to-1×1 maps are 2.5–3.7× faster, while 2×2 maps (four classes
	// of four taps) are no faster and 4×4 maps (49 taps in nine classes)
	// 1.5× slower (BenchmarkResNet18Layers). The unfolding by classes
	// (Im2ColPlane) gains on all of them.
	if float64(useful) > (1-tapMinWaste)*float64(s.T*s.K) {
		return
	}
	packed := 0
	for _, c0 := range ax[0] {
		for _, c1 := range ax[1] {
			for _, c2 := range ax[2] {
				packed += (c0.hi - c0.lo) * (c1.hi - c1.lo) * (c2.hi - c2.lo)
			}
		}
	}
	tp := &tapPlan{gemm: packed <= s.K}
	posOff := 0
	for _, c0 := range ax[0] {
		for _, c1 := range ax[1] {
			for _, c2 := range ax[2] {
				var cl tapClass
				var off []int32
				for _, od := range c0.idx {
					for _, oh := range c1.idx {
						for _, ow := range c2.idx {
							cl.pos = append(cl.pos, int32((od*g.out[1]+oh)*g.out[2]+ow))
						}
					}
				}
				for kd := c0.lo; kd < c0.hi; kd++ {
					for kh := c1.lo; kh < c1.hi; kh++ {
						for kw := c2.lo; kw < c2.hi; kw++ {
							cl.taps = append(cl.taps, int32((kd*g.k[1]+kh)*g.k[2]+kw))
							for _, od := range c0.idx {
								id := od*g.s[0] + kd*g.d[0] - g.pb[0]
								for _, oh := range c1.idx {
									ih := oh*g.s[1] + kh*g.d[1] - g.pb[1]
									for _, ow := range c2.idx {
										iw := ow*g.s[2] + kw*g.d[2] - g.pb[2]
										off = append(off, int32((id*g.in[1]+ih)*g.in[2]+iw))
									}
								}
							}
						}
					}
				}
				for c := 0; c < s.C; c++ {
					for _, k := range cl.taps {
						cl.widx = append(cl.widx, int32(c*s.K)+k)
					}
				}
				tq := len(cl.pos)
				for p := range cl.pos {
					for c := 0; c < s.C; c++ {
						for j := range cl.taps {
							cl.gidx = append(cl.gidx, int32(c*s.InSize)+off[j*tq+p])
						}
					}
				}
				cl.wOff, cl.colOff, cl.posOff = tp.wPack, tp.colPer, posOff
				tp.wPack += s.M * s.C * len(cl.taps)
				tp.colPer += s.C * len(cl.taps) * len(cl.pos)
				posOff += len(cl.pos)
				tp.classes = append(tp.classes, cl)
			}
		}
	}
	s.taps = tp
}

// tapBudget is the float32 elements of a chunk's unfolded inputs and
// outputs on the tap-class path (2 MiB: the L2 of two cores).
const tapBudget = 512 << 10

// tapChunk returns the samples per chunk.
func tapChunk(s *ConvShape) int {
	return max(1, min(s.N, tapBudget/(s.taps.colPer+s.M*s.T)))
}

// tapWS is the tap-class path's workspace: the packed weights, a chunk's
// unfolded inputs and outputs and, with dw, the packed weight gradient.
func tapWS(s *ConvShape, dw bool) int {
	tp := s.taps
	n := tp.wPack + tapChunk(s)*(tp.colPer+s.M*s.T)
	if dw {
		n += tp.wPack
	}
	return n
}

// tapChunking returns the chunk size of the tap-class path within a
// workspace of wsLen elements, or 0 when the shape does not take it or
// the workspace is too small. The chunk's products are split over
// Workers() by the BLAS layer: each worker packs its band of the weights
// once, where splitting the samples made every worker pack all of them
// for products a few columns wide.
func tapChunking(s *ConvShape, wsLen int, dw bool) int {
	if s.taps == nil || !s.taps.gemm || s.N < 1 || tapWS(s, dw) > wsLen {
		return 0
	}
	return tapChunk(s)
}

// gatherIdx writes dst[j] = src[m[j]] for j < len(m); every m[j] indexes
// src.
func gatherIdx(dst, src []float32, m []int32) {
	dst = dst[:len(m)]
	j := 0
	if haveGatherAVX512 && len(m) >= 16 {
		j = len(m) &^ 15
		gatherAVX512(dst, src, m)
	}
	for ; j < len(m); j++ {
		dst[j] = src[m[j]]
	}
}

// scatterAddIdx adds src[j] into dst[m[j]] for j < len(m); the m[j] are
// distinct and index dst.
func scatterAddIdx(dst, src []float32, m []int32) {
	src = src[:len(m)]
	j := 0
	if haveGatherAVX512 && len(m) >= 16 {
		j = len(m) &^ 15
		scatterAddAVX512(dst, src, m)
	}
	for ; j < len(m); j++ {
		dst[m[j]] += src[j]
	}
}

// packTapWeights writes each class's weight block: row m of class q holds
// w[m, c, taps[j]] at c·len(taps)+j.
func (s *ConvShape) packTapWeights(w, wp []float32) {
	tp := s.taps
	parallelFor(s.M, 16, func(lo, hi int) {
		for q := range tp.classes {
			cl := &tp.classes[q]
			dq := len(cl.widx)
			for m := lo; m < hi; m++ {
				gatherIdx(wp[cl.wOff+m*dq:cl.wOff+(m+1)*dq], w[m*s.D:(m+1)*s.D], cl.widx)
			}
		}
	})
}

// unpackTapGrads overwrites dw with the packed weight gradient dwp:
// each class's block scattered onto the taps it covers, zero on taps no
// class uses.
func (s *ConvShape) unpackTapGrads(dwp, dw []float32) {
	tp := s.taps
	parallelFor(s.M, 16, func(lo, hi int) {
		clear(dw[lo*s.D : hi*s.D])
		for q := range tp.classes {
			cl := &tp.classes[q]
			dq := len(cl.widx)
			for m := lo; m < hi; m++ {
				scatterAddIdx(dw[m*s.D:(m+1)*s.D], dwp[cl.wOff+m*dq:cl.wOff+(m+1)*dq], cl.widx)
			}
		}
	})
}

// tapUnfold writes class cl's unfolded input of samples i0+a … i0+b−1
// of x, transposed: column c·len(taps)+j of row i·len(pos)+p at
// colT[row·C·len(taps)+column]. Each row is one gather of a sample's
// input.
func (s *ConvShape) tapUnfold(cl *tapClass, x []float32, i0, a, b int, colT []float32) {
	tq, dq, xs := len(cl.pos), len(cl.widx), s.C*s.InSize
	for i := a; i < b; i++ {
		xi := x[(i0+i)*xs : (i0+i+1)*xs]
		for p := 0; p < tq; p++ {
			r := i*tq + p
			gatherIdx(colT[r*dq:(r+1)*dq], xi, cl.gidx[p*dq:(p+1)*dq])
		}
	}
}

// tapFold adds class cl's unfolded gradient colT (tapUnfold's layout) of
// samples i0+a … i0+b−1 onto their input gradients in dx: tapUnfold's
// adjoint.
func (s *ConvShape) tapFold(cl *tapClass, colT []float32, dx []float32, i0, a, b int) {
	tq, dq, xs := len(cl.pos), len(cl.widx), s.C*s.InSize
	for i := a; i < b; i++ {
		dxi := dx[(i0+i)*xs : (i0+i+1)*xs]
		for p := 0; p < tq; p++ {
			r := i*tq + p
			scatterAddIdx(dxi, colT[r*dq:(r+1)*dq], cl.gidx[p*dq:(p+1)*dq])
		}
	}
}

// tapBufs returns class cl's transposed unfolded input (n·len(pos) ×
// C·len(taps))
// and output (M × n·len(pos)) in a chunk buffer of nb samples holding n.
func (s *ConvShape) tapBufs(cl *tapClass, buf []float32, nb, n int) (col, out []float32) {
	tq := len(cl.pos)
	col = buf[nb*cl.colOff : nb*cl.colOff+s.C*len(cl.taps)*n*tq]
	o := nb*s.taps.colPer + nb*s.M*cl.posOff
	return col, buf[o : o+s.M*n*tq]
}

func convForwardTaps(s *ConvShape, nb int, x, w, bias, y, ws []float32) {
	tp := s.taps
	wp, buf := ws[:tp.wPack], ws[tp.wPack:]
	// With the AVX-512 backend the products read the classes' taps of w
	// where they are (blas.SgemmIdxB), computing the output transposed
	// (positions × channels); otherwise the taps are packed first. The
	// packing read all of w (a tap is one float in nine on a 3×3 kernel,
	// so every cache line) and the product then packed the copy again:
	// 6 % of resnet18-cifar's book-keeping step.
	idx := blas.IdxB()
	if !idx {
		s.packTapWeights(w, wp)
	}
	ys := s.M * s.T
	for i0 := 0; i0 < s.N; i0 += nb {
		n := min(nb, s.N-i0)
		parallelFor(n, 1, func(a, b int) {
			for q := range tp.classes {
				cl := &tp.classes[q]
				col, _ := s.tapBufs(cl, buf, nb, n)
				s.tapUnfold(cl, x, i0, a, b, col)
			}
		})
		for q := range tp.classes {
			cl := &tp.classes[q]
			col, out := s.tapBufs(cl, buf, nb, n)
			ld, dq := n*len(cl.pos), s.C*len(cl.taps)
			switch {
			case dq == 0:
				clear(out) // every tap on the padding: the output is the bias
			case idx:
				// outᵀ (positions × M) = colT · w_qᵀ, w_q's rows read
				// through the class's tap columns.
				blas.SgemmIdxB(false, true, ld, s.M, dq, 1, col, dq, w, s.D, cl.widx, 0, out, s.M)
			default:
				blas.Sgemm(false, true, s.M, ld, dq, 1, wp[cl.wOff:], dq, col, dq, 0, out, ld)
			}
		}
		parallelFor(n, 1, func(a, b int) {
			for q := range tp.classes {
				cl := &tp.classes[q]
				_, out := s.tapBufs(cl, buf, nb, n)
				tq := len(cl.pos)
				ld := n * tq
				for i := a; i < b; i++ {
					yi := y[(i0+i)*ys : (i0+i+1)*ys]
					if idx {
						// out holds row i·tq+p of M channels.
						for p, t := range cl.pos {
							src := out[(i*tq+p)*s.M : (i*tq+p+1)*s.M]
							for m, v := range src {
								if bias != nil {
									v += bias[m]
								}
								yi[m*s.T+int(t)] = v
							}
						}
						continue
					}
					for m := 0; m < s.M; m++ {
						src, dst := out[m*ld+i*tq:m*ld+(i+1)*tq], yi[m*s.T:(m+1)*s.T]
						var bv float32
						if bias != nil {
							bv = bias[m]
						}
						for p, t := range cl.pos {
							dst[t] = src[p] + bv
						}
					}
				}
			}
		})
	}
}

func convBackwardTaps(s *ConvShape, nb int, x, w, dy, dx, dw, ws []float32) {
	tp := s.taps
	wp, buf := ws[:tp.wPack], ws[tp.wPack:]
	var dwp []float32
	idx := blas.IdxB()
	if dx != nil && !idx {
		s.packTapWeights(w, wp)
	}
	if dw != nil {
		o := tp.wPack + nb*(tp.colPer+s.M*s.T)
		dwp = ws[o : o+tp.wPack]
		clear(dwp)
	}
	xs, ys := s.C*s.InSize, s.M*s.T
	for i0 := 0; i0 < s.N; i0 += nb {
		n := min(nb, s.N-i0)
		parallelFor(n, 1, func(a, b int) {
			if dx != nil {
				clear(dx[(i0+a)*xs : (i0+b)*xs])
			}
			for q := range tp.classes {
				cl := &tp.classes[q]
				col, g := s.tapBufs(cl, buf, nb, n)
				tq := len(cl.pos)
				ld := n * tq
				for i := a; i < b; i++ {
					dyi := dy[(i0+i)*ys : (i0+i+1)*ys]
					for m := 0; m < s.M; m++ {
						src, dst := dyi[m*s.T:(m+1)*s.T], g[m*ld+i*tq:m*ld+(i+1)*tq]
						for p, t := range cl.pos {
							dst[p] = src[t]
						}
					}
				}
				if dw != nil {
					s.tapUnfold(cl, x, i0, a, b, col)
				}
			}
		})
		for q := range tp.classes {
			cl := &tp.classes[q]
			col, g := s.tapBufs(cl, buf, nb, n)
			ld, dq := n*len(cl.pos), s.C*len(cl.taps)
			if dq == 0 {
				continue
			}
			if dw != nil {
				blas.Sgemm(false, false, s.M, dq, ld, 1, g, ld, col, dq, 1, dwp[cl.wOff:], dq)
			}
			switch {
			case dx != nil && idx:
				// w_q's columns read through the class's taps.
				blas.SgemmIdxB(true, false, ld, dq, s.M, 1, g, ld, w, s.D, cl.widx, 0, col, dq)
			case dx != nil:
				blas.Sgemm(true, false, ld, dq, s.M, 1, g, ld, wp[cl.wOff:], dq, 0, col, dq)
			}
		}
		if dx != nil {
			parallelFor(n, 1, func(a, b int) {
				for q := range tp.classes {
					cl := &tp.classes[q]
					col, _ := s.tapBufs(cl, buf, nb, n)
					s.tapFold(cl, col, dx, i0, a, b)
				}
			})
		}
	}
	if dw != nil {
		s.unpackTapGrads(dwp, dw)
	}
}

// tapIm2Col writes the dense unfolded input of one sample (Im2Col's
// layout, D×T) from the tap classes: zeros, then every entry that reads
// the input, each one copy. On small padded maps the per-channel padded
// plane and per-tap gathers of the gather-map path cost more than the
// entries themselves (ResNet-18's 1×1 maps: 512 channels, nine taps,
// one entry each).
func (s *ConvShape) tapIm2Col(xi, col []float32) {
	T := s.T
	clear(col[:s.D*T])
	for q := range s.taps.classes {
		cl := &s.taps.classes[q]
		dq := len(cl.widx)
		for p, t := range cl.pos {
			g := cl.gidx[p*dq : (p+1)*dq]
			for r, w := range cl.widx {
				col[int(w)*T+int(t)] = xi[g[r]]
			}
		}
	}
}
