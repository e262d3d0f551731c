package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportPNG draws a report written by train's own types and checks
// that the PNG decodes at the asked size, and that bad inputs are refused
// with a message naming the file.
func TestReportPNG(t *testing.T) {
	dir := t.TempDir()
	b := []byte(`{"settings": {"model": "testdata/models/cnn.onnx", "epsilon": 3, "delta": 1e-5, "sample_rate": 0.032,
		"sigma": 0.92, "accountant": "rdp", "steps": 96},
	"privacy": {"accountant": "rdp", "epsilon": 3, "delta": 1e-5, "steps": 96},
	"epochs": [
		{"epoch": 1, "steps": 32, "epsilon": 2.2, "train_loss": 1.3, "test": {"samples": 100, "accuracy": 0.65}},
		{"epoch": 2, "steps": 64, "epsilon": 2.6, "train_loss": 1.1, "test": {"samples": 100, "accuracy": 0.68}},
		{"epoch": 3, "steps": 96, "epsilon": 3.0, "train_loss": 1.0, "test": {"samples": 100, "accuracy": 0.70}}]}`)
	in := filepath.Join(dir, "run.json")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := runReportCmd([]string{in, "--width", "640", "--height", "480"}, &stdout); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "run.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got.X != 640 || got.Y != 480 {
		t.Errorf("PNG is %v, want 640×480", got)
	}
	// Something was drawn: not one flat colour.
	first, varied := img.At(0, 0), false
	for y := 0; y < 480 && !varied; y += 7 {
		for x := 0; x < 640; x += 7 {
			if img.At(x, y) != first {
				varied = true
				break
			}
		}
	}
	if !varied {
		t.Error("the PNG is blank")
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{not json"), 0o644)
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{"epochs": []}`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{bad}, "bad.json: not a run report"},
		{[]string{empty}, "empty.json: the report has no epochs"},
		{[]string{}, "a report file is needed"},
		{[]string{in, "--width", "5"}, "--width and --height"},
		{[]string{filepath.Join(dir, "missing.json")}, "missing.json"},
	} {
		err := runReportCmd(c.args, &stdout)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("report %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
