package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/fulltest"
	"github.com/dpfinetune/dpfinetune/internal/npy"
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
			want := gd["logits"].F32
			var scale, worst float64
			for i := range want {
				scale = math.Max(scale, math.Abs(float64(want[i])))
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
			}
			// float32 through 11–86 M parameters: relative 1e-4 of the
			// logits' scale.
			if worst > 1e-4*scale {
				t.Errorf("max |ours − PyTorch| = %.3g (logit scale %.3g)", worst, scale)
			}
			t.Logf("max |ours − PyTorch| = %.3g (logit scale %.3g)", worst, scale)
		})
	}
}
