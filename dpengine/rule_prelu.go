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
	registerElementwise(&elementwiseRule{operandGrad: preluSlope, batch: preluBatch}, "PRelu")
}

// preluBatch is the slope's per-sample gradients for the whole physical
// batch at once, on a device that batches its per-sample work
// (Engine.batchSamples): PRelu's own backward over the batch (its ds, no
// dx), then one reduction onto [B, slope shape], which keeps each
// sample's sums apart (arithmeticBatch's form), added in one or two
// calls. It reports false, doing nothing, for any other case (the
// sample-by-sample path, which on the CPU splits the samples over the
// cores).
func preluBatch(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	if !e.batchSamples || len(g.uses) != 1 || g.sub != nil || g.uses[0].idx != nil || g.uses[0].use.Operand != 1 || len(ev.Inputs) != 2 {
		return false
	}
	us := g.uses[0]
	B := e.cfg.PhysicalBatch
	x, slope, dy := &ev.Inputs[0], &ev.Inputs[1], &ev.DOut
	r := len(x.Shape)
	P := len(us.p.data)
	if x.BatchAxis != 0 || dy.BatchAxis != 0 || slope.BatchAxis >= 0 || r < 2 || x.Shape[0] != B ||
		len(x.Data) != numel(x.Shape) || len(dy.Data) != len(x.Data) || P == 0 {
		return false
	}
	// The slope's shape against x's (graph.PReluSlopeShape), found at the
	// first step and kept: the shapes are the plan's, the hook runs every
	// step.
	if g.slopeShape == nil {
		eff, err := graph.PReluSlopeShape(ev.Node.Opset, int64s(x.Shape), int64s(slope.Shape))
		for err == nil && len(eff) > r-1 && eff[0] == 1 { // leading unit axes broadcast over the batch's
			eff = eff[1:]
		}
		if err != nil || len(eff) > r-1 {
			return false
		}
		g.slopeShape = intsOf(eff)
	}
	tShape := e.sampleTarget(r, 0, B)
	copy(tShape[r-len(g.slopeShape):], g.slopeShape)
	if numel(tShape) != B*P {
		return false
	}
	buf, err := growOn(e.dev, e.affineScratch, len(x.Data)+B*P)
	if err != nil {
		return false // the general path reports it
	}
	e.affineScratch = buf
	ds, rows := buf[:len(x.Data)], buf[len(x.Data):len(x.Data)+B*P]
	e.lay.PReluBackward(x.Data, nil, nil, dy.Data, nil, ds)
	e.ops.ReduceToShape(ds, x.Shape, rows, tShape)
	return e.addSampleRows(us.p, 0, rows[:e.n*P])
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
	// The slope's local derivative dy·x where x ≤ 0, 0 elsewhere: PRelu's
	// own backward, its ds before the reduction (no dx).
	if sc.d, err = growOn(s.dev, sc.d, len(xi)); err != nil {
		return err
	}
	s.lay.PReluBackward(xi, nil, nil, s.gi, nil, sc.d)
	s.ops.ReduceToShape(sc.d, s.gShape, s.out, intsOf(eff))
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
