package dptrain

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/testhook"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// MetaPrefix prefixes the keys Run writes into the exported model's
// metadata_props.
const MetaPrefix = "dpfinetune."

// Settings is the configuration of a run: printed, written into the report
// and the checkpoint, and compared on resume. The caller fills the fields
// that say what to do; Run fills the ones it derives (Examples, the
// effective BatchSize, SampleRate, StepsPerEpoch, Steps, Sigma,
// PhysicalBatch, Classes, Noise, and Delta when it is 0).
type Settings struct {
	Model string `json:"model"`
	// FixedBatch is the batch size the model's export fixed, whose axis
	// the loader made dynamic (0: the export's batch axis was dynamic).
	FixedBatch int64 `json:"fixed_batch,omitempty"`
	// HalfPrecision lists the half-precision types the model was exported
	// in (float16, bfloat16), which the loader widened to float32: it
	// trains and is written in float32.
	HalfPrecision []string `json:"half_precision,omitempty"`
	// LoadNotes say what the loader did to the model (a fixed batch made
	// dynamic, half precision widened, uint8 pixels fed as float32).
	LoadNotes []string `json:"load_notes,omitempty"`
	Data      string   `json:"data"`
	TestData  string   `json:"test_data,omitempty"`
	Examples  int      `json:"examples"`
	// Epsilon is the target ε σ is calibrated to; with NoiseMultiplier,
	// Run sets it to the ε the run spends as planned.
	Epsilon float64 `json:"epsilon"`
	// NoiseMultiplier, when positive, is σ as the caller fixes it
	// (Opacus's noise_multiplier) instead of calibrating it to Epsilon,
	// which must then be 0: the accountant reports what the run spends.
	NoiseMultiplier float64 `json:"noise_multiplier,omitempty"`
	Delta           float64 `json:"delta"`
	Epochs          int     `json:"epochs"`
	BatchSize       int     `json:"batch_size"`
	PhysicalBatch   int     `json:"physical_batch"`
	SampleRate      float64 `json:"sample_rate"`
	StepsPerEpoch   int     `json:"steps_per_epoch"`
	Steps           int     `json:"steps"`
	Sigma           float64 `json:"sigma"`
	Accountant      string  `json:"accountant"`
	Sampling        string  `json:"sampling"`
	Mode            string  `json:"mode"`
	Clip            float64 `json:"clip_norm"`
	// ClipQuantile, in (0, 1), adapts the clip norm after every step
	// towards this quantile of the per-sample gradient norms, starting
	// from Clip (adaptive clipping, adaclip.go), at rate ClipLR (0:
	// DefaultClipLR), from a count noised with ClipCountNoise (σ_b; 0:
	// the expected batch size / 20). Sigma stays the accounted σ;
	// GradientSigma is the gradient's share of it (σ_g), which Run
	// derives.
	ClipQuantile   float64 `json:"clip_quantile,omitempty"`
	ClipLR         float64 `json:"clip_lr,omitempty"`
	ClipCountNoise float64 `json:"clip_count_noise,omitempty"`
	GradientSigma  float64 `json:"gradient_sigma,omitempty"`
	ClipFn         string  `json:"clip_fn"`
	Gamma          float64 `json:"gamma,omitempty"`
	PerLayer       bool    `json:"per_layer"`
	Optimizer      string  `json:"optimizer"`
	LR             float64 `json:"lr"`
	// LRSchedule shapes the learning rate over the run's Steps
	// (Schedule): "constant" ("" too), "cosine" or "linear", after
	// WarmupSteps of linear warm-up, decaying to MinLR; LR is the peak.
	LRSchedule  string  `json:"lr_schedule,omitempty"`
	WarmupSteps int     `json:"warmup_steps,omitempty"`
	MinLR       float64 `json:"min_lr,omitempty"`
	Momentum    float64 `json:"momentum,omitempty"`
	WeightDecay float64 `json:"weight_decay,omitempty"`
	// EMADecay, in (0, 1), keeps an exponential moving average of the
	// parameters with this decay (dpengine.Config.EMADecay): the weights
	// every epoch evaluates and the run exports. It is computed from the
	// noisy updates alone, so ε is unchanged. 0 keeps none.
	EMADecay float64 `json:"ema_decay,omitempty"`
	// LabelSmoothing, in [0, 1), trains on the cross-entropy against
	// labels smoothed to (1−α)·onehot + α/K (dpengine.Config.LabelSmoothing):
	// one loss a sample still, so ε is unchanged; train_loss is that loss,
	// the test loss the plain one.
	LabelSmoothing float64 `json:"label_smoothing,omitempty"`
	Norm           string  `json:"norm"`
	Augment        string  `json:"augment"`
	// AugmentMultiplicity, above 1, feeds each sample of a logical batch
	// as that many independently augmented views, whose gradients' mean
	// is the sample's gradient, clipped as one (De et al. 2022's
	// augmentation multiplicity): a sample still changes one clipped
	// gradient, so the privacy analysis is the same; the step costs about
	// as much as a batch that many times larger. It needs an Augment that
	// does something.
	AugmentMultiplicity int    `json:"augment_multiplicity,omitempty"`
	Resize              string `json:"resize,omitempty"`
	// Window is the VOI window (or three) DICOM images were read through
	// in place of each file's own (data.Fit.Window, dicom.ParseWindows's
	// form); empty for the files' own. Recorded in the model, so that eval
	// and predict read their images the same way.
	Window string `json:"window,omitempty"`
	// Frame is the image multi-frame DICOM objects gave (data.Fit.Frame,
	// dicom.ParseFrame's form: a frame or a projection); empty where none
	// was chosen. Recorded in the model, as Window.
	Frame string `json:"frame,omitempty"`
	// Series says the examples were DICOM series, each a directory of
	// slices (data.Fit.Series); recorded in the model, as Window.
	Series     bool    `json:"series,omitempty"`
	InputShape []int64 `json:"input_shape"`
	Classes    int     `json:"classes"`
	Noise      string  `json:"noise"`
	Seed       *uint64 `json:"seed,omitempty"`
	NonPrivate bool    `json:"non_private,omitempty"`
	// DataSHA256 is the fingerprint of the training samples as loaded
	// (data.Images.Fingerprint), when the dataset has one: a resume on
	// other data is refused.
	DataSHA256 string `json:"data_sha256,omitempty"`
	// ClassNames names the training data's classes by label, when the
	// caller knows them (a folder's directory names); train records them
	// in the model, where predict reads them.
	ClassNames []string `json:"class_names,omitempty"`
	// FeatureCache says whether the run computes the outputs of the
	// model's frozen part once per example and trains on them
	// (features.go): FeatureCacheAuto ("" too) where the model splits so
	// and they fit the memory budget, FeatureCacheOn (an error where it
	// cannot), or FeatureCacheOff. Report.FeatureCache says what the run
	// did.
	FeatureCache string `json:"feature_cache,omitempty"`
	// PrivacyUnit is what the guarantee protects (users.go):
	// PrivacyUnitExample, or PrivacyUnitUser — all of a user's examples,
	// where the training data names each example's user (data.Users).
	// Run resolves PrivacyUnitAuto ("" too) to the second where the data
	// names users. At user level the sample rate, δ's default and
	// ExpectedBatch count users: each step samples users, reads
	// ExamplesPerUser of a sampled user's examples (0: the median user's
	// count, at most 16) and clips the mean of their gradients as one.
	// Users is the number of users.
	PrivacyUnit     string `json:"privacy_unit,omitempty"`
	Users           int    `json:"users,omitempty"`
	ExamplesPerUser int    `json:"examples_per_user,omitempty"`
	// LoRA describes the run's low-rank adapters (Config.Rewrite.LoRA; nil
	// without): Run fills it.
	LoRA *LoRASettings `json:"lora,omitempty"`
	// BatchNorm says what the rewrite did to the model's
	// BatchNormalization nodes ("" where it had none): Run fills it, and
	// the model's metadata records it, which tells `weights` whether the
	// trained convolutions are still the module's (GroupNorm) or carry a
	// frozen BatchNorm folded into them.
	BatchNorm string `json:"batchnorm,omitempty"`
	// MultiLabel says the training data is multi-label (data.IsMultiLabel):
	// each of the model's K logits a label of its own, a sample's label
	// the set of those that apply, the loss the sigmoids' binary
	// cross-entropy averaged over the labels (dpengine.Config.MultiLabel),
	// the test figures EvalResult.MultiLabel's. Run sets it from the data.
	MultiLabel bool `json:"multi_label,omitempty"`
	// ClassWeights, where set, weighs each sample's clipped gradient by
	// its class's weight, one a class of the training data by label, each
	// in [0, 1] (ParseClassWeights: the largest 1): the step adds
	// Σ_i w_{y_i}·C_i·g_i (dpengine.Config.ClassWeights), so a sample
	// still moves the sum by at most the clip norm and ε is unchanged.
	// Single-label data only.
	ClassWeights []float64 `json:"class_weights,omitempty"`
	// PosWeight, on multi-label data, weighs each label's positive term
	// of the loss (dpengine.Config.PosWeight, PyTorch's BCEWithLogitsLoss
	// pos_weight): one weight a label, finite and non-negative. One loss
	// a sample still, so ε is unchanged; train_loss is that loss, the test
	// loss the plain one.
	PosWeight []float64 `json:"pos_weight,omitempty"`
	// UncertainTargets are the training data's labels' soft targets of
	// their uncertain entries (uncertain=T in its spec:
	// data.UncertainTargetsOf; dpengine.Config.UncertainTargets), one a
	// label, 0 where they are left out; nil where none has one. One loss
	// a sample still: ε is unchanged.
	UncertainTargets []float64 `json:"uncertain_targets,omitempty"`
}

// LoRASettings are a LoRA run's adapters: Rank, Alpha (their product
// scaled by Alpha/Rank), the layers Target selected ("" every eligible
// one but the classifier head), and how many Adapters the rewrite added
// with how many Scalars; the run trains them, the classifier head and
// what --train selects, and the export merges them into the weights.
type LoRASettings struct {
	Rank     int64   `json:"rank"`
	Alpha    float64 `json:"alpha"`
	Target   string  `json:"target,omitempty"`
	Adapters int     `json:"adapters"`
	Scalars  int64   `json:"scalars"`
}

