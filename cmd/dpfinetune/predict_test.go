package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// TestPredictCNN: predict reproduces the golden logits at every physical
// batch (the last one partial), on the CPU and on the emulated CUDA device
// with guarded memory, where reading the logits without copying them out
// of device memory faults.
func TestPredictCNN(t *testing.T) {
	for _, device := range []string{"cpu", "cuda"} {
		t.Run(device, func(t *testing.T) {
			if device == "cuda" {
				useEmulatedCUDA(t)
			}
			predictCNN(t, device)
		})
	}
}

func predictCNN(t *testing.T, device string) {
	gold, err := npy.ReadNPZ("../../testdata/golden/cnn.npz")
	if err != nil {
		t.Skipf("fixture: %v", err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "x.npy")
	if err := npy.WriteFile(in, gold["input"]); err != nil {
		t.Fatal(err)
	}
	want := gold["logits"]
	for _, batch := range []string{"32", "3", "8", "1"} {
		t.Run("batch"+batch, func(t *testing.T) {
			out := filepath.Join(dir, "y"+batch+".npy")
			stdout, stderr, code := run(t, "predict", "--device", device, "--model", "../../testdata/models/cnn.onnx", "--input", in, "--out", out, "--batch", batch)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "wrote") {
				t.Errorf("stdout %q", stdout)
			}
			got, err := npy.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Shape) != 2 || got.Shape[0] != 8 || got.Shape[1] != 10 {
				t.Fatalf("output shape %v, want [8 10]", got.Shape)
			}
			var d, m float64
			for i, w := range want.F32 {
				d = math.Max(d, math.Abs(float64(got.F32[i]-w)))
				m = math.Max(m, math.Abs(float64(w)))
			}
			if d/m > 1e-4 {
				t.Errorf("logits: relative error %.3g > 1e-4", d/m)
			}
		})
	}
}

func TestPredictErrors(t *testing.T) {
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong.npy")
	if err := npy.WriteFile(wrong, npy.NewFloat32(make([]float32, 2*3*32*32), 2, 3, 32, 32)); err != nil {
		t.Fatal(err)
	}
	ints := filepath.Join(dir, "ints.npy")
	if err := npy.WriteFile(ints, npy.NewInt64(make([]int64, 2), 2)); err != nil {
		t.Fatal(err)
	}
	model := "../../testdata/models/cnn.onnx"
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no model", []string{"--input", wrong, "--out", "y.npy"}, 2, "--model is required"},
		{"no out", []string{"--model", model, "--input", wrong}, 2, "--out is required"},
		{"bad batch", []string{"--model", model, "--input", wrong, "--out", "y.npy", "--batch", "0"}, 2, "--batch must be positive"},
		{"shape", []string{"--model", model, "--input", wrong, "--out", filepath.Join(dir, "y.npy")}, 1, `expects (batch,1,28,28), got (2,3,32,32)`},
		{"dtype", []string{"--model", model, "--input", ints, "--out", filepath.Join(dir, "y.npy")}, 1, "want float32"},
		{"missing input", []string{"--model", model, "--input", filepath.Join(dir, "none.npy"), "--out", filepath.Join(dir, "y.npy")}, 1, "none.npy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := run(t, append([]string{"predict"}, c.args...)...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, c.code, c.want)
			}
		})
	}
}

// TestPredictTrainingExports: predict and eval run training-mode exports
// whose Dropout keeps its bool mask output (testdata/gen/make_dropout.py),
// predict matching PyTorch's logits of the same model in training mode with
// Dropout off.
func TestPredictTrainingExports(t *testing.T) {
	const dir = "../../testdata/dropout"
	in, err := npy.ReadNPZ(filepath.Join(dir, "input.npz"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	x := filepath.Join(tmp, "x.npy")
	if err := npy.WriteFile(x, in["input"]); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mobilenet_v3_small", "efficientnet", "mnasnet", "googlenet"} {
		t.Run(name, func(t *testing.T) {
			model := filepath.Join(dir, name+".onnx")
			gold, err := npy.ReadNPZ(filepath.Join(dir, name+".npz"))
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(tmp, name+".npy")
			if _, stderr, code := run(t, "predict", "--model", model, "--input", x, "--out", out); code != 0 {
				t.Fatalf("predict: exit %d: %s", code, stderr)
			}
			got, err := npy.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want := gold["logits"].F32
			if len(got.F32) != len(want) {
				t.Fatalf("%d logits, want %d", len(got.F32), len(want))
			}
			var d, m float64
			for i, w := range want {
				d = math.Max(d, math.Abs(float64(got.F32[i]-w)))
				m = math.Max(m, math.Abs(float64(w)))
			}
			if d > 1e-4*math.Max(1, m) {
				t.Errorf("logits: max |Δ| = %.3g, max |want| = %.3g", d, m)
			}
			stdout, stderr, code := run(t, "eval", "--model", model, "--data", fmnist+":limit=8", "--batch", "4", "--json")
			if code != 0 {
				t.Fatalf("eval: exit %d: %s", code, stderr)
			}
			var r evalResult
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatal(err)
			}
			if r.Samples != 8 || !(r.Loss > 0) {
				t.Errorf("eval %+v: want 8 samples and a positive loss", r)
			}
		})
	}
}
