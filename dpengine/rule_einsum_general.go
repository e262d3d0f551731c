package dpengine

import (
	"fmt"
	"slices"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// A weight of a two-operand Einsum that is not a grouped linear layer
// (rewrite.SplitEinsum refuses it: a weight label summed on its own, a
// data label summed on its own, a diagonal, a broadcast axis): the plan
// makes it an elementwise use, and sample i's gradient is the equation's
// gradient with respect to the weight on the sample's slice of the other
// operand and of the output gradient, instantiated:
//
//	dW[w] = Σ over the labels not fixed by w of A[a]·G[y]
//
// (a diagonal of the weight gets only its diagonal, a broadcast axis of it
// the sum). The batch label has size 1 in the sample's slices, so the
// equation is the node's own.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: einsumOperand, batch: einsumOperandBatch}, "Einsum")
}

func einsumOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	if len(ev.Inputs) != 2 {
		return fmt.Errorf("Einsum of %d operands", len(ev.Inputs))
	}
	data := &ev.Inputs[1-s.k]
	ai, aShape := data.Data, data.Shape
	if data.BatchAxis >= 0 {
		var err error
		if sc.other, err = gatherOn(s.dev, s.lay, data, s.B, s.i, sc.other); err != nil {
			return err
		}
		ai, aShape = sc.other, sampleShape(data, s.B)
	}
	l, err := einsumContraction(ev.Node, s.k, s.opShape, aShape, s.gShape, 0, 0, 0)
	if err != nil {
		return err
	}
	// The contraction, one loop per label, on the device with its
	// float64 sums in device scratch.
	if sc.acc, err = growF64On(s.dev, sc.acc, len(s.out)); err != nil {
		return err
	}
	s.ops.Contract(l, ai, s.gi, sc.acc, s.out)
	return nil
}

// einsumOperandBatch is einsumOperand for the whole physical batch in
// one contraction, on a device that batches its per-sample work (a GPU,
// whose per-sample loop would be a contraction launched per sample): the
// batch label becomes one of the result's, sample i's gradient at i·P
// (P the weight's elements), with the data operand and the output
// gradient read whole. Each result's terms are the per-sample
// contraction's, in the same order (the batch label only interleaves
// results), so the bits are the same. It reports false, doing nothing,
// for a use through a path, where the batch's results and sums exceed
// batchedScratch, or where the equation does not pair the operands' batch
// axes (einsumOperand then reports it).
func einsumOperandBatch(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if !e.batchSamples || len(g.uses) != 1 || g.sub != nil || g.uses[0].idx != nil || len(ev.Inputs) != 2 {
		return false
	}
	us := g.uses[0]
	k := us.use.Operand
	if k < 0 || k > 1 {
		return false
	}
	w, data, dy := &ev.Inputs[k], &ev.Inputs[1-k], &ev.DOut
	B, P := e.cfg.PhysicalBatch, len(us.p.data)
	// The batch's gradients and their float64 sums: three floats a
	// result, within the batched rules' bound.
	if w.BatchAxis >= 0 || data.BatchAxis < 0 || dy.BatchAxis < 0 || P == 0 || numel(w.Shape) != P ||
		data.Shape[data.BatchAxis] != B || dy.Shape[dy.BatchAxis] != B || 3*B*P > batchedScratch {
		return false
	}
	if g.contract == nil {
		l, err := einsumContraction(ev.Node, k, w.Shape, data.Shape, dy.Shape, data.BatchAxis+1, dy.BatchAxis, P)
		if err != nil {
			return false
		}
		g.contract = l
	}
	out, err := growOn(e.dev, e.affineScratch, B*P)
	if err != nil {
		return false // the general path reports it
	}
	e.affineScratch = out
	acc, err := growF64On(e.dev, e.contractAcc, B*P)
	if err != nil {
		return false
	}
	e.contractAcc = acc
	e.ops.Contract(g.contract, data.Data, dy.Data, acc, out[:B*P])
	return e.addSampleRows(us.p, 0, out[:e.n*P])
}

// einsumContraction builds the loop nest of the gradient of an Einsum
// node with respect to its operand k (of shape wShape) from the other
// operand (aShape) and the output gradient (gShape): one loop per label,
// in the order the labels first appear in the equation's operands and
// output. With batchAxis > 0, the other operand's axis batchAxis−1 is
// the batch, its label the output gradient's axis gBatch and not the
// operand's: its loop writes sample after sample, each result P further
// on.
func einsumContraction(n *graph.Node, k int, wShape, aShape, gShape []int, batchAxis, gBatch, P int) (*runtime.ContractLoop, error) {
	eq, err := n.Str("equation")
	if err != nil {
		return nil, err
	}
	shapes := make([][]int64, 2)
	shapes[k], shapes[1-k] = int64s(wShape), int64s(aShape)
	spec, err := graph.ParseEinsum(eq, []int{len(shapes[0]), len(shapes[1])})
	if err != nil {
		return nil, err
	}
	size, err := spec.Sizes(shapes)
	if err != nil {
		return nil, err
	}
	var labels []rune
	pos := map[rune]int{}
	for _, ls := range [][]rune{spec.Inputs[0], spec.Inputs[1], spec.Output} {
		for _, c := range ls {
			if _, ok := pos[c]; !ok {
				pos[c] = len(labels)
				labels = append(labels, c)
			}
		}
	}
	dims := make([]int, len(labels))
	for i, c := range labels {
		dims[i] = int(size[c])
	}
	// Per label, the stride of each tensor (0 where it lacks the label or
	// broadcasts it).
	strideOf := func(ls []rune, sh []int) []int {
		st := make([]int, len(labels))
		acc := 1
		for a := len(ls) - 1; a >= 0; a-- {
			if sh[a] != 1 {
				st[pos[ls[a]]] += acc
			}
			acc *= sh[a]
		}
		return st
	}
	if len(gShape) != len(spec.Output) {
		return nil, fmt.Errorf("output gradient %v does not match equation %q", gShape, eq)
	}
	for a, l := range spec.Output {
		if int64(gShape[a]) != size[l] {
			return nil, fmt.Errorf("output gradient %v does not match equation %q", gShape, eq)
		}
	}
	l := &runtime.ContractLoop{Dims: dims, Out: strideOf(spec.Inputs[k], wShape), A: strideOf(spec.Inputs[1-k], aShape), B: strideOf(spec.Output, gShape)}
	if batchAxis > 0 {
		b := spec.Inputs[1-k][batchAxis-1]
		if slices.Contains(spec.Inputs[k], b) || spec.Output[gBatch] != b {
			return nil, fmt.Errorf("batch label %q is the operand's, or not the output gradient's batch axis", b)
		}
		l.Out[pos[b]] = P
	}
	return l, nil
}
