package graph

import (
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// cfConst is a Constant node of an int64 or bool tensor.
func cfConst(out string, t *Tensor) *onnxpb.NodeProto {
	return fnode("c_"+out, "Constant", nil, []string{out}, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t.ToProto(out)})
}

func graphAttr(name string, g *onnxpb.GraphProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: g}
}

func vinfo(name string, elem int32, dims ...int64) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(elem), Shape: sh}}}}
}

// splitLoopModel is what the TorchScript exporter writes for
// torch.tensor_split(x, [2, 5], dim=1) on x of 6 columns: a Loop of trips
// iterations (2) appending x[:, points[i]:points[i+1]] to a sequence, the
// last part appended after it, and the parts read back by SequenceAt at 0,
// 1 and -1. x is the int64 initializer xs where given (so that everything
// folds), else the graph input x (batch, 6).
func splitLoopModel(trips int64, xs *Tensor) *onnxpb.ModelProto {
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input: []*onnxpb.ValueInfoProto{vinfo("i", 7, 1), vinfo("c", 9), {Name: proto.String("s")}},
		Node: []*onnxpb.NodeProto{
			fnode("", "Gather", []string{"points", "i"}, []string{"a"}),
			cfConst("one", i64([]int64{1}, 1)),
			fnode("", "Add", []string{"i", "one"}, []string{"i1"}),
			fnode("", "Gather", []string{"points", "i1"}, []string{"b"}),
			fnode("", "Slice", []string{"x", "a", "b", "axis1"}, []string{"part"}),
			fnode("", "SequenceInsert", []string{"s", "part"}, []string{"s1"}),
			fnode("", "Identity", []string{"c"}, []string{"cout"}),
		},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("cout")}, {Name: proto.String("s1")}},
	}
	b := newBuilder(17)
	if xs == nil {
		b.input("x", -1, 6)
	} else {
		b.init("x", xs)
	}
	b.init("points", i64([]int64{3}, 0, 2, 5)).init("axis1", i64([]int64{1}, 1)).init("at0", i64(nil, 0)).init("at1", i64(nil, 1)).init("atlast", i64(nil, -1))
	b.p.Graph.Node = []*onnxpb.NodeProto{
		cfConst("trips", i64(nil, trips)),
		cfConst("true", &Tensor{DType: Bool, B: []bool{true}}),
		fnode("empty", "SequenceEmpty", nil, []string{"s0"}),
		fnode("loop", "Loop", []string{"trips", "true", "s0"}, []string{"parts"}, graphAttr("body", body)),
		cfConst("five", i64([]int64{1}, 5)),
		cfConst("end", i64([]int64{1}, math.MaxInt64)),
		fnode("last", "Slice", []string{"x", "five", "end", "axis1"}, []string{"rest"}),
		fnode("append", "SequenceInsert", []string{"parts", "rest"}, []string{"all"}),
		fnode("p0", "SequenceAt", []string{"all", "at0"}, []string{"y0"}),
		fnode("p1", "SequenceAt", []string{"all", "at1"}, []string{"y1"}),
		fnode("p2", "SequenceAt", []string{"all", "atlast"}, []string{"y2"}),
	}
	b.output("y0").output("y1").output("y2")
	return b.p
}

// ops lists g's operators.
func ops(g *Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, n.OpType)
	}
	return out
}

