package rewrite

import (
	"archive/zip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// fixtureNames lists the committed fixtures.
func fixtureNames(t *testing.T) []string {
	t.Helper()
	paths, _ := filepath.Glob("../testdata/models/*.onnx")
	if len(paths) == 0 {
		t.Fatal("no fixtures under testdata/models: run testdata/gen/make_fixtures.py")
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".onnx"))
	}
	return names
}

// fixtureSample is the per-sample input shape of a fixture.
func fixtureSample(name string) []int64 {
	if name == "cnn" {
		return []int64{1, 28, 28}
	}
	return []int64{3, 32, 32}
}

func loadFixture(t *testing.T, name string) *graph.Graph {
	t.Helper()
	m, err := onnx.Load("../testdata/models/" + name + ".onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// roundTrip exports g and reads it back, as a saved model would be.
// exported is ExportGraph(g): the graph a model file holds.
func exported(t *testing.T, g *graph.Graph) *graph.Graph {
	t.Helper()
	e, err := ExportGraph(g)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func roundTrip(t *testing.T, g *graph.Graph) *graph.Graph {
	t.Helper()
	m, err := g.ToONNX()
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := onnx.LoadBytes(b, "")
	if err != nil {
		t.Fatal(err)
	}
	g2, err := graph.FromONNX(m2)
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Validate(); err != nil {
		t.Fatal(err)
	}
	return g2
}

// --- a float64 reference evaluator for the ops of resnet_train and its
// rewrites (naive loops; tests only) ---

type tens struct {
	shape []int
	d     []float64
}

func newTens(shape ...int) *tens {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return &tens{shape: shape, d: make([]float64, n)}
}

func (a *tens) maxAbsDiff(b *tens) float64 {
	m := 0.0
	for i := range a.d {
		m = math.Max(m, math.Abs(a.d[i]-b.d[i]))
	}
	return m
}

func (a *tens) maxAbs() float64 {
	m := 0.0
	for _, v := range a.d {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

func constTens(c *graph.Tensor) *tens {
	t := &tens{d: make([]float64, c.Len())}
	for _, s := range c.Shape {
		t.shape = append(t.shape, int(s))
	}
	for i := range t.d {
		t.d[i] = c.At(i)
	}
	return t
}

func shapeInts(s graph.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d.Size)
	}
	return out
}

// evaluate runs g (shapes inferred, so that shape arithmetic is folded) on
// the feeds. gnGroups lists BatchNormalization nodes to evaluate as
// GroupNorm with that many groups and the BN's scale and bias: the
// independent reference for the GroupNorm decomposition.
func evaluate(t *testing.T, g *graph.Graph, feeds map[string]*tens, gnGroups map[string]int64) map[string]*tens {
	t.Helper()
	env := map[*graph.Value]*tens{}
	for _, v := range g.Inputs {
		env[v] = feeds[v.Name]
	}
	get := func(v *graph.Value) *tens {
		if v == nil {
			return nil
		}
		if x, ok := env[v]; ok {
			return x
		}
		if v.Const != nil {
			x := constTens(v.Const)
			env[v] = x
			return x
		}
		t.Fatalf("value %s not computed", v.Name)
		return nil
	}
	for _, n := range g.Nodes {
		var ins []*tens
		for _, in := range n.Inputs {
			ins = append(ins, get(in))
		}
		out := evalNode(t, n, ins, gnGroups)
		env[n.Outputs[0]] = out
		if want := shapeInts(n.Outputs[0].Shape); fmt.Sprint(want) != fmt.Sprint(out.shape) {
			t.Fatalf("node %s: computed shape %v, inferred %v", nodeLabel(n), out.shape, want)
		}
	}
	res := map[string]*tens{}
	for _, v := range g.Outputs {
		res[v.Name] = get(v)
	}
	return res
}

func evalNode(t *testing.T, n *graph.Node, in []*tens, gnGroups map[string]int64) *tens {
	t.Helper()
	outShape := shapeInts(n.Outputs[0].Shape)
	switch n.OpType {
	case "Conv":
		x, w := in[0], in[1]
		win, err := n.Window([]int64{int64(x.shape[2]), int64(x.shape[3])}, []int64{int64(w.shape[2]), int64(w.shape[3])})
		if err != nil {
			t.Fatal(err)
		}
		g := int(n.IntOr("group", 1))
		N, C, H, W := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
		M, kh, kw := w.shape[0], w.shape[2], w.shape[3]
		cg, mg := C/g, M/g
		oh, ow := int(win.Out[0]), int(win.Out[1])
		y := newTens(N, M, oh, ow)
		for b := 0; b < N; b++ {
			for m := 0; m < M; m++ {
				gi := m / mg
				for i := 0; i < oh; i++ {
					for j := 0; j < ow; j++ {
						s := 0.0
						if len(in) > 2 && in[2] != nil {
							s = in[2].d[m]
						}
						for c := 0; c < cg; c++ {
							for p := 0; p < kh; p++ {
								hi := i*int(win.Strides[0]) - int(win.Pads[0]) + p*int(win.Dilations[0])
								if hi < 0 || hi >= H {
									continue
								}
								for q := 0; q < kw; q++ {
									wj := j*int(win.Strides[1]) - int(win.Pads[1]) + q*int(win.Dilations[1])
									if wj < 0 || wj >= W {
										continue
									}
									s += x.d[((b*C+gi*cg+c)*H+hi)*W+wj] * w.d[((m*cg+c)*kh+p)*kw+q]
								}
							}
						}
						y.d[((b*M+m)*oh+i)*ow+j] = s
					}
				}
			}
		}
		return y
	case "MaxPool":
		x := in[0]
		k, _ := n.Ints("kernel_shape", nil)
		win, err := n.Window([]int64{int64(x.shape[2]), int64(x.shape[3])}, k)
		if err != nil {
			t.Fatal(err)
		}
		N, C, H, W := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
		oh, ow := int(win.Out[0]), int(win.Out[1])
		y := newTens(N, C, oh, ow)
		for bc := 0; bc < N*C; bc++ {
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					m := math.Inf(-1)
					for p := 0; p < int(k[0]); p++ {
						hi := i*int(win.Strides[0]) - int(win.Pads[0]) + p*int(win.Dilations[0])
						for q := 0; q < int(k[1]); q++ {
							wj := j*int(win.Strides[1]) - int(win.Pads[1]) + q*int(win.Dilations[1])
							if hi >= 0 && hi < H && wj >= 0 && wj < W {
								m = math.Max(m, x.d[(bc*H+hi)*W+wj])
							}
						}
					}
					y.d[(bc*oh+i)*ow+j] = m
				}
			}
		}
		return y
	case "BatchNormalization":
		x := in[0]
		N, C := x.shape[0], x.shape[1]
		hw := len(x.d) / (N * C)
		eps, _ := n.Float("epsilon")
		y := newTens(x.shape...)
		if groups, ok := gnGroups[nodeLabel(n)]; ok {
			G := int(groups)
			per := C / G * hw
			for b := 0; b < N; b++ {
				for gi := 0; gi < G; gi++ {
					off := (b*C + gi*C/G) * hw
					mean, vr := 0.0, 0.0
					for i := 0; i < per; i++ {
						mean += x.d[off+i]
					}
					mean /= float64(per)
					for i := 0; i < per; i++ {
						vr += (x.d[off+i] - mean) * (x.d[off+i] - mean)
					}
					vr /= float64(per)
					for i := 0; i < per; i++ {
						c := gi*C/G + i/hw
						y.d[off+i] = (x.d[off+i]-mean)/math.Sqrt(vr+float64(eps))*in[1].d[c] + in[2].d[c]
					}
				}
			}
			return y
		}
		for i := range x.d {
			c := (i / hw) % C
			y.d[i] = (x.d[i]-in[3].d[c])/math.Sqrt(in[4].d[c]+float64(eps))*in[1].d[c] + in[2].d[c]
		}
		return y
	case "Relu":
		y := newTens(in[0].shape...)
		for i, v := range in[0].d {
			y.d[i] = math.Max(v, 0)
		}
		return y
	case "Sqrt":
		y := newTens(in[0].shape...)
		for i, v := range in[0].d {
			y.d[i] = math.Sqrt(v)
		}
		return y
	case "Add", "Sub", "Mul", "Div", "Pow":
		f := map[string]func(a, b float64) float64{
			"Add": func(a, b float64) float64 { return a + b }, "Sub": func(a, b float64) float64 { return a - b },
			"Mul": func(a, b float64) float64 { return a * b }, "Div": func(a, b float64) float64 { return a / b },
			"Pow": math.Pow,
		}[n.OpType]
		y := newTens(outShape...)
		ia, ib := bcastIndex(outShape, in[0].shape), bcastIndex(outShape, in[1].shape)
		for i := range y.d {
			y.d[i] = f(in[0].d[ia[i]], in[1].d[ib[i]])
		}
		return y
	case "GlobalAveragePool":
		x := in[0]
		N, C := x.shape[0], x.shape[1]
		hw := len(x.d) / (N * C)
		y := newTens(outShape...)
		for bc := 0; bc < N*C; bc++ {
			s := 0.0
			for i := 0; i < hw; i++ {
				s += x.d[bc*hw+i]
			}
			y.d[bc] = s / float64(hw)
		}
		return y
	case "Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Dropout":
		return &tens{shape: outShape, d: in[0].d}
	case "LayerNormalization":
		x, scale := in[0], in[1]
		if a := n.IntOr("axis", -1); a != -1 && a != int64(len(x.shape)-1) {
			t.Fatalf("LayerNormalization over axis %d: only the last axis is implemented", a)
		}
		eps := 1e-5
		if n.Has("epsilon") {
			e, _ := n.Float("epsilon")
			eps = float64(e)
		}
		last := x.shape[len(x.shape)-1]
		y := newTens(x.shape...)
		for r := 0; r < len(x.d)/last; r++ {
			row := x.d[r*last : (r+1)*last]
			m, v := 0.0, 0.0
			for _, e := range row {
				m += e
			}
			m /= float64(last)
			for _, e := range row {
				v += (e - m) * (e - m)
			}
			v /= float64(last)
			for j, e := range row {
				y.d[r*last+j] = (e - m) / math.Sqrt(v+eps) * scale.d[j]
				if len(in) > 2 && in[2] != nil {
					y.d[r*last+j] += in[2].d[j]
				}
			}
		}
		return y
	case "ReduceMean":
		x := in[0]
		axes, _, err := n.ReduceAxes(len(x.shape))
		if err != nil {
			t.Fatal(err)
		}
		if len(axes) != 1 || axes[0] != len(x.shape)-1 {
			t.Fatalf("ReduceMean over %v: only the last axis is implemented", axes)
		}
		last := x.shape[len(x.shape)-1]
		y := newTens(outShape...)
		for i := range y.d {
			s := 0.0
			for j := 0; j < last; j++ {
				s += x.d[i*last+j]
			}
			y.d[i] = s / float64(last)
		}
		return y
	case "Gemm":
		a, b := in[0], in[1]
		alpha, _ := n.Float("alpha")
		beta, _ := n.Float("beta")
		ta, tb := n.IntOr("transA", 0) != 0, n.IntOr("transB", 0) != 0
		M, K := a.shape[0], a.shape[1]
		if ta {
			M, K = K, M
		}
		N := b.shape[1]
		if tb {
			N = b.shape[0]
		}
		y := newTens(M, N)
		var ic []int
		if len(in) > 2 && in[2] != nil {
			ic = bcastIndex([]int{M, N}, in[2].shape)
		}
		for i := 0; i < M; i++ {
			for j := 0; j < N; j++ {
				s := 0.0
				for k := 0; k < K; k++ {
					var av, bv float64
					if ta {
						av = a.d[k*a.shape[1]+i]
					} else {
						av = a.d[i*a.shape[1]+k]
					}
					if tb {
						bv = b.d[j*b.shape[1]+k]
					} else {
						bv = b.d[k*b.shape[1]+j]
					}
					s += av * bv
				}
				s *= float64(alpha)
				if ic != nil {
					s += float64(beta) * in[2].d[ic[i*N+j]]
				}
				y.d[i*N+j] = s
			}
		}
		return y
	}
	t.Fatalf("reference evaluator: operator %s not implemented", n.OpType)
	return nil
}

// bcastIndex maps every element of out to the broadcast element of in.
func bcastIndex(out, in []int) []int {
	n := 1
	for _, d := range out {
		n *= d
	}
	idx := make([]int, n)
	off := len(out) - len(in)
	st := make([]int, len(in))
	s := 1
	for i := len(in) - 1; i >= 0; i-- {
		st[i] = s
		s *= in[i]
	}
	coord := make([]int, len(out))
	for i := 0; i < n; i++ {
		j := 0
		for k := off; k < len(out); k++ {
			if in[k-off] != 1 {
				j += coord[k] * st[k-off]
			}
		}
		idx[i] = j
		for k := len(out) - 1; k >= 0; k-- {
			coord[k]++
			if coord[k] < out[k] {
				break
			}
			coord[k] = 0
		}
	}
	return idx
}

// --- .npz goldens ---

var npyHeader = regexp.MustCompile(`'descr':\s*'([<>|]?[a-z]\d+)'.*'shape':\s*\(([^)]*)\)`)

// readNPZ reads the float32/float64/int64 arrays of a .npz archive.
func readNPZ(t *testing.T, path string) map[string]*tens {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	out := map[string]*tens{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 10 || string(b[1:6]) != "NUMPY" {
			t.Fatalf("%s: %s is not .npy", path, f.Name)
		}
		var hl, start int
		if b[6] == 1 {
			hl, start = int(binary.LittleEndian.Uint16(b[8:])), 10
		} else {
			hl, start = int(binary.LittleEndian.Uint32(b[8:])), 12
		}
		m := npyHeader.FindStringSubmatch(string(b[start : start+hl]))
		if m == nil {
			t.Fatalf("%s: %s: header %q", path, f.Name, b[start:start+hl])
		}
		var shape []int
		for _, s := range strings.Split(m[2], ",") {
			if s = strings.TrimSpace(s); s != "" {
				v, _ := strconv.Atoi(s)
				shape = append(shape, v)
			}
		}
		x := newTens(shape...)
		data := b[start+hl:]
		for i := range x.d {
			switch m[1] {
			case "<f4":
				x.d[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
			case "<f8":
				x.d[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
			case "<i8":
				x.d[i] = float64(int64(binary.LittleEndian.Uint64(data[8*i:])))
			default:
				t.Fatalf("%s: %s: dtype %s", path, f.Name, m[1])
			}
		}
		out[strings.TrimSuffix(f.Name, ".npy")] = x
	}
	return out
}

// --- building small models ---

type mb struct {
	g     *onnxpb.GraphProto
	opset int64
}

func newMB() *mb { return &mb{g: &onnxpb.GraphProto{Name: proto.String("test")}, opset: 14} }

func (b *mb) input(name string, dims ...any) *mb {
	b.g.Input = append(b.g.Input, valueInfoProto(name, dims...))
	return b
}

func (b *mb) output(name string, dims ...any) *mb {
	b.g.Output = append(b.g.Output, valueInfoProto(name, dims...))
	return b
}

func (b *mb) init(name string, shape []int64, vals ...float32) *mb {
	t := &graph.Tensor{DType: graph.Float32, Shape: shape, F32: make([]float32, prod(shape))}
	for i := range t.F32 {
		if len(vals) > 0 {
			t.F32[i] = vals[i%len(vals)]
		} else {
			t.F32[i] = float32(math.Sin(float64(i + len(name)))) // deterministic, not constant
		}
	}
	b.g.Initializer = append(b.g.Initializer, t.ToProto(name))
	return b
}

func (b *mb) ints(name string, vals ...int64) *mb {
	b.g.Initializer = append(b.g.Initializer, int64Tensor([]int64{int64(len(vals))}, vals...).ToProto(name))
	return b
}

func (b *mb) node(op, name string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *mb {
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: ins, Output: outs, Attribute: attrs})
	return b
}

func (b *mb) build(t *testing.T) *graph.Graph {
	t.Helper()
	m := onnx.NewModel(&onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: b.g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(b.opset)}}})
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	return g
}

func valueInfoProto(name string, dims ...any) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch v := d.(type) {
		case string:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: v}
		case int:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}
		}
		sh.Dim = append(sh.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(graph.Float32)), Shape: sh}}}}
}

// randInput is a deterministic pseudo-random batch.
func randInput(shape ...int) *tens {
	x := newTens(shape...)
	s := uint64(12345)
	for i := range x.d {
		s = s*6364136223846793005 + 1442695040888963407
		x.d[i] = float64(int64(s>>11))/float64(1<<52) - 1
	}
	return x
}
