package graph

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestSliceAssignments: of slice_assign.onnx's four ScatterNDs (PyTorch's
// exports of h[:, :, 1:, 1:] = …, h[:, :2] = …, h[:, :, 2:4] = … and
// h[:, :, :, ::2] = …), the three runs of consecutive positions become
// Slices and Concats and the step of 2 stays;
// each change of a grid that makes it another set of tuples keeps its
// ScatterND: two components swapped, a component's vector laid along
// another axis, a grid at a fixed batch read there.
func TestSliceAssignments(t *testing.T) {
	path := filepath.Join("..", "testdata", "exports", "slice_assign.onnx")
	load := func(t *testing.T, edit func(p *onnxpb.ModelProto)) *Graph {
		t.Helper()
		m, err := onnx.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(m.Proto)
		}
		g, err := FromONNX(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Validate(); err != nil {
			t.Fatal(err)
		}
		return g
	}
	count := func(g *Graph, op string) int {
		n := 0
		for _, x := range g.Nodes {
			if x.OpType == op {
				n++
			}
		}
		return n
	}
	// firstGrid returns the Concat of the first ScatterND's indices.
	firstGrid := func(p *onnxpb.ModelProto) *onnxpb.NodeProto {
		var idx string
		for _, n := range p.GetGraph().GetNode() {
			if n.GetOpType() == "ScatterND" {
				idx = n.GetInput()[1]
				break
			}
		}
		for _, n := range p.GetGraph().GetNode() {
			if len(n.GetOutput()) == 1 && n.GetOutput()[0] == idx {
				return n
			}
		}
		t.Fatal("no grid")
		return nil
	}
	for _, c := range []struct {
		name    string
		edit    func(p *onnxpb.ModelProto)
		assigns int
	}{
		{"as exported", nil, 3},
		{"components swapped", func(p *onnxpb.ModelProto) {
			// (b, c, w, h) for (b, c, h, w): the grid of h[:, :, 1:, 1:]
			// is square, so the model stays valid, and writes the same
			// box, but the tuples' order is no longer the updates'.
			in := firstGrid(p).Input
			in[2], in[3] = in[3], in[2]
		}, 2},
		{"vector along another axis", func(p *onnxpb.ModelProto) {
			// The third component's Expand reads the fourth's vector
			// (both 1…5): the same values, laid along the last axis.
			c := firstGrid(p)
			prod := map[string]*onnxpb.NodeProto{}
			for _, n := range p.GetGraph().GetNode() {
				for _, o := range n.GetOutput() {
					prod[o] = n
				}
			}
			expandOf := func(u string) *onnxpb.NodeProto {
				n := prod[u]
				for n.GetOpType() != "Expand" {
					n = prod[n.GetInput()[0]]
				}
				return n
			}
			expandOf(c.Input[2]).Input[0] = expandOf(c.Input[3]).GetInput()[0]
		}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := load(t, c.edit)
			if g.SliceAssignments != c.assigns || count(g, "ScatterND") != 4-c.assigns {
				t.Fatalf("%d slice assignments, %d ScatterNDs left; want %d", g.SliceAssignments, count(g, "ScatterND"), c.assigns)
			}
			c := g.Clone()
			if err := c.InferShapes(map[string][]int64{"input": {2, 3, 6, 6}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// At a fixed batch (no dynamic_axes) the grids are read at that batch
	// and the batch axis written whole there.
	g := load(t, func(p *onnxpb.ModelProto) {
		for _, v := range append(p.GetGraph().GetInput(), p.GetGraph().GetOutput()...) {
			d := v.GetType().GetTensorType().GetShape().GetDim()[0]
			d.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 3}
		}
	})
	if g.SliceAssignments != 3 {
		t.Errorf("fixed batch: %d slice assignments, want 3", g.SliceAssignments)
	}
}

// TestUnreadIntegersDropped: an integer value too large to fold whose
// only reader, a Shape, folded is no longer computed (the runtime
// computes only float32 tensors): the broadcast sum of a slice
// assignment's index ranges, whose shape gave its updates' shape.
func TestUnreadIntegersDropped(t *testing.T) {
	b := newBuilder(14).input("x", -1, 4).
		init("zero", i64(nil, 0)).init("zeroV", i64([]int64{1}, 0)).init("one", i64([]int64{1}, 1)).init("big", i64([]int64{1}, 3000000)).init("four", i64([]int64{1}, 4)).init("seven", i64([]int64{1}, 7)).
		node("Shape", []string{"x"}, []string{"sx"}).
		node("Gather", []string{"sx", "zeroV"}, []string{"n"}, attrInt("axis", 0)).
		node("Concat", []string{"n", "big"}, []string{"dims"}, attrInt("axis", 0)).
		node("Expand", []string{"seven", "dims"}, []string{"grid"}). // int64, (N, 3·10⁶)
		node("Shape", []string{"grid"}, []string{"gs"}).
		node("Slice", []string{"gs", "zeroV", "one"}, []string{"lead"}).
		node("Concat", []string{"lead", "four"}, []string{"target"}, attrInt("axis", 0)).
		node("Reshape", []string{"x", "target"}, []string{"y"}).
		output("y")
	g := b.graph(t)
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(map[string][]int64{"x": {2, 4}}); err != nil {
		t.Fatal(err)
	}
	if got := ops(g); !slices.Equal(got, []string{"Reshape"}) {
		t.Errorf("nodes left %v, want the Reshape", got)
	}
}
