package dptrain

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
)

// BootstrapOptions configure a bootstrap of an evaluation's figures
// (Evaluator.Bootstrap).
type BootstrapOptions struct {
	// Resamples is how many times the units are drawn (at least 100).
	Resamples int
	// Clusters, when set, makes the units drawn clusters of examples —
	// a patient's images, cluster[i] example i's —, so that the
	// intervals count the examples' dependence within a cluster (a
	// cluster bootstrap); nil draws the examples (or with Groups, the
	// groups) one by one.
	Clusters []int32
	// Groups, when set, scores groups of examples as RunGrouped does,
	// the groups the units drawn (Clusters must then be nil).
	Groups *Grouping
	// Seed seeds the draws: the intervals are the same for the same
	// seed and data (the bootstrap's randomness is not a privacy
	// mechanism).
	Seed uint64
}

// BootstrapResult holds the 95 % percentile intervals of an
// evaluation's figures over resamples of its units (EvalResult.Bootstrap):
// the 2.5th and 97.5th percentiles of each figure's values. A figure the
// evaluation lacks, or that is undefined in more than a tenth of the
// resamples (an AUC of a label some draws hold no positive of), has
// none.
type BootstrapResult struct {
	Resamples int `json:"resamples"`
	// Units says what was drawn: "examples", "groups" or "clusters";
	// Count how many there are.
	Units            string      `json:"units"`
	Count            int         `json:"count"`
	Accuracy         *[2]float64 `json:"accuracy,omitempty"`
	BalancedAccuracy *[2]float64 `json:"balanced_accuracy,omitempty"`
	MacroF1          *[2]float64 `json:"macro_f1,omitempty"`
	ExactMatch       *[2]float64 `json:"exact_match,omitempty"`
	AUC              *[2]float64 `json:"auc,omitempty"`
	MAP              *[2]float64 `json:"map,omitempty"`
	Loss             *[2]float64 `json:"loss,omitempty"`
	// PerClass are each class's (each label's) AUC's intervals.
	PerClass []*[2]float64 `json:"per_class_auc,omitempty"`
}

// Bootstrap evaluates v as Run (or, with o.Groups, RunGrouped) does and
// adds the 95 % bootstrap intervals of its figures (EvalResult.Bootstrap):
// the units — examples, groups, or o.Clusters — drawn with replacement
// o.Resamples times, every figure computed again on each draw. Unlike the
// AUC's DeLong interval, which takes the examples as independent, a
// cluster bootstrap over patients counts the likeness of one patient's
// images.
func (ev *Evaluator) Bootstrap(v data.Dataset, o BootstrapOptions) (*EvalResult, error) {
	n := v.Len()
	switch {
	case o.Resamples < 100:
		return nil, fmt.Errorf("%d bootstrap resamples: at least 100", o.Resamples)
	case o.Clusters != nil && o.Groups != nil:
		return nil, errors.New("a bootstrap draws clusters or groups, not both")
	case o.Clusters != nil && len(o.Clusters) != n:
		return nil, fmt.Errorf("clusters of %d examples for a dataset of %d", len(o.Clusters), n)
	case n == 0:
		return nil, errors.New("no examples to resample")
	case int64(n)*int64(ev.k) > maxGroupedFloats:
		return nil, fmt.Errorf("a bootstrap keeps every example's logits: %d examples of %d logits is more than %d; evaluate a part of the data at a time", n, ev.k, maxGroupedFloats)
	}
	e := newExamples(n, ev.k, ev.multiLabel)
	if err := ev.Losses(v, func(i int, label int64, logits []float32, loss float64) {
		e.set(i, label, ev.truth, ev.ignored, logits, loss)
	}); err != nil {
		return nil, err
	}
	var sum *GroupSummary
	if o.Groups != nil {
		if len(o.Groups.Of) != n {
			return nil, fmt.Errorf("grouping %d examples of a dataset of %d", len(o.Groups.Of), n)
		}
		ge, s, err := e.groups(*o.Groups)
		if err != nil {
			return nil, err
		}
		e, sum = ge, s
	}
	res := e.evaluate(nil, ev.cut)
	res.Groups, res.Thresholds = sum, ev.thresholds
	res.Bootstrap = e.bootstrap(o, ev.cut)
	return res, nil
}

// bootstrap draws o's units of the kept examples o.Resamples times.
func (e *examples) bootstrap(o BootstrapOptions, cut []float64) *BootstrapResult {
	// The units, each its examples.
	var units [][]int
	out := &BootstrapResult{Resamples: o.Resamples, Units: "examples"}
	if o.Groups != nil {
		out.Units = "groups"
	}
	if o.Clusters != nil {
		out.Units = "clusters"
		index := map[int32]int{}
		for i, c := range o.Clusters {
			u, ok := index[c]
			if !ok {
				u = len(units)
				index[c] = u
				units = append(units, nil)
			}
			units[u] = append(units[u], i)
		}
	} else {
		units = make([][]int, e.n)
		for i := range units {
			units[i] = []int{i}
		}
	}
	out.Count = len(units)
	rng := rand.New(rand.NewPCG(o.Seed, 0x6a09e667f3bcc909))
	vals := map[string][]float64{}
	perClass := make([][]float64, e.k)
	var idx []int
	for range o.Resamples {
		idx = idx[:0]
		for range units {
			idx = append(idx, units[rng.IntN(len(units))]...)
		}
		r := e.evaluate(idx, cut)
		add := func(name string, v float64) { vals[name] = append(vals[name], v) }
		add("accuracy", r.Accuracy)
		add("loss", r.Loss)
		if e.multi {
			add("exact", r.ExactMatch)
		}
		add("balanced", r.BalancedAccuracy)
		add("f1", r.MacroF1)
		if r.AUC != nil {
			add("auc", *r.AUC)
		}
		if r.MAP != nil {
			add("map", *r.MAP)
		}
		for j, c := range r.PerClass {
			if c.AUC != nil && j < len(perClass) {
				perClass[j] = append(perClass[j], *c.AUC)
			}
		}
	}
	ci := func(v []float64) *[2]float64 {
		if len(v) < o.Resamples*9/10 {
			return nil
		}
		slices.Sort(v)
		return &[2]float64{percentile(v, 0.025), percentile(v, 0.975)}
	}
	out.Accuracy, out.Loss = ci(vals["accuracy"]), ci(vals["loss"])
	out.BalancedAccuracy, out.MacroF1 = ci(vals["balanced"]), ci(vals["f1"])
	out.AUC, out.MAP = ci(vals["auc"]), ci(vals["map"])
	if e.multi {
		out.ExactMatch = ci(vals["exact"])
	}
	for _, v := range perClass {
		out.PerClass = append(out.PerClass, ci(v))
	}
	if !slices.ContainsFunc(out.PerClass, func(c *[2]float64) bool { return c != nil }) {
		out.PerClass = nil
	}
	return out
}

// percentile is the q-quantile of sorted values, linearly interpolated
// between the two nearest (numpy's default).
func percentile(sorted []float64, q float64) float64 {
	h := q * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}
