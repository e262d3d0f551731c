package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The scale and bias of native normalization nodes: LayerNormalization
// (opset 17), GroupNormalization (opset 18, per-group or per-channel
// affine) and InstanceNormalization. With x̂ the normalized input of a
// sample (from the runtime's own row statistics),
// sample i's gradient is Σ g·x̂ for the scale and Σ g for the bias, summed
// over the positions that share a parameter element.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: normOperand, batch: normBatch}, "LayerNormalization", "GroupNormalization", "InstanceNormalization")
}

// normBatchOff turns normBatch off (tests compare it with the
// sample-by-sample path), normPairOff its scale-and-bias pairs (tests
// compare them with a call each).
var normBatchOff, normPairOff bool

// normBatch is the per-sample gradient of a normalization's scale or bias
// read by nothing else, for the physical batch in one call
// (VectorOps.NormAffineGrads: the terms and order of normOperand, read
// from the whole tensors instead of each sample's gathered copy), then
// added to the parameter (addSampleRows). The sample-by-sample path
// gathers, sums and adds per sample: at ViT-B/16's 25 LayerNorms, some
// 8,000 small launches a step on a GPU. It reports false, doing nothing,
// for any other case.
func normBatch(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if !normBatchFits(e, ev, g) {
		return false
	}
	us := g.uses[0]
	k := us.use.Operand
	nr, x, dy := ev.Norm, &ev.Inputs[0], &ev.DOut
	P := len(us.p.data)
	if k == 2 && e.pendingGroup == g {
		// Taken with the scale's, earlier in this event.
		e.pendingGroup = nil
		return e.addSampleRows(us.p, 0, e.biasPending[:e.n*P])
	}
	// The scale's group asks for its node's bias's too where that group
	// comes later in this event and is batched alike: one pass over the
	// output gradient for both (VectorOps.NormAffineGrads' outBias).
	var bias *useGroup
	if k == 1 && !normPairOff {
		seen := false
		for _, o := range e.groups[g.output] {
			if o == g {
				seen = true
			} else if seen && o.elem == g.elem && len(o.uses) == 1 && o.uses[0].use.Operand == 2 && len(o.uses[0].p.data) == P && normBatchFits(e, ev, o) {
				bias = o
				break
			}
		}
	}
	buf, err := growOn(e.dev, e.affineScratch, e.n*P)
	if err != nil {
		return false // the general path reports it
	}
	e.affineScratch = buf
	acc, err := growF64On(e.dev, e.affineAcc, e.n*P)
	if err != nil {
		return false
	}
	e.affineAcc = acc
	var outBias []float32
	if bias != nil {
		if e.biasPending, err = growOn(e.dev, e.biasPending, e.n*P); err != nil {
			return false
		}
		outBias = e.biasPending[:e.n*P]
	}
	mean, inv := nr.StatsData()
	xs := x.Data
	if k == 2 {
		xs = nil
	}
	e.ops.NormAffineGrads(nr, k == 1, e.cfg.PhysicalBatch, x.BatchStride, xs, mean, inv, dy.Data, acc[:e.n*P], buf[:e.n*P], outBias)
	if bias != nil {
		e.pendingGroup = bias
	}
	return e.addSampleRows(us.p, 0, buf[:e.n*P])
}

// normBatchFits reports whether normBatch takes group g of event ev: one
// direct use of a normalization's scale or bias, its rows the whole
// tensors' in the batch's blocks.
func normBatchFits(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if normBatchOff || len(g.uses) != 1 || g.sub != nil || g.uses[0].idx != nil {
		return false
	}
	us := g.uses[0]
	k := us.use.Operand
	nr, x, dy := ev.Norm, &ev.Inputs[0], &ev.DOut
	B, P := e.cfg.PhysicalBatch, len(us.p.data)
	if (k != 1 && k != 2) || nr == nil || P == 0 || nr.NumParams() != P || x.BatchAxis < 0 ||
		dy.BatchAxis != x.BatchAxis || dy.BatchStride != x.BatchStride || len(dy.Data) != len(x.Data) {
		return false
	}
	L := nr.RowLen()
	return x.BatchStride%L == 0 && len(x.Data)%(x.BatchStride*B) == 0 && len(x.Data) == nr.Rows()*L
}

// normOperand is sample s.i's gradient with respect to the scale (input 1)
// or the bias (input 2) of a normalization node. The rows, their
// statistics and the parameter each element uses are the runtime's own
// (runtime.NormRows), so x̂ has the forward's bits.
func normOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	if s.k != 1 && s.k != 2 {
		return fmt.Errorf("%s input %d is not a scale or bias", ev.Node.OpType, s.k)
	}
	nr, x := ev.Norm, &ev.Inputs[0]
	if nr == nil {
		return fmt.Errorf("%s was not compiled as a normalization", ev.Node.OpType)
	}
	if x.BatchAxis < 0 {
		return fmt.Errorf("%s input has no batch axis", ev.Node.OpType)
	}
	L := nr.RowLen()
	var err error
	if sc.self, err = gatherOn(s.dev, s.lay, x, s.B, s.i, sc.self); err != nil {
		return err
	}
	xi, gi := sc.self, s.gi
	if len(xi) != len(gi) || len(xi)%L != 0 || x.BatchStride%L != 0 {
		return fmt.Errorf("%s input of %d and output gradient of %d elements per sample for rows of %d (batch stride %d)",
			ev.Node.OpType, len(xi), len(gi), L, x.BatchStride)
	}
	// The sums run on the device, into its float64 scratch, from the
	// rows' statistics the forward left in device memory.
	if sc.acc, err = growF64On(s.dev, sc.acc, len(s.out)); err != nil {
		return err
	}
	mean, inv := nr.StatsData()
	s.ops.NormAffineSampleGrad(nr, s.k == 1, s.i, s.B, x.BatchStride, xi, mean, inv, gi, sc.acc, s.out)
	return nil
}
