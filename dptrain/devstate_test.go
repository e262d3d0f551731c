package dptrain_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestRunOnSeparateMemory trains the fixture CNN for two epochs of three
// steps, interrupted after four steps (the checkpoint is saved) and
// resumed, with evaluation after the first epoch (the resumed run
// evaluates nothing, so that the export's sync is the only one after its
// last steps) and an export at the end, and trains it for one epoch
// without a checkpoint or evaluation (so that nothing but the export
// syncs), on reference.Separate (parameters and
// optimizer state in memory of their own, copied to and from the graph's
// initializers) and on reference.Device (which adopts the initializers),
// with the same seed. The two runs compute the same arithmetic, so every
// host reader of parameters that syncs them (checkpoint save, evaluation,
// export) sees the same values on both: the checkpoints, the test
// metrics and the exported weights must be identical. A forgotten
// SyncParams (or LoadParams after the restore) on any of those paths
// makes the separate run read or continue from stale weights. It runs
// stageVariants: plainly; with a cosine learning-rate schedule, the
// parameters' average (--ema), which the checkpoint carries and the
// evaluation and the export read from the device, adaptive clipping and
// label smoothing; with those on the classifier alone, trained on
// cached features (whose export is the whole model's); per user; and with
// LoRA adapters (whose export merges them).
func TestRunOnSeparateMemory(t *testing.T) {
	for _, v := range stageVariants {
		t.Run(v.name, func(t *testing.T) { runOnSeparateMemory(t, v.set) })
	}
}

// stageVariants are trainStages' settings: as given, with the recipes of
// train's flags — a schedule, the parameters' average, adaptive clipping
// (its clip count from the device) and label smoothing (the device's loss
// head) — and with those on the classifier alone, trained on the cached
// outputs of the frozen part (Settings.FeatureCache).
var stageVariants = []struct {
	name string
	set  func(*dptrain.Config)
}{
	{"plain", nil},
	{"recipes", recipes},
	// A fine-tune of the classifier on the cached outputs of the frozen
	// convolutions: the engine trains the model's tensors through the
	// head's graph, whose evaluation reads the cached test features.
	{"features", func(c *dptrain.Config) {
		recipes(c)
		c.Rewrite.Train = regexp.MustCompile(`^classifier\.`)
		c.Settings.FeatureCache = dptrain.FeatureCacheOn
	}},
	// User-level: the examples of 30 users, 3 of a sampled user's a step
	// as rows with labels of their own (a physical batch of users), the
	// recipes' adaptive clipping counting users, and class weights.
	{"users", func(c *dptrain.Config) {
		recipes(c)
		v := c.Train.(*data.View)
		names := make([]string, v.Len())
		for i := range names {
			names[i] = fmt.Sprint("user-", i%30)
		}
		imgs, err := v.Source().WithUsers(names)
		if err == nil {
			c.Train, err = data.NewView(imgs, v.Preprocess())
		}
		if err != nil {
			panic(err)
		}
		c.Settings.BatchSize = 8 // four steps an epoch over 30 users
		// Class weights: a user's clip factor times its rows' mean weight,
		// uploaded each physical batch.
		c.Settings.ClassWeights = []float64{0.5, 1, 0.25, 1, 0.75, 1, 0.1, 1, 0.9, 1}
	}},
	// LoRA: rank-3 adapters (scale 2) beside every layer but the head,
	// the head in full, with the recipes; the norm check's drawn B put
	// back on the device before the first step.
	{"lora", func(c *dptrain.Config) {
		recipes(c)
		c.Rewrite.LoRA = rewrite.LoRAOptions{Rank: 3, Alpha: 6, Seed: 2}
	}},
}

func recipes(c *dptrain.Config) {
	s := &c.Settings
	s.LRSchedule, s.WarmupSteps, s.MinLR, s.EMADecay = "cosine", 1, 1e-4, 0.7
	s.ClipQuantile, s.LabelSmoothing = 0.5, 0.1
}

