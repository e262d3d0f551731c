package graph

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestSignatureMarks: in a model carrying torch.export's marks, marked
// PARAMETERs and unmarked tensors are parameters, BUFFERs and unmarked
// one-element constants are not, unless a layer reads the one element as
// its weight or bias (the bias the exporter's optimizer writes when it
// folds a BatchNorm into a one-channel convolution); without marks every
// float initializer is a parameter.
func TestSignatureMarks(t *testing.T) {
	f := func(v ...float32) *Tensor {
		return &Tensor{DType: Float32, Shape: []int64{int64(len(v))}, F32: v}
	}
	for _, marked := range []bool{true, false} {
		b := newBuilder(18).input("x", 2, 1, 3, 3).
			init("w", &Tensor{DType: Float32, Shape: []int64{1, 1, 1, 1}, F32: []float32{2}}).
			init("w_bias", f(0.5)).init("val_0", f(0.5)).
			init("running_mean", f(0.1)).init("table", f(1, 2)).
			node("Conv", []string{"x", "w", "w_bias"}, []string{"c"}).
			node("Mul", []string{"c", "val_0"}, []string{"m"}).
			node("Sub", []string{"m", "running_mean"}, []string{"s"}).
			node("Mul", []string{"s", "table"}, []string{"y"}).output("y")
		if marked {
			for name, kind := range map[string]string{"w": "PARAMETER", "running_mean": "BUFFER"} {
				b.p.Graph.ValueInfo = append(b.p.Graph.ValueInfo, &onnxpb.ValueInfoProto{Name: proto.String(name),
					MetadataProps: []*onnxpb.StringStringEntryProto{{Key: proto.String(TorchInputKind), Value: proto.String(kind)}}})
			}
		}
		g := b.graph(t)
		if g.ExportSignature != marked {
			t.Errorf("marked %v: ExportSignature %v", marked, g.ExportSignature)
		}
		want := map[string]bool{"w": true, "w_bias": true, "table": true, "val_0": !marked, "running_mean": !marked}
		for name, param := range want {
			if got := g.Values[name].IsParam(); got != param {
				t.Errorf("marked %v: %s IsParam %v, want %v", marked, name, got, param)
			}
		}
	}
}

// TestNodeScope: the module path of the dynamo exporter's record of a
// node's scopes, the operation's own name and the model's empty scope
// left out; none without a record.
func TestNodeScope(t *testing.T) {
	for rec, want := range map[string]string{
		"['', 'features', 'features.1', 'features.1.0.attn', 'linear']": "features.1.0.attn",
		`["", "head", "linear"]`: "head",
		"['', 'add']":            "",
		"['conv2d']":             "",
		"not a list":             "",
	} {
		n := &Node{proto: &onnxpb.NodeProto{MetadataProps: []*onnxpb.StringStringEntryProto{{Key: proto.String(TorchNameScopes), Value: proto.String(rec)}}}}
		if got := n.Scope(); got != want {
			t.Errorf("Scope of %s = %q, want %q", rec, got, want)
		}
	}
	if got := (&Node{proto: &onnxpb.NodeProto{}}).Scope(); got != "" {
		t.Errorf("no record: %q", got)
	}
}

// TestSignatureMarksKept: a model written by ToONNX keeps torch.export's
// marks on its initializers, trained (their data changed) or not, so
// that it reads back as it was read: without them the trained model's
// parameters would pass for values the exporter's optimizer made.
func TestSignatureMarksKept(t *testing.T) {
	b := newBuilder(18).input("x", 2, 1, 3, 3).
		init("w", &Tensor{DType: Float32, Shape: []int64{1, 1, 1, 1}, F32: []float32{2}}).
		init("running_mean", &Tensor{DType: Float32, Shape: []int64{1}, F32: []float32{0.1}}).
		node("Conv", []string{"x", "w"}, []string{"c"}).
		node("Sub", []string{"c", "running_mean"}, []string{"y"}).output("y")
	for name, kind := range map[string]string{"w": "PARAMETER", "running_mean": "BUFFER"} {
		b.p.Graph.ValueInfo = append(b.p.Graph.ValueInfo, &onnxpb.ValueInfoProto{Name: proto.String(name),
			MetadataProps: []*onnxpb.StringStringEntryProto{{Key: proto.String(TorchInputKind), Value: proto.String(kind)}}})
	}
	for _, trained := range []bool{false, true} {
		g := b.graph(t)
		if trained {
			// Trained, and of another shape (a replaced head's): the
			// value_info says the shape written.
			g.Values["w"].Const = &Tensor{DType: Float32, Shape: []int64{2, 1, 1, 1}, F32: []float32{3, 4}}
		}
		m, err := g.ToONNX()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := onnx.LoadBytes(raw, "")
		if err != nil {
			t.Fatal(err)
		}
		g2, err := FromONNX(m2)
		if err != nil {
			t.Fatal(err)
		}
		if !g2.ExportSignature || g2.Values["w"].ExportKind != "PARAMETER" || g2.Values["running_mean"].ExportKind != "BUFFER" {
			t.Errorf("trained %v: read back with signature %v, w %q, running_mean %q", trained, g2.ExportSignature, g2.Values["w"].ExportKind, g2.Values["running_mean"].ExportKind)
		}
		for _, vi := range m.Proto.GetGraph().GetValueInfo() {
			if vi.GetName() != "w" {
				continue
			}
			var dims []int64
			for _, d := range vi.GetType().GetTensorType().GetShape().GetDim() {
				dims = append(dims, d.GetDimValue())
			}
			if want := g.Values["w"].Const.Shape; fmt.Sprint(dims) != fmt.Sprint(want) || vi.GetType().GetTensorType().GetElemType() != int32(Float32) {
				t.Errorf("trained %v: w's value_info says %v of type %d, the initializer is %v float32", trained, dims, vi.GetType().GetTensorType().GetElemType(), want)
			}
		}
	}
}
