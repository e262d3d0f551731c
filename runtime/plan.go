package runtime

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

// Options configure Compile.
type Options struct {
	// Device runs the plan; nil means CPU{}. It must implement GraphOps,
	// which the compiled nodes call.
	Device Device
	// Trainable names the initializers whose gradients Backward computes.
	// nil means every floating-point initializer that reaches the output
	// through a differentiable input (BatchNormalization running
	// statistics are not differentiable inputs, so they are left out);
	// an empty, non-nil slice means none.
	Trainable []string
	// ForwardOnly compiles an inference plan: no gradients, no saved
	// activations, the smallest buffer plan.
	ForwardOnly bool
	// KeepActivations keeps every forward activation the backward pass
	// reads alive until the next Forward, so that Backward may be called
	// several times after one Forward (as ghost clipping's second backward
	// pass does); values only the forward reads are freed as usual. Without it
	// the backward pass reuses activation buffers as soon as they are no
	// longer needed and each Backward must follow its own Forward.
	KeepActivations bool
	// KeepHooked keeps the inputs and the output gradient of every hooked
	// node (see HookEvent) alive until the next Forward, so that the slices
	// a hook saw stay valid after Backward returns: book-keeping clipping
	// forms Σ_i C_i a_iᵀg_i from them once the clip factors are known,
	// without copying them.
	KeepHooked bool
	// KeepHookedIf, if set, limits KeepHooked to the hooked nodes for
	// which it returns true: book-keeping needs the buffers of its
	// linear layers after the backward pass, but not those of nodes whose
	// per-sample gradients the hook computes on the spot (biases, norm
	// affines), and keeping those would cost their share of memory.
	KeepHookedIf func(n *graph.Node) bool
	// KeepValues names values whose buffers stay alive from their
	// producer until the next Forward, read with Value after the forward
	// pass, through the backward and after it (the DP engine's
	// standardized weights' x̂). A kept value is never fused away.
	KeepValues []string
	// HookBuffers, if set, gives each hooked node n (HookEvent) for which
	// it returns k > 0 a buffer of Batch()·k floats that n's hook fills
	// during the backward pass and the caller reads after it
	// (HookBuffer). It is a buffer of the arena, live from n's backward
	// step until the next Forward, so that it takes memory the backward
	// has already freed rather than memory of its own: book-keeping keeps
	// its large per-sample gradients there (ResNet-50 at batch 32: 125 MB
	// of them, 10 MB more arena). Its contents are undefined when n's
	// hook starts. Not with KeepActivations, whose later backward passes
	// reuse the same memory after the hooks, nor with ForwardOnly.
	HookBuffers func(n *graph.Node) int
	// NoFusion compiles every node on its own. Otherwise the decomposed
	// LayerNorm normalizations and GELUs that torch exports each run as
	// one fused node, and Slices splitting one value into disjoint parts
	// as one split (see the package documentation); hooks see the same
	// nodes and values either way. For tests and comparisons: the results
	// agree to float rounding.
	NoFusion bool
	// Probabilities says whether attention's softmax probabilities are
	// kept from the forward to the backward pass or recomputed. Where
	// recomputed, a Softmax of a MatMul's product read only by MatMuls
	// (softmax(q kᵀ) v) saves nothing: the backward recomputes the product
	// and the probabilities from q and k, which their MatMul's backward
	// keeps anyway, just before the first of them is needed
	// (rematerialize), as PyTorch's fused attention does. It costs one
	// more q kᵀ product per attention (about 4 % of a ViT-Tiny step on the
	// CPU) and saves B·heads·T² floats per attention across the whole
	// backward (ViT-B/16: 22.4 MB a sample). The results are the same bits
	// either way. The default, ProbabilitiesAuto, recomputes on a device
	// with memory of its own (a GPU, where memory bounds the batch) and
	// keeps them on the host; neither recomputes where that would not
	// lower the plan's live peak (the peak lies elsewhere).
	Probabilities Probabilities
	// NoParamGrads compiles a plan that never computes parameter
	// gradients: every Backward acts as with BackwardOptions.SkipParamGrads
	// and Grad returns nil. Book-keeping clipping forms its gradient from
	// the hooks alone, and the parameter-sized gradient buffers would be
	// a whole model's worth of memory it never reads.
	NoParamGrads bool
	// MaxMemory, if positive, bounds the bytes of the buffer plan (arena
	// and workspace) and of any one run-time value; Compile refuses a plan
	// over it before allocating. Zero means the machine's available memory
	// (see AvailableMemory).
	MaxMemory int64
	// PlanOnly compiles the plan and its buffer plan without allocating
	// the buffers (arena, workspace, parameter gradients, loss head,
	// MaxPool winners), so without checking their total against
	// MaxMemory: the plan reports what it would hold (ArenaBytes,
	// ScratchBytes, BatchBytes) but cannot run. The kernels' set-up is
	// still built, and a value over the limit still refused (its set-up
	// would be as large). The memory estimate measures the plan an engine
	// would compile at other batches this way, in no more memory than
	// compiling takes.
	PlanOnly bool
}

// View is a read-only look at one tensor of a running plan: float data
// (activations, gradients, float constants) or integer constants. Its
// slices alias plan memory and are valid only during the callback or until
// the plan runs again.
type View struct {
	Name  string
	Shape []int
	// BatchAxis is the axis holding the samples of graph input 0's batch
	// (usually 0; 1 for the (T, B, D) projections of nn.MultiheadAttention
	// exports, 0 for their (T·B, D) output projection), or -1 when the
	// tensor has none (parameters, constants) or mixes samples.
	BatchAxis int
	// BatchStride locates the samples in the flat data: element e belongs
	// to sample (e / BatchStride) mod N. It is 0 when BatchAxis is -1. For
	// a tensor of shape (N, ...) it is len(Data)/N.
	BatchStride int
	Data        []float32 // nil for integer and boolean constants
	Ints        []int64   // integer constants (for example Gather indices)
}

// HookEvent describes a node that reads a trainable parameter (or a value
// derived from parameters only, see Derived), at the
// moment of the backward pass when its output gradient is complete and its
// inputs are still alive: right before the node's own backward runs and
// before any of these buffers can be reused. Inputs are the node's forward
// inputs in ONNX order (absent optional inputs have a nil Data and Shape);
// DOut is the gradient of the loss Σ_i w_i·loss_i with respect to the
// node's first output. One exception to the inputs being alive: the
// batched (non-parameter) operand of an Add or Sub, whose gradients do not
// depend on it, is not kept for the hook — its View has the right shape
// and length, its Data undefined contents (hookReads). View.BatchAxis and
// BatchStride say where the samples are: usually along the leading axis,
// so that sample i of a tensor of shape (N, ...) is
// Data[i*len/N : (i+1)*len/N].
type HookEvent struct {
	Node *graph.Node
	// Conv is the compiled geometry of a Conv node (nil for other
	// operators): with PerSampleOps.Im2ColPlane it gives the
	// per-sample unfolded input a_i, so that the per-sample weight
	// gradient of group g is dY_{i,g}·Im2Col(x_i, g)ᵀ.
	Conv *ConvShape
	// TransposedConv is, for a ConvTranspose node, the convolution it is
	// the adjoint of: a Conv from the ConvTranspose's output (N, Cout, …)
	// to its input (N, Cin, …) with the same weight, whose layout
	// (Cin, Cout/group, k…) is that Conv's (M, C/group, k…). The weight's
	// per-sample gradient is that Conv's, with the ConvTranspose's output
	// gradient as its input and the ConvTranspose's input as its output
	// gradient: X_i·Im2Col(dY_i)ᵀ per group.
	TransposedConv *ConvShape
	// Norm is, for a LayerNormalization, GroupNormalization or
	// InstanceNormalization node, how it normalizes: its rows, their
	// statistics from the last Forward, and which scale/bias element each
	// element uses (nil for other operators).
	Norm *NormRows
	// Params lists, for each input, whether it is a trainable parameter.
	Params []bool
	// Derived lists, for each input, whether it is computed from trainable
	// parameters and constants only: a relative-position bias gathered from
	// its table, a qkv bias concatenated from q_bias and v_bias, a class
	// token expanded over the batch. Hooks fire on the nodes of such
	// parameter-only subgraphs (whose output gradients are already summed
	// over the batch) and on the node where a derived value meets batched
	// data, which is where its per-sample gradient is available.
	Derived []bool
	Inputs  []View
	DOut    View
}

// HookFunc receives HookEvents during Backward. It must not retain the
// event or its slices.
type HookFunc func(ev *HookEvent)

// BackwardOptions select what Backward computes.
type BackwardOptions struct {
	// Hook, if set, is called for every node that reads a trainable
	// parameter (see HookEvent), in backward order.
	Hook HookFunc
	// SkipParamGrads leaves parameter gradients untouched (not computed,
	// not zeroed): the DP engine's book-keeping and ghost-norm passes
	// compute what they need from the hooks. Nor are the gradients of
	// values computed from parameters alone (HookEvent.Derived: a
	// standardized weight, a transposed one) computed, whose only use is
	// the parameters': the backward of the nodes computing them is
	// skipped, no hook fires on those nodes, and the node where such a
	// value meets the batch computes no gradient for it (a convolution
	// reading a standardized weight forms no weight gradient).
	SkipParamGrads bool
}

// tensor is the plan's record of one graph value.
type tensor struct {
	v     *graph.Value
	shape []int
	n     int
	data  []float32 // forward value (arena slice, or a constant's device buffer)
	// host is a float constant's host data (the graph initializer's own
	// storage, or the plan's conversion of it) and buf its device buffer,
	// whose Floats is data: the same memory where the device adopts host
	// memory (HostAdopter), a copy elsewhere. Compile-time reads of a
	// constant's values (constFloat, scalarValue) use host.
	host []float32
	buf  Buffer
	// bufOff is where data starts in buf: 0, but for the trainable
	// parameters gathered into one block (gatherParams).
	bufOff int
	i64    []int64   // integer constant
	b      []bool    // boolean constant
	grad   []float32 // gradient (arena slice, or persistent for parameters)

	isConst, isInput, param bool
	derived                 bool // computed from trainable parameters and constants only
	dep, reach, needGrad    bool
	prod                    int     // producing node index, -1 if none
	cons                    []*node // plan nodes reading it (see linkConsumers)

	dataItem, gradItem int // buffer-plan items, -1 if none
	// dataEnd is the last step of the timeline (planBuffers) at which
	// data is intact: its item's end, or past the end for constants and
	// inputs.
	dataEnd      int
	off          int // arena offset of data (when dataItem ≥ 0)
	goff         int // arena offset of grad (when gradItem ≥ 0)
	bax, bstride int // batch axis (-1 if none) and stride (0 if none): see propagateBatch
}

