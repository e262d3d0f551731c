package runtime

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// The loader expands model-local functions and the standard operators ONNX
// defines as functions (Swish, RMSNormalization, Attention) into operators
// with kernels. These tests run the expanded graphs on the CPU plan and
// compare them with float64 loops written from the operators' definitions
// (the oracle), and with onnxruntime on the original model and on the
// model the graph exports (skipped without Node; see internal/orttest).

// expandCase is one small model: float32 graph inputs with data, the nodes
// (and functions) under test, and the oracle's output.
type expandCase struct {
	name   string
	opset  int64
	inputs []expandInput
	inits  []*onnxpb.TensorProto
	nodes  []*onnxpb.NodeProto
	funcs  []*onnxpb.FunctionProto
	// dims overrides the declared shape of inputs (a symbolic dimension
	// where "?"), to exercise the expansions that read shapes at run time.
	dims map[string][]string
	want func(c *expandCase) []float64
	// noORT gives the reason not to run the original model in
	// onnxruntime (the exported, expanded one always runs there).
	noORT string
	// extra imports (function domains).
	imports map[string]int64
}

type expandInput struct {
	name  string
	shape []int64
	data  []float32
}

func (c *expandCase) input(name string) expandInput {
	for _, in := range c.inputs {
		if in.name == name {
			return in
		}
	}
	panic("no input " + name)
}

func (c *expandCase) model() *onnxpb.ModelProto {
	gp := &onnxpb.GraphProto{Name: proto.String(c.name), Node: c.nodes, Initializer: c.inits,
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}}}
	for _, in := range c.inputs {
		sh := &onnxpb.TensorShapeProto{}
		for i, d := range in.shape {
			dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
			if sym := c.dims[in.name]; sym != nil && sym[i] != "" {
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: sym[i]}
			}
			sh.Dim = append(sh.Dim, dim)
		}
		gp.Input = append(gp.Input, &onnxpb.ValueInfoProto{Name: proto.String(in.name),
			Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}})
	}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(10), ProducerName: proto.String("dpfinetune-test"), Graph: gp, Functions: c.funcs,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(c.opset)}}}
	for d, v := range c.imports {
		m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(d), Version: proto.Int64(v)})
	}
	return m
}

// run loads the model, checks that no node is left that the runtime
// refuses, and runs it forward on the CPU.
func (c *expandCase) run(t *testing.T, m *onnx.Model) ([]float32, []int, *graph.Graph) {
	t.Helper()
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	dyn := g.Clone()
	if err := CheckOps(g); err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int64{}
	for _, in := range c.inputs {
		shapes[in.name] = in.shape
	}
	if err := g.InferShapes(shapes); err != nil {
		t.Fatal(err)
	}
	p, err := Compile(g, &Options{ForwardOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range g.Inputs {
		if err := p.SetInput(i, c.input(v.Name).data); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	y, shape := p.Output(0)
	return append([]float32(nil), y...), shape, dyn
}

// maxDiff returns max |got − want| / max(1, max |want|); NaN if any
// output is NaN.
func maxDiff(got []float32, want []float64) float64 {
	var d, scale float64 = 0, 1
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for i, g := range got {
		if math.IsNaN(float64(g)) {
			return math.NaN()
		}
		d = math.Max(d, math.Abs(float64(g)-want[i]))
	}
	return d / scale
}

func TestExpandedOperators(t *testing.T) {
	for _, c := range expandCases() {
		t.Run(c.name, func(t *testing.T) {
			want := c.want(&c)
			m := onnx.NewModel(c.model())
			got, shape, dyn := c.run(t, m)
			if len(got) != len(want) {
				t.Fatalf("output has %d elements (shape %v), the oracle %d", len(got), shape, len(want))
			}
			if d := maxDiff(got, want); !(d <= 2e-5) {
				t.Fatalf("max |Δ| %.3g against the float64 oracle\ngot  %v\nwant %v", d, got, want)
			}
			// The exported model holds the expansion: it loads again
			// and computes the same.
			exp, err := dyn.ToONNX()
			if err != nil {
				t.Fatal(err)
			}
			for _, np := range exp.Proto.GetGraph().GetNode() {
				switch np.GetOpType() {
				case "Swish", "RMSNormalization", "Attention":
					t.Fatalf("exported model still has %s", np.GetOpType())
				}
			}
			again, _, _ := c.run(t, exp)
			if d := maxDiff(again, want); !(d <= 2e-5) {
				t.Fatalf("exported model: max |Δ| %.3g against the oracle", d)
			}
			if testing.Short() {
				return // onnxruntime starts once per model
			}
			feeds := map[string]orttest.Tensor{}
			for _, in := range c.inputs {
				feeds[in.name] = orttest.Tensor{Shape: in.shape, Data: in.data}
			}
			dir := t.TempDir()
			for _, mm := range []struct {
				what string
				m    *onnx.Model
			}{{"original", m}, {"exported", exp}} {
				if mm.what == "original" && c.noORT != "" {
					t.Logf("onnxruntime not run on the original model: %s", c.noORT)
					continue
				}
				path := filepath.Join(dir, mm.what+".onnx")
				b, err := mm.m.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				ort := orttest.Run(t, path, feeds)["y"]
				if d := maxDiff(ort.Data, want); !(d <= 2e-5) {
					t.Errorf("onnxruntime on the %s model: max |Δ| %.3g against the oracle", mm.what, d)
				}
				if d := maxDiff(got, f64(ort.Data)); !(d <= 2e-5) {
					t.Errorf("max |Δ| %.3g against onnxruntime on the %s model", d, mm.what)
				}
			}
		})
	}
}

// --- model pieces ---

func randInput(rng *rand.Rand, name string, shape ...int64) expandInput {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	return expandInput{name, shape, data}
}

func nodeP(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: proto.String(op + "_" + outs[0]), OpType: proto.String(op), Input: ins, Output: outs, Attribute: attrs}
}

func floatInit(name string, shape []int64, data []float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: shape, FloatData: data}
}

func boolInit(name string, shape []int64, data []bool) *onnxpb.TensorProto {
	raw := make([]byte, len(data))
	for i, v := range data {
		if v {
			raw[i] = 1
		}
	}
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Dims: shape, RawData: raw}
}

