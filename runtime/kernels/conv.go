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

	// Gather map of the chunked path (built by Init when the shape can
	// take it): gmap[k·T+t] is the offset, in a channel plane padded by
	// Pads (pin), of kernel tap k at output position t. padded says
	// whether a channel must be copied into such a plane first.
	gmap   []int32
	pin    [3]int
	padded bool

	// Row-permute unfolding of 2-D taps (gatherCol, with AVX-512): an
	// output row of tap (kh, kw) takes lanes permIdx[kw] of the permSpan
	// plane floats at its input row's start; nil when the shape cannot.
	permIdx  [][16]int32
	permSpan int

	// Geometry of the direct depthwise kernels (depthwise.go), built by
	// Init when IsDepthwise.
	dw dwPlan

	// Tap classes of small padded maps (conv_taps.go), built by Init when
	// a quarter or more of the dense product is padding; nil otherwise.
	taps *tapPlan
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
	s.buildGather()
	s.buildTaps()
	s.dw = dwPlan{}
	if s.IsDepthwise() {
		s.initDepthwise()
	}
	return nil
}

// maxGather caps the gather map (int32 entries) of one shape.
const maxGather = 1 << 16

// buildGather fills gmap, pin and padded for shapes that can take the
// chunked path. Offsets are in padded coordinates, where every tap of
// every output position lies inside the plane, so that unfolding is one
// branch-free gather per kernel tap instead of a bounds-tested copy per
// output row: rows of 5 to 16 elements made the per-row work dominate.
func (s *ConvShape) buildGather() {
	g := &s.g
	s.gmap, s.padded = nil, false
	if s.Group != 1 || s.T >= batchedMaxT || s.K*s.T > maxGather {
		return
	}
	for a := 0; a < 3; a++ {
		s.pin[a] = g.in[a] + g.pb[a] + g.pe[a]
		s.padded = s.padded || g.pb[a] != 0 || g.pe[a] != 0
	}
	m := make([]int32, 0, s.K*s.T)
	for kd := 0; kd < g.k[0]; kd++ {
		for kh := 0; kh < g.k[1]; kh++ {
			for kw := 0; kw < g.k[2]; kw++ {
				for od := 0; od < g.out[0]; od++ {
					id := od*g.s[0] + kd*g.d[0]
					for oh := 0; oh < g.out[1]; oh++ {
						ih := oh*g.s[1] + kh*g.d[1]
						for ow := 0; ow < g.out[2]; ow++ {
							iw := ow*g.s[2] + kw*g.d[2]
							m = append(m, int32((id*s.pin[1]+ih)*s.pin[2]+iw))
						}
					}
				}
			}
		}
	}
	s.gmap = m
	s.buildPerm()
}

// buildPerm fills permIdx and permSpan for 2-D (or 1-D) shapes whose
// output rows have at most 16 positions and whose taps of one row span at
// most 32 plane floats: there one permute per output row replaces a
// sixteen-lane gather per 16 outputs (VGATHERDPS is slow, and an output
// row of a small map is a handful of floats from one input row). Only maps
// whose per-tap gather leaves a scalar tail (T not a multiple of 16) take
// it: on ResNet-18's tail-free 8×8 and 4×4 maps the unfold alone was faster
// but the training step measured 1–4 % slower (bench/ab.sh, near noise),
// while cnn-fmnist's 13×13 and 5×5 maps gain.
func (s *ConvShape) buildPerm() {
	g := &s.g
	s.permIdx, s.permSpan = nil, 0
	OW, KW := g.out[2], g.k[2]
	span := (OW-1)*g.s[2] + (KW-1)*g.d[2] + 1
	if !haveGatherAVX512 || g.k[0] != 1 || g.out[0] != 1 || OW > 16 || span > 32 || s.T%16 == 0 {
		return
	}
	s.permSpan = span
	s.permIdx = make([][16]int32, KW)
	for kw := range s.permIdx {
		for ow := 0; ow < OW; ow++ {
			s.permIdx[kw][ow] = int32(ow*g.s[2] + kw*g.d[2])
		}
	}
}

// planeSize is the padded channel plane the gather path needs as scratch
// (0 when the input is not padded).
func (s *ConvShape) planeSize() int {
	if !s.padded {
		return 0
	}
	return s.pin[0] * s.pin[1] * s.pin[2]
}

