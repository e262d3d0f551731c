package graph

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

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
	mark := func(v *Value, d DType) {
		if v != nil && v.Half == Undefined {
			v.Half = d
		}
	}
	for _, v := range g.Values {
		if v.Const != nil && half(v.Const.DType) {
			mark(v, v.Const.DType)
			v.Const = widenHalf(v.Const)
		}
		if half(v.DType) {
			mark(v, v.DType)
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
				mark(n.Output(0), DType(a.GetI()))
			case a.GetName() == "dtype" && dtypeAttrOps[n.OpType] && half(DType(a.GetI())):
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.I = proto.Int64(int64(Float32))
				mark(n.Output(0), DType(a.GetI()))
			case a.GetT() != nil && half(DType(a.GetT().GetDataType())):
				t, err := TensorFromProto(g.model, a.GetT())
				if err != nil {
					continue // left for the node's own rule to report
				}
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.T = widenHalf(t).ToProto(a.GetT().GetName())
				mark(n.Output(0), t.DType)
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
	if len(out) == 1 {
		g.HalfFrom = out[0]
	}
	return out, nil
}

// NarrowHalf writes a graph UpcastHalf widened back in the half-precision
// type it was exported in (g.HalfFrom; nothing for Undefined), so that a
// model given in float16 comes back in float16: the trained weights
// rounded to it, the inputs and outputs declared in it.
//
// What is narrowed is what computes in one type with a value that was in
// half precision: values are joined where an operator requires one type
// of its operands and results (typeLinked: Add's inputs and output, not
// Reshape's shape or Where's condition, nor anything across a Cast), and
// every float32 constant, Cast target, generator dtype and declared type
// in a group that holds a value marked Half becomes half precision. The
// nodes a rewrite added (a GroupNorm's decomposition, a new head) join the
// groups of what they compute with; parts the model computes in float32
// on purpose (a LayerNorm behind Casts) stay float32.
func (g *Graph) NarrowHalf() error {
	dt := g.HalfFrom
	if dt != Float16 && dt != BFloat16 {
		return nil
	}
	parent := map[*Value]*Value{}
	var find func(v *Value) *Value
	find = func(v *Value) *Value {
		p, ok := parent[v]
		if !ok || p == v {
			return v
		}
		r := find(p)
		parent[v] = r
		return r
	}
	union := func(a, b *Value) {
		if a == nil || b == nil {
			return
		}
		ra, rb := find(a), find(b)
		if ra != rb {
			parent[ra] = rb
		}
	}
	for _, n := range g.Nodes {
		vs := typeLinked(n)
		for i := 1; i < len(vs); i++ {
			union(vs[0], vs[i])
		}
	}
	halfRoot := map[*Value]bool{}
	for _, v := range g.Values {
		if v.Half != Undefined {
			halfRoot[find(v)] = true
		}
	}
	in := func(v *Value) bool { return v != nil && halfRoot[find(v)] }
	for _, v := range g.Values {
		if !in(v) {
			continue
		}
		if v.Const != nil && v.Const.DType == Float32 {
			v.Const = narrowHalf(v.Const, dt)
		}
		if v.DType == Float32 {
			v.DType = dt
		}
	}
	for _, n := range g.Nodes {
		if !in(n.Output(0)) {
			continue
		}
		for i, a := range n.Attrs {
			var na *onnxpb.AttributeProto
			switch {
			case a.GetName() == "to" && n.OpType == "Cast" && DType(a.GetI()) == Float32,
				a.GetName() == "dtype" && dtypeAttrOps[n.OpType] && DType(a.GetI()) == Float32:
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.I = proto.Int64(int64(dt))
			case a.GetT() != nil && DType(a.GetT().GetDataType()) == Float32:
				t, err := TensorFromProto(g.model, a.GetT())
				if err != nil {
					return fmt.Errorf("graph: node %s: %w", n, err)
				}
				na = proto.Clone(a).(*onnxpb.AttributeProto)
				na.T = narrowHalf(t, dt).ToProto(a.GetT().GetName())
			}
			if na != nil {
				attrs := append([]*onnxpb.AttributeProto(nil), n.Attrs...)
				attrs[i] = na
				n.Attrs = attrs
			}
		}
	}
	return nil
}

// typeLinked lists the inputs and outputs of n that ONNX requires to be
// of one type with its first (the operator's type T): all of them but
// what an operator takes or makes in another type — shapes, axes, indices,
// conditions, comparisons' results, a Cast's either side.
func typeLinked(n *Node) []*Value {
	if n.Domain != "" {
		return nil
	}
	var skipIn, skipOut []int
	switch n.OpType {
	case "Cast", "Shape", "Size", "ConstantOfShape", "EyeLike", "RandomNormalLike", "RandomUniformLike", "Multinomial",
		"NonZero", "ArgMax", "ArgMin", "IsNaN", "IsInf", "Not", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr",
		"BitwiseXor", "BitwiseNot", "OneHot", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Bernoulli",
		"Loop", "If", "Scan", "StringNormalizer", "TfIdfVectorizer":
		return nil
	case "CastLike":
		return []*Value{n.Output(0), n.Input(1)}
	case "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual":
		skipOut = []int{0}
	case "Where":
		skipIn = []int{0}
	case "Reshape", "Expand", "Tile", "Unsqueeze", "Squeeze", "Gather", "GatherElements", "GatherND", "ScatterND",
		"ScatterElements", "Split", "Upsample", "Trilu", "CumSum", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
		"ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare":
		skipIn = []int{1}
	case "Slice":
		skipIn = []int{1, 2, 3, 4}
	case "Pad":
		skipIn = []int{1, 3}
	case "Resize":
		skipIn = []int{1, 2, 3}
	case "TopK":
		skipIn, skipOut = []int{1}, []int{1}
	case "Dropout":
		skipIn, skipOut = []int{1, 2}, []int{1}
	case "MaxPool":
		skipOut = []int{1}
	case "LayerNormalization":
		skipOut = []int{1, 2}
	}
	var out []*Value
	for i, v := range n.Inputs {
		if v != nil && !slices.Contains(skipIn, i) {
			out = append(out, v)
		}
	}
	for i, v := range n.Outputs {
		if v != nil && !slices.Contains(skipOut, i) {
			out = append(out, v)
		}
	}
	return out
}

// narrowHalf returns t (float32) rounded to dt (Float16 or BFloat16),
// to nearest even, its bytes in Raw.
func narrowHalf(t *Tensor, dt DType) *Tensor {
	n := &Tensor{DType: dt, Shape: append([]int64(nil), t.Shape...), Raw: make([]byte, 2*len(t.F32))}
	for i, f := range t.F32 {
		var h uint16
		if dt == BFloat16 {
			h = Float32ToBFloat16(f)
		} else {
			h = Float32ToHalf(f)
		}
		binary.LittleEndian.PutUint16(n.Raw[2*i:], h)
	}
	return n
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

// Float32ToHalf rounds f to the nearest IEEE 754 binary16 value (ties to
// even): past the largest finite half (65504, up to the rounding point
// 65520) it is infinite, below the smallest subnormal's half it is a
// signed zero, and a NaN stays a NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	frac := b & 0x7fffff
	switch {
	case exp == 0xff: // infinity or NaN (a quiet NaN whatever the payload)
		if frac != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15:
		return sign | 0x7c00
	}
	// The value as a 24-bit significand m times 2^(e): m = 1.frac for
	// normal floats.
	e := exp - 127
	m := frac | 0x800000
	if exp == 0 {
		m, e = frac, -126 // a float32 subnormal: far below half's range
	}
	// Half keeps 11 significant bits down to 2⁻¹⁴ (normal) and a fixed
	// step of 2⁻²⁴ below it (subnormal): shift is how many low bits of m
	// go.
	shift := int32(13)
	if e < -14 {
		shift += -14 - e
	}
	if shift > 24 {
		return sign // under half the smallest subnormal
	}
	q := m >> uint(shift)
	rem := m & (1<<uint(shift) - 1)
	halfway := uint32(1) << uint(shift-1)
	if rem > halfway || rem == halfway && q&1 == 1 {
		q++
	}
	if e < -14 {
		// Subnormal: q counts steps of 2⁻²⁴ (a carry into 0x400 is the
		// smallest normal, encoded the same way).
		return sign | uint16(q)
	}
	// Normal: q holds the implicit bit at 1<<10; a carry to 1<<11 bumps
	// the exponent.
	he := uint32(e + 15)
	if q >= 1<<11 {
		q >>= 1
		he++
	}
	if he >= 31 {
		return sign | 0x7c00
	}
	return sign | uint16(he<<10) | uint16(q&0x3ff)
}

// Float32ToBFloat16 rounds f to bfloat16 (float32's upper half), ties to
// even; a NaN stays a NaN.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
