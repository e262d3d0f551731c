package graph

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestNoGradientInitializers: a float initializer whose every use ends in
// a comparison — values scattered into a mask that Equal compares — is no
// parameter and folds like a constant (the mask, Where's condition,
// becomes one); one a gradient reaches stays a parameter (Where's value
// operand, a weight), and so do one read at a slot of its operator's own
// rules (a Clip's bound) and one no node reads (the rewrite reports it).
func TestNoGradientInitializers(t *testing.T) {
	f := func(shape []int64, v ...float32) *Tensor { return &Tensor{DType: Float32, Shape: shape, F32: v} }
	g := newBuilder(18).input("x", 2, 4).
		init("base", f([]int64{4}, 0, 0, 0, 0)).
		init("idx", &Tensor{DType: Int64, Shape: []int64{2, 1}, I64: []int64{0, 2}}).
		init("fill", f([]int64{2}, 1, 1)).
		init("zero", f([]int64{}, 0)).
		init("neg", f([]int64{}, -100)).
		init("lo", f([]int64{}, -1)).
		init("w", f([]int64{4}, 1, 2, 3, 4)).
		init("unused", f([]int64{2}, 1, 2)).
		node("ScatterND", []string{"base", "idx", "fill"}, []string{"mask"}).
		node("Equal", []string{"mask", "zero"}, []string{"keep"}).
		node("Mul", []string{"x", "w"}, []string{"xw"}).
		node("Clip", []string{"xw", "lo"}, []string{"c"}).
		node("Where", []string{"keep", "c", "neg"}, []string{"y"}).output("y").graph(t)
	want := map[string]bool{"base": false, "fill": false, "zero": false, "lo": true, "neg": true, "w": true, "unused": true}
	for name, param := range want {
		if got := g.Values[name].IsParam(); got != param {
			t.Errorf("%s IsParam %v, want %v", name, got, param)
		}
	}
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	keep := g.Values["keep"]
	if keep.Const == nil {
		t.Fatal("the mask's comparison did not fold")
	}
	if b := keep.Const.B; len(b) != 4 || b[0] || !b[1] || b[2] || !b[3] {
		t.Errorf("keep = %v, want [false true false true]", b)
	}
}

