package dptrain

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// EvalResult is the accuracy, mean loss, confusion matrix and the metrics
// derived from them of a model on a dataset: the JSON form of "dpfinetune
// eval" and the per-epoch test metrics of a run. A prediction is the
// class of the largest logit (the first of equal ones); the probabilities
// are the logits' softmax. The metrics follow scikit-learn's definitions,
// named beside each (testdata/metrics holds its figures on a fixed case).
type EvalResult struct {
	Samples int `json:"samples"`
	// MultiLabel marks a multi-label evaluation (Evaluator.SetMultiLabel):
	// each logit a label decided on its own (its sigmoid above ½, the
	// logit above 0); Accuracy is then the share of right label
	// decisions, ExactMatch the share of samples with every label right,
	// PerClass each label's figures, MacroF1 their F1's mean over every
	// label (that some sample does not ignore: IgnoredLabels),
	// BalancedAccuracy the mean over those labels of each one's
	// balanced accuracy, AUC the mean of the AUCs of the labels with
	// positives and negatives, MAP the mean of the average precisions of
	// the labels with positives; Confusion, Top5, AccuracyCI and ECE are
	// nil.
	MultiLabel bool    `json:"multi_label,omitempty"`
	ExactMatch float64 `json:"exact_match,omitempty"`
	// IgnoredLabels counts the labels the samples ignore (partial label
	// sets: CheXpert's uncertain findings read with uncertain=ignore),
	// left out of every multi-label figure — Accuracy and ExactMatch over
	// the labels known, each label's figures over the samples that know
	// it —, and of the loss's sum (still divided by every label).
	IgnoredLabels int64 `json:"ignored_labels,omitempty"`
	// Thresholds are the evaluation's decision thresholds
	// (Evaluator.SetThresholds): a multi-label model's, each label's
	// sigmoid against its own (nil: ½ for every label), or a two-class
	// model's one, class 1's probability against it (nil: the larger
	// probability decides).
	Thresholds []float64 `json:"thresholds,omitempty"`
	Accuracy   float64   `json:"accuracy"`
	// AccuracyCI is the 95 % Wilson score interval of Accuracy, the
	// examples taken as independent draws: how far a test set this size
	// pins the accuracy down (nil for a multi-label evaluation, whose
	// label decisions are not independent).
	AccuracyCI *[2]float64 `json:"accuracy_ci95,omitempty"`
	Loss       float64     `json:"loss"`
	Confusion  [][]int64   `json:"confusion"` // [true][predicted]
	// Classes names the confusion matrix's rows (the data's classes), when
	// the caller sets it (dpfinetune eval).
	Classes []string `json:"classes,omitempty"`
	// BalancedAccuracy is the mean recall of the classes the data has
	// (balanced_accuracy_score); MacroF1 the mean F1 of the classes the
	// data has or the model predicts, a class never predicted of
	// precision 0 (f1_score, average="macro").
	BalancedAccuracy float64 `json:"balanced_accuracy"`
	MacroF1          float64 `json:"macro_f1"`
	// PerClass holds each class's precision, recall (for two classes,
	// class 1's recall is the sensitivity and class 0's the specificity),
	// F1 and number of examples (support).
	PerClass []ClassMetrics `json:"per_class"`
	// Top5 is the share of examples whose label's logit is among the five
	// largest (top_k_accuracy_score, k = 5), for models of more than five
	// classes.
	Top5 *float64 `json:"top5_accuracy,omitempty"`
	// AUC is the area under the ROC curve of the probabilities: for two
	// classes, of class 1's (roc_auc_score; ranked by z₁ − z₀, its order
	// without float rounding's ties); for more, the mean over the
	// classes of each one's against the rest, where every class has
	// examples (multi_class="ovr", average="macro"). Nil where it is
	// undefined (a class without examples, one class) or the
	// probabilities would take more than maxAUCFloats to keep.
	AUC *float64 `json:"auc,omitempty"`
	// AUCCI is the 95 % interval of AUC by DeLong et al. (1988) — the
	// AUC ± 1.96 standard errors, clipped to [0, 1] —: a two-class
	// model's from each example's share of the pairs it wins (what R's
	// pROC ci.auc(method = "delong") gives); a mean AUC's (more classes,
	// each against the rest; a multi-label evaluation's labels) from the
	// AUCs' DeLong variances and their covariances on the same examples
	// (each example's shares of them summed: delongShares), the examples
	// independent draws. Nil where an AUC of the mean has fewer than two
	// positives or negatives (each label's and class's own interval is
	// ClassMetrics.AUCCI).
	AUCCI *[2]float64 `json:"auc_ci95,omitempty"`
	// MAP is a multi-label evaluation's mean average precision (COCO's
	// and PASCAL VOC's figure for multi-label classification): the mean,
	// over the labels the data has positives of, of each label's average
	// precision (ClassMetrics.AP). Nil otherwise, as AUC is.
	MAP *float64 `json:"map,omitempty"`
	// ECE is the expected calibration error: over 15 bins of equal width
	// of the top probability, the examples' share of each bin times the
	// difference of its accuracy and mean top probability, summed. A
	// private model that is right as often but less sure, or surer, shows
	// here what accuracy hides. Nil for a multi-label evaluation.
	ECE *float64 `json:"ece,omitempty"`
	// Reliability are ECE's bins (a reliability diagram): of each of the
	// 15 equal-width bins of the top probability, its examples, their
	// accuracy and their mean top probability (the confidence). Nil for
	// a multi-label evaluation.
	Reliability []ReliabilityBin `json:"reliability,omitempty"`
	// LabelECE is a multi-label evaluation's mean, over the labels some
	// sample knows, of each label's calibration error (ClassMetrics.ECE);
	// nil otherwise.
	LabelECE *float64 `json:"label_ece,omitempty"`
	// Groups, where set, says the figures are those of groups of
	// examples (Evaluator.RunGrouped: a study's views scored as one),
	// Samples counting the groups.
	Groups *GroupSummary `json:"groups,omitempty"`
	// Bootstrap, where set (Evaluator.Bootstrap), holds the figures'
	// 95 % intervals over resamples of the examples, groups or clusters.
	Bootstrap *BootstrapResult `json:"bootstrap,omitempty"`
	// OperatingPoints, where the caller sets them (dpfinetune eval
	// --operating-point), are the thresholds a rule chose on this
	// evaluation's curves (OperatingPoint): one a label, or class 1's.
	OperatingPoints []OperatingPoint `json:"operating_points,omitempty"`
	// OperatingRule is the rule that chose them (PointRule.String).
	OperatingRule string `json:"operating_rule,omitempty"`

	// roc are the scores Curve ranks (nil: none kept).
	roc *rocScores
}