// node is one compiled operator application.
type node struct {
	g        *graph.Node
	idx      int
	in, out  []*tensor
	fwd, bwd func()
	// dIn[i] is where the backward writes input i's gradient (nil: skip);
	// dInPlan is the compiled target, acc[i] marks a scratch target to be
	// added into the input's gradient.
	dIn, dInPlan [][]float32
	acc          []bool
	scratchItem  []int
	saveIn       []bool
	saveOut      bool
	// inplaceGrad: the backward computes dx[i] from dy[i] alone (and the
	// saved x[i] or y[i]), so dx may overwrite dy when nothing else reads
	// dy afterwards (see planBuffers).
	inplaceGrad bool
	// gradIsDy: input 0's gradient is dy itself (a reshape): where
	// another consumer wrote that gradient first, dy is added into it
	// directly, with no scratch buffer for a copy.
	gradIsDy bool
	needBwd  bool
	hooked   bool
	aliased  bool // output 0 shares input 0's buffer: no forward work
	hookEv   HookEvent
	conv     *ConvShape
	norm     *rowNorm
	mm       *mmFold // a FusedMatMul's geometry (fuse_matmul.go)
	fk, bk   CPUKernel
	// build compiles a fused node (nil: the operator's opTable entry);
	// fused is the number of graph nodes it replaces.
	build builder
	fused int
	// planned, if set, finishes the node once the buffer plan is known
	// (which values outlive which steps).
	planned func() error
	// auxBytes is what the node holds outside the arena (MaxPool winners).
	auxBytes int64
	// hookItem is the buffer-plan item of the node's hook buffer
	// (Options.HookBuffers; -1 if none), hookLen its floats and hookBuf
	// its arena slice.
	hookItem, hookLen int
	hookBuf           []float32
	// redoLen is the floats of scratch the node's backward needs to run
	// its forward again from input 0 when its output is gone (MaxPool's
	// output and winners; 0 if it cannot), redoItem the buffer-plan item
	// giving them (-1 if none: the backward does not run the forward
	// again) and redoBuf its arena slice.
	redoLen, redoItem int
	redoBuf           []float32
}

// dOut returns the gradient of output i (nil if it has none).
func (nd *node) dOut(i int) []float32 {
	if i < len(nd.out) && nd.out[i] != nil {
		return nd.out[i].grad
	}
	return nil
}

// Probabilities is Options.Probabilities' choice.
type Probabilities int

const (
	// ProbabilitiesAuto recomputes on a device with memory of its own
	// and keeps them on one that adopts host memory.
	ProbabilitiesAuto Probabilities = iota
	// ProbabilitiesKeep keeps them.
	ProbabilitiesKeep
	// ProbabilitiesRecompute recomputes them on every device. Either
	// recomputes only where that lowers the plan's live peak.
	ProbabilitiesRecompute
)

// Plan is a compiled graph: fixed shapes, a buffer plan, and kernels for
// the forward pass, a per-sample softmax cross-entropy loss head and the
// reverse-mode backward pass. A Plan is not safe for concurrent use.
type Plan struct {
	g       *graph.Graph
	dev     Device
	ops     GraphOps // dev's operations, which the compiled nodes call
	opts    Options
	tensors map[*graph.Value]*tensor
	nodes   []*node
	inputs  []*tensor
	outputs []*tensor
	params  []*tensor

	arena      Buffer
	arenaElems int
	peakElems  int
	liveElems  int
	ws         []float32
	wsNeed     int

	// loss head: device memory, written by Loss (labels copied in, the
	// per-sample losses copied out: the step's only host traffic of it)
	probs     []float32 // softmax of the logits, per sample
	labels    []int64   // n class indices, or n·LabelWords(K) words of label sets
	labelsBuf Buffer    // holds labels
	// labelWords stage a multi-label batch's sets as words on the host
	// (labelset.Expand, labelset.Ignored) before they are copied in:
	// n·LabelWords(K).
	labelWords []uint64
	losses     []float32
	lossesBuf  Buffer // holds losses
	hasLoss    bool
	// smoothing is the loss head's label smoothing α (SetLabelSmoothing).
	smoothing float32
	// multiLabel selects the multi-label loss head (SetMultiLabel).
	multiLabel bool
	ones       []float32
	// posWeight are the multi-label head's weights of each label's
	// positive term (SetPosWeight; all 1 by default), device memory
	// staged from posWeightHost.
	posWeight     []float32
	posWeightBuf  Buffer
	posWeightHost []float32
	// uncertain are the multi-label head's soft targets of each label's
	// uncertain entries (SetUncertainTargets; 0, the default, leaves an
	// ignored label out), staged from uncertainHost.
	uncertain     []float32
	uncertainBuf  Buffer
	uncertainHost []float32

	forwardDone bool
	zeroGrads   []*tensor        // gradients no node writes: cleared by backward
	kept        map[*tensor]bool // Options.KeepValues
	// remat[i] are the nodes whose forward runs again just before node
	// i's backward, to recompute values not kept since the forward
	// (rematerialize).
	remat map[int][]*node
	// consts are the float constants (initializers, trainable or not)
	// adopted to the device, in the order they were met: LoadParams copies
	// their host data in again.
	consts []*tensor
	// paramBlock holds the trainable parameters in params' order at
	// BlockOffsets, on a device with memory of its own (gatherParams).
	paramBlock []float32
	// gradBlock holds the parameters' gradients in the same layout
	// (GradBlock).
	gradBlock []float32

	// owned lists the buffers the plan allocated (AllocTracker), which
	// Release frees; released marks a plan that cannot run any more.
	owned    []Buffer
	released bool
}

// Compile builds a plan for g, whose values must all have static shapes
// (run g.InferShapes on a clone for a concrete batch first, or use
// CompileForBatch). An operator without a kernel is an error naming the
// node.
func Compile(g *graph.Graph, opts *Options) (*Plan, error) {
	p := &Plan{g: g, tensors: map[*graph.Value]*tensor{}}
	if opts != nil {
		p.opts = *opts
	}
	p.dev = p.opts.Device
	if p.dev == nil {
		p.dev = CPU{}
	}
	if p.opts.HookBuffers != nil && (p.opts.KeepActivations || p.opts.ForwardOnly) {
		return nil, errors.New("runtime: Options.HookBuffers with KeepActivations or ForwardOnly: a later backward pass would write over the hook buffers, an inference plan has none")
	}
	ops, err := GraphOpsOf(p.dev)
	if err != nil {
		return nil, err
	}
	p.ops = ops
	if tr, ok := p.dev.(AllocTracker); ok {
		if _, ok := p.dev.(Freer); ok {
			// What the plan allocates is its own: Release gives it back.
			stop := tr.TrackAllocs()
			err := p.build()
			p.owned = stop()
			if err != nil {
				p.Release()
				return nil, err
			}
			return p, nil
		}
	}
	if err := p.build(); err != nil {
		return nil, err
	}
	return p, nil
}

// Release gives back to the device the memory the plan allocated when it
// was compiled — its arena, workspace, constants, parameter copies and
// gradients — where the device frees memory before it closes and tracks
// what a plan allocates (CUDA: AllocTracker and Freer); elsewhere the
// garbage collector takes it once the plan is unreachable. The plan
// cannot run after it. A plan used for a while and dropped while the
// device goes on (the feature cache's pass over the frozen part of a
// model) calls it; memory a kernel allocates lazily in a later pass stays
// the device's.
func (p *Plan) Release() error {
	if p.released {
		return nil
	}
	p.released = true
	f, ok := p.dev.(Freer)
	if !ok {
		return nil
	}
	var first error
	for _, b := range p.owned {
		if err := f.Free(b); err != nil && first == nil {
			first = fmt.Errorf("runtime: releasing a plan's memory: %w", err)
		}
	}
	p.owned = nil
	return first
}

// CompileForBatch clones g, fixes the leading (batch) dimension of its
// first input to batch and the other dimensions to their declared sizes
// (or sample, when given, for models with dynamic spatial sizes), infers
// shapes and compiles the clone.
func CompileForBatch(g *graph.Graph, batch int, sample []int64, opts *Options) (*Plan, error) {
	if len(g.Inputs) == 0 {
		return nil, errors.New("runtime: graph has no inputs")
	}
	if batch <= 0 {
		return nil, fmt.Errorf("runtime: batch must be positive, got %d", batch)
	}
	in := g.Inputs[0]
	dims := []int64{int64(batch)}
	if sample != nil {
		dims = append(dims, sample...)
	} else {
		if len(in.Shape) == 0 {
			return nil, fmt.Errorf("runtime: input %q has unknown rank; give the sample shape", in.Name)
		}
		for i, d := range in.Shape[1:] {
			if d.Size < 0 {
				return nil, fmt.Errorf("runtime: input %q dimension %d is dynamic (%v); give the sample shape", in.Name, i+1, in.Shape)
			}
			dims = append(dims, d.Size)
		}
	}
	c := g.Clone()
	if err := c.InferShapes(map[string][]int64{in.Name: dims}); err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	return Compile(c, opts)
}

func diffSlot(n *graph.Node, i int) bool { return graph.GradientFlows(n, i) }

// indexMapOps are the operators whose kernels move elements by an index
// map of int32 offsets (IndexMap, ScatterReduce, Einsum's layouts): a
// tensor of more than 2³¹−1 elements, which a large device admits, would
// overflow them, so compiling refuses it (mapBound). A nearest Resize
// checks its own (its other modes are GEMMs).
var indexMapOps = map[string]bool{"Slice": true, "Pad": true, "Gather": true, "Tile": true, "ScatterND": true, "Einsum": true}

