package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// loraReport reads the parts of a run report TestTrainLoRA looks at.
type loraReport struct {
	Settings     dptrain.Settings `json:"settings"`
	FeatureCache struct {
		Cached bool `json:"cached"`
	} `json:"feature_cache"`
	Epochs []struct {
		Test struct {
			Accuracy float64 `json:"accuracy"`
		} `json:"test"`
	} `json:"epochs"`
}

func readLoRAReport(t *testing.T, path string) loraReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r loraReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// opTypes lists a model file's operators in order.
func opTypes(t *testing.T, path string) string {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, n := range m.Proto.GetGraph().GetNode() {
		ops = append(ops, n.GetOpType())
	}
	return strings.Join(ops, " ")
}

// TestTrainLoRA: train --lora trains low-rank adapters of the fixture
// CNN's three adapted layers and its classifier head, and writes the model
// with the layers and tensors it was exported with: the adapted weights
// and the head changed, every other parameter bit for bit the input's;
// eval of the written model gives the run's last test accuracy (the
// merged weights compute what was trained) and onnxruntime agrees with
// us on it; the log, report and metadata say what was adapted. An
// interrupted LoRA run resumes to the uninterrupted one's model bit for
// bit, a resume with another rank is refused, --lora-target picks layers
// (the frozen convolutions' features then computed once), --train adds
// parameters trained in full, and bad flags are refused.
func TestTrainLoRA(t *testing.T) {
	dir := t.TempDir()
	const model = "../../testdata/models/cnn.onnx"
	out, rep := filepath.Join(dir, "lora.onnx"), filepath.Join(dir, "lora.json")
	o, e, code := run(t, trainArgs(out, "--lora", "4", "--lora-alpha", "8", "--report", rep)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	if !strings.Contains(o, "lora:      3 adapters of rank 4 (scale 2)") {
		t.Errorf("log does not say what was adapted:\n%s", o)
	}
	if got, want := opTypes(t, out), opTypes(t, model); got != want {
		t.Errorf("written layers %s, want the model's %s", got, want)
	}
	in, got := readInits(t, model), readInits(t, out)
	if len(got) != len(in) {
		t.Errorf("written %d initializers, want the model's %d", len(got), len(in))
	}
	changed := map[string]bool{"features.0.weight": true, "features.3.weight": true, "classifier.1.weight": true, "classifier.3.weight": true, "classifier.3.bias": true}
	for name, w := range in {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s missing from the written model", name)
		case changed[name] && bytes.Equal(g, w):
			t.Errorf("%s unchanged by the run", name)
		case !changed[name] && !bytes.Equal(g, w):
			t.Errorf("%s changed, but LoRA freezes it", name)
		}
	}
	r := readLoRAReport(t, rep)
	if l := r.Settings.LoRA; l == nil || l.Rank != 4 || l.Alpha != 8 || l.Adapters != 3 || l.Scalars != 3648 {
		t.Errorf("report's lora %+v, want rank 4, alpha 8, 3 adapters of 3648 scalars", l)
	}
	if md := metadata(t, out); !strings.Contains(md["dpfinetune.lora"], "rank 4, alpha 8, 3 adapters merged") {
		t.Errorf("metadata lora %q", md["dpfinetune.lora"])
	}
	o, e, code = run(t, "eval", "--model", out, "--data", fmnist+":split=test", "--json")
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, e)
	}
	var ev struct {
		Accuracy float64 `json:"accuracy"`
	}
	if err := json.Unmarshal([]byte(o), &ev); err != nil {
		t.Fatalf("eval --json: %v: %s", err, o)
	}
	if last := r.Epochs[len(r.Epochs)-1].Test.Accuracy; ev.Accuracy != last || last == 0 {
		t.Errorf("eval of the written model: %.4f, the run's last test accuracy %.4f", ev.Accuracy, last)
	}
	exportMatchesORT(t, out, []int64{1, 28, 28})

	t.Run("resume", func(t *testing.T) {
		part := filepath.Join(dir, "part.onnx")
		afterStep = func(step int64) {
			if step == 11 {
				syscall.Kill(os.Getpid(), syscall.SIGINT)
				time.Sleep(time.Second)
			}
		}
		_, e, code := run(t, trainArgs(part, "--lora", "4", "--lora-alpha", "8")...)
		afterStep = nil
		if code != 1 || !strings.Contains(e, "interrupted; checkpoint saved") {
			t.Fatalf("interrupted run: exit %d: %s", code, e)
		}
		if _, e, code := run(t, trainArgs(part, "--lora", "2", "--resume")...); code == 0 || !strings.Contains(e, "--lora was rank 4, alpha 8") {
			t.Errorf("a resume with another rank: exit %d: %s", code, e)
		}
		if _, e, code := run(t, trainArgs(part, "--lora", "4", "--lora-alpha", "8", "--resume")...); code != 0 {
			t.Fatalf("resumed run: exit %d: %s", code, e)
		}
		a, b := readInits(t, out), readInits(t, part)
		for name, w := range a {
			if !bytes.Equal(w, b[name]) {
				t.Errorf("%s differs between the uninterrupted and the resumed run", name)
			}
		}
	})

	t.Run("target and train", func(t *testing.T) {
		tgt, rep := filepath.Join(dir, "target.onnx"), filepath.Join(dir, "target.json")
		o, e, code := run(t, trainArgs(tgt, "--lora", "2", "--lora-target", `^classifier\.1\.`, "--train", `features\.3\.bias`, "--report", rep)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		if !strings.Contains(o, "lora:      1 adapters of rank 2") {
			t.Errorf("log:\n%s", o)
		}
		r := readLoRAReport(t, rep)
		if !r.FeatureCache.Cached {
			t.Error("the frozen convolutions' features were not cached")
		}
		got := readInits(t, tgt)
		for name, w := range in {
			want := name == "classifier.1.weight" || name == "features.3.bias" || strings.HasPrefix(name, "classifier.3.")
			if bytes.Equal(got[name], w) == want {
				t.Errorf("%s: changed %v, want %v", name, !want, want)
			}
		}
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lora", "-1"}, "--lora must be a positive rank"},
		{[]string{"--lora-alpha", "8"}, "need --lora RANK"},
		{[]string{"--lora", "4", "--lora-alpha", "0"}, "--lora-alpha must be positive"},
		{[]string{"--lora", "4", "--lora-target", "("}, "--lora-target: bad regular expression"},
		{[]string{"--lora", "4", "--lora-target", "nothing-matches"}, "adapts no layer"},
	} {
		bad := filepath.Join(dir, "bad.onnx")
		if _, e, code := run(t, trainArgs(bad, tc.args...)...); code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, want an error saying %q: %s", tc.args, code, tc.want, e)
		}
		if _, err := os.Stat(bad); err == nil {
			t.Errorf("%v: a model was written", tc.args)
		}
	}
}