// TestUnrollSplitLoop: tensor_split's Loop over a sequence becomes its
// slices — the same values (folded from a constant x), and for a batch
// input the shapes of the three parts.
func TestUnrollSplitLoop(t *testing.T) {
	xs := i64([]int64{2, 6}, 0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15)
	g, err := FromONNX(onnx.NewModel(splitLoopModel(2, xs)))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops(g) {
		if op == "Loop" || strings.HasPrefix(op, "Sequence") {
			t.Fatalf("%s left: %v", op, ops(g))
		}
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]int64{{0, 1, 10, 11}, {2, 3, 4, 12, 13, 14}, {5, 15}} {
		v := g.Outputs[i]
		if v.Const == nil || !slices.Equal(v.Const.I64, want) {
			t.Errorf("part %d: %v, want %v", i, v.Const, want)
		}
	}

	g, err = FromONNX(onnx.NewModel(splitLoopModel(2, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(map[string][]int64{"x": {3, 6}}); err != nil {
		t.Fatal(err)
	}
	for i, w := range []int64{2, 3, 1} {
		if s := g.Outputs[i].Shape; !slices.Equal(s.Ints(), []int64{3, w}) {
			t.Errorf("part %d: shape %v", i, s)
		}
	}
	// The iteration number keeps the body's declared shape [1].
	for _, n := range g.Nodes {
		if n.OpType == "Gather" && n.Inputs[1].Const != nil && len(n.Inputs[1].Const.Shape) != 1 {
			t.Errorf("%s: iteration number of shape %v", n, n.Inputs[1].Const.Shape)
		}
	}
}

// TestUnrollScanLoop: a Loop's carried value is chained through the
// copies and its scan output stacks each iteration's value.
func TestUnrollScanLoop(t *testing.T) {
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input: []*onnxpb.ValueInfoProto{vinfo("i", 7, 1), vinfo("c", 9), vinfo("acc", 7, 1)},
		Node: []*onnxpb.NodeProto{
			fnode("", "Add", []string{"acc", "i"}, []string{"acc1"}),
			fnode("", "Mul", []string{"i", "two"}, []string{"twice"}),
			cfConst("t", &Tensor{DType: Bool, B: []bool{true}}),
		},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("t")}, {Name: proto.String("acc1")}, {Name: proto.String("twice")}},
	}
	b := newBuilder(17).init("two", i64([]int64{1}, 2)).init("zero", i64([]int64{1}, 0)).init("trips", i64(nil, 4))
	b.p.Graph.Node = []*onnxpb.NodeProto{fnode("loop", "Loop", []string{"trips", "", "zero"}, []string{"sum", "scan"}, graphAttr("body", body))}
	b.output("sum").output("scan")
	g, err := FromONNX(onnx.NewModel(b.p))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	if s := g.Outputs[0].Const; s == nil || !slices.Equal(s.I64, []int64{6}) {
		t.Errorf("sum %v, want 0+1+2+3", s)
	}
	if s := g.Outputs[1].Const; s == nil || !slices.Equal(s.I64, []int64{0, 2, 4, 6}) || !slices.Equal(s.Shape, []int64{4, 1}) {
		t.Errorf("scan %v", s)
	}
}

// TestLoopsKept: a Loop whose trip count or condition is computed stays,
// with the sequences it reads (CheckOps names them); one of more trips
// than MaxUnrolledTrips is refused.
func TestLoopsKept(t *testing.T) {
	m := splitLoopModel(2, nil)
	m.Graph.Node[0] = fnode("n", "Size", []string{"x"}, []string{"trips"})
	g, err := FromONNX(onnx.NewModel(m))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(ops(g), " ")
	for _, want := range []string{"Loop", "SequenceEmpty", "SequenceInsert", "SequenceAt"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s unrolled or dropped: %s", want, got)
		}
	}
	m = splitLoopModel(2, nil)
	m.Graph.Node[1] = fnode("n", "Greater", []string{"axis1", "at0"}, []string{"true"})
	if g, err = FromONNX(onnx.NewModel(m)); err != nil || !strings.Contains(strings.Join(ops(g), " "), "Loop") {
		t.Errorf("computed condition: %v, %v", err, ops(g))
	}
	_, err = FromONNX(onnx.NewModel(splitLoopModel(MaxUnrolledTrips+1, nil)))
	if err == nil || !strings.Contains(err.Error(), "a Loop of 4097 iterations") || !strings.Contains(err.Error(), `Loop "loop"`) {
		t.Errorf("too many trips: %v", err)
	}
	// A while loop (TorchScript's trip count 2⁶³−1, its condition
	// computed) stays; with a constant true condition it never ends.
	m = splitLoopModel(math.MaxInt64, nil)
	m.Graph.Node[1] = fnode("n", "Greater", []string{"axis1", "at0"}, []string{"true"})
	if g, err = FromONNX(onnx.NewModel(m)); err != nil || !strings.Contains(strings.Join(ops(g), " "), "Loop") {
		t.Errorf("while loop: %v, %v", err, ops(g))
	}
	_, err = FromONNX(onnx.NewModel(splitLoopModel(math.MaxInt64, nil)))
	if err == nil || !strings.Contains(err.Error(), "a Loop of 9223372036854775807 iterations") {
		t.Errorf("endless loop: %v", err)
	}
}

