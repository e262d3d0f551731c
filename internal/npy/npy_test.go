package npy

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Files written by numpy 1.x (np.lib.format.write_array).
var numpyFiles = []struct {
	name string
	data string
	want *Array
	// exact: Write reproduces numpy's bytes.
	exact bool
}{
	{"f4_2x3_v1", "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }                                                          \n\x00\x00\x00\x00\x00\x00\x00?\x00\x00\x80?\x00\x00\xc0?\x00\x00\x00@\x00\x00 @",
		&Array{DType: Float32, Shape: []int{2, 3}, F32: []float32{0, 0.5, 1, 1.5, 2, 2.5}}, true},
	{"f8_3_v2", "\x93NUMPY\x02\x00t\x00\x00\x00{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }                                                          \n\x00\x00\x00\x00\x00\x00\xf8?\x00\x00\x00\x00\x00\x00\x00\xc0\x00\x00\x00\x00\x00\x00\n@",
		&Array{DType: Float64, Shape: []int{3}, F64: []float64{1.5, -2, 3.25}}, false},
	{"i8_scalar", "\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (), }                                                              \n\xf9\xff\xff\xff\xff\xff\xff\xff",
		&Array{DType: Int64, Shape: []int{}, I64: []int64{-7}}, true},
	{"i4_2x2", "\x93NUMPY\x01\x00v\x00{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }                                                          \n\x01\x00\x00\x00\xfe\xff\xff\xff\x03\x00\x00\x00\x04\x00\x00\x00",
		&Array{DType: Int32, Shape: []int{2, 2}, I32: []int32{1, -2, 3, 4}}, true},
	{"b1_3", "\x93NUMPY\x01\x00v\x00{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }                                                            \n\x01\x00\x01",
		&Array{DType: Bool, Shape: []int{3}, B: []bool{true, false, true}}, true},
	{"u1_1x3", "\x93NUMPY\x01\x00v\x00{'descr': '|u1', 'fortran_order': False, 'shape': (1, 3), }                                                          \n\x00\xff\x07",
		&Array{DType: Uint8, Shape: []int{1, 3}, U8: []uint8{0, 255, 7}}, true},
	{"U3_3", "\x93NUMPY\x01\x00v\x00{'descr': '<U3', 'fortran_order': False, 'shape': (3,), }                                                            \nc\x00\x00\x00a\x00\x00\x00t\x00\x00\x00d\x00\x00\x00\xf6\x00\x00\x00g\x00\x00\x00\x1f\xf4\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00",
		&Array{DType: Unicode, Shape: []int{3}, Str: []string{"cat", "dög", "🐟"}}, true},
	{"U1_2", "\x93NUMPY\x01\x00v\x00{'descr': '<U1', 'fortran_order': False, 'shape': (2,), }                                                            \na\x00\x00\x00\x00\x00\x00\x00",
		&Array{DType: Unicode, Shape: []int{2}, Str: []string{"a", ""}}, true},
	{"f4_empty_0x2", "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }                                                          \n",
		&Array{DType: Float32, Shape: []int{0, 2}, F32: []float32{}}, true},
}

