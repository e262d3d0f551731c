package dptrain

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// Calibration is a temperature fitted to a model's logits on a dataset
// (Evaluator.FitTemperature) and what it does there.
type Calibration struct {
	// Temperature is T: the calibrated logits are the logits over T.
	Temperature float64 `json:"temperature,omitempty"`
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
	// LabelECEBefore and LabelECEAfter are a multi-label model's mean
	// label calibration errors (EvalResult.LabelECE) before the fit and
	// after it; nil for a single-label model.
	LabelECEBefore *float64 `json:"label_ece_before,omitempty"`
	LabelECEAfter  *float64 `json:"label_ece_after,omitempty"`
	// Labels are a per-label fit's maps (Evaluator.FitLabelScaling), one
	// a label; Temperature is then 0.
	Labels []LabelScale `json:"labels,omitempty"`
}

// LabelScale is one label's map of a per-label fit: its calibrated logit
// is Scale·z + Shift.
type LabelScale struct {
	Label     int     `json:"label"`
	Scale     float64 `json:"scale"`
	Shift     float64 `json:"shift"`
	Positives int     `json:"positives"`
	Negatives int     `json:"negatives"`
	// Left, where set, says why the label was left as it was (scale 1,
	// shift 0).
	Left string `json:"left,omitempty"`
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
	e, err := ev.keep(v, "a calibration")
	if err != nil {
		return nil, err
	}
	return e.fitTemperature()
}

// FitLabelScaling fits each label of a multi-label model (SetMultiLabel)
// its own map of the logit, z ↦ a·z + b (Platt scaling, 1999): the
// logistic regression of the label on its logit over the examples that
// know it, against Platt's targets — (N₊ + 1)/(N₊ + 2) for a positive,
// 1/(N₋ + 2) for a negative, so that a label the logits separate still
// has a finite fit (scikit-learn's sigmoid calibration). Unlike a
// temperature it moves a label's decisions at ½ (the shift corrects a
// bias: a --pos-weight's inflated probabilities), never its AUC (a > 0).
// A label without positives or negatives to fit on, or whose logits rank
// its negatives above its positives (a ≤ 0), is left as it was, and
// Calibration.Labels says so.
func (ev *Evaluator) FitLabelScaling(v data.Dataset) (*Calibration, error) {
	if !ev.multiLabel {
		return nil, errors.New("a per-label calibration is a multi-label model's; a single-label model's is a temperature")
	}
	e, err := ev.keep(v, "a calibration")
	if err != nil {
		return nil, err
	}
	return e.fitLabelScaling(), nil
}

// fitLabelScaling fits each label's Platt map to the kept examples.
func (e *examples) fitLabelScaling() *Calibration {
	c := &Calibration{Examples: e.n, Labels: make([]LabelScale, e.k)}
	scale, shift := make([]float64, e.k), make([]float64, e.k)
	var z []float64
	var pos []bool
	for j := range e.k {
		z, pos = z[:0], pos[:0]
		for i := range e.n {
			if !labelset.Has(e.ignored[i*e.w:(i+1)*e.w], j) {
				z, pos = append(z, float64(e.logits[i*e.k+j])), append(pos, labelset.Has(e.truth[i*e.w:(i+1)*e.w], j))
			}
		}
		l := &c.Labels[j]
		l.Label, l.Scale = j, 1
		for _, p := range pos {
			if p {
				l.Positives++
			} else {
				l.Negatives++
			}
		}
		if l.Positives == 0 || l.Negatives == 0 {
			l.Left = "no positives and negatives to fit on"
		} else if a, b := plattFit(z, pos, l.Positives, l.Negatives); !(a > 0) {
			l.Left = "its logits rank its negatives above its positives here"
		} else {
			l.Scale, l.Shift = a, b
		}
		scale[j], shift[j] = l.Scale, l.Shift
	}
	c.LossBefore, c.LossAfter = e.mappedLoss(nil, nil), e.mappedLoss(scale, shift)
	c.LabelECEBefore, c.LabelECEAfter = e.labelECE(1, nil, nil), e.labelECE(1, scale, shift)
	return c
}

// plattFit is the logistic regression of pos on z against Platt's
// targets (np positives, nn negatives): the a, b minimizing
// Σ softplus(a·z + b) − t·(a·z + b), by Newton's method from the identity
// with a backtracking line search (the objective is convex).
func plattFit(z []float64, pos []bool, np, nn int) (a, b float64) {
	hi, lo := (float64(np)+1)/(float64(np)+2), 1/(float64(nn)+2)
	obj := func(a, b float64) (f, ga, gb, haa, hab, hbb float64) {
		for i, x := range z {
			t := lo
			if pos[i] {
				t = hi
			}
			u := a*x + b
			p := sigmoid(u)
			f += softplus(u) - t*u
			ga += (p - t) * x
			gb += p - t
			w := p * (1 - p)
			haa += w * x * x
			hab += w * x
			hbb += w
		}
		return
	}
	a, b = 1, 0
	f, ga, gb, haa, hab, hbb := obj(a, b)
	for it := 0; it < 200; it++ {
		det := haa*hbb - hab*hab
		if !(det > 0) || math.Abs(ga)+math.Abs(gb) < 1e-12*(1+math.Abs(f)) {
			break
		}
		da, db := -(hbb*ga-hab*gb)/det, -(haa*gb-hab*ga)/det
		ok := false
		for try := 0; try < 60; try++ {
			if fn, gan, gbn, haan, habn, hbbn := obj(a+da, b+db); fn <= f {
				a, b, f, ga, gb, haa, hab, hbb = a+da, b+db, fn, gan, gbn, haan, habn, hbbn
				ok = true
				break
			}
			da, db = da/2, db/2
		}
		if !ok || math.Abs(da)+math.Abs(db) < 1e-14*(1+math.Abs(a)+math.Abs(b)) {
			break
		}
	}
	return a, b
}

