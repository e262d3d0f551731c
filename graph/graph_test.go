package graph

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// fixtureInput is the per-sample input shape of each committed fixture.
func fixtureInput(name string) []int64 {
	if name == "cnn" {
		return []int64{1, 28, 28}
	}
	return []int64{3, 32, 32}
}

func fixtures(t *testing.T) []string {
	paths, _ := filepath.Glob("../testdata/models/*.onnx")
	if len(paths) == 0 {
		t.Fatal("no fixtures under testdata/models: run testdata/gen/make_fixtures.py")
	}
	return paths
}

// TestFixtures loads every fixture, checks that it re-encodes unchanged
// byte for byte, infers static shapes for a batch of 8, and that the folded
// graph exports to a model that loads and infers again.
func TestFixtures(t *testing.T) {
	for _, p := range fixtures(t) {
		name := strings.TrimSuffix(filepath.Base(p), ".onnx")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m, err := onnx.Load(p)
			if err != nil {
				t.Fatal(err)
			}
			g, err := FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			out, err := g.ToONNX()
			if err != nil {
				t.Fatal(err)
			}
			b, err := out.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, raw) {
				t.Fatalf("unchanged graph re-encodes to different bytes (%d vs %d)", len(b), len(raw))
			}
			// Folding bakes the batch into shape constants: it runs on a
			// clone, and the original keeps its dynamic batch axis.
			dyn := g
			g = g.Clone()
			checkStatic(t, g, 8, fixtureInput(name))
			checkStatic(t, dyn.Clone(), 3, fixtureInput(name))
			if b, err := dyn.ToONNX(); err != nil {
				t.Fatal(err)
			} else if bb, _ := b.Bytes(); !bytes.Equal(bb, raw) {
				t.Fatal("folding a clone changed the original graph")
			}

			// The folded graph is a valid model of its own.
			folded, err := g.ToONNX()
			if err != nil {
				t.Fatal(err)
			}
			fb, err := folded.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			m2, err := onnx.LoadBytes(fb, "")
			if err != nil {
				t.Fatal(err)
			}
			g2, err := FromONNX(m2)
			if err != nil {
				t.Fatal(err)
			}
			if len(g2.Nodes) != len(g.Nodes) {
				t.Errorf("reloaded folded graph has %d nodes, want %d", len(g2.Nodes), len(g.Nodes))
			}
			checkStatic(t, g2, 8, fixtureInput(name))
		})
	}
}

// checkStatic infers shapes for the given batch and checks every value the
// remaining nodes touch is static, no shape-only op is left, and the output
// is (batch, 10).
func checkStatic(t *testing.T, g *Graph, batch int64, sample []int64) {
	t.Helper()
	in := g.Inputs[0]
	if err := g.InferShapes(map[string][]int64{in.Name: append([]int64{batch}, sample...)}); err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		switch n.OpType {
		case "Shape", "Constant", "ConstantOfShape", "Size":
			t.Errorf("node %s left after folding", n)
		}
		for _, v := range append(append([]*Value{}, n.Inputs...), n.Outputs...) {
			if v != nil && !v.Shape.Static() {
				t.Errorf("node %s: value %q has shape %v", n, v.Name, v.Shape)
			}
		}
	}
	out := g.Outputs[0]
	if got := out.Shape.Ints(); len(got) != 2 || got[0] != batch || got[1] != 10 {
		t.Errorf("output shape %v, want (%d, 10)", out.Shape, batch)
	}
	if err := g.Validate(); err != nil {
		t.Error(err)
	}
}

// builder makes small graphs for the unit tests.
type builder struct {
	p *onnxpb.ModelProto
}

func newBuilder(opset int64) *builder {
	return &builder{p: &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph:       &onnxpb.GraphProto{Name: proto.String("t")},
	}}
}

func (b *builder) input(name string, dims ...int64) *builder {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		if d < 0 {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
		} else {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}
		}
		sh.Dim = append(sh.Dim, dim)
	}
	b.p.Graph.Input = append(b.p.Graph.Input, &onnxpb.ValueInfoProto{Name: proto.String(name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}})
	return b
}

func (b *builder) init(name string, t *Tensor) *builder {
	b.p.Graph.Initializer = append(b.p.Graph.Initializer, t.ToProto(name))
	return b
}

