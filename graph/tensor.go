package graph

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/internal/sysmem"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// DType is the element type of a value. Its values are those of ONNX
// TensorProto.DataType.
type DType int32

// The element types the engine computes with. Other ONNX types load (their
// bytes are kept in Tensor.Raw) but only pass through.
const (
	Undefined DType = DType(onnxpb.TensorProto_UNDEFINED)
	Float32   DType = DType(onnxpb.TensorProto_FLOAT)
	Uint8     DType = DType(onnxpb.TensorProto_UINT8)
	Int8      DType = DType(onnxpb.TensorProto_INT8)
	Int32     DType = DType(onnxpb.TensorProto_INT32)
	Int64     DType = DType(onnxpb.TensorProto_INT64)
	Bool      DType = DType(onnxpb.TensorProto_BOOL)
	Float16   DType = DType(onnxpb.TensorProto_FLOAT16)
	Float64   DType = DType(onnxpb.TensorProto_DOUBLE)
	String    DType = DType(onnxpb.TensorProto_STRING)
)

func (d DType) String() string {
	s := onnxpb.TensorProto_DataType(d).String()
	if s == "FLOAT" {
		return "float32"
	}
	if s == "DOUBLE" {
		return "float64"
	}
	return lower(s)
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case Float32, Float64, Float16, BFloat16:
		return true
	}
	return false
}

// Tensor is a constant: an initializer or a folded value. Exactly one of the
// typed slices holds the elements, according to DType: F32 (Float32), F64
// (Float64), I64 (Int64, and Int32/Int8/Uint8 widened), B (Bool); any other
// type keeps its little-endian bytes in Raw.
type Tensor struct {
	DType DType
	Shape []int64
	F32   []float32
	F64   []float64
	I64   []int64
	B     []bool
	Raw   []byte
}

// Len returns the number of elements.
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= int(d)
	}
	return n
}

// At returns element i of a numeric tensor as float64 (NaN for other types).
func (t *Tensor) At(i int) float64 {
	switch {
	case t.F32 != nil:
		return float64(t.F32[i])
	case t.F64 != nil:
		return t.F64[i]
	case t.I64 != nil:
		return float64(t.I64[i])
	case t.B != nil:
		if t.B[i] {
			return 1
		}
		return 0
	}
	return math.NaN()
}

// Ints returns the elements of an integer tensor.
func (t *Tensor) Ints() ([]int64, error) {
	if t.I64 == nil && t.Len() > 0 {
		return nil, fmt.Errorf("tensor of type %v is not an integer tensor", t.DType)
	}
	return t.I64, nil
}

// TensorFromProto decodes an ONNX tensor, reading its bytes from m
// (which resolves raw_data, typed fields and external data).
func TensorFromProto(m *onnx.Model, p *onnxpb.TensorProto) (*Tensor, error) {
	t := &Tensor{DType: DType(p.GetDataType()), Shape: append([]int64{}, p.GetDims()...)}
	n64, err := onnx.NumElements(t.Shape)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", p.GetName(), err)
	}
	if t.DType == String {
		if int64(len(p.GetStringData())) != n64 {
			return nil, fmt.Errorf("tensor %q: %d strings for shape %v", p.GetName(), len(p.GetStringData()), t.Shape)
		}
		return t, nil
	}
	b, err := m.TensorBytes(p)
	if err != nil {
		return nil, err
	}
	// Integer types widen to int64 (8 bytes from 1 for int8): the decoded
	// size, not the file's, is what memory must hold.
	if dec := n64 * decodedSize(t.DType); dec > int64(len(b)) {
		if avail, src, ok := sysmem.Available(); ok && dec > avail {
			return nil, fmt.Errorf("tensor %q: %v of shape %v decodes to %s, more than the %s of memory available (%s)",
				p.GetName(), t.DType, t.Shape, FormatBytes(float64(dec)), FormatBytes(float64(avail)), src)
		}
	}
	n := int(n64)
	le := binary.LittleEndian
	switch t.DType {
	case Float32:
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case Float64:
		t.F64 = make([]float64, n)
		for i := range t.F64 {
			t.F64[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
	case Int64:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(le.Uint64(b[8*i:]))
		}
	case Int32:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(int32(le.Uint32(b[4*i:])))
		}
	case Int8:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(int8(b[i]))
		}
	case Uint8:
		t.I64 = make([]int64, n)
		for i := range t.I64 {
			t.I64[i] = int64(b[i])
		}
	case Bool:
		t.B = make([]bool, n)
		for i := range t.B {
			t.B[i] = b[i] != 0
		}
	default:
		t.Raw = append([]byte(nil), b...)
	}
	return t, nil
}