// --- oracles: float64 loops from the definitions ---

func swishRef(x []float32, alpha float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		xv := float64(v)
		y[i] = xv / (1 + math.Exp(-alpha*xv))
	}
	return y
}

// rmsNormRef normalizes x (outer × inner, inner the axes from axis on)
// and multiplies by scale, broadcast over the inner block.
func rmsNormRef(x []float32, inner int, scale []float32, eps float64) []float64 {
	y := make([]float64, len(x))
	for o := 0; o < len(x)/inner; o++ {
		row := x[o*inner : (o+1)*inner]
		var ms float64
		for _, v := range row {
			ms += float64(v) * float64(v)
		}
		r := math.Sqrt(ms/float64(inner) + eps)
		for i, v := range row {
			y[o*inner+i] = float64(v) / r * float64(scale[i%len(scale)])
		}
	}
	return y
}

// attnRef computes attention on 4-D q (B,H,Sq,D), k (B,H,Skv,D),
// v (B,H,Skv,Dv). bias(b, h, i, j) returns the additive bias (-Inf, or
// the lowest finite float32: masked). A fully masked row gives zeros.
type attnArgs struct {
	b, h, sq, skv, d, dv int
	q, k, v              []float32
	scale, softcap       float64
	causal               bool
	bias                 func(b, h, i, j int) float64
}

