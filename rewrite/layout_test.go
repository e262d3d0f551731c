package rewrite

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// linearMode is a Resize's mode attribute "linear".
func linearMode() *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String("mode"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("linear")}
}

func TestReshapeLayout(t *testing.T) {
	cases := []struct {
		in   []int64
		l    BatchLayout
		out  []int64
		want BatchLayout
		ok   bool
	}{
		{[]int64{8, 17, 32}, BatchLayout{0, 1, 1}, []int64{136, 32}, BatchLayout{0, 1, 17}, true}, // (B·T, D)
		{[]int64{17, 8, 32}, BatchLayout{1, 1, 1}, []int64{136, 32}, BatchLayout{0, 17, 1}, true}, // (T·B, D): MHA out_proj
		{[]int64{17, 8, 32}, BatchLayout{1, 1, 1}, []int64{17, 16, 16}, BatchLayout{1, 1, 2}, true},
		{[]int64{8, 10}, BatchLayout{0, 1, 1}, []int64{1, 8, 10}, BatchLayout{1, 1, 1}, true},
		{[]int64{8, 10}, BatchLayout{0, 1, 1}, []int64{8, 1, 10}, BatchLayout{0, 1, 1}, true},
		{[]int64{8, 32, 4, 4}, BatchLayout{0, 1, 1}, []int64{8, 32, 16}, BatchLayout{0, 1, 1}, true},
		{[]int64{8, 6}, BatchLayout{0, 1, 1}, []int64{4, 12}, BatchLayout{}, false}, // batch split across axes
		{[]int64{8, 6}, BatchLayout{0, 1, 1}, []int64{48}, BatchLayout{0, 1, 6}, true},
	}
	for _, c := range cases {
		got, ok := reshapeLayout(c.in, c.l, c.out, 8)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("reshape %v (%v) → %v: %v %v, want %v %v", c.in, c.l, c.out, got, ok, c.want, c.ok)
		}
	}
}

// layoutOf analyses a one-node model at batch 4.
func layoutOf(t *testing.T, b *mb, sample []int64) *layoutInfo {
	t.Helper()
	g := b.build(t)
	c, err := inferredClone(g, sample, 4)
	if err != nil {
		t.Fatal(err)
	}
	return analyzeLayout(c, 4)
}

