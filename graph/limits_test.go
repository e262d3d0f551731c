package graph

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// TestHostileShapes: every model that asks for an absurd tensor is refused
// by shape inference, naming the node and the limit, before anything is
// allocated (the bomb of issue 15 panicked in makeslice).
func TestHostileShapes(t *testing.T) {
	for _, c := range hostile.Models() {
		t.Run(c.Name, func(t *testing.T) {
			g, err := FromONNX(onnx.NewModel(c.Proto))
			if err != nil {
				t.Fatal(err)
			}
			batch := int64(2)
			if c.Name == "batch" { // inferred at the batch its input fixes
				batch = 1 << 40
			}
			err = g.InferShapes(map[string][]int64{"x": {batch, 1, 28, 28}})
			if c.Name == "plan" {
				// Within the per-tensor limit: for the runtime's plan to
				// refuse (runtime and cmd/dpfinetune tests).
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.Want) || !strings.Contains(err.Error(), "node ") {
				t.Fatalf("err = %v, want a message naming the node and %q", err, c.Want)
			}
		})
	}
}

// TestLargeFoldLeftToRuntime: an Expand of a constant over the folding
// limit is not evaluated (the runtime computes it) and is not an error.
func TestLargeFoldLeftToRuntime(t *testing.T) {
	g := newBuilder(14).input("x", 1).
		init("a", i64([]int64{1}, 7)).init("s", i64([]int64{1}, maxFoldElements+1)).
		node("Expand", []string{"a", "s"}, []string{"y"}).output("y").graph(t)
	if err := g.InferShapes(nil); err != nil {
		t.Fatal(err)
	}
	y := g.Values["y"]
	if y.Const != nil || len(g.Nodes) != 1 {
		t.Errorf("folded a tensor of %d elements", maxFoldElements+1)
	}
	if got := y.Shape.Ints(); len(got) != 1 || got[0] != maxFoldElements+1 {
		t.Errorf("shape %v", y.Shape)
	}
}

// TestLargeFoldsBounded: the large folds of one inference are bounded in
// all: past maxLargeFolds elements the rest are left to the runtime, and
// each inference counts afresh.
func TestLargeFoldsBounded(t *testing.T) {
	const each = 1 << 20 // over largeFold, under maxFoldElements
	n := maxLargeFolds/each + 4
	b := newBuilder(14).input("x", 1).init("a", i64([]int64{1}, 7)).init("s", i64([]int64{1}, each))
	for i := range n {
		out := fmt.Sprintf("y%d", i)
		b.node("Expand", []string{"a", "s"}, []string{out}).output(out)
	}
	for round := range 2 {
		g := b.graph(t)
		if err := g.InferShapes(nil); err != nil {
			t.Fatal(err)
		}
		folded := 0
		for i := range n {
			if g.Values[fmt.Sprintf("y%d", i)].Const != nil {
				folded++
			}
		}
		if folded != maxLargeFolds/each || len(g.Nodes) != 4 {
			t.Errorf("round %d: %d of %d folded, %d nodes left", round, folded, n, len(g.Nodes))
		}
		// A second inference of the same graph has a budget of its own.
		if err := g.InferShapes(nil); err != nil || len(g.Nodes) != 0 {
			t.Errorf("round %d: the second inference left %d nodes (%v)", round, len(g.Nodes), err)
		}
	}
}

func TestRangeCounts(t *testing.T) {
	cases := []struct {
		start, limit, delta float64
		want                string
	}{
		{0, math.NaN(), 1, "no element count"},
		{0, math.Inf(1), 1, "limit for a folded constant"},
		{0, 1e300, 1e-300, "limit for a folded constant"},
		{0, 1, 0, "delta is 0"},
	}
	for _, c := range cases {
		_, err := rangeTensor(Float32, c.start, c.limit, c.delta)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Range(%v, %v, %v): err = %v, want %q", c.start, c.limit, c.delta, err, c.want)
		}
	}
	// Inputs that are no scalars (FuzzPipeline: an empty start).
	for _, start := range []*Tensor{i64([]int64{0}), i64([]int64{2}, 0, 1)} {
		g := newBuilder(14).input("x", 1).init("start", start).init("lim", i64(nil, 4)).init("one", i64(nil, 1)).
			node("Range", []string{"start", "lim", "one"}, []string{"r"}).output("r").graph(t)
		if err := g.InferShapes(nil); err == nil || !strings.Contains(err.Error(), "are scalars") {
			t.Errorf("Range from %v: err = %v", start.Shape, err)
		}
	}
	if r, err := rangeTensor(Int64, 5, 0, 1); err != nil || r.Len() != 0 {
		t.Errorf("empty Range: %v, %v", r, err)
	}
}