func attnRef(a attnArgs) []float64 {
	y := make([]float64, a.b*a.h*a.sq*a.dv)
	s := make([]float64, a.skv)
	for b := 0; b < a.b; b++ {
		for h := 0; h < a.h; h++ {
			for i := 0; i < a.sq; i++ {
				qi := ((b*a.h+h)*a.sq + i) * a.d
				mx := math.Inf(-1)
				for j := 0; j < a.skv; j++ {
					kj := ((b*a.h+h)*a.skv + j) * a.d
					var dot float64
					for c := 0; c < a.d; c++ {
						dot += float64(a.q[qi+c]) * float64(a.k[kj+c])
					}
					dot *= a.scale
					if a.softcap > 0 {
						dot = a.softcap * math.Tanh(dot/a.softcap)
					}
					if a.bias != nil {
						bias := a.bias(b, h, i, j)
						if bias <= -math.MaxFloat32 {
							// The lowest finite float32 masks as
							// -inf does (onnxruntime's rule).
							bias = math.Inf(-1)
						}
						dot += bias
					}
					if a.causal && j > i {
						dot = math.Inf(-1)
					}
					s[j] = dot
					mx = math.Max(mx, dot)
				}
				if math.IsInf(mx, -1) {
					continue // fully masked: zeros
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				yi := ((b*a.h+h)*a.sq + i) * a.dv
				for j := range s {
					vj := ((b*a.h+h)*a.skv + j) * a.dv
					for c := 0; c < a.dv; c++ {
						y[yi+c] += s[j] / sum * float64(a.v[vj+c])
					}
				}
			}
		}
	}
	return y
}

// toHeads turns (B, S, H·D) data into (B, H, S, D); fromHeads back.
func toHeads(x []float32, b, s, h, d int) []float32 {
	out := make([]float32, len(x))
	for bi := 0; bi < b; bi++ {
		for si := 0; si < s; si++ {
			for hi := 0; hi < h; hi++ {
				copy(out[((bi*h+hi)*s+si)*d:][:d], x[(bi*s+si)*h*d+hi*d:][:d])
			}
		}
	}
	return out
}

func fromHeads(y []float64, b, s, h, d int) []float64 {
	out := make([]float64, len(y))
	for bi := 0; bi < b; bi++ {
		for si := 0; si < s; si++ {
			for hi := 0; hi < h; hi++ {
				copy(out[(bi*s+si)*h*d+hi*d:][:d], y[((bi*h+hi)*s+si)*d:][:d])
			}
		}
	}
	return out
}

func expandCases() []expandCase {
	rng := rand.New(rand.NewSource(3))
	var cases []expandCase

	// Swish-24.
	for _, alpha := range []float32{1, 0.5} {
		c := expandCase{name: fmt.Sprintf("swish_alpha_%g", alpha), opset: 24,
			inputs: []expandInput{randInput(rng, "x", 2, 3, 5)},
			want:   func(c *expandCase) []float64 { return swishRef(c.input("x").data, float64(alpha)) }}
		var at []*onnxpb.AttributeProto
		if alpha != 1 {
			at = append(at, aFloat("alpha", alpha))
		}
		c.nodes = []*onnxpb.NodeProto{nodeP("Swish", []string{"x"}, []string{"y"}, at...)}
		cases = append(cases, c)
	}

	// RMSNormalization-23: the last axis with the default epsilon, and
	// the last two axes (axis 1 of a rank-3 X) with another.
	{
		scale := randInput(rng, "", 6).data
		cases = append(cases, expandCase{name: "rmsnorm_last_axis", opset: 23,
			inputs: []expandInput{randInput(rng, "x", 2, 3, 6)},
			inits:  []*onnxpb.TensorProto{floatInit("scale", []int64{6}, scale)},
			nodes:  []*onnxpb.NodeProto{nodeP("RMSNormalization", []string{"x", "scale"}, []string{"y"})},
			want: func(c *expandCase) []float64 {
				return rmsNormRef(c.input("x").data, 6, scale, 1e-5)
			}})
		scale2 := randInput(rng, "", 3, 4).data
		cases = append(cases, expandCase{name: "rmsnorm_axis1_eps", opset: 23,
			inputs: []expandInput{randInput(rng, "x", 2, 3, 4)},
			inits:  []*onnxpb.TensorProto{floatInit("scale", []int64{3, 4}, scale2)},
			nodes:  []*onnxpb.NodeProto{nodeP("RMSNormalization", []string{"x", "scale"}, []string{"y"}, aInt("axis", 1), aFloat("epsilon", 0.25))},
			want: func(c *expandCase) []float64 {
				return rmsNormRef(c.input("x").data, 12, scale2, 0.25)
			}})
		cases = append(cases, expandCase{name: "rmsnorm_axis_-2_unknown_rank", opset: 23,
			inputs: []expandInput{randInput(rng, "x", 2, 3, 4)},
			dims:   map[string][]string{"x": {"a", "b", "c"}},
			inits:  []*onnxpb.TensorProto{floatInit("scale", []int64{3, 4}, scale2)},
			nodes: []*onnxpb.NodeProto{nodeP("Identity", []string{"x"}, []string{"xi"}),
				nodeP("RMSNormalization", []string{"xi", "scale"}, []string{"y"}, aInt("axis", -2))},
			want: func(c *expandCase) []float64 {
				return rmsNormRef(c.input("x").data, 12, scale2, 1e-5)
			}})
	}

	// Attention, 4-D: B=2, H=2, Sq=3, Skv=4, D=5, Dv=3.
	const B, H, Sq, Skv, D, Dv = 2, 2, 3, 4, 5, 3
	attn4 := func(name string, opset int64, attrs []*onnxpb.AttributeProto, mask *onnxpb.TensorProto, a attnArgs) expandCase {
		c := expandCase{name: name, opset: opset,
			inputs: []expandInput{randInput(rng, "q", B, H, Sq, D), randInput(rng, "k", B, H, Skv, D), randInput(rng, "v", B, H, Skv, Dv)}}
		ins := []string{"q", "k", "v"}
		if mask != nil {
			c.inits = append(c.inits, mask)
			ins = append(ins, mask.GetName())
		}
		c.nodes = []*onnxpb.NodeProto{nodeP("Attention", ins, []string{"y"}, attrs...)}
		c.want = func(c *expandCase) []float64 {
			a := a
			a.b, a.h, a.sq, a.skv, a.d, a.dv = B, H, Sq, Skv, D, Dv
			a.q, a.k, a.v = c.input("q").data, c.input("k").data, c.input("v").data
			if a.scale == 0 {
				a.scale = 1 / math.Sqrt(D)
			}
			return attnRef(a)
		}
		return c
	}
	cases = append(cases, attn4("attention_4d", 23, nil, nil, attnArgs{}))
	cases = append(cases, attn4("attention_4d_opset24", 24, nil, nil, attnArgs{}))
	{
		c := attn4("attention_4d_opset25_window_default", 25, []*onnxpb.AttributeProto{aInt("left_window_size", -1)}, nil, attnArgs{})
		c.noORT = "onnxruntime 1.30 has no Attention-25 (left_window_size)"
		cases = append(cases, c)
	}
	cases = append(cases, attn4("attention_scale_softcap", 23, []*onnxpb.AttributeProto{aFloat("scale", 0.8), aFloat("softcap", 1.5)}, nil,
		attnArgs{scale: 0.8, softcap: 1.5}))
	cases = append(cases, attn4("attention_causal", 23, []*onnxpb.AttributeProto{aInt("is_causal", 1)}, nil, attnArgs{causal: true}))
	{
		fm := randInput(rng, "", 1, 1, Sq, Skv).data
		cases = append(cases, attn4("attention_float_mask", 23, nil, floatInit("mask", []int64{1, 1, Sq, Skv}, fm),
			attnArgs{bias: func(b, h, i, j int) float64 { return float64(fm[i*Skv+j]) }}))
	}
	{
		// A float mask that is an initializer (a parameter: Swin's
		// relative position bias as attn_mask) with a row of -inf and a
		// row at the lowest finite value: the guard reads the scores, so
		// that the mask meets the batch at its Add, and both rows are
		// zeros.
		fm := randInput(rng, "", 1, 1, Sq, Skv).data
		for j := 0; j < Skv; j++ {
			fm[0*Skv+j] = float32(math.Inf(-1))
			fm[2*Skv+j] = -math.MaxFloat32
		}
		cases = append(cases, attn4("attention_param_mask_full_rows", 23, nil, floatInit("mask", []int64{1, 1, Sq, Skv}, fm),
			attnArgs{bias: func(b, h, i, j int) float64 { return float64(fm[i*Skv+j]) }}))
	}
	{
		// Row 1 masked entirely: zeros, not NaN, as the spec's errata
		// asks (and onnxruntime 1.30 gives).
		bm := []bool{true, false, true, true, false, false, false, false, false, true, true, false}
		bias := func(b, h, i, j int) float64 {
			if bm[i*Skv+j] {
				return 0
			}
			return math.Inf(-1)
		}
		c := attn4("attention_bool_mask_full_row", 23, nil, boolInit("mask", []int64{Sq, Skv}, bm), attnArgs{bias: bias})
		cases = append(cases, c)
		bm2 := []bool{true, false, true, true, false, true, false, false, false, true, true, false}
		bias2 := func(b, h, i, j int) float64 {
			if bm2[i*Skv+j] {
				return 0
			}
			return math.Inf(-1)
		}
		cases = append(cases, attn4("attention_bool_mask_causal", 23, []*onnxpb.AttributeProto{aInt("is_causal", 1)},
			boolInit("mask", []int64{Sq, Skv}, bm2), attnArgs{bias: bias2, causal: true}))
		cases = append(cases, attn4("attention_bool_mask", 23, nil, boolInit("mask", []int64{Sq, Skv}, bm2), attnArgs{bias: bias2}))
	}
	{
		// A float mask computed at run time (a graph input), with a
		// row of -inf: the guard runs on the plan.
		c := attn4("attention_runtime_float_mask", 23, nil, nil, attnArgs{})
		fm := randInput(rng, "mask", B, 1, Sq, Skv)
		for j := 0; j < Skv; j++ {
			fm.data[(1*Sq+2)*Skv+j] = float32(math.Inf(-1)) // batch 1, query 2
		}
		fm.data[1] = float32(math.Inf(-1))
		// Batch 0, query 1 at the lowest finite value (PyTorch's
		// finfo.min padding): masked, as onnxruntime counts it.
		for j := 0; j < Skv; j++ {
			fm.data[1*Skv+j] = -math.MaxFloat32
		}
		c.inputs = append(c.inputs, fm)
		c.nodes[0].Input = append(c.nodes[0].Input, "mask")
		c.want = func(c *expandCase) []float64 {
			return attnRef(attnArgs{b: B, h: H, sq: Sq, skv: Skv, d: D, dv: Dv, q: c.input("q").data, k: c.input("k").data, v: c.input("v").data,
				scale: 1 / math.Sqrt(D), bias: func(b, h, i, j int) float64 { return float64(fm.data[(b*Sq+i)*Skv+j]) }})
		}
		cases = append(cases, c)
	}
	{
		// Shapes unknown at load: the default scale comes from Shape
		// arithmetic that shape inference folds.
		c := attn4("attention_dynamic_shapes", 23, []*onnxpb.AttributeProto{aInt("is_causal", 1)}, nil, attnArgs{causal: true})
		c.dims = map[string][]string{"q": {"b", "h", "s", "d"}, "k": {"b", "h", "t", "d"}, "v": {"b", "h", "t", "e"}}
		cases = append(cases, c)
	}

	// Attention, 3-D with q_num_heads = kv_num_heads = 2.
	{
		const s3, kv3 = 4, 4
		c := expandCase{name: "attention_3d_causal", opset: 23,
			inputs: []expandInput{randInput(rng, "q", B, s3, H*D), randInput(rng, "k", B, kv3, H*D), randInput(rng, "v", B, kv3, H*Dv)},
			nodes: []*onnxpb.NodeProto{nodeP("Attention", []string{"q", "k", "v"}, []string{"y"},
				aInt("q_num_heads", H), aInt("kv_num_heads", H), aInt("is_causal", 1))}}
		c.want = func(c *expandCase) []float64 {
			y := attnRef(attnArgs{b: B, h: H, sq: s3, skv: kv3, d: D, dv: Dv, scale: 1 / math.Sqrt(D), causal: true,
				q: toHeads(c.input("q").data, B, s3, H, D), k: toHeads(c.input("k").data, B, kv3, H, D), v: toHeads(c.input("v").data, B, kv3, H, Dv)})
			return fromHeads(y, B, s3, H, Dv)
		}
		cases = append(cases, c)
	}

	// A model-local function: y = LeakyRelu(x·w + b, alpha=@alpha), called
	// by an outer function twice (once with alpha, once with the
	// default), named so that the inner values collide with the graph's.
	{
		local := proto.String("local")
		imp := []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(18)}, {Domain: local, Version: proto.Int64(1)}}
		inner := &onnxpb.FunctionProto{Name: proto.String("Affine"), Domain: local, Input: []string{"x", "w", "b"}, Output: []string{"y"},
			Attribute: []string{"alpha"}, OpsetImport: imp,
			AttributeProto: []*onnxpb.AttributeProto{aFloat("alpha", 0.5)},
			Node: []*onnxpb.NodeProto{nodeP("Mul", []string{"x", "w"}, []string{"t"}), nodeP("Add", []string{"t", "b"}, []string{"u"}),
				{OpType: proto.String("LeakyRelu"), Input: []string{"u"}, Output: []string{"y"},
					Attribute: []*onnxpb.AttributeProto{{Name: proto.String("alpha"), Type: onnxpb.AttributeProto_FLOAT.Enum(), RefAttrName: proto.String("alpha")}}}}}
		outer := &onnxpb.FunctionProto{Name: proto.String("Twice"), Domain: local, Input: []string{"x", "w", "b"}, Output: []string{"y"},
			Attribute: []string{"a"}, OpsetImport: imp,
			Node: []*onnxpb.NodeProto{
				{OpType: proto.String("Affine"), Domain: local, Input: []string{"x", "w", "b"}, Output: []string{"t"},
					Attribute: []*onnxpb.AttributeProto{{Name: proto.String("alpha"), Type: onnxpb.AttributeProto_FLOAT.Enum(), RefAttrName: proto.String("a")}}},
				{OpType: proto.String("Affine"), Domain: local, Input: []string{"t", "w", "b"}, Output: []string{"y"}}}}
		w, bb := randInput(rng, "", 5).data, randInput(rng, "", 5).data
		c := expandCase{name: "local_functions_nested", opset: 18, funcs: []*onnxpb.FunctionProto{inner, outer},
			imports: map[string]int64{"local": 1},
			inputs:  []expandInput{randInput(rng, "x", 3, 5)},
			inits:   []*onnxpb.TensorProto{floatInit("w", []int64{5}, w), floatInit("b", []int64{5}, bb)},
			nodes: []*onnxpb.NodeProto{nodeP("Relu", []string{"x"}, []string{"t"}),
				{Name: proto.String("call"), OpType: proto.String("Twice"), Domain: local, Input: []string{"t", "w", "b"}, Output: []string{"y"},
					Attribute: []*onnxpb.AttributeProto{aFloat("a", 0.1)}}},
			want: func(c *expandCase) []float64 {
				x := c.input("x").data
				y := make([]float64, len(x))
				for i, v := range x {
					f := math.Max(float64(v), 0)
					for _, alpha := range []float64{0.1, 0.5} {
						f = f*float64(w[i%5]) + float64(bb[i%5])
						if f < 0 {
							f *= alpha
						}
					}
					y[i] = f
				}
				return y
			}}
		cases = append(cases, c)
	}
	return cases
}

