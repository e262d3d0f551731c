package dpengine

import (
	"fmt"
	"slices"

	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Gemm and MatMul weights (y = α·x·W or x·Wᵀ for Gemm with transB), and
// Gemm's bias C.

func init() {
	registerLinear(&linearRule{perSample: matrixUse, weightedSum: matrixWeightedSum}, "Gemm", "MatMul")
	registerElementwise(&elementwiseRule{operandGrad: gemmBias, batch: gemmBiasBatch}, "Gemm")
}

// matrixUse is the per-sample rule of a Gemm or MatMul weight: a_i is
// sample i's rows of the data operand (T×D) and g_i its rows of the output
// gradient (T×p), wherever the batch sits in them.
func matrixUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	ls, p := us.linear, us.p
	B := e.cfg.PhysicalBatch
	dout := &ev.DOut
	if dout.BatchAxis < 0 {
		return fmt.Errorf("output gradient has no batch axis")
	}
	data := &ev.Inputs[us.use.Data]
	if data.BatchAxis < 0 {
		return fmt.Errorf("input %q has no batch axis", data.Name)
	}
	ls.alpha = 1
	ls.weightLayoutPD = false
	if ev.Node.OpType == "Gemm" {
		if a, err := ev.Node.Float("alpha"); err == nil {
			ls.alpha = a
		}
		if ta, _ := ev.Node.Int("transA"); ta != 0 {
			return fmt.Errorf("Gemm with transA=1 is not supported for per-sample gradients")
		}
		if tb, _ := ev.Node.Int("transB"); tb != 0 {
			ls.weightLayoutPD = true
		}
	}
	if us.use.Operand != 1 {
		return fmt.Errorf("%s parameter as operand %d is not supported", ev.Node.OpType, us.use.Operand)
	}
	// G > 1: a stack of weights (G, D, P), one for each of the data's
	// (G, rows, D) matrices, the batch among the rows (rewrite's
	// matmulLayer): a sample's elements, gathered in order, are its rows
	// of matrix 0, then of matrix 1, …, and each matrix is a layer of its
	// own, its gradient block g of the stack's and its squared norm a term
	// of the sample's.
	D, P, G := int(ls.layer.D), int(ls.layer.P), max(int(ls.layer.Groups), 1)
	T := len(data.Data) / B / D / G
	if T*B*D*G != len(data.Data) || T*B*P*G != len(dout.Data) {
		return fmt.Errorf("unexpected shapes %v and %v for D=%d p=%d and %d weights", data.Shape, dout.Shape, D, P, G)
	}
	ls.T = T
	if e.cfg.Mode == BK && p.ps == nil {
		ls.x, ls.xStride = data.Data, data.BatchStride
		ls.dy, ls.dyStride = dout.Data, dout.BatchStride
	}
	if e.batchSamples {
		if ok, err := matrixBatched(e, ls, us, data, dout, T, D, P, G); ok || err != nil {
			return err
		}
	}
	size := G * D * P // the operand's: the parameter's unless through a path
	ta, tg := G*T*D, G*T*P
	need := ta + tg + 2*T*T
	if ls.decision == rewrite.Instantiate {
		need = ta + tg + size
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	e.forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		a := gatherSample(e.lay, data, B, i, buf[:0:ta])
		g := gatherSample(e.lay, dout, B, i, buf[ta:ta:ta+tg])
		rest := buf[ta+tg:]
		if ls.decision == rewrite.Ghost {
			for k := range G {
				addGhostNormSq(e.ops, float64(ls.alpha*ls.alpha), a[k*T*D:], T, D, g[k*T*P:], P, rest, p.normSq[i:i+1])
			}
			return
		}
		inst := rest[:size]
		for k := range G {
			ak, gk, ik := a[k*T*D:], g[k*T*P:], inst[k*D*P:]
			if ls.weightLayoutPD {
				e.ops.GemmSerial(true, false, P, D, T, ls.alpha, gk, P, ak, D, 0, ik, D)
			} else {
				e.ops.GemmSerial(true, false, D, P, T, ls.alpha, ak, D, gk, P, 0, ik, P)
			}
		}
		us.addSample(e.ops, i, 0, inst)
	})
	return nil
}

// batchedScratch bounds the scratch of the batched per-sample rules
// (matrixBatched, convBatched), in float32 elements (64 MiB); where one
// sample's share exceeds it, the per-sample loop runs. The tests lower
// it.
var batchedScratch = 1 << 24

