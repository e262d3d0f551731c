package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

func init() {
	register(&command{
		name:    "plan",
		summary: "rewrite a model for DP training and show the per-layer ghost/instantiate plan and memory",
		run:     runPlan,
	})
}

// planReport is the JSON form of "dpfinetune plan".
type planReport struct {
	Model string `json:"model"`
	// FixedBatch is the batch size the export fixed, whose axis the
	// loader made dynamic (0: it was dynamic).
	FixedBatch int64 `json:"fixed_batch,omitempty"`
	// HalfPrecision lists the half-precision types the model was exported
	// in, which the loader widened to float32.
	HalfPrecision []string `json:"half_precision,omitempty"`
	// LoadNotes say what the loader did to the model.
	LoadNotes []string `json:"load_notes,omitempty"`
	// Device is where the estimated memory would be allocated.
	Device string            `json:"device"`
	BN     rewrite.BNOptions `json:"bn"`
	Shared string            `json:"shared"`
	Saved  string            `json:"saved,omitempty"`
	// NotMeasured says why the memory estimate's activations are the
	// count of every activation rather than the buffers of each mode's
	// compiled runtime plan (rewrite.Plan.Compiled): a model with
	// nothing to train, or one whose plan cannot be compiled on this
	// machine, is still described.
	NotMeasured string `json:"activations_not_measured,omitempty"`
	// FeatureCache says whether train can cache the outputs of the
	// model's frozen part (its --cache-features) and, where not, why.
	FeatureCache *planFeatures `json:"feature_cache,omitempty"`
	// ExamplesPerUser is --examples-per-user: the plan is a user-level
	// run's, each sampled user's rows its Multiplicity.
	ExamplesPerUser int64 `json:"examples_per_user,omitempty"`
	*rewrite.Plan
}

// planFeatures is plan's view of train's feature cache
// (rewrite.SplitFrozenPrefix): the tensors where the trained part begins,
// one sample's shapes of them and bytes of all, and the nodes on either
// side.
type planFeatures struct {
	Cacheable   bool      `json:"cacheable"`
	Reason      string    `json:"reason,omitempty"`
	Tensors     []string  `json:"tensors,omitempty"`
	Shapes      [][]int64 `json:"shapes,omitempty"`
	BytesPerEx  int64     `json:"bytes_per_example,omitempty"`
	PrefixNodes int       `json:"prefix_nodes,omitempty"`
	HeadNodes   int       `json:"head_nodes,omitempty"`
}

