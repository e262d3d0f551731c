package graph

import (
	"fmt"
	"strings"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Dim is one dimension of a shape: a known size, or unknown (Size < 0) with
// an optional symbolic name such as "batch".
type Dim struct {
	Size  int64
	Param string
}

// Shape is a list of dimensions. A nil Shape is an unknown rank.
type Shape []Dim

// Static reports whether every dimension is known.
func (s Shape) Static() bool {
	for _, d := range s {
		if d.Size < 0 {
			return false
		}
	}
	return s != nil
}

// Ints returns the sizes, with -1 for unknown dimensions.
func (s Shape) Ints() []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = d.Size
	}
	return out
}

// NumElements returns the product of the sizes, or -1 if any is unknown.
func (s Shape) NumElements() int64 {
	if !s.Static() {
		return -1
	}
	n := int64(1)
	for _, d := range s {
		n *= d.Size
	}
	return n
}

func (s Shape) String() string {
	if s == nil {
		return "?"
	}
	parts := make([]string, len(s))
	for i, d := range s {
		switch {
		case d.Size >= 0:
			parts[i] = fmt.Sprint(d.Size)
		case d.Param != "":
			parts[i] = d.Param
		default:
			parts[i] = "?"
		}
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// StaticShape makes a Shape from known sizes.
func StaticShape(dims ...int64) Shape {
	s := make(Shape, len(dims))
	for i, d := range dims {
		s[i] = Dim{Size: d}
	}
	return s
}

// Value is a tensor flowing through the graph: a graph input, an
// initializer, a folded constant, or a node output.
type Value struct {
	Name  string
	DType DType
	Shape Shape
	// Producer is the node computing the value; nil for graph inputs,
	// initializers and folded constants.
	Producer *Node
	// Const holds the data of initializers and folded constants.
	Const *Tensor
	// Initializer marks a graph initializer: a candidate parameter.
	// Folded constants have Const set but are not initializers.
	Initializer bool
	// ExportConstant marks an initializer the exporter says is no
	// parameter (torch.export's signature: a buffer, a constant tensor,
	// or a constant its optimizer lifted; markExportConstants). It is
	// never trained, and folds like a constant.
	ExportConstant bool
	// NoGradient marks a float initializer no gradient reaches: every
	// use ends in a comparison or another operator no gradient passes
	// (the data of a mask: Swin's shifted-window mask built from fill
	// values, onlyMasks), or every element it gives the model is masked
	// out again by a condition computed from it (the same mask as the
	// dynamo exporter writes it, masked_fill twice: markMaskedOut). It is
	// never trained, and folds like a constant.
	NoGradient bool
	// ExportKind is the kind torch.export's signature gives the value
	// (PARAMETER, BUFFER, CONSTANT_TENSOR, USER_INPUT), "" where the model
	// marks it not (or carries no signature).
	ExportKind string
	// Declared is the type the model declares for a graph input that is
	// computed with another (DType): an integer input the model casts to
	// float at once, fed float32 (CastInputsToFloat). Undefined otherwise;
	// the export declares it.
	Declared DType
	// Half is the half-precision type (Float16, BFloat16) the model
	// declared or stored the value in before UpcastHalf widened it to
	// float32; Undefined otherwise. NarrowHalf writes it back so.
	Half DType
	// Consumers are the nodes reading the value, in graph order.
	Consumers []*Node

	proto *onnxpb.TensorProto // the initializer as loaded
}

// IsParam reports whether v is a floating-point initializer the exporter
// does not mark as a constant and a gradient reaches: the tensors a
// training run may update.
func (v *Value) IsParam() bool {
	return v.Initializer && v.DType.IsFloat() && !v.ExportConstant && !v.NoGradient
}

// Node is one operator application.
type Node struct {
	Name   string
	OpType string
	Domain string
	// Opset is the version of the node's domain the model imports: it
	// selects operator semantics and attribute defaults.
	Opset int64
	// Inputs has nil entries for omitted optional inputs.
	Inputs  []*Value
	Outputs []*Value
	// Attrs are the node's attributes as stored in the model.
	Attrs []*onnxpb.AttributeProto

	proto *onnxpb.NodeProto
}

func (n *Node) String() string {
	if n.Name != "" {
		return fmt.Sprintf("%s %q", n.OpType, n.Name)
	}
	if len(n.Outputs) > 0 && n.Outputs[0] != nil {
		return fmt.Sprintf("%s (output %q)", n.OpType, n.Outputs[0].Name)
	}
	return n.OpType
}

// Input returns input i, or nil if it is absent.
func (n *Node) Input(i int) *Value {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return nil
}

// Output returns the node's output i, nil if absent.
func (n *Node) Output(i int) *Value {
	if i < len(n.Outputs) {
		return n.Outputs[i]
	}
	return nil
}

// Graph is the typed IR of a model's main graph.
type Graph struct {
	Name string
	// Nodes are in topological order.
	Nodes []*Node
	// Inputs are the graph inputs that are not initializers.
	Inputs  []*Value
	Outputs []*Value
	// Initializers in model order; folding may append constants.
	Initializers []*Value
	// Values maps every value name to its value.
	Values map[string]*Value
	// Opsets maps an operator-set domain ("" is the default ai.onnx) to the
	// imported version.
	Opsets map[string]int64
	// ExportSignature reports that the model carries torch.export's
	// signature marks (PyTorch's dynamo exporter; Value.ExportKind).
	ExportSignature bool
	// UnrolledLoops and InlinedIfs count the control flow the loader
	// replaced by operators (controlflow.go), SliceAssignments the
	// ScatterNDs it read as slice assignments (sliceassign.go).
	UnrolledLoops, InlinedIfs, SliceAssignments int
	// HalfFrom is the half-precision type the model was exported in and
	// UpcastHalf widened (its export is narrowed back: NarrowHalf);
	// Undefined for a float32 model, one of mixed half types, or one to
	// be written in float32.
	HalfFrom DType

	model *onnx.Model
	// largeFolds and mustFolds count the elements of the large folds of
	// the InferShapes in progress (maxLargeFolds, maxMustFolds).
	largeFolds, mustFolds int64
}

// Model returns the model the graph was read from.
func (g *Graph) Model() *onnx.Model { return g.model }

func canonicalDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

// FromONNX builds the IR of m's main graph. It decodes initializers, links
// values to their producers and consumers, sorts the nodes topologically and
// validates the result.
//
// On the way it expands what the runtime has no kernel for but ONNX
// defines in terms of operators it has, so that CheckOps, shape inference,
// plans and export only ever see those operators:
//   - a call of a model-local function (ModelProto.functions, as PyTorch's
//     dynamo exporter and onnxscript write them) becomes the function's
//     nodes, nested calls included (functions.go);
//   - the standard function operators Swish-24, RMSNormalization-23 and
//     Attention-23 to 25 become their definitions (expand_*.go,
//     ExpandedOps).
//
// The graph keeps the expansion: ToONNX writes a trained model with the
// expanded nodes in place of the calls and operators it loaded (valid at
// the model's opset; the model's function definitions are kept, unused).
func FromONNX(m *onnx.Model) (*Graph, error) {
	gp := m.Proto.GetGraph()
	g := &Graph{Name: gp.GetName(), Values: map[string]*Value{}, Opsets: map[string]int64{}, model: m}
	for _, op := range m.Proto.GetOpsetImport() {
		g.Opsets[canonicalDomain(op.GetDomain())] = op.GetVersion()
	}
	for _, tp := range gp.GetInitializer() {
		name := tp.GetName()
		if name == "" {
			return nil, fmt.Errorf("graph: an initializer has no name")
		}
		if _, dup := g.Values[name]; dup {
			return nil, fmt.Errorf("graph: initializer %q defined twice", name)
		}
		t, err := TensorFromProto(m, tp)
		if err != nil {
			return nil, fmt.Errorf("graph: initializer %q: %w", name, err)
		}
		v := &Value{Name: name, DType: t.DType, Shape: StaticShape(t.Shape...), Const: t, Initializer: true, proto: tp}
		g.Values[name] = v
		g.Initializers = append(g.Initializers, v)
	}
	if len(gp.GetSparseInitializer()) > 0 {
		return nil, fmt.Errorf("graph: sparse initializers are not supported (%d found)", len(gp.GetSparseInitializer()))
	}
	for _, vi := range gp.GetInput() {
		name := vi.GetName()
		if v, ok := g.Values[name]; ok && v.Initializer {
			continue // an initializer listed as input (IR < 4 style)
		}
		if _, dup := g.Values[name]; dup {
			return nil, fmt.Errorf("graph: input %q defined twice", name)
		}
		dt, sh, err := typeOf(vi)
		if err != nil {
			return nil, fmt.Errorf("graph: input %q: %w", name, err)
		}
		v := &Value{Name: name, DType: dt, Shape: sh}
		g.Values[name] = v
		g.Inputs = append(g.Inputs, v)
	}
	declared := map[string]*onnxpb.ValueInfoProto{}
	for _, vi := range gp.GetValueInfo() {
		declared[vi.GetName()] = vi
	}
	for _, vi := range gp.GetOutput() {
		declared[vi.GetName()] = vi
	}
	loaded, infos, err := expandFunctions(gp, m.Proto, g.Opsets)
	if err != nil {
		return nil, err
	}
	if loaded, g.UnrolledLoops, err = unrollLoops(m, gp, loaded, g.Opsets); err != nil {
		return nil, err
	}
	for _, vi := range infos {
		declared[vi.GetName()] = vi
	}
	for i, ln := range loaded {
		np := ln.proto
		n := &Node{Name: np.GetName(), OpType: np.GetOpType(), Domain: canonicalDomain(np.GetDomain()), Attrs: np.GetAttribute(), proto: np}
		ver, ok := g.Opsets[n.Domain]
		if ln.opset > 0 {
			ver, ok = ln.opset, true
		}
		if !ok {
			if ln.from != "" {
				return nil, fmt.Errorf("graph: node %s of function %s: domain %q is imported neither by the function nor by the model", n, ln.from, np.GetDomain())
			}
			return nil, fmt.Errorf("graph: node %d (%s): domain %q is not imported", i, n, np.GetDomain())
		}
		n.Opset = ver
		for _, out := range np.GetOutput() {
			if out == "" {
				n.Outputs = append(n.Outputs, nil)
				continue
			}
			if prev, dup := g.Values[out]; dup {
				if prev.Producer != nil {
					return nil, fmt.Errorf("graph: node %s: output %q is also produced by %s", n, out, prev.Producer)
				}
				return nil, fmt.Errorf("graph: node %s: output %q is also a graph input or initializer", n, out)
			}
			v := &Value{Name: out, Producer: n}
			if vi, ok := declared[out]; ok {
				v.DType, v.Shape, _ = typeOf(vi)
			}
			g.Values[out] = v
			n.Outputs = append(n.Outputs, v)
		}
		g.Nodes = append(g.Nodes, n)
	}
	// Link inputs after every output exists: the model's node order need
	// not be topological.
	for _, n := range g.Nodes {
		for _, in := range n.proto.GetInput() {
			if in == "" {
				n.Inputs = append(n.Inputs, nil)
				continue
			}
			v, ok := g.Values[in]
			if !ok {
				return nil, fmt.Errorf("graph: node %s: input %q is not produced by any node, input or initializer", n, in)
			}
			n.Inputs = append(n.Inputs, v)
			v.Consumers = append(v.Consumers, n)
		}
	}
	for _, vi := range gp.GetOutput() {
		v, ok := g.Values[vi.GetName()]
		if !ok {
			return nil, fmt.Errorf("graph: output %q is not produced by any node, input or initializer", vi.GetName())
		}
		g.Outputs = append(g.Outputs, v)
	}
	// Before the expansions: Attention's reads which initializers train.
	markExportConstants(g, gp)
	for _, v := range g.Initializers {
		v.NoGradient = v.DType.IsFloat() && !v.ExportConstant && onlyMasks(g, v)
	}
	if err := g.expandStandardFunctions(); err != nil {
		return nil, err
	}
	if err := g.sortTopological(); err != nil {
		return nil, err
	}
	if err := g.inlineStaticIfs(); err != nil {
		return nil, err
	}
	n, err := g.sliceAssignments()
	if err != nil {
		return nil, err
	}
	g.SliceAssignments = n
	markMaskedOut(g)
	return g, nil
}

// typeOf reads a tensor type from a ValueInfoProto.
func typeOf(vi *onnxpb.ValueInfoProto) (DType, Shape, error) {
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		if vi.GetType() == nil {
			return Undefined, nil, nil
		}
		return Undefined, nil, fmt.Errorf("only tensor types are supported")
	}
	dt := DType(tt.GetElemType())
	if tt.GetShape() == nil {
		return dt, nil, nil
	}
	sh := make(Shape, 0, len(tt.GetShape().GetDim()))
	for _, d := range tt.GetShape().GetDim() {
		if _, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
			sh = append(sh, Dim{Size: d.GetDimValue()})
		} else {
			sh = append(sh, Dim{Size: -1, Param: d.GetDimParam()})
		}
	}
	return dt, sh, nil
}