// ReliabilityBin is one bin of the top probability, [Lo, Hi), of an
// evaluation (EvalResult.Reliability): its examples, the share of them
// predicted right and their mean top probability (0 where it has none).
// Of a label's (ClassMetrics.Reliability), the bin is one of the label's
// probability, Accuracy the share of its examples the label applies to
// and Confidence their mean probability.
type ReliabilityBin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Examples   int     `json:"examples"`
	Accuracy   float64 `json:"accuracy"`
	Confidence float64 `json:"confidence"`
}

// ClassMetrics are one class's figures in an EvalResult — of a
// multi-label evaluation, one label's: its decisions' precision, recall
// and F1, Support its positives, its AUC (of a single-label model of more
// than two classes, the class's probability against the rest's), and its
// average precision.
type ClassMetrics struct {
	Precision float64  `json:"precision"`
	Recall    float64  `json:"recall"`
	F1        float64  `json:"f1"`
	Support   int64    `json:"support"`
	AUC       *float64 `json:"auc,omitempty"`
	// AUCCI is the 95 % interval of AUC by DeLong's method (as
	// EvalResult.AUCCI); nil where the label or class has fewer than two
	// positives or negatives.
	AUCCI *[2]float64 `json:"auc_ci95,omitempty"`
	// AP is a multi-label evaluation's average precision of the label
	// (average_precision_score of its logits): the precision at each
	// distinct score taken as the threshold, weighted by the recall it
	// adds, Σ (R_n − R_{n−1})·P_n. Nil where the data has no positive of
	// it.
	AP *float64 `json:"ap,omitempty"`
	// ECE is a multi-label evaluation's calibration error of the label:
	// over 15 bins of equal width of its probability σ(z), the share of
	// its examples in each bin times the difference of the share of them
	// it applies to and their mean probability, summed (the binary
	// calibration error of the label's probability, of the samples that
	// do not ignore it). Nil for a single-label evaluation, and for a
	// label every sample ignores.
	ECE *float64 `json:"ece,omitempty"`
	// Reliability are the label's ECE bins: its reliability diagram (nil
	// past maxReliabilityLabels labels).
	Reliability []ReliabilityBin `json:"reliability,omitempty"`
}

// maxAUCFloats bounds the probabilities Run keeps for the AUC (examples
// times classes: 256 MiB of float32).
const maxAUCFloats = 1 << 26

// eceBins is the number of confidence bins of EvalResult.ECE.
const eceBins = 15

// maxReliabilityLabels bounds the labels of a multi-label evaluation that
// keeps each label's reliability bins (ClassMetrics.Reliability): past it
// (COCO's 80 labels, a listing's thousands) every epoch's test record and
// bootstrap resample would carry 15 bins a label, and each label's
// calibration error alone is kept.
const maxReliabilityLabels = 64

// Evaluator runs a forward-only plan of a graph over datasets.
type Evaluator struct {
	plan   *runtime.Plan
	batch  int
	x      []float32
	y      []int64
	k      int
	idx    []int
	logits []float32
	// multiLabel selects the multi-label loss and figures (SetMultiLabel).
	multiLabel bool
	// cut are a multi-label model's decision thresholds as logits,
	// log(τ/(1−τ)) of each label's threshold τ (SetThresholds); nil
	// decides at ½, logit 0.
	cut        []float64
	thresholds []float64
	// truth is the label set of the example Losses last read, as words
	// (labelset.Words(k)), ignored the labels it ignores (a partial set's:
	// labelset.Ignored; all zero for the others), and decided the set a
	// model decides on.
	truth, ignored, decided []uint64
}

// Classes returns the number of the model's outputs: classes, or a
// multi-label model's labels.
func (ev *Evaluator) Classes() int { return ev.k }

