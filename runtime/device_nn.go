package runtime

import (
	"sync"

	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// PoolShape is the compiled geometry of a MaxPool or AveragePool: batch,
// channels, spatial sizes, window, strides, dilations, pads, ceil mode and
// count_include_pad, and the output sizes Init derives.
type PoolShape = kernels.PoolShape

// BatchNormShape is a compiled BatchNormalization (NNOps.BatchNorm).
type BatchNormShape = kernels.BatchNormShape

// LRNShape is a compiled LRN (NNOps.LRN).
type LRNShape = kernels.LRNShape

// NNOps is the group of GraphOps for convolutions (forward, input and
// weight gradients), pooling and the normalizations: BatchNormalization,
// LayerNormalization, InstanceNormalization and GroupNormalization (as
// rows normalized with an affine transform), the fused normalization of
// torch's decomposed LayerNorm, and LRN. Their compile-time plans
// (ConvShape, PoolShape, BatchNormShape, NormRows, LRNShape) are built
// once by the plan.
type NNOps interface {
	// ConvScratchSize is the scratch, in elements, that Conv,
	// ConvBackward, ConvTranspose and ConvTransposeBackward need for s.
	ConvScratchSize(s *ConvShape) int
	// Conv computes the convolution s of x (N×C×In) with w (M×C/Group×
	// Kernel) plus bias (M elements, or nil) into y (N×M×Out): ONNX Conv.
	// ws is scratch of ConvScratchSize(s) elements.
	Conv(s *ConvShape, x, w, bias, y, ws []float32)
	// ConvBackward computes Conv's gradients from dy: the input gradient
	// dx, the weight gradient dw summed over the batch, the bias gradient
	// db; each is overwritten, or skipped when nil (x is read only for dw,
	// w only for dx).
	ConvBackward(s *ConvShape, x, w, dy, dx, dw, db, ws []float32)
	// ConvTranspose computes ONNX ConvTranspose as the adjoint of the
	// convolution s (from the ConvTranspose's output, N×C×In, to its
	// input, N×M×Out, with the same weight w): y (N×C×In) is that
	// convolution's input gradient for output gradient x, plus bias (C
	// elements, or nil) per channel.
	ConvTranspose(s *ConvShape, x, w, bias, y, ws []float32)
	// ConvTransposeBackward computes ConvTranspose's gradients from dy:
	// dx is the convolution s of dy, dw its weight gradient with dy as
	// input and x as output gradient, db the per-channel sum of dy; each
	// is overwritten, or skipped when nil.
	ConvTransposeBackward(s *ConvShape, x, w, dy, dx, dw, db, ws []float32)
	// MaxPool computes ONNX MaxPool (s: window, strides, dilations, pads,
	// ceil mode) of x into y; when argmax is not nil it receives the
	// input index (within the sample's channel plane) each output read.
	MaxPool(s *PoolShape, x, y []float32, argmax []int32)
	// MaxPoolBackward overwrites dx with dy routed to the winners argmax
	// of MaxPool (summed where windows share one).
	MaxPoolBackward(s *PoolShape, dy []float32, argmax []int32, dx []float32)
	// MaxPoolBackwardFromOutput is MaxPoolBackward with the winners found
	// again from x and MaxPool's output y (the first element of its window
	// equal to y).
	MaxPoolBackwardFromOutput(s *PoolShape, x, y, dy, dx []float32)
	// AveragePool computes ONNX AveragePool of x into y (count_include_pad
	// as s says).
	AveragePool(s *PoolShape, x, y []float32)
	// AveragePoolBackward overwrites dx with AveragePool's gradient.
	AveragePoolBackward(s *PoolShape, dy, dx []float32)
	// GlobalAveragePool writes the mean of each of the planes rows of
	// spatial elements of x to y (ONNX GlobalAveragePool).
	GlobalAveragePool(planes, spatial int, x, y []float32)
	// GlobalAveragePoolBackward overwrites dx with dy spread evenly over
	// each plane.
	GlobalAveragePoolBackward(planes, spatial int, dy, dx []float32)
	// GlobalMaxPool writes the maximum of each of the planes rows of
	// spatial elements of x to y (ONNX GlobalMaxPool; the first maximum,
	// a NaN winning) and its position in the row to argmax.
	GlobalMaxPool(planes, spatial int, x, y []float32, argmax []int32)
	// GlobalMaxPoolBackward overwrites dx with dy at the winners argmax
	// and zero elsewhere.
	GlobalMaxPoolBackward(planes, spatial int, dy []float32, argmax []int32, dx []float32)
	// BatchNorm computes ONNX BatchNormalization per channel: y =
	// (x − μ)·σ⁻¹·scale + bias with the batch's statistics (s.Training)
	// or the running ones (runMean, runVar), writing μ and σ⁻¹ to mean
	// and invStd and, training, the updated running statistics
	// runMean·momentum + batch·(1 − momentum) to newMean and newVar
	// unless they are nil.
	BatchNorm(s *BatchNormShape, x, scale, bias, runMean, runVar, y, mean, invStd, newMean, newVar []float32)
	// BatchNormBackward overwrites dx (through the batch statistics when
	// s.Training), dscale and dbias (summed over the batch) from
	// BatchNorm's mean and invStd; nil gradients are skipped.
	BatchNormBackward(s *BatchNormShape, x, scale, mean, invStd, dy, dx, dscale, dbias []float32)
	// NormalizeRows writes y = (x − μ)·σ⁻¹ for every row of L contiguous
	// elements of x (the fused ReduceMean → Sub → Pow → ReduceMean → Add
	// → Sqrt → Div chain of torch's LayerNorm exports, without affine
	// transform), σ² + eps being the row's variance, and σ⁻¹ of row r to
	// invStd[r].
	NormalizeRows(x, y []float32, L int, eps float32, invStd []float32)
	// NormalizeRowsBackward overwrites dx with NormalizeRows' gradient
	// from its output y and invStd: dx = σ⁻¹·(dy − mean(dy) − y·mean(dy·y))
	// per row.
	NormalizeRowsBackward(y, dy, invStd []float32, L int, dx []float32)
	// NormalizeRowsAffine computes LayerNormalization,
	// InstanceNormalization and GroupNormalization as n describes them:
	// each of n.Rows() rows of n.RowLen() elements of x normalized with
	// its own mean and σ⁻¹ (σ² = variance + n.Epsilon()), written to
	// mean and invStd, then y = x̂·scale[k] + bias[k] with k =
	// n.Param(row, j) (bias may be nil).
	NormalizeRowsAffine(n *NormRows, x, scale, bias, y, mean, invStd []float32)
	// NormalizeRowsAffineBackward overwrites dx with the gradient through
	// NormalizeRowsAffine (its mean and invStd) of dy.
	NormalizeRowsAffineBackward(n *NormRows, x, scale, mean, invStd, dy, dx []float32)
	// NormalizeRowsAffineParamGrads overwrites dscale[k] with Σ dy·x̂ and
	// dbias[k] with Σ dy over the elements using parameter k (either may
	// be nil).
	NormalizeRowsAffineParamGrads(n *NormRows, x, mean, invStd, dy, dscale, dbias []float32)
	// LRN computes ONNX LRN across channels: y_c = x_c·s_c^(−β) with s_c =
	// bias + α/size·Σ_{c′ ∈ W(c)} x_{c′}²; ws is scratch of N·C·Inner
	// elements.
	LRN(s *LRNShape, x, y, ws []float32)
	// LRNBackward overwrites dx with LRN's gradient; ws as LRN's.
	LRNBackward(s *LRNShape, x, dy, dx, ws []float32)
	// GemmBias writes β·C, broadcast from cShape to yShape, to y: the C
	// term of ONNX Gemm, to which the product is then added (Gemm with
	// β = 1).
	GemmBias(beta float32, c []float32, cShape []int, y []float32, yShape []int)
	// GemmBiasBackward overwrites dc with β·Σ dy over the axes C is
	// broadcast along.
	GemmBiasBackward(beta float32, dy []float32, yShape []int, dc []float32, cShape []int)
}

// cpuJob is a parallel region of one of the CPU's graph kernels that work
// on a range of items (kernels.NormalizeRows, kernels.BatchNorm, …, and
// the layout plans' block copies): its operands, and kernel, a plain
// function reading them. Jobs are pooled
// and their work function made once per job, so that a call allocates
// nothing (the closures of kernels' own parallel loops would, once per
// call).
type cpuJob struct {
	f      [11][]float32
	arg    []int32
	n      int
	eps    float32
	bn     *BatchNormShape
	lrn    *LRNShape
	rn     *rowNormShape
	pp     *PermPlan
	rb     *RowBlocks
	parts  [][]float32
	flag   bool
	k      int            // softmax: the stride of the softmax axis
	op     UnaryOp        // activations
	par    UnaryParams    // activations
	na     normAffineArgs // NormAffineGrads
	rop    ReduceOp       // reductions
	f64    []float64      // reductions' float64 state
	red    [3]int         // a reduction's outer, reduced and inner sizes
	kernel func(j *cpuJob, lo, hi int)
	fn     func(lo, hi int)
}

var cpuJobs = sync.Pool{New: func() any {
	j := &cpuJob{}
	j.fn = func(lo, hi int) { j.kernel(j, lo, hi) }
	return j
}}

// runJob runs kernel over [0, items) on the workers, ranges of at least
// grain items, with the operands set by set.
func runJob(items, grain int, kernel func(j *cpuJob, lo, hi int), set func(j *cpuJob)) {
	j := cpuJobs.Get().(*cpuJob)
	j.kernel = kernel
	set(j)
	parFor(items, grain, j.fn)
	*j = cpuJob{fn: j.fn}
	cpuJobs.Put(j)
}

// ConvScratchSize implements NNOps with kernels.ConvWorkspaceSize.
func (CPU) ConvScratchSize(s *ConvShape) int { return kernels.ConvWorkspaceSize(s) }

// Conv implements NNOps with kernels.ConvForward.
func (CPU) Conv(s *ConvShape, x, w, bias, y, ws []float32) { kernels.ConvForward(s, x, w, bias, y, ws) }

// ConvBackward implements NNOps with kernels.ConvBackward.
func (CPU) ConvBackward(s *ConvShape, x, w, dy, dx, dw, db, ws []float32) {
	kernels.ConvBackward(s, x, w, dy, dx, dw, db, ws)
}

// ConvTranspose implements NNOps: kernels.ConvBackward's input gradient,
// then kernels.AddChannelBias.
func (CPU) ConvTranspose(s *ConvShape, x, w, bias, y, ws []float32) {
	kernels.ConvBackward(s, nil, w, x, y, nil, nil, ws)
	if bias != nil {
		kernels.AddChannelBias(y, bias, s.N, s.InSize)
	}
}

// ConvTransposeBackward implements NNOps with kernels.ConvForward,
// kernels.ConvBackward and kernels.ChannelBiasGrad.
func (CPU) ConvTransposeBackward(s *ConvShape, x, w, dy, dx, dw, db, ws []float32) {
	if dx != nil {
		kernels.ConvForward(s, dy, w, nil, dx, ws)
	}
	if dw != nil {
		kernels.ConvBackward(s, dy, w, x, nil, dw, nil, ws)
	}
	if db != nil {
		kernels.ChannelBiasGrad(dy, s.N, s.InSize, db)
	}
}

// MaxPool implements NNOps with kernels.MaxPoolForward.
func (CPU) MaxPool(s *PoolShape, x, y []float32, argmax []int32) {
	kernels.MaxPoolForward(s, x, y, argmax)
}

// MaxPoolBackward implements NNOps with kernels.MaxPoolBackward.
func (CPU) MaxPoolBackward(s *PoolShape, dy []float32, argmax []int32, dx []float32) {
	kernels.MaxPoolBackward(s, dy, argmax, dx)
}

// MaxPoolBackwardFromOutput implements NNOps with
// kernels.MaxPoolBackwardFromOutput.
func (CPU) MaxPoolBackwardFromOutput(s *PoolShape, x, y, dy, dx []float32) {
	kernels.MaxPoolBackwardFromOutput(s, x, y, dy, dx)
}

// AveragePool implements NNOps with kernels.AveragePoolForward.
func (CPU) AveragePool(s *PoolShape, x, y []float32) { kernels.AveragePoolForward(s, x, y) }

// AveragePoolBackward implements NNOps with kernels.AveragePoolBackward.
func (CPU) AveragePoolBackward(s *PoolShape, dy, dx []float32) {
	kernels.AveragePoolBackward(s, dy, dx)
}

// GlobalAveragePool implements NNOps with kernels.GlobalAveragePoolRows,
// planes split over the workers.
func (CPU) GlobalAveragePool(planes, spatial int, x, y []float32) {
	runJob(planes, grainFor(spatial), func(j *cpuJob, lo, hi int) {
		kernels.GlobalAveragePoolRows(j.n, j.f[0], j.f[1], lo, hi)
	}, func(j *cpuJob) { j.n, j.f[0], j.f[1] = spatial, x, y })
}

// GlobalAveragePoolBackward implements NNOps with
// kernels.GlobalAveragePoolRowsBackward.
func (CPU) GlobalAveragePoolBackward(planes, spatial int, dy, dx []float32) {
	runJob(planes, grainFor(spatial), func(j *cpuJob, lo, hi int) {
		kernels.GlobalAveragePoolRowsBackward(j.n, j.f[0], j.f[1], lo, hi)
	}, func(j *cpuJob) { j.n, j.f[0], j.f[1] = spatial, dy, dx })
}

// GlobalMaxPool implements NNOps with kernels.GlobalMaxPool.
func (CPU) GlobalMaxPool(planes, spatial int, x, y []float32, argmax []int32) {
	runJob(planes, grainFor(spatial), func(j *cpuJob, lo, hi int) {
		kernels.GlobalMaxPool(j.n, j.f[0], j.f[1], j.arg, lo, hi)
	}, func(j *cpuJob) { j.n, j.f[0], j.f[1], j.arg = spatial, x, y, argmax })
}

// GlobalMaxPoolBackward implements NNOps with
// kernels.GlobalMaxPoolBackward.
func (CPU) GlobalMaxPoolBackward(planes, spatial int, dy []float32, argmax []int32, dx []float32) {
	runJob(planes, grainFor(spatial), func(j *cpuJob, lo, hi int) {
		kernels.GlobalMaxPoolBackward(j.n, j.f[0], j.arg, j.f[1], lo, hi)
	}, func(j *cpuJob) { j.n, j.f[0], j.arg, j.f[1] = spatial, dy, argmax, dx })
}

// BatchNorm implements NNOps with kernels.BatchNorm, channels split over
// the workers.
func (CPU) BatchNorm(s *BatchNormShape, x, scale, bias, runMean, runVar, y, mean, invStd, newMean, newVar []float32) {
	runJob(s.C, grainFor(s.N*s.S), func(j *cpuJob, lo, hi int) {
		f := &j.f
		kernels.BatchNorm(j.bn, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], lo, hi)
	}, func(j *cpuJob) {
		j.bn, j.f = s, [11][]float32{x, scale, bias, runMean, runVar, y, mean, invStd, newMean, newVar}
	})
}