// TestMaskedOutInitializers: the shifted-window mask as PyTorch's dynamo
// exporter writes Swin's (fill values scattered into zeros, sub = m[j] −
// m[i], then masked_fill twice, so that sub reaches the logits through
// a Where's data slot, every element it gives masked out by the next
// Where): its fill values are no parameters, and the mask folds. Beside
// it, the forms that look alike but where a gradient does reach an
// initializer keep it a parameter: one masked_fill only (sub's zeros reach
// the logits); a condition built from an initializer that is itself a
// parameter (the proof may not hold it constant); a condition built from
// the input's shape (what holds at one batch size need not at another).
func TestMaskedOutInitializers(t *testing.T) {
	f := func(shape []int64, v ...float32) *Tensor { return &Tensor{DType: Float32, Shape: shape, F32: v} }
	// In a model with torch.export's marks the one-element 0 and −100 are
	// constants; without them they are parameters, and then only the 0
	// that Equal reads alone (onlyMasks) is none: the outer Where's 0 is
	// zf, a parameter its gradient reaches.
	swin := func(twice, marked bool) *Graph {
		b := newBuilder(18).input("x", -1, 4, 4).
			init("base", f([]int64{4}, 0, 0, 0, 0)).
			init("idx", i64([]int64{2, 1}, 0, 2)).
			init("fill", f([]int64{2}, 1, 2)).
			init("zero", f([]int64{}, 0)).
			init("neg", f([]int64{}, -100)).
			init("ax0", i64([]int64{1}, 0)).
			init("ax1", i64([]int64{1}, 1)).
			node("ScatterND", []string{"base", "idx", "fill"}, []string{"m"}).
			node("Unsqueeze", []string{"m", "ax0"}, []string{"row"}).
			node("Unsqueeze", []string{"m", "ax1"}, []string{"col"}).
			node("Sub", []string{"row", "col"}, []string{"sub"}).
			node("Equal", []string{"sub", "zero"}, []string{"eq"}).
			node("Not", []string{"eq"}, []string{"ne"}).
			node("Where", []string{"ne", "neg", "sub"}, []string{"mf"})
		mask := "mf"
		zf := "zf"
		if marked {
			zf = "zero"
			b.p.Graph.ValueInfo = append(b.p.Graph.ValueInfo, &onnxpb.ValueInfoProto{Name: proto.String("x"),
				MetadataProps: []*onnxpb.StringStringEntryProto{{Key: proto.String(TorchInputKind), Value: proto.String("USER_INPUT")}}})
		}
		b = b.init("zf", f([]int64{}, 0))
		if twice {
			b = b.node("Where", []string{"eq", zf, "mf"}, []string{"mf1"})
			mask = "mf1"
		}
		return b.node("Add", []string{"x", mask}, []string{"y"}).output("y").graph(t)
	}
	g := swin(true, false)
	for name, param := range map[string]bool{"base": false, "fill": false, "zero": false, "zf": true, "neg": true} {
		if got := g.Values[name].IsParam(); got != param {
			t.Errorf("twice masked, no marks: %s IsParam %v, want %v", name, got, param)
		}
	}
	if err := g.InferShapes(map[string][]int64{"x": {3, 4, 4}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"eq", "ne"} {
		if g.Values[name].Const == nil {
			t.Errorf("twice masked, no marks: the condition %s did not fold", name)
		}
	}
	g = swin(true, true)
	for _, name := range []string{"base", "fill", "zero", "neg"} {
		if g.Values[name].IsParam() {
			t.Errorf("twice masked: %s is a parameter; no gradient reaches it", name)
		}
	}
	if err := g.InferShapes(map[string][]int64{"x": {3, 4, 4}}); err != nil {
		t.Fatal(err)
	}
	mask := g.Values["mf1"]
	if mask.Const == nil {
		t.Fatal("the mask did not fold")
	}
	// m = [1 0 2 0]: sub[i][j] = m[j] − m[i]; 0 where equal, −100 elsewhere.
	m := []float32{1, 0, 2, 0}
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			want := float32(-100)
			if m[j] == m[i] {
				want = 0
			}
			if got := mask.Const.F32[4*i+j]; got != want {
				t.Errorf("mask[%d][%d] = %v, want %v", i, j, got, want)
			}
		}
	}

	g = swin(false, true)
	for _, name := range []string{"base", "fill"} {
		if !g.Values[name].IsParam() {
			t.Errorf("masked once: %s is no parameter, but sub's zeros reach the output", name)
		}
	}

	// p is a parameter (it reaches the output directly); q's elements are
	// all masked out by Equal(p, 0) at p's present value — which training
	// changes. (q is compared too, so that both are candidates.)
	g = newBuilder(18).input("x", -1, 2).
		init("p", f([]int64{2}, 0, 0)).
		init("q", f([]int64{2}, 5, 6)).
		init("zero", f([]int64{}, 0)).
		init("zf", f([]int64{}, 0)).
		node("Equal", []string{"p", "zero"}, []string{"c"}).
		node("Equal", []string{"q", "zero"}, []string{"qc"}).
		node("Where", []string{"c", "zf", "q"}, []string{"w"}).
		node("Add", []string{"x", "w"}, []string{"y1"}).
		node("Add", []string{"y1", "p"}, []string{"y"}).output("y").output("qc").graph(t)
	for _, name := range []string{"p", "q"} {
		if !g.Values[name].IsParam() {
			t.Errorf("condition from a parameter: %s is no parameter", name)
		}
	}

	// r is masked out where the batch is 1 (the size the proof folds the
	// input's shape at), not at others.
	g = newBuilder(18).input("x", -1, 2).
		init("r", f([]int64{2}, 1, 1)).
		init("zero", f([]int64{}, 0)).
		init("i0", i64([]int64{}, 0)).
		node("Shape", []string{"x"}, []string{"s"}).
		node("Gather", []string{"s", "i0"}, []string{"n"}).
		node("Cast", []string{"n"}, []string{"nf"}, attrInt("to", 1)).
		node("Equal", []string{"r", "nf"}, []string{"c"}).
		node("Where", []string{"c", "zero", "r"}, []string{"w"}).
		node("Add", []string{"x", "w"}, []string{"y"}).output("y").graph(t)
	if !g.Values["r"].IsParam() {
		t.Error("condition from the input's shape: r is no parameter")
	}
}

