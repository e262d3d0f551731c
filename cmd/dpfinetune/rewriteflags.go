package main

import (
	"flag"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// rewriteFlags are the flags that choose how a model is rewritten for DP
// training; plan, norms and train share them.
type rewriteFlags struct {
	fs                                                    *flag.FlagSet
	bn, rule, priority, train, freeze, shared, loraTarget *string
	groups, classes, lora                                 *int64
	loraAlpha                                             *float64
	seed                                                  *uint64
}

func addRewriteFlags(fs *flag.FlagSet, bnDefault string) *rewriteFlags {
	return &rewriteFlags{
		fs:         fs,
		bn:         fs.String("bn", bnDefault, "BatchNormalization rewrite: groupnorm (paper; not exact) or freeze (running statistics, folded into the Conv; exact)"),
		groups:     fs.Int64("gn-groups", rewrite.DefaultGroups, "GroupNorm groups for --bn groupnorm"),
		rule:       fs.String("gn-rule", "divisor", "when --gn-groups does not divide the channels: divisor (largest divisor below it), gcd, or error"),
		priority:   fs.String("priority", "memory", "layerwise decision: memory (2T² < pD, the paper's eq. 4.1) or speed (time terms of the paper's Table 2)"),
		train:      fs.String("train", "", "train only parameters whose name (or a reading node's name) matches this regular expression"),
		freeze:     fs.String("freeze", "", "freeze parameters whose name (or a reading node's name) matches this regular expression"),
		shared:     fs.String("shared", "instantiate", "parameters with several uses: instantiate (per-use gradients summed) or freeze"),
		classes:    fs.Int64("num-classes", 0, "replace the classifier head by a fresh one with this many classes"),
		seed:       fs.Uint64("head-seed", 0, "seed of the fresh head's initialisation and of LoRA's A factors"),
		lora:       fs.Int64("lora", 0, "train low-rank adapters of this rank r beside the linear layers (LoRA: a Gemm, MatMul or Conv of one group reading its weight directly) instead of their weights, with the classifier head and what --train selects in full; every other parameter is frozen, and the adapters are merged into the weights at export, so the tuned model has the layers it was exported with (0: none)"),
		loraAlpha:  fs.Float64("lora-alpha", 0, "LoRA's α: an adapter's product is scaled by α/r, as PEFT's lora_alpha (default: r, a scale of 1)"),
		loraTarget: fs.String("lora-target", "", "adapt only the layers whose weight (its name, PyTorch name, or the reading node's name) matches this regular expression (default: every eligible layer but the classifier head)"),
	}
}

// checkViews refuses an --augment-multiplicity outside [1,
// rewrite.MaxMultiplicity] (train, plan and bench take it).
func checkViews(k int64) error {
	if k < 1 || k > rewrite.MaxMultiplicity {
		return usagef("--augment-multiplicity must be between 1 and %d, got %d", rewrite.MaxMultiplicity, k)
	}
	return nil
}

// maxViews bounds the rows a sample or a user takes in a step
// (--augment-multiplicity, --examples-per-user).
const maxViews = rewrite.MaxMultiplicity

// options validates the flags and returns the rewrite options for samples
// of shape dims at the given batch.
func (r *rewriteFlags) options(dims []int64, batch int64) (rewrite.Options, error) {
	set := map[string]bool{}
	r.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["num-classes"] && *r.classes <= 0 {
		return rewrite.Options{}, usagef("--num-classes must be positive, got %d", *r.classes)
	}
	if *r.lora < 0 {
		return rewrite.Options{}, usagef("--lora must be a positive rank (or 0 for none), got %d", *r.lora)
	}
	if *r.lora == 0 && (set["lora-alpha"] || set["lora-target"]) {
		return rewrite.Options{}, usagef("--lora-alpha and --lora-target need --lora RANK")
	}
	if a := *r.loraAlpha; a < 0 || math.IsNaN(a) || math.IsInf(a, 0) || set["lora-alpha"] && a == 0 {
		return rewrite.Options{}, usagef("--lora-alpha must be positive, got %g", a)
	}
	if *r.groups <= 0 {
		return rewrite.Options{}, usagef("--gn-groups must be positive, got %d", *r.groups)
	}
	opts := rewrite.Options{
		PlanOptions: rewrite.PlanOptions{InputShape: dims, Batch: batch, Priority: rewrite.Priority(*r.priority), Shared: rewrite.SharedPolicy(*r.shared)},
		BN:          rewrite.BNOptions{Mode: rewrite.BNMode(*r.bn), Groups: *r.groups, Rule: rewrite.GroupRule(*r.rule)},
		NumClasses:  *r.classes,
		HeadSeed:    *r.seed,
		LoRA:        rewrite.LoRAOptions{Rank: *r.lora, Alpha: *r.loraAlpha, Seed: *r.seed},
	}
	if *r.loraTarget != "" {
		re, err := regexp.Compile(*r.loraTarget)
		if err != nil {
			return opts, usagef("--lora-target: bad regular expression: %v", err)
		}
		opts.LoRA.Target = re
	}
	switch {
	case opts.BN.Mode != rewrite.BNGroupNorm && opts.BN.Mode != rewrite.BNFreeze:
		return opts, usagef("--bn must be groupnorm or freeze, got %q", *r.bn)
	case opts.Priority != rewrite.PriorityMemory && opts.Priority != rewrite.PrioritySpeed:
		return opts, usagef("--priority must be memory or speed, got %q", *r.priority)
	case opts.Shared != rewrite.SharedInstantiate && opts.Shared != rewrite.SharedFreeze:
		return opts, usagef("--shared must be instantiate or freeze, got %q", *r.shared)
	case opts.BN.Rule != rewrite.GroupsDivisor && opts.BN.Rule != rewrite.GroupsGCD && opts.BN.Rule != rewrite.GroupsError:
		return opts, usagef("--gn-rule must be divisor, gcd or error, got %q", *r.rule)
	}
	for name, s := range map[string]string{"train": *r.train, "freeze": *r.freeze} {
		if s == "" {
			continue
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return opts, usagef("--%s: bad regular expression: %v", name, err)
		}
		if name == "train" {
			opts.Train = re
		} else {
			opts.Freeze = re
		}
	}
	return opts, nil
}

// loadedModel is a model file as the commands read it.
type loadedModel struct {
	m *onnx.Model
	g *graph.Graph
	// fixedBatch is the batch size the export fixed, whose axis loadGraph
	// made dynamic (releaseFixedBatch); 0 where it was dynamic.
	fixedBatch int64
	// changes are the repairs of the constants that held the fixed batch
	// (rewrite.ReleaseBatch), for the plan's list of changes.
	changes []rewrite.Change
	// half lists the half-precision types of a model exported in float16
	// or bfloat16, which loadGraph widened to float32 (graph.UpcastHalf).
	half []graph.DType
	// releaseErr says why a fixed batch axis could not be made dynamic
	// (g then keeps it fixed).
	releaseErr error
	// moved counts the BatchNorms whose running statistics the export's
	// own forward pass moved by momentum (rewrite.MovedStatistics), read
	// at load, before a rewrite replaces them.
	moved    int
	momentum float64
}

// notes say what loadGraph did to the model: a fixed batch made dynamic,
// uint8 pixels fed as float32, half precision widened.
func (lm *loadedModel) notes(bn rewrite.BNMode) []string {
	var out []string
	if bn == rewrite.BNFreeze && lm.moved > 0 {
		out = append(out, fmt.Sprintf("WARNING: %d BatchNorms' running statistics were moved by the training-mode export's own forward pass (momentum %.3g toward its dummy input's batch statistics): --bn freeze freezes them as moved; export again with each BatchNorm's momentum set to 0 (README, \"Export\"), or train them as GroupNorm (--bn groupnorm)", lm.moved, lm.momentum))
	}
	if lm.fixedBatch > 0 {
		out = append(out, fmt.Sprintf("exported with a fixed batch of %d: its batch axis is made dynamic (each sample's outputs checked against the export's)", lm.fixedBatch))
	}
	if takesPixels(lm.g) {
		out = append(out, "takes uint8 pixels and casts them to float: fed the pixel values (0-255) as float32 (--norm pixels unless given), written with its uint8 input")
	}
	if len(lm.half) > 0 {
		written := "written in float32"
		if d := lm.g.HalfFrom; d != graph.Undefined {
			written = "written back in " + d.String()
		}
		out = append(out, fmt.Sprintf("exported in %s: runs and trains in float32 (its weights widened exactly), %s", strings.Join(lm.halfNames(), " and "), written))
	}
	if s := loadRewrites(lm.g); s != "" {
		out = append(out, s+": runs, trains and is written so")
	}
	return out
}

// loadRewrites says what the loader replaced by plain operators —
// control flow of a static structure, slice assignments exported as
// ScatterND over index grids — "" where nothing.
func loadRewrites(g *graph.Graph) string {
	var parts []string
	if n := g.UnrolledLoops; n > 0 {
		parts = append(parts, fmt.Sprintf("%d Loop(s) of constant trip counts unrolled", n))
	}
	if n := g.InlinedIfs; n > 0 {
		parts = append(parts, fmt.Sprintf("%d If(s) on dimensions the batch does not change inlined", n))
	}
	if n := g.SliceAssignments; n > 0 {
		parts = append(parts, fmt.Sprintf("%d slice assignment(s) exported as ScatterND over index grids read as Slice and Concat", n))
	}
	if len(parts) == 0 {
		return ""
	}
	return "at load: " + strings.Join(parts, ", ")
}

// writeFloat32 makes the export of a model loaded in half precision
// float32 (train --out-dtype float32).
func (lm *loadedModel) writeFloat32() { lm.g.HalfFrom = graph.Undefined }

// halfNames names the half-precision types the model was exported in.
func (lm *loadedModel) halfNames() []string {
	var names []string
	for _, d := range lm.half {
		names = append(names, d.String())
	}
	return names
}

// loadGraph loads and validates a model file, widens half precision and
// uint8 pixel inputs to float32 (graph.UpcastHalf, CastInputsToFloat),
// checks that the runtime supports its operators (runtime.CheckOps) and
// makes a fixed batch axis dynamic where the model allows it
// (releaseFixedBatch).
func loadGraph(path string) (*loadedModel, error) {
	m, err := onnx.Load(path)
	if err != nil {
		return nil, err
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	half, err := g.UpcastHalf()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g.CastInputsToFloat()
	// Every command that runs the model stops here, before any work, on
	// the operators and opsets it cannot run, naming all of them.
	if err := runtime.CheckOps(g); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lm := &loadedModel{m: m, g: g, half: half}
	lm.moved, lm.momentum = rewrite.MovedStatistics(g)
	rel, fixed, changes, err := releaseFixedBatch(g)
	switch {
	case err != nil:
		lm.releaseErr = fmt.Errorf("%s: %w", path, err)
	case fixed > 0:
		lm.g, lm.fixedBatch, lm.changes = rel, fixed, changes
	}
	return lm, nil
}

// pixelsAsFloat turns a uint8 array of pixels into the float32 values a
// model that takes uint8 pixels is fed (takesPixels); it leaves any other
// array, and any other model's, as it is.
func (lm *loadedModel) pixelsAsFloat(x *npy.Array) {
	if x.DType != npy.Uint8 || !takesPixels(lm.g) {
		return
	}
	x.F32 = make([]float32, len(x.U8))
	for i, v := range x.U8 {
		x.F32[i] = float32(v)
	}
	x.DType, x.U8 = npy.Float32, nil
}

// normFor is the --norm flag's value for model g: a model that takes
// uint8 pixels normalizes them itself (graph.CastInputsToFloat), so
// "default" feeds it the pixels.
func normFor(g *graph.Graph, flag string) string {
	if takesPixels(g) && (flag == "" || flag == "default") {
		return "pixels"
	}
	return flag
}

// takesPixels reports whether g's input is uint8 pixels it casts to float
// at once, which loadGraph feeds as float32 (graph.CastInputsToFloat).
func takesPixels(g *graph.Graph) bool {
	return len(g.Inputs) == 1 && g.Inputs[0].Declared == graph.Uint8
}

// dynamicBatch returns why the model's batch axis is fixed, nil where it
// is dynamic: every command but predict (which runs a fixed batch in
// chunks of its size) and inspect needs it dynamic.
func (lm *loadedModel) dynamicBatch() error { return lm.releaseErr }