// sortTopological orders g.Nodes so that every node follows the producers
// of its inputs (stable: an already ordered graph keeps its order), and
// reports a cycle by naming a node on it.
func (g *Graph) sortTopological() error {
	indeg := make(map[*Node]int, len(g.Nodes))
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != nil && in.Producer != nil {
				indeg[n]++
			}
		}
	}
	order := make([]*Node, 0, len(g.Nodes))
	done := make(map[*Node]bool, len(g.Nodes))
	// Repeated scans keep the original order among ready nodes; exports
	// are almost always already sorted, so this is one pass in practice.
	for len(order) < len(g.Nodes) {
		progress := false
		for _, n := range g.Nodes {
			if done[n] || indeg[n] > 0 {
				continue
			}
			done[n] = true
			order = append(order, n)
			progress = true
			for _, out := range n.Outputs {
				if out == nil {
					continue
				}
				for _, c := range out.Consumers {
					indeg[c]--
				}
			}
		}
		if !progress {
			for _, n := range g.Nodes {
				if !done[n] {
					return fmt.Errorf("graph: node %s is on a cycle", n)
				}
			}
		}
	}
	g.Nodes = order
	return nil
}

// Validate checks the graph's structure: every node input is produced
// before it is read, values have one producer, and every node has the
// number of inputs and outputs its operator allows (for known operators).
func (g *Graph) Validate() error {
	seen := map[*Value]bool{}
	for _, v := range g.Inputs {
		seen[v] = true
	}
	for _, v := range g.Values {
		if v.Const != nil {
			seen[v] = true
		}
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != nil && !seen[in] {
				return fmt.Errorf("graph: node %s reads %q before it is computed", n, in.Name)
			}
		}
		if ar, ok := arity[n.OpType]; ok && n.Domain == "" {
			if len(n.Inputs) < ar.minIn || (ar.maxIn >= 0 && len(n.Inputs) > ar.maxIn) {
				return fmt.Errorf("graph: node %s has %d inputs, %s takes %s", n, len(n.Inputs), n.OpType, ar.inRange())
			}
			for i := 0; i < ar.minIn; i++ {
				if n.Inputs[i] == nil {
					return fmt.Errorf("graph: node %s: required input %d is empty", n, i)
				}
			}
			if len(n.Outputs) < 1 {
				return fmt.Errorf("graph: node %s has no outputs", n)
			}
		}
		for _, out := range n.Outputs {
			if out != nil {
				seen[out] = true
			}
		}
	}
	for _, v := range g.Outputs {
		if !seen[v] {
			return fmt.Errorf("graph: output %q is never computed", v.Name)
		}
	}
	return nil
}

