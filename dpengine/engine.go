package dpengine

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Mode is how per-sample gradients are clipped (DESIGN.md §4).
type Mode string

const (
	// NonDP trains without clipping or noise: the plain gradient.
	NonDP Mode = "nondp"
	// Instantiate materializes every per-sample gradient (Opacus-style) and
	// takes their weighted sum.
	Instantiate Mode = "instantiate"
	// Ghost computes every linear layer's norm with the ghost norm and the
	// clipped sum with a second backward pass on Σ C_i L_i (the paper §3).
	Ghost Mode = "ghost"
	// Mixed decides layer by layer between ghost norm and instantiation
	// (the paper's Algorithm 1) and takes the clipped sum from a second
	// backward pass.
	Mixed Mode = "mixed"
	// BK (book-keeping, Bu et al. 2023) decides norms layer by layer like
	// Mixed, keeps each layer's input and output gradient, and forms
	// Σ_i C_i a_iᵀg_i directly: one backward pass.
	BK Mode = "bk"
)

// Modes lists the clipping modes.
func Modes() []Mode { return []Mode{NonDP, Instantiate, Ghost, Mixed, BK} }

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown clipping mode %q (want nondp, instantiate, ghost, mixed or bk)", s)
}

// Config configures an Engine.
type Config struct {
	// Device runs the step: the plan's kernels and the DP operations
	// (runtime.DPOps; New fails on a device without them). Nil is the
	// CPU (runtime.OpenDevice names them).
	Device   runtime.Device
	Mode     Mode
	Clipping Clipping
	// PerLayer clips each parameter tensor separately with clip norm
	// R/√K (K trainable tensors), so that the total sensitivity is still
	// R. It needs a single-pass mode (bk, instantiate).
	PerLayer bool
	// NoiseMultiplier is σ: Gaussian noise of standard deviation σR is
	// added to the clipped sum once per logical batch.
	NoiseMultiplier float64
	// ExpectedBatch is the expected logical batch size q·n that the noisy
	// sum is divided by (DESIGN.md §5). Zero means: divide by the number
	// of samples actually in the batch (only allowed for NonDP).
	ExpectedBatch float64
	// PhysicalBatch is the number of samples one forward/backward pass
	// processes; logical batches are split into physical ones.
	PhysicalBatch int
	// Source draws the noise. Nil means a secure source.
	Source *Source
	// Optimizer applies the private gradient. Nil: gradients are computed
	// but parameters are not updated.
	Optimizer Optimizer
	// MaxMemory, if positive, bounds the compiled plan's buffers
	// (runtime.Options.MaxMemory), and the device's own memory beyond them
	// to a share of it (runtime.MemoryLimiter: a convolution library's
	// workspace); zero holds them to the machine's available memory.
	MaxMemory int64
	// EMADecay, in (0, 1), keeps an exponential moving average of the
	// parameters with decay β = EMADecay (and a warm-up: average.go),
	// updated after every step on the device: the weights a run
	// evaluates and exports (HostAverage). 0 keeps none. It needs an
	// Optimizer.
	EMADecay float64
	// LabelSmoothing, in [0, 1), trains on the cross-entropy against each
	// label smoothed to (1−α)·onehot + α/K (runtime.Plan.SetLabelSmoothing):
	// still one loss a sample, so the per-sample clipping and the
	// guarantee are those of the plain loss. 0 is the plain loss.
	LabelSmoothing float64
	// MultiLabel trains the multi-label loss head (runtime.Plan.SetMultiLabel):
	// each logit a label of its own, a sample's label the set of those
	// that apply as its int64 label (internal/labelset: its bits to 62
	// labels, an interned set's handle past them), its loss the binary
	// cross-entropy of the sigmoids averaged over the labels — one loss a
	// sample, clipped and noised as the softmax head's; LabelSmoothing
	// smooths each label's target towards ½.
	MultiLabel bool
	// RowLabels, where the plan reads several rows a sample
	// (rewrite.PlanOptions.Multiplicity), makes Fill write a label a row
	// (len(idx)·views) instead of a label a sample: a user's rows under
	// user-level privacy are different images, each with its own label.
	// The sample is still what is clipped: the mean of its rows'
	// gradients. Without views it changes nothing.
	RowLabels bool
	// ClassWeights, where set, weighs each sample's clipped gradient by
	// its class's weight, w_y ∈ [0, 1], one weight a class by label
	// (at most the model's K): the step adds Σ_i w_i·C_i·g_i, the clip
	// factor C_i computed from the unweighted gradient g_i. Weighing
	// after the clipping keeps a sample's contribution within the clip
	// norm (w ≤ 1), so the sensitivity, σ and ε are those of the plain
	// sum; weighing the loss before it would not rebalance anything,
	// because a clipped gradient's length is the clip norm whatever its
	// loss's weight. A sample of several rows (RowLabels: a user's
	// examples) weighs the mean of its rows' weights. In NonDP the
	// weights are the loss's (PyTorch's CrossEntropyLoss(weight=…)
	// summed). A label with no weight is an error; multi-label heads
	// take none.
	ClassWeights []float64
	// PosWeight, with MultiLabel, weighs each label's positive term of
	// the loss (runtime.Plan.SetPosWeight, PyTorch's BCEWithLogitsLoss
	// pos_weight): one weight a label, finite and non-negative. Still one
	// loss a sample, clipped as any; unlike ClassWeights it reshapes a
	// sample's gradient (its labels' terms against each other), so it acts
	// through the clipping. nil weighs every label 1.
	PosWeight []float64
	// UncertainTargets, with MultiLabel, gives the labels a sample ignores
	// (uncertain: internal/labelset's partial sets) a term against a soft
	// target (runtime.Plan.SetUncertainTargets): one a label in (0, 1),
	// or 0 to leave the label out. Still one loss a sample. nil leaves
	// every ignored label out.
	UncertainTargets []float64
}

