package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// torchGroupNorm exports a small CNN with two nn.GroupNorm layers with
// PyTorch's TorchScript exporter, with and without constant folding.
const torchGroupNorm = `
import sys, torch
class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.c1 = torch.nn.Conv2d(3, 8, 3, padding=1); s.g1 = torch.nn.GroupNorm(2, 8)
        s.c2 = torch.nn.Conv2d(8, 8, 3, padding=1); s.g2 = torch.nn.GroupNorm(4, 8)
        s.fc = torch.nn.Linear(8, 10)
    def forward(s, x):
        x = torch.relu(s.g1(s.c1(x)))
        x = torch.relu(s.g2(s.c2(x)))
        return s.fc(x.mean((2, 3)))
torch.manual_seed(0)
m = M().eval()
for fold in (True, False):
    torch.onnx.export(m, torch.randn(1, 3, 28, 28), "%s/gn_fold%d.onnx" % (sys.argv[1], fold), opset_version=14,
                      do_constant_folding=fold, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "b"}, "logits": {0: "b"}})
`

// TestTrainTorchGroupNorm: nn.GroupNorm as PyTorch exports it, with and
// without constant folding, trains as one GroupNormalization node per
// layer (plan says so), is written back decomposed with the outputs
// onnxruntime computes, and the written model trains fused again.
func TestTrainTorchGroupNorm(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, onnx").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch and onnx")
	}
	dir := t.TempDir()
	if out, err := exec.Command(py, "-c", torchGroupNorm, dir).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	plan := func(model, form string) {
		t.Helper()
		out, e, code := run(t, "plan", "--model", model, "--input-shape", "3,28,28", "--batch", "8")
		if code != 0 {
			t.Fatalf("plan: exit %d: %s", code, e)
		}
		if n := strings.Count(out, "decomposed GroupNorm ("+form); n != 2 {
			t.Errorf("%s: %d GroupNorms fused from the %s form, want 2:\n%s", filepath.Base(model), n, form, out)
		}
	}
	for _, fold := range []string{"1", "0"} {
		model := filepath.Join(dir, "gn_fold"+fold+".onnx")
		plan(model, "InstanceNormalization")
		out := filepath.Join(dir, "tuned"+fold+".onnx")
		args := []string{"train", "--model", model, "--data", fmnist + ":limit=64", "--epsilon", "8", "--epochs", "1",
			"--batch-size", "16", "--quiet", "--out", out}
		if _, e, code := run(t, args...); code != 0 {
			t.Fatalf("train: exit %d: %s", code, e)
		}
		exportMatchesORT(t, out, []int64{3, 28, 28})
		plan(out, "ReduceMean")
	}
}
