package main

import (
	"encoding/json"
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
	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

func init() {
	register(&command{
		name:    "train",
		summary: "fine-tune a model with differential privacy and export it",
		run:     runTrain,
	})
}

// metaPrefix prefixes the keys train writes into the exported model's
// metadata_props.
const metaPrefix = "dpfinetune."

// trainSettings is the configuration of a run: printed, written into the
// report and the checkpoint, and compared on --resume.
type trainSettings struct {
	Model         string  `json:"model"`
	Data          string  `json:"data"`
	TestData      string  `json:"test_data,omitempty"`
	Examples      int     `json:"examples"`
	Epsilon       float64 `json:"epsilon"`
	Delta         float64 `json:"delta"`
	Epochs        int     `json:"epochs"`
	BatchSize     int     `json:"batch_size"`
	PhysicalBatch int     `json:"physical_batch"`
	SampleRate    float64 `json:"sample_rate"`
	StepsPerEpoch int     `json:"steps_per_epoch"`
	Steps         int     `json:"steps"`
	Sigma         float64 `json:"sigma"`
	Accountant    string  `json:"accountant"`
	Sampling      string  `json:"sampling"`
	Mode          string  `json:"mode"`
	Clip          float64 `json:"clip_norm"`
	ClipFn        string  `json:"clip_fn"`
	Gamma         float64 `json:"gamma,omitempty"`
	PerLayer      bool    `json:"per_layer"`
	Optimizer     string  `json:"optimizer"`
	LR            float64 `json:"lr"`
	Momentum      float64 `json:"momentum,omitempty"`
	WeightDecay   float64 `json:"weight_decay,omitempty"`
	Norm          string  `json:"norm"`
	Augment       string  `json:"augment"`
	InputShape    []int64 `json:"input_shape"`
	Classes       int     `json:"classes"`
	Noise         string  `json:"noise"`
	Seed          *uint64 `json:"seed,omitempty"`
	NonPrivate    bool    `json:"non_private,omitempty"`
}

// epochRecord is one line of the run report.
type epochRecord struct {
	Epoch       int         `json:"epoch"`
	Steps       int64       `json:"steps"`
	Epsilon     float64     `json:"epsilon"`
	TrainLoss   float64     `json:"train_loss"`
	Seconds     float64     `json:"seconds"`
	SamplesPerS float64     `json:"samples_per_second"`
	Test        *evalResult `json:"test,omitempty"`
}

type runReport struct {
	Settings   trainSettings      `json:"settings"`
	Plan       *rewrite.Plan      `json:"plan,omitempty"`
	Privacy    *accountant.Result `json:"privacy,omitempty"`
	Epochs     []epochRecord      `json:"epochs"`
	Seconds    float64            `json:"seconds"`
	Output     string             `json:"output"`
	Checkpoint string             `json:"checkpoint"`
	Note       string             `json:"note"`
}

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
	if err := parseFlags(fs, args); err != nil {
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
	start := time.Now()
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
	n := train.Len()
	if n == 0 {
		return fmt.Errorf("%s: no training examples", *spec)
	}
	var test *dpengineView
	if *testSpec != "none" {
		ts := *testSpec
		explicit := ts != ""
		if ts == "" {
			ts = withSplit(*spec, data.Test)
		}
		v, err := openView(ts, sample, *norm, "none")
		switch {
		case err == nil:
			test = &dpengineView{v, ts}
		case explicit:
			return err
		default:
			logf("note: no test split found for %s (%v); training without per-epoch evaluation\n", *spec, firstLine(err))
		}
	}

	if *delta == 0 {
		*delta = 1 / (10 * float64(n))
	}
	L := min(*batchSize, n)
	q := float64(L) / float64(n)
	stepsPerEpoch := (n + L - 1) / L
	steps := *epochs * stepsPerEpoch

	set := trainSettings{
		Model: *model, Data: *spec, Examples: n, Epsilon: *eps, Delta: *delta, Epochs: *epochs, BatchSize: L,
		SampleRate: q, StepsPerEpoch: stepsPerEpoch, Steps: steps, Accountant: *acctName, Sampling: *sampling,
		Mode: string(mode), Clip: *clip, ClipFn: fn.String(), PerLayer: *perLayer, Optimizer: *optName, LR: *lr,
		WeightDecay: *wd, Norm: train.Preprocess().Norm.String(), Augment: *augment, InputShape: sample, Seed: seed, NonPrivate: *nonPrivate,
	}
	if test != nil {
		set.TestData = test.spec
	}
	if fn == dpengine.Automatic {
		set.Gamma = *gamma
	}
	if *optName == "sgd" {
		set.Momentum = *momentum
	}
	set.Noise = "secure"
	if seed != nil {
		set.Noise = fmt.Sprintf("seeded (%d): reproducible, NOT secure", *seed)
	}
	if *nonPrivate {
		set.Noise, set.Delta, set.Epsilon = "none (non-private)", 0, 0
	}

	// Resume.
	var ckpt *dpengine.Checkpoint
	if *resume {
		ckpt, err = dpengine.ReadCheckpoint(*ckptPath)
		if err != nil {
			return err
		}
		var prev trainSettings
		if err := json.Unmarshal(ckpt.Settings, &prev); err != nil {
			return fmt.Errorf("checkpoint %s: settings: %w", *ckptPath, err)
		}
		if err := compatible(prev, set); err != nil {
			return fmt.Errorf("cannot resume from %s: %w", *ckptPath, err)
		}
		if int(ckpt.Step) >= steps {
			return fmt.Errorf("checkpoint %s has already done all %d steps; raise --epochs to train more", *ckptPath, steps)
		}
	}

	// σ: calibrated so that the whole run (with any earlier phases of a
	// resumed run) spends at most ε.
	acct, err := accountant.New(*acctName)
	if err != nil {
		return err
	}
	if ckpt != nil {
		if acct, err = accountant.Restore(ckpt.Accountant); err != nil {
			return fmt.Errorf("checkpoint %s: %w", *ckptPath, err)
		}
	}
	if !*nonPrivate {
		var prev trainSettings
		if ckpt != nil {
			json.Unmarshal(ckpt.Settings, &prev)
		}
		if ckpt != nil && prev.Epsilon == set.Epsilon && prev.Delta == set.Delta && prev.Steps == set.Steps && prev.SampleRate == set.SampleRate && prev.Sigma > 0 {
			set.Sigma = prev.Sigma
		} else {
			remaining := steps - int(stepOf(ckpt))
			cal, err := accountant.Calibrate(acct.State(), *eps, *delta, q, remaining)
			if err != nil {
				return fmt.Errorf("calibrating σ for ε = %g, δ = %g, q = %.4g, %d steps: %w", *eps, *delta, q, remaining, err)
			}
			set.Sigma = cal.Sigma
		}
	}

	// Rewrite, plan and pick the physical batch.
	opts, err := rf.options(sample, int64(min(L, 64)))
	if err != nil {
		return err
	}
	rp, err := rewrite.Prepare(g, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	P := *physical
	switch {
	case P > 0:
	case *maxMem != "":
		capBytes, err := parseBytes(*maxMem)
		if err != nil {
			return usageError{err.Error()}
		}
		if P, err = fitBatch(rp, string(mode), capBytes, L); err != nil {
			return err
		}
	default:
		P = min(L, 64)
	}
	if ckpt != nil && *physical == 0 && *maxMem == "" {
		var prev trainSettings
		json.Unmarshal(ckpt.Settings, &prev)
		P = prev.PhysicalBatch
	}
	set.PhysicalBatch = P

	var src *dpengine.Source
	if seed != nil {
		src = dpengine.NewSeededSource(*seed)
	} else {
		src = dpengine.NewSecureSource()
	}
	opt, err := dpengine.NewOptimizer(*optName, *lr, *momentum, *wd)
	if err != nil {
		return usageError{err.Error()}
	}
	cfg := dpengine.Config{Mode: mode, Clipping: dpengine.Clipping{Fn: fn, R: *clip, Gamma: *gamma}, PerLayer: *perLayer,
		NoiseMultiplier: set.Sigma, ExpectedBatch: float64(L), PhysicalBatch: P, Source: src, Optimizer: opt}
	eng, err := dpengine.New(g, rp, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	_, oshape := eng.Plan().Output(0)
	set.Classes = oshape[len(oshape)-1]
	if train.NumClasses() > set.Classes {
		return fmt.Errorf("%s has %d classes but %s outputs %d logits: pass --num-classes %d to replace the head", *spec, train.NumClasses(), *model, set.Classes, train.NumClasses())
	}
	if ckpt != nil {
		if err := eng.SetParams(ckpt.ParamNames, ckpt.Params); err != nil {
			return fmt.Errorf("checkpoint %s: %w", *ckptPath, err)
		}
		if ckpt.Optimizer != nil {
			if err := opt.SetState(ckpt.Optimizer); err != nil {
				return fmt.Errorf("checkpoint %s: %w", *ckptPath, err)
			}
		}
		if seed != nil {
			if !ckpt.Seeded {
				return fmt.Errorf("checkpoint %s comes from a run with secure randomness; it cannot be resumed with --seed", *ckptPath)
			}
			src.SetStream(ckpt.SourceStream)
		}
	}

	// The sampler.
	var next func([]int) []int
	if *sampling == "poisson" {
		s, err := dpengine.NewPoissonSampler(n, q, src)
		if err != nil {
			return err
		}
		next = s.Next
	} else {
		s, err := dpengine.NewShuffleSampler(n, L, src)
		if err != nil {
			return err
		}
		next = s.Next
		fmt.Fprintln(os.Stderr, dpengine.ShuffleWarning)
	}

	// Print the plan.
	logf("dpfinetune train: %s on %s (%d examples, %d classes, input %v)\n", *model, *spec, n, train.NumClasses(), sample)
	logf("  rewrite:   %d trainable parameters in %d tensors, %d frozen", rp.Trainable.Scalars, rp.Trainable.Tensors, rp.Frozen.Scalars)
	logf(" (%d rewrite changes; see --report)\n", len(rp.Changes))
	if *nonPrivate {
		logf("  privacy:   NONE (--non-private)\n")
	} else {
		logf("  privacy:   target ε = %g, δ = %.3g (%s), accountant %s, %s sampling q = %.5g\n", *eps, *delta, deltaNote(*delta, n), *acctName, *sampling, q)
		logf("  noise:     σ = %.5g (calibrated), clip norm R = %g (%s%s), noise std σR = %.4g per coordinate, %s\n",
			set.Sigma, *clip, fn, map[bool]string{true: ", per layer"}[*perLayer], set.Sigma**clip, set.Noise)
	}
	logf("  training:  %d epochs × %d steps, expected batch %d, physical batch %d, mode %s, %s lr %g\n", *epochs, stepsPerEpoch, L, P, mode, *optName, *lr)
	if ckpt != nil {
		logf("  resuming:  from %s at step %d (epoch %d)\n", *ckptPath, ckpt.Step, ckpt.Epoch+1)
	}
	logf("  (losses and accuracies on training data are not private outputs)\n")

	// Signals: finish the current step, checkpoint, stop.
	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		if _, ok := <-sig; ok {
			stop.Store(true)
		}
	}()

	rep := runReport{Settings: set, Plan: rp, Output: *out, Checkpoint: *ckptPath,
		Note: "train_loss is computed on training data and is not a private output"}
	step := stepOf(ckpt)
	epoch, epochStep := 0, 0
	if ckpt != nil {
		epoch, epochStep = ckpt.Epoch, ckpt.EpochStep
		if len(ckpt.Extra) > 0 {
			json.Unmarshal(ckpt.Extra, &rep.Epochs)
		}
	}
	// lastGood names the newest checkpoint on disk, for error messages.
	lastGood := "none was written yet"
	if ckpt != nil {
		lastGood = *ckptPath
	}
	save := func() error {
		sb, _ := json.Marshal(set)
		eb, _ := json.Marshal(rep.Epochs)
		c := &dpengine.Checkpoint{Settings: sb, Step: step, Epoch: epoch, EpochStep: epochStep, Accountant: acct.State(),
			Seeded: seed != nil, ParamNames: eng.ParamNames(), Params: eng.Params(), Optimizer: opt.State(), Extra: eb}
		if seed != nil {
			c.SourceStream = src.Stream()
		}
		if err := dpengine.WriteCheckpoint(*ckptPath, c); err != nil {
			return err
		}
		lastGood = *ckptPath
		return nil
	}
	var ev *evaluator
	if test != nil {
		if ev, err = newEvaluator(g, sample, min(*evalBatch, max(test.Len(), 1))); err != nil {
			return err
		}
	}
	epsilonNow := func() float64 {
		if *nonPrivate || acct.TotalSteps() == 0 {
			return 0
		}
		r, err := acct.Epsilon(*delta)
		if err != nil {
			return math.NaN()
		}
		return r.Epsilon
	}
	show := !*quiet && term.IsTerminal(int(os.Stderr.Fd()))
	var batch []int
	for ; epoch < *epochs; epoch++ {
		t0 := time.Now()
		var lossSum float64
		var seen int
		bar := progressbar.NewOptions(stepsPerEpoch, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetVisibility(show),
			progressbar.OptionSetDescription(fmt.Sprintf("epoch %d/%d", epoch+1, *epochs)), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond))
		bar.Set(epochStep)
		for ; epochStep < stepsPerEpoch; epochStep++ {
			if stop.Load() {
				bar.Exit()
				if err := save(); err != nil {
					return fmt.Errorf("interrupted, and saving the checkpoint failed: %w", err)
				}
				return interruptError{*ckptPath}
			}
			batch = next(batch)
			aug := src.Rand()
			st, err := eng.Step(batch, func(idx []int, x []float32, y []int64) error { return train.Fill(x, y, idx, aug) })
			if err != nil {
				bar.Exit()
				return fmt.Errorf("step %d: %w (the last good checkpoint: %s)", step+1, err, lastGood)
			}
			if bad := firstNonFinite(eng); bad != "" {
				bar.Exit()
				return fmt.Errorf("step %d: parameter %q became NaN or infinite (lower --lr or --clip); stopped, the last good checkpoint: %s", step+1, bad, lastGood)
			}
			if !*nonPrivate {
				if err := acct.Step(set.Sigma, q, 1); err != nil {
					return err
				}
			}
			step++
			if afterStep != nil {
				afterStep(step)
			}
			lossSum += st.MeanLoss * float64(st.Samples)
			seen += st.Samples
			if show && (epochStep%20 == 0 || epochStep == stepsPerEpoch-1) {
				el := time.Since(t0).Seconds()
				desc := fmt.Sprintf("epoch %d/%d loss %.4f  %.0f samples/s", epoch+1, *epochs, lossSum/math.Max(float64(seen), 1), float64(seen)/math.Max(el, 1e-9))
				if !*nonPrivate {
					desc += fmt.Sprintf("  ε %.3f", epsilonNow())
				}
				bar.Describe(desc)
			}
			bar.Add(1)
		}
		bar.Finish()
		if show {
			fmt.Fprintln(os.Stderr)
		}
		el := time.Since(t0).Seconds()
		rec := epochRecord{Epoch: epoch + 1, Steps: step, Epsilon: epsilonNow(), TrainLoss: lossSum / math.Max(float64(seen), 1), Seconds: el, SamplesPerS: float64(seen) / math.Max(el, 1e-9)}
		if ev != nil {
			if rec.Test, err = ev.run(test.View); err != nil {
				return err
			}
		}
		rep.Epochs = append(rep.Epochs, rec)
		line := fmt.Sprintf("epoch %d/%d: train loss %.4f (not private), %.0f samples/s", epoch+1, *epochs, rec.TrainLoss, rec.SamplesPerS)
		if rec.Test != nil {
			line += fmt.Sprintf(", test accuracy %.2f %% (loss %.4f)", 100*rec.Test.Accuracy, rec.Test.Loss)
		}
		if !*nonPrivate {
			line += fmt.Sprintf(", ε spent %.4g", rec.Epsilon)
		}
		logf("%s\n", line)
		epochStep = 0
		if err := saveEpoch(save, epoch); err != nil {
			return err
		}
	}

	// Export.
	if !*nonPrivate {
		r, err := acct.Epsilon(*delta)
		if err != nil {
			return err
		}
		rep.Privacy = &r
	}
	om, err := g.ToONNX()
	if err != nil {
		return fmt.Errorf("exporting: %w", err)
	}
	setMeta(om.Proto, set, rep.Privacy)
	if err := om.Save(*out, nil); err != nil {
		return err
	}
	rep.Seconds = time.Since(start).Seconds()
	if rep.Privacy != nil {
		logf("done: %s written; privacy spent ε = %.4g at δ = %.3g (%s accountant%s)\n", *out, rep.Privacy.Epsilon, *delta, *acctName, map[bool]string{true: "; assumes Poisson sampling, NOT a guarantee for --sampling shuffle"}[*sampling == "shuffle"])
	} else {
		logf("done: %s written (no privacy)\n", *out)
	}
	if *reportPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*reportPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// saveEpoch checkpoints after epoch (0-based) completes.
func saveEpoch(save func() error, epoch int) error {
	if err := save(); err != nil {
		return fmt.Errorf("epoch %d: checkpoint: %w", epoch+1, err)
	}
	return nil
}

// dpengineView is a dataset view with the spec it came from.
type dpengineView struct {
	*data.View
	spec string
}

func stepOf(c *dpengine.Checkpoint) int64 {
	if c == nil {
		return 0
	}
	return c.Step
}

// compatible says whether a run may continue a checkpoint: the same model,
// data, batch and clipping; epochs and ε may change (the accountant then
// composes the phases).
func compatible(prev, cur trainSettings) error {
	var diffs []string
	check := func(name string, a, b any) {
		if fmt.Sprint(a) != fmt.Sprint(b) {
			diffs = append(diffs, fmt.Sprintf("%s was %v, now %v", name, a, b))
		}
	}
	check("--data", prev.Data, cur.Data)
	check("examples", prev.Examples, cur.Examples)
	check("--mode", prev.Mode, cur.Mode)
	check("--clip", prev.Clip, cur.Clip)
	check("--clip-fn", prev.ClipFn, cur.ClipFn)
	check("--optimizer", prev.Optimizer, cur.Optimizer)
	check("--accountant", prev.Accountant, cur.Accountant)
	check("--non-private", prev.NonPrivate, cur.NonPrivate)
	check("input shape", prev.InputShape, cur.InputShape)
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, "; "))
	}
	return nil
}