// sourced is a dataset that can tell whether its files changed since it
// was loaded, and fingerprint its samples (data.View, data.Images).
type sourced interface {
	CheckSources() error
	Fingerprint() string
}

// EpochRecord is one epoch of the run report.
type EpochRecord struct {
	Epoch   int     `json:"epoch"`
	Steps   int64   `json:"steps"`
	Epsilon float64 `json:"epsilon"`
	// LR is the learning rate of the epoch's last step (Settings.LRSchedule).
	LR float64 `json:"lr"`
	// ClipNorm is the clip norm after the epoch's last step, where the
	// run adapts it (Settings.ClipQuantile).
	ClipNorm  float64 `json:"clip_norm,omitempty"`
	TrainLoss float64 `json:"train_loss"`
	// Clipped is the fraction of the epoch's samples whose gradient the
	// clip norm shortened, and NonFinite the number whose gradient was
	// NaN or infinite (dropped): like TrainLoss, computed on training data
	// and not private outputs — what a user reads to choose --clip.
	Clipped     float64     `json:"clipped_fraction"`
	NonFinite   int         `json:"non_finite,omitempty"`
	Seconds     float64     `json:"seconds"`
	SamplesPerS float64     `json:"samples_per_second"`
	Test        *EvalResult `json:"test,omitempty"`
}

// Report is the run report: the settings, the rewrite plan, the privacy
// spent and one record per epoch.
type Report struct {
	Settings Settings `json:"settings"`
	// Device is the device the run computed on (runtime.Device.Name), and
	// TF32 whether it ran convolutions in TF32 (runtime.TF32Device): what
	// the trained weights depend on beyond the settings, not the privacy
	// guarantee.
	Device string        `json:"device"`
	TF32   bool          `json:"tf32,omitempty"`
	Plan   *rewrite.Plan `json:"plan,omitempty"`
	// NormCheck is what the norm check compared before the first step
	// (CheckNorms); nil where it was skipped or the run is not private.
	NormCheck *dpengine.NormCheck `json:"norm_check,omitempty"`
	// FeatureCache says whether the run trained on the cached outputs of
	// the model's frozen part (Settings.FeatureCache), and why not.
	FeatureCache *FeatureCacheReport `json:"feature_cache,omitempty"`
	Privacy      *accountant.Result  `json:"privacy,omitempty"`
	// Phases are the mechanism's phases the run composed (σ, sample rate,
	// steps; a resume with other settings adds one), that Privacy
	// accounts: what "dpfinetune privacy epsilon --report" composes with
	// other runs on the same data. Nil in a dry run, which spends nothing.
	Phases []accountant.Phase `json:"phases,omitempty"`
	// DryRun marks the report of a dry run (Config.DryRun): Privacy is
	// what the run would spend.
	DryRun bool `json:"dry_run,omitempty"`
	// ScoreRight says how much of each of Config.Score's examples the
	// released model gets right, in [0, 1] (Evaluator.Right: 1 or 0,
	// multi-label the share of its labels; with Config.ScoreRanking
	// Evaluator.RankingPrecision): not private, so never written.
	ScoreRight []float64     `json:"-"`
	Epochs     []EpochRecord `json:"epochs"`
	Seconds    float64       `json:"seconds"`
	Output     string        `json:"output"`
	Checkpoint string        `json:"checkpoint"`
	Note       string        `json:"note"`
}

// ErrDiverged is wrapped by the error of a run whose parameters became NaN
// or infinite (a learning rate or clip norm too large): a function of the
// noisy updates alone, which a search may treat as a run that failed.
var ErrDiverged = errors.New("diverged")

// Config is what Run needs: the settings, the model graph, the data and
// where to write.
type Config struct {
	// Settings says what to train and how; see Settings for the fields
	// Run derives. Gamma and Momentum are used whatever the clip function
	// and optimizer, and recorded only where they apply.
	Settings Settings
	// Device runs the training and evaluation steps; nil is the CPU.
	Device runtime.Device
	// Graph is the model. Run rewrites it and trains its parameters in
	// place: after Run it holds the trained model.
	Graph *graph.Graph
	// Rewrite configures the rewrite for DP (norm layers, freezing, a new
	// head). Its PlanOptions.Batch is set by Run.
	Rewrite rewrite.Options
	// Train is the training data; Test, when not nil, is evaluated after
	// every epoch with batches of EvalBatch (default 256).
	Train     data.Dataset
	Test      data.Dataset
	EvalBatch int
	// TestGroups, when set, scores Test's examples as groups (a study's
	// views: Evaluator.RunGrouped), each epoch's test figures the
	// groups'.
	TestGroups *Grouping
	// Score, when set, is classified once by the released model after the
	// last step (the average with EMADecay), on the frozen part's cached
	// outputs where the run caches them: which of its examples the model
	// gets right is Report.ScoreRight, for a caller that releases a
	// noised score of them (dpfinetune tune). Nothing of it is logged or
	// written.
	Score data.Dataset
	// ScoreRanking scores Score's examples by how well the model ranks
	// their labels (Evaluator.RankingPrecision) instead of by its
	// decisions (Evaluator.Right): multi-label only.
	ScoreRanking bool
	// PhysicalBatch is the number of samples (at user level, users) per
	// forward/backward pass; 0 means the largest that fits MaxMemory
	// bytes when MaxMemory > 0, else min(L, 64) divided by the
	// augmentation multiplicity or the examples a user gives
	// (Settings.ExamplesPerUser), or, on resume, the checkpoint's.
	// MaxMemory, when positive, also bounds the compiled plan's buffers
	// (else the machine's available memory does).
	PhysicalBatch int
	MaxMemory     int64
	// Out is where the trained model is written ("" to skip the export:
	// the trained parameters are in Graph).
	Out string
	// Checkpoint is written after every epoch and on interruption (""
	// for none); Resume continues from it.
	Checkpoint string
	Resume     bool
	// CheckpointEvery and CheckpointInterval, when positive, also write
	// the checkpoint inside an epoch: after every CheckpointEvery steps
	// and after the first step CheckpointInterval after the last write,
	// so that a crash (a killed process, a lost machine) loses at most
	// that much of an epoch. A resume continues mid-epoch as after an
	// interruption.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// Report, when set, is the path of the JSON run report.
	Report string
	// DryRun stops Run before the first step, once everything a run
	// checks before it has passed — the model loaded, rewritten and
	// planned, the data loaded, σ calibrated, the memory fitted, the
	// engine built and its norms checked — and returns the report of
	// that (the ε the run would spend as Privacy, no epochs). Nothing
	// but the report is written.
	DryRun bool
	// Log receives the human-readable plan and one line per epoch; Warn
	// receives warnings (shuffle sampling). Nil discards them.
	Log, Warn io.Writer
	// Events, when set, is called synchronously as the run progresses.
	Events func(Event)
	// Stop, when set, is polled before every step (and between the
	// passes that cache features, Settings.FeatureCache); when it returns
	// true the run saves its checkpoint and returns an *Interrupted error.
	Stop func() bool
	// GradientCanaries is a number of extra training units with no
	// input: each is a fixed per-sample gradient (see
	// dpengine.DiracCanary), sampled like every other unit — an example,
	// or at user level a user (index Train.Len()+k, or Users+k) — and
	// clipped and noised with the rest. DrawCanaries, when set,
	// called once the engine exists (the coordinates depend on its
	// parameters) whatever GradientCanaries is, 0 included, returns them. They exist for the white-box privacy
	// audit (package dptrain/audit).
	GradientCanaries int
	DrawCanaries     func(e *dpengine.Engine) ([]dpengine.DiracCanary, error)
	// FeatureCacheDir is where a feature cache that does not fit the
	// memory budget goes (Settings.FeatureCache; a file removed as soon
	// as it is open, nothing left after the run): "" is the checkpoint's
	// folder, else the export's, else the system's temporary folder.
	FeatureCacheDir string
	// KeepFeatures, where set, is a folder in which the frozen part's
	// outputs (Settings.FeatureCache) are kept after the run, a file a
	// dataset named by featureKey's hash (the frozen part's cut and
	// parameters, the data's fingerprint and preprocessing, the device),
	// and from which a later run that would compute the same rows reads
	// them instead: a linear probe's later runs skip the backbone. The
	// files are derived from the training data and as private as it;
	// only their owner may read them. Only data with a fingerprint of its
	// samples is kept.
	KeepFeatures string
	// FeatureStore, when set, keeps the training data's feature cache
	// after the run for the next run over the same frozen part and data,
	// and gives this run the rows an earlier one left there (a search's
	// runs; FeatureStore). The caller closes it.
	FeatureStore *FeatureStore
	// SkipNormCheck skips the check, before a private run's first step,
	// of the engine's per-sample gradient norms against each sample's own
	// gradient (CheckNorms): the run then takes the engine's word for
	// them.
	SkipNormCheck bool
}

// normCheckSamples is the norm check's number of samples of synthetic
// inputs (no training example is read).
const normCheckSamples = 3

// The norm check's bounds (dpengine.NormTolerance). In float32 the
// fixtures differ by at most 3.8e-7 of a sample's squared total and 1.5e-6
// of a parameter's own squared norm where that is 10⁻⁶ of the total or
// more (TestCheckNorms, every mode, on the CPU and a device with memory of
// its own), the 84 torchvision breadth exports by 1.0e-6 and 6.0e-6,
// EfficientViT-M0's dynamo export by 4e-8 and 2.2e-6. With
// --tf32 the engine's activations are TF32's and the direct pass's
// float32's: on the emulated CUDA device the fixtures differ by up to
// 5e-3 of the total (mobilenet) and, relative to their own, by up to 0.3
// where the share is 10⁻³ and 0.16 where it is 10⁻² (0.032 from 3·10⁻²):
// the own bound holds only large parameters there.
var (
	normCheckTol     = dpengine.NormTolerance{Total: 1e-3, Own: 0.1, Share: 1e-6}
	normCheckTolTF32 = dpengine.NormTolerance{Total: 2e-2, Own: 0.5, Share: 3e-2}
)