// planeLen is the length of the plane gatherCol reads (padded or not),
// which bounds every gather-map offset.
func (s *ConvShape) planeLen() int {
	if s.padded {
		return s.planeSize()
	}
	return s.InSize
}

// padInto copies channel plane src (InSize elements) into the interior of
// the padded plane, whose border is left as it is (zero).
func (s *ConvShape) padInto(src, plane []float32) {
	g := &s.g
	W := g.in[2]
	for d := 0; d < g.in[0]; d++ {
		for h := 0; h < g.in[1]; h++ {
			o := ((d+g.pb[0])*s.pin[1]+h+g.pb[1])*s.pin[2] + g.pb[2]
			copy(plane[o:o+W], src[(d*g.in[1]+h)*W:])
		}
	}
}

// padFrom copies the interior of the padded plane back into channel plane
// dst (InSize elements).
func (s *ConvShape) padFrom(plane, dst []float32) {
	g := &s.g
	W := g.in[2]
	for d := 0; d < g.in[0]; d++ {
		for h := 0; h < g.in[1]; h++ {
			o := ((d+g.pb[0])*s.pin[1]+h+g.pb[1])*s.pin[2] + g.pb[2]
			copy(dst[(d*g.in[1]+h)*W:(d*g.in[1]+h+1)*W], plane[o:o+W])
		}
	}
}

// gatherCol writes the unfolded input of one sample xi (Group 1) as the
// D rows col[r·ld : r·ld+T]: im2colLd through the gather map. plane
// (planeSize elements, zero border) is scratch for padded inputs.
func (s *ConvShape) gatherCol(xi, col []float32, ld int, plane []float32) {
	K, T, in := s.K, s.T, s.InSize
	for c := 0; c < s.C; c++ {
		src := xi[c*in : (c+1)*in]
		if s.padded {
			s.padInto(src, plane)
			src = plane
		}
		if haveGatherAVX512 && s.permIdx != nil {
			s.permCol(src[:s.planeLen()], col[c*K*ld:], ld)
			continue
		}
		for k := 0; k < K; k++ {
			// buildGather's offsets all lie in the (padded) plane.
			gatherIdx(col[(c*K+k)*ld:], src[:s.planeLen()], s.gmap[k*T:(k+1)*T])
		}
	}
}

// permCol unfolds the K taps of one channel plane src into the rows
// col[k·ld:] by row permutes: the same copies as the gather map's.
func (s *ConvShape) permCol(src, col []float32, ld int) {
	g := &s.g
	OW, OH, KW, pw, span := g.out[2], g.out[1], g.k[2], s.pin[2], s.permSpan
	step := g.s[1] * pw
	masks := uint64(1)<<OW - 1
	masks |= (uint64(1)<<min(span, 16) - 1) << 16
	masks |= (uint64(1)<<max(span-16, 0) - 1) << 32
	for k := 0; k < s.K; k++ {
		kh, kw := k/KW, k%KW
		base := kh * g.d[1] * pw
		// Every tap lies in the (padded) plane: the slice holds each
		// row's span, which is all the masked loads read.
		src := src[base : base+(OH-1)*step+span]
		dst := col[k*ld : k*ld+OH*OW]
		permRowsAVX512(dst, OW, src, step, OH, &s.permIdx[kw], masks)
	}
}

