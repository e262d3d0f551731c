package dpengine

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// compileOptions returns the options New compiles cfg.Mode's runtime plan
// with for rp: the one place that says what each mode keeps alive, so
// that the memory estimate (MeasureActivations) compiles exactly the plan
// the engine runs.
func compileOptions(cfg Config, rp *rewrite.Plan) *runtime.Options {
	// Book-keeping reads the input and output gradient of its linear
	// layers after the backward pass; every other hooked node is done
	// with when its hook returns.
	keep := map[string]bool{}
	for _, prm := range rp.Params {
		if cfg.Mode != BK || prm.Kind == rewrite.KindFrozen || needPerSample(cfg, prm) {
			continue
		}
		for _, u := range prm.Uses {
			if u.Kind == rewrite.KindLinear {
				keep[u.Output] = true
			}
		}
	}
	// A standardized weight's x̂ (the model's own LayerNormalization of
	// its rows), read by its closed form after the forward pass
	// (stdState), stays alive through the step.
	var kept []string
	if stdApplies(cfg) {
		for _, prm := range rp.Params {
			for _, u := range prm.Uses {
				if st := u.Standardized; st != nil && u.Kind == rewrite.KindLinear && !slices.Contains(kept, st.Output) {
					kept = append(kept, st.Output)
				}
			}
		}
	}
	var hookBuffers func(*graph.Node) int
	if byOut, _ := hookPerSample(cfg, rp); len(byOut) > 0 {
		hookBuffers = func(n *graph.Node) int {
			if len(n.Outputs) == 0 || n.Outputs[0] == nil {
				return 0
			}
			return byOut[n.Outputs[0].Name]
		}
	}
	return &runtime.Options{
		Device:          cfg.Device,
		HookBuffers:     hookBuffers,
		Trainable:       trainableOrder(cfg, rp),
		KeepActivations: cfg.Mode == Ghost || cfg.Mode == Mixed,
		KeepValues:      kept,
		KeepHooked:      cfg.Mode == BK,
		KeepHookedIf: func(n *graph.Node) bool {
			return len(n.Outputs) > 0 && n.Outputs[0] != nil && keep[n.Outputs[0].Name]
		},
		// Book-keeping and instantiation never take the runtime's
		// summed gradients: they form Σ_i C_i g_i themselves.
		NoParamGrads: cfg.Mode == BK || cfg.Mode == Instantiate,
		MaxMemory:    cfg.MaxMemory,
	}
}

// measureFloor is the least batch MeasureActivations fits the activation
// memory's growth at: below it the batch-independent buffers may still
// decide where the arena peaks, and a slope measured there could be
// below the one of larger batches.
const measureFloor = 16

// MeasureActivations measures the activation memory of the runtime plans
// New would compile from g and rp in each of the given modes (all when
// none is given) for device dev, and records it in rp
// (rewrite.Plan.SetCompiled), so that rp.MemoryAt and the memory caps
// built on it (dptrain.FitBatch) count the buffers the engine's plan
// really holds — its arena reuses memory by liveness and keeps only what
// each backward reads — instead of every activation of the graph.
//
// It compiles each mode's plan on the CPU with runtime.Options.PlanOnly,
// which allocates none of the buffers it measures, at batches 1, the
// plan's batch rp.Batch, n = max(rp.Batch, 16) and 2n: the growth per
// sample is that from n to 2n, rounded up, the batch-independent part the
// least that keeps the line at or above every measured plan (see
// fitActivations), and the workspace the one at rp.Batch, growing by as
// much again with every further rp.Batch samples. The device counts for
// the choices that depend on it (attention's probabilities are
// recomputed on a device with memory of its own,
// runtime.ProbabilitiesAuto); the workspace is the CPU kernels'. A plan
// that cannot be compiled is an error naming the mode and the batch.
func MeasureActivations(g *graph.Graph, rp *rewrite.Plan, dev runtime.Device, modes ...Mode) error {
	if g == nil || rp == nil {
		return errors.New("dpengine: measuring activations: nil graph or plan")
	}
	if len(modes) == 0 {
		modes = Modes()
	}
	if rp.Batch <= 0 {
		return fmt.Errorf("dpengine: measuring activations: the plan's batch %d must be positive", rp.Batch)
	}
	n := max(rp.Batch, measureFloor)
	batches := []int64{1, rp.Batch, n, 2 * n}
	slices.Sort(batches)
	batches = slices.Compact(batches)
	type measured struct {
		opts          *runtime.Options
		rest, scratch []int64 // per batch: arena, loss head and node state; workspace
		buffers       int
	}
	ms := make([]measured, len(modes))
	for k, mode := range modes {
		if _, err := ParseMode(string(mode)); err != nil {
			return fmt.Errorf("dpengine: measuring activations: %w", err)
		}
		opts := measureOptions(Config{Mode: mode}, rp, dev)
		if len(opts.Trainable) == 0 {
			return errors.New("dpengine: measuring activations: no trainable parameter (all frozen)")
		}
		ms[k] = measured{opts: opts, rest: make([]int64, len(batches)), scratch: make([]int64, len(batches))}
	}
	// The smallest batch first: a model too large for the machine fails
	// there, as the engine's compile would, and no larger is tried.
	for i, b := range batches {
		cg, err := rp.Compile(g, b)
		if err != nil {
			return fmt.Errorf("dpengine: measuring activations at batch %d: %w", b, err)
		}
		for k := range ms {
			m := &ms[k]
			plan, err := runtime.Compile(cg, m.opts)
			if err != nil {
				return fmt.Errorf("dpengine: measuring the activations of mode %s at batch %d: %w", modes[k], b, err)
			}
			m.scratch[i] = plan.ScratchBytes()
			m.rest[i] = plan.BatchBytes() - m.scratch[i]
			m.buffers = max(m.buffers, plan.ArenaBuffers())
		}
	}
	out := map[string]rewrite.CompiledActivations{}
	for k, mode := range modes {
		m := &ms[k]
		c := fitActivations(batches, m.rest, m.scratch, rp.Batch, m.buffers)
		_, hooked := hookPerSample(Config{Mode: mode}, rp)
		c.HookedPerSample = 4 * hooked
		out[string(mode)] = c
	}
	rp.SetCompiled(out)
	rp.SetScratch(scratchModel(dev))
	return nil
}

