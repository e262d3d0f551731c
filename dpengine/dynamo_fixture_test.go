package dpengine

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// dynamoStyleModel is a token model written the way PyTorch's dynamo
// exporter writes one (at the opset it is asked for, 24 here), every
// load-time form at once: a model-local function (the block) holding
// Attention-23 with a float mask, RMSNormalization-23 and Swish-24; the
// mask read from a relative-position table by GatherND of an unsqueezed
// index buffer (table[index]); a lifted scalar constant applied through
// CastLike; and torch.export's signature marks on the parameters, the
// index buffer and the input, with the lifted constant unmarked. Input
// (batch, 4, 8), 3 classes. FuzzPipeline mutates it with the fixtures.
func dynamoStyleModel() *onnxpb.ModelProto {
	f32 := func(name string, shape []int64, seed int) *onnxpb.TensorProto {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		t := &graph.Tensor{DType: graph.Float32, Shape: shape, F32: make([]float32, n)}
		for i := range t.F32 {
			t.F32[i] = float32(0.5 * math.Sin(float64(7*i+13*seed)))
		}
		return t.ToProto(name)
	}
	i64 := func(name string, shape []int64, v ...int64) *onnxpb.TensorProto {
		return (&graph.Tensor{DType: graph.Int64, Shape: shape, I64: v}).ToProto(name)
	}
	node := func(op string, ins []string, out string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String("node_" + out), Input: ins, Output: []string{out}, Attribute: attrs}
	}
	mark := func(name, kind string) []*onnxpb.StringStringEntryProto {
		return []*onnxpb.StringStringEntryProto{{Key: proto.String(graph.TorchInputKind), Value: proto.String(kind)}}
	}
	dim := func(d int64) *onnxpb.TensorShapeProto_Dimension {
		if d < 0 {
			return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "s77"}}
		}
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
	}
	typed := func(name string, dims ...int64) *onnxpb.ValueInfoProto {
		sh := &onnxpb.TensorShapeProto{}
		for _, d := range dims {
			sh.Dim = append(sh.Dim, dim(d))
		}
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}
	}
	block := &onnxpb.FunctionProto{Name: proto.String("Block"), Domain: proto.String("pkg.torch.__subgraph__"),
		Input:       []string{"x", "wq", "wk", "wv", "scale", "mask"},
		Output:      []string{"out"},
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(24)}},
		Node: []*onnxpb.NodeProto{
			node("MatMul", []string{"x", "wq"}, "q"), node("MatMul", []string{"x", "wk"}, "k"), node("MatMul", []string{"x", "wv"}, "v"),
			node("Attention", []string{"q", "k", "v", "mask"}, "a", intAttr("q_num_heads", 2), intAttr("kv_num_heads", 2)),
			node("RMSNormalization", []string{"a", "scale"}, "n"),
			node("Swish", []string{"n"}, "out"),
		}}
	in := typed("x", -1, 4, 8)
	in.MetadataProps = mark("x", "USER_INPUT")
	inits := []*onnxpb.TensorProto{f32("wq", []int64{8, 8}, 1), f32("wk", []int64{8, 8}, 2), f32("wv", []int64{8, 8}, 3),
		f32("scale", []int64{8}, 4), f32("table", []int64{7}, 5), f32("fc.weight", []int64{3, 8}, 6), f32("fc.bias", []int64{3}, 7),
		i64("relative_position_index", []int64{16}, 3, 2, 1, 0, 4, 3, 2, 1, 5, 4, 3, 2, 6, 5, 4, 3),
		i64("val_1", []int64{1}, -1), i64("val_2", []int64{2}, 4, 4), i64("val_3", []int64{1}, 1),
		f32("val_0", []int64{1}, 8)}
	var infos []*onnxpb.ValueInfoProto
	for _, p := range []string{"wq", "wk", "wv", "scale", "table", "fc.weight", "fc.bias"} {
		infos = append(infos, &onnxpb.ValueInfoProto{Name: proto.String(p), MetadataProps: mark(p, "PARAMETER")})
	}
	infos = append(infos, &onnxpb.ValueInfoProto{Name: proto.String("relative_position_index"), MetadataProps: mark("relative_position_index", "BUFFER")})
	gp := &onnxpb.GraphProto{Name: proto.String("main_graph"), Input: []*onnxpb.ValueInfoProto{in},
		Output: []*onnxpb.ValueInfoProto{typed("logits", -1, 3)}, Initializer: inits, ValueInfo: infos,
		Node: []*onnxpb.NodeProto{
			node("Unsqueeze", []string{"relative_position_index", "val_1"}, "index"),
			node("GatherND", []string{"table", "index"}, "bias"),
			node("Reshape", []string{"bias", "val_2"}, "mask"),
			{OpType: proto.String("Block"), Domain: proto.String("pkg.torch.__subgraph__"), Name: proto.String("node_block"),
				Input: []string{"x", "wq", "wk", "wv", "scale", "mask"}, Output: []string{"h"}},
			node("CastLike", []string{"val_0", "h"}, "s"),
			node("Mul", []string{"h", "s"}, "hs"),
			node("ReduceMean", []string{"hs", "val_3"}, "pool", intAttr("keepdims", 0)),
			node("Gemm", []string{"pool", "fc.weight", "fc.bias"}, "logits", intAttr("transB", 1)),
		}}
	return &onnxpb.ModelProto{IrVersion: proto.Int64(10), ProducerName: proto.String("pytorch"), Graph: gp,
		Functions: []*onnxpb.FunctionProto{block},
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(24)},
			{Domain: proto.String("pkg.torch.__subgraph__"), Version: proto.Int64(1)}}}
}

