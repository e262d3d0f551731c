package rewrite

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func TestGroupsFor(t *testing.T) {
	cases := []struct {
		c, g  int64
		rule  GroupRule
		want  int64
		error bool
	}{
		{64, 16, "", 16, false},
		{24, 16, GroupsDivisor, 12, false},
		{24, 16, GroupsGCD, 8, false},
		{24, 16, GroupsError, 0, true},
		{8, 16, GroupsDivisor, 8, false},
		{3, 16, GroupsDivisor, 3, false},
		{7, 16, GroupsGCD, 1, false},
		{7, 4, GroupsDivisor, 1, false},
		{64, 0, "", 0, true},
		{0, 16, "", 0, true},
		{24, 16, "nearest", 0, true},
	}
	for _, c := range cases {
		got, err := GroupsFor(c.c, c.g, c.rule)
		if (err != nil) != c.error || got != c.want {
			t.Errorf("GroupsFor(%d, %d, %q) = %d, %v; want %d (error %v)", c.c, c.g, c.rule, got, err, c.want, c.error)
		}
	}
}

// resnetTrainLogits evaluates resnet_train on its golden input with BN in
// inference mode (running statistics) unless gn says otherwise.
func evalFixture(t *testing.T, g *graph.Graph, name string, gn map[string]int64) *tens {
	t.Helper()
	gold := readNPZ(t, "../testdata/golden/"+name+".npz")
	x := gold["input"]
	c := g.Clone()
	if err := c.InferShapes(map[string][]int64{c.Inputs[0].Name: {int64(x.shape[0]), int64(x.shape[1]), int64(x.shape[2]), int64(x.shape[3])}}); err != nil {
		t.Fatal(err)
	}
	return evaluate(t, c, map[string]*tens{c.Inputs[0].Name: x}, gn)["logits"]
}

