package rewrite

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Kind is how the DP engine obtains per-sample information about a
// parameter (DESIGN.md §3).
type Kind string

const (
	// KindLinear: the weight of a Conv, Gemm or MatMul. With a_i the
	// unfolded input (T×D) and g_i the output gradient (T×p) of sample i,
	// the per-sample gradient is g_iᵀa_i, and its squared norm is either
	// computed as the ghost norm ⟨a_i a_iᵀ, g_i g_iᵀ⟩ or from the
	// instantiated gradient (Layer.Decision).
	KindLinear Kind = "linear"
	// KindElementwise: a parameter combined elementwise, with numpy
	// broadcasting, with a batch-carrying tensor (Add/Sub/Mul/Div), a
	// Conv/Gemm bias, the scale or bias of a native normalization node
	// (LayerNormalization, GroupNormalization, InstanceNormalization: the
	// local derivative of the scale is the normalized input), or a tensor
	// concatenated to batch data (class token). The per-sample gradient of the operand is the output
	// gradient times the local derivative (1 for Add and biases, the
	// other operand for Mul, …, the slice for Concat), summed over
	// every axis along which the operand is broadcast except the batch;
	// it then flows back through Use.Path to the parameter.
	KindElementwise Kind = "elementwise"
	// KindFrozen: not trained; Param.Reason says why.
	KindFrozen Kind = "frozen"
)

// Decision is the layerwise choice of mixed ghost clipping.
type Decision string

const (
	// Ghost computes the per-sample gradient norm from the two T×T Gram
	// matrices (space 2T² per sample and group).
	Ghost Decision = "ghost"
	// Instantiate computes the per-sample gradient itself (space pD per
	// sample and group).
	Instantiate Decision = "instantiate"
)

// Priority selects the criterion of the layerwise decision.
type Priority string

const (
	// PriorityMemory is the paper's eq. (4.1): ghost iff 2T² < pD.
	PriorityMemory Priority = "memory"
	// PrioritySpeed compares the time of the two operation modules of the
	// paper's Table 2 (tab:block complexity) for one layer:
	// ghost norm 2BT²(D+p+1) − B against gradient instantiation
	// 2B(T+1)pD; ghost iff the former is smaller.
	PrioritySpeed Priority = "speed"
)

// SharedPolicy says how a parameter read by several trainable consumers
// (weight sharing) is handled. Per-use ghost norms do not add up to the
// norm of the summed gradient (cross terms), so the uses are either
// instantiated and summed per sample, or the parameter is frozen.
type SharedPolicy string

const (
	// SharedInstantiate instantiates every use's per-sample gradient and
	// sums them per sample before the norm (the default).
	SharedInstantiate SharedPolicy = "instantiate"
	// SharedFreeze freezes the shared parameter.
	SharedFreeze SharedPolicy = "freeze"
)

// Step is one operator between a parameter and the node where it meets
// the batch, every input independent of the batch. Most are shape-only:
// Identity, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Expand, Tile,
// Concat, Split, Slice, Gather (parameter as data, constant indices) and
// Cast, whose composition copies parameter elements: the engine obtains
// the parameter's per-sample gradient by back-propagating the consumer
// operand's per-sample gradient through them (Expand along the batch
// axis, as for a class token, is the identity per sample; Gather
// scatter-adds into the table rows). The others compute (TransformOps:
// weight standardization's statistics, weight normalization's norm, a
// position-bias MLP): the parameter's per-sample gradient is then the
// vector-Jacobian product of that computation (Use.Transform).
type Step struct {
	Node    string `json:"node"`
	Output  string `json:"output"`
	Op      string `json:"op"`
	Operand int    `json:"operand"` // input index that reads the previous value
}

// Use is one place where a trainable parameter meets the batch.
type Use struct {
	Kind Kind `json:"kind"` // linear or elementwise
	// Node and Output name the consumer node (Output, its first output,
	// is unique even when node names are empty); Op is its operator.
	Node   string `json:"node"`
	Output string `json:"output"`
	Op     string `json:"op"`
	// Operand is the consumer input that reads the parameter, through
	// Path (empty: directly). OperandShape is that input's shape.
	Operand      int     `json:"operand"`
	OperandValue string  `json:"operand_value"`
	OperandShape []int64 `json:"operand_shape"`
	Path         []Step  `json:"path,omitempty"`
	// Data is the consumer input that carries the batch (the activation of
	// a linear layer, the other operand of an elementwise one), In its
	// batch layout and Out the layout of the consumer's output.
	Data int         `json:"data"`
	In   BatchLayout `json:"in_layout"`
	Out  BatchLayout `json:"out_layout"`
	// Layer is the annotation of a linear use.
	Layer *Layer `json:"layer,omitempty"`
	// Transform is set when the operand is computed from the parameter,
	// on some route of the path, by an operator that does not copy
	// elements (TransformOps): the consumer's per-sample gradient with
	// respect to the operand is instantiated and taken back to the
	// parameter through the computation's vector-Jacobian product, for
	// many samples in one backward pass where the computation lifts over
	// them (dpengine's liftSamples). A ghost norm of the operand is not
	// the parameter's.
	Transform bool `json:"transform,omitempty"`
	// ComputeFloats, for a computed use, bounds the elements of the
	// values computing the operand from the parameter — the parameter
	// and everything it is computed through — which the engine's
	// sub-plan of the computation holds, each with its gradient.
	ComputeFloats int64 `json:"compute_floats,omitempty"`
	// Standardized, for a computed Conv weight, describes it as weight
	// standardization, whose per-sample norms the engine takes in closed
	// form (nil for any other computation).
	Standardized *Standardized `json:"standardized,omitempty"`
}

