package kernels

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// ConvShape describes an N-D convolution (ONNX Conv, 1 ≤ d ≤ 3 spatial
// dimensions) on NC(D)(H)W tensors: x is N×C×In, w is M×(C/Group)×Kernel,
// y is N×M×Out. Fill the exported inputs and call Init, which validates them
// and computes the derived fields.
type ConvShape struct {
	N, C, M, Group int   // batch, input channels, output channels, groups (0 means 1)
	In             []int // input spatial dims
	Kernel         []int // kernel spatial dims
	Strides        []int // nil means all 1
	Dilations      []int // nil means all 1
	Pads           []int // ONNX order [begin_1..begin_d, end_1..end_d]; nil means 0

	// Derived by Init.
	Out    []int // output spatial dims
	T      int   // output spatial size ∏Out: rows of a per-sample unfolded input
	K      int   // kernel spatial size ∏Kernel
	D      int   // (C/Group)·K: columns of a per-sample unfolded input
	InSize int   // input spatial size ∏In

	g geom3
}

// geom3 is a convolution or pooling window geometry lifted to 3 spatial
// dimensions by prepending unit dimensions, so one loop nest serves 1-D, 2-D
// and 3-D.
type geom3 struct {
	in, k, s, d, pb, pe, out [3]int
	ready                    bool
}

// OutputSize is the ONNX/PyTorch output length of a sliding window: floor
// (or ceil with ceilMode) of (in + padBegin + padEnd − ((k−1)·dilation+1)) /
// stride, plus 1. In ceil mode a last window that would start inside the end
// padding is dropped, as PyTorch does and ONNX opset ≥ 19 specifies.
func OutputSize(in, k, stride, dilation, padBegin, padEnd int, ceilMode bool) int {
	span := (k-1)*dilation + 1
	num := in + padBegin + padEnd - span
	if num < 0 {
		return 0
	}
	out := num/stride + 1
	if ceilMode && num%stride != 0 {
		out++
		if (out-1)*stride >= in+padBegin {
			out--
		}
	}
	return out
}

