package main

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// goldenInputs is npzInputs on fixture name's golden file
// (testdata/golden).
func goldenInputs(t *testing.T, name string) (gd map[string]*npy.Array, xp, yp string) {
	t.Helper()
	return npzInputs(t, filepath.Join("..", "..", "testdata", "golden", name+".npz"))
}

// npzInputs writes the input and labels arrays of the npz at path as .npy
// files for the CLI's --input and --labels: it returns the arrays and the
// two paths.
func npzInputs(t *testing.T, path string) (gd map[string]*npy.Array, xp, yp string) {
	t.Helper()
	gd, err := npy.ReadNPZ(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	xp, yp = filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	if err := npy.WriteFile(xp, gd["input"]); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(yp, gd["labels"]); err != nil {
		t.Fatal(err)
	}
	return gd, xp, yp
}

// TestNormsCLI: dpfinetune norms reproduces PyTorch's brute-force
// per-sample norms on the vit fixture in every mode, across physical
// batches of 3 (so the last one is padded).
func TestNormsCLI(t *testing.T) {
	gd, xp, yp := goldenInputs(t, "vit")
	for mode, r := range normsLikePyTorch(t, "../../testdata/models/vit.onnx", xp, yp, gd, "3", 1e-3, 1e-6) {
		if len(r.Decisions) != 10 {
			t.Errorf("%s: %d layer decisions, want 10", mode, len(r.Decisions))
		}
	}
	_, errOut, code := run(t, "norms", "--model", "../../testdata/models/vit.onnx", "--input", xp, "--labels", xp)
	if code != 1 || !strings.Contains(errOut, "int64 labels") {
		t.Errorf("float labels: exit %d, %q", code, errOut)
	}
	_, errOut, code = run(t, "norms", "--model", "../../testdata/models/cnn.onnx", "--input", xp, "--labels", yp)
	if code != 1 || !strings.Contains(errOut, "fixed at 1") {
		t.Errorf("wrong input shape: exit %d, %q", code, errOut)
	}
}

// TestNormsMultiLabel: dpfinetune norms with multi-hot labels, (N, K) of
// 0s and 1s, takes the multi-label loss — the sigmoids' binary
// cross-entropy averaged over the labels — and reproduces PyTorch's
// per-sample gradient norms of BCEWithLogitsLoss, one backward pass a
// sample (testdata/gen/make_multilabel_norms.py), in every mode, in total
// and per parameter, and with --pos-weight those of
// BCEWithLogitsLoss(pos_weight=…); labels other than 0 and 1, and
// positive weights not one a label, are refused.
func TestNormsMultiLabel(t *testing.T) {
	gd, xp, yp := npzInputs(t, filepath.Join("..", "..", "testdata", "golden", "cnn_multilabel.npz"))
	normsLikePyTorch(t, "../../testdata/models/cnn.onnx", xp, yp, gd, "4", 1e-4, 1e-7)
	// Each label's positive term weighed: PyTorch's
	// BCEWithLogitsLoss(pos_weight=…), the weights in the golden file.
	gw, xw, yw := npzInputs(t, filepath.Join("..", "..", "testdata", "golden", "cnn_multilabel_posweight.npz"))
	pw := make([]string, len(gw["pos_weight"].F64))
	for j, v := range gw["pos_weight"].F64 {
		pw[j] = fmt.Sprint(v)
	}
	normsLikePyTorch(t, "../../testdata/models/cnn.onnx", xw, yw, gw, "4", 1e-4, 1e-7, "--pos-weight", strings.Join(pw, ","))
	// Labels ignored (-1: uncertain=ignore): PyTorch's unreduced loss
	// times the mask of the labels known, over all ten; a sample ignoring
	// every label has norm 0.
	gi, xi, yi := npzInputs(t, filepath.Join("..", "..", "testdata", "golden", "cnn_multilabel_ignored.npz"))
	if gi["norm_total"].F64[5] != 0 {
		t.Fatalf("the golden's sample ignoring every label has norm %v", gi["norm_total"].F64[5])
	}
	normsLikePyTorch(t, "../../testdata/models/cnn.onnx", xi, yi, gi, "4", 1e-4, 1e-7)
	if _, e, code := run(t, "norms", "--model", "../../testdata/models/cnn.onnx", "--input", xw, "--labels", yw, "--pos-weight", "1,2"); code != 2 || !strings.Contains(e, "2 values for data of 10 labels") {
		t.Errorf("two positive weights for ten labels: exit %d: %s", code, e)
	}
	bad := gd["labels"]
	bad.I64[3] = 2
	if err := npy.WriteFile(yp, bad); err != nil {
		t.Fatal(err)
	}
	if _, e, code := run(t, "norms", "--model", "../../testdata/models/cnn.onnx", "--input", xp, "--labels", yp); code == 0 || !strings.Contains(e, "want multi-hot labels of 0s and 1s") {
		t.Errorf("a label of 2: exit %d: %s", code, e)
	}
}

// normsLikePyTorch runs norms on model, inputs xp and labels yp, in every
// mode at physical batch batch, and holds each sample's total and
// per-parameter norms to PyTorch's in gd (norm_total, norm/NAME) within
// rel of them (plus abs for a parameter's), extra flags added; it
// returns each mode's report.
func normsLikePyTorch(t *testing.T, model, xp, yp string, gd map[string]*npy.Array, batch string, rel, abs float64, extra ...string) map[string]normsReport {
	t.Helper()
	want := gd["norm_total"].F64
	reports := map[string]normsReport{}
	for _, mode := range []string{"bk", "mixed", "ghost", "instantiate"} {
		out, errOut, code := run(t, append([]string{"norms", "--model", model, "--input", xp, "--labels", yp, "--mode", mode, "--batch", batch, "--json"}, extra...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, errOut)
		}
		var r normsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Total) != len(want) {
			t.Fatalf("%s: %d norms, want %d", mode, len(r.Total), len(want))
		}
		for i := range want {
			if !(math.Abs(r.Total[i]-want[i]) <= rel*want[i]) { // NaN fails too
				t.Errorf("%s sample %d: %v, PyTorch %v", mode, i, r.Total[i], want[i])
			}
		}
		for name, v := range r.PerParam {
			w := gd["norm/"+name].F64
			if len(w) != len(v) {
				t.Fatalf("%s: %s has %d norms, PyTorch %d", mode, name, len(v), len(w))
			}
			for i := range w {
				if !(math.Abs(v[i]-w[i]) <= rel*w[i]+abs) { // NaN fails too
					t.Errorf("%s %s sample %d: %v, PyTorch %v", mode, name, i, v[i], w[i])
				}
			}
		}
		reports[mode] = r
	}
	return reports
}
