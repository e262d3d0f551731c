package dpengine

import (
	"fmt"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// testModel builds a small ONNX graph for the per-sample rules' tests.
type testModel struct {
	g     *onnxpb.GraphProto
	opset int64
	seed  int
}

func newTestModel(opset int64) *testModel {
	return &testModel{g: &onnxpb.GraphProto{Name: proto.String("rules")}, opset: opset}
}

func (m *testModel) valueInfo(name string, dims ...int64) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for i, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if i == 0 {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
		}
		sh.Dim = append(sh.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(graph.Float32)), Shape: sh}}}}
}

// param adds a float initializer of deterministic, non-constant values.
func (m *testModel) param(name string, shape ...int64) string {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	t := &graph.Tensor{DType: graph.Float32, Shape: shape, F32: make([]float32, n)}
	m.seed++
	for i := range t.F32 {
		t.F32[i] = float32(0.5 * math.Sin(float64(7*i+13*m.seed)))
	}
	m.g.Initializer = append(m.g.Initializer, t.ToProto(name))
	return name
}

func (m *testModel) ints(name string, vals ...int64) string {
	t := &graph.Tensor{DType: graph.Int64, Shape: []int64{int64(len(vals))}, I64: vals}
	m.g.Initializer = append(m.g.Initializer, t.ToProto(name))
	return name
}

func (m *testModel) node(op string, ins []string, out string, attrs ...*onnxpb.AttributeProto) string {
	m.g.Node = append(m.g.Node, &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(out), Input: ins, Output: []string{out}, Attribute: attrs})
	return out
}

func strAttr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

func (m *testModel) graph(t *testing.T, in []int64, out string, classes int64) *graph.Graph {
	t.Helper()
	m.g.Input = []*onnxpb.ValueInfoProto{m.valueInfo("input", append([]int64{-1}, in...)...)}
	m.g.Output = []*onnxpb.ValueInfoProto{m.valueInfo(out, -1, classes)}
	g, err := graph.FromONNX(onnx.NewModel(&onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: m.g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(m.opset)}}}))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// rulesModels are small graphs whose parameters reach their consumers in