// classesWord is what the data's classes are: classes, or a multi-label
// run's labels.
func classesWord(set Settings) string {
	if set.MultiLabel {
		return "labels"
	}
	return "classes"
}

// checkMultiLabel refuses what a multi-label run cannot do: test or score
// data that is not multi-label with the same labels.
func checkMultiLabel(cfg Config, set Settings) error {
	names := func(d data.Dataset) string {
		if c, ok := d.(interface{ Classes() []string }); ok {
			return strings.Join(c.Classes(), ", ")
		}
		return ""
	}
	for what, d := range map[string]data.Dataset{"test": cfg.Test, "score": cfg.Score} {
		if d == nil {
			continue
		}
		if !data.IsMultiLabel(d) {
			return fmt.Errorf("%s is multi-label but the %s data is not: read it as multi-label too (a csv listing's :multilabel)", set.Data, what)
		}
		if a, b := names(cfg.Train), names(d); a != "" && b != "" && a != b {
			return fmt.Errorf("the %s data's labels (%s) are not the training data's (%s): a label set's bits would mean other labels", what, b, a)
		}
	}
	return nil
}

// withDrawnLoRA runs fn, the norm check, with every LoRA B factor that
// is zero (a fresh run's: the adapters start as the identity) drawn from
// U(−1/√r, 1/√r) by a fixed seed, and puts the parameters back after it.
// At B = 0 each A factor's per-sample gradient is zero, the engine's and
// the direct pass's alike, and the check would hold nothing of the rules
// that will clip A once B moves; with B drawn, both factors' norms are
// held to each sample's own gradient.
func withDrawnLoRA(eng *dpengine.Engine, adapters []rewrite.Adapter, fn func() error) error {
	if len(adapters) == 0 {
		return fn()
	}
	if err := eng.SyncParams(); err != nil {
		return err
	}
	names, host := eng.ParamNames(), eng.HostParams()
	rank := map[string]int64{}
	for _, ad := range adapters {
		rank[ad.B] = ad.Rank
	}
	saved := make([][]float32, len(host))
	drawn := make([][]float32, len(host))
	rng := rand.New(rand.NewPCG(3, 4))
	drew := false
	for k, h := range host {
		saved[k] = append([]float32(nil), h...)
		drawn[k] = saved[k]
		r, ok := rank[names[k]]
		if !ok || slices.ContainsFunc(h, func(v float32) bool { return v != 0 }) {
			continue
		}
		bound := 1 / math.Sqrt(float64(r))
		drawn[k] = make([]float32, len(h))
		for i := range drawn[k] {
			drawn[k][i] = float32((2*rng.Float64() - 1) * bound)
		}
		drew = true
	}
	if !drew {
		return fn()
	}
	if err := eng.SetParams(names, drawn); err != nil {
		return err
	}
	err := fn()
	if rerr := eng.SetParams(names, saved); err == nil {
		err = rerr
	}
	return err
}

// labelNormCheck names the parameters of the norm check's result and
// error as plan does (rewrite.Plan.Label: an exporter's made-up name with
// the PyTorch name or module it stands for).
func labelNormCheck(rp *rewrite.Plan, nc *dpengine.NormCheck, err error) {
	if nc != nil && nc.Param != "" {
		nc.Param = rp.Label(nc.Param)
	}
	var mm *dpengine.NormMismatchError
	if errors.As(err, &mm) && mm.Param != "" {
		mm.Param = rp.Label(mm.Param)
	}
}

// CheckNorms runs the norm check (dpengine.Engine.CheckNorms) of engine e,
// built from g, on min(normCheckSamples, physical batch) samples of
// seeded N(0, 1) inputs with labels 0, 1, … (mod classes) — of a
// multi-label head, the sets those numbers' bits are, past 62 labels
// (labelset.Bits) every other one with the last label too, so that the
// sets reach every word, and every third one ignoring the last label
// where it does not apply (a partial set, labelset.OfIgnoring) —:
// synthetic, so that the check reads no private example and its outcome
// says nothing of the data.
func CheckNorms(e *dpengine.Engine, g *graph.Graph, physical, classes int, tf32 bool) (*dpengine.NormCheck, error) {
	sample := 1
	for _, d := range e.SampleShape() {
		sample *= int(d)
	}
	n := min(normCheckSamples, physical)
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n*sample)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(i % max(classes, 1))
		if e.MultiLabel() {
			var on, ignored []int
			for j := range bits.Len(uint(y[i])) {
				if y[i]>>j&1 == 1 {
					on = append(on, j)
				}
			}
			if i%2 == 1 && classes > labelset.Bits {
				on = append(on, classes-1)
			}
			if i%3 == 2 && classes > 1 && !slices.Contains(on, classes-1) {
				ignored = []int{classes - 1}
			}
			var err error
			if y[i], err = labelset.OfIgnoring(classes, on, ignored); err != nil {
				return nil, fmt.Errorf("the norm check's label sets: %w", err)
			}
		}
	}
	tol := normCheckTol
	if tf32 {
		tol = normCheckTolTF32
	}
	return e.CheckNorms(g, x, y, tol)
}

// ignoredLabels counts the labels d's samples ignore (partial label sets,
// labelset.Ignored) and all their labels.
func ignoredLabels(d data.Dataset) (ignored, total int64) {
	k := d.NumClasses()
	if k < 1 || k > labelset.Max {
		return 0, 0
	}
	w := make([]uint64, labelset.Words(k))
	for i := range d.Len() {
		if l := int64(d.Label(i)); labelset.Partial(l) && labelset.Ignored(l, k, w) == nil {
			for _, x := range w {
				ignored += int64(bits.OnesCount64(x))
			}
		}
	}
	return ignored, int64(d.Len()) * int64(k)
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EpochStart: an epoch begins (or resumes at EpochStep).
	EpochStart EventKind = iota
	// StepDone: a logical batch has been applied.
	StepDone
	// EpochDone: an epoch ended; Record holds its report line.
	EpochDone
)

// Event reports the progress of a run.
type Event struct {
	Kind EventKind
	// Epoch is 0-based; EpochStep is the number of steps done in it.
	Epoch, Epochs            int
	EpochStep, StepsPerEpoch int
	// Step is the number of logical batches done in the whole run.
	Step int64
	// Loss is the mean training loss of the epoch so far (not a private
	// output) and SamplesPerSecond its throughput.
	Loss, SamplesPerSecond float64
	// LR is the learning rate of the last step (Settings.LRSchedule),
	// ClipNorm the clip norm of the next (Settings.ClipQuantile; the
	// run's fixed one otherwise).
	LR, ClipNorm float64
	// PerUser says that the run's samples are users (Settings.PrivacyUnit):
	// SamplesPerSecond counts users.
	PerUser bool
	// Record is the finished epoch (EpochDone).
	Record *EpochRecord
	// Engine is the engine: after StepDone, Engine.Gradient returns the
	// private gradient of that step.
	Engine *dpengine.Engine

	acct       accountant.Accountant
	delta      float64
	nonPrivate bool
}

// Epsilon returns the ε spent so far (0 for a non-private run, NaN if the
// accountant cannot answer). It runs the accountant: call it sparingly.
func (e Event) Epsilon() float64 { return spent(e.acct, e.delta, e.nonPrivate) }

func spent(acct accountant.Accountant, delta float64, nonPrivate bool) float64 {
	if nonPrivate || acct == nil || acct.TotalSteps() == 0 {
		return 0
	}
	r, err := acct.Epsilon(delta)
	if err != nil {
		return math.NaN()
	}
	return r.Epsilon
}

// Interrupted reports a run stopped by Config.Stop after its checkpoint was
// saved.
type Interrupted struct{ Checkpoint string }

func (e *Interrupted) Error() string {
	return fmt.Sprintf("interrupted; checkpoint saved to %s: run the same command with --resume to continue", e.Checkpoint)
}

