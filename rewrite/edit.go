package rewrite

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Change is one thing a pass did to a graph, and why.
type Change struct {
	// Pass names the pass: "cleanup", "batchnorm", "head".
	Pass string `json:"pass"`
	// Target is the node or initializer the change is about.
	Target string `json:"target"`
	// Action says what was done.
	Action string `json:"action"`
	// Reason says why.
	Reason string `json:"reason,omitempty"`
}

// String formats the change as one line of a report.
func (c Change) String() string {
	s := fmt.Sprintf("%-9s %s: %s", c.Pass, c.Target, c.Action)
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}

// relink recomputes every value's consumer list from the nodes. Passes call
// it after they rewire inputs; graph keeps its own copy unexported.
func relink(g *graph.Graph) {
	for _, v := range g.Values {
		v.Consumers = v.Consumers[:0]
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != nil {
				in.Consumers = append(in.Consumers, n)
			}
		}
	}
}

// namer hands out value and node names that the graph does not use yet.
type namer struct {
	g     *graph.Graph
	nodes map[string]bool
}

func newNamer(g *graph.Graph) *namer {
	nm := &namer{g: g, nodes: map[string]bool{}}
	for _, n := range g.Nodes {
		nm.nodes[n.Name] = true
	}
	return nm
}

// value returns base, or base_1, base_2, ... whichever is free.
func (nm *namer) value(base string) string {
	name := base
	for i := 1; ; i++ {
		if _, used := nm.g.Values[name]; !used {
			return name
		}
		name = fmt.Sprintf("%s_%d", base, i)
	}
}

