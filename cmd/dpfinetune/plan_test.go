package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

func TestPlanJSON(t *testing.T) {
	out, errOut, code := run(t, "plan", "--model", "../../testdata/models/vgg.onnx", "--input-shape", "3,32,32", "--batch", "16", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Plan == nil || len(r.Layers) != 6 || r.Trainable.Scalars != 19738 || r.Frozen.Tensors != 0 || r.Batch != 16 {
		t.Fatalf("plan %+v", r.Plan)
	}
	// features.0: T = 32·32, D = 3·9, p = 8: 2T² ≫ pD.
	if l := r.Layers[0]; l.Param != "features.0.weight" || l.T != 1024 || l.D != 27 || l.P != 8 || l.Decision != rewrite.Instantiate || l.Bytes != 4*16*216 {
		t.Errorf("layer 0: %+v", l)
	}
	if l := r.Layers[5]; l.Op != "Gemm" || l.T != 1 || l.Decision != rewrite.Ghost {
		t.Errorf("last layer: %+v", l)
	}
	modes := map[string]int64{}
	for _, m := range r.Memory {
		modes[m.Mode] = m.Total
	}
	if len(modes) != 5 || modes["mixed"] >= modes["instantiate"] || modes["mixed"] >= modes["ghost"] || modes["nondp"] > modes["mixed"] {
		t.Errorf("memory %v", modes)
	}
}

func TestPlanTable(t *testing.T) {
	out, errOut, code := run(t, "plan", "--model", "../../testdata/models/vit.onnx", "--input-shape", "3,32,32", "--batch", "8",
		"--train", "encoder_layer_1|heads", "--priority", "speed", "--num-classes", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{"linear layers", "2T²", "pD", "decision", "total", "heads.head.weight", "onnx::MatMul_370",
		"replaced the 10-class head by a fresh 4-class one", "frozen parameters", "not selected by --train",
		"estimated peak memory at batch 8", "nondp", "bk", "speed priority", "[batch axis 1]"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestPlanFreezeOut(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "r.onnx")
	out, errOut, code := run(t, "plan", "--model", "../../testdata/models/resnet_train.onnx", "--input-shape", "3,32,32", "--batch", "4",
		"--bn", "freeze", "--out", dst)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "folded into Conv") || !strings.Contains(out, "saved:") {
		t.Errorf("output:\n%s", out)
	}
	m, err := onnx.Load(dst)
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.OpType == "BatchNormalization" {
			t.Fatal("BatchNormalization in the saved model")
		}
	}
	if g.Inputs[0].Shape[0].Param != "batch" {
		t.Error("saved model lost its dynamic batch axis")
	}
}

func TestPlanUsageErrors(t *testing.T) {
	m := "../../testdata/models/cnn.onnx"
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--input-shape", "1,28,28", "--batch", "2"}, 2, "--model is required"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "0"}, 2, "--batch must be positive"},
		{[]string{"--model", m, "--input-shape", "1,x,28", "--batch", "2"}, 2, "bad dimension"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--train", "("}, 2, "bad regular expression"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--freeze", "[a"}, 2, "bad regular expression"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--num-classes", "0"}, 2, "--num-classes must be positive"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--bn", "keep"}, 2, "--bn must be"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--priority", "fast"}, 2, "--priority must be"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--shared", "sum"}, 2, "--shared must be"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--gn-rule", "round"}, 2, "--gn-rule must be"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "--gn-groups", "0"}, 2, "--gn-groups must be positive"},
		{[]string{"--model", m, "--input-shape", "3,28,28", "--batch", "2"}, 1, "input shape"},
		{[]string{"--model", "nope.onnx", "--input-shape", "1,28,28", "--batch", "2"}, 1, "nope.onnx"},
		{[]string{"--model", m, "--input-shape", "1,28,28", "--batch", "2", "extra"}, 2, "unexpected argument"},
	}
	for _, c := range cases {
		_, errOut, code := run(t, append([]string{"plan"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, %q; want %d, %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}

// TestPlanCompiledActivations: plan measures every mode's compiled
// runtime plan, and its estimate's activation term is that plan's
// (CompiledActivations at the batch), below the count of every activation
// on a transformer; the table says so.
func TestPlanCompiledActivations(t *testing.T) {
	const b = 8
	args := []string{"plan", "--model", "../../testdata/models/vit.onnx", "--input-shape", "3,32,32", "--batch", "8"}
	out, errOut, code := run(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Compiled) != 5 || len(r.Memory) != 5 {
		t.Fatalf("compiled activations %v, memory %v: want all five modes", r.Compiled, r.Memory)
	}
	for _, m := range r.Memory {
		c, ok := r.Compiled[m.Mode]
		// The activations held, the kernels' workspace aside (its size
		// depends on the machine's BLAS: TestMeasuredActivationsMatchEngine).
		ws := c.ScratchAt(b)
		if !ok || m.Activations != c.At(b) || 2*(m.Activations-ws) >= 4*b*r.ActivationsPerSample {
			t.Errorf("%s: activations %d, compiled %+v, every activation %d bytes", m.Mode, m.Activations, c, 4*b*r.ActivationsPerSample)
		}
	}
	text, errOut, code := run(t, args...)
	if code != 0 || !strings.Contains(text, "compiled runtime plan") {
		t.Errorf("exit %d (%s); the table does not say where its activations come from:\n%s", code, errOut, text)
	}
}

// TestPlanDefaults: without --input-shape and --batch, plan takes the
// sample shape the model declares and a batch of 32, as train and eval
// do; a model whose sample shape is dynamic asks for --input-shape.
func TestPlanDefaults(t *testing.T) {
	out, errOut, code := run(t, "plan", "--model", "../../testdata/models/vgg.onnx", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Plan == nil || r.Batch != 32 || len(r.InputShape) != 3 || r.InputShape[0] != 3 || r.InputShape[1] != 32 || r.InputShape[2] != 32 {
		t.Fatalf("plan %+v", r.Plan)
	}

	m, err := onnx.Load("../../testdata/models/vgg.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	g.Inputs[0].Shape[2] = graph.Dim{Size: -1, Param: "height"}
	g.Inputs[0].Shape[3] = graph.Dim{Size: -1, Param: "width"}
	dm, err := g.ToONNX()
	if err != nil {
		t.Fatal(err)
	}
	dyn := filepath.Join(t.TempDir(), "dyn.onnx")
	if err := dm.Save(dyn, nil); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "plan", "--model", dyn); code != 1 || !strings.Contains(errOut, "give --input-shape") {
		t.Errorf("dynamic sample: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, "plan", "--model", dyn, "--input-shape", "3,32,32"); code != 0 {
		t.Errorf("dynamic sample with --input-shape: exit %d: %s", code, errOut)
	}
}
