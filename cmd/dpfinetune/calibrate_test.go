package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestCalibrate: calibrate fits a temperature on a trained CNN's test
// split and writes the model with its logits divided by it — what eval
// then measures is what calibrate reported (the loss and ECE after, the
// accuracy unmoved), the calibrated model's logits are the model's over
// the temperature in our runtime and in onnxruntime —; calibrating the
// calibrated model again finds a temperature of 1 and composes into the
// one Div; bad command lines are refused.
func TestCalibrate(t *testing.T) {
	dir := t.TempDir()
	model, calibrated, again := filepath.Join(dir, "cnn.onnx"), filepath.Join(dir, "calibrated.onnx"), filepath.Join(dir, "again.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", fmnist, "--non-private", "--epochs", "2",
		"--batch-size", "64", "--lr", "0.01", "--seed", "1", "--quiet", "--out", model); code != 0 {
		t.Fatalf("train: exit %d: %s", code, e)
	}
	calibrate := func(in, out string) calibrateResult {
		t.Helper()
		o, e, code := run(t, "calibrate", "--model", in, "--data", fmnist, "--out", out, "--json")
		var c calibrateResult
		if err := json.Unmarshal([]byte(o), &c); code != 0 || err != nil {
			t.Fatalf("calibrate %s: exit %d (%v): %s%s", in, code, err, o, e)
		}
		return c
	}
	c := calibrate(model, calibrated)
	before, after := evalJSON(t, model, fmnist), evalJSON(t, calibrated, fmnist)
	if c.Examples != before.Samples || c.Temperature == 1 || c.LossAfter >= c.LossBefore || after.Accuracy != before.Accuracy ||
		math.Abs(after.Loss-c.LossAfter) > 1e-6 || math.Abs(before.Loss-c.LossBefore) > 1e-6 ||
		math.Abs(*after.ECE-*c.ECEAfter) > 1e-6 || math.Abs(*before.ECE-*c.ECEBefore) > 1e-6 {
		t.Errorf("calibrate %+v; eval before %v %v %v, after %v %v %v", c, before.Accuracy, before.Loss, *before.ECE, after.Accuracy, after.Loss, *after.ECE)
	}

	// The logits, in our runtime: the model's over the temperature.
	logits := func(path string) ([]float32, []float32, []int) {
		lm, err := loadGraph(path)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := runtime.CompileForBatch(lm.g, 3, []int64{1, 28, 28}, &runtime.Options{ForwardOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		x, shape := plan.Input(0)
		for i := range x {
			x[i] = float32(math.Sin(float64(i) * 0.37))
		}
		if err := plan.Forward(); err != nil {
			t.Fatal(err)
		}
		y, _ := plan.Output(0)
		return append([]float32(nil), x...), append([]float32(nil), y...), shape
	}
	x, raw, shape := logits(model)
	_, cal, _ := logits(calibrated)
	want := make([]float32, len(raw))
	for i, z := range raw {
		want[i] = float32(float64(z) / c.Temperature)
	}
	if rel := numcheck.RelErr(cal, want, 0); rel > 1e-6 {
		t.Errorf("calibrated logits: %.3g from the logits over %v", rel, c.Temperature)
	}

	// Again: a temperature of 1, composed into the one Div.
	c2 := calibrate(calibrated, again)
	m, err := onnx.Load(again)
	if err != nil {
		t.Fatal(err)
	}
	divs := 0
	for _, n := range m.Proto.GetGraph().GetNode() {
		if n.GetName() == "dpfinetune/calibration" {
			divs++
		}
	}
	rec, _ := strconv.ParseFloat(recorded(m, "temperature", ""), 64)
	if math.Abs(c2.Temperature-1) > 1e-3 || divs != 1 || math.Abs(rec/(c.Temperature*c2.Temperature)-1) > 1e-6 {
		t.Errorf("calibrated twice: temperature %v, %d calibration nodes, recorded %v (want %v)", c2.Temperature, divs, rec, c.Temperature*c2.Temperature)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", model, "--data", fmnist}, "--model, --data and --out are required"},
		{[]string{"--model", model, "--data", fmnist, "--out", again, "--batch", "0"}, "--batch must be positive"},
	} {
		if _, e, code := run(t, append([]string{"calibrate"}, tc.args...)...); code != 2 || !strings.Contains(e, tc.want) {
			t.Errorf("calibrate %v: exit %d: %s", tc.args, code, e)
		}
	}
	if o, _, code := run(t, "calibrate", "--model", model, "--data", fmnist, "--out", again); code != 0 || !strings.Contains(o, "temperature: ") || !strings.Contains(o, "loss:        ") {
		t.Errorf("calibrate's text: exit %d: %s", code, o)
	}

	// onnxruntime runs the calibrated model as we do.
	sh := make([]int64, len(shape))
	for i, d := range shape {
		sh[i] = int64(d)
	}
	res := orttest.Run(t, calibrated, map[string]orttest.Tensor{"input": {Shape: sh, Data: x}})
	for _, out := range res {
		if rel := numcheck.RelErr(cal, out.Data, 0); rel > 1e-5 {
			t.Errorf("onnxruntime vs ours on the calibrated model: %.3g", rel)
		}
	}
}
