package graph

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Standard operators that ONNX defines as functions of other operators
// (Swish, RMSNormalization, Attention) have no kernel of their own: the
// loader replaces each node by the operators of its definition, at the
// node's opset, so that every backend and the DP engine run them unchanged
// and the engine sees the parameters (RMSNormalization's scale) where its
// per-sample rules expect them (the operand of a Mul).

// ExpandedOp describes a standard operator the loader expands.
type ExpandedOp struct {
	Op           string
	Since, Until int64  // the opsets of the default domain expanded
	Into         string // the operators it becomes
	Limits       string // what is refused or approximated
}

// stdFunction is the expansion of one standard function operator.
type stdFunction struct {
	ExpandedOp
	expand func(b *expansion) error
}

// stdFunctions lists the operators expanded. Until is the newest opset
// whose definition was checked (the operator is unchanged up to it); a node
// of a newer opset is left alone, and CheckOps names it.
var stdFunctions = map[string]stdFunction{
	"Swish": {ExpandedOp{"Swish", 24, 27, "Sigmoid, Mul (and a Mul by alpha where alpha ≠ 1)",
		"—"}, expandSwish},
	"RMSNormalization": {ExpandedOp{"RMSNormalization", 23, 27, "Mul, ReduceMean, Add, Sqrt, Div, Mul by scale (Cast to and from stash_type where X's type differs)",
		"stash_type float32 or float64; a non-negative axis needs X's rank at load (a declared shape); X of unknown type is taken as float32"}, expandRMSNorm},
	"Attention": {ExpandedOp{"Attention", 23, 27,
		"Reshape, Transpose, Mul, MatMul, Div, Tanh, Add, Softmax; with a mask Where, ReduceMax, Max, Min, Mul; " +
			"with is_causal Shape, Squeeze, Range, Unsqueeze, Greater, Where, which shape inference folds into a constant",
		"Q, K, V of rank 4, or 3 with q_num_heads = kv_num_heads (no GQA/MQA); scale > 0; no past_key, past_value or nonpad_kv_seqlen; " +
			"only output Y read; attn_mask bool or of Q's type, its type known at load, its last axis the number of keys or 1, " +
			"a bool one constant once shapes are inferred (the plan's Where takes a constant condition); " +
			"the causal mask up to 2^22 elements; left/right_window_size -1; softmax_precision ignored (the inputs' type). " +
			"A row the mask disallows entirely (-inf or the lowest finite value) gives zeros, as in onnxruntime; " +
			"a float mask computed from parameters (a relative position bias) trains them"}, expandAttention},
}

// ExpandedOps returns the standard operators the loader expands, sorted by
// name.
func ExpandedOps() []ExpandedOp {
	return []ExpandedOp{stdFunctions["Attention"].ExpandedOp, stdFunctions["RMSNormalization"].ExpandedOp, stdFunctions["Swish"].ExpandedOp}
}

// expandStandardFunctions replaces every node of a standard function
// operator (stdFunctions) by its expansion. It runs at load, before shape
// inference: an expansion needs no static shape except where its
// ExpandedOp.Limits says so, and computes what it needs from shapes with
// Shape arithmetic that InferShapes folds. The graph keeps the expansion:
// a model exported after training holds it in place of the original node,
// which is valid at the model's opset.
func (g *Graph) expandStandardFunctions() error {
	var out []*Node
	var names map[string]bool
	changed := false
	for _, n := range g.Nodes {
		sf, ok := stdFunctions[n.OpType]
		if !ok || n.Domain != "" || n.Opset < sf.Since || n.Opset > sf.Until {
			out = append(out, n)
			continue
		}
		if names == nil {
			names = make(map[string]bool, len(g.Nodes))
			for _, m := range g.Nodes {
				names[m.Name] = true
			}
		}
		scope := n.Name
		if scope == "" && len(n.Outputs) > 0 && n.Outputs[0] != nil {
			scope = n.Outputs[0].Name + "/" + n.OpType
		}
		b := &expansion{g: g, n: n, scope: scope, names: names, next: map[string]int{}}
		if err := sf.expand(b); err != nil {
			return fmt.Errorf("graph: node %s (%s-%d): %w", n, n.OpType, n.Opset, err)
		}
		out = append(out, b.nodes...)
		changed = true
	}
	if changed {
		g.Nodes = out
		g.relink()
	}
	return nil
}

// expansion builds the nodes that replace one node n.
type expansion struct {
	g     *Graph
	n     *Node
	scope string
	names map[string]bool // node names in use
	next  map[string]int
	nodes []*Node
}

// op appends a node of the default domain at n's opset, with one new
// output, and returns that output.
func (b *expansion) op(opType string, attrs []*onnxpb.AttributeProto, ins ...*Value) *Value {
	name := fresh(b.names, b.next, b.scope+"/"+opType)
	base := name + "_output_0"
	vname := base
	for i := 1; b.g.Values[vname] != nil; i++ {
		vname = fmt.Sprintf("%s_%d", base, i)
	}
	out := &Value{Name: vname}
	b.g.Values[vname] = out
	nd := &Node{Name: name, OpType: opType, Opset: b.n.Opset, Inputs: ins, Outputs: []*Value{out}, Attrs: attrs}
	out.Producer = nd
	b.nodes = append(b.nodes, nd)
	return out
}

