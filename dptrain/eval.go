package dptrain

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// EvalResult is the accuracy, mean loss and confusion matrix of a model on
// a dataset: the JSON form of "dpfinetune eval" and the per-epoch test
// metrics of a run.
type EvalResult struct {
	Samples   int       `json:"samples"`
	Accuracy  float64   `json:"accuracy"`
	Loss      float64   `json:"loss"`
	Confusion [][]int64 `json:"confusion"` // [true][predicted]
	// Classes names the confusion matrix's rows (the data's classes), when
	// the caller sets it (dpfinetune eval).
	Classes []string `json:"classes,omitempty"`
}

// Evaluator runs a forward-only plan of a graph over datasets.
type Evaluator struct {
	plan   *runtime.Plan
	batch  int
	x      []float32
	y      []int64
	k      int
	idx    []int
	logits []float32
}

// NewEvaluator compiles g for forward passes of batch samples of shape
// sample (C,H,W). The graph's initializers are read at every Run (loaded
// to the device, runtime.Plan.LoadParams), so an evaluator built before
// training sees the trained weights once the trainer has put them there
// (dpengine.Engine.SyncParams).
func NewEvaluator(g *graph.Graph, sample []int64, batch int) (*Evaluator, error) {
	return NewEvaluatorOn(nil, g, sample, batch)
}

// NewEvaluatorOn is NewEvaluator on device dev (nil is the CPU).
func NewEvaluatorOn(dev runtime.Device, g *graph.Graph, sample []int64, batch int) (*Evaluator, error) {
	plan, err := runtime.CompileForBatch(g, batch, sample, &runtime.Options{Device: dev, ForwardOnly: true})
	if err != nil {
		return nil, err
	}
	x, _ := plan.Input(0)
	_, oshape := plan.Output(0)
	if len(oshape) != 2 || oshape[0] != batch {
		return nil, fmt.Errorf("model output has shape %v; want (batch, classes) logits", oshape)
	}
	return &Evaluator{plan: plan, batch: batch, x: make([]float32, len(x)), y: make([]int64, batch), k: oshape[1],
		idx: make([]int, 0, batch), logits: make([]float32, batch*oshape[1])}, nil
}

// Run evaluates every example of v.
func (ev *Evaluator) Run(v data.Dataset) (*EvalResult, error) {
	if v.NumClasses() > ev.k {
		return nil, fmt.Errorf("the data has %d classes but the model outputs %d logits (use --num-classes when training)", v.NumClasses(), ev.k)
	}
	res := &EvalResult{Samples: v.Len(), Confusion: make([][]int64, ev.k)}
	for i := range res.Confusion {
		res.Confusion[i] = make([]int64, ev.k)
	}
	var correct int
	var lossSum float64
	err := ev.Losses(v, func(i int, label int64, logits []float32, loss float64) {
		best := argmax(logits)
		lossSum += loss
		res.Confusion[label][best]++
		if int64(best) == label {
			correct++
		}
	})
	if err != nil {
		return nil, err
	}
	if n := v.Len(); n > 0 {
		res.Accuracy = float64(correct) / float64(n)
		res.Loss = lossSum / float64(n)
	}
	return res, nil
}

// Losses calls fn for every example i of v, in order, with its label, its
// logits (valid during the call only) and its softmax cross-entropy loss.
func (ev *Evaluator) Losses(v data.Dataset, fn func(i int, label int64, logits []float32, loss float64)) error {
	if err := ev.plan.LoadParams(); err != nil {
		return fmt.Errorf("evaluating: %w", err)
	}
	n := v.Len()
	sl := len(ev.x) / ev.batch
	for off := 0; off < n; off += ev.batch {
		m := min(ev.batch, n-off)
		ev.idx = ev.idx[:0]
		for i := 0; i < m; i++ {
			ev.idx = append(ev.idx, off+i)
		}
		clear(ev.x[m*sl:])
		if err := v.Fill(ev.x[:m*sl], ev.y[:m], ev.idx, nil); err != nil {
			return err
		}
		if err := ev.plan.SetInput(0, ev.x); err != nil {
			return err
		}
		if err := ev.plan.Forward(); err != nil {
			return err
		}
		if err := ev.plan.ReadOutput(0, ev.logits); err != nil {
			return err
		}
		for i := 0; i < m; i++ {
			row := ev.logits[i*ev.k : (i+1)*ev.k]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			if math.IsNaN(mx) {
				return fmt.Errorf("example %d: the model produced NaN logits", off+i)
			}
			// Softmax cross-entropy with the max subtracted.
			var se float64
			for _, v := range row {
				se += math.Exp(float64(v) - mx)
			}
			y := ev.y[i]
			if y < 0 || int(y) >= ev.k {
				return fmt.Errorf("example %d: label %d outside the model's %d classes", off+i, y, ev.k)
			}
			fn(off+i, y, row, math.Log(se)+mx-float64(row[y]))
		}
	}
	return nil
}

// Correct says which of v's examples the model classifies correctly: its
// prediction (the largest logit, the first where several are largest,
// as Run counts it) is the example's label.
func (ev *Evaluator) Correct(v data.Dataset) ([]bool, error) {
	correct := make([]bool, v.Len())
	err := ev.Losses(v, func(i int, label int64, logits []float32, _ float64) {
		correct[i] = int64(argmax(logits)) == label
	})
	return correct, err
}

// argmax returns the class of the largest logit, the first where several
// are largest: the prediction every evaluation counts.
func argmax(logits []float32) int {
	best, mx := 0, math.Inf(-1)
	for j, v := range logits {
		if float64(v) > mx {
			best, mx = j, float64(v)
		}
	}
	return best
}
