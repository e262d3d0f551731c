package runtime

import (
	"math"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// modelBuilder assembles small ONNX graphs in memory. Every float tensor
// is an initializer (so every one is a trainable parameter whose gradient
// is checked); the graph has no inputs.
type modelBuilder struct {
	rng   *rand.Rand
	opset int64
	inits []*onnxpb.TensorProto
	nodes []*onnxpb.NodeProto
}

func newBuilder(seed int64, opset int64) *modelBuilder {
	return &modelBuilder{rng: rand.New(rand.NewSource(seed)), opset: opset}
}

func (b *modelBuilder) param(name string, shape ...int64) {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(b.rng.NormFloat64())
	}
	b.floats(name, data, shape...)
}

// awayFrom moves the elements of initializer name within margin of c to
// c ± margin, so that finite differences do not straddle a kink at c.
func (b *modelBuilder) awayFrom(name string, c, margin float32) {
	for _, t := range b.inits {
		if t.GetName() != name {
			continue
		}
		for i, v := range t.FloatData {
			switch {
			case v >= c && v < c+margin:
				t.FloatData[i] = c + margin
			case v < c && v > c-margin:
				t.FloatData[i] = c - margin
			}
		}
	}
}

func (b *modelBuilder) floats(name string, data []float32, shape ...int64) {
	b.inits = append(b.inits, &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: shape, FloatData: data})
}

func (b *modelBuilder) ints(name string, data []int64, shape ...int64) {
	b.inits = append(b.inits, &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: shape, Int64Data: data})
}

func (b *modelBuilder) bools(name string, data []bool, shape ...int64) {
	raw := make([]byte, len(data))
	for i, v := range data {
		if v {
			raw[i] = 1
		}
	}
	b.inits = append(b.inits, &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Dims: shape, RawData: raw})
}