// matrixBatched is matrixUse's per-sample work for chunks of samples at
// once, on a device of one worker with memory of its own (a GPU;
// Engine.batchSamples), where the per-sample loop is a chain of small
// launches: the ghost norms ⟨a_i a_iᵀ, g_i g_iᵀ⟩ as two
// batched GEMMs (the Grams) and one AddDots, or for one row a sample (T =
// 1, a classifier's head) ‖a_i‖²‖g_i‖² as one AddSumSqProducts; the
// instantiated gradients α·g_iᵀa_i as one batched GEMM into the samples'
// rows, added to the parameter at once (addRows: through a path, mapped
// back by its index map in one call). The sums are those of the per-sample path. The
// GEMMs read a sample's rows in place where they lie at one stride (the
// batch outermost, or rows of one feature vector per batch block: the
// sequence-first layout of PyTorch's nn.MultiheadAttention); other
// layouts are first gathered sample by sample, by one Transpose each of a
// and g; so is a stack of G weights (matrixUse), whose products then run
// weight by weight over the gathered samples. It reports false, doing
// nothing, when the gathered batch and one sample's share do not fit
// batchedScratch, for the per-sample loop to run.
func matrixBatched(e *Engine, ls *linearState, us *useState, data, dout *runtime.View, T, D, P, G int) (bool, error) {
	B, n := e.cfg.PhysicalBatch, e.n
	ghost := ls.decision == rewrite.Ghost
	lda, sa, okA := sampleRows(data, B, D)
	ldg, sg, okG := sampleRows(dout, B, P)
	gather := !okA || !okG || sampleRowsOff || G > 1
	alpha := float64(ls.alpha * ls.alpha)
	p := us.p
	if ghost && T == 1 && G == 1 {
		if gather {
			return false, nil // a row a sample whose batch is not outermost: not a layout seen
		}
		// One row a sample, consecutive (sa = D, sg = P): ‖g aᵀ‖² =
		// ‖a‖²‖g‖², as addGhostNormSq's rank-one case; no scratch.
		e.ops.AddSumSqProducts(alpha, data.Data[:n*D], dout.Data[:n*P], p.normSq[:n])
		return true, nil
	}
	gatherLen := 0
	if gather {
		gatherLen = B * G * T * (D + P)
	}
	size := G * D * P // the operand's: the parameter's unless through a path
	per := size       // a sample's share of the scratch
	if ghost {
		per = 2 * T * T
	}
	nb := min(n, e.fitWorkspace((batchedScratch-gatherLen)/max(per, 1), gatherLen, per))
	if nb < 1 {
		return false, nil
	}
	bufs, err := e.workerBufs(gatherLen + nb*per)
	if err != nil {
		return false, err
	}
	buf := bufs[0]
	a, g := data.Data, dout.Data
	if gather {
		a, g = buf[:B*G*T*D], buf[B*G*T*D:gatherLen]
		e.lay.Transpose(data.Data, ls.samplesFirst(&ls.permA, data, B), a)
		e.lay.Transpose(dout.Data, ls.samplesFirst(&ls.permG, dout, B), g)
		lda, sa, ldg, sg = D, G*T*D, P, G*T*P
	}
	work := buf[gatherLen : gatherLen+nb*per]
	for i0 := 0; i0 < n; i0 += nb {
		b := min(nb, n-i0)
		var inst []float32
		if !ghost {
			inst = work[:b*size]
		}
		for k := range G {
			// Weight k reads each gathered sample's rows of matrix k.
			ai, gi := a[i0*sa+k*T*D:], g[i0*sg+k*T*P:]
			if ghost {
				aa, gg := work[:b*T*T], work[nb*T*T:nb*T*T+b*T*T]
				e.ops.GemmStrided(false, true, T, T, D, 1, ai, lda, sa, ai, lda, sa, 0, aa, T, T*T, b)
				e.ops.GemmStrided(false, true, T, T, P, 1, gi, ldg, sg, gi, ldg, sg, 0, gg, T, T*T, b)
				e.ops.AddDots(alpha, aa, gg, p.normSq[i0:i0+b])
				continue
			}
			ik := inst[k*D*P:]
			if ls.weightLayoutPD {
				e.ops.GemmStrided(true, false, P, D, T, ls.alpha, gi, ldg, sg, ai, lda, sa, 0, ik, D, size, b)
			} else {
				e.ops.GemmStrided(true, false, D, P, T, ls.alpha, ai, lda, sa, gi, ldg, sg, 0, ik, P, size, b)
			}
		}
		if !ghost {
			e.addRows(us, i0, b, inst)
		}
	}
	return true, nil
}

// sampleRows reports where sample i's rows of width features lie in v
// (B samples) when they lie at one stride: row t at i·stride + t·ld. That
// holds with the batch outermost (ld = width, stride = BatchStride) and
// with batch blocks of one row ((T, B, width): ld = B·width, stride =
// width).
func sampleRows(v *runtime.View, B, width int) (ld, stride int, ok bool) {
	switch {
	case len(v.Data)/v.BatchStride == B:
		return width, v.BatchStride, true
	case v.BatchStride == width:
		return B * width, width, true
	}
	return 0, 0, false
}

// sampleRowsOff turns sampleRows off (tests run matrixBatched's gathered
// path on the layouts it reads in place).
var sampleRowsOff bool

