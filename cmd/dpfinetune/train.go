package main

import (
	"errors"
	"flag"
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
	"github.com/dpfinetune/dpfinetune/rewrite"
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
	_, err := runTrainWith(args, stdout, nil, nil, false)
	return err
}

// runTrainWith is train with a feature store kept across runs and data to
// score, by the labels' ranking where ranking is set (tune's runs:
// dptrain.Config.FeatureStore, Score and ScoreRanking; nil for none),
// returning the run's report.
func runTrainWith(args []string, stdout io.Writer, store *dptrain.FeatureStore, score dataView, ranking bool) (*dptrain.Report, error) {
	fs := newFlagSet("train", "--model M.onnx --data SPEC --epsilon E --out tuned.onnx [flags]")
	tf := addTrainFlags(fs, "where to write the trained model (required)")
	testGroupBy := fs.String("test-group-by", "", "score the test data's groups of examples after each epoch, as eval --group-by: dir (each image's directory: a study's views), user (the data's users), file (a multi-frame file's frames, --frame all), study (DICOM images by their Study Instance UID) or series (by their Series Instance UID)")
	testCombine := fs.String("test-combine", dptrain.CombineMean, "with --test-group-by, how a group's probabilities combine its examples': mean or max")
	stateDict := fs.String("state-dict", "", "also write the trained weights as the PyTorch module's state dict, .pt or .safetensors (as `weights` writes them; a --bn freeze run's BatchNorms given back from --model)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *stateDict != "" {
		if _, err := stateDictFormat("--state-dict", *stateDict); err != nil {
			return nil, err
		}
	}
	switch {
	case *testGroupBy != "" && !isGrouping(*testGroupBy):
		return nil, usagef("--test-group-by %q: want %s", *testGroupBy, groupingValues)
	case *testCombine != dptrain.CombineMean && *testCombine != dptrain.CombineMax:
		return nil, usagef("--test-combine %q: want %s or %s", *testCombine, dptrain.CombineMean, dptrain.CombineMax)
	case *testGroupBy == "" && flagGiven(fs, "test-combine"):
		return nil, usagef("--test-combine says how a group's examples combine: it needs --test-group-by")
	}
	cfg, err := tf.config(stdout, true)
	if err != nil {
		return nil, err
	}
	if *testGroupBy != "" {
		if cfg.Test == nil {
			return nil, usagef("--test-group-by groups the test data: this run has none (--test-data)")
		}
		gr, _, err := groupingOf(cfg.Test, cfg.Settings.TestData, *testGroupBy, "--test-group-by")
		if err != nil {
			return nil, err
		}
		gr.Combine = *testCombine
		cfg.TestGroups = &gr
	}
	cfg.FeatureStore = store
	if score != nil {
		cfg.Score, cfg.ScoreRanking = score, ranking
	}
	if *stateDict != "" && !cfg.DryRun {
		// Before the run: an export whose exporter folded its BatchNorms
		// has no state dict to give, and a run is long.
		if _, err := rewrite.StateDictOf(cfg.Graph, cfg.Settings.InputShape, false); errors.Is(err, rewrite.ErrFoldedExport) {
			return nil, usagef("--state-dict: %s: %v; train without it and write the state dict with `dpfinetune weights --like` a training-form export afterwards", *tf.model, err)
		}
	}
	rep, err := runLoop(cfg, *tf.quiet)
	if err != nil || *stateDict == "" || cfg.DryRun {
		return rep, err
	}
	var w io.Writer = stdout
	if *tf.quiet {
		w = io.Discard
	}
	if err := writeWeights(stateDictJob{model: cfg.Out, out: *stateDict, likeIfFrozen: *tf.model}, w); err != nil {
		return rep, fmt.Errorf("--state-dict (%s is written): %w", cfg.Out, err)
	}
	return rep, nil
}