// scatterCol overwrites the input gradient dxi of one sample with the
// fold of the D×T column gradient at col[r·ld:] (col2imLd through the
// gather map, adding in the same order). plane is scratch as in gatherCol
// and is left zero.
func (s *ConvShape) scatterCol(col []float32, ld int, dxi, plane []float32) {
	K, T, in := s.K, s.T, s.InSize
	for c := 0; c < s.C; c++ {
		dst := dxi[c*in : (c+1)*in]
		acc := dst
		if s.padded {
			acc = plane
		}
		clear(acc)
		for k := 0; k < K; k++ {
			// One tap's positions read distinct input elements
			// (o·stride + k·dilation is injective in o), so the
			// scatter-add may run sixteen lanes at a time.
			scatterAddIdx(acc, col[(c*K+k)*ld:], s.gmap[k*T:(k+1)*T])
		}
		if s.padded {
			s.padFrom(plane, dst)
			clear(plane) // gatherCol relies on a zero border
		}
	}
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

// Pointwise reports whether a group's unfolded input (D×T, the col
// buffer of Im2Col) is its input channels as they lie (1×1 kernel, unit
// strides, no padding): a consumer of the unfolding may read the input
// in place.
func (s *ConvShape) Pointwise() bool { s.check(); return s.pointwise() }

// ColSize returns D·T, the size of one sample's unfolded input for one
// group (the col buffer of Im2Col).
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
// buffer (or chunk buffers) per worker plus, for backward, one
// weight-gradient partial per worker beyond the first. A smaller
// workspace (at least one col buffer) makes the kernels use fewer workers.
// Depthwise shapes (IsDepthwise) take the direct kernels of depthwise.go,
// which need only a few padded channel planes per worker.
func ConvWorkspaceSize(s *ConvShape) int {
	s.check()
	if s.IsDepthwise() && !dwOff {
		return dwWorkspaceSize(s)
	}
	w := convWorkers(s, -1)
	per := w*s.colPerWorker() + (w-1)*s.WeightSize()
	if s.Group == 1 && s.colPerWorker() > 0 {
		per += weightPackSize(s, s.T)
	}
	if nb := convBatch(s); nb > 0 {
		w := min(Workers(), (s.N+nb-1)/nb)
		per = max(per, w*chunkWS(s, nb)+(w-1)*s.WeightSize()+weightPackSize(s, nb*s.T))
	}
	if s.taps != nil && s.taps.gemm && s.N > 0 {
		per = max(per, tapWS(s, true))
	}
	return per
}

// Chunked convolution. When a sample's output is small (T columns), one
// GEMM per sample is a thin, memory-bound product that rereads the whole
// weight for every sample (resnet18 on 32×32 inputs ends its stages at
// 2×2 and 1×1). The chunked path unfolds nb samples side by side into one
// D×(nb·T) matrix and multiplies it with one GEMM. Each worker owns a run
// of chunks and private buffers, so that a chunk is unfolded, multiplied
// and scattered while it sits in that core's cache and no worker waits
// for another; nb sizes a chunk's buffers to chunkBudget (L2) but keeps
// the GEMM at least chunkMinCols wide, so that packing the weight stays
// cheap next to the product.
const (
	batchedMaxT  = 256      // per-sample path from this many output positions on
	chunkBudget  = 64 << 10 // float32 elements of a chunk's col and output buffers (256 KiB)
	chunkMinCols = 256      // smallest GEMM width nb·T worth a chunk
)

// convBatch returns the number of samples per chunk of the chunked path,
// or 0 for the per-sample path.
func convBatch(s *ConvShape) int {
	if s.Group != 1 || s.N < 2 || s.T >= batchedMaxT {
		return 0
	}
	nb := max(chunkBudget/((s.D+s.M)*s.T), (chunkMinCols+s.T-1)/s.T)
	// Every worker gets a chunk.
	w := max(1, min(Workers(), s.N))
	nb = min(nb, (s.N+w-1)/w)
	if nb < 2 {
		return 0
	}
	return nb
}

// chunkWS is one worker's buffers on the chunked path: the unfolded chunk
// (D×nb·T), the output or output-gradient chunk (M×nb·T) and a padded
// channel plane.
func chunkWS(s *ConvShape, nb int) int { return (s.D+s.M)*nb*s.T + s.planeSize() }

// convChunking returns the chunk size and the number of workers for the
// chunked path within a workspace of wsLen elements (weight-gradient
// partials included when dw is set), or 0, 0 for the per-sample path.
func convChunking(s *ConvShape, wsLen int, dw bool) (nb, workers int) {
	nb = convBatch(s)
	if nb == 0 {
		return 0, 0
	}
	per, extra := chunkWS(s, nb), 0
	if dw {
		extra = s.WeightSize()
	}
	for w := min(Workers(), (s.N+nb-1)/nb); w >= 1; w-- {
		if w*per+(w-1)*extra <= wsLen {
			return nb, w
		}
	}
	return 0, 0
}

// unfoldChunk unfolds samples [i0, i0+n) of x into col (row stride ld).
func (s *ConvShape) unfoldChunk(x []float32, i0, n int, col []float32, ld int, plane []float32) {
	xs := s.C * s.InSize
	for i := 0; i < n; i++ {
		xi := x[(i0+i)*xs : (i0+i+1)*xs]
		if s.gmap != nil {
			s.gatherCol(xi, col[i*s.T:], ld, plane)
		} else {
			im2colLd(&s.g, xi, s.C, col[i*s.T:], ld)
		}
	}
}

func convForwardChunked(s *ConvShape, nb, workers int, x, w, bias, y, ws []float32) {
	ys, T := s.M*s.T, s.T
	per := chunkWS(s, nb)
	chunks := (s.N + nb - 1) / nb
	workers = min(workers, chunks)
	gemm := gemmFor(workers)
	parallelWorkers(workers, chunks, func(wk, lo, hi int) {
		buf := ws[wk*per : (wk+1)*per]
		col, out, plane := buf[:s.D*nb*T], buf[s.D*nb*T:(s.D+s.M)*nb*T], buf[(s.D+s.M)*nb*T:]
		clear(plane) // the zero border of padded inputs
		for ch := lo; ch < hi; ch++ {
			i0 := ch * nb
			n := min(nb, s.N-i0)
			ld := n * T
			s.unfoldChunk(x, i0, n, col, ld, plane)
			gemm(false, false, s.M, ld, s.D, 1, w, s.D, col, ld, 0, out, ld)
			for i := 0; i < n; i++ {
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
		}
	})
}

func convBackwardChunked(s *ConvShape, nb, workers int, x, w, dy, dx, dw, ws []float32) {
	xs, ys, T := s.C*s.InSize, s.M*s.T, s.T
	per, wSize := chunkWS(s, nb), s.WeightSize()
	chunks := (s.N + nb - 1) / nb
	workers = min(workers, chunks)
	gemm := gemmFor(workers)
	var wp []float32
	if dx != nil && workers > 1 {
		tail := workers * per
		if dw != nil {
			tail += (workers - 1) * wSize
		}
		wp = packedWeights(s, nb*T, w, ws[min(tail, len(ws)):])
	}
	parallelWorkers(workers, chunks, func(wk, lo, hi int) {
		buf := ws[wk*per : (wk+1)*per]
		col, g, plane := buf[:s.D*nb*T], buf[s.D*nb*T:(s.D+s.M)*nb*T], buf[(s.D+s.M)*nb*T:]
		clear(plane)
		dwp := workerGrad(dw, ws, workers, per, wSize, wk)
		for ch := lo; ch < hi; ch++ {
			i0 := ch * nb
			n := min(nb, s.N-i0)
			ld := n * T
			for i := 0; i < n; i++ {
				dyi := dy[(i0+i)*ys : (i0+i+1)*ys]
				for m := 0; m < s.M; m++ {
					copy(g[m*ld+i*T:m*ld+i*T+T], dyi[m*T:(m+1)*T])
				}
			}
			if dw != nil {
				s.unfoldChunk(x, i0, n, col, ld, plane)
				gemm(false, true, s.M, s.D, ld, 1, g, ld, col, ld, 1, dwp, s.D)
			}
			if dx != nil {
				if wp != nil && n == nb {
					blas.SgemmPackedSerial(s.D, ld, s.M, wp, false, g, ld, 0, col, ld)
				} else {
					gemm(true, false, s.D, ld, s.M, 1, w, s.D, g, ld, 0, col, ld)
				}
				for i := 0; i < n; i++ {
					dxi := dx[(i0+i)*xs : (i0+i+1)*xs]
					if s.gmap != nil {
						s.scatterCol(col[i*T:], ld, dxi, plane)
					} else {
						clear(dxi)
						col2imLd(&s.g, col[i*T:], s.C, dxi, ld)
					}
				}
			}
		}
	})
	sumWorkerGrads(dw, ws, workers, per, wSize)
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

// PlaneSize returns the scratch Im2ColPlane needs, in float32 elements (0
// when it needs none).
func (s *ConvShape) PlaneSize() int { s.check(); return s.planeSize() }

// Im2ColPlane is Im2Col with scratch plane (at least PlaneSize()
// elements, any contents): shapes with a gather map (Group 1, small output
// maps) then unfold by table lookup instead of bounds-tested row loops,
// which dominate on the short rows of small feature maps. The DP engine
// unfolds every sample this way for its per-sample norms.
func Im2ColPlane(s *ConvShape, xi []float32, g int, col, plane []float32) {
	if s.taps != nil && s.T < 16 {
		// Maps of fewer than 16 positions: the gather path's rows are
		// all scalar tails there, while from 16 on a row is one
		// sixteen-lane gather and beats the classes' copies.
		s.check()
		checkLen("xi", xi, s.C*s.InSize)
		checkLen("col", col, s.D*s.T)
		s.tapIm2Col(xi, col)
		return
	}
	if s.gmap == nil {
		Im2Col(s, xi, g, col)
		return
	}
	s.check()
	checkLen("xi", xi, s.C*s.InSize)
	checkLen("col", col, s.D*s.T)
	if ps := s.planeSize(); ps > 0 {
		checkLen("plane", plane, ps)
		// gatherCol writes only the interior: the border must be zero,
		// and plane may have served another shape.
		clear(plane[:ps])
	}
	s.gatherCol(xi, col, s.T, plane)
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
//
// Rows are short (an output row, often 5 to 16 elements) and numerous, so
// the per-row work is kept small: the valid output range [lo, hi) of each
// kernel column, which needs divisions, is computed once per call instead
// of once per row, and rows whose taps all lie inside the input (the usual
// case) are a plain strided copy without per-element tests.
func im2colLd(gm *geom3, x []float32, channels int, col []float32, ld int) {
	inSize := gm.in[0] * gm.in[1] * gm.in[2]
	W := gm.in[2]
	ow, oh, od := gm.out[2], gm.out[1], gm.out[0]
	T := od * oh * ow
	sw := gm.s[2]
	// The valid output range of the first kernel columns, computed once.
	var ranges [16][2]int
	for kw := 0; kw < min(gm.k[2], len(ranges)); kw++ {
		ranges[kw][0], ranges[kw][1] = validRange(kw*gm.d[2]-gm.pb[2], sw, W, ow)
	}
	r := 0
	for c := 0; c < channels; c++ {
		xc := x[c*inSize : (c+1)*inSize]
		for kd := 0; kd < gm.k[0]; kd++ {
			for kh := 0; kh < gm.k[1]; kh++ {
				for kw := 0; kw < gm.k[2]; kw++ {
					row := col[r*ld : r*ld+T]
					r++
					woff := kw*gm.d[2] - gm.pb[2]
					var lo, hi int
					if kw < len(ranges) {
						lo, hi = ranges[kw][0], ranges[kw][1]
					} else {
						lo, hi = validRange(woff, sw, W, ow)
					}
					t := 0
					for d := 0; d < od; d++ {
						id := d*gm.s[0] - gm.pb[0] + kd*gm.d[0]
						dOK := id >= 0 && id < gm.in[0]
						for h := 0; h < oh; h++ {
							dst := row[t : t+ow]
							t += ow
							ih := h*gm.s[1] - gm.pb[1] + kh*gm.d[1]
							if !dOK || ih < 0 || ih >= gm.in[1] || lo >= hi {
								for o := range dst {
									dst[o] = 0
								}
								continue
							}
							src := xc[(id*gm.in[1]+ih)*W : (id*gm.in[1]+ih+1)*W]
							for o := 0; o < lo; o++ {
								dst[o] = 0
							}
							in := dst[lo:hi]
							switch {
							case sw == 1 && len(in) > 16:
								copy(in, src[lo+woff:hi+woff])
							case sw == 1:
								sr := src[lo+woff : hi+woff]
								for o := range in {
									in[o] = sr[o]
								}
							default:
								sr := src[lo*sw+woff : (hi-1)*sw+woff+1]
								for o := range in {
									in[o] = sr[o*sw]
								}
							}
							for o := hi; o < ow; o++ {
								dst[o] = 0
							}
						}
					}
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

// weightPackSize is the workspace for the input gradient's weights (wᵀ,
// D×M) packed once a call (packedWeights) for products n columns wide, 0
// where the BLAS backend does not pack them. (The forward's w is read in
// place by the AVX-512 backend.)
func weightPackSize(s *ConvShape, n int) int { return blas.PackedSize(s.D, n, s.M) }

// packedWeights packs wᵀ (w is M×D) as the A operand of the workers'
// D×n×M input-gradient products into tail when the BLAS backend packs and
// tail has room, so that the workers share one packing instead of one a
// product (a chunk or a sample each); nil otherwise.
func packedWeights(s *ConvShape, n int, w []float32, tail []float32) []float32 {
	sz := blas.PackedSize(s.D, n, s.M)
	if sz == 0 || len(tail) < sz {
		return nil
	}
	blas.PackA(true, s.D, s.M, 1, w, s.D, tail[:sz])
	return tail[:sz]
}

// ConvForward computes y = conv(x, w) + bias. Shapes: x N×C×In, w M×D, bias
// M (or nil), y N×M×T. ws must hold at least ColSize() elements
// (ConvWorkspaceSize for full parallelism); pointwise convolutions need
// none. Samples are split over workers, each unfolding one sample at a time
// and multiplying it by the group's weights with one GEMM, or, for small
// outputs (see convBatch) with the workspace for it, a chunk of samples at
// a time (the bias is added while the chunk's product is scattered to y).
// Depthwise convolutions slide their taps over each channel plane directly
// (depthwise.go) when ws holds one worker's planes.
func ConvForward(s *ConvShape, x, w, bias, y, ws []float32) {
	s.check()
	xs, ys := s.C*s.InSize, s.M*s.T
	checkLen("x", x, s.N*xs)
	checkLen("w", w, s.M*s.D)
	checkLen("y", y, s.N*ys)
	if bias != nil {
		checkLen("bias", bias, s.M)
	}
	if s.IsDepthwise() && !dwOff && dwForward(s, x, w, bias, y, ws) {
		return
	}
	if nb := tapChunking(s, len(ws), false); nb > 0 {
		convForwardTaps(s, nb, x, w, bias, y, ws)
		return
	}
	if nb, workers := convChunking(s, len(ws), false); nb > 0 {
		convForwardChunked(s, nb, workers, x, w, bias, y, ws)
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
// Each worker accumulates the weight gradient of its samples (or chunks of
// samples, as in ConvForward) privately and the partials are added in
// worker order, so the result is reproducible for a given Workers().
// Depthwise convolutions take the direct kernels (depthwise.go).
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
	if s.IsDepthwise() && !dwOff && dwBackward(s, x, w, dy, dx, dw, ws) {
		return
	}
	if nb := tapChunking(s, len(ws), dw != nil); nb > 0 {
		convBackwardTaps(s, nb, x, w, dy, dx, dw, ws)
		return
	}
	if nb, workers := convChunking(s, len(ws), dw != nil); nb > 0 {
		convBackwardChunked(s, nb, workers, x, w, dy, dx, dw, ws)
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
	var wp []float32
	if dx != nil && workers > 1 && s.Group == 1 && colSize > 0 {
		tail := workers * colSize
		if dw != nil {
			tail += (workers - 1) * wSize
		}
		wp = packedWeights(s, s.T, w, ws[min(tail, len(ws)):])
	}
	parallelWorkers(workers, s.N, func(wk, lo, hi int) {
		col := ws[wk*colSize : (wk+1)*colSize]
		dwp := workerGrad(dw, ws, workers, colSize, wSize, wk)
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
					if wp != nil {
						blas.SgemmPackedSerial(s.D, s.T, s.M, wp, false, dyg, s.T, 0, col, s.T)
					} else {
						gemm(true, false, s.D, s.T, mg, 1, w[g*mg*s.D:], s.D, dyg, s.T, 0, col, s.T)
					}
					clear(dxg)
					col2im(&s.g, col, cg, dxg)
				}
			}
		}
	})
	if dw != nil {
		sumWorkerGrads(dw, ws, workers, colSize, wSize)
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

// workerGrad returns worker wk's weight-gradient accumulator, cleared:
// dw itself (its first wSize elements) for worker 0, and for the others a
// slot in ws after the workers' per-element buffers; nil when dw is nil.
// sumWorkerGrads adds the slots into dw once the workers are done.
func workerGrad(dw, ws []float32, workers, per, wSize, wk int) []float32 {
	if dw == nil {
		return nil
	}
	g := dw[:wSize]
	if wk > 0 {
		off := workers*per + (wk-1)*wSize
		g = ws[off : off+wSize]
	}
	clear(g)
	return g
}

// sumWorkerGrads adds workers 1…workers−1's weight-gradient slots (see
// workerGrad) into dw.
func sumWorkerGrads(dw, ws []float32, workers, per, wSize int) {
	if dw == nil {
		return
	}
	for wk := 1; wk < workers; wk++ {
		off := workers*per + (wk-1)*wSize
		addTo(dw[:wSize], ws[off:off+wSize])
	}
}

// addTo adds src into dst elementwise (len(dst) ≥ len(src)), through
// AVX where the CPU has it: the same float32 addition per element.
func addTo(dst, src []float32) {
	dst = dst[:len(src)]
	if haveAdamAVX {
		n := len(src) &^ 15
		addToAVX(dst, src[:n])
		dst, src = dst[n:], src[n:]
	}
	for j, v := range src {
		dst[j] += v
	}
}