// mapBound refuses tensors an int32 index map cannot address.
func mapBound(op string, ts ...*tensor) error {
	for _, t := range ts {
		if t != nil && t.n > math.MaxInt32 {
			return fmt.Errorf("%s of a tensor of %d elements: its index map addresses at most %d (2³¹−1)", op, t.n, math.MaxInt32)
		}
	}
	return nil
}

func ints(s graph.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d.Size)
	}
	return out
}

func numel(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func (p *Plan) build() error {
	g := p.g
	// Tensors.
	tensorOf := func(v *graph.Value) (*tensor, error) {
		if t, ok := p.tensors[v]; ok {
			return t, nil
		}
		if !v.Shape.Static() {
			return nil, fmt.Errorf("runtime: value %q has shape %v: compile needs static shapes (run InferShapes for a concrete batch)", v.Name, v.Shape)
		}
		t := &tensor{v: v, shape: ints(v.Shape), prod: -1, dataItem: -1, gradItem: -1}
		t.n = numel(t.shape)
		if v.Const != nil {
			t.isConst = true
			c := v.Const
			switch {
			case c.F32 != nil || (c.DType == graph.Float32 && c.Len() == 0):
				if err := p.adopt(t, c.F32); err != nil {
					return nil, err
				}
			case c.F64 != nil:
				f := make([]float32, len(c.F64))
				for i, x := range c.F64 {
					f[i] = float32(x)
				}
				if err := p.adopt(t, f); err != nil {
					return nil, err
				}
			case c.I64 != nil:
				t.i64 = c.I64
			case c.B != nil:
				t.b = c.B
			default:
				return nil, fmt.Errorf("runtime: constant %q of type %v is not supported", v.Name, c.DType)
			}
		} else if v.DType != graph.Float32 {
			return nil, fmt.Errorf("runtime: value %q of type %v is computed at run time; only float32 tensors are", v.Name, v.DType)
		}
		p.tensors[v] = t
		return t, nil
	}
	for _, v := range g.Inputs {
		t, err := tensorOf(v)
		if err != nil {
			return err
		}
		t.isInput = true
		p.inputs = append(p.inputs, t)
	}
	for i, n := range g.Nodes {
		nd := &node{g: n, idx: i}
		for _, v := range n.Inputs {
			if v == nil {
				nd.in = append(nd.in, nil)
				continue
			}
			t, err := tensorOf(v)
			if err != nil {
				return fmt.Errorf("runtime: node %s: %w", n, err)
			}
			nd.in = append(nd.in, t)
		}
		for k, v := range n.Outputs {
			if v == nil {
				nd.out = append(nd.out, nil)
				continue
			}
			if n.OpType == "Dropout" && n.Domain == "" && k > 0 {
				// The runtime runs Dropout as identity, so its mask keeps
				// every element: a constant, not a computed output.
				t, err := dropoutMask(v)
				if err != nil {
					return fmt.Errorf("runtime: node %s: %w", n, err)
				}
				if t.data != nil {
					if err := p.adopt(t, t.data); err != nil {
						return fmt.Errorf("runtime: node %s: %w", n, err)
					}
				}
				p.tensors[v] = t
				nd.out = append(nd.out, nil)
				continue
			}
			t, err := tensorOf(v)
			if err != nil {
				return fmt.Errorf("runtime: node %s: %w", n, err)
			}
			t.prod = i
			nd.out = append(nd.out, t)
		}
		p.nodes = append(p.nodes, nd)
	}
	for _, v := range g.Outputs {
		t, err := tensorOf(v)
		if err != nil {
			return err
		}
		p.outputs = append(p.outputs, t)
	}
	if len(p.outputs) == 0 {
		return errors.New("runtime: graph has no outputs")
	}
	p.kept = map[*tensor]bool{}
	for _, name := range p.opts.KeepValues {
		v := p.g.Values[name]
		t := p.tensors[v]
		if v == nil || t == nil || t.i64 != nil || t.b != nil || v.Const != nil {
			return fmt.Errorf("runtime: KeepValues: %q is not a float value the graph computes", name)
		}
		p.kept[t] = true
	}

	// Trainable parameters.
	if !p.opts.ForwardOnly {
		if err := p.selectParams(); err != nil {
			return err
		}
		if err := p.gatherParams(); err != nil {
			return err
		}
	}
	// Dependence on parameters (forward) and reaching the loss (backward).
	for _, nd := range p.nodes {
		dep := false
		for i, t := range nd.in {
			if t != nil && (t.param || t.dep) && diffSlot(nd.g, i) {
				dep = true
			}
		}
		for _, t := range nd.out {
			if t != nil {
				t.dep = dep
			}
		}
	}
	for _, nd := range p.nodes {
		pure, fromParam := true, false
		for j, t := range nd.in {
			if t == nil || t.isConst && !t.param {
				continue
			}
			if !t.param && !t.derived {
				pure = false
			} else if diffSlot(nd.g, j) {
				fromParam = true
			}
		}
		for _, t := range nd.out {
			if t != nil {
				t.derived = pure && fromParam
			}
		}
	}
	p.outputs[0].reach = true
	for i := len(p.nodes) - 1; i >= 0; i-- {
		nd := p.nodes[i]
		live := false
		for _, t := range nd.out {
			if t != nil && t.reach {
				live = true
			}
		}
		if !live {
			continue
		}
		for j, t := range nd.in {
			if t != nil && diffSlot(nd.g, j) {
				t.reach = true
			}
		}
	}
	for _, t := range p.tensors {
		t.needGrad = !p.opts.ForwardOnly && (t.param || t.dep) && t.reach && t.i64 == nil && t.b == nil
	}
	if !p.opts.NoParamGrads && !p.opts.PlanOnly && len(p.params) > 0 {
		// Parameter gradients persist across steps, outside the arena, on
		// the device: one block laid out as ParamBlock (GradBlock), so that
		// an optimizer updates every parameter in one call.
		sizes := make([]int, len(p.params))
		for i, t := range p.params {
			sizes[i] = t.n
		}
		offs, total := BlockOffsets(sizes)
		buf, err := p.dev.Alloc(total)
		if err != nil {
			return fmt.Errorf("runtime: allocating the %d trainable parameters' gradients: %w", total, err)
		}
		p.gradBlock = buf.Floats()[:total:total]
		for i, t := range p.params {
			t.grad = p.gradBlock[offs[i] : offs[i]+t.n : offs[i]+t.n]
		}
	}
	p.linkConsumers()
	if !p.opts.NoFusion {
		p.fuse()
		p.linkConsumers()
		p.fuseMatMuls()
		p.linkConsumers()
	}

	if err := p.checkTensorSizes(); err != nil {
		return err
	}
	// Kernels: first name every node without one, not only the first.
	var missing []UnsupportedNode
	for _, nd := range p.nodes {
		n := nd.g
		if _, ok := opTable[n.OpType]; (!ok || n.Domain != "") && nd.build == nil {
			u := UnsupportedNode{Node: nodeName(n), Op: n.OpType, Opset: n.Opset, Reason: "no kernel"}
			if n.Domain != "" {
				u.Op, u.Reason = n.Domain+"."+n.OpType, fmt.Sprintf("operator domain %q is not supported", n.Domain)
			} else if graph.Folds(n.OpType) {
				u.Reason = "no kernel: the IR evaluates it only when its inputs are constants, and here they are computed at run time"
			}
			missing = append(missing, u)
		}
	}
	if missing != nil {
		return fmt.Errorf("runtime: %w", &UnsupportedError{Nodes: missing})
	}
	for _, nd := range p.nodes {
		n := nd.g
		nd.saveIn = make([]bool, len(nd.in))
		nd.dIn = make([][]float32, len(nd.in))
		nd.dInPlan = make([][]float32, len(nd.in))
		nd.acc = make([]bool, len(nd.in))
		nd.scratchItem = make([]int, len(nd.in))
		if n.Domain != "" {
			return fmt.Errorf("runtime: node %s: operator domain %q is not supported", n, n.Domain)
		}
		build, ok := opTable[n.OpType]
		if nd.build != nil {
			build, ok = nd.build, true
		}
		if !ok {
			return fmt.Errorf("runtime: node %s: operator %s is not supported", n, n.OpType)
		}
		outGrad := false
		for _, t := range nd.out {
			if t != nil && t.needGrad {
				outGrad = true
			}
		}
		if outGrad {
			for j, t := range nd.in {
				if t != nil && t.needGrad && diffSlot(n, j) {
					nd.needBwd = true
				}
			}
		}
		for j, t := range nd.in {
			if t != nil && (t.param || t.derived) && diffSlot(n, j) && nd.needBwd {
				nd.hooked = true
			}
		}
		if indexMapOps[n.OpType] {
			if err := mapBound(n.OpType, append(append([]*tensor(nil), nd.in...), nd.out...)...); err != nil {
				return fmt.Errorf("runtime: node %s: %w", n, err)
			}
		}
		if err := build(p, nd); err != nil {
			return fmt.Errorf("runtime: node %s: %w", n, err)
		}
		if nd.fwd == nil {
			return fmt.Errorf("runtime: node %s: no forward kernel", n)
		}
		if nd.needBwd && nd.bwd == nil {
			return fmt.Errorf("runtime: node %s: %s has no backward kernel", n, n.OpType)
		}
		nd.fk = CPUKernel{Name: n.OpType + " " + n.Name, Fn: nd.fwd}
		nd.bk = CPUKernel{Name: n.OpType + " " + n.Name + " (backward)", Fn: nd.bwd}
	}
	if err := p.planBuffers(); err != nil {
		return err
	}
	for _, nd := range p.nodes {
		if nd.planned != nil {
			if err := nd.planned(); err != nil {
				return fmt.Errorf("runtime: node %s (%s): %w", nd.g.Name, nd.g.OpType, err)
			}
		}
	}
	p.propagateBatch()
	for _, nd := range p.nodes {
		if nd.hooked {
			ev := &nd.hookEv
			ev.Node = nd.g
			ev.Conv = nd.conv
			if n := nd.g; n.OpType == "ConvTranspose" {
				ev.Conv, ev.TransposedConv = nil, nd.conv
			}
			if nd.norm != nil {
				ev.Norm = &NormRows{r: nd.norm}
			}
			ev.Params = make([]bool, len(nd.in))
			ev.Derived = make([]bool, len(nd.in))
			ev.Inputs = make([]View, len(nd.in))
			for j, t := range nd.in {
				if t == nil {
					continue
				}
				ev.Params[j] = t.param
				ev.Derived[j] = t.derived
				ev.Inputs[j] = View{Name: t.v.Name, Shape: t.shape, BatchAxis: t.bax, BatchStride: t.bstride, Data: t.data, Ints: t.i64}
			}
			o := nd.out[0]
			ev.DOut = View{Name: o.v.Name, Shape: o.shape, BatchAxis: o.bax, BatchStride: o.bstride, Data: o.grad}
		}
	}
	if p.opts.PlanOnly {
		p.hasLoss = len(p.outputs[0].shape) == 2
		return nil
	}
	// Loss head on output 0 when it is (N, K).
	// Its softmax, unit weights, labels and per-sample losses, and the
	// kernels' workspace, are operands of device operations: device
	// memory. Loss checks the caller's labels on the host, copies them in
	// and the losses out.
	if o := p.outputs[0]; len(o.shape) == 2 {
		p.hasLoss = true
		probs, err := p.dev.Alloc(o.n)
		if err != nil {
			return fmt.Errorf("runtime: allocating the loss head's softmax (%d elements): %w", o.n, err)
		}
		p.probs = probs.Floats()
		if o.shape[0] > 0 {
			// Room for each sample's label set as words, should the head
			// be multi-label (SetMultiLabel): a class index takes one.
			words := o.shape[0] * LabelWords(o.shape[1])
			if p.labelsBuf, p.labels, err = allocInt64(p.dev, words); err != nil {
				return fmt.Errorf("runtime: the loss head's labels: %w", err)
			}
		}
		if p.lossesBuf, err = p.dev.Alloc(o.shape[0]); err != nil {
			return fmt.Errorf("runtime: allocating the loss head's losses (%d elements): %w", o.shape[0], err)
		}
		p.losses = p.lossesBuf.Floats()
		ones := make([]float32, o.shape[0])
		for i := range ones {
			ones[i] = 1
		}
		buf, err := AdoptHost(p.dev, ones)
		if err != nil {
			return fmt.Errorf("runtime: the loss head's unit weights: %w", err)
		}
		p.ones = buf.Floats()
		p.posWeightHost = make([]float32, o.shape[1])
		for j := range p.posWeightHost {
			p.posWeightHost[j] = 1
		}
		if p.posWeightBuf, err = AdoptHost(p.dev, p.posWeightHost); err != nil {
			return fmt.Errorf("runtime: the loss head's positive weights: %w", err)
		}
		p.posWeight = p.posWeightBuf.Floats()
		p.uncertainHost = make([]float32, o.shape[1])
		if p.uncertainBuf, err = AdoptHost(p.dev, p.uncertainHost); err != nil {
			return fmt.Errorf("runtime: the loss head's uncertain targets: %w", err)
		}
		p.uncertain = p.uncertainBuf.Floats()
	}
	ws, err := p.dev.Alloc(p.wsNeed)
	if err != nil {
		return fmt.Errorf("runtime: allocating the %d-element kernel workspace: %w", p.wsNeed, err)
	}
	p.ws = ws.Floats()
	return nil
}

// adopt makes host, the float data of constant t, a buffer of the plan's
// device (runtime.AdoptHost: the same memory on the CPU and the reference
// backend, a copy on a device with memory of its own) and t's data its
// view.
func (p *Plan) adopt(t *tensor, host []float32) error {
	buf, err := AdoptHost(p.dev, host)
	if err != nil {
		return fmt.Errorf("runtime: constant %q: %w", t.v.Name, err)
	}
	t.host, t.buf, t.data = host, buf, buf.Floats()
	p.consts = append(p.consts, t)
	return nil
}

// SyncParams copies the trainable parameters from the device into the
// graph's initializers, where a host reader finds them: whoever reads
// parameters on the host after training steps — checkpoint save, export,
// evaluation by another plan, audits — calls it first (dpengine's
// Engine.SyncParams does). Where the device adopted the initializers
// (CPU, reference backend) they are the same memory and nothing is
// copied.
func (p *Plan) SyncParams() error {
	if p.released {
		return errReleased
	}
	for _, t := range p.params {
		if SameMemory(t.host, t.data) {
			continue
		}
		if err := p.dev.CopyOut(t.host, t.buf, t.bufOff); err != nil {
			return fmt.Errorf("runtime: syncing parameter %q to the host: %w", t.v.Name, err)
		}
	}
	return nil
}

// LoadParams copies the graph's float initializers (trainable parameters
// and constants) into the plan's device buffers: whoever changes
// initializers on the host after Compile — a checkpoint restore, another
// plan's SyncParams into the same graph before this plan evaluates it —
// calls it before the next Forward. Where the device adopted the
// initializers it copies nothing.
func (p *Plan) LoadParams() error {
	if p.released {
		return errReleased
	}
	for _, t := range p.consts {
		if SameMemory(t.host, t.data) {
			continue
		}
		if err := p.dev.CopyIn(t.buf, t.bufOff, t.host); err != nil {
			return fmt.Errorf("runtime: loading initializer %q to the device: %w", t.v.Name, err)
		}
	}
	return nil
}

// dropoutMask returns the mask output v of a Dropout run as identity: all
// true (opset 10 and later, where the mask is bool) or all one (earlier
// opsets, where it has the input's type).
func dropoutMask(v *graph.Value) (*tensor, error) {
	if !v.Shape.Static() {
		return nil, fmt.Errorf("mask %q has shape %v: compile needs static shapes", v.Name, v.Shape)
	}
	t := &tensor{v: v, shape: ints(v.Shape), prod: -1, dataItem: -1, gradItem: -1, isConst: true}
	t.n = numel(t.shape)
	switch v.DType {
	case graph.Bool:
		t.b = make([]bool, t.n)
		for i := range t.b {
			t.b[i] = true
		}
	case graph.Float32:
		t.data = make([]float32, t.n)
		for i := range t.data {
			t.data[i] = 1
		}
	default:
		return nil, fmt.Errorf("mask %q of type %v is not supported", v.Name, v.DType)
	}
	return t, nil
}

// isRunningStat reports whether v is read only as BatchNormalization
// running statistics.
func isRunningStat(v *graph.Value) bool {
	if len(v.Consumers) == 0 {
		return false
	}
	for _, c := range v.Consumers {
		for j, in := range c.Inputs {
			if in == v && diffSlot(c, j) {
				return false
			}
		}
	}
	return true
}

// BlockAlign is the alignment, in floats (256 bytes, cuMemAlloc's), of
// each tensor in a block of tensors laid out one after another
// (BlockOffsets): the trainable parameters' block (ParamBlock), and the DP
// engine's accumulators and optimizer state, which follow its layout.
// cuBLAS's and cuDNN's fast kernels (vectorized loads, TF32 tensor cores)
// want 16-byte-aligned operands; packed back to back, a 10-class head's
// bias (10 floats) ahead of them — book-keeping's order, smallest kept
// parameters first — left every weight after it 8 bytes off.
const BlockAlign = 64

// BlockOffsets returns where tensors of the given sizes start in a block
// that holds them one after another in that order, each at a multiple of
// BlockAlign floats, and the block's length: the padding between them
// belongs to no tensor.
func BlockOffsets(sizes []int) (offs []int, total int) {
	offs = make([]int, len(sizes))
	for i, n := range sizes {
		offs[i] = total
		total += BlockSpan(n)
	}
	return offs, total
}

// BlockSpan returns the floats a tensor of n elements spans in such a
// block, its padding included: n rounded up to a multiple of BlockAlign.
func BlockSpan(n int) int { return (n + BlockAlign - 1) / BlockAlign * BlockAlign }

// gatherParams moves the trainable parameters into one block of the
// device, in params' order at BlockOffsets, where the device has memory of
// its own (an accelerator: the initializers were copied, not adopted), so
// that an update of every parameter — the optimizer's, the noise's — is
// one device call on ParamBlock instead of one per tensor. The copies
// adopt made are released where the device can (Freer).
func (p *Plan) gatherParams() error {
	sizes := make([]int, len(p.params))
	for i, t := range p.params {
		if t.buf == nil || t.bufOff != 0 || SameMemory(t.host, t.data) {
			return nil // adopted host memory (CPU, reference): nothing to gain
		}
		sizes[i] = t.n
	}
	offs, total := BlockOffsets(sizes)
	if total == 0 {
		return nil
	}
	blk, err := p.dev.Alloc(total)
	if err != nil {
		return fmt.Errorf("runtime: allocating the %d trainable parameters' block: %w", total, err)
	}
	all := blk.Floats()[:total:total]
	for i, t := range p.params {
		off := offs[i]
		if err := p.dev.CopyIn(blk, off, t.host); err != nil {
			return fmt.Errorf("runtime: parameter %q: %w", t.v.Name, err)
		}
		old := t.buf
		t.buf, t.bufOff, t.data = blk, off, all[off:off+t.n:off+t.n]
		if f, ok := p.dev.(Freer); ok {
			if err := f.Free(old); err != nil {
				return fmt.Errorf("runtime: parameter %q: releasing its first copy: %w", t.v.Name, err)
			}
		}
	}
	p.paramBlock = all
	return nil
}

// ParamBlock returns the trainable parameters as one device view, in
// Params' order at BlockOffsets of their sizes (each Param a sub-slice of
// it; the padding between them belongs to none), or nil where they are
// not one block: on a device that adopts host memory they are the graph's
// initializers, wherever those lie.
func (p *Plan) ParamBlock() []float32 { return p.paramBlock }

// GradBlock returns the trainable parameters' gradients (Grad) as one
// device view, in Params' order at BlockOffsets of their sizes, as
// ParamBlock lays out the parameters; nil with NoParamGrads or PlanOnly.
func (p *Plan) GradBlock() []float32 { return p.gradBlock }

func (p *Plan) selectParams() error {
	if p.opts.Trainable == nil {
		for _, v := range p.g.Initializers {
			if v.IsParam() && len(v.Consumers) > 0 && !isRunningStat(v) {
				t := p.tensors[v]
				if t == nil {
					continue
				}
				if v.Const.F32 == nil {
					return fmt.Errorf("runtime: parameter %q is %v; only float32 parameters train", v.Name, v.DType)
				}
				t.param = true
				p.params = append(p.params, t)
			}
		}
		return nil
	}
	for _, name := range p.opts.Trainable {
		v, ok := p.g.Values[name]
		if !ok || !v.IsParam() {
			return fmt.Errorf("runtime: trainable %q is not a floating-point initializer of the graph", name)
		}
		t := p.tensors[v]
		if t == nil {
			return fmt.Errorf("runtime: trainable %q is not used by the graph", name)
		}
		if v.Const.F32 == nil {
			return fmt.Errorf("runtime: parameter %q is %v; only float32 parameters train", v.Name, v.DType)
		}
		if !t.param {
			t.param = true
			p.params = append(p.params, t)
		}
	}
	return nil
}

// needWS records that a kernel needs a workspace of n elements.
func (p *Plan) needWS(n int) {
	if n > p.wsNeed {
		p.wsNeed = n
	}
}

// keepAllSaves, set only by tests, keeps every input of a hooked node and
// every operand of Mul and Div for the backward, as the plan did before it
// saved only what each reads (TestSavesOnlyWhatBackwardReads).
var keepAllSaves bool

// hookReads reports whether a hook on node nd may read the data of its
// input j, which then stays alive until nd's backward (HookEvent). The
// gradient of Add and Sub with respect to either operand is the output
// gradient's, so their batched operand is not kept for the hook — a bias
// or a position embedding added to a ViT's tokens would otherwise keep
// each layer's pre-bias activations alive through the whole backward (a
// third of ViT-B/16's activation memory); the DP engine's rules read its
// shape only. Parameters and values derived from them are kept.
func hookReads(nd *node, j int) bool {
	if !nd.hooked {
		return false
	}
	if keepAllSaves {
		return true
	}
	switch nd.g.OpType {
	case "Add", "Sub":
		t := nd.in[j]
		return t != nil && (t.param || t.derived)
	}
	return true
}

// rematerialize chooses the values the backward recomputes instead of
// keeping them from the forward (Options.Probabilities): attention's
// probabilities P = Softmax(S), S = MatMul(q, kᵀ), where S is read by the
// Softmax only and P by MatMuls only (P v), none of them hooked. The
// backward reads P twice — P v's backward for v's gradient, the Softmax's
// for S's — and nothing else; q and kᵀ stay alive for their MatMul's own
// backward, which comes later. So P is recomputed just before the backward
// of its last reader (the first of them the backward meets) by running
// the MatMul and the Softmax forward again, into the same arena offsets:
// their items get a second interval, the memory is another buffer's in
// between. The kernels are deterministic, so the recomputed P is the
// forward's bit for bit. It returns the recomputed values with the step at
// which they are written again, and records the re-runs in p.remat. Not
// with KeepActivations (a second backward would need them again), nor in
// an inference plan.
func (p *Plan) rematerialize(isOut map[*tensor]bool) map[*tensor]int {
	p.remat = nil
	recompute := p.opts.Probabilities == ProbabilitiesRecompute ||
		p.opts.Probabilities == ProbabilitiesAuto && OwnMemory(p.dev)
	if !recompute || p.opts.KeepActivations || p.opts.ForwardOnly {
		return nil
	}
	again := map[*tensor]int{}
	// A FusedMatMul (fuse_matmul.go) is a MatMul reading its operands
	// through a transposition: its forward runs again as a MatMul's.
	matmul := func(nd *node) bool { return nd.g.OpType == "MatMul" || nd.g.OpType == fusedMatMul }
	plain := func(nd *node) bool {
		return (nd.build == nil || nd.g.OpType == fusedMatMul) && !nd.hooked && !p.keepHooked(nd) && nd.needBwd && aliasSource(nd) == nil
	}
	// only reports whether t is read by nd alone and is no output.
	only := func(t *tensor, nd *node) bool { return t != nil && !isOut[t] && len(t.cons) == 1 && t.cons[0] == nd }
	for _, sm := range p.nodes {
		if sm.g.OpType != "Softmax" || !plain(sm) || len(sm.in) != 1 || len(sm.out) != 1 {
			continue
		}
		P := sm.out[0]
		if P == nil || isOut[P] || len(P.cons) == 0 {
			continue
		}
		// Back from the Softmax to the MatMul, through one scaling by a
		// constant at most (timm's attention scales q kᵀ, torch's q).
		chain := []*node{sm}
		for t := sm.in[0]; ; {
			if !only(t, chain[0]) || t.prod < 0 {
				chain = nil
				break
			}
			nd := p.nodes[t.prod]
			if !plain(nd) || len(nd.out) != 1 {
				chain = nil
				break
			}
			if matmul(nd) && len(nd.in) == 2 && nd.saveIn[0] && nd.saveIn[1] {
				chain = append([]*node{nd}, chain...)
				break
			}
			scale := len(chain) == 1 && len(nd.in) == 2 && nd.in[1] != nil && nd.in[1].isConst && !nd.in[1].needGrad &&
				(nd.g.OpType == "Mul" || nd.g.OpType == "Div") && !nd.saveIn[0]
			if !scale {
				chain = nil
				break
			}
			chain = append([]*node{nd}, chain...)
			t = nd.in[0]
		}
		if chain == nil {
			continue
		}
		at := -1
		for _, cn := range P.cons {
			if !matmul(cn) || !plain(cn) {
				at = -1
				break
			}
			at = max(at, cn.idx)
		}
		if at < 0 {
			continue
		}
		if p.remat == nil {
			p.remat = map[int][]*node{}
		}
		p.remat[at] = append(p.remat[at], chain...)
		for _, nd := range chain {
			again[nd.out[0]] = p.backStep(at)
		}
	}
	return again
}

// item is one buffer of the buffer plan: size elements live over the
// steps [start, end].
type item struct {
	size, start, end int
	// start2, end2: a second interval, after a gap in which other
	// buffers may use the memory (a value recomputed in the backward,
	// rematerialize); start2 < 0 if none.
	start2, end2 int
	off          int
}

// overlaps reports whether a and b are live at a common step.
func (a *item) overlaps(b *item) bool {
	in := func(s0, e0, s1, e1 int) bool { return s0 <= e1 && s1 <= e0 }
	if in(a.start, a.end, b.start, b.end) {
		return true
	}
	if a.start2 >= 0 && in(a.start2, a.end2, b.start, b.end) {
		return true
	}
	if b.start2 >= 0 && in(a.start, a.end, b.start2, b.end2) {
		return true
	}
	return a.start2 >= 0 && b.start2 >= 0 && in(a.start2, a.end2, b.start2, b.end2)
}

// last returns the last step at which the item is live.
func (a *item) last() int {
	if a.start2 >= 0 {
		return max(a.end, a.end2)
	}
	return a.end
}

// backStep is the step of the buffer timeline at which node i's backward
// runs (forward steps are 0…F−1, the loss F, backward F+1…2F).
func (p *Plan) backStep(i int) int { return 2*len(p.nodes) - i }

// planBuffers assigns arena offsets to activations, gradients and scratch
// buffers by liveness over the timeline forward (steps 0..F-1), loss (F),
// backward of node i (step 2F-i).
func (p *Plan) planBuffers() error {
	T := 2*len(p.nodes) + 1
	isOut := map[*tensor]bool{}
	for _, t := range p.outputs {
		isOut[t] = true
	}
	again := p.rematerialize(isOut)
	items := p.bufferItems(again, isOut)
	if len(again) > 0 {
		// Recomputing costs a product per attention: only for a lower
		// peak. Where the peak lies elsewhere (the plan's gradients in
		// place, a small model) the plan keeps the probabilities.
		if kept := p.bufferItems(nil, isOut); livePeak(kept, T) <= livePeak(items, T) {
			p.remat, items = nil, kept
		} else {
			items = p.bufferItems(again, isOut) // the items' places in the tensors again
		}
	}
	p.liveElems = livePeak(items, T)
	return p.placeItems(items)
}

// bufferItems lays out the plan's buffers as items over its timeline
// (again: the values recomputed in the backward, rematerialize) and
// records in every tensor and node which items are theirs, replacing what
// an earlier call recorded.
func (p *Plan) bufferItems(again map[*tensor]int, isOut map[*tensor]bool) []item {
	F := len(p.nodes)
	T := 2*F + 1
	bstep := func(i int) int { return 2*F - i }
	var items []item
	add := func(size, start, end int) int {
		items = append(items, item{size: (size + 15) &^ 15, start: start, end: end, start2: -1, end2: -1})
		return len(items) - 1
	}
	for _, t := range p.tensors {
		t.dataItem, t.gradItem = -1, -1
	}
	for _, nd := range p.nodes {
		nd.aliased = false
		nd.hookItem = -1
		clear(nd.acc)
		for j := range nd.scratchItem {
			nd.scratchItem[j] = -1
		}
	}
	p.zeroGrads = nil
	// Activations.
	for _, t := range p.inputs {
		t.dataItem = add(t.n, 0, T)
	}
	for _, nd := range p.nodes {
		for _, t := range nd.out {
			if t == nil {
				continue
			}
			end := nd.idx
			if nd.needBwd && nd.saveOut {
				end = bstep(nd.idx)
			}
			if isOut[t] || p.kept[t] {
				end = T
			}
			for _, cn := range t.cons {
				if cn.idx > end {
					end = cn.idx
				}
				if cn.needBwd {
					for j, in := range cn.in {
						if in == t && (cn.saveIn[j] || hookReads(cn, j)) && bstep(cn.idx) > end {
							end = bstep(cn.idx)
						}
						if in == t && p.keepHooked(cn) {
							end = T
						}
					}
				}
			}
			if p.opts.KeepActivations && end > F {
				// A second backward reads what the first read: keep
				// those, not the values only the forward needed.
				end = T
			}
			if at, ok := again[t]; ok {
				// Recomputed at step at: live in the forward until its
				// last forward reader, then again from at until its last
				// backward reader (end, at least at).
				fwdEnd := nd.idx
				for _, cn := range t.cons {
					fwdEnd = max(fwdEnd, cn.idx)
				}
				t.dataItem = add(t.n, nd.idx, fwdEnd)
				items[t.dataItem].start2, items[t.dataItem].end2 = at, max(end, at)
				continue
			}
			if src := aliasSource(nd); src != nil && t == nd.out[0] {
				// A reshape: share the input's buffer, which now lives as
				// long as either needs it; the forward copy is dropped.
				nd.aliased = true
				if src.dataItem < 0 { // a constant (or parameter)
					t.data, t.host, t.buf, t.bufOff = src.data, src.host, src.buf, src.bufOff
					continue
				}
				t.dataItem = src.dataItem
				it := &items[src.dataItem]
				it.end = max(it.end, end)
				continue
			}
			t.dataItem = add(t.n, nd.idx, end)
		}
	}
	// Hook buffers: filled from the node's hook on, read after the
	// backward pass.
	if p.opts.HookBuffers != nil {
		N := max(p.Batch(), 1)
		for _, nd := range p.nodes {
			if !nd.hooked {
				continue
			}
			if k := p.opts.HookBuffers(nd.g); k > 0 {
				nd.hookItem, nd.hookLen = add(N*k, bstep(nd.idx), T), N*k
			}
		}
	}
	// Gradients and scratch. The loss seeds output 0's gradient at step F.
	first := map[*tensor]bool{}
	if o := p.outputs[0]; o.needGrad && !o.param {
		first[o] = true
		end := F
		if o.prod >= 0 {
			end = bstep(o.prod)
			if p.keepHooked(p.nodes[o.prod]) {
				end = T
			}
		}
		o.gradItem = add(o.n, F, end)
	}
	for i := F - 1; i >= 0; i-- {
		nd := p.nodes[i]
		if !nd.needBwd {
			continue
		}
		for j, t := range nd.in {
			nd.scratchItem[j] = -1
			if t == nil || !t.needGrad || !diffSlot(nd.g, j) {
				continue
			}
			if !first[t] {
				first[t] = true
				if !t.param {
					end := 0
					if t.prod >= 0 {
						end = bstep(t.prod)
						if p.keepHooked(p.nodes[t.prod]) {
							end = T
						}
					}
					// An elementwise backward writes its input's gradient
					// over its output's when that dies here: one buffer
					// fewer live at this step (Tanh, Relu, …, whose
					// input and output gradients are the same size).
					if y := nd.out[0]; nd.inplaceGrad && j == 0 && y != nil && y.gradItem >= 0 &&
						y.n == t.n && items[y.gradItem].end == bstep(i) {
						t.gradItem = y.gradItem
						items[y.gradItem].end = max(items[y.gradItem].end, end)
						continue
					}
					t.gradItem = add(t.n, bstep(i), end)
				}
				continue
			}
			nd.acc[j] = true
			if y := nd.out[0]; nd.gradIsDy && j == 0 && y != nil && y.gradItem >= 0 && y.n == t.n {
				continue // dy is added into t's gradient (placeItems)
			}
			nd.scratchItem[j] = add(t.n, bstep(i), bstep(i))
		}
	}
	// Values needing a gradient that no consumer contributes to still get
	// a (zero) buffer.
	for _, t := range p.tensors {
		if t.needGrad && !t.param && t.gradItem < 0 {
			end := T
			if t.prod >= 0 {
				end = bstep(t.prod)
			}
			t.gradItem = add(t.n, 0, end)
			p.zeroGrads = append(p.zeroGrads, t)
		}
	}
	for _, t := range p.tensors {
		t.dataEnd = T + 1
		if t.dataItem >= 0 {
			t.dataEnd = items[t.dataItem].last()
		}
	}
	// Scratch for a backward that runs its forward again, where the
	// input is intact there and the output is not: live at that step
	// alone. Taken where it adds less to the live peak than the winners
	// it replaces (one int32 per output) would hold outside the arena: at
	// a step near the end of the backward most activations are gone
	// (ResNet's stem), on a small network the pool may sit at the peak.
	base := -1
	for _, nd := range p.nodes {
		nd.redoItem = -1
		if nd.redoLen == 0 || !nd.needBwd || maxPoolRedoOff {
			continue
		}
		at := bstep(nd.idx)
		if nd.in[0].dataEnd < at || nd.out[0].dataEnd >= at {
			continue
		}
		if base < 0 {
			base = livePeak(items, T)
		}
		i := add(nd.redoLen, at, at)
		if peak := livePeak(items, T); peak-base < nd.out[0].n {
			nd.redoItem, base = i, peak
		} else {
			items = items[:i]
		}
	}
	return items
}

// placementOrders are the orders placeItems tries: largest first (the
// first, and the one kept on a tie), then among equal sizes the
// longest-lived first, the longest-lived first, the largest size×lifetime
// first.
var placementOrders = []func(a, b *item) bool{
	func(a, b *item) bool { return a.size > b.size },
	func(a, b *item) bool { return a.size > b.size || a.size == b.size && a.span() > b.span() },
	func(a, b *item) bool { return a.span() > b.span() || a.span() == b.span() && a.size > b.size },
	func(a, b *item) bool { return a.size*a.span() > b.size*b.span() },
}

// span is the number of steps the item is live.
func (a *item) span() int {
	n := a.end - a.start + 1
	if a.start2 >= 0 {
		n += a.end2 - a.start2 + 1
	}
	return n
}

// placeInOrder places items greedily in the given order, each at the
// lowest offset where it overlaps no item placed before it that is live
// at a common step, writing the offsets to offs; it returns the arena's
// size.
func placeInOrder(items []item, order, offs []int) int {
	total := 0
	var busy [][2]int
	for k, i := range order {
		it := &items[i]
		busy = busy[:0]
		for _, j := range order[:k] {
			if o := &items[j]; o.overlaps(it) {
				busy = append(busy, [2]int{offs[j], offs[j] + o.size})
			}
		}
		sort.Slice(busy, func(a, b int) bool { return busy[a][0] < busy[b][0] })
		off := 0
		for _, b := range busy {
			if off+it.size <= b[0] {
				break
			}
			if b[1] > off {
				off = b[1]
			}
		}
		offs[i] = off
		total = max(total, off+it.size)
	}
	return total
}

// livePeak is the lower bound any placement of items needs: the largest
// total size of the items live at one step of the timeline [0, T].
func livePeak(items []item, T int) int {
	live := make([]int, T+1)
	for _, it := range items {
		for s := it.start; s <= it.end && s <= T; s++ {
			live[s] += it.size
		}
		for s := it.start2; s >= 0 && s <= it.end2 && s <= T; s++ {
			live[s] += it.size
		}
	}
	peak := 0
	for _, v := range live {
		peak = max(peak, v)
	}
	return peak
}

// placeItems places items in the arena, allocates it and hands every
// tensor and node its slices.
func (p *Plan) placeItems(items []item) error {
	// Greedy placement, each item at the lowest offset free over its
	// lifetime, in a few orders; the smallest arena is kept, the first
	// that reaches the live bound ends the search. Largest first alone
	// left VGG-16's bk plan 2.9 % and ResNet-50's and ViT-B/16's mixed
	// plans 0.9 % above the bound (224², batch 32).
	order := make([]int, len(items))
	offs, best := make([]int, len(items)), make([]int, len(items))
	total := -1
	for _, less := range placementOrders {
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return less(&items[order[a]], &items[order[b]]) })
		if t := placeInOrder(items, order, offs); total < 0 || t < total {
			total = t
			copy(best, offs)
		}
		if total <= p.liveElems {
			break
		}
	}
	for i := range items {
		items[i].off = best[i]
	}
	p.arenaElems = total
	for _, it := range items {
		p.peakElems += it.size
	}
	if err := p.checkPlanSize(total); err != nil {
		return err
	}
	if p.opts.PlanOnly {
		return nil
	}
	buf, err := p.dev.Alloc(total)
	if err != nil {
		return fmt.Errorf("runtime: allocating the %d-element arena: %w", total, err)
	}
	p.arena = buf
	host := buf.Floats()
	slice := func(i, n int) []float32 { o := items[i].off; return host[o : o+n : o+n] }
	for _, t := range p.tensors {
		if t.dataItem >= 0 {
			t.data = slice(t.dataItem, t.n)
			t.off = items[t.dataItem].off
		}
	}
	for _, nd := range p.nodes {
		if nd.aliased {
			nd.fk.Fn = func() {}
		}
		if nd.hookItem >= 0 {
			nd.hookBuf = slice(nd.hookItem, nd.hookLen)
		}
		if nd.redoItem >= 0 {
			nd.redoBuf = slice(nd.redoItem, nd.redoLen)
		}
	}
	for _, t := range p.tensors {
		if t.gradItem >= 0 {
			t.grad = slice(t.gradItem, t.n)
			t.goff = items[t.gradItem].off
		}
	}
	for _, nd := range p.nodes {
		for j, t := range nd.in {
			if t == nil || !nd.needBwd || !t.needGrad || !diffSlot(nd.g, j) {
				continue
			}
			if t.param && p.opts.NoParamGrads {
				continue
			}
			if nd.acc[j] && nd.scratchItem[j] < 0 { // gradIsDy
				nd.dInPlan[j] = nd.out[0].grad
			} else if nd.acc[j] {
				nd.dInPlan[j] = slice(nd.scratchItem[j], t.n)
			} else {
				nd.dInPlan[j] = t.grad
			}
		}
	}
	return nil
}

