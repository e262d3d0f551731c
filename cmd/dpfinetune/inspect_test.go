package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/onnx"
	onnxpb "github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// run calls the CLI in-process.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(args, &o, &e)
	return o.String(), e.String(), code
}

func TestInspectJSON(t *testing.T) {
	cases := []struct {
		model  string
		shape  string
		params int64
		bufs   int64
		ops    map[string]int
	}{
		// Tramèr–Boneh CNN: 1040 + 8224 + 16416 + 330 parameters.
		{"cnn", "1,28,28", 26010, 0, map[string]int{"Conv": 2, "MaxPool": 2, "Tanh": 3, "Gemm": 2, "Flatten": 1}},
		// Training-mode export keeps BatchNormalization; its running
		// statistics are buffers, not parameters.
		{"resnet_train", "3,32,32", 78962, 720, map[string]int{"BatchNormalization": 12, "Conv": 12}},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			out, errOut, code := run(t, "inspect", "--model", "../../testdata/models/"+c.model+".onnx", "--input-shape", c.shape, "--batch", "8", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var r inspectReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if r.Parameters != c.params || r.Buffers != c.bufs {
				t.Errorf("parameters %d, buffers %d; want %d, %d", r.Parameters, r.Buffers, c.params, c.bufs)
			}
			for op, n := range c.ops {
				if r.Operators[op] != n {
					t.Errorf("%s count %d, want %d", op, r.Operators[op], n)
				}
			}
			if r.Opsets[""] != 14 {
				t.Errorf("opsets %v", r.Opsets)
			}
			if got := r.Outputs[0].Shape; len(got) != 2 || got[0] != "batch" {
				t.Errorf("declared output shape %v, want symbolic batch", got)
			}
			inf := r.Inferred
			if inf == nil || len(inf.Outputs) != 1 {
				t.Fatal("no inferred section")
			}
			if got := inf.Outputs[0].Shape; len(got) != 2 || got[0] != float64(8) || got[1] != float64(10) {
				t.Errorf("inferred output shape %v, want [8 10]", got)
			}
			if len(inf.Nodes) == 0 {
				t.Error("no per-node shapes")
			}
		})
	}
}

func TestInspectText(t *testing.T) {
	out, errOut, code := run(t, "inspect", "--model", "../../testdata/models/vit.onnx", "--input-shape", "3,32,32")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"opsets:      ai.onnx 14", "input:       input float32 (batch, 3, 32, 32)", "output:      logits float32 (1, 10)", "shape nodes folded", "MatMul"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectErrors(t *testing.T) {
	dir := t.TempDir()
	notModel := filepath.Join(dir, "x.onnx")
	os.WriteFile(notModel, []byte("definitely not protobuf \xff\xff\xff"), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect"}, 2, "--model is required"},
		{[]string{"inspect", "--model", filepath.Join(dir, "missing.onnx")}, 1, "missing.onnx"},
		{[]string{"inspect", "--model", notModel}, 1, "not an ONNX model"},
		{[]string{"inspect", "--model", "../../testdata/models/cnn.onnx", "--input-shape", "3,x"}, 2, `bad dimension "x"`},
		{[]string{"inspect", "--model", "../../testdata/models/cnn.onnx", "--input-shape", "3,28,28"}, 1, "fixed at 1"},
		{[]string{"inspect", "--model", "../../testdata/models/cnn.onnx", "--input-shape", "1,28"}, 1, "rank 4"},
		{[]string{"inspect", "--bogus"}, 2, "bogus"},
		{[]string{"nosuchcommand"}, 2, "unknown command"},
	}
	for _, c := range cases {
		_, errOut, code := run(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestInspectMetadata: the model's metadata — what train recorded, the
// guarantee and the preprocessing to repeat when serving it — is listed
// by key, a long value cut.
func TestInspectMetadata(t *testing.T) {
	m, err := onnx.Load("../../testdata/models/cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("class,", 100)
	for _, kv := range [][2]string{{"dpfinetune.resize", "crop"}, {"dpfinetune.epsilon", "3"}, {"dpfinetune.classes", long}} {
		m.Proto.MetadataProps = append(m.Proto.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(kv[0]), Value: proto.String(kv[1])})
	}
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := m.Save(path, nil); err != nil {
		t.Fatal(err)
	}
	out, e, code := run(t, "inspect", "--model", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	i := strings.Index(out, "metadata:\n")
	if i < 0 {
		t.Fatalf("no metadata:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out[i:]), "\n")[1:]
	if len(lines) != 3 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "dpfinetune.classes") ||
		!strings.HasSuffix(lines[0], "…") || len(lines[0]) > 240 ||
		strings.Join(strings.Fields(lines[1]), " ") != "dpfinetune.epsilon 3" || strings.Join(strings.Fields(lines[2]), " ") != "dpfinetune.resize crop" {
		t.Errorf("metadata lines:\n%s", strings.Join(lines, "\n"))
	}
}

// TestInspectSignatureMarks: a model carrying torch.export's signature
// (PyTorch's dynamo exporter) counts its marked running statistics as
// buffers, as before, and the one-element constants its optimizer lifts
// into initializers as constants, not parameters.
func TestInspectSignatureMarks(t *testing.T) {
	dir := t.TempDir()
	path := withOpset(t, "../../testdata/models/resnet_train.onnx", filepath.Join(dir, "marked.onnx"), 18, true)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	gp := m.Proto.GetGraph()
	// A lifted scale where the head reads its input: y = Gemm(Mul(x, s)).
	for _, n := range gp.GetNode() {
		if n.GetOpType() == "Gemm" {
			gp.Node = append(gp.Node, &onnxpb.NodeProto{Name: proto.String("scale_head"), OpType: proto.String("Mul"),
				Input: []string{n.Input[0], "val_0"}, Output: []string{"scaled"}})
			n.Input[0] = "scaled"
		}
	}
	gp.Initializer = append(gp.Initializer, &onnxpb.TensorProto{Name: proto.String("val_0"), DataType: proto.Int32(1), FloatData: []float32{0.5}})
	if err := m.Save(path, nil); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "inspect", "--model", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Parameters != 78962 || r.Buffers != 720 || r.Constants != 1 || r.ConstantTensors != 1 {
		t.Errorf("parameters %d, buffers %d, constants %d in %d; want 78962, 720, 1 in 1", r.Parameters, r.Buffers, r.Constants, r.ConstantTensors)
	}
	text, _, _ := run(t, "inspect", "--model", path)
	if !strings.Contains(text, "constants:   1 in 1 tensors (no parameters: the export's signature says so") {
		t.Errorf("text report without the constants line:\n%s", text)
	}
}
