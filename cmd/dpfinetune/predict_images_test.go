package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	onnxpb "github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestPredictImages: train records the class names beside --norm and
// --resize; predict --images reads a directory in lexical order with that
// preprocessing (its logits are predict --input's on the batch the data
// package fills so, and differ under another resize), names each image's
// most probable classes by the recorded names (labels past them by
// number), with softmax probabilities in descending order, as text or
// JSON.
func TestPredictImages(t *testing.T) {
	folder := photoFolder(t) // classes a and b, four PNGs each
	dir := t.TempDir()
	model := filepath.Join(dir, "tuned.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+folder, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--seed", "3", "--quiet", "--resize", "crop", "--norm", "half", "--out", model); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	if got := metadata(t, model)["dpfinetune.classes"]; got != `["a","b"]` {
		t.Fatalf("recorded classes %q", got)
	}

	// The batch predict --images should run: the folder's files, in
	// lexical order, preprocessed as train recorded.
	imgs, files, err := data.LoadFiles([]string{folder}, data.Fit{Height: 28, Width: 28, Resize: data.Resize{Crop: true}, Gray: true})
	if err != nil {
		t.Fatal(err)
	}
	if !sort.StringsAreSorted(files) || len(files) != 8 {
		t.Fatalf("files %v", files)
	}
	norm, _ := data.ParseNorm("half", data.Norm{})
	v, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: norm, Resize: data.Resize{Crop: true}})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 8*28*28)
	if err := v.Fill(x, nil, []int{0, 1, 2, 3, 4, 5, 6, 7}, nil); err != nil {
		t.Fatal(err)
	}
	xPath, wantPath := filepath.Join(dir, "x.npy"), filepath.Join(dir, "want.npy")
	if err := npy.WriteFile(xPath, npy.NewFloat32(x, 8, 1, 28, 28)); err != nil {
		t.Fatal(err)
	}
	if _, e, code := run(t, "predict", "--model", model, "--input", xPath, "--out", wantPath, "--batch", "3"); code != 0 {
		t.Fatalf("predict --input: exit %d: %s", code, e)
	}
	want, err := npy.ReadFile(wantPath)
	if err != nil {
		t.Fatal(err)
	}

	gotPath := filepath.Join(dir, "got.npy")
	stdout, e, code := run(t, "predict", "--model", model, "--images", folder, "--top", "12", "--json", "--out", gotPath, "--batch", "3")
	if code != 0 {
		t.Fatalf("predict --images: exit %d: %s", code, e)
	}
	got, err := npy.ReadFile(gotPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.F32) != len(want.F32) {
		t.Fatalf("logits of shape %v, want %v", got.Shape, want.Shape)
	}
	for i := range want.F32 {
		if got.F32[i] != want.F32[i] {
			t.Fatalf("logit %d: %v, predict --input's %v", i, got.F32[i], want.F32[i])
		}
	}
	var res struct {
		Predictions []imagePrediction
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(res.Predictions) != 8 {
		t.Fatalf("%d predictions", len(res.Predictions))
	}
	// As a CSV file: the same files and most probable classes, every
	// class's probability.
	table := filepath.Join(dir, "preds.csv")
	if _, e, code := run(t, "predict", "--model", model, "--images", folder, "--csv", table, "--batch", "3"); code != 0 {
		t.Fatalf("predict --csv: exit %d: %s", code, e)
	}
	tf, err := os.Open(table)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(tf).ReadAll()
	tf.Close()
	if err != nil || len(rows) != 9 || len(rows[0]) != 12 || rows[0][0] != "file" {
		t.Fatalf("predict --csv: %d rows (%v), header %q", len(rows), err, rows[0])
	}
	for i, p := range res.Predictions {
		if r := rows[i+1]; r[0] != p.File || r[1] != p.Top[0].Class {
			t.Errorf("row %d: %q, %q; JSON %s, %s", i, r[0], r[1], p.File, p.Top[0].Class)
		} else if q, err := strconv.ParseFloat(r[2+p.Top[0].Label], 64); err != nil || math.Abs(q-p.Top[0].Probability) > 1e-6 {
			t.Errorf("row %d: probability %s, JSON %v", i, r[2+p.Top[0].Label], p.Top[0].Probability)
		}
	}
	named := 0
	for i, p := range res.Predictions {
		if p.File != files[i] {
			t.Errorf("prediction %d is of %s, want %s", i, p.File, files[i])
		}
		l := want.F32[i*10 : (i+1)*10]
		var total float64
		for _, s := range l {
			total += math.Exp(float64(s))
		}
		if len(p.Top) != 10 { // --top 12 of 10 classes: all
			t.Fatalf("%s: top %v", p.File, p.Top)
		}
		for k, c := range p.Top {
			name := map[int]string{0: "a", 1: "b"}[c.Label]
			if name == "" {
				name = string(rune('0' + c.Label))
			}
			prob := math.Exp(float64(l[c.Label])) / total
			if c.Class == "a" || c.Class == "b" {
				named++
			}
			if c.Class != name || math.Abs(c.Probability-prob) > 1e-6 {
				t.Errorf("%s: top %d is %+v, want class %q probability %.6f", p.File, k, c, name, prob)
			}
			if k > 0 && c.Probability > p.Top[k-1].Probability {
				t.Errorf("%s: top not in descending order: %+v", p.File, p.Top)
			}
		}
		for j, s := range l {
			if math.Exp(float64(s))/total > p.Top[0].Probability+1e-9 {
				t.Errorf("%s: label %d is more probable than the top %+v", p.File, j, p.Top[0])
			}
		}
	}

	if named != 16 {
		t.Errorf("%d of the 16 scores of labels 0 and 1 are named a and b", named)
	}

	// Loaded a part at a time (3 files, batches of 2): the same.
	defer func(n int) { predictPart = n }(predictPart)
	predictPart = 3
	parts := filepath.Join(dir, "parts.npy")
	stdout2, e, code := run(t, "predict", "--model", model, "--images", folder, "--top", "12", "--json", "--out", parts, "--batch", "2")
	if code != 0 {
		t.Fatalf("predict --images in parts: exit %d: %s", code, e)
	}
	if p, err := npy.ReadFile(parts); err != nil || len(p.F32) != len(got.F32) || p.Shape[0] != 8 {
		t.Fatalf("in parts: %v, %v", p, err)
	} else {
		for i := range p.F32 {
			if !(math.Abs(float64(p.F32[i]-got.F32[i])) <= 1e-6) { // NaN fails too
				t.Fatalf("in parts: logit %d = %v, at once %v", i, p.F32[i], got.F32[i])
			}
		}
	}
	var res2 struct{ Predictions []imagePrediction }
	if err := json.Unmarshal([]byte(stdout2), &res2); err != nil || len(res2.Predictions) != 8 || res2.Predictions[7].File != files[7] {
		t.Errorf("in parts: %d predictions (%v)", len(res2.Predictions), err)
	}

	// Text: a line per image, its file first; the resize train recorded
	// is used unless another is given.
	text, e, code := run(t, "predict", "--model", model, "--images", filepath.Join(folder, "b"), "--images", files[0])
	if code != 0 {
		t.Fatalf("predict --images, text: exit %d: %s", code, e)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], files[4]) || !strings.HasPrefix(lines[4], files[0]) || !strings.Contains(lines[0], "%") {
		t.Errorf("text output:\n%s", text)
	}
	stretched := filepath.Join(dir, "stretch.npy")
	if _, e, code := run(t, "predict", "--model", model, "--images", folder, "--resize", "stretch", "--out", stretched); code != 0 {
		t.Fatalf("predict --resize stretch: exit %d: %s", code, e)
	}
	if s, err := npy.ReadFile(stretched); err != nil || s.F32[0] == want.F32[0] {
		t.Errorf("--resize stretch gave the recorded crop's logits (%v)", err)
	}
}

func TestPredictImagesErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("x"), 0o644)
	bad := filepath.Join(dir, "bad.jpg")
	os.WriteFile(bad, []byte("not an image"), 0o644)
	model := "../../testdata/models/cnn.onnx"
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"neither", []string{"--model", model}, 2, "--input x.npy or --images PATH is required"},
		{"both", []string{"--model", model, "--images", dir, "--input", "x.npy", "--out", "y.npy"}, 2, "exclude each other"},
		{"top", []string{"--model", model, "--images", dir, "--top", "0"}, 2, "--top must be positive"},
		{"empty dir", []string{"--model", model, "--images", empty}, 1, "empty holds no images"},
		{"missing", []string{"--model", model, "--images", filepath.Join(dir, "none.png")}, 1, "none.png"},
		{"corrupt", []string{"--model", model, "--images", bad}, 1, "bad.jpg: corrupt or unsupported image"},
		{"resize", []string{"--model", model, "--images", bad, "--resize", "crop=10"}, 2, "--resize"},
		{"csv of an array", []string{"--model", model, "--input", "x.npy", "--out", "y.npy", "--csv", "p.csv"}, 2, "--csv writes the predictions of --images"},
		{"csv and json", []string{"--model", model, "--images", dir, "--csv", "p.csv", "--json"}, 2, "exclude each other"},
		{"csv, corrupt", []string{"--model", model, "--images", bad, "--csv", filepath.Join(dir, "p.csv")}, 1, "bad.jpg"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := run(t, append([]string{"predict"}, c.args...)...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d containing %q", code, stderr, c.code, c.want)
			}
		})
	}
}

