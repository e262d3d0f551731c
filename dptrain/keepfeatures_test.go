package dptrain_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// TestKeepFeatures: a run with Config.KeepFeatures leaves the frozen
// part's rows of its training and test data in the folder, readable by
// their owner alone; a later run over the same reads them and trains to
// the weights of the first, bit for bit; a kept file whose rows changed
// is said, computed afresh and written again; other frozen parameters
// make files of their own.
func TestKeepFeatures(t *testing.T) {
	sample := []int64{1, 28, 28}
	ds := dptrain.FMNISTSlice(t, sample)
	test := fmnistView(t, "idx:../testdata/fmnist-small:split=test:limit=60")
	dir := filepath.Join(t.TempDir(), "kept")
	run := func(change func(*graph.Graph)) (*dptrain.Report, *graph.Graph, string) {
		t.Helper()
		seed := uint64(5)
		g := fixtureGraph(t, "cnn")
		if change != nil {
			change(g)
		}
		var warn bytes.Buffer
		cfg := dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 2, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 0.5, ClipFn: "abadi",
				Optimizer: "adam", LR: 1e-2, InputShape: sample, Seed: &seed, FeatureCache: dptrain.FeatureCacheOn,
			},
			Graph: g, Train: ds, Test: test, EvalBatch: 40, KeepFeatures: dir, Warn: &warn,
			Rewrite: rewrite.Options{PlanOptions: rewrite.PlanOptions{Train: regexp.MustCompile(`^classifier\.`)}},
		}
		rep, err := dptrain.Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rep, g, warn.String()
	}
	files := func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(dir, "*.features"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v (%v), want 0600", f, st.Mode(), err)
			}
		}
		return m
	}

	first, gFirst, _ := run(nil)
	kept := files()
	if first.FeatureCache.FromKept || len(kept) != 2 {
		t.Fatalf("the first run: from kept %v, %d files kept (want the training and test data's)", first.FeatureCache.FromKept, len(kept))
	}
	second, gSecond, _ := run(nil)
	if !second.FeatureCache.FromKept || len(files()) != 2 {
		t.Fatalf("the second run did not read the kept rows (%d files)", len(files()))
	}
	sameWeights(t, gFirst, gSecond)
	if second.Epochs[1].Test.Accuracy != first.Epochs[1].Test.Accuracy {
		t.Errorf("test accuracy %v on the kept test rows, %v on computed ones", second.Epochs[1].Test.Accuracy, first.Epochs[1].Test.Accuracy)
	}

	// A changed row: said, computed afresh, kept again.
	var trainFile string
	for _, f := range kept {
		if st, _ := os.Stat(f); st.Size() > 4096+4*60*512 { // the 60 test rows are the smaller file
			trainFile = f
		}
	}
	b, err := os.ReadFile(trainFile)
	if err != nil {
		t.Fatal(err)
	}
	b[4096+1000] ^= 0x40
	if err := os.WriteFile(trainFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	third, gThird, warn := run(nil)
	if third.FeatureCache.FromKept || !strings.Contains(warn, "the file changed since it was written; computing them afresh") {
		t.Errorf("a changed kept file: from kept %v, warnings %q", third.FeatureCache.FromKept, warn)
	}
	sameWeights(t, gFirst, gThird)
	if fourth, _, _ := run(nil); !fourth.FeatureCache.FromKept {
		t.Error("the rows computed afresh were not kept again")
	}

	// Other frozen parameters: files of their own.
	changeFrozen := func(g *graph.Graph) {
		for _, v := range g.Initializers {
			if v.Const != nil && len(v.Const.F32) > 0 && !strings.HasPrefix(v.Name, "classifier.") {
				v.Const.F32[0] += 0.5
				return
			}
		}
	}
	if r, _, _ := run(changeFrozen); r.FeatureCache.FromKept || len(files()) != 4 {
		t.Errorf("other frozen parameters: from kept %v, %d files", r.FeatureCache.FromKept, len(files()))
	}
}
