package dptrain_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
)

// smallFMNIST returns the first 96 images of testdata/fmnist-small as the
// fixture CNN's 1×28×28 inputs (the data set's normalization): three
// Poisson batches of 32 in expectation, for short runs.
func smallFMNIST(t *testing.T) *data.View { return dptrain.FMNISTSlice(t, []int64{1, 28, 28}) }

// cnnGraph loads the fixture CNN (testdata/models/cnn.onnx) as a graph of
// its own, initializers included.
func cnnGraph(t *testing.T) *graph.Graph { return fixtureGraph(t, "cnn") }

// fixtureGraph loads testdata/models/NAME.onnx as a graph of its own.
func fixtureGraph(t *testing.T, name string) *graph.Graph { return dptrain.FixtureGraph(t, name) }

// TestResumeAfterCompleteEpoch trains one epoch with a checkpoint, then
// resumes with two epochs: the checkpoint records one completed epoch, and
// the resumed run does the second epoch only — three steps more, two epoch
// records in all, and ε within the target that σ was calibrated for.
func TestResumeAfterCompleteEpoch(t *testing.T) {
	ds := smallFMNIST(t)
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	var rep *dptrain.Report
	for _, epochs := range []int{1, 2} {
		g := cnnGraph(t)
		seed := uint64(3)
		var err error
		rep, err = dptrain.Run(dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: epochs, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
				Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
			},
			Graph: g, Train: ds, Checkpoint: ckpt, Resume: epochs == 2,
		})
		if err != nil {
			t.Fatalf("%d epochs: %v", epochs, err)
		}
		if epochs == 1 {
			c, err := dpengine.ReadCheckpoint(ckpt)
			if err != nil {
				t.Fatal(err)
			}
			if c.Epoch != 1 || c.EpochStep != 0 || c.Step != 3 {
				t.Fatalf("after one epoch the checkpoint records epoch %d, step %d of it, %d steps; want 1, 0, 3", c.Epoch, c.EpochStep, c.Step)
			}
		}
	}
	if len(rep.Epochs) != 2 || rep.Epochs[0].Epoch != 1 || rep.Epochs[1].Epoch != 2 || rep.Epochs[1].Steps != 6 {
		t.Fatalf("resumed run's epochs: %+v; want epochs 1 and 2, 6 steps in all", rep.Epochs)
	}
	if rep.Privacy == nil || rep.Privacy.Epsilon > 8 {
		t.Fatalf("privacy spent %+v, target ε = 8", rep.Privacy)
	}
	// The report's phases, both runs', are what its ε accounts.
	acct, err := accountant.New(rep.Settings.Accountant)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, p := range rep.Phases {
		steps += p.Steps
		if err := acct.Step(p.Sigma, p.SampleRate, p.Steps); err != nil {
			t.Fatal(err)
		}
	}
	r, err := acct.Epsilon(rep.Privacy.Delta)
	if err != nil || steps != 6 || r.Epsilon != rep.Privacy.Epsilon {
		t.Errorf("the report's phases %+v: %d steps, ε %v (%v); the report's ε %v", rep.Phases, steps, r.Epsilon, err, rep.Privacy.Epsilon)
	}
}