// SetThresholds decides each label of a multi-label model at its own
// threshold: label j applies where its sigmoid exceeds t[j] ∈ (0, 1),
// one a label (nil: ½ for every label); and a two-class model's class 1
// where its probability exceeds t[0], the one threshold (nil: the larger
// probability) — an operating point of a binary test (sensitivity
// against specificity). The figures that count decisions (accuracy,
// right, exact matches, confusion, precision, recall, F1, sensitivity,
// specificity) follow them; the AUC, the loss and the calibration error
// do not depend on them.
func (ev *Evaluator) SetThresholds(t []float64) error {
	if t == nil {
		ev.cut, ev.thresholds = nil, nil
		return nil
	}
	switch {
	case !ev.multiLabel && ev.k != 2:
		return fmt.Errorf("a decision threshold is a multi-label model's or a two-class model's; this one has %d classes (its most probable class is its prediction)", ev.k)
	case !ev.multiLabel && len(t) != 1:
		return fmt.Errorf("%d decision thresholds for a two-class model: one, class 1's", len(t))
	case ev.multiLabel && len(t) != ev.k:
		return fmt.Errorf("%d decision thresholds for a model of %d labels", len(t), ev.k)
	}
	for j, v := range t {
		if !(v > 0 && v < 1) {
			return fmt.Errorf("label %d's decision threshold %v is outside (0, 1)", j, v)
		}
	}
	ev.cut, ev.thresholds = ThresholdCuts(t), slices.Clone(t)
	return nil
}

// ThresholdCuts are decision thresholds t ∈ (0, 1) as logits,
// log(t/(1−t)): a sigmoid exceeds t exactly where its logit exceeds the
// cut (Decisions), and a two-class model's class 1's probability exceeds
// t where z₁ − z₀ exceeds it.
func ThresholdCuts(t []float64) []float64 {
	cut := make([]float64, len(t))
	for j, v := range t {
		cut[j] = math.Log(v / (1 - v))
	}
	return cut
}

// SetMultiLabel makes the evaluator read labels as label sets and the
// logits as labels decided each on its own: the loss the sigmoids'
// binary cross-entropy averaged over the labels (the multi-label head's),
// the figures EvalResult.MultiLabel's.
func (ev *Evaluator) SetMultiLabel(on bool) error {
	if on && ev.k > runtime.MaxLabels {
		return fmt.Errorf("a multi-label model of %d labels; at most %d", ev.k, runtime.MaxLabels)
	}
	ev.multiLabel = on
	if on && ev.truth == nil {
		w := labelset.Words(ev.k)
		ev.truth, ev.ignored, ev.decided = make([]uint64, w), make([]uint64, w), make([]uint64, w)
	}
	return nil
}

// NewEvaluator compiles g for forward passes of batch samples of shape
// sample (C,H,W). The graph's initializers are read at every Run (loaded
// to the device, runtime.Plan.LoadParams), so an evaluator built before
// training sees the trained weights once the trainer has put them there
// (dpengine.Engine.SyncParams).
func NewEvaluator(g *graph.Graph, sample []int64, batch int) (*Evaluator, error) {
	return NewEvaluatorOn(nil, g, sample, batch)
}

// NewEvaluatorOn is NewEvaluator on device dev (nil is the CPU).
func NewEvaluatorOn(dev runtime.Device, g *graph.Graph, sample []int64, batch int) (*Evaluator, error) {
	plan, err := runtime.CompileForBatch(g, batch, sample, &runtime.Options{Device: dev, ForwardOnly: true})
	if err != nil {
		return nil, err
	}
	x, _ := plan.Input(0)
	_, oshape := plan.Output(0)
	if len(oshape) != 2 || oshape[0] != batch {
		return nil, fmt.Errorf("model output has shape %v; want (batch, classes) logits", oshape)
	}
	return &Evaluator{plan: plan, batch: batch, x: make([]float32, len(x)), y: make([]int64, batch), k: oshape[1],
		idx: make([]int, 0, batch), logits: make([]float32, batch*oshape[1])}, nil
}

// Run evaluates every example of v.
func (ev *Evaluator) Run(v data.Dataset) (*EvalResult, error) {
	if v.NumClasses() > ev.k {
		return nil, fmt.Errorf("the data has %d classes but the model outputs %d logits (use --num-classes when training)", v.NumClasses(), ev.k)
	}
	if ev.multiLabel {
		m := newLabelMetrics(v.Len(), ev.k)
		m.cut = ev.cut
		if err := ev.Losses(v, func(i int, _ int64, logits []float32, loss float64) { m.add(i, ev.truth, ev.ignored, logits, loss) }); err != nil {
			return nil, err
		}
		res := m.result()
		res.Thresholds = ev.thresholds
		return res, nil
	}
	m := newMetrics(v.Len(), ev.k)
	m.cut = ev.cut
	if err := ev.Losses(v, m.add); err != nil {
		return nil, err
	}
	res := m.result()
	res.Thresholds = ev.thresholds
	return res, nil
}

// metrics accumulates an EvalResult example by example.
type metrics struct {
	res           *EvalResult
	n, k          int
	correct, top5 int
	lossSum       float64
	conf          [eceBins]struct {
		n, correct int
		sum        float64
	}
	keep   int       // probabilities kept a sample for the AUC (auc): 0 or k
	probs  []float32 // n·keep
	diff   []float64 // two classes: z₁ − z₀ of each example, the AUC's and the curve's scores
	labels []int64
	prob   []float64 // one sample's softmax
	// cut, for two classes, decides class 1 where z₁ − z₀ exceeds it
	// (its probability above a threshold: Evaluator.SetThresholds); nil
	// decides by the largest logit.
	cut []float64
}

func newMetrics(n, k int) *metrics {
	m := &metrics{res: &EvalResult{Samples: n, Confusion: make([][]int64, k)}, n: n, k: k, labels: make([]int64, n), prob: make([]float64, k)}
	for i := range m.res.Confusion {
		m.res.Confusion[i] = make([]int64, k)
	}
	// What the AUC ranks: for two classes z₁ − z₀ (class 1's
	// probability's order, without its rounding), for more every class's
	// probability.
	switch {
	case k == 2:
		m.diff = make([]float64, n)
	case k > 2 && int64(n)*int64(k) <= maxAUCFloats:
		m.keep = k
	}
	m.probs = make([]float32, n*m.keep)
	return m
}

