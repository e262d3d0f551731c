package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
)

// TestTrainClassWeights: --class-weight reaches the run. A non-private run
// whose every weight but class 3's is 0 learns class 3 alone (eval
// predicts it for nearly every test image); a private run with weights by
// class name records them divided by the largest in its log, report and
// model, and a resume with other weights is refused; weights from the
// data's own counts, lists of the wrong length, unknown classes, negative
// or all-zero weights, multi-label data and input-canary audits are
// refused (a gradient-canary audit runs).
func TestTrainClassWeights(t *testing.T) {
	dir := t.TempDir()
	only3 := filepath.Join(dir, "only3.onnx")
	base := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--quiet"}
	if _, e, code := run(t, append(base, "--data", fmnist+":limit=1000", "--non-private", "--epochs", "1", "--batch-size", "50", "--lr", "0.01",
		"--class-weight", "0,0,0,1,0,0,0,0,0,0", "--seed", "1", "--out", only3)...); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	o, e, code := run(t, "eval", "--model", only3, "--data", fmnist+":test:limit=200", "--json")
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, e)
	}
	var r evalResult
	if err := json.Unmarshal([]byte(o), &r); err != nil {
		t.Fatal(err)
	}
	var as3, all int64
	for _, row := range r.Confusion {
		for p, c := range row {
			all += c
			if p == 3 {
				as3 += c
			}
		}
	}
	if all != 200 || float64(as3) < 0.95*float64(all) {
		t.Errorf("a model trained on class 3's weight alone predicts class 3 for %d of %d test images", as3, all)
	}

	// Named classes: a single-label listing of garments.
	listing := multiLabelListing(t, dir, data.Train, 300)
	b, err := os.ReadFile(listing)
	if err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(dir, "single.csv")
	os.WriteFile(single, regexp.MustCompile(`\|[a-z]+\n`).ReplaceAll(b, []byte("\n")), 0o644)
	out, rep, ckpt := filepath.Join(dir, "cw.onnx"), filepath.Join(dir, "cw.json"), filepath.Join(dir, "cw.ckpt")
	named := append(base, "--data", "csv:"+single, "--test-data", "none", "--resize", "stretch", "--norm", "fmnist", "--epsilon", "3", "--epochs", "1",
		"--batch-size", "60", "--seed", "2", "--report", rep, "--checkpoint", ckpt, "--out", out)
	o, e, code = run(t, append(named[:len(named):len(named)], "--class-weight", "Bag=4, Boot=2,Shirt=0")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	// The classes in label order: Bag, Boot, Coat, Dress, Pullover, Sandal,
	// Shirt, Sneaker, Trouser, Tshirt.
	want := []float64{1, 0.5, 0.25, 0.25, 0.25, 0.25, 0, 0.25, 0.25, 0.25}
	md := metadata(t, out)
	var got []float64
	if err := json.Unmarshal([]byte(md["dpfinetune.class_weights"]), &got); err != nil || !slices.Equal(got, want) {
		t.Errorf("the model's class_weights %q (%v), want %v", md["dpfinetune.class_weights"], err, want)
	}
	if !strings.Contains(md["dpfinetune.classes"], `"Bag","Boot"`) {
		t.Errorf("the model's classes %q are not in the order the weights assume", md["dpfinetune.classes"])
	}
	var rp struct {
		Settings struct {
			ClassWeights []float64 `json:"class_weights"`
		} `json:"settings"`
	}
	if b, err := os.ReadFile(rep); err != nil || json.Unmarshal(b, &rp) != nil || !slices.Equal(rp.Settings.ClassWeights, want) {
		t.Errorf("the report's class weights %v (%v), want %v", rp.Settings.ClassWeights, err, want)
	}
	o, e, code = run(t, append(named[:len(named):len(named)], "--epochs", "2", "--resume", "--class-weight", "Bag=1")...)
	if code != 1 || !strings.Contains(e, "--class-weight was [1 0.5") {
		t.Errorf("a resume with other weights: exit %d: %s\n%s", code, e, o)
	}

	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"balanced", []string{"--data", fmnist, "--class-weight", "balanced"}, 2, "would publish those counts"},
		{"too few", []string{"--data", fmnist, "--class-weight", "1,2"}, 2, "2 values for data of 10 classes"},
		{"unknown class", []string{"--data", "csv:" + single, "--resize", "stretch", "--class-weight", "Hat=2"}, 2, `no class "Hat" (its classes Bag, Boot`},
		{"label out of range", []string{"--data", fmnist, "--class-weight", "10=2"}, 2, `no class "10" (its classes 0, 1, 2`},
		{"twice", []string{"--data", fmnist, "--class-weight", "1=2,1=3"}, 2, `class "1" weighed twice`},
		{"negative", []string{"--data", fmnist, "--class-weight", "3=-1"}, 2, "must be finite and non-negative"},
		{"not a number", []string{"--data", fmnist, "--class-weight", "3=heavy"}, 2, `"heavy" is not a number`},
		{"all zero", []string{"--data", fmnist, "--class-weight", "0,0,0,0,0,0,0,0,0,0"}, 2, "every weight is 0"},
		{"power without weights", []string{"--data", fmnist, "--class-weight-power", "0.5"}, 2, "raises --class-weight's weights: give them"},
		{"power 7", []string{"--data", fmnist, "--class-weight", "3=0.5", "--class-weight-power", "7"}, 2, "must be in [0, 4]"},
		{"multi-label", []string{"--data", "csv:" + listing + ":multilabel", "--resize", "stretch", "--num-classes", "13", "--class-weight", "upper=0.5"}, 1, "use --pos-weight"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{}, base...), "--epsilon", "3", "--out", filepath.Join(dir, "x.onnx"))
			_, e, code := run(t, append(args, c.args...)...)
			if code != c.code || !strings.Contains(e, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, e, c.code, c.want)
			}
		})
	}
	// Audited with gradient canaries (no class: weight 1), not input ones.
	audit := []string{"audit", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=64", "--epsilon", "2", "--quiet", "--class-weight", "3=0.5",
		"--canaries", "10", "--k-plus", "2", "--k-minus", "2"}
	if _, e, code := run(t, audit...); code != 0 {
		t.Errorf("a gradient-canary audit with class weights: exit %d: %s", code, e)
	}
	_, e, code = run(t, append(audit, "--canary-kind", "input")...)
	if code == 0 || !strings.Contains(e, "audit it with gradient canaries") {
		t.Errorf("an input-canary audit with class weights: exit %d: %s", code, e)
	}
}