// BatchNormBackward implements NNOps with kernels.BatchNormBackward,
// channels split over the workers.
func (CPU) BatchNormBackward(s *BatchNormShape, x, scale, mean, invStd, dy, dx, dscale, dbias []float32) {
	runJob(s.C, grainFor(s.N*s.S), func(j *cpuJob, lo, hi int) {
		f := &j.f
		kernels.BatchNormBackward(j.bn, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], lo, hi)
	}, func(j *cpuJob) {
		j.bn, j.f = s, [11][]float32{x, scale, mean, invStd, dy, dx, dscale, dbias}
	})
}

// NormalizeRows implements NNOps with kernels.NormalizeRows, rows split
// over the workers.
func (CPU) NormalizeRows(x, y []float32, L int, eps float32, invStd []float32) {
	runJob(len(invStd), grainFor(L), func(j *cpuJob, lo, hi int) {
		kernels.NormalizeRows(j.f[0], j.f[1], j.n, j.eps, j.f[2], lo, hi)
	}, func(j *cpuJob) { j.f[0], j.f[1], j.n, j.eps, j.f[2] = x, y, L, eps, invStd })
}

// NormalizeRowsBackward implements NNOps with
// kernels.NormalizeRowsBackward, rows split over the workers.
func (CPU) NormalizeRowsBackward(y, dy, invStd []float32, L int, dx []float32) {
	runJob(len(invStd), grainFor(L), func(j *cpuJob, lo, hi int) {
		kernels.NormalizeRowsBackward(j.f[0], j.f[1], j.f[2], j.n, j.f[3], lo, hi)
	}, func(j *cpuJob) { j.f[0], j.f[1], j.f[2], j.n, j.f[3] = y, dy, invStd, L, dx })
}