// TestFreezeIsExact: --bn freeze folds every BatchNorm of resnet_train into
// its Conv; the rewritten model computes the eval-mode logits of PyTorch,
// has the structure (and parameter names) of resnet_eval, which PyTorch's
// fuse_conv_bn_eval produced, and keeps its dynamic batch axis.
func TestFreezeIsExact(t *testing.T) {
	gold := readNPZ(t, "../testdata/golden/resnet_train.npz")
	orig := loadFixture(t, "resnet_train")
	ref := evalFixture(t, orig, "resnet_train", nil)
	if d := ref.maxAbsDiff(gold["logits_eval"]); d > 1e-4 {
		t.Fatalf("reference evaluator vs PyTorch eval-mode logits: max abs diff %g", d)
	}

	g := loadFixture(t, "resnet_train")
	changes, err := RewriteBatchNorm(g, BNOptions{Mode: BNFreeze}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 12 {
		t.Fatalf("%d changes, want 12", len(changes))
	}
	for _, c := range changes {
		if !strings.Contains(c.Action, "folded into Conv") {
			t.Errorf("not folded: %s", c)
		}
	}
	got := evalFixture(t, g, "resnet_train", nil)
	if d := got.maxAbsDiff(ref); d > 1e-5*ref.maxAbs() {
		t.Errorf("frozen model vs original in eval mode: max abs diff %g", d)
	}
	if d := got.maxAbsDiff(gold["logits_eval"]); d > 1e-4 {
		t.Errorf("frozen model vs PyTorch eval-mode logits: max abs diff %g", d)
	}

	// Same structure and names as the model PyTorch fused itself.
	eval := loadFixture(t, "resnet_eval")
	if a, b := opHistogram(g), opHistogram(eval); a != b {
		t.Errorf("operators %s, resnet_eval has %s", a, b)
	}
	if a, b := paramShapes(g), paramShapes(eval); a != b {
		t.Errorf("parameters\n%s\nresnet_eval has\n%s", a, b)
	}

	// Exported with the dynamic batch, and valid at another batch.
	rt := roundTrip(t, g)
	if p := rt.Inputs[0].Shape[0].Param; p != "batch" {
		t.Errorf("exported input batch dim %q, want symbolic", p)
	}
	if d := evalFixture(t, rt, "resnet_train", nil).maxAbsDiff(got); d != 0 {
		t.Errorf("exported model differs by %g", d)
	}
	if _, err := StaticShapes(rt, []int64{3, 32, 32}, 3); err != nil {
		t.Error(err)
	}
}

func opHistogram(g *graph.Graph) string {
	c := map[string]int{}
	for _, n := range g.Nodes {
		c[n.OpType]++
	}
	var s []string
	for _, k := range sortedKeys(c) {
		s = append(s, k+"×"+string(rune('0'+c[k]/10))+string(rune('0'+c[k]%10)))
	}
	return strings.Join(s, " ")
}

func paramShapes(g *graph.Graph) string {
	var s []string
	for _, v := range g.Initializers {
		if v.IsParam() {
			s = append(s, v.Name+v.Shape.String())
		}
	}
	sort.Strings(s)
	return strings.Join(s, "\n")
}

// TestGroupNormDecomposition: the opset-14 GroupNorm decomposition computes
// group normalization with the BN's affine parameters, checked against a
// direct GroupNorm in the reference evaluator, on resnet_train (8, 16, 32
// and 64 channels, 16 groups requested: 8 channels get 8 groups).
func TestGroupNormDecomposition(t *testing.T) {
	orig := loadFixture(t, "resnet_train")
	gn := map[string]int64{}
	for _, n := range orig.Nodes {
		if n.OpType == "BatchNormalization" {
			gr, err := GroupsFor(int64(n.Inputs[1].Const.Len()), 16, GroupsDivisor)
			if err != nil {
				t.Fatal(err)
			}
			gn[nodeLabel(n)] = gr
		}
	}
	want := evalFixture(t, orig, "resnet_train", gn)

	g := loadFixture(t, "resnet_train")
	shapes, err := StaticShapes(g, []int64{3, 32, 32}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RewriteBatchNorm(g, BNOptions{Mode: BNGroupNorm}, shapes); err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.OpType == "BatchNormalization" {
			t.Fatalf("BatchNormalization left: %s", nodeLabel(n))
		}
	}
	if _, ok := g.Values["bn1.running_mean"]; ok {
		t.Error("running statistics not removed")
	}
	if s := g.Values["bn1.weight"].Shape.String(); s != "(8,1,1)" {
		t.Errorf("GroupNorm scale shape %s, want (8,1,1)", s)
	}
	// Trained as one GroupNormalization node each, exported as the
	// decomposition (ExportGraph), the training graph left as it was.
	native := 0
	for _, n := range g.Nodes {
		if ownGroupNorm(n) {
			native++
		}
	}
	e := exported(t, g)
	for _, n := range e.Nodes {
		if n.OpType == "GroupNormalization" {
			t.Fatalf("exported graph keeps %s", nodeLabel(n))
		}
	}
	if native == 0 || len(e.Nodes) <= len(g.Nodes) {
		t.Errorf("%d GroupNormalization nodes trained; the export has %d nodes against the training graph's %d", native, len(e.Nodes), len(g.Nodes))
	}
	rt := roundTrip(t, e)
	got := evalFixture(t, rt, "resnet_train", nil)
	if d := got.maxAbsDiff(want); d > 1e-9*want.maxAbs() {
		t.Errorf("decomposition vs direct GroupNorm: max abs diff %g", d)
	}
	// Without shapes the rank comes from the producing Conv's weight.
	g2 := loadFixture(t, "resnet_train")
	if _, err := RewriteBatchNorm(g2, BNOptions{Mode: BNGroupNorm}, nil); err != nil {
		t.Fatal(err)
	}
	if d := evalFixture(t, exported(t, g2), "resnet_train", nil).maxAbsDiff(got); d != 0 {
		t.Errorf("rewrite without static shapes differs by %g", d)
	}
}

// bnModel is x → BatchNorm → y, optionally after a Conv whose output also
// feeds a second output (so that the BN cannot be folded into it).
func bnModel(t *testing.T, afterConv bool) *graph.Graph {
	b := newMB().input("x", "N", 3, 5, 5).output("y", "N", 3, 5, 5).
		init("s", []int64{3}, 0.5, 1.5, 2).init("b", []int64{3}, 0.1, -0.2, 0.3).
		init("mu", []int64{3}, 0.3, -0.1, 0.2).init("var", []int64{3}, 1.2, 0.7, 0.9)
	in := "x"
	if afterConv {
		b.init("w", []int64{3, 3, 3, 3}).node("Conv", "conv", []string{"x", "w"}, []string{"c"}, attrInts("pads", 1, 1, 1, 1)).
			node("Relu", "relu", []string{"c"}, []string{"r"}).output("r", "N", 3, 5, 5)
		in = "c"
	}
	b.node("BatchNormalization", "bn", []string{in, "s", "b", "mu", "var"}, []string{"y"})
	return b.build(t)
}

// TestFreezeUnfolded: a BN that cannot be folded becomes Mul + Add with the
// fixed scale and shift, and stays exact.
func TestFreezeUnfolded(t *testing.T) {
	for _, afterConv := range []bool{false, true} {
		orig := bnModel(t, afterConv)
		g := bnModel(t, afterConv)
		ch, err := RewriteBatchNorm(g, BNOptions{Mode: BNFreeze}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch) != 1 || !strings.Contains(ch[0].Action, "Mul(s) + Add(b)") {
			t.Fatalf("changes %v", ch)
		}
		x := randInput(2, 3, 5, 5)
		run := func(g *graph.Graph) map[string]*tens {
			c := g.Clone()
			if err := c.InferShapes(map[string][]int64{"x": {2, 3, 5, 5}}); err != nil {
				t.Fatal(err)
			}
			return evaluate(t, c, map[string]*tens{"x": x}, nil)
		}
		want, got := run(orig), run(roundTrip(t, g))
		for k := range want {
			if d := got[k].maxAbsDiff(want[k]); d > 1e-6 {
				t.Errorf("afterConv=%v: output %s differs by %g", afterConv, k, d)
			}
		}
	}
}

func TestBatchNormErrors(t *testing.T) {
	g := bnModel(t, true)
	if _, err := RewriteBatchNorm(g, BNOptions{Mode: "keep"}, nil); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, err := RewriteBatchNorm(g, BNOptions{Mode: BNGroupNorm, Groups: 2, Rule: GroupsError}, nil); err == nil || !strings.Contains(err.Error(), "not divisible") {
		t.Errorf("3 channels in 2 groups with rule error: %v", err)
	}
	// The rank of a computed value is unknown without static shapes.
	b := newMB().input("x", "N", 3, 5, 5).output("y", "N", 3, 5, 5).
		init("s", []int64{3}).init("b", []int64{3}).init("mu", []int64{3}).init("var", []int64{3}, 1).
		node("Relu", "r", []string{"x"}, []string{"rx"}).
		node("BatchNormalization", "bn", []string{"rx", "s", "b", "mu", "var"}, []string{"y"})
	if _, err := RewriteBatchNorm(b.build(t), BNOptions{Mode: BNFreeze}, nil); err == nil || !strings.Contains(err.Error(), "rank") {
		t.Errorf("unknown rank: %v", err)
	}
	// A BN whose scale is computed cannot be rewritten.
	b = newMB().input("x", "N", 3, 5, 5).output("y", "N", 3, 5, 5).
		init("s0", []int64{3}).init("b", []int64{3}).init("mu", []int64{3}).init("var", []int64{3}, 1).
		node("Relu", "r", []string{"s0"}, []string{"s"}).
		node("BatchNormalization", "bn", []string{"x", "s", "b", "mu", "var"}, []string{"y"})
	if _, err := RewriteBatchNorm(b.build(t), BNOptions{Mode: BNFreeze}, nil); err == nil || !strings.Contains(err.Error(), "not an initializer") {
		t.Errorf("computed scale: %v", err)
	}
}

// TestGroupNormOpset18: from opset 18 ReduceMean takes its axes as an
// input; the decomposition follows the model's opset.
func TestGroupNormOpset18(t *testing.T) {
	build := func(opset int64) *graph.Graph {
		b := newMB().input("x", "N", 4, 3, 3).output("y", "N", 4, 3, 3).
			init("s", []int64{4}, 0.5, 1.5).init("b", []int64{4}, 0.1, -0.2).
			init("mu", []int64{4}, 0.3).init("var", []int64{4}, 1.2).
			node("BatchNormalization", "bn", []string{"x", "s", "b", "mu", "var"}, []string{"y"})
		b.opset = opset
		return b.build(t)
	}
	x := randInput(2, 4, 3, 3)
	var outs []*tens
	for _, opset := range []int64{14, 18} {
		g := build(opset)
		if _, err := RewriteBatchNorm(g, BNOptions{Mode: BNGroupNorm, Groups: 2}, nil); err != nil {
			t.Fatal(err)
		}
		e := exported(t, g)
		for _, n := range e.Nodes {
			if n.OpType == "ReduceMean" && (len(n.Inputs) == 2) != (opset >= 18) {
				t.Errorf("opset %d: ReduceMean with %d inputs", opset, len(n.Inputs))
			}
		}
		c := roundTrip(t, e).Clone()
		if err := c.InferShapes(map[string][]int64{"x": {2, 4, 3, 3}}); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, evaluate(t, c, map[string]*tens{"x": x}, nil)["y"])
	}
	want := evaluate(t, func() *graph.Graph {
		c := build(14).Clone()
		if err := c.InferShapes(map[string][]int64{"x": {2, 4, 3, 3}}); err != nil {
			t.Fatal(err)
		}
		return c
	}(), map[string]*tens{"x": x}, map[string]int64{"bn": 2})["y"]
	for i, o := range outs {
		if d := o.maxAbsDiff(want); d > 1e-9 {
			t.Errorf("case %d: differs from GroupNorm by %g", i, d)
		}
	}
}

