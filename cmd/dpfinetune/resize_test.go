package main

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// crossResize is testdata/ops/crossvit_resize (make_op_models.py): a
// CrossViT-like model at opset 17 whose second branch resizes its
// (batch, 3, 20, 20) input to 16×16 (bicubic, align_corners=False, as
// timm's CrossViT 240 → 224) before a 4×4 patch embedding; the first
// embeds 5×5 patches of the input itself. Its npz holds a batch of 6, the
// labels, PyTorch's output and batch-of-1 per-sample norms.
const crossResize = "../../testdata/ops/crossvit_resize"

// TestResizeModelCLI: plan, predict and norms on the CrossViT-like
// model with a Resize: no Resize constant among the parameters, every
// parameter trainable, the predictions and the per-sample norms (every
// mode, physical batches of 4 so that the last is padded) PyTorch's.
func TestResizeModelCLI(t *testing.T) {
	ref, xp, yp := npzInputs(t, crossResize+".npz")
	model := crossResize + ".onnx"

	out, errOut, code := run(t, "plan", "--model", model, "--input-shape", "3,20,20", "--batch", "4", "--json")
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errOut)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Plan == nil || len(r.Problems) > 0 || r.Trainable.Tensors != 16 || r.Frozen.Tensors != 0 {
		t.Fatalf("plan: %d trainable, %d frozen, problems %v", r.Trainable.Tensors, r.Frozen.Tensors, r.Problems)
	}
	for _, p := range r.Params {
		if !strings.Contains(p.Name, "patch") && !strings.Contains(p.Name, "cls") && !strings.Contains(p.Name, "pos") &&
			!strings.Contains(p.Name, "norm") && !strings.Contains(p.Name, "head") {
			t.Errorf("plan parameter %q is none of the model's", p.Name)
		}
	}

	pred := filepath.Join(t.TempDir(), "p.npy")
	if _, errOut, code := run(t, "predict", "--model", model, "--input", xp, "--out", pred, "--batch", "4"); code != 0 {
		t.Fatalf("predict: exit %d: %s", code, errOut)
	}
	got, err := npy.ReadFile(pred)
	if err != nil {
		t.Fatal(err)
	}
	if d, m := maxDiff(got.F32, ref["y"].F32); d > 1e-4*m {
		t.Errorf("predict: max |Δ| %.3g against PyTorch (scale %.3g)", d, m)
	}

	want := ref["norm_total"].F64
	for _, mode := range []string{"bk", "mixed", "ghost", "instantiate"} {
		out, errOut, code := run(t, "norms", "--model", model, "--input", xp, "--labels", yp, "--mode", mode, "--batch", "4", "--json")
		if code != 0 {
			t.Fatalf("norms %s: exit %d: %s", mode, code, errOut)
		}
		var nr normsReport
		if err := json.Unmarshal([]byte(out), &nr); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !(math.Abs(nr.Total[i]-want[i]) <= 1e-4*want[i]) { // NaN fails too
				t.Errorf("norms %s sample %d: %v, PyTorch %v", mode, i, nr.Total[i], want[i])
			}
		}
		if len(nr.PerParam) != 16 {
			t.Errorf("norms %s: %d parameters", mode, len(nr.PerParam))
		}
		for name, v := range nr.PerParam {
			w := ref["norm/"+name].F64
			for i := range w {
				if !(math.Abs(v[i]-w[i]) <= 1e-4*w[i]+1e-7) { // NaN fails too
					t.Errorf("norms %s %s sample %d: %v, PyTorch %v", mode, name, i, v[i], w[i])
				}
			}
		}
	}
}

// TestResizeNormsCUDAEmulated: the CrossViT-like model's per-sample norms
// on the emulated CUDA device (guarded memory) are the CPU's, in the
// single-pass and the two-pass modes.
func TestResizeNormsCUDAEmulated(t *testing.T) {
	useEmulatedCUDA(t)
	_, xp, yp := npzInputs(t, crossResize+".npz")
	normsMatchCUDA(t, crossResize+".onnx", xp, yp, []string{"bk", "ghost"})
}

// TestResizeModelTrains: dpfinetune train fine-tunes the CrossViT-like
// model (Fashion-MNIST resized to its 3×20×20 input by the data
// pipeline, then to 16×16 by the model's bicubic Resize); the export
// keeps the Resize node as it was, carries the trained weights, and gives
// onnxruntime's outputs in our runtime; eval reads it.
func TestResizeModelTrains(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "trained.onnx")
	model := crossResize + ".onnx"
	if _, e, code := run(t, "train", "--model", model, "--data", fmnist+":limit=128", "--epsilon", "3", "--epochs", "1",
		"--batch-size", "32", "--physical-batch", "16", "--lr", "0.01", "--seed", "3", "--quiet", "--out", out); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	resizes := func(path string) []string {
		m, err := onnx.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, n := range m.Proto.GetGraph().GetNode() {
			if n.GetOpType() == "Resize" {
				s = append(s, n.String())
			}
		}
		return s
	}
	before, after := resizes(model), resizes(out)
	if len(after) != 1 || len(before) != 1 || after[0] != before[0] {
		t.Errorf("the export's Resize nodes %v, the model's %v", after, before)
	}
	a, b := readInits(t, model), readInits(t, out)
	changed := 0
	for name, w := range a {
		if !bytes.Equal(w, b[name]) {
			changed++
		}
	}
	if changed != 16 {
		t.Errorf("training changed %d initializers, want the 16 parameters", changed)
	}

	exportMatchesORT(t, out, []int64{3, 20, 20})

	if _, e, code := run(t, "eval", "--model", out, "--data", fmnist+":test:limit=64"); code != 0 {
		t.Errorf("eval: exit %d: %s", code, e)
	}
}
