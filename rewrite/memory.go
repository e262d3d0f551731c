package rewrite

// The clipping modes of DESIGN.md §4, in the order plans list them.
const (
	ModeNonDP       = "nondp"
	ModeInstantiate = "instantiate"
	ModeGhost       = "ghost"
	ModeMixed       = "mixed"
	ModeBK          = "bk"
)

// LiftMinFloats is the memory, in floats, that dpengine lets a
// computation of parameters lifted over the samples take in any case
// (its liftSamples; 16 MiB): as many samples a pass as fit the computed
// operand's per-sample gradients or this.
const LiftMinFloats = 1 << 22

// ModeMemory is the estimated peak memory of one clipping mode, in bytes
// of float32 storage.
//
// With N all parameter scalars, N_t the trainable ones, a the activation
// scalars per sample (Plan.ActivationsPerSample) and, per trainable linear
// layer l with G_l groups, ghost_l = G_l·2T², inst_l = G_l·pD, out_l =
// G_l·T·p, and per trainable elementwise parameter e its size n_e:
//
//	Weights     = 4·N
//	Gradients   = 8·N_t (nondp, ghost, mixed: the runtime's summed gradient
//	              and the engine's accumulator); 4·N_t (instantiate, bk: the
//	              runtime computes no parameter gradients, only the
//	              accumulator exists)
//	Optimizer   = 8·N_t                      (Adam's two moments), and
//	              4·N_t more with the parameters' moving average
//	              (Plan.Averaged)
//	Activations = Plan.Compiled[mode].At(B)  (the buffers of the runtime
//	              plan the engine compiles for the mode: its arena, which
//	              reuses memory by liveness and keeps only what each
//	              backward reads, its workspace, loss head and node state;
//	              see CompiledActivations), or where the plan has no
//	              compiled figures for the mode, the upper bound
//	              4·B·a (every activation kept for the backward pass)
//	nondp:       nothing more
//	instantiate: PerSample = 4·B·(Σ_l inst_l + Σ_e n_e)   (Opacus keeps every
//	             per-sample gradient until the clip factors are known)
//	ghost:       Transient = 4·B·max(max_l ghost_l, max_e n_e), and
//	             PerSample = 4·B·Σ_k n_k over the parameters k whose
//	             per-sample gradients are kept for their norm: shared
//	             ones, weights through a path that does not keep the norm
//	             (Layer.Mapped), elementwise parameters behind a path;
//	             plus, for weights computed from parameters
//	             (Layer.Transformed), the operand's per-sample gradient,
//	             once a consumer operand, before it goes back through the
//	             computation (in every DP mode; in instantiate and bk
//	             in place of inst_l, with the parameters' own); and in
//	             every DP mode, for every operand computed from
//	             parameters (Use.Transform, elementwise ones too: D
//	             elements, F = Σ Use.ComputeFloats), its B per-sample
//	             gradients, its computation's sub-plan (values and
//	             gradients, 2F) and the computation lifted over the
//	             samples, min(2·B·F, max(B·D, LiftMinFloats)) — except,
//	             in ghost, mixed and bk, a standardized weight
//	             (Use.Standardized), whose norms come in closed form from
//	             each sample's gradient in turn: its float64 norm terms
//	             (B per row of W and of the gain; x̂ is the model's own
//	             activation, kept through the step), and
//	             in bk the operand's clipped sum (D) and the gain's (in
//	             closed form: no plan of the computation);
//	             where a standardized convolution's norms take the ghost
//	             form (in ghost mode, and where the decision is ghost),
//	             the largest such layer's row of ones a group, G·D, and
//	             its convolutions by x̂ and by the ones, B·G·(p+1)·T
//	mixed:       Transient = 4·B·max(max_l chosen_l, max_e n_e), PerSample
//	             as ghost
//	bk:          as mixed, plus PerSample = 4·B·(Σ_l bk_l + Σ_e n_e):
//	             book-keeping keeps a layer's output gradient for
//	             Σ_i C_i a_iᵀg_i (bk_l = out_l), or its instantiated
//	             per-sample gradients where those are no larger (instantiate
//	             decision with D ≤ T, shared parameters and weights through
//	             layout operators that do not keep the norm: bk_l = inst_l);
//	             elementwise parameters' per-sample gradients are kept.
//	             With compiled activations, the kept output gradients are
//	             among the plan's buffers, so PerSample counts bk_l =
//	             inst_l only; and in bk and instantiate, the per-sample
//	             gradients the plan holds in its arena
//	             (CompiledActivations.HookedPerSample) are too
//
// plus 4·B for the per-sample norms in every DP mode. Where the plan has
// the engine's scratch model (Plan.Scratch, EngineScratch), the linear
// layers' part of the ghost, mixed and bk Transient is the engine's
// instead: what its norm rules ask for at once (EngineScratch.Floats).
// Ghost-norm Gram
// matrices and instantiated gradients computed only for a norm are
// transient: a layer's buffers are freed once its norm contribution is
// accumulated, so only the largest counts (the paper's Table 2 gives
// their per-layer space, B(2T²+1) and B(pD+1)). The second back-
// propagation of ghost and mixed clipping needs no extra space. Shared
// parameters, and weights whose path does not keep the norm, are
// instantiated in every DP mode.
type ModeMemory struct {
	Mode        string `json:"mode"`
	Total       int64  `json:"total_bytes"`
	Weights     int64  `json:"weights_bytes"`
	Gradients   int64  `json:"gradients_bytes"`
	Optimizer   int64  `json:"optimizer_bytes"`
	Activations int64  `json:"activations_bytes"`
	PerSample   int64  `json:"per_sample_bytes"`
	Transient   int64  `json:"transient_bytes"`
}

