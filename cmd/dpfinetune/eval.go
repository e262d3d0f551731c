package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "eval",
		summary: "accuracy, loss and confusion matrix of a model on a dataset",
		run:     runEval,
	})
}

// evalResult is the JSON form of "dpfinetune eval" and the per-epoch test
// metrics of train.
type evalResult struct {
	Samples   int       `json:"samples"`
	Accuracy  float64   `json:"accuracy"`
	Loss      float64   `json:"loss"`
	Confusion [][]int64 `json:"confusion"` // [true][predicted]
}

// modelSample returns the per-sample input shape declared by the model
// (C,H,W), or override when given.
func modelSample(g *graph.Graph, override string) ([]int64, error) {
	if len(g.Inputs) != 1 {
		return nil, fmt.Errorf("the model has %d inputs; dpfinetune needs one image input", len(g.Inputs))
	}
	in := g.Inputs[0]
	if override != "" {
		dims, err := parseDims(override)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		return dims, nil
	}
	if len(in.Shape) < 2 {
		return nil, fmt.Errorf("input %q has shape %v; want (batch, C, H, W)", in.Name, in.Shape)
	}
	var dims []int64
	for _, d := range in.Shape[1:] {
		if d.Size <= 0 {
			return nil, fmt.Errorf("input %q has dynamic sample dims %v: give --input-shape C,H,W", in.Name, in.Shape)
		}
		dims = append(dims, d.Size)
	}
	return dims, nil
}

// openView loads a dataset spec and preprocesses it to the model's sample
// shape (C,H,W).
func openView(spec string, sample []int64, norm, augment string) (*data.View, error) {
	imgs, err := data.LoadString(spec)
	if err != nil {
		return nil, err
	}
	if len(sample) != 3 {
		return nil, fmt.Errorf("model input sample shape %v: want (C, H, W)", sample)
	}
	nm, err := data.ParseNorm(norm, imgs.DefaultNorm())
	if err != nil {
		return nil, usageError{fmt.Sprintf("--norm: %v", err)}
	}
	aug, err := data.ParseAugment(augment)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--augment: %v", err)}
	}
	return data.NewView(imgs, data.Preprocess{Channels: int(sample[0]), Height: int(sample[1]), Width: int(sample[2]), Norm: nm, Augment: aug})
}

// evaluator runs a forward-only plan of a graph over a dataset view.
type evaluator struct {
	plan  *runtime.Plan
	batch int
	x     []float32
	y     []int64
	loss  []float32
	k     int
}

func newEvaluator(g *graph.Graph, sample []int64, batch int) (*evaluator, error) {
	plan, err := runtime.CompileForBatch(g, batch, sample, &runtime.Options{ForwardOnly: true})
	if err != nil {
		return nil, err
	}
	x, _ := plan.Input(0)
	_, oshape := plan.Output(0)
	if len(oshape) != 2 || oshape[0] != batch {
		return nil, fmt.Errorf("model output has shape %v; want (batch, classes) logits", oshape)
	}
	return &evaluator{plan: plan, batch: batch, x: make([]float32, len(x)), y: make([]int64, batch), loss: make([]float32, batch), k: oshape[1]}, nil
}

// run evaluates every example of v.
func (ev *evaluator) run(v *data.View) (*evalResult, error) {
	if v.NumClasses() > ev.k {
		return nil, fmt.Errorf("the data has %d classes but the model outputs %d logits (use --num-classes when training)", v.NumClasses(), ev.k)
	}
	res := &evalResult{Samples: v.Len(), Confusion: make([][]int64, ev.k)}
	for i := range res.Confusion {
		res.Confusion[i] = make([]int64, ev.k)
	}
	n := v.Len()
	idx := make([]int, 0, ev.batch)
	sl := len(ev.x) / ev.batch
	logits := make([]float32, ev.batch*ev.k)
	var correct int
	var lossSum float64
	for off := 0; off < n; off += ev.batch {
		m := min(ev.batch, n-off)
		idx = idx[:0]
		for i := 0; i < m; i++ {
			idx = append(idx, off+i)
		}
		clear(ev.x[m*sl:])
		if err := v.Fill(ev.x[:m*sl], ev.y[:m], idx, nil); err != nil {
			return nil, err
		}
		if err := ev.plan.SetInput(0, ev.x); err != nil {
			return nil, err
		}
		if err := ev.plan.Forward(); err != nil {
			return nil, err
		}
		if err := ev.plan.ReadOutput(0, logits); err != nil {
			return nil, err
		}
		for i := 0; i < m; i++ {
			row := logits[i*ev.k : (i+1)*ev.k]
			best, mx := 0, math.Inf(-1)
			for j, v := range row {
				if float64(v) > mx {
					best, mx = j, float64(v)
				}
			}
			// Softmax cross-entropy with the max subtracted.
			var se float64
			for _, v := range row {
				se += math.Exp(float64(v) - mx)
			}
			lossSum += math.Log(se) + mx - float64(row[ev.y[i]])
			if math.IsNaN(mx) {
				return nil, fmt.Errorf("example %d: the model produced NaN logits", off+i)
			}
			res.Confusion[ev.y[i]][best]++
			if int64(best) == ev.y[i] {
				correct++
			}
		}
	}
	if n > 0 {
		res.Accuracy = float64(correct) / float64(n)
		res.Loss = lossSum / float64(n)
	}
	return res, nil
}

func runEval(args []string, stdout io.Writer) error {
	fs := newFlagSet("eval", "--model M.onnx --data SPEC [--batch N] [--norm ...] [--input-shape C,H,W] [--json]")
	model := fs.String("model", "", "ONNX model file (required)")
	spec := fs.String("data", "", "dataset: idx:DIR, cifar10:DIR, cifar100:DIR or folder:DIR, with :train/:test and :limit=N (default split: test)")
	batch := fs.Int("batch", 256, "samples per forward pass")
	norm := fs.String("norm", "", "input normalisation (default: the one recorded in the model by train, else the dataset's)")
	inShape := fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" || *spec == "" {
		return usagef("--model and --data are required")
	}
	if *batch <= 0 {
		return usagef("--batch must be positive, got %d", *batch)
	}
	m, g, err := loadGraph(*model)
	if err != nil {
		return err
	}
	sample, err := modelSample(g, *inShape)
	if err != nil {
		return err
	}
	if *norm == "" {
		*norm = "default"
		for _, kv := range m.Proto.GetMetadataProps() {
			if kv.GetKey() == metaPrefix+"norm" {
				*norm = kv.GetValue()
			}
		}
	}
	s := *spec
	if sp, err := data.ParseSpec(s); err == nil && sp.Split == "" {
		sp.Split = data.Test
		s = sp.String()
	}
	v, err := openView(s, sample, *norm, "none")
	if err != nil {
		return err
	}
	ev, err := newEvaluator(g, sample, min(*batch, max(v.Len(), 1)))
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	res, err := ev.run(v)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "model:    %s\ndata:     %s (%d examples)\naccuracy: %.2f %%\nloss:     %.4f\n\nconfusion matrix (rows: true class, columns: predicted):\n", *model, s, res.Samples, 100*res.Accuracy, res.Loss)
	for i, row := range res.Confusion {
		fmt.Fprintf(stdout, "  %3d:", i)
		for _, c := range row {
			fmt.Fprintf(stdout, " %6d", c)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
