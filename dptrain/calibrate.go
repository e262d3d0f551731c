package dptrain

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// Calibration is a temperature fitted to a model's logits on a dataset
// (Evaluator.FitTemperature) and what it does there.
type Calibration struct {
	// Temperature is T: the calibrated logits are the logits over T.
	Temperature float64 `json:"temperature"`
	// Examples counts the examples it was fitted on.
	Examples int `json:"examples"`
	// LossBefore and LossAfter are the mean loss (the softmax
	// cross-entropy; a multi-label model's mean binary cross-entropy of
	// its labels) at T = 1 and at T.
	LossBefore float64 `json:"loss_before"`
	LossAfter  float64 `json:"loss_after"`
	// ECEBefore and ECEAfter are a single-label model's expected
	// calibration errors (EvalResult.ECE) at T = 1 and at T; nil for a
	// multi-label model.
	ECEBefore *float64 `json:"ece_before,omitempty"`
	ECEAfter  *float64 `json:"ece_after,omitempty"`
}

// Bounds of the inverse temperature β = 1/T a fit accepts: beyond them
// the data do not pin a temperature down (logits that separate every
// example, or that know nothing).
const (
	maxInverseTemperature = 1e4
	minInverseTemperature = 1e-4
)

// FitTemperature fits the temperature T that minimizes the model's mean
// loss on v, the logits divided by T (Guo et al. 2017's temperature
// scaling): one number, so that no decision moves — not the most
// probable class, nor a label's side of ½ — nor a two-class or
// multi-label model's AUC (a monotone map of each score; the classes'
// AUCs against the rest of more classes may move a little), while the
// probabilities become as sure as the model is right. A single-label
// model's loss is the softmax cross-entropy; a multi-label model's
// (SetMultiLabel) the binary cross-entropy of its labels, those a sample
// ignores left out. The loss is convex in 1/T; Newton's method with a
// backtracking line search finds its minimum. The data must not be
// separated by the logits (every example right by a margin: the loss
// falls as T goes to 0) nor be scored no better than by chance (T goes to
// infinity): both are errors.
func (ev *Evaluator) FitTemperature(v data.Dataset) (*Calibration, error) {
	n := v.Len()
	if n == 0 {
		return nil, errors.New("no examples to calibrate on")
	}
	if int64(n)*int64(ev.k) > maxGroupedFloats {
		return nil, fmt.Errorf("a calibration keeps every example's logits: %d examples of %d logits is more than %d; calibrate on a part of the data (:limit=N)", n, ev.k, maxGroupedFloats)
	}
	e := newExamples(n, ev.k, ev.multiLabel)
	if err := ev.Losses(v, func(i int, label int64, logits []float32, loss float64) {
		e.set(i, label, ev.truth, ev.ignored, logits, loss)
	}); err != nil {
		return nil, err
	}
	return e.fitTemperature()
}

// fitTemperature fits the temperature to the kept examples.
func (e *examples) fitTemperature() (*Calibration, error) {
	// The loss is convex in β = 1/T: its minimum is at some β > 0 unless
	// its slope is never negative past 0 (at β = 0 already not: chance
	// does as well) or never positive (every example's logits on its
	// label's side: the loss falls to its infimum as β grows).
	if _, g0, _ := e.temperatureLoss(0); g0 >= 0 {
		return nil, fmt.Errorf("the logits score the %d calibration examples no better than chance: the loss keeps falling as the temperature grows; no temperature calibrates this model", e.n)
	}
	if e.separated() {
		return nil, fmt.Errorf("the logits separate the %d calibration examples (every one right, by a margin): the loss keeps falling as the temperature goes to 0; calibrate on more, or harder, data", e.n)
	}
	beta := 1.0
	f, g, h := e.temperatureLoss(beta)
	c := &Calibration{Examples: e.n, LossBefore: f}
	for it := 0; it < 100 && math.Abs(g) > 1e-12*(1+math.Abs(f)); it++ {
		if !(h > 0) {
			break // flat: every logit equal, no temperature to fit
		}
		step := -g / h
		// Backtracking: the Newton step halved until the loss falls,
		// β kept positive.
		next := beta + step
		var fn, gn, hn float64
		ok := false
		for try := 0; try < 60; try++ {
			if next > 0 {
				if fn, gn, hn = e.temperatureLoss(next); fn <= f {
					ok = true
					break
				}
			}
			step /= 2
			next = beta + step
		}
		if !ok {
			break
		}
		done := math.Abs(next-beta) <= 1e-13*beta
		beta, f, g, h = next, fn, gn, hn
		if beta > maxInverseTemperature {
			return nil, fmt.Errorf("the logits separate the %d calibration examples (every one right, by a margin): the loss keeps falling as the temperature goes to 0; calibrate on more, or harder, data", e.n)
		}
		if beta < minInverseTemperature {
			return nil, fmt.Errorf("the logits score the %d calibration examples no better than chance: the loss keeps falling as the temperature grows; no temperature calibrates this model", e.n)
		}
		if done {
			break
		}
	}
	c.Temperature, c.LossAfter = 1/beta, f
	if !e.multi {
		c.ECEBefore, c.ECEAfter = e.ece(1), e.ece(beta)
	}
	return c, nil
}