// CompiledActivations is the activation memory of one mode's compiled
// runtime plan as a function of the batch B, in bytes: what the plan holds
// besides the parameters and their gradients (runtime.Plan.BatchBytes).
// Its arena and the rest grow by PerSample a sample over Fixed, the
// batch-independent buffers (gradients of values derived from parameters
// only, such as relative-position bias tables) and an allowance for the
// arena's rounding of each buffer to 64 bytes. The kernels' workspace,
// Scratch at batch ScratchBatch, needs no more for a batch than for its
// parts (per-worker buffers stop growing once every worker has a sample):
//
//	At(B) = Fixed + PerSample·B + Scratch·⌈B/ScratchBatch⌉
//
// dpengine.MeasureActivations fits it to plans compiled at a few batches
// so that it is not below the plan compiled at B (the tests hold it to
// that on every fixture from batch 1 to 256) and within a fraction of a
// percent of it at the plan's batch on full-size models.
//
// HookedPerSample is the bytes a sample of per-sample gradients the plan
// holds in its arena (dpengine keeps large ones in hook buffers, which
// take memory its backward pass has freed): counted in At, so the mode's
// ModeMemory.PerSample leaves them out.
type CompiledActivations struct {
	PerSample       int64 `json:"per_sample_bytes"`
	Fixed           int64 `json:"fixed_bytes"`
	Scratch         int64 `json:"scratch_bytes"`
	ScratchBatch    int64 `json:"scratch_batch"`
	HookedPerSample int64 `json:"hooked_per_sample_bytes,omitempty"`
}

// At returns the activation bytes at batch b.
func (c CompiledActivations) At(b int64) int64 { return c.Fixed + c.PerSample*b + c.ScratchAt(b) }

// ScratchAt returns the kernels' workspace At counts at batch b.
func (c CompiledActivations) ScratchAt(b int64) int64 {
	if c.ScratchBatch > 0 && b > c.ScratchBatch {
		return c.Scratch * ((b + c.ScratchBatch - 1) / c.ScratchBatch)
	}
	return c.Scratch
}

// SetCompiled records the compiled plans' activation memory of the given
// modes (merged into Compiled) and recomputes Memory at the plan's batch.
func (p *Plan) SetCompiled(modes map[string]CompiledActivations) {
	if p.Compiled == nil {
		p.Compiled = map[string]CompiledActivations{}
	}
	for m, c := range modes {
		p.Compiled[m] = c
	}
	p.Memory = p.MemoryAt(p.Batch)
}

