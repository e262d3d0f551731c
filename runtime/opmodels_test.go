package runtime

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestOpModels runs the single-operator models of testdata/ops (written by
// testdata/gen/make_op_models.py: PyTorch exports and one-node graphs for
// ONNX-only attribute forms) and compares their output with the reference
// the generator computed in PyTorch or numpy:
// max |Δ| ≤ 1e-5·max(1, max |want|).
func TestOpModels(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "ops", "*.onnx"))
	if len(paths) == 0 {
		t.Fatal("no models under testdata/ops: run testdata/gen/make_op_models.py")
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".onnx")
		t.Run(name, func(t *testing.T) {
			p, want := compileOpModel(t, path, &Options{ForwardOnly: true})
			if err := p.Forward(); err != nil {
				t.Fatal(err)
			}
			y, shape := p.Output(0)
			if !sameInts(shape, want.Shape) {
				t.Fatalf("output shape %v, reference %v", shape, want.Shape)
			}
			ref := want.F32
			var d float64
			for i, v := range ref {
				d = math.Max(d, math.Abs(float64(y[i])-float64(v)))
			}
			if tol := 1e-5 * math.Max(1, maxAbs(ref)); d > tol {
				t.Errorf("max |Δ| %.3g > %.3g", d, tol)
			}
		})
	}
}

// compileOpModel loads a model of testdata/ops, fixes its input shapes from
// the reference arrays, compiles it and sets its inputs; it returns the
// plan and the expected output.
func compileOpModel(t *testing.T, path string, opts *Options) (*Plan, *npy.Array) {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := npy.ReadNPZ(strings.TrimSuffix(path, ".onnx") + ".npz")
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int64{}
	for _, in := range g.Inputs {
		a, ok := ref[in.Name]
		if !ok {
			t.Fatalf("no reference array for input %q", in.Name)
		}
		shapes[in.Name] = to64(a.Shape)
	}
	if err := g.InferShapes(shapes); err != nil {
		t.Fatal(err)
	}
	p, err := Compile(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range g.Inputs {
		if err := p.SetInput(i, ref[in.Name].F32); err != nil {
			t.Fatal(err)
		}
	}
	return p, ref["y"]
}

// ortLacks lists the models onnxruntime 1.30 refuses, with its reason.
var ortLacks = map[string]string{
	"einsum_broadcast_ellipsis":           "onnxruntime does not broadcast ellipsis axes of size 1 (PyTorch and numpy do)",
	"einsum_four_operands_broadcast_diag": "onnxruntime does not broadcast ellipsis axes of size 1 (PyTorch and numpy do)",
	"prelu_opset6_per_channel":            "onnxruntime has no PRelu(6) kernel",
	"lrn_even_size":                       "onnxruntime takes odd LRN sizes only",
	"add_opset6_broadcast":                "onnxruntime has no Add(6) kernel",
	"mul_opset6_broadcast_axis":           "onnxruntime has no Mul(6) kernel",
	"gemm_opset6_broadcast_c":             "onnxruntime has no Gemm(6) kernel",
	"resize_rank3_middle_axis":            "onnxruntime's cubic Resize takes 2-D inputs and 4-D ones resized on their last two axes only",
	"pad_opset19_wrap_wider_than_axis":    "onnxruntime wraps once: past one period of the axis its output is 0, where ONNX's reference (numpy's pad) repeats the axis again",
}

// TestOpModelsOnnxruntime holds the references of testdata/ops against
// onnxruntime (skipped where onnxruntime cannot be had; see
// internal/orttest), so that the spec reading of the generator, PyTorch's
// and onnxruntime's agree on every attribute form.
func TestOpModelsOnnxruntime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts onnxruntime once per model")
	}
	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "ops", "*.onnx"))
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".onnx")
		t.Run(name, func(t *testing.T) {
			if why, ok := ortLacks[name]; ok {
				t.Skip(why)
			}
			ref, err := npy.ReadNPZ(strings.TrimSuffix(path, ".onnx") + ".npz")
			if err != nil {
				t.Fatal(err)
			}
			m, err := onnx.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			feeds := map[string]orttest.Tensor{}
			for _, in := range m.Proto.GetGraph().GetInput() {
				a, ok := ref[in.GetName()]
				if !ok {
					t.Fatalf("no reference array for input %q", in.GetName())
				}
				feeds[in.GetName()] = orttest.Tensor{Shape: to64(a.Shape), Data: a.F32}
			}
			got, ok := orttest.Run(t, path, feeds)["y"]
			if !ok {
				t.Fatal("onnxruntime gave no output y")
			}
			want := ref["y"].F32
			if len(got.Data) != len(want) {
				t.Fatalf("onnxruntime output %v, reference %v", got.Shape, ref["y"].Shape)
			}
			var d float64
			for i, v := range want {
				d = math.Max(d, math.Abs(float64(got.Data[i])-float64(v)))
			}
			if tol := 1e-5 * math.Max(1, maxAbs(want)); d > tol {
				t.Errorf("onnxruntime differs from the reference: max |Δ| %.3g > %.3g", d, tol)
			}
		})
	}
}

// TestLegacyRefusals: legacy forms whose meaning the kernels do not
// implement are refused, naming the node and the opset.
func TestLegacyRefusals(t *testing.T) {
	cases := []struct {
		name  string
		opset int64
		build func(b *modelBuilder) string
		want  string
	}{
		{"batchnorm opset 6 batch statistics", 6, func(b *modelBuilder) string {
			b.param("x", 2, 3, 2)
			for _, n := range []string{"s", "bb", "mean", "var"} {
				b.floats(n, []float32{1, 0.5, 2}, 3)
			}
			b.node("BatchNormalization", []string{"x", "s", "bb", "mean", "var"}, "y")
			return "y"
		}, "is_test=0 (opset 6"},
		{"prelu opset 7 per-channel slope", 7, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4)
			b.param("slope", 3)
			b.node("PRelu", []string{"x", "slope"}, "y")
			return "y"
		}, "at opset 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(1, c.opset)
			out := c.build(b)
			m := &onnxpb.ModelProto{
				IrVersion:   proto.Int64(8),
				OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(b.opset)}},
				Graph: &onnxpb.GraphProto{Name: proto.String("test"), Node: b.nodes, Initializer: b.inits,
					Output: []*onnxpb.ValueInfoProto{{Name: proto.String(out)}}},
			}
			g, err := graph.FromONNX(onnx.NewModel(m))
			if err != nil {
				t.Fatal(err)
			}
			err = g.InferShapes(nil)
			if err == nil {
				_, err = Compile(g, nil)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"y"`) {
				t.Errorf("error %v, want one naming node \"y\" and containing %q", err, c.want)
			}
		})
	}
}