// separated reports whether every example's logits are on its label's
// side — a single-label example's label's logit the largest, a
// multi-label example's known labels' logits at or above 0 where they
// apply and at or below where not —: then the loss's slope in β is
// nowhere positive.
func (e *examples) separated() bool {
	k := e.k
	for i := range e.n {
		row := e.logits[i*k : (i+1)*k]
		if !e.multi {
			zy := row[e.labels[i]]
			for _, z := range row {
				if z > zy {
					return false
				}
			}
			continue
		}
		set, ign := e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w]
		for j, z := range row {
			if labelset.Has(ign, j) {
				continue
			}
			if on := labelset.Has(set, j); on && z < 0 || !on && z > 0 {
				return false
			}
		}
	}
	return true
}

// temperatureLoss is the mean loss of the examples' logits times beta,
// with its first and second derivatives in beta.
func (e *examples) temperatureLoss(beta float64) (f, g, h float64) {
	k := e.k
	if e.multi {
		// Each sample's Σⱼ softplus(βz) − tβz over its known labels, over
		// k (the multi-label head's loss): d/dβ = (σ(βz) − t)·z,
		// d²/dβ² = σ(βz)(1 − σ(βz))·z².
		for i := range e.n {
			set, ign := e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w]
			for j, z := range e.logits[i*k : (i+1)*k] {
				if labelset.Has(ign, j) {
					continue
				}
				x := beta * float64(z)
				t := 0.0
				if labelset.Has(set, j) {
					t = 1
				}
				s := sigmoid(x)
				f += max(x, 0) + math.Log1p(math.Exp(-math.Abs(x))) - t*x
				g += (s - t) * float64(z)
				h += s * (1 - s) * float64(z) * float64(z)
			}
		}
		d := float64(e.n) * float64(k)
		return f / d, g / d, h / d
	}
	// Each sample's log Σ exp(βz) − βz_y: d/dβ = E_p[z] − z_y and
	// d²/dβ² = Var_p[z], p the softmax of βz.
	for i := range e.n {
		row := e.logits[i*k : (i+1)*k]
		mx := math.Inf(-1)
		for _, z := range row {
			mx = math.Max(mx, beta*float64(z))
		}
		var se, m1, m2 float64
		for _, z := range row {
			p := math.Exp(beta*float64(z) - mx)
			se += p
			m1 += p * float64(z)
			m2 += p * float64(z) * float64(z)
		}
		m1, m2 = m1/se, m2/se
		zy := float64(row[e.labels[i]])
		f += mx + math.Log(se) - beta*zy
		g += m1 - zy
		h += max(m2-m1*m1, 0)
	}
	d := float64(e.n)
	return f / d, g / d, h / d
}

// ece is a single-label model's expected calibration error
// (EvalResult.ECE) with its logits times beta.
func (e *examples) ece(beta float64) *float64 {
	m := newMetrics(e.n, e.k)
	row := make([]float32, e.k)
	for i := range e.n {
		for j, z := range e.logits[i*e.k : (i+1)*e.k] {
			row[j] = float32(beta * float64(z))
		}
		m.add(i, e.labels[i], row, 0)
	}
	return m.result().ECE
}

// TemperatureInit names the initializer ApplyTemperature divides a model's
// logits by.
const TemperatureInit = "dpfinetune.temperature"

