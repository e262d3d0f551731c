package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/onnx"
)

func TestZooList(t *testing.T) {
	out, errOut, code := run(t, "zoo", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"resnet18                 3,224,224      1000    11,689,512    11,684,712",
		"vgg16                    3,224,224      1000   138,357,544             -",
		"cnn-fmnist               1,28,28          10        26,010             -",
		"vit-tiny-cifar", "crossvit_tiny_240", "beit_base_patch16_224", "cifar_resnet18",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("zoo list lacks %q:\n%s", want, out)
		}
	}
	out, _, code = run(t, "zoo", "list", "--json")
	var entries []zooEntry
	if err := json.Unmarshal([]byte(out), &entries); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	found := false
	for _, e := range entries {
		if e.Name == "densenet121" {
			found = true
			if e.Params != 7978856 || e.EvalParams != 7971368 || !e.HasBatchNorm || e.Description == "" {
				t.Errorf("densenet121: %+v", e)
			}
		}
	}
	if !found {
		t.Error("densenet121 not listed")
	}
	out, _, _ = run(t, "zoo", "list", "--long")
	if !strings.Contains(out, "kuangliu/pytorch-cifar") {
		t.Error("--long prints no descriptions")
	}
}

// inspectJSON runs inspect on a model for one input shape.
func inspectJSON(t *testing.T, model, shape string) inspectReport {
	t.Helper()
	out, errOut, code := run(t, "inspect", "--model", model, "--input-shape", shape, "--batch", "2", "--json")
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestZooExport(t *testing.T) {
	dir := t.TempDir()
	cnn := filepath.Join(dir, "cnn.onnx")
	out, errOut, code := run(t, "zoo", "export", "cnn-fmnist", "--out", cnn, "--seed", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "26,010 parameters") || !strings.Contains(out, "input (batch,1,28,28)") {
		t.Errorf("summary: %s", out)
	}
	r := inspectJSON(t, cnn, "1,28,28")
	if r.Parameters != 26010 || r.Operators["Conv"] != 2 || r.Operators["Gemm"] != 2 || r.Metadata["zoo.seed"] != "5" {
		t.Errorf("inspect: %+v", r)
	}
	if got := r.Inferred.Outputs[0].Shape; len(got) != 2 || got[0] != float64(2) || got[1] != float64(10) {
		t.Errorf("inferred output %v", got)
	}
	// Same seed, same bytes; flags before the name.
	again := filepath.Join(dir, "again.onnx")
	if _, errOut, code := run(t, "zoo", "export", "--seed", "5", "--out", again, "cnn-fmnist"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	a, _ := os.ReadFile(cnn)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("equal seeds wrote different files")
	}

	// BatchNorm kept, other classes and input size, JSON report.
	rn := filepath.Join(dir, "rn.onnx")
	out, errOut, code = run(t, "zoo", "export", "resnet18-cifar", "--out", rn, "--batchnorm", "--num-classes", "100",
		"--input-shape", "3,64,64", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep zooExportReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// torchvision resnet18 with 100 classes: 11,689,512 - 900·513.
	if rep.Parameters != 11689512-900*513 || rep.Buffers != 9600 || rep.Classes != 100 || rep.BatchNorm != "nodes (eval mode)" {
		t.Errorf("report %+v", rep)
	}
	r = inspectJSON(t, rn, "3,64,64")
	if r.Parameters != rep.Parameters || r.Buffers != 9600 || r.Operators["BatchNormalization"] != 20 {
		t.Errorf("inspect: parameters %d, buffers %d, ops %v", r.Parameters, r.Buffers, r.Operators)
	}

	// External data on request.
	vit := filepath.Join(dir, "vit.onnx")
	out, errOut, code = run(t, "zoo", "export", "vit-tiny-cifar", "--out", vit, "--external-data")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(vit + ".data"); err != nil || !strings.Contains(out, "vit.onnx.data") {
		t.Errorf("no external data: %v\n%s", err, out)
	}
	m, err := onnx.Load(vit)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Proto.GetGraph().GetInitializer()); n == 0 {
		t.Error("no initializers")
	}
	if r := inspectJSON(t, vit, "3,32,32"); r.Parameters != 1803850 {
		t.Errorf("vit-tiny-cifar: %d parameters", r.Parameters)
	}
}

func TestZooErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.onnx")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"zoo"}, 2, "missing subcommand"},
		{[]string{"zoo", "frob"}, 2, "unknown subcommand"},
		{[]string{"zoo", "export", "--out", out}, 2, "missing model name"},
		{[]string{"zoo", "export", "resnet18"}, 2, "--out is required"},
		{[]string{"zoo", "export", "resnet19", "--out", out}, 2, "resnet18, resnet18-cifar"},
		{[]string{"zoo", "export", "alexnet", "--out", out, "--input-shape", "3,32,32"}, 2, "input is too small"},
		{[]string{"zoo", "export", "vit_b_16", "--out", out, "--input-shape", "3,100,100"}, 2, "divisible by the patch size 16"},
		{[]string{"zoo", "export", "resnet18", "--out", out, "--input-shape", "3,224"}, 2, "want C,H,W"},
		{[]string{"zoo", "export", "resnet18", "--out", out, "--input-shape", "3,x,224"}, 2, "bad dimension"},
		{[]string{"zoo", "export", "resnet18", "--out", out, "--num-classes", "-1"}, 2, "must be positive"},
		{[]string{"zoo", "export", "resnet18", "extra", "--out", out}, 2, "unexpected argument"},
		{[]string{"zoo", "list", "extra"}, 2, "unexpected argument"},
		{[]string{"zoo", "export", "cnn-fmnist", "--out", filepath.Join(out, "sub", "m.onnx")}, 1, "m.onnx"},
	}
	for _, c := range cases {
		_, errOut, code := run(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