// TestMaskedOutBounds: what markMaskedOut cannot prove within its bounds
// stays a parameter. r is masked out by a condition of its own; p is a
// parameter and q masked out by a condition of p's, which takes a second
// round to see.
func TestMaskedOutBounds(t *testing.T) {
	f := func(shape []int64, v ...float32) *Tensor { return &Tensor{DType: Float32, Shape: shape, F32: v} }
	build := func() *Graph {
		return newBuilder(18).input("x", -1, 2).
			init("p", f([]int64{2}, 0, 0)).
			init("q", f([]int64{2}, 5, 6)).
			init("r", f([]int64{2}, 0, 0)).
			init("zero", f([]int64{}, 0)).
			init("zf", f([]int64{}, 0)).
			node("Equal", []string{"p", "zero"}, []string{"c"}).
			node("Equal", []string{"q", "zero"}, []string{"qc"}).
			node("Where", []string{"c", "zf", "q"}, []string{"w"}).
			node("Equal", []string{"r", "zero"}, []string{"rc"}).
			node("Where", []string{"rc", "zf", "r"}, []string{"rw"}).
			node("Add", []string{"x", "w"}, []string{"y1"}).
			node("Add", []string{"y1", "rw"}, []string{"y2"}).
			node("Add", []string{"y2", "p"}, []string{"y"}).output("y").output("qc").graph(t)
	}
	for _, c := range []struct {
		name         string
		rounds, work int
		wantRNoParam bool
	}{
		{"within the bounds", 3, 1 << 26, true},
		{"one round", 1, 1 << 26, false},
		{"no work", 3, 3, false},
	} {
		rounds, work := maskedOutRounds, maskedOutWork
		maskedOutRounds, maskedOutWork = c.rounds, c.work
		g := build()
		maskedOutRounds, maskedOutWork = rounds, work
		if got := !g.Values["r"].IsParam(); got != c.wantRNoParam {
			t.Errorf("%s: r no parameter %v, want %v", c.name, got, c.wantRNoParam)
		}
		for _, name := range []string{"p", "q"} {
			if !g.Values[name].IsParam() {
				t.Errorf("%s: %s is no parameter", c.name, name)
			}
		}
	}
}

// TestMaskedOutMalformed: the masked-out analysis runs at load, before
// the graph is validated; a malformed node elsewhere (a ConstantOfShape
// without its input, FuzzPipeline) leaves every candidate a parameter
// instead of panicking in folding, and validation then names the node.
func TestMaskedOutMalformed(t *testing.T) {
	f := func(shape []int64, v ...float32) *Tensor { return &Tensor{DType: Float32, Shape: shape, F32: v} }
	b := newBuilder(17).input("x", -1, 4).
		init("zero", f([]int64{}, 0)).init("neg", f([]int64{}, -100)).init("m", f([]int64{4}, 0, 1, 0, 1)).
		node("Equal", []string{"m", "zero"}, []string{"eq"}).
		node("Where", []string{"eq", "neg", "m"}, []string{"mf"}).
		node("Add", []string{"x", "mf"}, []string{"y"}).
		node("ConstantOfShape", nil, []string{"c"}).
		output("y").output("c")
	g, err := FromONNX(onnx.NewModel(b.p))
	if err != nil {
		return // refused at load: no panic either
	}
	if !g.Values["neg"].IsParam() {
		t.Error("neg was proven masked out on a graph that did not validate")
	}
	if err := g.Validate(); err == nil || !strings.Contains(err.Error(), "ConstantOfShape") {
		t.Errorf("validate: %v", err)
	}
}