// aliasSource returns the input whose buffer nd's first output can share
// (the operators that only reinterpret the shape), or nil.
func aliasSource(nd *node) *tensor {
	switch nd.g.OpType {
	case "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast":
	default:
		return nil
	}
	x, y := nd.in[0], nd.out[0]
	if x == nil || y == nil || x.n != y.n || x.i64 != nil || x.b != nil || (x.isConst && x.data == nil) {
		return nil
	}
	return x
}

// linkConsumers records, for every tensor, the plan nodes reading it (each
// once, in plan order). After fusion these differ from the graph's
// consumer lists: a fused node replaces the nodes of its chain.
func (p *Plan) linkConsumers() {
	for _, t := range p.tensors {
		t.cons = nil
	}
	for _, nd := range p.nodes {
		for _, t := range nd.in {
			if t != nil && (len(t.cons) == 0 || t.cons[len(t.cons)-1] != nd) {
				t.cons = append(t.cons, nd)
			}
		}
	}
}

// Graph returns the compiled graph.
func (p *Plan) Graph() *graph.Graph { return p.g }

// Device returns the plan's device.
func (p *Plan) Device() Device { return p.dev }

// Scratch returns the workspace the plan's kernels share during Forward
// and Backward (convolution columns, per-worker partial sums): device
// memory, an operand for the device's operations. Its contents are
// undefined, and it is the caller's between those calls and during a
// Backward hook (BackwardOptions.Hook: a node's kernels use it only
// within their own call, and a hook runs between nodes): book-keeping
// runs its weighted-sum convolutions in it after Backward, and the DP
// engine's per-sample norm rules in its hooks, instead of holding
// workspaces of their own.
func (p *Plan) Scratch() []float32 { return p.ws }