// node reserves a free node name based on base.
func (nm *namer) node(base string) string {
	name := base
	for i := 1; nm.nodes[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	nm.nodes[name] = true
	return name
}

// builder appends new nodes for one rewrite site; they are spliced into
// the node list where the rewritten node was.
type builder struct {
	g     *graph.Graph
	nm    *namer
	scope string
	opset int64
	nodes []*graph.Node
}

func newBuilder(g *graph.Graph, nm *namer, scope string) *builder {
	return &builder{g: g, nm: nm, scope: scope, opset: g.Opsets[""]}
}

// op adds a node with one fresh output and returns that output.
func (b *builder) op(opType string, attrs []*onnxpb.AttributeProto, inputs ...*graph.Value) *graph.Value {
	name := b.nm.node(b.scope + "/" + opType)
	out := &graph.Value{Name: b.nm.value(name + "_output_0")}
	b.g.Values[out.Name] = out
	b.adopt(&graph.Node{Name: name, OpType: opType, Opset: b.opset, Inputs: inputs, Outputs: []*graph.Value{out}, Attrs: attrs})
	return out
}

// opInto is op with a given output value (which keeps its name).
func (b *builder) opInto(out *graph.Value, opType string, attrs []*onnxpb.AttributeProto, inputs ...*graph.Value) {
	name := b.nm.node(b.scope + "/" + opType)
	b.adopt(&graph.Node{Name: name, OpType: opType, Opset: b.opset, Inputs: inputs, Outputs: []*graph.Value{out}, Attrs: attrs})
}

func (b *builder) adopt(n *graph.Node) {
	for _, o := range n.Outputs {
		o.Producer = n
	}
	b.nodes = append(b.nodes, n)
}

// constant adds a Constant node holding t. Structural constants are nodes,
// not initializers, so that they are never mistaken for parameters.
func (b *builder) constant(t *graph.Tensor) *graph.Value {
	v := b.op("Constant", []*onnxpb.AttributeProto{attrTensor("value", t)})
	v.DType, v.Shape, v.Const = t.DType, graph.StaticShape(t.Shape...), nil
	return v
}

// addInitializer registers a new initializer.
func addInitializer(g *graph.Graph, name string, t *graph.Tensor) *graph.Value {
	v := &graph.Value{Name: name, DType: t.DType, Shape: graph.StaticShape(t.Shape...), Const: t, Initializer: true}
	g.Values[name] = v
	g.Initializers = append(g.Initializers, v)
	return v
}

// setInitializer gives an initializer new contents (a new tensor: the old
// one may be shared with clones of the graph).
func setInitializer(v *graph.Value, t *graph.Tensor) {
	v.Const = t
	v.DType = t.DType
	v.Shape = graph.StaticShape(t.Shape...)
}

// removeInitializerIfUnused drops an initializer nothing reads any more.
// It reports whether it did.
func removeInitializerIfUnused(g *graph.Graph, v *graph.Value) bool {
	if v == nil || !v.Initializer || len(v.Consumers) > 0 || isGraphOutput(g, v) {
		return false
	}
	delete(g.Values, v.Name)
	out := g.Initializers[:0]
	for _, w := range g.Initializers {
		if w != v {
			out = append(out, w)
		}
	}
	g.Initializers = out
	return true
}

func isGraphOutput(g *graph.Graph, v *graph.Value) bool {
	for _, o := range g.Outputs {
		if o == v {
			return true
		}
	}
	return false
}

// replaceUses makes every node that reads old read repl instead.
func replaceUses(g *graph.Graph, old, repl *graph.Value) {
	for _, n := range g.Nodes {
		for i, in := range n.Inputs {
			if in == old {
				n.Inputs[i] = repl
			}
		}
	}
}

// floatTensor makes a tensor of dtype dt (Float32 or Float64) from values.
func floatTensor(dt graph.DType, shape []int64, vals []float64) *graph.Tensor {
	t := &graph.Tensor{DType: dt, Shape: append([]int64{}, shape...)}
	if dt == graph.Float64 {
		t.F64 = append([]float64{}, vals...)
		return t
	}
	t.DType = graph.Float32
	t.F32 = make([]float32, len(vals))
	for i, v := range vals {
		t.F32[i] = float32(v)
	}
	return t
}

// copyTensor returns a deep copy of t.
func copyTensor(t *graph.Tensor) *graph.Tensor {
	c := &graph.Tensor{DType: t.DType, Shape: append([]int64{}, t.Shape...)}
	if t.F32 != nil {
		c.F32 = append([]float32{}, t.F32...)
	}
	if t.F64 != nil {
		c.F64 = append([]float64{}, t.F64...)
	}
	if t.I64 != nil {
		c.I64 = append([]int64{}, t.I64...)
	}
	if t.B != nil {
		c.B = append([]bool{}, t.B...)
	}
	if t.Raw != nil {
		c.Raw = append([]byte{}, t.Raw...)
	}
	return c
}

func int64Tensor(shape []int64, vals ...int64) *graph.Tensor {
	return &graph.Tensor{DType: graph.Int64, Shape: append([]int64{}, shape...), I64: append([]int64{}, vals...)}
}

// floats returns the elements of a floating-point tensor as float64.
func floats(t *graph.Tensor) ([]float64, error) {
	switch {
	case t.F32 != nil:
		out := make([]float64, len(t.F32))
		for i, v := range t.F32 {
			out[i] = float64(v)
		}
		return out, nil
	case t.F64 != nil:
		return append([]float64{}, t.F64...), nil
	case t.Len() == 0:
		return nil, nil
	}
	return nil, fmt.Errorf("tensor of type %v holds no float32/float64 data", t.DType)
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func attrFloat(name string, v float64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(float32(v))}
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func attrTensor(name string, t *graph.Tensor) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t.ToProto("")}
}

// nodeLabel names a node for messages and keys: its name, or its first
// output when it has none.
func nodeLabel(n *graph.Node) string {
	if n.Name != "" {
		return n.Name
	}
	if len(n.Outputs) > 0 && n.Outputs[0] != nil {
		return n.Outputs[0].Name
	}
	return n.OpType
}

// paramBase strips a trailing ".weight"/".bias"-style suffix: the module
// path that PyTorch exports put in front of parameter names.
func paramBase(name string) string {
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		return name[:i]
	}
	return name
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