// TestExportGraphKeepsNativeGroupNorm: a model's own GroupNormalization
// (opset 18's per-group scale and shift, one-dimensional) is valid ONNX
// and stays as it is in the export; only the rewrite's nodes (scale and
// shift of shape (C,1,…,1)) are written as the decomposition.
func TestExportGraphKeepsNativeGroupNorm(t *testing.T) {
	b := newMB().input("x", "N", 4, 3, 3).output("y", "N", 4, 3, 3).
		init("s", []int64{2}).init("b", []int64{2}).
		node("GroupNormalization", "gn", []string{"x", "s", "b"}, []string{"y"}, attrInt("num_groups", 2))
	b.opset = 18
	g := b.build(t)
	e, err := ExportGraph(g)
	if err != nil {
		t.Fatal(err)
	}
	if e != g {
		t.Error("a model's own GroupNormalization was rewritten for the export")
	}
	// The rewrite's own node beside it is expanded, the model's kept.
	b = newMB().input("x", "N", 4, 3, 3).output("y", "N", 4, 3, 3).
		init("s", []int64{2}).init("b", []int64{2}).init("s2", []int64{4, 1, 1}).init("b2", []int64{4, 1, 1}).
		node("GroupNormalization", "gn", []string{"x", "s", "b"}, []string{"h"}, attrInt("num_groups", 2)).
		node("GroupNormalization", "bn/groupnorm/GroupNormalization", []string{"h", "s2", "b2"}, []string{"y"},
			attrInt("num_groups", 2), attrFloat("epsilon", 1e-5))
	b.opset = 18
	g = b.build(t)
	if e, err = ExportGraph(g); err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, n := range e.Nodes {
		if n.OpType == "GroupNormalization" {
			kept = append(kept, n.Name)
		}
	}
	if len(kept) != 1 || kept[0] != "gn" {
		t.Errorf("GroupNormalization nodes after the export: %v, want [gn]", kept)
	}
	if len(g.Nodes) != 2 {
		t.Errorf("the training graph changed: %d nodes", len(g.Nodes))
	}
}