// ways the fixtures exported from PyTorch do not cover.
func rulesModels(t *testing.T) map[string]func() (*graph.Graph, []int64) {
	return map[string]func() (*graph.Graph, []int64){
		// GroupNormalization at opset 18 with a per-group affine,
		// InstanceNormalization, GroupNormalization with a per-channel
		// affine (each followed by a nonlinearity, so that the next
		// normalization does not cancel its parameters).
		"norms": func() (*graph.Graph, []int64) {
			m := newTestModel(18)
			// A convolution weight stored flat: Reshape on its path.
			w := m.node("Reshape", []string{m.param("conv.w", 12), m.ints("conv.shape", 4, 3, 1, 1)}, "conv.w4")
			x := m.node("Conv", []string{"input", w, m.param("conv.b", 4)}, "c")
			x = m.node("GroupNormalization", []string{x, m.param("gn1.scale", 2), m.param("gn1.bias", 2)}, "gn1", intAttr("num_groups", 2))
			x = m.node("Tanh", []string{x}, "t1")
			x = m.node("InstanceNormalization", []string{x, m.param("in.scale", 4), m.param("in.bias", 4)}, "in")
			x = m.node("Tanh", []string{x}, "t2")
			x = m.node("GroupNormalization", []string{x, m.param("gn2.scale", 4), m.param("gn2.bias", 4)}, "gn2", intAttr("num_groups", 2))
			x = m.node("Flatten", []string{x}, "f")
			x = m.node("Gemm", []string{x, m.param("fc.w", 3, 36), m.param("fc.b", 3)}, "logits", intAttr("transB", 1))
			return m.graph(t, []int64{3, 3, 3}, x, 3), []int64{3, 3, 3}
		},
		// Pointwise convolutions, grouped and not: a group's unfolded
		// input is the input read in place (convUseOn, convBatched).
		"pointwise": func() (*graph.Graph, []int64) {
			m := newTestModel(21)
			x := m.node("Conv", []string{"input", m.param("pw1.w", 4, 2, 1, 1), m.param("pw1.b", 4)}, "pw1", intAttr("group", 2))
			x = m.node("Tanh", []string{x}, "t1")
			x = m.node("Conv", []string{x, m.param("pw2.w", 6, 4, 1, 1)}, "pw2")
			x = m.node("Tanh", []string{x}, "t2")
			x = m.node("Flatten", []string{x}, "f")
			x = m.node("Gemm", []string{x, m.param("fc.w", 3, 54), m.param("fc.b", 3)}, "logits", intAttr("transB", 1))
			return m.graph(t, []int64{4, 3, 3}, x, 3), []int64{4, 3, 3}
		},
		// Windows folded into the batch axis, as Swin's attention does
		// ((B, 8, 6) tokens as (B·2, 4, 6) windows): a sample's bias and
		// weight gradients sum over all its windows' rows.
		"windows": func() (*graph.Graph, []int64) {
			m := newTestModel(14)
			x := m.node("Reshape", []string{"input", m.ints("win", -1, 4, 6)}, "w")
			x = m.node("Add", []string{x, m.param("b1", 6)}, "a1")
			x = m.node("Tanh", []string{x}, "t1")
			x = m.node("MatMul", []string{x, m.param("w1", 6, 6)}, "m1")
			x = m.node("Add", []string{x, m.param("b2", 6)}, "a2")
			x = m.node("Mul", []string{x, m.param("s2", 1, 4, 6)}, "s2m")
			x = m.node("Tanh", []string{x}, "t2")
			x = m.node("Reshape", []string{x, m.ints("unwin", -1, 8, 6)}, "uw")
			x = m.node("ReduceMean", []string{x}, "pool", intsAttr("axes", 1), intAttr("keepdims", 0))
			x = m.node("Gemm", []string{x, m.param("fc.w", 3, 6), m.param("fc.b", 3)}, "logits", intAttr("transB", 1))
			return m.graph(t, []int64{8, 6}, x, 3), []int64{8, 6}
		},
		// Einsum weights: a token Linear, a per-head weight (a group
		// label), a weight as the first operand with two row labels.
		"einsum": func() (*graph.Graph, []int64) {
			m := newTestModel(14)
			x := m.node("Einsum", []string{"input", m.param("w1", 4, 6)}, "e1", strAttr("equation", "btd,ed->bte"))
			x = m.node("Tanh", []string{x}, "t1")
			x = m.node("Reshape", []string{x, m.ints("heads", -1, 5, 2, 2)}, "r1")
			x = m.node("Einsum", []string{x, m.param("w2", 2, 2, 3)}, "e2", strAttr("equation", "bthd,hde->bthe"))
			x = m.node("Tanh", []string{x}, "t2")
			// The batch on the output's axis 1.
			x = m.node("Einsum", []string{x, m.param("w2b", 3, 3)}, "e2b", strAttr("equation", "bthe,ef->tbhf"))
			x = m.node("Transpose", []string{x}, "tr", intsAttr("perm", 1, 0, 2, 3))
			x = m.node("Einsum", []string{m.param("w3", 4, 3), x}, "e3", strAttr("equation", "ke,bthe->bthk"))
			x = m.node("ReduceMean", []string{x}, "pool", intsAttr("axes", 1, 2), intAttr("keepdims", 0))
			x = m.node("Gemm", []string{x, m.param("fc.w", 4, 3), m.param("fc.b", 3)}, "logits")
			return m.graph(t, []int64{5, 6}, x, 3), []int64{5, 6}
		},
		// Token MatMuls whose weights pass through layout ops: one
		// operand joining two parameters (Concat of transposes), a
		// weight stored with a unit axis (Unsqueeze, Squeeze, Cast,
		// Flatten), rows gathered from a table, a weight shared by a direct and a transposed use, and
		// LayerNormalizations over the last axis of tokens and of pooled
		// features.
		"paths": func() (*graph.Graph, []int64) {
			m := newTestModel(17)
			x := m.node("LayerNormalization", []string{"input", m.param("ln.scale", 6), m.param("ln.bias", 6)}, "ln", intAttr("axis", -1))
			wa := m.node("Transpose", []string{m.param("wa", 3, 6)}, "wa.t", intsAttr("perm", 1, 0))
			wb := m.node("Transpose", []string{m.param("wb", 3, 6)}, "wb.t", intsAttr("perm", 1, 0))
			w := m.node("Concat", []string{wa, wb}, "wab", intAttr("axis", 1))
			x = m.node("MatMul", []string{x, w}, "h1") // (B, 5, 6)
			x = m.node("Tanh", []string{x}, "t1")
			wc := m.node("Unsqueeze", []string{m.param("wc", 6, 6), m.ints("ax0", 0)}, "wc.u")
			wc = m.node("Cast", []string{wc}, "wc.c", intAttr("to", int64(graph.Float32)))
			wc = m.node("Squeeze", []string{wc, m.ints("ax0b", 0)}, "wc.s")
			wc = m.node("Flatten", []string{wc}, "wc.f", intAttr("axis", 1))
			x = m.node("MatMul", []string{x, wc}, "h2")
			x = m.node("Tanh", []string{x}, "t2")
			// Rows gathered with a repeat: the map sums the repeated
			// rows' gradients.
			wg := m.node("Gather", []string{m.param("wg", 8, 6), m.ints("rows", 0, 2, 2, 5, 7, 1)}, "wg.g", intAttr("axis", 0))
			x = m.node("MatMul", []string{x, wg}, "h2g")
			x = m.node("Tanh", []string{x}, "t2g")
			ws := m.param("ws", 6, 6)
			y := m.node("MatMul", []string{x, ws}, "h3")
			wst := m.node("Transpose", []string{ws}, "ws.t", intsAttr("perm", 1, 0))
			y = m.node("MatMul", []string{y, wst}, "h4")
			y = m.node("ReduceMean", []string{y}, "pool", intsAttr("axes", 1), intAttr("keepdims", 0))
			// A LayerNormalization of rank 2 (after pooling): one row a
			// sample.
			y = m.node("LayerNormalization", []string{y, m.param("ln2.scale", 6), m.param("ln2.bias", 6)}, "ln2", intAttr("axis", -1))
			y = m.node("Gemm", []string{y, m.param("fc.w", 6, 3), m.param("fc.b", 3)}, "logits")
			return m.graph(t, []int64{5, 6}, y, 3), []int64{5, 6}
		},
	}
}

