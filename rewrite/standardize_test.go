package rewrite

import (
	"math"
	"slices"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestStandardizedWeights: a Conv weight standardized as timm writes it
// (a training-mode BatchNormalization of the weight's rows, written out as
// a LayerNormalization by the rewrite) is read as weight standardization
// — its gain, constant γ, shift and scalar factors — and every other
// computation of the weight is left to the general path.
func TestStandardizedWeights(t *testing.T) {
	constant := func(b *mb, name string, v ...float64) {
		b.node("Constant", name, nil, []string{name}, attrTensor("value", floatTensor(graph.Float32, []int64{int64(len(v))}, v)))
	}
	for _, c := range []struct {
		name string
		// scale and shift are the BatchNormalization's γ and β: "gain"
		// (a parameter), "ones"/"zeros"/"row" (constants), "beta" (a
		// parameter).
		scale, shift string
		factor       bool   // times a scalar constant after
		mask         string // times "param" or "constant" taps after
		twice        bool   // the weight also read by a second Conv
		consumer     string // Conv, or Gemm
		want         *Standardized
	}{
		{name: "gain, shift and factor (ScaledStdConv2d)", scale: "gain", shift: "row", factor: true, consumer: "Conv",
			want: &Standardized{Weight: "w", Gain: "gain", Rows: 4, K: 18, Scale: 0.5, GainScale: []float32{0.5, 0.5, 0.5, 0.5}}},
		{name: "gain times a constant as γ (timm's gain·scale)", scale: "gain·c", shift: "zeros", consumer: "Conv",
			want: &Standardized{Weight: "w", Gain: "gain", Rows: 4, K: 18, Scale: 1, GainScale: []float32{0.25, 0.25, 0.25, 0.25}}},
		{name: "no affine (StdConv2d)", scale: "ones", shift: "zeros", consumer: "Conv",
			want: &Standardized{Weight: "w", Rows: 4, K: 18, Scale: 1}},
		{name: "constant γ", scale: "row", shift: "zeros", factor: true, consumer: "Conv",
			want: &Standardized{Weight: "w", Rows: 4, K: 18, Scale: 0.5}},
		{name: "a learned shift", scale: "gain", shift: "beta", consumer: "Conv"},
		{name: "a learned mask over the taps", scale: "ones", shift: "zeros", mask: "param", consumer: "Conv"},
		{name: "a constant mask over the taps", scale: "ones", shift: "zeros", mask: "constant", consumer: "Conv"},
		{name: "the weight read again", scale: "ones", shift: "zeros", twice: true, consumer: "Conv"},
		{name: "a Gemm's weight", scale: "gain", shift: "zeros", consumer: "Gemm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newMB().input("x", "N", 2, 5, 5).output("y", "N", 4, 5, 5)
			b.opset = 15
			if c.consumer == "Gemm" {
				b = newMB().input("x", "N", 18).output("y", "N", 4)
				b.opset = 15
			}
			b.init("w", []int64{4, 2, 3, 3}).ints("rows", 1, 4, -1).ints("wshape", 4, 2, 3, 3).ints("flat", 4, 18).
				init("mu", []int64{4}).init("va", []int64{4}, 1).
				node("Reshape", "/conv/Reshape", []string{"w", "rows"}, []string{"wr"})
			for _, v := range []string{c.scale, c.shift} {
				switch v {
				case "gain":
					b.init("gain", []int64{4}, 1, 1.2, 0.8, 1.1)
				case "gain·c":
					b.init("gain", []int64{4}, 1, 1.2, 0.8, 1.1)
					constant(b, "quarter", 0.25)
					b.node("Mul", "/conv/Mul_gain", []string{"quarter", "gain"}, []string{"gain·c"})
				case "beta":
					b.init("beta", []int64{4}, 0.1, 0.2, -0.1, 0)
				case "ones":
					constant(b, "ones", 1, 1, 1, 1)
				case "zeros":
					constant(b, "zeros", 0, 0, 0, 0)
				case "row":
					constant(b, "row"+string(rune('0'+len(b.g.Node))), 0.5, 2, -1, 1.5)
				}
			}
			scale, shift := c.scale, c.shift
			for _, n := range b.g.Node {
				if n.GetOpType() == "Constant" && n.Output[0][:3] == "row" {
					if c.scale == "row" && scale == "row" {
						scale = n.Output[0]
					} else {
						shift = n.Output[0]
					}
				}
			}
			b.node("BatchNormalization", "/conv/BatchNormalization", []string{"wr", scale, shift, "mu", "va"}, []string{"wb"},
				attrFloat("epsilon", 1e-4), attrInt("training_mode", 1))
			shapeTo := "wshape"
			if c.consumer == "Gemm" {
				shapeTo = "flat"
			}
			b.node("Reshape", "/conv/Reshape_1", []string{"wb", shapeTo}, []string{"wn"})
			w := "wn"
			if c.factor {
				constant(b, "half", 0.5)
				b.node("Mul", "/conv/Mul", []string{w, "half"}, []string{"wf"})
				w = "wf"
			}
			if c.mask != "" {
				if c.mask == "param" {
					b.init("mask", []int64{1, 1, 3, 3})
				} else {
					b.node("Constant", "mask", nil, []string{"mask"}, attrTensor("value", floatTensor(graph.Float32, []int64{1, 1, 3, 3}, []float64{1, 0, 1, 0, 1, 0, 1, 0, 1})))
				}
				b.node("Mul", "/conv/Mask", []string{w, "mask"}, []string{"wm"})
				w = "wm"
			}
			out := "y"
			if c.twice {
				out = "y1"
			}
			if c.consumer == "Gemm" {
				b.node("Gemm", "/fc/Gemm", []string{"x", w}, []string{out}, attrInt("transB", 1))
			} else {
				b.node("Conv", "/conv/Conv", []string{"x", w}, []string{out}, attrInts("pads", 1, 1, 1, 1))
			}
			if c.twice {
				b.node("Conv", "/conv2/Conv", []string{"x", "w"}, []string{"y2"}, attrInts("pads", 1, 1, 1, 1)).
					node("Add", "/add", []string{"y1", "y2"}, []string{"y"})
			}
			g := b.build(t)
			sample := []int64{2, 5, 5}
			if c.consumer == "Gemm" {
				sample = []int64{18}
			}
			p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 4}})
			if err != nil {
				t.Fatal(err)
			}
			var got *Standardized
			transformed := false
			for _, prm := range p.Params {
				if !prm.Trainable() {
					t.Errorf("%s frozen: %s", prm.Name, prm.Reason)
				}
				for _, u := range prm.Uses {
					transformed = transformed || u.Transform
					if u.Standardized != nil {
						if got != nil && got != u.Standardized {
							t.Errorf("two readings of one weight")
						}
						got = u.Standardized
						if !u.Layer.Standardized {
							t.Errorf("%s's layer is not marked standardized", prm.Name)
						}
					}
				}
			}
			if !transformed {
				t.Fatal("no use is computed")
			}
			if c.want == nil {
				if got != nil {
					t.Fatalf("read as standardization: %+v", got)
				}
				return
			}
			if got == nil {
				t.Fatal("not read as standardization")
			}
			w0 := c.want
			if got.Weight != w0.Weight || got.Gain != w0.Gain || got.Rows != w0.Rows || got.K != w0.K || got.Scale != w0.Scale ||
				!slices.Equal(got.GainScale, w0.GainScale) || got.Epsilon != 1e-4 || c.scale != "ones" && got.Gamma == "" {
				t.Errorf("read as %+v, want %+v", got, w0)
			}
			for _, v := range []string{got.Input, got.Output, got.Gamma} {
				if v != "" && g.Values[v] == nil {
					t.Errorf("value %q is not in the graph", v)
				}
			}
			// Memory: in ghost, mixed and bk no per-sample gradient of the
			// weight (x̂ is the model's own, an activation), the float64 norm terms (2
			// floats a row of W and of the gain, for each sample) instead;
			// bk adds the operand's clipped sum and the gain's. Where the
			// norms take the ghost form (ghost mode; mixed where the
			// decision is ghost), a row of ones a group and the
			// convolutions by x̂ and by them: G·D + B·G·(p+1)·T.
			var d, rows int64 = 72, 4
			if got.Gain != "" {
				rows += 4
			}
			var l *Layer
			for _, pl := range p.Layers {
				if pl.Standardized {
					l = pl
				}
			}
			if l == nil {
				t.Fatal("no standardized layer")
			}
			form := l.Groups*l.D + 4*l.Groups*(l.P+1)*l.T
			for _, m := range p.MemoryAt(4) {
				want := int64(-1)
				switch m.Mode {
				case ModeGhost, ModeMixed:
					want = 4*(2*4*rows) + 4*4
					if m.Mode == ModeGhost || l.Decision == Ghost {
						want += 4 * form
					}
				case ModeInstantiate:
					if m.PerSample < 4*4*d {
						t.Errorf("instantiate keeps %d bytes a step, under the weight's per-sample gradients", m.PerSample)
					}
				}
				if want >= 0 && m.PerSample != want {
					t.Errorf("%s: per-sample memory %d bytes, want %d", m.Mode, m.PerSample, want)
				}
			}
		})
	}
}