// trainFlags are the flags of a training run, shared by train and audit
// (which runs exactly train's loop).
type trainFlags struct {
	model, spec, testSpec, maxMem, optName, clipFn, modeName, acctName  *string
	sampling, norm, augment, resize, inShape, out, ckptPath, reportPath *string
	window, frame                                                       *string
	series                                                              *bool
	seedStr, outDType, schedule, ckptEvery, cacheFeatures, cacheDir     *string
	privacyUnit, classWeight, posWeight, keepFeatures                   *string
	eps, delta, lr, momentum, wd, clip, gamma, minLR, ema, sigma        *float64
	clipQuantile, clipLR, clipCountNoise, smoothing, classWeightPower   *float64
	posWeightPower                                                      *float64
	epochs, batchSize, physical, evalBatch, views, warmup               *int
	examplesPerUser                                                     *int
	perLayer, nonPrivate, resume, quiet, normCheck, dryRun              *bool
	rf                                                                  *rewriteFlags
	dev                                                                 deviceFlag
}

// addTrainFlags defines the training flags on fs; outUsage documents --out.
func addTrainFlags(fs *flag.FlagSet, outUsage string) *trainFlags {
	return &trainFlags{
		model:            fs.String("model", "", "ONNX model file (required)"),
		spec:             fs.String("data", "", "training data: idx:DIR, cifar10:DIR, cifar100:DIR, folder:DIR, npy:FILE.npz|DIR or csv:FILE.csv (an image path and a label a row, and the user it belongs to where the header names a user column: see --privacy-unit), with :limit=N; a folder's or a listing's users from its images' paths with :users=REGEX (e.g. ^(person\\d+)_); a listing's columns named with :path=COL, :label=COL, :user=COL, :labels=COLS|FIRST..LAST|* (multi-label), relative paths under :root=DIR, :ext=.jpg added to paths without one, rows chosen with :where=COL=V1|V2 (required)"),
		testSpec:         fs.String("test-data", "", "evaluation data after each epoch (default: the --data source's test split when it has one; \"none\" to skip)"),
		eps:              fs.Float64("epsilon", 0, "target ε of the (ε, δ) guarantee: σ is calibrated to spend at most it (required unless --noise-multiplier or --non-private)"),
		sigma:            fs.Float64("noise-multiplier", 0, "fix σ instead of a target ε (Opacus's noise_multiplier): the run reports the ε it spends, known before the first step"),
		delta:            fs.Float64("delta", 0, "δ of the guarantee (default: 1/(10·n), below 1/n)"),
		epochs:           fs.Int("epochs", 1, "passes over the data (in expectation: each step samples every example with probability q)"),
		batchSize:        fs.Int("batch-size", 256, "expected logical batch size L; the sample rate is q = L/n (n examples, or users with --privacy-unit user)"),
		privacyUnit:      fs.String("privacy-unit", "auto", "what the guarantee protects: example (one image, a row of the data), user (all of a user's examples: data that names each example's user, a CSV listing's user column such as patient_id), or auto (user where the data names users, else example)"),
		examplesPerUser:  fs.Int("examples-per-user", 0, "with --privacy-unit user, the examples a sampled user gives each step (all of them as evenly as K allows, each a row, their gradients' mean clipped as one user's; default: the median user's count, at most 16)"),
		physical:         fs.Int("physical-batch", 0, "samples per forward/backward pass, users with --privacy-unit user (default: min(L, 64), divided by --augment-multiplicity or --examples-per-user, or the largest fitting --max-memory)"),
		maxMem:           fs.String("max-memory", "", "memory cap, e.g. 8GiB: choose the largest physical batch whose estimated peak memory fits nine tenths of it (bisection; the rest is headroom)"),
		lr:               fs.Float64("lr", 1e-3, "learning rate (the peak of --lr-schedule)"),
		schedule:         fs.String("lr-schedule", "constant", "learning rate over the run's steps: constant, cosine or linear (decay from --lr to --min-lr after --warmup-steps); it depends on the step alone, so ε is unchanged"),
		warmup:           fs.Int("warmup-steps", 0, "steps over which the learning rate rises linearly to --lr (step t from 0 takes lr·(t+1)/N)"),
		minLR:            fs.Float64("min-lr", 0, "the learning rate --lr-schedule cosine or linear decays to by the last step"),
		classWeight:      fs.String("class-weight", "", "weigh each sample's clipped gradient by its class: a weight a class in label order (0.2,1,…) or NAME=W pairs (normal=0.1; unnamed classes 1), divided by the largest; after the clipping, so ε is unchanged. Weights from the data's own class counts would leak them: give known prevalences' inverses"),
		classWeightPower: fs.Float64("class-weight-power", 1, "raise each --class-weight to this power before dividing by the largest: 1 as given (e.g. inverse prevalence), 0.5 its square root, 0 none — a knob tune can search (--grid class-weight-power=0,0.5,1), its runs all scored by the weights as given"),
		posWeightPower:   fs.Float64("pos-weight-power", 1, "raise each --pos-weight to this power: 1 as given, 0.5 its square root (a rare label's 99 becomes 9.95), 0 the plain loss — a knob tune can search (--grid pos-weight-power=0,0.5,1)"),
		posWeight:        fs.String("pos-weight", "", "multi-label data: weigh each label's positive term of the loss (PyTorch's pos_weight): a weight a label in label order or NAME=W pairs (unnamed labels 1); one loss a sample still, so ε is unchanged. Weights from the data's own label counts would leak them"),
		smoothing:        fs.Float64("label-smoothing", 0, "train on the cross-entropy against labels smoothed to (1−α)·onehot + α/K: one loss a sample still, so ε is unchanged (the test loss stays the plain one)"),
		ema:              fs.Float64("ema", 0, "keep an exponential moving average of the parameters with decay β (e.g. 0.999; warm-up min(β, (1+t)/(10+t))) and evaluate and export it instead of the last weights: computed from the noisy updates alone, so ε is unchanged (0: none)"),
		optName:          fs.String("optimizer", "adam", "adam, adamw or sgd"),
		momentum:         fs.Float64("momentum", 0.9, "momentum of sgd"),
		wd:               fs.Float64("weight-decay", 0, "weight decay (L2 for sgd and adam, decoupled for adamw)"),
		clip:             fs.Float64("clip", 1, "clip norm R"),
		clipQuantile:     fs.Float64("clip-quantile", 0, "adaptive clipping (Andrew et al. 2021): move the clip norm, from --clip, after every step towards this quantile of the per-sample gradient norms (e.g. 0.5), from a noised count of the unclipped samples; σ is split between the gradient and the count, so ε is unchanged (0: a fixed clip norm)"),
		clipLR:           fs.Float64("clip-lr", 0, "adaptive clipping's rate η: R ← R·exp(−η·(unclipped fraction − quantile)) (default 0.2)"),
		clipCountNoise:   fs.Float64("clip-count-noise", 0, "adaptive clipping's count noise σ_b (default: the expected batch size / 20)"),
		clipFn:           fs.String("clip-fn", "abadi", "clip function: abadi min(1, R/‖g‖), automatic R/(‖g‖+γ), or global 1[‖g‖<R]"),
		gamma:            fs.Float64("gamma", 0.01, "γ of automatic clipping"),
		perLayer:         fs.Bool("per-layer", false, "clip each parameter tensor with R/√K instead of all parameters together (modes bk and instantiate)"),
		modeName:         fs.String("mode", "bk", "clipping: bk (book-keeping, default), mixed (paper), ghost, instantiate (Opacus-style), nondp"),
		acctName:         fs.String("accountant", "rdp", "privacy accountant: rdp or prv"),
		sampling:         fs.String("sampling", "poisson", "batch sampling: poisson (what the accountant assumes) or shuffle (fixed-size batches; the reported ε is then NOT a guarantee)"),
		nonPrivate:       fs.Bool("non-private", false, "train without privacy (mode nondp, no noise, no ε): for baselines and public pretraining"),
		norm:             fs.String("norm", "default", "input normalisation: default (the dataset's; pixels for a model that takes uint8), none, fmnist, mnist, cifar10, cifar100, imagenet, half, pixels (0-255), or M1,M2,M3/S1,S2,S3"),
		augment:          fs.String("augment", "none", "augmentation: none, or items of crop=N (a random crop of the resized image padded by N), rrc[=MIN[-MAX]] (torchvision's RandomResizedCrop of MIN–MAX of the image's area, default 0.08–1, in place of the resize) and flip, e.g. crop=4,flip or rrc,flip"),
		views:            fs.Int("augment-multiplicity", 1, "feed each sample as K independently augmented views (needs --augment): its gradient is their mean, clipped as one sample's, so ε is unchanged and a step costs about K times the compute and activation memory (De et al. 2022's augmentation multiplicity)"),
		resize:           fs.String("resize", "stretch", resizeUsage),
		window:           fs.String("window", windowFile, windowUsage+"; recorded in the model for eval and predict"),
		frame:            fs.String("frame", "", frameUsage+"; recorded in the model for eval and predict"),
		series:           fs.Bool("series", false, seriesUsage+"; recorded in the model for eval and predict"),
		inShape:          fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)"),
		out:              fs.String("out", "", outUsage),
		ckptPath:         fs.String("checkpoint", "", "checkpoint file, written every epoch and on interrupt (default: OUT.ckpt)"),
		ckptEvery:        fs.String("checkpoint-every", "", "also write the checkpoint inside an epoch: every N steps (e.g. 500) or every duration (e.g. 15m), so that a crash loses at most that much"),
		resume:           fs.Bool("resume", false, "continue from the checkpoint"),
		reportPath:       fs.String("report", "", "write a JSON run report here"),
		seedStr:          fs.String("seed", "", "seed ALL randomness (sampling, noise, augmentation) for reproducibility; the noise is then NOT secure"),
		quiet:            fs.Bool("quiet", false, "no progress bars"),
		dryRun:           fs.Bool("dry-run", false, "check everything a run checks before its first step (model, rewrite, data, σ, memory, the norm check), print the ε it would spend, and stop: nothing is trained or written but --report"),
		normCheck:        fs.Bool("norm-check", true, "before a private run's first step, hold the engine's per-sample gradient norms of a few synthetic samples to each one's own gradient (a plain backward pass on the CPU) and refuse a model they disagree on; false trains on the engine's word"),
		evalBatch:        fs.Int("eval-batch", 256, "batch of the per-epoch evaluation (the feature cache's passes take at most it, 64 and the physical batch)"),
		cacheFeatures:    fs.String("cache-features", "auto", "where the trained part of the model follows a frozen part (a linear probe, a fine-tune of the last blocks) and nothing is augmented, compute the frozen part's outputs once per example and train the trained part alone on them: auto (in memory where it fits half the available memory, or of --max-memory, else on disk in --cache-dir), on (an error where it cannot), off. The gradients and ε are the same"),
		keepFeatures:     fs.String("keep-features", "", "keep the frozen part's outputs (--cache-features) in this folder after the run, a file a dataset named by a hash of the frozen part, the data and its preprocessing, and the device, and read them from there in a later run that would compute the same (a linear probe's later runs skip the backbone). The files are derived from the training data and as private as it: only their owner can read them; remove them when done"),
		cacheDir:         fs.String("cache-dir", "", "where a feature cache too large for memory goes: a file removed as soon as it is open, mapped into memory, nothing left after the run (crash included) (default: the checkpoint's folder)"),
		outDType:         fs.String("out-dtype", "model", "element type of the tuned model's weights, inputs and outputs: model (the one the model was exported in: float16 or bfloat16 for a half-precision export, which trains in float32) or float32"),
		rf:               addRewriteFlags(fs, "groupnorm"),
		dev:              addDeviceFlag(fs),
	}
}