// ResolveAutoPad turns an ONNX auto_pad attribute into explicit pads
// ([begin_1..begin_d, end_1..end_d]). NOTSET (or "") returns pads (zeros
// when nil), VALID returns zeros, and SAME_UPPER / SAME_LOWER pad so that
// out = ceil(in/stride), putting the odd unit at the end (UPPER) or the
// beginning (LOWER). strides and dilations may be nil (all 1).
func ResolveAutoPad(autoPad string, in, kernel, strides, dilations, pads []int) ([]int, error) {
	d := len(in)
	if len(kernel) != d {
		return nil, fmt.Errorf("kernels: kernel rank %d != input rank %d", len(kernel), d)
	}
	out := make([]int, 2*d)
	switch autoPad {
	case "", "NOTSET":
		if pads == nil {
			return out, nil
		}
		if len(pads) != 2*d {
			return nil, fmt.Errorf("kernels: %d pads for %d spatial dims", len(pads), d)
		}
		copy(out, pads)
		return out, nil
	case "VALID":
		return out, nil
	case "SAME_UPPER", "SAME_LOWER":
		for i := 0; i < d; i++ {
			s, dl := 1, 1
			if strides != nil {
				s = strides[i]
			}
			if dilations != nil {
				dl = dilations[i]
			}
			if s < 1 || dl < 1 {
				return nil, fmt.Errorf("kernels: non-positive stride or dilation")
			}
			o := (in[i] + s - 1) / s
			total := max(0, (o-1)*s+(kernel[i]-1)*dl+1-in[i])
			small := total / 2
			if autoPad == "SAME_UPPER" {
				out[i], out[d+i] = small, total-small
			} else {
				out[i], out[d+i] = total-small, small
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("kernels: unknown auto_pad %q", autoPad)
}

// initGeom validates a window geometry and lifts it to 3-D.
func initGeom(in, kernel, strides, dilations, pads []int, ceilMode bool) (geom3, []int, error) {
	var g geom3
	d := len(in)
	if d < 1 || d > 3 {
		return g, nil, fmt.Errorf("kernels: %d spatial dims (1 to 3 supported)", d)
	}
	if len(kernel) != d {
		return g, nil, fmt.Errorf("kernels: kernel %v for input %v", kernel, in)
	}
	if strides != nil && len(strides) != d || dilations != nil && len(dilations) != d || pads != nil && len(pads) != 2*d {
		return g, nil, fmt.Errorf("kernels: strides %v, dilations %v or pads %v do not match %d spatial dims", strides, dilations, pads, d)
	}
	for i := 0; i < 3; i++ {
		g.in[i], g.k[i], g.s[i], g.d[i], g.out[i] = 1, 1, 1, 1, 1
	}
	out := make([]int, d)
	for i := 0; i < d; i++ {
		j := 3 - d + i
		g.in[j], g.k[j] = in[i], kernel[i]
		if strides != nil {
			g.s[j] = strides[i]
		}
		if dilations != nil {
			g.d[j] = dilations[i]
		}
		if pads != nil {
			g.pb[j], g.pe[j] = pads[i], pads[d+i]
		}
		if g.in[j] < 1 || g.k[j] < 1 || g.s[j] < 1 || g.d[j] < 1 || g.pb[j] < 0 || g.pe[j] < 0 {
			return g, nil, fmt.Errorf("kernels: invalid window: in %v kernel %v strides %v dilations %v pads %v", in, kernel, strides, dilations, pads)
		}
		o := OutputSize(g.in[j], g.k[j], g.s[j], g.d[j], g.pb[j], g.pe[j], ceilMode)
		if o < 1 {
			return g, nil, fmt.Errorf("kernels: empty output for in %v kernel %v pads %v dilations %v", in, kernel, pads, dilations)
		}
		g.out[j] = o
		out[i] = o
	}
	g.ready = true
	return g, out, nil
}

// Init validates the shape and fills Out, T, K, D and InSize.
func (s *ConvShape) Init() error {
	if s.Group == 0 {
		s.Group = 1
	}
	if s.N < 0 || s.C < 1 || s.M < 1 || s.Group < 1 || s.C%s.Group != 0 || s.M%s.Group != 0 {
		return fmt.Errorf("kernels: conv N=%d C=%d M=%d group=%d invalid", s.N, s.C, s.M, s.Group)
	}
	g, out, err := initGeom(s.In, s.Kernel, s.Strides, s.Dilations, s.Pads, false)
	if err != nil {
		return err
	}
	s.g, s.Out = g, out
	s.T = g.out[0] * g.out[1] * g.out[2]
	s.K = g.k[0] * g.k[1] * g.k[2]
	s.InSize = g.in[0] * g.in[1] * g.in[2]
	s.D = s.C / s.Group * s.K
	return nil
}

func (s *ConvShape) check() {
	if !s.g.ready {
		panic("kernels: ConvShape used before Init")
	}
}

// pointwise reports whether the unfolded input of a group is the input
// itself (1×1 kernel, stride 1, no padding), so im2col can be skipped.
func (s *ConvShape) pointwise() bool {
	g := &s.g
	for i := 0; i < 3; i++ {
		if g.k[i] != 1 || g.s[i] != 1 || g.pb[i] != 0 || g.pe[i] != 0 {
			return false
		}
	}
	return true
}

// ColSize returns D·T, the size of one sample's unfolded input for one
// group (the col buffer of Im2Col and Unfold).
func (s *ConvShape) ColSize() int { s.check(); return s.D * s.T }

// WeightSize returns M·D, the number of weights.
func (s *ConvShape) WeightSize() int { s.check(); return s.M * s.D }

func (s *ConvShape) colPerWorker() int {
	if s.pointwise() {
		return 0
	}
	return s.D * s.T
}

// ConvWorkspaceSize returns the workspace (in float32 elements) that
// ConvForward and ConvBackward need to use Workers() goroutines: one col
// buffer per worker plus, for backward, one weight-gradient partial per
// worker beyond the first. A smaller workspace (at least one col buffer)
// makes the kernels use fewer workers.
func ConvWorkspaceSize(s *ConvShape) int {
	s.check()
	w := convWorkers(s, -1)
	per := w*s.colPerWorker() + (w-1)*s.WeightSize()
	if nb := convBatch(s); nb > 0 {
		return max(per, batchedWS(s, nb))
	}
	return per
}

// Batched convolution. When a sample's output is small (T columns), one
// GEMM per sample is a thin, memory-bound product that rereads the whole
// weight for every sample (resnet18 on 32×32 inputs ends its stages at
// 2×2 and 1×1). The batched path unfolds nb samples side by side into one
// D×(nb·T) matrix and runs one GEMM per chunk of nb samples, threaded
// inside the BLAS (the whole batch is one chunk up to batchedMaxElem of
// workspace); unfolding, scattering and folding are split over
// samples.
const (
	batchedMaxT    = 256     // per-sample path from this many output positions on
	batchedMaxElem = 8 << 20 // cap on the batched workspace (float32 elements)
)

// convBatch returns the number of samples the batched path unfolds at
// once, or 0 for the per-sample path.
func convBatch(s *ConvShape) int {
	if s.Group != 1 || s.N < 2 || s.T >= batchedMaxT {
		return 0
	}
	// The whole batch in one chunk unless the workspace cap says
	// otherwise: each chunk costs a few goroutine launches (allocations).
	nb := s.N
	for nb > 1 && batchedWS(s, nb) > batchedMaxElem {
		nb /= 2
	}
	if nb < 2 {
		return 0
	}
	return nb
}

// batchedWS is the workspace of the batched path: the unfolded chunk
// (D×nb·T) and an output-gradient chunk (M×nb·T).
func batchedWS(s *ConvShape, nb int) int { return (s.D + s.M) * nb * s.T }

// convBatchFor returns convBatch(s) if ws is large enough for it, else 0.
func convBatchFor(s *ConvShape, ws []float32) int {
	nb := convBatch(s)
	if nb > 0 && len(ws) >= batchedWS(s, nb) {
		return nb
	}
	return 0
}

func convForwardBatched(s *ConvShape, nb int, x, w, bias, y, ws []float32) {
	xs, ys, T := s.C*s.InSize, s.M*s.T, s.T
	for i0 := 0; i0 < s.N; i0 += nb {
		n := min(nb, s.N-i0)
		ld := n * T
		col, out := ws[:s.D*ld], ws[s.D*ld:(s.D+s.M)*ld]
		parallelFor(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				im2colLd(&s.g, x[(i0+i)*xs:(i0+i+1)*xs], s.C, col[i*T:], ld)
			}
		})
		blas.Sgemm(false, false, s.M, ld, s.D, 1, w, s.D, col, ld, 0, out, ld)
		parallelFor(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				yi := y[(i0+i)*ys : (i0+i+1)*ys]
				for m := 0; m < s.M; m++ {
					src, dst := out[m*ld+i*T:m*ld+i*T+T], yi[m*T:(m+1)*T]
					if bias == nil {
						copy(dst, src)
						continue
					}
					bv := bias[m]
					for t, v := range src {
						dst[t] = v + bv
					}
				}
			}
		})
	}
}