// keepHooked reports whether nd's hooked buffers stay alive until the
// next Forward (Options.KeepHooked, KeepHookedIf).
func (p *Plan) keepHooked(nd *node) bool {
	return nd.hooked && p.opts.KeepHooked && (p.opts.KeepHookedIf == nil || p.opts.KeepHookedIf(nd.g))
}

// ArenaBytes returns the size of the activation/gradient arena in bytes;
// UnplannedBytes is what the same buffers would take without reuse.
func (p *Plan) ArenaBytes() int64 { return 4 * int64(p.arenaElems) }

// LiveBytes returns the largest total size of the buffers live at one step
// of the timeline: the lower bound for any arena of this plan.
func (p *Plan) LiveBytes() int64 { return 4 * int64(p.liveElems) }

// UnplannedBytes returns the bytes the arena's buffers would take if none
// shared memory.
func (p *Plan) UnplannedBytes() int64 { return 4 * int64(p.peakElems) }

// Input returns the buffer of graph input i, to be filled before Forward,
// and its shape. It is a view of device memory: the host fills it in place
// only on a host device (CPU, reference backend); SetInput works on any.
func (p *Plan) Input(i int) ([]float32, []int) { return p.inputs[i].data, p.inputs[i].shape }

// SetInput copies x into graph input i, checking its length.
func (p *Plan) SetInput(i int, x []float32) error {
	if p.released {
		return errReleased
	}
	if i < 0 || i >= len(p.inputs) {
		return fmt.Errorf("runtime: input %d out of range (%d inputs)", i, len(p.inputs))
	}
	t := p.inputs[i]
	if len(x) != t.n {
		return fmt.Errorf("runtime: input %q has shape %v (%d elements), got %d elements", t.v.Name, t.shape, t.n, len(x))
	}
	if p.opts.PlanOnly {
		return errPlanOnly
	}
	return p.dev.CopyIn(p.arena, t.off, x)
}

