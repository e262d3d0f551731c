// Package npy reads and writes NumPy .npy arrays and reads .npz archives.
//
// Supported element types are float32 (<f4), float64 (<f8), int64 (<i8),
// int32 (<i4), uint8 (|u1), bool (|b1) and Unicode strings (<Un: a class
// name list, np.array(["cat", "dog"])), in C (row-major) order, little-endian, with
// format versions 1.0, 2.0 and 3.0 (read) and 1.0 or 2.0 (written, 2.0 only
// when the header needs it). Fortran-order, big-endian and object arrays are
// rejected with an error that says so.
package npy

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
)

// DType is the element type of an array.
type DType string

// The supported element types, by their NumPy names.
const (
	Float32 DType = "float32"
	Float64 DType = "float64"
	Int64   DType = "int64"
	Int32   DType = "int32"
	Uint8   DType = "uint8"
	Bool    DType = "bool"
	// Unicode is NumPy's str_: fixed-width UTF-32 strings (<Un, n code
	// points each, shorter ones padded with NULs).
	Unicode DType = "str"
)

// maxUnicode bounds the width of a Unicode array's elements, in code points.
const maxUnicode = 1 << 16

var descrOf = map[DType]string{Float32: "<f4", Float64: "<f8", Int64: "<i8", Int32: "<i4", Uint8: "|u1", Bool: "|b1"}

var sizeOf = map[DType]int{Float32: 4, Float64: 8, Int64: 8, Int32: 4, Uint8: 1, Bool: 1}

// Array is a dense C-order array. Exactly one data slice is set, according
// to DType: F32 (float32), F64 (float64), I64 (int64), I32 (int32), U8
// (uint8: images as pixels), B (bool) or Str (Unicode).
type Array struct {
	DType DType
	Shape []int
	F32   []float32
	F64   []float64
	I64   []int64
	I32   []int32
	U8    []uint8
	B     []bool
	Str   []string
}