// mappedLoss is the multi-label loss of the kept examples, each label's
// logit mapped to scale[j]·z + shift[j] (nil: as it is).
func (e *examples) mappedLoss(scale, shift []float64) float64 {
	row := make([]float64, e.k)
	var sum float64
	for i := range e.n {
		for j, z := range e.logits[i*e.k : (i+1)*e.k] {
			row[j] = float64(z)
			if scale != nil {
				row[j] = scale[j]*float64(z) + shift[j]
			}
		}
		sum += sigmoidLoss(row, e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w])
	}
	return sum / float64(e.n)
}

// fitTemperature fits the temperature to the kept examples.
func (e *examples) fitTemperature() (*Calibration, error) {
	// The loss is convex in β = 1/T: its minimum is at some β > 0 unless
	// its slope is never negative past 0 (at β = 0 already not: chance
	// does as well) or never positive (every example's logits on its
	// label's side: the loss falls to its infimum as β grows).
	chance := fmt.Errorf("the logits score the %d calibration examples no better than chance: the loss keeps falling as the temperature grows; no temperature calibrates this model", e.n)
	separated := fmt.Errorf("the logits separate the %d calibration examples (every one right, by a margin): the loss keeps falling as the temperature goes to 0; calibrate on more, or harder, data", e.n)
	if _, g0, _ := e.temperatureLoss(0); g0 >= 0 {
		return nil, chance
	}
	if e.separated() {
		return nil, separated
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
			return nil, separated
		}
		if beta < minInverseTemperature {
			return nil, chance
		}
		if done {
			break
		}
	}
	c.Temperature, c.LossAfter = 1/beta, f
	if e.multi {
		c.LabelECEBefore, c.LabelECEAfter = e.labelECE(1, nil, nil), e.labelECE(beta, nil, nil)
	} else {
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
				f += softplus(x) - t*x
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

// labelECE is a multi-label model's mean label calibration error
// (EvalResult.LabelECE) with each label's logit mapped to scale[j]·z +
// shift[j], or times beta where scale is nil.
func (e *examples) labelECE(beta float64, scale, shift []float64) *float64 {
	m := newLabelMetrics(e.n, e.k)
	row := make([]float32, e.k)
	for i := range e.n {
		for j, z := range e.logits[i*e.k : (i+1)*e.k] {
			v := beta * float64(z)
			if scale != nil {
				v = scale[j]*float64(z) + shift[j]
			}
			row[j] = float32(v)
		}
		m.add(i, e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w], row, 0)
	}
	return m.result().LabelECE
}

// TemperatureInit names the initializer ApplyTemperature divides a model's
// logits by.
const TemperatureInit = rewrite.OwnPrefix + "temperature"

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
	if old := findInit(gp, TemperatureInit); old != nil {
		if len(old.FloatData) != 1 {
			return fmt.Errorf("initializer %q is not one float: the model's calibration cannot be composed", TemperatureInit)
		}
		old.FloatData[0] = float32(float64(old.FloatData[0]) * t)
		setMeta(p, "temperature", fmt.Sprint(old.FloatData[0]))
		return nil
	}
	producer, err := logitsProducer(p)
	if err != nil {
		return err
	}
	div := &onnxpb.NodeProto{OpType: proto.String("Div"), Name: proto.String("dpfinetune/calibration")}
	if op := gp.Node[producer].GetOpType(); op == "Softmax" || op == "LogSoftmax" {
		// The activation's input divided: its logits.
		sm := gp.Node[producer]
		in := sm.Input[0]
		scaled := uniqueName(gp, in+"/calibrated")
		div.Input, div.Output = []string{in, TemperatureInit}, []string{scaled}
		sm.Input[0] = scaled
		gp.Node = slices.Insert(gp.Node, producer, div)
	} else {
		raw := renameOutput(gp, "/uncalibrated")
		div.Input, div.Output = []string{raw, TemperatureInit}, []string{gp.Output[0].GetName()}
		gp.Node = append(gp.Node, div)
	}
	gp.Initializer = append(gp.Initializer, floatInit(TemperatureInit, nil, float32(t)))
	setMeta(p, "temperature", fmt.Sprint(float32(t)))
	return nil
}

// Initializers ApplyLabelScaling scales and shifts a multi-label model's
// logits by.
const (
	LabelScaleInit = rewrite.OwnPrefix + "label_scale"
	LabelShiftInit = rewrite.OwnPrefix + "label_shift"
)

