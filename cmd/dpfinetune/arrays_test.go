package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// TestImageArrays: images saved as uint8 arrays (Keras's mnist.npz form:
// x_train (N, 28, 28), y_train uint8; class names as strings) are the
// images: eval gives the loss and confusion matrix of the same images
// read from IDX files, from an archive or a directory, with a channel axis
// or without, and names the classes; train takes them with their
// normalisation and class names recorded.
func TestImageArrays(t *testing.T) {
	model := "../../testdata/models/cnn.onnx"
	tmp := t.TempDir()
	split := func(s data.Split) (*npy.Array, *npy.Array) {
		im, err := data.Load(data.Spec{Scheme: data.SchemeIDX, Dir: "../../testdata/fmnist-small", Split: s, Limit: 40})
		if err != nil {
			t.Fatal(err)
		}
		var pix []uint8
		labels := make([]uint8, im.Len())
		for i := range im.Len() {
			pix = append(pix, im.Pixels(i)...)
			labels[i] = uint8(im.Label(i))
		}
		return &npy.Array{DType: npy.Uint8, Shape: []int{im.Len(), 28, 28}, U8: pix}, &npy.Array{DType: npy.Uint8, Shape: []int{im.Len()}, U8: labels}
	}
	x, y := split(data.Train)
	xt, yt := split(data.Test)
	names := &npy.Array{DType: npy.Unicode, Shape: []int{10}, Str: []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}}
	keras := filepath.Join(tmp, "mnist.npz")
	if err := npy.WriteNPZ(keras, map[string]*npy.Array{"x_train": x, "y_train": y, "x_test": xt, "y_test": yt, "classes": names}); err != nil {
		t.Fatal(err)
	}
	// The same test images as (N, 1, 28, 28) in a directory of .npy files.
	first := t.TempDir()
	xt4 := *xt
	xt4.Shape = []int{xt.Shape[0], 1, 28, 28}
	for name, a := range map[string]*npy.Array{"x_test": &xt4, "y_test": yt, "x": x, "y": y, "classes": names} {
		if err := npy.WriteFile(filepath.Join(first, name+".npy"), a); err != nil {
			t.Fatal(err)
		}
	}
	eval := func(spec string) map[string]any {
		t.Helper()
		stdout, e, code := run(t, "eval", "--model", model, "--data", spec, "--norm", "fmnist", "--json")
		if code != 0 {
			t.Fatalf("eval %s: exit %d: %s", spec, code, e)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	want := eval(fmnist + ":limit=40")
	for _, spec := range []string{"npy:" + keras, "npy:" + first + ":test"} {
		got := eval(spec)
		for _, k := range []string{"samples", "loss", "accuracy"} {
			if got[k] != want[k] {
				t.Errorf("%s: %s %v, from IDX %v", spec, k, got[k], want[k])
			}
		}
		if g, w := got["confusion"], want["confusion"]; !jsonEqual(g, w) {
			t.Errorf("%s: confusion %v, from IDX %v", spec, g, w)
		}
		if !jsonEqual(got["classes"], names.Str) {
			t.Errorf("%s: classes %v", spec, got["classes"])
		}
	}
	out := filepath.Join(tmp, "tuned.onnx")
	stdout, e, code := run(t, "train", "--model", model, "--data", "npy:"+keras, "--norm", "fmnist", "--augment", "crop=2",
		"--epsilon", "8", "--batch-size", "8", "--epochs", "1", "--seed", "1", "--quiet", "--out", out)
	if code != 0 || !strings.Contains(stdout, "(40 examples, 10 classes") || !strings.Contains(stdout, "split=test (40 examples") {
		t.Fatalf("train: exit %d: %s%s", code, stdout, e)
	}
	lm, err := loadGraph(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := recorded(lm.m, "norm", ""); n != "0.286/0.353" {
		t.Errorf("recorded norm %q", n)
	}
	if c := recorded(lm.m, "classes", ""); !strings.Contains(c, `"Ankle boot"`) {
		t.Errorf("recorded classes %s", c)
	}

	// Float samples are not resized: a shape the model does not take is
	// refused, naming both.
	bad := filepath.Join(tmp, "bad.npz")
	if err := npy.WriteNPZ(bad, map[string]*npy.Array{"x": npy.NewFloat32(make([]float32, 2*32*32), 2, 32, 32), "y": npy.NewInt64([]int64{0, 1}, 2)}); err != nil {
		t.Fatal(err)
	}
	_, e, code = run(t, "eval", "--model", model, "--data", "npy:"+bad+":train")
	if code != 1 || !strings.Contains(e, "samples of shape 32×32, the model takes 1×28×28") {
		t.Errorf("float samples of another size: exit %d: %s", code, e)
	}
}

// jsonEqual compares two decoded JSON values.
func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