// add counts example i of the given label, logits (finite) and loss.
func (m *metrics) add(i int, label int64, logits []float32, loss float64) {
	best := argmax(logits)
	decided := best
	if m.cut != nil {
		// p₁ > t exactly where z₁ − z₀ > log(t/(1−t)), the difference
		// of two float32 exact in float64.
		decided = 0
		if float64(logits[1])-float64(logits[0]) > m.cut[0] {
			decided = 1
		}
	}
	m.lossSum += loss
	m.res.Confusion[label][decided]++
	m.labels[i] = label
	if int64(decided) == label {
		m.correct++
	}
	above := 0
	for _, z := range logits {
		if z > logits[label] {
			above++
		}
	}
	if above < 5 {
		m.top5++
	}
	// The calibration is the probabilities', whatever decides: the most
	// probable class's.
	softmax(logits, m.prob)
	b := min(int(m.prob[best]*eceBins), eceBins-1)
	m.conf[b].n++
	m.conf[b].sum += m.prob[best]
	if int64(best) == label {
		m.conf[b].correct++
	}
	switch {
	case m.diff != nil:
		m.diff[i] = float64(logits[1]) - float64(logits[0])
	case m.keep == m.k:
		for c, p := range m.prob {
			m.probs[i*m.k+c] = float32(p)
		}
	}
}

// result derives the figures from the counts.
func (m *metrics) result() *EvalResult {
	res, n := m.res, m.n
	if n == 0 {
		return res
	}
	res.Accuracy = float64(m.correct) / float64(n)
	res.Loss = m.lossSum / float64(n)
	ci := wilson(m.correct, n)
	res.AccuracyCI = &ci
	if m.k > 5 {
		t := float64(m.top5) / float64(n)
		res.Top5 = &t
	}
	var ece float64
	res.Reliability = make([]ReliabilityBin, eceBins)
	for b, c := range m.conf {
		r := &res.Reliability[b]
		r.Lo, r.Hi, r.Examples = float64(b)/eceBins, float64(b+1)/eceBins, c.n
		if c.n > 0 {
			ece += math.Abs(float64(c.correct)-c.sum) / float64(n)
			r.Accuracy, r.Confidence = float64(c.correct)/float64(c.n), c.sum/float64(c.n)
		}
	}
	res.ECE = &ece
	res.PerClass, res.BalancedAccuracy, res.MacroF1 = classMetrics(res.Confusion)
	res.AUC, res.AUCCI = auc(m.probs, m.diff, m.labels, m.k, m.keep, res.PerClass)
	if m.diff != nil {
		res.roc = binaryScores(m.diff, m.labels)
	}
	return res
}

// softmax writes the softmax of logits into p (float64, the largest
// subtracted).
func softmax(logits []float32, p []float64) {
	mx := math.Inf(-1)
	for _, z := range logits {
		mx = math.Max(mx, float64(z))
	}
	var se float64
	for c, z := range logits {
		p[c] = math.Exp(float64(z) - mx)
		se += p[c]
	}
	for c := range p {
		p[c] /= se
	}
}

// wilson is the 95 % Wilson score interval of correct successes in n.
func wilson(correct, n int) [2]float64 {
	const z = 1.959963984540054
	p, nf := float64(correct)/float64(n), float64(n)
	d := 1 + z*z/nf
	c := (p + z*z/(2*nf)) / d
	h := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / d
	return [2]float64{max(0, c-h), min(1, c+h)}
}

// classMetrics derives each class's precision, recall, F1 and support
// from the confusion matrix, the balanced accuracy (mean recall of the
// classes with examples) and the macro F1 (mean F1 of the classes with
// examples or predictions).
func classMetrics(confusion [][]int64) ([]ClassMetrics, float64, float64) {
	k := len(confusion)
	out := make([]ClassMetrics, k)
	var recalls, f1s float64
	var nRecall, nF1 int
	for c := 0; c < k; c++ {
		var support, predicted int64
		for j := 0; j < k; j++ {
			support += confusion[c][j]
			predicted += confusion[j][c]
		}
		tp := float64(confusion[c][c])
		m := &out[c]
		m.Support = support
		if predicted > 0 {
			m.Precision = tp / float64(predicted)
		}
		if support > 0 {
			m.Recall = tp / float64(support)
			recalls += m.Recall
			nRecall++
		}
		if m.Precision+m.Recall > 0 {
			m.F1 = 2 * m.Precision * m.Recall / (m.Precision + m.Recall)
		}
		if support > 0 || predicted > 0 {
			f1s += m.F1
			nF1++
		}
	}
	var bal, f1 float64
	if nRecall > 0 {
		bal = recalls / float64(nRecall)
	}
	if nF1 > 0 {
		f1 = f1s / float64(nF1)
	}
	return out, bal, f1
}

