package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/fulltest"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestFullSizeExports proves the loader, shape inference and folding on real
// torchvision exports: each loads, re-encodes byte for byte, and infers
// static shapes for a batch of 8 with no shape op left; inspect reports
// torchvision's parameter counts.
func TestFullSizeExports(t *testing.T) {
	dir := fulltest.Dir(t)
	cases := []struct {
		name   string
		params int64
	}{
		// torchvision's count. BatchNorm kept (training-mode export).
		{"resnet18_train", 11689512},
		// Eval export folds BatchNorm into Conv: the 2 affine parameters
		// of each of the 4,800 BN channels become 1 conv bias.
		{"resnet18", 11689512 - 4800},
		{"vgg11", 132863336},
		{"vit_b_16", 86567656},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".onnx")
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m, err := onnx.LoadBytes(raw, dir)
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, raw) {
				t.Fatal("re-encoding changed the bytes")
			}
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.InferShapes(map[string][]int64{g.Inputs[0].Name: {8, 3, 224, 224}}); err != nil {
				t.Fatal(err)
			}
			for _, n := range g.Nodes {
				if n.OpType == "Shape" || n.OpType == "Constant" {
					t.Errorf("%s left after folding", n)
				}
				for _, v := range n.Outputs {
					if v != nil && !v.Shape.Static() {
						t.Errorf("%s: output %q shape %v", n, v.Name, v.Shape)
					}
				}
			}
			if got := g.Outputs[0].Shape.Ints(); len(got) != 2 || got[0] != 8 || got[1] != 1000 {
				t.Errorf("output shape %v", got)
			}

			out, errOut, code := run(t, "inspect", "--model", p, "--input-shape", "3,224,224", "--json")
			if code != 0 {
				t.Fatalf("inspect: exit %d: %s", code, errOut)
			}
			var r inspectReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			if r.Parameters != c.params {
				t.Errorf("inspect reports %d parameters, want %d", r.Parameters, c.params)
			}
		})
	}
}

// TestFullSizeLogits: our runtime gives PyTorch's logits on the full-size
// torchvision resnet18, vgg11 and vit_b_16 exports (random init, batch 2).
func TestFullSizeLogits(t *testing.T) {
	dir := fulltest.Dir(t)
	for _, name := range []string{"resnet18", "vgg11", "vit_b_16"} {
		t.Run(name, func(t *testing.T) {
			gd, err := npy.ReadNPZ(filepath.Join(dir, name+".npz"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := onnx.Load(filepath.Join(dir, name+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			g.UntieIdentityParams()
			in := gd["input"]
			plan, err := runtime.CompileForBatch(g, in.Shape[0], nil, &runtime.Options{ForwardOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := plan.SetInput(0, in.F32); err != nil {
				t.Fatal(err)
			}
			if err := plan.Forward(); err != nil {
				t.Fatal(err)
			}
			got, _ := plan.Output(0)
			// float32 through 11–86 M parameters: relative 1e-4 of the
			// logits' scale.
			rel := numcheck.RelErr(got, gd["logits"].F32, 0)
			if rel > 1e-4 {
				t.Errorf("max |ours − PyTorch| = %.3g of the logits' scale", rel)
			}
			t.Logf("max |ours − PyTorch| = %.3g of the logits' scale", rel)
		})
	}
}

// TestPlanNamesExportForms: on torchvision's ResNet-18 eval export (BN
// folded by the exporter, weights renamed onnx::Conv_N) plan says so and
// shows the PyTorch names; the training-mode export keeps BN and names.
func TestPlanNamesExportForms(t *testing.T) {
	dir := fulltest.Dir(t)
	for _, c := range []struct {
		model, form string
		module      map[string]string // stored name prefix → module name, for the first conv
		text        string
	}{
		{"resnet18", "eval (BatchNorm folded)", map[string]string{"conv1.weight": "onnx::Conv_", "layer1.0.conv1.weight": "onnx::Conv_", "layer4.1.conv2.bias": "onnx::Conv_"},
			"the exporter folded BatchNorm"},
		{"resnet18_train", "training", nil, "BatchNormalization kept"},
	} {
		t.Run(c.model, func(t *testing.T) {
			model := filepath.Join(dir, c.model+".onnx")
			out, e, code := run(t, "plan", "--model", model, "--input-shape", "3,224,224", "--batch", "2", "--json")
			if code != 0 {
				t.Fatalf("plan: exit %d: %s", code, e)
			}
			var r struct {
				Plan struct {
					ExportForm string `json:"export_form"`
					Params     []struct{ Name, Module string }
				}
			}
			if err := json.Unmarshal([]byte(out), &r.Plan); err != nil {
				t.Fatal(err)
			}
			if r.Plan.ExportForm != c.form {
				t.Errorf("export_form %q, want %q", r.Plan.ExportForm, c.form)
			}
			got := map[string]string{}
			for _, p := range r.Plan.Params {
				if p.Module != "" {
					got[p.Module] = p.Name
				}
			}
			for mod, prefix := range c.module {
				if name, ok := got[mod]; !ok || !strings.HasPrefix(name, prefix) {
					t.Errorf("module name %q: stored name %q, want one starting %q", mod, name, prefix)
				}
			}
			if c.module == nil && len(got) != 0 {
				t.Errorf("names kept by the exporter got module names: %v", got)
			}
			human, _, _ := run(t, "plan", "--model", model, "--input-shape", "3,224,224", "--batch", "2")
			if !strings.Contains(human, c.text) {
				t.Errorf("plan does not say %q:\n%s", c.text, human)
			}
			if c.module != nil && !strings.Contains(human, "conv1.weight (onnx::Conv_") {
				t.Errorf("plan does not show conv1.weight beside its stored name:\n%s", human)
			}
		})
	}
}
