package dpengine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// opModel is a small ONNX model for the per-sample rules of ConvTranspose,
// PRelu and Einsum weights: input "input" of shape (N, sample…), logits
// "y" of shape (N, classes).
type opModel struct {
	opset  int64
	sample []int64
	inits  []*onnxpb.TensorProto
	nodes  []*onnxpb.NodeProto
	rng    *rand.Rand
	// loops is the number of per-sample loops a step runs on a device
	// that batches its per-sample work; unlifted, where the computations
	// of operands from parameters are not lifted over the samples
	// (liftOff) or only one sample at a time fits: one per computed
	// operand (its vector-Jacobian products taken sample by sample).
	loops, unlifted int
	// standardized is the number of computed Conv weights the rewrite
	// reads as weight standardization (rewrite.Standardized): in the
	// modes that take their norms in closed form (stdApplies) they run
	// no per-sample loop and keep no per-sample gradients.
	standardized int
	// ghostForm and ghostFormAll are the standardized weights whose norms
	// come from the ghost form (convStdGhost) in mixed and bk, and in
	// ghost mode (every one but a depthwise convolution's).
	ghostForm, ghostFormAll int
}

// constant adds a Constant node of float values with the given shape (no
// parameter: a Constant is not an initializer).
func (m *opModel) constant(name string, shape []int64, v ...float32) {
	t := &onnxpb.TensorProto{DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: shape, FloatData: v}
	m.node("Constant", nil, name, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t})
}

// perturb adds noise to every parameter of m, as an optimizer step would
// change them, and returns their names and new values.
func (m *opModel) perturb() ([]string, [][]float32) {
	var names []string
	var values [][]float32
	for _, t := range m.inits {
		if t.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
			continue
		}
		for k := range t.FloatData {
			t.FloatData[k] += float32(m.rng.NormFloat64() * 0.3)
		}
		names = append(names, t.GetName())
		values = append(values, append([]float32(nil), t.FloatData...))
	}
	return names, values
}

func (m *opModel) param(name string, shape ...int64) {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(m.rng.NormFloat64() * 0.5)
	}
	m.inits = append(m.inits, &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: shape, FloatData: data})
}

func (m *opModel) ints(name string, v ...int64) {
	m.inits = append(m.inits, &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: []int64{int64(len(v))}, Int64Data: v})
}

func (m *opModel) node(op string, in []string, out string, attrs ...*onnxpb.AttributeProto) {
	m.nodes = append(m.nodes, &onnxpb.NodeProto{Name: proto.String(out), OpType: proto.String(op), Input: in, Output: []string{out}, Attribute: attrs})
}

// samples draws n samples of m's shape (normal inputs, labels below 4)
// and returns them with a sample's length.
func (m *opModel) samples(r *rand.Rand, n int) (x []float32, y []int64, per int) {
	per = 1
	for _, d := range m.sample {
		per *= int(d)
	}
	x = make([]float32, n*per)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y = make([]int64, n)
	for i := range y {
		y[i] = int64(r.IntN(4))
	}
	return x, y, per
}

// graph returns a fresh graph of the model with a dynamic batch axis.
func (m *opModel) graph(t *testing.T) *graph.Graph {
	t.Helper()
	dims := []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}}
	for _, d := range m.sample {
		dims = append(dims, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	tt := &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: &onnxpb.TensorShapeProto{Dim: dims}}}}
	p := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(m.opset)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("ops"), Node: m.nodes, Initializer: m.inits,
			Input:  []*onnxpb.ValueInfoProto{{Name: proto.String("input"), Type: tt}},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}},
		},
	}
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var c onnxpb.ModelProto
	if err := proto.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(onnx.NewModel(&c))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// bruteNorms runs every sample alone through the model (batch of 1) and
// returns each parameter's per-sample gradient norm and, with clip norm R,
// the clipped sum Σ_i min(1, R/‖g_i‖)·g_i of its gradients.
func bruteNorms(t *testing.T, m *opModel, x []float32, y []int64, R float64) (map[string][]float64, map[string][]float64) {
	t.Helper()
	p, err := runtime.CompileForBatch(m.graph(t), 1, m.sample, nil)
	if err != nil {
		t.Fatal(err)
	}
	per := len(x) / len(y)
	out := map[string][]float64{}
	sums := map[string][]float64{}
	for i := range y {
		if err := p.SetInput(0, x[i*per:(i+1)*per]); err != nil {
			t.Fatal(err)
		}
		if err := p.Forward(); err != nil {
			t.Fatal(err)
		}
		if err := p.Loss(y[i:i+1], make([]float32, 1)); err != nil {
			t.Fatal(err)
		}
		if err := p.Backward(nil, nil); err != nil {
			t.Fatal(err)
		}
		var total float64
		for _, name := range p.Params() {
			var s float64
			for _, v := range p.Grad(name) {
				s += float64(v) * float64(v)
			}
			out[name] = append(out[name], math.Sqrt(s))
			total += s
		}
		c := math.Min(1, R/math.Sqrt(total))
		for _, name := range p.Params() {
			g := p.Grad(name)
			if sums[name] == nil {
				sums[name] = make([]float64, len(g))
			}
			for k, v := range g {
				sums[name][k] += c * float64(v)
			}
		}
	}
	return out, sums
}

