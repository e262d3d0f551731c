package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

func init() {
	register(&command{
		name:    "train",
		summary: "fine-tune a model with differential privacy and export it",
		run:     runTrain,
	})
}

// trainSettings, runReport and epochRecord are the run's settings and
// report, written by package dptrain.
type (
	trainSettings = dptrain.Settings
	runReport     = dptrain.Report
	epochRecord   = dptrain.EpochRecord
)

// afterStep, when set (by tests), is called after every completed step.
var afterStep func(step int64)

// interruptError reports a run stopped by a signal after its checkpoint was
// saved.
type interruptError struct{ ckpt string }

func (e interruptError) Error() string {
	return fmt.Sprintf("interrupted; checkpoint saved to %s: run the same command with --resume to continue", e.ckpt)
}

func runTrain(args []string, stdout io.Writer) error {
	fs := newFlagSet("train", "--model M.onnx --data SPEC --epsilon E --out tuned.onnx [flags]")
	model := fs.String("model", "", "ONNX model file (required)")
	spec := fs.String("data", "", "training data: idx:DIR, cifar10:DIR, cifar100:DIR or folder:DIR, with :limit=N (required)")
	testSpec := fs.String("test-data", "", "evaluation data after each epoch (default: the --data source's test split when it has one; \"none\" to skip)")
	eps := fs.Float64("epsilon", 0, "target ε of the (ε, δ) guarantee (required unless --non-private)")
	delta := fs.Float64("delta", 0, "δ of the guarantee (default: 1/(10·n), below 1/n)")
	epochs := fs.Int("epochs", 1, "passes over the data (in expectation: each step samples every example with probability q)")
	batchSize := fs.Int("batch-size", 256, "expected logical batch size L; the sample rate is q = L/n")
	physical := fs.Int("physical-batch", 0, "samples per forward/backward pass (default: min(L, 64), or the largest fitting --max-memory)")
	maxMem := fs.String("max-memory", "", "memory cap, e.g. 8GiB: choose the largest physical batch whose estimated peak memory fits (bisection)")
	lr := fs.Float64("lr", 1e-3, "learning rate")
	optName := fs.String("optimizer", "adam", "adam, adamw or sgd")
	momentum := fs.Float64("momentum", 0.9, "momentum of sgd")
	wd := fs.Float64("weight-decay", 0, "weight decay (L2 for sgd and adam, decoupled for adamw)")
	clip := fs.Float64("clip", 1, "clip norm R")
	clipFn := fs.String("clip-fn", "abadi", "clip function: abadi min(1, R/‖g‖), automatic R/(‖g‖+γ), or global 1[‖g‖<R]")
	gamma := fs.Float64("gamma", 0.01, "γ of automatic clipping")
	perLayer := fs.Bool("per-layer", false, "clip each parameter tensor with R/√K instead of all parameters together (modes bk and instantiate)")
	modeName := fs.String("mode", "bk", "clipping: bk (book-keeping, default), mixed (paper), ghost, instantiate (Opacus-style), nondp")
	acctName := fs.String("accountant", "rdp", "privacy accountant: rdp or prv")
	sampling := fs.String("sampling", "poisson", "batch sampling: poisson (what the accountant assumes) or shuffle (fixed-size batches; the reported ε is then NOT a guarantee)")
	nonPrivate := fs.Bool("non-private", false, "train without privacy (mode nondp, no noise, no ε): for baselines and public pretraining")
	norm := fs.String("norm", "default", "input normalisation: default (the dataset's), none, fmnist, mnist, cifar10, cifar100, imagenet, half, or M1,M2,M3/S1,S2,S3")
	augment := fs.String("augment", "none", "augmentation: none, or e.g. crop=4,flip")
	inShape := fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)")
	out := fs.String("out", "", "where to write the trained model (required)")
	ckptPath := fs.String("checkpoint", "", "checkpoint file, written every epoch and on interrupt (default: OUT.ckpt)")
	resume := fs.Bool("resume", false, "continue from the checkpoint")
	reportPath := fs.String("report", "", "write a JSON run report here")
	seedStr := fs.String("seed", "", "seed ALL randomness (sampling, noise, augmentation) for reproducibility; the noise is then NOT secure")
	quiet := fs.Bool("quiet", false, "no progress bars")
	evalBatch := fs.Int("eval-batch", 256, "batch of the per-epoch evaluation")
	rf := addRewriteFlags(fs, "groupnorm")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	if *model == "" || *spec == "" || *out == "" {
		return usagef("--model, --data and --out are required")
	}
	mode, err := dpengine.ParseMode(*modeName)
	if err != nil {
		return usageError{err.Error()}
	}
	if *nonPrivate {
		mode = dpengine.NonDP
	}
	if mode == dpengine.NonDP && !*nonPrivate {
		return usagef("--mode nondp trains without privacy: say so with --non-private")
	}
	if !*nonPrivate && !(*eps > 0) {
		return usagef("--epsilon must be positive (or train without privacy with --non-private)")
	}
	if *epochs <= 0 || *batchSize <= 0 || *physical < 0 || *evalBatch <= 0 {
		return usagef("--epochs, --batch-size and --eval-batch must be positive")
	}
	if !(*lr > 0) || !(*clip > 0) || math.IsInf(*clip, 0) {
		return usagef("--lr and --clip must be positive")
	}
	if *delta != 0 {
		if err := accountant.ValidateDelta(*delta); err != nil {
			return usageError{err.Error()}
		}
	}
	fn, err := dpengine.ParseClipFn(*clipFn)
	if err != nil {
		return usageError{err.Error()}
	}
	if *acctName != accountant.RDP && *acctName != accountant.PRV {
		return usagef("--accountant must be rdp or prv, got %q", *acctName)
	}
	if *sampling != "poisson" && *sampling != "shuffle" {
		return usagef("--sampling must be poisson or shuffle, got %q", *sampling)
	}
	var seed *uint64
	if *seedStr != "" {
		v, err := strconv.ParseUint(*seedStr, 10, 64)
		if err != nil {
			return usagef("--seed must be a non-negative integer, got %q", *seedStr)
		}
		seed = &v
	}
	if *ckptPath == "" {
		*ckptPath = *out + ".ckpt"
	}
	if _, err := dpengine.NewOptimizer(*optName, *lr, *momentum, *wd); err != nil {
		return usageError{err.Error()}
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stdout, format, a...) }

	// Model and data.
	_, g, err := loadGraph(*model)
	if err != nil {
		return err
	}
	sample, err := modelSample(g, *inShape)
	if err != nil {
		return err
	}
	train, err := openView(*spec, sample, *norm, *augment)
	if err != nil {
		return err
	}
	if train.Len() == 0 {
		return fmt.Errorf("%s: no training examples", *spec)
	}
	test, testName, err := openTest(*testSpec, *spec, sample, *norm, logf)
	if err != nil {
		return err
	}
	opts, err := rf.options(sample, int64(min(*batchSize, 64)))
	if err != nil {
		return err
	}
	var capBytes int64
	if *physical == 0 && *maxMem != "" {
		if capBytes, err = parseBytes(*maxMem); err != nil {
			return usageError{err.Error()}
		}
	}
	cfg := dptrain.Config{
		Device: dev,
		Settings: trainSettings{
			Model: *model, Data: *spec, TestData: testName, Epsilon: *eps, Delta: *delta, Epochs: *epochs, BatchSize: *batchSize,
			Accountant: *acctName, Sampling: *sampling, Mode: string(mode), Clip: *clip, ClipFn: fn.String(), Gamma: *gamma,
			PerLayer: *perLayer, Optimizer: *optName, LR: *lr, Momentum: *momentum, WeightDecay: *wd,
			Norm: train.Preprocess().Norm.String(), Augment: *augment, InputShape: sample, Seed: seed, NonPrivate: *nonPrivate,
		},
		Graph: g, Rewrite: opts, Train: train, EvalBatch: *evalBatch, PhysicalBatch: *physical, MaxMemory: capBytes,
		Out: *out, Checkpoint: *ckptPath, Resume: *resume, Report: *reportPath, Log: stdout, Warn: os.Stderr,
	}
	if test != nil {
		cfg.Test = test
	}
	_, err = runLoop(cfg, *quiet, nil)
	return err
}

