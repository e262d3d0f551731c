package graph

import "testing"

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