// auc is EvalResult.AUC and AUCCI from the kept scores: of two classes,
// diff (z₁ − z₀ of each example: class 1's probability's order, exact);
// of more, the probabilities (keep a sample: k, every class's; 0, none),
// when it also sets each class's AUC against the rest and its interval in
// per (one a class), where the class has examples and is not all of them.
func auc(probs []float32, diff []float64, labels []int64, k, keep int, per []ClassMetrics) (*float64, *[2]float64) {
	n := len(labels)
	pos := make([]bool, n)
	order := make([]int, n)
	share := make([]float64, n)
	if diff != nil {
		for i, y := range labels {
			pos[i] = y == 1
		}
		idx := byScore(diff, order)
		a, ok := rankAUC(diff, pos, idx)
		if !ok {
			return nil, nil
		}
		return &a, delongCI(diff, pos, idx, a, share)
	}
	if keep != k {
		return nil, nil
	}
	score := make([]float32, n)
	var sum float64
	shares := newMeanShares(n)
	for c := 0; c < k; c++ {
		for i := range score {
			score[i], pos[i] = probs[i*k+c], labels[i] == int64(c)
		}
		idx := byScore(score, order)
		a, ok := rankAUC(score, pos, idx)
		if !ok {
			return nil, nil // the mean is over every class (scikit-learn's "ovr")
		}
		sum += a
		ci := delongCI(score, pos, idx, a, share)
		if ci == nil {
			shares.add(nil, nil)
		} else {
			shares.add(share, nil)
		}
		if c < len(per) {
			per[c].AUC, per[c].AUCCI = &a, ci
		}
	}
	m := sum / float64(k)
	return &m, shares.ci(m)
}

// byScore writes into idx (len(score)) the examples in increasing order of
// score, and returns it: the order rankAUC and averagePrecision read,
// sorted once for both.
func byScore[F float32 | float64](score []F, idx []int) []int {
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(score[a], score[b]) })
	return idx
}

// rankAUC is the area under the ROC curve of score for the positives pos:
// the Mann–Whitney statistic, the probability that a positive scores above
// a negative, ties counted as half (what the trapezoidal ROC area gives);
// idx is the examples by increasing score (byScore). False where there are
// no positives or no negatives.
func rankAUC[F float32 | float64](score []F, pos []bool, idx []int) (float64, bool) {
	var rankSum float64
	var np, nn int
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && score[idx[j]] == score[idx[i]] {
			j++
		}
		mid := float64(i+j+1) / 2 // ranks i+1 … j, averaged over the tie
		for _, t := range idx[i:j] {
			if pos[t] {
				rankSum += mid
			}
		}
		i = j
	}
	for _, p := range pos {
		if p {
			np++
		} else {
			nn++
		}
	}
	if np == 0 || nn == 0 {
		return 0, false
	}
	return (rankSum - float64(np)*float64(np+1)/2) / (float64(np) * float64(nn)), true
}

// delongCI is the 95 % interval of a, the AUC of score for the positives
// pos (rankAUC; idx byScore's order), by DeLong et al. (1988): a ±
// z₀.₉₇₅·√variance clipped to [0, 1], the variance the sum of the
// squares of delongShares'. Nil where the positives or negatives are
// fewer than 2 (no variance). share is scratch of len(pos) (nil:
// allocated), left holding the shares where there are.
func delongCI[F float32 | float64](score []F, pos []bool, idx []int, a float64, share []float64) *[2]float64 {
	if share == nil {
		share = make([]float64, len(pos))
	}
	if !delongShares(score, pos, idx, a, share) {
		return nil
	}
	return normalCI(a, sumSquares(share))
}

// sumSquares is Σ x².
func sumSquares(xs []float64) float64 {
	var v float64
	for _, x := range xs {
		v += x * x
	}
	return v
}

// delongShares writes into share (one an example) each example's part of
// a's deviation by DeLong's method, a the AUC of score for the positives
// pos (idx byScore's order): a positive's share V10 of the negatives it
// scores above (ties ½), a negative's share V01 of the positives scoring
// above it, less a, over √(m(m−1)) for the m positives, √(n(n−1)) for the
// n negatives — so that their squares sum to DeLong's variance S10/m +
// S01/n, and the products of two AUCs' shares on the same examples sum
// to their covariance (DeLong's S10ʲˡ/m + S01ʲˡ/n where the positives are
// the same; in general the plug-in covariance of the two AUCs'
// linearizations, each example one independent draw). False where m or n
// is below 2.
func delongShares[F float32 | float64](score []F, pos []bool, idx []int, a float64, share []float64) bool {
	m := 0
	for _, p := range pos {
		if p {
			m++
		}
	}
	n := len(pos) - m
	if m < 2 || n < 2 {
		return false
	}
	dm, dn := math.Sqrt(float64(m)*float64(m-1)), math.Sqrt(float64(n)*float64(n-1))
	below, belowPos := 0, 0 // negatives and positives scoring below the tie group
	for i := 0; i < len(idx); {
		j, gp := i, 0
		for j < len(idx) && score[idx[j]] == score[idx[i]] {
			if pos[idx[j]] {
				gp++
			}
			j++
		}
		gn := j - i - gp
		// A positive of the group beats the negatives below it and ties
		// the group's; a negative loses to the positives above it and
		// ties the group's.
		v10 := (float64(below) + float64(gn)/2) / float64(n)
		v01 := (float64(m-belowPos-gp) + float64(gp)/2) / float64(m)
		for _, t := range idx[i:j] {
			if pos[t] {
				share[t] = (v10 - a) / dm
			} else {
				share[t] = (v01 - a) / dn
			}
		}
		below, belowPos = below+gn, belowPos+gp
		i = j
	}
	return true
}

// normalCI is the 95 % normal interval of a of the given variance,
// clipped to [0, 1].
func normalCI(a, variance float64) *[2]float64 {
	const z = 1.959963984540054 // the standard normal's 97.5th percentile
	se := math.Sqrt(variance)
	return &[2]float64{max(0, a-z*se), min(1, a+z*se)}
}

