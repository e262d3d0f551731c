package hostile

import (
	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Model is one hostile model and what loading it must say.
type Model struct {
	// Name names the class of input (a test name).
	Name string
	// Proto is the model; every one takes input "x" of shape
	// (batch, 1, 28, 28) (float32, a Fashion-MNIST image) and has output
	// "y".
	Proto *onnxpb.ModelProto
	// Want is a fragment of the error every command must print.
	Want string
}

// Models returns one model per class of size that a file can ask for:
//
//   - bomb: the ConstantOfShape of issue 15, a (2²⁰, 2²⁰, 2¹⁰) float32
//     tensor (4 PiB), over the limit for any one tensor;
//   - overflow: a ConstantOfShape whose element count overflows int64;
//   - fold: a 1 GiB ConstantOfShape, under the per-tensor limit but over the
//     limit for a folded constant;
//   - range: a Range of 2⁴⁰ elements;
//   - tile: a Tile whose repeats overflow;
//   - plan: an Expand of one pixel of the input to (batch, 2³⁵), 128 GiB
//     per sample: within the per-tensor limit for up to 8 samples, left to
//     the runtime, whose buffer plan must not fit the machine;
//   - batch: an input whose batch the export fixed at 2⁴⁰ (no dynamic
//     axes), which the loader tries to release and predict to run a chunk
//     of.
func Models() []Model {
	return []Model{
		{"bomb", constantOfShape(1<<20, 1<<20, 1<<10), "over the 1 TiB limit for one tensor"},
		{"overflow", constantOfShape(1<<40, 1<<40), "overflows"},
		{"fold", constantOfShape(1 << 28), "limit for a folded constant"},
		{"range", rangeModel(0, 1<<40, 1), "limit for a folded constant"},
		{"tile", tileModel(1 << 62), "overflow"},
		{"plan", expandModel(1 << 35), "of memory available"},
		{"batch", fixedBatchModel(1 << 40), "1099511627776"},
	}
}

// fixedBatchModel is z = Relu(x) with x's batch fixed at batch.
func fixedBatchModel(batch int64) *onnxpb.ModelProto {
	m := model(nil, node("Relu", "relu", []string{"x"}, []string{"z"}))
	d := m.Graph.Input[0].GetType().GetTensorType().GetShape().GetDim()
	d[0].Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: batch}
	return m
}

func i64Tensor(name string, v ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)),
		Dims: []int64{int64(len(v))}, Int64Data: v}
}

func scalarI64(name string, v int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{v}}
}

func node(op, name string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: ins, Output: outs, Attribute: attrs}
}

func tensorAttr(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

// model wraps nodes into a model with input x (batch, 1, 28, 28) and
// output y (batch, 10): the nodes compute z from x, and a linear head
// (Flatten, MatMul by the parameter "w") makes the logits, so that the
// commands that need a classifier reach the hostile nodes.
func model(inits []*onnxpb.TensorProto, nodes ...*onnxpb.NodeProto) *onnxpb.ModelProto {
	dims := []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}}
	for _, d := range []int64{1, 28, 28} {
		dims = append(dims, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	x := &onnxpb.ValueInfoProto{Name: proto.String("x"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: &onnxpb.TensorShapeProto{Dim: dims}}}}}
	w := &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)),
		Dims: []int64{28 * 28, 10}, RawData: make([]byte, 4*28*28*10)}
	nodes = append(nodes,
		node("Flatten", "flatten", []string{"z"}, []string{"zf"}),
		node("MatMul", "head", []string{"zf", "w"}, []string{"y"}))
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("dpfinetune internal/hostile"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(14)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("hostile"),
			Node:        nodes,
			Initializer: append(inits, w),
			Input:       []*onnxpb.ValueInfoProto{x},
			Output:      []*onnxpb.ValueInfoProto{{Name: proto.String("y")}},
		},
	}
}

// constantOfShape is the model of issue 15: Constant (the shape) →
// ConstantOfShape → Add to the input.
func constantOfShape(dims ...int64) *onnxpb.ModelProto {
	return model(nil,
		node("Constant", "shape", nil, []string{"s"}, tensorAttr("value", i64Tensor("s", dims...))),
		node("ConstantOfShape", "bomb", []string{"s"}, []string{"c"}),
		node("Add", "add", []string{"x", "c"}, []string{"z"}))
}

func rangeModel(start, limit, delta int64) *onnxpb.ModelProto {
	return model([]*onnxpb.TensorProto{scalarI64("start", start), scalarI64("limit", limit), scalarI64("delta", delta)},
		node("Range", "range", []string{"start", "limit", "delta"}, []string{"r"}),
		node("Cast", "cast", []string{"r"}, []string{"rf"}, &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}),
		node("Add", "add", []string{"x", "rf"}, []string{"z"}))
}

func tileModel(rep int64) *onnxpb.ModelProto {
	return model([]*onnxpb.TensorProto{i64Tensor("reps", 1, 1, 1, rep)},
		node("Tile", "tile", []string{"x", "reps"}, []string{"z"}))
}

// expandModel broadcasts the input's first pixel to (batch, cols), sums
// that back to one column and adds it to the flattened input.
func expandModel(cols int64) *onnxpb.ModelProto {
	return model([]*onnxpb.TensorProto{i64Tensor("starts", 0), i64Tensor("ends", 1), i64Tensor("axes", 1), i64Tensor("shape", 1, cols)},
		node("Flatten", "flat", []string{"x"}, []string{"xf"}),
		node("Slice", "col", []string{"xf", "starts", "ends", "axes"}, []string{"x0"}),
		node("Expand", "expand", []string{"x0", "shape"}, []string{"e"}),
		node("ReduceSum", "sum", []string{"e", "axes"}, []string{"s"}),
		node("Add", "add", []string{"xf", "s"}, []string{"z"}))
}