// openTest opens the evaluation data: spec, or when it is empty the
// training spec's test split if there is one; "none" skips evaluation.
// It returns the view (nil for none) and the spec it came from.
func openTest(spec, trainSpec string, sample []int64, norm string, logf func(string, ...any)) (*data.View, string, error) {
	if spec == "none" {
		return nil, "", nil
	}
	explicit := spec != ""
	if spec == "" {
		spec = withSplit(trainSpec, data.Test)
	}
	v, err := openView(spec, sample, norm, "none")
	switch {
	case err == nil:
		return v, spec, nil
	case explicit:
		return nil, "", err
	}
	logf("note: no test split found for %s (%v); training without per-epoch evaluation\n", trainSpec, firstLine(err))
	return nil, "", nil
}

// runLoop runs the training loop with the command's progress bars (on a
// terminal, unless quiet), signal handling (SIGINT and SIGTERM finish the
// step, checkpoint and stop) and the tests' afterStep hook; then is also
// called with every event.
func runLoop(cfg dptrain.Config, quiet bool, then func(dptrain.Event)) (*dptrain.Report, error) {
	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		if _, ok := <-sig; ok {
			stop.Store(true)
		}
	}()
	cfg.Stop = stop.Load

	show := !quiet && term.IsTerminal(int(os.Stderr.Fd()))
	var bar *progressbar.ProgressBar
	cfg.Events = func(ev dptrain.Event) {
		switch ev.Kind {
		case dptrain.EpochStart:
			bar = progressbar.NewOptions(ev.StepsPerEpoch, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetVisibility(show),
				progressbar.OptionSetDescription(fmt.Sprintf("epoch %d/%d", ev.Epoch+1, ev.Epochs)), progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond))
			bar.Set(ev.EpochStep)
		case dptrain.StepDone:
			if afterStep != nil {
				afterStep(ev.Step)
			}
			i := ev.EpochStep - 1
			if show && (i%20 == 0 || i == ev.StepsPerEpoch-1) {
				desc := fmt.Sprintf("epoch %d/%d loss %.4f  %.0f samples/s", ev.Epoch+1, ev.Epochs, ev.Loss, ev.SamplesPerSecond)
				if !cfg.Settings.NonPrivate {
					desc += fmt.Sprintf("  ε %.3f", ev.Epsilon())
				}
				bar.Describe(desc)
			}
			bar.Add(1)
		case dptrain.EpochDone:
			bar.Finish()
			bar = nil
			if show {
				fmt.Fprintln(os.Stderr)
			}
		}
		if then != nil {
			then(ev)
		}
	}
	rep, err := dptrain.Run(cfg)
	if bar != nil {
		bar.Exit()
	}
	var ie *dptrain.Interrupted
	if errors.As(err, &ie) {
		return nil, interruptError{ie.Checkpoint}
	}
	return rep, err
}

// withSplit returns the spec with its split replaced (a limit is dropped:
// it applies to the training split). A spec that does not parse is
// returned as is, for the loader to report.
func withSplit(spec string, split data.Split) string {
	sp, err := data.ParseSpec(spec)
	if err != nil {
		return spec
	}
	sp.Split, sp.Limit = split, 0
	return sp.String()
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// parseBytes reads sizes like 8GiB, 512MiB, 2GB, 1000000.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) {
		return 0, fmt.Errorf("--max-memory %q: want a size like 8GiB or 512MiB", s)
	}
	return int64(v * mult), nil
}