type arityRange struct{ minIn, maxIn int }

func (a arityRange) inRange() string {
	switch {
	case a.maxIn < 0:
		return fmt.Sprintf("at least %d", a.minIn)
	case a.minIn == a.maxIn:
		return fmt.Sprint(a.minIn)
	}
	return fmt.Sprintf("%d to %d", a.minIn, a.maxIn)
}

// arity lists the input counts of the operators the engine knows.
var arity = map[string]arityRange{
	"Conv": {2, 3}, "ConvTranspose": {2, 3}, "Gemm": {2, 3}, "MatMul": {2, 2},
	"MaxPool": {1, 1}, "AveragePool": {1, 1}, "GlobalAveragePool": {1, 1}, "GlobalMaxPool": {1, 1},
	"Add": {2, 2}, "Sub": {2, 2}, "Mul": {2, 2}, "Div": {2, 2}, "Pow": {2, 2},
	"Relu": {1, 1}, "Sigmoid": {1, 1}, "Tanh": {1, 1}, "Erf": {1, 1}, "Exp": {1, 1}, "Log": {1, 1},
	"Sqrt": {1, 1}, "Neg": {1, 1}, "Abs": {1, 1}, "Reciprocal": {1, 1}, "Clip": {1, 3},
	"Softmax": {1, 1}, "LogSoftmax": {1, 1}, "Transpose": {1, 1}, "Reshape": {2, 2}, "Flatten": {1, 1},
	"Concat": {1, -1}, "Slice": {1, 5}, "Gather": {2, 2}, "Squeeze": {1, 2}, "Unsqueeze": {1, 2},
	"Expand": {2, 2}, "Where": {3, 3}, "Identity": {1, 1}, "Dropout": {1, 3}, "Pad": {1, 4}, "Cast": {1, 1},
	"BatchNormalization": {5, 5}, "InstanceNormalization": {3, 3}, "GroupNormalization": {3, 3},
	"LayerNormalization": {2, 3}, "Shape": {1, 1}, "ConstantOfShape": {1, 1}, "Constant": {0, 0},
	"Equal": {2, 2}, "Range": {3, 3}, "ReduceMean": {1, 2}, "ReduceSum": {1, 2},
	"Resize": {1, 4}, "Upsample": {1, 2},
}