func (b *builder) node(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *builder {
	b.p.Graph.Node = append(b.p.Graph.Node, &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(op + "_" + outs[0]), Input: ins, Output: outs, Attribute: attrs})
	return b
}

func (b *builder) output(name string) *builder {
	b.p.Graph.Output = append(b.p.Graph.Output, &onnxpb.ValueInfoProto{Name: proto.String(name)})
	return b
}

func (b *builder) graph(t *testing.T) *Graph {
	t.Helper()
	g, err := FromONNX(onnx.NewModel(b.p))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func i64(shape []int64, v ...int64) *Tensor { return &Tensor{DType: Int64, Shape: shape, I64: v} }

func TestAttributeDefaultsFollowOpset(t *testing.T) {
	for _, c := range []struct {
		opset int64
		want  int64
	}{{11, 1}, {12, 1}, {13, -1}, {14, -1}} {
		g := newBuilder(c.opset).input("x", 2, 3).node("Softmax", []string{"x"}, []string{"y"}).output("y").graph(t)
		got, err := g.Nodes[0].Int("axis")
		if err != nil || got != c.want {
			t.Errorf("opset %d: Softmax axis = %d, %v; want %d", c.opset, got, err, c.want)
		}
	}
	g := newBuilder(14).input("x", 2, 3).node("Concat", []string{"x", "x"}, []string{"y"}).output("y").graph(t)
	if _, err := g.Nodes[0].Int("axis"); err == nil || !strings.Contains(err.Error(), `"axis": required`) {
		t.Errorf("missing required attribute: err = %v", err)
	}
}

// TestFoldShapeSubgraph folds the pattern exporters emit for
// x.reshape(x.shape[0], -1): Shape → Gather → Unsqueeze → Concat → Reshape.
func TestFoldShapeSubgraph(t *testing.T) {
	g := newBuilder(14).input("x", -1, 4, 5).
		init("idx0", i64([]int64{}, 0)).
		init("ax0", i64([]int64{1}, 0)).
		init("minus1", i64([]int64{1}, -1)).
		node("Shape", []string{"x"}, []string{"s"}).
		node("Gather", []string{"s", "idx0"}, []string{"b"}).
		node("Unsqueeze", []string{"b", "ax0"}, []string{"b1"}).
		node("Concat", []string{"b1", "minus1"}, []string{"target"}, attrInt("axis", 0)).
		node("Reshape", []string{"x", "target"}, []string{"y"}).
		output("y").graph(t)
	if err := g.InferShapes(map[string][]int64{"x": {6, 4, 5}}); err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != 1 || g.Nodes[0].OpType != "Reshape" {
		t.Fatalf("after folding: %d nodes (%v), want only Reshape", len(g.Nodes), g.Nodes)
	}
	tgt := g.Nodes[0].Inputs[1].Const
	if tgt == nil || len(tgt.I64) != 2 || tgt.I64[0] != 6 || tgt.I64[1] != -1 {
		t.Errorf("folded target = %+v", tgt)
	}
	if got := g.Outputs[0].Shape.Ints(); got[0] != 6 || got[1] != 20 {
		t.Errorf("output shape %v", got)
	}
	if len(g.Initializers) != 0 {
		t.Errorf("initializers left unused by folding are kept: %d", len(g.Initializers))
	}
}

// TestFoldEvaluators checks constant evaluation op by op.
func TestFoldEvaluators(t *testing.T) {
	cases := []struct {
		name  string
		build func(b *builder) *builder
		want  []int64
		shape []int64
	}{
		{"Where/Equal", func(b *builder) *builder {
			return b.init("a", i64([]int64{3}, 2, -1, 4)).init("m1", i64([]int64{1}, -1)).init("one", i64([]int64{3}, 1, 1, 1)).
				node("Equal", []string{"a", "m1"}, []string{"c"}).node("Where", []string{"c", "one", "a"}, []string{"y"})
		}, []int64{2, 1, 4}, []int64{3}},
		{"Slice negative step", func(b *builder) *builder {
			return b.init("a", i64([]int64{5}, 0, 1, 2, 3, 4)).init("st", i64([]int64{1}, -1)).init("en", i64([]int64{1}, -6)).
				init("ax", i64([]int64{1}, 0)).init("sp", i64([]int64{1}, -2)).
				node("Slice", []string{"a", "st", "en", "ax", "sp"}, []string{"y"})
		}, []int64{4, 2, 0}, []int64{3}},
		{"Transpose", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 3}, 1, 2, 3, 4, 5, 6)).node("Transpose", []string{"a"}, []string{"y"})
		}, []int64{1, 4, 2, 5, 3, 6}, []int64{3, 2}},
		{"Expand", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 1}, 1, 2)).init("s", i64([]int64{2}, 2, 3)).node("Expand", []string{"a", "s"}, []string{"y"})
		}, []int64{1, 1, 1, 2, 2, 2}, []int64{2, 3}},
		{"Concat axis 1", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 1}, 1, 2)).init("c", i64([]int64{2, 2}, 3, 4, 5, 6)).
				node("Concat", []string{"a", "c"}, []string{"y"}, attrInt("axis", 1))
		}, []int64{1, 3, 4, 2, 5, 6}, []int64{2, 3}},
		{"Gather axis 1", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 3}, 1, 2, 3, 4, 5, 6)).init("i", i64([]int64{2}, 2, -3)).
				node("Gather", []string{"a", "i"}, []string{"y"}, attrInt("axis", 1))
		}, []int64{3, 1, 6, 4}, []int64{2, 2}},
		{"Range", func(b *builder) *builder {
			return b.init("s", i64([]int64{}, 1)).init("l", i64([]int64{}, 8)).init("d", i64([]int64{}, 3)).
				node("Range", []string{"s", "l", "d"}, []string{"y"})
		}, []int64{1, 4, 7}, []int64{3}},
		{"Div truncates", func(b *builder) *builder {
			return b.init("a", i64([]int64{2}, 7, -7)).init("c", i64([]int64{}, 2)).node("Div", []string{"a", "c"}, []string{"y"})
		}, []int64{3, -3}, []int64{2}},
		// GatherND: the ONNX specification's examples 2, 4 and 5.
		{"GatherND slices", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 2}, 0, 1, 2, 3)).init("i", i64([]int64{2, 1}, 1, 0)).
				node("GatherND", []string{"a", "i"}, []string{"y"})
		}, []int64{2, 3, 0, 1}, []int64{2, 2}},
		{"GatherND index pairs", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 2, 2}, 0, 1, 2, 3, 4, 5, 6, 7)).init("i", i64([]int64{2, 1, 2}, 0, 1, 1, 0)).
				node("GatherND", []string{"a", "i"}, []string{"y"})
		}, []int64{2, 3, 4, 5}, []int64{2, 1, 2}},
		{"GatherND batch_dims 1", func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 2, 2}, 0, 1, 2, 3, 4, 5, 6, 7)).init("i", i64([]int64{2, 1}, 1, 0)).
				node("GatherND", []string{"a", "i"}, []string{"y"}, attrInt("batch_dims", 1))
		}, []int64{2, 3, 4, 5}, []int64{2, 2}},
		{"GatherND negative index", func(b *builder) *builder {
			return b.init("a", i64([]int64{3}, 5, 6, 7)).init("i", i64([]int64{2, 1}, -1, 0)).
				node("GatherND", []string{"a", "i"}, []string{"y"})
		}, []int64{7, 5}, []int64{2}},
		{"ReduceProd", func(b *builder) *builder {
			return b.init("a", i64([]int64{3}, 2, 3, 4)).node("ReduceProd", []string{"a"}, []string{"y"}, attrInt("keepdims", 0))
		}, []int64{24}, []int64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.build(newBuilder(14).input("x", 1)).output("y").graph(t)
			if err := g.InferShapes(nil); err != nil {
				t.Fatal(err)
			}
			y := g.Values["y"]
			if y.Const == nil {
				t.Fatal("not folded")
			}
			if !equalInts(y.Const.Shape, c.shape) || !equalInts(y.Const.I64, c.want) {
				t.Errorf("got %v of shape %v, want %v of shape %v", y.Const.I64, y.Const.Shape, c.want, c.shape)
			}
		})
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParamsAreNotFolded: an op on a float initializer (a parameter) stays
// in the graph so training can reach the parameter.
func TestParamsAreNotFolded(t *testing.T) {
	w := &Tensor{DType: Float32, Shape: []int64{2, 2}, F32: []float32{1, 2, 3, 4}}
	g := newBuilder(14).input("x", 2, 2).init("w", w).
		node("Transpose", []string{"w"}, []string{"wt"}).
		node("MatMul", []string{"x", "wt"}, []string{"y"}).output("y").graph(t)
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != 2 {
		t.Errorf("%d nodes left, want 2", len(g.Nodes))
	}
}