// dicomRead is how the run reads DICOM images: --window and --frame.
func (f *trainFlags) dicomRead() dicomRead { return dicomRead{*f.window, *f.frame, *f.series} }

// config opens the device, validates the parsed flags (--out is required
// when needOut), loads the model and the data, and returns the run's
// configuration (notes go to stdout).
func (f *trainFlags) config(stdout io.Writer, needOut bool) (dptrain.Config, error) {
	var cfg dptrain.Config
	dev, err := f.dev.open()
	if err != nil {
		return cfg, err
	}
	if *f.seedStr == "" {
		allowNondeterministic(dev) // secure noise: no two runs repeat
	}
	if needOut && (*f.model == "" || *f.spec == "" || *f.out == "") {
		return cfg, usagef("--model, --data and --out are required")
	}
	if *f.model == "" || *f.spec == "" {
		return cfg, usagef("--model and --data are required")
	}
	mode, err := dpengine.ParseMode(*f.modeName)
	if err != nil {
		return cfg, usageError{err.Error()}
	}
	if *f.nonPrivate {
		mode = dpengine.NonDP
	}
	if mode == dpengine.NonDP && !*f.nonPrivate {
		return cfg, usagef("--mode nondp trains without privacy: say so with --non-private")
	}
	switch *f.privacyUnit {
	case dptrain.PrivacyUnitAuto, dptrain.PrivacyUnitExample, dptrain.PrivacyUnitUser:
	default:
		return cfg, usagef("--privacy-unit must be auto, example or user, got %q", *f.privacyUnit)
	}
	if *f.examplesPerUser < 0 || *f.examplesPerUser > maxViews {
		return cfg, usagef("--examples-per-user must be between 1 and %d (0: the median user's count), got %d", maxViews, *f.examplesPerUser)
	}
	if *f.examplesPerUser > 0 && *f.privacyUnit == dptrain.PrivacyUnitExample {
		return cfg, usagef("--examples-per-user applies to --privacy-unit user")
	}
	switch *f.cacheFeatures {
	case dptrain.FeatureCacheAuto, dptrain.FeatureCacheOn, dptrain.FeatureCacheOff:
	default:
		return cfg, usagef("--cache-features must be auto, on or off, got %q", *f.cacheFeatures)
	}
	switch {
	case *f.nonPrivate:
	case *f.sigma != 0 && *f.eps != 0:
		return cfg, usagef("--epsilon and --noise-multiplier: give one, the other follows")
	case *f.sigma != 0:
		if !(*f.sigma > 0) || math.IsInf(*f.sigma, 0) {
			return cfg, usagef("--noise-multiplier must be positive and finite, got %v", *f.sigma)
		}
	case !(*f.eps > 0):
		return cfg, usagef("--epsilon must be positive (or fix σ with --noise-multiplier, or train without privacy with --non-private)")
	}
	if *f.epochs <= 0 || *f.batchSize <= 0 || *f.physical < 0 || *f.evalBatch <= 0 {
		return cfg, usagef("--epochs, --batch-size and --eval-batch must be positive")
	}
	if !(*f.lr > 0) || !(*f.clip > 0) || math.IsInf(*f.clip, 0) {
		return cfg, usagef("--lr and --clip must be positive")
	}
	// The warm-up's bound by the run's steps waits for the data.
	if err := (dptrain.Schedule{Kind: *f.schedule, Warmup: *f.warmup, Min: *f.minLR}).Check(*f.lr, math.MaxInt); err != nil {
		return cfg, usageError{err.Error()}
	}
	if !(*f.smoothing >= 0 && *f.smoothing < 1) {
		return cfg, usagef("--label-smoothing must be in [0, 1), got %v", *f.smoothing)
	}
	if !(*f.ema >= 0 && *f.ema < 1) {
		return cfg, usagef("--ema must be in [0, 1), the decay of the parameters' average (e.g. 0.999; 0: none), got %v", *f.ema)
	}
	if *f.delta != 0 {
		if err := accountant.ValidateDelta(*f.delta); err != nil {
			return cfg, usageError{err.Error()}
		}
	}
	fn, err := dpengine.ParseClipFn(*f.clipFn)
	if err != nil {
		return cfg, usageError{err.Error()}
	}
	if *f.acctName != accountant.RDP && *f.acctName != accountant.PRV {
		return cfg, usagef("--accountant must be rdp or prv, got %q", *f.acctName)
	}
	if *f.sampling != "poisson" && *f.sampling != "shuffle" {
		return cfg, usagef("--sampling must be poisson or shuffle, got %q", *f.sampling)
	}
	if err := checkViews(int64(*f.views)); err != nil {
		return cfg, err
	}
	if *f.views > 1 {
		aug, err := data.ParseAugment(*f.augment)
		if err != nil {
			return cfg, usageError{fmt.Sprintf("--augment: %v", err)}
		}
		if aug.IsNone() {
			return cfg, usagef("--augment-multiplicity %d needs --augment (e.g. crop=4,flip): without it a sample's views are the same input", *f.views)
		}
	}
	var seed *uint64
	if *f.seedStr != "" {
		v, err := strconv.ParseUint(*f.seedStr, 10, 64)
		if err != nil {
			return cfg, usagef("--seed must be a non-negative integer, got %q", *f.seedStr)
		}
		seed = &v
	}
	if *f.ckptPath == "" && *f.out != "" {
		*f.ckptPath = *f.out + ".ckpt"
	}
	everySteps, everyTime, err := parseCheckpointEvery(*f.ckptEvery)
	if err != nil {
		return cfg, err
	}
	if _, err := dpengine.NewOptimizer(*f.optName, *f.lr, *f.momentum, *f.wd); err != nil {
		return cfg, usageError{err.Error()}
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stdout, format, a...) }

	// Model and data.
	lm, err := loadGraph(*f.model)
	if err != nil {
		return cfg, err
	}
	switch *f.outDType {
	case "model":
	case "float32":
		lm.writeFloat32()
	default:
		return cfg, usageError{fmt.Sprintf("--out-dtype %q: want model or float32", *f.outDType)}
	}
	if err := lm.dynamicBatch(); err != nil {
		return cfg, err
	}
	g := lm.g
	sample, err := modelSample(g, *f.inShape)
	if err != nil {
		return cfg, err
	}
	*f.norm = normFor(g, *f.norm)
	train, err := openView(*f.spec, sample, *f.norm, *f.augment, *f.resize, f.dicomRead())
	if err != nil {
		return cfg, err
	}
	if train.Len() == 0 {
		return cfg, fmt.Errorf("%s: no training examples", *f.spec)
	}
	classWeights, err := dptrain.ParseClassWeights(*f.classWeight, train.Classes(), train.NumClasses())
	if err != nil {
		return cfg, usageError{err.Error()}
	}
	if p := *f.classWeightPower; p != 1 {
		if classWeights == nil {
			return cfg, usagef("--class-weight-power %g raises --class-weight's weights: give them", p)
		}
		if classWeights, err = dptrain.PowClassWeights(classWeights, p); err != nil {
			return cfg, usageError{err.Error()}
		}
	}
	posWeight, err := dptrain.ParsePosWeight(*f.posWeight, train.Classes(), train.NumClasses())
	if err != nil {
		return cfg, usageError{err.Error()}
	}
	if p := *f.posWeightPower; p != 1 {
		if posWeight == nil {
			return cfg, usagef("--pos-weight-power %g raises --pos-weight's weights: give them", p)
		}
		if posWeight, err = dptrain.PowPosWeights(posWeight, p); err != nil {
			return cfg, usageError{err.Error()}
		}
	}
	test, testName, err := openTest(*f.testSpec, *f.spec, sample, *f.norm, *f.resize, f.dicomRead(), logf)
	if err != nil {
		return cfg, err
	}
	opts, err := f.rf.options(sample, int64(min(*f.batchSize, 64)))
	if err != nil {
		return cfg, err
	}
	opts.Loaded = lm.changes
	var capBytes int64
	if *f.physical == 0 && *f.maxMem != "" {
		if capBytes, err = parseBytes(*f.maxMem); err != nil {
			return cfg, usageError{err.Error()}
		}
	}
	normName, resizeName := preprocessOf(train)
	windowName, _ := parseWindow(*f.window, sample[0]) // checked by openView
	frameName, _ := parseFrame(*f.frame)
	cfg = dptrain.Config{
		Device: dev,
		Settings: trainSettings{
			Model: *f.model, FixedBatch: lm.fixedBatch, HalfPrecision: lm.halfNames(), LoadNotes: lm.notes(opts.BN.Mode), Data: *f.spec, TestData: testName, Epsilon: *f.eps, NoiseMultiplier: *f.sigma, Delta: *f.delta, Epochs: *f.epochs, BatchSize: *f.batchSize,
			Accountant: *f.acctName, Sampling: *f.sampling, Mode: string(mode), Clip: *f.clip, ClipFn: fn.String(), Gamma: *f.gamma,
			ClipQuantile: *f.clipQuantile, ClipLR: *f.clipLR, ClipCountNoise: *f.clipCountNoise,
			PerLayer: *f.perLayer, Optimizer: *f.optName, LR: *f.lr, LRSchedule: *f.schedule, WarmupSteps: *f.warmup, MinLR: *f.minLR, EMADecay: *f.ema, LabelSmoothing: *f.smoothing,
			Momentum: *f.momentum, WeightDecay: *f.wd,
			Norm: normName, Augment: *f.augment, AugmentMultiplicity: *f.views, Resize: resizeName, Window: windowName, Frame: frameName, Series: *f.series, InputShape: sample, Seed: seed, NonPrivate: *f.nonPrivate,
			ClassNames: train.Classes(), FeatureCache: *f.cacheFeatures, PrivacyUnit: *f.privacyUnit, ExamplesPerUser: *f.examplesPerUser,
			ClassWeights: classWeights, PosWeight: posWeight,
		},
		Graph: g, Rewrite: opts, Train: train, EvalBatch: *f.evalBatch, PhysicalBatch: *f.physical, MaxMemory: capBytes,
		Out: *f.out, Checkpoint: *f.ckptPath, Resume: *f.resume, Report: *f.reportPath, Log: stdout, Warn: os.Stderr,
		CheckpointEvery: everySteps, CheckpointInterval: everyTime,
		SkipNormCheck: !*f.normCheck, DryRun: *f.dryRun, FeatureCacheDir: *f.cacheDir, KeepFeatures: *f.keepFeatures,
	}
	if test != nil {
		cfg.Test = test
	}
	return cfg, nil
}