// TestBatchNormOnParams: a BatchNormalization of a parameter (weight
// standardization: no sample in it) is written as its computation, in
// training mode with the parameter's own statistics over every axis but
// the channels', in inference mode with the given ones, in either --bn
// mode; what it computes is the definition's.
func TestBatchNormOnParams(t *testing.T) {
	const eps = 1e-3
	w := []float32{0.5, -1, 2, 0.25, 1.5, 0.75, -0.5, 3, -2, 1, 0.1, -0.3} // (3, 4): 4 channels
	s, bias, mu, va := []float32{1, 2, 0.5, -1}, []float32{0, 0.1, -0.2, 0.3}, []float32{0.1, 0.2, -0.1, 0}, []float32{1, 0.5, 2, 0.25}
	for _, training := range []int64{1, 0} {
		for _, mode := range []BNMode{BNGroupNorm, BNFreeze} {
			b := newMB().input("x", "N", 3).output("y", "N", 4).
				init("w", []int64{3, 4}, w...).init("s", []int64{4}, s...).init("b", []int64{4}, bias...).
				init("mu", []int64{4}, mu...).init("va", []int64{4}, va...).
				node("BatchNormalization", "bn", []string{"w", "s", "b", "mu", "va"}, []string{"wn"}, attrFloat("epsilon", eps), attrInt("training_mode", training)).
				node("Gemm", "fc", []string{"x", "wn"}, []string{"y"})
			b.opset = 15
			g := b.build(t)
			ch, err := RewriteBatchNorm(g, BNOptions{Mode: mode}, nil)
			if err != nil || len(ch) != 1 || !strings.Contains(ch[0].Reason, "normalizes parameters") {
				t.Fatalf("training %d, %s: %v %v", training, mode, ch, err)
			}
			x := &tens{shape: []int{2, 3}, d: []float64{1, 2, 3, -1, 0.5, 2}}
			p, err := runtime.CompileForBatch(g.Clone(), 2, []int64{3}, &runtime.Options{ForwardOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			in, _ := p.Input(0)
			for i, v := range x.d {
				in[i] = float32(v)
			}
			if err := p.Forward(); err != nil {
				t.Fatal(err)
			}
			out, _ := p.Output(0)
			got := &tens{shape: []int{2, 4}}
			for _, v := range out {
				got.d = append(got.d, float64(v))
			}
			// The definition.
			wn := make([]float64, 12)
			for c := range 4 {
				m, v := float64(mu[c]), float64(va[c])
				if training == 1 {
					m, v = meanVar(w[c], w[4+c], w[8+c])
				}
				for r := range 3 {
					wn[r*4+c] = (float64(w[r*4+c])-m)/math.Sqrt(v+eps)*float64(s[c]) + float64(bias[c])
				}
			}
			want := &tens{shape: []int{2, 4}, d: make([]float64, 8)}
			for i := range 2 {
				for c := range 4 {
					for r := range 3 {
						want.d[i*4+c] += x.d[i*3+r] * wn[r*4+c]
					}
				}
			}
			if d := got.maxAbsDiff(want); d > 1e-5*want.maxAbs() {
				t.Errorf("training %d, %s: %v, want %v", training, mode, got.d, want.d)
			}
		}
	}
}

// TestWeightStandardizationRows: a training-mode BatchNormalization of a
// weight reshaped to (1, C, K) — timm's StdConv2d — is one
// LayerNormalization of the C rows, then γ and β where they are not the
// constants 1 and 0; it computes the definition, and a model whose opset
// has no LayerNormalization (before 17) gets the decomposition back on
// export, computing the same.
func TestWeightStandardizationRows(t *testing.T) {
	const eps = 1e-3
	w := []float32{0.5, -1, 2, 0.25, 1.5, 0.75, -0.5, 3, -2, 1, 0.1, -0.3} // (4, 3): 4 channels of 3
	for _, opset := range []int64{15, 17} {
		for _, affine := range []bool{false, true} {
			name := fmt.Sprintf("opset %d, affine %v", opset, affine)
			s, bias := []float32{1, 1, 1, 1}, []float32{0, 0, 0, 0} // F.batch_norm(w, None, None, …)
			b := newMB().input("x", "N", 3).output("y", "N", 4).init("w", []int64{4, 3}, w...).
				ints("r3", 1, 4, 3).ints("r2", 4, 3)
			if affine {
				s, bias = []float32{1, 2, 0.5, -1}, []float32{0, 0.1, -0.2, 0.3}
				b.init("s", []int64{4}, s...).init("b", []int64{4}, bias...)
			} else {
				b.node("Constant", "s", nil, []string{"s"}, attrTensor("value", floatTensor(graph.Float32, []int64{4}, []float64{1, 1, 1, 1}))).
					node("Constant", "b", nil, []string{"b"}, attrTensor("value", floatTensor(graph.Float32, []int64{4}, []float64{0, 0, 0, 0})))
			}
			b.init("mu", []int64{4}).init("va", []int64{4}, 1).
				node("Reshape", "r", []string{"w", "r3"}, []string{"w3"}).
				node("BatchNormalization", "bn", []string{"w3", "s", "b", "mu", "va"}, []string{"wn3"}, attrFloat("epsilon", eps), attrInt("training_mode", 1)).
				node("Reshape", "back", []string{"wn3", "r2"}, []string{"wn"}).
				node("Gemm", "fc", []string{"x", "wn"}, []string{"y"}, attrInt("transB", 1))
			b.opset = opset
			g := b.build(t)
			if err := g.InferShapes(map[string][]int64{"x": {2, 3}}); err != nil {
				t.Fatal(err)
			}
			if _, err := RewriteBatchNorm(g, BNOptions{Mode: BNGroupNorm}, nil); err != nil {
				t.Fatal(err)
			}
			ops := map[string]int{}
			for _, n := range g.Nodes {
				ops[n.OpType]++
			}
			if ops["LayerNormalization"] != 1 || ops["ReduceMean"] != 0 || (ops["Mul"] == 1) != affine || (ops["Add"] == 1) != affine {
				t.Errorf("%s: operators %v", name, ops)
			}
			// The definition: channel c's three weights normalized.
			x := []float64{1, 2, 3, -1, 0.5, 2}
			want := make([]float64, 8)
			for c := range 4 {
				m, v := meanVar(w[c*3 : c*3+3]...)
				for r := range 3 {
					wn := (float64(w[c*3+r])-m)/math.Sqrt(v+eps)*float64(s[c]) + float64(bias[c])
					for i := range 2 {
						want[i*4+c] += x[i*3+r] * wn
					}
				}
			}
			ex, err := ExportGraph(g)
			if err != nil {
				t.Fatal(err)
			}
			lns := 0
			for _, n := range ex.Nodes {
				if n.OpType == "LayerNormalization" {
					lns++
				}
			}
			if (lns == 1) != (opset >= 17) {
				t.Errorf("%s: the export has %d LayerNormalization nodes", name, lns)
			}
			for _, gr := range []*graph.Graph{g, ex} {
				p, err := runtime.CompileForBatch(gr.Clone(), 2, []int64{3}, &runtime.Options{ForwardOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				in, _ := p.Input(0)
				for i, v := range x {
					in[i] = float32(v)
				}
				if err := p.Forward(); err != nil {
					t.Fatal(err)
				}
				out, _ := p.Output(0)
				for i, v := range out {
					if !(math.Abs(float64(v)-want[i]) <= 1e-5*(1+math.Abs(want[i]))) { // NaN fails too
						t.Errorf("%s: output %d = %v, want %v", name, i, v, want[i])
					}
				}
			}
		}
	}
}

// meanVar is the mean and biased variance of x.
func meanVar(x ...float32) (m, v float64) {
	for _, e := range x {
		m += float64(e) / float64(len(x))
	}
	for _, e := range x {
		d := float64(e) - m
		v += d * d / float64(len(x))
	}
	return m, v
}

// TestMovedStatistics: the training-form fixture (a TorchScript export in
// TrainingMode.TRAINING at PyTorch's momentum 0.1) moved its 12
// BatchNorms' statistics; an eval-mode BatchNorm and one exported at
// momentum 0 did not.
func TestMovedStatistics(t *testing.T) {
	for _, c := range []struct {
		path     string
		n        int
		momentum float64
	}{
		{"../testdata/models/resnet_train.onnx", 12, 0.1},
		{"../testdata/exports/transforms.onnx", 0, 0},
		{"../testdata/exports/bnfirst_b1.onnx", 0, 0},
		{"../testdata/models/cnn.onnx", 0, 0},
	} {
		m, err := onnx.Load(c.path)
		if err != nil {
			t.Fatal(err)
		}
		g, err := graph.FromONNX(m)
		if err != nil {
			t.Fatal(err)
		}
		n, mom := MovedStatistics(g)
		if n != c.n || math.Abs(mom-c.momentum) > 1e-6 {
			t.Errorf("%s: %d BatchNorms moved by %g, want %d by %g", c.path, n, mom, c.n, c.momentum)
		}
	}
}
