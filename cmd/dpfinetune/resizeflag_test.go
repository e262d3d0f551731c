package main

import (
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// photoFolder writes a folder dataset of two classes of RGB images of
// varied sizes and aspect ratios, all larger than the fixture CNN's 28×28
// input, with a pattern that aliases when shrunk without a filter.
func photoFolder(t *testing.T) string {
	t.Helper()
	return photoFolderOf(t, [][2]int{{40, 60}, {70, 50}, {33, 90}, {64, 64}})
}

// photoFolderOf is photoFolder with photos of the given sizes (height,
// width) in each class.
func photoFolderOf(t *testing.T, sizes [][2]int) string {
	t.Helper()
	dir := t.TempDir()
	for c, class := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(dir, class), 0o755)
		for k, s := range sizes {
			img := image.NewRGBA(image.Rect(0, 0, s[1], s[0]))
			for y := range s[0] {
				for x := range s[1] {
					v := uint8(((x+y+c)%2)*200 + (x*7+y*3)%50)
					img.Set(x, y, color.RGBA{v, uint8(255 - int(v)), uint8(x * 4), 255})
				}
			}
			f, err := os.Create(filepath.Join(dir, class, fmt.Sprintf("%d.png", k)))
			if err != nil {
				t.Fatal(err)
			}
			if err := png.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	return dir
}

// TestResizeFlag: train records --resize in the model, eval takes it
// from there (the same figures as with the flag given, others with a
// different one), and a bad value or a crop smaller than the input is a
// usage error naming the flag.
func TestResizeFlag(t *testing.T) {
	folder := "folder:" + photoFolder(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "crop.onnx")
	args := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", folder, "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--seed", "3", "--quiet", "--resize", "crop", "--out", out}
	if _, e, code := run(t, args...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	if got := metadata(t, out)["dpfinetune.resize"]; got != "crop" {
		t.Errorf("recorded resize %q, want crop", got)
	}
	eval := func(extra ...string) evalResult {
		t.Helper()
		o, e, code := run(t, append([]string{"eval", "--model", out, "--data", folder + ":split=train", "--json"}, extra...)...)
		if code != 0 {
			t.Fatalf("eval %v: exit %d: %s", extra, code, e)
		}
		var r evalResult
		if err := json.Unmarshal([]byte(o), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	recorded, crop, stretch := eval(), eval("--resize", "crop"), eval("--resize", "stretch")
	if recorded.Loss != crop.Loss || recorded.Samples != 8 {
		t.Errorf("eval with the recorded resize: loss %v over %d samples, with --resize crop %v", recorded.Loss, recorded.Samples, crop.Loss)
	}
	if stretch.Loss == crop.Loss {
		t.Errorf("eval with --resize stretch: loss %v, the same as crop's: the flag is not applied", stretch.Loss)
	}
	for _, c := range []struct {
		resize, want string
	}{
		{"fit", "want stretch, crop or crop=S"},
		{"crop=0", "crop=S"},
		{"crop=20", "fewer than the 28×28 input's"},
	} {
		bad := append(append([]string(nil), args[:len(args)-4]...), "--resize", c.resize, "--out", filepath.Join(dir, "bad.onnx"))
		if _, e, code := run(t, bad...); code != 2 || !strings.Contains(e, "--resize") || !strings.Contains(e, c.want) {
			t.Errorf("--resize %s: exit %d, stderr %q; want exit 2 naming --resize and %q", c.resize, code, e, c.want)
		}
	}
}

// TestHoldoutTrain: a folder without a test split trained with
// :holdout=F tests on the held-out images, named in the header, and trains
// on the rest — the examples the accountant counts — and without it says
// how to hold some out.
func TestHoldoutTrain(t *testing.T) {
	folder := photoFolder(t) // two classes of four
	dir := t.TempDir()
	rep := filepath.Join(dir, "run.json")
	out, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+folder+":holdout=0.25",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--seed", "3", "--out", filepath.Join(dir, "m.onnx"), "--report", rep)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	if !strings.Contains(out, "holdout=0.25 (2 examples, evaluated after every epoch)") {
		t.Errorf("the header does not name the test split:\n%s", out)
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var r runReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Settings.Examples != 6 || !strings.Contains(r.Settings.TestData, "holdout=0.25") || !strings.Contains(r.Settings.TestData, "split=test") {
		t.Errorf("trained on %d examples, tested on %q; want 6, the held-out split", r.Settings.Examples, r.Settings.TestData)
	}
	if len(r.Epochs) != 1 || r.Epochs[0].Test == nil || r.Epochs[0].Test.Samples != 2 {
		t.Errorf("epochs %+v: want a test of the 2 held-out images", r.Epochs)
	}
	out, e, code = run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+folder,
		"--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--seed", "3", "--out", filepath.Join(dir, "n.onnx"))
	if code != 0 || !strings.Contains(out+e, "add :holdout=0.1 to --data") {
		t.Errorf("train without a test split: exit %d, want the holdout hint in: %s", code, e)
	}
}

// TestAugmentResizedCrop: --augment rrc,flip trains on random resized
// crops of the whole photos (kept whole as they load, their shorter side
// the centre crop's), with augmentation multiplicity too, records the
// augmentation, and evaluates as before (the resize and centre crop); a
// crop with rrc, and rrc of arrays fed as they are, are usage errors.
func TestAugmentResizedCrop(t *testing.T) {
	folder := "folder:" + photoFolder(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "rrc.onnx")
	o, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", folder, "--test-data", folder+":split=train",
		"--epsilon", "8", "--epochs", "2", "--batch-size", "4", "--seed", "3", "--resize", "crop", "--augment", "rrc=0.3,flip", "--augment-multiplicity", "2", "--out", out)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	if !strings.Contains(o, "2 augmented views of each sample (rrc=0.3,flip)") {
		t.Errorf("the log does not name the augmentation:\n%s", o)
	}
	// The training photos are kept whole (the box is drawn from all of
	// each), their shorter side the centre crop's, 32 for 28.
	v, err := openView(folder, []int64{1, 28, 28}, "", "rrc=0.3,flip", "crop", dicomRead{})
	if err != nil {
		t.Fatal(err)
	}
	if fit := v.(*data.View).Source().Fitted(); !fit.Whole || !strings.Contains(fit.String(), "whole at 32") {
		t.Errorf("the training photos are fitted as %s, want whole at 32", fit)
	}
	if got := metadata(t, out)["dpfinetune.resize"]; got != "crop" {
		t.Errorf("recorded resize %q, want crop", got)
	}
	if _, e, code := run(t, "eval", "--model", out, "--data", folder+":split=train"); code != 0 {
		t.Errorf("eval: exit %d: %s", code, e)
	}
	tensors := filepath.Join(dir, "x.npz")
	if err := npy.WriteNPZ(tensors, map[string]*npy.Array{"x": npy.NewFloat32(make([]float32, 4*28*28), 4, 1, 28, 28), "y": {DType: npy.Int64, Shape: []int{4}, I64: []int64{0, 1, 0, 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ data, augment, want string }{
		{folder, "rrc,crop=4", "give one"},
		{"npy:" + tensors, "rrc", "augments images"},
	} {
		if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", c.data, "--epsilon", "8", "--augment", c.augment, "--out", filepath.Join(dir, "bad.onnx")); code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("--augment %s on %s: exit %d: %s", c.augment, c.data, code, e)
		}
	}
}

// TestPixelsOnDiskTrain: with the training images' pixels on disk
// (DPFINETUNE_PIXELS=disk; by default where the fitted images would take
// more than half the memory), train says so and trains the same model,
// bit for bit, as with them in memory.
func TestPixelsOnDiskTrain(t *testing.T) {
	folder := "folder:" + photoFolder(t)
	dir := t.TempDir()
	train := func(mode, out string) string {
		t.Helper()
		t.Setenv("DPFINETUNE_PIXELS", mode)
		t.Setenv("DPFINETUNE_PIXEL_DIR", dir)
		o, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", folder, "--test-data", "none",
			"--epsilon", "8", "--epochs", "2", "--batch-size", "4", "--seed", "3", "--resize", "crop", "--augment", "rrc,flip", "--out", out)
		if code != 0 {
			t.Fatalf("train with the pixels in %s: exit %d: %s", mode, code, e)
		}
		return o
	}
	mem, disk := filepath.Join(dir, "mem.onnx"), filepath.Join(dir, "disk.onnx")
	if o := train("memory", mem); strings.Contains(o, "pixels:") {
		t.Errorf("pixels in memory, and the log says otherwise:\n%s", o)
	}
	if o := train("disk", disk); !strings.Contains(o, "pixels:    on disk:") || !strings.Contains(o, "mapped from a file in "+dir) {
		t.Errorf("the log does not say the pixels are on disk:\n%s", o)
	}
	a, err := os.ReadFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("the model trained with the pixels on disk differs from the one trained with them in memory")
	}
	// Kept (DPFINETUNE_PIXEL_CACHE): the first run keeps them, the
	// second maps them from its file; the same model both times.
	cache := t.TempDir()
	t.Setenv("DPFINETUNE_PIXEL_CACHE", cache)
	for i, want := range []string{"for later runs of these files", "as an earlier run kept them (none decoded"} {
		out := filepath.Join(dir, fmt.Sprintf("kept%d.onnx", i))
		if o := train("", out); !strings.Contains(o, "pixels:    kept: ") || !strings.Contains(o, cache) || !strings.Contains(o, want) {
			t.Errorf("run %d: the log does not say the pixels are kept in %s (%q):\n%s", i, cache, want, o)
		}
		if c, err := os.ReadFile(out); err != nil || string(c) != string(a) {
			t.Errorf("run %d with kept pixels: another model (%v)", i, err)
		}
	}
}
