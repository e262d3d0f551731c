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
	if o.Resamples < 100 {
		return nil, fmt.Errorf("%d bootstrap resamples: at least 100", o.Resamples)
	}
	res, kept, err := ev.Keep(v, o.Groups)
	if err != nil {
		return nil, err
	}
	units, kind, err := kept.units(o.Clusters)
	if err != nil {
		return nil, err
	}
	res.Bootstrap = kept.bootstrap(o, units, kind)
	return res, nil
}

// figureNames name the figures a bootstrap draws (figures), before each
// class's or label's AUC.
var figureNames = []string{"accuracy", "balanced accuracy", "macro F1", "exact match", "AUC", "mAP", "loss"}

// figures are an evaluation's figures a bootstrap draws, in figureNames'
// order and then each class's or label's AUC; NaN where one is undefined
// (a single-label evaluation's exact match, an AUC without positives).
func figures(r *EvalResult) []float64 {
	v := []float64{r.Accuracy, r.BalancedAccuracy, r.MacroF1, math.NaN(), math.NaN(), math.NaN(), r.Loss}
	if r.MultiLabel {
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

// resample draws units o.Resamples times and collects, figure by figure
// (figures), what value gives of each draw's examples, leaving out the
// undefined (NaN).
func resample(o BootstrapOptions, units [][]int, value func(idx []int) []float64) [][]float64 {
	rng := rand.New(rand.NewPCG(o.Seed, 0x6a09e667f3bcc909))
	var vals [][]float64
	var idx []int
	for range o.Resamples {
		idx = drawUnits(rng, units, idx[:0])
		for f, x := range value(idx) {
			for len(vals) <= f {
				vals = append(vals, nil)
			}
			if !math.IsNaN(x) {
				vals[f] = append(vals[f], x)
			}
		}
	}
	return vals
}

// percentileCI is the 95 % percentile interval of v, sorted in place; nil
// where fewer than nine tenths of the resamples gave a value.
func percentileCI(v []float64, resamples int) *[2]float64 {
	if len(v) < resamples*9/10 {
		return nil
	}
	slices.Sort(v)
	return &[2]float64{percentile(v, 0.025), percentile(v, 0.975)}
}

// bootstrap draws units (of kind) of the kept examples o.Resamples times.
func (k *Kept) bootstrap(o BootstrapOptions, units [][]int, kind string) *BootstrapResult {
	out := &BootstrapResult{Resamples: o.Resamples, Units: kind, Count: len(units)}
	vals := resample(o, units, func(idx []int) []float64 { return figures(k.e.evaluate(idx, k.cut)) })
	ci := func(f int) *[2]float64 {
		if f >= len(vals) {
			return nil
		}
		return percentileCI(vals[f], o.Resamples)
	}
	out.Accuracy, out.BalancedAccuracy, out.MacroF1, out.ExactMatch = ci(0), ci(1), ci(2), ci(3)
	out.AUC, out.MAP, out.Loss = ci(4), ci(5), ci(6)
	for f := len(figureNames); f < len(vals); f++ {
		out.PerClass = append(out.PerClass, ci(f))
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

// units are the units a bootstrap of the kept draws and what they are:
// each example or group, or clusters of them (clusters, one an example of
// the data; a group's examples must be of one cluster, the group's).
func (k *Kept) units(clusters []int32) ([][]int, string, error) {
	data := k.e.n
	if k.grouped {
		data = len(k.of)
	}
	if clusters != nil && len(clusters) != data {
		return nil, "", fmt.Errorf("clusters of %d examples for a dataset of %d", len(clusters), data)
	}
	if clusters != nil && k.grouped {
		var err error
		if clusters, err = k.groupClusters(clusters); err != nil {
			return nil, "", err
		}
	}
	units, kind := bootstrapUnits(k.e.n, clusters)
	if k.grouped && clusters == nil {
		kind = "groups"
	}
	return units, kind, nil
}

// groupClusters maps clusters of the data's examples to the kept groups':
// all of a group's examples must be of one cluster.
func (k *Kept) groupClusters(clusters []int32) ([]int32, error) {
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

// Keep evaluates v as Run does — with groups, as RunGrouped describes —
// and keeps its examples' scores (their groups'): the evaluation, and
// what PairedBootstrap draws.
func (ev *Evaluator) Keep(v data.Dataset, groups *Grouping) (*EvalResult, *Kept, error) {
	n := v.Len()
	if groups != nil && len(groups.Of) != n {
		return nil, nil, fmt.Errorf("grouping %d examples of a dataset of %d", len(groups.Of), n)
	}
	e, err := ev.keep(v, "an evaluation of groups or by bootstrap")
	if err != nil {
		return nil, nil, err
	}
	kept := &Kept{e: e, cut: ev.cut}
	var sum *GroupSummary
	if groups != nil {
		if kept.e, sum, err = e.groups(*groups); err != nil {
			return nil, nil, err
		}
		kept.grouped, kept.of, kept.names = true, groups.Of, groups.Names
	}
	res := kept.e.evaluate(nil, ev.cut)
	res.Groups, res.Thresholds = sum, ev.thresholds
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
	units, kind, err := a.units(o.Clusters)
	if err != nil {
		return nil, err
	}
	out := &PairedBootstrapResult{Resamples: o.Resamples, Units: kind, Count: len(units)}
	base := sub(figures(ea.evaluate(nil, a.cut)), figures(eb.evaluate(nil, b.cut)))
	diffs := resample(o, units, func(idx []int) []float64 {
		return sub(figures(ea.evaluate(idx, a.cut)), figures(eb.evaluate(idx, b.cut)))
	})
	fig := func(name string, f int) *PairedBootstrapFigure {
		if f >= len(diffs) || math.IsNaN(base[f]) {
			return nil
		}
		v := diffs[f]
		ci := percentileCI(v, o.Resamples)
		if ci == nil {
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
		return &PairedBootstrapFigure{Name: name, Difference: base[f], CI: *ci, AAbove: above / float64(len(v))}
	}
	for f, name := range figureNames {
		if p := fig(name, f); p != nil {
			out.Figures = append(out.Figures, *p)
		}
	}
	for j := range len(base) - len(figureNames) {
		out.PerClass = append(out.PerClass, fig(fmt.Sprintf("AUC of %d", j), len(figureNames)+j))
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