// TestDynamoStyleModel: the dynamo-style model loads, plans its marked
// parameters (the relative-position table through GatherND as an
// elementwise one; the lifted constant and the index buffer as
// constants), and trains in every mode with per-sample norms equal to its
// batch-of-1 gradients' norms; its export loads again.
func TestDynamoStyleModel(t *testing.T) {
	const B = 4
	sample := []int64{4, 8}
	load := func() *graph.Graph {
		b, err := proto.Marshal(dynamoStyleModel())
		if err != nil {
			t.Fatal(err)
		}
		m, err := onnx.LoadBytes(b, "")
		if err != nil {
			t.Fatal(err)
		}
		g, err := graph.FromONNX(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := runtime.CheckOps(g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	kinds := map[string]rewrite.Kind{"wq": rewrite.KindLinear, "wk": rewrite.KindLinear, "wv": rewrite.KindLinear,
		"fc.weight": rewrite.KindLinear, "fc.bias": rewrite.KindElementwise, "scale": rewrite.KindElementwise, "table": rewrite.KindElementwise}
	engine := func(mode Mode, batch int) (*Engine, *graph.Graph) {
		g := load()
		rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: int64(batch)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rp.Params) != len(kinds) {
			var names []string
			for _, p := range rp.Params {
				names = append(names, p.Name)
			}
			t.Fatalf("parameters %s, want the %d marked ones", strings.Join(names, ", "), len(kinds))
		}
		for _, prm := range rp.Params {
			if prm.Kind != kinds[prm.Name] {
				t.Fatalf("%s is %s (%s), want %s", prm.Name, prm.Kind, prm.Reason, kinds[prm.Name])
			}
		}
		e, err := New(g, rp, Config{Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1e9}, ExpectedBatch: float64(batch), PhysicalBatch: batch})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		return e, g
	}
	x := testInput(B*32, 0.7)
	y := []int64{2, 0, 1, 2}
	one, _ := engine(NonDP, 1)
	want := batchOfOneNorms(t, one, x, y)
	for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
		t.Run(string(mode), func(t *testing.T) {
			e, g := engine(mode, B)
			checkBatchNorms(t, e, x, y, want)
			out, err := g.ToONNX()
			if err != nil {
				t.Fatal(err)
			}
			b, err := out.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := onnx.LoadBytes(b, ""); err != nil {
				t.Errorf("the export does not load again: %v", err)
			}
		})
	}
}

