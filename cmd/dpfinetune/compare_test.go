package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareCLI: compare evaluates two models on the same data — a
// trained CNN against the untrained fixture, on Fashion-MNIST's test
// slice: each accuracy eval's, McNemar's counts their difference —; a
// model against itself differs nowhere (p = 1); a multi-label model's
// labels are compared by DeLong's paired test (here against its own
// temperature-calibrated copy: every AUC the same, every difference 0);
// bad command lines and a multi-label model on single labels are refused.
func TestCompareCLI(t *testing.T) {
	dir := t.TempDir()
	trained, untrained := filepath.Join(dir, "cnn.onnx"), "../../testdata/models/cnn.onnx"
	if _, e, code := run(t, "train", "--model", untrained, "--data", fmnist, "--non-private", "--epochs", "1",
		"--batch-size", "64", "--lr", "0.01", "--seed", "1", "--quiet", "--out", trained); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	compare := func(a, b, data string, extra ...string) compareResult {
		t.Helper()
		o, e, code := run(t, append([]string{"compare", "--model", a, "--model", b, "--data", data, "--json"}, extra...)...)
		var c compareResult
		if err := json.Unmarshal([]byte(o), &c); code != 0 || err != nil {
			t.Fatalf("compare %s %s: exit %d (%v): %s%s", a, b, code, err, o, e)
		}
		return c
	}
	c := compare(trained, untrained, fmnist)
	ea, eb := evalJSON(t, trained, fmnist), evalJSON(t, untrained, fmnist)
	d := c.Accuracy
	if d == nil || c.Examples != ea.Samples || d.A != ea.Accuracy || d.B != eb.Accuracy ||
		math.Abs(float64(d.AOnly-d.BOnly)-(ea.Accuracy-eb.Accuracy)*float64(ea.Samples)) > 1e-6 || !(d.P < 1e-6) || c.AUC != nil {
		t.Errorf("compare: %+v; eval's accuracies %v and %v", d, ea.Accuracy, eb.Accuracy)
	}
	if d := compare(trained, trained, fmnist).Accuracy; d == nil || d.AOnly != 0 || d.BOnly != 0 || d.P != 1 {
		t.Errorf("compare of a model with itself: %+v", d)
	}
	// --bootstrap: the same draws for both; the accuracy's difference
	// inside its interval, A above B in nearly every resample.
	pb := compare(trained, untrained, fmnist, "--bootstrap", "200").Bootstrap
	if pb == nil || pb.Resamples != 200 || pb.Units != "examples" || len(pb.Figures) == 0 || pb.Figures[0].Name != "accuracy" ||
		!(pb.Figures[0].CI[0] <= pb.Figures[0].Difference && pb.Figures[0].Difference <= pb.Figures[0].CI[1]) || pb.Figures[0].AAbove < 0.99 ||
		math.Abs(pb.Figures[0].Difference-(ea.Accuracy-eb.Accuracy)) > 1e-12 {
		t.Errorf("compare --bootstrap: %+v", pb)
	}
	o, _, code := run(t, "compare", "--model", trained, "--model", untrained, "--data", fmnist)
	if code != 0 || !strings.Contains(o, "McNemar's exact test: p = ") || !strings.Contains(o, "the AUCs of more than two classes are not compared") {
		t.Errorf("compare's text: exit %d: %s", code, o)
	}

	// Multi-label: the labels of a model and its calibrated copy.
	ldir := t.TempDir()
	test := "csv:" + multiLabelListing(t, ldir, "test", 200) + ":multilabel"
	train := "csv:" + multiLabelListing(t, ldir, "train", 400) + ":multilabel"
	ml, cal := filepath.Join(ldir, "ml.onnx"), filepath.Join(ldir, "cal.onnx")
	if _, e, code := run(t, "train", "--model", untrained, "--data", train, "--test-data", "none", "--num-classes", "13", "--non-private",
		"--epochs", "2", "--batch-size", "32", "--lr", "0.01", "--seed", "1", "--quiet", "--out", ml); code != 0 {
		t.Fatalf("train multi-label: exit %d: %s", code, e)
	}
	if _, e, code := run(t, "calibrate", "--model", ml, "--data", test, "--out", cal); code != 0 {
		t.Fatalf("calibrate: exit %d: %s", code, e)
	}
	m := compare(ml, cal, test)
	em := evalJSON(t, ml, test)
	if m.Accuracy != nil || len(m.AUC) == 0 || m.MeanAUC == nil || math.Abs(m.MeanAUC.A-*em.AUC) > 1e-9 {
		t.Fatalf("compare multi-label: %+v; eval's AUC %v", m, *em.AUC)
	}
	for _, d := range append(m.AUC, *m.MeanAUC) {
		if math.Abs(d.Difference) > 1e-4 || d.P < 0.05 {
			t.Errorf("compare with the calibrated copy: %+v", d)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--model", trained, "--data", fmnist}, 2, "two --model flags and --data are required"},
		{[]string{"--model", trained, "--model", ml, "--data", fmnist}, 2, "is multi-label (each logit a label)"},
		{[]string{"--model", trained, "--model", trained, "--data", fmnist, "--combine", "max"}, 2, "it needs --group-by"},
	} {
		if _, e, code := run(t, append([]string{"compare"}, tc.args...)...); code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("compare %v: exit %d: %s", tc.args, code, e)
		}
	}
}