// TestFuseStandardization: weight standardization as torch.var_mean
// exports it (BiT's original StdConv2d: two means, two differences) or
// with one mean, the square a Mul or a Pow, a product by the reciprocal
// square root, the axes an attribute or an input (opset 18), BatchNormalization's
// (0, 2) of the weight reshaped to (1, C, K), becomes one LayerNormalization of the weight's rows
// whose outputs are the decomposition's, read by the plan as
// standardization and written back decomposed before opset 17; a
// normalization of data, or one whose mean something else reads, stays.
func TestFuseStandardization(t *testing.T) {
	for _, c := range []struct {
		name       string
		opset      int64
		twoMeans   bool
		pow        bool
		data       bool // x is the graph input, not a weight
		meanOutput bool // the mean is a graph output too
		rsqrt      bool // e·Reciprocal(√(v + ε)) instead of e/√(v + ε)
		bnAxes     bool // over axes (0, 2) of the weight reshaped to (1, C, K), as BatchNormalization's
		fused      bool
	}{
		{name: "var_mean, opset 14", opset: 14, twoMeans: true, fused: true},
		{name: "one mean, Pow, opset 18", opset: 18, pow: true, fused: true},
		{name: "one mean, opset 17", opset: 17, fused: true},
		{name: "rsqrt over BatchNormalization's axes, opset 18", opset: 18, rsqrt: true, bnAxes: true, fused: true},
		{name: "data", opset: 14, twoMeans: true, data: true},
		{name: "the mean read elsewhere", opset: 14, meanOutput: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newMB().input("x", "N", 2, 4, 4).output("y", "N", 3, 4, 4)
			b.opset = c.opset
			if c.meanOutput {
				b.output("mA", 3, 1, 1, 1)
			}
			b.init("w", []int64{3, 2, 3, 3}).init("b", []int64{3})
			src := "w"
			axes := []int64{1, 2, 3}
			if c.bnAxes {
				b.ints("r3", 1, 3, 18).ints("back", 3, 2, 3, 3).node("Reshape", "/conv/Reshape", []string{"w", "r3"}, []string{"w3"})
				src, axes = "w3", []int64{0, 2}
			}
			if c.data {
				b = newMB().input("x", 3, 2, 3, 3).output("y", 3, 2, 3, 3)
				b.opset = c.opset
				src = "x"
			}
			reduce := func(in, out string) {
				if c.opset >= 18 {
					b.node("ReduceMean", "/conv/"+out, []string{in, "axes"}, []string{out})
					return
				}
				b.node("ReduceMean", "/conv/"+out, []string{in}, []string{out}, attrInts("axes", axes...))
			}
			if c.opset >= 18 {
				b.ints("axes", axes...)
			}
			reduce(src, "mA")
			b.node("Sub", "/conv/SubA", []string{src, "mA"}, []string{"d"})
			if c.pow {
				b.node("Constant", "/conv/two", nil, []string{"two"}, attrTensor("value", floatTensor(graph.Float32, nil, []float64{2})))
				b.node("Pow", "/conv/Pow", []string{"d", "two"}, []string{"sq"})
			} else {
				b.node("Mul", "/conv/Mul", []string{"d", "d"}, []string{"sq"})
			}
			reduce("sq", "v")
			e := "d"
			if c.twoMeans {
				reduce(src, "mB")
				b.node("Sub", "/conv/SubB", []string{src, "mB"}, []string{"e"})
				e = "e"
			}
			b.node("Constant", "/conv/eps", nil, []string{"eps"}, attrTensor("value", floatTensor(graph.Float32, nil, []float64{1e-3})))
			b.node("Add", "/conv/Add", []string{"v", "eps"}, []string{"ve"}).
				node("Sqrt", "/conv/Sqrt", []string{"ve"}, []string{"sd"})
			norm, ws := "ws", "ws"
			if c.data {
				norm = "y"
			}
			if c.bnAxes {
				norm = "ws3"
			}
			if c.rsqrt {
				b.node("Reciprocal", "/conv/Reciprocal", []string{"sd"}, []string{"isd"}).
					node("Mul", "/conv/Mul_1", []string{"isd", e}, []string{norm})
			} else {
				b.node("Div", "/conv/Div", []string{e, "sd"}, []string{norm})
			}
			if c.bnAxes {
				b.node("Reshape", "/conv/Reshape_1", []string{"ws3", "back"}, []string{ws})
			}
			if !c.data {
				b.node("Conv", "/conv/Conv", []string{"x", ws, "b"}, []string{"y"}, attrInts("pads", 1, 1, 1, 1))
			}
			sample, batch := []int64{2, 4, 4}, 2
			if c.data {
				sample, batch = []int64{2, 3, 3}, 3
			}
			run := func(g *graph.Graph) []float32 {
				t.Helper()
				p, err := runtime.CompileForBatch(g.Clone(), batch, sample, &runtime.Options{ForwardOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				in, _ := p.Input(0)
				for i := range in {
					in[i] = float32(math.Sin(float64(3*i + 1)))
				}
				if err := p.Forward(); err != nil {
					t.Fatal(err)
				}
				out, _ := p.Output(0)
				return append([]float32(nil), out...)
			}
			g := b.build(t)
			want := run(g)
			shapes, err := StaticShapes(g, sample, int64(batch))
			if err != nil {
				t.Fatal(err)
			}
			changes, err := FuseStandardization(g, shapes)
			if err != nil {
				t.Fatal(err)
			}
			lns := 0
			for _, n := range g.Nodes {
				if n.OpType == "LayerNormalization" {
					lns++
				}
				if c.fused && (n.OpType == "ReduceMean" || n.OpType == "Sqrt" || n.OpType == "Reciprocal") {
					t.Errorf("%s %s left", n.OpType, n.Name)
				}
			}
			if (lns == 1) != c.fused || len(changes) != lns {
				t.Fatalf("%d LayerNormalization nodes, %d changes", lns, len(changes))
			}
			for _, gr := range []*graph.Graph{g, mustExport(t, g)} {
				got := run(gr)
				for i := range want {
					if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("output %d = %v, want %v", i, got[i], want[i])
					}
				}
			}
			if ex := mustExport(t, g); c.fused && c.opset < 17 {
				for _, n := range ex.Nodes {
					if n.OpType == "LayerNormalization" {
						t.Errorf("the opset-%d export has a LayerNormalization", c.opset)
					}
				}
			}
			if !c.fused || c.data {
				return
			}
			p, err := Analyze(g, PlanOptions{InputShape: sample, Batch: 2})
			if err != nil {
				t.Fatal(err)
			}
			if st := p.Param("w").Uses[0].Standardized; st == nil || st.Rows != 3 || st.K != 18 || math.Abs(float64(st.Epsilon)-1e-3) > 1e-9 {
				t.Errorf("read as %+v", st)
			}
		})
	}
}

func mustExport(t *testing.T, g *graph.Graph) *graph.Graph {
	t.Helper()
	ex, err := ExportGraph(g)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}