// batchOfOneNorms returns each parameter's gradient norm for each sample
// of x (labels y) taken alone, from a non-DP engine of physical batch 1:
// the per-sample norms every DP mode must reproduce.
func batchOfOneNorms(t *testing.T, one *Engine, x []float32, y []int64) map[string][]float64 {
	t.Helper()
	per := len(x) / len(y)
	want := map[string][]float64{}
	for i := range y {
		sums, _, err := one.ClippedSum(x[i*per:(i+1)*per], y[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		for p, g := range sums {
			want[p] = append(want[p], math.Sqrt(runtime.CPU{}.SumSq(g)))
		}
	}
	return want
}

// checkBatchNorms runs e on the whole batch and holds its per-sample
// parameter norms to want (batchOfOneNorms) within 1e-4 relative.
func checkBatchNorms(t *testing.T, e *Engine, x []float32, y []int64, want map[string][]float64) {
	t.Helper()
	if _, _, err := e.ClippedSum(x, y); err != nil {
		t.Fatal(err)
	}
	got := e.ParamNorms()
	for p, w := range want {
		for i := range w {
			if r := math.Abs(got[p][i]-w[i]) / w[i]; !(r <= 1e-4) {
				t.Errorf("%s sample %d: norm %v, batch of 1 %v (rel %.1e)", p, i, got[p][i], w[i], r)
			}
		}
	}
}

// TestFusedTorchGroupNormBatchOfOne: nn.GroupNorm as PyTorch's TorchScript
// exporter writes it without constant folding (Reshape, InstanceNormalization,
// Reshape, Mul and Add by Unsqueeze of the (C) weight and bias), which the
// rewrite trains as one GroupNormalization node reading the Unsqueezes:
// the weight and bias are elementwise parameters whose per-sample norms
// equal their batch-of-1 gradients' norms in every mode, on the CPU and
// the reference backend.
func TestFusedTorchGroupNormBatchOfOne(t *testing.T) {
	const B = 4
	sample := []int64{3, 6, 6}
	build := func() *graph.Graph {
		m := newTestModel(14)
		x := m.node("Conv", []string{"input", m.param("conv.weight", 4, 3, 3, 3), m.param("conv.bias", 4)}, "conv")
		r := m.node("Reshape", []string{x, m.ints("shape3", 0, 2, -1)}, "r")
		ones := &graph.Tensor{DType: graph.Float32, Shape: []int64{2}, F32: []float32{1, 1}}
		zeros := &graph.Tensor{DType: graph.Float32, Shape: []int64{2}, F32: []float32{0, 0}}
		m.g.Initializer = append(m.g.Initializer, ones.ToProto("ones"), zeros.ToProto("zeros"))
		n := m.node("InstanceNormalization", []string{r, "ones", "zeros"}, "in")
		s := m.node("Shape", []string{x}, "s")
		r1 := m.node("Reshape", []string{n, s}, "r1")
		axes := m.ints("axes12", 1, 2)
		wu := m.node("Unsqueeze", []string{m.param("gn.weight", 4), axes}, "wu")
		bu := m.node("Unsqueeze", []string{m.param("gn.bias", 4), axes}, "bu")
		y := m.node("Add", []string{m.node("Mul", []string{r1, wu}, "mul"), bu}, "add")
		y = m.node("Relu", []string{y}, "relu")
		y = m.node("GlobalAveragePool", []string{y}, "pool")
		y = m.node("Flatten", []string{y}, "flat")
		y = m.node("Gemm", []string{y, m.param("fc.weight", 3, 4), m.param("fc.bias", 3)}, "logits", intAttr("transB", 1))
		return m.graph(t, sample, y, 3)
	}
	engine := func(mode Mode, batch int, dev runtime.Device) *Engine {
		g := build()
		rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: int64(batch)}})
		if err != nil {
			t.Fatal(err)
		}
		gn := 0
		for _, n := range g.Nodes {
			if n.OpType == "GroupNormalization" {
				gn++
			}
		}
		if gn != 1 {
			t.Fatalf("%d GroupNormalization nodes after Prepare, want 1", gn)
		}
		for _, prm := range rp.Params {
			if strings.HasPrefix(prm.Name, "gn.") && prm.Kind != rewrite.KindElementwise {
				t.Fatalf("%s is %s (%s), want elementwise", prm.Name, prm.Kind, prm.Reason)
			}
		}
		e, err := New(g, rp, Config{Device: dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1e9}, ExpectedBatch: float64(batch), PhysicalBatch: batch})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		return e
	}
	x := testInput(B*3*6*6, 0.4)
	y := []int64{1, 0, 2, 1}
	want := batchOfOneNorms(t, engine(NonDP, 1, nil), x, y)
	if len(want) != 6 {
		t.Fatalf("%d parameters trained, want 6", len(want))
	}
	for _, dev := range []runtime.Device{nil, reference.Separate{}} {
		for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
			label := string(mode)
			if dev != nil {
				label += "/" + dev.Name()
			}
			t.Run(label, func(t *testing.T) { checkBatchNorms(t, engine(mode, B, dev), x, y, want) })
		}
	}
}