// openTest opens the evaluation data: spec, or when it is empty the
// training spec's test split if there is one; "none" skips evaluation.
// It returns the view (nil for none) and the spec it came from.
func openTest(spec, trainSpec string, sample []int64, norm, resize string, dcm dicomRead, logf func(string, ...any)) (dataView, string, error) {
	if spec == "none" {
		return nil, "", nil
	}
	explicit := spec != ""
	if spec == "" {
		spec = withSplit(trainSpec, data.Test)
	}
	v, err := openView(spec, sample, norm, "none", resize, dcm)
	switch {
	case err == nil:
		return v, spec, nil
	case explicit:
		return nil, "", err
	}
	hint := ""
	if sp, perr := data.ParseSpec(trainSpec); perr == nil && (sp.Scheme == data.SchemeFolder || sp.Scheme == data.SchemeCSV) {
		hint = fmt.Sprintf(" (a %s can hold some of its images out for testing: add :holdout=0.1 to --data)", sp.Scheme)
	}
	logf("note: no test split found for %s (%v); training without per-epoch evaluation%s\n", trainSpec, firstLine(err), hint)
	return nil, "", nil
}

// runLoop runs the training loop with the command's progress bars and
// signal handling (see withProgress).
func runLoop(cfg dptrain.Config, quiet bool) (*dptrain.Report, error) {
	var rep *dptrain.Report
	err := withProgress(cfg, quiet, func(c dptrain.Config) (err error) {
		rep, err = dptrain.Run(c)
		return err
	})
	return rep, err
}