func convBackwardBatched(s *ConvShape, nb int, x, w, dy, dx, dw, ws []float32) {
	xs, ys, T := s.C*s.InSize, s.M*s.T, s.T
	for i0 := 0; i0 < s.N; i0 += nb {
		n := min(nb, s.N-i0)
		ld := n * T
		col, g := ws[:s.D*ld], ws[s.D*ld:(s.D+s.M)*ld]
		parallelFor(n, 1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dyi := dy[(i0+i)*ys : (i0+i+1)*ys]
				for m := 0; m < s.M; m++ {
					copy(g[m*ld+i*T:m*ld+i*T+T], dyi[m*T:(m+1)*T])
				}
				if dw != nil {
					im2colLd(&s.g, x[(i0+i)*xs:(i0+i+1)*xs], s.C, col[i*T:], ld)
				}
			}
		})
		if dw != nil {
			beta := float32(1)
			if i0 == 0 {
				beta = 0
			}
			blas.Sgemm(false, true, s.M, s.D, ld, 1, g, ld, col, ld, beta, dw, s.D)
		}
		if dx != nil {
			blas.Sgemm(true, false, s.D, ld, s.M, 1, w, s.D, g, ld, 0, col, ld)
			parallelFor(n, 1, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					dxi := dx[(i0+i)*xs : (i0+i+1)*xs]
					clear(dxi)
					col2imLd(&s.g, col[i*T:], s.C, dxi, ld)
				}
			})
		}
	}
}