// TestOperatorRulesMatchBruteForce: the per-sample norms of ConvTranspose
// weights and biases, PRelu slopes (numpy and opset-6 per-channel forms)
// and Einsum weights equal batch-of-1 brute force in every DP mode, on the
// CPU, on reference.Separate and on the guarded CUDA emulation
// (opRuleDevices), and no parameter is frozen.
func TestOperatorRulesMatchBruteForce(t *testing.T) {
	models := map[string]func() *opModel{
		"convtranspose_prelu_einsum": func() *opModel {
			m := &opModel{opset: 14, sample: []int64{4, 4, 4}, rng: rand.New(rand.NewPCG(3, 4))}
			m.param("wt", 4, 2, 3, 3)
			m.param("bt", 4)
			m.node("ConvTranspose", []string{"input", "wt", "bt"}, "ct", intAttr("group", 2), intsAttr("strides", 2, 2),
				intsAttr("pads", 1, 1, 1, 1), intsAttr("output_padding", 1, 1)) // (N,4,8,8)
			m.param("slope", 4, 1, 1)
			m.node("PRelu", []string{"ct", "slope"}, "pr")
			m.ints("shp", 0, 4, 64)
			m.node("Reshape", []string{"pr", "shp"}, "r") // (N,4,64)
			m.param("w1", 64, 5)
			m.node("Einsum", []string{"r", "w1"}, "z", strAttr("equation", "bct,tk->bck")) // (N,4,5)
			m.param("w2", 4, 5)
			m.node("Einsum", []string{"w2", "z"}, "y", strAttr("equation", "ck,bck->bk")) // (N,5)
			return m
		},
		"einsum_not_linear": func() *opModel {
			// Weights that are no grouped linear layer: a label summed in
			// the weight alone, a diagonal; instantiated.
			m := &opModel{opset: 14, sample: []int64{3, 4}, rng: rand.New(rand.NewPCG(9, 10))}
			m.param("wsum", 4, 2)
			m.node("Einsum", []string{"input", "wsum"}, "z", strAttr("equation", "bct,tj->bc")) // (N,3)
			m.param("wdiag", 3, 3, 4)
			m.node("Einsum", []string{"z", "wdiag"}, "y", strAttr("equation", "bc,cck->bk")) // (N,4)
			return m
		},
		"matmul_stacks": func() *opModel {
			// Stacks of MatMul weights, one for each of the data's
			// matrices, the batch folded into their rows (MViT-v2's
			// temporal relative positions): one read directly, one
			// through a Transpose (a path).
			m := &opModel{opset: 14, sample: []int64{3, 4, 6}, rng: rand.New(rand.NewPCG(11, 12))}
			m.node("Transpose", []string{"input"}, "xt", intsAttr("perm", 1, 0, 2, 3)) // (3,N,4,6)
			m.ints("rows", 3, -1, 6)
			m.node("Reshape", []string{"xt", "rows"}, "xr") // (3,N·4,6)
			m.param("ws", 3, 6, 5)
			m.node("MatMul", []string{"xr", "ws"}, "h") // (3,N·4,5)
			m.param("wp", 3, 2, 5)
			m.node("Transpose", []string{"wp"}, "wpt", intsAttr("perm", 0, 2, 1)) // (3,5,2)
			m.node("MatMul", []string{"h", "wpt"}, "h2")                          // (3,N·4,2)
			m.ints("back", 3, -1, 4, 2)
			m.node("Reshape", []string{"h2", "back"}, "hb")                         // (3,N,4,2)
			m.node("Transpose", []string{"hb"}, "hs", intsAttr("perm", 1, 0, 2, 3)) // (N,3,4,2)
			m.node("Flatten", []string{"hs"}, "f", intAttr("axis", 1))              // (N,24)
			m.param("wh", 24, 4)
			m.node("MatMul", []string{"f", "wh"}, "y")
			return m
		},
		"arena_beside_shared": func() *opModel {
			// Two weights of one size, one read once (its per-sample
			// gradients in its consumer's hook buffer, arenaPerSample), one
			// shared (in psAll): neighbours in trainableOrder, each its own
			// run of norms and accumulators.
			m := &opModel{opset: 14, sample: []int64{64}, rng: rand.New(rand.NewPCG(15, 16))}
			m.param("w1", 64, 64)
			m.node("MatMul", []string{"input", "w1"}, "h") // (N,64)
			m.node("Tanh", []string{"h"}, "th")
			m.param("w2", 64, 64)
			m.node("MatMul", []string{"th", "w2"}, "h2")
			m.node("Tanh", []string{"h2"}, "t2")
			m.node("MatMul", []string{"t2", "w2"}, "h3")
			m.param("wh", 64, 4)
			m.node("MatMul", []string{"h3", "wh"}, "y")
			return m
		},
		"scatter_path": func() *opModel {
			// A bias with some elements kept at zero by a ScatterND of
			// constant indices (Swin V2's key bias, qkv_bias[C:2C] = 0):
			// a path whose index map leaves those elements out.
			m := &opModel{opset: 14, sample: []int64{6}, rng: rand.New(rand.NewPCG(13, 14))}
			m.param("b", 6)
			m.inits = append(m.inits, &onnxpb.TensorProto{Name: proto.String("idx"), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: []int64{2, 1}, Int64Data: []int64{2, 3}},
				&onnxpb.TensorProto{Name: proto.String("zeros"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{2}, FloatData: []float32{0, 0}})
			m.node("ScatterND", []string{"b", "idx", "zeros"}, "bz")
			m.node("Add", []string{"input", "bz"}, "h") // (N,6)
			m.node("Tanh", []string{"h"}, "th")
			m.param("w", 6, 4)
			m.node("MatMul", []string{"th", "w"}, "y")
			return m
		},
		"transform_conv_weightnorm": func() *opModel {
			// Weights computed from parameters before they meet the
			// batch: a convolution's weight standardized per output
			// channel and scaled by a gain (NFNet's ScaledStdConv2d,
			// timm's StdConv2d), and a head under weight normalization
			// (w = g·v/‖v‖, torch.nn.utils.weight_norm). Each weight's
			// per-sample gradient goes back through its computation.
			m := &opModel{opset: 14, sample: []int64{3, 5, 5}, rng: rand.New(rand.NewPCG(15, 16)), loops: 0, unlifted: 2}
			m.param("w", 4, 3, 3, 3)
			m.node("ReduceMean", []string{"w"}, "mu", intsAttr("axes", 1, 2, 3))
			m.node("Sub", []string{"w", "mu"}, "d")
			m.node("Mul", []string{"d", "d"}, "d2")
			m.node("ReduceMean", []string{"d2"}, "var", intsAttr("axes", 1, 2, 3))
			m.constant("eps", nil, 1e-5)
			m.node("Add", []string{"var", "eps"}, "ve")
			m.node("Sqrt", []string{"ve"}, "sd")
			m.node("Div", []string{"d", "sd"}, "wn")
			m.param("gain", 4, 1, 1, 1)
			m.node("Mul", []string{"wn", "gain"}, "wg")
			// A learned mask over the taps, of lower rank: lifted, it
			// broadcasts only with unit axes after the sample axis.
			m.param("taps", 3, 3)
			m.node("Mul", []string{"wg", "taps"}, "ws")
			m.param("b", 4)
			m.node("Conv", []string{"input", "ws", "b"}, "h", intsAttr("pads", 1, 1, 1, 1)) // (N,4,5,5)
			m.node("Relu", []string{"h"}, "r")
			m.node("Flatten", []string{"r"}, "f", intAttr("axis", 1)) // (N,100)
			m.param("v", 4, 100)
			m.node("ReduceL2", []string{"v"}, "nv", intsAttr("axes", 1))
			m.node("Div", []string{"v", "nv"}, "vu")
			m.param("g", 4, 1)
			m.node("Mul", []string{"vu", "g"}, "wh")
			m.param("bh", 4)
			m.node("Gemm", []string{"f", "wh", "bh"}, "y", intAttr("transB", 1))
			return m
		},
		"standardized_conv": func() *opModel {
			// Weight standardization as timm's StdConv2d and
			// ScaledStdConv2d write it — a training-mode
			// BatchNormalization of the weight's rows, a learned gain as
			// its scale, a constant shift, 1/√fan-in after — on a
			// grouped convolution, and with a constant γ on a depthwise
			// one: the rows' norms in closed form.
			m := &opModel{opset: 15, sample: []int64{4, 5, 5}, rng: rand.New(rand.NewPCG(25, 26)), loops: 0, unlifted: 2, standardized: 2, ghostFormAll: 1}
			bn := func(in, scale, bias, out string) {
				m.constant(out+"_mean", []int64{6}, 0, 0, 0, 0, 0, 0)
				m.constant(out+"_var", []int64{6}, 1, 1, 1, 1, 1, 1)
				m.node("BatchNormalization", []string{in, scale, bias, out + "_mean", out + "_var"}, out, intAttr("training_mode", 1), floatAttr("epsilon", 1e-4))
			}
			m.ints("rows", 1, 6, -1)
			m.param("w", 6, 2, 3, 3)
			m.node("Reshape", []string{"w", "rows"}, "wr") // (1,6,18)
			m.param("gain", 6)
			m.constant("shift", []int64{6}, 0.1, -0.2, 0.3, 0, 0.5, -0.1)
			bn("wr", "gain", "shift", "wb")
			m.ints("wshape", 6, 2, 3, 3)
			m.node("Reshape", []string{"wb", "wshape"}, "wn")
			m.constant("fanin", nil, 0.25)
			m.node("Mul", []string{"wn", "fanin"}, "ws")
			m.param("b", 6)
			m.node("Conv", []string{"input", "ws", "b"}, "h", intAttr("group", 2), intsAttr("pads", 1, 1, 1, 1)) // (N,6,5,5)
			m.node("Relu", []string{"h"}, "r")
			m.param("dw", 6, 1, 3, 3)
			m.node("Reshape", []string{"dw", "rows"}, "dwr") // (1,6,9)
			m.constant("gamma", []int64{6}, 0.5, 2, -1, 1.5, 1, 0.7)
			m.constant("zeros", []int64{6}, 0, 0, 0, 0, 0, 0)
			bn("dwr", "gamma", "zeros", "dwb")
			m.ints("dwshape", 6, 1, 3, 3)
			m.node("Reshape", []string{"dwb", "dwshape"}, "dwn")
			m.node("Conv", []string{"r", "dwn"}, "h2", intAttr("group", 6), intsAttr("strides", 2, 2)) // (N,6,2,2)
			m.node("Flatten", []string{"h2"}, "f", intAttr("axis", 1))                                 // (N,24)
			m.param("wh", 4, 24)
			m.param("bh", 4)
			m.node("Gemm", []string{"f", "wh", "bh"}, "y", intAttr("transB", 1))
			return m
		},
		"standardized_var_mean": func() *opModel {
			// BiT's original StdConv2d as torch.var_mean exports it
			// (two means, two differences), times a gain after: the
			// rewrite makes it one LayerNormalization of the rows and
			// the gain a per-row γ, whose norms come in closed form.
			m := &opModel{opset: 14, sample: []int64{3, 5, 5}, rng: rand.New(rand.NewPCG(27, 28)), loops: 0, unlifted: 1, standardized: 1, ghostFormAll: 1}
			m.param("w", 4, 3, 3, 3)
			m.node("ReduceMean", []string{"w"}, "mA", intsAttr("axes", 1, 2, 3))
			m.node("Sub", []string{"w", "mA"}, "d")
			m.node("Mul", []string{"d", "d"}, "d2")
			m.node("ReduceMean", []string{"d2"}, "var", intsAttr("axes", 1, 2, 3))
			m.node("ReduceMean", []string{"w"}, "mB", intsAttr("axes", 1, 2, 3))
			m.node("Sub", []string{"w", "mB"}, "e")
			m.constant("eps", nil, 1e-5)
			m.node("Add", []string{"var", "eps"}, "ve")
			m.node("Sqrt", []string{"ve"}, "sd")
			m.node("Div", []string{"e", "sd"}, "wn")
			m.param("gain", 4, 1, 1, 1)
			m.node("Mul", []string{"wn", "gain"}, "ws")
			m.param("b", 4)
			m.node("Conv", []string{"input", "ws", "b"}, "h", intsAttr("pads", 1, 1, 1, 1)) // (N,4,5,5)
			m.node("Relu", []string{"h"}, "r")
			m.node("Flatten", []string{"r"}, "f", intAttr("axis", 1)) // (N,100)
			m.param("wh", 4, 100)
			m.param("bh", 4)
			m.node("Gemm", []string{"f", "wh", "bh"}, "y", intAttr("transB", 1))
			return m
		},
		"standardized_ghost": standardizedGhostModel,
		"transform_bias_scale": func() *opModel {
			// Swin V2's attention: a relative-position bias table made
			// by an MLP from constant coordinates, gathered, squashed and
			// added to the logits, which a clipped, exponentiated logit
			// scale multiplies.
			m := &opModel{opset: 14, sample: []int64{2, 4, 4}, rng: rand.New(rand.NewPCG(17, 18)), loops: 0, unlifted: 2}
			coords := make([]float32, 14)
			for k := range coords {
				coords[k] = float32(k%7-3) / 3
			}
			m.constant("coords", []int64{1, 7, 2}, coords...) // with a batch axis, as Swin V2's (1, 2w−1, 2w−1, 2)
			m.param("w1", 2, 8)
			m.node("MatMul", []string{"coords", "w1"}, "m1")
			m.param("b1", 8)
			m.node("Add", []string{"m1", "b1"}, "a1")
			m.node("Relu", []string{"a1"}, "r1")
			m.param("w2", 8, 2)
			m.node("MatMul", []string{"r1", "w2"}, "table3") // (1,7,2)
			m.ints("t72", 7, 2)
			m.node("Reshape", []string{"table3", "t72"}, "table")
			idx := make([]int64, 16)
			for k := range idx {
				idx[k] = int64(k/4-k%4) + 3
			}
			m.inits = append(m.inits, &onnxpb.TensorProto{Name: proto.String("idx"), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: []int64{4, 4}, Int64Data: idx})
			m.node("Gather", []string{"table", "idx"}, "gb")                     // (4,4,2)
			m.node("Transpose", []string{"gb"}, "tb", intsAttr("perm", 2, 0, 1)) // (2,4,4)
			m.node("Sigmoid", []string{"tb"}, "sb")
			m.constant("sixteen", nil, 16)
			m.node("Mul", []string{"sb", "sixteen"}, "bias")
			m.node("Add", []string{"input", "bias"}, "h") // (N,2,4,4)
			m.param("s", 2, 1, 1)
			m.constant("smax", nil, 0.5)
			m.node("Clip", []string{"s", "", "smax"}, "sc")
			m.node("Exp", []string{"sc"}, "scale")
			m.node("Mul", []string{"h", "scale"}, "hs")
			m.node("Softmax", []string{"hs"}, "p", intAttr("axis", -1))
			m.node("Flatten", []string{"p"}, "f", intAttr("axis", 1)) // (N,32)
			m.param("wo", 32, 4)
			m.node("MatMul", []string{"f", "wo"}, "y")
			return m
		},
		"transform_expanded": func() *opModel {
			// A computed value expanded over the batch (a class token
			// scaled before it is repeated for every sample): the operand
			// carries the batch, and its products go sample by sample.
			m := &opModel{opset: 14, sample: []int64{4}, rng: rand.New(rand.NewPCG(19, 20)), loops: 1, unlifted: 1}
			m.param("c", 1, 4)
			m.node("Exp", []string{"c"}, "ec")
			m.node("Shape", []string{"input"}, "shp")
			m.node("Expand", []string{"ec", "shp"}, "eb") // (N,4)
			m.node("Add", []string{"input", "eb"}, "h")
			m.node("Tanh", []string{"h"}, "th")
			m.param("w", 4, 3)
			m.node("MatMul", []string{"th", "w"}, "y")
			return m
		},
		"param_sum": func() *opModel {
			// A weight that is the sum of two parameters (a base and a
			// delta): linear in each, the operand's per-sample gradient
			// is each one's, through its index map (the other's
			// elements zero while it is built).
			m := &opModel{opset: 14, sample: []int64{3}, rng: rand.New(rand.NewPCG(23, 24))}
			m.param("base", 4, 3)
			m.param("delta", 4, 3)
			m.node("Add", []string{"base", "delta"}, "w")
			m.node("Gemm", []string{"input", "w"}, "y", intAttr("transB", 1))
			return m
		},
		"transform_resize": func() *opModel {
			// A position embedding interpolated to the input's grid
			// (a ViT fine-tuned at another resolution): by scales, and
			// by sizes.
			m := &opModel{opset: 14, sample: []int64{2, 6, 6}, rng: rand.New(rand.NewPCG(21, 22)), loops: 0, unlifted: 2}
			m.param("pos", 1, 2, 3, 3)
			m.constant("scales", []int64{4}, 1, 1, 2, 2)
			m.node("Resize", []string{"pos", "", "scales"}, "pos6", strAttr("mode", "linear"))
			m.node("Add", []string{"input", "pos6"}, "h") // (N,2,6,6)
			m.param("pos2", 1, 2, 4, 4)
			m.ints("sizes", 1, 2, 6, 6)
			m.node("Resize", []string{"pos2", "", "", "sizes"}, "pos2r", strAttr("mode", "cubic"), strAttr("coordinate_transformation_mode", "align_corners"))
			m.node("Mul", []string{"h", "pos2r"}, "hm")
			m.node("Flatten", []string{"hm"}, "f", intAttr("axis", 1))
			m.param("w", 72, 4)
			m.node("MatMul", []string{"f", "w"}, "y")
			return m
		},
		"prelu_opset6_channels": func() *opModel {
			m := &opModel{opset: 6, sample: []int64{3, 2, 2}, rng: rand.New(rand.NewPCG(5, 6))}
			m.param("slope", 3)
			m.node("PRelu", []string{"input", "slope"}, "pr")
			m.node("Flatten", []string{"pr"}, "f", intAttr("axis", 1))
			m.param("w", 4, 12)
			m.param("b", 4)
			m.node("Gemm", []string{"f", "w", "b"}, "y", intAttr("transB", 1))
			return m
		},
	}
	for name, build := range models {
		m := build()
		r := rand.New(rand.NewPCG(7, 8))
		const N = 5
		x, y, _ := m.samples(r, N)
		const R = 6 // binds for some samples, not all
		want, wantSum := bruteNorms(t, m, x, y, R)
		// Computed linear operands lifted over the samples (one pass, or
		// one a sample where their memory allows no more), and not.
		type variant struct {
			name      string
			unlift    bool
			minFloats int
		}
		variants := []variant{{"", false, liftMinFloats}}
		if m.unlifted != 0 {
			variants = append(variants, variant{"/chunks", false, 0}, variant{"/unlifted", true, liftMinFloats})
		}
		for _, dm := range opRuleDevices(t) {
			for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
				for _, vr := range variants {
					unlift := vr.unlift
					loops := m.loops
					if vr.name != "" {
						loops = m.unlifted
					}
					t.Run(fmt.Sprintf("%s/%s/%s%s", name, dm.name, mode, vr.name), func(t *testing.T) {
						if dm.dev == nil && dm.name != "cpu" {
							t.Skip("no CUDA emulation here")
						}
						defer func(v bool, f int) { liftOff, liftMinFloats = v, f }(liftOff, liftMinFloats)
						liftOff, liftMinFloats = unlift, vr.minFloats
						g := m.graph(t)
						rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: m.sample, Batch: N}})
						if err != nil {
							t.Fatal(err)
						}
						for _, p := range rp.Params {
							if !p.Trainable() {
								t.Errorf("%s is frozen: %s", p.Name, p.Reason)
							}
						}
						e, err := New(g, rp, Config{Device: dm.dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: R}, ExpectedBatch: N, PhysicalBatch: N})
						if err != nil {
							t.Fatal(err)
						}
						std, ghostForm := 0, 0
						for _, g := range e.derived {
							if g.std != nil {
								std++
								if g.std.ghost {
									ghostForm++
								}
								continue
							}
							if g.virt != nil && (unlift || m.loops == 0) && (g.lift == nil) != unlift {
								t.Errorf("%s: lifted %v", g.virt.p.name, g.lift != nil)
							}
						}
						wantStd := 0
						if stdApplies(e.cfg) {
							wantStd = m.standardized
						}
						if std != wantStd {
							t.Errorf("%d weights in closed form, want %d", std, wantStd)
						}
						wantGhost := 0
						switch mode {
						case Ghost:
							wantGhost = m.ghostFormAll
						case Mixed, BK:
							wantGhost = m.ghostForm
						}
						if ghostForm != wantGhost {
							t.Errorf("%d weights in the ghost form, want %d", ghostForm, wantGhost)
						}
						if std > 0 {
							loops = 0
							for _, p := range e.params {
								if p.ps != nil && !strings.HasPrefix(p.name, "b") {
									t.Errorf("%s keeps per-sample gradients", p.name)
								}
							}
						}
						checkClippedSum(t, e, dm.name, x, y, want, wantSum, loops)
						for _, g := range e.derived {
							if g.std != nil && g.std.ghost && g.std.uShape == nil {
								t.Errorf("%s: the ghost form did not run", g.std.w.name)
							}
						}
						if m.unlifted == 0 {
							return
						}
						// A computation's gradient depends on the parameters:
						// after they change, the norms are those at the new
						// values.
						m := build()
						names, values := m.perturb()
						want, wantSum := bruteNorms(t, m, x, y, R)
						if err := e.SetParams(names, values); err != nil {
							t.Fatal(err)
						}
						checkClippedSum(t, e, dm.name, x, y, want, wantSum, 2*loops)
					})
				}
			}
		}
	}
}

