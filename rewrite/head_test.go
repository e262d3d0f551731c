package rewrite

import (
	"math"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

func TestReplaceHead(t *testing.T) {
	cases := []struct {
		fixture string
		heads   map[string][]int64 // weight → new shape
	}{
		{"cnn", map[string][]int64{"classifier.3.weight": {7, 32}}},
		{"vit", map[string][]int64{"heads.head.weight": {7, 32}}},
		// CrossViT averages two heads (Unsqueeze, Concat, ReduceMean).
		{"crossvit", map[string][]int64{"heads.0.weight": {7, 32}, "heads.1.weight": {7, 48}}},
		{"resnet_train", map[string][]int64{"fc.weight": {7, 64}}},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			g := loadFixture(t, c.fixture)
			changes, err := ReplaceHead(g, 7, 42)
			if err != nil {
				t.Fatal(err)
			}
			if len(changes) != len(c.heads) {
				t.Errorf("changes %v", changes)
			}
			for w, shape := range c.heads {
				v := g.Values[w]
				if got := v.Const.Shape; len(got) != 2 || got[0] != shape[0] || got[1] != shape[1] {
					t.Errorf("%s shape %v, want %v", w, got, shape)
				}
				bound := 1 / math.Sqrt(float64(shape[1]))
				var sum float64
				for _, x := range v.Const.F32 {
					if !(math.Abs(float64(x)) <= bound) { // NaN fails too
						t.Fatalf("%s: %g outside ±%g", w, x, bound)
					}
					sum += math.Abs(float64(x))
				}
				if mean := sum / float64(len(v.Const.F32)); mean < bound/4 || mean > 3*bound/4 {
					t.Errorf("%s: mean |w| %g for U(±%g)", w, mean, bound)
				}
				bias := g.Values[paramBase(w)+".bias"]
				if bias.Const.Len() != 7 {
					t.Errorf("bias shape %v", bias.Const.Shape)
				}
			}
			rt := roundTrip(t, g)
			if s := rt.Outputs[0].Shape; len(s) != 2 || s[0].Param != "batch" || s[1].Size != 7 {
				t.Errorf("declared output %v", s)
			}
			p, err := Prepare(rt, Options{PlanOptions: PlanOptions{InputShape: fixtureSample(c.fixture), Batch: 3}})
			if err != nil {
				t.Fatal(err)
			}
			c2, err := p.Compile(rt, 3)
			if err != nil {
				t.Fatal(err)
			}
			if s := c2.Outputs[0].Shape.String(); s != "(3,7)" {
				t.Errorf("inferred output %s", s)
			}
		})
	}
	// Same seed, same head; another seed, another.
	a, b, c := loadFixture(t, "cnn"), loadFixture(t, "cnn"), loadFixture(t, "cnn")
	for i, g := range []*graph.Graph{a, b, c} {
		if _, err := ReplaceHead(g, 5, uint64(i/2)); err != nil {
			t.Fatal(err)
		}
	}
	wa, wb, wc := a.Values["classifier.3.weight"].Const.F32, b.Values["classifier.3.weight"].Const.F32, c.Values["classifier.3.weight"].Const.F32
	if wa[0] != wb[0] || wa[0] == wc[0] {
		t.Errorf("seeding: %g %g %g", wa[0], wb[0], wc[0])
	}
}