// Len returns the number of elements the shape describes (1 for a scalar).
func (a *Array) Len() int {
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

// dataLen returns the length of the data slice that is set.
func (a *Array) dataLen() int {
	switch a.DType {
	case Float32:
		return len(a.F32)
	case Float64:
		return len(a.F64)
	case Int64:
		return len(a.I64)
	case Int32:
		return len(a.I32)
	case Uint8:
		return len(a.U8)
	case Bool:
		return len(a.B)
	case Unicode:
		return len(a.Str)
	}
	return -1
}

// NewFloat32 returns a float32 array of the given shape holding data (not
// copied).
func NewFloat32(data []float32, shape ...int) *Array {
	return &Array{DType: Float32, Shape: append([]int(nil), shape...), F32: data}
}

// NewInt64 returns an int64 array of the given shape holding data (not
// copied).
func NewInt64(data []int64, shape ...int) *Array {
	return &Array{DType: Int64, Shape: append([]int(nil), shape...), I64: data}
}

var magic = []byte("\x93NUMPY")

// maxHeader bounds the header length a reader accepts.
const maxHeader = 1 << 20

// Read decodes one .npy array from r.
func Read(r io.Reader) (*Array, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("npy: reading magic: %w", err)
	}
	if !bytes.Equal(pre[:6], magic) {
		return nil, errors.New("npy: not a .npy file (bad magic)")
	}
	major := pre[6]
	var hlen int
	switch major {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("npy: reading header length: %w", err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, fmt.Errorf("npy: reading header length: %w", err)
		}
		hlen = int(binary.LittleEndian.Uint32(b[:]))
	default:
		return nil, fmt.Errorf("npy: unsupported format version %d.%d", pre[6], pre[7])
	}
	if hlen > maxHeader {
		return nil, fmt.Errorf("npy: header of %d bytes is too long", hlen)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("npy: reading header: %w", err)
	}
	descr, fortran, shape, err := parseHeader(string(hdr))
	if err != nil {
		return nil, fmt.Errorf("npy: header %q: %w", strings.TrimSpace(string(hdr)), err)
	}
	if fortran {
		return nil, errors.New("npy: Fortran-order arrays are not supported")
	}
	var dt DType
	for d, s := range descrOf {
		if s == descr || (d == Bool && descr == "<b1") {
			dt = d
		}
	}
	size := sizeOf[dt]
	if w, ok := strings.CutPrefix(descr, "<U"); ok {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 || n > maxUnicode || w[0] == '+' {
			return nil, fmt.Errorf("npy: dtype %q: want <Un with 1 ≤ n ≤ %d", descr, maxUnicode)
		}
		dt, size = Unicode, 4*n
	}
	if dt == "" {
		if len(descr) > 0 && descr[0] == '>' {
			return nil, fmt.Errorf("npy: big-endian dtype %q is not supported", descr)
		}
		return nil, fmt.Errorf("npy: unsupported dtype %q (want float32, float64, int64, int32, uint8, bool or a Unicode string)", descr)
	}
	a := &Array{DType: dt, Shape: shape}
	n, ok := elements(shape)
	if !ok || n > maxBytes/size {
		return nil, fmt.Errorf("npy: shape %v is too large (over %d GiB)", shape, maxBytes>>30)
	}
	// The bytes and the decoded copy are both held for a moment.
	if avail, src, ok := sysmem.Available(); ok && int64(2*n*size) > avail {
		return nil, fmt.Errorf("npy: shape %v of %s needs %d MiB to decode, more than the %d MiB of memory available (%s)", shape, dt, 2*n*size>>20, avail>>20, src)
	}
	raw, err := readN(r, n*size)
	if err != nil {
		return nil, fmt.Errorf("npy: data of shape %v (%d bytes of %s): %d bytes read: %w", shape, n*size, dt, len(raw), err)
	}
	le := binary.LittleEndian
	switch dt {
	case Float32:
		a.F32 = make([]float32, n)
		for i := range a.F32 {
			a.F32[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case Float64:
		a.F64 = make([]float64, n)
		for i := range a.F64 {
			a.F64[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
	case Int64:
		a.I64 = make([]int64, n)
		for i := range a.I64 {
			a.I64[i] = int64(le.Uint64(raw[8*i:]))
		}
	case Int32:
		a.I32 = make([]int32, n)
		for i := range a.I32 {
			a.I32[i] = int32(le.Uint32(raw[4*i:]))
		}
	case Uint8:
		a.U8 = append([]uint8(nil), raw[:n]...)
	case Bool:
		a.B = make([]bool, n)
		for i := range a.B {
			switch raw[i] {
			case 0:
			case 1:
				a.B[i] = true
			default:
				return nil, fmt.Errorf("npy: bool element %d has byte value %d", i, raw[i])
			}
		}
	case Unicode:
		a.Str = make([]string, n)
		var b strings.Builder
		for i := range a.Str {
			b.Reset()
			for j := i * size; j < (i+1)*size; j += 4 {
				r := le.Uint32(raw[j:])
				if r == 0 {
					break // NumPy pads with NULs and cannot hold one inside
				}
				if r > unicode.MaxRune || r >= 0xd800 && r < 0xe000 {
					return nil, fmt.Errorf("npy: string element %d holds %#x, not a Unicode code point", i, r)
				}
				b.WriteRune(rune(r))
			}
			a.Str[i] = b.String()
		}
	}
	return a, nil
}

// maxBytes bounds the data of one array.
const maxBytes = 1 << 40

// elements returns the product of shape, and false if it overflows.
func elements(shape []int) (int, bool) {
	n := 1
	for _, d := range shape {
		if d < 0 || (d != 0 && n > math.MaxInt/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// readN reads exactly n bytes, growing its buffer as data arrives so that a
// header claiming more than the input holds allocates no more than the
// input (and the doubling slack).
func readN(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, 1<<24))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf), n))
			copy(nb, buf)
			buf = nb
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(buf) == n {
					return buf, nil
				}
				return buf, io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// parseHeader parses the Python dict literal of a .npy header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (8, 3), }.
func parseHeader(h string) (descr string, fortran bool, shape []int, err error) {
	s := strings.TrimSpace(h)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return "", false, nil, errors.New("not a dict")
	}
	s = strings.TrimSpace(s[1 : len(s)-1])
	seen := map[string]bool{}
	for len(s) > 0 {
		key, rest, err := pyString(s)
		if err != nil {
			return "", false, nil, fmt.Errorf("key: %w", err)
		}
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, ":") {
			return "", false, nil, fmt.Errorf("missing ':' after %q", key)
		}
		rest = strings.TrimSpace(rest[1:])
		switch key {
		case "descr":
			descr, rest, err = pyString(rest)
			if err != nil {
				return "", false, nil, fmt.Errorf("descr: %w", err)
			}
		case "fortran_order":
			switch {
			case strings.HasPrefix(rest, "False"):
				fortran, rest = false, rest[5:]
			case strings.HasPrefix(rest, "True"):
				fortran, rest = true, rest[4:]
			default:
				return "", false, nil, errors.New("fortran_order is not True or False")
			}
		case "shape":
			if !strings.HasPrefix(rest, "(") {
				return "", false, nil, errors.New("shape is not a tuple")
			}
			end := strings.IndexByte(rest, ')')
			if end < 0 {
				return "", false, nil, errors.New("shape tuple is not closed")
			}
			shape = []int{}
			for _, f := range strings.Split(rest[1:end], ",") {
				f = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "L"))
				if f == "" {
					continue
				}
				d, err := strconv.Atoi(f)
				if err != nil || d < 0 {
					return "", false, nil, fmt.Errorf("bad dimension %q", f)
				}
				shape = append(shape, d)
			}
			rest = rest[end+1:]
		default:
			return "", false, nil, fmt.Errorf("unknown key %q", key)
		}
		seen[key] = true
		rest = strings.TrimSpace(rest)
		rest = strings.TrimPrefix(rest, ",")
		s = strings.TrimSpace(rest)
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return "", false, nil, fmt.Errorf("missing key %q", k)
		}
	}
	return descr, fortran, shape, nil
}