// Param is the plan for one floating-point initializer.
type Param struct {
	Name string `json:"name"`
	// Module is the PyTorch state-dict name of a parameter the exporter
	// renamed ("layer1.0.conv1.weight" for "onnx::Conv_196"), derived from
	// the node that reads it; empty when Name is already the user's.
	Module string `json:"module,omitempty"`
	// Scope is the path of the PyTorch module that reads a parameter the
	// dynamo exporter's optimizer created under a made-up name (Swin's
	// transposed qkv weight "val_34" in "features.1.0.attn"), where its
	// state-dict name is not known (rewrite.ScopeOf); "" otherwise.
	Scope string  `json:"scope,omitempty"`
	Shape []int64 `json:"shape"`
	Size  int64   `json:"size"`
	// Kind is linear if any use is linear, elementwise if all uses are,
	// frozen if the parameter is not trained.
	Kind Kind `json:"kind"`
	// Reason says why a frozen parameter is frozen, and how a shared one
	// is handled.
	Reason string `json:"reason,omitempty"`
	// Shared is set when the parameter has several uses.
	Shared bool   `json:"shared,omitempty"`
	Uses   []*Use `json:"uses,omitempty"`
}

// Trainable reports whether the engine updates the parameter.
func (p *Param) Trainable() bool { return p.Kind != KindFrozen }

// Layer is the annotation of one trainable linear use (DESIGN.md §3, the
// paper's §4): a_i is T×D, g_i is T×p, per group.
type Layer struct {
	Param   string `json:"param"`
	Node    string `json:"node"`
	Output  string `json:"output"`
	Op      string `json:"op"`
	Operand int    `json:"operand"`
	// Bias is the trainable bias input of a Conv or Gemm, if any.
	Bias string `json:"bias,omitempty"`
	// T is the number of rows of a_i: H_out·W_out(·D_out) for a conv
	// (times the images per sample when the batch axis is folded), the
	// tokens for a MatMul on (B,T,D), 1 for a Gemm on (B,D).
	T int64 `json:"T"`
	// D = d·k_H·k_W, d the input channels per group; the input features
	// of a Gemm/MatMul.
	D int64 `json:"D"`
	// P is the output channels per group (output features).
	P      int64 `json:"p"`
	Groups int64 `json:"groups"`
	// Taps and InPositions are, for a convolution, its kernel's taps K
	// (D = K·channels per group) and the positions S of the input it
	// unfolds (a ConvTranspose: of its output, the input of the
	// convolution it is the adjoint of): the engine's input-Gram form of
	// the ghost norm holds S² + K·T² (EngineScratch.Floats).
	Taps        int64 `json:"taps,omitempty"`
	InPositions int64 `json:"in_positions,omitempty"`
	// Shared marks a use of a shared parameter: always instantiated.
	Shared bool `json:"shared,omitempty"`
	// Mapped marks a use through layout operators that do not keep the
	// norm (Concat, Expand, Tile, Gather): always instantiated, and the
	// per-sample gradient mapped back to the parameter.
	Mapped bool `json:"mapped,omitempty"`
	// Transformed marks a use through a computation (Use.Transform; also
	// Mapped): the per-sample gradient is instantiated and taken back
	// through the computation's vector-Jacobian product.
	Transformed bool `json:"transformed,omitempty"`
	// Standardized marks a transformed Conv weight read as weight
	// standardization (Use.Standardized).
	Standardized bool `json:"standardized,omitempty"`
	// TwoT2 = 2T² and PD = p·D are the per-sample, per-group space of the
	// ghost norm and of the instantiated gradient (the paper's Table 3).
	TwoT2    int64    `json:"2T2"`
	PD       int64    `json:"pD"`
	Decision Decision `json:"decision"`
	Reason   string   `json:"reason"`
	// Bytes is the float32 memory of the chosen per-sample buffers at the
	// plan's batch: 4·B·Groups·(2T² or pD).
	Bytes int64 `json:"bytes"`
}

// Count is a number of tensors and of scalars.
type Count struct {
	Tensors int   `json:"tensors"`
	Scalars int64 `json:"scalars"`
}