func TestWindowShapes(t *testing.T) {
	cases := []struct {
		name  string
		op    string
		in    []int64
		attrs []*onnxpb.AttributeProto
		want  []int64
	}{
		{"pool ceil", "MaxPool", []int64{1, 1, 6, 6}, []*onnxpb.AttributeProto{attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2), attrInt("ceil_mode", 1)}, []int64{1, 1, 3, 3}},
		// PyTorch drops a last window that starts in the right padding.
		{"pool ceil pad", "MaxPool", []int64{1, 1, 5, 5}, []*onnxpb.AttributeProto{attrInts("kernel_shape", 2, 2), attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1), attrInt("ceil_mode", 1)}, []int64{1, 1, 3, 3}},
		{"pool floor", "AveragePool", []int64{1, 1, 6, 6}, []*onnxpb.AttributeProto{attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2)}, []int64{1, 1, 2, 2}},
		{"asym pads dil", "MaxPool", []int64{1, 1, 10}, []*onnxpb.AttributeProto{attrInts("kernel_shape", 3), attrInts("dilations", 2), attrInts("pads", 0, 3)}, []int64{1, 1, 9}},
		{"same upper", "AveragePool", []int64{1, 1, 7, 7}, []*onnxpb.AttributeProto{attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2),
			{Name: proto.String("auto_pad"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("SAME_UPPER")}}, []int64{1, 1, 4, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newBuilder(14).input("x", c.in...).node(c.op, []string{"x"}, []string{"y"}, c.attrs...).output("y").graph(t)
			if err := g.InferShapes(nil); err != nil {
				t.Fatal(err)
			}
			if got := g.Values["y"].Shape.Ints(); !equalInts(got, c.want) {
				t.Errorf("shape %v, want %v", got, c.want)
			}
		})
	}
}