// finish makes the node that computes v (built by b) write n's output y
// in its place, and drops v: the expansion ends in the value the rest of
// the graph reads, under its name and declared type.
func (b *expansion) finish(v, y *Value) {
	nd := v.Producer
	for i, o := range nd.Outputs {
		if o == v {
			nd.Outputs[i] = y
		}
	}
	delete(b.g.Values, v.Name)
	y.Producer = nd
}

// constant appends a Constant node holding t. Constants are nodes, not
// initializers: an exported model read back must not take them for
// parameters to train.
func (b *expansion) constant(t *Tensor) *Value {
	v := b.op("Constant", []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t.ToProto("")}})
	v.DType, v.Shape = t.DType, StaticShape(t.Shape...)
	return v
}

// ints is a constant 1-D int64 tensor (axes, shapes, perms as inputs).
func (b *expansion) ints(v ...int64) *Value {
	return b.constant(&Tensor{DType: Int64, Shape: []int64{int64(len(v))}, I64: append([]int64{}, v...)})
}

// intScalar is a constant int64 scalar.
func (b *expansion) intScalar(v int64) *Value {
	return b.constant(&Tensor{DType: Int64, Shape: []int64{}, I64: []int64{v}})
}

// scalar is a constant floating-point scalar of type dt (Float32 or
// Float64).
func (b *expansion) scalar(dt DType, v float64) *Value {
	if dt == Float64 {
		return b.constant(&Tensor{DType: Float64, Shape: []int64{}, F64: []float64{v}})
	}
	return b.constant(&Tensor{DType: Float32, Shape: []int64{}, F32: []float32{float32(v)}})
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func attrs(a ...*onnxpb.AttributeProto) []*onnxpb.AttributeProto { return a }

// floatMax is the largest finite value of dt (Float32 or Float64).
func floatMax(dt DType) float64 {
	if dt == Float64 {
		return math.MaxFloat64
	}
	return math.MaxFloat32
}

// constType returns the type of the floating-point constants an expansion
// combines with v: v's type where the loader knows it, float32 (the type
// the runtime computes in) where it does not.
func constType(v *Value) (DType, error) {
	switch dt := loadDType(v); dt {
	case Undefined, Float32:
		return Float32, nil
	case Float64:
		return Float64, nil
	default:
		return Undefined, fmt.Errorf("input %q is %v: the expansion is written for float32 and float64", v.Name, dt)
	}
}

// loadDType returns v's element type as far as the loader can tell before
// shape inference: declared (graph input, initializer, value_info, a
// Constant), else followed back through operators whose output type is a
// fixed one or that of an input. Undefined where it cannot tell.
func loadDType(v *Value) DType {
	for steps := 0; v != nil && steps < 1024; steps++ {
		if v.DType != Undefined {
			return v.DType
		}
		if v.Const != nil {
			return v.Const.DType
		}
		n := v.Producer
		if n == nil || n.Domain != "" {
			return Undefined
		}
		first := len(n.Outputs) > 0 && n.Outputs[0] == v
		switch n.OpType {
		case "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not", "IsNaN", "IsInf":
			return Bool
		case "Shape", "Size", "ArgMax", "ArgMin", "NonZero":
			return Int64
		case "Cast":
			to, err := n.Int("to")
			if err != nil {
				return Undefined
			}
			return DType(to)
		case "Constant":
			return constantDType(n)
		case "ConstantOfShape":
			if a := n.Attr("value"); a != nil && a.GetT() != nil {
				return DType(a.GetT().GetDataType())
			}
			return Float32
		case "Where", "CastLike":
			v = n.Input(1) // Where's X; CastLike's target_type
		case "Split":
			v = n.Input(0)
		case "Dropout":
			if !first && n.Opset >= 10 {
				return Bool // the mask
			}
			v = n.Input(0)
		default:
			if !first || !sameTypeOps[n.OpType] {
				return Undefined
			}
			v = n.Input(0)
		}
	}
	return Undefined
}

// constantDType is the type of a Constant node's value.
func constantDType(n *Node) DType {
	switch {
	case n.Attr("value") != nil:
		return DType(n.Attr("value").GetT().GetDataType())
	case n.Has("value_float"), n.Has("value_floats"):
		return Float32
	case n.Has("value_int"), n.Has("value_ints"):
		return Int64
	}
	return Undefined
}

// sameTypeOps lists operators whose first output has the type of their
// first input.
var sameTypeOps = map[string]bool{}

func init() {
	for _, op := range []string{
		"Identity", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "Exp", "Log",
		"Softplus", "Softsign", "Mish", "Gelu", "Sin", "Cos", "Round", "Floor", "Ceil", "Sign", "Neg", "Abs", "Sqrt", "Reciprocal",
		"Clip", "Softmax", "LogSoftmax", "Hardmax", "CumSum", "Trilu", "Shrink", "ThresholdedRelu", "PRelu",
		"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean",
		"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Tile", "Slice", "Gather", "GatherElements", "GatherND",
		"Concat", "Pad", "ScatterND", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth",
		"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
		"ReduceLogSum", "ReduceLogSumExp",
		"MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LRN",
		"BatchNormalization", "InstanceNormalization", "GroupNormalization", "LayerNormalization", "Einsum",
		"Swish", "RMSNormalization", "Attention",
	} {
		sameTypeOps[op] = true
	}
}
