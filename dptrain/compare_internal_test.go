package dptrain

import (
	"math"
	"strconv"
	"testing"
)

// TestCompare holds the paired comparisons of two models on the same
// examples to the generator's (testdata/metrics/compare.json): each
// label's AUC difference by DeLong's paired test, computed there by the
// classical formula (the structural components' covariance matrices over
// the positives and the negatives), the mean AUC's over labels (ignored
// labels included), and McNemar's exact test of two classifiers'
// accuracies (scipy's binomial test); a model compared with itself
// differs by 0, p = 1.
func TestCompare(t *testing.T) {
	type diff struct {
		A  float64    `json:"auc_a"`
		B  float64    `json:"auc_b"`
		D  float64    `json:"difference"`
		CI [2]float64 `json:"difference_ci95"`
		P  float64    `json:"p"`
	}
	comps := readCases[struct {
		File     string          `json:"file"`
		Name     string          `json:"name"`
		BLogits  [][]float32     `json:"b_logits"`
		Labels   map[string]diff `json:"labels_compared"`
		Mean     *diff           `json:"mean"`
		Accuracy *struct {
			A     float64 `json:"accuracy_a"`
			B     float64 `json:"accuracy_b"`
			AOnly int     `json:"a_only"`
			BOnly int     `json:"b_only"`
			P     float64 `json:"p"`
		} `json:"accuracy"`
	}](t, "compare.json", 3)
	byName := goldenByName(t)
	// result evaluates logits against case c's labels; right says which
	// examples a classifier gets right.
	result := func(c groupedCase, logits [][]float32) (*EvalResult, []float64) {
		if c.fileName == "cases.json" {
			m := newMetrics(len(c.Labels), c.K)
			right := make([]float64, len(c.Labels))
			for i, y := range c.Labels {
				m.add(i, y, logits[i], 0)
				if int64(argmax(logits[i])) == y {
					right[i] = 1
				}
			}
			return m.result(), right
		}
		m := newLabelMetrics(len(c.Labels), c.K)
		for i, y := range c.Labels {
			ign := []uint64{0}
			if c.Ignored != nil {
				ign[0] = uint64(c.Ignored[i])
			}
			m.add(i, []uint64{uint64(y)}, ign, logits[i], 0)
		}
		return m.result(), nil
	}
	near := nearSklearn(t)
	check := func(what string, got AUCDifference, w diff) {
		near(what+" A", got.A, w.A)
		near(what+" B", got.B, w.B)
		near(what+" difference", got.Difference, w.D)
		near(what+" interval low", got.CI[0], w.CI[0])
		near(what+" interval high", got.CI[1], w.CI[1])
		if math.Abs(got.P-w.P) > 1e-6*max(1, w.P) {
			t.Errorf("%s: p %.9g, want %.9g", what, got.P, w.P)
		}
	}
	for _, cmp := range comps {
		t.Run(cmp.Name, func(t *testing.T) {
			c := byName[cmp.File+"/"+cmp.Name]
			c.fileName = cmp.File
			a, ra := result(c, c.Logits)
			b, rb := result(c, cmp.BLogits)
			per, mean, err := CompareAUCs(a, b)
			if err != nil {
				t.Fatal(err)
			}
			if len(per) != len(cmp.Labels) {
				t.Fatalf("%d labels compared, want %d", len(per), len(cmp.Labels))
			}
			for _, d := range per {
				w, ok := cmp.Labels[strconv.Itoa(d.Label)]
				if !ok {
					t.Fatalf("label %d compared, not in the golden case", d.Label)
				}
				check("label "+strconv.Itoa(d.Label), d, w)
			}
			if (mean == nil) != (cmp.Mean == nil) {
				t.Fatalf("mean %v, want %v", mean, cmp.Mean)
			}
			if mean != nil {
				check("mean", *mean, *cmp.Mean)
			}
			if w := cmp.Accuracy; w != nil {
				got, err := CompareRight(ra, rb)
				if err != nil {
					t.Fatal(err)
				}
				near("accuracy A", got.A, w.A)
				near("accuracy B", got.B, w.B)
				near("McNemar's p", got.P, w.P)
				if got.AOnly != w.AOnly || got.BOnly != w.BOnly {
					t.Errorf("%+v, want %+v", got, *w)
				}
			}
			// A model against itself.
			per, mean, err = CompareAUCs(a, a)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range append(per, derefOr(mean)...) {
				if d.Difference != 0 || d.P != 1 || d.CI != [2]float64{0, 0} {
					t.Errorf("itself: %+v", d)
				}
			}
		})
	}
	// Evaluations of other examples are refused.
	c := byName["multilabel.json/five labels"]
	a, _ := result(c, c.Logits)
	c.Labels = append([]int64{c.Labels[1]}, c.Labels[1:]...)
	b, _ := result(c, c.Logits)
	if _, _, err := CompareAUCs(a, b); err == nil {
		t.Error("evaluations of different examples compared")
	}
	if _, err := CompareRight([]float64{1, 0}, []float64{1}); err == nil {
		t.Error("McNemar's test of different examples")
	}
}

// derefOr is the mean's difference as a slice: none where nil.
func derefOr(d *AUCDifference) []AUCDifference {
	if d == nil {
		return nil
	}
	return []AUCDifference{*d}
}