// withProgress calls run with cfg given the command's progress bars (on a
// terminal, unless quiet), signal handling (SIGINT and SIGTERM finish the
// step, checkpoint and stop) and the tests' afterStep hook.
func withProgress(cfg dptrain.Config, quiet bool, run func(dptrain.Config) error) error {
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
				unit := "samples"
				if ev.PerUser {
					unit = "users"
				}
				desc := fmt.Sprintf("epoch %d/%d loss %.4f  %.0f %s/s", ev.Epoch+1, ev.Epochs, ev.Loss, ev.SamplesPerSecond, unit)
				if sch := cfg.Settings.LRSchedule; cfg.Settings.WarmupSteps > 0 || sch != "" && sch != "constant" {
					desc += fmt.Sprintf("  lr %.3g", ev.LR)
				}
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
	}
	err := run(cfg)
	if bar != nil {
		bar.Exit()
	}
	var ie *dptrain.Interrupted
	if errors.As(err, &ie) {
		return interruptError{ie.Checkpoint}
	}
	return err
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

// parseCheckpointEvery reads --checkpoint-every: a number of steps, a
// duration ("15m", "1h30m"), or "" for none.
func parseCheckpointEvery(v string) (steps int, every time.Duration, err error) {
	if v == "" {
		return 0, 0, nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n <= 0 {
			return 0, 0, usagef("--checkpoint-every %d: want a positive number of steps or a duration such as 15m", n)
		}
		return n, 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, 0, usagef("--checkpoint-every %q: want a positive number of steps (500) or a duration (15m, 1h30m)", v)
	}
	return 0, d, nil
}
