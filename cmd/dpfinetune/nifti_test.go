package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNIfTI: a folder of NIfTI volumes (.nii, .nii.gz) trains a 2-D model
// on each volume's middle slice with a window, a 2-D model on every slice
// (each file a user), and a clip model on 4 slices of each; the choices
// are recorded, predict reads the files as train did (a row a file, its
// slices' probabilities combined with --frame all), and
// docs/serve_preprocess.py's nifti_images and open_clip give predict's
// logits.
func TestNIfTI(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, f := range []string{"u8.nii", "i16_scaled_gz.nii.gz", "f64_v2.nii", "i32_ext.nii", "f32_nan_be.nii", "t1_4d.nii"} {
		b, err := os.ReadFile(filepath.Join("../../internal/nifti/testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, []string{"a", "b"}[i%2], f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	const py = "/usr/bin/python3"
	served := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL, nibabel").Run() == nil
	for _, c := range []struct {
		model, frame, window string
		users                bool
	}{
		{"../../testdata/models/cnn.onnx", "middle", "40,400", false},
		{"../../testdata/models/cnn.onnx", "all", "", true},
		{"../../testdata/exports/clip3d_train.onnx", "", "", false},
	} {
		out := filepath.Join(t.TempDir(), "m.onnx")
		args := []string{"train", "--model", c.model, "--data", "folder:" + dir, "--test-data", "none",
			"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--out", out}
		if c.frame != "" {
			args = append(args, "--frame", c.frame)
		}
		if c.window != "" {
			args = append(args, "--window", c.window)
		}
		o, e, code := run(t, args...)
		if code != 0 {
			t.Fatalf("train %s --frame %q: exit %d: %s", c.model, c.frame, code, e)
		}
		if c.users != strings.Contains(o, "the guarantee is per user") {
			t.Errorf("train --frame %q: user-level %v wanted; log:\n%s", c.frame, c.users, o)
		}
		if m := metadata(t, out); m["dpfinetune.frame"] != c.frame || m["dpfinetune.window"] != c.window {
			t.Errorf("recorded frame %q window %q, want %q %q", m["dpfinetune.frame"], m["dpfinetune.window"], c.frame, c.window)
		}
		o, e, code = run(t, "predict", "--model", out, "--images", dir, "--json")
		var preds struct{ Predictions []imagePrediction }
		if code != 0 || json.Unmarshal([]byte(o), &preds) != nil || len(preds.Predictions) != 6 {
			t.Fatalf("predict: exit %d: %s%s; want a row a file", code, o, e)
		}
		if served {
			servedLikePredict(t, py, out, filepath.Join(t.TempDir(), "served"), files, 1e-5)
		}
	}
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--out", filepath.Join(t.TempDir(), "x.onnx")); code == 0 || !strings.Contains(e, "no slice chosen") || !strings.Contains(e, "--frame") {
		t.Errorf("train on volumes without --frame: exit %d: %s", code, e)
	}
}