func TestConvGroupsAndErrors(t *testing.T) {
	w := &Tensor{DType: Float32, Shape: []int64{8, 1, 3, 3}, F32: make([]float32, 72)}
	g := newBuilder(14).input("x", -1, 8, 9, 9).init("w", w).
		node("Conv", []string{"x", "w"}, []string{"y"}, attrInt("group", 8), attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1)).output("y").graph(t)
	if err := g.InferShapes(map[string][]int64{"x": {2, 8, 9, 9}}); err != nil {
		t.Fatal(err)
	}
	if got := g.Values["y"].Shape.Ints(); !equalInts(got, []int64{2, 8, 5, 5}) {
		t.Errorf("depthwise conv shape %v", got)
	}
	g = newBuilder(14).input("x", 1, 3, 9, 9).init("w", w).
		node("Conv", []string{"x", "w"}, []string{"y"}).output("y").graph(t)
	err := g.InferShapes(nil)
	if err == nil || !strings.Contains(err.Error(), "Conv \"Conv_y\"") || !strings.Contains(err.Error(), "channels") {
		t.Errorf("channel mismatch: err = %v", err)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name string
		b    *builder
		want string
	}{
		{"unknown op", newBuilder(14).input("x", 1).node("FancyOp", []string{"x"}, []string{"y"}).output("y"), "FancyOp"},
		{"missing input", newBuilder(14).input("x", 1).node("Relu", []string{"nope"}, []string{"y"}).output("y"), `input "nope"`},
		{"cycle", newBuilder(14).input("x", 1).node("Add", []string{"x", "b"}, []string{"a"}).node("Relu", []string{"a"}, []string{"b"}).output("b"), "cycle"},
		{"double producer", newBuilder(14).input("x", 1).node("Relu", []string{"x"}, []string{"y"}).node("Neg", []string{"x"}, []string{"y"}).output("y"), "also produced"},
		{"domain", newBuilder(14).input("x", 1).output("x"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := FromONNX(onnx.NewModel(c.b.p))
			if err == nil {
				err = g.InferShapes(nil)
			}
			if c.want == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want mention of %q", err, c.want)
			}
		})
	}
	// Wrong input rank and wrong fixed dim are named.
	g := newBuilder(14).input("x", -1, 3).node("Relu", []string{"x"}, []string{"y"}).output("y").graph(t)
	if err := g.InferShapes(map[string][]int64{"x": {2, 3, 4}}); err == nil || !strings.Contains(err.Error(), "rank 2") {
		t.Errorf("rank mismatch: err = %v", err)
	}
	if err := g.InferShapes(map[string][]int64{"x": {2, 4}}); err == nil || !strings.Contains(err.Error(), "fixed at 3") {
		t.Errorf("dim mismatch: err = %v", err)
	}
}

