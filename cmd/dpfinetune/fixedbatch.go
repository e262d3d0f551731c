package main

import (
	"fmt"
	"math/rand"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// fixedBatchTol bounds the difference, relative to an output's largest
// value, between the released model at another batch size and the model
// as exported: a batch size changes the products' blocking, not more.
const fixedBatchTol = 1e-4

// releaseFixedBatch returns a copy of model (as loaded, half precision and
// pixels widened) whose fixed batch axis is made dynamic
// (rewrite.ReleaseBatch), checked to compute each sample as the model as
// loaded does: at another batch size (2, or 3 where the
// export fixed 2) every output row equals the exported model's on the same
// sample, run at its own batch size (once where it is larger: the check
// costs a forward pass of the export's batch and one of two samples). It
// also returns the fixed batch size, 0 (and model itself) where the batch
// was already dynamic, and the repairs of the constants that held it; an
// error says why the batch cannot be released. The comparison takes
// BatchNormalization with its running statistics on both sides (batch
// statistics mix the samples by design; train rewrites them anyway).
func releaseFixedBatch(model *graph.Graph) (*graph.Graph, int64, []rewrite.Change, error) {
	g := model.Clone()
	fixed, changes, err := rewrite.ReleaseBatch(g)
	if fixed == 0 {
		return model, 0, nil, nil
	}
	in := g.Inputs[0]
	axes := fmt.Sprintf("%q: {0: %q}", in.Name, rewrite.BatchParam)
	for _, o := range g.Outputs {
		axes += fmt.Sprintf(", %q: {0: %q}", o.Name, rewrite.BatchParam)
	}
	redo := fmt.Sprintf("re-export it with dynamic_axes={%s} (torch.onnx.export)", axes)
	fail := func(format string, a ...any) error {
		return fmt.Errorf("the model was exported with a fixed batch of %d (torch.onnx.export without dynamic_axes), and %s: %s",
			fixed, fmt.Sprintf(format, a...), redo)
	}
	if err != nil {
		return nil, fixed, nil, fail("%v", err)
	}
	if in.DType != graph.Float32 {
		return nil, fixed, nil, fail("its input %q (%v, %v) gives no sample to check another batch size with", in.Name, in.DType, in.Shape)
	}
	orig, rel := model.Clone(), g.Clone()
	sample := in.Shape[1:].Ints()
	for _, c := range []*graph.Graph{orig, rel} {
		// As Prepare does first: statistics the exporter stored once
		// behind Identity nodes become initializers of their own.
		if _, err := rewrite.Cleanup(c); err != nil {
			return nil, fixed, nil, fail("%v", err)
		}
		shapes, err := rewrite.StaticShapes(c, sample, fixed)
		if err != nil {
			return nil, fixed, nil, fail("%v", err)
		}
		if _, err := rewrite.RewriteBatchNorm(c, rewrite.BNOptions{Mode: rewrite.BNFreeze}, shapes); err != nil {
			return nil, fixed, nil, fail("its BatchNormalization cannot be evaluated with running statistics: %v", err)
		}
	}
	// B samples through the released model, the same samples through the
	// export at its own batch, as many times as it takes to cover them
	// (distinct samples fill its batch, so that a mean over the batch
	// cannot come out the same).
	F := int(fixed)
	B := 2
	if F == 2 {
		B = 3
	}
	big, err := runtime.CompileForBatch(rel, B, nil, &runtime.Options{ForwardOnly: true})
	if err != nil {
		return nil, fixed, nil, fail("it does not run at a batch of %d: %v", B, err)
	}
	// The runtime holds this plan, as any, to the memory available: a
	// fixed batch too large to run here is refused, not run.
	small, err := runtime.CompileForBatch(orig, F, nil, &runtime.Options{ForwardOnly: true})
	if err != nil {
		return nil, fixed, nil, fail("it cannot be checked against the export at its own batch: %v", err)
	}
	xb, _ := big.Input(0)
	per := len(xb) / B
	runs := (B + F - 1) / F
	x := make([]float32, runs*F*per)
	rng := rand.New(rand.NewSource(1))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	if err := big.SetInput(0, x[:B*per]); err != nil {
		return nil, fixed, nil, err
	}
	if err := big.Forward(); err != nil {
		return nil, fixed, nil, fail("it does not run at a batch of %d: %v", B, err)
	}
	for r := range runs {
		lo := r * F
		if err := small.SetInput(0, x[lo*per:(lo+F)*per]); err != nil {
			return nil, fixed, nil, err
		}
		if err := small.Forward(); err != nil {
			return nil, fixed, nil, err
		}
		rows := min(B, lo+F) - lo
		for i, o := range rel.Outputs {
			want, ws := small.Output(i)
			got, gs := big.Output(i)
			if len(ws) == 0 || len(gs) == 0 || ws[0] != F || gs[0] != B || len(got)/B != len(want)/F {
				return nil, fixed, nil, fail("its output %q has shape %v at a batch of %d, %v as exported", o.Name, gs, B, ws)
			}
			row := len(want) / F
			if d := numcheck.RelErr(got[lo*row:(lo+rows)*row], want[:rows*row], 0); d > fixedBatchTol {
				return nil, fixed, nil, fail("at a batch of %d its output %q differs from the export's on the same samples by %.3g of its scale (samples interact, or a constant holds the batch)",
					B, o.Name, d)
			}
		}
	}
	return g, fixed, changes, nil
}
