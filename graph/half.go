package graph

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// BFloat16 is ONNX's bfloat16 element type.
const BFloat16 = DType(onnxpb.TensorProto_BFLOAT16)

// dtypeAttrOps name the operators whose dtype attribute says the element
// type of what they make.
var dtypeAttrOps = map[string]bool{"EyeLike": true, "RandomNormal": true, "RandomUniform": true,
	"RandomNormalLike": true, "RandomUniformLike": true, "Multinomial": true}

// UpcastHalf makes a model exported in float16 or bfloat16 (model.half()
// before torch.onnx.export) a float32 one, so that it runs, trains and
// exports in float32: every half-precision initializer and constant is
// widened (exactly: float32 holds every float16 and bfloat16 value), every
// value declared in half precision is declared float32, and the operators
// that make half-precision tensors (Cast, ConstantOfShape, the random
// generators, EyeLike) make float32 ones. It returns the half-precision
// types it found (none for a float32 model, which it leaves as it is).
//
// The model then computes in float32 what it computed in half precision:
// the same function, rounded less. Parts of a model that cast to float32
// on purpose (a LayerNorm kept in float32) are unchanged.
//
// Widening doubles the weights' memory: where that is more than the memory
// available, UpcastHalf changes nothing and says so.
func (g *Graph) UpcastHalf() ([]DType, error) { return g.upcastHalf(sysmem.Available) }

func (g *Graph) upcastHalf(available func() (int64, string, bool)) ([]DType, error) {
	var need int64
	for _, v := range g.Values {
		if v.Const != nil && (v.Const.DType == Float16 || v.Const.DType == BFloat16) {
			need += 2 * int64(len(v.Const.Raw))
		}
	}
	if avail, src, ok := available(); ok && need > avail {
		return nil, fmt.Errorf("graph: widening the half-precision weights to float32 takes %s, more than the %s of memory available (%s)",
			FormatBytes(float64(need)), FormatBytes(float64(avail)), src)
	}
	found := map[DType]bool{}
	half := func(d DType) bool {
		if d == Float16 || d == BFloat16 {
			found[d] = true
			return true
		}
		return false
	}
	for _, v := range g.Values {
		if v.Const != nil && half(v.Const.DType) {
			v.Const = widenHalf(v.Const)
		}
		if half(v.DType) {
			v.DType = Float32
		}
	}
	for _, n := range g.Nodes {
		for i, a := range n.Attrs {
			var na *onnxpb.AttributeProto
			switch {
			case a.GetName() == "to" && n.OpType == "Cast" && half(DType(a.GetI())):
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.I = proto.Int64(int64(Float32))
			case a.GetName() == "dtype" && dtypeAttrOps[n.OpType] && half(DType(a.GetI())):
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.I = proto.Int64(int64(Float32))
			case a.GetT() != nil && half(DType(a.GetT().GetDataType())):
				t, err := TensorFromProto(g.model, a.GetT())
				if err != nil {
					continue // left for the node's own rule to report
				}
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.T = widenHalf(t).ToProto(a.GetT().GetName())
			}
			if na != nil {
				// A new attribute (the loaded one may be shared with the
				// model's proto): the node is written anew on export.
				attrs := append([]*onnxpb.AttributeProto(nil), n.Attrs...)
				attrs[i] = na
				n.Attrs = attrs
			}
		}
	}
	var out []DType
	for _, d := range []DType{Float16, BFloat16} {
		if found[d] {
			out = append(out, d)
		}
	}
	return out, nil
}

// widenHalf returns t (float16 or bfloat16, its bytes in Raw) as float32.
func widenHalf(t *Tensor) *Tensor {
	w := &Tensor{DType: Float32, Shape: append([]int64(nil), t.Shape...), F32: make([]float32, len(t.Raw)/2)}
	for i := range w.F32 {
		h := binary.LittleEndian.Uint16(t.Raw[2*i:])
		if t.DType == BFloat16 {
			w.F32[i] = math.Float32frombits(uint32(h) << 16)
		} else {
			w.F32[i] = HalfToFloat32(h)
		}
	}
	return w
}

// HalfToFloat32 widens an IEEE 754 binary16 value.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0: // zero or subnormal: frac·2⁻²⁴
		f := float32(frac) / (1 << 24)
		return math.Float32frombits(math.Float32bits(f) | sign)
	case exp == 0x1f: // infinity or NaN, the payload kept
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}