// checkClippedSum runs e's clipped sum of x, y and holds its sums and
// per-sample norms to brute force's (want, wantSum), and the per-sample
// loops it ran in all to loops.
func checkClippedSum(t *testing.T, e *Engine, dev string, x []float32, y []int64, want, wantSum map[string][]float64, loops int) {
	t.Helper()
	sums, _, err := e.ClippedSum(x, y)
	if err != nil {
		t.Fatal(err)
	}
	for pname, w := range wantSum {
		var d, mx float64
		for k, v := range w {
			d = math.Max(d, math.Abs(float64(sums[pname][k])-v))
			mx = math.Max(mx, math.Abs(v))
		}
		if d > 1e-3*mx+1e-6 {
			t.Errorf("%s: clipped sum differs from brute force by %.3g (max %.3g)", pname, d, mx)
		}
	}
	got := e.ParamNorms()
	if len(got) != len(want) {
		t.Errorf("%d parameters with norms, brute force %d", len(got), len(want))
	}
	// PRelu slopes, ConvTranspose and Einsum weights batch their
	// per-sample work where the device does; computations take theirs
	// back sample by sample.
	if e.batchSamples && e.sampleLoops != loops {
		t.Errorf("%d per-sample loops on %s, want %d", e.sampleLoops, dev, loops)
	}
	for pname, w := range want {
		g, ok := got[pname]
		if !ok {
			t.Errorf("no per-sample norm for %s", pname)
			continue
		}
		for i := range w {
			if d := math.Abs(g[i] - w[i]); d > 1e-3*w[i]+1e-7 {
				t.Errorf("%s sample %d: norm %v, brute force %v", pname, i, g[i], w[i])
			}
		}
	}
}

