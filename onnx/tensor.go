package onnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// DataType is an ONNX tensor element type (TensorProto.DataType).
type DataType = onnxpb.TensorProto_DataType

// ElemSize returns the size in bytes of one element of dt, or 0 for types
// without a fixed byte size (STRING, the 4- and 2-bit types, UNDEFINED).
func ElemSize(dt DataType) int {
	switch dt {
	case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_INT32, onnxpb.TensorProto_UINT32:
		return 4
	case onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_INT64, onnxpb.TensorProto_UINT64,
		onnxpb.TensorProto_COMPLEX64:
		return 8
	case onnxpb.TensorProto_COMPLEX128:
		return 16
	case onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16, onnxpb.TensorProto_INT16,
		onnxpb.TensorProto_UINT16:
		return 2
	case onnxpb.TensorProto_INT8, onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL,
		onnxpb.TensorProto_FLOAT8E4M3FN, onnxpb.TensorProto_FLOAT8E4M3FNUZ,
		onnxpb.TensorProto_FLOAT8E5M2, onnxpb.TensorProto_FLOAT8E5M2FNUZ,
		onnxpb.TensorProto_FLOAT8E8M0:
		return 1
	}
	return 0
}

// NumElements returns the product of dims, or an error for a negative
// dimension or an element count that overflows.
func NumElements(dims []int64) (int64, error) {
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in %v", d, dims)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("dimensions %v overflow", dims)
		}
		n *= d
	}
	return n, nil
}

// wantBytes returns the byte size a tensor's data must have, if its type has
// a fixed element size and its dims are valid.
func wantBytes(t *onnxpb.TensorProto) (int64, bool) {
	es := ElemSize(DataType(t.GetDataType()))
	if es == 0 {
		return 0, false
	}
	n, err := NumElements(t.GetDims())
	if err != nil || n > math.MaxInt64/int64(es) {
		return 0, false
	}
	return n * int64(es), true
}

// TensorBytes returns the elements of a tensor of a fixed-size type as
// little-endian bytes in row-major order, wherever the model stores them
// (raw_data, the typed *_data fields, or external data). The returned slice
// may alias the model's storage: do not modify it. m may be nil for a
// tensor that is not part of a loaded model (such as a node attribute built
// in memory).
func (m *Model) TensorBytes(t *onnxpb.TensorProto) ([]byte, error) {
	dt := DataType(t.GetDataType())
	want, ok := wantBytes(t)
	if !ok {
		if _, err := NumElements(t.GetDims()); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.GetName(), err)
		}
		return nil, fmt.Errorf("tensor %q: element type %v has no fixed byte size", t.GetName(), dt)
	}
	var b []byte
	switch {
	case isExternal(t):
		var held bool
		if m != nil {
			b, held = m.external[t]
		}
		if !held {
			return nil, fmt.Errorf("tensor %q: external data not loaded", t.GetName())
		}
	case t.RawData != nil:
		b = t.GetRawData()
	default:
		b = typedBytes(t, dt, want)
	}
	if int64(len(b)) != want {
		return nil, fmt.Errorf("tensor %q: %d data bytes for %v of shape %v (want %d)", t.GetName(), len(b), dt, t.GetDims(), want)
	}
	return b, nil
}

// typedBytes converts the typed *_data fields to raw little-endian bytes.
// It returns what the fields hold; the caller checks the size.
func typedBytes(t *onnxpb.TensorProto, dt DataType, want int64) []byte {
	le := binary.LittleEndian
	switch dt {
	case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_COMPLEX64:
		b := make([]byte, 0, 4*len(t.GetFloatData()))
		for _, v := range t.GetFloatData() {
			b = le.AppendUint32(b, math.Float32bits(v))
		}
		return b
	case onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_COMPLEX128:
		b := make([]byte, 0, 8*len(t.GetDoubleData()))
		for _, v := range t.GetDoubleData() {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
		return b
	case onnxpb.TensorProto_INT64:
		b := make([]byte, 0, 8*len(t.GetInt64Data()))
		for _, v := range t.GetInt64Data() {
			b = le.AppendUint64(b, uint64(v))
		}
		return b
	case onnxpb.TensorProto_UINT64:
		b := make([]byte, 0, 8*len(t.GetUint64Data()))
		for _, v := range t.GetUint64Data() {
			b = le.AppendUint64(b, v)
		}
		return b
	case onnxpb.TensorProto_UINT32:
		b := make([]byte, 0, 4*len(t.GetUint64Data()))
		for _, v := range t.GetUint64Data() {
			b = le.AppendUint32(b, uint32(v))
		}
		return b
	case onnxpb.TensorProto_INT32:
		b := make([]byte, 0, 4*len(t.GetInt32Data()))
		for _, v := range t.GetInt32Data() {
			b = le.AppendUint32(b, uint32(v))
		}
		return b
	}
	// The remaining types store one element per int32_data entry, narrowed
	// to the element size.
	es := ElemSize(dt)
	b := make([]byte, 0, es*len(t.GetInt32Data()))
	for _, v := range t.GetInt32Data() {
		switch es {
		case 1:
			b = append(b, byte(v))
		case 2:
			b = le.AppendUint16(b, uint16(v))
		}
	}
	return b
}

// SetTensorBytes replaces the data of t with b (little-endian, row-major).
// An external tensor whose size is unchanged stays external at the same
// place; otherwise the data is stored inline in raw_data.
func (m *Model) SetTensorBytes(t *onnxpb.TensorProto, b []byte) error {
	if want, ok := wantBytes(t); !ok || want != int64(len(b)) {
		return fmt.Errorf("onnx: tensor %q: %d bytes do not fit %v of shape %v", t.GetName(), len(b), DataType(t.GetDataType()), t.GetDims())
	}
	if isExternal(t) {
		if old, ok := m.external[t]; ok && len(old) == len(b) {
			m.external[t] = b
			return nil
		}
	}
	delete(m.external, t)
	clearData(t)
	t.RawData = b
	return nil
}

// clearData removes every data field of t.
func clearData(t *onnxpb.TensorProto) {
	t.RawData = nil
	t.FloatData = nil
	t.Int32Data = nil
	t.Int64Data = nil
	t.DoubleData = nil
	t.Uint64Data = nil
	t.StringData = nil
	t.ExternalData = nil
	t.DataLocation = nil
}