// TestExpandedGradients checks the backward pass through the expansions
// against central differences, with every input a trainable initializer:
// the DP engine differentiates the expanded graph, and RMSNormalization's
// scale is a parameter of an elementwise Mul.
func TestExpandedGradients(t *testing.T) {
	cases := []struct {
		name  string
		opset int64
		build func(b *modelBuilder) string
	}{
		{"swish", 24, func(b *modelBuilder) string {
			b.param("x", 2, 7)
			b.node("Swish", []string{"x"}, "y", aFloat("alpha", 1.5))
			return "y"
		}},
		{"rmsnorm", 23, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4)
			b.param("scale", 4)
			b.node("RMSNormalization", []string{"x", "scale"}, "y")
			return "y"
		}},
		{"attention_4d_mask", 23, func(b *modelBuilder) string {
			b.param("q", 1, 2, 3, 4)
			b.param("k", 1, 2, 5, 4)
			b.param("v", 1, 2, 5, 3)
			b.bools("m", []bool{true, true, false, true, true, false, false, false, false, false, true, false, true, false, true}, 3, 5)
			b.node("Attention", []string{"q", "k", "v", "m"}, "y", aFloat("softcap", 2))
			return "y"
		}},
		{"attention_3d_causal", 23, func(b *modelBuilder) string {
			b.param("q", 2, 3, 4)
			b.param("k", 2, 3, 4)
			b.param("v", 2, 3, 6)
			b.node("Attention", []string{"q", "k", "v"}, "y", aInt("q_num_heads", 2), aInt("kv_num_heads", 2), aInt("is_causal", 1))
			return "y"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(11, c.opset)
			out := c.build(b)
			g := b.graph(t, out)
			for _, n := range g.Nodes {
				switch n.OpType {
				case "Swish", "RMSNormalization", "Attention":
					t.Fatalf("%s not expanded", n)
				}
			}
			gradCheck(t, g, nil)
		})
	}
}
