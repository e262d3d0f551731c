package runtime

import (
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
)

func loadDropout(t *testing.T, name string) *graph.Graph {
	t.Helper()
	m, err := onnx.Load(filepath.Join("..", "testdata", "dropout", name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestDropoutForms runs every form of Dropout the opsets define
// (testdata/gen/make_dropout.py): each graph computes out = x when Dropout
// is identity and its mask keeps every element, whatever its ratio and
// training_mode, with the mask read by Mul, Where, Cast or a graph output.
func TestDropoutForms(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maskOut  bool // the mask is graph output 1
		forwards []bool
	}{
		{name: "dropout_v7"},
		{name: "dropout_v10", maskOut: true},
		{name: "dropout_v12_train"},
		{name: "dropout_v13_eval"},
		{name: "dropout_v14_unused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := loadDropout(t, tc.name)
			for _, fwdOnly := range []bool{true, false} {
				p, err := CompileForBatch(g, 3, nil, &Options{ForwardOnly: fwdOnly, Trainable: []string{}})
				if err != nil {
					t.Fatalf("ForwardOnly=%v: %v", fwdOnly, err)
				}
				x := []float32{1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12}
				if err := p.SetInput(0, x); err != nil {
					t.Fatal(err)
				}
				if err := p.Forward(); err != nil {
					t.Fatal(err)
				}
				y, shape := p.Output(0)
				if len(shape) != 2 || shape[0] != 3 || shape[1] != 4 {
					t.Fatalf("output shape %v, want [3 4]", shape)
				}
				for i := range x {
					if y[i] != x[i] {
						t.Fatalf("ForwardOnly=%v: out[%d] = %v, want %v (out = x)", fwdOnly, i, y[i], x[i])
					}
				}
				if tc.maskOut {
					m := p.outputs[1]
					if len(m.b) != len(x) {
						t.Fatalf("mask output has %d bools, want %d", len(m.b), len(x))
					}
					for i, b := range m.b {
						if !b {
							t.Fatalf("mask[%d] is false; a Dropout run as identity keeps everything", i)
						}
					}
				}
			}
		})
	}
}

// TestDropoutTrainingExports runs training-mode exports
// (TrainingMode.TRAINING, no constant folding) whose Dropout keeps its bool
// mask output, against PyTorch's logits of the same model in training mode
// with Dropout off (BatchNormalization normalizes with batch statistics,
// as the exported graph says).
func TestDropoutTrainingExports(t *testing.T) {
	in, err := npy.ReadNPZ(filepath.Join("..", "testdata", "dropout", "input.npz"))
	if err != nil {
		t.Fatal(err)
	}
	x := in["input"]
	for _, name := range []string{"mobilenet_v3_small", "efficientnet", "mnasnet", "googlenet"} {
		t.Run(name, func(t *testing.T) {
			g := loadDropout(t, name)
			gold, err := npy.ReadNPZ(filepath.Join("..", "testdata", "dropout", name+".npz"))
			if err != nil {
				t.Fatal(err)
			}
			want := gold["logits"].F32
			p, err := CompileForBatch(g, x.Shape[0], nil, &Options{ForwardOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.SetInput(0, x.F32); err != nil {
				t.Fatal(err)
			}
			if err := p.Forward(); err != nil {
				t.Fatal(err)
			}
			got, _ := p.Output(0)
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			if e := relErrFloor(got, want, 1); e > 1e-4 {
				t.Errorf("logits: max |Δ| / max(1, max|want|) = %.3g > 1e-4", e)
			}
		})
	}
}