func deltaNote(delta float64, n int) string {
	return fmt.Sprintf("1/n = %.3g", 1/float64(n))
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

// firstNonFinite returns the name of a parameter holding NaN or Inf.
func firstNonFinite(e *dpengine.Engine) string {
	names := e.ParamNames()
	for k, p := range e.Params() {
		for _, v := range p {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return names[k]
			}
		}
	}
	return ""
}

// setMeta records the run in the model's metadata_props.
func setMeta(p *onnxpb.ModelProto, s trainSettings, r *accountant.Result) {
	kv := map[string]string{
		"norm": s.Norm, "mode": s.Mode, "clip_norm": fmt.Sprint(s.Clip), "sample_rate": fmt.Sprint(s.SampleRate),
		"steps": fmt.Sprint(s.Steps), "noise": s.Noise, "data": s.Data,
	}
	if r != nil {
		kv["epsilon"] = fmt.Sprint(r.Epsilon)
		kv["delta"] = fmt.Sprint(r.Delta)
		kv["accountant"] = r.Accountant
		kv["sigma"] = fmt.Sprint(s.Sigma)
		kv["sampling"] = s.Sampling
	} else {
		kv["privacy"] = "none (non-private training)"
	}
	var props []*onnxpb.StringStringEntryProto
	for _, e := range p.MetadataProps {
		if !strings.HasPrefix(e.GetKey(), metaPrefix) {
			props = append(props, e)
		}
	}
	for _, k := range sortedKeys(kv) {
		props = append(props, &onnxpb.StringStringEntryProto{Key: proto.String(metaPrefix + k), Value: proto.String(kv[k])})
	}
	p.MetadataProps = props
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
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

// fitBatch returns the largest physical batch in [1, limit] whose estimated
// peak memory in the given mode fits capBytes, by bisection (the paper's
// Table 6 procedure).
func fitBatch(rp *rewrite.Plan, mode string, capBytes int64, limit int) (int, error) {
	mem := func(b int) int64 {
		for _, m := range rp.MemoryAt(int64(b)) {
			if m.Mode == mode {
				return m.Total
			}
		}
		return math.MaxInt64
	}
	if mem(1) > capBytes {
		return 0, fmt.Errorf("even a physical batch of 1 needs about %s in mode %s, over --max-memory %s", humanBytes(mem(1)), mode, humanBytes(capBytes))
	}
	lo, hi := 1, limit
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if mem(mid) <= capBytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}