// EngineScratch is how the DP engine holds the scratch of its per-sample
// norm rules (dpengine: workerBufs): Workers samples at once, each with
// its own buffer, where the device runs a sample per worker (the CPU);
// or, with Workers 0, chunks of as many samples as ChunkFloats holds,
// one buffer, where the device batches its per-sample work (a GPU), a
// sample whose share exceeds the chunk alone.
type EngineScratch struct {
	Workers     int64 `json:"workers"`
	ChunkFloats int64 `json:"chunk_floats"`
}

// SetScratch records the engine's scratch model and recomputes Memory at
// the plan's batch.
func (p *Plan) SetScratch(s EngineScratch) {
	p.Scratch = &s
	p.Memory = p.MemoryAt(p.Batch)
}

// Floats bounds the float32 scratch the engine's norm rules hold at once
// for layer l at batch b, the decision ghost or not (a shared or mapped
// layer instantiates): per sample, the unfolded input or gathered rows
// a = T·D (a Gemm's or MatMul's output rows T·p too), counted twice for
// a convolution's padded input plane, and the Gram pair 2T² or the
// gradient p·D (the device's chunks: all groups' G·p·D); a one-row ghost
// norm on a batching device needs none (‖a‖²‖g‖²).
func (s EngineScratch) Floats(l *Layer, ghost bool, b int64) int64 {
	if (l.Shared || l.Mapped) && !(ghost && l.ghostFormAllowed()) {
		ghost = false
	}
	conv := l.Op == "Conv" || l.Op == "ConvTranspose"
	a := l.T * l.D
	if !conv {
		a += l.T * l.P
	}
	chosen := l.PD
	if ghost {
		chosen = l.TwoT2
	}
	if s.Workers > 0 {
		need := 2*a + chosen
		if g := l.inputGram(ghost); g > 0 {
			need = g // instead of the unfolding
		}
		return s.Workers * need
	}
	if (ghost && l.T == 1) || l.T == 0 {
		return 0
	}
	per := a
	if ghost {
		per += l.TwoT2
	} else {
		per += l.Groups * l.PD
	}
	if per > s.ChunkFloats {
		// Alone: the per-sample path, or a library's per-sample
		// gradients in chunks of their own.
		inst := l.Groups * l.PD
		nb := max(1, min(b, s.ChunkFloats/max(inst, 1)))
		return max(2*a+chosen, nb*inst)
	}
	return a + min(b, s.ChunkFloats/per)*per
}

// ghostFormAllowed reports whether the engine may take a standardized
// weight's norms in its ghost form (dpengine's convStdGhost: a ghost norm
// and the convolution by x̂, no gradient instantiated) where the mode or
// the decision says ghost: every standardized convolution's but a
// depthwise one's.
func (l *Layer) ghostFormAllowed() bool {
	return l.Standardized && !(l.Groups > 1 && l.D == l.Taps)
}

// ghostForm is the memory of a standardized weight's ghost form at batch
// b, in floats, each shared by the layers (the largest counts): a row of
// ones a group (G·D) and the scratch of the convolutions by x̂ and by the
// ones (b·G·(p+1)·T).
func (l *Layer) ghostForm(b int64) (ones, scratch int64) {
	return l.Groups * l.D, b * l.Groups * (l.P + 1) * l.T
}

// InputGramFits reports whether dpengine computes an ungrouped ghost-norm
// convolution's a_i a_iᵀ from its input's Gram (S input positions, C
// channels, K taps, T output positions, D = C·K) sample by sample: where
// that does fewer operations than the unfolded form (InputGramCheaper)
// and its gather table (K·T² entries) and Gram (S²) stay within 2²²
// elements.
func InputGramFits(S, C, K, T, D int64) bool {
	return InputGramCheaper(S, C, K, T, D) && K*T*T <= 1<<22 && S*S <= 1<<22
}

