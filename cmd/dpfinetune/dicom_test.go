package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDICOMTrainPredict: a folder of DICOM images — uncompressed, RLE,
// JPEG Lossless, JPEG-LS, JPEG 2000 and deflated, some named without an
// extension — trains
// with each patient one user (:dicom-users, the files' Patient IDs), and
// predict --images classifies a DICOM file of it.
func TestDICOMTrainPredict(t *testing.T) {
	const fixtures = "../../internal/dicom/testdata/files"
	dir := t.TempDir()
	files := []struct{ rel, fixture, patient string }{
		{"normal/a.dcm", "ct_implicit.dcm", "P-0001"},
		{"normal/IM000002", "ct_rle.dcm", "P-0002"},
		{"normal/c.dcm", "cr_jpegll_sv1.dcm", "P-0003"},
		{"normal/d.dcm", "voi_lut.dcm", "P-0004"},
		{"normal/i.dcm", "ct_jpegls.dcm", "P-0005"},
		{"nodule/j.dcm", "cr_j2k.dcm", "P-0005"},
		{"nodule/e.dcm", "ct_exact.dcm", "P-0001"},
		{"nodule/f.dcm", "ct_jpegll_sv4.dcm", "P-0002"},
		{"nodule/IM000007", "modality_lut.dcm", "P-0003"},
		{"nodule/h.dcm", "sigmoid_be.dcm", "P-0004"},
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(fixtures, f.fixture))
		if err != nil {
			t.Fatal(err)
		}
		// gen_dicom.py wrote P-0001 in every file (not deflated: readable).
		if bytes.Count(b, []byte("P-0001")) != 1 {
			t.Fatalf("%s: no Patient ID to patch", f.fixture)
		}
		b = bytes.Replace(b, []byte("P-0001"), []byte(f.patient), 1)
		p := filepath.Join(dir, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "tuned.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir+":dicom-users", "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet", "--out", out, "--report", out+".json"); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	var r runReport
	b, err := os.ReadFile(out + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Settings.PrivacyUnit != "user" || r.Settings.Users != 5 || r.Settings.Examples != 10 {
		t.Errorf("settings %+v (%v): want 10 examples of 5 users, the guarantee per user", r.Settings, err)
	}
	image := filepath.Join(dir, "nodule", "IM000007")
	o, e, code := run(t, "predict", "--model", out, "--images", image)
	if code != 0 || !strings.Contains(o, "IM000007") || !strings.Contains(o, "nodule") {
		t.Errorf("predict --images %s: exit %d: %s%s", image, code, o, e)
	}
	if _, ok := metadata(t, out)["dpfinetune.window"]; ok {
		t.Errorf("a run on the files' own windows recorded one")
	}

	// --window: train reads every image through a lung window and records
	// it; predict reads through the recorded one unless told otherwise,
	// and eval likewise.
	lung := filepath.Join(t.TempDir(), "lung.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir, "--test-data", "none", "--window", "-600, 1500",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet", "--out", lung); code != 0 {
		t.Fatalf("train --window: exit %d: %s", code, e)
	}
	if got := metadata(t, lung)["dpfinetune.window"]; got != "-600,1500" {
		t.Fatalf("recorded window %q, want -600,1500", got)
	}
	probs := func(args ...string) string { return predictTop2(t, lung, dir, args...) }
	recorded, explicit, own := probs(), probs("--window", "-600,1500"), probs("--window", "file")
	if recorded != explicit {
		t.Errorf("predict with the recorded window differs from --window -600,1500:\n%s\n%s", recorded, explicit)
	}
	if recorded == own {
		t.Errorf("predict --window file gave the lung window's probabilities")
	}
	evalOut := func(args ...string) string {
		t.Helper()
		o, e, code := run(t, append([]string{"eval", "--model", lung, "--data", "folder:" + dir + ":train", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("eval %v: exit %d: %s", args, code, e)
		}
		return o
	}
	if evalOut() != evalOut("--window", "-600,1500") || evalOut() == evalOut("--window", "file") {
		t.Errorf("eval does not read the recorded window as predict does")
	}
	for _, c := range []struct {
		window, msg string
	}{
		{"40,80/80,200/600,2800", "three windows make an RGB image; the model takes 1 channel"},
		{"40", "want C,W"},
		{"40,0", "under 1"},
	} {
		if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir, "--window", c.window,
			"--epsilon", "8", "--epochs", "1", "--quiet", "--out", filepath.Join(t.TempDir(), "x.onnx")); code != 2 || !strings.Contains(e, c.msg) {
			t.Errorf("train --window %s: exit %d, want 2 saying %q: %s", c.window, code, c.msg, e)
		}
	}
}

// TestServePreprocessDICOM: docs/serve_preprocess.py reads DICOM files
// with pydicom as predict --images reads them — the file's own window, VOI
// LUT, Modality LUT or range, or the window train recorded — so that the
// served model's logits on its batch are predict's.
func TestServePreprocessDICOM(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL, pydicom").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch, torchvision, onnx, PIL and pydicom")
	}
	const fixtures = "../../internal/dicom/testdata/files"
	dir := t.TempDir()
	// The files pydicom decodes without a codec of its own.
	var files []string
	for i, name := range []string{"ct_implicit", "ct_exact", "sigmoid_be", "cr_mono1_deflated", "voi_lut", "voi_lut_clipped", "modality_lut", "gray8", "ct_rle"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name+".dcm"))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "data", []string{"a", "b"}[i%2], name+".dcm")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	for _, window := range []string{"file", "-600,1500"} {
		t.Run(window, func(t *testing.T) {
			model := filepath.Join(dir, window+".onnx")
			if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+filepath.Join(dir, "data"), "--test-data", "none",
				"--window", window, "--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--seed", "3", "--quiet", "--out", model); code != 0 {
				t.Fatalf("train: exit %d: %s", code, e)
			}
			// The same 8-bit images, fitted as PIL resizes them.
			servedLikePredict(t, py, model, filepath.Join(dir, window), files, 1e-5)
		})
	}
}