// TestCheckpointEvery: with CheckpointEvery the checkpoint is also written
// inside an epoch after every so many steps (not after an epoch's last
// step, which the epoch's own checkpoint follows), and a crash after such
// a write — the run's checkpoint copied away mid-run, the run left to
// finish, then resumed from the copy — ends in the weights of the run that
// did not crash, bit for bit, under a learning-rate schedule, with the
// parameters' average and with adaptive clipping (whose clip norm the
// checkpoint carries).
func TestCheckpointEvery(t *testing.T) {
	ds := smallFMNIST(t)
	dir := t.TempDir()
	ckpt, crashed := filepath.Join(dir, "run.ckpt"), filepath.Join(dir, "crashed.ckpt")
	cfg := func(g *graph.Graph, path string, resume bool) dptrain.Config {
		seed := uint64(11)
		return dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 3, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
				Optimizer: "adam", LR: 2e-3, LRSchedule: "linear", WarmupSteps: 2, EMADecay: 0.8, ClipQuantile: 0.5,
				InputShape: []int64{1, 28, 28}, Seed: &seed,
			},
			Graph: g, Train: ds, Checkpoint: path, Resume: resume, CheckpointEvery: 2,
		}
	}
	// After each step, where the checkpoint on disk stands (step, epoch,
	// step in the epoch); the one after step 4 is kept as the crash's.
	type at struct {
		step  int64
		epoch int
		in    int
	}
	var seen []at
	full := cnnGraph(t)
	c := cfg(full, ckpt, false)
	c.Events = func(e dptrain.Event) {
		if e.Kind != dptrain.StepDone {
			return
		}
		k, err := dpengine.ReadCheckpoint(ckpt)
		if err != nil {
			seen = append(seen, at{-1, -1, -1}) // none written yet
			return
		}
		seen = append(seen, at{k.Step, k.Epoch, k.EpochStep})
		if e.Step == 4 {
			b, _ := os.ReadFile(ckpt)
			os.WriteFile(crashed, b, 0o644)
		}
	}
	if _, err := dptrain.Run(c); err != nil {
		t.Fatal(err)
	}
	// 3 steps an epoch: written inside epochs after steps 2, 4 and 8,
	// before their StepDone; not after step 6, which ends an epoch, whose
	// own checkpoint follows its StepDone (as step 3's does).
	want := []at{{-1, -1, -1}, {2, 0, 2}, {2, 0, 2}, {4, 1, 1}, {4, 1, 1}, {4, 1, 1}, {6, 2, 0}, {8, 2, 2}, {8, 2, 2}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the checkpoint on disk after each step: %v, want %v", seen, want)
	}
	resumed := cnnGraph(t)
	if _, err := dptrain.Run(cfg(resumed, crashed, true)); err != nil {
		t.Fatal(err)
	}
	sameWeights(t, full, resumed)
	for _, bad := range [][2]int{{-1, 0}, {0, -1}} {
		c := cfg(cnnGraph(t), ckpt, false)
		c.CheckpointEvery, c.CheckpointInterval = bad[0], time.Duration(bad[1])
		if _, err := dptrain.Run(c); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("checkpoint every %v: %v", bad, err)
		}
	}
}

// sameWeights holds every float32 initializer of resumed, a run resumed
// after a crash, to full's, the run without, bit for bit.
func sameWeights(t *testing.T, full, resumed *graph.Graph) {
	t.Helper()
	n := 0
	for _, v := range full.Initializers {
		if v.Const == nil || v.Const.F32 == nil {
			continue
		}
		r := resumed.Values[v.Name]
		if r == nil || r.Const == nil || !numcheck.SameBits(r.Const.F32, v.Const.F32) {
			t.Errorf("%s: the run resumed after the crash ends elsewhere than the run without", v.Name)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no weights compared")
	}
}

// TestDryRun: a dry run stops before the first step — no epoch, no model,
// no checkpoint written, the weights untouched — and reports the σ and the
// ε of the run it stands for, which the run then spends to the bit; only
// the report is written.
func TestDryRun(t *testing.T) {
	ds := smallFMNIST(t)
	dir := t.TempDir()
	cfg := func(dry bool) dptrain.Config {
		seed := uint64(6)
		return dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 4, Epochs: 2, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
				Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
			},
			Graph: cnnGraph(t), Train: ds, Out: filepath.Join(dir, "m.onnx"), Checkpoint: filepath.Join(dir, "m.ckpt"),
			Report: filepath.Join(dir, "dry.json"), DryRun: dry,
		}
	}
	c := cfg(true)
	before := append([]float32(nil), c.Graph.Values["features.0.weight"].Const.F32...)
	dry, err := dptrain.Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Epochs) != 0 || dry.Privacy == nil || dry.Output != "" || dry.Checkpoint != "" || !dry.DryRun || dry.Phases != nil {
		t.Fatalf("dry run report: %d epochs, privacy %+v, output %q, checkpoint %q", len(dry.Epochs), dry.Privacy, dry.Output, dry.Checkpoint)
	}
	for _, p := range []string{c.Out, c.Checkpoint} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the dry run wrote %s", p)
		}
	}
	if _, err := os.Stat(c.Report); err != nil {
		t.Errorf("the dry run's report: %v", err)
	}
	if !numcheck.SameBits(c.Graph.Values["features.0.weight"].Const.F32, before) {
		t.Error("the dry run changed the weights")
	}
	full, err := dptrain.Run(cfg(false))
	if err != nil {
		t.Fatal(err)
	}
	if full.Settings.Sigma != dry.Settings.Sigma || full.Privacy.Epsilon != dry.Privacy.Epsilon || dry.Privacy.Epsilon > 4 {
		t.Errorf("the dry run's σ %v and ε %v, the run's %v and %v (target 4)", dry.Settings.Sigma, dry.Privacy.Epsilon, full.Settings.Sigma, full.Privacy.Epsilon)
	}
}
