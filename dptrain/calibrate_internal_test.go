package dptrain

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// TestFitTemperature holds the fitted temperatures of the golden cases
// (every single-label and multi-label case of testdata/metrics, labels
// ignored included) to scipy's bounded search over log T on the same
// loss (testdata/metrics/temperature.json), to 1e-6 relative, and the
// losses and calibration errors before and after.
func TestFitTemperature(t *testing.T) {
	temps := readCases[struct {
		File        string   `json:"file"`
		Name        string   `json:"name"`
		Temperature float64  `json:"temperature"`
		LossBefore  float64  `json:"loss_before"`
		LossAfter   float64  `json:"loss_after"`
		ECEBefore   *float64 `json:"ece_before"`
		ECEAfter    *float64 `json:"ece_after"`
		LabelBefore *float64 `json:"label_ece_before"`
		LabelAfter  *float64 `json:"label_ece_after"`
	}](t, "temperature.json", 14)
	byName := goldenByName(t)
	for _, w := range temps {
		t.Run(w.File+"/"+w.Name, func(t *testing.T) {
			c, ok := byName[w.File+"/"+w.Name]
			if !ok {
				t.Fatal("no such case")
			}
			c.Samples, c.Groups = 1, make([]int32, len(c.Labels))
			e, _ := c.examples(t)
			got, err := e.fitTemperature()
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.Temperature/w.Temperature-1) > 1e-6 {
				t.Errorf("temperature %.9g, scipy's %.9g", got.Temperature, w.Temperature)
			}
			near := nearSklearn(t)
			near("loss before", got.LossBefore, w.LossBefore)
			near("loss after", got.LossAfter, w.LossAfter)
			if got.LossAfter > got.LossBefore || got.Examples != len(c.Labels) {
				t.Errorf("%+v", got)
			}
			if (got.ECEBefore == nil) != (w.ECEBefore == nil) {
				t.Fatalf("ECE %v, want %v", got.ECEBefore, w.ECEBefore)
			}
			if w.ECEBefore != nil {
				near("ECE before", *got.ECEBefore, *w.ECEBefore)
				near("ECE after", *got.ECEAfter, *w.ECEAfter)
			}
			nearLabelECE(t, got, w.LabelBefore, w.LabelAfter)
		})
	}
}

