package graph

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// attrDefault is the default of an attribute from opset version since on.
type attrDefault struct {
	since int64
	value any // int64, float32, string, []int64, []float32; nil: required or no default
}

// defaults lists, per operator and attribute, the values the ONNX spec uses
// when the attribute is absent, by the opset version that introduced them.
// Attributes whose default depends on the input rank (Conv strides, pads,
// dilations; Transpose perm) have no entry: their operators compute them.
var defaults = map[string]map[string][]attrDefault{
	"Conv":                  {"group": {{1, int64(1)}}, "auto_pad": {{1, "NOTSET"}}},
	"ConvTranspose":         {"group": {{1, int64(1)}}, "auto_pad": {{1, "NOTSET"}}},
	"MaxPool":               {"auto_pad": {{1, "NOTSET"}}, "ceil_mode": {{1, int64(0)}}, "storage_order": {{1, int64(0)}}},
	"AveragePool":           {"auto_pad": {{1, "NOTSET"}}, "ceil_mode": {{1, int64(0)}}, "count_include_pad": {{1, int64(0)}}},
	"Gemm":                  {"alpha": {{1, float32(1)}}, "beta": {{1, float32(1)}}, "transA": {{1, int64(0)}}, "transB": {{1, int64(0)}}},
	"Softmax":               {"axis": {{1, int64(1)}, {13, int64(-1)}}},
	"LogSoftmax":            {"axis": {{1, int64(1)}, {13, int64(-1)}}},
	"Hardmax":               {"axis": {{1, int64(1)}, {13, int64(-1)}}},
	"Flatten":               {"axis": {{1, int64(1)}}},
	"Gather":                {"axis": {{1, int64(0)}}},
	"GatherElements":        {"axis": {{1, int64(0)}}},
	"Split":                 {"axis": {{1, int64(0)}}},
	"ReduceMean":            {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceSum":             {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{13, int64(0)}}},
	"ReduceMax":             {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceMin":             {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceProd":            {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceL2":              {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceL1":              {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceSumSquare":       {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceLogSum":          {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ReduceLogSumExp":       {"keepdims": {{1, int64(1)}}, "noop_with_empty_axes": {{18, int64(0)}}},
	"ArgMax":                {"axis": {{1, int64(0)}}, "keepdims": {{1, int64(1)}}, "select_last_index": {{12, int64(0)}}},
	"ArgMin":                {"axis": {{1, int64(0)}}, "keepdims": {{1, int64(1)}}, "select_last_index": {{12, int64(0)}}},
	"LayerNormalization":    {"axis": {{1, int64(-1)}}, "epsilon": {{1, float32(1e-5)}}, "stash_type": {{1, int64(1)}}},
	"BatchNormalization":    {"epsilon": {{1, float32(1e-5)}}, "momentum": {{1, float32(0.9)}}, "training_mode": {{14, int64(0)}}},
	"InstanceNormalization": {"epsilon": {{1, float32(1e-5)}}},
	"GroupNormalization":    {"epsilon": {{18, float32(1e-5)}}, "stash_type": {{21, int64(1)}}},
	"LeakyRelu":             {"alpha": {{1, float32(0.01)}}},
	"Elu":                   {"alpha": {{1, float32(1)}}},
	"Selu":                  {"alpha": {{1, float32(1.67326319217681884765625)}}, "gamma": {{1, float32(1.05070102214813232421875)}}},
	"HardSigmoid":           {"alpha": {{1, float32(0.2)}}, "beta": {{1, float32(0.5)}}},
	"Gelu":                  {"approximate": {{20, "none"}}},
	"Dropout":               {"ratio": {{1, float32(0.5)}}, "seed": {{12, nil}}},
	"Pad":                   {"mode": {{1, "constant"}}, "value": {{1, float32(0)}}},
	"Concat":                {"axis": {{1, nil}}},
	"Cast":                  {"to": {{1, nil}}, "saturate": {{19, int64(1)}}},
	"CumSum":                {"exclusive": {{11, int64(0)}}, "reverse": {{11, int64(0)}}},
	"Trilu":                 {"upper": {{14, int64(1)}}},
	"Resize":                {"mode": {{10, "nearest"}}, "coordinate_transformation_mode": {{11, "half_pixel"}}, "nearest_mode": {{11, "round_prefer_floor"}}, "cubic_coeff_a": {{11, float32(-0.75)}}, "exclude_outside": {{11, int64(0)}}, "extrapolation_value": {{11, float32(0)}}, "antialias": {{18, int64(0)}}, "keep_aspect_ratio_policy": {{18, "stretch"}}},
	"Upsample":              {"mode": {{7, "nearest"}}},
	// Standard operators defined as functions, which the loader expands
	// (expand_*.go). Attention's scale defaults to 1/sqrt(head_size): no
	// entry.
	"Swish":            {"alpha": {{24, float32(1)}}},
	"RMSNormalization": {"axis": {{23, int64(-1)}}, "epsilon": {{23, float32(1e-5)}}, "stash_type": {{23, int64(1)}}},
	"Attention": {"is_causal": {{23, int64(0)}}, "qk_matmul_output_mode": {{23, int64(0)}}, "softcap": {{23, float32(0)}},
		"left_window_size": {{25, int64(-1)}}, "right_window_size": {{25, int64(-1)}}},
}

// Attr returns the attribute name as stored, or nil.
func (n *Node) Attr(name string) *onnxpb.AttributeProto {
	for _, a := range n.Attrs {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// Has reports whether the node stores the attribute.
func (n *Node) Has(name string) bool { return n.Attr(name) != nil }

// defaultOf returns the spec default of an attribute at the node's opset.
func (n *Node) defaultOf(name string) (any, bool) {
	var v any
	found := false
	for _, d := range defaults[n.OpType][name] {
		if d.since <= n.Opset || n.Opset == 0 {
			v, found = d.value, d.value != nil
		}
	}
	return v, found
}

func (n *Node) attrErr(name, format string, a ...any) error {
	return fmt.Errorf("node %s: attribute %q: %s", n, name, fmt.Sprintf(format, a...))
}

// Int returns an integer attribute, or its default at the node's opset.
func (n *Node) Int(name string) (int64, error) {
	if a := n.Attr(name); a != nil {
		if a.GetType() != onnxpb.AttributeProto_INT && a.Type != nil {
			return 0, n.attrErr(name, "is %v, want INT", a.GetType())
		}
		return a.GetI(), nil
	}
	if d, ok := n.defaultOf(name); ok {
		if v, ok := d.(int64); ok {
			return v, nil
		}
	}
	return 0, n.attrErr(name, "required but missing")
}

// IntOr returns an integer attribute, or def if absent and the spec gives
// no default.
func (n *Node) IntOr(name string, def int64) int64 {
	if v, err := n.Int(name); err == nil {
		return v
	}
	return def
}

// Float returns a float attribute, or its default at the node's opset.
func (n *Node) Float(name string) (float32, error) {
	if a := n.Attr(name); a != nil {
		if a.GetType() != onnxpb.AttributeProto_FLOAT && a.Type != nil {
			return 0, n.attrErr(name, "is %v, want FLOAT", a.GetType())
		}
		return a.GetF(), nil
	}
	if d, ok := n.defaultOf(name); ok {
		if v, ok := d.(float32); ok {
			return v, nil
		}
	}
	return 0, n.attrErr(name, "required but missing")
}

// Str returns a string attribute, or its default at the node's opset.
func (n *Node) Str(name string) (string, error) {
	if a := n.Attr(name); a != nil {
		if a.GetType() != onnxpb.AttributeProto_STRING && a.Type != nil {
			return "", n.attrErr(name, "is %v, want STRING", a.GetType())
		}
		return string(a.GetS()), nil
	}
	if d, ok := n.defaultOf(name); ok {
		if v, ok := d.(string); ok {
			return v, nil
		}
	}
	return "", n.attrErr(name, "required but missing")
}

// Ints returns an integer-list attribute, or def (which may be computed by
// the caller from the input rank) if it is absent.
func (n *Node) Ints(name string, def []int64) ([]int64, error) {
	if a := n.Attr(name); a != nil {
		if a.GetType() != onnxpb.AttributeProto_INTS && a.Type != nil {
			return nil, n.attrErr(name, "is %v, want INTS", a.GetType())
		}
		return a.GetInts(), nil
	}
	if d, ok := n.defaultOf(name); ok {
		if v, ok := d.([]int64); ok {
			return v, nil
		}
	}
	return def, nil
}

// Floats returns a float-list attribute, or def if it is absent.
func (n *Node) Floats(name string, def []float32) ([]float32, error) {
	if a := n.Attr(name); a != nil {
		if a.GetType() != onnxpb.AttributeProto_FLOATS && a.Type != nil {
			return nil, n.attrErr(name, "is %v, want FLOATS", a.GetType())
		}
		return a.GetFloats(), nil
	}
	return def, nil
}

// TensorAttr returns a tensor attribute (as in Constant and
// ConstantOfShape), decoded.
func (n *Node) TensorAttr(g *Graph, name string) (*Tensor, error) {
	a := n.Attr(name)
	if a == nil {
		return nil, n.attrErr(name, "required but missing")
	}
	if a.GetT() == nil {
		return nil, n.attrErr(name, "is %v, want TENSOR", a.GetType())
	}
	t, err := TensorFromProto(g.model, a.GetT())
	if err != nil {
		return nil, n.attrErr(name, "%v", err)
	}
	return t, nil
}
