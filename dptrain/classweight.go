package dptrain

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseClassWeights reads --class-weight for data of classes classes
// named names (by label; nil where the data names none): "" is none; a
// list of one weight a class, "0.2,1,1,…", in label order; or NAME=W pairs,
// "normal=0.1,pneumonia=1", a class by its name or its label, the classes
// not named weighing 1. Each weight is finite and non-negative, one of
// them positive; the weights come back divided by the largest, so that
// the largest is 1 and none raises a sample's clipped gradient past the
// clip norm (dpengine.Config.ClassWeights). Weights computed from the
// private data's own class counts ("balanced") are refused: the counts
// are private too.
func ParseClassWeights(spec string, names []string, classes int) ([]float64, error) {
	w, err := parseWeights("--class-weight", "class", "classes", spec, names, classes, 1)
	if w == nil || err != nil {
		return nil, err
	}
	var top float64
	for _, v := range w {
		top = max(top, v)
	}
	if top == 0 {
		return nil, errors.New("--class-weight: every weight is 0: no sample would count")
	}
	for c := range w {
		w[c] /= top
	}
	return w, nil
}

// PowClassWeights raises class weights (ParseClassWeights') to the power
// p ∈ [0, 4] and divides them by the largest again: 1 keeps them, ½ takes
// their square roots (a milder rebalancing), 0 weighs every class 1 (a
// class of weight 0 stays 0 where p > 0).
func PowClassWeights(w []float64, p float64) ([]float64, error) {
	if !(p >= 0 && p <= 4) {
		return nil, fmt.Errorf("--class-weight-power %v must be in [0, 4]", p)
	}
	out := make([]float64, len(w))
	var top float64
	for c, v := range w {
		switch {
		case p == 0:
			out[c] = 1
		default:
			out[c] = math.Pow(v, p)
		}
		top = max(top, out[c])
	}
	for c := range out {
		out[c] /= top
	}
	return out, nil
}

// PowPosWeights raises positive weights (ParsePosWeight's) to the power
// p ∈ [0, 4], kept as they come out (not divided by the largest: a
// positive weight shapes each sample's loss, which is clipped whatever its
// scale): 1 keeps them, ½ takes their square roots (a rare label's 99
// becomes 9.95), 0 weighs every label's positive term 1 — the plain loss,
// bit for bit.
func PowPosWeights(w []float64, p float64) ([]float64, error) {
	if !(p >= 0 && p <= 4) {
		return nil, fmt.Errorf("--pos-weight-power %v must be in [0, 4]", p)
	}
	out := make([]float64, len(w))
	for j, v := range w {
		out[j] = 1
		if p != 0 {
			out[j] = math.Pow(v, p)
		}
	}
	return out, nil
}

// ParsePosWeight reads --pos-weight, the weights of a multi-label run's
// labels' positive terms (dpengine.Config.PosWeight, PyTorch's pos_weight),
// as ParseClassWeights reads its list or NAME=W pairs, the labels not
// named weighing 1; the weights are kept as given (finite, non-negative):
// they shape each sample's loss, which is clipped whatever its scale.
// Weights from the private data's own label counts are refused.
func ParsePosWeight(spec string, names []string, labels int) ([]float64, error) {
	return parseWeights("--pos-weight", "label", "labels", spec, names, labels, 1)
}

// parseWeights reads flag's list of one weight a class (what: "class" or
// "label", whats its plural) or its NAME=W pairs, the classes not named
// weighing unnamed.
func parseWeights(flag, what, whats, spec string, names []string, classes int, unnamed float64) ([]float64, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	switch strings.ToLower(spec) {
	case "balanced", "auto", "inverse":
		return nil, fmt.Errorf("%s %s: weights from the training data's own %s counts would publish those counts, which the guarantee protects; give weights from what is known without the data (e.g. the inverse of each %s's prevalence in the literature), as a list or NAME=W pairs", flag, spec, what, what)
	}
	if classes <= 0 {
		return nil, fmt.Errorf("%s: the data has no %s to weigh", flag, whats)
	}
	w := make([]float64, classes)
	parts := strings.Split(spec, ",")
	if !strings.Contains(spec, "=") {
		if len(parts) != classes {
			return nil, fmt.Errorf("%s: %d values for data of %d %s (one a %s, in label order, or NAME=V pairs)", flag, len(parts), classes, whats, what)
		}
		for c, p := range parts {
			v, err := parseWeight(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %d: %w", flag, what, c, err)
			}
			w[c] = v
		}
		return w, nil
	}
	for i := range w {
		w[i] = unnamed
	}
	seen := map[int]bool{}
	for _, p := range parts {
		name, val, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("%s %q: %q is not NAME=V (give every value as a pair, or a plain list of %d)", flag, spec, p, classes)
		}
		name = strings.TrimSpace(name)
		c := classIndex(name, names, classes)
		if c < 0 {
			known := "its labels 0…" + strconv.Itoa(classes-1)
			if len(names) > 0 {
				known = "its " + whats + " " + strings.Join(names, ", ")
			}
			return nil, fmt.Errorf("%s: the data has no %s %q (%s)", flag, what, name, known)
		}
		if seen[c] {
			return nil, fmt.Errorf("%s: %s %q weighed twice", flag, what, name)
		}
		seen[c] = true
		v, err := parseWeight(val)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %q: %w", flag, what, name, err)
		}
		w[c] = v
	}
	return w, nil
}