func (b *modelBuilder) node(op string, in []string, out string, attrs ...*onnxpb.AttributeProto) {
	b.nodes = append(b.nodes, &onnxpb.NodeProto{Name: proto.String(out), OpType: proto.String(op), Input: in, Output: []string{out}, Attribute: attrs})
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func aFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func aStr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// graph returns the graph with output out, shapes inferred.
func (b *modelBuilder) graph(t testing.TB, out string) *graph.Graph {
	t.Helper()
	return b.build(t, "", nil, out)
}

// build returns the graph of b's nodes and initializers with graph input
// in of the given shape (none where in is "") and outputs outs, shapes
// inferred.
func (b *modelBuilder) build(t testing.TB, in string, shape []int64, outs ...string) *graph.Graph {
	t.Helper()
	gp := &onnxpb.GraphProto{Name: proto.String("test"), Node: b.nodes, Initializer: b.inits}
	for _, o := range outs {
		gp.Output = append(gp.Output, &onnxpb.ValueInfoProto{Name: proto.String(o)})
	}
	if in != "" {
		sh := &onnxpb.TensorShapeProto{}
		for _, d := range shape {
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
		}
		gp.Input = []*onnxpb.ValueInfoProto{{Name: proto.String(in),
			Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}}
	}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(b.opset)}},
		Graph:       gp,
	}
	g, err := graph.FromONNX(onnx.NewModel(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	return g
}

// gradCheck compares the gradients of f = Σ_j r_j·y_j (r random) with
// respect to every float initializer against central differences.
// Measure: max |analytic − numeric| / max(max |numeric|, 1e-2) per tensor.
func gradCheck(t *testing.T, g *graph.Graph, opts *Options) {
	t.Helper()
	p, err := Compile(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	gradCheckPlan(t, p)
}

// gradCheckPlan is gradCheck on a compiled plan whose inputs are set.
func gradCheckPlan(t *testing.T, p *Plan) {
	t.Helper()
	rng := rand.New(rand.NewSource(7))
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	y, _ := p.Output(0)
	r := make([]float32, len(y))
	for i := range r {
		r[i] = float32(rng.NormFloat64())
	}
	f := func() float64 {
		if err := p.Forward(); err != nil {
			t.Fatal(err)
		}
		var s float64
		for i, v := range y {
			s += float64(v) * float64(r[i])
		}
		return s
	}
	f()
	if err := p.BackwardFrom(r, nil); err != nil {
		t.Fatal(err)
	}
	if len(p.Params()) == 0 {
		t.Fatal("no trainable parameters")
	}
	grads := map[string][]float32{}
	for _, name := range p.Params() {
		grads[name] = append([]float32(nil), p.Grad(name)...)
	}
	const eps = 1e-2
	for _, name := range p.Params() {
		data, _ := p.Param(name)
		idx := rng.Perm(len(data))
		if len(idx) > 40 {
			idx = idx[:40]
		}
		var maxDiff, maxNum float64
		for _, i := range idx {
			orig := data[i]
			data[i] = orig + eps
			fp := f()
			data[i] = orig - eps
			fm := f()
			data[i] = orig
			num := (fp - fm) / (2 * eps)
			maxDiff = math.Max(maxDiff, math.Abs(num-float64(grads[name][i])))
			maxNum = math.Max(maxNum, math.Abs(num))
		}
		if e := maxDiff / math.Max(maxNum, 1e-2); e > 2e-2 {
			t.Errorf("%s: gradient error %.3g (max |numeric| %.3g)", name, e, maxNum)
		}
	}
}

func TestGradCheck(t *testing.T) {
	type tc struct {
		name  string
		opset int64
		build func(b *modelBuilder) string
		opts  *Options
	}
	cases := []tc{
		{"conv_groups_dilation", 14, func(b *modelBuilder) string {
			b.param("x", 2, 4, 7, 7)
			b.param("w", 6, 2, 3, 3)
			b.param("bias", 6)
			b.node("Conv", []string{"x", "w", "bias"}, "y", aInt("group", 2), aInts("strides", 2, 1), aInts("pads", 1, 0, 2, 1), aInts("dilations", 2, 1))
			return "y"
		}, nil},
		{"conv1d_depthwise", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 9)
			b.param("w", 3, 1, 3)
			b.node("Conv", []string{"x", "w"}, "y", aInt("group", 3), aStr("auto_pad", "SAME_UPPER"))
			return "y"
		}, nil},
		{"conv_depthwise_3x3", 14, func(b *modelBuilder) string {
			b.param("x", 2, 4, 7, 6)
			b.param("w", 4, 1, 3, 3)
			b.param("bias", 4)
			b.node("Conv", []string{"x", "w", "bias"}, "y", aInt("group", 4), aInts("pads", 1, 1, 1, 1))
			return "y"
		}, nil},
		{"conv_depthwise_mult2_strided", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 9, 8)
			b.param("w", 6, 1, 3, 3)
			b.param("bias", 6)
			b.node("Conv", []string{"x", "w", "bias"}, "y", aInt("group", 3), aInts("strides", 2, 2), aInts("pads", 1, 0, 2, 1))
			return "y"
		}, nil},
		{"conv_depthwise_dilated_asym", 14, func(b *modelBuilder) string {
			b.param("x", 2, 2, 8, 9)
			b.param("w", 4, 1, 3, 2)
			b.node("Conv", []string{"x", "w"}, "y", aInt("group", 2), aInts("strides", 1, 2), aInts("dilations", 2, 1), aInts("pads", 2, 0, 1, 1))
			return "y"
		}, nil},
		{"conv3d_depthwise", 14, func(b *modelBuilder) string {
			b.param("x", 2, 2, 4, 5, 5)
			b.param("w", 2, 1, 2, 3, 3)
			b.node("Conv", []string{"x", "w"}, "y", aInt("group", 2), aInts("pads", 1, 1, 1, 0, 1, 1))
			return "y"
		}, nil},
		{"gemm_trans", 14, func(b *modelBuilder) string {
			b.param("a", 4, 3)
			b.param("b", 5, 4)
			b.param("c", 5)
			b.node("Gemm", []string{"a", "b", "c"}, "y", aInt("transA", 1), aInt("transB", 1), aFloat("alpha", 0.7), aFloat("beta", 1.3))
			return "y"
		}, nil},
		{"gemm_plain_col_bias", 14, func(b *modelBuilder) string {
			b.param("a", 3, 4)
			b.param("b", 4, 5)
			b.param("c", 3, 1)
			b.node("Gemm", []string{"a", "b", "c"}, "y")
			return "y"
		}, nil},
		{"matmul_broadcast", 14, func(b *modelBuilder) string {
			b.param("a", 2, 1, 3, 4)
			b.param("b", 3, 4, 5)
			b.node("MatMul", []string{"a", "b"}, "y")
			return "y"
		}, nil},
		{"matmul_vector", 14, func(b *modelBuilder) string {
			b.param("a", 4)
			b.param("b", 2, 4, 3)
			b.node("MatMul", []string{"a", "b"}, "y")
			return "y"
		}, nil},
		{"maxpool_pads_dilation_ceil", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 7, 8)
			b.node("MaxPool", []string{"x"}, "y", aInts("kernel_shape", 3, 2), aInts("strides", 2, 2), aInts("pads", 1, 0, 1, 1), aInts("dilations", 1, 2), aInt("ceil_mode", 1))
			return "y"
		}, nil},
		{"avgpool_exclude_pad_ceil", 14, func(b *modelBuilder) string {
			b.param("x", 2, 2, 7, 7)
			b.node("AveragePool", []string{"x"}, "y", aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInt("ceil_mode", 1))
			return "y"
		}, nil},
		{"avgpool_include_pad", 14, func(b *modelBuilder) string {
			b.param("x", 2, 2, 6, 5)
			b.node("AveragePool", []string{"x"}, "y", aInts("kernel_shape", 3, 2), aInts("strides", 2, 1), aInts("pads", 1, 1, 0, 1), aInt("count_include_pad", 1))
			return "y"
		}, nil},
		{"global_avgpool", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4, 5)
			b.node("GlobalAveragePool", []string{"x"}, "y")
			return "y"
		}, nil},
		{"unary_chain", 14, func(b *modelBuilder) string {
			b.param("x", 3, 4)
			b.node("Sigmoid", []string{"x"}, "s")
			b.node("Log", []string{"s"}, "l")
			b.node("Exp", []string{"l"}, "e")
			b.node("Neg", []string{"e"}, "n")
			b.node("Tanh", []string{"n"}, "t")
			b.node("Erf", []string{"t"}, "r")
			b.node("Sqrt", []string{"s"}, "q")
			b.node("Add", []string{"r", "q"}, "u")
			b.node("Relu", []string{"x"}, "v")
			b.node("Abs", []string{"x"}, "w")
			b.node("Reciprocal", []string{"e"}, "z")
			b.node("Mul", []string{"u", "v"}, "m")
			b.node("Add", []string{"m", "w"}, "m2")
			b.node("Add", []string{"m2", "z"}, "y")
			return "y"
		}, nil},
		{"binary_broadcast", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.param("b", 3, 1)
			b.param("c", 4)
			b.param("d", 1)
			b.node("Sub", []string{"a", "b"}, "s")
			b.node("Exp", []string{"c"}, "ec")
			b.node("Div", []string{"s", "ec"}, "q")
			b.node("Exp", []string{"s"}, "es")
			b.node("Pow", []string{"es", "d"}, "pw")
			b.node("Mul", []string{"q", "pw"}, "y")
			return "y"
		}, nil},
		{"pow_const_exponent", 14, func(b *modelBuilder) string {
			b.param("a", 3, 4)
			b.floats("two", []float32{2})
			b.node("Pow", []string{"a", "two"}, "y")
			return "y"
		}, &Options{Trainable: []string{"a"}}},
		{"clip", 14, func(b *modelBuilder) string {
			b.param("a", 5, 4)
			b.floats("lo", []float32{-0.5})
			b.floats("hi", []float32{0.6})
			b.node("Clip", []string{"a", "lo", "hi"}, "y")
			return "y"
		}, nil},
		// Resize: the adjoint of each axis' interpolation (GEMMs with the
		// matrix transposed, the index map's scatter), over the last
		// axis, a middle one, the leading one and several at once.
		{"resize_linear_two_axes", 13, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4, 5)
			b.floats("s", []float32{1, 1, 1.5, 0.6}, 4)
			b.node("Resize", []string{"x", "", "s"}, "y", aStr("mode", "linear"))
			return "y"
		}, nil},
		{"resize_cubic_middle_and_leading_axes", 13, func(b *modelBuilder) string {
			b.param("x", 3, 4, 2)
			b.ints("sz", []int64{2, 7, 2}, 3)
			b.node("Resize", []string{"x", "", "", "sz"}, "y", aStr("mode", "cubic"), aStr("coordinate_transformation_mode", "align_corners"))
			return "y"
		}, nil},
		{"resize_cubic_antialias", 18, func(b *modelBuilder) string {
			b.param("x", 1, 2, 9, 7)
			b.ints("sz", []int64{4, 3}, 2)
			b.node("Resize", []string{"x", "", "", "sz"}, "y", aStr("mode", "cubic"), aInt("antialias", 1), aInts("axes", 2, 3))
			return "y"
		}, nil},
		{"resize_linear_crop_extrapolation", 13, func(b *modelBuilder) string {
			b.param("x", 1, 2, 4, 5)
			b.floats("roi", []float32{0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3}, 8)
			b.ints("sz", []int64{1, 2, 5, 4}, 4)
			b.node("Resize", []string{"x", "roi", "", "sz"}, "y", aStr("mode", "linear"),
				aStr("coordinate_transformation_mode", "tf_crop_and_resize"), aFloat("extrapolation_value", 2))
			return "y"
		}, nil},
		{"resize_nearest_crop_extrapolation", 13, func(b *modelBuilder) string {
			b.param("x", 1, 2, 4, 5)
			b.floats("roi", []float32{0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3}, 8)
			b.ints("sz", []int64{1, 2, 5, 4}, 4)
			b.node("Resize", []string{"x", "roi", "", "sz"}, "y", aStr("coordinate_transformation_mode", "tf_crop_and_resize"),
				aFloat("extrapolation_value", -1))
			return "y"
		}, nil},
		{"upsample7_linear", 7, func(b *modelBuilder) string {
			b.param("x", 2, 2, 3, 3)
			b.node("Upsample", []string{"x"}, "y", aStr("mode", "linear"), &onnxpb.AttributeProto{Name: proto.String("scales"),
				Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: []float32{1, 1, 2, 1.5}})
			return "y"
		}, nil},
		{"softmax_axis1", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.node("Softmax", []string{"a"}, "y", aInt("axis", 1))
			return "y"
		}, nil},
		{"logsoftmax_axis0", 14, func(b *modelBuilder) string {
			b.param("a", 3, 4)
			b.node("LogSoftmax", []string{"a"}, "y", aInt("axis", 0))
			return "y"
		}, nil},
		{"softmax_opset11_coerced", 11, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.node("Softmax", []string{"a"}, "y", aInt("axis", 1))
			return "y"
		}, nil},
		{"reduce", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.ints("axes", []int64{0, -1}, 2)
			b.node("ReduceSum", []string{"a", "axes"}, "s", aInt("keepdims", 0))
			b.node("ReduceMean", []string{"a"}, "m", aInts("axes", 0, 2), aInt("keepdims", 0))
			b.node("Mul", []string{"s", "m"}, "y")
			return "y"
		}, nil},
		{"shape_ops", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.param("b", 2, 1, 4)
			b.node("Transpose", []string{"a"}, "t", aInts("perm", 2, 0, 1))
			b.ints("ax0", []int64{0}, 1)
			b.node("Unsqueeze", []string{"t", "ax0"}, "u")
			b.node("Squeeze", []string{"u", "ax0"}, "sq")
			b.ints("shp", []int64{2, 3, -1}, 3)
			b.node("Reshape", []string{"sq", "shp"}, "r")
			b.node("Concat", []string{"r", "b", "a"}, "c", aInt("axis", 1))
			b.node("Flatten", []string{"c"}, "y", aInt("axis", 2))
			return "y"
		}, nil},
		{"slice_steps", 14, func(b *modelBuilder) string {
			b.param("a", 4, 5, 6)
			b.ints("st", []int64{-1, 1}, 2)
			b.ints("en", []int64{-100, 6}, 2)
			b.ints("ax", []int64{0, 2}, 2)
			b.ints("sp", []int64{-2, 2}, 2)
			b.node("Slice", []string{"a", "st", "en", "ax", "sp"}, "y")
			return "y"
		}, nil},
		{"gather_expand_where", 14, func(b *modelBuilder) string {
			b.param("a", 3, 4)
			b.ints("idx", []int64{2, -1, 0, 1}, 2, 2)
			b.node("Gather", []string{"a", "idx"}, "gth", aInt("axis", 1)) // (3,2,2)
			b.param("c", 1, 2, 1)
			b.ints("shp", []int64{3, 2, 2}, 3)
			b.node("Expand", []string{"c", "shp"}, "ex")
			b.bools("cond", []bool{true, false, false, true}, 2, 2)
			b.node("Where", []string{"cond", "gth", "ex"}, "y")
			return "y"
		}, nil},
		{"gather_rows", 14, func(b *modelBuilder) string {
			b.param("table", 5, 3)
			b.ints("idx", []int64{4, 0, 4}, 3)
			b.node("Gather", []string{"table", "idx"}, "y")
			return "y"
		}, nil},
		{"pad_modes", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.ints("p1", []int64{0, 1, 2, 0, 2, 1}, 6)
			b.floats("cv", []float32{0.5})
			b.node("Pad", []string{"a", "p1", "cv"}, "pc")
			b.node("Pad", []string{"a", "p1"}, "pr", aStr("mode", "reflect"))
			b.node("Pad", []string{"a", "p1"}, "pe", aStr("mode", "edge"))
			b.node("Mul", []string{"pc", "pr"}, "m")
			b.node("Mul", []string{"m", "pe"}, "y")
			return "y"
		}, &Options{Trainable: []string{"a"}}},
		{"batchnorm_inference", 14, func(b *modelBuilder) string {
			b.param("x", 3, 2, 2, 3)
			b.param("s", 2)
			b.param("bb", 2)
			b.floats("mean", []float32{0.1, -0.2}, 2)
			b.floats("var", []float32{0.8, 1.5}, 2)
			b.node("BatchNormalization", []string{"x", "s", "bb", "mean", "var"}, "y")
			return "y"
		}, nil},
		{"batchnorm_training", 15, func(b *modelBuilder) string {
			b.param("x", 3, 2, 2, 3)
			b.param("s", 2)
			b.param("bb", 2)
			b.floats("mean", []float32{0.1, -0.2}, 2)
			b.floats("var", []float32{0.8, 1.5}, 2)
			b.nodes = append(b.nodes, &onnxpb.NodeProto{Name: proto.String("bn"), OpType: proto.String("BatchNormalization"),
				Input: []string{"x", "s", "bb", "mean", "var"}, Output: []string{"y", "rm", "rv"}, Attribute: []*onnxpb.AttributeProto{aInt("training_mode", 1)}})
			return "y"
		}, nil},
		{"instancenorm", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 2, 3)
			b.param("s", 3)
			b.param("bb", 3)
			b.node("InstanceNormalization", []string{"x", "s", "bb"}, "y")
			return "y"
		}, nil},
		{"layernorm_axis", 17, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4)
			b.param("s", 3, 4)
			b.param("bb", 3, 4)
			b.node("LayerNormalization", []string{"x", "s", "bb"}, "y", aInt("axis", -2))
			return "y"
		}, nil},
		{"groupnorm", 18, func(b *modelBuilder) string {
			b.param("x", 2, 4, 3)
			b.param("s", 4)
			b.param("bb", 4)
			b.node("GroupNormalization", []string{"x", "s", "bb"}, "y", aInt("num_groups", 2))
			return "y"
		}, nil},
		{"activations", 14, func(b *modelBuilder) string {
			b.param("x", 4, 5)
			b.node("LeakyRelu", []string{"x"}, "a", aFloat("alpha", 0.1))
			b.node("Elu", []string{"x"}, "b", aFloat("alpha", 0.7))
			b.node("HardSigmoid", []string{"x"}, "c")
			b.node("HardSwish", []string{"x"}, "d")
			b.node("Softplus", []string{"x"}, "e")
			b.node("Mul", []string{"a", "b"}, "ab")
			b.node("Mul", []string{"c", "d"}, "cd")
			b.node("Add", []string{"ab", "cd"}, "s")
			b.node("Add", []string{"s", "e"}, "y")
			return "y"
		}, nil},
		{"gelu", 20, func(b *modelBuilder) string {
			b.param("x", 4, 5)
			b.node("Gelu", []string{"x"}, "a")
			b.node("Gelu", []string{"x"}, "b", aStr("approximate", "tanh"))
			b.node("Mul", []string{"a", "b"}, "y")
			return "y"
		}, nil},
		{"split_tile_globalmax", 14, func(b *modelBuilder) string {
			b.param("x", 2, 6, 3, 2)
			b.ints("sp", []int64{1, 2, 3}, 3)
			b.nodes = append(b.nodes, &onnxpb.NodeProto{Name: proto.String("split"), OpType: proto.String("Split"),
				Input: []string{"x", "sp"}, Output: []string{"s0", "s1", "s2"}, Attribute: []*onnxpb.AttributeProto{aInt("axis", 1)}})
			b.ints("reps", []int64{1, 2, 1, 1}, 4)
			b.node("Tile", []string{"s0", "reps"}, "t") // (2,2,3,2)
			b.node("Mul", []string{"t", "s1"}, "m")     // s2 is unused
			b.node("GlobalMaxPool", []string{"m"}, "y")
			return "y"
		}, nil},
		{"scatternd_replace", 14, func(b *modelBuilder) string {
			b.param("data", 4, 3)
			b.ints("idx", []int64{3, 0}, 2, 1)
			b.param("upd", 2, 3)
			b.node("ScatterND", []string{"data", "idx", "upd"}, "s")
			b.node("Mul", []string{"s", "s"}, "y")
			return "y"
		}, nil},
		{"scatternd_add_duplicates", 16, func(b *modelBuilder) string {
			b.param("data", 3, 2, 2)
			b.ints("idx", []int64{1, 0, 1, 0, 2, 1}, 3, 2)
			b.param("upd", 3, 2)
			b.node("ScatterND", []string{"data", "idx", "upd"}, "s", aStr("reduction", "add"))
			b.node("Mul", []string{"s", "s"}, "y")
			return "y"
		}, nil},
		{"einsum_batched_matmul", 14, func(b *modelBuilder) string {
			b.param("q", 2, 3, 4, 5)
			b.param("k", 2, 3, 6, 5)
			b.node("Einsum", []string{"q", "k"}, "y", aStr("equation", "bhid,bhjd->bhij"))
			return "y"
		}, nil},
		{"einsum_transposed_operands", 14, func(b *modelBuilder) string {
			b.param("a", 2, 5, 3) // b d i: read transposed
			b.param("k", 2, 4, 5) // b j d: read transposed
			b.node("Einsum", []string{"a", "k"}, "y", aStr("equation", "bdi,bjd->bij"))
			return "y"
		}, nil},
		{"einsum_three_operands", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.param("c", 4, 5)
			b.param("d", 2, 1, 5)
			b.node("Einsum", []string{"a", "c", "d"}, "y", aStr("equation", "bij,jk,bxk->bki")) // x broadcast, j contracted
			return "y"
		}, nil},
		{"einsum_four_operands_diag", 14, func(b *modelBuilder) string {
			b.param("a", 3, 3)
			b.param("c", 3, 2)
			b.param("d", 2)
			b.param("e", 4, 2)
			b.node("Einsum", []string{"a", "c", "d", "e"}, "y", aStr("equation", "ii,ij,j,kj->ki"))
			return "y"
		}, nil},
		{"einsum_diag_sum_broadcast", 14, func(b *modelBuilder) string {
			b.param("a", 2, 1, 3, 3)
			b.param("c", 4, 3, 5)
			b.node("Einsum", []string{"a", "c"}, "y", aStr("equation", "...ii,...ik->k...")) // (5,2,4)
			return "y"
		}, nil},
		{"einsum_unary_transpose_sum", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.node("Einsum", []string{"a"}, "y", aStr("equation", "abc->ca"))
			return "y"
		}, nil},
		{"prelu_per_channel_slope", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4, 5)
			b.awayFrom("x", 0, 0.05) // finite differences across the kink are off
			b.param("slope", 3, 1, 1)
			b.node("PRelu", []string{"x", "slope"}, "y")
			return "y"
		}, nil},
		{"prelu_opset6_channel_vector", 6, func(b *modelBuilder) string {
			b.param("x", 2, 3, 4)
			b.param("slope", 3)
			b.node("PRelu", []string{"x", "slope"}, "y")
			return "y"
		}, nil},
		{"selu_celu_mish_softsign", 18, func(b *modelBuilder) string {
			b.param("x", 4, 5)
			b.node("Selu", []string{"x"}, "a", aFloat("alpha", 1.2), aFloat("gamma", 0.9))
			b.node("Celu", []string{"x"}, "c", aFloat("alpha", 0.7))
			b.node("Mish", []string{"x"}, "m")
			b.node("Softsign", []string{"x"}, "s")
			b.node("Mul", []string{"a", "c"}, "ac")
			b.node("Mul", []string{"m", "s"}, "ms")
			b.node("Add", []string{"ac", "ms"}, "y")
			return "y"
		}, nil},
		{"sign_shrink", 14, func(b *modelBuilder) string {
			b.param("x", 4, 5)
			b.node("Sign", []string{"x"}, "sg")
			b.node("Shrink", []string{"x"}, "sh", aFloat("lambd", 0.5), aFloat("bias", 0.5))
			b.node("Mul", []string{"sg", "x"}, "ax") // |x|
			b.node("Mul", []string{"ax", "sh"}, "y")
			return "y"
		}, nil},
		{"sum_mean_variadic_broadcast", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.param("c", 4)
			b.param("d", 3, 1)
			b.node("Sum", []string{"a", "c", "d"}, "s")
			b.node("Mean", []string{"s", "c", "a"}, "m")
			b.node("Sum", []string{"m"}, "y")
			return "y"
		}, nil},
		{"max_min_variadic_broadcast", 14, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.param("c", 3, 4)
			b.param("d", 2, 1, 4)
			b.node("Max", []string{"a", "c", "d"}, "mx")
			b.node("Min", []string{"a", "d"}, "mn")
			b.node("Mul", []string{"mx", "mn"}, "y")
			return "y"
		}, nil},
		{"convtranspose2d_groups_stride_dilation_outpad", 14, func(b *modelBuilder) string {
			b.param("x", 2, 4, 3, 4)
			b.param("w", 4, 3, 3, 2)
			b.param("bias", 6)
			b.node("ConvTranspose", []string{"x", "w", "bias"}, "y", aInt("group", 2), aInts("strides", 2, 1),
				aInts("pads", 1, 0, 0, 1), aInts("dilations", 1, 2), aInts("output_padding", 1, 0))
			return "y"
		}, nil},
		{"convtranspose1d_output_shape", 14, func(b *modelBuilder) string {
			b.param("x", 2, 3, 5)
			b.param("w", 3, 2, 4)
			b.node("ConvTranspose", []string{"x", "w"}, "y", aInts("strides", 2), aInts("output_shape", 9))
			return "y"
		}, nil},
		{"convtranspose3d_same_upper", 14, func(b *modelBuilder) string {
			b.param("x", 1, 2, 2, 3, 2)
			b.param("w", 2, 2, 2, 3, 2)
			b.node("ConvTranspose", []string{"x", "w"}, "y", aInts("strides", 2, 1, 2), aStr("auto_pad", "SAME_UPPER"))
			return "y"
		}, nil},
		{"lrn", 13, func(b *modelBuilder) string {
			b.param("x", 2, 5, 2, 3)
			b.node("LRN", []string{"x"}, "y", aInt("size", 4), aFloat("alpha", 0.5), aFloat("beta", 0.7), aFloat("bias", 1.5))
			return "y"
		}, nil},
		{"opset18_reduce_axes_input", 18, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.ints("axes", []int64{-1, 0}, 2)
			b.node("ReduceMean", []string{"a", "axes"}, "m") // (1,3,1)
			b.ints("none", []int64{}, 0)
			b.node("ReduceSum", []string{"a", "none"}, "s", aInt("noop_with_empty_axes", 1)) // (2,3,4) unchanged
			b.node("Mul", []string{"s", "m"}, "y")
			return "y"
		}, nil},
		{"opset18_split_num_outputs_pad_axes", 18, func(b *modelBuilder) string {
			b.param("x", 2, 7, 3)
			b.nodes = append(b.nodes, &onnxpb.NodeProto{Name: proto.String("split"), OpType: proto.String("Split"),
				Input: []string{"x"}, Output: []string{"s0", "s1", "s2"}, Attribute: []*onnxpb.AttributeProto{aInt("axis", 1), aInt("num_outputs", 3)}})
			b.node("Concat", []string{"s2", "s0"}, "c", aInt("axis", 1)) // 1 + 3 channels
			b.ints("pads", []int64{1, 2}, 2)
			b.ints("pax", []int64{2}, 1)
			b.node("Pad", []string{"c", "pads", "", "pax"}, "y", aStr("mode", "reflect"))
			return "y"
		}, nil},
		{"reduce_extremes_norms_logsums", 13, func(b *modelBuilder) string {
			b.param("a", 2, 3, 4)
			b.node("ReduceMax", []string{"a"}, "mx", aInts("axes", 1))                      // (2,1,4)
			b.node("ReduceMin", []string{"a"}, "mn", aInts("axes", 2), aInt("keepdims", 0)) // (2,3)
			b.node("ReduceL1", []string{"a"}, "l1", aInts("axes", 0, 2))                    // (1,3,1)
			b.node("ReduceL2", []string{"a"}, "l2", aInts("axes", 1))                       // (2,1,4)
			b.node("ReduceSumSquare", []string{"a"}, "ss")                                  // (1,1,1)
			b.node("ReduceLogSumExp", []string{"a"}, "lse", aInts("axes", 2))               // (2,3,1)
			b.node("Exp", []string{"a"}, "ea")
			b.node("ReduceLogSum", []string{"ea"}, "ls", aInts("axes", 0)) // (1,3,4)
			b.node("ReduceProd", []string{"a"}, "pr", aInts("axes", 1))    // (2,1,4)
			b.node("Add", []string{"mx", "l2"}, "s1")
			b.node("Mul", []string{"s1", "pr"}, "s2")
			b.node("Add", []string{"s2", "l1"}, "s3")
			b.node("Add", []string{"s3", "ss"}, "s4")
			b.node("Add", []string{"s4", "lse"}, "s5")
			b.node("Mul", []string{"s5", "ls"}, "s6")
			b.ints("ax", []int64{2}, 1)
			b.node("Unsqueeze", []string{"mn", "ax"}, "mn3") // (2,3,1)
			b.node("Add", []string{"s6", "mn3"}, "y")
			return "y"
		}, nil},
		{"reduce_prod_with_zero", 18, func(b *modelBuilder) string {
			b.floats("a", []float32{0, 1.5, -2, 0.7, 0, 0, 3, 1.2, -0.4}, 3, 3)
			b.ints("ax", []int64{1}, 1)
			b.node("ReduceProd", []string{"a", "ax"}, "y")
			return "y"
		}, nil},
		{"sin_cos", 14, func(b *modelBuilder) string {
			b.param("x", 4, 5)
			b.node("Sin", []string{"x"}, "s")
			b.node("Cos", []string{"x"}, "c")
			b.node("Mul", []string{"s", "c"}, "y")
			return "y"
		}, nil},
		{"shared_param_accumulates", 14, func(b *modelBuilder) string {
			b.param("a", 3, 3)
			b.node("MatMul", []string{"a", "a"}, "aa")
			b.node("Mul", []string{"aa", "a"}, "m")
			b.node("Add", []string{"m", "m"}, "y")
			return "y"
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(1, c.opset)
			out := c.build(b)
			gradCheck(t, b.graph(t, out), c.opts)
		})
	}
}