func TestReplaceHeadMatMulAdd(t *testing.T) {
	g := newMB().input("x", "N", 6, 4).output("y", "N", 6, 3).
		init("W", []int64{4, 3}).init("b", []int64{3}).
		node("MatMul", "mm", []string{"x", "W"}, []string{"h"}).
		node("Add", "add", []string{"h", "b"}, []string{"y"}).build(t)
	if _, err := ReplaceHead(g, 5, 1); err != nil {
		t.Fatal(err)
	}
	if s := g.Values["W"].Const.Shape; s[0] != 4 || s[1] != 5 {
		t.Errorf("W %v", s)
	}
	if s := g.Values["b"].Const.Shape; s[0] != 5 {
		t.Errorf("b %v", s)
	}
	p, err := Analyze(g, PlanOptions{InputShape: []int64{6, 4}, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if l := p.Layers[0]; l.T != 6 || l.D != 4 || l.P != 5 {
		t.Errorf("token head %+v", l)
	}
}

func TestReplaceHeadErrors(t *testing.T) {
	if _, err := ReplaceHead(loadFixture(t, "cnn"), 0, 0); err == nil {
		t.Error("0 classes accepted")
	}
	noHead := newMB().input("x", "N", 3, 8, 8).output("y", "N", 4, 8, 8).init("w", []int64{4, 3, 1, 1}).
		node("Conv", "c", []string{"x", "w"}, []string{"y"}).build(t)
	if _, err := ReplaceHead(noHead, 3, 0); err == nil || !strings.Contains(err.Error(), "Conv") {
		t.Errorf("no head: %v", err)
	}
	passthrough := newMB().input("x", "N", 3).output("y", "N", 3).node("Relu", "r", []string{"x"}, []string{"y"}).build(t)
	if _, err := ReplaceHead(passthrough, 4, 0); err == nil {
		t.Error("no head in a Relu model")
	}
	shared := sharedModel(t)
	if _, err := ReplaceHead(shared, 3, 0); err == nil {
		t.Error("head behind Mul(Sigmoid) should not be found")
	}
	tied := newMB().input("x", "N", 4).output("y", "N", 4).init("W", []int64{4, 4}).
		node("Gemm", "fc1", []string{"x", "W"}, []string{"h"}).
		node("Gemm", "fc2", []string{"h", "W"}, []string{"y"}).build(t)
	if _, err := ReplaceHead(tied, 3, 0); err == nil || !strings.Contains(err.Error(), "shared") {
		t.Errorf("tied head: %v", err)
	}
}

// TestReplaceHeadConv: a pointwise convolution feeding (batch, classes)
// logits through channel-wise operators is a head — SqueezeNet's Conv →
// Relu → GlobalAveragePool → Flatten, S3D's Conv3d → ReduceMean over time
// and space — replaced by a fresh one; a wider kernel is not, and is kept
// where --num-classes names the model's own count.
func TestReplaceHeadConv(t *testing.T) {
	squeeze := newMB().input("x", "N", 3, 4, 4).output("y", "N", 10).init("w", []int64{10, 3, 1, 1}).init("b", []int64{10}).
		node("Conv", "final_conv", []string{"x", "w", "b"}, []string{"c"}).
		node("Relu", "r", []string{"c"}, []string{"h"}).
		node("GlobalAveragePool", "gap", []string{"h"}, []string{"p"}).
		node("Flatten", "f", []string{"p"}, []string{"y"}).build(t)
	s3d := newMB().input("x", "N", 8, 2, 3, 3).output("y", "N", 10).init("w", []int64{10, 8, 1, 1, 1}).init("b", []int64{10}).
		node("Conv", "classifier", []string{"x", "w", "b"}, []string{"c"}).
		node("ReduceMean", "mean", []string{"c"}, []string{"y"},
			&onnxpb.AttributeProto{Name: proto.String("axes"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: []int64{2, 3, 4}},
			&onnxpb.AttributeProto{Name: proto.String("keepdims"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}).build(t)
	for _, c := range []struct {
		name string
		g    *graph.Graph
		in   int64
		w    []int64
	}{{"squeezenet", squeeze, 3, []int64{5, 3, 1, 1}}, {"s3d", s3d, 8, []int64{5, 8, 1, 1, 1}}} {
		ch, err := ReplaceHead(c.g, 5, 1)
		if err != nil || len(ch) != 1 || !strings.Contains(ch[0].Action, "replaced the 10-class head by a fresh 5-class one") {
			t.Fatalf("%s: %v, %v", c.name, ch, err)
		}
		w, b := c.g.Values["w"].Const, c.g.Values["b"].Const
		if !slices.Equal(w.Shape, c.w) || b.Len() != 5 {
			t.Errorf("%s: weight %v, bias %v", c.name, w.Shape, b.Shape)
		}
		bound := 1 / math.Sqrt(float64(c.in))
		for _, v := range w.F32 {
			if !(math.Abs(float64(v)) <= bound) { // NaN fails too
				t.Fatalf("%s: %g outside ±%g", c.name, v, bound)
			}
		}
		if o := c.g.Outputs[0].Shape; o[1].Size != 5 {
			t.Errorf("%s: output %v", c.name, o)
		}
	}
	build := func() *graph.Graph {
		return newMB().input("x", "N", 3, 4, 4).output("y", "N", 10).init("w", []int64{10, 3, 3, 3}).
			node("Conv", "final_conv", []string{"x", "w"}, []string{"c"}).
			node("GlobalAveragePool", "gap", []string{"c"}, []string{"p"}).
			node("Flatten", "f", []string{"p"}, []string{"y"}).build(t)
	}
	g := build()
	ch, err := ReplaceHead(g, 10, 0)
	if err != nil || len(ch) != 1 || !strings.Contains(ch[0].Action, "kept: the model already has 10 classes") {
		t.Fatalf("own count: %v, %v", ch, err)
	}
	if w := g.Values["w"]; w == nil || w.Const == nil || w.Const.Shape[0] != 10 {
		t.Error("the kept head changed")
	}
	if _, err := ReplaceHead(build(), 5, 0); err == nil || !strings.Contains(err.Error(), "head replacement") {
		t.Errorf("another count: %v, want the head replacement error", err)
	}
}
