package rewrite

import (
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestPlanTorchExportSignature: in a model marked with torch.export's
// signature (PyTorch's dynamo exporter), the parameters are the tensors
// it marks PARAMETER and the unmarked ones of more than one element (the
// weights its optimizer rewrites, BatchNorm folded into a convolution);
// buffers, constant tensors and the one-element constants the optimizer
// lifts from Constant nodes (GELU's 1/√2, 0.5) are not trained, and fold.
// Without the marks every float initializer is a parameter, as before.
func TestPlanTorchExportSignature(t *testing.T) {
	f := func(name string, data ...float32) *onnxpb.TensorProto {
		return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(1), Dims: []int64{int64(len(data))}, FloatData: data}
	}
	w := &onnxpb.TensorProto{Name: proto.String("fc.weight"), DataType: proto.Int32(1), Dims: []int64{3, 4},
		FloatData: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	mark := func(name, kind string) *onnxpb.ValueInfoProto {
		return &onnxpb.ValueInfoProto{Name: proto.String(name), MetadataProps: []*onnxpb.StringStringEntryProto{
			{Key: proto.String(graph.TorchInputKind), Value: proto.String(kind)}}}
	}
	node := func(op string, ins []string, out string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{Name: proto.String(out), OpType: proto.String(op), Input: ins, Output: []string{out}, Attribute: attrs}
	}
	build := func(marked bool) *graph.Graph {
		sh := &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{
			{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "s77"}},
			{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 4}}}}
		gp := &onnxpb.GraphProto{Name: proto.String("main_graph"),
			Input: []*onnxpb.ValueInfoProto{{Name: proto.String("x"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
				TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}},
			Initializer: []*onnxpb.TensorProto{w,
				f("fc.bias", 0.1, 0.2, 0.3), // PARAMETER
				f("fused_bias", 1, 2, 3),    // unmarked, 3 elements: an optimizer's rewrite of a parameter
				f("shift", 0.5, 0.5, 0.5),   // BUFFER
				f("table", 2, 2, 2),         // CONSTANT_TENSOR
				f("val_0", 1.4142135),       // unmarked scalar: a lifted Constant
				f("val_1", 0.5)},            // unmarked scalar
			Node: []*onnxpb.NodeProto{
				node("Gemm", []string{"x", "fc.weight", "fc.bias"}, "h", &onnxpb.AttributeProto{Name: proto.String("transB"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}),
				node("Add", []string{"h", "fused_bias"}, "h1"),
				node("Add", []string{"shift", "table"}, "st"),
				node("Mul", []string{"h1", "st"}, "h3"),
				node("Div", []string{"h3", "val_0"}, "h4"),
				node("Mul", []string{"h4", "val_1"}, "y"),
			}}
		if marked {
			gp.Input[0].MetadataProps = []*onnxpb.StringStringEntryProto{{Key: proto.String(graph.TorchInputKind), Value: proto.String("USER_INPUT")}}
			gp.ValueInfo = []*onnxpb.ValueInfoProto{mark("fc.weight", "PARAMETER"), mark("fc.bias", "PARAMETER"),
				mark("shift", "BUFFER"), mark("table", "CONSTANT_TENSOR")}
		}
		m := &onnxpb.ModelProto{IrVersion: proto.Int64(10), Graph: gp,
			OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}}}
		g, err := graph.FromONNX(onnx.NewModel(m))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		marked         bool
		trained, fixed string
	}{
		{true, "fc.bias,fc.weight,fused_bias", ""},
		// Unmarked, the buffer and the constant tensor are parameters:
		// their sum (an Add of parameters alone, whose index map the
		// engine checks element by element) reaches the batch and both
		// are trained, as are the lifted scalars.
		{false, "fc.bias,fc.weight,fused_bias,shift,table,val_0,val_1", ""},
	} {
		g := build(c.marked)
		p, err := Analyze(g, PlanOptions{InputShape: []int64{4}, Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		var trained, fixed []string
		for _, prm := range p.Params {
			if prm.Trainable() {
				trained = append(trained, prm.Name)
			} else {
				fixed = append(fixed, prm.Name)
			}
		}
		sort.Strings(trained)
		sort.Strings(fixed)
		if got := strings.Join(trained, ","); got != c.trained {
			t.Errorf("marked %v: trained %s, want %s", c.marked, got, c.trained)
		}
		if got := strings.Join(fixed, ","); got != c.fixed {
			t.Errorf("marked %v: frozen %s, want %s", c.marked, got, c.fixed)
		}
	}
	// Constants fold: the Add of a buffer and a constant tensor is gone
	// after inference where the signature marks them, a node where it
	// does not (their sum would be trained).
	for _, marked := range []bool{true, false} {
		g := build(marked)
		if err := g.InferShapes(map[string][]int64{"x": {2, 4}}); err != nil {
			t.Fatal(err)
		}
		folded := true
		for _, n := range g.Nodes {
			if n.Name == "st" {
				folded = false
			}
		}
		if folded != marked {
			t.Errorf("marked %v: Add(shift, table) folded %v", marked, folded)
		}
	}
}