// opRuleDevice is a device the operator rules run on: the CPU (dev nil),
// reference.Separate (one worker, memory of its own: the engine's batched
// rules), and the CUDA emulation with guarded memory, where a host read of
// a device value (a clip factor, a norm) faults as on a GPU; dev is nil
// there when the emulation cannot run.
type opRuleDevice struct {
	name string
	dev  runtime.Device
}

func opRuleDevices(t *testing.T) []opRuleDevice {
	return []opRuleDevice{{"cpu", nil}, {"separate", reference.Separate{}}, {"cuda", guardedCUDA(t)}}
}

// guardedCUDA returns the CUDA device on the emulation with guarded
// memory (closed when t ends), or nil where the emulation cannot run.
func guardedCUDA(t *testing.T) runtime.Device {
	if d := cudaOn(t, cuda.EmulatedGuarded); d != nil {
		return d
	}
	return nil
}

// cudaOn returns the CUDA device on the driver open returns, closed when t
// ends, or nil (a nil *cuda.Device) where open fails.
func cudaOn(t *testing.T, open func() (cuda.Driver, error)) *cuda.Device {
	drv, err := open()
	if err != nil {
		return nil
	}
	d, err := cuda.New(drv)
	if err != nil {
		drv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestOperatorNormsMatchPyTorch: the per-sample norms of PyTorch exports
// (testdata/ops, from make_op_models.py: PyTorch's batch-of-1 norms) in
// every DP mode, on each of opRuleDevices: Conv, PReLU (per-channel and
// shared slopes), a grouped strided ConvTranspose and Linear parameters;
// and convolutions before and after Resize/Upsample nodes (nearest,
// bilinear and bicubic, align_corners or not, opsets 9 to 17), whose
// gradients flow through the interpolation, up to the CrossViT-like
// model whose second branch resizes its input (bicubic 20 → 16) before
// its patch embedding. The CUDA emulation runs the Resize models'
// interpolation GEMMs and index maps like any other node: its norms are
// the CPU's (and PyTorch's).
func TestOperatorNormsMatchPyTorch(t *testing.T) {
	for _, c := range []struct {
		name   string
		params int // parameters with norms
	}{
		{"norms_convtranspose_prelu", 8},
		{"norms_upsample_nearest_opset9", 6},
		{"norms_resize_nearest_bilinear", 6},
		{"norms_resize_bilinear", 6},
		{"norms_resize_bicubic", 6},
		{"crossvit_resize", 16},
	} {
		base := filepath.Join("..", "testdata", "ops", c.name)
		ref, err := npy.ReadNPZ(base + ".npz")
		if err != nil {
			t.Fatal(err)
		}
		x, labels, want := ref["input"].F32, ref["labels"].I64, ref["norm_total"].F64
		B := len(labels)
		sample := make([]int64, 0, 3)
		for _, d := range ref["input"].Shape[1:] {
			sample = append(sample, int64(d))
		}
		for _, dm := range opRuleDevices(t) {
			for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
				t.Run(c.name+"/"+dm.name+"/"+string(mode), func(t *testing.T) {
					if dm.dev == nil && dm.name != "cpu" {
						t.Skip("no CUDA emulation here")
					}
					m, err := onnx.Load(base + ".onnx")
					if err != nil {
						t.Fatal(err)
					}
					g, err := graph.FromONNX(m)
					if err != nil {
						t.Fatal(err)
					}
					rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: int64(B)}})
					if err != nil {
						t.Fatal(err)
					}
					if err := rp.Err(); err != nil {
						t.Fatal(err)
					}
					e, err := New(g, rp, Config{Device: dm.dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1e9}, ExpectedBatch: float64(B), PhysicalBatch: B})
					if err != nil {
						t.Fatal(err)
					}
					_, norms, err := e.ClippedSum(x, labels)
					if err != nil {
						t.Fatal(err)
					}
					for i, w := range want {
						if r := math.Abs(norms[i]-w) / w; r > 1e-4 {
							t.Errorf("sample %d: total norm %v, PyTorch %v (rel %.2e)", i, norms[i], w, r)
						}
					}
					if e.sampleLoops != 0 {
						t.Errorf("%d per-sample loops on %s", e.sampleLoops, dm.name)
					}
					got := e.ParamNorms()
					n := 0
					for k, a := range ref {
						name, ok := strings.CutPrefix(k, "norm/")
						if !ok {
							continue
						}
						n++
						for i, w := range a.F64 {
							if d := math.Abs(got[name][i] - w); d > 1e-4*w+1e-7 {
								t.Errorf("%s sample %d: norm %v, PyTorch %v", name, i, got[name][i], w)
							}
						}
					}
					if n != c.params || len(got) != n {
						t.Errorf("%d parameters with norms, %d with PyTorch references (want %d)", len(got), n, c.params)
					}
				})
			}
		}
	}
}