func TestShapeElements(t *testing.T) {
	cases := []struct {
		dims []int64
		n    int64
		ok   bool
	}{
		{nil, 1, true},
		{[]int64{2, 3}, 6, true},
		{[]int64{0, 1 << 62, 1 << 62}, 0, true},
		{[]int64{1 << 32, 1 << 31}, 0, false},
		{[]int64{-1, 2}, 0, false},
	}
	for _, c := range cases {
		n, ok := ShapeElements(c.dims)
		if ok != c.ok || (ok && n != c.n) {
			t.Errorf("ShapeElements(%v) = %d, %v; want %d, %v", c.dims, n, ok, c.n, c.ok)
		}
	}
	if got := FormatBytes(4 << 50); got != "4 PiB" {
		t.Errorf("FormatBytes(4 PiB) = %q", got)
	}
	if got := FormatBytes(1536); got != "1.5 KiB" {
		t.Errorf("FormatBytes(1536) = %q", got)
	}
}

// TestPoolRank: pooling over an input without spatial axes is an error,
// not an index out of range (found by FuzzPipeline).
func TestPoolRank(t *testing.T) {
	for _, op := range []string{"GlobalAveragePool", "MaxPool"} {
		var attrs = attrInts("kernel_shape")
		g := newBuilder(14).input("x", 2, 3).node(op, []string{"x"}, []string{"y"}, attrs).output("y").graph(t)
		if err := g.InferShapes(nil); err == nil || !strings.Contains(err.Error(), op) {
			t.Errorf("%s on (2,3): err = %v", op, err)
		}
	}
}

// TestFoldUnknownOutput: folding an Expand or Tile whose inferred output
// shape has an unknown dimension (a negative target) is an error, not an
// index out of range (found by FuzzPipeline).
func TestFoldUnknownOutput(t *testing.T) {
	for _, op := range []string{"Expand", "Tile"} {
		g := newBuilder(14).input("x", 1).
			init("a", i64([]int64{1}, 7)).init("s", i64([]int64{1}, -5)).
			node(op, []string{"a", "s"}, []string{"y"}).output("y").graph(t)
		if err := g.InferShapes(nil); err == nil {
			t.Errorf("%s to -5: no error", op)
		}
	}
}

// TestMalformedAttributes: attribute and input lengths that disagree are
// errors naming the node, not index out of range (Pad found by
// FuzzPipeline; ConvTranspose by review after it).
func TestMalformedAttributes(t *testing.T) {
	cases := []struct {
		name string
		b    *builder
	}{
		{"Pad pads not 2·axes", newBuilder(18).input("x", 2, 3, 4).
			init("p", i64([]int64{4}, 1, 1, 1, 1)).init("v", &Tensor{DType: Float32, Shape: []int64{}, F32: []float32{0}}).init("ax", i64([]int64{1}, 1)).
			node("Pad", []string{"x", "p", "v", "ax"}, []string{"y"})},
		{"ConvTranspose rank 2", newBuilder(14).input("x", 2, 3).init("w", &Tensor{DType: Float32, Shape: []int64{3, 3}, F32: make([]float32, 9)}).
			node("ConvTranspose", []string{"x", "w"}, []string{"y"})},
		// dilation·(kernel−1) overflowed, the output size came out
		// plausible and the depthwise kernel sliced out of range in a
		// worker goroutine (FuzzPipeline: the process died silently).
		{"Conv dilation 2⁶³−1", newBuilder(14).input("x", 1, 3, 8, 8).init("w", &Tensor{DType: Float32, Shape: []int64{3, 1, 3, 3}, F32: make([]float32, 27)}).
			node("Conv", []string{"x", "w"}, []string{"y"}, attrInt("group", 3), attrInts("dilations", math.MaxInt64, 1))},
		{"Conv pads 2⁶²", newBuilder(14).input("x", 1, 3, 8, 8).init("w", &Tensor{DType: Float32, Shape: []int64{3, 1, 3, 3}, F32: make([]float32, 27)}).
			node("Conv", []string{"x", "w"}, []string{"y"}, attrInt("group", 3), attrInts("pads", 1<<62, 0, 1<<62, 0))},
		{"ConvTranspose short strides", newBuilder(14).input("x", 1, 3, 4, 4).init("w", &Tensor{DType: Float32, Shape: []int64{3, 2, 2, 2}, F32: make([]float32, 24)}).
			node("ConvTranspose", []string{"x", "w"}, []string{"y"}, attrInts("strides", 2))},
		// ConvTranspose shares Conv's window checks: the same overflow.
		{"ConvTranspose dilation 2⁶³−1", newBuilder(14).input("x", 1, 3, 4, 4).init("w", &Tensor{DType: Float32, Shape: []int64{3, 2, 2, 2}, F32: make([]float32, 24)}).
			node("ConvTranspose", []string{"x", "w"}, []string{"y"}, attrInts("dilations", math.MaxInt64, 1))},
		{"ConvTranspose pads 2⁶²", newBuilder(14).input("x", 1, 3, 4, 4).init("w", &Tensor{DType: Float32, Shape: []int64{3, 2, 2, 2}, F32: make([]float32, 24)}).
			node("ConvTranspose", []string{"x", "w"}, []string{"y"}, attrInts("pads", 1<<62, 0, 1<<62, 0))},
		{"ConvTranspose stride × input overflows", newBuilder(14).input("x", 1, 1, 1<<34, 1).init("w", &Tensor{DType: Float32, Shape: []int64{1, 1, 1, 1}, F32: make([]float32, 1)}).
			node("ConvTranspose", []string{"x", "w"}, []string{"y"}, attrInts("strides", 1<<31, 1))},
	}
	bounds := map[string]string{
		"ConvTranspose dilation 2⁶³−1":           "over 2147483648",
		"ConvTranspose pads 2⁶²":                 "beyond ±2147483648",
		"ConvTranspose stride × input overflows": "overflows the output size",
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.b.output("y").graph(t)
			err := g.InferShapes(nil)
			if err == nil || !strings.Contains(err.Error(), "node ") {
				t.Errorf("err = %v", err)
			}
			// ConvTranspose's window must be refused by the bound itself,
			// not by whatever a wrapped size happened to give.
			if want := bounds[c.name]; want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
				t.Errorf("err = %v, want %q", err, want)
			}
		})
	}
}

