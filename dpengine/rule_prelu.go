package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// PRelu's slope: y = x for x > 0, slope·x otherwise, so sample i's slope
// gradient is dy_i·x_i over x_i ≤ 0, reduced onto the slope's shape (the
// opset ≤ 6 per-channel slope (C) counts as (C, 1, …)).

func init() {
	registerElementwise(&elementwiseRule{operandGrad: preluSlope}, "PRelu")
}

func preluSlope(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	if s.k != 1 {
		return fmt.Errorf("PRelu operand %d is not the slope", s.k)
	}
	x := &ev.Inputs[0]
	xi := x.Data
	if x.BatchAxis >= 0 {
		var err error
		if sc.other, err = gatherOn(s.dev, s.lay, x, s.B, s.i, sc.other); err != nil {
			return err
		}
		xi = sc.other
	}
	if len(xi) != len(s.gi) {
		return fmt.Errorf("PRelu input of %d elements per sample, output gradient %d", len(xi), len(s.gi))
	}
	eff, err := graph.PReluSlopeShape(ev.Node.Opset, int64s(x.Shape), int64s(s.opShape))
	if err != nil {
		return err
	}
	d := s.gi // the rule may overwrite it
	// host read and write: the slope's local derivative, elementwise on
	// device data (not yet a device operation).
	for j, v := range xi {
		if v > 0 {
			d[j] = 0
		} else {
			d[j] *= v
		}
	}
	s.ops.ReduceToShape(d, s.gShape, s.out, intsOf(eff))
	return nil
}

func int64s(s []int) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

func intsOf(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}