// meanShares sums AUCs' DeLong shares (delongShares) example by example,
// for the variance of their mean: Σᵢ (Σⱼ shareⱼ(i))² / L² over the L AUCs
// — each AUC's variance and every two's covariance, the examples
// independent draws, whatever each AUC's positives. The shares may be
// differences of two models' (CompareAUCs: the variance of the mean
// difference).
type meanShares struct {
	sum []float64 // one an example
	l   int       // the AUCs added
	ok  bool      // every AUC added had shares
}

func newMeanShares(n int) *meanShares { return &meanShares{sum: make([]float64, n), ok: true} }

// add adds one AUC's shares over the examples who (nil: all, in order);
// nil shares (no variance) leave the mean without one.
func (s *meanShares) add(share []float64, who []int) {
	s.l++
	if share == nil {
		s.ok = false
		return
	}
	for k, v := range share {
		i := k
		if who != nil {
			i = who[k]
		}
		s.sum[i] += v
	}
}

// variance is the variance of the AUCs' mean; false where some AUC had
// no variance or none was added.
func (s *meanShares) variance() (float64, bool) {
	if !s.ok || s.l == 0 {
		return 0, false
	}
	return sumSquares(s.sum) / float64(s.l) / float64(s.l), true
}

// ci is the 95 % interval of mean, the AUCs' mean; nil where it has no
// variance.
func (s *meanShares) ci(mean float64) *[2]float64 {
	v, ok := s.variance()
	if !ok {
		return nil
	}
	return normalCI(mean, v)
}

// averagePrecision is scikit-learn's average_precision_score of scores
// against pos: the examples by decreasing score (idx, byScore's increasing
// order, read from its end), a threshold at each distinct score (tied
// scores enter together), the precision there weighted by the recall it
// adds; false where no example is positive.
func averagePrecision[F float32 | float64](score []F, pos []bool, idx []int) (float64, bool) {
	np := 0
	for _, p := range pos {
		if p {
			np++
		}
	}
	if np == 0 {
		return 0, false
	}
	var ap float64
	tp := 0
	for hi := len(idx); hi > 0; {
		lo, gained := hi, 0
		for lo > 0 && score[idx[lo-1]] == score[idx[hi-1]] {
			if pos[idx[lo-1]] {
				gained++
			}
			lo--
		}
		tp += gained
		seen := len(idx) - lo
		ap += float64(gained) / float64(np) * float64(tp) / float64(seen)
		hi = lo
	}
	return ap, true
}

// Losses calls fn for every example i of v, in order, with its label, its
// logits (valid during the call only) and its softmax cross-entropy loss
// — multi-label, the multi-label loss, the label set's words in ev.truth
// and the labels it ignores in ev.ignored during the call.
func (ev *Evaluator) Losses(v data.Dataset, fn func(i int, label int64, logits []float32, loss float64)) error {
	if err := ev.plan.LoadParams(); err != nil {
		return fmt.Errorf("evaluating: %w", err)
	}
	n, dk := v.Len(), v.NumClasses()
	if ev.multiLabel && (dk < 1 || dk > ev.k) {
		return fmt.Errorf("the data names %d labels, the model has %d", dk, ev.k)
	}
	sl := len(ev.x) / ev.batch
	for off := 0; off < n; off += ev.batch {
		m := min(ev.batch, n-off)
		ev.idx = ev.idx[:0]
		for i := 0; i < m; i++ {
			ev.idx = append(ev.idx, off+i)
		}
		clear(ev.x[m*sl:])
		if err := v.Fill(ev.x[:m*sl], ev.y[:m], ev.idx, nil); err != nil {
			return err
		}
		if err := ev.plan.SetInput(0, ev.x); err != nil {
			return err
		}
		if err := ev.plan.Forward(); err != nil {
			return err
		}
		if err := ev.plan.ReadOutput(0, ev.logits); err != nil {
			return err
		}
		for i := 0; i < m; i++ {
			row := ev.logits[i*ev.k : (i+1)*ev.k]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			if math.IsNaN(mx) || math.IsInf(mx, 0) {
				return fmt.Errorf("example %d: the model produced non-finite logits (largest %v)", off+i, mx)
			}
			// Softmax cross-entropy with the max subtracted.
			var se float64
			for _, v := range row {
				se += math.Exp(float64(v) - mx)
			}
			y := ev.y[i]
			if ev.multiLabel {
				// The data's labels are sets of its own count (labelset:
				// bits up to 62 labels, handles past them), the model's
				// labels beyond them absent.
				clear(ev.truth)
				clear(ev.ignored)
				dw := labelset.Words(dk)
				if err := labelset.Expand(y, dk, ev.truth[:dw]); err != nil {
					return fmt.Errorf("example %d: %v", off+i, err)
				}
				if err := labelset.Ignored(y, dk, ev.ignored[:dw]); err != nil {
					return fmt.Errorf("example %d: %v", off+i, err)
				}
				fn(off+i, y, row, sigmoidLoss(row, ev.truth, ev.ignored))
				continue
			}
			if y < 0 || int(y) >= ev.k {
				return fmt.Errorf("example %d: label %d outside the model's %d classes", off+i, y, ev.k)
			}
			fn(off+i, y, row, math.Log(se)+mx-float64(row[y]))
		}
	}
	return nil
}

