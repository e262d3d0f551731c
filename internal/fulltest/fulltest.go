// Package fulltest gives tests the full-size torchvision exports made by
// the fixture script (testdata/gen/make_fixtures.py --full): resnet18,
// resnet18_train, vgg11 and vit_b_16 with random init, each with an .npz of
// an input batch and PyTorch's logits. They are hundreds of megabytes, so
// they are exported once into a cache directory keyed by the script's hash,
// and tests skip when the script's Python (Debian python3-torch,
// python3-torchvision, python3-onnx) is absent or in -short mode.
package fulltest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Models lists what Dir exports.
var Models = []string{"resnet18", "resnet18_train", "vgg11", "vit_b_16"}

// Dir returns the directory holding <model>.onnx and <model>.npz for every
// name in Models, exporting them on first use, or skips t.
func Dir(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("full-size exports are slow; skipped in -short")
	}
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch, torchvision and onnx")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "gen", "make_fixtures.py")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	dir := filepath.Join(os.TempDir(), "dpfinetune-full-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return dir
	}
	models := ""
	for i, m := range Models {
		if i > 0 {
			models += ","
		}
		models += m
	}
	cmd := exec.Command(py, script, "--full", dir, "--full-only", "--full-models", models, "--no-full-check")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("exporting full-size models: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