// rowNormShape is the geometry of a row normalization and its parameter
// layout (normLast, normChan, normGroup).
type rowNormShape = kernels.RowNorm

// The parameter layouts of a row normalization.
const (
	normLast  = kernels.NormLast
	normChan  = kernels.NormChannel
	normGroup = kernels.NormGroup
)

// rowNorm normalizes rows of L contiguous elements (LayerNormalization,
// InstanceNormalization, GroupNormalization) and applies a per-element
// affine transform whose parameter index depends on mode.
type rowNorm struct {
	rowNormShape
	nParams int // scale and bias elements
	// mean and inv are the rows' statistics from the last forward;
	// accS and accB the CPU's float64 accumulators of the parameter
	// gradients.
	mean, inv  []float32
	accS, accB []float64
	// parts are the CPU backward's per-run sums of a run layout
	// (kernels.RowNormBackward), made at its first use; partsX and
	// partsDy the x and dy they are of, until the parameter gradients
	// consume them (nil: none kept).
	parts           []float64
	partsX, partsDy *float32
}

// NormalizeRowsAffine implements NNOps, rows split over the workers.
func (CPU) NormalizeRowsAffine(n *NormRows, x, scale, bias, y, mean, invStd []float32) {
	runJob(n.r.Rows, grainFor(n.r.L), func(j *cpuJob, lo, hi int) {
		f := &j.f
		kernels.RowNormForward(j.rn, f[0], f[1], f[2], f[3], f[4], f[5], lo, hi)
	}, func(j *cpuJob) {
		j.rn, j.f = &n.r.rowNormShape, [11][]float32{x, scale, bias, y, mean, invStd}
	})
}

