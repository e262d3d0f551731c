package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// checkClassWeights holds Config.ClassWeights to what keeps the clipped
// sum's sensitivity the clip norm: each weight in [0, 1], at most one a
// logit, single-label heads only.
func checkClassWeights(cfg Config, plan *runtime.Plan) error {
	if len(cfg.ClassWeights) == 0 {
		return nil
	}
	if cfg.MultiLabel {
		return fmt.Errorf("dpengine: class weights on a multi-label head: a sample's label is a set of classes, not one")
	}
	_, shape := plan.Output(0)
	if k := shape[len(shape)-1]; len(cfg.ClassWeights) > k {
		return fmt.Errorf("dpengine: %d class weights for a model of %d classes", len(cfg.ClassWeights), k)
	}
	for c, w := range cfg.ClassWeights {
		if !(w >= 0 && w <= 1) {
			return fmt.Errorf("dpengine: class %d's weight %v is outside [0, 1]: a weight above 1 would raise a sample's contribution past the clip norm", c, w)
		}
	}
	return nil
}

// weighClasses writes the physical batch's n samples' class weights into
// unitWeights (padding 0): a sample of several rows (Config.RowLabels)
// weighs the mean of its rows'. It refuses a label without a weight.
func (e *Engine) weighClasses(n int) error {
	v := e.views
	rows := e.y[:n]
	if e.cfg.RowLabels && v > 1 {
		rows = e.rowY[:n*v]
	} else {
		v = 1
	}
	cw := e.cfg.ClassWeights
	clear(e.unitWeightsHost)
	for i := range n {
		var sum float64
		for _, y := range rows[i*v : (i+1)*v] {
			if y < 0 || y >= int64(len(cw)) {
				return fmt.Errorf("dpengine: label %d of sample %d has no class weight (%d given)", y, i, len(cw))
			}
			sum += cw[y]
		}
		e.unitWeightsHost[i] = float32(sum / float64(v))
	}
	if !runtime.SameMemory(e.unitWeights, e.unitWeightsHost) {
		if err := e.dev.CopyIn(e.unitWeightsBuf, 0, e.unitWeightsHost); err != nil {
			return fmt.Errorf("dpengine: the class weights: %w", err)
		}
	}
	return nil
}
