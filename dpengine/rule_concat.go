package dpengine

import (
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Concat of a parameter-derived tensor with batch data: a class token
// expanded over the batch and prepended to the patch tokens.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: concatOperand, batch: concatBatch}, "Concat")
}

// concatBatchOff turns concatBatch off (tests compare it with the
// sample-by-sample path).
var concatBatchOff bool

// concatBatch is the per-sample gradient of a parameter that its path
// broadcasts over the batch (useGroup.bcast: a class token expanded over
// the batch) and a Concat joins to batch data, for the whole physical
// batch at once: the operand's slice of the output gradient (one Split)
// reduced sample by sample to the parameter's shape (one ReduceToShape),
// where the sample-by-sample path runs the path's sub-plan backward once
// a sample. It reports false, doing nothing, for any other case.
func concatBatch(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if concatBatchOff || g.bcast == nil || len(g.uses) != 1 {
		return false
	}
	B := e.cfg.PhysicalBatch
	dy := &ev.DOut
	k := g.uses[0].use.Operand
	if dy.BatchAxis != 0 || k < 0 || k >= len(ev.Inputs) || len(dy.Data) != numel(dy.Shape) {
		return false
	}
	ax, err := concatAxis(ev, len(dy.Shape))
	if err != nil {
		return false
	}
	opShape := ev.Inputs[k].Shape
	if ax <= 0 || ax >= len(dy.Shape) || len(opShape) != len(dy.Shape) || len(g.bcast) != len(opShape) || opShape[0]%B != 0 || opShape[0] < B {
		return false
	}
	// k rows a sample (augmentation multiplicity's views): a sample's
	// rows must be consecutive, its block of the output gradient
	// contiguous, for [B, k, …] to hold each sample's rows on axis 1.
	if rows := opShape[0] / B; rows > 1 && (dy.BatchStride*B != len(dy.Data) || dy.Shape[0] != opShape[0]) {
		return false
	}
	if g.split == nil {
		off, outer, inner := 0, 1, 1
		for j := 0; j < k; j++ {
			off += ev.Inputs[j].Shape[ax]
		}
		for _, d := range dy.Shape[:ax] {
			outer *= d
		}
		for _, d := range dy.Shape[ax+1:] {
			inner *= d
		}
		g.split = runtime.NewRowBlocks(outer, dy.Shape[ax]*inner, []int{off * inner}, []int{opShape[ax] * inner})
		g.splitOut = make([][]float32, 1)
		g.foldFrom, g.foldTo = opShape, g.bcast
		if rows := opShape[0] / B; rows > 1 {
			g.foldFrom = append([]int{B, rows}, opShape[1:]...)
			g.foldTo = append([]int{B, 1}, g.bcast[1:]...)
		}
	}
	P := len(g.uses[0].p.data)
	opLen := numel(opShape)
	buf, err := growOn(e.dev, e.affineScratch, opLen+B*P)
	if err != nil {
		return false // the general path reports it
	}
	e.affineScratch = buf
	g.splitOut[0] = buf[:opLen]
	e.lay.Split(dy.Data, g.split, g.splitOut)
	sums := buf[opLen : opLen+B*P]
	e.ops.ReduceToShape(g.splitOut[0], g.foldFrom, sums, g.foldTo)
	return e.addSampleRows(g.uses[0].p, 0, sums[:e.n*P])
}

// concatOperand is sample s.i's gradient with respect to input s.k of a
// Concat: the input's slice of the output gradient.
func concatOperand(ev *runtime.HookEvent, s sampleGrad, _ *opScratch) error {
	ax, err := concatAxis(ev, len(s.gShape))
	if err != nil {
		return err
	}
	off := 0
	for j := 0; j < s.k; j++ {
		off += ev.Inputs[j].Shape[ax]
	}
	sliceAxis(s.lay, s.gi, s.gShape, ax, off, s.opShape[ax], s.out)
	return nil
}

// concatAxis returns the Concat's axis, counted from 0 in a rank-r output.
func concatAxis(ev *runtime.HookEvent, r int) (int, error) {
	axis, err := ev.Node.Int("axis")
	if err != nil {
		return 0, err
	}
	ax := int(axis)
	if ax < 0 {
		ax += r
	}
	return ax, nil
}

// sliceAxis copies x[..., off:off+n, ...] (along axis) to out, one
// contiguous block at a time through the device's copies.
func sliceAxis(lay runtime.LayoutOps, x []float32, shape []int, axis, off, n int, out []float32) {
	outer, inner := 1, 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	dim := shape[axis]
	k := 0
	for o := 0; o < outer; o++ {
		src := x[(o*dim+off)*inner : (o*dim+off+n)*inner]
		lay.Copy(src, out[k:k+len(src)])
		k += len(src)
	}
}