// NormalizeRowsAffineBackward implements NNOps, rows split over the
// workers. Where a row's parameters run per channel or group
// (GroupNormalization, InstanceNormalization) it keeps the per-run sums
// the parameter gradients are made of (kernels.RowNormBackward), for
// NormalizeRowsAffineParamGrads on the same x and dy, which the plan
// calls right after it: one pass over the input and gradient less.
func (CPU) NormalizeRowsAffineBackward(n *NormRows, x, scale, mean, invStd, dy, dx []float32) {
	r := n.r
	r.partsX, r.partsDy = nil, nil
	runs := r.Runs()
	if len(r.parts) < 2*r.Rows*runs {
		r.parts = make([]float64, 2*r.Rows*runs) // once: the plan's shapes do not change
	}
	parts := r.parts
	runJob(r.Rows, grainFor(r.L), func(j *cpuJob, lo, hi int) {
		f := &j.f
		kernels.RowNormBackward(j.rn, f[0], f[1], f[2], f[3], f[4], f[5], parts, lo, hi)
	}, func(j *cpuJob) {
		j.rn, j.f = &r.rowNormShape, [11][]float32{x, scale, mean, invStd, dy, dx}
	})
	if runs > 0 && len(x) > 0 {
		r.partsX, r.partsDy = &x[0], &dy[0]
	}
}