// Engine trains a compiled model privately: feed it logical batches, it
// clips, noises and applies the update.
type Engine struct {
	cfg Config
	dev runtime.Device // cfg.Device, or the CPU: where the step's state lives (devmem.go)
	// batchSamples is set on a device of one worker with memory of its
	// own (a GPU): the rules that have a batched form take chunks of
	// samples at once there (matrixBatched, convBatched).
	batchSamples bool
	// sampleLoops counts the per-sample loops run where batchSamples is
	// set (countSampleLoop): each is a chain of small launches on a GPU
	// that a batched rule would replace; the tests hold it to zero on
	// the fixtures.
	sampleLoops int
	// convChunks counts the chunks of samples convBatched ran (the
	// tests: a pointwise convolution's unfolds nothing to count).
	convChunks int
	// sampleLib holds, per convolution asked (sampleGradsByLibrary),
	// whether the device's library forms its per-sample gradients
	// rather than convBatched's unfolding path.
	sampleLib map[*runtime.ConvShape]bool
	// normScratchPeak is the most floats the norm rules' scratch
	// (workerBufs) has held at once: the tests hold the estimate's
	// transient term (rewrite.EngineScratch) to it.
	normScratchPeak int64
	ops             runtime.DPOps // the DP operations of cfg.Device
	// lay are the device's graph operations (the GraphOps the plan
	// needs): the fills and copies of the step's device buffers, and the
	// gathers, scatters and derivatives the per-sample rules share with
	// the forward and backward passes.
	lay       runtime.GraphOps
	rp        *rewrite.Plan
	plan      *runtime.Plan
	sample    []int64 // per-sample input shape: (views, model's sample…) where views > 1
	sampleLen int
	// views is the number of augmented views of each sample the plan
	// reads (rewrite.Plan.Multiplicity; 1 without): the output has
	// views rows a sample, each with its own loss weighed 1/views.
	views int
	// avg is the parameters' exponential moving average (Config.EMADecay;
	// average.go) at runtime.BlockOffsets, as the accumulators, nil until
	// the first step or SetAverage; avgSteps the updates it has taken in.
	avg      *slot
	avgSteps int64

	params []*param
	// accumAll holds every parameter's accum in params' order at
	// runtime.BlockOffsets (the plan's parameter block's layout), and
	// psAll the per-sample gradients of those that keep them back to back:
	// each is cleared, noised or scaled in one call. paramAll is the
	// plan's parameter block (runtime.Plan.ParamBlock) where whole is
	// set: a device that takes whole slices, with the parameters in one
	// block in params' order, so that the noise and the optimizer update
	// run once over the blocks instead of once per parameter.
	accumAll, psAll, paramAll []float32
	accumList                 [][]float32 // {accumAll}, for noised
	// noiseBases are the accumulators' offsets in accumAll: the noise
	// positions of the parameters' elements on every device, whether it
	// draws over the block or tensor by tensor (noised).
	noiseBases []uint64
	psRuns     []psRun // psAll by size (layPerSample)
	// hookPS holds, by consumer output name, the hook buffers of the
	// runtime plan that hold per-sample gradients (arenaPerSample).
	hookPS map[string]*hookPS
	whole  bool
	byName map[string]*param
	groups map[string][]*useGroup // keyed by consumer output name
	// derived are the groups whose operand is computed from their
	// parameters (useGroup.derived), in the order of their consumers'
	// outputs and operands.
	derived []*useGroup
	hookErr error
	// bkScratch is book-keeping's weighted-sum scratch and normScratch the
	// per-worker scratch of the per-sample norms (unfolded inputs, Gram
	// matrices, instantiated gradients), each shared by all layers: hooks
	// and weighted sums run one layer at a time.
	bkScratch   []float32
	normScratch [][]float32
	// wsBufs are workerBufs' slices of the plan's workspace.
	wsBufs [][]float32
	// mapScratch is book-keeping's operand-shaped sum for a weight
	// reached through a path, before it is mapped back; gatherScratch the
	// parameter-shaped sum mapped back, before it is added (pathMap).
	mapScratch, gatherScratch []float32
	// stdCurrent says the standardized weights' statistics (stdState.
	// refresh) are of the parameters as they are: set by the first
	// physical batch of a logical batch, cleared when one begins — the
	// parameters change only between logical batches (the optimizer,
	// SetParams, a checkpoint), so that the physical batches after the
	// first skip the pass over W. stdRefreshes counts the passes (tests).
	stdCurrent   bool
	stdRefreshes int
	// stdGhostBuf is the ghost form's scratch of a standardized weight
	// (convStdGhost: the scaled output gradient, then the convolution by
	// x̂, and by ones), grown to the largest; stdOnes the ones; stdConvWS
	// the convolution by ones' workspace where the plan's is smaller.
	stdGhostBuf, stdOnes, stdConvWS []float32
	// pathRows holds a chunk of samples' gradients mapped back through a
	// path to one parameter (addPathRows).
	pathRows []float32
	// opScratch and opErrs are the elementwise groups' per-worker
	// buffers, shared by all groups (hooks run one at a time): a set per
	// group added up to hundreds of MB on MobileNetV2.
	opScratch []opScratch
	// affineScratch holds arithmeticBatch's per-sample gradients and
	// affineShape the shape it reduces to.
	affineScratch []float32
	affineShape   []int
	// blockShape is arithmeticBatch's [B, blocks, …] view of batch-block
	// activations.
	blockShape []int
	// biasPending is the bias's per-sample gradients normBatch took with
	// its node's scale's (one pass over the output gradient), waiting for
	// the bias's group, pendingGroup, later in the same hook event (hook
	// clears it at each event's start).
	biasPending  []float32
	pendingGroup *useGroup
	// rowNorms holds addSampleRows' per-sample squared norms, affineAcc
	// normBatch's float64 sums, biasShapes gemmBiasBatch's two shapes.
	rowNorms, affineAcc []float64
	// contractAcc holds einsumOperandBatch's float64 sums.
	contractAcc []float64
	biasShapes  [8]int
	opErrs      []error
	// noiseStd and noisePost are the noise of the logical batch that Step
	// draws together with the optimizer update (0: already drawn).
	noiseStd  float64
	noisePost float32
	// canaries are the gradient canaries of the next logical batch
	// (InjectCanaries).
	canaries []DiracCanary
	// canaryVal is the host scalar addCanaries adds to an accumulator.
	canaryVal [1]float32

	// foldOne is a one on the device, for summing a folded
	// convolution's rows per sample (sumRows).
	foldOne []float32

	// Per physical batch. x (the input batch, which Plan.SetInput copies
	// to the device), y (labels, which Plan.Loss copies in) and losses
	// (per-row step scalars, which Plan.Loss copies out) are host
	// memory by design; the others are device memory. y has a label a
	// sample, rowY one an output row (y itself with one view a sample).
	n      int // real samples in the current physical batch
	x      []float32
	y      []int64
	rowY   []int64
	losses []float32
	// weights are the loss weights of the physical batch's output rows
	// (1/views for a real sample's, 0 for padding): device memory, written
	// from the host staging weightsHost when the number of real samples
	// changes.
	weights     []float32
	weightsBuf  runtime.Buffer
	weightsHost []float32
	weightsN    int // real samples weights was written for (-1: never)
	// rowFactors are the second backward pass's loss weights where a
	// sample has several views: its clip factor over views, a row each,
	// expanded from the factors' shape (B, 1) to (B, views) (viewShapes).
	rowFactors []float32
	viewShapes [2][]int
	// unitWeights are the physical batch's samples' class weights
	// (Config.ClassWeights; 0 for padding), device memory written from
	// the host staging unitWeightsHost every physical batch: the clip
	// factors' multipliers. nil without class weights.
	unitWeights     []float32
	unitWeightsBuf  runtime.Buffer
	unitWeightsHost []float32
	normSq          []float64   // flat: per sample
	paramNormSq     []float64   // the parameters' param.normSq, one row each, in order
	factors         [][]float32 // per param (per-layer) or one shared slice

	// Per logical batch.
	samples   int
	lossSum   float64
	clipped   int
	nonFinite int
	// NonDP leaves the gradient where it costs the fewest passes over the
	// parameters: after a single physical batch in the plan's gradient
	// buffers (gradInPlan), and the division by the expected batch size
	// pending (gradScale ≠ 1) for the optimizer to apply as it reads the
	// gradient. settleGrad puts the finished gradient in accum.
	physCount  int
	gradInPlan bool
	gradScale  float32
}

