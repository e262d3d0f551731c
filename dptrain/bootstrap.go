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
	// a patient's images, Clusters[i] example i's —, so that the
	// intervals count the examples' dependence within a cluster (a
	// cluster bootstrap); with Groups, clusters of groups (a patient's
	// studies: every example of a group in the group's cluster). Nil
	// draws the examples (or the groups) one by one.
	Clusters []int32
	// Groups, when set, scores groups of examples as RunGrouped does,
	// the groups (or their Clusters) the units drawn.
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
	case o.Clusters != nil && len(o.Clusters) != n:
		return nil, fmt.Errorf("clusters of %d examples for a dataset of %d", len(o.Clusters), n)
	case n == 0:
		return nil, errors.New("no examples to resample")
	}
	res, kept, err := ev.Keep(v, o.Groups)
	if err != nil {
		return nil, err
	}
	if o.Clusters, err = kept.unitClusters(o.Clusters); err != nil {
		return nil, err
	}
	res.Bootstrap = kept.e.bootstrap(o, ev.cut)
	return res, nil
}

// bootstrap draws o's units of the kept examples o.Resamples times.
func (e *examples) bootstrap(o BootstrapOptions, cut []float64) *BootstrapResult {
	units, kind := bootstrapUnits(e.n, o.Clusters)
	if o.Groups != nil && o.Clusters == nil {
		kind = "groups"
	}
	out := &BootstrapResult{Resamples: o.Resamples, Units: kind}
	out.Count = len(units)
	rng := rand.New(rand.NewPCG(o.Seed, 0x6a09e667f3bcc909))
	vals := map[string][]float64{}
	perClass := make([][]float64, e.k)
	var idx []int
	for range o.Resamples {
		idx = drawUnits(rng, units, idx[:0])
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

// Kept are an evaluation's examples as a model scored them — their
// logits and labels, or their groups' —, kept for a paired bootstrap of
// two models (PairedBootstrap).
type Kept struct {
	e   *examples
	cut []float64
	// grouped marks the units as groups (Keep with groups): of's
	// groups, names their names.
	grouped bool
	of      []int32
	names   []string
}

// unitClusters maps clusters of the examples (nil: none) to clusters of
// the units kept: the examples' own, or each group's — all of a group's
// examples must be of one cluster.
func (k *Kept) unitClusters(clusters []int32) ([]int32, error) {
	if clusters == nil || !k.grouped {
		return clusters, nil
	}
	out := make([]int32, k.e.n)
	seen := make([]bool, k.e.n)
	for i, g := range k.of {
		switch {
		case !seen[g]:
			out[g], seen[g] = clusters[i], true
		case out[g] != clusters[i]:
			return nil, fmt.Errorf("group %q has examples of two clusters: a cluster bootstrap of groups needs each group within one (a study within one patient)", k.names[g])
		}
	}
	return out, nil
}

// Keep evaluates v as Run (or with groups, RunGrouped) does and keeps its
// examples' scores: the evaluation, and what PairedBootstrap draws.
func (ev *Evaluator) Keep(v data.Dataset, groups *Grouping) (*EvalResult, *Kept, error) {
	n := v.Len()
	if int64(n)*int64(ev.k) > maxGroupedFloats {
		return nil, nil, fmt.Errorf("keeping every example's logits: %d examples of %d logits is more than %d; evaluate a part of the data at a time", n, ev.k, maxGroupedFloats)
	}
	e := newExamples(n, ev.k, ev.multiLabel)
	if err := ev.Losses(v, func(i int, label int64, logits []float32, loss float64) {
		e.set(i, label, ev.truth, ev.ignored, logits, loss)
	}); err != nil {
		return nil, nil, err
	}
	var sum *GroupSummary
	if groups != nil {
		if len(groups.Of) != n {
			return nil, nil, fmt.Errorf("grouping %d examples of a dataset of %d", len(groups.Of), n)
		}
		ge, s, err := e.groups(*groups)
		if err != nil {
			return nil, nil, err
		}
		e, sum = ge, s
	}
	res := e.evaluate(nil, ev.cut)
	res.Groups, res.Thresholds = sum, ev.thresholds
	kept := &Kept{e: e, cut: ev.cut}
	if groups != nil {
		kept.grouped, kept.of, kept.names = true, groups.Of, groups.Names
	}
	return res, kept, nil
}

// PairedBootstrapResult holds the 95 % percentile intervals of two
// models' differences A − B over the same resamples of their common
// units (PairedBootstrap), and of each difference the share of
// resamples in which A's figure is the larger (ties half) — near 0 or 1
// where the test data resolve the difference.
type PairedBootstrapResult struct {
	Resamples int                      `json:"resamples"`
	Units     string                   `json:"units"`
	Count     int                      `json:"count"`
	Figures   []PairedBootstrapFigure  `json:"figures"`
	PerClass  []*PairedBootstrapFigure `json:"per_class_auc,omitempty"`
}

// PairedBootstrapFigure is one figure's difference in a paired bootstrap.
type PairedBootstrapFigure struct {
	Name       string     `json:"name"`
	Difference float64    `json:"difference"` // on the data as they are
	CI         [2]float64 `json:"difference_ci95"`
	AAbove     float64    `json:"a_above"`
}

// PairedBootstrap draws the same resamples of a's and b's units — their
// examples or groups one by one, or clusters of them (o.Clusters[i] the
// data's example i's, as BootstrapOptions says; o.Groups is not read:
// Keep grouped them) — o.Resamples times and returns the intervals of
// the differences of their figures: accuracy, balanced accuracy, macro
// F1, a multi-label pair's exact matches, the (mean) AUC, mAP and the
// loss, and each class's or label's AUC. The two must have kept the same
// units with the same labels.
func PairedBootstrap(a, b *Kept, o BootstrapOptions) (*PairedBootstrapResult, error) {
	ea, eb := a.e, b.e
	switch {
	case o.Resamples < 100:
		return nil, fmt.Errorf("%d bootstrap resamples: at least 100", o.Resamples)
	case ea.n != eb.n || ea.k != eb.k || ea.multi != eb.multi:
		return nil, fmt.Errorf("the models kept %d and %d examples of %d and %d outputs: compare them on the same data", ea.n, eb.n, ea.k, eb.k)
	case !slices.Equal(ea.labels, eb.labels) || !slices.Equal(ea.truth, eb.truth) || !slices.Equal(ea.ignored, eb.ignored):
		return nil, errors.New("the models' examples differ in their labels: compare them on the same data")
	}
	clusters := o.Clusters
	if clusters != nil {
		if n := len(a.of); a.grouped && len(clusters) != n || !a.grouped && len(clusters) != ea.n {
			return nil, fmt.Errorf("clusters of %d examples for the data kept", len(clusters))
		}
		var err error
		if clusters, err = a.unitClusters(clusters); err != nil {
			return nil, err
		}
	}
	units, kind := bootstrapUnits(ea.n, clusters)
	if a.grouped && clusters == nil {
		kind = "groups"
	}
	out := &PairedBootstrapResult{Resamples: o.Resamples, Units: kind, Count: len(units)}
	figures := func(r *EvalResult) []float64 {
		v := []float64{r.Accuracy, r.BalancedAccuracy, r.MacroF1, math.NaN(), math.NaN(), math.NaN(), r.Loss}
		if ea.multi {
			v[3] = r.ExactMatch
		}
		if r.AUC != nil {
			v[4] = *r.AUC
		}
		if r.MAP != nil {
			v[5] = *r.MAP
		}
		for _, c := range r.PerClass {
			auc := math.NaN()
			if c.AUC != nil {
				auc = *c.AUC
			}
			v = append(v, auc)
		}
		return v
	}
	names := []string{"accuracy", "balanced accuracy", "macro F1", "exact match", "AUC", "mAP", "loss"}
	base := sub(figures(ea.evaluate(nil, a.cut)), figures(eb.evaluate(nil, b.cut)))
	diffs := make([][]float64, len(base))
	rng := rand.New(rand.NewPCG(o.Seed, 0x6a09e667f3bcc909))
	var idx []int
	for range o.Resamples {
		idx = drawUnits(rng, units, idx[:0])
		d := sub(figures(ea.evaluate(idx, a.cut)), figures(eb.evaluate(idx, b.cut)))
		for f, v := range d {
			if f < len(diffs) && !math.IsNaN(v) {
				diffs[f] = append(diffs[f], v)
			}
		}
	}
	fig := func(name string, f int) *PairedBootstrapFigure {
		v := diffs[f]
		if math.IsNaN(base[f]) || len(v) < o.Resamples*9/10 {
			return nil
		}
		var above float64
		for _, x := range v {
			switch {
			case x > 0:
				above++
			case x == 0:
				above += 0.5
			}
		}
		slices.Sort(v)
		return &PairedBootstrapFigure{Name: name, Difference: base[f], CI: [2]float64{percentile(v, 0.025), percentile(v, 0.975)}, AAbove: above / float64(len(v))}
	}
	for f, name := range names {
		if p := fig(name, f); p != nil {
			out.Figures = append(out.Figures, *p)
		}
	}
	for j := range len(base) - len(names) {
		out.PerClass = append(out.PerClass, fig(fmt.Sprintf("AUC of %d", j), len(names)+j))
	}
	if !slices.ContainsFunc(out.PerClass, func(p *PairedBootstrapFigure) bool { return p != nil }) {
		out.PerClass = nil
	}
	return out, nil
}

// sub is a − b, element by element.
func sub(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// bootstrapUnits are the units a bootstrap draws of n examples: each
// example, or each cluster's examples, and what they are.
func bootstrapUnits(n int, clusters []int32) ([][]int, string) {
	if clusters == nil {
		units := make([][]int, n)
		for i := range units {
			units[i] = []int{i}
		}
		return units, "examples"
	}
	var units [][]int
	index := map[int32]int{}
	for i, c := range clusters {
		u, ok := index[c]
		if !ok {
			u = len(units)
			index[c] = u
			units = append(units, nil)
		}
		units[u] = append(units[u], i)
	}
	return units, "clusters"
}

// drawUnits appends to idx the examples of len(units) units drawn with
// replacement.
func drawUnits(rng *rand.Rand, units [][]int, idx []int) []int {
	for range units {
		idx = append(idx, units[rng.IntN(len(units))]...)
	}
	return idx
}
