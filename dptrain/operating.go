package dptrain

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

// ROCPoint is one point of a ROC curve: the decisions where the
// probability exceeds Threshold — its counts, its true positive rate
// (sensitivity, recall) and false positive rate (1 − specificity).
type ROCPoint struct {
	Threshold float64 `json:"threshold"`
	TPR       float64 `json:"tpr"`
	FPR       float64 `json:"fpr"`
	TP        int64   `json:"tp"`
	FP        int64   `json:"fp"`
	TN        int64   `json:"tn"`
	FN        int64   `json:"fn"`
}

// Sensitivity is the point's true positive rate.
func (p ROCPoint) Sensitivity() float64 { return p.TPR }

// Specificity is the point's true negative rate, 1 − FPR.
func (p ROCPoint) Specificity() float64 { return 1 - p.FPR }

// PPV is the point's positive predictive value (precision): the share of
// the decided positives that are; 0 where none is decided.
func (p ROCPoint) PPV() float64 { return ratio(p.TP, p.TP+p.FP) }

// NPV is the point's negative predictive value: the share of the decided
// negatives that are; 0 where none is decided.
func (p ROCPoint) NPV() float64 { return ratio(p.TN, p.TN+p.FN) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// OperatingPoint is a decision threshold an evaluation chose for a label
// (a multi-label model's) or for class 1 (a two-class model's) by a rule
// (PointRule), and what it decides there.
type OperatingPoint struct {
	// Label is the label, or 1: a two-class model's class 1.
	Label int `json:"label"`
	ROCPoint
	Sensitivity float64 `json:"sensitivity"`
	Specificity float64 `json:"specificity"`
	PPV         float64 `json:"ppv"`
	NPV         float64 `json:"npv"`
	// The 95 % Wilson score intervals of the four, each a share of the
	// examples it counts (the positives, the negatives, the decided
	// positives, the decided negatives) taken as independent draws; nil
	// where it counts none. The threshold itself is taken as given: chosen
	// on the same data, the point's figures there are optimistic.
	SensitivityCI *[2]float64 `json:"sensitivity_ci95,omitempty"`
	SpecificityCI *[2]float64 `json:"specificity_ci95,omitempty"`
	PPVCI         *[2]float64 `json:"ppv_ci95,omitempty"`
	NPVCI         *[2]float64 `json:"npv_ci95,omitempty"`
}

// wilsonOf is the Wilson interval of k of n, nil where n is 0.
func wilsonOf(k, n int64) *[2]float64 {
	if n == 0 {
		return nil
	}
	ci := wilson(int(k), int(n))
	return &ci
}

// PointRule chooses an operating point on a ROC curve
// (EvalResult.OperatingPoint): the highest threshold whose sensitivity is
// at least Value ("sensitivity"), the lowest whose specificity is at
// least Value ("specificity"), or the one of the largest Youden index,
// sensitivity + specificity − 1, the highest of equal ones ("youden").
type PointRule struct {
	Kind  string
	Value float64
}

// String is the rule as ParsePointRule reads it.
func (r PointRule) String() string {
	if r.Kind == "youden" {
		return r.Kind
	}
	return r.Kind + "=" + strconv.FormatFloat(r.Value, 'g', -1, 64)
}

// ParsePointRule reads an operating point's rule: sensitivity=S,
// specificity=S (S in (0, 1]) or youden.
func ParsePointRule(s string) (PointRule, error) {
	kind, val, has := strings.Cut(s, "=")
	switch {
	case kind == "youden" && !has:
		return PointRule{Kind: kind}, nil
	case (kind == "sensitivity" || kind == "specificity") && has:
		v, err := strconv.ParseFloat(val, 64)
		if err != nil || !(v > 0 && v <= 1) {
			return PointRule{}, fmt.Errorf("operating point %q: %s=S wants S in (0, 1]", s, kind)
		}
		return PointRule{Kind: kind, Value: v}, nil
	}
	return PointRule{}, fmt.Errorf("operating point %q: want sensitivity=S, specificity=S or youden", s)
}

// rocScores are the decision scores an evaluation kept for its curves:
// for label j, each example's score s, decided where s exceeds a cut (the
// probability σ(cut)) — a multi-label model's logit, a two-class model's
// z₁ − z₀ — and whether it is a positive; the examples ignoring the label
// left out.
type rocScores struct {
	labels []int // the labels that have curves: 1 (two classes) or 0…k−1
	// of appends to s[:0], pos[:0] and who[:0] label j's scores, whether
	// each is a positive, and which examples they are of, in order (who
	// nil: every example, in order).
	of func(j int, s []float64, pos []bool, who []int) ([]float64, []bool, []int)
}

// CurveLabels returns the labels Curve takes: a multi-label evaluation's
// labels, a two-class one's 1 (class 1), none for other evaluations or
// where the scores were too many to keep.
func (r *EvalResult) CurveLabels() []int {
	if r.roc == nil {
		return nil
	}
	return r.roc.labels
}

// Curve returns label j's ROC curve (CurveLabels): a point for each
// distinct score, from no example decided positive (threshold 1) to
// every one (threshold 0), each point's threshold between its lowest
// score decided and the next, so that deciding above it (--threshold)
// decides exactly its examples. Nil where j has no curve, or its examples
// lack positives or negatives.
func (r *EvalResult) Curve(j int) []ROCPoint {
	if r.roc == nil || !slices.Contains(r.roc.labels, j) {
		return nil
	}
	s, pos, _ := r.roc.of(j, nil, nil, nil)
	var p, n int64
	for _, t := range pos {
		if t {
			p++
		} else {
			n++
		}
	}
	if p == 0 || n == 0 {
		return nil
	}
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	// By decreasing score: each run of equal scores enters together.
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(s[b], s[a]) })
	out := []ROCPoint{{Threshold: 1, TN: n, FN: p}}
	var tp, fp int64
	for i := 0; i < len(idx); {
		k := i
		for k < len(idx) && s[idx[k]] == s[idx[i]] {
			if pos[idx[k]] {
				tp++
			} else {
				fp++
			}
			k++
		}
		cut := s[idx[i]] - 1 // below the lowest: every example decided
		if k < len(idx) {
			cut = s[idx[i]]/2 + s[idx[k]]/2
		}
		out = append(out, ROCPoint{Threshold: sigmoid(cut), TP: tp, FP: fp, TN: n - fp, FN: p - tp,
			TPR: float64(tp) / float64(p), FPR: float64(fp) / float64(n)})
		i = k
	}
	out[len(out)-1].Threshold = 0
	return out
}