// settle zeroes accum if no contribution has been written to it.
func (p *param) settle(lay runtime.LayoutOps) {
	if p.fresh {
		lay.Fill(0, p.accum)
		p.fresh = false
	}
}

// accumulate adds the clipped sum g to accum, or copies it there where
// accum holds nothing of this logical batch yet.
func (p *param) accumulate(ops runtime.DPOps, lay runtime.LayoutOps, g []float32) {
	if p.fresh {
		lay.Copy(g, p.accum)
		p.fresh = false
		return
	}
	ops.Add(g, p.accum)
}

// param is one trainable parameter.
type param struct {
	name string
	// data is the plan's device buffer of the parameter (runtime.Plan.Param).
	data  []float32
	shape []int
	accum []float32 // Σ C_i g_i over the logical batch (device memory)
	off   int       // accum's offset in accumAll (runtime.BlockOffsets)
	// fresh says accum holds nothing of this logical batch yet (stale
	// values, not zeros): the first contribution overwrites it instead of
	// adding, which spares book-keeping a clearing pass over every
	// parameter per logical batch (0.5 GB of writes on a VGG).
	fresh  bool
	normSq []float64 // per sample, this parameter's share
	// ps holds per-sample gradients (B × size) where a mode keeps them.
	ps []float32
	// linear keeps the data a book-keeping pass needs for Σ C_i g_i.
	linear []*linearState
}