// NormalizeRowsAffineParamGrads implements NNOps: from the per-run sums
// the backward kept for this x and dy, else from x and dy.
func (CPU) NormalizeRowsAffineParamGrads(n *NormRows, x, mean, invStd, dy, dscale, dbias []float32) {
	r := n.r
	if len(x) > 0 && r.partsX == &x[0] && r.partsDy == &dy[0] {
		r.partsX, r.partsDy = nil, nil
		kernels.RowNormParamGradsFromParts(&r.rowNormShape, r.parts, dscale, dbias, r.accS, r.accB)
		return
	}
	kernels.RowNormParamGrads(&r.rowNormShape, x, mean, invStd, dy, dscale, dbias, r.accS, r.accB)
}

// LRN implements NNOps with kernels.LRN, samples split over the workers.
func (CPU) LRN(s *LRNShape, x, y, ws []float32) {
	runJob(s.N, grainFor(s.C*s.Inner*s.Size), func(j *cpuJob, lo, hi int) {
		kernels.LRN(j.lrn, j.f[0], j.f[1], j.f[2], lo, hi)
	}, func(j *cpuJob) { j.lrn, j.f[0], j.f[1], j.f[2] = s, x, y, ws })
}

// LRNBackward implements NNOps with kernels.LRNBackward, samples split
// over the workers.
func (CPU) LRNBackward(s *LRNShape, x, dy, dx, ws []float32) {
	runJob(s.N, grainFor(s.C*s.Inner*s.Size), func(j *cpuJob, lo, hi int) {
		kernels.LRNBackward(j.lrn, j.f[0], j.f[1], j.f[2], j.f[3], lo, hi)
	}, func(j *cpuJob) { j.lrn, j.f[0], j.f[1], j.f[2], j.f[3] = s, x, dy, dx, ws })
}