// pyString reads a quoted Python string literal at the start of s.
func pyString(s string) (string, string, error) {
	if len(s) == 0 || (s[0] != '\'' && s[0] != '"') {
		return "", s, errors.New("expected a quoted string")
	}
	end := strings.IndexByte(s[1:], s[0])
	if end < 0 {
		return "", s, errors.New("unterminated string")
	}
	return s[1 : 1+end], s[end+2:], nil
}

// Write encodes a as a .npy array (format 1.0, or 2.0 if the header does
// not fit in 64 KiB).
func Write(w io.Writer, a *Array) error {
	descr, ok := descrOf[a.DType]
	width := 0
	if a.DType == Unicode {
		width = 1
		for _, v := range a.Str {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				return fmt.Errorf("npy: string %q is not valid UTF-8 without NULs", v)
			}
			width = max(width, utf8.RuneCountInString(v))
		}
		if width > maxUnicode {
			return fmt.Errorf("npy: a string of %d code points, over %d", width, maxUnicode)
		}
		descr, ok = "<U"+strconv.Itoa(width), true
	}
	if !ok {
		return fmt.Errorf("npy: unsupported dtype %q", a.DType)
	}
	for _, d := range a.Shape {
		if d < 0 {
			return fmt.Errorf("npy: negative dimension in shape %v", a.Shape)
		}
	}
	if n := a.dataLen(); n != a.Len() {
		return fmt.Errorf("npy: %s array of shape %v holds %d elements, want %d", a.DType, a.Shape, n, a.Len())
	}
	var sh strings.Builder
	sh.WriteByte('(')
	for i, d := range a.Shape {
		if i > 0 {
			sh.WriteString(", ")
		}
		sh.WriteString(strconv.Itoa(d))
	}
	if len(a.Shape) == 1 {
		sh.WriteByte(',')
	}
	sh.WriteByte(')')
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, sh.String())
	// Pad so that the data starts on a multiple of 64 bytes, header ending
	// in a newline.
	version, lenBytes := byte(1), 2
	total := len(magic) + 2 + lenBytes + len(dict) + 1
	pad := (64 - total%64) % 64
	hlen := len(dict) + pad + 1
	if hlen > math.MaxUint16 {
		version, lenBytes = 2, 4
		total = len(magic) + 2 + lenBytes + len(dict) + 1
		pad = (64 - total%64) % 64
		hlen = len(dict) + pad + 1
	}
	bw := bufio.NewWriter(w)
	bw.Write(magic)
	bw.Write([]byte{version, 0})
	if lenBytes == 2 {
		bw.Write(binary.LittleEndian.AppendUint16(nil, uint16(hlen)))
	} else {
		bw.Write(binary.LittleEndian.AppendUint32(nil, uint32(hlen)))
	}
	bw.WriteString(dict)
	bw.WriteString(strings.Repeat(" ", pad))
	bw.WriteByte('\n')
	var buf [8]byte
	le := binary.LittleEndian
	switch a.DType {
	case Float32:
		for _, v := range a.F32 {
			le.PutUint32(buf[:], math.Float32bits(v))
			bw.Write(buf[:4])
		}
	case Float64:
		for _, v := range a.F64 {
			le.PutUint64(buf[:], math.Float64bits(v))
			bw.Write(buf[:8])
		}
	case Int64:
		for _, v := range a.I64 {
			le.PutUint64(buf[:], uint64(v))
			bw.Write(buf[:8])
		}
	case Int32:
		for _, v := range a.I32 {
			le.PutUint32(buf[:], uint32(v))
			bw.Write(buf[:4])
		}
	case Uint8:
		bw.Write(a.U8)
	case Bool:
		for _, v := range a.B {
			b := byte(0)
			if v {
				b = 1
			}
			bw.WriteByte(b)
		}
	case Unicode:
		for _, v := range a.Str {
			k := 0
			for _, r := range v {
				le.PutUint32(buf[:], uint32(r))
				bw.Write(buf[:4])
				k++
			}
			for ; k < width; k++ {
				bw.Write([]byte{0, 0, 0, 0})
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("npy: writing: %w", err)
	}
	return nil
}

// ReadFile reads a .npy file.
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := Read(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// WriteFile writes a as a .npy file, through a temporary file renamed over
// path when complete (nothing half-written is left under path).
func WriteFile(path string, a *Array) error {
	return atomicfile.Write(path, func(w io.Writer) error { return Write(w, a) })
}

// ReadNPZ reads every array of a .npz archive (a zip of .npy members,
// stored or deflated), keyed by member name without the ".npy" suffix.
func ReadNPZ(path string) (map[string]*Array, error) {
	out, _, err := ReadNPZSelect(path, func(string) bool { return true })
	return out, err
}

// ReadNPZSelect is ReadNPZ reading only the members whose names (without
// ".npy") keep accepts; it also returns every member's name, in the
// archive's order, for a caller to say what the archive holds instead.
func ReadNPZSelect(path string, keep func(name string) bool) (map[string]*Array, []string, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, nil, fmt.Errorf("npz: %s: %w", path, err)
	}
	defer zr.Close()
	out := map[string]*Array{}
	var names []string
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		name := strings.TrimSuffix(f.Name, ".npy")
		names = append(names, name)
		if !keep(name) {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, nil, fmt.Errorf("npz: %s: member %q: %w", path, f.Name, err)
		}
		a, err := Read(bufio.NewReader(rc))
		rc.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("npz: %s: member %q: %w", path, f.Name, err)
		}
		out[name] = a
	}
	return out, names, nil
}

// WriteNPZ writes arrays as an uncompressed .npz archive with members in
// sorted key order.
func WriteNPZ(path string, arrays map[string]*Array) error {
	return atomicfile.Write(path, func(f io.Writer) error {
		zw := zip.NewWriter(f)
		keys := make([]string, 0, len(arrays))
		for k := range arrays {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: k + ".npy", Method: zip.Store})
			if err == nil {
				err = Write(w, arrays[k])
			}
			if err != nil {
				return fmt.Errorf("npz member %q: %w", k, err)
			}
		}
		return zw.Close()
	})
}