// decodedSize is the bytes one element takes once decoded into a Tensor.
func decodedSize(dt DType) int64 {
	switch dt {
	case Float32:
		return 4
	case Int64, Int32, Int8, Uint8, Float64:
		return 8
	case Bool:
		return 1
	}
	return elemBytes(dt)
}

// Bytes encodes the elements little-endian in the tensor's own type.
func (t *Tensor) Bytes() []byte {
	le := binary.LittleEndian
	switch t.DType {
	case Float32:
		b := make([]byte, 0, 4*len(t.F32))
		for _, v := range t.F32 {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
		return b
	case Float64:
		b := make([]byte, 0, 8*len(t.F64))
		for _, v := range t.F64 {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
		return b
	case Int64:
		b := make([]byte, 0, 8*len(t.I64))
		for _, v := range t.I64 {
			b = le.AppendUint64(b, uint64(v))
		}
		return b
	case Int32:
		b := make([]byte, 0, 4*len(t.I64))
		for _, v := range t.I64 {
			b = le.AppendUint32(b, uint32(int32(v)))
		}
		return b
	case Int8, Uint8:
		b := make([]byte, 0, len(t.I64))
		for _, v := range t.I64 {
			b = append(b, byte(v))
		}
		return b
	case Bool:
		b := make([]byte, len(t.B))
		for i, v := range t.B {
			if v {
				b[i] = 1
			}
		}
		return b
	}
	return t.Raw
}

// ToProto encodes the tensor as an ONNX TensorProto with raw_data.
func (t *Tensor) ToProto(name string) *onnxpb.TensorProto {
	nm := name
	dt := int32(t.DType)
	return &onnxpb.TensorProto{Name: &nm, DataType: &dt, Dims: append([]int64{}, t.Shape...), RawData: t.Bytes()}
}

// newTensor allocates a zero tensor of the given type and shape.
func newTensor(dt DType, shape []int64) *Tensor {
	t := &Tensor{DType: dt, Shape: append([]int64{}, shape...)}
	n := t.Len()
	switch dt {
	case Float32:
		t.F32 = make([]float32, n)
	case Float64:
		t.F64 = make([]float64, n)
	case Int64, Int32, Int8, Uint8:
		t.I64 = make([]int64, n)
	case Bool:
		t.B = make([]bool, n)
	default:
		t.Raw = make([]byte, n*onnx.ElemSize(onnxpb.TensorProto_DataType(dt)))
	}
	return t
}

// take returns a tensor of the given shape whose element i is t's element
// idx[i]: the one primitive behind Gather, Slice, Expand, Transpose and
// Reshape during constant folding.
func (t *Tensor) take(shape []int64, idx []int) *Tensor {
	out := &Tensor{DType: t.DType, Shape: append([]int64{}, shape...)}
	switch {
	case t.F32 != nil:
		out.F32 = make([]float32, len(idx))
		for i, j := range idx {
			out.F32[i] = t.F32[j]
		}
	case t.F64 != nil:
		out.F64 = make([]float64, len(idx))
		for i, j := range idx {
			out.F64[i] = t.F64[j]
		}
	case t.I64 != nil:
		out.I64 = make([]int64, len(idx))
		for i, j := range idx {
			out.I64[i] = t.I64[j]
		}
	case t.B != nil:
		out.B = make([]bool, len(idx))
		for i, j := range idx {
			out.B[i] = t.B[j]
		}
	default:
		es := onnx.ElemSize(onnxpb.TensorProto_DataType(t.DType))
		out.Raw = make([]byte, len(idx)*es)
		for i, j := range idx {
			copy(out.Raw[i*es:(i+1)*es], t.Raw[j*es:(j+1)*es])
		}
	}
	return out
}
