package graph

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

func attrStr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// TestFoldOperators folds the operators added for vision exports on
// integer constants; the expected values are the examples of the ONNX
// operator documentation or worked by hand.
func TestFoldOperators(t *testing.T) {
	cases := []struct {
		name  string
		opset int64
		build func(b *builder) *builder
		want  []int64
		shape []int64
	}{
		{"ScatterND spec example 1", 14, func(b *builder) *builder {
			return b.init("d", i64([]int64{8}, 1, 2, 3, 4, 5, 6, 7, 8)).init("i", i64([]int64{4, 1}, 4, 3, 1, 7)).
				init("u", i64([]int64{4}, 9, 10, 11, 12)).node("ScatterND", []string{"d", "i", "u"}, []string{"y"})
		}, []int64{1, 11, 3, 10, 9, 6, 7, 12}, []int64{8}},
		{"ScatterND slices, negative index", 14, func(b *builder) *builder {
			return b.init("d", i64([]int64{3, 2}, 1, 2, 3, 4, 5, 6)).init("i", i64([]int64{1, 1}, -1)).
				init("u", i64([]int64{1, 2}, 7, 8)).node("ScatterND", []string{"d", "i", "u"}, []string{"y"})
		}, []int64{1, 2, 3, 4, 7, 8}, []int64{3, 2}},
		{"ScatterND add duplicates", 16, func(b *builder) *builder {
			return b.init("d", i64([]int64{4}, 1, 1, 1, 1)).init("i", i64([]int64{3, 1}, 2, 0, 2)).
				init("u", i64([]int64{3}, 5, 6, 7)).node("ScatterND", []string{"d", "i", "u"}, []string{"y"}, attrStr("reduction", "add"))
		}, []int64{7, 1, 13, 1}, []int64{4}},
		{"ScatterND mul", 16, func(b *builder) *builder {
			return b.init("d", i64([]int64{3}, 2, 3, 4)).init("i", i64([]int64{2, 1}, 1, 1)).
				init("u", i64([]int64{2}, 5, 2)).node("ScatterND", []string{"d", "i", "u"}, []string{"y"}, attrStr("reduction", "mul"))
		}, []int64{2, 30, 4}, []int64{3}},
		{"Einsum matmul", 12, func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 3}, 1, 2, 3, 4, 5, 6)).init("c", i64([]int64{3, 1}, 1, 0, -1)).
				node("Einsum", []string{"a", "c"}, []string{"y"}, attrStr("equation", "ij,jk->ik"))
		}, []int64{-2, -2}, []int64{2, 1}},
		{"Einsum implicit transpose", 12, func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 3}, 1, 2, 3, 4, 5, 6)).
				node("Einsum", []string{"a"}, []string{"y"}, attrStr("equation", "ba"))
		}, []int64{1, 4, 2, 5, 3, 6}, []int64{3, 2}},
		{"Einsum trace", 12, func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 2}, 1, 2, 3, 4)).
				node("Einsum", []string{"a"}, []string{"y"}, attrStr("equation", "ii->"))
		}, []int64{5}, []int64{}},
		{"Einsum ellipsis broadcast", 12, func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 1}, 1, 2)).init("c", i64([]int64{3}, 1, 10, 100)).
				node("Einsum", []string{"a", "c"}, []string{"y"}, attrStr("equation", "...,...->..."))
		}, []int64{1, 10, 100, 2, 20, 200}, []int64{2, 3}},
		{"Sum of three, broadcast", 13, func(b *builder) *builder {
			return b.init("a", i64([]int64{2, 1}, 1, 2)).init("c", i64([]int64{3}, 10, 20, 30)).init("d", i64([]int64{}, 100)).
				node("Sum", []string{"a", "c", "d"}, []string{"y"})
		}, []int64{111, 121, 131, 112, 122, 132}, []int64{2, 3}},
		{"Max of three", 13, func(b *builder) *builder {
			return b.init("a", i64([]int64{3}, 1, 5, 2)).init("c", i64([]int64{3}, 4, 0, 2)).init("d", i64([]int64{1}, 3)).
				node("Max", []string{"a", "c", "d"}, []string{"y"})
		}, []int64{4, 5, 3}, []int64{3}},
		{"Min of one", 13, func(b *builder) *builder {
			return b.init("a", i64([]int64{2}, 7, -1)).node("Min", []string{"a"}, []string{"y"})
		}, []int64{7, -1}, []int64{2}},
		{"Mean of two", 13, func(b *builder) *builder {
			return b.init("a", i64([]int64{2}, 2, 4)).init("c", i64([]int64{2}, 4, 8)).node("Mean", []string{"a", "c"}, []string{"y"})
		}, []int64{3, 6}, []int64{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.build(newBuilder(c.opset).input("x", 1)).output("y").graph(t)
			if err := g.InferShapes(nil); err != nil {
				t.Fatal(err)
			}
			y := g.Values["y"]
			if y.Const == nil {
				t.Fatal("not folded")
			}
			if !equalInts(y.Const.Shape, c.shape) || !equalInts(y.Const.I64, c.want) {
				t.Errorf("got %v of shape %v, want %v of shape %v", y.Const.I64, y.Const.Shape, c.want, c.shape)
			}
		})
	}
}