// TestDICOMFrames: a folder of multi-frame DICOM objects (cine loops,
// enhanced CTs with per-frame windows; uncompressed, RLE, an Extended
// Offset Table) and a single-frame image trains with --frame, which train
// records: predict and eval read through the recorded choice unless told
// otherwise, and docs/serve_preprocess.py does too. Without --frame the
// run is refused, naming the file and the flag; a bad choice is a usage
// error.
func TestDICOMFrames(t *testing.T) {
	const frames = "../../internal/dicom/testdata/frames"
	dir := t.TempDir()
	var served []string
	for i, f := range []struct{ class, fixture string }{
		{"a", "cine8.dcm"}, {"a", "enhanced_ct.dcm"}, {"a", "perframe_rescale.dcm"}, {"a", "../files/ct_rle.dcm"},
		{"b", "enhanced_ct_rle.dcm"}, {"b", "cine8_rle_nobot.dcm"}, {"b", "cine16_extended.dcm"}, {"b", "enhanced_ct_implicit.dcm"},
	} {
		b, err := os.ReadFile(filepath.Join(frames, f.fixture))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, f.class, fmt.Sprintf("im%d.dcm", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		served = append(served, p)
	}
	train := func(args ...string) (string, int) {
		t.Helper()
		_, e, code := run(t, append([]string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:" + dir, "--test-data", "none",
			"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet"}, args...)...)
		return e, code
	}
	if e, code := train("--out", filepath.Join(t.TempDir(), "x.onnx")); code == 0 || !strings.Contains(e, "multi-frame image (4 frames)") || !strings.Contains(e, "--frame") || !strings.Contains(e, "im0.dcm") {
		t.Errorf("train without --frame: exit %d: %s; want the file, its frames and --frame named", code, e)
	}
	if e, code := train("--frame", "0", "--out", filepath.Join(t.TempDir(), "x.onnx")); code != 2 || !strings.Contains(e, "--frame") {
		t.Errorf("train --frame 0: exit %d: %s; want a usage error", code, e)
	}
	model := filepath.Join(t.TempDir(), "mip.onnx")
	if e, code := train("--frame", "max", "--out", model); code != 0 {
		t.Fatalf("train --frame max: exit %d: %s", code, e)
	}
	if got := metadata(t, model)["dpfinetune.frame"]; got != "max" {
		t.Fatalf("recorded frame %q, want max", got)
	}
	probs := func(args ...string) string { return predictTop2(t, model, dir, args...) }
	recorded, explicit, first := probs(), probs("--frame", "max"), probs("--frame", "first")
	if recorded != explicit {
		t.Errorf("predict with the recorded frame differs from --frame max:\n%s\n%s", recorded, explicit)
	}
	if recorded == first {
		t.Errorf("predict --frame first gave the projection's probabilities")
	}
	if o, e, code := run(t, "eval", "--model", model, "--data", "folder:"+dir+":train", "--json"); code != 0 || !strings.Contains(o, `"examples": 8`) {
		t.Errorf("eval with the recorded frame: exit %d: %s%s", code, o, e)
	}

	// --frame all: every frame a sample, each file a user (28 frames of
	// 8 files); predict gives a file its frames' mean probabilities.
	all := filepath.Join(t.TempDir(), "all.onnx")
	if e, code := train("--frame", "all", "--out", all, "--report", all+".json"); code != 0 {
		t.Fatalf("train --frame all: exit %d: %s", code, e)
	}
	var r runReport
	if b, err := os.ReadFile(all + ".json"); err != nil || json.Unmarshal(b, &r) != nil || r.Settings.PrivacyUnit != "user" || r.Settings.Users != 8 || r.Settings.Examples != 28 {
		t.Errorf("settings %+v (%v): want 28 frames of 8 files, the guarantee per file", r.Settings, err)
	}
	o, e, code := run(t, "predict", "--model", all, "--images", dir, "--json")
	var preds struct{ Predictions []imagePrediction }
	if code != 0 || json.Unmarshal([]byte(o), &preds) != nil || len(preds.Predictions) != 8 {
		t.Fatalf("predict --frame all (recorded): exit %d: %s%s; want a prediction a file", code, o, e)
	}
	perFile := map[string]int{"im0.dcm": 4, "im1.dcm": 4, "im3.dcm": 1, "im6.dcm": 3}
	for _, p := range preds.Predictions {
		if n, ok := perFile[filepath.Base(p.File)]; ok && p.Images != n {
			t.Errorf("%s: %d frames combined, want %d", p.File, p.Images, n)
		}
	}
	// eval scores each file as one, its frames' probabilities combined,
	// as predict does; data counts the files.
	o, e, code = run(t, "eval", "--model", all, "--data", "folder:"+dir+":train", "--group-by", "file", "--json")
	if code != 0 || !strings.Contains(o, `"examples": 8`) {
		t.Errorf("eval --group-by file: exit %d: %s%s; want the 8 files scored", code, o, e)
	}
	if o, e, code := run(t, "data", "--data", "folder:"+dir, "--frame", "all", "--group-by", "file"); code != 0 || !strings.Contains(o, "groups:    8 by each image file") {
		t.Errorf("data --frame all --group-by file: exit %d: %s%s", code, o, e)
	}
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL, pydicom").Run(); err != nil {
		t.Log("no /usr/bin/python3 with torch, torchvision, onnx, PIL and pydicom: serve_preprocess.py not checked")
		return
	}
	servedLikePredict(t, py, model, filepath.Join(t.TempDir(), "served"), served, 1e-5)
	// Every frame a row of the served batch, as predict --out writes them.
	servedLikePredict(t, py, all, filepath.Join(t.TempDir(), "served-all"), served, 1e-5)
}