// TestMustFoldsBounded: the folds only folding computes (Range,
// ConstantOfShape), each under its own limit, are bounded in all by
// maxMustFolds: past it the inference fails, naming the node.
func TestMustFoldsBounded(t *testing.T) {
	const each = 1 << 21 // over largeFold, under maxFoldElements
	n := maxMustFolds/each + 1
	b := newBuilder(14).input("x", 1).init("zero", i64(nil, 0)).init("lim", i64(nil, each)).init("one", i64(nil, 1)).init("s", i64([]int64{1}, each))
	for i := range n {
		out := fmt.Sprintf("y%d", i)
		if i%2 == 0 {
			b.node("Range", []string{"zero", "lim", "one"}, []string{out}).output(out)
		} else {
			b.node("ConstantOfShape", []string{"s"}, []string{out}).output(out)
		}
	}
	g := b.graph(t)
	err := g.InferShapes(nil)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("y%d", n-1)) || !strings.Contains(err.Error(), "ConstantOfShape and Range nodes over") {
		t.Fatalf("err = %v, want the last fold named", err)
	}
	// One fewer fits.
	b.p.Graph.Node = b.p.Graph.Node[:n-1]
	b.p.Graph.Output = b.p.Graph.Output[:n-1]
	if err := b.graph(t).InferShapes(nil); err != nil {
		t.Fatal(err)
	}
}

// TestSliceCounts: a Slice's element count from starts, ends and steps,
// a step of ±2⁶³ included (FuzzPipeline: the count overflowed to −1 and
// folding allocated a negative length).
func TestSliceCounts(t *testing.T) {
	cases := []struct {
		start, end, step int64
		want             int64
	}{
		{0, 10, 1, 10}, {0, 10, 3, 4}, {1, 10, 3, 3}, {9, -11, -1, 10}, {9, 0, -4, 3},
		{0, math.MaxInt64, math.MaxInt64, 1}, {5, 10, math.MaxInt64, 1},
		{math.MaxInt64, math.MinInt64, math.MinInt64, 1}, {-1, math.MinInt64, math.MinInt64 + 1, 1},
		{3, 3, 1, 0}, {3, 3, -1, 0},
	}
	for _, c := range cases {
		g := newBuilder(14).input("x", 10).init("s", i64([]int64{1}, c.start)).init("e", i64([]int64{1}, c.end)).
			init("a", i64([]int64{1}, 0)).init("st", i64([]int64{1}, c.step)).
			node("Slice", []string{"x", "s", "e", "a", "st"}, []string{"y"}).output("y").graph(t)
		s, err := g.Nodes[0].ResolveSlice([]int64{10})
		if err != nil || s.Count[0] != c.want {
			t.Errorf("x[%d:%d:%d] of 10: %+v, %v; want %d elements", c.start, c.end, c.step, s, err, c.want)
		}
	}
}