// trainableOrder returns the trainable parameters in the order the plan
// and the engine keep them: in a DP mode those that keep per-sample
// gradients (needPerSample) first, by size (stable; those whose
// per-sample gradients are in hook buffers after the rest), then the others in
// the rewrite plan's order, so that each size's accumulators lie back to
// back in accumAll as their per-sample gradients do in psAll
// (layPerSample) and one product forms the clipped sums of a size
// (clipRuns). Checkpoints name their tensors, so the order is the
// engine's own.
func trainableOrder(cfg Config, rp *rewrite.Plan) []string {
	var keep, rest []*rewrite.Param
	for _, p := range rp.Params {
		switch {
		case p.Kind == rewrite.KindFrozen:
		case cfg.Mode != NonDP && needPerSample(cfg, p):
			keep = append(keep, p)
		default:
			rest = append(rest, p)
		}
	}
	// By size alone, wherever their per-sample gradients live
	// (arenaPerSample: a run of its own, between psAll's): the rows of
	// the per-parameter norms, and so the order in which a sample's
	// total adds them (SumNormRows), do not depend on it.
	sort.SliceStable(keep, func(i, j int) bool { return keep[i].Size < keep[j].Size })
	var names []string
	for _, p := range append(keep, rest...) {
		names = append(names, p.Name)
	}
	return names
}

// checkTF32 refuses TF32 convolutions (runtime.TF32Device) in the modes
// with a second backward pass. The clip bound holds on Σ_i C_i g_i only
// when each g_i is formed from the operands its norm was: bk and
// instantiate form both from the one pass's activations and output
// gradients, in float32 whatever the device's setting; ghost and mixed
// take the sum from a second pass whose TF32 products round the scaled
// output gradients C_i·dy_i afresh, so a sample's share of the sum could
// exceed the clip norm by TF32's error, about 10⁻³ of it.
func checkTF32(cfg Config) error {
	if cfg.Device != nil && runtime.TF32On(cfg.Device) && (cfg.Mode == Ghost || cfg.Mode == Mixed) {
		return fmt.Errorf("dpengine: TF32 convolutions on %s with mode %s: its second backward pass would round each sample's clipped gradient afresh, beyond what its norm bounded; use bk or instantiate, or turn TF32 off", cfg.Device.Name(), cfg.Mode)
	}
	return nil
}