// standardizedGhostModel has standardized convolutions whose decision is
// ghost (T² small against p·D): strided with a gain, grouped with a
// constant γ, ungrouped of stride 1 (the input-Gram ghost norm) and
// pointwise with a gain — their norms from the ghost form, no gradient
// instantiated.
func standardizedGhostModel() *opModel {
	// Standardized convolutions whose decision is ghost (T² small
	// against p·D): strided with a gain, grouped with a constant
	// γ, ungrouped of stride 1 (the input-Gram ghost norm) and
	// pointwise with a gain — their norms from the ghost form,
	// no gradient instantiated.
	m := &opModel{opset: 15, sample: []int64{4, 6, 6}, rng: rand.New(rand.NewPCG(29, 30)), loops: 0, unlifted: 4, standardized: 4, ghostForm: 4, ghostFormAll: 4}
	std := func(name string, shape []int64, gain bool, in string, attrs ...*onnxpb.AttributeProto) {
		rows := shape[0]
		ones := make([]float32, rows)
		zeros := make([]float32, rows)
		shift := make([]float32, rows)
		for o := range ones {
			ones[o], shift[o] = 1, float32(o%3-1)/10
		}
		m.ints(name+"_rows", 1, rows, -1)
		m.param(name, shape...)
		m.node("Reshape", []string{name, name + "_rows"}, name+"_r")
		scale := name + "_gamma"
		if gain {
			m.param(scale, rows)
		} else {
			gamma := make([]float32, rows)
			for o := range gamma {
				gamma[o] = 0.5 + float32(o%4)/2
			}
			m.constant(scale, []int64{rows}, gamma...)
		}
		m.constant(name+"_shift", []int64{rows}, shift...)
		m.constant(name+"_mean", []int64{rows}, zeros...)
		m.constant(name+"_var", []int64{rows}, ones...)
		m.node("BatchNormalization", []string{name + "_r", scale, name + "_shift", name + "_mean", name + "_var"}, name+"_b",
			intAttr("training_mode", 1), floatAttr("epsilon", 1e-5))
		m.ints(name+"_shape", shape...)
		m.node("Reshape", []string{name + "_b", name + "_shape"}, name+"_w")
		m.node("Conv", []string{in, name + "_w"}, name+"_y", attrs...)
		m.node("Relu", []string{name + "_y"}, name+"_a")
	}
	std("w1", []int64{8, 4, 3, 3}, true, "input", intsAttr("pads", 1, 1, 1, 1), intsAttr("strides", 2, 2)) // (N,8,3,3)
	std("w2", []int64{12, 4, 3, 3}, false, "w1_a", intsAttr("pads", 1, 1, 1, 1), intAttr("group", 2))      // (N,12,3,3)
	std("w3", []int64{16, 12, 3, 3}, false, "w2_a", intsAttr("pads", 1, 1, 1, 1))                          // (N,16,3,3)
	std("w4", []int64{12, 16, 1, 1}, true, "w3_a")                                                         // (N,12,3,3)
	m.node("Flatten", []string{"w4_a"}, "f", intAttr("axis", 1))                                           // (N,108)
	m.param("wh", 4, 108)
	m.param("bh", 4)
	m.node("Gemm", []string{"f", "wh", "bh"}, "y", intAttr("transB", 1))
	return m
}

