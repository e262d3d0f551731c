package dpengine

import (
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Concat of a parameter-derived tensor with batch data: a class token
// expanded over the batch and prepended to the patch tokens.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: concatOperand}, "Concat")
}

// concatOperand is sample s.i's gradient with respect to input s.k of a
// Concat: the input's slice of the output gradient.
func concatOperand(ev *runtime.HookEvent, s sampleGrad, _ *opScratch) error {
	axis, err := ev.Node.Int("axis")
	if err != nil {
		return err
	}
	ax := int(axis)
	if ax < 0 {
		ax += len(s.gShape)
	}
	off := 0
	for j := 0; j < s.k; j++ {
		off += ev.Inputs[j].Shape[ax]
	}
	sliceAxis(s.lay, s.gi, s.gShape, ax, off, s.opShape[ax], s.out)
	return nil
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
