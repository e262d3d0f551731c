package torchfile

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Tensor is one named tensor of float32 values in row-major order.
type Tensor struct {
	Name  string
	Shape []int64
	Data  []float32
}

// check says what is wrong with ts: a name empty, repeated or not UTF-8, a
// negative dimension, or a shape whose element count is not len(Data).
func check(ts []Tensor) error {
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		switch {
		case t.Name == "":
			return errors.New("torchfile: a tensor has no name")
		case !utf8.ValidString(t.Name):
			return fmt.Errorf("torchfile: tensor name %q is not UTF-8", t.Name)
		case seen[t.Name]:
			return fmt.Errorf("torchfile: tensor %q twice", t.Name)
		}
		seen[t.Name] = true
		n := int64(1)
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("torchfile: tensor %q: negative dimension in shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		if n != int64(len(t.Data)) {
			return fmt.Errorf("torchfile: tensor %q: shape %v holds %d values, got %d", t.Name, t.Shape, n, len(t.Data))
		}
	}
	return nil
}

// le returns d's bytes, little-endian.
func le(d []float32) []byte {
	b := make([]byte, 4*len(d))
	for i, v := range d {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// Archive is the directory every record of a WritePT archive lies in
// (torch.load takes it from the first record; torch.save names it after
// the file).
const Archive = "archive"

// align is the boundary each storage's bytes start on.
const align = 64

// WritePT writes ts to w as torch.save writes an OrderedDict of
// contiguous float32 CPU tensors, in ts's order, and each of extra's
// records (a name under the archive's directory, such as
// "extra/dpfinetune.json", and its bytes) beside them: torch.load ignores
// records it does not read.
func WritePT(w io.Writer, ts []Tensor, extra map[string][]byte) error {
	if err := check(ts); err != nil {
		return err
	}
	names := make([]string, 0, len(extra))
	for n := range extra {
		if n == "" || n == "data.pkl" || n == "version" || n == "byteorder" || strings.HasPrefix(n, "data/") {
			return fmt.Errorf("torchfile: extra record %q would shadow torch.save's own", n)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	zw := zip.NewWriter(w)
	var off int64
	put := func(name string, data []byte, aligned bool) error {
		name = Archive + "/" + name
		var ex []byte
		if aligned {
			// A local header is 30 bytes, the name and the extra field;
			// the extra field pads to the boundary (an unknown field's
			// ID, which readers skip).
			pad := (align - (off+30+int64(len(name))+4)%align) % align
			ex = make([]byte, 4+pad)
			binary.LittleEndian.PutUint16(ex, 0x4650)
			binary.LittleEndian.PutUint16(ex[2:], uint16(pad))
		}
		fh := &zip.FileHeader{Name: name, Method: zip.Store, Extra: ex,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data))}
		fw, err := zw.CreateRaw(fh)
		if err != nil {
			return fmt.Errorf("torchfile: %s: %w", name, err)
		}
		if _, err := fw.Write(data); err != nil {
			return fmt.Errorf("torchfile: %s: %w", name, err)
		}
		// CreateRaw writes the local header as given: no data
		// descriptor after the bytes, no field of its own.
		off += 30 + int64(len(name)) + int64(len(ex)) + int64(len(data))
		return nil
	}
	if err := put("data.pkl", pickle(ts), false); err != nil {
		return err
	}
	if err := put("byteorder", []byte("little"), false); err != nil {
		return err
	}
	for i, t := range ts {
		if err := put("data/"+strconv.Itoa(i), le(t.Data), true); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := put(n, extra[n], false); err != nil {
			return err
		}
	}
	if err := put("version", []byte("3\n"), false); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("torchfile: %w", err)
	}
	return nil
}

// pickle returns data.pkl for ts: protocol 2, the opcodes torch.load's
// weights-only unpickler accepts.
func pickle(ts []Tensor) []byte {
	var b bytes.Buffer
	op := func(c ...byte) { b.Write(c) }
	global := func(mod, name string) { b.WriteString("c" + mod + "\n" + name + "\n") }
	str := func(s string) {
		op('X')
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
		b.Write(n[:])
		b.WriteString(s)
	}
	integer := func(v int64) {
		switch {
		case v >= 0 && v < 256:
			op('K', byte(v))
		case v >= math.MinInt32 && v <= math.MaxInt32:
			var n [4]byte
			binary.LittleEndian.PutUint32(n[:], uint32(int32(v)))
			op('J')
			b.Write(n[:])
		default: // LONG1: 8 bytes of two's complement
			var n [8]byte
			binary.LittleEndian.PutUint64(n[:], uint64(v))
			op(0x8a, 8)
			b.Write(n[:])
		}
	}
	tuple := func(vs []int64) {
		if len(vs) == 0 {
			op(')')
			return
		}
		op('(')
		for _, v := range vs {
			integer(v)
		}
		op('t')
	}
	orderedDict := func() {
		global("collections", "OrderedDict")
		op(')', 'R')
	}
	op(0x80, 2) // PROTO 2
	orderedDict()
	if len(ts) > 0 {
		op('(')
		for i, t := range ts {
			str(t.Name)
			global("torch._utils", "_rebuild_tensor_v2")
			op('(')
			// persistent id: ('storage', torch.FloatStorage, key, 'cpu', numel)
			op('(')
			str("storage")
			global("torch", "FloatStorage")
			str(strconv.Itoa(i))
			str("cpu")
			integer(int64(len(t.Data)))
			op('t', 'Q')
			integer(0) // storage offset
			tuple(t.Shape)
			stride := make([]int64, len(t.Shape))
			s := int64(1)
			for j := len(t.Shape) - 1; j >= 0; j-- {
				stride[j] = s
				s *= t.Shape[j]
			}
			tuple(stride)
			op(0x89) // requires_grad: False
			orderedDict()
			op('t', 'R')
		}
		op('u')
	}
	op('.')
	return b.Bytes()
}

// WriteSafetensors writes ts to w as a safetensors file, in ts's order,
// with metadata as the header's "__metadata__" (string to string, as the
// format allows).
func WriteSafetensors(w io.Writer, ts []Tensor, metadata map[string]string) error {
	if err := check(ts); err != nil {
		return err
	}
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int64  `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	// The header is written by hand to keep ts's order (a JSON object's
	// keys in encoding/json's maps would be sorted); each value by
	// encoding/json.
	var h bytes.Buffer
	h.WriteByte('{')
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return fmt.Errorf("torchfile: metadata: %w", err)
		}
		h.WriteString(`"__metadata__":`)
		h.Write(m)
	}
	var off int64
	for i, t := range ts {
		if t.Name == "__metadata__" {
			return errors.New(`torchfile: a tensor may not be named "__metadata__" in safetensors`)
		}
		if i > 0 || len(metadata) > 0 {
			h.WriteByte(',')
		}
		k, _ := json.Marshal(t.Name) // a UTF-8 string always marshals
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		e, _ := json.Marshal(entry{DType: "F32", Shape: shape, Offsets: [2]int64{off, off + 4*int64(len(t.Data))}})
		h.Write(k)
		h.WriteByte(':')
		h.Write(e)
		off += 4 * int64(len(t.Data))
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 { // the data 8-byte aligned, as the format's writers pad
		h.WriteByte(' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	if _, err := w.Write(n[:]); err != nil {
		return fmt.Errorf("torchfile: %w", err)
	}
	if _, err := w.Write(h.Bytes()); err != nil {
		return fmt.Errorf("torchfile: %w", err)
	}
	for _, t := range ts {
		if _, err := w.Write(le(t.Data)); err != nil {
			return fmt.Errorf("torchfile: %w", err)
		}
	}
	return nil
}