// Plan is the rewrite and per-sample plan of a graph for DP training at
// a given input shape: what the passes changed, every parameter's kind,
// the linear layers' annotations and decisions, and memory estimates.
// Everything per layer is independent of the batch size; MemoryAt
// re-estimates memory for another batch.
type Plan struct {
	Input      string   `json:"input"`
	InputShape []int64  `json:"input_shape"` // one sample
	Batch      int64    `json:"batch"`
	Priority   Priority `json:"priority"`
	// Multiplicity is PlanOptions.Multiplicity where above 1 (else 0):
	// every figure of the plan is for that many views of each sample.
	Multiplicity int64 `json:"augment_multiplicity,omitempty"`
	// Averaged is PlanOptions.Averaged: the memory figures count the
	// parameters' moving average.
	Averaged bool `json:"ema,omitempty"`
	// ExportForm is how the model was exported, as far as the graph shows
	// (ExportTraining, ExportEvalFolded or "").
	ExportForm string   `json:"export_form,omitempty"`
	Changes    []Change `json:"changes"`
	// Adapters are the LoRA adapters Prepare added (Options.LoRA).
	Adapters []Adapter `json:"lora_adapters,omitempty"`
	Params   []*Param  `json:"params"`
	// Layers lists every trainable linear use in graph order.
	Layers    []*Layer `json:"layers"`
	Trainable Count    `json:"trainable"`
	Frozen    Count    `json:"frozen"`
	// ActivationsPerSample counts the float scalars of one sample that a
	// reverse-mode runtime would keep for the backward pass if it kept
	// them all: every batch-carrying float value of the graph, the input
	// included. MemoryAt falls back on it for a mode without Compiled
	// figures, as an upper bound: the runtime's plan reuses buffers by
	// liveness and keeps only what each backward reads (ViT-B/16: 27 %
	// of it).
	ActivationsPerSample int64 `json:"activations_per_sample"`
	// Compiled holds, per mode (ModeNonDP, …), the activation memory of
	// the runtime plan the DP engine compiles for that mode, measured by
	// dpengine.MeasureActivations; MemoryAt uses it in place of the
	// ActivationsPerSample bound. Analyze leaves it empty: the rewrite
	// package cannot compile (the runtime imports it).
	Compiled map[string]CompiledActivations `json:"compiled_activations,omitempty"`
	// Scratch is how the DP engine holds its per-sample scratch on the
	// device the plan is measured for (dpengine.MeasureActivations sets
	// it): MemoryAt's ghost, mixed and bk transient term follows it in
	// place of the paper's B·max_l chosen_l. Nil: the paper's.
	Scratch *EngineScratch `json:"engine_scratch,omitempty"`
	// Memory is MemoryAt(Batch); SetCompiled recomputes it.
	Memory []ModeMemory `json:"memory"`
	// Problems make per-sample clipping unsound (samples interact);
	// Warnings are places where the analysis lost the batch axis.
	Problems []string `json:"problems,omitempty"`
	Warnings []string `json:"warnings,omitempty"`

	byName map[string]*Param
}

// Label is how reports name parameter name: its PyTorch name with the
// stored one beside it when the exporter renamed it
// ("layer1.0.conv1.weight (onnx::Conv_196)"), the module that reads it
// where only that is known ("val_34 (in features.1.0.attn)"), else the
// stored name.
func (p *Plan) Label(name string) string {
	prm := p.Param(name)
	switch {
	case prm != nil && prm.Module != "":
		return prm.Module + " (" + name + ")"
	case prm != nil && prm.Scope != "":
		return name + " (in " + prm.Scope + ")"
	}
	return name
}

// Param returns the plan of the named initializer, or nil.
func (p *Plan) Param(name string) *Param {
	if p.byName == nil { // a plan decoded from JSON
		p.byName = map[string]*Param{}
		for _, prm := range p.Params {
			p.byName[prm.Name] = prm
		}
	}
	return p.byName[name]
}

