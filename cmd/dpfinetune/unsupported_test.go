package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// writeModel writes a model whose input "x" (batch, 3, 4, 4) flows through
// nodes (each reading the previous one's output) to the output "y".
func writeModel(t *testing.T, opset int64, nodes []*onnxpb.NodeProto) string {
	t.Helper()
	dims := func(d ...any) *onnxpb.TypeProto {
		sh := &onnxpb.TensorShapeProto{}
		for _, v := range d {
			switch v := v.(type) {
			case int:
				sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}})
			case string:
				sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: v}})
			}
		}
		return &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(1), Shape: sh}}}
	}
	prev := "x"
	for i, n := range nodes {
		n.Input = append([]string{prev}, n.Input...)
		prev = "y"
		if i < len(nodes)-1 {
			prev = n.GetName() + "_out"
		}
		n.Output = []string{prev}
	}
	m := &onnxpb.ModelProto{
		IrVersion: proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{
			{Domain: proto.String(""), Version: proto.Int64(opset)},
			{Domain: proto.String("com.example"), Version: proto.Int64(1)},
		},
		Graph: &onnxpb.GraphProto{
			Name:   proto.String("unsupported"),
			Node:   nodes,
			Input:  []*onnxpb.ValueInfoProto{{Name: proto.String("x"), Type: dims("batch", 3, 4, 4)}},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y"), Type: dims("batch", 3, 4, 4)}},
		},
	}
	b, err := onnx.NewModel(m).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func node(op, name, domain string) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Domain: proto.String(domain)}
}

// TestUnsupportedOperators: inspect, plan, predict, train, eval and norms
// stop before any work on a model with unsupported operators, and each
// names every unsupported node with its opset, not only the first.
func TestUnsupportedOperators(t *testing.T) {
	mixed := writeModel(t, 14, []*onnxpb.NodeProto{
		node("Relu", "fine", ""),
		node("Hardmax", "rounding", ""),         // shapes inferred, no kernel
		node("Frobnicate", "mystery", ""),       // unknown to the IR
		node("Relu", "fine2", ""),               //
		node("Custom", "vendor", "com.example"), // another domain
		node("Hardmax", "rounding2", ""),
	})
	mixedWant := []string{
		`Hardmax "rounding" (opset 14): no kernel`, `Frobnicate "mystery" (opset 14): not supported`,
		`com.example.Custom "vendor" (opset 1)`, `Hardmax "rounding2" (opset 14)`,
	}
	newer := writeModel(t, 28, []*onnxpb.NodeProto{node("Relu", "relu", ""), node("Sigmoid", "sig", "")})
	newerWant := []string{`Relu "relu" (opset 28): opset 28 is newer than the kernel's range 6–27`, `Sigmoid "sig" (opset 28)`}
	older := writeModel(t, 5, []*onnxpb.NodeProto{node("Relu", "relu", "")})
	olderWant := []string{`Relu "relu" (opset 5): opset 5 is older than the kernel's range 6–27`}

	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.npy") // never read: the check comes first
	commands := map[string]func(model string) []string{
		"inspect": func(m string) []string { return []string{"inspect", "--model", m, "--input-shape", "3,4,4"} },
		"plan": func(m string) []string {
			return []string{"plan", "--model", m, "--input-shape", "3,4,4", "--batch", "2", "--num-classes", "3"}
		},
		"predict": func(m string) []string {
			return []string{"predict", "--model", m, "--input", missing, "--out", filepath.Join(dir, "y.npy")}
		},
		"train": func(m string) []string {
			return []string{"train", "--model", m, "--data", "idx:" + dir, "--epsilon", "3", "--out", filepath.Join(dir, "t.onnx")}
		},
		"eval": func(m string) []string { return []string{"eval", "--model", m, "--data", "idx:" + dir} },
		"norms": func(m string) []string {
			return []string{"norms", "--model", m, "--input", missing, "--labels", missing}
		},
	}
	for _, model := range []struct {
		name, path string
		want       []string
		count      string
	}{
		{"mixed", mixed, mixedWant, "4 node(s)"},
		{"opset19", newer, newerWant, "2 node(s)"},
		{"opset5", older, olderWant, "1 node(s)"},
	} {
		for cmd, args := range commands {
			t.Run(model.name+"/"+cmd, func(t *testing.T) {
				stdout, stderr, code := run(t, args(model.path)...)
				if code != 1 {
					t.Fatalf("exit %d, want 1; stderr %q", code, stderr)
				}
				text := stderr
				if cmd == "inspect" {
					text = stdout // the report lists them; the error counts them
				}
				for _, w := range model.want {
					if !strings.Contains(text, w) {
						t.Errorf("output does not name %s:\n%s", w, text)
					}
				}
				if !strings.Contains(stderr, model.count) {
					t.Errorf("stderr %q does not count %s", stderr, model.count)
				}
				if strings.Contains(stderr, "absent.npy") || strings.Contains(stderr, "no such file") {
					t.Errorf("stderr %q: the operator check must come before reading data", stderr)
				}
			})
		}
	}
	t.Run("inspect-json", func(t *testing.T) {
		stdout, _, code := run(t, "inspect", "--model", mixed, "--json")
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		var rep inspectReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range rep.Unsupported {
			got = append(got, u.Op+"/"+u.Node)
		}
		want := "Hardmax/rounding Frobnicate/mystery com.example.Custom/vendor Hardmax/rounding2"
		if strings.Join(got, " ") != want || rep.Nodes != 6 {
			t.Errorf("unsupported %v (nodes %d), want %s of 6", got, rep.Nodes, want)
		}
	})
	t.Run("supported", func(t *testing.T) {
		ok := writeModel(t, 14, []*onnxpb.NodeProto{node("Relu", "relu", ""), node("Sigmoid", "sig", "")})
		if _, stderr, code := run(t, "inspect", "--model", ok, "--input-shape", "3,4,4"); code != 0 {
			t.Errorf("inspect of a supported model: exit %d: %s", code, stderr)
		}
	})
}