// Value returns the buffer of a value named in Options.KeepValues (nil
// for any other): device memory, valid from the Forward that computes it
// until the next Forward.
func (p *Plan) Value(name string) []float32 {
	if t := p.tensors[p.g.Values[name]]; t != nil && p.kept[t] {
		return t.data
	}
	return nil
}

// NormStats returns the row statistics of the normalization node whose
// first output is named output (LayerNormalization, GroupNormalization,
// InstanceNormalization, the BatchNorm rewrite's GroupNorm): each row's
// mean and 1/√(variance + ε) as its last Forward computed them, device
// memory the node owns, overwritten by the next Forward; nil for a value
// no such node produces.
func (p *Plan) NormStats(output string) (mean, invStd []float32) {
	t := p.tensors[p.g.Values[output]]
	if t == nil || t.prod < 0 {
		return nil, nil
	}
	nd := p.nodes[t.prod]
	if nd.norm == nil || nd.out[0] != t {
		return nil, nil
	}
	return nd.norm.mean, nd.norm.inv
}

// Output returns graph output i after Forward, and its shape. The slice
// aliases plan memory (host memory on the CPU) and is overwritten by the
// next Forward.
func (p *Plan) Output(i int) ([]float32, []int) { return p.outputs[i].data, p.outputs[i].shape }