func TestLayoutMixing(t *testing.T) {
	upsample := func(b *mb) *mb { b.opset = 9; return b }
	cases := []struct {
		name    string
		b       *mb
		sample  []int64
		problem string // substring of the problem, "" for none
		warning string
	}{
		{"gram across samples", newMB().input("x", "N", 4).output("y", "N", "N").
			node("Transpose", "t", []string{"x"}, []string{"xt"}).
			node("MatMul", "mm", []string{"x", "xt"}, []string{"y"}), []int64{4}, "pairs rows of one sample", ""},
		{"softmax over the batch", newMB().input("x", "N", 4).output("y", "N", 4).
			node("Softmax", "sm", []string{"x"}, []string{"y"}, attrInt("axis", 0)), []int64{4}, "normalizes over the batch axis", ""},
		{"mean over the batch", newMB().input("x", "N", 4).output("y", 4).
			node("ReduceMean", "rm", []string{"x"}, []string{"y"}, attrInts("axes", 0), attrInt("keepdims", 0)), []int64{4}, "reduces over the batch axis", ""},
		{"contraction over the batch", newMB().input("x", "N", 4).output("y", 4, 4).
			node("Transpose", "t", []string{"x"}, []string{"xt"}).
			node("MatMul", "mm", []string{"xt", "x"}, []string{"y"}), []int64{4}, "contracts over the batch", ""},
		{"slice of the batch", newMB().input("x", "N", 4).output("y", 2, 4).ints("s", 0).ints("e", 2).ints("a", 0).
			node("Slice", "sl", []string{"x", "s", "e", "a"}, []string{"y"}), []int64{4}, "", "slices the batch axis"},
		{"per-sample softmax", newMB().input("x", "N", 4).output("y", "N", 4).
			node("Softmax", "sm", []string{"x"}, []string{"y"}, attrInt("axis", -1)), []int64{4}, "", ""},
		{"resize of the batch", newMB().input("x", "N", 2, 4).output("y", "N", 2, 4).init("s", []int64{3}, 2, 1, 1).
			node("Resize", "rs", []string{"x", "", "s"}, []string{"y"}), []int64{2, 4}, "resizes the batch axis 0 (4 → 8)", ""},
		{"per-sample resize, channels too", newMB().input("x", "N", 2, 4, 4).output("y", "N", 3, 6, 2).init("s", []int64{4}, 1, 1.5, 1.5, 0.5).
			node("Resize", "rs", []string{"x", "", "s"}, []string{"y"}, linearMode()), []int64{2, 4, 4}, "", ""},
		{"upsample", upsample(newMB()).input("x", "N", 2, 4).output("y", "N", 4, 8).init("s", []int64{3}, 1, 2, 2).
			node("Upsample", "up", []string{"x", "s"}, []string{"y"}), []int64{2, 4}, "", ""},
		{"operator without a batch rule", newMB().input("x", "N", 4, 4).output("y", "N", 4, 4).
			node("Trilu", "tri", []string{"x"}, []string{"y"}), []int64{4, 4}, "", "no batch rule for operator Trilu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			li := layoutOf(t, c.b, c.sample)
			probs, warns := strings.Join(li.problems, ";"), strings.Join(li.warnings, ";")
			if (c.problem == "") != (probs == "") || !strings.Contains(probs, c.problem) {
				t.Errorf("problems %q, want %q", probs, c.problem)
			}
			if (c.warning == "") != (warns == "") || !strings.Contains(warns, c.warning) {
				t.Errorf("warnings %q, want %q", warns, c.warning)
			}
		})
	}
}

// TestLayoutFixtures: the batch ends on axis 0 of every fixture's output,
// and the ViT attention keeps track of it through (T,B,D), (B·H,T,d) and
// (T·B, D).
func TestLayoutFixtures(t *testing.T) {
	for _, name := range fixtureNames(t) {
		g := loadFixture(t, name)
		if name == "resnet_train" {
			if _, err := RewriteBatchNorm(g, BNOptions{Mode: BNFreeze}, nil); err != nil {
				t.Fatal(err)
			}
		}
		c, err := inferredClone(g, fixtureSample(name), 8)
		if err != nil {
			t.Fatal(err)
		}
		li := analyzeLayout(c, 8)
		if len(li.problems)+len(li.warnings) > 0 {
			t.Errorf("%s: %v %v", name, li.problems, li.warnings)
		}
		if s := li.state(c.Outputs[0]); s.kind != batched || !s.l.Plain() {
			t.Errorf("%s: output layout %+v", name, s)
		}
		if name != "vit" {
			continue
		}
		want := map[string]BatchLayout{
			"/encoder/layers/encoder_layer_0/self_attention/Transpose_output_0":   {1, 1, 1},
			"/encoder/layers/encoder_layer_0/self_attention/Transpose_1_output_0": {0, 1, 2},
			"/encoder/layers/encoder_layer_0/self_attention/Softmax_output_0":     {0, 1, 2},
			"/encoder/layers/encoder_layer_0/self_attention/Reshape_3_output_0":   {0, 17, 1},
		}
		for v, l := range want {
			if s := li.state(c.Values[v]); s.kind != batched || s.l != l {
				t.Errorf("vit %s: %+v, want %v", v, s, l)
			}
		}
	}
}