// Clone returns a copy of the graph's structure that passes can change
// without touching g. Constant data (initializer tensors) is shared, not
// copied: a training run updates one set of weights whichever graph it
// compiled. Folding for a concrete batch (InferShapes) bakes the batch into
// shape constants, so plans are compiled from a clone and exports are made
// from the graph that keeps its dynamic axes.
func (g *Graph) Clone() *Graph {
	c := &Graph{Name: g.Name, Values: make(map[string]*Value, len(g.Values)), Opsets: map[string]int64{}, model: g.model, ExportSignature: g.ExportSignature,
		UnrolledLoops: g.UnrolledLoops, InlinedIfs: g.InlinedIfs, SliceAssignments: g.SliceAssignments, HalfFrom: g.HalfFrom}
	for d, v := range g.Opsets {
		c.Opsets[d] = v
	}
	vm := make(map[*Value]*Value, len(g.Values))
	val := func(v *Value) *Value {
		if v == nil {
			return nil
		}
		if nv, ok := vm[v]; ok {
			return nv
		}
		nv := &Value{Name: v.Name, DType: v.DType, Const: v.Const, Initializer: v.Initializer, ExportConstant: v.ExportConstant, NoGradient: v.NoGradient, ExportKind: v.ExportKind, Declared: v.Declared, Half: v.Half, proto: v.proto}
		if v.Shape != nil {
			// A scalar's shape is empty but known: keep it non-nil.
			nv.Shape = append(Shape{}, v.Shape...)
		}
		vm[v] = nv
		c.Values[v.Name] = nv
		return nv
	}
	for _, v := range g.Values {
		val(v)
	}
	for _, n := range g.Nodes {
		nn := &Node{Name: n.Name, OpType: n.OpType, Domain: n.Domain, Opset: n.Opset, Attrs: n.Attrs, proto: n.proto}
		for _, in := range n.Inputs {
			nn.Inputs = append(nn.Inputs, val(in))
		}
		for _, out := range n.Outputs {
			o := val(out)
			if o != nil {
				o.Producer = nn
			}
			nn.Outputs = append(nn.Outputs, o)
		}
		c.Nodes = append(c.Nodes, nn)
	}
	for _, v := range g.Inputs {
		c.Inputs = append(c.Inputs, val(v))
	}
	for _, v := range g.Outputs {
		c.Outputs = append(c.Outputs, val(v))
	}
	for _, v := range g.Initializers {
		c.Initializers = append(c.Initializers, val(v))
	}
	c.relink()
	return c
}

