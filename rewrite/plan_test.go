package rewrite

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

type manifest struct {
	Fixtures map[string]struct {
		InputShape []int64 `json:"input_shape"`
		Trainable  []struct {
			Name      string   `json:"onnx_name"`
			Shape     []int64  `json:"shape"`
			Consumers []string `json:"consumers"`
		} `json:"trainable"`
	} `json:"fixtures"`
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	b, err := os.ReadFile("../testdata/golden/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEveryFixtureParameterHasAKind walks every fixture: after Prepare
// (defaults: BatchNorm → GroupNorm), every floating-point initializer is
// either trainable with a per-sample kind and at least one use, or frozen
// with a reason; every trainable parameter of the manifest is trained with
// the kind its consumer implies; no sample-mixing node is left; and the
// counts are those recorded here.
func TestEveryFixtureParameterHasAKind(t *testing.T) {
	want := map[string][2]int{ // linear, elementwise
		"cnn": {4, 4}, "resnet_eval": {13, 13}, "resnet_train": {13, 25}, "vgg": {6, 6},
		"mobilenet": {11, 11}, "vit": {10, 22}, "beit": {10, 29}, "crossvit": {24, 52},
	}
	man := readManifest(t)
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			g := loadFixture(t, name)
			sample := fixtureSample(name)
			if fx, ok := man.Fixtures[name]; ok && len(fx.InputShape) > 1 {
				sample = fx.InputShape[1:]
			}
			p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 8}})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			if len(p.Warnings) > 0 {
				t.Errorf("warnings: %v", p.Warnings)
			}
			kinds := map[Kind]int{}
			for _, prm := range p.Params {
				kinds[prm.Kind]++
				switch {
				case prm.Kind == KindFrozen && prm.Reason == "":
					t.Errorf("%s frozen without a reason", prm.Name)
				case prm.Kind != KindFrozen && len(prm.Uses) == 0:
					t.Errorf("%s trainable without uses", prm.Name)
				}
				for _, u := range prm.Uses {
					if (u.Kind == KindLinear) != (u.Layer != nil) {
						t.Errorf("%s: use %s kind %s, layer %v", prm.Name, u.Node, u.Kind, u.Layer)
					}
					if u.Data < 0 {
						t.Errorf("%s: use %s has no data input", prm.Name, u.Node)
					}
				}
			}
			if w, ok := want[name]; ok && (kinds[KindLinear] != w[0] || kinds[KindElementwise] != w[1] || kinds[KindFrozen] != 0) {
				t.Errorf("kinds %v, want linear %d, elementwise %d", kinds, w[0], w[1])
			}
			layerParams := map[string]bool{}
			for _, l := range p.Layers {
				layerParams[l.Param] = true
			}
			if len(layerParams) != kinds[KindLinear] {
				t.Errorf("%d parameters with layers for %d linear parameters", len(layerParams), kinds[KindLinear])
			}
			fx, ok := man.Fixtures[name]
			if !ok {
				t.Fatalf("%s not in the manifest", name)
			}
			for _, mp := range fx.Trainable {
				prm := p.Param(mp.Name)
				if prm == nil {
					t.Errorf("manifest parameter %s missing from the plan", mp.Name)
					continue
				}
				want := KindElementwise
				switch mp.Consumers[0] {
				case "MatMul":
					want = KindLinear
				case "Conv", "Gemm", "ConvTranspose":
					if len(mp.Shape) > 1 {
						want = KindLinear
					}
				case "Transpose", "Reshape", "Squeeze", "Slice":
					// Weights through layout ops (vit_nofold, packedqkv);
					// biases reach their Add the same way.
					if !strings.Contains(mp.Name, "bias") {
						want = KindLinear
					}
				}
				if prm.Kind != want {
					t.Errorf("%s (read by %v): kind %s, want %s", mp.Name, mp.Consumers, prm.Kind, want)
				}
			}
			if int64(p.Trainable.Tensors) != int64(len(fx.Trainable)) {
				t.Errorf("%d trainable tensors, manifest has %d", p.Trainable.Tensors, len(fx.Trainable))
			}
		})
	}
}