// classIndex is the label of class name: its position in names, or name
// read as a label.
func classIndex(name string, names []string, classes int) int {
	for c, n := range names {
		if n == name {
			return c
		}
	}
	if c, err := strconv.Atoi(name); err == nil && c >= 0 && c < classes {
		return c
	}
	return -1
}

// parseWeight reads one value of a list: finite and non-negative.
func parseWeight(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if !(v >= 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%v must be finite and non-negative", v)
	}
	return v, nil
}

// checkClassWeights holds Settings.ClassWeights to the run: one weight a
// class of the training data, single-label data; the engine holds each to
// [0, 1] (ParseClassWeights divides by the largest). The audit's gradient canaries have no
// class: they weigh 1, the worst case.
func checkClassWeights(cfg Config, set Settings) error {
	if len(set.ClassWeights) == 0 {
		return nil
	}
	switch {
	case set.MultiLabel:
		return fmt.Errorf("--class-weight on multi-label data (%s): a sample's label is a set of classes, not one to weigh it by; use --pos-weight to weigh each label's positive term", set.Data)
	case len(set.ClassWeights) != cfg.Train.NumClasses():
		return fmt.Errorf("--class-weight: %d weights for %s's %d classes", len(set.ClassWeights), set.Data, cfg.Train.NumClasses())
	}
	return nil // each weight's range: the engine's (dpengine.Config.ClassWeights)
}

// checkPosWeight holds Settings.PosWeight to the run: multi-label data,
// one weight a label; the loss head holds each to finite and
// non-negative.
func checkPosWeight(cfg Config, set Settings) error {
	if len(set.PosWeight) == 0 {
		return nil
	}
	switch {
	case !set.MultiLabel:
		return fmt.Errorf("--pos-weight weighs a multi-label run's labels; %s is single-label (--class-weight weighs its classes)", set.Data)
	case len(set.PosWeight) != cfg.Train.NumClasses():
		return fmt.Errorf("--pos-weight: %d weights for %s's %d labels", len(set.PosWeight), set.Data, cfg.Train.NumClasses())
	}
	return nil // each weight's range: the loss head's (runtime.Plan.SetPosWeight)
}

// classWeightsLine says the run's class weights for the log: by class
// name where the data names them.
func classWeightsLine(w []float64, names []string) string {
	parts := make([]string, len(w))
	for c, v := range w {
		name := strconv.Itoa(c)
		if c < len(names) {
			name = names[c]
		}
		parts[c] = fmt.Sprintf("%s %.3g", name, v)
	}
	return strings.Join(parts, ", ")
}

// ParseThresholds reads --threshold, a multi-label model's decision
// thresholds (Evaluator.SetThresholds): one number for every label, a
// list of one a label, or NAME=T pairs (the labels not named ½), each in
// (0, 1).
func ParseThresholds(spec string, names []string, labels int) ([]float64, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	if v, err := strconv.ParseFloat(spec, 64); err == nil && labels > 1 {
		spec = strings.TrimSuffix(strings.Repeat(strconv.FormatFloat(v, 'g', -1, 64)+",", labels), ",")
	}
	t, err := parseWeights("--threshold", "label", "labels", spec, names, labels, 0.5)
	if err != nil {
		return nil, err
	}
	for j, v := range t {
		if !(v > 0 && v < 1) {
			return nil, fmt.Errorf("--threshold: label %d's threshold %v is outside (0, 1)", j, v)
		}
	}
	return t, nil
}

// ParseDecisionThreshold reads --threshold for a model of k outputs: a
// multi-label model's thresholds (ParseThresholds, names its labels'), or
// a two-class classifier's one, class 1's probability above which it is
// decided (Evaluator.SetThresholds). Any other classifier decides by its
// most probable class and takes none.
func ParseDecisionThreshold(spec string, multiLabel bool, names []string, k int) ([]float64, error) {
	if multiLabel {
		return ParseThresholds(spec, names, k)
	}
	if k != 2 {
		return nil, fmt.Errorf("--threshold decides a multi-label model's labels or a two-class model's class 1; this model has %d classes (its most probable class is its prediction)", k)
	}
	t, err := strconv.ParseFloat(strings.TrimSpace(spec), 64)
	if err != nil || !(t > 0 && t < 1) {
		return nil, fmt.Errorf("--threshold %q: a two-class model takes one threshold in (0, 1), class 1's probability above which it decides class 1", spec)
	}
	return []float64{t}, nil
}
