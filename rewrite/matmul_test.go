package rewrite

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestMatMulStacks: a stack of MatMul weights (G, D, P) over data (G,
// rows, D) whose rows hold the batch is G linear layers (MViT-v2's
// temporal relative positions); a stack broadcast over the batch, a stack
// of other leading axes than the data's and a stack as the first operand
// are frozen with the reason; a stack of one weight is a weight.
func TestMatMulStacks(t *testing.T) {
	attr := func(name string, v ...int64) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
	}
	for _, c := range []struct {
		name  string
		build func() *mb
		why   string // "" where w trains
		layer Layer  // T, D, P, Groups where it trains
	}{
		{"rows", func() *mb {
			// (N,3,4,6) → (3,N,4,6) → (3,N·4,6) · (3,6,5)
			return newMB().input("x", "N", 3, 4, 6).output("y", 3, "M", 5).init("w", []int64{3, 6, 5}).ints("s", 3, -1, 6).
				node("Transpose", "t", []string{"x"}, []string{"xt"}, attr("perm", 1, 0, 2, 3)).
				node("Reshape", "r", []string{"xt", "s"}, []string{"xr"}).
				node("MatMul", "mm", []string{"xr", "w"}, []string{"y"})
		}, "", Layer{T: 4, D: 6, P: 5, Groups: 3}},
		{"one", func() *mb {
			return newMB().input("x", "N", 4, 6).output("y", "N", 4, 5).init("w", []int64{1, 6, 5}).
				node("MatMul", "mm", []string{"x", "w"}, []string{"y"})
		}, "", Layer{T: 4, D: 6, P: 5, Groups: 1}},
		{"broadcast over the batch", func() *mb {
			// (N,3,4,6) → (3,N,4,6) · (3,1,6,5): the batch on an axis
			// the stack broadcasts, each weight reading every sample.
			return newMB().input("x", "N", 3, 4, 6).output("y", 3, "N", 4, 5).init("w", []int64{3, 1, 6, 5}).
				node("Transpose", "t", []string{"x"}, []string{"xt"}, attr("perm", 1, 0, 2, 3)).
				node("MatMul", "mm", []string{"xt", "w"}, []string{"y"})
		}, "needs data of the same leading axes", Layer{}},
		{"other leading axes", func() *mb {
			return newMB().input("x", "N", 3, 4, 6).output("y", "N", 3, 4, 5).init("w", []int64{3, 6, 5}).
				node("MatMul", "mm", []string{"x", "w"}, []string{"y"})
		}, "needs data of the same leading axes", Layer{}},
		{"first operand", func() *mb {
			return newMB().input("x", "N", 3, 6, 4).output("y", "N", 3, 5, 4).init("w", []int64{3, 5, 6}).
				node("MatMul", "mm", []string{"w", "x"}, []string{"y"})
		}, "as a rank-3 operand", Layer{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := c.build().build(t)
			sample := g.Inputs[0].Shape.Ints()[1:]
			p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 8}})
			if err != nil {
				t.Fatal(err)
			}
			w := p.Param("w")
			if w == nil {
				t.Fatal("no parameter w")
			}
			if c.why != "" {
				if w.Trainable() || !strings.Contains(w.Reason, c.why) {
					t.Errorf("trainable %v, reason %q; want frozen: %q", w.Trainable(), w.Reason, c.why)
				}
				return
			}
			if !w.Trainable() || len(w.Uses) != 1 || w.Uses[0].Layer == nil {
				t.Fatalf("%+v", w)
			}
			l := w.Uses[0].Layer
			if l.T != c.layer.T || l.D != c.layer.D || l.P != c.layer.P || l.Groups != c.layer.Groups {
				t.Errorf("T %d D %d p %d groups %d, want %+v", l.T, l.D, l.P, l.Groups, c.layer)
			}
		})
	}
}