// TestTransformerUses checks the per-sample contract on the export
// patterns of DESIGN.md's guidance.
func TestTransformerUses(t *testing.T) {
	plan := func(name string) *Plan {
		p, err := Prepare(loadFixture(t, name), Options{PlanOptions: PlanOptions{InputShape: fixtureSample(name), Batch: 8}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	vit, beit := plan("vit"), plan("beit")
	use := func(p *Plan, name string) *Use {
		t.Helper()
		prm := p.Param(name)
		if prm == nil || len(prm.Uses) != 1 {
			t.Fatalf("%s: %+v", name, prm)
		}
		return prm.Uses[0]
	}
	paths := func(u *Use) string {
		var s []string
		for _, st := range u.Path {
			s = append(s, st.Op)
		}
		return strings.Join(s, ",")
	}
	cases := []struct {
		p               *Plan
		param, op, path string
		operand         int
		in              BatchLayout
		t, d, pp        int64
		kind            Kind
	}{
		// Class token: Expand (batch) then Concat with the patch tokens.
		{vit, "class_token", "Concat", "Expand", 0, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
		{vit, "encoder.pos_embedding", "Add", "", 1, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
		// nn.MultiheadAttention in_proj on (T, B, D): batch on axis 1, T = 17.
		{vit, "onnx::MatMul_367", "MatMul", "", 1, BatchLayout{1, 1, 1}, 17, 32, 96, KindLinear},
		{vit, "encoder.layers.encoder_layer_0.self_attention.in_proj_bias", "Add", "", 0, BatchLayout{1, 1, 1}, 0, 0, 0, KindElementwise},
		// out_proj: Gemm on (T·B, D) rows, T outer to the batch.
		{vit, "encoder.layers.encoder_layer_0.self_attention.out_proj.weight", "Gemm", "", 1, BatchLayout{0, 17, 1}, 17, 32, 32, KindLinear},
		{vit, "heads.head.weight", "Gemm", "", 1, BatchLayout{0, 1, 1}, 1, 32, 10, KindLinear},
		{vit, "conv_proj.weight", "Conv", "", 1, BatchLayout{0, 1, 1}, 16, 192, 32, KindLinear},
		// BEiT: qkv bias = Concat(q_bias, zeros, v_bias) → Add; relative
		// position bias table → Gather → … → Add on the attention logits.
		{beit, "blocks.0.attn.q_bias", "Add", "Concat", 0, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
		{beit, "blocks.0.attn.v_bias", "Add", "Concat", 0, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
		{beit, "blocks.0.attn.relative_position_bias_table", "Add", "Gather,Reshape,Transpose,Unsqueeze", 1, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
		{beit, "blocks.0.gamma_1", "Mul", "", 0, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
		{beit, "cls_token", "Concat", "Expand", 0, BatchLayout{0, 1, 1}, 0, 0, 0, KindElementwise},
	}
	for _, c := range cases {
		u := use(c.p, c.param)
		if u.Op != c.op || paths(u) != c.path || u.Kind != c.kind || u.Operand != c.operand || u.In != c.in {
			t.Errorf("%s: %s operand %d path %q kind %s in %v; want %s %d %q %s %v", c.param, u.Op, u.Operand, paths(u), u.Kind, u.In, c.op, c.operand, c.path, c.kind, c.in)
		}
		if c.kind == KindLinear && (u.Layer.T != c.t || u.Layer.D != c.d || u.Layer.P != c.pp) {
			t.Errorf("%s: T %d D %d p %d, want %d %d %d", c.param, u.Layer.T, u.Layer.D, u.Layer.P, c.t, c.d, c.pp)
		}
	}
	// Grouped convs: depthwise 3×3 over 16 channels is p=1, D=9 per group.
	mob := plan("mobilenet")
	l := use(mob, "features.1.conv.0.0.weight").Layer
	if l.Groups != 16 || l.P != 1 || l.D != 9 || l.T != 256 || l.Decision != Instantiate {
		t.Errorf("depthwise conv: %+v", l)
	}
}

func TestSelection(t *testing.T) {
	plan := func(train, freeze string) *Plan {
		o := Options{PlanOptions: PlanOptions{InputShape: []int64{3, 32, 32}, Batch: 4}}
		if train != "" {
			o.Train = regexp.MustCompile(train)
		}
		if freeze != "" {
			o.Freeze = regexp.MustCompile(freeze)
		}
		p, err := Prepare(loadFixture(t, "vit"), o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan(`^heads\.`, "")
	if p.Trainable.Tensors != 2 || p.Trainable.Scalars != 330 || len(p.Layers) != 1 || p.Layers[0].Param != "heads.head.weight" {
		t.Errorf("train only the head: %+v, layers %d", p.Trainable, len(p.Layers))
	}
	if r := p.Param("class_token").Reason; !strings.Contains(r, "not selected by --train") {
		t.Errorf("class_token reason %q", r)
	}
	// Node names select onnx::MatMul_* weights by module path.
	p = plan("", "encoder_layer_0")
	if p.Param("onnx::MatMul_367").Trainable() || !p.Param("onnx::MatMul_370").Trainable() {
		t.Error("--freeze encoder_layer_0 should freeze layer 0's in_proj (onnx::MatMul_367) and only it")
	}
	if p.Param("encoder.layers.encoder_layer_0.ln_1.weight").Trainable() {
		t.Error("layer 0 LayerNorm weight not frozen")
	}
	// Freeze wins over train.
	p = plan("heads", "bias")
	if p.Trainable.Tensors != 1 {
		t.Errorf("train heads, freeze biases: %d trainable tensors", p.Trainable.Tensors)
	}
	// Frozen parameters become constants; trainable ones share storage.
	g := loadFixture(t, "vit")
	p, err := Analyze(g, PlanOptions{InputShape: []int64{3, 32, 32}, Batch: 4, Train: regexp.MustCompile("head")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(g, 4)
	if err != nil {
		t.Fatal(err)
	}
	params := 0
	for _, v := range c.Initializers {
		if v.IsParam() && c.Values[v.Name] == v {
			params++
		}
	}
	if params != 2 {
		t.Errorf("compiled graph has %d parameters, want the head's 2", params)
	}
	if c.Values["heads.head.weight"].Const != g.Values["heads.head.weight"].Const {
		t.Error("trainable tensor not shared with the exportable graph")
	}
	if len(c.Nodes) >= 117 {
		t.Errorf("%d nodes: nothing folded behind the frozen parameters", len(c.Nodes))
	}
}

// sharedModel reads W in two Gemms (weight sharing), B through a
// Transpose, S through a Sigmoid and V through a Floor.
func sharedModel(t *testing.T) *graph.Graph {
	return newMB().input("x", "N", 4).output("y", "N", 4).
		init("W", []int64{4, 4}).init("B", []int64{4, 4}).init("S", []int64{4}).init("U", []int64{4}).init("V", []int64{4}).
		node("Gemm", "fc1", []string{"x", "W"}, []string{"h"}, attrInt("transB", 1)).
		node("Relu", "relu", []string{"h"}, []string{"r"}).
		node("Gemm", "fc2", []string{"r", "W"}, []string{"h2"}, attrInt("transB", 1)).
		node("Transpose", "tb", []string{"B"}, []string{"bt"}).
		node("MatMul", "mm", []string{"h2", "bt"}, []string{"h3"}).
		node("Sigmoid", "sig", []string{"S"}, []string{"ss"}).
		node("Mul", "scale", []string{"h3", "ss"}, []string{"h4"}).
		node("Floor", "floor", []string{"V"}, []string{"vf"}).
		node("Add", "shift", []string{"h4", "vf"}, []string{"y"}).build(t)
}

func TestSharingAndPaths(t *testing.T) {
	p, err := Analyze(sharedModel(t), PlanOptions{InputShape: []int64{4}, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := p.Param("W")
	if !w.Shared || w.Kind != KindLinear || len(w.Uses) != 2 || !strings.Contains(w.Reason, "instantiated and summed") {
		t.Fatalf("W: %+v", w)
	}
	for _, u := range w.Uses {
		if u.Layer.Decision != Instantiate || !u.Layer.Shared {
			t.Errorf("shared use %s: %+v", u.Node, u.Layer)
		}
	}
	if b := p.Param("B"); b.Kind != KindLinear || len(b.Uses[0].Path) != 1 || b.Uses[0].Path[0].Op != "Transpose" || b.Uses[0].Layer.Decision != Ghost {
		t.Errorf("B behind a Transpose: %+v", b)
	}
	if b := p.Param("B"); b.Uses[0].Transform {
		t.Errorf("B behind a Transpose is computed: %+v", b.Uses[0])
	}
	if s := p.Param("S"); s.Kind != KindElementwise || !s.Uses[0].Transform || len(s.Uses[0].Path) != 1 || s.Uses[0].Path[0].Op != "Sigmoid" {
		t.Errorf("S behind a Sigmoid: %+v", s)
	}
	if v := p.Param("V"); v.Kind != KindFrozen || !strings.Contains(v.Reason, "transformed by Floor floor") {
		t.Errorf("V behind a Floor: %+v", v)
	}
	if u := p.Param("U"); u.Kind != KindFrozen || !strings.Contains(u.Reason, "no node") {
		t.Errorf("unused U: %+v", u)
	}
	// Ghost mode must instantiate the shared uses: its transient is pD.
	for _, m := range p.Memory {
		if m.Mode == ModeGhost && m.Transient != 4*2*16 {
			t.Errorf("ghost transient %d, want 4·B·pD = %d", m.Transient, 4*2*16)
		}
	}
	p, err = Analyze(sharedModel(t), PlanOptions{InputShape: []int64{4}, Batch: 2, Shared: SharedFreeze})
	if err != nil {
		t.Fatal(err)
	}
	if w := p.Param("W"); w.Kind != KindFrozen || !strings.Contains(w.Reason, "shared") {
		t.Errorf("--shared freeze: %+v", w)
	}
}

// TestMixingIsAProblem: resnet_train as exported computes batch statistics;
// analysed without the BatchNorm rewrite, its BN parameters are frozen and
// the plan reports that samples interact.
func TestMixingIsAProblem(t *testing.T) {
	p, err := Analyze(loadFixture(t, "resnet_train"), PlanOptions{InputShape: []int64{3, 32, 32}, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	if p.Err() == nil || !strings.Contains(p.Problems[0], "batch statistics") {
		t.Fatalf("problems %v", p.Problems)
	}
	if r := p.Param("bn1.weight").Reason; !strings.Contains(r, "samples interact") {
		t.Errorf("bn1.weight: %q", r)
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		t, d, p int64
		pr      Priority
		want    Decision
	}{
		{784, 2304, 512, PriorityMemory, Instantiate}, // VGG11 conv5: 1.23e6 vs 1.18e6
		{784, 4608, 512, PriorityMemory, Ghost},       // conv6
		{1, 1, 2, PriorityMemory, Instantiate},        // tie: 2 = 2
		{1, 25088, 4096, PrioritySpeed, Ghost},        // fc9: 2(D+p+1)−1 ≪ 4pD
		{50176, 27, 64, PrioritySpeed, Instantiate},   // conv1
		{10, 16, 16, PriorityMemory, Ghost},           // 200 < 256
		{10, 16, 16, PrioritySpeed, Instantiate},      // 2·100·33−1 = 6599 ≥ 2·11·256 = 5632
	}
	for _, c := range cases {
		if got, why := Decide(c.t, c.d, c.p, c.pr); got != c.want || why == "" {
			t.Errorf("Decide(T=%d, D=%d, p=%d, %s) = %s (%s), want %s", c.t, c.d, c.p, c.pr, got, why, c.want)
		}
	}
}

func TestAnalyzeErrors(t *testing.T) {
	g := loadFixture(t, "cnn")
	for _, o := range []PlanOptions{
		{InputShape: []int64{1, 28, 28}, Batch: 0},
		{InputShape: []int64{1, 28, 0}, Batch: 2},
		{InputShape: []int64{3, 28, 28}, Batch: 2},
		{InputShape: []int64{1, 28, 28}, Batch: 2, Priority: "fast"},
		{InputShape: []int64{1, 28, 28}, Batch: 2, Shared: "sum"},
	} {
		if _, err := Analyze(g, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if _, err := Prepare(loadFixture(t, "cnn"), Options{PlanOptions: PlanOptions{InputShape: []int64{1, 28, 28}, Batch: 2}, NumClasses: -1}); err == nil {
		t.Error("negative class count accepted")
	}
	if _, err := Prepare(loadFixture(t, "cnn"), Options{PlanOptions: PlanOptions{InputShape: []int64{1, 28, 28}, Batch: 2}, BN: BNOptions{Mode: "batch"}}); err == nil {
		t.Error("unknown BN mode accepted")
	}
	// A batch of 1 is planned like any other (the analysis runs at 2).
	p, err := Analyze(g, PlanOptions{InputShape: []int64{1, 28, 28}, Batch: 1})
	if err != nil || len(p.Layers) != 4 || p.Layers[2].T != 1 {
		t.Errorf("batch 1: %v, %+v", err, p)
	}
}

// TestTransformedParameters: weights computed from parameters before they
// meet the batch are trained through the computation: weight
// standardization with a gain (every route computes), a weight of which
// one route copies the parameter and another computes (the use is
// computed), and a chain of diamonds whose routes double at each level
// (walked once per value, not once per route). A table a layer of
// parameters transforms (a buffer) is kept constant.
func TestTransformedParameters(t *testing.T) {
	b := newMB().input("x", "N", 3, 6, 6).output("y", "N", 5).
		init("w", []int64{4, 3, 3, 3}).init("gain", []int64{4, 1, 1, 1}).
		node("ReduceMean", "mu", []string{"w"}, []string{"mu"}, attrInts("axes", 1, 2, 3)).
		node("Sub", "dev", []string{"w", "mu"}, []string{"d"}).
		node("Mul", "sq", []string{"d", "d"}, []string{"d2"}).
		node("ReduceMean", "var", []string{"d2"}, []string{"var"}, attrInts("axes", 1, 2, 3)).
		node("Sqrt", "sd", []string{"var"}, []string{"sd"}).
		node("Div", "std", []string{"d", "sd"}, []string{"wn"}).
		node("Mul", "gained", []string{"wn", "gain"}, []string{"ws"}).
		node("Conv", "conv", []string{"x", "ws"}, []string{"h"}).                  // (N,4,4,4)
		node("Flatten", "flat", []string{"h"}, []string{"f"}, attrInt("axis", 1)). // (N,64)
		init("v", []int64{2, 64}).
		node("Identity", "vi", []string{"v"}, []string{"vi"}).
		node("Exp", "ev", []string{"v"}, []string{"ve"}).
		node("Concat", "cat", []string{"vi", "ve"}, []string{"vc"}, attrInt("axis", 0)). // (4,64)
		node("Gemm", "fc", []string{"f", "vc"}, []string{"h2"}, attrInt("transB", 1))
	// u, then 40 levels of u ← u + u·u: 2⁴⁰ routes to the head.
	b.init("u", []int64{4, 5})
	prev := "u"
	for k := 0; k < 40; k++ {
		sq, sum := fmt.Sprintf("sq%d", k), fmt.Sprintf("sum%d", k)
		b.node("Mul", sq, []string{prev, prev}, []string{sq}).node("Add", sum, []string{prev, sq}, []string{sum})
		prev = sum
	}
	// A table (a buffer) transformed by a layer whose weight w1 is a
	// parameter, then added (Swin V2's coordinates and position-bias MLP).
	b.init("tab", []int64{4, 2}).init("w1", []int64{5, 2}).
		node("Gemm", "mlp", []string{"tab", "w1"}, []string{"t1"}, attrInt("transB", 1)). // (4,5)
		node("ReduceMean", "tmean", []string{"t1"}, []string{"t2"}, attrInts("axes", 0), attrInt("keepdims", 0))
	g := b.node("MatMul", "head", []string{"h2", prev}, []string{"y0"}).
		node("Add", "bias", []string{"y0", "t2"}, []string{"y"}).build(t)
	p, err := Analyze(g, PlanOptions{InputShape: []int64{3, 6, 6}, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if tab := p.Param("tab"); tab.Kind != KindFrozen || !strings.Contains(tab.Reason, "read as the input of Gemm mlp, whose weight is a parameter") {
		t.Errorf("tab: %+v", tab)
	}
	if w1 := p.Param("w1"); w1.Kind != KindElementwise || len(w1.Uses) != 1 || !w1.Uses[0].Transform || w1.Uses[0].Op != "Add" {
		t.Errorf("w1: %+v", w1)
	}
	for _, name := range []string{"w", "gain", "v", "u"} {
		prm := p.Param(name)
		if prm.Kind != KindLinear || len(prm.Uses) != 1 {
			t.Errorf("%s: %+v", name, prm)
			continue
		}
		u := prm.Uses[0]
		if !u.Transform || u.GhostAllowed() || !u.Layer.Transformed || !u.Layer.Mapped || u.Layer.Decision != Instantiate ||
			!strings.Contains(u.Layer.Reason, "vector-Jacobian product") {
			t.Errorf("%s: %+v, layer %+v", name, u, u.Layer)
		}
	}
	// v's first route copies it (Concat): the use is computed all the same.
	if u := p.Param("v").Uses[0]; len(u.Path) != 2 || u.Path[0].Op != "Identity" || u.Path[1].Op != "Concat" {
		t.Errorf("v's path: %+v", u.Path)
	}
	// w's computation: w, its mean and variance (4 each), its deviation,
	// square, standard deviation (4), standardized and gained weights.
	if got := p.Param("w").Uses[0].ComputeFloats; got != 108+4+108+108+4+4+108+108 {
		t.Errorf("w's computation holds %d floats", got)
	}
	// The sub-plans' values and gradients count in every DP mode, once
	// and lifted over the 4 samples (small: all of them in one pass).
	var sum int64
	with := p.MemoryAt(4)
	for _, prm := range p.Params {
		for _, u := range prm.Uses {
			sum += u.ComputeFloats
			u.ComputeFloats = 0
		}
	}
	for k, m := range p.MemoryAt(4) {
		if d := with[k].PerSample - m.PerSample; d != 8*(1+4)*sum && m.Mode != ModeNonDP || d != 0 && m.Mode == ModeNonDP {
			t.Errorf("%s: the sub-plans add %d bytes, want %d", m.Mode, d, 8*(1+4)*sum)
		}
	}
	if p.Trainable.Tensors != 5 || p.Frozen.Tensors != 1 {
		t.Errorf("%d trainable, %d frozen tensors", p.Trainable.Tensors, p.Frozen.Tensors)
	}
}