// samplesFirst returns the plan (cached in *pp) of the Transpose that
// lays v's samples out one after another: v's blocks of BatchStride
// elements, block o·B + i of sample i, from (outer, B, stride) to (B,
// outer, stride), as gatherSample lays out one sample.
func (ls *linearState) samplesFirst(pp **runtime.PermPlan, v *runtime.View, B int) *runtime.PermPlan {
	shape := []int{len(v.Data) / v.BatchStride / B, B, v.BatchStride}
	if *pp == nil || !slices.Equal((*pp).Shape, shape) {
		*pp = runtime.NewPermPlan(shape, []int{1, 0, 2})
	}
	return *pp
}

// matrixWeightedSum is book-keeping's Σ_i c_i g_iᵀa_i of a Gemm or MatMul
// weight (see linearState.weightedSum).
func matrixWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, _ *[]float32, _ []float32) error {
	D, P, G := int(ls.layer.D), int(ls.layer.P), max(int(ls.layer.Groups), 1)
	rows := len(ls.dy) / P
	// Σ_i c_i g_iᵀa_i = Σ_rows (c_{sample(row)} g_row)ᵀ a_row: scale each
	// output-gradient row by its sample's factor and take one GEMM over
	// all rows, whatever the layout of the batch in them (on the device:
	// the factors stay where the clip step wrote them); one GEMM for
	// each weight of a stack, over its matrix's rows.
	scaled := ls.dy[:rows*P]
	ls.ops.ScaleRows(c[:B], ls.alpha, scaled, P, ls.dyStride)
	beta := float32(1)
	if overwrite {
		beta = 0
	}
	m := rows / G
	for k := range G {
		x, dy, acc := ls.x[k*m*D:], scaled[k*m*P:], accum[k*D*P:]
		if ls.weightLayoutPD {
			ls.ops.Gemm(true, false, P, D, m, 1, dy, P, x, D, beta, acc, D)
		} else {
			ls.ops.Gemm(true, false, D, P, m, 1, x, D, dy, P, beta, acc, P)
		}
	}
	return nil
}

// gemmBiasBatchOff turns gemmBiasBatch off (tests compare it with the
// sample-by-sample path).
var gemmBiasBatchOff bool

// gemmBiasBatch is the per-sample gradient of a Gemm's bias C of N
// values read by nothing else, for the physical batch in one
// ReduceToShape: the output gradient's rows seen as (outer, B, rows per
// block, N) and reduced to (1, B, 1, N), which keeps each sample's sum
// apart wherever the batch lies among the rows (a classifier's (B, N), a
// sequence-first attention's (T·B, N)); then scaled by β and added to the
// parameter (addSampleRows). It reports false, doing nothing, for any
// other case (a bias of more than one row, a use through a path).
func gemmBiasBatch(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if gemmBiasBatchOff || len(g.uses) != 1 || g.sub != nil || g.uses[0].idx != nil || g.uses[0].use.Operand != 2 {
		return false
	}
	us, dy := g.uses[0], &ev.DOut
	B, N := e.cfg.PhysicalBatch, len(us.p.data)
	if dy.BatchAxis < 0 || len(dy.Shape) != 2 || dy.Shape[1] != N || N == 0 || dy.BatchStride%N != 0 ||
		len(dy.Data)%(dy.BatchStride*B) != 0 {
		return false
	}
	buf, err := growOn(e.dev, e.affineScratch, B*N) // all B samples' sums; the padded ones are not read
	if err != nil {
		return false // the general path reports it
	}
	e.affineScratch = buf
	sums := buf[:B*N]
	// The shapes in the engine's scratch: nothing allocated per step.
	view, to := e.biasShapes[:4], e.biasShapes[4:]
	view[0], view[1], view[2], view[3] = len(dy.Data)/dy.BatchStride/B, B, dy.BatchStride/N, N
	to[0], to[1], to[2], to[3] = 1, B, 1, N
	e.ops.ReduceToShape(dy.Data, view, sums, to)
	if beta, err := ev.Node.Float("beta"); err == nil && beta != 1 {
		e.ops.Scale(beta, sums[:e.n*N])
	}
	return e.addSampleRows(us.p, 0, sums[:e.n*N])
}

// gemmBias is sample s.i's gradient with respect to a Gemm's bias C:
// β times the output gradient summed over the sample's rows.
func gemmBias(ev *runtime.HookEvent, s sampleGrad, _ *opScratch) error {
	if s.k != 2 {
		return fmt.Errorf("Gemm operand %d is not the bias C", s.k)
	}
	if beta, err := ev.Node.Float("beta"); err == nil && beta != 1 {
		s.ops.Scale(beta, s.gi)
	}
	p := s.gShape[len(s.gShape)-1]
	s.ops.ReduceToShape(s.gi, []int{len(s.gi) / p, p}, s.out, s.opShape)
	return nil
}
