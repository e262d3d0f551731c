package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

// TestReportPNG draws a report written by train's own types and checks
// that the PNG decodes at the asked size, and that bad inputs are refused
// with a message naming the file.
func TestReportPNG(t *testing.T) {
	dir := t.TempDir()
	// The report as train writes it (dptrain's types), so that the picture
	// follows any change of its keys.
	rep := dptrain.Report{
		Settings: dptrain.Settings{Model: "testdata/models/cnn.onnx", Epsilon: 3, Delta: 1e-5, SampleRate: 0.032,
			Sigma: 0.92, Accountant: "rdp", Steps: 96},
		Privacy: &accountant.Result{Accountant: "rdp", Epsilon: 3, Delta: 1e-5, Steps: 96},
	}
	for e, acc := range []float64{0.65, 0.68, 0.70} {
		rep.Epochs = append(rep.Epochs, dptrain.EpochRecord{Epoch: e + 1, Steps: int64(32 * (e + 1)), Epsilon: 2.2 + 0.4*float64(e),
			TrainLoss: 1.3 - 0.15*float64(e), Test: &dptrain.EvalResult{Samples: 100, Accuracy: acc}})
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "run.json")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := runReportCmd([]string{in, "--width", "640", "--height", "480"}, &stdout); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "run.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got.X != 640 || got.Y != 480 {
		t.Errorf("PNG is %v, want 640×480", got)
	}
	// Something was drawn: not one flat colour.
	first, varied := img.At(0, 0), false
	for y := 0; y < 480 && !varied; y += 7 {
		for x := 0; x < 640; x += 7 {
			if img.At(x, y) != first {
				varied = true
				break
			}
		}
	}
	if !varied {
		t.Error("the PNG is blank")
	}

	// A run with adaptive clipping and the parameters' average: its clip
	// norms and clipped fractions take the last row.
	rep.Settings.ClipQuantile, rep.Settings.EMADecay = 0.5, 0.99
	for k := range rep.Epochs {
		rep.Epochs[k].ClipNorm, rep.Epochs[k].Clipped = 2+float64(k), 0.5
	}
	b, _ = json.Marshal(rep)
	adaptive := filepath.Join(dir, "adaptive.json")
	os.WriteFile(adaptive, b, 0o644)
	if err := runReportCmd([]string{adaptive}, &stdout); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "adaptive.png")); err != nil || fi.Size() == 0 {
		t.Errorf("the adaptive run's picture: %v", err)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{not json"), 0o644)
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{"epochs": []}`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{bad}, "bad.json: not a run report"},
		{[]string{empty}, "empty.json: the report has no epochs"},
		{[]string{}, "a report file is needed"},
		{[]string{in, "--width", "5"}, "--width and --height"},
		{[]string{filepath.Join(dir, "missing.json")}, "missing.json"},
	} {
		err := runReportCmd(c.args, &stdout)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("report %v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}

// TestReportTestSeries: the report's test panel draws a run's test
// accuracy, a multi-label run's mean label AUC, and says where the test
// data were scored by group.
func TestReportTestSeries(t *testing.T) {
	auc := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		name  string
		test  []*dptrain.EvalResult
		title string
		ys    []float64
	}{
		{"single-label", []*dptrain.EvalResult{{Accuracy: 0.5}, nil, {Accuracy: 0.75}}, "test accuracy", []float64{50, 75}},
		{"multi-label", []*dptrain.EvalResult{{MultiLabel: true, Accuracy: 0.9, AUC: auc(0.8)}, {MultiLabel: true, Accuracy: 0.95, AUC: auc(0.85)}}, "test AUC (mean of the labels')", []float64{0.8, 0.85}},
		{"by study", []*dptrain.EvalResult{{Accuracy: 0.6, Groups: &dptrain.GroupSummary{Combine: "max"}}}, "test accuracy by group", []float64{60}},
	} {
		r := &dptrain.Report{}
		for e, res := range c.test {
			r.Epochs = append(r.Epochs, dptrain.EpochRecord{Epoch: e + 1, Test: res})
		}
		title, _, xys := testSeries(r)
		var ys []float64
		for _, xy := range xys {
			ys = append(ys, xy.Y)
		}
		if title != c.title || fmt.Sprint(ys) != fmt.Sprint(c.ys) {
			t.Errorf("%s: %q %v, want %q %v", c.name, title, ys, c.title, c.ys)
		}
	}
}

// TestPrivacyCurvePerUser: a user-level run's privacy curve says whose
// guarantee it is.
func TestPrivacyCurvePerUser(t *testing.T) {
	rep := &dptrain.Report{
		Settings: dptrain.Settings{Epsilon: 3, Delta: 1e-5, SampleRate: 0.034, Sigma: 1.9, Accountant: "rdp", Steps: 100},
		Privacy:  &accountant.Result{Accountant: "rdp", Epsilon: 3, Delta: 1e-5, Steps: 100},
	}
	for _, c := range []struct {
		unit  string
		users int
		want  string
	}{
		{dptrain.PrivacyUnitExample, 0, "privacy curve ε(δ)"},
		{dptrain.PrivacyUnitUser, 15000, "privacy curve ε(δ) per user (15000 users)"},
	} {
		rep.Settings.PrivacyUnit, rep.Settings.Users = c.unit, c.users
		p, err := privacyCurvePanel(rep)
		if err != nil {
			t.Fatal(err)
		}
		if p.Title.Text != c.want {
			t.Errorf("%s: title %q, want %q", c.unit, p.Title.Text, c.want)
		}
	}
}