// Right says how much of each of v's examples the model gets right, in
// [0, 1]: 1 where its prediction (the largest logit, the first where
// several are largest, as Run counts it) is the example's label, else 0
// — multi-label, the share of the example's labels decided right (a
// logit above 0 where the label applies, else not) among those it does
// not ignore (1 where it ignores all).
func (ev *Evaluator) Right(v data.Dataset) ([]float64, error) {
	right := make([]float64, v.Len())
	err := ev.Losses(v, func(i int, label int64, logits []float32, _ float64) {
		if ev.multiLabel {
			Decide(logits, ev.cut, ev.decided)
			wrong, known := 0, len(logits)
			for w, d := range ev.decided {
				wrong += bits.OnesCount64((d ^ ev.truth[w]) &^ ev.ignored[w])
				known -= bits.OnesCount64(ev.ignored[w])
			}
			if right[i] = 1; known > 0 {
				right[i] = 1 - float64(wrong)/float64(known)
			}
			return
		}
		if int64(argmax(logits)) == label {
			right[i] = 1
		}
	})
	return right, err
}

// RankingPrecision says how well a multi-label model ranks each of v's
// examples' labels, in [0, 1]: the label ranking average precision of the
// example (scikit-learn's label_ranking_average_precision_score of it) —
// for each label that applies, the share of the labels ranked at or above
// it (by logit) that apply too, averaged over the labels that apply; 1
// where none or all apply — the labels the example ignores left out of
// its ranking. Unlike Right, which a model deciding every rare
// label absent scores well, it rewards ranking the labels that apply
// first, whatever the thresholds.
func (ev *Evaluator) RankingPrecision(v data.Dataset) ([]float64, error) {
	if !ev.multiLabel {
		return nil, errors.New("the label ranking precision scores a multi-label model")
	}
	out, order := make([]float64, v.Len()), make([]int, ev.k)
	err := ev.Losses(v, func(i int, _ int64, logits []float32, _ float64) {
		out[i] = rankingPrecision(logits, ev.truth, ev.ignored, order)
	})
	return out, err
}