// TestFitTemperatureRefuses checks that data the logits separate (the
// temperature falls to 0) and logits no better than chance (it grows
// without bound) are refused, saying so.
func TestFitTemperatureRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []int64
		logits [][]float32
		want   string
	}{
		{"separated", []int64{0, 1, 0, 1}, [][]float32{{1, 0}, {0, 1}, {2, 0}, {0, 3}}, "the logits separate the 4 calibration examples"},
		{"wrong", []int64{0, 1, 0, 1}, [][]float32{{0, 1}, {1, 0}, {0, 2}, {3, 0}}, "no better than chance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &groupedCase{K: 2, Labels: tc.labels, Logits: tc.logits, Samples: 1, Groups: make([]int32, 4)}
			e, _ := c.examples(t)
			if _, err := e.fitTemperature(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestApplyTemperature checks the calibration's graph edits: a Div by the
// temperature before a final Softmax (its logits divided), or writing the
// output (every other reader of the output reading the logits as
// before); a second temperature multiplies the first; outputs that are
// not float32, no node's, and temperatures that are not positive are
// refused.
func TestApplyTemperature(t *testing.T) {
	vi := func(name string, et onnxpb.TensorProto_DataType) *onnxpb.ValueInfoProto {
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(et))}}}}
	}
	node := func(op, in, out string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Input: []string{in}, Output: []string{out}}
	}
	model := func(et onnxpb.TensorProto_DataType, outputs []string, nodes ...*onnxpb.NodeProto) *onnxpb.ModelProto {
		g := &onnxpb.GraphProto{Node: nodes, Input: []*onnxpb.ValueInfoProto{vi("x", et)}}
		for _, o := range outputs {
			g.Output = append(g.Output, vi(o, et))
		}
		return &onnxpb.ModelProto{Graph: g, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}}}
	}
	ops := func(p *onnxpb.ModelProto) string {
		var s []string
		for _, n := range p.Graph.Node {
			s = append(s, n.GetOpType()+"("+strings.Join(n.Input, ",")+")->"+strings.Join(n.Output, ","))
		}
		return strings.Join(s, " ")
	}
	soft := model(onnxpb.TensorProto_FLOAT, []string{"y"}, node("Relu", "x", "z"), node("Softmax", "z", "y"))
	if err := ApplyTemperature(soft, 2); err != nil {
		t.Fatal(err)
	}
	if got, want := ops(soft), "Relu(x)->z Div(z,dpfinetune.temperature)->z/calibrated Softmax(z/calibrated)->y"; got != want {
		t.Errorf("before a Softmax: %s, want %s", got, want)
	}
	if err := ApplyTemperature(soft, 1.5); err != nil {
		t.Fatal(err)
	}
	if init := findInit(soft.Graph, TemperatureInit); len(soft.Graph.Initializer) != 1 || init.FloatData[0] != 3 || strings.Count(ops(soft), "Div") != 1 {
		t.Errorf("composed: %s, initializers %v", ops(soft), soft.Graph.Initializer)
	}
	if v := soft.MetadataProps[0]; v.GetKey() != "dpfinetune.temperature" || v.GetValue() != "3" {
		t.Errorf("metadata %v", soft.MetadataProps)
	}
	// The logits are an output and read on: the reader keeps them.
	read := model(onnxpb.TensorProto_FLOAT, []string{"y", "w"}, node("Relu", "x", "y"), node("Neg", "y", "w"))
	if err := ApplyTemperature(read, 2); err != nil {
		t.Fatal(err)
	}
	if got, want := ops(read), "Relu(x)->y/uncalibrated Neg(y/uncalibrated)->w Div(y/uncalibrated,dpfinetune.temperature)->y"; got != want {
		t.Errorf("an output read on: %s, want %s", got, want)
	}
	for _, tc := range []struct {
		name string
		p    *onnxpb.ModelProto
		t    float64
		want string
	}{
		{"half", model(onnxpb.TensorProto_FLOAT16, []string{"y"}, node("Relu", "x", "y")), 2, "calibrate a float32 model"},
		{"an input", model(onnxpb.TensorProto_FLOAT, []string{"x"}), 2, "is no node's output"},
		{"zero", model(onnxpb.TensorProto_FLOAT, []string{"y"}, node("Relu", "x", "y")), 0, "want a positive number"},
		{"NaN", model(onnxpb.TensorProto_FLOAT, []string{"y"}, node("Relu", "x", "y")), math.NaN(), "want a positive number"},
	} {
		if err := ApplyTemperature(tc.p, tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestFitLabelScaling holds each label's Platt map of the golden
// multi-label cases (testdata/metrics/platt.json: scipy's fit against
// Platt's targets, itself checked against scikit-learn's sigmoid
// calibration) to 1e-6, the labels without positives or negatives left as
// they were, and the loss before and after.
func TestFitLabelScaling(t *testing.T) {
	plats := readCases[struct {
		Name   string `json:"name"`
		Labels []struct {
			Label        int
			Scale, Shift float64
			Left         bool
		} `json:"labels"`
		LossBefore  float64  `json:"loss_before"`
		LossAfter   float64  `json:"loss_after"`
		LabelBefore *float64 `json:"label_ece_before"`
		LabelAfter  *float64 `json:"label_ece_after"`
	}](t, "platt.json", 5)
	cases := map[string]groupedCase{}
	for _, c := range goldenCases(t, "multilabel.json") {
		c.Samples, c.Groups = 1, make([]int32, len(c.Labels))
		cases[c.Name] = c
	}
	for _, w := range plats {
		t.Run(w.Name, func(t *testing.T) {
			c := cases[w.Name]
			e, _ := c.examples(t)
			got := e.fitLabelScaling()
			if len(got.Labels) != len(w.Labels) || got.Temperature != 0 {
				t.Fatalf("%+v", got)
			}
			for j, wl := range w.Labels {
				g := got.Labels[j]
				switch {
				case wl.Left && (g.Left == "" || g.Scale != 1 || g.Shift != 0):
					t.Errorf("label %d: %+v, want it left as it was", j, g)
				case !wl.Left && (g.Left != "" || math.Abs(g.Scale-wl.Scale) > 1e-6*(1+math.Abs(wl.Scale)) || math.Abs(g.Shift-wl.Shift) > 1e-6*(1+math.Abs(wl.Shift))):
					t.Errorf("label %d: %+v, want scale %.9g, shift %.9g", j, g, wl.Scale, wl.Shift)
				}
			}
			near := nearSklearn(t)
			near("loss before", got.LossBefore, w.LossBefore)
			near("loss after", got.LossAfter, w.LossAfter)
			nearLabelECE(t, got, w.LabelBefore, w.LabelAfter)
		})
	}
}

// nearLabelECE checks a calibration's mean label calibration errors
// before and after against the generator's (nil for a single-label one).
func nearLabelECE(t *testing.T, got *Calibration, before, after *float64) {
	t.Helper()
	if (got.LabelECEBefore == nil) != (before == nil) || (got.LabelECEAfter == nil) != (after == nil) {
		t.Fatalf("label ECE %v → %v, want %v → %v", got.LabelECEBefore, got.LabelECEAfter, before, after)
	}
	if before != nil {
		near := nearSklearn(t)
		near("label ECE before", *got.LabelECEBefore, *before)
		near("label ECE after", *got.LabelECEAfter, *after)
	}
}

// TestApplyLabelScaling checks the per-label map's graph edit — a Mul and
// an Add writing the output, its readers reading the logits as before —
// its composition with an earlier one, and its refusals.
func TestApplyLabelScaling(t *testing.T) {
	p := &onnxpb.ModelProto{OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}}, Graph: &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{{OpType: proto.String("Relu"), Input: []string{"x"}, Output: []string{"y"}}},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT))}}}}}}}
	if err := ApplyLabelScaling(p, []float64{2, 0.5}, []float64{-1, 1}); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, n := range p.Graph.Node {
		ops = append(ops, n.GetOpType()+"("+strings.Join(n.Input, ",")+")->"+strings.Join(n.Output, ","))
	}
	if got, want := strings.Join(ops, " "), "Relu(x)->y/unscaled Mul(y/unscaled,dpfinetune.label_scale)->y/unscaled/scaled Add(y/unscaled/scaled,dpfinetune.label_shift)->y"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	// 3·(2z − 1) + 1 = 6z − 2; 1·(z/2 + 1) + 0 = z/2 + 1.
	if err := ApplyLabelScaling(p, []float64{3, 1}, []float64{1, 0}); err != nil {
		t.Fatal(err)
	}
	a, b := findInit(p.Graph, LabelScaleInit), findInit(p.Graph, LabelShiftInit)
	if len(p.Graph.Node) != 3 || fmt.Sprint(a.FloatData, b.FloatData, a.Dims) != "[6 0.5] [-2 1] [2]" {
		t.Errorf("composed: %d nodes, scale %v, shift %v", len(p.Graph.Node), a.FloatData, b.FloatData)
	}
	for _, tc := range []struct {
		scale, shift []float64
		want         string
	}{
		{[]float64{1, 1, 1}, []float64{0, 0, 0}, "are not 3 floats"},
		{[]float64{1}, []float64{0, 0}, "1 scales and 2 shifts"},
		{[]float64{0, 1}, []float64{0, 0}, "want a positive scale"},
		{[]float64{1, 1}, []float64{math.Inf(1), 0}, "a finite shift"},
	} {
		if err := ApplyLabelScaling(p, tc.scale, tc.shift); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, %v: error %v, want %q", tc.scale, tc.shift, err, tc.want)
		}
	}
}