// ApplyTemperature divides the logits of model p by t: a Div by a scalar
// initializer (TemperatureInit) before the first output's Softmax or
// LogSoftmax where it ends in one, else on the output itself (its
// producer's output renamed, every reader of it reading the uncalibrated
// logits as before). A model calibrated before has its temperature
// multiplied by t instead: the fits compose. The output must be float32.
// The temperature is recorded in the metadata ("temperature").
func ApplyTemperature(p *onnxpb.ModelProto, t float64) error {
	if !(t > 0) || math.IsInf(t, 0) {
		return fmt.Errorf("temperature %v: want a positive number", t)
	}
	gp := p.GetGraph()
	if gp == nil || len(gp.Output) == 0 {
		return errors.New("the model has no graph output to calibrate")
	}
	total := t
	if old := findInit(gp, TemperatureInit); old != nil {
		if len(old.FloatData) != 1 {
			return fmt.Errorf("initializer %q is not one float: the model's calibration cannot be composed", TemperatureInit)
		}
		total = float64(old.FloatData[0]) * t
		old.FloatData[0] = float32(total)
		setMeta(p, "temperature", fmt.Sprint(float32(total)))
		return nil
	}
	out := gp.Output[0]
	if et := out.GetType().GetTensorType().GetElemType(); et != int32(onnxpb.TensorProto_FLOAT) {
		return fmt.Errorf("output %q is of element type %s: calibrate a float32 model", out.GetName(), onnxpb.TensorProto_DataType(et))
	}
	for _, op := range p.OpsetImport {
		if (op.GetDomain() == "" || op.GetDomain() == "ai.onnx") && op.GetVersion() < 7 {
			return fmt.Errorf("opset %d: a scalar Div broadcasts from opset 7", op.GetVersion())
		}
	}
	name := out.GetName()
	producer := -1
	for i, n := range gp.Node {
		for _, o := range n.Output {
			if o == name {
				producer = i
			}
		}
	}
	if producer < 0 {
		return fmt.Errorf("output %q is no node's output: nothing to calibrate", name)
	}
	div := &onnxpb.NodeProto{OpType: proto.String("Div"), Name: proto.String("dpfinetune/calibration")}
	switch {
	case (gp.Node[producer].GetOpType() == "Softmax" || gp.Node[producer].GetOpType() == "LogSoftmax"):
		// The activation's input divided: its logits.
		sm := gp.Node[producer]
		in := sm.Input[0]
		scaled := uniqueName(gp, in+"/calibrated")
		div.Input, div.Output = []string{in, TemperatureInit}, []string{scaled}
		sm.Input[0] = scaled
		gp.Node = append(gp.Node[:producer], append([]*onnxpb.NodeProto{div}, gp.Node[producer:]...)...)
	default:
		// The output renamed where it is made and read, the Div writing
		// it.
		raw := uniqueName(gp, name+"/uncalibrated")
		for _, n := range gp.Node {
			for j, o := range n.Output {
				if o == name {
					n.Output[j] = raw
				}
			}
			for j, in := range n.Input {
				if in == name {
					n.Input[j] = raw
				}
			}
		}
		div.Input, div.Output = []string{raw, TemperatureInit}, []string{name}
		gp.Node = append(gp.Node, div)
	}
	gp.Initializer = append(gp.Initializer, &onnxpb.TensorProto{Name: proto.String(TemperatureInit),
		DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: []float32{float32(total)}})
	setMeta(p, "temperature", fmt.Sprint(float32(total)))
	return nil
}

// findInit returns the graph's initializer called name, or nil.
func findInit(gp *onnxpb.GraphProto, name string) *onnxpb.TensorProto {
	for _, t := range gp.Initializer {
		if t.GetName() == name {
			return t
		}
	}
	return nil
}

// uniqueName returns base, or base with a number, that no value of the
// graph is called.
func uniqueName(gp *onnxpb.GraphProto, base string) string {
	used := map[string]bool{}
	for _, n := range gp.Node {
		for _, s := range append(append([]string{}, n.Input...), n.Output...) {
			used[s] = true
		}
	}
	for _, v := range gp.Input {
		used[v.GetName()] = true
	}
	for _, t := range gp.Initializer {
		used[t.GetName()] = true
	}
	name := base
	for i := 2; used[name]; i++ {
		name = fmt.Sprintf("%s%d", base, i)
	}
	return name
}

// setMeta sets one metadata key (MetaPrefix + key) of the model.
func setMeta(p *onnxpb.ModelProto, key, value string) {
	for _, e := range p.MetadataProps {
		if e.GetKey() == MetaPrefix+key {
			e.Value = proto.String(value)
			return
		}
	}
	p.MetadataProps = append(p.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(MetaPrefix + key), Value: proto.String(value)})
}