// rankingPrecision is one example's label ranking average precision
// (RankingPrecision): its logits, the words of its label set and of the
// labels it ignores, left out (nil: none); order is scratch of
// len(logits). The labels by decreasing logit, ties entering together: a
// label's rank counts every label at or above it.
func rankingPrecision(logits []float32, truth, ignored []uint64, order []int) float64 {
	k, pos := 0, 0
	order = order[:0]
	for j := range logits {
		if ignored != nil && labelset.Has(ignored, j) {
			continue
		}
		order = append(order, j)
		k++
		if labelset.Has(truth, j) {
			pos++
		}
	}
	if pos == 0 || pos == k {
		return 1
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
	var sum float64
	above := 0 // labels that apply at or above the group
	for i := 0; i < k; {
		j, gained := i, 0
		for j < k && logits[order[j]] == logits[order[i]] {
			if labelset.Has(truth, order[j]) {
				gained++
			}
			j++
		}
		above += gained
		sum += float64(gained) * float64(above) / float64(j)
		i = j
	}
	return sum / float64(pos)
}

// Decide writes the label set a multi-label model decides on into set,
// as words (labelset.Words(len(logits))): the labels whose logits exceed
// their cut (ThresholdCuts; nil: 0, the sigmoid above ½) — eval's
// decisions, and predict's.
func Decide(logits []float32, cut []float64, set []uint64) {
	clear(set)
	for j, z := range logits {
		c := 0.0
		if cut != nil {
			c = cut[j]
		}
		if float64(z) > c {
			set[j/64] |= 1 << uint(j%64)
		}
	}
}

// sigmoidLoss is the multi-label head's loss of one sample, in float64:
// the binary cross-entropy of each logit's sigmoid against label j of the
// set's words, the labels ignored (nil: none) left out, the sum divided by
// all the labels (runtime.Plan.SetMultiLabel's).
func sigmoidLoss[F float32 | float64](logits []F, set, ignored []uint64) float64 {
	var s float64
	for j, v := range logits {
		if ignored != nil && labelset.Has(ignored, j) {
			continue
		}
		z, t := float64(v), 0.0
		if labelset.Has(set, j) {
			t = 1
		}
		s += softplus(z) - z*t
	}
	return s / float64(len(logits))
}

// labelMetrics accumulates a multi-label EvalResult example by example.
type labelMetrics struct {
	res        *EvalResult
	n, k       int
	right      int // right label decisions
	exact      int // samples with every decision right
	lossSum    float64
	tp, fp, fn []int64
	known      []int64 // the samples that do not ignore the label
	keep       bool    // the logits kept for the AUC
	// logits are n·k where keep: a label's AUC ranks its logits, as its
	// sigmoids (a monotone function of them) without their rounding;
	// truth the samples' label sets and ignored the labels they ignore,
	// words labelset.Words(k) a sample.
	logits         []float32
	truth, ignored []uint64
	cut            []float64 // the decisions' thresholds as logits (nil: 0)
	d              []uint64  // one sample's decided set (Decide)
	// cal are each label's calibration bins, eceBins a label: the
	// examples, the sum of their probabilities and the positives among
	// them.
	cal []labelBin
}

// labelBin is one bin of a label's probability (labelMetrics.cal).
type labelBin struct {
	n, pos int
	sum    float64
}

func newLabelMetrics(n, k int) *labelMetrics {
	w := labelset.Words(k)
	m := &labelMetrics{res: &EvalResult{Samples: n, MultiLabel: true}, n: n, k: k,
		tp: make([]int64, k), fp: make([]int64, k), fn: make([]int64, k), known: make([]int64, k), d: make([]uint64, w),
		cal: make([]labelBin, k*eceBins)}
	if m.keep = int64(n)*int64(k) <= maxAUCFloats; m.keep {
		m.logits, m.truth, m.ignored = make([]float32, n*k), make([]uint64, n*w), make([]uint64, n*w)
	}
	return m
}

// add counts example i: its label set and the labels it ignores (nil:
// none) as words (labelset.Words(k)), its logits and its loss. An ignored
// label counts in none of the figures: neither right nor wrong, nor in
// its label's counts, AUC or average precision.
func (m *labelMetrics) add(i int, set, ignored []uint64, logits []float32, loss float64) {
	m.lossSum += loss
	if m.keep {
		copy(m.truth[i*len(set):], set)
		if ignored != nil {
			copy(m.ignored[i*len(set):], ignored)
		}
	}
	d := m.d
	Decide(logits, m.cut, d)
	exact := true
	for w := range d {
		var ign uint64
		if ignored != nil {
			ign = ignored[w]
		}
		exact = exact && (d[w]^set[w])&^ign == 0
	}
	if exact {
		m.exact++
	}
	for j, z := range logits {
		if m.keep {
			m.logits[i*m.k+j] = z
		}
		if ignored != nil && labelset.Has(ignored, j) {
			m.res.IgnoredLabels++
			continue
		}
		m.known[j]++
		t, p := labelset.Has(set, j), labelset.Has(d, j)
		prob := sigmoid(float64(z))
		b := &m.cal[j*eceBins+min(int(prob*eceBins), eceBins-1)]
		b.n++
		b.sum += prob
		if t {
			b.pos++
		}
		switch {
		case t && p:
			m.tp[j]++
		case p:
			m.fp[j]++
		case t:
			m.fn[j]++
		}
		if t == p {
			m.right++
		}
	}
}

func (m *labelMetrics) result() *EvalResult {
	res, n, k := m.res, m.n, m.k
	res.PerClass = make([]ClassMetrics, k)
	if n == 0 {
		return res
	}
	if decisions := int64(n)*int64(k) - m.res.IgnoredLabels; decisions > 0 {
		res.Accuracy = float64(m.right) / float64(decisions)
	}
	res.ExactMatch = float64(m.exact) / float64(n)
	res.Loss = m.lossSum / float64(n)
	var roc *rocScores
	var score []float64
	var pos []bool
	var who []int
	order, share := make([]int, n), make([]float64, n)
	shares := newMeanShares(n)
	if m.keep {
		roc = labelScores(m.logits, m.truth, m.ignored, n, k, len(m.d))
	}
	var aucSum, apSum, eceSum float64
	var aucs, aps, knownLabels int
	for j := range res.PerClass {
		c := &res.PerClass[j]
		tp, fp, fn := float64(m.tp[j]), float64(m.fp[j]), float64(m.fn[j])
		tn := float64(m.known[j]) - tp - fp - fn
		c.Support = m.tp[j] + m.fn[j]
		if tp+fp > 0 {
			c.Precision = tp / (tp + fp)
		}
		if tp+fn > 0 {
			c.Recall = tp / (tp + fn)
		}
		if c.Precision+c.Recall > 0 {
			c.F1 = 2 * c.Precision * c.Recall / (c.Precision + c.Recall)
		}
		if m.known[j] == 0 {
			continue // ignored by every sample: in no mean
		}
		knownLabels++
		var ece float64
		if k <= maxReliabilityLabels {
			c.Reliability = make([]ReliabilityBin, eceBins)
		}
		for bi, b := range m.cal[j*eceBins : (j+1)*eceBins] {
			if b.n > 0 {
				ece += math.Abs(float64(b.pos)-b.sum) / float64(m.known[j])
			}
			if c.Reliability != nil {
				r := &c.Reliability[bi]
				r.Lo, r.Hi, r.Examples = float64(bi)/eceBins, float64(bi+1)/eceBins, b.n
				if b.n > 0 {
					r.Accuracy, r.Confidence = float64(b.pos)/float64(b.n), b.sum/float64(b.n)
				}
			}
		}
		c.ECE = &ece
		eceSum += ece
		res.MacroF1 += c.F1
		// The label's balanced accuracy: the mean recall of its values
		// the data has (balanced_accuracy_score of its column).
		var recalls float64
		var present int
		if tp+fn > 0 {
			recalls += tp / (tp + fn)
			present++
		}
		if tn+fp > 0 {
			recalls += tn / (tn + fp)
			present++
		}
		res.BalancedAccuracy += recalls / float64(present)
		if m.keep {
			// The label's scores and truths of the samples that do not
			// ignore it.
			score, pos, who = roc.of(j, score, pos, who)
			idx := byScore(score, order[:len(score)])
			if a, ok := rankAUC(score, pos, idx); ok {
				sh := share[:len(score)]
				c.AUC, c.AUCCI = &a, delongCI(score, pos, idx, a, sh)
				aucSum += a
				aucs++
				if c.AUCCI == nil {
					sh = nil
				}
				shares.add(sh, who)
			}
			if a, ok := averagePrecision(score, pos, idx); ok {
				c.AP = &a
				apSum += a
				aps++
			}
		}
	}
	if knownLabels > 0 {
		res.MacroF1 /= float64(knownLabels)
		res.BalancedAccuracy /= float64(knownLabels)
		e := eceSum / float64(knownLabels)
		res.LabelECE = &e
	}
	if aucs > 0 {
		a := aucSum / float64(aucs)
		res.AUC, res.AUCCI = &a, shares.ci(a)
	}
	if aps > 0 {
		a := apSum / float64(aps)
		res.MAP = &a
	}
	res.roc = roc
	return res
}

// argmax returns the class of the largest logit, the first where several
// are largest: the prediction every evaluation counts.
func argmax(logits []float32) int {
	best, mx := 0, math.Inf(-1)
	for j, v := range logits {
		if float64(v) > mx {
			best, mx = j, float64(v)
		}
	}
	return best
}
