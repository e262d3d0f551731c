package dptrain

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// AUCDifference is the paired comparison of two models' AUCs on the same
// examples (CompareAUCs): DeLong et al. (1988)'s test of their
// difference, the variance from each example's shares of both AUCs
// (delongShares), the examples independent draws.
type AUCDifference struct {
	// Label is the label compared (a two-class model's: 1), or -1 for
	// the labels' mean AUC.
	Label int     `json:"label"`
	A     float64 `json:"auc_a"`
	B     float64 `json:"auc_b"`
	// Difference is A − B, CI its 95 % interval, Z the difference over
	// its standard error and P the two-sided p-value of no difference
	// (1 where the AUCs do not differ on any example's share: the same
	// scores' order).
	Difference float64    `json:"difference"`
	CI         [2]float64 `json:"difference_ci95"`
	Z          float64    `json:"z"`
	P          float64    `json:"p"`
}

// CompareAUCs compares the AUCs of evaluations a and b, of two models on
// the same examples (the same data read the same way: two-class or
// multi-label, CurveLabels): each label's (a two-class model's class 1's)
// and, of several labels, their mean's, with every label's covariance of
// the two models and of the other labels — DeLong's paired test, where
// R's pROC roc.test(paired = TRUE) gives it for one label. A label
// without two positives and two negatives is left out (its variance
// unknown). An error where the evaluations kept no scores or differ in
// their examples' labels.
func CompareAUCs(a, b *EvalResult) ([]AUCDifference, *AUCDifference, error) {
	la, lb := a.CurveLabels(), b.CurveLabels()
	if la == nil || lb == nil {
		return nil, nil, errors.New("comparing AUCs needs two-class or multi-label evaluations that kept their scores")
	}
	if !slices.Equal(la, lb) {
		return nil, nil, fmt.Errorf("the evaluations have curves of %d and %d labels", len(la), len(lb))
	}
	var per []AUCDifference
	mean := newMeanShares(a.Samples) // the labels' shares of A − B
	var meanA, meanB float64
	var sa, sb []float64
	var pa, pb []bool
	var wa, wb []int
	for _, j := range la {
		sa, pa, wa = a.roc.of(j, sa, pa, wa)
		sb, pb, wb = b.roc.of(j, sb, pb, wb)
		// The same examples, of the same labels (where some examples
		// ignore the label, the same ones): the shares are summed by
		// example.
		if !slices.Equal(pa, pb) || !slices.Equal(wa, wb) {
			return nil, nil, fmt.Errorf("label %d: the evaluations' examples differ (%d and %d examples, or other labels): compare two models on the same data", j, len(pa), len(pb))
		}
		ia, ib := byScore(sa, make([]int, len(sa))), byScore(sb, make([]int, len(sb)))
		aucA, okA := rankAUC(sa, pa, ia)
		aucB, okB := rankAUC(sb, pb, ib)
		shA, shB := make([]float64, len(pa)), make([]float64, len(pb))
		if !okA || !okB || !delongShares(sa, pa, ia, aucA, shA) || !delongShares(sb, pb, ib, aucB, shB) {
			continue // a label without two positives and two negatives
		}
		for i := range shA {
			shA[i] -= shB[i]
		}
		per = append(per, aucDifference(j, aucA, aucB, sumSquares(shA)))
		mean.add(shA, wa)
		meanA, meanB = meanA+aucA, meanB+aucB
	}
	v, ok := mean.variance()
	if len(per) < 2 || !ok {
		return per, nil, nil
	}
	l := float64(len(per))
	m := aucDifference(-1, meanA/l, meanB/l, v)
	return per, &m, nil
}

// aucDifference is the test of a − b of the given variance.
func aucDifference(label int, a, b, variance float64) AUCDifference {
	const z975 = 1.959963984540054
	d := AUCDifference{Label: label, A: a, B: b, Difference: a - b, P: 1}
	se := math.Sqrt(variance)
	d.CI = [2]float64{max(-1, d.Difference-z975*se), min(1, d.Difference+z975*se)}
	if se > 0 {
		d.Z = d.Difference / se
		d.P = math.Erfc(math.Abs(d.Z) / math.Sqrt2)
	}
	return d
}

// AccuracyDifference is McNemar's exact test of two single-label models'
// accuracies on the same examples (CompareRight): of the examples one
// gets right and the other wrong, how many each.
type AccuracyDifference struct {
	A float64 `json:"accuracy_a"`
	B float64 `json:"accuracy_b"`
	// AOnly counts the examples A gets right and B wrong, BOnly the
	// reverse; P is the two-sided exact p-value of no difference, the
	// binomial test of AOnly among AOnly + BOnly at ½ (1 where there are
	// none).
	AOnly int     `json:"a_only"`
	BOnly int     `json:"b_only"`
	P     float64 `json:"p"`
}

// CompareRight compares two models' predictions on the same examples by
// McNemar's exact test: ra and rb say, an example each, whether the model
// gets it right (Evaluator.Right of a single-label model: 1 or 0).
func CompareRight(ra, rb []float64) (AccuracyDifference, error) {
	if len(ra) != len(rb) || len(ra) == 0 {
		return AccuracyDifference{}, fmt.Errorf("comparing %d and %d examples: compare two models on the same data", len(ra), len(rb))
	}
	var d AccuracyDifference
	for i := range ra {
		if ra[i] != 0 && ra[i] != 1 || rb[i] != 0 && rb[i] != 1 {
			return AccuracyDifference{}, errors.New("McNemar's test counts examples right or wrong: a single-label model's")
		}
		d.A += ra[i]
		d.B += rb[i]
		switch {
		case ra[i] > rb[i]:
			d.AOnly++
		case rb[i] > ra[i]:
			d.BOnly++
		}
	}
	d.A /= float64(len(ra))
	d.B /= float64(len(rb))
	d.P = binomTwoSided(min(d.AOnly, d.BOnly), d.AOnly+d.BOnly)
	return d, nil
}

// binomTwoSided is the two-sided exact p-value of k or fewer successes in
// n at ½ (k ≤ n/2): twice the lower tail, at most 1, summed in logs.
func binomTwoSided(k, n int) float64 {
	if n == 0 {
		return 1
	}
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	var tail float64
	for i := 0; i <= k; i++ {
		tail += math.Exp(lg(n) - lg(i) - lg(n-i) - float64(n)*math.Ln2)
	}
	return min(1, 2*tail)
}