// convWorkers picks the number of sample-parallel workers whose col
// buffers and weight-gradient partials fit in a workspace of wsLen elements
// (wsLen < 0: unlimited).
func convWorkers(s *ConvShape, wsLen int) int {
	w := min(Workers(), s.N)
	if w < 1 {
		w = 1
	}
	if wsLen < 0 {
		return w
	}
	for ; w > 1; w-- {
		if w*s.colPerWorker()+(w-1)*s.WeightSize() <= wsLen {
			break
		}
	}
	return w
}

// convWorkersFwd is convWorkers without the weight partials.
func convWorkersFwd(s *ConvShape, wsLen int) int {
	w := max(1, min(Workers(), s.N))
	if c := s.colPerWorker(); c > 0 {
		w = min(w, wsLen/c)
		if w < 1 {
			panic(fmt.Sprintf("kernels: conv workspace %d < %d", wsLen, c))
		}
	}
	return w
}

// Im2Col writes the unfolded input of one sample for group g as a D×T
// row-major matrix col (row (c, k_d, k_h, k_w), column = output position):
// col = a_iᵀ in the notation of DESIGN §3, so the conv output of the group is
// W_g·col, the per-sample weight gradient is dY_g·colᵀ and the ghost-norm
// factor a_i·a_iᵀ is colᵀ·col. xi is the sample's input (C·InSize elements),
// col must hold ColSize() elements.
func Im2Col(s *ConvShape, xi []float32, g int, col []float32) {
	s.check()
	checkLen("xi", xi, s.C*s.InSize)
	checkLen("col", col, s.D*s.T)
	cg := s.C / s.Group
	im2col(&s.g, xi[g*cg*s.InSize:(g+1)*cg*s.InSize], cg, col)
}

// Unfold writes the unfolded input a_i of one sample for group g as a T×D
// row-major matrix (the transpose of Im2Col's layout).
func Unfold(s *ConvShape, xi []float32, g int, a []float32) {
	s.check()
	checkLen("xi", xi, s.C*s.InSize)
	checkLen("a", a, s.D*s.T)
	cg := s.C / s.Group
	x := xi[g*cg*s.InSize : (g+1)*cg*s.InSize]
	gm := &s.g
	D := s.D
	for c := 0; c < cg; c++ {
		xc := x[c*s.InSize : (c+1)*s.InSize]
		r := c * s.K
		for kd := 0; kd < gm.k[0]; kd++ {
			for kh := 0; kh < gm.k[1]; kh++ {
				for kw := 0; kw < gm.k[2]; kw++ {
					t := 0
					for od := 0; od < gm.out[0]; od++ {
						id := od*gm.s[0] - gm.pb[0] + kd*gm.d[0]
						for oh := 0; oh < gm.out[1]; oh++ {
							ih := oh*gm.s[1] - gm.pb[1] + kh*gm.d[1]
							for ow := 0; ow < gm.out[2]; ow++ {
								iw := ow*gm.s[2] - gm.pb[2] + kw*gm.d[2]
								var v float32
								if id >= 0 && id < gm.in[0] && ih >= 0 && ih < gm.in[1] && iw >= 0 && iw < gm.in[2] {
									v = xc[(id*gm.in[1]+ih)*gm.in[2]+iw]
								}
								a[t*D+r] = v
								t++
							}
						}
					}
					r++
				}
			}
		}
	}
}

