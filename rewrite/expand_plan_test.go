package rewrite

import (
	"math/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestPlanExpandedOperators: a token model built from the standard
// function operators the loader expands (Attention-23, RMSNormalization-23,
// Swish-24) plans for DP training like its hand-written equivalent: the
// projections around the attention are linear parameters, the
// RMSNormalization scale an elementwise one, and the batch axis is
// followed through the expansion.
func TestPlanExpandedOperators(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	weight := func(name string, dims ...int64) *onnxpb.TensorProto {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(rng.NormFloat64())
		}
		return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(1), Dims: dims, FloatData: data}
	}
	node := func(op string, ins []string, out string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{Name: proto.String(out + "_node"), OpType: proto.String(op), Input: ins, Output: []string{out}, Attribute: attrs}
	}
	axes := &onnxpb.TensorProto{Name: proto.String("axes1"), DataType: proto.Int32(7), Dims: []int64{1}, Int64Data: []int64{1}}
	sh := &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{
		{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}},
		{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 4}},
		{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 8}}}}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(24)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("tokens"),
			Input: []*onnxpb.ValueInfoProto{{Name: proto.String("x"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
				TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}},
			Output:      []*onnxpb.ValueInfoProto{{Name: proto.String("y")}},
			Initializer: []*onnxpb.TensorProto{weight("wq", 8, 8), weight("wk", 8, 8), weight("wv", 8, 8), weight("scale", 8), weight("wout", 8, 3), axes},
			Node: []*onnxpb.NodeProto{
				node("MatMul", []string{"x", "wq"}, "q"), node("MatMul", []string{"x", "wk"}, "k"), node("MatMul", []string{"x", "wv"}, "v"),
				node("Attention", []string{"q", "k", "v"}, "a",
					&onnxpb.AttributeProto{Name: proto.String("q_num_heads"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(2)},
					&onnxpb.AttributeProto{Name: proto.String("kv_num_heads"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(2)},
					&onnxpb.AttributeProto{Name: proto.String("is_causal"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}),
				node("RMSNormalization", []string{"a", "scale"}, "n"),
				node("Swish", []string{"n"}, "s"),
				node("ReduceMean", []string{"s", "axes1"}, "p",
					&onnxpb.AttributeProto{Name: proto.String("keepdims"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}),
				node("MatMul", []string{"p", "wout"}, "y"),
			}}}
	g, err := graph.FromONNX(onnx.NewModel(m))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Analyze(g, PlanOptions{InputShape: []int64{4, 8}, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Problems) > 0 {
		t.Fatalf("problems: %v", p.Problems)
	}
	want := map[string]Kind{"wq": KindLinear, "wk": KindLinear, "wv": KindLinear, "wout": KindLinear, "scale": KindElementwise}
	for _, prm := range p.Params {
		k, ok := want[prm.Name]
		if !ok {
			t.Errorf("unexpected parameter %s (%s)", prm.Name, prm.Kind)
			continue
		}
		if prm.Kind != k {
			t.Errorf("%s is %s (%s), want %s", prm.Name, prm.Kind, prm.Reason, k)
		}
		delete(want, prm.Name)
	}
	for name := range want {
		t.Errorf("parameter %s not planned", name)
	}
	t.Logf("warnings: %v", p.Warnings)
}
