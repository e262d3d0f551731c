package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// ConvTranspose weights and biases. A ConvTranspose is the adjoint of a
// Conv with the same weight (runtime.HookEvent.TransposedConv): its
// weight's per-sample gradient is that Conv's, with the ConvTranspose's
// output gradient as the Conv's input and its input as the Conv's output
// gradient, so the Conv rule computes it (ghost norm or instantiation, per
// group). The bias is a Conv bias of the output.

func init() {
	registerLinear(&linearRule{perSample: convTransposeUse, weightedSum: convTransposeWeightedSum}, "ConvTranspose")
	registerElementwise(&elementwiseRule{operandGrad: convBiasOperand, batch: convBias}, "ConvTranspose")
}

func convTransposeUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	if ev.TransposedConv == nil {
		return fmt.Errorf("no transposed-convolution geometry")
	}
	return convUseOn(e, us, ev.TransposedConv, &ev.DOut, &ev.Inputs[0])
}

// convTransposeWeightedSum is book-keeping's Σ_i c_i g_i of a
// ConvTranspose weight. convUseOn kept the output gradient as ls.x and the
// input as ls.dy; the factors scale the output gradient (as a Conv's), not
// the input activation, which other layers may still read.
func convTransposeWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, scratch *[]float32, ws []float32) error {
	if ls.convRows.folded() {
		scaleConvRows(ls.ops, ls.convRows, c, ls.x, len(ls.x)/ls.conv.N)
		return convWeightGradInto(ls, accum, overwrite, scratch, ws)
	}
	inLen := len(ls.x) / B
	ls.ops.ScaleRows(c[:B], 1, ls.x[:B*inLen], inLen, inLen) // sample i's rows by C_i, c read where it lies
	return convWeightGradInto(ls, accum, overwrite, scratch, ws)
}