// TestSequenceOps: the other sequence operators at constant positions.
func TestSequenceOps(t *testing.T) {
	b := newBuilder(17).init("a", i64([]int64{2}, 1, 2)).init("b", i64([]int64{2}, 3, 4)).init("c", i64([]int64{2}, 5, 6)).init("one", i64(nil, 1))
	b.p.Graph.Node = []*onnxpb.NodeProto{
		fnode("s", "SequenceConstruct", []string{"a", "b", "c"}, []string{"s"}),
		fnode("e", "SequenceErase", []string{"s", "one"}, []string{"s2"}),
		fnode("i", "SequenceInsert", []string{"s2", "b", "one"}, []string{"s3"}),
		fnode("n", "SequenceLength", []string{"s3"}, []string{"n"}),
		fnode("cat", "ConcatFromSequence", []string{"s3"}, []string{"stacked"},
			&onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)},
			&onnxpb.AttributeProto{Name: proto.String("new_axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}),
		fnode("flat", "ConcatFromSequence", []string{"s2"}, []string{"flat"},
			&onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}),
	}
	b.output("n").output("stacked").output("flat")
	g, err := FromONNX(onnx.NewModel(b.p))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	if n := g.Outputs[0].Const; n == nil || !slices.Equal(n.I64, []int64{3}) {
		t.Errorf("length %v", n)
	}
	if s := g.Outputs[1].Const; s == nil || !slices.Equal(s.I64, []int64{1, 2, 3, 4, 5, 6}) || !slices.Equal(s.Shape, []int64{3, 2}) {
		t.Errorf("stacked %v", s)
	}
	if s := g.Outputs[2].Const; s == nil || !slices.Equal(s.I64, []int64{1, 2, 5, 6}) {
		t.Errorf("concatenated %v", s)
	}
	// A sequence that is an output of the graph keeps every node.
	b.output("s3")
	if g, err = FromONNX(onnx.NewModel(b.p)); err != nil || !strings.Contains(strings.Join(ops(g), " "), "SequenceConstruct") {
		t.Errorf("sequence output: %v, %v", err, ops(g))
	}
}

// ifModel is x (batch, 3, 4) → If(cond) with then Relu(x) and else Neg(x),
// cond computed by condNodes.
func ifModel(condNodes ...*onnxpb.NodeProto) *onnxpb.ModelProto {
	branch := func(op string) *onnxpb.GraphProto {
		return &onnxpb.GraphProto{Name: proto.String(op), Node: []*onnxpb.NodeProto{fnode("", op, []string{"x"}, []string{"r"})},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("r")}}}
	}
	b := newBuilder(17).input("x", -1, 3, 4).init("k3", i64(nil, 3)).init("k2", i64(nil, 2)).init("ax1", i64(nil, 1)).init("ax0", i64(nil, 0))
	b.p.Graph.Node = append(condNodes, fnode("if", "If", []string{"cond"}, []string{"y"}, graphAttr("then_branch", branch("Relu")), graphAttr("else_branch", branch("Neg"))))
	b.output("y")
	return b.p
}

