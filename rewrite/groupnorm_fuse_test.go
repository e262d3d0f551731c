package rewrite

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// forwardOf runs g's forward on a deterministic batch of n samples of shape
// sample and returns its first output.
func forwardOf(t *testing.T, g *graph.Graph, n int, sample []int64) []float32 {
	t.Helper()
	p, err := runtime.CompileForBatch(g.Clone(), n, sample, &runtime.Options{ForwardOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := p.Input(0)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.37))
	}
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	y, _ := p.Output(0)
	return append([]float32(nil), y...)
}

func countOps(g *graph.Graph, op string) int {
	k := 0
	for _, n := range g.Nodes {
		if n.OpType == op {
			k++
		}
	}
	return k
}

// TestFuseGroupNormRoundTrip: a model dpfinetune trained and wrote (its
// BatchNorms as RewriteBatchNorm's GroupNorm decomposition) trains again
// with one GroupNormalization node per GroupNorm, computing what the
// decomposition computes, and is written back as it was loaded, node for
// node and name for name.
func TestFuseGroupNormRoundTrip(t *testing.T) {
	sample := []int64{3, 32, 32}
	g := loadFixture(t, "resnet_train")
	if _, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 4}}); err != nil {
		t.Fatal(err)
	}
	written, err := ExportGraph(g)
	if err != nil {
		t.Fatal(err)
	}
	loaded := roundTrip(t, written)
	if n := countOps(loaded, "GroupNormalization"); n != 0 {
		t.Fatalf("the written model has %d GroupNormalization nodes, want the decomposition", n)
	}
	decomposed := forwardOf(t, loaded, 3, sample)
	p, err := Prepare(loaded, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if n := countOps(loaded, "GroupNormalization"); n != 12 {
		t.Errorf("%d GroupNormalization nodes after Prepare, want 12 (one per BatchNorm of the fixture)", n)
	}
	fused := 0
	for _, c := range p.Changes {
		if c.Pass == "groupnorm" && strings.Contains(c.Action, "(ReduceMean, 12 nodes") {
			fused++
		}
	}
	if fused != 12 {
		t.Errorf("%d groupnorm changes, want 12: %v", fused, p.Changes)
	}
	for _, prm := range p.Params {
		if strings.Contains(prm.Name, "bn") && prm.Kind != KindElementwise {
			t.Errorf("%s is %s (%s), want elementwise", prm.Name, prm.Kind, prm.Reason)
		}
	}
	got := forwardOf(t, loaded, 3, sample)
	for i := range got {
		if d := math.Abs(float64(got[i] - decomposed[i])); d > 1e-4*math.Max(1, math.Abs(float64(decomposed[i]))) {
			t.Fatalf("output %d: fused %v, decomposed %v", i, got[i], decomposed[i])
		}
	}
	again, err := ExportGraph(loaded)
	if err != nil {
		t.Fatal(err)
	}
	label := func(g *graph.Graph) []string {
		var s []string
		for _, n := range g.Nodes {
			s = append(s, n.OpType+" "+n.Name)
		}
		return s
	}
	a, b := label(written), label(again)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("written again differs from the loaded model:\n%s\n---\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}

// TestFuseGroupNormTorch: nn.GroupNorm as PyTorch's TorchScript exporter
// writes it (Reshape, InstanceNormalization of ones and zeros, Reshape to
// Shape(x), Mul and Add by constant-folded (C,1,1) affines) trains as one
// GroupNormalization node with the same outputs, and so does its form
// without constant folding (γ and β through Unsqueeze); chains it must not
// fuse (an intermediate read elsewhere, a scale that is not all ones) stay;
// each is written back to a model that computes the same.
func TestFuseGroupNormTorch(t *testing.T) {
	const C, G = 4, 2
	build := func(mutate string) *graph.Graph {
		f := func(name string, dims []int64, v ...float32) *onnxpb.TensorProto {
			return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(1), Dims: dims, FloatData: v}
		}
		i := func(name string, v ...int64) *onnxpb.TensorProto {
			return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(7), Dims: []int64{int64(len(v))}, Int64Data: v}
		}
		node := func(op, name string, ins []string, out string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
			return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: ins, Output: []string{out}, Attribute: attrs}
		}
		ones := []float32{1, 1}
		if mutate == "scale" {
			ones = []float32{1, 2}
		}
		w := make([]float32, C*3*3*3)
		for k := range w {
			w[k] = float32(math.Cos(float64(k)))
		}
		gp := &onnxpb.GraphProto{Name: proto.String("torch"),
			Initializer: []*onnxpb.TensorProto{f("0.weight", []int64{C, 3, 3, 3}, w...), f("0.bias", []int64{C}, 0.1, -0.2, 0.3, 0),
				f("onnx::Mul_20", []int64{C, 1, 1}, 1.5, 0.5, -1, 2), f("onnx::Add_21", []int64{C, 1, 1}, 0.1, 0.2, -0.3, 0.4),
				i("shape3", 0, G, -1), f("ones", []int64{G}, ones...), f("zeros", []int64{G}, 0, 0)},
			Node: []*onnxpb.NodeProto{
				node("Conv", "/0/Conv", []string{"x", "0.weight", "0.bias"}, "c"),
				node("Reshape", "/1/Reshape", []string{"c", "shape3"}, "r"),
				node("InstanceNormalization", "/1/InstanceNormalization", []string{"r", "ones", "zeros"}, "in",
					&onnxpb.AttributeProto{Name: proto.String("epsilon"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(1e-5)}),
				node("Shape", "/1/Shape", []string{"c"}, "s"),
				node("Reshape", "/1/Reshape_1", []string{"in", "s"}, "r1"),
				node("Mul", "/1/Mul", []string{"r1", "onnx::Mul_20"}, "m"),
				node("Add", "/1/Add", []string{"m", "onnx::Add_21"}, "a"),
				node("Relu", "/2/Relu", []string{"a"}, "y"),
			},
			Input:  []*onnxpb.ValueInfoProto{floatInput4("x", 3, 6, 6)},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}}}
		if mutate == "read" { // the normalized value is also a graph output
			gp.Output = append(gp.Output, &onnxpb.ValueInfoProto{Name: proto.String("in")})
		}
		if mutate == "unsqueeze" { // exported without constant folding: Unsqueeze(weight (C))
			gp.Initializer = append(gp.Initializer, f("1.weight", []int64{C}, 1.5, 0.5, -1, 2), f("1.bias", []int64{C}, 0.1, 0.2, -0.3, 0.4),
				i("axes12", 1, 2))
			for _, n := range gp.Node {
				switch n.GetName() {
				case "/1/Mul":
					n.Input[1] = "wu"
				case "/1/Add":
					n.Input[1] = "bu"
				}
			}
			gp.Node = append([]*onnxpb.NodeProto{node("Unsqueeze", "/1/Unsqueeze", []string{"1.weight", "axes12"}, "wu"),
				node("Unsqueeze", "/1/Unsqueeze_1", []string{"1.bias", "axes12"}, "bu")}, gp.Node...)
		}
		m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: gp,
			OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(14)}}}
		g, err := graph.FromONNX(onnx.NewModel(m))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	sample := []int64{3, 6, 6}
	for _, c := range []struct {
		mutate string
		fused  int
	}{{"", 1}, {"unsqueeze", 1}, {"scale", 0}, {"read", 0}} {
		g := build(c.mutate)
		want := forwardOf(t, g, 2, sample)
		shapes, err := StaticShapes(g, sample, 2)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := FuseGroupNorm(g, shapes)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch) != c.fused || countOps(g, "GroupNormalization") != c.fused {
			t.Errorf("%q: %d changes, %d GroupNormalization nodes; want %d", c.mutate, len(ch), countOps(g, "GroupNormalization"), c.fused)
		}
		got := forwardOf(t, g, 2, sample)
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%q output %d: %v, unfused %v", c.mutate, i, got[i], want[i])
			}
		}
		// Written back, the decomposition computes the same.
		written, err := ExportGraph(g)
		if err != nil {
			t.Fatal(err)
		}
		if n := countOps(written, "GroupNormalization"); n != 0 {
			t.Errorf("%q: the written model keeps %d GroupNormalization nodes", c.mutate, n)
		}
		back := forwardOf(t, roundTrip(t, written), 2, sample)
		for i := range back {
			if d := math.Abs(float64(back[i] - want[i])); d > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%q written, output %d: %v, unfused %v", c.mutate, i, back[i], want[i])
			}
		}
	}
}

func floatInput4(name string, dims ...int64) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}}}
	for _, d := range dims {
		sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}
}