// ApplyLabelScaling maps each logit z_j of a multi-label model p to
// scale[j]·z_j + shift[j] (Platt scaling: LabelScaling's fit), a Mul and
// an Add by initializers of one value a label (LabelScaleInit,
// LabelShiftInit) writing the first output, its producer's output renamed
// (every reader of it reading the logits as before). A model scaled before
// has the maps composed. The output must be float32, of len(scale) logits.
// The scales and shifts are recorded in the metadata ("label_scale",
// "label_shift").
func ApplyLabelScaling(p *onnxpb.ModelProto, scale, shift []float64) error {
	if len(scale) != len(shift) || len(scale) == 0 {
		return fmt.Errorf("%d scales and %d shifts: want one each a label", len(scale), len(shift))
	}
	for j := range scale {
		if !(scale[j] > 0) || math.IsInf(scale[j], 0) || math.IsNaN(shift[j]) || math.IsInf(shift[j], 0) {
			return fmt.Errorf("label %d: scale %v and shift %v: want a positive scale and a finite shift", j, scale[j], shift[j])
		}
	}
	gp := p.GetGraph()
	if gp == nil || len(gp.Output) == 0 {
		return errors.New("the model has no graph output to calibrate")
	}
	a, b := make([]float32, len(scale)), make([]float32, len(scale))
	oldA, oldB := findInit(gp, LabelScaleInit), findInit(gp, LabelShiftInit)
	switch {
	case oldA != nil && oldB != nil:
		if len(oldA.FloatData) != len(scale) || len(oldB.FloatData) != len(scale) {
			return fmt.Errorf("initializers %q and %q are not %d floats: the model's calibration cannot be composed", LabelScaleInit, LabelShiftInit, len(scale))
		}
		// s·(a·z + b) + t = (s·a)·z + (s·b + t).
		for j := range scale {
			oldA.FloatData[j] = float32(scale[j] * float64(oldA.FloatData[j]))
			oldB.FloatData[j] = float32(scale[j]*float64(oldB.FloatData[j]) + shift[j])
		}
		copy(a, oldA.FloatData)
		copy(b, oldB.FloatData)
	case oldA != nil || oldB != nil:
		return fmt.Errorf("the model has one of %q and %q: its calibration cannot be composed", LabelScaleInit, LabelShiftInit)
	default:
		if _, err := logitsProducer(p); err != nil {
			return err
		}
		for j := range scale {
			a[j], b[j] = float32(scale[j]), float32(shift[j])
		}
		raw := renameOutput(gp, "/unscaled")
		scaled := uniqueName(gp, raw+"/scaled")
		k := []int64{int64(len(scale))}
		gp.Node = append(gp.Node,
			&onnxpb.NodeProto{OpType: proto.String("Mul"), Name: proto.String("dpfinetune/label_scale"), Input: []string{raw, LabelScaleInit}, Output: []string{scaled}},
			&onnxpb.NodeProto{OpType: proto.String("Add"), Name: proto.String("dpfinetune/label_shift"), Input: []string{scaled, LabelShiftInit}, Output: []string{gp.Output[0].GetName()}})
		gp.Initializer = append(gp.Initializer, floatInit(LabelScaleInit, k, a...), floatInit(LabelShiftInit, k, b...))
	}
	setMeta(p, "label_scale", fmt.Sprint(a))
	setMeta(p, "label_shift", fmt.Sprint(b))
	return nil
}

// logitsProducer returns the index of the node that writes the model's
// first output, checking that the output is float32 and that the opset
// broadcasts.
func logitsProducer(p *onnxpb.ModelProto) (int, error) {
	gp := p.GetGraph()
	out := gp.Output[0]
	if et := out.GetType().GetTensorType().GetElemType(); et != int32(onnxpb.TensorProto_FLOAT) {
		return 0, fmt.Errorf("output %q is of element type %s: calibrate a float32 model", out.GetName(), onnxpb.TensorProto_DataType(et))
	}
	for _, op := range p.OpsetImport {
		if (op.GetDomain() == "" || op.GetDomain() == "ai.onnx") && op.GetVersion() < 7 {
			return 0, fmt.Errorf("opset %d: the calibration's broadcasting operators need opset 7", op.GetVersion())
		}
	}
	producer := -1
	for i, n := range gp.Node {
		if slices.Contains(n.Output, out.GetName()) {
			producer = i
		}
	}
	if producer < 0 {
		return 0, fmt.Errorf("output %q is no node's output: nothing to calibrate", out.GetName())
	}
	return producer, nil
}

// renameOutput renames the graph's first output where it is written and
// read to a new name (the output's and suffix) and returns it: the
// caller's nodes then write the output from it, every other reader
// reading it as before.
func renameOutput(gp *onnxpb.GraphProto, suffix string) string {
	name := gp.Output[0].GetName()
	raw := uniqueName(gp, name+suffix)
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
	return raw
}

// floatInit is a float32 initializer of the given shape (nil: a scalar).
func floatInit(name string, dims []int64, v ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: v}
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