// TestInlineStaticIfs: an If on a dimension the batch does not change (the
// squeeze of a dimension the exporter did not see) or on a constant
// becomes the branch it takes; one on the batch size stays, as does one
// whose branch reads what nothing computes.
func TestInlineStaticIfs(t *testing.T) {
	shapeCond := func(axis, k string) []*onnxpb.NodeProto {
		return []*onnxpb.NodeProto{
			fnode("shape", "Shape", []string{"x"}, []string{"sh"}),
			fnode("dim", "Gather", []string{"sh", axis}, []string{"d"}),
			fnode("eq", "Equal", []string{"d", k}, []string{"cond"}),
		}
	}
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
		want string // the operator left where the If was
	}{
		{"dimension 1 is 3", ifModel(shapeCond("ax1", "k3")...), "Relu"},
		{"dimension 1 is not 2", ifModel(shapeCond("ax1", "k2")...), "Neg"},
		{"batch is 2", ifModel(shapeCond("ax0", "k2")...), "If"},
		{"constant false", ifModel(cfConst("cond", &Tensor{DType: Bool, B: []bool{false}})), "Neg"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := FromONNX(onnx.NewModel(c.m))
			if err != nil {
				t.Fatal(err)
			}
			y := g.Outputs[0]
			got := y.Producer.OpType
			if got == "Identity" {
				got = y.Producer.Inputs[0].Producer.OpType
				if y.Producer.Inputs[0].Producer.Inputs[0] != g.Values["x"] {
					t.Error("the branch does not read x")
				}
			}
			if got != c.want {
				t.Errorf("y computed by %s, want %s: %v", got, c.want, ops(g))
			}
		})
	}
	// An export with a fixed batch reads the condition at that batch: the
	// release of the batch generalizes the branch taken, and checks it.
	for _, c := range []struct {
		axis, k, want string
	}{{"ax1", "k3", "Relu"}, {"ax0", "k2", "Relu"}, {"ax0", "k3", "Neg"}} {
		m := ifModel(shapeCond(c.axis, c.k)...)
		m.Graph.Input[0].Type.GetTensorType().Shape.Dim[0].Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 2}
		g, err := FromONNX(onnx.NewModel(m))
		if err != nil {
			t.Fatal(err)
		}
		y := g.Outputs[0].Producer
		if y.OpType != "Identity" || y.Inputs[0].Producer.OpType != c.want {
			t.Errorf("fixed batch 2, dimension %s = %s: y computed by %s, want %s via Identity", c.axis, c.k, y.OpType, c.want)
		}
	}
	// Past the bound on the nodes the evaluations infer, Ifs stay.
	defer func(b int) { maxIfInferences = b }(maxIfInferences)
	maxIfInferences = 5
	g, err := FromONNX(onnx.NewModel(ifModel(shapeCond("ax1", "k3")...)))
	if err != nil || g.Outputs[0].Producer.OpType != "If" {
		t.Errorf("over the bound: %v, %v", err, ops(g))
	}
	maxIfInferences = 6 // three nodes, twice
	if g, err = FromONNX(onnx.NewModel(ifModel(shapeCond("ax1", "k3")...))); err != nil || g.Outputs[0].Producer.OpType == "If" {
		t.Errorf("at the bound: %v, %v", err, ops(g))
	}
	// A malformed condition (a ConstantOfShape without its input, found
	// by FuzzPipeline) is not evaluated: the load validates, later.
	bad := ifModel(fnode("cs", "ConstantOfShape", nil, []string{"z"}), fnode("eq", "Equal", []string{"z", "k2"}, []string{"cond"}))
	if _, err := FromONNX(onnx.NewModel(bad)); err != nil {
		t.Logf("malformed condition: %v", err)
	}
	m := ifModel(cfConst("cond", &Tensor{DType: Bool, B: []bool{true}}))
	m.Graph.Node[1].Attribute[0].G.Node[0].Input[0] = "nowhere"
	g, err = FromONNX(onnx.NewModel(m))
	if err != nil || g.Outputs[0].Producer.OpType != "If" {
		t.Errorf("a branch reading an unknown name: %v, %v", err, ops(g))
	}
}

// TestFoldSplit: Split folds (a shape vector split into its parts).
func TestFoldSplit(t *testing.T) {
	b := newBuilder(17).init("v", i64([]int64{2, 3}, 1, 2, 3, 4, 5, 6)).init("sizes", i64([]int64{2}, 1, 2))
	b.node("Split", []string{"v", "sizes"}, []string{"a", "b"}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)})
	b.output("a").output("b")
	g, err := FromONNX(onnx.NewModel(b.p))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	if a, bb := g.Outputs[0].Const, g.Outputs[1].Const; a == nil || bb == nil || !slices.Equal(a.I64, []int64{1, 4}) || !slices.Equal(bb.I64, []int64{2, 3, 5, 6}) ||
		!slices.Equal(bb.Shape, []int64{2, 2}) {
		t.Errorf("parts %v, %v", a, bb)
	}
}