// New builds an engine for g, rewritten and planned by rewrite.Prepare (rp),
// compiling it for cfg.PhysicalBatch samples.
func New(g *graph.Graph, rp *rewrite.Plan, cfg Config) (*Engine, error) {
	if cfg.PhysicalBatch <= 0 {
		return nil, fmt.Errorf("dpengine: physical batch %d must be positive", cfg.PhysicalBatch)
	}
	if cfg.Mode == "" {
		cfg.Mode = BK
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if cfg.PerLayer && (cfg.Mode == Ghost || cfg.Mode == Mixed) {
		return nil, fmt.Errorf("dpengine: per-layer clipping needs one clip factor per layer, which the second backward pass of mode %s cannot apply; use bk or instantiate", cfg.Mode)
	}
	if err := checkTF32(cfg); err != nil {
		return nil, err
	}
	if err := checkEMADecay(cfg.EMADecay); err != nil {
		return nil, err
	}
	if cfg.EMADecay > 0 && cfg.Optimizer == nil {
		return nil, errors.New("dpengine: an average of the parameters (EMADecay) needs an Optimizer: without one the parameters never change")
	}
	if g == nil || rp == nil {
		return nil, errors.New("dpengine: nil graph or plan")
	}
	// Every DP operation of the step runs on the device: it must have
	// them before any work.
	ops, err := runtime.DPOpsOf(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if l, ok := cfg.Device.(runtime.MemoryLimiter); ok && cfg.MaxMemory > 0 {
		l.LimitMemory(cfg.MaxMemory)
	}
	if cfg.Mode != NonDP {
		if err := cfg.Clipping.Validate(); err != nil {
			return nil, fmt.Errorf("dpengine: %w", err)
		}
		if cfg.NoiseMultiplier < 0 || math.IsNaN(cfg.NoiseMultiplier) || math.IsInf(cfg.NoiseMultiplier, 0) {
			return nil, fmt.Errorf("dpengine: noise multiplier %v must be a finite non-negative number", cfg.NoiseMultiplier)
		}
		if !(cfg.ExpectedBatch > 0) {
			return nil, errors.New("dpengine: a DP mode needs the expected logical batch size (q·n) to divide the noisy sum by")
		}
		if err := rp.Err(); err != nil {
			return nil, fmt.Errorf("dpengine: the model mixes samples, per-sample clipping would be unsound: %w", err)
		}
	}
	if cfg.Source == nil {
		cfg.Source = NewSecureSource()
	}
	cg, err := rp.Compile(g, int64(cfg.PhysicalBatch))
	if err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	opts := compileOptions(cfg, rp)
	if len(opts.Trainable) == 0 {
		return nil, errors.New("dpengine: no trainable parameter (all frozen)")
	}
	plan, err := runtime.Compile(cg, opts)
	if err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if err := plan.SetLabelSmoothing(cfg.LabelSmoothing); err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if err := plan.SetMultiLabel(cfg.MultiLabel); err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if err := plan.SetPosWeight(cfg.PosWeight); err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if err := plan.SetUncertainTargets(cfg.UncertainTargets); err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if err := checkClassWeights(cfg, plan); err != nil {
		return nil, err
	}
	dev := cfg.Device
	if dev == nil {
		dev = runtime.CPU{}
	}
	gops, err := runtime.GraphOpsOf(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("dpengine: %w", err)
	}
	if so, ok := cfg.Optimizer.(scaledOptimizer); ok {
		so.setDevice(ops)
		so.setMemory(dev)
	}
	e := &Engine{cfg: cfg, dev: dev, ops: ops, lay: gops, rp: rp, plan: plan, byName: map[string]*param{}, groups: map[string][]*useGroup{}, gradScale: 1, weightsN: -1}
	e.batchSamples = batchesSamples(dev, ops.Workers())
	x, shape := plan.Input(0)
	if len(shape) == 0 || shape[0] != cfg.PhysicalBatch {
		return nil, fmt.Errorf("dpengine: compiled input shape %v does not start with the physical batch %d", shape, cfg.PhysicalBatch)
	}
	for _, d := range shape[1:] {
		e.sample = append(e.sample, int64(d))
	}
	e.sampleLen = len(x) / cfg.PhysicalBatch
	e.views = int(max(rp.Multiplicity, 1))
	B := cfg.PhysicalBatch
	rows := B * e.views
	e.x = make([]float32, len(x))
	e.y = make([]int64, B)
	e.rowY = e.y
	if e.views > 1 {
		e.rowY = make([]int64, rows)
	}
	e.losses = make([]float32, rows)
	e.weightsHost = make([]float32, rows)
	if e.weightsBuf, err = runtime.AdoptHost(dev, e.weightsHost); err != nil {
		return nil, fmt.Errorf("dpengine: the loss weights: %w", err)
	}
	e.weights = e.weightsBuf.Floats()
	if len(cfg.ClassWeights) > 0 {
		e.unitWeightsHost = make([]float32, B)
		if e.unitWeightsBuf, err = runtime.AdoptHost(dev, e.unitWeightsHost); err != nil {
			return nil, fmt.Errorf("dpengine: the class weights: %w", err)
		}
		e.unitWeights = e.unitWeightsBuf.Floats()
	}
	if e.normSq, err = e.alloc64(B, "the per-sample squared norms"); err != nil {
		return nil, err
	}
	// The parameters' per-sample squared norms, a row of B each in one
	// block: cleared and summed into the samples' totals in one call each.
	if e.paramNormSq, err = e.alloc64(max(1, len(plan.Params())*B), "the parameters' per-sample squared norms"); err != nil {
		return nil, err
	}
	e.paramNormSq = e.paramNormSq[:len(plan.Params())*B]
	sizes := make([]int, len(plan.Params()))
	for k, name := range plan.Params() {
		data, _ := plan.Param(name)
		sizes[k] = len(data)
	}
	offs, total := runtime.BlockOffsets(sizes)
	if e.accumAll, err = e.alloc(total, "the gradient accumulators"); err != nil {
		return nil, err
	}
	e.accumAll = e.accumAll[:total:total]
	e.accumList = [][]float32{e.accumAll}
	// The block holds the parameters in Params' order at BlockOffsets (its
	// contract), the accumulators' layout.
	e.paramAll = plan.ParamBlock()
	e.whole = e.batchSamples && len(e.paramAll) == total
	e.noiseBases = make([]uint64, len(sizes))
	for k, name := range plan.Params() {
		data, sh := plan.Param(name)
		off := offs[k]
		p := &param{name: name, data: data, shape: sh, off: off, accum: e.accumAll[off : off+len(data) : off+len(data)]}
		e.noiseBases[k] = uint64(off)
		p.normSq = e.paramNormSq[k*B : (k+1)*B : (k+1)*B]
		e.params = append(e.params, p)
		e.byName[name] = p
	}
	if cfg.Mode != NonDP {
		if err := e.buildUses(cg); err != nil {
			return nil, err
		}
	}
	nf := 1
	if cfg.PerLayer {
		nf = len(e.params)
	}
	if e.views > 1 && (cfg.Mode == Ghost || cfg.Mode == Mixed) {
		if e.rowFactors, err = e.alloc(rows, "the views' clip factors"); err != nil {
			return nil, err
		}
		e.viewShapes = [2][]int{{B, 1}, {B, e.views}}
	}
	e.factors = make([][]float32, nf)
	for i := range e.factors {
		if e.factors[i], err = e.alloc(B, "clip factors"); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Plan returns the compiled runtime plan.
func (e *Engine) Plan() *runtime.Plan { return e.plan }

// SampleShape returns the shape of one input sample: with augmentation
// multiplicity (rewrite.PlanOptions.Multiplicity) its views, (views,
// model's sample…), which a Fill writes one after another.
func (e *Engine) SampleShape() []int64 { return e.sample }

// MultiLabel reports whether the engine's loss head is multi-label
// (Config.MultiLabel): its labels are label sets (internal/labelset).
func (e *Engine) MultiLabel() bool { return e.cfg.MultiLabel }

// Views returns the number of augmented views of each sample the engine
// reads (1 without augmentation multiplicity).
func (e *Engine) Views() int { return e.views }

// ParamNames returns the trainable parameters in plan order.
func (e *Engine) ParamNames() []string {
	out := make([]string, len(e.params))
	for i, p := range e.params {
		out[i] = p.name
	}
	return out
}

// Params returns the trainable tensors in ParamNames order: the views of
// their device buffers, which the step updates in place and only the
// device's operations may dereference (on the CPU and the reference
// backend they are the graph's initializers). A host reader calls
// SyncParams and reads HostParams instead.
func (e *Engine) Params() [][]float32 {
	out := make([][]float32, len(e.params))
	for i, p := range e.params {
		out[i] = p.data
	}
	return out
}

// SyncParams copies the trainable parameters from the device into the
// graph's initializers (runtime.Plan.SyncParams; nothing to copy on the
// CPU). Every host reader of parameters calls it first: checkpoint save,
// export, evaluation by another plan, audits.
func (e *Engine) SyncParams() error {
	if err := e.plan.SyncParams(); err != nil {
		return fmt.Errorf("dpengine: %w", err)
	}
	return nil
}

// LoadParams copies the graph's initializers into the engine's device
// buffers (runtime.Plan.LoadParams): after a checkpoint restore or any
// other change of the initializers on the host, before the next Step.
func (e *Engine) LoadParams() error {
	if err := e.plan.LoadParams(); err != nil {
		return fmt.Errorf("dpengine: %w", err)
	}
	return nil
}

// HostParams returns the trainable tensors' host storage, the graph's
// initializers, in ParamNames order: current after SyncParams, and what
// LoadParams reads.
func (e *Engine) HostParams() [][]float32 {
	out := make([][]float32, len(e.params))
	for i, p := range e.params {
		out[i] = e.plan.HostParam(p.name)
	}
	return out
}

// Fill writes the inputs (len(idx)·sample floats) and labels of the given
// examples into x and y: a label an example, or a label a row of the
// example's views where Config.RowLabels is set. It must not change the
// engine's parameters: a logical batch's physical batches share what is
// derived from them (Engine.stdCurrent).
type Fill func(idx []int, x []float32, y []int64) error

// StepStats summarizes one logical batch. Losses are on training data and
// are not private outputs.
type StepStats struct {
	Samples   int     // examples in the logical batch
	MeanLoss  float64 // mean per-sample loss (not private)
	Clipped   int     // samples whose clip factor was below 1
	NonFinite int     // samples with a NaN/Inf gradient norm (factor 0)
}

// Step runs one logical batch: every physical batch's forward and backward,
// per-sample clipping, one draw of noise, division by the expected batch
// size, and the optimizer update. An empty batch still adds noise and
// updates, as the accountant assumes. A device that fails under the step
// (out of memory for an operation's scratch) is an error, not a crash.
func (e *Engine) Step(batch []int, fill Fill) (_ StepStats, err error) {
	defer runtime.CatchDeviceFault(&err, "dpengine: step")
	if e.Averaging() {
		// Before any gradient: a failure here leaves no noise-free
		// gradient behind (see the update below).
		if err := e.beginAverage(); err != nil {
			return StepStats{}, err
		}
	}
	e.beginLogical()
	for _, phys := range Split(batch, e.cfg.PhysicalBatch) {
		if err := e.physical(phys, fill); err != nil {
			return StepStats{}, err
		}
	}
	grads, err := e.finishLogical(len(batch))
	e.canaries = nil
	if err != nil {
		return StepStats{}, err
	}
	if opt := e.cfg.Optimizer; opt != nil {
		if so, ok := opt.(scaledOptimizer); ok && e.noiseStd > 0 {
			// The noise is drawn even if the update cannot start: the
			// gradient Gradient returns must never be noise-free.
			var upd func(k, lo, hi int)
			if e.whole {
				// One piece: the blocks' noise, then their update.
				if whole, berr := so.beginBlock(e.Params(), grads, e.paramAll, e.accumAll, 1); berr != nil {
					err = berr
				} else {
					upd = func(_, lo, hi int) { whole(lo, hi) }
				}
			} else if upd, err = so.begin(e.Params(), grads, 1); err != nil {
				upd = nil
			}
			xs, bases := e.noised(grads, !e.whole)
			e.cfg.Source.addGaussianScaledThen(e.ops, e.noiseStd, e.noisePost, xs, bases, e.batchSamples, upd)
			e.noiseStd = 0
		} else if ok && e.whole && e.cfg.Mode == NonDP {
			// The gradients are one block too (the plan's, or the
			// accumulators'): one update over the blocks.
			gAll := e.accumAll
			if e.gradInPlan {
				gAll = e.plan.GradBlock()
			}
			var whole func(lo, hi int)
			if whole, err = so.beginBlock(e.Params(), grads, e.paramAll, gAll, e.gradScale); err == nil {
				whole(0, len(gAll))
			}
		} else if ok {
			err = so.stepScaled(e.Params(), grads, e.gradScale)
		} else {
			e.settleGrad()
			err = opt.Step(e.Params(), e.accums())
		}
		if err != nil {
			return StepStats{}, err
		}
		if e.Averaging() {
			e.averageParams()
		}
	}
	st := StepStats{Samples: e.samples, Clipped: e.clipped, NonFinite: e.nonFinite}
	if e.samples > 0 {
		st.MeanLoss = e.lossSum / float64(e.samples)
	}
	return st, nil
}

func (e *Engine) beginLogical() {
	e.stdCurrent = false
	if e.cfg.Mode != NonDP { // NonDP's first physical batch overwrites accum
		for _, p := range e.params {
			p.fresh = true
		}
	}
	e.samples, e.lossSum, e.clipped, e.nonFinite = 0, 0, 0, 0
	e.physCount, e.gradInPlan, e.gradScale = 0, false, 1
}

// accums returns every parameter's accumulator.
func (e *Engine) accums() [][]float32 {
	out := make([][]float32, len(e.params))
	for k, p := range e.params {
		out[k] = p.accum
	}
	return out
}

// settleGrad finishes what is left pending: an accumulator no physical
// batch wrote is zeroed; NonDP's gradient moves from the plan to accum, and
// the pending scale is applied.
func (e *Engine) settleGrad() {
	for _, p := range e.params {
		p.settle(e.lay)
	}
	if e.gradInPlan {
		for _, p := range e.params {
			e.lay.Copy(e.plan.Grad(p.name), p.accum)
		}
		e.gradInPlan = false
	}
	if e.gradScale != 1 {
		for _, p := range e.params {
			e.ops.Scale(e.gradScale, p.accum)
		}
		e.gradScale = 1
	}
}

// physical processes up to PhysicalBatch examples: the batch is padded
// with zero inputs whose weight and clip factor are 0.
func (e *Engine) physical(idx []int, fill Fill) error {
	B := e.cfg.PhysicalBatch
	n := len(idx)
	v := e.views
	clear(e.x[n*e.sampleLen:])
	ys := e.y[:n]
	if e.cfg.RowLabels && v > 1 {
		// The padding rows' labels are 0: their loss weighs 0.
		clear(e.rowY[n*v:])
		ys = e.rowY[:n*v]
	} else {
		clear(e.y[n:])
	}
	if err := fill(idx, e.x[:n*e.sampleLen], ys); err != nil {
		return err
	}
	e.n = n
	if err := e.plan.SetInput(0, e.x); err != nil {
		return err
	}
	if err := e.plan.Forward(); err != nil {
		return err
	}
	if v > 1 && !e.cfg.RowLabels {
		for r := range e.rowY {
			e.rowY[r] = e.y[r/v]
		}
	}
	if err := e.plan.Loss(e.rowY, e.losses); err != nil {
		return err
	}
	// A sample's loss is the mean of its views' (each row weighs 1/v in
	// the backward pass): its gradient is the mean of theirs, clipped as
	// one sample's.
	for i := 0; i < n; i++ {
		var l float64
		for r := i * v; r < (i+1)*v; r++ {
			lr := float64(e.losses[r])
			if math.IsNaN(lr) || math.IsInf(lr, 0) {
				if v > 1 {
					return fmt.Errorf("dpengine: non-finite loss %v for example %d (view %d)", lr, idx[i], r-i*v)
				}
				return fmt.Errorf("dpengine: non-finite loss %v for example %d", lr, idx[i])
			}
			l += lr
		}
		e.lossSum += l / float64(v)
	}
	e.samples += n
	if e.unitWeights != nil {
		if err := e.weighClasses(n); err != nil {
			return err
		}
	}
	// In NonDP the class weights are the loss's, a row's label's weight
	// over views, written every batch: the labels change though n does not.
	weighRows := e.unitWeights != nil && e.cfg.Mode == NonDP
	if n != e.weightsN || weighRows {
		w := float32(1 / float64(v))
		for r := range e.weightsHost {
			e.weightsHost[r] = 0
			switch {
			case r >= n*v:
			case weighRows:
				e.weightsHost[r] = float32(e.cfg.ClassWeights[e.rowY[r]] / float64(v))
			default:
				e.weightsHost[r] = w
			}
		}
		if !runtime.SameMemory(e.weights, e.weightsHost) {
			if err := e.dev.CopyIn(e.weightsBuf, 0, e.weightsHost); err != nil {
				return fmt.Errorf("dpengine: the loss weights: %w", err)
			}
		}
		e.weightsN = n
	}
	if e.cfg.Mode == NonDP {
		// The first physical batch's gradient stays in the plan; a second
		// one moves it to accum before overwriting it, and adds its own.
		if e.physCount == 1 {
			e.settleGrad()
		}
		if err := e.plan.Backward(e.weights, nil); err != nil {
			return err
		}
		if e.physCount == 0 {
			e.gradInPlan = true
		} else {
			// Split over the cores: on a 10⁸-parameter model this pass
			// per physical batch is as long as the batch's GEMMs.
			for _, p := range e.params {
				e.ops.Axpy(1, e.plan.Grad(p.name), p.accum)
			}
		}
		e.physCount++
		return nil
	}
	return e.clipPhysical(B)
}

// finishLogical returns the private gradient (Σ C_i g_i + σR·N(0, I)) /
// E[batch], or for NonDP the mean gradient times 1/e.gradScale (the
// division is left to the optimizer, or to settleGrad).
func (e *Engine) finishLogical(size int) ([][]float32, error) {
	grads := make([][]float32, len(e.params))
	if e.cfg.Mode == NonDP {
		div := e.cfg.ExpectedBatch
		if div <= 0 {
			div = float64(max(size, 1))
		}
		e.gradScale = float32(1 / div)
		for k, p := range e.params {
			switch {
			case e.gradInPlan:
				grads[k] = e.plan.Grad(p.name)
			case e.physCount == 0: // an empty batch
				e.lay.Fill(0, p.accum)
				grads[k] = p.accum
			default:
				grads[k] = p.accum
			}
		}
		return grads, nil
	}
	std := e.cfg.NoiseMultiplier * e.cfg.Clipping.R
	inv := float32(1 / e.cfg.ExpectedBatch)
	for k, p := range e.params {
		p.settle(e.lay) // an empty logical batch: noise alone
		grads[k] = p.accum
	}
	e.addCanaries()
	if std > 0 {
		// Noise and the division by the expected batch size in one pass;
		// with an optimizer that updates piece by piece, Step runs that
		// pass with the update of each piece right behind its noise.
		if _, ok := e.cfg.Optimizer.(scaledOptimizer); ok {
			e.noiseStd, e.noisePost = std, inv
			return grads, nil
		}
		xs, bases := e.noised(grads, false)
		e.cfg.Source.addGaussianScaledThen(e.ops, std, inv, xs, bases, e.batchSamples, nil)
	} else {
		xs, _ := e.noised(grads, false)
		for _, g := range xs {
			e.ops.Scale(inv, g)
		}
	}
	return grads, nil
}

// noised returns the slices the noise and the division by the expected
// batch size run over, and their noise positions: the accumulators'
// block, one call, where the device takes whole slices, unless an update
// follows each piece tensor by tensor (perTensor); else the private
// gradients grads, which are the accumulators, at their offsets in the
// block (noiseBases). The noise is positional, so its bits are the same
// either way; the block's padding draws noise no parameter reads.
func (e *Engine) noised(grads [][]float32, perTensor bool) ([][]float32, []uint64) {
	if e.batchSamples && !perTensor {
		return e.accumList, nil
	}
	return grads, e.noiseBases
}

// ClippedSum runs one physical batch of n ≤ PhysicalBatch examples (x holds
// n samples, y n labels, or with Config.RowLabels n·views: a label a row)
// and returns, per parameter, the noise-free clipped sum Σ_i C_i g_i
// (Σ_i w_i·C_i·g_i with Config.ClassWeights), with the per-sample total
// norms (of the unweighted g_i). It is the engine's output before noise:
// every DP mode must give the same result.
func (e *Engine) ClippedSum(x []float32, y []int64) (_ map[string][]float32, _ []float64, err error) {
	defer runtime.CatchDeviceFault(&err, "dpengine: clipped sum")
	n := len(y)
	if e.cfg.RowLabels && e.views > 1 && len(y) == len(x)/max(e.sampleLen, 1)*e.views {
		n = len(y) / e.views // a label a row (Config.RowLabels)
	}
	if n > e.cfg.PhysicalBatch || len(x) != n*e.sampleLen {
		return nil, nil, fmt.Errorf("dpengine: %d samples of %d floats do not fit physical batch %d of %v", n, len(x)/max(n, 1), e.cfg.PhysicalBatch, e.sample)
	}
	e.beginLogical()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	err = e.physical(idx, func(_ []int, xs []float32, ys []int64) error {
		copy(xs, x)
		if len(ys) > len(y) { // RowLabels: a sample's label on each of its rows
			for r := range ys {
				ys[r] = y[r/e.views]
			}
			return nil
		}
		copy(ys, y)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	e.settleGrad()
	// Host copies through the device's operations: the sums by its copy,
	// the squared norms by its float64 addition onto zeros (exact).
	out := map[string][]float32{}
	for _, p := range e.params {
		out[p.name] = make([]float32, len(p.accum))
		e.lay.Copy(p.accum, out[p.name])
	}
	norms := make([]float64, n)
	e.ops.AddNormSq(e.normSq[:n], norms)
	for i := range norms {
		norms[i] = runtime.SampleNorm(norms[i])
	}
	return out, norms, nil
}

// Gradient returns the private gradient of parameter name from the last
// Step (noisy and divided by the expected batch size), or nil: the view of
// its device buffer, like Params.
func (e *Engine) Gradient(name string) []float32 {
	if p := e.byName[name]; p != nil {
		e.settleGrad()
		return p.accum
	}
	return nil
}

// CopyGradient copies len(dst) elements of the private gradient of
// parameter name from the last Step, from element off on, into the host
// slice dst through the device's copy (Gradient is the device view
// itself); false if there is no such parameter or range.
func (e *Engine) CopyGradient(name string, off int, dst []float32) bool {
	p := e.byName[name]
	if p == nil || off < 0 || off+len(dst) > len(p.accum) {
		return false
	}
	e.settleGrad()
	e.lay.Copy(p.accum[off:off+len(dst)], dst)
	return true
}

// NonFiniteParam returns the name of the first trainable parameter (in
// ParamNames' order) holding a NaN or infinite element, or "": counted on
// the device (VectorOps.CountNonFinite), one scalar per parameter, so
// that a check after every step reads no parameter on the host; where the
// parameters are one block (a GPU), one count over the block, and the
// search by parameter only when it finds one.
func (e *Engine) NonFiniteParam() string {
	if e.whole && e.ops.CountNonFinite(e.paramAll) == 0 {
		return ""
	}
	for _, p := range e.params {
		if e.ops.CountNonFinite(p.data) > 0 {
			return p.name
		}
	}
	return ""
}

// ParamNorms returns, after ClippedSum or a Step's last physical batch, the
// per-sample gradient norm of each parameter for the real samples.
func (e *Engine) ParamNorms() map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range e.params {
		v := make([]float64, e.n) // a host copy: the device's float64 addition onto zeros (exact)
		e.ops.AddNormSq(p.normSq[:e.n], v)
		for i := range v {
			v[i] = runtime.SampleNorm(v[i])
		}
		out[p.name] = v
	}
	return out
}

// Decisions returns, keyed "parameter@node", each linear use's
// ghost/instantiate decision as this engine applies it: the plan's in mixed
// and bk mode, ghost everywhere in ghost mode, instantiate in instantiate
// mode and for shared parameters.
func (e *Engine) Decisions() map[string]rewrite.Decision {
	out := map[string]rewrite.Decision{}
	for _, gs := range e.groups {
		for _, g := range gs {
			for _, u := range g.uses {
				if u.linear != nil {
					out[u.p.name+"@"+u.use.Node] = u.linear.decision
				}
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
