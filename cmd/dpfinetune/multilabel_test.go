package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// fmnistGroups are the label sets of multiLabelListing: each garment's
// name and its group.
var fmnistGroups = []string{"Tshirt|upper", "Trouser|other", "Pullover|upper", "Dress|other", "Coat|upper",
	"Sandal|footwear", "Shirt|upper", "Sneaker|footwear", "Bag|other", "Boot|footwear"}

// multiLabelListing writes the first n images of the Fashion-MNIST slice's
// split as PNGs and a listing of them whose labels are sets — the
// garment's name and its group (upper, footwear, other): 13 labels, two a
// sample — and returns the listing.
func multiLabelListing(t *testing.T, dir string, split data.Split, n int) string {
	t.Helper()
	m, err := data.LoadString(fmt.Sprintf("%s:%s:limit=%d", fmnist, split, n))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("path,labels\n")
	for i := 0; i < m.Len(); i++ {
		name := fmt.Sprintf("%s-%04d.png", split, i)
		writeGrayPNG(t, filepath.Join(dir, name), m.Pixels(i))
		fmt.Fprintf(&b, "%s,%s\n", name, fmnistGroups[m.Label(i)])
	}
	listing := filepath.Join(dir, string(split)+".csv")
	if err := os.WriteFile(listing, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return listing
}

// evalJSON is eval --json of model on data, its flags extra.
func evalJSON(t *testing.T, model, data string, extra ...string) dptrain.EvalResult {
	t.Helper()
	o, e, code := run(t, append([]string{"eval", "--model", model, "--data", data, "--json"}, extra...)...)
	if code != 0 {
		t.Fatalf("eval %v: exit %d: %s", extra, code, e)
	}
	var ev dptrain.EvalResult
	if err := json.Unmarshal([]byte(o), &ev); err != nil {
		t.Fatalf("eval %v: %v: %s", extra, err, o)
	}
	return ev
}

// writeGrayPNG writes a 28×28 gray image (a Fashion-MNIST slice's pixels)
// as a PNG file.
func writeGrayPNG(t *testing.T, path string, pix []uint8) {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, 28, 28))
	copy(img.Pix, pix)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