// Run trains as cfg says and returns the report (also written to
// cfg.Report). The graph holds the trained model afterwards.
func Run(cfg Config) (*Report, error) {
	start := time.Now()
	set := cfg.Settings
	set.LoRA = nil
	if lo := cfg.Rewrite.LoRA; lo.Rank > 0 {
		set.LoRA = &LoRASettings{Rank: lo.Rank, Alpha: cmp.Or(lo.Alpha, float64(lo.Rank))}
		if lo.Target != nil {
			set.LoRA.Target = lo.Target.String()
		}
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format, a...)
		}
	}
	if cfg.Graph == nil || cfg.Train == nil {
		return nil, errors.New("dptrain: Config needs a Graph and Train data")
	}
	mode, err := dpengine.ParseMode(set.Mode)
	if err != nil {
		return nil, err
	}
	if set.NonPrivate {
		mode = dpengine.NonDP
		set.Mode = string(mode)
	}
	fn, err := dpengine.ParseClipFn(set.ClipFn)
	if err != nil {
		return nil, err
	}
	set.ClipFn = fn.String()
	gamma, momentum := set.Gamma, set.Momentum
	if fn != dpengine.Automatic {
		set.Gamma = 0
	}
	if set.Optimizer != "sgd" {
		set.Momentum = 0
	}
	if cfg.EvalBatch <= 0 {
		cfg.EvalBatch = 256
	}
	if cfg.CheckpointEvery < 0 || cfg.CheckpointInterval < 0 {
		return nil, fmt.Errorf("dptrain: checkpoint every %d steps or %v must not be negative", cfg.CheckpointEvery, cfg.CheckpointInterval)
	}
	g := cfg.Graph
	nData := cfg.Train.Len()
	if cfg.GradientCanaries < 0 || (cfg.GradientCanaries > 0 && cfg.DrawCanaries == nil) {
		return nil, fmt.Errorf("dptrain: %d gradient canaries and no DrawCanaries", cfg.GradientCanaries)
	}
	// The units the accountant counts: examples, or users (users.go).
	groups, err := resolvePrivacyUnit(&set, cfg.Train)
	if err != nil {
		return nil, err
	}
	nUnits := nData
	if groups != nil {
		nUnits = set.Users
	}
	n := nUnits + cfg.GradientCanaries
	if n == 0 {
		return nil, fmt.Errorf("%s: no training examples", set.Data)
	}
	if set.Epochs <= 0 || set.BatchSize <= 0 {
		return nil, fmt.Errorf("dptrain: epochs %d and batch size %d must be positive", set.Epochs, set.BatchSize)
	}
	set.Examples = nData + cfg.GradientCanaries
	if sd, ok := cfg.Train.(sourced); ok {
		set.DataSHA256 = sd.Fingerprint()
	}
	if set.Delta == 0 {
		set.Delta = 1 / (10 * float64(n))
	}
	sp := Sampling(n, set.BatchSize, set.Epochs)
	L, q, stepsPerEpoch, steps := sp.Batch, sp.SampleRate, sp.StepsPerEpoch, sp.Steps
	set.BatchSize, set.SampleRate, set.StepsPerEpoch, set.Steps = L, q, stepsPerEpoch, steps
	sched := Schedule{Kind: set.LRSchedule, Warmup: set.WarmupSteps, Min: set.MinLR}
	if err := sched.Check(set.LR, steps); err != nil {
		return nil, err
	}
	if set.ClipQuantile != 0 {
		if err := checkAdaptive(&set, fn, L); err != nil {
			return nil, err
		}
	} else {
		set.ClipLR, set.ClipCountNoise = 0, 0
	}
	if !(set.LabelSmoothing >= 0 && set.LabelSmoothing < 1) {
		return nil, fmt.Errorf("--label-smoothing %v must be in [0, 1)", set.LabelSmoothing)
	}
	set.MultiLabel = data.IsMultiLabel(cfg.Train)
	set.UncertainTargets = data.UncertainTargetsOf(cfg.Train)
	if set.MultiLabel {
		if err := checkMultiLabel(cfg, set); err != nil {
			return nil, err
		}
	}
	if err := checkClassWeights(cfg, set); err != nil {
		return nil, err
	}
	if err := checkPosWeight(cfg, set); err != nil {
		return nil, err
	}
	if !(set.EMADecay >= 0 && set.EMADecay < 1) {
		return nil, fmt.Errorf("--ema %v must be in [0, 1): the decay of the parameters' average (0: none)", set.EMADecay)
	}
	set.Noise = "secure"
	if set.Seed != nil {
		set.Noise = fmt.Sprintf("seeded (%d): reproducible, NOT secure", *set.Seed)
	}
	if set.NonPrivate {
		set.Noise, set.Delta, set.Epsilon = "none (non-private)", 0, 0
	}
	if set.NoiseMultiplier != 0 && !set.NonPrivate {
		if !(set.NoiseMultiplier > 0) || math.IsInf(set.NoiseMultiplier, 0) {
			return nil, fmt.Errorf("noise multiplier σ = %v must be positive and finite", set.NoiseMultiplier)
		}
		if set.Epsilon != 0 {
			return nil, fmt.Errorf("a target ε (%g) and a noise multiplier σ (%g): give one, the other follows", set.Epsilon, set.NoiseMultiplier)
		}
	}
	if set.NonPrivate {
		set.NoiseMultiplier = 0
	}
	eps, delta := set.Epsilon, set.Delta
	ckptPath := cfg.Checkpoint
	views := max(set.AugmentMultiplicity, 1)
	if groups != nil {
		// A sampled user's examples are its rows, folded into the batch
		// as augmentation multiplicity's views are, each with its label.
		views = set.ExamplesPerUser
	} else if views > 1 {
		aug, err := data.ParseAugment(set.Augment)
		if err != nil {
			return nil, err
		}
		if aug.IsNone() {
			return nil, fmt.Errorf("augmentation multiplicity %d needs an augmentation (e.g. --augment crop=4,flip): without one a sample's %d views are the same input, %d times the work for the same gradient", views, views, views)
		}
	} else {
		set.AugmentMultiplicity = 0
	}

	// Resume.
	var ckpt *dpengine.Checkpoint
	var prev Settings
	if cfg.Resume {
		if ckptPath == "" {
			return nil, errors.New("dptrain: Resume needs a Checkpoint path")
		}
		ckpt, err = dpengine.ReadCheckpoint(ckptPath)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(ckpt.Settings, &prev); err != nil {
			return nil, fmt.Errorf("checkpoint %s: settings: %w", ckptPath, err)
		}
		if err := compatible(prev, set); err != nil {
			return nil, fmt.Errorf("cannot resume from %s: %w", ckptPath, err)
		}
		if int(ckpt.Step) >= steps {
			return nil, fmt.Errorf("checkpoint %s has already done all %d steps; raise --epochs to train more", ckptPath, steps)
		}
	}

	// σ: calibrated so that the whole run (with any earlier phases of a
	// resumed run) spends at most ε.
	acct, err := accountant.New(set.Accountant)
	if err != nil {
		return nil, err
	}
	if ckpt != nil {
		if acct, err = accountant.Restore(ckpt.Accountant); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", ckptPath, err)
		}
	}
	if !set.NonPrivate {
		if set.NoiseMultiplier > 0 {
			// σ as given; the ε it spends over the run's steps (with any
			// earlier phases), known before the first step.
			set.Sigma = set.NoiseMultiplier
			planned, err := accountant.Restore(acct.State())
			if err == nil {
				err = planned.Step(set.Sigma, q, steps-int(stepOf(ckpt)))
			}
			var r accountant.Result
			if err == nil {
				r, err = planned.Epsilon(delta)
			}
			if err != nil {
				return nil, fmt.Errorf("the ε of σ = %g, δ = %g, q = %.4g over %d steps: %w", set.Sigma, delta, q, steps-int(stepOf(ckpt)), err)
			}
			set.Epsilon, eps = r.Epsilon, r.Epsilon
		} else if ckpt != nil && prev.Epsilon == set.Epsilon && prev.Delta == set.Delta && prev.Steps == set.Steps && prev.SampleRate == set.SampleRate && prev.Sigma > 0 {
			set.Sigma = prev.Sigma
		} else {
			remaining := steps - int(stepOf(ckpt))
			cal, err := accountant.Calibrate(acct.State(), eps, delta, q, remaining)
			if err != nil {
				return nil, fmt.Errorf("calibrating σ for ε = %g, δ = %g, q = %.4g, %d steps: %w", eps, delta, q, remaining, err)
			}
			set.Sigma = cal.Sigma
		}
		set.GradientSigma = 0
		if set.ClipQuantile > 0 {
			if set.GradientSigma, err = gradientSigma(set.Sigma, set.ClipCountNoise); err != nil {
				return nil, err
			}
		}
	}

	// Rewrite, plan and pick the physical batch.
	opts := cfg.Rewrite
	opts.InputShape = set.InputShape
	opts.Batch = int64(min(L, 64))
	opts.Multiplicity = int64(views)
	opts.Averaged = set.EMADecay > 0
	rp, err := rewrite.Prepare(g, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.Model, err)
	}
	switch gn, fr := rewrite.BatchNormCounts(rp.Changes); {
	case fr > 0:
		set.BatchNorm = fmt.Sprintf("%s: %d frozen with their running statistics (folded into the convolution before each where there is one)", rewrite.BNFreeze, fr)
	case gn > 0:
		set.BatchNorm = fmt.Sprintf("%s: %d replaced by GroupNorm", rewrite.BNGroupNorm, gn)
	}
	if set.LoRA != nil {
		set.LoRA.Adapters = len(rp.Adapters)
		for _, ad := range rp.Adapters {
			for _, name := range []string{ad.A, ad.B} {
				if prm := rp.Param(name); prm != nil {
					set.LoRA.Scalars += prm.Size
				}
			}
		}
	}
	// The engine trains the model, or only its trained part on the frozen
	// part's cached outputs (features.go): the part's graph shares the
	// model's tensors, so training it trains g.
	cached := nData
	if cfg.Test != nil {
		cached += cfg.Test.Len()
	}
	if cfg.Score != nil {
		cached += cfg.Score.Len()
	}
	// The frozen part's passes take no more examples than a physical
	// batch of the whole model would (cachePass).
	phys := cfg.PhysicalBatch
	if phys == 0 {
		phys = max(1, min(L, 64)/views)
	}
	split, fcRep, err := planFeatureCache(set, cfg.Device, g, rp, opts.PlanOptions, cached, cachePass(cfg.EvalBatch, phys), cfg.MaxMemory, spillDir(cfg))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.Model, err)
	}
	engG, engRP, engShape := g, rp, set.InputShape
	memCap := cfg.MaxMemory
	if split != nil {
		engG, engRP, engShape = split.Head, split.HeadPlan, split.Shape
		// What the cache takes of the cap: on a GPU its pass (DeviceBytes,
		// set there alone; the cache is host memory), on the CPU the cache
		// in memory (on disk it is the page cache's).
		switch {
		case memCap <= 0:
		case fcRep.DeviceBytes > 0:
			memCap -= fcRep.DeviceBytes
		case fcRep.Disk == "":
			memCap -= fcRep.Bytes
		}
	}
	// The mode's activation memory as its runtime plan holds it, for
	// --max-memory and the report's estimate. Only the cap needs it: a
	// run without one that cannot measure (a plan at twice the batch over
	// a size limit) keeps the bound of every activation in its report.
	if err := dpengine.MeasureActivations(engG, engRP, cfg.Device, mode); err != nil && cfg.MaxMemory > 0 && cfg.PhysicalBatch == 0 {
		return nil, fmt.Errorf("%s: %w", set.Model, err)
	}
	P := cfg.PhysicalBatch
	switch {
	case P > 0:
	case cfg.MaxMemory > 0:
		if P, err = FitBatch(engRP, string(mode), memCap, L); err != nil {
			return nil, err
		}
	default:
		// 64 rows a pass: with augmentation multiplicity, 64 views.
		P = max(1, min(L, 64)/views)
	}
	if ckpt != nil && cfg.PhysicalBatch == 0 && cfg.MaxMemory == 0 {
		P = prev.PhysicalBatch
	}
	set.PhysicalBatch = P

	var src *dpengine.Source
	if set.Seed != nil {
		src = dpengine.NewSeededSource(*set.Seed)
	} else {
		src = dpengine.NewSecureSource()
	}
	opt, err := dpengine.NewOptimizer(set.Optimizer, set.LR, momentum, set.WeightDecay)
	if err != nil {
		return nil, err
	}
	if wrapOptimizer != nil {
		opt = wrapOptimizer(opt)
	}
	// The engine's σ is the calibrated one; only a test of the audit
	// breaks it on purpose (internal/testhook), never a flag.
	engSigma := set.Sigma
	if set.GradientSigma > 0 {
		engSigma = set.GradientSigma // the count's noise takes the rest (adaclip.go)
	}
	if d := testhook.NoiseDivisor; d > 0 {
		engSigma /= d
	}
	ecfg := dpengine.Config{Device: cfg.Device, Mode: mode, Clipping: dpengine.Clipping{Fn: fn, R: set.Clip, Gamma: gamma}, PerLayer: set.PerLayer,
		NoiseMultiplier: engSigma, ExpectedBatch: float64(L), PhysicalBatch: P, Source: src, Optimizer: opt, MaxMemory: memCap,
		EMADecay: set.EMADecay, LabelSmoothing: set.LabelSmoothing, MultiLabel: set.MultiLabel, RowLabels: groups != nil,
		ClassWeights: set.ClassWeights, PosWeight: set.PosWeight, UncertainTargets: set.UncertainTargets}
	eng, err := dpengine.New(engG, engRP, ecfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", set.Model, err)
	}
	var gradCanaries []dpengine.DiracCanary
	if cfg.DrawCanaries != nil {
		// Called where no canary is sampled in too: the auditor scores
		// the coordinates of the canaries left out as well.
		if gradCanaries, err = cfg.DrawCanaries(eng); err != nil {
			return nil, err
		}
		if len(gradCanaries) != cfg.GradientCanaries {
			return nil, fmt.Errorf("dptrain: DrawCanaries returned %d gradient canaries, want %d", len(gradCanaries), cfg.GradientCanaries)
		}
		for _, c := range gradCanaries {
			if err := eng.CheckCanary(c); err != nil {
				return nil, err
			}
		}
	}
	_, oshape := eng.Plan().Output(0)
	set.Classes = oshape[len(oshape)-1]
	if cfg.Train.NumClasses() > set.Classes {
		return nil, fmt.Errorf("%s has %d classes but %s outputs %d logits: pass --num-classes %d to replace the head", set.Data, cfg.Train.NumClasses(), set.Model, set.Classes, cfg.Train.NumClasses())
	}
	if set.MultiLabel && cfg.Train.NumClasses() != set.Classes {
		// Each logit is a label: one the data never names would be
		// trained towards "absent" alone.
		return nil, fmt.Errorf("%s names %d labels but %s outputs %d logits, a label each: pass --num-classes %d to replace the head", set.Data, cfg.Train.NumClasses(), set.Model, set.Classes, cfg.Train.NumClasses())
	}
	// The engine's per-sample norms against each sample's own gradient,
	// before the checkpoint's parameters replace the graph's.
	var normCheck *dpengine.NormCheck
	tf32 := cfg.Device != nil && runtime.TF32On(cfg.Device)
	if mode != dpengine.NonDP && !cfg.SkipNormCheck {
		err = withDrawnLoRA(eng, rp.Adapters, func() error {
			normCheck, err = CheckNorms(eng, engG, P, set.Classes, tf32)
			return err
		})
		labelNormCheck(rp, normCheck, err)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n(the check runs synthetic inputs through the engine and, one at a time, through a plain backward pass on the CPU: a run on this model would not have its guarantee; please report the model's structure, `dpfinetune inspect --json`, and do not train it privately with --norm-check=false)", set.Model, err)
		}
	}
	if ckpt != nil {
		if err := eng.SetParams(ckpt.ParamNames, ckpt.Params); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", ckptPath, err)
		}
		if ckpt.Optimizer != nil {
			st, err := ckpt.Optimizer.InOrder(ckpt.ParamNames, eng.ParamNames())
			if err == nil {
				err = opt.SetState(st)
			}
			if err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", ckptPath, err)
			}
		}
		if ckpt.ClipNorm > 0 && set.ClipQuantile > 0 {
			if err := eng.SetClipNorm(ckpt.ClipNorm); err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", ckptPath, err)
			}
		}
		if ckpt.Average != nil && eng.Averaging() {
			if err := eng.SetAverage(ckpt.ParamNames, ckpt.Average, ckpt.AverageSteps); err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", ckptPath, err)
			}
		}
		if set.Seed != nil {
			if !ckpt.Seeded {
				return nil, fmt.Errorf("checkpoint %s comes from a run with secure randomness; it cannot be resumed with --seed", ckptPath)
			}
			src.SetStream(ckpt.SourceStream)
		}
	}

	// The sampler.
	var next func([]int) []int
	if set.Sampling == "shuffle" {
		s, err := dpengine.NewShuffleSampler(n, L, src)
		if err != nil {
			return nil, err
		}
		next = s.Next
		if cfg.Warn != nil {
			fmt.Fprintln(cfg.Warn, dpengine.ShuffleWarning)
		}
	} else {
		s, err := dpengine.NewPoissonSampler(n, q, src)
		if err != nil {
			return nil, err
		}
		next = s.Next
	}

	// Print the plan.
	if groups != nil {
		logf("dpfinetune train: %s on %s (%d examples of %d users, %d %s, input %v)\n", set.Model, set.Data, nData, set.Users, cfg.Train.NumClasses(), classesWord(set), set.InputShape)
	} else {
		logf("dpfinetune train: %s on %s (%d examples, %d %s, input %v)\n", set.Model, set.Data, n, cfg.Train.NumClasses(), classesWord(set), set.InputShape)
	}
	for _, note := range set.LoadNotes {
		logf("  model:     %s\n", note)
	}
	if d, ok := cfg.Train.(interface{ LeftOut() []string }); ok {
		if note := data.LeftOutNote(d.LeftOut()); note != "" {
			logf("  left out:  %s\n", note)
		}
	}
	if d, ok := cfg.Train.(interface{ Narrow16() (int, string) }); ok {
		if note := data.Narrow16Note(d.Narrow16()); note != "" {
			logf("  images:    %s\n", note)
		}
	}
	if d, ok := cfg.Train.(interface {
		PixelsOnDisk() (int64, string)
		PixelsKept() (string, bool)
	}); ok {
		b, dir := d.PixelsOnDisk()
		kept, reused := d.PixelsKept()
		switch {
		case kept != "" && reused:
			logf("  pixels:    kept: %d MiB of decoded images mapped from %s, as an earlier run kept them (none decoded; DPFINETUNE_PIXEL_CACHE)\n", b>>20, kept)
		case kept != "":
			logf("  pixels:    kept: %d MiB of decoded images in %s for later runs of these files (DPFINETUNE_PIXEL_CACHE; as private as the images: remove it when done)\n", b>>20, kept)
		case b > 0:
			logf("  pixels:    on disk: %d MiB of fitted images mapped from a file in %s (more than half the memory available; removed as it was opened), read through the page cache\n", b>>20, dir)
		}
	}
	logf("  rewrite:   %d trainable parameters in %d tensors, %d frozen", rp.Trainable.Scalars, rp.Trainable.Tensors, rp.Frozen.Scalars)
	logf(" (%d rewrite changes; see --report)\n", len(rp.Changes))
	if l := set.LoRA; l != nil {
		logf("  lora:      %d adapters of rank %d (scale %g), %d scalars; trained with the classifier head, the adapted weights frozen, the adapters merged into them at export\n", l.Adapters, l.Rank, l.Alpha/float64(l.Rank), l.Scalars)
	}
	if set.NonPrivate {
		logf("  privacy:   NONE (--non-private)\n")
	} else {
		how := "calibrated"
		if set.NoiseMultiplier > 0 {
			how = "given"
			logf("  privacy:   ε = %.4g as planned (of σ = %g, given), δ = %.3g (1/n = %.3g), accountant %s, %s sampling q = %.5g\n", eps, set.Sigma, delta, 1/float64(n), set.Accountant, set.Sampling, q)
		} else {
			logf("  privacy:   target ε = %g, δ = %.3g (1/n = %.3g), accountant %s, %s sampling q = %.5g\n", eps, delta, 1/float64(n), set.Accountant, set.Sampling, q)
		}
		logf("  noise:     σ = %.5g (%s), clip norm R = %g (%s%s), noise std σR = %.4g per coordinate, %s\n",
			set.Sigma, how, set.Clip, fn, map[bool]string{true: ", per layer"}[set.PerLayer], set.Sigma*set.Clip, set.Noise)
		if set.ClipQuantile > 0 {
			logf("  clipping:  adaptive: R from %g towards the %g-quantile of the per-sample norms (rate %g), from a clip count noised with σ_b = %.4g; the gradient's noise σ_g = %.5g, with the count's σ = %.5g accounted (Andrew et al. 2021)\n",
				eng.ClipNorm(), set.ClipQuantile, set.ClipLR, set.ClipCountNoise, set.GradientSigma, set.Sigma)
		}
	}
	logf("  training:  %d epochs × %d steps, expected batch %d, physical batch %d, mode %s, %s lr %g (%s)\n", set.Epochs, stepsPerEpoch, L, P, mode, set.Optimizer, set.LR, sched)
	switch {
	case set.LabelSmoothing > 0 && set.MultiLabel:
		logf("  loss:      each label's target smoothed by α = %g towards ½, (1−α)·[it applies] + α/2 (one loss a sample: ε unchanged; the test loss is the plain one)\n", set.LabelSmoothing)
	case set.LabelSmoothing > 0:
		logf("  loss:      cross-entropy against labels smoothed by α = %g (one loss a sample: ε unchanged; the test loss is the plain one)\n", set.LabelSmoothing)
	}
	if len(set.ClassWeights) > 0 {
		logf("  weights:   each sample's clipped gradient times its class's weight (%s): a sample still moves the sum by at most R, ε unchanged\n", classWeightsLine(set.ClassWeights, set.ClassNames))
	}
	if len(set.PosWeight) > 0 {
		logf("  loss:      each label's positive term weighed (%s): one loss a sample, ε unchanged; the test loss is the plain one\n", classWeightsLine(set.PosWeight, set.ClassNames))
	}
	if len(set.UncertainTargets) > 0 {
		var soft []string
		for j, u := range set.UncertainTargets {
			if u > 0 {
				name := strconv.Itoa(j)
				if j < len(set.ClassNames) {
					name = set.ClassNames[j]
				}
				soft = append(soft, fmt.Sprintf("%s=%g", name, u))
			}
		}
		logf("  loss:      uncertain labels against soft targets (%s; the other labels' left out): one loss a sample, ε unchanged; the test figures leave them out\n", strings.Join(soft, ", "))
	}
	if set.MultiLabel {
		logf("  loss:      multi-label: each of the %d labels decided by its logit's sigmoid, the binary cross-entropy averaged over the labels (one loss a sample: clipped and noised as any)\n", set.Classes)
		if ignored, total := ignoredLabels(cfg.Train); ignored > 0 {
			logf("  loss:      %d of the training images' %d labels ignored (uncertain=ignore): no term in their image's loss, no gradient\n", ignored, total)
		}
	}
	if set.EMADecay > 0 {
		logf("  average:   the parameters' exponential moving average, decay %g (warm-up min(β, (1+t)/(10+t))), is evaluated and exported (post-processing: ε unchanged)\n", set.EMADecay)
	}
	switch {
	case split != nil:
		logf("  features:  the trained part reads the frozen part through %s a sample: the frozen part (%s) runs once over the %d examples, cached (%s), and each step runs the trained part (%s) alone\n",
			cutNames(split), rewrite.Nodes(split.PrefixNodes), cached, FormatBytes(fcRep.Bytes), rewrite.Nodes(split.HeadNodes))
		if fcRep.DeviceBytes > 0 {
			logf("  features:  the frozen part's pass at batch %d takes %s of the device while it runs, beside the engine (counted in --max-memory)\n", fcRep.PassBatch, FormatBytes(fcRep.DeviceBytes))
		}
	case fcRep != nil && set.FeatureCache != FeatureCacheOff:
		logf("  features:  not cached (%s): every step runs the whole model\n", fcRep.Reason)
	}
	switch {
	case groups != nil:
		fewest, most := groups.sizes()
		span := fmt.Sprint(most)
		if fewest < most {
			span = fmt.Sprintf("%d–%d", fewest, most)
		}
		logf("  users:     the guarantee is per user: each step samples users (q = %.5g of %d), reads %d of a sampled user's examples (of %s a user; all of them as evenly as %d allows) and clips their gradients' mean as one user's\n",
			q, set.Users, views, span, views)
	default:
		if user, nu := data.UsersOf(cfg.Train); nu > 0 {
			count := make([]int, nu)
			most := 0
			for _, u := range user {
				count[u]++
				most = max(most, count[u])
			}
			note := "a user with k examples is protected only by group privacy over k examples"
			if !set.NonPrivate && most > 1 {
				note = groupNote(eps, delta, most)
			}
			logf("  users:     the data names %d users and the guarantee is per example (--privacy-unit example): %s\n", nu, note)
			if cfg.Warn != nil {
				fmt.Fprintf(cfg.Warn, "warning: %s names %d users, and the guarantee is per example (--privacy-unit example): %s\n", set.Data, nu, note)
			}
		}
	}
	if views > 1 && groups == nil {
		logf("  views:     %d augmented views of each sample (%s), its gradient their mean, clipped as one sample's\n", views, set.Augment)
	}
	devName := "cpu"
	if cfg.Device != nil {
		devName = cfg.Device.Name()
	}
	logf("  device:    %s%s\n", devName, map[bool]string{true: ", TF32 convolutions (weight gradients, norms and clipping float32)"}[tf32])
	switch {
	case normCheck != nil:
		logf("  norms:     checked: the per-sample gradient norms of %d synthetic samples are each one's own gradient's, for all %d parameters (largest difference %.2g of a squared total, %.2g of a parameter's own)\n",
			normCheck.Samples, normCheck.Params, normCheck.Worst, normCheck.WorstOwn)
	case mode != dpengine.NonDP:
		logf("  norms:     NOT checked (--norm-check=false): the per-sample norms are the engine's word\n")
	}
	if cfg.Test != nil {
		name := set.TestData
		if name == "" {
			name = "given"
		}
		if g := cfg.TestGroups; g != nil {
			logf("  test:      %s (%d examples in %d groups, each scored by its examples' probabilities' %s, evaluated after every epoch)\n", name, cfg.Test.Len(), len(g.Names), g.Combine)
		} else {
			logf("  test:      %s (%d examples, evaluated after every epoch)\n", name, cfg.Test.Len())
		}
	}
	if ckpt != nil {
		logf("  resuming:  from %s at step %d (epoch %d)\n", ckptPath, ckpt.Step, ckpt.Epoch+1)
		switch {
		case ckpt.Average == nil && set.EMADecay > 0:
			logf("  resuming:  the checkpoint holds no average of the parameters: it starts from the checkpoint's weights\n")
		case ckpt.Average != nil && set.EMADecay == 0:
			logf("  resuming:  without --ema: the checkpoint's average of the parameters is dropped, the parameters themselves are evaluated and exported\n")
		}
	}
	logf("  (losses and accuracies on training data are not private outputs)\n")

	rep := &Report{Settings: set, Device: devName, TF32: tf32, Plan: rp, NormCheck: normCheck, FeatureCache: fcRep, Output: cfg.Out, Checkpoint: ckptPath,
		Note: "train_loss, clipped_fraction and non_finite are computed on training data and are not private outputs"}
	if cfg.DryRun {
		return dryRun(cfg, rep, acct, q, steps-int(stepOf(ckpt)), logf)
	}
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
		lastGood = ckptPath
	}
	// save writes the checkpoint after epochs completed epochs and
	// inEpoch steps of the next.
	lastSave := time.Now()
	save := func(epochs, inEpoch int) error {
		if ckptPath == "" {
			return nil
		}
		sb, _ := json.Marshal(set)
		eb, _ := json.Marshal(rep.Epochs)
		// The checkpoint reads the parameters on the host: the
		// initializers, brought up to date with the device.
		if err := eng.SyncParams(); err != nil {
			return err
		}
		avg, err := eng.HostAverage()
		if err != nil {
			return err
		}
		c := &dpengine.Checkpoint{Settings: sb, Step: step, Epoch: epochs, EpochStep: inEpoch, Accountant: acct.State(),
			Seeded: set.Seed != nil, ParamNames: eng.ParamNames(), Params: eng.HostParams(), Optimizer: opt.State(),
			Average: avg, AverageSteps: eng.AverageSteps(), Extra: eb}
		if set.ClipQuantile > 0 {
			c.ClipNorm = eng.ClipNorm()
		}
		if set.Seed != nil {
			c.SourceStream = src.Stream()
		}
		if err := dpengine.WriteCheckpoint(ckptPath, c); err != nil {
			return err
		}
		lastGood, lastSave = ckptPath, time.Now()
		return nil
	}
	if split != nil {
		// From here on the data are the frozen part's outputs.
		train, test, ok, err := cacheFeatures(&cfg, split, fcRep, set.InputShape, logf)
		if err != nil {
			return nil, fmt.Errorf("%s: caching the frozen part's outputs: %w", set.Model, err)
		}
		if !ok {
			if err := save(epoch, epochStep); err != nil {
				return nil, fmt.Errorf("interrupted, and saving the checkpoint failed: %w", err)
			}
			return nil, &Interrupted{ckptPath}
		}
		if cfg.FeatureStore == nil {
			defer train.close()
		}
		cfg.Train = train
		if test != nil {
			defer test.close()
			cfg.Test = test
		}
		if cfg.Score != nil {
			score, owned, ok, err := scoreFeatures(&cfg, split, fcRep, set.InputShape, logf)
			if err != nil {
				return nil, fmt.Errorf("%s: caching the frozen part's outputs over the data to score: %w", set.Model, err)
			}
			if !ok {
				if err := save(epoch, epochStep); err != nil {
					return nil, fmt.Errorf("interrupted, and saving the checkpoint failed: %w", err)
				}
				return nil, &Interrupted{ckptPath}
			}
			if owned {
				defer score.close()
			}
			cfg.Score = score
		}
	}
	var scoreEv *Evaluator
	if cfg.Score != nil {
		if scoreEv, err = NewEvaluatorOn(cfg.Device, engG, engShape, min(cfg.EvalBatch, max(cfg.Score.Len(), 1))); err != nil {
			return nil, err
		}
		if err := scoreEv.SetMultiLabel(set.MultiLabel); err != nil {
			return nil, err
		}
	}
	var ev *Evaluator
	if cfg.Test != nil {
		if ev, err = NewEvaluatorOn(cfg.Device, engG, engShape, min(cfg.EvalBatch, max(cfg.Test.Len(), 1))); err != nil {
			return nil, err
		}
		if err := ev.SetMultiLabel(set.MultiLabel); err != nil {
			return nil, err
		}
	}
	emit := func(e Event) {
		if cfg.Events != nil {
			e.Epochs, e.StepsPerEpoch, e.Step, e.Engine = set.Epochs, stepsPerEpoch, step, eng
			e.acct, e.delta, e.nonPrivate = acct, delta, set.NonPrivate
			e.PerUser = groups != nil
			cfg.Events(e)
		}
	}
	// The batch splits into data examples and gradient canaries; the
	// buffers are reused from step to step.
	var batch, real, rows []int
	var canaries []dpengine.DiracCanary
	for ; epoch < set.Epochs; epoch++ {
		t0 := time.Now()
		var lossSum float64
		var seen, clipped, nonFinite, canarySeen int
		if sd, ok := cfg.Train.(sourced); ok {
			// The samples are in memory; a file rewritten under a running
			// job means its checkpoint would resume on other data.
			if err := sd.CheckSources(); err != nil {
				return nil, fmt.Errorf("epoch %d: %w; stopping (the checkpoint holds the run so far)", epoch+1, err)
			}
		}
		emit(Event{Kind: EpochStart, Epoch: epoch, EpochStep: epochStep})
		for ; epochStep < stepsPerEpoch; epochStep++ {
			if cfg.Stop != nil && cfg.Stop() {
				if err := save(epoch, epochStep); err != nil {
					return nil, fmt.Errorf("interrupted, and saving the checkpoint failed: %w", err)
				}
				return nil, &Interrupted{ckptPath}
			}
			batch = next(batch)
			aug := src.Rand()
			fill := func(idx []int, x []float32, y []int64) error { return cfg.Train.Fill(x, y, idx, aug) }
			switch {
			case groups != nil:
				// A sampled user's rows one after another (userRows),
				// each with its label, each augmented afresh.
				fill = func(idx []int, x []float32, y []int64) error {
					rows = rows[:0]
					for _, u := range idx {
						rows = userRows(rows, groups.members[u], views, aug)
					}
					return cfg.Train.Fill(x, y, rows, aug)
				}
			case views > 1:
				// A sample's views one after another, each augmented
				// afresh (Fill draws an augmentation a position).
				fill = func(idx []int, x []float32, y []int64) error {
					rows = rows[:0]
					for _, i := range idx {
						for range views {
							rows = append(rows, i)
						}
					}
					if err := cfg.Train.Fill(x, nil, rows, aug); err != nil {
						return err
					}
					for k, i := range idx {
						y[k] = int64(cfg.Train.Label(i))
					}
					return nil
				}
			}
			in := batch
			if len(gradCanaries) > 0 {
				real, canaries = real[:0], canaries[:0]
				for _, i := range batch {
					if i < nUnits {
						real = append(real, i)
					} else {
						canaries = append(canaries, gradCanaries[i-nUnits])
					}
				}
				in = real
				eng.InjectCanaries(canaries)
			}
			lr := sched.At(set.LR, int(step), set.Steps)
			opt.SetLR(lr)
			st, err := eng.Step(in, fill)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w (the last good checkpoint: %s)", step+1, err, lastGood)
			}
			if bad := firstNonFinite(eng); bad != "" {
				return nil, fmt.Errorf("step %d: parameter %q became NaN or infinite: the run %w (lower --lr or --clip); stopped, the last good checkpoint: %s", step+1, bad, ErrDiverged, lastGood)
			}
			if !set.NonPrivate {
				if err := acct.Step(set.Sigma, q, 1); err != nil {
					return nil, err
				}
			}
			if set.ClipQuantile > 0 {
				// An audit's gradient canaries are samples too: counted
				// among the batch, and among the clipped where they were.
				samples := st.Samples + len(canaries)
				frac := unclippedFraction(src, set.ClipCountNoise, samples-st.Clipped, samples, float64(L))
				if err := eng.SetClipNorm(nextClipNorm(eng.ClipNorm(), frac, set.ClipQuantile, set.ClipLR)); err != nil {
					return nil, fmt.Errorf("step %d: adaptive clipping: %w (lower --clip-lr)", step+1, err)
				}
			}
			step++
			lossSum += st.MeanLoss * float64(st.Samples)
			clipped, nonFinite = clipped+st.Clipped, nonFinite+st.NonFinite
			canarySeen += len(canaries) // an audit's gradient canaries: clipped like samples
			seen += st.Samples
			el := time.Since(t0).Seconds()
			// A checkpoint inside the epoch, when one is due (the
			// epoch's last step is followed by the epoch's own).
			due := cfg.CheckpointEvery > 0 && step%int64(cfg.CheckpointEvery) == 0 ||
				cfg.CheckpointInterval > 0 && time.Since(lastSave) >= cfg.CheckpointInterval
			if due && epochStep+1 < stepsPerEpoch {
				if err := save(epoch, epochStep+1); err != nil {
					return nil, fmt.Errorf("step %d: checkpoint: %w", step, err)
				}
			}
			emit(Event{Kind: StepDone, Epoch: epoch, EpochStep: epochStep + 1, Loss: lossSum / math.Max(float64(seen), 1), SamplesPerSecond: float64(seen) / math.Max(el, 1e-9), LR: lr, ClipNorm: eng.ClipNorm()})
		}
		el := time.Since(t0).Seconds()
		rec := EpochRecord{Epoch: epoch + 1, Steps: step, Epsilon: spent(acct, delta, set.NonPrivate), LR: sched.At(set.LR, int(step)-1, set.Steps),
			ClipNorm:  map[bool]float64{true: eng.ClipNorm()}[set.ClipQuantile > 0],
			TrainLoss: lossSum / math.Max(float64(seen), 1), Seconds: el, SamplesPerS: float64(seen) / math.Max(el, 1e-9),
			Clipped: float64(clipped) / math.Max(float64(seen+canarySeen), 1), NonFinite: nonFinite}
		if ev != nil {
			// The evaluator's plan loads the graph's initializers: the
			// released weights (the average, with --ema), up to date with
			// the engine's device.
			err := withReleased(eng, false, func() (err error) {
				if cfg.TestGroups != nil {
					rec.Test, err = ev.RunGrouped(cfg.Test, *cfg.TestGroups)
				} else {
					rec.Test, err = ev.Run(cfg.Test)
				}
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		rep.Epochs = append(rep.Epochs, rec)
		emit(Event{Kind: EpochDone, Epoch: epoch, EpochStep: stepsPerEpoch, Loss: rec.TrainLoss, SamplesPerSecond: rec.SamplesPerS, Record: &rec})
		unit, clippedOf := "samples", "gradients"
		if groups != nil {
			unit, clippedOf = "users", "users' gradients"
		}
		line := fmt.Sprintf("epoch %d/%d: train loss %.4f (not private), %.0f %s/s", epoch+1, set.Epochs, rec.TrainLoss, rec.SamplesPerS, unit)
		if !set.NonPrivate && !set.PerLayer {
			line += fmt.Sprintf(", %.0f %% of %s clipped (not private)", 100*rec.Clipped, clippedOf)
		}
		if rec.NonFinite > 0 {
			line += fmt.Sprintf(", %d non-finite gradients dropped", rec.NonFinite)
		}
		if rec.Test != nil {
			if rec.Test.MultiLabel {
				auc := "–"
				if rec.Test.AUC != nil {
					auc = fmt.Sprintf("%.4f", *rec.Test.AUC)
				}
				if rec.Test.MAP != nil {
					auc += fmt.Sprintf(", mAP %.4f", *rec.Test.MAP)
				}
				line += fmt.Sprintf(", test AUC %s, labels right %.2f %%, exact %.2f %% (loss %.4f%s)", auc, 100*rec.Test.Accuracy, 100*rec.Test.ExactMatch, rec.Test.Loss, map[bool]string{true: ", of the average"}[eng.Averaging()])
			} else {
				line += fmt.Sprintf(", test accuracy %.2f %% (loss %.4f%s)", 100*rec.Test.Accuracy, rec.Test.Loss, map[bool]string{true: ", of the average"}[eng.Averaging()])
			}
		}
		if !set.NonPrivate {
			line += fmt.Sprintf(", ε spent %.4g", rec.Epsilon)
		}
		if set.ClipQuantile > 0 {
			line += fmt.Sprintf(", clip norm %.4g", rec.ClipNorm)
		}
		logf("%s\n", line)
		// The epoch is complete: a resume starts the next one (recorded
		// as the epoch's own index, it repeated the epoch, running more
		// steps than σ was calibrated for).
		epochStep = 0
		if err := save(epoch+1, 0); err != nil {
			return nil, fmt.Errorf("epoch %d: checkpoint: %w", epoch+1, err)
		}
	}

	// Export. The graph's initializers get the trained weights from the
	// engine's device, the average with --ema: the exported model reads
	// them, and so does anyone reading cfg.Graph after Run (the audit's
	// black-box scoring).
	if err := withReleased(eng, true, func() error { return nil }); err != nil {
		return nil, err
	}
	if scoreEv != nil {
		score := scoreEv.Right
		if cfg.ScoreRanking {
			score = scoreEv.RankingPrecision
		}
		if rep.ScoreRight, err = score(cfg.Score); err != nil {
			return nil, fmt.Errorf("scoring: %w", err)
		}
	}
	if !set.NonPrivate {
		r, err := acct.Epsilon(delta)
		if err != nil {
			return nil, err
		}
		rep.Privacy, rep.Phases = &r, acct.State().Phases
	}
	if cfg.Out != "" {
		eg, err := rewrite.ExportGraph(g)
		if err != nil {
			return nil, fmt.Errorf("exporting: %w", err)
		}
		om, err := eg.ToONNX()
		if err != nil {
			return nil, fmt.Errorf("exporting: %w", err)
		}
		SetMetadata(om.Proto, set, rep.Privacy)
		if err := om.Save(cfg.Out, nil); err != nil {
			return nil, err
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	if cfg.Out != "" {
		if rep.Privacy != nil {
			logf("done: %s written; privacy spent ε = %.4g at δ = %.3g (%s accountant%s)\n", cfg.Out, rep.Privacy.Epsilon, delta, set.Accountant, map[bool]string{true: "; assumes Poisson sampling, NOT a guarantee for --sampling shuffle"}[set.Sampling == "shuffle"])
		} else {
			logf("done: %s written (no privacy)\n", cfg.Out)
		}
	}
	if cfg.Report != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := atomicfile.WriteBytes(cfg.Report, append(b, '\n')); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	return rep, nil
}

// withReleased runs fn with the graph's initializers holding the weights
// a run releases: the parameters, or with an average (Settings.EMADecay)
// the average. Unless keep, the parameters are put back after fn; on the
// CPU the initializers are the parameters the engine trains.
func withReleased(eng *dpengine.Engine, keep bool, fn func() error) error {
	if err := eng.SyncParams(); err != nil {
		return err
	}
	if !eng.Averaging() {
		return fn()
	}
	avg, err := eng.HostAverage()
	if err != nil {
		return err
	}
	host := eng.HostParams()
	var saved [][]float32
	if !keep {
		saved = make([][]float32, len(host))
		for k, h := range host {
			saved[k] = append([]float32(nil), h...)
		}
	}
	for k, h := range host {
		copy(h, avg[k])
	}
	err = fn()
	for k, p := range saved {
		copy(host[k], p)
	}
	return err
}

// SamplingPlan is how a run of Epochs epochs of expected logical batch
// BatchSize over n examples samples them (Sampling).
type SamplingPlan struct {
	// Batch is the expected logical batch L (BatchSize, at most n), and
	// SampleRate q = L/n each example's probability to join a step.
	Batch      int
	SampleRate float64
	// StepsPerEpoch is ⌈n/L⌉, an epoch's steps (a pass over the data in
	// expectation), and Steps the run's.
	StepsPerEpoch, Steps int
}

// Sampling returns the sampling of a run over n examples (n, batchSize
// and epochs positive): the sample rate and step count Run gives the
// accountant, which `dpfinetune privacy` takes from the same numbers.
func Sampling(n, batchSize, epochs int) SamplingPlan {
	L := min(batchSize, n)
	per := (n + L - 1) / L
	return SamplingPlan{Batch: L, SampleRate: float64(L) / float64(n), StepsPerEpoch: per, Steps: epochs * per}
}

// dryRun ends a Config.DryRun: the report of a run that stopped before
// its first step, with the ε its remaining steps would bring the
// accountant to, written where asked.
func dryRun(cfg Config, rep *Report, acct accountant.Accountant, q float64, remaining int, logf func(string, ...any)) (*Report, error) {
	rep.Output, rep.Checkpoint, rep.DryRun = "", "", true
	rep.Note = "dry run: stopped before the first step; privacy is what the run would spend"
	set := rep.Settings
	if !set.NonPrivate {
		planned, err := accountant.Restore(acct.State())
		if err == nil {
			err = planned.Step(set.Sigma, q, remaining)
		}
		var r accountant.Result
		if err == nil {
			r, err = planned.Epsilon(set.Delta)
		}
		if err != nil {
			return nil, err
		}
		rep.Privacy = &r
		logf("dry run: the settings, data and model check out; %d steps would spend ε = %.4g at δ = %.3g; nothing was trained or written\n", remaining, r.Epsilon, set.Delta)
	} else {
		logf("dry run: the settings, data and model check out; %d steps; nothing was trained or written\n", remaining)
	}
	if cfg.Report != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := atomicfile.WriteBytes(cfg.Report, append(b, '\n')); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	return rep, nil
}

// wrapOptimizer, set by tests only (export_test.go), wraps the optimizer
// Run builds: a test sees the learning rate of every step.
var wrapOptimizer func(dpengine.Optimizer) dpengine.Optimizer

func stepOf(c *dpengine.Checkpoint) int64 {
	if c == nil {
		return 0
	}
	return c.Step
}

// compatible says whether a run may continue a checkpoint: the same model,
// data, batch and clipping; epochs and ε may change (the accountant then
// composes the phases).
func compatible(prev, cur Settings) error {
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
	unit := func(s Settings) string { return cmp.Or(s.PrivacyUnit, PrivacyUnitExample) }
	check("--privacy-unit", unit(prev), unit(cur))
	check("users", prev.Users, cur.Users)
	check("--examples-per-user", prev.ExamplesPerUser, cur.ExamplesPerUser)
	check("--non-private", prev.NonPrivate, cur.NonPrivate)
	check("input shape", prev.InputShape, cur.InputShape)
	check("multi-label", prev.MultiLabel, cur.MultiLabel)
	check("--class-weight", prev.ClassWeights, cur.ClassWeights)
	check("--pos-weight", prev.PosWeight, cur.PosWeight)
	check("the uncertain labels' soft targets (uncertain=)", prev.UncertainTargets, cur.UncertainTargets)
	lora := func(s Settings) string {
		if s.LoRA == nil {
			return "none"
		}
		return fmt.Sprintf("rank %d, alpha %g, target %q", s.LoRA.Rank, s.LoRA.Alpha, s.LoRA.Target)
	}
	check("--lora", lora(prev), lora(cur))
	if prev.DataSHA256 != "" && cur.DataSHA256 != "" && prev.DataSHA256 != cur.DataSHA256 {
		diffs = append(diffs, fmt.Sprintf("the training data changed (SHA-256 of the samples was %.12s…, now %.12s…)", prev.DataSHA256, cur.DataSHA256))
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, "; "))
	}
	return nil
}

// firstNonFinite returns the name of a parameter holding NaN or Inf,
// counted on the engine's device (Engine.NonFiniteParam): every step,
// without copying the model to the host.
func firstNonFinite(e *dpengine.Engine) string { return e.NonFiniteParam() }

// SetMetadata records the run in the model's metadata_props (keys with
// MetaPrefix; earlier ones are replaced).
func SetMetadata(p *onnxpb.ModelProto, s Settings, r *accountant.Result) {
	kv := map[string]string{
		"norm": s.Norm, "mode": s.Mode, "clip_norm": fmt.Sprint(s.Clip), "sample_rate": fmt.Sprint(s.SampleRate),
		"steps": fmt.Sprint(s.Steps), "noise": s.Noise, "data": s.Data,
	}
	if s.Resize != "" {
		kv["resize"] = s.Resize
	}
	if s.Window != "" {
		kv["window"] = s.Window
	}
	if s.Frame != "" {
		kv["frame"] = s.Frame
	}
	if s.Series {
		kv["series"] = "true"
	}
	if s.PrivacyUnit == PrivacyUnitUser {
		kv["privacy_unit"] = s.PrivacyUnit
		kv["users"] = fmt.Sprint(s.Users)
	}
	if s.AugmentMultiplicity > 1 {
		kv["augment_multiplicity"] = fmt.Sprint(s.AugmentMultiplicity)
	}
	if s.EMADecay > 0 {
		// The weights are the parameters' average, not the last step's.
		kv["ema_decay"] = fmt.Sprint(s.EMADecay)
	}
	if s.ClipQuantile > 0 {
		kv["clip_quantile"] = fmt.Sprint(s.ClipQuantile)
	}
	if s.LabelSmoothing > 0 {
		kv["label_smoothing"] = fmt.Sprint(s.LabelSmoothing)
	}
	if len(s.ClassWeights) > 0 {
		b, _ := json.Marshal(s.ClassWeights) // finite numbers always marshal
		kv["class_weights"] = string(b)
	}
	if len(s.PosWeight) > 0 {
		b, _ := json.Marshal(s.PosWeight) // finite numbers always marshal
		kv["pos_weight"] = string(b)
	}
	if len(s.UncertainTargets) > 0 {
		b, _ := json.Marshal(s.UncertainTargets)
		kv["uncertain_targets"] = string(b)
	}
	if s.MultiLabel {
		// predict and eval read the logits as labels decided each on its
		// own (a sigmoid each), not as one softmax.
		kv["multi_label"] = "true"
	}
	if l := s.LoRA; l != nil {
		// The adapters are merged into the weights: the model has the
		// layers it was exported with.
		kv["lora"] = fmt.Sprintf("rank %d, alpha %g, %d adapters merged into their weights", l.Rank, l.Alpha, l.Adapters)
	}
	if s.BatchNorm != "" {
		kv["batchnorm"] = s.BatchNorm
	}
	if len(s.ClassNames) > 0 {
		b, _ := json.Marshal(s.ClassNames) // strings always marshal
		kv["classes"] = string(b)
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
		if !strings.HasPrefix(e.GetKey(), MetaPrefix) {
			props = append(props, e)
		}
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	for _, k := range keys {
		props = append(props, &onnxpb.StringStringEntryProto{Key: proto.String(MetaPrefix + k), Value: proto.String(kv[k])})
	}
	p.MetadataProps = props
}

// FitBatch returns the largest physical batch in [1, limit] whose estimated
// peak memory in the given mode fits capBytes less its headroom (Usable),
// by bisection (the paper's Table 6 procedure). The estimate is
// rp.MemoryAt's: its activation term is the mode's compiled runtime plan
// where dpengine.MeasureActivations has measured it (as Run does), else
// the bound of every activation kept, which may pick a batch about half
// the one that fits.
func FitBatch(rp *rewrite.Plan, mode string, capBytes int64, limit int) (int, error) {
	mem := func(b int) int64 {
		for _, m := range rp.MemoryAt(int64(b)) {
			if m.Mode == mode {
				return m.Total
			}
		}
		return math.MaxInt64
	}
	usable := Usable(capBytes)
	if mem(1) > usable {
		return 0, fmt.Errorf("even a physical batch of 1 needs about %s in mode %s, over the %s of --max-memory %s it may fill (the rest is headroom for what the estimate leaves out)",
			FormatBytes(mem(1)), mode, FormatBytes(usable), FormatBytes(capBytes))
	}
	lo, hi := 1, limit
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if mem(mid) <= usable {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}

// Usable returns the part of a memory cap FitBatch fills with the
// estimated peak: nine tenths of it. The estimate counts the buffers of
// the compiled plan and of the engine, and leaves out what a run adds
// besides — a GPU library's own workspace (cuDNN's, up to 256 MiB), the
// engine's norm scratch beyond the estimate's transient term, the
// allocator's slack, host copies of the batch: 1 to 3 % of the CPU's heap
// on CIFAR-sized models, about 6.5 % of ResNet-50's bk step at batch 32 on
// an H100 (the emulated allocation log of docs/BENCHMARKS.md and cuDNN's
// workspace), for which the last tenth is kept.
func Usable(capBytes int64) int64 { return capBytes - capBytes/10 }

// FormatBytes writes a size in binary units ("1.5 GiB"), as every
// dpfinetune report does.
func FormatBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// spillDir is the folder of a feature cache on disk (Config.FeatureCacheDir).
func spillDir(cfg Config) string {
	switch {
	case cfg.FeatureCacheDir != "":
		return cfg.FeatureCacheDir
	case cfg.Checkpoint != "":
		return filepath.Dir(cfg.Checkpoint)
	case cfg.Out != "":
		return filepath.Dir(cfg.Out)
	}
	return os.TempDir()
}
