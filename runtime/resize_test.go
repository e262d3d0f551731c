package runtime

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestResizeMatchesPyTorch runs the PyTorch exports of testdata/ops in
// which Resize/Upsample nodes sit between trainable convolutions (nearest,
// bilinear and bicubic, align_corners or not, opsets 9–17) and the
// CrossViT-like model that resizes its input (bicubic 20 → 16) before a
// patch embedding: the logits, the per-sample losses and the gradients of
// the summed loss (which flow back through the interpolation to the
// convolutions before it) match PyTorch's, with TestGoldens' measures.
func TestResizeMatchesPyTorch(t *testing.T) {
	for _, name := range []string{"norms_upsample_nearest_opset9", "norms_resize_nearest_bilinear", "norms_resize_bilinear",
		"norms_resize_bicubic", "crossvit_resize"} {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join("..", "testdata", "ops", name)
			m, err := onnx.Load(base + ".onnx")
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := npy.ReadNPZ(base + ".npz")
			if err != nil {
				t.Fatal(err)
			}
			matchPyTorch(t, g, ref, "y")
		})
	}
}

// resizeGraph is a model with input "x" of the given shape, a Resize or
// Upsample node of the given opset reading it (its other inputs the given
// constants, "" for an absent one) and output "y".
func resizeGraph(t *testing.T, op string, opset int64, shape []int64, consts []*onnxpb.TensorProto, inputs []string, attrs ...*onnxpb.AttributeProto) *graph.Graph {
	t.Helper()
	b := newBuilder(0, opset)
	b.inits = consts
	b.node(op, append([]string{"x"}, inputs...), "y", attrs...)
	return b.build(t, "x", shape, "y")
}

func floatsProto(name string, v ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{int64(len(v))}, FloatData: v}
}

// TestResizeIdentityIsCopy: a Resize that changes nothing compiles to a
// copy, and scales of 1 with a nonzero extrapolation value inside the roi
// change nothing either.
func TestResizeIdentityIsCopy(t *testing.T) {
	for _, c := range []struct {
		name   string
		consts []*onnxpb.TensorProto
		inputs []string
		attrs  []*onnxpb.AttributeProto
	}{
		{"cubic scales 1", []*onnxpb.TensorProto{floatsProto("s", 1, 1, 1, 1)}, []string{"", "s"}, []*onnxpb.AttributeProto{aStr("mode", "cubic")}},
		{"crop to the whole", []*onnxpb.TensorProto{floatsProto("roi", 0, 0, 0, 0, 1, 1, 1, 1), floatsProto("s", 1, 1, 1, 1)}, []string{"roi", "s"},
			[]*onnxpb.AttributeProto{aStr("mode", "linear"), aStr("coordinate_transformation_mode", "tf_crop_and_resize"), aFloat("extrapolation_value", 7)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := resizeGraph(t, "Resize", 13, []int64{2, 3, 4, 5}, c.consts, c.inputs, c.attrs...)
			p, err := Compile(g, &Options{ForwardOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			x, _ := p.Input(0)
			copy(x, seq(len(x), 0.3, 0.2, 1))
			if err := p.Forward(); err != nil {
				t.Fatal(err)
			}
			y, _ := p.Output(0)
			for i := range x {
				if y[i] != x[i] {
					t.Fatalf("element %d: %v, input %v", i, y[i], x[i])
				}
			}
			if p.wsNeed != 0 || p.nodes[0].auxBytes != 0 {
				t.Errorf("an identity resize uses %d workspace elements and %d bytes of matrices", p.wsNeed, p.nodes[0].auxBytes)
			}
		})
	}
}

// TestResizeRefusedAtCompile: what only the compiled node can see is
// refused naming the node: integer data at run time, an interpolation
// matrix beyond the bound.
func TestResizeRefusedAtCompile(t *testing.T) {
	for _, c := range []struct {
		name string
		g    func(t *testing.T) *graph.Graph
		want string
	}{
		{"int64 data", func(t *testing.T) *graph.Graph {
			b := newBuilder(1, 13)
			b.ints("x", []int64{1, 2, 3, 4}, 1, 1, 2, 2)
			b.floats("s", []float32{1, 1, 2, 2}, 4)
			b.node("Resize", []string{"x", "", "s"}, "y")
			return b.graph(t, "y")
		}, "only float32"},
		{"matrix too large", func(t *testing.T) *graph.Graph {
			return resizeGraph(t, "Resize", 13, []int64{1, 8192}, []*onnxpb.TensorProto{floatsProto("s", 1, 2.5)}, []string{"", "s"}, aStr("mode", "linear"))
		}, "interpolation matrix is over"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile(c.g(t), &Options{ForwardOnly: true})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "node Resize") {
				t.Errorf("err = %v; want one naming the node and containing %q", err, c.want)
			}
		})
	}
}
