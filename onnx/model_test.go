package onnx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// tinyModel builds y = x·W + b with W (3×2) and b (2) as initializers; W is
// stored in raw_data and b in float_data, as exporters do for each.
func tinyModel() *onnxpb.ModelProto {
	w := &onnxpb.TensorProto{Name: proto.String("W"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{3, 2}}
	var raw []byte
	for i := 0; i < 6; i++ {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(i)+0.5))
	}
	w.RawData = raw
	b := &onnxpb.TensorProto{Name: proto.String("b"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{2}, FloatData: []float32{1, -1}}
	vi := func(name string, dims ...any) *onnxpb.ValueInfoProto {
		sh := &onnxpb.TensorShapeProto{}
		for _, d := range dims {
			switch d := d.(type) {
			case int:
				sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
			case string:
				sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
			}
		}
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}}
	}
	return &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("dpfinetune-test"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(14)}},
		Graph: &onnxpb.GraphProto{
			Name: proto.String("tiny"),
			Node: []*onnxpb.NodeProto{
				{Name: proto.String("mm"), OpType: proto.String("MatMul"), Input: []string{"x", "W"}, Output: []string{"xw"}},
				{Name: proto.String("add"), OpType: proto.String("Add"), Input: []string{"xw", "b"}, Output: []string{"y"}},
			},
			Initializer: []*onnxpb.TensorProto{w, b},
			Input:       []*onnxpb.ValueInfoProto{vi("x", "batch", 3)},
			Output:      []*onnxpb.ValueInfoProto{vi("y", "batch", 2)},
		},
		MetadataProps: []*onnxpb.StringStringEntryProto{kv("k", "v")},
	}
}