func runOnSeparateMemory(t *testing.T, set func(*dptrain.Config)) {
	want := trainStages(t, reference.Device{}, set)
	got := trainStages(t, reference.Separate{}, set)

	if !reflect.DeepEqual(got.ckpt.ParamNames, want.ckpt.ParamNames) || len(got.ckpt.Params) != len(want.ckpt.Params) {
		t.Fatalf("the checkpoints hold parameters %v and %v", got.ckpt.ParamNames, want.ckpt.ParamNames)
	}
	for k, name := range want.ckpt.ParamNames {
		if !numcheck.SameBits(got.ckpt.Params[k], want.ckpt.Params[k]) {
			t.Errorf("checkpoint parameter %s differs between reference.Separate and reference.Device", name)
		}
	}
	for slot, ws := range want.ckpt.Optimizer.Slots {
		for k := range ws {
			if !numcheck.SameBits(got.ckpt.Optimizer.Slots[slot][k], ws[k]) {
				t.Errorf("checkpoint optimizer %s of %s differs", slot, want.ckpt.ParamNames[k])
			}
		}
	}
	if (want.ckpt.Average != nil) != (set != nil) || len(got.ckpt.Average) != len(want.ckpt.Average) || got.ckpt.AverageSteps != want.ckpt.AverageSteps {
		t.Fatalf("the checkpoints hold averages of %d and %d tensors after %d and %d updates", len(got.ckpt.Average), len(want.ckpt.Average), got.ckpt.AverageSteps, want.ckpt.AverageSteps)
	}
	for k, w := range want.ckpt.Average {
		if !numcheck.SameBits(got.ckpt.Average[k], w) {
			t.Errorf("checkpoint average of %s differs", want.ckpt.ParamNames[k])
		}
	}
	if len(got.epochs) != 2 || len(want.epochs) != 2 {
		t.Fatalf("%d and %d epoch records, want 2: %+v", len(got.epochs), len(want.epochs), want.epochs)
	}
	if want.epochs[0].Test == nil {
		t.Fatal("the first epoch was not evaluated")
	}
	for i := range want.epochs {
		g, w := got.epochs[i], want.epochs[i]
		if !reflect.DeepEqual(g.Test, w.Test) || g.TrainLoss != w.TrainLoss {
			t.Errorf("epoch %d: test %+v, train loss %v on reference.Separate; test %+v, train loss %v on reference.Device", i+1, g.Test, g.TrainLoss, w.Test, w.TrainLoss)
		}
	}
	og := cnnGraph(t)
	for mi, wm := range want.models {
		n, moved := 0, false
		for _, v := range wm.Initializers {
			if v.Const == nil || v.Const.F32 == nil {
				continue
			}
			gv := got.models[mi].Values[v.Name]
			if gv == nil || gv.Const == nil || !numcheck.SameBits(gv.Const.F32, v.Const.F32) {
				t.Errorf("export %d: initializer %s differs between reference.Separate and reference.Device", mi+1, v.Name)
			}
			if ov := og.Values[v.Name]; ov != nil && ov.Const != nil && !numcheck.SameBits(ov.Const.F32, v.Const.F32) {
				moved = true
			}
			n++
		}
		if n == 0 || !moved {
			t.Fatalf("export %d has %d float initializers, moved by training: %v", mi+1, n, moved)
		}
	}
}

// stagesResult is what trainStages keeps of its runs: the interrupted
// run's checkpoint, the resumed run's epoch records, and the exports of
// the resumed and the plain runs.
type stagesResult struct {
	ckpt   *dpengine.Checkpoint
	epochs []dptrain.EpochRecord
	models []*graph.Graph // the resumed run's export, the plain run's
	device string         // the resumed run's report's
	// features is the resumed run's feature cache.
	features *dptrain.FeatureCacheReport
}

// trainStages trains the fixture CNN on dev as TestRunOnSeparateMemory
// describes: interrupted after four steps, resumed, and a plain run.
// set, if not nil, changes the settings of every stage.
func trainStages(t *testing.T, dev runtime.Device, set func(*dptrain.Config)) stagesResult {
	t.Helper()
	ds := smallFMNIST(t)
	dir := t.TempDir()
	ckpt, out := filepath.Join(dir, "run.ckpt"), filepath.Join(dir, "out.onnx")
	var r stagesResult
	for _, stage := range []string{"interrupted", "resumed", "plain"} {
		g := cnnGraph(t)
		seed := uint64(7)
		cfg := dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 2, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
				Optimizer: "adam", LR: 2e-3, InputShape: []int64{1, 28, 28}, Seed: &seed,
			},
			Device: dev, Graph: g, Train: ds, EvalBatch: 48,
			Checkpoint: ckpt, Resume: stage == "resumed", Out: out,
		}
		if set != nil {
			set(&cfg)
		}
		switch stage {
		case "plain":
			cfg.Settings.Epochs, cfg.Checkpoint = 1, ""
			cfg.Out = filepath.Join(dir, "plain.onnx")
		case "interrupted":
			cfg.Test = ds
			// Stopped after four steps (Stop is also polled between the
			// feature cache's passes).
			steps := 0
			cfg.Events = func(e dptrain.Event) {
				if e.Kind == dptrain.StepDone {
					steps++
				}
			}
			cfg.Stop = func() bool { return steps >= 4 }
			_, err := dptrain.Run(cfg)
			if _, ok := err.(*dptrain.Interrupted); !ok {
				t.Fatalf("%s: the first run was not interrupted: %v", dev.Name(), err)
			}
			if r.ckpt, err = dpengine.ReadCheckpoint(ckpt); err != nil {
				t.Fatal(err)
			}
			if r.ckpt.Step != 4 {
				t.Fatalf("%s: the checkpoint is at step %d, want 4", dev.Name(), r.ckpt.Step)
			}
			continue
		}
		rep, err := dptrain.Run(cfg)
		if err != nil {
			t.Fatalf("%s: %s: %v", dev.Name(), stage, err)
		}
		if stage == "resumed" {
			r.epochs, r.device, r.features = rep.Epochs, rep.Device, rep.FeatureCache
		}
		om, err := onnx.Load(cfg.Out)
		if err != nil {
			t.Fatal(err)
		}
		model, err := graph.FromONNX(om)
		if err != nil {
			t.Fatal(err)
		}
		r.models = append(r.models, model)
	}
	return r
}