// Col2Im adds the D×T column gradient col of one sample and group g back
// onto the input gradient dxi (C·InSize elements), the adjoint of Im2Col.
// Only group g's channels of dxi are touched, and they are accumulated into,
// so callers zero them first.
func Col2Im(s *ConvShape, col []float32, g int, dxi []float32) {
	s.check()
	checkLen("dxi", dxi, s.C*s.InSize)
	checkLen("col", col, s.D*s.T)
	cg := s.C / s.Group
	col2im(&s.g, col, cg, dxi[g*cg*s.InSize:(g+1)*cg*s.InSize])
}

// validRange returns the output positions [lo, hi) along one axis whose
// input index o·stride + off falls inside [0, in).
func validRange(off, stride, in, out int) (lo, hi int) {
	if off < 0 {
		lo = (-off + stride - 1) / stride
	}
	if in-off-1 < 0 {
		return 0, 0
	}
	hi = min(out, (in-off-1)/stride+1)
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

func im2col(gm *geom3, x []float32, channels int, col []float32) {
	im2colLd(gm, x, channels, col, gm.out[0]*gm.out[1]*gm.out[2])
}

// im2colLd is im2col writing row r of the unfolded input at col[r·ld:]
// (ld ≥ T), so that the unfolded inputs of several samples can sit side
// by side in one D×(n·T) matrix.
func im2colLd(gm *geom3, x []float32, channels int, col []float32, ld int) {
	inSize := gm.in[0] * gm.in[1] * gm.in[2]
	ow, oh, od := gm.out[2], gm.out[1], gm.out[0]
	T := od * oh * ow
	r := 0
	for c := 0; c < channels; c++ {
		xc := x[c*inSize : (c+1)*inSize]
		for kd := 0; kd < gm.k[0]; kd++ {
			for kh := 0; kh < gm.k[1]; kh++ {
				for kw := 0; kw < gm.k[2]; kw++ {
					row := col[r*ld : r*ld+T]
					woff := kw*gm.d[2] - gm.pb[2]
					lo, hi := validRange(woff, gm.s[2], gm.in[2], ow)
					t := 0
					for d := 0; d < od; d++ {
						id := d*gm.s[0] - gm.pb[0] + kd*gm.d[0]
						for h := 0; h < oh; h++ {
							dst := row[t : t+ow]
							t += ow
							ih := h*gm.s[1] - gm.pb[1] + kh*gm.d[1]
							if id < 0 || id >= gm.in[0] || ih < 0 || ih >= gm.in[1] || lo >= hi {
								clear(dst)
								continue
							}
							src := xc[(id*gm.in[1]+ih)*gm.in[2]:]
							if ow <= 16 {
								// Short rows: one loop beats three calls.
								s := gm.s[2]
								for o := range dst {
									var v float32
									if o >= lo && o < hi {
										v = src[o*s+woff]
									}
									dst[o] = v
								}
								continue
							}
							clear(dst[:lo])
							clear(dst[hi:])
							if gm.s[2] == 1 {
								copy(dst[lo:hi], src[lo+woff:hi+woff])
							} else {
								s := gm.s[2]
								for o := lo; o < hi; o++ {
									dst[o] = src[o*s+woff]
								}
							}
						}
					}
					r++
				}
			}
		}
	}
}

func col2im(gm *geom3, col []float32, channels int, dx []float32) {
	col2imLd(gm, col, channels, dx, gm.out[0]*gm.out[1]*gm.out[2])
}

// col2imLd is col2im reading row r at col[r·ld:] (see im2colLd).
func col2imLd(gm *geom3, col []float32, channels int, dx []float32, ld int) {
	inSize := gm.in[0] * gm.in[1] * gm.in[2]
	ow, oh, od := gm.out[2], gm.out[1], gm.out[0]
	T := od * oh * ow
	r := 0
	for c := 0; c < channels; c++ {
		dxc := dx[c*inSize : (c+1)*inSize]
		for kd := 0; kd < gm.k[0]; kd++ {
			for kh := 0; kh < gm.k[1]; kh++ {
				for kw := 0; kw < gm.k[2]; kw++ {
					row := col[r*ld : r*ld+T]
					woff := kw*gm.d[2] - gm.pb[2]
					lo, hi := validRange(woff, gm.s[2], gm.in[2], ow)
					t := 0
					for d := 0; d < od; d++ {
						id := d*gm.s[0] - gm.pb[0] + kd*gm.d[0]
						for h := 0; h < oh; h++ {
							src := row[t : t+ow]
							t += ow
							ih := h*gm.s[1] - gm.pb[1] + kh*gm.d[1]
							if id < 0 || id >= gm.in[0] || ih < 0 || ih >= gm.in[1] || lo >= hi {
								continue
							}
							dst := dxc[(id*gm.in[1]+ih)*gm.in[2]:]
							if gm.s[2] == 1 {
								d := dst[lo+woff : hi+woff]
								for o, v := range src[lo:hi] {
									d[o] += v
								}
							} else {
								s := gm.s[2]
								for o := lo; o < hi; o++ {
									dst[o*s+woff] += src[o]
								}
							}
						}
					}
					r++
				}
			}
		}
	}
}

// gemmFor returns the Sgemm variant for code running on `workers`
// goroutines: the serial one when the caller already fills the cores.
func gemmFor(workers int) func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if workers > 1 {
		return blas.SgemmSerial
	}
	return blas.Sgemm
}