// sigmoid is σ(z) in float64.
func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// OperatingPoint returns the point of label j's curve (Curve) that rule
// chooses; false where j has no curve or no point meets the rule.
func (r *EvalResult) OperatingPoint(j int, rule PointRule) (OperatingPoint, bool) {
	curve := r.Curve(j)
	if curve == nil {
		return OperatingPoint{}, false
	}
	best := -1
	switch rule.Kind {
	case "sensitivity":
		// The first point (the highest threshold) that reaches it.
		best = slices.IndexFunc(curve, func(p ROCPoint) bool { return p.TPR >= rule.Value })
	case "specificity":
		// The last point (the lowest threshold) that keeps it.
		for i, p := range curve {
			if 1-p.FPR >= rule.Value {
				best = i
			}
		}
	case "youden":
		for i, p := range curve {
			if best < 0 || p.TPR-p.FPR > curve[best].TPR-curve[best].FPR {
				best = i
			}
		}
	}
	if best < 0 {
		return OperatingPoint{}, false
	}
	p := curve[best]
	return OperatingPoint{Label: j, ROCPoint: p, Sensitivity: p.Sensitivity(), Specificity: p.Specificity(), PPV: p.PPV(), NPV: p.NPV(),
		SensitivityCI: wilsonOf(p.TP, p.TP+p.FN), SpecificityCI: wilsonOf(p.TN, p.TN+p.FP),
		PPVCI: wilsonOf(p.TP, p.TP+p.FP), NPVCI: wilsonOf(p.TN, p.TN+p.FN)}, true
}

// binaryScores are a two-class evaluation's curve scores: z₁ − z₀ of
// each example, class 1 the positives.
func binaryScores(diff []float64, labels []int64) *rocScores {
	return &rocScores{labels: []int{1}, of: func(_ int, s []float64, pos []bool, _ []int) ([]float64, []bool, []int) {
		s, pos = append(s[:0], diff...), pos[:0]
		for _, y := range labels {
			pos = append(pos, y == 1)
		}
		return s, pos, nil
	}}
}

// labelScores are a multi-label evaluation's curve scores: label j's
// logits of the examples that do not ignore it (n examples, k labels,
// w words a set).
func labelScores(logits []float32, truth, ignored []uint64, n, k, w int) *rocScores {
	labels := make([]int, k)
	for j := range labels {
		labels[j] = j
	}
	return &rocScores{labels: labels, of: func(j int, s []float64, pos []bool, who []int) ([]float64, []bool, []int) {
		s, pos, who = s[:0], pos[:0], who[:0]
		for i := range n {
			if !labelset.Has(ignored[i*w:(i+1)*w], j) {
				s, pos = append(s, float64(logits[i*k+j])), append(pos, labelset.Has(truth[i*w:(i+1)*w], j))
				who = append(who, i)
			}
		}
		return s, pos, who
	}}
}