// InputGramCheaper reports whether a_i a_iᵀ from the input's Gram does
// fewer operations than from the unfolded input: S²·C multiply-adds and
// K·T² gathered additions (counted twice) against T²·D multiply-adds.
func InputGramCheaper(S, C, K, T, D int64) bool {
	return S*S*C+2*K*T*T < T*T*D
}

// inputGram is the per-sample scratch of dpengine's input-Gram ghost
// norm of a convolution (InputGramFits, ungrouped), S² + K·T² + 2T²
// floats, or 0 where that form does not run.
func (l *Layer) inputGram(ghost bool) int64 {
	S, K, T := l.InPositions, l.Taps, l.T
	if !ghost || l.Groups != 1 || S == 0 || K == 0 || (l.Op != "Conv" && l.Op != "ConvTranspose") {
		return 0
	}
	if !InputGramFits(S, l.D/K, K, T, l.D) {
		return 0
	}
	return S*S + K*T*T + 2*T*T
}

// MemoryAt estimates the peak memory of every clipping mode at batch b.
func (p *Plan) MemoryAt(b int64) []ModeMemory {
	base := ModeMemory{
		Weights:   4 * (p.Trainable.Scalars + p.Frozen.Scalars),
		Gradients: 8 * p.Trainable.Scalars,
		Optimizer: 8 * p.Trainable.Scalars,
	}
	if p.Averaged {
		base.Optimizer += 4 * p.Trainable.Scalars
	}
	var sumInst, sumBKInst, sumBKOut, maxGhost, maxChosen, sumElem, maxElem, sumKept int64
	var engGhost, engChosen int64 // the engine's scratch (Plan.Scratch), in floats
	// Operands computed from parameters (Use.Transform), each kept by
	// dpengine as a parameter of its own: D elements, computed through F
	// (the values of its parameters' computations, a value two share
	// counted for each: a bound).
	type operand struct {
		out string
		k   int
	}
	type computed struct {
		d, f  int64
		std   bool  // weight standardization (Use.Standardized)
		terms int64 // its norm terms: rows a sample, W's and the gain's
	}
	operands := map[operand]*computed{}
	var order []operand
	for _, prm := range p.Params {
		if !prm.Trainable() {
			continue
		}
		kept := prm.Shared
		for _, u := range prm.Uses {
			if u.Transform {
				k := operand{u.Output, u.Operand}
				if operands[k] == nil {
					operands[k] = &computed{d: prod(u.OperandShape)}
					order = append(order, k)
				}
				operands[k].f += u.ComputeFloats
				if st := u.Standardized; st != nil {
					operands[k].std = true
					operands[k].terms += st.Rows
				}
			}
			if u.Kind == KindElementwise {
				sumElem += prm.Size
				maxElem = max(maxElem, prm.Size)
			}
			if (u.Layer != nil && u.Layer.Mapped && !u.Layer.Standardized) || (u.Kind == KindElementwise && len(u.Path) > 0) {
				kept = true
			}
		}
		if kept {
			sumKept += prm.Size
		}
	}
	// Each computed operand's per-sample gradients (b rows), its
	// computation's sub-plan (values and gradients) and the computation
	// lifted over the samples (dpengine's liftSamples: as many as fit
	// the per-sample gradients or LiftMinFloats, at most b).
	var sumOperand, sumCompute int64
	// A standardized weight's in ghost, mixed and bk (dpengine's
	// stdState): x̂ is the model's own LayerNormalization output, kept
	// through the step (counted with the activations: dpengine's
	// compileOptions keeps it in the plan MeasureActivations measures),
	// the coefficients a row each; the float64 norm terms (2 floats
	// each) and in bk the clipped sums of the operand and of the gain (at
	// most a row each: terms).
	var stdOperand, stdCompute, stdNorms, stdBK int64
	for _, k := range order {
		c := operands[k]
		operand, compute := b*c.d, 2*c.f+min(2*b*c.f, max(b*c.d, LiftMinFloats))
		if c.std {
			stdOperand += operand
			stdCompute += compute
			stdNorms += 2 * b * c.terms
			stdBK += c.d + c.terms
			continue
		}
		sumOperand += operand
		sumCompute += compute
	}
	// A weight computed from parameters (Layer.Transformed): each
	// parameter's own per-sample gradient (sumFrom).
	var sumFrom, stdFrom int64
	// The standardized weights' ghost form (Layer.ghostForm) in ghost
	// mode (All) and where the decision is ghost (Chosen).
	var stdGhostAll, stdGhostChosen, stdZAll, stdZChosen int64
	for _, l := range p.Layers {
		inst := l.Groups * l.PD
		ghost := l.Groups * l.TwoT2
		if (l.Shared || l.Mapped) && !l.ghostFormAllowed() {
			ghost = inst
		}
		if l.ghostFormAllowed() {
			ones, z := l.ghostForm(b)
			stdGhostAll, stdZAll = max(stdGhostAll, ones), max(stdZAll, z)
			if l.Decision == Ghost {
				stdGhostChosen, stdZChosen = max(stdGhostChosen, ones), max(stdZChosen, z)
			}
		}
		switch {
		case l.Transformed:
			if prm := p.Param(l.Param); prm != nil && l.Standardized {
				stdFrom += prm.Size
			} else if prm != nil {
				sumFrom += prm.Size
			}
		case l.Shared || l.Mapped || (l.Decision == Instantiate && l.D <= l.T):
			// dpengine's rule (needPerSample): keep the instantiated
			// gradient where it is no larger than the input and output
			// gradient.
			sumInst += inst
			sumBKInst += inst
		default:
			sumInst += inst
			sumBKOut += l.Groups * l.T * l.P
		}
		maxGhost = max(maxGhost, ghost)
		maxChosen = max(maxChosen, l.Groups*l.Chosen())
		if p.Scratch != nil {
			engGhost = max(engGhost, p.Scratch.Floats(l, true, b))
			engChosen = max(engChosen, p.Scratch.Floats(l, l.Decision == Ghost, b))
		}
	}
	ghostT, chosenT := 4*b*max(maxGhost, maxElem), 4*b*max(maxChosen, maxElem)
	if p.Scratch != nil {
		ghostT, chosenT = max(4*engGhost, 4*b*maxElem), max(4*engChosen, 4*b*maxElem)
	}
	// The output gradients book-keeping keeps are buffers of the runtime
	// plan (runtime.Options.KeepHooked): a compiled activation figure
	// holds them already.
	if _, ok := p.Compiled[ModeBK]; ok {
		sumBKOut = 0
	}
	mode := func(name string, perSample, transient int64) ModeMemory {
		m := base
		m.Mode, m.PerSample, m.Transient = name, perSample, transient
		m.Activations = 4 * b * p.ActivationsPerSample
		if c, ok := p.Compiled[name]; ok {
			m.Activations = c.At(b)
			// Per-sample gradients in the plan's arena are among its
			// buffers.
			m.PerSample = max(m.PerSample-c.HookedPerSample*b, 0)
		}
		if name == ModeInstantiate || name == ModeBK {
			m.Gradients = 4 * p.Trainable.Scalars
		}
		m.Total = m.Weights + m.Gradients + m.Optimizer + m.Activations + m.PerSample + m.Transient
		return m
	}
	norms := 4*b + 4*sumCompute
	return []ModeMemory{
		mode(ModeNonDP, 0, 0),
		mode(ModeInstantiate, 4*b*(sumInst+sumElem+sumFrom+stdFrom)+4*(sumOperand+stdOperand+stdCompute)+norms, 0),
		mode(ModeGhost, 4*b*sumKept+4*(sumOperand+stdNorms+stdGhostAll+stdZAll)+norms, ghostT),
		mode(ModeMixed, 4*b*sumKept+4*(sumOperand+stdNorms+stdGhostChosen+stdZChosen)+norms, chosenT),
		mode(ModeBK, 4*b*(sumBKInst+sumBKOut+sumElem+sumFrom)+4*(sumOperand+stdNorms+stdBK+stdGhostChosen+stdZChosen)+norms, chosenT),
	}
}