// Batch returns the leading dimension of graph input 0 (the physical batch
// the plan was compiled for), or 0 if it has none.
func (p *Plan) Batch() int {
	if len(p.inputs) == 0 || len(p.inputs[0].shape) == 0 {
		return 0
	}
	return p.inputs[0].shape[0]
}

// HookBuffer returns the hook buffer (Options.HookBuffers) of the hooked
// node whose first output is named output: device memory of the arena,
// Batch()·k floats, whose contents are undefined when the node's hook
// starts and stay the hook's until the next Forward. It is nil where the
// node has none, and in a PlanOnly plan.
func (p *Plan) HookBuffer(output string) []float32 {
	for _, nd := range p.nodes {
		if nd.hookItem >= 0 && len(nd.g.Outputs) > 0 && nd.g.Outputs[0] != nil && nd.g.Outputs[0].Name == output {
			return nd.hookBuf
		}
	}
	return nil
}

// HookedNodes returns, in forward order, the nodes for which Backward
// calls BackwardOptions.Hook: those reading a trainable parameter or a
// value derived from parameters only (see HookEvent).
func (p *Plan) HookedNodes() []*graph.Node {
	var out []*graph.Node
	for _, nd := range p.nodes {
		if nd.hooked {
			out = append(out, nd.g)
		}
	}
	return out
}

// NumInputs returns the number of graph inputs.
func (p *Plan) NumInputs() int { return len(p.inputs) }

// NumOutputs returns the number of graph outputs.
func (p *Plan) NumOutputs() int { return len(p.outputs) }

// ReadOutput copies graph output i into dst (whose length must match),
// through the device.
func (p *Plan) ReadOutput(i int, dst []float32) error {
	if p.released {
		return errReleased
	}
	if i < 0 || i >= len(p.outputs) {
		return fmt.Errorf("runtime: output %d out of range (%d outputs)", i, len(p.outputs))
	}
	t := p.outputs[i]
	if len(dst) != t.n {
		return fmt.Errorf("runtime: output %q has shape %v (%d elements), destination holds %d", t.v.Name, t.shape, t.n, len(dst))
	}
	if t.dataItem < 0 { // a constant output
		if t.buf != nil {
			return p.dev.CopyOut(dst, t.buf, t.bufOff)
		}
		copy(dst, t.data)
		return nil
	}
	return p.dev.CopyOut(dst, p.arena, t.off)
}

// Params returns the names of the trainable parameters, in initializer
// order.
func (p *Plan) Params() []string {
	out := make([]string, len(p.params))
	for i, t := range p.params {
		out[i] = t.v.Name
	}
	return out
}

// Param returns the device buffer view of trainable parameter name
// (update it in place through the device's operations) and its shape. On
// a device that adopts host memory (CPU, reference backend) it is the
// initializer's own storage; elsewhere the initializer is a host copy that
// SyncParams refreshes and LoadParams writes back.
func (p *Plan) Param(name string) ([]float32, []int) {
	for _, t := range p.params {
		if t.v.Name == name {
			return t.data, t.shape
		}
	}
	return nil, nil
}

// HostParam returns the host storage of trainable parameter name (nil if
// it is not trainable): the graph's initializer, which SyncParams brings
// up to date with the device and LoadParams copies to it.
func (p *Plan) HostParam(name string) []float32 {
	for _, t := range p.params {
		if t.v.Name == name {
			return t.host
		}
	}
	return nil
}

// Grad returns the gradient of trainable parameter name after Backward,
// summed over the batch (nil if name is not trainable).
func (p *Plan) Grad(name string) []float32 {
	for _, t := range p.params {
		if t.v.Name == name {
			return t.grad
		}
	}
	return nil
}

// Forward runs the forward pass on the current inputs.
func (p *Plan) Forward() error {
	if p.opts.PlanOnly {
		return errPlanOnly
	}
	if p.released {
		return errReleased
	}
	for _, nd := range p.nodes {
		if err := p.dev.Run(&nd.fk); err != nil {
			return err
		}
	}
	p.forwardDone = true
	return nil
}

// SetLabelSmoothing makes the loss head's target of a sample of label y
// (1−α)·onehot(y) + α/K over K classes from the next Loss on (Szegedy et
// al. 2016) — with SetMultiLabel, each label's target (1−α)·[it applies]
// + α/2, towards ½ —; α = 0, the default, is the plain cross-entropy. It
// is a per-sample loss still: each sample's gradient is its own.
func (p *Plan) SetLabelSmoothing(alpha float64) error {
	if !(alpha >= 0 && alpha < 1) {
		return fmt.Errorf("runtime: label smoothing %v must be in [0, 1)", alpha)
	}
	p.smoothing = float32(alpha)
	return nil
}

// MaxLabels is the most labels a multi-label loss head takes
// (labelset.Max).
const MaxLabels = labelset.Max

// SetMultiLabel selects the loss head from the next Loss on: multi-label
// (on) — each of the K logits a label of its own, a sample's label the
// set of those that apply as internal/labelset says (for K ≤ 62 the bits
// of its int64 label, bit j label j; for more an interned set's handle),
// its loss the binary cross-entropy of each logit's sigmoid averaged over
// the labels (PyTorch's BCEWithLogitsLoss of the sample; a partial set's
// ignored labels' terms left out and the sum still divided by K, as
// PyTorch's unreduced loss times a 0/1 mask, then its mean) — or the softmax
// cross-entropy of one class (off, the default). Both are one loss a
// sample: each sample's gradient is its own.
func (p *Plan) SetMultiLabel(on bool) error {
	if on && p.hasLoss && p.outputs[0].shape[1] > MaxLabels {
		return fmt.Errorf("runtime: a multi-label head of %d labels; at most %d", p.outputs[0].shape[1], MaxLabels)
	}
	if on && p.hasLoss && p.labelWords == nil {
		p.labelWords = make([]uint64, p.outputs[0].shape[0]*LabelWords(p.outputs[0].shape[1]))
	}
	p.multiLabel = on
	return nil
}