// GemmBias implements NNOps with kernels.Expand and a scaling.
func (CPU) GemmBias(beta float32, c []float32, cShape []int, y []float32, yShape []int) {
	kernels.Expand(c, cShape, y, yShape)
	if beta != 1 {
		for i := range y {
			y[i] *= beta
		}
	}
}

// GemmBiasBackward implements NNOps with kernels.ReduceToShape and a
// scaling.
func (CPU) GemmBiasBackward(beta float32, dy []float32, yShape []int, dc []float32, cShape []int) {
	kernels.ReduceToShape(dy, yShape, dc, cShape)
	if beta != 1 {
		for i := range dc {
			dc[i] *= beta
		}
	}
}

// ConvSampleGrads is a device whose convolution library forms the weight
// gradients of a chunk of samples in one call — on CUDA, cuDNN's filter
// gradient of one grouped convolution whose groups are the samples — which
// the DP engine's per-sample rules take instead of unfolding every
// sample's input where that does not fit their scratch (on VGG-16 at
// 224×224 an unfolded sample of an early layer is 115 MB) or where the
// device finds the library faster (PreferSampleGrads).
type ConvSampleGrads interface {
	// ConvSampleWeightGrads writes the weight gradients of samples i0 …
	// i0+n−1 of s (x: N×C×In, dy: N×M×Out, device memory) into inst,
	// sample after sample, each M·D in the weights' layout, and reports
	// true; false, writing nothing, where it cannot (no library, a shape
	// the library refuses).
	ConvSampleWeightGrads(s *ConvShape, x, dy []float32, i0, n int, inst []float32) bool
	// PreferSampleGrads reports whether the engine is to form s's
	// per-sample weight gradients by ConvSampleWeightGrads, in chunks of
	// n samples, rather than by its own path, of which own computes the
	// gradients of ownN samples (writing only the engine's scratch).
	// x, dy and inst are ConvSampleWeightGrads's operands for samples 0 …
	// n−1, for a device that measures the two: it may run both, several
	// times, before it answers (inst then holds anything). False where
	// ConvSampleWeightGrads cannot run s.
	PreferSampleGrads(s *ConvShape, x, dy []float32, n int, inst []float32, ownN int, own func()) bool
}

// ConvTapGrams is a device that forms a ghost-norm convolution's Grams
// a_i a_iᵀ from the Grams of its samples' inputs, X_i = x_iᵀx_i over the
// channels, without unfolding the inputs — the DP engine's input-Gram
// ghost norm batched over a chunk of samples (on a GPU; the CPU gathers
// one sample's taps through an index map instead): for a 3×3
// convolution of stride 1, nine times fewer multiply-adds than a_i a_iᵀ
// from the unfolded input.
type ConvTapGrams interface {
	// ConvTapGrams writes the T×T Grams of n samples of s (ungrouped)
	// into aa, sample after sample: aa_i[t][u] = Σ_k X_i[p_k(t)][p_k(u)]
	// over the kernel taps k whose input positions p_k(t) and p_k(u) both
	// lie inside the input (the padding reads zeros), summed in tap
	// order, from X, the samples' S×S input Grams one after another
	// (S = s.InSize). Device memory.
	ConvTapGrams(s *ConvShape, X []float32, n int, aa []float32)
}