// TestDICOMLeftOut: a folder exported from an archive — images beside a
// structured report and a presentation state — trains on its images, and
// train, data and eval say which files they left out.
func TestDICOMLeftOut(t *testing.T) {
	const fixtures = "../../internal/dicom/testdata/files"
	dir := t.TempDir()
	put := func(rel string, b []byte) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"ct_implicit", "ct_rle", "gray8", "cr_j2k"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name+".dcm"))
		if err != nil {
			t.Fatal(err)
		}
		put(fmt.Sprintf("%s/IM%d", []string{"a", "b"}[i%2], i), b)
		if i < 2 {
			// The same file cut before its pixel data: an object without an image.
			at := bytes.Index(b, []byte{0xE0, 0x7F, 0x10, 0x00})
			if at < 0 {
				t.Fatalf("%s: no explicit little-endian pixel data element", name)
			}
			put(fmt.Sprintf("%s/SR%d", []string{"a", "b"}[i%2], i), b[:at])
		}
	}
	o, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--out", filepath.Join(t.TempDir(), "x.onnx"))
	if code != 0 || !strings.Contains(o, "(4 examples,") || !strings.Contains(o, "left out:  2 DICOM objects without an image") {
		t.Errorf("train: exit %d: %s%s; want 4 examples and the 2 objects without an image left out", code, o, e)
	}
	if o, e, code := run(t, "data", "--data", "folder:"+dir, "--json"); code != 0 || !strings.Contains(o, `"left_out": [`) || !strings.Contains(o, "SR0") {
		t.Errorf("data --json: exit %d: %s%s", code, o, e)
	}
}