// Err returns an error listing the problems, or nil.
func (p *Plan) Err() error {
	if len(p.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("rewrite: per-sample gradients are undefined: %s", p.Problems[0])
}

// PlanOptions configures Analyze.
type PlanOptions struct {
	// InputShape is the shape of one sample (the model's input without
	// its batch axis); Batch the batch size for the memory estimates.
	InputShape []int64
	Batch      int64
	Priority   Priority // "" is PriorityMemory
	// Train, when set, selects the parameters to train: the others are
	// frozen. Freeze, when set, freezes the parameters it selects. A
	// pattern selects a parameter if it matches the initializer's name,
	// its derived PyTorch name or module (ModuleName, ScopeOf), or the
	// name of a node reading it: exports call token Linear weights
	// onnx::MatMul_<n>, while node names carry the module path.
	Train, Freeze *regexp.Regexp
	// Frozen freezes the parameters it names, for the reason given (a
	// LoRA run's: Prepare sets it, and Train then nil).
	Frozen map[string]string
	Shared SharedPolicy // "" is SharedInstantiate
	// Multiplicity, when above 1, is the number of augmented views each
	// sample is fed as (augmentation multiplicity): the plan and Compile's
	// graphs take inputs of (B, Multiplicity, InputShape…), and a
	// sample's gradient is the mean of its views' (multiply).
	Multiplicity int64
	// Averaged says the run keeps an exponential moving average of the
	// trainable parameters (dpengine.Config.EMADecay): a copy of them
	// more in the memory estimate.
	Averaged bool
}

// rearrangingOps are the path operators that copy distinct elements of
// their input without summing or repeating any (permutations, reshapes,
// slices): the norm of a per-sample gradient is the same on either side
// of them, so a ghost norm computed on the consumer's operand is the
// parameter's.
var rearrangingOps = set("Identity", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Cast", "Slice", "Split")

// NormPreserving reports whether every step of path is rearranging: the
// parameter's per-sample gradient norm equals the norm of the operand's.
func NormPreserving(path []Step) bool {
	for _, s := range path {
		if !rearrangingOps[s.Op] {
			return false
		}
	}
	return true
}

// GhostAllowed reports whether a linear use's per-sample norm may be
// computed as a ghost norm on its operand: the parameter is read by no
// other use (per-use norms do not add up) and reaches the operand through
// rearranging operators only (see NormPreserving). Otherwise the use's
// per-sample gradient is instantiated and mapped back to the parameter.
func (u *Use) GhostAllowed() bool {
	return u.Kind == KindLinear && u.Layer != nil && !u.Layer.Shared && !u.Transform && NormPreserving(u.Path)
}

// pathOps are the shape-only operators a parameter may pass through
// before it meets the batch (see Step); and a ScatterND that replaces
// elements (scatterPath).
var pathOps = set("Identity", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Tile",
	"Concat", "Split", "Slice", "Gather", "Cast")

// transformOps are the operators, differentiable by the runtime, through
// which a parameter may be computed before it meets the batch (see Step):
// arithmetic, activations, reductions, products and normalizations of
// parameters and constants. Operators whose gradient is zero or undefined
// (Floor, Sign, comparisons), random ones and control flow are not: a
// parameter computed through them is frozen and reported.
var transformOps = set("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log",
	"Sin", "Cos", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf",
	"Gelu", "Softplus", "Softsign", "Mish", "PRelu", "Clip", "Max", "Min", "Sum", "Mean", "Where", "Pad",
	"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin",
	"ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "MatMul", "Gemm", "Einsum", "Softmax", "LogSoftmax",
	"LayerNormalization", "GroupNormalization", "InstanceNormalization", "Resize", "Upsample")

// TransformOps lists, sorted, the operators through which a parameter may
// be computed before it meets the batch (Use.Transform).
func TransformOps() []string {
	var ops []string
	for op := range transformOps {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}

// tableInput reports whether node n, a layer computing from parameters and
// constants only, reads the initializer at input k as its input — the
// data of a Gemm, MatMul or Conv — while its weight is a parameter or
// computed from one. That is a table the model transforms, such as Swin
// V2's coordinates fed to its position-bias MLP: a buffer, which a
// TorchScript export stores as an initializer like any parameter, and
// which PyTorch does not train.
func tableInput(n *graph.Node, k int) bool {
	if k != 0 || !(n.OpType == "Gemm" || n.OpType == "MatMul" || n.OpType == "Conv") || len(n.Inputs) < 2 {
		return false
	}
	w := n.Inputs[1]
	return w != nil && (w.IsParam() || w.Const == nil)
}

// copies reports whether node n, reading a parameter-derived value as its
// input k with every input independent of the batch, copies elements of
// it (a Step that is no computation).
func copies(n *graph.Node, k int) bool {
	return pathOps[n.OpType] && !(n.OpType == "Gather" && k != 0) || n.OpType == "Add" && paramSum(n) || scatterPath(n, k)
}

// scatterPath reports whether a parameter reaches ScatterND n as its data
// or updates (k), n replacing elements (no reduction): each element of its
// output is then a copy of one element of either, as Swin V2 keeps its
// key bias at zero (qkv_bias[C:2C] = 0, the indices folded to a
// constant); the engine's index map of the path checks it element by
// element.
func scatterPath(n *graph.Node, k int) bool {
	r, err := n.ScatterReduction()
	return n.OpType == "ScatterND" && n.Domain == "" && (k == 0 || k == 2) && err == nil && r == "none"
}

// paramSum reports whether the Add n sums values computed from
// parameters alone (MViT's position embedding: its temporal and spatial
// tables, repeated and expanded, added): each element of the sum is then
// a copy of one element of either parameter where the other is zero,
// which the engine's index map of the path checks element by element
// (dpengine's buildPathMap). A constant operand is no parameter: such a
// sum is no copy.
func paramSum(n *graph.Node) bool {
	for _, in := range n.Inputs {
		if in == nil || in.Const != nil && !in.IsParam() {
			return false
		}
	}
	return true
}

// StaticShapes infers the shapes of a clone of g for one batch of the given
// per-sample input shape and returns them by value name. g is unchanged.
func StaticShapes(g *graph.Graph, sample []int64, batch int64) (map[string]graph.Shape, error) {
	c, err := inferredClone(g, sample, batch)
	if err != nil {
		return nil, err
	}
	out := map[string]graph.Shape{}
	for name, v := range c.Values {
		out[name] = v.Shape
	}
	return out, nil
}

func inputOf(g *graph.Graph) (*graph.Value, error) {
	if len(g.Inputs) != 1 {
		return nil, fmt.Errorf("rewrite: the model has %d inputs; plans need exactly one", len(g.Inputs))
	}
	return g.Inputs[0], nil
}

func inferredClone(g *graph.Graph, sample []int64, batch int64) (*graph.Graph, error) {
	return multipliedClone(g, sample, batch, 1)
}

// multipliedClone is inferredClone of g fed k views of each sample
// (multiply).
func multipliedClone(g *graph.Graph, sample []int64, batch, k int64) (*graph.Graph, error) {
	c := g.Clone()
	if err := shapeViews(c, sample, batch, k); err != nil {
		return nil, err
	}
	return c, nil
}

// shapeViews makes c, a clone, read k views of each sample (multiply;
// nothing for k ≤ 1) and infers its shapes for a batch of samples of the
// given shape.
func shapeViews(c *graph.Graph, sample []int64, batch, k int64) error {
	if _, err := inputOf(c); err != nil {
		return err
	}
	if batch <= 0 {
		return fmt.Errorf("rewrite: batch must be positive, got %d", batch)
	}
	if err := multiply(c, sample, k); err != nil {
		return err
	}
	full := append([]int64{batch}, sample...)
	if k > 1 {
		full = append([]int64{batch, k}, sample...)
	}
	if err := c.InferShapes(map[string][]int64{c.Inputs[0].Name: full}); err != nil {
		return fmt.Errorf("rewrite: input shape %v: %w", full, err)
	}
	return nil
}

// analysisBatch is the batch the layout analysis runs at: the plan's, but
// at least 2 where the model allows it, so that the batch axis is never
// confused with a unit axis.
func analysisBatch(g *graph.Graph, batch int64) int64 {
	if batch >= 2 {
		return batch
	}
	if in, err := inputOf(g); err == nil && len(in.Shape) > 0 && in.Shape[0].Size == 1 {
		return 1
	}
	return 2
}

// Analyze plans DP training of g (which it does not change): it infers
// shapes on a clone, follows the batch axis through every node, gives
// every floating-point initializer a per-sample kind or a reason to be
// frozen, detects weight sharing, annotates every trainable linear layer
// with T, D, p, 2T², pD and the ghost/instantiate decision, and estimates
// the memory of each clipping mode.
func Analyze(g *graph.Graph, opts PlanOptions) (*Plan, error) {
	if opts.Priority == "" {
		opts.Priority = PriorityMemory
	}
	if opts.Priority != PriorityMemory && opts.Priority != PrioritySpeed {
		return nil, fmt.Errorf("rewrite: unknown priority %q (want memory or speed)", opts.Priority)
	}
	if opts.Shared == "" {
		opts.Shared = SharedInstantiate
	}
	if opts.Shared != SharedInstantiate && opts.Shared != SharedFreeze {
		return nil, fmt.Errorf("rewrite: unknown shared-parameter policy %q (want instantiate or freeze)", opts.Shared)
	}
	for i, d := range opts.InputShape {
		if d <= 0 {
			return nil, fmt.Errorf("rewrite: input shape %v: dimension %d must be positive", opts.InputShape, i)
		}
	}
	if err := checkMultiplicity(opts.Multiplicity); err != nil {
		return nil, err
	}
	k := max(opts.Multiplicity, 1)
	in, err := inputOf(g)
	if err != nil {
		return nil, err
	}
	ab := analysisBatch(g, opts.Batch)
	if opts.Batch <= 0 {
		return nil, fmt.Errorf("rewrite: batch must be positive, got %d", opts.Batch)
	}
	c, err := multipliedClone(g, opts.InputShape, ab, k)
	if err != nil {
		return nil, err
	}
	li := analyzeLayout(c, ab)
	p := &Plan{Input: in.Name, InputShape: append([]int64{}, opts.InputShape...), Batch: opts.Batch, Priority: opts.Priority,
		byName: map[string]*Param{}, Problems: li.problems, Warnings: li.warnings}
	if k > 1 {
		p.Multiplicity = k
	}
	p.Averaged = opts.Averaged
	// The loss is taken row by row: a sample's rows are its own output
	// rows, its k views' where the plan multiplies them.
	lossRows := BatchLayout{Axis: 0, Outer: 1, Inner: k}
	for _, o := range c.Outputs {
		s := li.state(o)
		switch {
		case s.kind == batched && s.l != lossRows:
			p.Problems = append(p.Problems, fmt.Sprintf("output %s carries the batch on %v; per-sample losses need it on axis 0", o.Name, s.l))
		case s.kind == indep:
			p.Warnings = append(p.Warnings, fmt.Sprintf("output %s does not depend on the input", o.Name))
		}
	}
	for _, v := range c.Values {
		if s := li.state(v); s.kind == batched && v.DType.IsFloat() && v.Const == nil {
			p.ActivationsPerSample += v.Shape.NumElements() / ab
		}
	}
	a := &analyzer{g: c, li: li, ab: ab, opts: opts}
	for _, v := range c.Initializers {
		// A Resize's float roi or scales are the operator's constants,
		// not parameters: no gradient flows into them.
		if !v.IsParam() || c.Values[v.Name] != v || v.ResizeArgument() {
			continue
		}
		prm := a.param(v)
		p.Params = append(p.Params, prm)
		p.byName[prm.Name] = prm
	}
	// Params in the order the graph first reads them.
	order := map[string]int{}
	for i, n := range c.Nodes {
		order[nodeLabel(n)] = i
	}
	first := func(prm *Param) int {
		v := c.Values[prm.Name]
		best := len(c.Nodes)
		for _, n := range v.Consumers {
			best = min(best, order[nodeLabel(n)])
		}
		return best
	}
	sort.SliceStable(p.Params, func(i, j int) bool { return first(p.Params[i]) < first(p.Params[j]) })
	for _, prm := range p.Params {
		if prm.Trainable() {
			p.Trainable.Tensors++
			p.Trainable.Scalars += prm.Size
		} else {
			p.Frozen.Tensors++
			p.Frozen.Scalars += prm.Size
		}
	}
	markStandardized(c, p)
	// Layers in graph order.
	for _, prm := range p.Params {
		if !prm.Trainable() {
			continue
		}
		for _, u := range prm.Uses {
			if u.Layer != nil {
				if u.Layer.Op == "Conv" || u.Layer.Op == "ConvTranspose" || u.Layer.Op == "Gemm" {
					if b := p.byName[u.Layer.Bias]; b == nil || !b.Trainable() {
						u.Layer.Bias = ""
					}
				}
				p.Layers = append(p.Layers, u.Layer)
			}
		}
	}
	sortLayers(p.Layers, order)
	p.Warnings = append(p.Warnings, a.warnings...)
	p.Memory = p.MemoryAt(opts.Batch)
	for _, l := range p.Layers {
		l.Bytes = 4 * opts.Batch * l.Groups * l.Chosen()
	}
	return p, nil
}

func sortLayers(ls []*Layer, order map[string]int) {
	key := func(l *Layer) int {
		if l.Node != "" {
			return order[l.Node]
		}
		return order[l.Output]
	}
	sort.SliceStable(ls, func(i, j int) bool { return key(ls[i]) < key(ls[j]) })
}

type analyzer struct {
	g        *graph.Graph
	li       *layoutInfo
	ab       int64
	opts     PlanOptions
	warnings []string
	// lossReads holds the values the first output (the one the loss
	// reads) is computed from; nil until first needed.
	lossReads map[*graph.Value]bool
	// index is each node's position in g.Nodes; nil until first needed.
	index map[*graph.Node]int
}

// readByLoss reports whether the first graph output depends on v. A model
// with more outputs (Inception's auxiliary logits in a training-mode
// export) trains on the first: what reaches only the others gets no
// gradient from the loss.
func (a *analyzer) readByLoss(v *graph.Value) bool {
	if a.lossReads == nil {
		a.lossReads = map[*graph.Value]bool{}
		if len(a.g.Outputs) > 0 {
			stack := []*graph.Value{a.g.Outputs[0]}
			for len(stack) > 0 {
				x := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if x == nil || a.lossReads[x] {
					continue
				}
				a.lossReads[x] = true
				if x.Producer != nil {
					stack = append(stack, x.Producer.Inputs...)
				}
			}
		}
	}
	return a.lossReads[v]
}

// selected reports whether re matches the parameter's name or the name of
// a node that reads it.
func selected(re *regexp.Regexp, v *graph.Value) bool {
	if re.MatchString(v.Name) {
		return true
	}
	if m := ModuleName(v); m != "" && re.MatchString(m) {
		return true
	}
	if m := ScopeOf(v); m != "" && re.MatchString(m) {
		return true
	}
	for _, n := range v.Consumers {
		if n.Name != "" && re.MatchString(n.Name) {
			return true
		}
	}
	return false
}

func (a *analyzer) param(v *graph.Value) *Param {
	prm := &Param{Name: v.Name, Module: ModuleName(v), Shape: v.Shape.Ints(), Size: v.Shape.NumElements()}
	if prm.Module == "" {
		prm.Scope = ScopeOf(v)
	}
	uses, reason := a.uses(v)
	switch {
	case a.opts.Freeze != nil && selected(a.opts.Freeze, v):
		prm.Kind, prm.Reason = KindFrozen, "selected by --freeze "+a.opts.Freeze.String()
		return prm
	case a.opts.Frozen[v.Name] != "":
		prm.Kind, prm.Reason = KindFrozen, a.opts.Frozen[v.Name]
		return prm
	case a.opts.Train != nil && !selected(a.opts.Train, v):
		prm.Kind, prm.Reason = KindFrozen, "not selected by --train "+a.opts.Train.String()
		return prm
	case reason != "":
		prm.Kind, prm.Reason = KindFrozen, reason
		if a.opts.Train != nil {
			a.warnings = append(a.warnings, fmt.Sprintf("%s matches --train but is frozen: %s", v.Name, reason))
		}
		return prm
	case len(uses) == 0:
		prm.Kind, prm.Reason = KindFrozen, "no node that depends on the input reads it"
		return prm
	case len(a.g.Outputs) > 1 && !a.readByLoss(v):
		prm.Kind, prm.Reason = KindFrozen, fmt.Sprintf("reaches only outputs after the first (%s), which the loss does not read", outputNames(a.g.Outputs[1:]))
		return prm
	}
	prm.Uses = uses
	prm.Kind = KindElementwise
	for _, u := range uses {
		if u.Kind == KindLinear {
			prm.Kind = KindLinear
		}
	}
	if len(uses) > 1 {
		prm.Shared = true
		if a.opts.Shared == SharedFreeze {
			prm.Kind, prm.Reason, prm.Uses = KindFrozen, fmt.Sprintf("shared by %d uses (--shared freeze)", len(uses)), nil
			return prm
		}
		prm.Reason = fmt.Sprintf("shared by %d uses: per-use per-sample gradients are instantiated and summed before the norm (ghost norms of the uses do not add up)", len(uses))
	}
	for _, u := range uses {
		if u.Layer != nil {
			u.Layer.Param = v.Name
			u.Layer.decide(a.opts.Priority, prm.Shared, u)
		}
	}
	return prm
}

// uses walks from v through the operators that compute from parameters
// and constants only (Step) to the nodes where it meets the batch. A
// non-empty reason means v cannot be trained.
func (a *analyzer) uses(v *graph.Value) ([]*Use, string) {
	var uses []*Use
	// Each value is walked once: a computation reaches its values along
	// many routes (weight standardization reads the weight, its mean and
	// its deviation), which a walk per route would follow exponentially
	// often. cone holds the nodes walked through, for Use.Transform.
	walked := map[*graph.Value]bool{}
	var cone []*graph.Node
	var walk func(x *graph.Value, path []Step) string
	walk = func(x *graph.Value, path []Step) string {
		if walked[x] {
			return ""
		}
		walked[x] = true
		seen := map[*graph.Node]bool{}
		for _, n := range x.Consumers {
			if seen[n] {
				continue
			}
			seen[n] = true
			for k, in := range n.Inputs {
				if in != x {
					continue
				}
				if !floatOutput(n) {
					continue // Shape, Equal, …: no gradient flows back
				}
				allIndep := true
				for _, y := range n.Inputs {
					if a.li.state(y).kind != indep {
						allIndep = false
					}
				}
				if allIndep {
					if x == v && tableInput(n, k) {
						return fmt.Sprintf("read as the input of %s %s, whose weight is a parameter, before it meets the batch: a table the model transforms (a buffer, as Swin V2's coordinate table), kept constant",
							n.OpType, nodeLabel(n))
					}
					if !copies(n, k) && !transformOps[n.OpType] {
						return fmt.Sprintf("transformed by %s %s before it meets the batch; only shape-only operators and differentiable computations (rewrite.TransformOps) are supported there",
							n.OpType, nodeLabel(n))
					}
					cone = append(cone, n)
					for _, o := range n.Outputs {
						if o == nil || !o.DType.IsFloat() {
							continue
						}
						step := Step{Node: n.Name, Output: o.Name, Op: n.OpType, Operand: k}
						if r := walk(o, append(append([]Step(nil), path...), step)); r != "" {
							return r
						}
					}
					continue
				}
				// Routes that split the parameter and merge again (a
				// Concat of its halves, MViT's temporal table) reach the
				// consumer once per route: one use, whose per-sample
				// gradient maps back along all of them at once (the
				// engine's index map of the operand), not one per route,
				// which would count the parameter once per route.
				dup := false
				for _, u := range uses {
					dup = dup || u.Node == n.Name && u.Output == n.Outputs[0].Name && u.Operand == k
				}
				if dup {
					continue
				}
				u, r := a.classify(n, k, x, path)
				if r != "" {
					return r
				}
				uses = append(uses, u)
			}
		}
		return ""
	}
	if r := walk(v, nil); r != "" {
		return nil, r
	}
	if len(cone) > 0 {
		computed := a.computed(v, cone)
		floats := v.Shape.NumElements()
		for x := range walked {
			if x != v {
				floats += max(x.Shape.NumElements(), 0)
			}
		}
		for _, u := range uses {
			u.Transform = computed[a.g.Values[u.OperandValue]]
			if u.Transform {
				u.ComputeFloats = floats
			}
		}
	}
	return uses, ""
}

// computed returns the values of cone's nodes (computing from parameter v
// and other parameters and constants) that are computed from v, on some
// route, by a node that does not copy elements (copies): the nodes in
// graph order, each output computed if its node computes from v or reads
// a computed value.
func (a *analyzer) computed(v *graph.Value, cone []*graph.Node) map[*graph.Value]bool {
	if a.index == nil {
		a.index = map[*graph.Node]int{}
		for i, n := range a.g.Nodes {
			a.index[n] = i
		}
	}
	slices.SortFunc(cone, func(x, y *graph.Node) int { return a.index[x] - a.index[y] })
	from := map[*graph.Value]bool{v: true} // computed from v at all
	out := map[*graph.Value]bool{}
	for i, n := range cone {
		if i > 0 && cone[i-1] == n {
			continue
		}
		c := false
		for k, in := range n.Inputs {
			if in != nil && from[in] {
				c = c || out[in] || !copies(n, k)
			}
		}
		for _, o := range n.Outputs {
			if o != nil {
				from[o], out[o] = true, c
			}
		}
	}
	return out
}

// classify describes how consumer n reads the parameter-derived value q
// as its input k.
func (a *analyzer) classify(n *graph.Node, k int, q *graph.Value, path []Step) (*Use, string) {
	at := fmt.Sprintf("%s %s (input %d)", n.OpType, nodeLabel(n), k)
	out := a.li.state(n.Outputs[0])
	switch out.kind {
	case mixed:
		return nil, fmt.Sprintf("read by %s, where samples interact: %s", at, out.why)
	case unknown:
		return nil, fmt.Sprintf("read by %s, where the batch axis is lost: %s", at, out.why)
	}
	u := &Use{Node: n.Name, Output: n.Outputs[0].Name, Op: n.OpType, Operand: k, OperandValue: q.Name,
		OperandShape: q.Shape.Ints(), Path: path, Out: out.l, Data: -1}
	data := func(i int) string {
		s := a.li.state(n.Input(i))
		if s.kind != batched {
			return fmt.Sprintf("read by %s whose input %d does not carry the batch", at, i)
		}
		u.Data, u.In = i, s.l
		return ""
	}
	c := &consumer{a: a, n: n, k: k, q: q, u: u, at: at, data: data}
	if r := consumerRules[n.OpType]; r != nil {
		if why, handled := r(c); handled {
			if why != "" {
				return nil, why
			}
			return u, ""
		}
	}
	return nil, fmt.Sprintf("read by %s: no per-sample rule for this operator and input", at)
}

// floatOutput reports whether any output of n is floating-point (or of
// unknown type).
func floatOutput(n *graph.Node) bool {
	for _, o := range n.Outputs {
		if o != nil && (o.DType.IsFloat() || o.DType == graph.Undefined) {
			return true
		}
	}
	return false
}

func prod(d []int64) int64 {
	p := int64(1)
	for _, x := range d {
		p *= x
	}
	return p
}

// decide applies the layerwise decision.
func (l *Layer) decide(pr Priority, shared bool, u *Use) {
	l.TwoT2 = 2 * l.T * l.T
	l.PD = l.P * l.D
	l.Shared = shared
	var ops []string
	for _, s := range u.Path {
		ops = append(ops, s.Op)
	}
	if u.Transform {
		// Whatever else holds: the operand's per-sample gradient goes
		// back through the computation.
		l.Mapped, l.Transformed = true, true
	}
	switch {
	case shared:
		l.Decision, l.Reason = Instantiate, "shared parameter: per-use gradients are instantiated and summed"
	case u.Transform:
		l.Decision, l.Reason = Instantiate, fmt.Sprintf("reaches the %s computed through %v: the per-sample gradient is instantiated and taken back through the computation (its vector-Jacobian product)", l.Op, ops)
	case !NormPreserving(u.Path):
		l.Mapped = true
		l.Decision, l.Reason = Instantiate, fmt.Sprintf("reaches the %s through %v, which does not keep the norm: the per-sample gradient is instantiated and mapped back", l.Op, ops)
	default:
		l.Decision, l.Reason = Decide(l.T, l.D, l.P, pr)
	}
}

// Decide is the layerwise decision of mixed ghost clipping for a layer
// with a_i of T×D and g_i of T×p (per group), and the reason in words.
//
// Memory priority, the paper's eq. (4.1): ghost iff 2T² < pD. Speed
// priority, from the paper's Table 2 (time of one layer's operation
// modules, per sample): ghost norm 2T²(D+p+1) − 1 against gradient
// instantiation 2(T+1)pD; ghost iff the former is smaller. (Back-
// propagation and the second back-propagation cost the same either way.)
// Ties go to instantiation.
func Decide(t, d, p int64, pr Priority) (Decision, string) {
	if pr == PrioritySpeed {
		g := 2*float64(t)*float64(t)*float64(d+p+1) - 1
		in := 2 * float64(t+1) * float64(p) * float64(d)
		if g < in {
			return Ghost, fmt.Sprintf("time 2T²(D+p+1)−1 = %.3g < 2(T+1)pD = %.3g", g, in)
		}
		return Instantiate, fmt.Sprintf("time 2(T+1)pD = %.3g ≤ 2T²(D+p+1)−1 = %.3g", in, g)
	}
	g, in := 2*t*t, p*d
	if g < in {
		return Ghost, fmt.Sprintf("space 2T² = %d < pD = %d", g, in)
	}
	return Instantiate, fmt.Sprintf("space pD = %d ≤ 2T² = %d", in, g)
}

// Chosen is the per-sample, per-group space of the decided method.
func (l *Layer) Chosen() int64 {
	if l.Decision == Ghost {
		return l.TwoT2
	}
	return l.PD
}

// Compile returns a clone of g for the runtime at the given batch size:
// the plan's frozen parameters become constants (no longer initializers,
// so shape inference may fold what depends only on them), and shapes are
// inferred. Trainable initializers share their tensors with g, so updates
// made through the clone are what g exports. Where the plan multiplies
// the views of each sample (Multiplicity), the clone's input is
// (batch, Multiplicity, InputShape…) and its output has batch·Multiplicity
// rows, a sample's consecutive.
func (p *Plan) Compile(g *graph.Graph, batch int64) (*graph.Graph, error) {
	c := g.Clone()
	for _, prm := range p.Params {
		if prm.Trainable() {
			continue
		}
		if v := c.Values[prm.Name]; v != nil && v.Initializer {
			v.Initializer = false
		}
	}
	if err := shapeViews(c, p.InputShape, batch, p.Multiplicity); err != nil {
		return nil, err
	}
	return c, nil
}

func outputNames(vs []*graph.Value) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.Name
	}
	return strings.Join(names, ", ")
}