func TestReadNumpyFiles(t *testing.T) {
	for _, tc := range numpyFiles {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Read(strings.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, tc.want) {
				t.Fatalf("got %+v, want %+v", a, tc.want)
			}
			var buf bytes.Buffer
			if err := Write(&buf, a); err != nil {
				t.Fatal(err)
			}
			if tc.exact && buf.String() != tc.data {
				t.Errorf("Write differs from numpy:\n got %q\nwant %q", buf.String(), tc.data)
			}
			b, err := Read(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(b, tc.want) {
				t.Fatalf("round trip: got %+v, want %+v", b, tc.want)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	good := numpyFiles[0].data
	hdr := func(dict string) string {
		h := dict + "\n"
		return "\x93NUMPY\x01\x00" + string([]byte{byte(len(h)), 0}) + h
	}
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "reading magic"},
		{"magic", "PK\x03\x04xxxxxxxx", "bad magic"},
		{"version", "\x93NUMPY\x09\x00\x00\x00", "version 9.0"},
		{"truncated data", good[:len(good)-3], "data of shape [2 3]"},
		{"fortran", hdr("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }"), "Fortran"},
		{"big endian", hdr("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"), "big-endian"},
		{"dtype", hdr("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }"), "unsupported dtype"},
		{"missing shape", hdr("{'descr': '<f4', 'fortran_order': False, }"), "missing key \"shape\""},
		{"bad dim", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }"), "bad dimension"},
		{"bool byte", hdr("{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }") + "\x07", "byte value 7"},
		{"string width 0", hdr("{'descr': '<U0', 'fortran_order': False, 'shape': (1,), }"), "want <Un"},
		{"string width", hdr("{'descr': '<U99999999', 'fortran_order': False, 'shape': (1,), }"), "want <Un"},
		{"string signed width", hdr("{'descr': '<U+2', 'fortran_order': False, 'shape': (1,), }"), "want <Un"},
		{"surrogate", hdr("{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }") + "\x00\xd8\x00\x00", "not a Unicode code point"},
		{"past the last rune", hdr("{'descr': '<U1', 'fortran_order': False, 'shape': (1,), }") + "\x00\x00\x11\x00", "not a Unicode code point"},
		{"big-endian strings", hdr("{'descr': '>U1', 'fortran_order': False, 'shape': (1,), }"), "big-endian"},
		// Hostile headers: a product that wraps to 0 (2³²·2³²), one that
		// wraps negative, and sizes no machine has, all with no data.
		{"overflow to zero", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"), "too large"},
		{"overflow negative", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (3037000500, 3037000500), }"), "too large"},
		{"over 1 TiB", hdr("{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }"), "too large"},
		{"claims 512 GiB, holds 3 bytes", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (134217728, 1024), }") + "abc", "memory available"},
		{"claims 64 MiB, holds 3 bytes", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (16777216,), }") + "abc", "3 bytes read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	for _, a := range []*Array{
		{DType: Float32, Shape: []int{3}, F32: []float32{1, 2}},
		{DType: "complex64", Shape: []int{1}},
		{DType: Int64, Shape: []int{-1}},
		{DType: Unicode, Shape: []int{1}, Str: []string{"a\x00b"}},
		{DType: Unicode, Shape: []int{1}, Str: []string{"\xff"}},
	} {
		if err := Write(&bytes.Buffer{}, a); err == nil {
			t.Errorf("Write(%+v) succeeded", a)
		}
	}
}

func TestLargeHeaderUsesVersion2(t *testing.T) {
	shape := make([]int, 30000) // a header beyond 64 KiB
	for i := range shape {
		shape[i] = 1
	}
	a := &Array{DType: Float32, Shape: shape, F32: []float32{4}}
	var buf bytes.Buffer
	if err := Write(&buf, a); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[6] != 2 {
		t.Fatalf("version %d, want 2", buf.Bytes()[6])
	}
	b, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("round trip differs")
	}
}

func TestNPZ(t *testing.T) {
	dir := t.TempDir()
	arrays := map[string]*Array{
		"x":      NewFloat32([]float32{1, 2, 3, 4}, 2, 2),
		"grad/w": NewFloat32([]float32{-1}, 1),
		"labels": NewInt64([]int64{3, 1}, 2),
	}
	p := filepath.Join(dir, "a.npz")
	if err := WriteNPZ(p, arrays); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNPZ(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, arrays) {
		t.Fatalf("got %v", got)
	}

	// Deflated members, as np.savez_compressed writes them.
	p2 := filepath.Join(dir, "b.npz")
	f, err := os.Create(p2)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "v.npy", Method: zip.Deflate})
	w.Write([]byte(numpyFiles[0].data))
	zw.Close()
	f.Close()
	got, err = ReadNPZ(p2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got["v"], numpyFiles[0].want) {
		t.Fatalf("deflated member: %+v", got["v"])
	}

	// A bad member is named in the error.
	p3 := filepath.Join(dir, "c.npz")
	f, _ = os.Create(p3)
	zw = zip.NewWriter(f)
	w, _ = zw.Create("bad.npy")
	w.Write([]byte("garbage"))
	zw.Close()
	f.Close()
	if _, err := ReadNPZ(p3); err == nil || !strings.Contains(err.Error(), `"bad.npy"`) {
		t.Fatalf("error %v", err)
	}
	if _, err := ReadNPZ(filepath.Join(dir, "missing.npz")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestGoldenFixture(t *testing.T) {
	p := filepath.Join("..", "..", "testdata", "golden", "cnn.npz")
	if _, err := os.Stat(p); err != nil {
		t.Skip("fixture not present")
	}
	m, err := ReadNPZ(p)
	if err != nil {
		t.Fatal(err)
	}
	in, lab := m["input"], m["labels"]
	if in == nil || in.DType != Float32 || !reflect.DeepEqual(in.Shape, []int{8, 1, 28, 28}) {
		t.Fatalf("input: %+v", in)
	}
	if lab == nil || lab.DType != Int64 || len(lab.I64) != 8 {
		t.Fatalf("labels: %+v", lab)
	}
}