// TestDICOMStudies: eval and predict score a DICOM study's images as one
// by their Study Instance UIDs, whatever directories hold them, and a
// series' as one by their Series Instance UIDs.
func TestDICOMStudies(t *testing.T) {
	dir := t.TempDir()
	for i, f := range []struct{ rel, study, series string }{
		{"a/1.dcm", "1.2.9.1", "1.2.8.1"}, {"a/x/2.dcm", "1.2.9.1", "1.2.8.1"}, {"a/3.dcm", "1.2.9.3", "1.2.8.3"},
		{"b/4.dcm", "1.2.9.4", "1.2.8.4"}, {"b/y/5.dcm", "1.2.9.4", "1.2.8.5"}, {"b/6.dcm", "1.2.9.6", "1.2.8.6"},
	} {
		p := filepath.Join(dir, filepath.FromSlash(f.rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		img := gray8With(t, dicomAttr{0x000D, "UI", f.study}, dicomAttr{0x000E, "UI", f.series})
		// Each image its own pixels: a byte of the preamble changed keeps
		// the file whole but its content distinct.
		img[0] = byte(i)
		if err := os.WriteFile(p, img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model := filepath.Join(t.TempDir(), "m.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet", "--out", model); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	o, e, code := run(t, "eval", "--model", model, "--data", "folder:"+dir+":train", "--group-by", "study", "--json")
	if code != 0 || !strings.Contains(o, `"examples": 4`) {
		t.Errorf("eval --group-by study: exit %d: %s%s; want the 4 studies scored", code, o, e)
	}
	o, e, code = run(t, "predict", "--model", model, "--images", dir, "--group-by", "study", "--json")
	var preds struct{ Predictions []imagePrediction }
	if code != 0 || json.Unmarshal([]byte(o), &preds) != nil || len(preds.Predictions) != 4 {
		t.Fatalf("predict --group-by study: exit %d: %s%s; want a row a study", code, o, e)
	}
	for _, p := range preds.Predictions {
		if want := map[string]int{"1.2.9.1": 2, "1.2.9.3": 1, "1.2.9.4": 2, "1.2.9.6": 1}[p.File]; p.Images != want {
			t.Errorf("study %s: %d images, want %d", p.File, p.Images, want)
		}
	}
	// By series: study 1.2.9.4's two images (b/4.dcm, b/y/5.dcm) are two
	// series. The folder reads its class directories' own files, four
	// images of four series.
	o, e, code = run(t, "eval", "--model", model, "--data", "folder:"+dir+":train", "--group-by", "series", "--json")
	if code != 0 || !strings.Contains(o, `"examples": 4`) {
		t.Errorf("eval --group-by series: exit %d: %s%s; want the 4 series scored", code, o, e)
	}
	o, e, code = run(t, "predict", "--model", model, "--images", dir, "--group-by", "series", "--json")
	preds.Predictions = nil
	if code != 0 || json.Unmarshal([]byte(o), &preds) != nil || len(preds.Predictions) != 5 || preds.Predictions[0].File != "1.2.8.1" || preds.Predictions[0].Images != 2 {
		t.Fatalf("predict --group-by series: exit %d: %s%s; want a row a series, 1.2.8.1's of 2 images", code, o, e)
	}
}

// TestDICOMClips: a video or volume model (input C,T,H,W: clip3d, a
// Conv3d export) trains on a folder of multi-frame DICOM objects, each a
// clip of T of its frames picked evenly; predict gives a row a file, and
// docs/serve_preprocess.py makes the same clips (open_clip). --frame does
// not apply to clips, and a single image is no clip.
func TestDICOMClips(t *testing.T) {
	const frames = "../../internal/dicom/testdata/frames"
	dir := t.TempDir()
	var files []string
	for i, f := range []string{"cine8", "enhanced_ct", "perframe_rescale", "cine16_extended", "enhanced_ct_rle", "cine8_rle_nobot"} {
		b, err := os.ReadFile(filepath.Join(frames, f+".dcm"))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, []string{"a", "b"}[i%2], f+".dcm")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	model := filepath.Join(t.TempDir(), "clips.onnx")
	train := []string{"train", "--model", "../../testdata/exports/clip3d_train.onnx", "--data", "folder:" + dir, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--augment", "flip", "--out", model, "--report", model + ".json"}
	o, e, code := run(t, train...)
	if code != 0 || !strings.Contains(o, "(6 examples, 2 classes, input [3 4 16 16])") {
		t.Fatalf("train: exit %d: %s%s", code, o, e)
	}
	o, e, code = run(t, "predict", "--model", model, "--images", dir, "--json")
	var preds struct{ Predictions []imagePrediction }
	if code != 0 || json.Unmarshal([]byte(o), &preds) != nil || len(preds.Predictions) != 6 {
		t.Fatalf("predict: exit %d: %s%s; want a row a file", code, o, e)
	}
	// data counts the clips, and its SHA-256 is the one train recorded.
	var r runReport
	if b, err := os.ReadFile(model + ".json"); err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("the run report: %v", err)
	}
	o, e, code = run(t, "data", "--data", "folder:"+dir, "--model", model, "--json")
	if code != 0 || !strings.Contains(o, `"examples": 6`) || !strings.Contains(o, `"clip_frames": 4`) || !strings.Contains(o, r.Settings.DataSHA256) {
		t.Errorf("data --model (clips): exit %d: %s%s; want 6 clips of 4 frames and the recorded SHA-256 %s", code, o, e, r.Settings.DataSHA256)
	}
	if _, e, code := run(t, "predict", "--model", model, "--images", dir, "--frame", "max"); code != 2 || !strings.Contains(e, "--frame does not apply") {
		t.Errorf("predict --frame max on clips: exit %d: %s", code, e)
	}
	one, err := os.ReadFile("../../internal/dicom/testdata/files/gray8.dcm")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a", "one.dcm"), one, 0o644)
	if _, e, code := run(t, train...); code == 0 || !strings.Contains(e, "one.dcm: a single image") {
		t.Errorf("train with a single image among clips: exit %d: %s", code, e)
	}
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL, pydicom").Run(); err != nil {
		t.Log("no /usr/bin/python3 with torch, torchvision, onnx, PIL and pydicom: serve_preprocess.py not checked")
		return
	}
	servedLikePredict(t, py, model, filepath.Join(t.TempDir(), "served"), files, 1e-5)
}

// seriesSlice is gray8.dcm made slice k of a series: its Instance Number,
// an axial Image Position of z, a pixel set from k (its own image).
func seriesSlice(t *testing.T, k int, z float64, series ...string) []byte {
	t.Helper()
	var attrs []dicomAttr
	if len(series) == 2 { // its Series Instance UID and Series Number
		attrs = append(attrs, dicomAttr{0x000E, "UI", series[0]}, dicomAttr{0x0011, "IS", series[1]})
	}
	attrs = append(attrs, dicomAttr{0x0013, "IS", fmt.Sprint(k)}, dicomAttr{0x0032, "DS", fmt.Sprintf(`0\0\%g`, z)}, dicomAttr{0x0037, "DS", `1\0\0\0\1\0`})
	out := gray8With(t, attrs...)
	out[len(out)-600] = byte(40 + 7*k)
	return out
}

// dicomAttr is an element of group 0020 (its element number, VR and
// value) that gray8With writes.
type dicomAttr struct {
	elem uint16
	vr   string
	v    string
}

// gray8With is gray8.dcm with the given group-0020 elements (in tag order)
// placed before its image module, each value padded to even length (UIDs
// with a NUL, others with a space).
func gray8With(t *testing.T, attrs ...dicomAttr) []byte {
	t.Helper()
	b, err := os.ReadFile("../../internal/dicom/testdata/files/gray8.dcm")
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte{0x28, 0x00, 0x02, 0x00, 'U', 'S'})
	if at < 0 {
		t.Fatal("no explicit little-endian Samples per Pixel element")
	}
	var els []byte
	for _, e := range attrs {
		v := e.v
		if len(v)%2 == 1 {
			v += map[bool]string{true: "\x00", false: " "}[e.vr == "UI"]
		}
		els = append(els, 0x20, 0x00, byte(e.elem), byte(e.elem>>8), e.vr[0], e.vr[1], byte(len(v)), byte(len(v)>>8))
		els = append(els, v...)
	}
	return slices.Concat(b[:at], els, b[at:])
}

// TestDICOMSeries: folders of series — a CT's slices a file each — train
// a 2D model on each series' middle slice and on their maximum intensity
// projections, and a clip model on 4 slices of each, with --series
// recorded; predict reads directories of series as train did, and
// docs/serve_preprocess.py orders, splits and picks the slices alike
// (series_in, open_series, open_clip). One directory holds two series
// (Series Instance UIDs), its slices' names interleaved: two examples,
// named by Series Number.
func TestDICOMSeries(t *testing.T) {
	dir := t.TempDir()
	for s := range 6 {
		d := filepath.Join(dir, []string{"a", "b"}[s%2], fmt.Sprintf("series%d", s))
		os.MkdirAll(d, 0o755)
		for k := range 5 + s%3 {
			// Names and Instance Numbers in one order, positions in another.
			z := float64((k*3)%(5+s%3)) * 2.5
			var series []string
			if s == 5 { // series 7 its odd slices, series 4 the others
				series = []string{"1.2.826.0.5." + fmt.Sprint(k%2), fmt.Sprint(4 + 3*(k%2))}
			}
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("IM%02d", k)), seriesSlice(t, k+s, z, series...), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An export's index at its root and notes beside a series' slices are
	// no images: skipped, as a folder skips them.
	dicomdir := seriesSlice(t, 0, 0)
	if err := os.WriteFile(filepath.Join(dir, "DICOMDIR"), dicomdir[:bytes.Index(dicomdir, []byte{0xE0, 0x7F, 0x10, 0x00})], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "series0", "notes.txt"), []byte("acquired 2026"), 0o644); err != nil {
		t.Fatal(err)
	}
	const py = "/usr/bin/python3"
	served := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL, pydicom").Run() == nil
	for _, c := range []struct{ model, frame string }{
		{"../../testdata/models/cnn.onnx", "middle"},
		{"../../testdata/models/cnn.onnx", "max"},
		{"../../testdata/exports/clip3d_train.onnx", ""},
	} {
		out := filepath.Join(t.TempDir(), "m.onnx")
		args := []string{"train", "--model", c.model, "--data", "folder:" + dir, "--series", "--test-data", "none",
			"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet", "--out", out}
		if c.frame != "" {
			args = append(args, "--frame", c.frame)
		}
		if _, e, code := run(t, args...); code != 0 {
			t.Fatalf("train %s --series: exit %d: %s", c.model, code, e)
		}
		if got := metadata(t, out)["dpfinetune.series"]; got != "true" {
			t.Errorf("%s: recorded series %q", c.model, got)
		}
		o, e, code := run(t, "predict", "--model", out, "--images", dir, "--json")
		var preds struct{ Predictions []imagePrediction }
		if code != 0 || json.Unmarshal([]byte(o), &preds) != nil || len(preds.Predictions) != 7 || filepath.Base(preds.Predictions[0].File) != "series0" ||
			filepath.Base(preds.Predictions[5].File) != "series5#4" || filepath.Base(preds.Predictions[6].File) != "series5#7" {
			t.Fatalf("predict %s: exit %d: %s%s; want a row a series, series5's two named by number", c.model, code, o, e)
		}
		if o, e, code := run(t, "eval", "--model", out, "--data", "folder:"+dir+":train", "--json"); code != 0 || !strings.Contains(o, `"examples": 7`) {
			t.Errorf("eval %s (series recorded): exit %d: %s%s", c.model, code, o, e)
		}
		if served {
			servedLikePredict(t, py, out, filepath.Join(t.TempDir(), "served"), []string{dir}, 1e-5)
		}
		if _, e, code := run(t, "predict", "--model", out, "--images", dir, "--group-by", "study"); code != exitUsage || !strings.Contains(e, "each example is a series' directory") {
			t.Errorf("predict --group-by study of series: exit %d: %s", code, e)
		}
	}
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir, "--series", "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--out", filepath.Join(t.TempDir(), "x.onnx")); code == 0 || !strings.Contains(e, "no slice chosen") || !strings.Contains(e, "--frame") {
		t.Errorf("train --series without --frame: exit %d: %s", code, e)
	}
}

// predictTop2 is predict's JSON of model's two most probable classes for
// the images under dir, with args (a reading choice that may differ from
// the recorded one).
func predictTop2(t *testing.T, model, dir string, args ...string) string {
	t.Helper()
	o, e, code := run(t, append([]string{"predict", "--model", model, "--images", dir, "--top", "2", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("predict %v: exit %d: %s", args, code, e)
	}
	return o
}
