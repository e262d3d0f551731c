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
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	switch strings.ToLower(spec) {
	case "balanced", "auto", "inverse":
		return nil, errors.New("--class-weight " + spec + ": weights from the training data's own class counts would publish those counts, which the guarantee protects; give weights from what is known without the data (e.g. the inverse of each class's prevalence in the literature), as a list or NAME=W pairs")
	}
	if classes <= 0 {
		return nil, fmt.Errorf("--class-weight: the data has no classes to weigh")
	}
	w := make([]float64, classes)
	parts := strings.Split(spec, ",")
	if strings.Contains(spec, "=") {
		for i := range w {
			w[i] = 1
		}
		seen := map[int]bool{}
		for _, p := range parts {
			name, val, ok := strings.Cut(p, "=")
			if !ok {
				return nil, fmt.Errorf("--class-weight %q: %q is not NAME=W (give every weight as a pair, or a plain list of %d)", spec, p, classes)
			}
			name = strings.TrimSpace(name)
			c := classIndex(name, names, classes)
			if c < 0 {
				known := "its labels 0…" + strconv.Itoa(classes-1)
				if len(names) > 0 {
					known = "its classes " + strings.Join(names, ", ")
				}
				return nil, fmt.Errorf("--class-weight: the data has no class %q (%s)", name, known)
			}
			if seen[c] {
				return nil, fmt.Errorf("--class-weight: class %q weighed twice", name)
			}
			seen[c] = true
			v, err := parseWeight(val)
			if err != nil {
				return nil, fmt.Errorf("--class-weight: class %q: %w", name, err)
			}
			w[c] = v
		}
	} else {
		if len(parts) != classes {
			return nil, fmt.Errorf("--class-weight: %d weights for data of %d classes (one a class, in label order, or NAME=W pairs)", len(parts), classes)
		}
		for c, p := range parts {
			v, err := parseWeight(p)
			if err != nil {
				return nil, fmt.Errorf("--class-weight: class %d: %w", c, err)
			}
			w[c] = v
		}
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

// parseWeight reads one class weight: finite and non-negative.
func parseWeight(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("weight %q is not a number", s)
	}
	if !(v >= 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("weight %v must be finite and non-negative", v)
	}
	return v, nil
}

// checkClassWeights holds Settings.ClassWeights to the run: one weight a
// class of the training data, each in [0, 1] (ParseClassWeights divides by
// the largest), single-label data, no audit canaries (a canary weighed
// below 1 would audit less than the mechanism's worst case).
func checkClassWeights(cfg Config, set Settings) error {
	if len(set.ClassWeights) == 0 {
		return nil
	}
	switch {
	case set.MultiLabel:
		return fmt.Errorf("--class-weight on multi-label data (%s): a sample's label is a set of classes, not one to weigh it by", set.Data)
	case cfg.GradientCanaries > 0:
		return errors.New("dptrain: an audit of a run with class weights (its canaries would weigh their class's weight, not the worst case's 1)")
	case len(set.ClassWeights) != cfg.Train.NumClasses():
		return fmt.Errorf("--class-weight: %d weights for %s's %d classes", len(set.ClassWeights), set.Data, cfg.Train.NumClasses())
	}
	for c, w := range set.ClassWeights {
		if !(w >= 0 && w <= 1) {
			return fmt.Errorf("--class-weight: class %d's weight %v is outside [0, 1]", c, w)
		}
	}
	return nil
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