// TestPredictFixedBatch: a model whose input fixes the batch at 4 runs 7
// samples as two batches of 4, the last padded with zeros whose outputs
// are dropped: the logits of the dynamic-batch model.
func TestPredictFixedBatch(t *testing.T) {
	m, err := onnx.Load("../../testdata/models/cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	d := m.Proto.GetGraph().GetInput()[0].GetType().GetTensorType().GetShape().GetDim()[0]
	d.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 4}
	dir := t.TempDir()
	fixed := filepath.Join(dir, "fixed.onnx")
	if err := m.Save(fixed, nil); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 7*28*28)
	for i := range x {
		x[i] = float32(i%97) / 50
	}
	in := filepath.Join(dir, "x.npy")
	if err := npy.WriteFile(in, npy.NewFloat32(x, 7, 1, 28, 28)); err != nil {
		t.Fatal(err)
	}
	var logits [2]*npy.Array
	for k, model := range []string{"../../testdata/models/cnn.onnx", fixed} {
		out := filepath.Join(dir, "y.npy")
		if _, e, code := run(t, "predict", "--model", model, "--input", in, "--out", out, "--batch", "4"); code != 0 {
			t.Fatalf("%s: exit %d: %s", model, code, e)
		}
		if logits[k], err = npy.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	if len(logits[1].F32) != 70 || logits[1].Shape[0] != 7 {
		t.Fatalf("fixed batch: shape %v", logits[1].Shape)
	}
	for i, w := range logits[0].F32 {
		if g := logits[1].F32[i]; math.Abs(float64(g-w)) > 1e-5*math.Max(1, math.Abs(float64(w))) {
			t.Fatalf("fixed batch: logit %d = %v, dynamic batch %v", i, g, w)
		}
	}
}

// servedLikePredict runs docs/serve_preprocess.py on files for model (its
// batch and logits written at prefix-*.npy) and holds the model's logits
// on its batch to predict --images' on the same files, within tol of the
// largest logit. It returns what the script printed (the class names).
func servedLikePredict(t *testing.T, py, model, prefix string, files []string, tol float64) string {
	t.Helper()
	x, want, got := prefix+"-x.npy", prefix+"-want.npy", prefix+"-got.npy"
	out, err := exec.Command(py, append([]string{"../../docs/serve_preprocess.py", model, x}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("serve_preprocess.py: %v: %s", err, out)
	}
	if _, e, code := run(t, "predict", "--model", model, "--input", x, "--out", want); code != 0 {
		t.Fatalf("predict --input: exit %d: %s", code, e)
	}
	pargs := []string{"predict", "--model", model, "--out", got}
	for _, f := range files {
		pargs = append(pargs, "--images", f)
	}
	if _, e, code := run(t, pargs...); code != 0 {
		t.Fatalf("predict --images: exit %d: %s", code, e)
	}
	a, err := npy.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := npy.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.F32) != len(b.F32) {
		t.Fatalf("%d logits from the served batch, %d from predict --images", len(a.F32), len(b.F32))
	}
	var worst, scale float64
	for i := range a.F32 {
		worst = math.Max(worst, math.Abs(float64(a.F32[i]-b.F32[i])))
		scale = math.Max(scale, math.Abs(float64(a.F32[i])))
	}
	t.Logf("logits within %.3g of predict --images' (largest %.3g)", worst, scale)
	if worst > tol*math.Max(1, scale) {
		t.Errorf("the served transform's logits differ from predict --images' by %.3g (largest logit %.3g)", worst, scale)
	}
	return string(out)
}