func runPlan(args []string, stdout io.Writer) error {
	fs := newFlagSet("plan", "--model M.onnx [--input-shape C,H,W] [--batch B] [--bn groupnorm|freeze] [--priority memory|speed] [--train REGEX] [--freeze REGEX] [--num-classes K] [--augment-multiplicity K] [--ema] [--out R.onnx] [--json]")
	model := fs.String("model", "", "ONNX model file (required)")
	inShape := fs.String("input-shape", "", "shape of one sample, e.g. 3,224,224 (default: the model's)")
	batch := fs.Int64("batch", 32, "batch size for the memory estimates")
	views := fs.Int64("augment-multiplicity", 1, "plan for K augmented views of each sample (train's --augment-multiplicity): every per-sample figure is for the sample's K views")
	perUser := fs.Int64("examples-per-user", 0, "plan for a user-level run reading K examples of each sampled user (train's --privacy-unit user --examples-per-user K): --batch counts users, every per-sample figure is for a user's K rows")
	ema := fs.Bool("ema", false, "count the parameters' moving average (train's --ema) in the memory figures")
	rf := addRewriteFlags(fs, "groupnorm")
	out := fs.String("out", "", "write the rewritten model here (dynamic batch axis kept)")
	asJSON := fs.Bool("json", false, "print JSON")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	if *model == "" {
		return usagef("--model is required")
	}
	if *batch <= 0 {
		return usagef("--batch must be positive, got %d", *batch)
	}
	if *inShape != "" {
		if _, err := parseDims(*inShape); err != nil {
			return usageError{err.Error()}
		}
	}
	opts, err := rf.options(nil, *batch)
	if err != nil {
		return err
	}
	if err := checkViews(*views); err != nil {
		return err
	}
	opts.Multiplicity = *views
	switch {
	case *perUser == 0:
	case *perUser < 0 || *perUser > maxViews:
		return usagef("--examples-per-user must be between 1 and %d, got %d", maxViews, *perUser)
	case *views > 1:
		return usagef("--examples-per-user and --augment-multiplicity: a user-level run takes no augmentation multiplicity (each of a user's rows is augmented afresh)")
	default:
		opts.Multiplicity = *perUser
	}
	opts.Averaged = *ema
	lm, err := loadGraph(*model)
	if err != nil {
		return err
	}
	if err := lm.dynamicBatch(); err != nil {
		return err
	}
	g := lm.g
	if opts.InputShape, err = modelSample(g, *inShape); err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	opts.Loaded = lm.changes
	p, err := rewrite.Prepare(g, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	rep := planReport{Model: *model, FixedBatch: lm.fixedBatch, HalfPrecision: lm.halfNames(), LoadNotes: lm.notes(opts.BN.Mode), Device: dev.Name(), BN: opts.BN, Shared: string(opts.Shared), Plan: p, ExamplesPerUser: *perUser}
	// Every mode's activation memory as the runtime plan its engine
	// compiles holds it (liveness, only what each backward reads), rather
	// than every activation of the graph. Where there is no such plan the
	// estimate keeps that bound and says why.
	if p.Trainable.Tensors == 0 {
		rep.NotMeasured = "no trainable parameter"
	} else if err := dpengine.MeasureActivations(g, p, dev); err != nil {
		rep.NotMeasured = err.Error()
	}
	switch {
	case p.Trainable.Tensors > 0 && *views > 1:
		// Augmented views differ at every step: train caches nothing
		// (a user's rows, --examples-per-user, are its fixed examples).
		rep.FeatureCache = &planFeatures{Reason: "each sample is fed as several augmented views"}
	case p.Trainable.Tensors > 0:
		split, reason, err := rewrite.SplitFrozenPrefix(g, p, opts.PlanOptions)
		if err != nil {
			return fmt.Errorf("%s: %w", *model, err)
		}
		rep.FeatureCache = &planFeatures{Reason: reason}
		if split != nil {
			rep.FeatureCache = &planFeatures{Cacheable: true, Tensors: split.Cut, Shapes: split.Shapes, BytesPerEx: 4 * split.SampleFloats(),
				PrefixNodes: split.PrefixNodes, HeadNodes: split.HeadNodes}
		}
	}
	if *out != "" {
		eg, err := rewrite.ExportGraph(g)
		if err != nil {
			return fmt.Errorf("exporting the rewritten model: %w", err)
		}
		rm, err := eg.ToONNX()
		if err != nil {
			return fmt.Errorf("exporting the rewritten model: %w", err)
		}
		if err := rm.Save(*out, nil); err != nil {
			return err
		}
		rep.Saved = *out
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printPlan(stdout, &rep)
	}
	return p.Err()
}

// sci formats a count as the paper's Table 3 does: 2 significant digits
// in scientific notation, small integers as they are.
func sci(v int64) string {
	if v < 1000 {
		return fmt.Sprint(v)
	}
	s := fmt.Sprintf("%.1e", float64(v))
	s = strings.Replace(s, "e+0", "e", 1)
	return strings.Replace(s, "e+", "e", 1)
}

func printPlan(w io.Writer, r *planReport) {
	p := r.Plan
	fmt.Fprintf(w, "model:       %s\n", r.Model)
	for _, note := range r.LoadNotes {
		fmt.Fprintf(w, "             %s\n", note)
	}
	fmt.Fprintf(w, "device:      %s (the memory below is allocated there)\n", r.Device)
	fmt.Fprintf(w, "input:       %s %s, batch %d\n", p.Input, shapeString(valueReport{Shape: anyDims(p.InputShape)}), p.Batch)
	switch {
	case r.ExamplesPerUser > 0:
		fmt.Fprintf(w, "users:       %d examples of each sampled user (--examples-per-user): the batch counts users, the figures are for a user's rows\n", r.ExamplesPerUser)
	case p.Multiplicity > 1:
		fmt.Fprintf(w, "views:       %d augmented views of each sample (--augment-multiplicity): the figures are for a sample's views\n", p.Multiplicity)
	}
	if p.Averaged {
		fmt.Fprintf(w, "average:     the parameters' moving average (--ema) counted with the optimizer's state\n")
	}
	switch f := r.FeatureCache; {
	case f != nil && f.Cacheable:
		var cut []string
		for k, name := range f.Tensors {
			cut = append(cut, fmt.Sprintf("%q %v", name, f.Shapes[k]))
		}
		fmt.Fprintf(w, "features:    train caches %s (%s an example) without augmentation: the frozen part (%s) runs once per example, the trained part (%s) at every step; the memory below is the whole model's\n",
			strings.Join(cut, ", "), dptrain.FormatBytes(f.BytesPerEx), rewrite.Nodes(f.PrefixNodes), rewrite.Nodes(f.HeadNodes))
	case f != nil:
		fmt.Fprintf(w, "features:    not cached (%s)\n", f.Reason)
	}
	fmt.Fprintf(w, "decision:    %s priority", p.Priority)
	if p.Priority == rewrite.PriorityMemory {
		fmt.Fprint(w, " (ghost iff 2T² < pD)")
	} else {
		fmt.Fprint(w, " (ghost iff 2T²(D+p+1)−1 < 2(T+1)pD)")
	}
	fmt.Fprintln(w)
	if r.Saved != "" {
		fmt.Fprintf(w, "saved:       %s\n", r.Saved)
	}
	switch p.ExportForm {
	case rewrite.ExportEvalFolded:
		fmt.Fprintf(w, "export:      eval mode: the exporter folded BatchNorm into the convolutions (their weights and biases\n"+
			"             are trained as they are; --bn has nothing to replace). To keep BatchNorm and train it as\n"+
			"             GroupNorm, export with training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False\n"+
			"             (and dynamo=False from PyTorch 2.9), or with the dynamo exporter's optimize=False.\n")
	case rewrite.ExportTraining:
		fmt.Fprintf(w, "export:      training mode: BatchNormalization kept in the graph (rewritten by --bn)\n")
	}
	if len(p.Changes) > 0 {
		fmt.Fprintf(w, "\nrewrites (%d):\n", len(p.Changes))
		for _, c := range p.Changes {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}
	kinds := map[rewrite.Kind]int{}
	for _, prm := range p.Params {
		kinds[prm.Kind]++
	}
	fmt.Fprintf(w, "\nparameters:  %d trainable in %d tensors (%d linear, %d elementwise), %d frozen in %d tensors\n",
		p.Trainable.Scalars, p.Trainable.Tensors, kinds[rewrite.KindLinear], kinds[rewrite.KindElementwise], p.Frozen.Scalars, p.Frozen.Tensors)

	fmt.Fprintf(w, "\nlinear layers (per sample and group; the paper's Table 3):\n")
	nameW := len("parameter")
	for _, l := range p.Layers {
		nameW = max(nameW, len(p.Label(l.Param)))
	}
	nameW = min(nameW, 48)
	opW := len("MatMul")
	for _, l := range p.Layers {
		opW = max(opW, len(l.Op)) // ConvTranspose
	}
	fmt.Fprintf(w, "  %-3s %-*s %-*s %7s %7s %6s %6s %9s %9s  %-11s %10s\n", "#", nameW, "parameter", opW, "op", "T", "D", "p", "groups", "2T²", "pD", "decision", "memory")
	var sumG, sumP, sumC int64
	mapped, transformed, standardized := 0, 0, 0
	for i, l := range p.Layers {
		sumG += l.Groups * l.TwoT2
		sumP += l.Groups * l.PD
		sumC += l.Groups * l.Chosen()
		dec := string(l.Decision)
		if l.Shared {
			dec += "*"
		}
		switch {
		case l.Transformed:
			dec += "‡"
			transformed++
			if l.Standardized {
				standardized++
			}
		case l.Mapped:
			dec += "†"
			mapped++
		}
		fmt.Fprintf(w, "  %-3d %-*s %-*s %7d %7d %6d %6d %9s %9s  %-11s %10s\n", i+1, nameW, trunc(p.Label(l.Param), nameW), opW, l.Op, l.T, l.D, l.P, l.Groups, sci(l.TwoT2), sci(l.PD), dec, humanBytes(l.Bytes))
	}
	fmt.Fprintf(w, "  %-3s %-*s %-*s %7s %7s %6s %6s %9s %9s  %-11s\n", "", nameW, "total", opW, "", "", "", "", "", sci(sumG), sci(sumP), "mixed "+sci(sumC))
	fmt.Fprintf(w, "  memory: float32 buffers of the chosen method at batch %d, 4·B·groups·min-by-decision\n", p.Batch)
	if mapped > 0 {
		fmt.Fprintf(w, "  †: %d row(s) whose weight is made from parameters through Concat/Expand/Tile/Gather: instantiated, and the\n"+
			"     per-sample gradient mapped back to the parameter (its norm is the norm of the whole parameter)\n", mapped)
	}
	if transformed > 0 {
		fmt.Fprintf(w, "  ‡: %d row(s) whose weight is computed from parameters (weight standardization, weight normalization, …):\n"+
			"     instantiated, and the per-sample gradient taken back through the computation to each parameter\n", transformed)
		if standardized > 0 {
			fmt.Fprintf(w, "     (%d of them standardized weights: in ghost, mixed and bk their parameters' norms in closed form, from each\n"+
				"     sample's gradient instantiated in turn — or, where the decision is ghost, from a ghost norm and the input\n"+
				"     convolved with the standardized rows, no gradient instantiated — nothing taken back but book-keeping's\n"+
				"     one clipped sum)\n", standardized)
		}
	}

	var elem, frozen, sharedP []*rewrite.Param
	for _, prm := range p.Params {
		switch {
		case prm.Kind == rewrite.KindFrozen:
			frozen = append(frozen, prm)
		case prm.Kind == rewrite.KindElementwise:
			elem = append(elem, prm)
		}
		if prm.Shared && prm.Trainable() {
			sharedP = append(sharedP, prm)
		}
	}
	if len(elem) > 0 {
		fmt.Fprintf(w, "\nelementwise parameters (%d):\n", len(elem))
		for _, prm := range elem {
			var uses []string
			for _, u := range prm.Uses {
				s := u.Op
				for i := len(u.Path) - 1; i >= 0; i-- {
					s += "←" + u.Path[i].Op
				}
				if !u.Out.Plain() {
					s += " [batch " + u.Out.String() + "]"
				}
				uses = append(uses, s)
			}
			fmt.Fprintf(w, "  %-*s %-14s %s\n", nameW, trunc(p.Label(prm.Name), nameW), shapeString(valueReport{Shape: anyDims(prm.Shape)}), strings.Join(uses, ", "))
		}
	}
	if len(sharedP) > 0 {
		fmt.Fprintf(w, "\nshared parameters (%d, * above):\n", len(sharedP))
		for _, prm := range sharedP {
			fmt.Fprintf(w, "  %-*s %s\n", nameW, trunc(p.Label(prm.Name), nameW), prm.Reason)
		}
	}
	if len(frozen) > 0 {
		fmt.Fprintf(w, "\nfrozen parameters (%d):\n", len(frozen))
		for _, prm := range frozen {
			fmt.Fprintf(w, "  %-*s %s\n", nameW, trunc(p.Label(prm.Name), nameW), prm.Reason)
		}
	}
	if len(p.Compiled) > 0 {
		fmt.Fprintf(w, "\nestimated peak memory at batch %d (float32; activations: the buffers of each mode's compiled runtime plan,\n"+
			"where keeping every activation would take %d scalars a sample):\n", p.Batch, p.ActivationsPerSample)
	} else {
		fmt.Fprintf(w, "\nestimated peak memory at batch %d (float32; activations: %d scalars per sample, all kept;\n"+
			"the runtime plan was not measured: %s):\n", p.Batch, p.ActivationsPerSample, r.NotMeasured)
	}
	opt := "adam"
	if p.Averaged {
		opt = "adam+ema"
	}
	fmt.Fprintf(w, "  %-12s %10s %10s %10s %10s %11s %10s %10s\n", "mode", "total", "weights", "gradients", opt, "activations", "per-sample", "transient")
	for _, m := range p.Memory {
		fmt.Fprintf(w, "  %-12s %10s %10s %10s %10s %11s %10s %10s\n", m.Mode, humanBytes(m.Total), humanBytes(m.Weights), humanBytes(m.Gradients),
			humanBytes(m.Optimizer), humanBytes(m.Activations), humanBytes(m.PerSample), humanBytes(m.Transient))
	}
	for _, s := range p.Warnings {
		fmt.Fprintf(w, "\nwarning: %s", s)
	}
	if len(p.Warnings) > 0 {
		fmt.Fprintln(w)
	}
	for _, s := range p.Problems {
		fmt.Fprintf(w, "\nproblem: %s", s)
	}
	if len(p.Problems) > 0 {
		fmt.Fprintln(w)
	}
}

func anyDims(d []int64) []any {
	out := make([]any, len(d))
	for i, v := range d {
		out[i] = v
	}
	return out
}
