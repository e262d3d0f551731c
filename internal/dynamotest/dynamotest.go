// Package dynamotest reads the graphs of testdata/dynamo — real models as
// PyTorch's dynamo exporter writes them, kept without their weights — for
// the tests of several packages, with the weights filled.
package dynamotest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Filled reads testdata/dynamo/name (a gzipped graph) and fills the
// weights its making emptied with seeded random values: a weight of rank
// ≥ 2 N(0, 1/fan_in), anything else N(0, 0.05²) (bench/fill_weights.py's
// rule). It returns the filled model's bytes.
func Filled(t testing.TB, name string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(file), "..", "..", "testdata", "dynamo", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var p onnxpb.ModelProto
	if err := proto.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for _, tp := range p.GetGraph().GetInitializer() {
		if len(tp.GetRawData()) > 0 || len(tp.GetFloatData()) > 0 || tp.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
			continue
		}
		n := int64(1)
		for _, d := range tp.GetDims() {
			n *= d
		}
		sd := 0.05
		if len(tp.GetDims()) >= 2 {
			sd = 1 / math.Sqrt(float64(n/tp.GetDims()[0]))
		}
		var b bytes.Buffer
		for i := int64(0); i < n; i++ {
			binary.Write(&b, binary.LittleEndian, float32(rng.NormFloat64()*sd))
		}
		tp.RawData = b.Bytes()
	}
	filled, err := proto.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	return filled
}

// File writes Filled(t, name) into t's temporary directory and returns its
// path.
func File(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, Filled(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