// TestTrainMultiLabel: a multi-label listing trains the fixture CNN with
// a fresh 13-label head on the multi-label loss (said in the log; every
// epoch's test figures multi-label: the labels' AUC, decisions right,
// exact matches), learns it (AUC above 0.85 after 8 private epochs: 0.93),
// records it in the model, whose eval gives the run's last test figures
// and per-label table, and whose predictions are each label's sigmoid and
// the labels decided, at ½ or at --threshold (eval's decisions too, its
// AUC unmoved); eval refuses to read the model's data as single
// labels; label smoothing smooths each label's target, --pos-weight
// weighs labels' positive terms (--class-weight is refused); it is audited with
// gradient canaries and with input canaries of a multi-label pool,
// and so is test data that is not multi-label; a search scores its runs
// by the share of label decisions right.
func TestTrainMultiLabel(t *testing.T) {
	dir := t.TempDir()
	train := "csv:" + multiLabelListing(t, dir, data.Train, 1000) + ":multilabel"
	test := "csv:" + multiLabelListing(t, dir, data.Test, 300) + ":multilabel"
	out, rep := filepath.Join(dir, "ml.onnx"), filepath.Join(dir, "ml.json")
	args := []string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", train, "--test-data", test, "--num-classes", "13",
		"--epsilon", "8", "--epochs", "8", "--batch-size", "100", "--lr", "0.02", "--resize", "stretch", "--norm", "fmnist", "--seed", "1", "--quiet", "--report", rep, "--out", out}
	o, e, code := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	if !strings.Contains(o, "loss:      multi-label: each of the 13 labels") || !strings.Contains(o, "test AUC 0.") || !strings.Contains(o, "exact ") {
		t.Errorf("the log does not say the run is multi-label:\n%s", o)
	}
	b, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Settings dptrain.Settings `json:"settings"`
		Epochs   []struct {
			Test dptrain.EvalResult `json:"test"`
		} `json:"epochs"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	last := r.Epochs[len(r.Epochs)-1].Test
	if !r.Settings.MultiLabel || !last.MultiLabel || last.AUC == nil || *last.AUC < 0.85 || len(last.PerClass) != 13 || last.Confusion != nil {
		t.Fatalf("settings multi-label %v; last test %+v", r.Settings.MultiLabel, last)
	}
	t.Logf("last epoch: AUC %.4f, labels right %.4f, exact %.4f", *last.AUC, last.Accuracy, last.ExactMatch)
	md := metadata(t, out)
	if md["dpfinetune.multi_label"] != "true" || !strings.Contains(md["dpfinetune.classes"], `"footwear"`) {
		t.Errorf("metadata %v", md)
	}
	ev := evalJSON(t, out, test)
	if !ev.MultiLabel || ev.AUC == nil || *ev.AUC != *last.AUC || ev.ExactMatch != last.ExactMatch || ev.Accuracy != last.Accuracy {
		t.Errorf("eval: %+v, the run's last test figures %+v", ev, last)
	}
	o, _, _ = run(t, "eval", "--model", out, "--data", test)
	for _, want := range []string{"multi-label: 13 labels", "AUC: ", "labels right: ", "exact: ", "per label:", "footwear"} {
		if !strings.Contains(o, want) {
			t.Errorf("eval does not say %q:\n%s", want, o)
		}
	}
	if _, e, code := run(t, "eval", "--model", out, "--data", strings.TrimSuffix(test, ":multilabel")); code != 2 || !strings.Contains(e, "is multi-label") {
		t.Errorf("eval of single labels: exit %d: %s", code, e)
	}
	// Decision thresholds: one for every label, and by name (the others
	// ½): the decisions' figures move, the AUC does not; a threshold of
	// ½ for every label is the default's evaluation.
	for _, c := range []struct {
		spec string
		want []float64
	}{
		{"0.2", []float64{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2}},
		{"upper=0.9,Bag=0.05", []float64{0.05, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9}},
		{"0.5", nil},
	} {
		o, e, code := run(t, "eval", "--model", out, "--data", test, "--json", "--threshold", c.spec)
		var et dptrain.EvalResult
		if err := json.Unmarshal([]byte(o), &et); code != 0 || err != nil {
			t.Fatalf("eval --threshold %s: exit %d (%v): %s", c.spec, code, err, e)
		}
		if c.want == nil {
			if et.Accuracy != ev.Accuracy || et.ExactMatch != ev.ExactMatch {
				t.Errorf("eval --threshold 0.5: accuracy %v, exact %v; the default's %v, %v", et.Accuracy, et.ExactMatch, ev.Accuracy, ev.ExactMatch)
			}
			continue
		}
		if fmt.Sprint(et.Thresholds) != fmt.Sprint(c.want) || *et.AUC != *ev.AUC || et.Accuracy == ev.Accuracy {
			t.Errorf("eval --threshold %s: thresholds %v (want %v), AUC %v (%v at ½), labels right %v (%v at ½)", c.spec, et.Thresholds, c.want, *et.AUC, *ev.AUC, et.Accuracy, ev.Accuracy)
		}
	}
	// An operating point chosen on the data: each label's highest
	// threshold reaching sensitivity 0.8; the --threshold eval prints
	// decides there, each label's recall its point's sensitivity.
	o, e, code = run(t, "eval", "--model", out, "--data", test, "--operating-point", "sensitivity=0.8")
	_, th, found := strings.Cut(o, "decide there: --threshold ")
	if code != 0 || !found {
		t.Fatalf("eval --operating-point: exit %d: %s%s", code, o, e)
	}
	th, _, _ = strings.Cut(th, "\n")
	th, _, _ = strings.Cut(th, " ")
	op := evalJSON(t, out, test, "--operating-point", "sensitivity=0.8")
	at := evalJSON(t, out, test, "--threshold", th)
	if op.OperatingRule != "sensitivity=0.8" || len(op.OperatingPoints) == 0 || len(at.Thresholds) != 13 {
		t.Fatalf("eval --operating-point: rule %q, %d points; --threshold %s: %v", op.OperatingRule, len(op.OperatingPoints), th, at.Thresholds)
	}
	for _, p := range op.OperatingPoints {
		c := at.PerClass[p.Label]
		if p.Sensitivity < 0.8 || c.Recall != p.Sensitivity || c.Precision != p.PPV || at.Thresholds[p.Label] != p.Threshold {
			t.Errorf("label %d: the point %+v; at --threshold %s recall %v, precision %v", p.Label, p, th, c.Recall, c.Precision)
		}
	}
	// calibrate --per-label: each label's Platt map; eval of the mapped
	// model measures the loss and the labels' calibration error calibrate
	// reported, each label's AUC unmoved. One temperature: no decision
	// moves.
	scaled, warmed := filepath.Join(dir, "scaled.onnx"), filepath.Join(dir, "warmed.onnx")
	for _, c := range []struct {
		out   string
		extra []string
	}{{scaled, []string{"--per-label"}}, {warmed, nil}} {
		o, e, code := run(t, append([]string{"calibrate", "--model", out, "--data", test, "--out", c.out, "--json"}, c.extra...)...)
		var cr calibrateResult
		if err := json.Unmarshal([]byte(o), &cr); code != 0 || err != nil {
			t.Fatalf("calibrate %v: exit %d (%v): %s%s", c.extra, code, err, o, e)
		}
		after := evalJSON(t, c.out, test)
		if cr.LossAfter >= cr.LossBefore || math.Abs(after.Loss-cr.LossAfter) > 1e-5 || math.Abs(ev.Loss-cr.LossBefore) > 1e-5 {
			t.Errorf("calibrate %v: %+v; eval's loss %v before, %v after", c.extra, cr, ev.Loss, after.Loss)
		}
		// The labels' calibration errors calibrate reports are eval's of
		// the model before and of the calibrated one after.
		if cr.LabelECEBefore == nil || after.LabelECE == nil || math.Abs(*ev.LabelECE-*cr.LabelECEBefore) > 1e-5 || math.Abs(*after.LabelECE-*cr.LabelECEAfter) > 1e-5 {
			t.Errorf("calibrate %v: label ECE %v → %v; eval's %v before, %v after", c.extra, cr.LabelECEBefore, cr.LabelECEAfter, ev.LabelECE, after.LabelECE)
		}
		if (c.extra == nil) != (cr.Temperature > 0) || (c.extra == nil) != (cr.Labels == nil) || c.extra == nil && (after.Accuracy != ev.Accuracy || after.ExactMatch != ev.ExactMatch) {
			t.Errorf("calibrate %v: temperature %v, %d label maps; labels right %v → %v", c.extra, cr.Temperature, len(cr.Labels), ev.Accuracy, after.Accuracy)
		}
		for j, pc := range after.PerClass {
			if w := ev.PerClass[j].AUC; (w == nil) != (pc.AUC == nil) || w != nil && math.Abs(*w-*pc.AUC) > 1e-4 {
				t.Errorf("calibrate %v: label %d's AUC %v, %v before", c.extra, j, pc.AUC, w)
			}
		}
	}
	// eval --plot: the labels' ROC curves and their reliability diagram,
	// two panels; the text table each label's calibration error.
	png := filepath.Join(dir, "eval.png")
	if o, e, code := run(t, "eval", "--model", scaled, "--data", test, "--plot", png); code != 0 || !strings.Contains(o, "drawn: "+png) || !strings.Contains(o, "ECE:      ") || !strings.Contains(o, " ECE") {
		t.Errorf("eval --plot of a multi-label model: exit %d: %s%s", code, o, e)
	} else if w, h := pngSize(t, png); w != 1400 || h != 650 {
		t.Errorf("eval --plot of a multi-label model: %d×%d pixels, want 1400×650 (ROC and reliability)", w, h)
	}
	if _, e, code := run(t, "calibrate", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist+":limit=50", "--out", scaled, "--per-label"); code != 2 || !strings.Contains(e, "--per-label calibrates a multi-label model's labels") {
		t.Errorf("calibrate --per-label of a classifier: exit %d: %s", code, e)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", out, "--data", test, "--operating-point", "f1"}, "want sensitivity=S, specificity=S or youden"},
		{[]string{"--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=50", "--operating-point", "youden"}, "take a two-class or a multi-label model's curves"},
		{[]string{"--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=50", "--roc", filepath.Join(dir, "roc.csv")}, "take a two-class or a multi-label model's curves"},
		{[]string{"--model", out, "--data", test, "--threshold", "1.5"}, "outside (0, 1)"},
		{[]string{"--model", out, "--data", test, "--threshold", "Hat=0.3"}, `no label "Hat"`},
		{[]string{"--model", "../../testdata/models/cnn.onnx", "--data", fmnist + ":limit=50", "--threshold", "0.3"}, "decides a multi-label model's labels"},
	} {
		if _, e, code := run(t, append([]string{"eval"}, c.args...)...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("eval %v: exit %d: %s", c.args, code, e)
		}
	}
	o, e, code = run(t, "predict", "--model", out, "--images", filepath.Join(dir, "test-0000.png"), "--images", filepath.Join(dir, "test-0001.png"), "--top", "3", "--json")
	if code != 0 {
		t.Fatalf("predict: exit %d: %s", code, e)
	}
	var pr struct {
		Predictions []imagePrediction `json:"predictions"`
	}
	if err := json.Unmarshal([]byte(o), &pr); err != nil || len(pr.Predictions) != 2 {
		t.Fatalf("predict --json: %v: %s", err, o)
	}
	for _, p := range pr.Predictions {
		var sum float64
		for _, c := range p.Top {
			sum += c.Probability
		}
		// Sigmoids, not a softmax: the top three need not sum to one, and
		// the decided labels are those above ½.
		if p.Labels == nil || len(p.Top) != 3 || sum < 1.2 {
			t.Errorf("%s: top %+v (sum %.3f), labels %v: want each label's sigmoid and the labels decided", p.File, p.Top, sum, p.Labels)
		}
	}
	// A low threshold decides every label whose sigmoid exceeds it.
	o, e, code = run(t, "predict", "--model", out, "--images", filepath.Join(dir, "test-0000.png"), "--top", "13", "--threshold", "0.05", "--json")
	if err := json.Unmarshal([]byte(o), &pr); code != 0 || err != nil || len(pr.Predictions) != 1 {
		t.Fatalf("predict --threshold: exit %d (%v): %s", code, err, e)
	}
	var above int
	for _, c := range pr.Predictions[0].Top {
		if c.Probability > 0.05 {
			above++
		}
	}
	if p := pr.Predictions[0]; len(p.Labels) != above || above <= 2 {
		t.Errorf("predict --threshold 0.05: labels %v, %d sigmoids above 0.05: %+v", p.Labels, above, p.Top)
	}
	if _, e, code := run(t, "predict", "--model", "../../testdata/models/cnn.onnx", "--images", filepath.Join(dir, "test-0000.png"), "--threshold", "0.3"); code != 2 || !strings.Contains(e, "decides a multi-label model's labels") {
		t.Errorf("predict --threshold of a classifier: exit %d: %s", code, e)
	}

	t.Run("features and cuda", func(t *testing.T) {
		// The head alone on the frozen convolutions' cached features
		// (whose test rows are features, the evaluation multi-label
		// still), and the emulated CUDA device's kernels of the loss head,
		// each to its own model: both learn the labels.
		for _, extra := range [][]string{{"--train", `^classifier\.`}, {"--device", "cuda", "--epochs", "2"}} {
			a := append(append([]string{}, args...), extra...)
			if extra[0] == "--device" {
				useEmulatedCUDA(t)
				a = append(a, "--data", train+":limit=400", "--test-data", test+":limit=150")
			}
			for i := range a {
				if a[i] == "--report" {
					a[i+1] = filepath.Join(dir, "variant.json")
				}
				if a[i] == "--out" {
					a[i+1] = filepath.Join(dir, "variant.onnx")
				}
			}
			if _, e, code := run(t, a...); code != 0 {
				t.Fatalf("%v: exit %d: %s", extra, code, e)
			}
			b, err := os.ReadFile(filepath.Join(dir, "variant.json"))
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				FeatureCache struct {
					Cached bool `json:"cached"`
				} `json:"feature_cache"`
				Epochs []struct {
					Test dptrain.EvalResult `json:"test"`
				} `json:"epochs"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			lt := v.Epochs[len(v.Epochs)-1].Test
			if lt.AUC != nil {
				t.Logf("%v: last test AUC %.4f", extra, *lt.AUC)
			}
			if !lt.MultiLabel || lt.AUC == nil || *lt.AUC < 0.75 || v.FeatureCache.Cached != (extra[0] == "--train") {
				t.Errorf("%v: cached %v, last test %+v", extra, v.FeatureCache.Cached, lt)
			}
		}
	})

	withArgs := func(extra ...string) []string {
		a := append(append([]string{}, args...), extra...)
		for i := range a {
			if a[i] == "--out" {
				a[i+1] = filepath.Join(dir, "other.onnx")
			}
			if a[i] == "--report" {
				a[i+1] = filepath.Join(dir, "other.json")
			}
		}
		return a
	}
	// Label smoothing smooths each label's target towards ½.
	if o, e, code := run(t, withArgs("--label-smoothing", "0.1", "--epochs", "1")...); code != 0 || !strings.Contains(o, "each label's target smoothed by α = 0.1 towards ½") {
		t.Errorf("--label-smoothing on multi-label data: exit %d: %s\n%s", code, e, o)
	}
	// Positive weights by label name, the others 1: in the log and model;
	// refused on single-label data, where --class-weight weighs.
	if o, e, code := run(t, withArgs("--pos-weight", "upper=2,Bag=0.5", "--epochs", "1")...); code != 0 || !strings.Contains(o, "each label's positive term weighed (Bag 0.5, Boot 1,") ||
		metadata(t, filepath.Join(dir, "other.onnx"))["dpfinetune.pos_weight"] != "[0.5,1,1,1,1,1,1,1,1,1,1,1,2]" {
		t.Errorf("--pos-weight: exit %d, metadata %q: %s\n%s", code, metadata(t, filepath.Join(dir, "other.onnx"))["dpfinetune.pos_weight"], e, o)
	}
	// Raised to a power: ½ their square roots, 0 the plain loss — the
	// same weights, bit for bit, as a run without them (seeded).
	if o, e, code := run(t, withArgs("--pos-weight", "upper=4,Bag=0.25", "--pos-weight-power", "0.5", "--epochs", "1")...); code != 0 ||
		metadata(t, filepath.Join(dir, "other.onnx"))["dpfinetune.pos_weight"] != "[0.5,1,1,1,1,1,1,1,1,1,1,1,2]" {
		t.Errorf("--pos-weight-power 0.5: exit %d, metadata %q: %s\n%s", code, metadata(t, filepath.Join(dir, "other.onnx"))["dpfinetune.pos_weight"], e, o)
	}
	plain, powered := filepath.Join(dir, "plain.onnx"), filepath.Join(dir, "powered.onnx")
	for _, c := range []struct {
		out  string
		args []string
	}{{plain, nil}, {powered, []string{"--pos-weight", "upper=4,Bag=0.25", "--pos-weight-power", "0"}}} {
		a := append(withArgs("--epochs", "1"), c.args...)
		for i := range a {
			if a[i] == "--out" {
				a[i+1] = c.out
			}
		}
		if _, e, code := run(t, a...); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, e)
		}
	}
	pm, err := onnx.Load(plain)
	if err != nil {
		t.Fatal(err)
	}
	qm, err := onnx.Load(powered)
	if err != nil {
		t.Fatal(err)
	}
	for i, init := range pm.Proto.Graph.Initializer {
		if !proto.Equal(init, qm.Proto.Graph.Initializer[i]) {
			t.Errorf("--pos-weight-power 0: initializer %s differs from the plain loss's", init.GetName())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pos-weight-power", "0.5"}, "raises --pos-weight's weights: give them"},
		{[]string{"--pos-weight", "upper=2", "--pos-weight-power", "7"}, "must be in [0, 4]"},
	} {
		if _, e, code := run(t, withArgs(c.args...)...); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, e)
		}
	}
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist, "--epsilon", "3", "--quiet", "--out", filepath.Join(dir, "x.onnx"), "--pos-weight", "3=2"); code != 1 || !strings.Contains(e, "--pos-weight weighs a multi-label run's labels") {
		t.Errorf("--pos-weight on single-label data: exit %d: %s", code, e)
	}
	if _, e, code := run(t, withArgs("--class-weight", "upper=2")...); code != 1 || !strings.Contains(e, "use --pos-weight") {
		t.Errorf("--class-weight on multi-label data: exit %d: %s", code, e)
	}
	if _, e, code := run(t, withArgs("--test-data", strings.TrimSuffix(test, ":multilabel"))...); code == 0 || !strings.Contains(e, "is multi-label but the test data is not") {
		t.Errorf("single-label test data: exit %d: %s", code, e)
	}
	// Audits: gradient canaries, and input canaries — images of the pool
	// given label sets not their own — from a multi-label pool only.
	audit := []string{"audit", "--model", "../../testdata/models/cnn.onnx", "--data", train, "--num-classes", "13", "--epsilon", "8", "--epochs", "1",
		"--canaries", "10", "--k-plus", "2", "--k-minus", "2", "--resize", "stretch", "--norm", "fmnist", "--quiet", "--json"}
	for _, kind := range [][]string{{"--canary-kind", "gradient"}, {"--canary-kind", "input", "--canary-data", test}} {
		o, e, code := run(t, append(audit[:len(audit):len(audit)], kind...)...)
		var r struct {
			Violation bool `json:"violation"`
			Report    struct {
				Settings struct {
					MultiLabel bool `json:"multi_label"`
				} `json:"settings"`
			} `json:"run"`
		}
		if err := json.Unmarshal([]byte(o), &r); code != 0 || err != nil || !r.Report.Settings.MultiLabel || r.Violation {
			t.Errorf("audit %v of multi-label data: exit %d (%v), multi-label %v, violation %v: %s", kind, code, err, r.Report.Settings.MultiLabel, r.Violation, e)
		}
	}
	if _, e, code := run(t, append(audit[:len(audit):len(audit)], "--canary-kind", "input", "--canary-data", strings.TrimSuffix(test, ":multilabel"))...); code == 0 || !strings.Contains(e, "the canary pool is not") {
		t.Errorf("audit of multi-label data with a single-label pool: exit %d: %s", code, e)
	}
	// A search scores each run by the share of the held-out examples'
	// labels it decides right (each example's share in [0, 1]).
	tuned := filepath.Join(dir, "tuned.onnx")
	o, e, code = run(t, "tune", "--model", "../../testdata/models/cnn.onnx", "--data", train+":limit=400", "--test-data", test, "--num-classes", "13", "--epsilon", "8",
		"--epochs", "2", "--batch-size", "100", "--grid", "lr=0.005,0.02", "--trials-mean", "2", "--seed", "3", "--quiet", "--out", tuned, "--report", tuned+".json")
	if code != 0 {
		t.Fatalf("tune of multi-label data: exit %d: %s", code, e)
	}
	b, err = os.ReadFile(tuned + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Score float64 `json:"score"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	if metadata(t, tuned)["dpfinetune.multi_label"] != "true" || !(tr.Score > 0.5 && tr.Score <= 1.05) {
		t.Errorf("tuned: metadata %v, noisy score %v (the share of label decisions right)", metadata(t, tuned), tr.Score)
	}
	// By the labels' ranking (--score ranking): each example's label
	// ranking average precision, the chosen model's within the noise of
	// its own on the held-out data (σ = 0.01); single-label data refused.
	ranked := filepath.Join(dir, "ranked.onnx")
	o, e, code = run(t, "tune", "--model", "../../testdata/models/cnn.onnx", "--data", train+":limit=400", "--test-data", test, "--num-classes", "13", "--epsilon", "8",
		"--epochs", "2", "--batch-size", "100", "--grid", "lr=0.005,0.02", "--trials-mean", "2", "--seed", "3", "--quiet", "--score", "ranking", "--out", ranked, "--report", ranked+".json")
	if code != 0 || !strings.Contains(o, "scores:  label ranking average precision") {
		t.Fatalf("tune --score ranking: exit %d: %s\n%s", code, e, o)
	}
	var rr struct {
		Score     float64 `json:"score"`
		ScoreKind string  `json:"score_kind"`
	}
	if b, err = os.ReadFile(ranked + ".json"); err == nil {
		err = json.Unmarshal(b, &rr)
	}
	if err != nil {
		t.Fatal(err)
	}
	tv, err := openView(test, []int64{1, 28, 28}, "fmnist", "none", "stretch", dicomRead{})
	if err != nil {
		t.Fatal(err)
	}
	lrap, err := classifyRun(nil, ranked, tv, 100, true)
	if err != nil {
		t.Fatal(err)
	}
	mean := 0.0
	for _, v := range lrap {
		mean += v / float64(len(lrap))
	}
	if rr.ScoreKind != "ranking" || math.Abs(rr.Score-mean) > 0.05 || !strings.Contains(metadata(t, ranked)["dpfinetune.search"], "label ranking average precision") {
		t.Errorf("tune --score ranking: kind %q, noisy score %v, the model's mean %v; search %q", rr.ScoreKind, rr.Score, mean, metadata(t, ranked)["dpfinetune.search"])
	}
	for _, c := range []struct{ data, score, want string }{
		{strings.TrimSuffix(test, ":multilabel"), "ranking", "ranks a multi-label model's labels"},
		{test, "auc", "want right or ranking"},
	} {
		if _, e, code := run(t, "tune", "--model", "../../testdata/models/cnn.onnx", "--data", train+":limit=400", "--test-data", c.data, "--num-classes", "13", "--epsilon", "8",
			"--grid", "lr=0.005,0.02", "--score", c.score, "--out", filepath.Join(dir, "bad.onnx")); code != 2 || !strings.Contains(e, c.want) {
			t.Errorf("tune --score %s on %s: exit %d: %s", c.score, c.data, code, e)
		}
	}
}

// attributeListing writes the first n images of the Fashion-MNIST slice's
// split as PNGs under dir/img and a listing of them laid out as CelebA's
// attribute listing is — an image_id column, then an attribute column a
// label, of 1 and -1 —, the attributes functions of the garment: first
// derived ones, then the garment's name (Tshirt … Boot; "Boot" the last
// label, derived+9). It returns the listing and the images' directory.
func attributeListing(t *testing.T, dir string, split data.Split, n, derived int) (listing, imgDir string) {
	t.Helper()
	m, err := data.LoadString(fmt.Sprintf("%s:%s:limit=%d", fmnist, split, n))
	if err != nil {
		t.Fatal(err)
	}
	imgDir = filepath.Join(dir, "img")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("image_id")
	for j := range derived {
		fmt.Fprintf(&b, ",attr_%02d", j)
	}
	for _, g := range fmnistGroups {
		name, _, _ := strings.Cut(g, "|")
		b.WriteString("," + name)
	}
	b.WriteString("\n")
	for i := 0; i < m.Len(); i++ {
		name := fmt.Sprintf("%s-%06d.png", split, i)
		writeGrayPNG(t, filepath.Join(imgDir, name), m.Pixels(i))
		b.WriteString(name)
		c := m.Label(i)
		for j := range derived + 10 {
			if j < derived && c*(j+1)%7 < 3 || j >= derived && j-derived == c {
				b.WriteString(",1")
			} else {
				b.WriteString(",-1")
			}
		}
		b.WriteString("\n")
	}
	listing = filepath.Join(dir, "list_attr_"+string(split)+".csv")
	if err := os.WriteFile(listing, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return listing, imgDir
}

// TestTrainManyLabels: listings laid out as CelebA's attributes (label
// columns of 1 and -1, the images in a folder of their own) train the
// fixture CNN with a fresh head of 40 labels (CelebA's count: sets as
// bits) and of 80 (COCO's: sets past a label's 62 bits, interned), read
// with labels=*, uncertain=zero and root=; the last label ("Boot") is
// learnt, reported and predicted by name; the 80-label run is audited with
// input canaries given label sets not their own.
func TestTrainManyLabels(t *testing.T) {
	for _, labels := range []int{40, 80} {
		t.Run(fmt.Sprint(labels), func(t *testing.T) {
			dir := t.TempDir()
			trainList, imgs := attributeListing(t, filepath.Join(dir, "train"), data.Train, 2000, labels-10)
			testList, testImgs := attributeListing(t, filepath.Join(dir, "test"), data.Test, 200, labels-10)
			train := "csv:" + trainList + ":labels=*:uncertain=zero:root=" + imgs
			test := "csv:" + testList + ":labels=*:uncertain=zero:root=" + testImgs
			out := filepath.Join(dir, "tuned.onnx")
			k := fmt.Sprint(labels)
			o, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", train, "--test-data", test, "--num-classes", k,
				"--epsilon", "8", "--epochs", "15", "--batch-size", "100", "--lr", "0.02", "--resize", "stretch", "--norm", "fmnist", "--seed", "1", "--quiet", "--out", out)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, e)
			}
			if !strings.Contains(o, "multi-label: each of the "+k+" labels") || !strings.Contains(o, "norms:     checked") {
				t.Errorf("the log does not say the run has %s labels and its norms checked:\n%s", k, o)
			}
			ev := evalJSON(t, out, test)
			if !ev.MultiLabel || ev.AUC == nil || *ev.AUC < 0.85 || ev.MAP == nil || len(ev.PerClass) != labels {
				t.Fatalf("eval: multi-label %v, AUC %v, mAP %v, %d labels", ev.MultiLabel, ev.AUC, ev.MAP, len(ev.PerClass))
			}
			boot := ev.PerClass[labels-1]
			if boot.Support == 0 || boot.Recall < 0.5 {
				t.Errorf("label %d (Boot): %+v; want it found in half its images at least", labels-1, boot)
			}
			t.Logf("AUC %.4f, labels right %.4f, Boot recall %.3f precision %.3f", *ev.AUC, ev.Accuracy, boot.Recall, boot.Precision)
			o, _, _ = run(t, "eval", "--model", out, "--data", test)
			if !strings.Contains(o, "multi-label: "+k+" labels") || !strings.Contains(o, "Boot") || !strings.Contains(o, fmt.Sprintf("attr_%02d", labels-11)) ||
				!strings.Contains(o, fmt.Sprintf("mAP:      %.4f", *ev.MAP)) {
				t.Errorf("eval does not name the %s labels:\n%s", k, o)
			}
			// Boots of the test split: predict decides each label whose
			// sigmoid is above ½, by name, the last ones too; Boot for
			// some of them.
			fm, err := data.LoadString(fmt.Sprintf("%s:%s:limit=200", fmnist, data.Test))
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"predict", "--model", out, "--json", "--top", k}
			for i, boots := 0, 0; i < fm.Len() && boots < 5; i++ {
				if fm.Label(i) == 9 {
					args = append(args, "--images", filepath.Join(testImgs, fmt.Sprintf("%s-%06d.png", data.Test, i)))
					boots++
				}
			}
			o, e, code = run(t, args...)
			if code != 0 {
				t.Fatalf("predict: exit %d: %s", code, e)
			}
			var pr struct {
				Predictions []imagePrediction `json:"predictions"`
			}
			if err := json.Unmarshal([]byte(o), &pr); err != nil {
				t.Fatal(err)
			}
			found := 0
			for _, p := range pr.Predictions {
				var want []string
				for _, c := range p.Top { // by probability, as Labels
					if c.Probability > 0.5 {
						want = append(want, c.Class)
					}
				}
				if len(p.Top) != labels || !slices.Equal(p.Labels, want) {
					t.Errorf("predict %s: %d labels scored, decided %q; above ½: %q", p.File, len(p.Top), p.Labels, want)
				}
				if slices.Contains(p.Labels, "Boot") {
					found++
				}
			}
			if len(pr.Predictions) != 5 || found == 0 {
				t.Errorf("predict: Boot decided for %d of %d boots", found, len(pr.Predictions))
			}
			// The same predictions as a CSV file: a row an image, its
			// labels decided and every label's probability by name.
			table := filepath.Join(dir, "preds.csv")
			csvArgs := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--json" })
			o, e, code = run(t, append(csvArgs, "--csv", table)...)
			if code != 0 {
				t.Fatalf("predict --csv: exit %d: %s", code, e)
			}
			if !strings.Contains(o, "5 predictions written to "+table) {
				t.Errorf("predict --csv says %q", o)
			}
			f, err := os.Open(table)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := csv.NewReader(f).ReadAll()
			f.Close()
			if err != nil || len(rows) != 6 || len(rows[0]) != labels+2 || rows[0][1] != "prediction" || rows[0][labels+1] != "Boot" {
				t.Fatalf("predict --csv: %d rows (%v), header %q", len(rows), err, rows[0])
			}
			for i, p := range pr.Predictions {
				r := rows[i+1]
				if r[0] != p.File || r[1] != strings.Join(p.Labels, "|") {
					t.Errorf("row %d: %q %q; JSON %s %q", i, r[0], r[1], p.File, p.Labels)
				}
				for _, c := range p.Top {
					if q, err := strconv.ParseFloat(r[2+c.Label], 64); err != nil || math.Abs(q-c.Probability) > 1e-6 {
						t.Errorf("row %d, %s: probability %s, JSON %v", i, c.Class, r[2+c.Label], c.Probability)
					}
				}
			}
			if labels <= 62 {
				return
			}
			o, e, code = run(t, "audit", "--model", "../../testdata/models/cnn.onnx", "--data", train+":limit=500", "--num-classes", k, "--epsilon", "8", "--epochs", "1",
				"--canaries", "10", "--k-plus", "2", "--k-minus", "2", "--resize", "stretch", "--norm", "fmnist", "--quiet", "--json",
				"--canary-kind", "input", "--canary-data", test)
			var r struct {
				Violation bool `json:"violation"`
			}
			if err := json.Unmarshal([]byte(o), &r); code != 0 || err != nil || r.Violation {
				t.Errorf("audit with input canaries of %s labels: exit %d (%v), violation %v: %s", k, code, err, r.Violation, e)
			}
		})
	}
}

// findingsListing writes the first n images of the Fashion-MNIST slice's
// split as PNGs and a listing of them laid out as CheXpert's — a Path
// column, a Sex column, then a column a finding of 1, 0, empty or -1
// (uncertain): upper, footwear and other (the garment's group; footwear
// -1 in every third image), and Unsure (-1 everywhere, or 1 everywhere
// where unsureOne) — and returns it and the number of footwear's -1s.
func findingsListing(t *testing.T, dir string, split data.Split, n int, unsureOne bool) (string, int) {
	t.Helper()
	m, err := data.LoadString(fmt.Sprintf("%s:%s:limit=%d", fmnist, split, n))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("Path,Sex,upper,footwear,other,Unsure\n")
	uncertain := 0
	for i := 0; i < m.Len(); i++ {
		name := fmt.Sprintf("%s-%04d.png", split, i)
		writeGrayPNG(t, filepath.Join(dir, name), m.Pixels(i))
		_, group, _ := strings.Cut(fmnistGroups[m.Label(i)], "|")
		b.WriteString(name + ",F")
		for _, g := range []string{"upper", "footwear", "other"} {
			switch {
			case g == "footwear" && i%3 == 0:
				b.WriteString(",-1")
				uncertain++
			case g == group:
				b.WriteString(",1.0")
			case i%2 == 0:
				b.WriteString(",")
			default:
				b.WriteString(",0.0")
			}
		}
		if unsureOne {
			b.WriteString(",1\n")
		} else {
			b.WriteString(",-1\n")
		}
	}
	listing := filepath.Join(dir, fmt.Sprintf("%s-%v.csv", split, unsureOne))
	if err := os.WriteFile(listing, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return listing, uncertain
}

// TestTrainUncertainIgnore: a listing laid out as CheXpert's read with
// uncertain=ignore (U-Ignore) leaves each uncertain label out of its
// sample's loss. Non-private runs, seeded: a label uncertain in every
// image (Unsure, ignored) gives the model, bit for bit, that a label
// present in every image whose positive term weighs 0 (--pos-weight
// Unsure=0: no term, no gradient) gives — uncertain=zero does not —; a
// private run with rules per column (footwear ignored, the others zero)
// trains, and eval leaves the ignored labels out of its figures, saying
// how many.
func TestTrainUncertainIgnore(t *testing.T) {
	dir := t.TempDir()
	ignoredList, _ := findingsListing(t, dir, data.Train, 600, false)
	oneList, _ := findingsListing(t, dir, data.Train, 600, true)
	testList, uncertain := findingsListing(t, dir, data.Test, 300, false)
	train := func(spec, out string, extra ...string) string {
		t.Helper()
		args := append([]string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", spec, "--num-classes", "4",
			"--epochs", "2", "--batch-size", "100", "--lr", "0.02", "--resize", "stretch", "--norm", "fmnist", "--seed", "1", "--quiet", "--out", out}, extra...)
		o, e, code := run(t, args...)
		if code != 0 {
			t.Fatalf("train %v: exit %d: %s\n%s", extra, code, e, o)
		}
		return o
	}
	ignored, weightless, zero := filepath.Join(dir, "ignored.onnx"), filepath.Join(dir, "weightless.onnx"), filepath.Join(dir, "zero.onnx")
	cols := ":labels=upper..Unsure"
	train("csv:"+ignoredList+cols+":uncertain=ignore", ignored, "--mode", "nondp", "--non-private")
	train("csv:"+oneList+cols+":uncertain=ignore", weightless, "--mode", "nondp", "--non-private", "--pos-weight", "Unsure=0")
	train("csv:"+ignoredList+cols+":uncertain=zero", zero, "--mode", "nondp", "--non-private")
	load := func(path string) *onnx.Model {
		m, err := onnx.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b, c := load(ignored), load(weightless), load(zero)
	differ := 0
	for i, init := range a.Proto.Graph.Initializer {
		if !proto.Equal(init, b.Proto.Graph.Initializer[i]) {
			t.Errorf("initializer %s: Unsure ignored everywhere is not Unsure weighing nothing", init.GetName())
		}
		if !proto.Equal(init, c.Proto.Graph.Initializer[i]) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("uncertain=zero gives the model uncertain=ignore gives")
	}
	// Unsure uncertain against the soft target 0.6 (label smoothing
	// regularization): said, recorded, and another model than ignore's —
	// its row of the head pulled towards logit 0.6 where ignore's is not
	// moved at all.
	soft := filepath.Join(dir, "soft.onnx")
	if o := train("csv:"+ignoredList+cols+":uncertain=ignore,Unsure=0.6", soft, "--mode", "nondp", "--non-private"); !strings.Contains(o, "uncertain labels against soft targets (Unsure=0.6") {
		t.Errorf("the log does not give the soft target:\n%s", o)
	}
	if md := metadata(t, soft)["dpfinetune.uncertain_targets"]; md != "[0,0,0,0.6]" {
		t.Errorf("metadata uncertain_targets %q", md)
	}
	differ = 0
	for i, init := range a.Proto.Graph.Initializer {
		if !proto.Equal(init, load(soft).Proto.Graph.Initializer[i]) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("a soft target gives the model uncertain=ignore gives")
	}
	// A private run, a rule per column: footwear's -1 ignored, the
	// others' absent.
	private := filepath.Join(dir, "private.onnx")
	test := "csv:" + testList + cols + ":uncertain=zero,footwear=ignore"
	o := train("csv:"+ignoredList+cols+":uncertain=zero,footwear=ignore", private, "--epsilon", "8", "--epochs", "6", "--test-data", test)
	if !strings.Contains(o, "200 of the training images' 2400 labels ignored") {
		t.Errorf("the log does not say 200 labels are ignored:\n%s", o)
	}
	ev := evalJSON(t, private, test)
	if ev.IgnoredLabels != int64(uncertain) || ev.PerClass[1].Support == 0 || ev.AUC == nil || *ev.AUC < 0.8 {
		t.Errorf("eval: %d labels ignored (want %d), footwear %+v, AUC %v", ev.IgnoredLabels, uncertain, ev.PerClass[1], ev.AUC)
	}
	t.Logf("private run: AUC %.4f, mAP %.4f, labels right %.4f, %d labels ignored", *ev.AUC, *ev.MAP, ev.Accuracy, ev.IgnoredLabels)
	for j, c := range ev.PerClass[:3] { // Unsure: absent from every image, no AUC
		if c.AUC == nil || c.AUCCI == nil || !(c.AUCCI[0] <= *c.AUC && *c.AUC <= c.AUCCI[1] && c.AUCCI[1]-c.AUCCI[0] < 0.2) {
			t.Errorf("label %d: AUC %v, its 95 %% interval %v", j, c.AUC, c.AUCCI)
		}
	}
	if ev.PerClass[3].AUC != nil || ev.PerClass[3].AUCCI != nil {
		t.Errorf("Unsure, absent from every image: AUC %v, interval %v", ev.PerClass[3].AUC, ev.PerClass[3].AUCCI)
	}
	// Read with Unsure ignored too, as in training: known in no image, it
	// is in none of the means (no NaN).
	all := evalJSON(t, private, "csv:"+testList+cols+":uncertain=ignore")
	if all.IgnoredLabels != int64(uncertain+300) || math.IsNaN(all.BalancedAccuracy) || math.IsNaN(all.MacroF1) || all.MacroF1 <= ev.MacroF1 {
		t.Errorf("Unsure ignored: %d labels ignored, balanced %v, macro F1 %v (%v with Unsure absent)", all.IgnoredLabels, all.BalancedAccuracy, all.MacroF1, ev.MacroF1)
	}
	o, _, _ = run(t, "eval", "--model", private, "--data", test)
	for _, want := range []string{fmt.Sprintf("ignored:  %d of the 1200 labels", uncertain), "95 % CI", "DeLong's method"} {
		if !strings.Contains(o, want) {
			t.Errorf("eval does not say %q:\n%s", want, o)
		}
	}
	// Read as zero, the same test data has no label ignored, and as many
	// footwear images (a -1 is not one either way).
	if z := evalJSON(t, private, "csv:"+testList+cols+":uncertain=zero"); z.IgnoredLabels != 0 || z.PerClass[1].Support != ev.PerClass[1].Support {
		t.Errorf("uncertain=zero: %d labels ignored, footwear %+v", z.IgnoredLabels, z.PerClass[1])
	}
}
