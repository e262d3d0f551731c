package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestPlanMarksMappedLayers: a weight made by concatenating two parameters
// is planned as instantiated and mapped back, and plan's table says so
// with † and a note.
func TestPlanMarksMappedLayers(t *testing.T) {
	vi := func(name string, dims ...any) *onnxpb.ValueInfoProto {
		sh := &onnxpb.TensorShapeProto{}
		for _, v := range dims {
			d := &onnxpb.TensorShapeProto_Dimension{}
			switch v := v.(type) {
			case int:
				d.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}
			case string:
				d.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: v}
			}
			sh.Dim = append(sh.Dim, d)
		}
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}
	}
	param := func(name string, shape ...int64) *onnxpb.TensorProto {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		tt := &graph.Tensor{DType: graph.Float32, Shape: shape, F32: make([]float32, n)}
		for i := range tt.F32 {
			tt.F32[i] = float32(i%7) / 10
		}
		return tt.ToProto(name)
	}
	nd := func(op, out string, in ...string) *onnxpb.NodeProto {
		n := &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(out), Input: in, Output: []string{out}}
		if op == "Concat" {
			n.Attribute = []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}}
		}
		return n
	}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(14)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("mapped"),
			Initializer: []*onnxpb.TensorProto{param("wa", 6, 2), param("wb", 6, 3)},
			Node: []*onnxpb.NodeProto{
				nd("Concat", "w", "wa", "wb"),
				nd("MatMul", "y", "x", "w"),
			},
			Input:  []*onnxpb.ValueInfoProto{vi("x", "batch", 6)},
			Output: []*onnxpb.ValueInfoProto{vi("y", "batch", 5)},
		},
	}
	b, err := onnx.NewModel(m).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mapped.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, e, code := run(t, "plan", "--model", path, "--input-shape", "6", "--batch", "4")
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, e)
	}
	if !strings.Contains(out, "instantiate†") || !strings.Contains(out, "†: 2 row(s) whose weight is made from parameters through Concat") {
		t.Errorf("plan does not mark the mapped layer:\n%s", out)
	}
}
