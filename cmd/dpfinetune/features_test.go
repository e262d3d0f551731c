package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainFeatureCache: train of a ViT's head caches the output of its
// frozen encoder (the class token after the last LayerNorm) and says so in
// its log and report; the model it writes is the whole model, its frozen
// weights the input's byte for byte and its head trained, and it runs in
// onnxruntime as in our runtime. --cache-features off trains the same
// head on the whole model at every step; on with augmentation, or an
// unknown value, is refused; plan says what train would cache (CrossViT's
// heads: two tensors). --keep-features keeps the rows for a later run,
// which reads them and writes the same model.
func TestTrainFeatureCache(t *testing.T) {
	dir := t.TempDir()
	model := "../../testdata/models/vit.onnx"
	args := func(out string, extra ...string) []string {
		a := []string{"train", "--model", model, "--data", fmnist + ":limit=128", "--test-data", fmnist + ":test:limit=64",
			"--train", `^heads\.`, "--epsilon", "4", "--epochs", "2", "--batch-size", "32", "--lr", "0.01", "--seed", "9", "--quiet",
			"--out", out, "--report", out + ".json"}
		return append(a, extra...)
	}
	report := func(path string) runReport {
		var r runReport
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	on, off := filepath.Join(dir, "on.onnx"), filepath.Join(dir, "off.onnx")
	stdout, e, code := run(t, args(on)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	if !strings.Contains(stdout, `features:  the trained part reads the frozen part through "/Gather_4_output_0" [32] a sample`) ||
		!strings.Contains(stdout, "features:  cached in") {
		t.Errorf("the log does not say what it cached:\n%s", stdout)
	}
	r := report(on + ".json")
	if fc := r.FeatureCache; fc == nil || !fc.Cached || len(fc.Tensors) != 1 || fc.Tensors[0] != "/Gather_4_output_0" || fc.Examples != 192 || fc.Bytes != 192*32*4 || r.Settings.FeatureCache != "auto" {
		t.Errorf("report: %+v, settings %q", r.FeatureCache, r.Settings.FeatureCache)
	}
	before, after := readInits(t, model), readInits(t, on)
	for name, b := range before {
		same := bytes.Equal(b, after[name])
		if head := strings.HasPrefix(name, "heads."); head == same {
			t.Errorf("%s: unchanged %v in the export", name, same)
		}
	}
	exportMatchesORT(t, on, []int64{3, 32, 32})

	if _, e, code := run(t, args(off, "--cache-features", "off")...); code != 0 {
		t.Fatalf("--cache-features off: exit %d: %s", code, e)
	}
	ro := report(off + ".json")
	if ro.FeatureCache == nil || ro.FeatureCache.Cached || ro.Privacy == nil || r.Privacy == nil || ro.Privacy.Epsilon != r.Privacy.Epsilon ||
		ro.Epochs[1].Test.Accuracy != r.Epochs[1].Test.Accuracy {
		t.Errorf("--cache-features off: %+v, ε %+v and %+v, accuracy %v and %v", ro.FeatureCache, ro.Privacy, r.Privacy, ro.Epochs[1].Test.Accuracy, r.Epochs[1].Test.Accuracy)
	}

	// --keep-features: the first run keeps the rows, the second reads
	// them and writes the first's model byte for byte.
	keep := filepath.Join(dir, "kept")
	k1, k2 := filepath.Join(dir, "k1.onnx"), filepath.Join(dir, "k2.onnx")
	if o, e, code := run(t, append(args(k1, "--keep-features", keep), "--quiet=false")...); code != 0 || !strings.Contains(o, "the training data's kept in "+keep) {
		t.Fatalf("--keep-features: exit %d: %s\n%s", code, e, o)
	}
	if o, e, code := run(t, append(args(k2, "--keep-features", keep), "--quiet=false")...); code != 0 || !strings.Contains(o, "the training data's read from "+keep) ||
		!report(k2+".json").FeatureCache.FromKept {
		t.Fatalf("--keep-features again: exit %d: %s\n%s", code, e, o)
	}
	if a, b := readInits(t, k1), readInits(t, k2); len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the run on kept features wrote another model")
	}

	for _, c := range []struct {
		extra []string
		code  int
		want  string
	}{
		{[]string{"--cache-features", "on", "--augment", "flip"}, 1, "the training data is augmented (flip)"},
		{[]string{"--cache-features", "yes"}, 2, "--cache-features must be auto, on or off"},
	} {
		if _, e, code := run(t, args(filepath.Join(dir, "bad.onnx"), c.extra...)...); code != c.code || !strings.Contains(e, c.want) {
			t.Errorf("%q: exit %d, %s; want %d saying %q", c.extra, code, e, c.code, c.want)
		}
	}

	stdout, e, code = run(t, "plan", "--model", model, "--input-shape", "3,32,32", "--train", `^heads\.`)
	if code != 0 || !strings.Contains(stdout, `features:    train caches "/Gather_4_output_0" [32] (128 B an example)`) {
		t.Errorf("plan: exit %d: %s%s", code, stdout, e)
	}
	stdout, e, code = run(t, "plan", "--model", "../../testdata/models/crossvit.onnx", "--input-shape", "3,32,32", "--train", `^heads\.`)
	if code != 0 || !strings.Contains(stdout, `features:    train caches "/Gather_output_0" [32], "/Gather_1_output_0" [48] (320 B an example)`) {
		t.Errorf("plan of CrossViT's heads: exit %d: %s%s", code, stdout, e)
	}
	stdout, e, code = run(t, "plan", "--model", model, "--input-shape", "3,32,32", "--json")
	var p struct {
		FeatureCache *planFeatures `json:"feature_cache"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &p) != nil || p.FeatureCache == nil || p.FeatureCache.Cacheable ||
		!strings.Contains(p.FeatureCache.Reason, "reads the input itself") {
		t.Errorf("plan --json of the whole model: exit %d, %+v: %s", code, p.FeatureCache, e)
	}
}