// TestStandardizedStatsOncePerStep: the standardized weights' coefficients
// are computed once a logical batch, at its first physical batch, from the
// statistics the model's forward left (the parameters change only between
// logical batches): three SGD steps of five samples in physical batches of
// 2 end where the same steps do with the coefficients computed every
// physical batch, and in one physical batch, in mixed and bk, with one
// computation for each weight a step.
func TestStandardizedStatsOncePerStep(t *testing.T) {
	m := standardizedGhostModel()
	const N, steps = 5, 3
	x, y, per := m.samples(rand.New(rand.NewPCG(31, 32)), N)
	idx := []int{0, 1, 2, 3, 4}
	fill := func(ix []int, xs []float32, ys []int64) error {
		for k, i := range ix {
			copy(xs[k*per:(k+1)*per], x[i*per:(i+1)*per])
			ys[k] = y[i]
		}
		return nil
	}
	for _, mode := range []Mode{Mixed, BK} {
		run := func(phys int, every bool) [][]float32 {
			defer func(v bool) { stdStatsEveryBatch = v }(stdStatsEveryBatch)
			stdStatsEveryBatch = every
			g := standardizedGhostModel().graph(t)
			rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: m.sample, Batch: int64(phys)}})
			if err != nil {
				t.Fatal(err)
			}
			e, err := New(g, rp, Config{Mode: mode, Clipping: Clipping{Fn: Abadi, R: 6}, ExpectedBatch: N, PhysicalBatch: phys,
				Source: NewSeededSource(1), Optimizer: &SGD{LR: 0.5}})
			if err != nil {
				t.Fatal(err)
			}
			for range steps {
				if _, err := e.Step(idx, fill); err != nil {
					t.Fatal(err)
				}
			}
			if want := steps * m.standardized; !every && e.stdRefreshes != want {
				t.Errorf("%s, physical batch %d: %d passes over the standardized weights, want %d", mode, phys, e.stdRefreshes, want)
			}
			var out [][]float32
			for _, p := range e.HostParams() {
				out = append(out, append([]float32(nil), p...))
			}
			return out
		}
		split, every, whole := run(2, false), run(2, true), run(N, false)
		for k := range whole {
			for i, w := range whole[k] {
				if split[k][i] != every[k][i] {
					t.Fatalf("%s: parameter %d element %d: %v with the statistics once a step, %v every physical batch", mode, k, i, split[k][i], every[k][i])
				}
				if d := math.Abs(float64(split[k][i] - w)); d > 1e-4*math.Max(1, math.Abs(float64(w))) {
					t.Fatalf("%s: parameter %d element %d: %v in physical batches of 2, %v in one", mode, k, i, split[k][i], w)
				}
			}
		}
	}
}