func testInput(n int, seed float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(seed + 1.7*float64(i)))
	}
	return x
}

// TestRulesAgainstBatchOfOne: on graphs that exercise the normalization
// rules and weights through layout ops, every DP mode's per-parameter
// per-sample norms equal the norms of batch-of-1 gradients (the runtime's
// plain backward pass on one sample), its unclipped sum equals the batch
// gradient, and its clipped sum with a binding clip norm equals Σ_i C_i g_i
// of the batch-of-1 gradients.
func TestRulesAgainstBatchOfOne(t *testing.T) {
	const B = 4
	gpu := guardedCUDA(t)
	for name, build := range rulesModels(t) {
		g0, sample := build()
		sampleLen := 1
		for _, d := range sample {
			sampleLen *= int(d)
		}
		x := testInput(B*sampleLen, 0.3)
		y := []int64{0, 2, 1, 2}
		engine := func(mode Mode, batch int, clip float64, dev runtime.Device) *Engine {
			g, _ := build()
			rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: sample, Batch: int64(batch)}})
			if err != nil {
				t.Fatal(err)
			}
			for _, prm := range rp.Params {
				if !prm.Trainable() {
					t.Fatalf("%s: %s frozen: %s", name, prm.Name, prm.Reason)
				}
			}
			e, err := New(g, rp, Config{Device: dev, Mode: mode, Clipping: Clipping{Fn: Abadi, R: clip}, ExpectedBatch: float64(batch), PhysicalBatch: batch})
			if err != nil {
				t.Fatalf("%s %s: %v", name, mode, err)
			}
			return e
		}
		_ = g0
		// Brute force: one sample at a time, plain gradients.
		want := map[string][]float64{}
		full := map[string][]float64{}
		one := engine(NonDP, 1, 1, nil)
		perSample := map[string][][]float32{}
		total := make([]float64, B)
		for i := 0; i < B; i++ {
			sums, _, err := one.ClippedSum(x[i*sampleLen:(i+1)*sampleLen], y[i:i+1])
			if err != nil {
				t.Fatal(err)
			}
			for p, gr := range sums {
				perSample[p] = append(perSample[p], append([]float32(nil), gr...))
				total[i] += runtime.CPU{}.SumSq(gr)
				want[p] = append(want[p], math.Sqrt(runtime.CPU{}.SumSq(gr)))
				if full[p] == nil {
					full[p] = make([]float64, len(gr))
				}
				for k, v := range gr {
					full[p][k] += float64(v)
				}
			}
		}
		// The reference backend with memory of its own has one worker:
		// the batched rules (matrixBatched, convBatched) run there; so
		// they do on the CUDA emulation, whose guarded memory faults on
		// a host read of a device value.
		type runOn struct {
			mode Mode
			dev  runtime.Device
		}
		runs := []runOn{{Instantiate, nil}, {Ghost, nil}, {Mixed, nil}, {BK, nil}, {Instantiate, reference.Separate{}}, {Ghost, reference.Separate{}}, {BK, reference.Separate{}}}
		if gpu != nil {
			runs = append(runs, runOn{Instantiate, gpu}, runOn{Ghost, gpu}, runOn{Mixed, gpu}, runOn{BK, gpu})
		}
		for _, rm := range runs {
			mode, dev := rm.mode, rm.dev
			label := fmt.Sprintf("%s/%s", name, mode)
			if dev != nil {
				label += "/" + dev.Name()
			}
			t.Run(label, func(t *testing.T) {
				e := engine(mode, B, 1e9, dev)
				sums, _, err := e.ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				// Where the device batches, no per-sample loop
				// (window-batched biases and scales included:
				// arithmeticBatch's batch blocks; Einsum weights:
				// einsumBatched).
				if e.sampleLoops != 0 {
					t.Errorf("%d per-sample loops", e.sampleLoops)
				}
				got := e.ParamNorms()
				if len(got) != len(want) {
					t.Errorf("%d parameters with norms, want %d", len(got), len(want))
				}
				for p, w := range want {
					for i := range w {
						if r := math.Abs(got[p][i]-w[i]) / w[i]; !(r <= 1e-4) {
							t.Errorf("%s sample %d: norm %v, batch of 1 %v (rel %.1e)", p, i, got[p][i], w[i], r)
						}
					}
					var scale float64
					for _, v := range full[p] {
						scale = math.Max(scale, math.Abs(v))
					}
					for k, v := range full[p] {
						if d := math.Abs(float64(sums[p][k]) - v); d > 1e-4*scale {
							t.Errorf("%s[%d]: unclipped sum %v, batch-of-1 sum %v", p, k, sums[p][k], v)
							break
						}
					}
				}
				// Clipping that binds for most samples: Σ_i C_i g_i.
				R := 0.5 * math.Sqrt(total[0])
				clipped, _, err := engine(mode, B, R, dev).ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				for p, gs := range perSample {
					want := make([]float64, len(gs[0]))
					var scale float64
					for i, g := range gs {
						c := math.Min(1, R/math.Sqrt(total[i]))
						for k, v := range g {
							want[k] += c * float64(v)
						}
					}
					for _, v := range want {
						scale = math.Max(scale, math.Abs(v))
					}
					for k, v := range want {
						if d := math.Abs(float64(clipped[p][k]) - v); d > 1e-4*scale {
							t.Errorf("%s[%d]: clipped sum %v, from batch-of-1 gradients %v", p, k, clipped[p][k], v)
							break
						}
					}
				}
			})
		}
	}
}