// scratchModel is how an engine on dev holds its norm rules' scratch
// (workerBufs): a buffer per worker, or on a one-worker device with
// memory of its own (batchSamples) chunks of batchedScratch floats.
func scratchModel(dev runtime.Device) rewrite.EngineScratch {
	if dev == nil {
		dev = runtime.CPU{}
	}
	workers := 1
	if ops, err := runtime.DPOpsOf(dev); err == nil {
		workers = ops.Workers()
	}
	if batchesSamples(dev, workers) {
		return rewrite.EngineScratch{ChunkFloats: int64(batchedScratch)}
	}
	return rewrite.EngineScratch{Workers: int64(max(workers, 1))}
}

// fitActivations fits rewrite.CompiledActivations to the plans measured at
// batches (ascending, the last two n and 2n, n a multiple of 16): rest[i]
// the bytes that grow with the batch (arena, loss head, node state),
// scratch[i] the workspace, buffers the arena's buffer count. The line's
// slope is rest's from n to 2n, rounded up, and its batch-independent
// part the largest that keeps it at or above every measured rest, plus 60
// bytes a buffer: the arena rounds each buffer up to 16 floats, which n
// never needs and another batch may. The workspace's bound,
// Scratch·⌈B/sb⌉, is at or above every measured workspace, and at sb
// (one of batches) the workspace measured there.
func fitActivations(batches, rest, scratch []int64, sb int64, buffers int) rewrite.CompiledActivations {
	k := len(batches) - 1
	c := rewrite.CompiledActivations{ScratchBatch: sb, Fixed: math.MinInt64}
	c.PerSample = max(0, ceilDiv(rest[k]-rest[k-1], batches[k]-batches[k-1]))
	for i, b := range batches {
		c.Fixed = max(c.Fixed, rest[i]-c.PerSample*b)
		c.Scratch = max(c.Scratch, ceilDiv(scratch[i], ceilDiv(b, sb)))
	}
	c.Fixed = max(c.Fixed, 0) + 60*int64(buffers)
	return c
}

// ceilDiv returns ⌈a/b⌉ for b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}

// measureOptions returns the options MeasureActivations compiles mode's
// plan with: New's (compileOptions), on the CPU, allocating nothing, with
// the choices that depend on the device made as they would be on dev.
func measureOptions(cfg Config, rp *rewrite.Plan, dev runtime.Device) *runtime.Options {
	opts := compileOptions(cfg, rp)
	if opts.Probabilities == runtime.ProbabilitiesAuto {
		// runtime.ProbabilitiesAuto's rule (runtime.OwnMemory), for dev
		// rather than the CPU the plan is measured on.
		opts.Probabilities = runtime.ProbabilitiesKeep
		if runtime.OwnMemory(dev) {
			opts.Probabilities = runtime.ProbabilitiesRecompute
		}
	}
	opts.Device, opts.PlanOnly, opts.MaxMemory = nil, true, 0
	return opts
}