// TestOperatorErrors: malformed nodes of the added operators are refused
// with a message naming the problem.
func TestOperatorErrors(t *testing.T) {
	cases := []struct {
		name  string
		opset int64
		build func(b *builder) *builder
		want  string
	}{
		{"ScatterND reduction before opset 16", 14, func(b *builder) *builder {
			return b.init("i", i64([]int64{1, 1}, 0)).input("u", 1).
				node("ScatterND", []string{"x", "i", "u"}, []string{"y"}, attrStr("reduction", "add"))
		}, "needs opset 16"},
		{"ScatterND index out of range", 14, func(b *builder) *builder {
			return b.init("d", i64([]int64{2}, 1, 2)).init("i", i64([]int64{1, 1}, 2)).init("u", i64([]int64{1}, 5)).
				node("ScatterND", []string{"d", "i", "u"}, []string{"y"})
		}, "out of range"},
		{"ScatterND updates shape", 14, func(b *builder) *builder {
			return b.init("i", i64([]int64{2, 1}, 0, 1)).input("u", 3).
				node("ScatterND", []string{"x", "i", "u"}, []string{"y"})
		}, "want (2)"},
		{"Einsum operand count", 12, func(b *builder) *builder {
			return b.node("Einsum", []string{"x"}, []string{"y"}, attrStr("equation", "i,j->ij"))
		}, "2 operands"},
		{"Einsum rank", 12, func(b *builder) *builder {
			return b.node("Einsum", []string{"x"}, []string{"y"}, attrStr("equation", "ij->i"))
		}, "rank 1 but 2 letters"},
		{"Einsum sizes", 12, func(b *builder) *builder {
			return b.input("z", 3).node("Einsum", []string{"x", "z"}, []string{"y"}, attrStr("equation", "i,i->i"))
		}, "size 3"},
		{"Einsum unknown output label", 12, func(b *builder) *builder {
			return b.node("Einsum", []string{"x"}, []string{"y"}, attrStr("equation", "i->j"))
		}, "in no operand"},
		{"PRelu per-channel slope at opset 9", 9, func(b *builder) *builder {
			return b.input("z", 2, 3, 4).input("s", 3).node("PRelu", []string{"z", "s"}, []string{"y"})
		}, "opset ≤ 6 form"},
		{"Split num_outputs against the outputs", 18, func(b *builder) *builder {
			return b.input("z", 6).node("Split", []string{"z"}, []string{"y", "y1"}, attrInt("num_outputs", 3))
		}, "num_outputs 3 with 2 outputs"},
		{"legacy broadcast from a middle axis", 6, func(b *builder) *builder {
			return b.input("z", 2, 3, 4).input("s", 3).
				node("Add", []string{"z", "s"}, []string{"y"}, attrInt("broadcast", 1), attrInt("axis", 1))
		}, "opset 6 broadcasting"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.build(newBuilder(c.opset).input("x", 2)).output("y").graph(t)
			err := g.InferShapes(nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestConvTransposeShapes follows the examples of the ONNX ConvTranspose
// documentation (pads, output_padding, output_shape, auto_pad, groups).
func TestConvTransposeShapes(t *testing.T) {
	cases := []struct {
		name  string
		x, w  []int64
		attrs []*onnxpb.AttributeProto
		want  []int64
		err   string
	}{
		{"plain", []int64{1, 1, 3, 3}, []int64{1, 2, 3, 3}, nil, []int64{1, 2, 5, 5}, ""},
		{"pads", []int64{1, 1, 3, 3}, []int64{1, 2, 3, 3}, []*onnxpb.AttributeProto{attrInts("strides", 3, 2), attrInts("pads", 1, 2, 1, 2)}, []int64{1, 2, 7, 3}, ""},
		{"output_padding", []int64{1, 1, 3, 3}, []int64{1, 2, 3, 3}, []*onnxpb.AttributeProto{attrInts("strides", 3, 2), attrInts("output_padding", 1, 1)}, []int64{1, 2, 10, 8}, ""},
		{"output_shape", []int64{1, 1, 3, 3}, []int64{1, 2, 3, 3}, []*onnxpb.AttributeProto{attrInts("strides", 3, 2), attrInts("output_shape", 10, 8)}, []int64{1, 2, 10, 8}, ""},
		{"same_upper", []int64{1, 1, 3, 3}, []int64{1, 2, 3, 3}, []*onnxpb.AttributeProto{attrInts("strides", 2, 2), attrStr("auto_pad", "SAME_UPPER")}, []int64{1, 2, 6, 6}, ""},
		{"dilations", []int64{1, 1, 3, 3}, []int64{1, 1, 2, 2}, []*onnxpb.AttributeProto{attrInts("dilations", 2, 2)}, []int64{1, 1, 5, 5}, ""},
		{"groups", []int64{1, 4, 3}, []int64{4, 3, 2}, []*onnxpb.AttributeProto{attrInt("group", 2)}, []int64{1, 6, 4}, ""},
		{"output_padding too large", []int64{1, 1, 3}, []int64{1, 1, 3}, []*onnxpb.AttributeProto{attrInts("strides", 2), attrInts("output_padding", 2)}, nil, "must be smaller"},
		{"output_shape too large", []int64{1, 1, 3}, []int64{1, 1, 3}, []*onnxpb.AttributeProto{attrInts("strides", 2), attrInts("output_shape", 9)}, nil, "exceeds"},
		{"channels", []int64{1, 3, 3}, []int64{2, 1, 3}, nil, nil, "want W.shape[0] = channels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := &Tensor{DType: Float32, Shape: c.w, F32: make([]float32, numel(c.w))}
			g := newBuilder(14).input("x", c.x...).init("w", w).
				node("ConvTranspose", []string{"x", "w"}, []string{"y"}, c.attrs...).output("y").graph(t)
			err := g.InferShapes(nil)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Values["y"].Shape.Ints(); !equalInts(got, c.want) {
				t.Errorf("output %v, want %v", got, c.want)
			}
		})
	}
}
