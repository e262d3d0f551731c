package dptrain_test

import (
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
)

// TestSchedule: each schedule's rates worked out from its definition —
// the warm-up's lr·(t+1)/W, the decays' endpoints and midpoints, the floor
// past the end — and the settings Check refuses.
func TestSchedule(t *testing.T) {
	const lr = 0.1
	for _, tc := range []struct {
		s     dptrain.Schedule
		steps int
		want  map[int]float64 // step → rate
	}{
		{dptrain.Schedule{}, 10, map[int]float64{0: lr, 9: lr}},
		{dptrain.Schedule{Kind: "constant", Warmup: 4}, 10, map[int]float64{0: lr / 4, 1: lr / 2, 3: lr, 9: lr}},
		// Cosine over 10 steps: progress t/10, half way at 5.
		{dptrain.Schedule{Kind: "cosine"}, 10, map[int]float64{0: lr, 5: lr / 2, 9: lr * (1 + math.Cos(0.9*math.Pi)) / 2, 10: 0, 50: 0}},
		{dptrain.Schedule{Kind: "cosine", Warmup: 2, Min: 0.01}, 12, map[int]float64{0: lr / 2, 1: lr, 2: lr, 7: 0.01 + 0.09/2, 12: 0.01}},
		// Linear: Hugging Face's (T − t)/(T − W) after the warm-up.
		{dptrain.Schedule{Kind: "linear"}, 10, map[int]float64{0: lr, 5: lr / 2, 9: lr / 10}},
		{dptrain.Schedule{Kind: "linear", Warmup: 5, Min: 0.02}, 15, map[int]float64{4: lr, 5: lr, 10: 0.06, 15: 0.02}},
	} {
		if err := tc.s.Check(lr, tc.steps); err != nil {
			t.Fatalf("%+v over %d steps: %v", tc.s, tc.steps, err)
		}
		for step, want := range tc.want {
			if got := tc.s.At(lr, step, tc.steps); math.Abs(got-want) > 1e-12 {
				t.Errorf("%v over %d steps, step %d: rate %v, want %v", tc.s, tc.steps, step, got, want)
			}
		}
	}
	for _, tc := range []struct {
		s     dptrain.Schedule
		steps int
		want  string
	}{
		{dptrain.Schedule{Kind: "step"}, 10, "unknown --lr-schedule"},
		{dptrain.Schedule{Kind: "cosine", Warmup: 10}, 10, "leaves no step"},
		{dptrain.Schedule{Warmup: 11}, 10, "more than the run's 10 steps"},
		{dptrain.Schedule{Kind: "linear", Warmup: -1}, 10, "negative"},
		{dptrain.Schedule{Kind: "cosine", Min: 0.1}, 10, "--min-lr 0.1 must be in [0, --lr 0.1)"},
		{dptrain.Schedule{Kind: "cosine", Min: -1}, 10, "--min-lr -1"},
		{dptrain.Schedule{Min: 0.01}, 10, "needs --lr-schedule cosine or linear"},
	} {
		if err := tc.s.Check(lr, tc.steps); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v over %d steps: %v, want an error containing %q", tc.s, tc.steps, err, tc.want)
		}
	}
}

// rateLog records the learning rate the optimizer holds at each update.
type rateLog struct {
	dpengine.Optimizer
	lr    float64
	rates []float64
}

func (r *rateLog) SetLR(lr float64) { r.lr = lr; r.Optimizer.SetLR(lr) }

func (r *rateLog) Step(params, grads [][]float32) error {
	r.rates = append(r.rates, r.lr)
	return r.Optimizer.Step(params, grads)
}