// TestResizePlan: a Resize between trainable convolutions keeps every
// convolution trainable, and a float initializer holding its scales is an
// argument of the operator, in no count of parameters (trainable or
// frozen).
func TestResizePlan(t *testing.T) {
	g := newMB().input("x", "N", 3, 4, 4).output("y", "N", 2, 8, 8).
		init("w1", []int64{2, 3, 1, 1}).init("s", []int64{4}, 1, 1, 2, 2).init("w2", []int64{2, 2, 1, 1}).
		node("Conv", "c1", []string{"x", "w1"}, []string{"h"}).
		node("Resize", "rs", []string{"h", "", "s"}, []string{"u"}, linearMode()).
		node("Conv", "c2", []string{"u", "w2"}, []string{"y"}).build(t)
	p, err := Analyze(g, PlanOptions{InputShape: []int64{3, 4, 4}, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil || len(p.Warnings) > 0 {
		t.Fatalf("problems %v, warnings %v", p.Problems, p.Warnings)
	}
	if p.Param("s") != nil {
		t.Errorf("the scales are a parameter: %+v", p.Param("s"))
	}
	for _, w := range []string{"w1", "w2"} {
		if prm := p.Param(w); prm == nil || !prm.Trainable() {
			t.Errorf("%s: %+v", w, prm)
		}
	}
	if p.Trainable.Tensors != 2 || p.Frozen.Tensors != 0 {
		t.Errorf("trainable %+v, frozen %+v", p.Trainable, p.Frozen)
	}
}

// asStrided builds dynamo's as_strided flatten of x (N, 3): x read as one
// axis of 3N elements and gathered back by indices computed from x's
// shape, idx[b][i] = 3b + offs[i] (taken mod 3N where mod is set), then
// transposed to (3, N) where transpose is set, or reshaped to (3, N) where
// reshape is.
func asStrided(offs []int64, mod, transpose, reshape bool) *mb {
	b := newMB().input("x", "N", 3).output("y", "N", 3).ints("flat", -1).ints("ax1", 1).ints("three_n", 3, -1)
	b.g.Initializer = append(b.g.Initializer, int64Tensor(nil, 0).ToProto("zero"), int64Tensor(nil, 1).ToProto("one"),
		int64Tensor(nil, 3).ToProto("three"), int64Tensor([]int64{1, 3}, offs...).ToProto("offs"))
	b.node("Reshape", "flatten", []string{"x", "flat"}, []string{"xf"}).
		node("Shape", "shape", []string{"x"}, []string{"sh"}).
		node("Gather", "n", []string{"sh", "zero"}, []string{"n"}).
		node("Range", "range", []string{"zero", "n", "one"}, []string{"r"}).
		node("Mul", "rows", []string{"r", "three"}, []string{"r3"}).
		node("Unsqueeze", "col", []string{"r3", "ax1"}, []string{"r3u"}).
		node("Add", "idx", []string{"r3u", "offs"}, []string{"idx0"})
	idx := "idx0"
	if mod {
		b.node("Mul", "len", []string{"n", "three"}, []string{"len"}).
			node("Mod", "wrap", []string{idx, "len"}, []string{"idx1"})
		idx = "idx1"
	}
	if transpose {
		b.node("Transpose", "tr", []string{idx}, []string{"idx2"}, attrInts("perm", 1, 0))
		idx = "idx2"
	}
	if reshape {
		b.node("Reshape", "rs", []string{idx, "three_n"}, []string{"idx3"})
		idx = "idx3"
	}
	return b.node("Gather", "as_strided", []string{"xf", idx}, []string{"y"}, attrInt("axis", 0))
}

// TestGatherAlongBatch: a Gather along the batch axis by constant
// indices keeps the batch where each sample's elements come from that
// sample, and loses it (with the reason) where they do not.
func TestGatherAlongBatch(t *testing.T) {
	cases := []struct {
		name    string
		b       *mb
		want    BatchLayout
		warning string
	}{
		{"in order", asStrided([]int64{0, 1, 2}, false, false, false), BatchLayout{0, 1, 1}, ""},
		{"permuted within samples", asStrided([]int64{2, 0, 1}, false, false, false), BatchLayout{0, 1, 1}, ""},
		{"repeated within samples", asStrided([]int64{1, 1, 0}, false, false, false), BatchLayout{0, 1, 1}, ""},
		{"transposed", asStrided([]int64{0, 1, 2}, false, true, false), BatchLayout{1, 1, 1}, ""},
		{"element of the next sample", asStrided([]int64{0, 1, 5}, true, false, false), BatchLayout{}, "moving elements between samples"},
		{"samples rotated", asStrided([]int64{-3, -2, -1}, true, false, false), BatchLayout{}, "moving elements between samples"},
		{"batch split across axes", asStrided([]int64{0, 1, 2}, false, false, true), BatchLayout{}, "splitting the batch across axes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			li := layoutOf(t, c.b, []int64{3})
			warns := strings.Join(li.warnings, ";")
			if len(li.problems) > 0 || (c.warning == "") != (warns == "") || !strings.Contains(warns, c.warning) {
				t.Errorf("problems %q, warnings %q, want %q", li.problems, warns, c.warning)
			}
			g := c.b.build(t)
			c2, err := inferredClone(g, []int64{3}, 4)
			if err != nil {
				t.Fatal(err)
			}
			s := analyzeLayout(c2, 4).state(c2.Values["y"])
			if c.warning == "" && (s.kind != batched || s.l != c.want) {
				t.Errorf("layout of y %+v, want %v", s, c.want)
			}
		})
	}
}

// TestBatchSizedOperand: a position table resized to the whole shape of
// the activations it is added to (Resize's sizes from their Shape, the
// batch's size included) is a value of the batch's size computed from a
// parameter: frozen, with the reason, at a batch of 1 too (the analysis
// follows the batch axis at 2); a table resized to a sample's shape (the
// sizes' batch entry 1) trains, as does one expanded over the batch to
// the same shape (a class token's form, which carries the batch).
func TestBatchSizedOperand(t *testing.T) {
	build := func(form string) *mb {
		b := newMB().input("x", "N", 3, 4, 4).output("y", "N", 2, 4, 4).
			init("w1", []int64{2, 3, 1, 1}).init("pos", []int64{1, 2, 2, 2}).
			ints("one", 1).ints("rest", 2, 4, 4).
			node("Conv", "c1", []string{"x", "w1"}, []string{"h"})
		switch form {
		case "whole":
			b.node("Shape", "shape", []string{"h"}, []string{"sz"}).
				node("Resize", "rs", []string{"pos", "", "", "sz"}, []string{"p"}, linearMode())
		case "sample":
			b.node("Concat", "cat", []string{"one", "rest"}, []string{"sz"}, attrInt("axis", 0)).
				node("Resize", "rs", []string{"pos", "", "", "sz"}, []string{"p"}, linearMode())
		case "expand":
			b.node("Concat", "cat", []string{"one", "rest"}, []string{"sz"}, attrInt("axis", 0)).
				node("Resize", "rs", []string{"pos", "", "", "sz"}, []string{"ps"}, linearMode()).
				node("Shape", "shape", []string{"h"}, []string{"hs"}).
				node("Expand", "ex", []string{"ps", "hs"}, []string{"p"})
		}
		return b.node("Add", "add", []string{"h", "p"}, []string{"y"})
	}
	for _, c := range []struct {
		form   string
		batch  int64
		frozen bool
	}{{"whole", 4, true}, {"sample", 4, false}, {"expand", 4, false}, {"whole", 1, true}, {"sample", 1, false}} {
		p, err := Analyze(build(c.form).build(t), PlanOptions{InputShape: []int64{3, 4, 4}, Batch: c.batch})
		if err != nil {
			t.Fatal(err)
		}
		prm := p.Param("pos")
		if prm == nil {
			t.Fatalf("%s, batch %d: no plan for pos", c.form, c.batch)
		}
		if frozen := prm.Kind == KindFrozen; frozen != c.frozen {
			t.Errorf("%s, batch %d: pos %s (%s), want frozen %v", c.form, c.batch, prm.Kind, prm.Reason, c.frozen)
		}
		if c.frozen && !strings.Contains(prm.Reason, "a value of the batch's size computed from parameters") {
			t.Errorf("reason %q", prm.Reason)
		}
		if w := p.Param("w1"); w == nil || !w.Trainable() {
			t.Errorf("%s, batch %d: w1 %+v", c.form, c.batch, w)
		}
	}
}