func TestReshapeTarget(t *testing.T) {
	in := StaticShape(2, 3, 4)
	for _, c := range []struct {
		target []int64
		want   []int64
		err    bool
	}{
		{[]int64{0, -1}, []int64{2, 12}, false},
		{[]int64{-1, 4}, []int64{6, 4}, false},
		{[]int64{5, -1}, nil, true},
		{[]int64{-1, -1}, nil, true},
		{[]int64{24}, []int64{24}, false},
	} {
		got, err := ReshapeTarget(in, c.target, false)
		if (err != nil) != c.err || (!c.err && !equalInts(got.Ints(), c.want)) {
			t.Errorf("ReshapeTarget(%v) = %v, %v; want %v (err %v)", c.target, got, err, c.want, c.err)
		}
	}
}

func TestUntieIdentityParams(t *testing.T) {
	z := &Tensor{DType: Float32, Shape: []int64{2}, F32: []float32{0, 0}}
	g := newBuilder(14).input("x", 2).init("b", z).
		node("Identity", []string{"b"}, []string{"b2"}).
		node("Add", []string{"x", "b"}, []string{"y1"}).
		node("Add", []string{"y1", "b2"}, []string{"y"}).output("y").graph(t)
	made := g.UntieIdentityParams()
	if len(made) != 1 || made[0] != "b2" {
		t.Fatalf("untied %v", made)
	}
	b2 := g.Values["b2"]
	if !b2.IsParam() || b2.Producer != nil || len(b2.Consumers) != 1 || len(g.Nodes) != 2 {
		t.Fatalf("b2 = %+v, %d nodes", b2, len(g.Nodes))
	}
	b2.Const.F32[0] = 1
	if g.Values["b"].Const.F32[0] != 0 {
		t.Error("untied copy shares data with the original")
	}
	m, err := g.ToONNX()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Proto.GetGraph().GetInitializer()); n != 2 {
		t.Errorf("export has %d initializers, want 2", n)
	}
}

// TestStaleValueInfoDropped: after a pass changes a parameter's shape, the
// declared types of the values below it are no longer written back.
func TestStaleValueInfoDropped(t *testing.T) {
	w := &Tensor{DType: Float32, Shape: []int64{2, 3}, F32: make([]float32, 6)}
	b := newBuilder(14).input("x", -1, 2).init("w", w).
		node("MatMul", []string{"x", "w"}, []string{"h"}).
		node("Relu", []string{"h"}, []string{"y"}).output("y")
	hi := &onnxpb.ValueInfoProto{Name: proto.String("h")}
	b.p.Graph.ValueInfo = append(b.p.Graph.ValueInfo, hi)
	g := b.graph(t)
	m, _ := g.ToONNX()
	if len(m.Proto.GetGraph().GetValueInfo()) != 1 {
		t.Fatal("unchanged graph lost its value_info")
	}
	g.Values["w"].Const = &Tensor{DType: Float32, Shape: []int64{2, 5}, F32: make([]float32, 10)}
	m, _ = g.ToONNX()
	if n := len(m.Proto.GetGraph().GetValueInfo()); n != 0 {
		t.Errorf("value_info below a changed parameter kept (%d entries)", n)
	}
}