// FixedBatch returns the batch size an export without dynamic axes fixed
// on the first axis of the model's one input (of rank 2 or more), 0 where
// that axis is dynamic or the model has several inputs.
func (g *Graph) FixedBatch() int64 {
	if len(g.Inputs) != 1 || len(g.Inputs[0].Shape) < 2 || g.Inputs[0].Shape[0].Size <= 0 {
		return 0
	}
	return g.Inputs[0].Shape[0].Size
}

// ReplaceNode puts repl where old was in g.Nodes (nil repl removes it).
// It relinks nothing: the caller's edits of values and consumers are its
// own.
func (g *Graph) ReplaceNode(old *Node, repl []*Node) {
	out := make([]*Node, 0, len(g.Nodes)+len(repl))
	for _, n := range g.Nodes {
		if n == old {
			out = append(out, repl...)
			continue
		}
		out = append(out, n)
	}
	g.Nodes = out
}

// UntieIdentityParams undoes an exporter optimization: torch.onnx stores
// parameters with equal values (such as freshly initialized zero biases)
// once and reads the copies through Identity nodes. Each such Identity of a
// floating-point initializer becomes an initializer of its own, named as
// the Identity's output and holding a copy of the data, so that the
// parameters PyTorch had as distinct are distinct again (and train
// independently). It returns the names of the new initializers.
func (g *Graph) UntieIdentityParams() []string {
	var made []string
	var kept []*Node
	for _, n := range g.Nodes {
		src := n.Input(0)
		if n.OpType != "Identity" || n.Domain != "" || src == nil || !src.IsParam() || len(n.Outputs) != 1 || n.Outputs[0] == nil {
			kept = append(kept, n)
			continue
		}
		v := n.Outputs[0]
		c := *src.Const
		c.Shape = append([]int64(nil), src.Const.Shape...)
		c.F32 = append([]float32(nil), src.Const.F32...)
		c.F64 = append([]float64(nil), src.Const.F64...)
		c.Raw = append([]byte(nil), src.Const.Raw...)
		v.Producer, v.Const, v.Initializer = nil, &c, true
		v.DType, v.Shape = src.DType, StaticShape(c.Shape...)
		g.Initializers = append(g.Initializers, v)
		made = append(made, v.Name)
	}
	g.Nodes = kept
	g.relink()
	return made
}

