package graph

import (
	"math/rand"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// typedInput declares a graph input of element type dt; a negative
// dimension is symbolic.
func (b *builder) typedInput(name string, dt DType, dims ...int64) *builder {
	b.input(name, dims...)
	in := b.p.Graph.Input[len(b.p.Graph.Input)-1]
	in.GetType().GetTensorType().ElemType = proto.Int32(int32(dt))
	return b
}

func opTypes(g *Graph) string {
	var s []string
	for _, n := range g.Nodes {
		s = append(s, n.OpType)
	}
	return strings.Join(s, " ")
}

// TestExpansionStructure checks what each standard function operator
// becomes (the numbers are checked in package runtime, against float64
// oracles and onnxruntime).
func TestExpansionStructure(t *testing.T) {
	cases := []struct {
		name  string
		b     *builder
		ops   string // the node types after loading
		check func(t *testing.T, g *Graph)
	}{
		{"Swish before opset 24 is no standard operator", newBuilder(23).input("x", 2).node("Swish", []string{"x"}, []string{"y"}).output("y"),
			"Swish", nil},
		{"Swish alpha 1", newBuilder(24).input("x", 2).node("Swish", []string{"x"}, []string{"y"}).output("y"),
			"Sigmoid Mul", nil},
		{"Swish alpha", newBuilder(24).input("x", 2).node("Swish", []string{"x"}, []string{"y"}, attrFloat("alpha", 2)).output("y"),
			"Constant Mul Sigmoid Mul", nil},
		{"RMSNormalization keeps scale as the Mul's operand", newBuilder(23).input("x", -1, 4).init("scale", f32t(1, 2, 3, 4)).
			node("RMSNormalization", []string{"x", "scale"}, []string{"y"}).output("y"),
			"Mul Constant ReduceMean Constant Add Sqrt Div Mul", func(t *testing.T, g *Graph) {
				s := g.Values["scale"]
				if len(s.Consumers) != 1 || s.Consumers[0].OpType != "Mul" || s.Consumers[0].Inputs[1] != s || s.Consumers[0].Outputs[0] != g.Values["y"] {
					t.Errorf("scale is read by %v, want the Mul that computes y", s.Consumers)
				}
				if axes := mustTensor(t, g.Nodes[1].Attr("value").GetT()); !equalInts(axes.I64, []int64{1}) {
					t.Errorf("axes %v, want [1]", axes.I64)
				}
			}},
		{"RMSNormalization in float32 for float64 X", newBuilder(23).typedInput("x", Float64, 2, 4).init("scale", &Tensor{DType: Float64, Shape: []int64{4}, F64: []float64{1, 2, 3, 4}}).
			node("RMSNormalization", []string{"x", "scale"}, []string{"y"}).output("y"),
			"Cast Mul Constant ReduceMean Constant Add Sqrt Div Cast Mul", nil},
		{"Attention before opset 23 is no standard operator", newBuilder(22).input("q", 1, 1, 2, 4).input("k", 1, 1, 2, 4).input("v", 1, 1, 2, 4).
			node("Attention", []string{"q", "k", "v"}, []string{"y"}).output("y"),
			"Attention", nil},
		{"Attention 4-D, head size known", newBuilder(23).input("q", 1, 2, 3, 4).input("k", 1, 2, 5, 4).input("v", 1, 2, 5, 6).
			node("Attention", []string{"q", "k", "v"}, []string{"y", "pk", "pv", "qk"}).output("y"),
			"Constant Mul Transpose Mul MatMul Softmax MatMul", func(t *testing.T, g *Graph) {
				for _, name := range []string{"pk", "pv", "qk"} {
					if g.Values[name] != nil {
						t.Errorf("unread output %q kept", name)
					}
				}
				c := mustTensor(t, g.Nodes[0].Attr("value").GetT())
				if c.F32[0] != 0.70710677 { // √(1/√4)
					t.Errorf("√scale %v, want 0.70710677", c.F32[0])
				}
			}},
		{"Attention 4-D, head size from shapes, causal", newBuilder(23).input("q", -1, 2, 3, -1).input("k", -1, 2, 5, -1).input("v", -1, 2, 5, 6).
			node("Attention", []string{"q", "k", "v"}, []string{"y"}, attrInt("is_causal", 1)).output("y"),
			"Shape Cast Constant Pow Mul Transpose Mul MatMul " +
				"Constant Shape Constant Squeeze Constant Range Constant Shape Constant Squeeze Constant Range Constant Unsqueeze Greater Constant Constant Where " +
				"Add Softmax MatMul", func(t *testing.T, g *Graph) {
				// Shape inference folds the scale and the mask.
				if err := g.InferShapes(map[string][]int64{"q": {2, 2, 3, 4}, "k": {2, 2, 5, 4}, "v": {2, 2, 5, 6}}); err != nil {
					t.Fatal(err)
				}
				if got := opTypes(g); got != "Mul Transpose Mul MatMul Add Softmax MatMul" {
					t.Errorf("after shape inference: %s", got)
				}
				if y := g.Values["y"]; y.Shape.String() != "(2,2,3,6)" {
					t.Errorf("y has shape %v", y.Shape)
				}
			}},
		{"Attention 3-D with mask and softcap", newBuilder(23).input("q", -1, 3, 8).input("k", -1, 5, 8).input("v", -1, 5, 4).
			init("m", &Tensor{DType: Bool, Shape: []int64{3, 5}, B: make([]bool, 15)}).
			node("Attention", []string{"q", "k", "v", "m"}, []string{"y"}, attrInt("q_num_heads", 2), attrInt("kv_num_heads", 2), attrFloat("softcap", 3)).output("y"),
			"Constant Reshape Transpose Constant Reshape Transpose Constant Reshape Transpose Constant Mul Transpose Mul MatMul " +
				"Constant Div Tanh Mul Constant Constant Where Constant ReduceMax Constant Add Constant Max Constant Min Constant Max " +
				"Add Softmax MatMul Mul Transpose Constant Reshape", func(t *testing.T, g *Graph) {
				if err := g.InferShapes(map[string][]int64{"q": {2, 3, 8}, "k": {2, 5, 8}, "v": {2, 5, 4}}); err != nil {
					t.Fatal(err)
				}
				if y := g.Values["y"]; y.Shape.String() != "(2,3,4)" {
					t.Errorf("y has shape %v", y.Shape)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.b.graph(t)
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := opTypes(g); got != c.ops {
				t.Fatalf("nodes\n\t%s\nwant\n\t%s", got, c.ops)
			}
			// The export holds the expansion and loads again as is.
			m, err := g.ToONNX()
			if err != nil {
				t.Fatal(err)
			}
			g2, err := FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := opTypes(g2); got != c.ops {
				t.Fatalf("exported model reads back as\n\t%s", got)
			}
			if c.check != nil {
				c.check(t, g)
			}
		})
	}
}

func mustTensor(t *testing.T, p *onnxpb.TensorProto) *Tensor {
	t.Helper()
	x, err := TensorFromProto(onnx.NewModel(&onnxpb.ModelProto{}), p)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestExpansionRefusals(t *testing.T) {
	qkv := func(opset int64) *builder {
		return newBuilder(opset).input("q", 1, 2, 3, 4).input("k", 1, 2, 5, 4).input("v", 1, 2, 5, 4)
	}
	qkv3 := func() *builder { return newBuilder(23).input("q", 1, 3, 8).input("k", 1, 5, 8).input("v", 1, 5, 8) }
	attn := func(b *builder, ins []string, outs []string, attrs ...*onnxpb.AttributeProto) *builder {
		return b.node("Attention", ins, outs, attrs...).output("y")
	}
	qkvNames := []string{"q", "k", "v"}
	cases := []struct {
		name string
		b    *builder
		want []string
	}{
		{"GQA 3-D", attn(qkv3(), qkvNames, []string{"y"}, attrInt("q_num_heads", 4), attrInt("kv_num_heads", 2)),
			[]string{`"Attention_y"`, "Attention-23", "q_num_heads 4 ≠ kv_num_heads 2", "GQA/MQA"}},
		{"MQA 4-D", attn(newBuilder(23).input("q", 1, 4, 3, 4).input("k", 1, 1, 5, 4).input("v", 1, 1, 5, 4), qkvNames, []string{"y"}),
			[]string{"Q has 4 heads, K 1", "GQA/MQA"}},
		{"3-D without head counts", attn(qkv3(), qkvNames, []string{"y"}),
			[]string{`"q" has shape (1,3,8)`, "3-D with q_num_heads and kv_num_heads"}},
		{"one head count", attn(qkv3(), qkvNames, []string{"y"}, attrInt("q_num_heads", 2)),
			[]string{"need q_num_heads and kv_num_heads"}},
		{"hidden size not a multiple of heads", attn(qkv3(), qkvNames, []string{"y"}, attrInt("q_num_heads", 3), attrInt("kv_num_heads", 3)),
			[]string{"hidden size 8 is not a multiple of q_num_heads 3"}},
		{"past key", attn(qkv(23).input("pk", 1, 2, 1, 4).input("pv", 1, 2, 1, 4), []string{"q", "k", "v", "", "pk", "pv"}, []string{"y"}),
			[]string{`past_key ("pk")`, "cache"}},
		{"nonpad_kv_seqlen", attn(qkv(24).init("n", i64([]int64{1}, 5)), []string{"q", "k", "v", "", "", "", "n"}, []string{"y"}),
			[]string{"nonpad_kv_seqlen"}},
		{"present_key read", attn(qkv(23), qkvNames, []string{"y", "pk"}).node("Relu", []string{"pk"}, []string{"r"}),
			[]string{`present_key ("pk") is read`, "only output Y"}},
		{"qk_matmul_output a graph output", attn(qkv(23), qkvNames, []string{"y", "", "", "qk"}).output("qk"),
			[]string{`qk_matmul_output ("qk") is read`}},
		{"sliding window", attn(qkv(25), qkvNames, []string{"y"}, attrInt("left_window_size", 2)),
			[]string{"Attention-25", "left_window_size = 2", "sliding-window"}},
		{"scale zero", attn(qkv(23), qkvNames, []string{"y"}, attrFloat("scale", 0)),
			[]string{"scale = 0", "positive"}},
		{"is_causal 2", attn(qkv(23), qkvNames, []string{"y"}, attrInt("is_causal", 2)),
			[]string{"is_causal = 2"}},
		{"negative softcap", attn(qkv(23), qkvNames, []string{"y"}, attrFloat("softcap", -1)),
			[]string{"softcap = -1"}},
		{"int mask", attn(qkv(23).init("m", i64([]int64{3, 5}, make([]int64, 15)...)), []string{"q", "k", "v", "m"}, []string{"y"}),
			[]string{`attn_mask "m" is int64`, "bool and float"}},
		{"mask of unknown type", attn(qkv(23).node("Relu", []string{"q"}, []string{"r"}), []string{"q", "k", "v", "mm"}, []string{"y"}).
			node("TopK", []string{"r", "k"}, []string{"mm"}),
			[]string{`attn_mask "mm" is not known at load`, "value_info"}},
		{"mask shorter than the keys", attn(qkv(24).init("m", &Tensor{DType: Bool, Shape: []int64{3, 4}, B: make([]bool, 12)}), []string{"q", "k", "v", "m"}, []string{"y"}),
			[]string{"4 positions on its last axis for 5 keys"}},
		{"float mask of another type", attn(qkv(23).typedInput("m", Float64, 3, 5), []string{"q", "k", "v", "m"}, []string{"y"}),
			[]string{`attn_mask "m" is float64, Q is float32`}},
		{"float16 Q", attn(newBuilder(23).typedInput("q", Float16, 1, 2, 3, 4).input("k", 1, 2, 5, 4).input("v", 1, 2, 5, 4), qkvNames, []string{"y"}),
			[]string{`input "q" is float16`}},
		{"RMSNormalization positive axis, rank unknown", newBuilder(23).init("scale", f32t(1, 2)).
			node("Identity", []string{"x"}, []string{"xi"}).node("RMSNormalization", []string{"xi", "scale"}, []string{"y"}, attrInt("axis", 1)).
			output("y").input("x", 2, 2), // x declared, xi not: its rank is unknown at load
			[]string{"RMSNormalization-23", "axis 1 counts from the front", "declare X's shape"}},
		{"RMSNormalization axis out of range", newBuilder(23).input("x", 2, 2).init("scale", f32t(1, 2)).
			node("RMSNormalization", []string{"x", "scale"}, []string{"y"}, attrInt("axis", 2)).output("y"),
			[]string{"axis 2 is out of range for X of rank 2"}},
		{"RMSNormalization stash_type", newBuilder(23).input("x", 2, 2).init("scale", f32t(1, 2)).
			node("RMSNormalization", []string{"x", "scale"}, []string{"y"}, attrInt("stash_type", 10)).output("y"),
			[]string{"stash_type 10 (float16) is not supported"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromONNX(onnx.NewModel(c.b.p))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestExpansionInsideFunction: a standard function operator inside a
// model-local function is expanded at the function's opset.
func TestExpansionInsideFunction(t *testing.T) {
	f := fn("Act", []string{"a"}, []string{"b"}, fnode("sw", "Swish", []string{"a"}, []string{"b"}))
	f.OpsetImport[0].Version = proto.Int64(24)
	m := fmodel([]*onnxpb.NodeProto{fnode("c", "local.Act", []string{"x"}, []string{"y"})}, []*onnxpb.FunctionProto{f}, "y")
	m.OpsetImport[0].Version = proto.Int64(24)
	g, err := FromONNX(onnx.NewModel(m))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(summary(g), "\n")
	want := "c/sw/Sigmoid: Sigmoid(x) -> c/sw/Sigmoid_output_0 @24\nc/sw/Mul: Mul(x, c/sw/Sigmoid_output_0) -> y @24"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestExpansionMutations loads the models of the expansion tests under
// random structured mutations (internal/hostile's, applied to the main
// graph and to each function body): every one loads or fails with an
// error, and one that loads infers shapes or fails with an error; none
// panics.
func TestExpansionMutations(t *testing.T) {
	f32 := onnxpb.AttributeProto_FLOAT
	models := []func() *onnxpb.ModelProto{
		func() *onnxpb.ModelProto {
			return newBuilder(23).input("q", 1, 2, 3, 4).input("k", 1, 2, 5, 4).input("v", 1, 2, 5, 4).
				init("m", &Tensor{DType: Bool, Shape: []int64{3, 5}, B: make([]bool, 15)}).
				node("Attention", []string{"q", "k", "v", "m"}, []string{"y", "pk"}, attrInt("is_causal", 1), attrFloat("softcap", 2)).output("y").p
		},
		func() *onnxpb.ModelProto {
			return newBuilder(23).input("q", -1, 3, 8).input("k", -1, 5, 8).input("v", -1, 5, 8).
				node("Attention", []string{"q", "k", "v"}, []string{"y"}, attrInt("q_num_heads", 2), attrInt("kv_num_heads", 2), attrFloat("scale", 0.5)).output("y").p
		},
		func() *onnxpb.ModelProto {
			return newBuilder(24).input("x", -1, 3, 4).init("scale", f32t(1, 2, 3, 4)).
				node("RMSNormalization", []string{"x", "scale"}, []string{"r"}, attrInt("axis", -1)).
				node("Swish", []string{"r"}, []string{"y"}, attrFloat("alpha", 2)).output("y").p
		},
		func() *onnxpb.ModelProto {
			inner := fn("Inner", []string{"p", "o"}, []string{"q"}, fnode("", "LeakyRelu", []string{"p"}, []string{"t"}, attrRef("alpha", f32, "k")),
				fnode("", "Clip", []string{"t", "o"}, []string{"q"}))
			inner.AttributeProto = []*onnxpb.AttributeProto{attrFloat("k", 0.1)}
			outer := fn("Outer", []string{"a"}, []string{"b", "c"},
				fnode("first", "local.Inner", []string{"a"}, []string{"m"}, attrRef("k", f32, "s")),
				fnode("", "local.Inner", []string{"m", "a"}, []string{"b"}), fnode("", "Swish", []string{"m"}, []string{"c"}))
			inner.OpsetImport[0].Version = proto.Int64(24)
			outer.OpsetImport[0].Version = proto.Int64(24)
			m := fmodel([]*onnxpb.NodeProto{fnode("top", "local.Outer", []string{"x"}, []string{"y", ""}, attrFloat("s", 0.2)),
				fnode("", "local.Inner", []string{"y"}, []string{"z"})},
				[]*onnxpb.FunctionProto{outer, inner}, "y", "z")
			m.OpsetImport[0].Version = proto.Int64(24)
			return m
		},
	}
	rng := rand.New(rand.NewSource(5))
	for mi, build := range models {
		for trial := 0; trial < 400; trial++ {
			m := build()
			prog := make([]byte, 3*(1+rng.Intn(4)))
			for i := range prog {
				prog[i] = byte(rng.Intn(256))
			}
			target := rng.Intn(1 + len(m.Functions))
			if target == 0 {
				hostile.Mutate(m, prog)
			} else {
				f := m.Functions[target-1]
				hostile.Mutate(&onnxpb.ModelProto{Graph: &onnxpb.GraphProto{Node: f.Node}, OpsetImport: f.OpsetImport}, prog)
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("model %d, target %d, mutation %v: panic: %v", mi, target, prog, r)
					}
				}()
				g, err := FromONNX(onnx.NewModel(m))
				if err != nil {
					return
				}
				_ = g.InferShapes(nil)
			}()
		}
	}
}

// TestLoadDType: the element type the expansions read off a value before
// shape inference, followed back through the producers.
func TestLoadDType(t *testing.T) {
	b := newBuilder(18).input("x", 2, 3).init("i", i64([]int64{2}, 1, 2)).
		node("Relu", []string{"x"}, []string{"r"}).
		node("Greater", []string{"r", "x"}, []string{"gt"}).
		node("Not", []string{"gt"}, []string{"not"}).
		node("Cast", []string{"not"}, []string{"c"}, attrInt("to", int64(Float64))).
		node("Where", []string{"gt", "c", "c"}, []string{"w"}).
		node("CastLike", []string{"x", "w"}, []string{"cl"}).
		node("Shape", []string{"x"}, []string{"s"}).
		node("Transpose", []string{"gt"}, []string{"tgt"}).
		node("Dropout", []string{"x"}, []string{"d", "mask"}).
		node("TopK", []string{"x", "i"}, []string{"top", "idx"}).
		node("Constant", nil, []string{"k"}, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(),
			T: (&Tensor{DType: Bool, Shape: []int64{1}, B: []bool{true}}).ToProto("")}).
		node("Identity", []string{"k"}, []string{"ki"})
	for _, o := range []string{"r", "not", "c", "w", "cl", "s", "tgt", "d", "mask", "top", "ki"} {
		b.output(o)
	}
	g := b.graph(t)
	for name, want := range map[string]DType{"x": Float32, "r": Float32, "not": Bool, "c": Float64, "w": Float64, "cl": Float64,
		"s": Int64, "tgt": Bool, "d": Float32, "mask": Bool, "top": Undefined, "ki": Bool, "i": Int64} {
		if got := loadDType(g.Values[name]); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