// ConvForward computes y = conv(x, w) + bias. Shapes: x N×C×In, w M×D, bias
// M (or nil), y N×M×T. ws must hold at least ColSize() elements
// (ConvWorkspaceSize for full parallelism); pointwise convolutions need
// none. Samples are split over workers, each unfolding one sample at a time
// and multiplying it by the group's weights with one GEMM.
func ConvForward(s *ConvShape, x, w, bias, y, ws []float32) {
	s.check()
	xs, ys := s.C*s.InSize, s.M*s.T
	checkLen("x", x, s.N*xs)
	checkLen("w", w, s.M*s.D)
	checkLen("y", y, s.N*ys)
	if bias != nil {
		checkLen("bias", bias, s.M)
	}
	if nb := convBatchFor(s, ws); nb > 0 {
		convForwardBatched(s, nb, x, w, bias, y, ws)
		return
	}
	workers := convWorkersFwd(s, len(ws))
	gemm := gemmFor(workers)
	cg, mg := s.C/s.Group, s.M/s.Group
	colSize := s.colPerWorker()
	parallelWorkers(workers, s.N, func(wk, lo, hi int) {
		col := ws[wk*colSize : (wk+1)*colSize]
		for i := lo; i < hi; i++ {
			xi, yi := x[i*xs:(i+1)*xs], y[i*ys:(i+1)*ys]
			for g := 0; g < s.Group; g++ {
				a := col
				if colSize == 0 {
					a = xi[g*cg*s.InSize : (g+1)*cg*s.InSize]
				} else {
					im2col(&s.g, xi[g*cg*s.InSize:(g+1)*cg*s.InSize], cg, col)
				}
				gemm(false, false, mg, s.T, s.D, 1, w[g*mg*s.D:], s.D, a, s.T, 0, yi[g*mg*s.T:], s.T)
			}
			if bias != nil {
				for m := 0; m < s.M; m++ {
					bv := bias[m]
					row := yi[m*s.T : (m+1)*s.T]
					for t := range row {
						row[t] += bv
					}
				}
			}
		}
	})
}