// Extract returns a graph that computes the named values of g from its
// initializers and constants alone: the nodes upstream of them, nothing
// else. It is an error if a value depends on a graph input. The DP engine
// uses it to back-propagate per-sample gradients through the
// parameter-only subgraph between a parameter and the node where it meets
// the batch (a class token expanded over the batch, a bias table gathered
// by constant indices).
func (g *Graph) Extract(outputs ...string) (*Graph, error) {
	return g.Subgraph(nil, outputs)
}

// Subgraph returns a copy of the part of g that computes the values named
// in outputs from those named in inputs: the inputs become the copy's
// graph inputs, in that order (what computes them in g is left out), and
// the copy keeps every node the outputs need beyond them, in g's order,
// with the initializers and constants those read. The copy's values are
// its own but their tensors are g's: an initializer trained in place in
// the copy is trained in g. It is an error if an output needs a graph input
// of g not among inputs. The dpfinetune trainer cuts a model this way
// where its frozen part ends (rewrite.SplitFrozenPrefix).
func (g *Graph) Subgraph(inputs, outputs []string) (*Graph, error) {
	c := g.Clone()
	cut := map[*Value]bool{}
	var ins []*Value
	for _, name := range inputs {
		v, ok := c.Values[name]
		if !ok {
			return nil, fmt.Errorf("graph: subgraph: no value %q", name)
		}
		if v.Const != nil {
			return nil, fmt.Errorf("graph: subgraph: input %q is a constant", name)
		}
		if cut[v] {
			return nil, fmt.Errorf("graph: subgraph: input %q given twice", name)
		}
		cut[v] = true
		ins = append(ins, v)
	}
	need := map[*Node]bool{}
	var visit func(v *Value) error
	visit = func(v *Value) error {
		if v == nil || v.Const != nil || cut[v] {
			return nil
		}
		n := v.Producer
		if n == nil {
			if len(inputs) == 0 {
				return fmt.Errorf("graph: extract: %q depends on graph input %q", outputs, v.Name)
			}
			return fmt.Errorf("graph: subgraph: %q depends on graph input %q, not among %q", outputs, v.Name, inputs)
		}
		if need[n] {
			return nil
		}
		need[n] = true
		for _, in := range n.Inputs {
			if err := visit(in); err != nil {
				return err
			}
		}
		return nil
	}
	c.Outputs = nil
	for _, name := range outputs {
		v, ok := c.Values[name]
		if !ok {
			return nil, fmt.Errorf("graph: subgraph: no value %q", name)
		}
		if err := visit(v); err != nil {
			return nil, err
		}
		c.Outputs = append(c.Outputs, v)
	}
	var nodes []*Node
	used := map[*Value]bool{}
	for _, v := range ins {
		if n := v.Producer; n != nil && need[n] {
			// The node would compute the value the copy takes as input.
			return nil, fmt.Errorf("graph: subgraph: node %s computes input %q and a value the outputs need", n, v.Name)
		}
		used[v] = true
		v.Producer = nil
	}
	for _, n := range c.Nodes {
		if need[n] {
			nodes = append(nodes, n)
			for _, v := range n.Inputs {
				used[v] = true
			}
			for _, v := range n.Outputs {
				used[v] = true
			}
		}
	}
	for _, v := range c.Outputs {
		used[v] = true
	}
	c.Nodes, c.Inputs = nodes, ins
	var inits []*Value
	for _, v := range c.Initializers {
		if used[v] {
			inits = append(inits, v)
		}
	}
	c.Initializers = inits
	for name, v := range c.Values {
		if !used[v] {
			delete(c.Values, name)
		}
	}
	c.relink()
	return c, nil
}