func tinyBytes(t testing.TB) []byte {
	b, err := proto.Marshal(tinyModel())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTripBytes(t *testing.T) {
	in := tinyBytes(t)
	m, err := LoadBytes(in, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatalf("re-encoding changed the bytes: %d in, %d out", len(in), len(out))
	}
}

// TestRoundTripFixtures checks that every committed fixture model re-encodes
// byte for byte, through both LoadBytes and Load+Save.
func TestRoundTripFixtures(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/models/*.onnx")
	if len(paths) == 0 {
		t.Skip("no fixtures under testdata/models")
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			in, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(in, out) {
				t.Fatalf("re-encoding changed the bytes: %d in, %d out", len(in), len(out))
			}
			dst := filepath.Join(t.TempDir(), "m.onnx")
			if err := m.Save(dst, nil); err != nil {
				t.Fatal(err)
			}
			saved, _ := os.ReadFile(dst)
			if !bytes.Equal(in, saved) {
				t.Fatal("Save changed the bytes")
			}
		})
	}
}

func TestTensorBytes(t *testing.T) {
	m, err := LoadBytes(tinyBytes(t), "")
	if err != nil {
		t.Fatal(err)
	}
	inits := m.Proto.GetGraph().GetInitializer()
	for i, want := range [][]float32{{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}, {1, -1}} {
		b, err := m.TensorBytes(inits[i])
		if err != nil {
			t.Fatal(err)
		}
		for j, w := range want {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:])); got != w {
				t.Errorf("%s[%d] = %v, want %v", inits[i].GetName(), j, got, w)
			}
		}
	}
	// A tensor whose data does not match its shape is an error, not a panic.
	bad := proto.Clone(inits[0]).(*onnxpb.TensorProto)
	bad.Dims = []int64{4, 2}
	if _, err := m.TensorBytes(bad); err == nil || !strings.Contains(err.Error(), `tensor "W"`) {
		t.Errorf("mismatched size: err = %v", err)
	}
}

func TestExternalDataRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m, err := LoadBytes(tinyBytes(t), "")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ext.onnx")
	if err := m.Save(p, &SaveOptions{External: ExternalAlways, Threshold: 1}); err != nil {
		t.Fatal(err)
	}
	for _, init := range m.Proto.GetGraph().GetInitializer() {
		if !isExternal(init) {
			t.Fatalf("tensor %q not moved to external data", init.GetName())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ext.onnx.data")); err != nil {
		t.Fatal(err)
	}
	// Load it back: the data comes from the external file.
	m2, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m2.TensorBytes(m2.Proto.GetGraph().GetInitializer()[1])
	if err != nil {
		t.Fatal(err)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4:])); got != -1 {
		t.Errorf("b[1] = %v, want -1", got)
	}
	// Saving the loaded model elsewhere reproduces both files byte for byte.
	dir2 := t.TempDir()
	p2 := filepath.Join(dir2, "ext.onnx")
	if err := m2.Save(p2, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ext.onnx", "ext.onnx.data"} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		c, _ := os.ReadFile(filepath.Join(dir2, name))
		if !bytes.Equal(a, c) {
			t.Errorf("%s differs after load and save", name)
		}
	}
	// Updating an external tensor keeps it external.
	w := m2.Proto.GetGraph().GetInitializer()[0]
	nb := make([]byte, 24)
	if err := m2.SetTensorBytes(w, nb); err != nil {
		t.Fatal(err)
	}
	if !isExternal(w) {
		t.Error("SetTensorBytes moved an external tensor inline")
	}
	// Loading from memory without a directory is a clear error.
	raw, _ := os.ReadFile(p)
	if _, err := LoadBytes(raw, ""); err == nil || !strings.Contains(err.Error(), "external data") {
		t.Errorf("LoadBytes of external model: err = %v", err)
	}
	// A truncated data file is a clear error.
	os.WriteFile(filepath.Join(dir, "ext.onnx.data"), []byte{1, 2, 3}, 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated external data: err = %v", err)
	}
}

func TestExternalLocationMustStayInside(t *testing.T) {
	for _, loc := range []string{"/etc/passwd", "../x.data", "a/../../x", ""} {
		p := tinyModel()
		w := p.GetGraph().GetInitializer()[0]
		w.RawData = nil
		w.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
		w.ExternalData = []*onnxpb.StringStringEntryProto{kv("location", loc)}
		b, _ := proto.Marshal(p)
		if _, err := LoadBytes(b, t.TempDir()); err == nil {
			t.Errorf("location %q accepted", loc)
		}
	}
}

// TestExternalDataOverMemory: external data is held to the memory
// available before it is read (one tensor asking for a sparse 1 TiB file),
// and many tensors may not read the same bytes over and over.
func TestExternalDataOverMemory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fileSize int64
		tensors  int
		dims     int64
		want     string
	}{
		{"one tensor of 1 TiB", 1 << 40, 1, 1 << 38, "memory available"},
		{"1024 tensors of the same 1 MiB", 1 << 20, 1024, 1 << 18, "overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := os.Create(filepath.Join(dir, "big.data"))
			if err != nil {
				t.Fatal(err)
			}
			err = f.Truncate(tc.fileSize) // sparse
			f.Close()
			if err != nil {
				t.Skipf("no sparse file of %d bytes here: %v", tc.fileSize, err)
			}
			p := tinyModel()
			for i := range tc.tensors {
				p.Graph.Initializer = append(p.Graph.Initializer, &onnxpb.TensorProto{
					Name: proto.String(fmt.Sprintf("big%d", i)), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{tc.dims},
					DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
					ExternalData: []*onnxpb.StringStringEntryProto{kv("location", "big.data"), kv("length", fmt.Sprint(4*tc.dims))},
				})
			}
			b, _ := proto.Marshal(p)
			_, err = LoadBytes(b, dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestLargeModelGoesExternal(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 GiB")
	}
	if os.Getenv("DPFINETUNE_BIG_TESTS") == "" {
		t.Skip("set DPFINETUNE_BIG_TESTS=1 to write a model over 2 GiB")
	}
	p := tinyModel()
	big := &onnxpb.TensorProto{Name: proto.String("big"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{1 << 29}, RawData: make([]byte, 1<<31)}
	p.Graph.Initializer = append(p.Graph.Initializer, big)
	m := NewModel(p)
	if _, err := m.Bytes(); err == nil {
		t.Fatal("Bytes of a >2 GiB model succeeded")
	}
	path := filepath.Join(t.TempDir(), "big.onnx")
	if err := m.Save(path, nil); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m2.TensorBytes(m2.Proto.GetGraph().GetInitializer()[2])
	if err != nil || len(b) != 1<<31 {
		t.Fatalf("reloaded big tensor: %d bytes, %v", len(b), err)
	}
}

func TestBadInput(t *testing.T) {
	good := tinyBytes(t)
	noGraph, _ := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8)})
	future := tinyModel()
	future.IrVersion = proto.Int64(MaxIRVersion + 1)
	futureB, _ := proto.Marshal(future)
	old := tinyModel()
	old.IrVersion = proto.Int64(2)
	oldB, _ := proto.Marshal(old)
	cases := []struct {
		name string
		in   []byte
		want error
		msg  string
	}{
		{"empty", nil, ErrNotONNX, "empty"},
		{"truncated", good[:len(good)/2], ErrNotONNX, "truncated"},
		{"png", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), ErrNotONNX, "not an ONNX model"},
		{"text", []byte("hello, this is not a model"), ErrNotONNX, "not an ONNX model"},
		{"no graph", noGraph, ErrNotONNX, "no graph"},
		{"future IR", futureB, ErrUnsupportedIR, "15"},
		{"old IR", oldB, ErrUnsupportedIR, "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadBytes(c.in, "")
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %v, want %v mentioning %q", err, c.want, c.msg)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.onnx")); err == nil || !strings.Contains(err.Error(), "missing.onnx") {
		t.Errorf("missing file: err = %v", err)
	}
}

// FuzzLoad feeds arbitrary bytes to the loader: it must return a model or an
// error, never panic, and whatever it accepts must re-encode and decode
// again.
func FuzzLoad(f *testing.F) {
	good := tinyBytes(f)
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x07})
	ext := tinyModel()
	ext.Graph.Initializer[0].DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	ext.Graph.Initializer[0].ExternalData = []*onnxpb.StringStringEntryProto{kv("location", "w.bin"), kv("offset", "0"), kv("length", "24")}
	eb, _ := proto.Marshal(ext)
	f.Add(eb)
	if paths, _ := filepath.Glob("../testdata/models/cnn.onnx"); len(paths) > 0 {
		if b, err := os.ReadFile(paths[0]); err == nil {
			f.Add(b)
		}
	}
	dir := f.TempDir()
	os.WriteFile(filepath.Join(dir, "w.bin"), make([]byte, 24), 0o644)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := LoadBytes(data, dir)
		if err != nil {
			return
		}
		_ = walkTensors(m.Proto, func(tp *onnxpb.TensorProto) error {
			_, _ = m.TensorBytes(tp)
			return nil
		})
		out, err := m.Bytes()
		if err != nil {
			return
		}
		if _, err := LoadBytes(out, dir); err != nil {
			t.Fatalf("re-encoded model does not load: %v", err)
		}
	})
}

// TestSaveReadOnlyDir: saving where nothing can be written (a chmod'ed
// directory, or /proc for root) fails naming the path, leaving nothing
// under it.
func TestSaveReadOnlyDir(t *testing.T) {
	dir := "/proc"
	if os.Geteuid() != 0 {
		dir = t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
	}
	path := filepath.Join(dir, "dpfinetune-save-test.onnx")
	if err := NewModel(tinyModel()).Save(path, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v)", path, err)
	}
}