// ConvBackward computes the gradients of ConvForward: dx (N×C×In), dw (M×D)
// and db (M), each overwritten; any of them may be nil. ws must hold
// ConvWorkspaceSize(s) elements for full parallelism (at least ColSize()).
// Each worker accumulates the weight gradient of its samples privately and
// the partials are added in worker order, so the result is reproducible.
func ConvBackward(s *ConvShape, x, w, dy, dx, dw, db, ws []float32) {
	s.check()
	xs, ys := s.C*s.InSize, s.M*s.T
	checkLen("dy", dy, s.N*ys)
	if dw != nil {
		checkLen("x", x, s.N*xs)
		checkLen("dw", dw, s.M*s.D)
	}
	if dx != nil {
		checkLen("w", w, s.M*s.D)
		checkLen("dx", dx, s.N*xs)
	}
	if db != nil {
		checkLen("db", db, s.M)
		convBiasGrad(s, dy, db)
	}
	if dx == nil && dw == nil {
		return
	}
	if nb := convBatchFor(s, ws); nb > 0 {
		convBackwardBatched(s, nb, x, w, dy, dx, dw, ws)
		return
	}
	colSize, wSize := s.colPerWorker(), s.WeightSize()
	workers := convWorkers(s, len(ws))
	if need := colSize; len(ws) < need {
		panic(fmt.Sprintf("kernels: conv workspace %d < %d", len(ws), need))
	}
	if dw == nil {
		workers = convWorkersFwd(s, len(ws))
	}
	gemm := gemmFor(workers)
	cg, mg := s.C/s.Group, s.M/s.Group
	parallelWorkers(workers, s.N, func(wk, lo, hi int) {
		col := ws[wk*colSize : (wk+1)*colSize]
		var dwp []float32
		if dw != nil {
			dwp = dw
			if wk > 0 {
				off := workers*colSize + (wk-1)*wSize
				dwp = ws[off : off+wSize]
			}
			clear(dwp[:wSize])
		}
		for i := lo; i < hi; i++ {
			dyi := dy[i*ys : (i+1)*ys]
			for g := 0; g < s.Group; g++ {
				dyg := dyi[g*mg*s.T:]
				if dw != nil {
					xg := x[i*xs+g*cg*s.InSize : i*xs+(g+1)*cg*s.InSize]
					a := col
					if colSize == 0 {
						a = xg
					} else {
						im2col(&s.g, xg, cg, col)
					}
					gemm(false, true, mg, s.D, s.T, 1, dyg, s.T, a, s.T, 1, dwp[g*mg*s.D:], s.D)
				}
				if dx != nil {
					dxg := dx[i*xs+g*cg*s.InSize : i*xs+(g+1)*cg*s.InSize]
					if colSize == 0 {
						gemm(true, false, s.D, s.T, mg, 1, w[g*mg*s.D:], s.D, dyg, s.T, 0, dxg, s.T)
						continue
					}
					gemm(true, false, s.D, s.T, mg, 1, w[g*mg*s.D:], s.D, dyg, s.T, 0, col, s.T)
					clear(dxg)
					col2im(&s.g, col, cg, dxg)
				}
			}
		}
	})
	if dw != nil {
		for wk := 1; wk < workers; wk++ {
			off := workers*colSize + (wk-1)*wSize
			p := ws[off : off+wSize]
			for j, v := range p {
				dw[j] += v
			}
		}
	}
}

// convBiasGrad sums dy over samples and positions per output channel, in
// float64 so that large N·T sums keep float32 accuracy.
func convBiasGrad(s *ConvShape, dy, db []float32) {
	parallelFor(s.M, max(1, 4096/max(1, s.N*s.T)), func(lo, hi int) {
		for m := lo; m < hi; m++ {
			var acc float64
			for i := 0; i < s.N; i++ {
				row := dy[(i*s.M+m)*s.T : (i*s.M+m+1)*s.T]
				var part float32
				for _, v := range row {
					part += v
				}
				acc += float64(part)
			}
			db[m] = float32(acc)
		}
	})
}