// TestServePreprocess: docs/serve_preprocess.py, the serving transform
// docs/SERVING.md gives (PIL and torchvision, from the metadata train
// recorded), prepares the inputs predict --images prepares: the model's
// logits on the two agree to float rounding, for a cropped gray model
// with an RGB normalisation and a stretched RGB one, and for photos
// smaller than the input (enlarged in floating point, not by PIL).
func TestServePreprocess(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with torch, torchvision, onnx and PIL")
	}
	folder := photoFolder(t)
	// Smaller than the models' 28×28 and 32×32 inputs, or smaller in
	// area and larger along one axis (an axis enlarged, one shrunk).
	small := photoFolderOf(t, [][2]int{{9, 12}, {20, 7}, {5, 90}, {16, 16}})
	dir := t.TempDir()
	for _, c := range []struct {
		name, model, folder string
		args                []string
		tol                 float64 // relative to the largest logit
	}{
		// The same 8-bit windows (PIL's gray conversion and resample); the
		// normalisation's float arithmetic alone differs.
		{"gray-crop", "../../testdata/models/cnn.onnx", folder, []string{"--resize", "crop", "--norm", "imagenet"}, 1e-5},
		{"rgb-stretch", "../../testdata/models/resnet_eval.onnx", folder, []string{"--norm", "cifar10", "--num-classes", "2"}, 1e-5},
		{"gray-crop-small", "../../testdata/models/cnn.onnx", small, []string{"--resize", "crop", "--norm", "imagenet"}, 1e-5},
		{"rgb-stretch-small", "../../testdata/models/resnet_eval.onnx", small, []string{"--norm", "cifar10", "--num-classes", "2"}, 1e-5},
	} {
		t.Run(c.name, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join(c.folder, "*", "*.png"))
			if err != nil || len(files) != 8 {
				t.Fatalf("photos %v, %v", files, err)
			}
			model := filepath.Join(dir, c.name+".onnx")
			args := append([]string{"train", "--model", c.model, "--data", "folder:" + c.folder, "--test-data", "none",
				"--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--seed", "3", "--quiet", "--out", model}, c.args...)
			if _, e, code := run(t, args...); code != 0 {
				t.Fatalf("train: exit %d: %s", code, e)
			}
			if out := servedLikePredict(t, py, model, filepath.Join(dir, c.name), files, c.tol); strings.TrimSpace(out) != `["a", "b"]` {
				t.Errorf("class names %q", out)
			}
		})
	}
}

// TestServePreprocess16: 16-bit grayscale PNGs of 12-bit values (as
// PadChest and BIMCV ship their radiographs) train a gray model read by
// their high bytes — train saying so — and through their own range
// (--window range, recorded); predict --images and
// docs/serve_preprocess.py read them alike (PIL alone would saturate
// them).
func TestServePreprocess16(t *testing.T) {
	const py = "/usr/bin/python3"
	served := exec.Command(py, "-c", "import torch, torchvision, onnx, PIL").Run() == nil
	dir := t.TempDir()
	var files []string
	for c, class := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(dir, class), 0o755)
		for k := range 3 {
			img := image.NewGray16(image.Rect(0, 0, 40+k, 36))
			for y := range 36 {
				for x := range 40 + k {
					img.SetGray16(x, y, color.Gray16{Y: uint16((x*97 + y*31 + c*500 + k*7) % 4000)})
				}
			}
			p := filepath.Join(dir, class, fmt.Sprintf("%d.png", k))
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := png.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
			files = append(files, p)
		}
	}
	for _, window := range []string{"", "range"} {
		out := filepath.Join(t.TempDir(), "m.onnx")
		args := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:" + dir, "--test-data", "none",
			"--epsilon", "8", "--epochs", "1", "--batch-size", "2", "--seed", "1", "--out", out}
		if window != "" {
			args = append(args, "--window", window)
		}
		o, e, code := run(t, args...)
		if code != 0 {
			t.Fatalf("train --window %q: exit %d: %s", window, code, e)
		}
		if noted := strings.Contains(o, "6 16-bit grayscale images hold values of 12 bits or fewer"); noted != (window == "") {
			t.Errorf("train --window %q: the narrow images noted %v; log:\n%s", window, noted, o)
		}
		if got := metadata(t, out)["dpfinetune.window"]; got != window {
			t.Errorf("recorded window %q, want %q", got, window)
		}
		if served {
			servedLikePredict(t, py, out, filepath.Join(t.TempDir(), "served"), files, 1e-5)
		}
	}
}