// SetPosWeight weighs each label's positive term of the multi-label loss
// head by w[j] (PyTorch's BCEWithLogitsLoss pos_weight): a sample's loss
// −(1/K) Σ_j [w_j·t_j·log σ(z_j) + (1 − t_j)·log(1 − σ(z_j))]. Still one
// loss a sample. w has one finite, non-negative weight a logit; nil
// restores 1 for every label. It needs SetMultiLabel.
func (p *Plan) SetPosWeight(w []float64) error {
	return p.setPerLabel("positive weights", w, 1, p.posWeightHost, p.posWeight, p.posWeightBuf, func(v float64) string {
		if !(v >= 0) || math.IsInf(v, 0) {
			return "positive weight %v must be finite and non-negative"
		}
		return ""
	})
}

// setPerLabel stages one value a label of the multi-label loss head (what
// they are, for messages), v[j] or def for every label where v is nil,
// into host and, where the device holds its own copy dev, into buf; bad
// says what is wrong with a value ("" where nothing is), a format of it.
func (p *Plan) setPerLabel(what string, v []float64, def float64, host, dev []float32, buf Buffer, bad func(float64) string) error {
	if !p.hasLoss {
		return fmt.Errorf("runtime: %s need the loss head", what)
	}
	if v != nil && !p.multiLabel {
		return fmt.Errorf("runtime: %s are the multi-label loss head's (SetMultiLabel)", what)
	}
	if k := len(host); v != nil && len(v) != k {
		return fmt.Errorf("runtime: %d %s for a head of %d labels", len(v), what, k)
	}
	for j := range host {
		x := def
		if v != nil {
			x = v[j]
		}
		if msg := bad(x); msg != "" {
			return fmt.Errorf("runtime: label %d's "+msg, j, x)
		}
		host[j] = float32(x)
	}
	if !SameMemory(dev, host) {
		if err := p.dev.CopyIn(buf, 0, host); err != nil {
			return fmt.Errorf("runtime: copying the %s in: %w", what, err)
		}
	}
	return nil
}

// SetUncertainTargets gives the multi-label loss head's labels that a
// sample ignores (internal/labelset's partial sets: uncertain labels) a
// term of their own: label j's the binary cross-entropy against the soft
// target u[j] ∈ (0, 1) — label smoothing regularization of uncertain
// labels (Pham et al. 2021: CheXpert's U-Ones with targets below 1) —,
// or none where u[j] is 0 (U-Ignore, the default). Still one loss a
// sample. u has one value a logit; nil restores 0 for every label. It
// needs SetMultiLabel.
func (p *Plan) SetUncertainTargets(u []float64) error {
	return p.setPerLabel("uncertain targets", u, 0, p.uncertainHost, p.uncertain, p.uncertainBuf, func(v float64) string {
		if !(v == 0 || v > 0 && v < 1) {
			return "uncertain target %v must be in (0, 1), or 0 for none"
		}
		return ""
	})
}

// Loss computes the per-sample softmax cross-entropy of output 0 (logits
// of shape (N, K)) against labels (N class indices in [0, K)) into losses
// (N), and keeps the softmax for Backward — with SetMultiLabel, the
// multi-label loss against label sets (N labels of K-label sets, as
// internal/labelset says), keeping the sigmoids. Call it after Forward.
func (p *Plan) Loss(labels []int64, losses []float32) error {
	if p.opts.PlanOnly {
		return errPlanOnly
	}
	if !p.hasLoss {
		return fmt.Errorf("runtime: output %q has shape %v; the loss head needs (N, K)", p.outputs[0].v.Name, p.outputs[0].shape)
	}
	o := p.outputs[0]
	n, k := o.shape[0], o.shape[1]
	if len(labels) != n || len(losses) != n {
		return fmt.Errorf("runtime: loss: %d labels and %d losses for a batch of %d", len(labels), len(losses), n)
	}
	if p.multiLabel && k > MaxLabels {
		return fmt.Errorf("runtime: loss: a multi-label head of %d labels; at most %d", k, MaxLabels)
	}
	in := labels
	if p.multiLabel {
		// Each sample's set as its words, then its ignored labels', in
		// the order the kernels read them (LabelWords(K) a sample).
		w := LabelWords(k) // p.labelWords holds n·w (SetMultiLabel)
		for i, y := range labels {
			set, ign := p.labelWords[i*w:i*w+w/2], p.labelWords[i*w+w/2:(i+1)*w]
			if err := labelset.Expand(y, k, set); err != nil {
				return fmt.Errorf("runtime: loss: sample %d: %w", i, err)
			}
			if err := labelset.Ignored(y, k, ign); err != nil {
				return fmt.Errorf("runtime: loss: sample %d: %w", i, err)
			}
		}
		in = unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(p.labelWords))), n*w)
	} else {
		for i, y := range labels {
			if y < 0 || y >= int64(k) {
				return fmt.Errorf("runtime: loss: label %d of sample %d is outside [0, %d)", y, i, k)
			}
		}
	}
	if n == 0 {
		return nil
	}
	if err := p.dev.CopyIn(p.labelsBuf, 0, bitsOf64(in)); err != nil {
		return fmt.Errorf("runtime: loss: copying the labels in: %w", err)
	}
	if p.multiLabel {
		p.ops.SigmoidCrossEntropy(o.data, p.labels, n, k, p.smoothing, p.posWeight, p.uncertain, p.losses, p.probs)
	} else {
		p.ops.SoftmaxCrossEntropy(o.data, p.labels, n, k, p.smoothing, p.losses, p.probs)
	}
	if err := p.dev.CopyOut(losses, p.lossesBuf, 0); err != nil {
		return fmt.Errorf("runtime: loss: copying the losses out: %w", err)
	}
	return nil
}

// Backward runs the backward pass of Σ_i w_i·loss_i for the losses of the
// last Loss call (weights nil means all ones): it seeds
// dL/dlogits_i = w_i·(softmax_i − onehot(y_i)) and propagates it.
func (p *Plan) Backward(weights []float32, opts *BackwardOptions) error {
	if !p.hasLoss {
		return errors.New("runtime: Backward needs the loss head; use BackwardFrom")
	}
	o := p.outputs[0]
	n, k := o.shape[0], o.shape[1]
	if weights == nil {
		weights = p.ones
	}
	if len(weights) != n {
		return fmt.Errorf("runtime: %d weights for a batch of %d", len(weights), n)
	}
	if o.grad == nil {
		return errors.New("runtime: plan computes no gradients (ForwardOnly, or no trainable parameter reaches the output)")
	}
	if p.multiLabel {
		p.ops.SigmoidCrossEntropyBackward(p.probs, p.labels, weights, n, k, p.smoothing, p.posWeight, p.uncertain, o.grad)
	} else {
		p.ops.SoftmaxCrossEntropyBackward(p.probs, p.labels, weights, n, k, p.smoothing, o.grad)
	}
	return p.backward(opts)
}

// BackwardFrom runs the backward pass from an arbitrary gradient dy of
// output 0 (same length as the output).
func (p *Plan) BackwardFrom(dy []float32, opts *BackwardOptions) error {
	o := p.outputs[0]
	if o.grad == nil {
		return errors.New("runtime: plan computes no gradients (ForwardOnly, or no trainable parameter reaches the output)")
	}
	if len(dy) != o.n {
		return fmt.Errorf("runtime: output gradient of %d elements, want %d", len(dy), o.n)
	}
	if o.gradItem < 0 { // a gradient the plan holds outside the arena
		copy(o.grad, dy)
	} else if err := p.dev.CopyIn(p.arena, o.goff, dy); err != nil {
		return err
	}
	return p.backward(opts)
}

func (p *Plan) backward(opts *BackwardOptions) error {
	if p.released {
		return errReleased
	}
	if !p.forwardDone {
		return errors.New("runtime: Backward without a preceding Forward (or a second Backward without KeepActivations)")
	}
	if !p.opts.KeepActivations {
		p.forwardDone = false
	}
	var bo BackwardOptions
	if opts != nil {
		bo = *opts
	}
	if p.opts.NoParamGrads {
		bo.SkipParamGrads = true
	}
	for _, t := range p.params {
		if !bo.SkipParamGrads && !t.reach {
			p.ops.Fill(0, t.grad)
		}
	}
	for _, t := range p.zeroGrads {
		p.ops.Fill(0, t.grad)
	}
	for i := len(p.nodes) - 1; i >= 0; i-- {
		nd := p.nodes[i]
		if !nd.needBwd {
			continue
		}
		for _, rn := range p.remat[i] {
			if err := p.dev.Run(&rn.fk); err != nil {
				return err
			}
		}
		if bo.SkipParamGrads && nd.paramOnly() {
			continue
		}
		if nd.hooked && bo.Hook != nil {
			bo.Hook(&nd.hookEv)
		}
		any := false
		for j, t := range nd.in {
			nd.dIn[j] = nd.dInPlan[j]
			if t != nil && (t.param || t.derived) && bo.SkipParamGrads {
				nd.dIn[j] = nil
			}
			if nd.dIn[j] != nil {
				any = true
			}
		}
		if !any {
			continue
		}
		if err := p.dev.Run(&nd.bk); err != nil {
			return err
		}
		for j, t := range nd.in {
			if nd.acc[j] && nd.dIn[j] != nil {
				p.ops.Axpy(1, nd.dIn[j], t.grad)
			}
		}
	}
	return nil
}

// paramOnly reports whether every output of nd is computed from trainable
// parameters and constants alone (tensor.derived): under
// BackwardOptions.SkipParamGrads its backward computes nothing wanted.
func (nd *node) paramOnly() bool {
	some := false
	for _, t := range nd.out {
		if t == nil {
			continue
		}
		if !t.derived {
			return false
		}
		some = true
	}
	return some
}