// TestRunScheduleAndEMA: Run sets every step's rate from the schedule
// before the update (a cosine decay after a warm-up, over 3 epochs of 3
// steps); with --ema, each epoch evaluates the parameters' average and
// then trains on from the parameters themselves, and the run leaves the
// average in the graph (what it exports), whose evaluation is the last
// epoch's.
func TestRunScheduleAndEMA(t *testing.T) {
	ds := smallFMNIST(t)
	log := &rateLog{}
	defer dptrain.WrapOptimizer(func(o dpengine.Optimizer) dpengine.Optimizer { log.Optimizer = o; return log })()
	g := cnnGraph(t)
	seed := uint64(8)
	type seen struct{ params, avg [][]float32 }
	var atLastStep, afterEval []seen
	var names []string
	snap := func(e *dpengine.Engine) seen {
		names = e.ParamNames()
		if err := e.SyncParams(); err != nil {
			t.Fatal(err)
		}
		avg, err := e.HostAverage()
		if err != nil {
			t.Fatal(err)
		}
		var p [][]float32
		for _, h := range e.HostParams() {
			p = append(p, append([]float32(nil), h...))
		}
		return seen{p, avg}
	}
	const lr, minLR = 0.02, 0.002
	rep, err := dptrain.Run(dptrain.Config{
		Settings: dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 3, BatchSize: 32,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "sgd", LR: lr, LRSchedule: "cosine", WarmupSteps: 2, MinLR: minLR, EMADecay: 0.8,
			InputShape: []int64{1, 28, 28}, Seed: &seed,
		},
		Graph: g, Train: ds, Test: ds,
		Events: func(e dptrain.Event) {
			switch {
			case e.Kind == dptrain.StepDone && e.EpochStep == e.StepsPerEpoch:
				atLastStep = append(atLastStep, snap(e.Engine))
			case e.Kind == dptrain.EpochDone:
				afterEval = append(afterEval, snap(e.Engine))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The rates: warm-up lr/2, lr, then cosine from lr to minLR over the
	// other 7 of 9 steps.
	if len(log.rates) != 9 {
		t.Fatalf("%d updates, want 9", len(log.rates))
	}
	for step, got := range log.rates {
		want := lr * float64(step+1) / 2
		if step >= 2 {
			want = minLR + (lr-minLR)*(1+math.Cos(math.Pi*float64(step-2)/7))/2
		}
		if !(math.Abs(got-want) <= 1e-15) { // NaN fails too
			t.Errorf("step %d ran at rate %v, want %v", step, got, want)
		}
	}
	for k, r := range rep.Epochs {
		if r.LR != log.rates[3*k+2] {
			t.Errorf("epoch %d records rate %v, its last step ran at %v", k+1, r.LR, log.rates[3*k+2])
		}
	}
	// Each evaluation put the parameters back.
	for k := range afterEval {
		for j := range afterEval[k].params {
			if !numcheck.SameBits(afterEval[k].params[j], atLastStep[k].params[j]) {
				t.Fatalf("epoch %d: the evaluation left other parameters than the last step's", k+1)
			}
		}
	}
	// The graph holds the average, not the last parameters.
	final := atLastStep[len(atLastStep)-1]
	byName := map[string][]float32{}
	for _, v := range g.Initializers {
		if v.Const != nil {
			byName[v.Name] = v.Const.F32
		}
	}
	differ := false
	for j, name := range names {
		if !numcheck.SameBits(byName[name], final.avg[j]) {
			t.Fatalf("the graph's %s is not the average", name)
		}
		differ = differ || !numcheck.SameBits(final.avg[j], final.params[j])
	}
	if !differ {
		t.Fatal("the average is the last parameters: nothing averaged")
	}
	ev, err := dptrain.NewEvaluator(g, []int64{1, 28, 28}, ds.Len()) // the run evaluates in one batch of min(256, n)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ev.Run(ds)
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Epochs[len(rep.Epochs)-1].Test
	if res.Loss != last.Loss || res.Accuracy != last.Accuracy {
		t.Errorf("the exported weights evaluate to loss %v, accuracy %v; the last epoch evaluated %v, %v", res.Loss, res.Accuracy, last.Loss, last.Accuracy)
	}
}
