package dptrain

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"testing"
)

// TestEvalMetrics holds EvalResult's figures to scikit-learn's and
// scipy's on seeded cases (testdata/gen/make_metrics.py): two, three and
// twelve classes, a class never predicted, a class without examples (no
// AUC then — no mean, the others' each their own), one neither in the
// data nor predicted (out of the macro F1), and logits with ties (the
// AUC's ties counted as half); the AUCs' DeLong intervals (two classes;
// each class against the rest).
func TestEvalMetrics(t *testing.T) {
	cases := readCases[struct {
		Name             string         `json:"name"`
		K                int            `json:"k"`
		Labels           []int64        `json:"labels"`
		Logits           [][]float32    `json:"logits"`
		Accuracy         float64        `json:"accuracy"`
		AccuracyCI       [2]float64     `json:"accuracy_ci95"`
		BalancedAccuracy float64        `json:"balanced_accuracy"`
		MacroF1          float64        `json:"macro_f1"`
		PerClass         []ClassMetrics `json:"per_class"`
		Top5             *float64       `json:"top5_accuracy"`
		AUC              *float64       `json:"auc"`
		AUCCI            *[2]float64    `json:"auc_ci95"`
		ECE              float64        `json:"ece"`
		Threshold        float64        `json:"threshold"`
	}](t, "cases.json", 9)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			m := newMetrics(len(c.Labels), c.K)
			if c.Threshold != 0 {
				// A two-class model's operating point: the evaluator's cut.
				ev := &Evaluator{k: c.K}
				if err := ev.SetThresholds([]float64{c.Threshold}); err != nil {
					t.Fatal(err)
				}
				m.cut = ev.cut
			}
			for i, y := range c.Labels {
				m.add(i, y, c.Logits[i], 0)
			}
			got := m.result()
			near := nearSklearn(t)
			near("accuracy", got.Accuracy, c.Accuracy)
			near("accuracy CI low", got.AccuracyCI[0], c.AccuracyCI[0])
			near("accuracy CI high", got.AccuracyCI[1], c.AccuracyCI[1])
			near("balanced accuracy", got.BalancedAccuracy, c.BalancedAccuracy)
			near("macro F1", got.MacroF1, c.MacroF1)
			near("ECE", *got.ECE, c.ECE)
			// The reliability diagram's bins: every example in one, and
			// the ECE their weighted gaps.
			var binned int
			var gaps float64
			for _, b := range got.Reliability {
				binned += b.Examples
				gaps += float64(b.Examples) * math.Abs(b.Accuracy-b.Confidence) / float64(len(c.Labels))
				if b.Examples > 0 && !(b.Confidence >= b.Lo && b.Confidence < b.Hi+1e-12) {
					t.Errorf("bin [%v, %v): mean confidence %v", b.Lo, b.Hi, b.Confidence)
				}
			}
			if len(got.Reliability) != eceBins || binned != len(c.Labels) {
				t.Errorf("%d bins of %d examples", len(got.Reliability), binned)
			}
			near("ECE from the reliability bins", gaps, c.ECE)
			for k, w := range c.PerClass {
				g := got.PerClass[k]
				near("precision", g.Precision, w.Precision)
				near("recall", g.Recall, w.Recall)
				near("F1", g.F1, w.F1)
				if g.Support != w.Support {
					t.Errorf("class %d: support %d, want %d", k, g.Support, w.Support)
				}
				// Each class's AUC against the rest (more than two
				// classes), from float32 probabilities.
				switch {
				case (g.AUC == nil) != (w.AUC == nil):
					t.Errorf("class %d: AUC %v, want %v", k, g.AUC, w.AUC)
				case w.AUC != nil && !(math.Abs(*g.AUC-*w.AUC) <= 1e-4):
					t.Errorf("class %d: AUC = %.6g, scikit-learn's %.6g", k, *g.AUC, *w.AUC)
				}
				nearCI(t, fmt.Sprint("class ", k, "'s AUC"), g.AUCCI, w.AUCCI)
			}
			switch {
			case (got.Top5 == nil) != (c.Top5 == nil):
				t.Errorf("top-5 %v, want %v", got.Top5, c.Top5)
			case c.Top5 != nil:
				near("top-5", *got.Top5, *c.Top5)
			}
			switch {
			case (got.AUC == nil) != (c.AUC == nil):
				t.Errorf("AUC %v, want %v", got.AUC, c.AUC)
			case c.AUC != nil:
				// The probabilities are kept in float32.
				if !(math.Abs(*got.AUC-*c.AUC) <= 1e-4) { // NaN fails too
					t.Errorf("AUC = %.6g, scikit-learn's %.6g", *got.AUC, *c.AUC)
				}
			}
			nearCI(t, "AUC", got.AUCCI, c.AUCCI)
		})
	}
}

// TestEvalMetricsMultiLabel holds a multi-label EvalResult to
// scikit-learn's figures (testdata/gen/make_metrics.py): the share of
// right label decisions (1 − hamming_loss), the exact matches
// (accuracy_score), each label's precision, recall, F1 and AUC, the macro
// F1 and AUC, each label's balanced accuracy's mean, each label's average
// precision (average_precision_score) and their mean, each label's
// calibration error and reliability bins (calibration_curve's) and their
// mean, the examples' label
// ranking average precision's mean (Evaluator.RankingPrecision,
// label_ranking_average_precision_score), and the loss (the
// sigmoids' binary cross-entropy by numpy's logaddexp); a label no sample
// has has no AUC nor average precision, saturated sigmoids are ranked by
// their logits, and tied scores enter a threshold together.
func TestEvalMetricsMultiLabel(t *testing.T) {
	cases := readCases[struct {
		Name             string         `json:"name"`
		K                int            `json:"k"`
		Labels           []int64        `json:"labels"`
		Ignored          []int64        `json:"ignored"`
		Logits           [][]float32    `json:"logits"`
		Accuracy         float64        `json:"accuracy"`
		ExactMatch       float64        `json:"exact_match"`
		MacroF1          float64        `json:"macro_f1"`
		BalancedAccuracy float64        `json:"balanced_accuracy"`
		PerClass         []ClassMetrics `json:"per_class"`
		AUC              *float64       `json:"auc"`
		AUCCI            *[2]float64    `json:"auc_ci95"`
		MAP              *float64       `json:"map"`
		LRAP             float64        `json:"lrap"`
		Loss             float64        `json:"loss"`
		Thresholds       []float64      `json:"thresholds"`
		LabelECE         float64        `json:"label_ece"`
	}](t, "multilabel.json", 5)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			m := newLabelMetrics(len(c.Labels), c.K)
			if c.Thresholds != nil {
				// The evaluator's cut: each threshold as a logit.
				ev := &Evaluator{k: c.K, multiLabel: true}
				if err := ev.SetThresholds(c.Thresholds); err != nil {
					t.Fatal(err)
				}
				m.cut = ev.cut
			}
			var lrap float64
			order := make([]int, c.K)
			var ignored int64
			for i, y := range c.Labels {
				set := []uint64{uint64(y)} // K ≤ 64: one word
				var ign []uint64           // nil: none ignored
				if c.Ignored != nil {
					ign = []uint64{uint64(c.Ignored[i])}
					ignored += int64(bits.OnesCount64(ign[0]))
				}
				m.add(i, set, ign, c.Logits[i], sigmoidLoss(c.Logits[i], set, ign))
				lrap += rankingPrecision(c.Logits[i], set, ign, order)
			}
			nearSklearn(t)("label ranking average precision", lrap/float64(len(c.Labels)), c.LRAP)
			got := m.result()
			near := nearSklearn(t)
			if got.IgnoredLabels != ignored {
				t.Errorf("%d labels ignored, want %d", got.IgnoredLabels, ignored)
			}
			if !got.MultiLabel || got.Confusion != nil || got.Top5 != nil || got.AccuracyCI != nil || got.ECE != nil {
				t.Errorf("a multi-label result with single-label figures: %+v", got)
			}
			near("label accuracy", got.Accuracy, c.Accuracy)
			near("exact match", got.ExactMatch, c.ExactMatch)
			near("macro F1", got.MacroF1, c.MacroF1)
			near("balanced accuracy", got.BalancedAccuracy, c.BalancedAccuracy)
			near("loss", got.Loss, c.Loss)
			if got.LabelECE == nil {
				t.Error("no mean label calibration error")
			} else {
				near("mean label calibration error", *got.LabelECE, c.LabelECE)
			}
			nearPerClass(t, got.PerClass, c.PerClass)
			if (got.AUC == nil) != (c.AUC == nil) || c.AUC != nil && math.Abs(*got.AUC-*c.AUC) > 1e-6 {
				t.Errorf("AUC %v, want %v", got.AUC, c.AUC)
			}
			nearCI(t, "mean AUC", got.AUCCI, c.AUCCI)
			if (got.MAP == nil) != (c.MAP == nil) || c.MAP != nil && math.Abs(*got.MAP-*c.MAP) > 1e-6 {
				t.Errorf("mAP %v, want %v", got.MAP, c.MAP)
			}
		})
	}
}

// nearCI checks a 95 % interval against the generator's (DeLong's, by
// brute force over the pairs: testdata/gen/make_metrics.py), to 1e-6:
// both nil, or both ends near.
func nearCI(t *testing.T, what string, got, want *[2]float64) {
	t.Helper()
	switch {
	case (got == nil) != (want == nil):
		t.Errorf("%s's 95 %% interval %v, want %v", what, got, want)
	case got != nil && !(math.Abs(got[0]-want[0]) <= 1e-6 && math.Abs(got[1]-want[1]) <= 1e-6):
		t.Errorf("%s's 95 %% interval %.9g, want %.9g", what, *got, *want)
	}
}

// nearPerClass checks each class's or label's figures against the
// generator's: precision, recall, F1 and support, and where it has them
// the AUC, its interval, the average precision and a label's calibration
// error with its reliability bins (scikit-learn's calibration_curve).
func nearPerClass(t *testing.T, got, want []ClassMetrics) {
	t.Helper()
	near := nearSklearn(t)
	if len(got) != len(want) {
		t.Fatalf("%d classes' figures, want %d", len(got), len(want))
	}
	for j, w := range want {
		g := got[j]
		near(fmt.Sprint(j, "'s precision"), g.Precision, w.Precision)
		near(fmt.Sprint(j, "'s recall"), g.Recall, w.Recall)
		near(fmt.Sprint(j, "'s F1"), g.F1, w.F1)
		if g.Support != w.Support || (g.AUC == nil) != (w.AUC == nil) || (g.AP == nil) != (w.AP == nil) {
			t.Errorf("%d: support %d, AUC %v, AP %v; want %d, %v, %v", j, g.Support, g.AUC, g.AP, w.Support, w.AUC, w.AP)
			continue
		}
		if w.AUC != nil {
			near(fmt.Sprint(j, "'s AUC"), *g.AUC, *w.AUC)
		}
		nearCI(t, fmt.Sprint(j, "'s AUC"), g.AUCCI, w.AUCCI)
		if w.AP != nil {
			near(fmt.Sprint(j, "'s average precision"), *g.AP, *w.AP)
		}
		if (g.ECE == nil) != (w.ECE == nil) || len(g.Reliability) != len(w.Reliability) {
			t.Errorf("%d: ECE %v with %d bins, want %v with %d", j, g.ECE, len(g.Reliability), w.ECE, len(w.Reliability))
			continue
		}
		if w.ECE != nil {
			near(fmt.Sprint(j, "'s calibration error"), *g.ECE, *w.ECE)
		}
		for b, wb := range w.Reliability {
			gb := g.Reliability[b]
			if gb.Examples != wb.Examples {
				t.Errorf("%d: bin %d holds %d examples, want %d", j, b, gb.Examples, wb.Examples)
			}
			near(fmt.Sprint(j, "'s bin ", b, "'s share of positives"), gb.Accuracy, wb.Accuracy)
			near(fmt.Sprint(j, "'s bin ", b, "'s mean probability"), gb.Confidence, wb.Confidence)
			near(fmt.Sprint(j, "'s bin ", b, "'s edge"), gb.Lo, wb.Lo)
		}
	}
}

// nearSklearn returns a check of a figure against scikit-learn's, to
// 1e-6.
func nearSklearn(t *testing.T) func(what string, got, want float64) {
	return func(what string, got, want float64) {
		t.Helper()
		if !(math.Abs(got-want) <= 1e-6) { // NaN too
			t.Errorf("%s = %.9g, scikit-learn's %.9g", what, got, want)
		}
	}
}

// readCases reads the n golden cases of testdata/metrics/file.
func readCases[C any](t *testing.T, file string, n int) []C {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "metrics", file))
	if err != nil {
		t.Fatal(err)
	}
	var cases []C
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) != n {
		t.Fatalf("%s: %d cases, want %d", file, len(cases), n)
	}
	return cases
}

// TestLabelReliabilityBound: past maxReliabilityLabels labels each label
// keeps its calibration error but not its 15 reliability bins; at the
// bound, both.
func TestLabelReliabilityBound(t *testing.T) {
	for _, k := range []int{maxReliabilityLabels, maxReliabilityLabels + 1} {
		m := newLabelMetrics(3, k)
		logits := make([]float32, k)
		set := make([]uint64, (k+63)/64)
		for i := range 3 {
			for j := range logits {
				logits[j] = float32(i - j%3)
			}
			set[0] = uint64(i)
			m.add(i, set, nil, logits, 0)
		}
		res := m.result()
		c := res.PerClass[0]
		if c.ECE == nil || res.LabelECE == nil || (len(c.Reliability) == eceBins) != (k <= maxReliabilityLabels) {
			t.Errorf("%d labels: ECE %v, mean %v, %d bins", k, c.ECE, res.LabelECE, len(c.Reliability))
		}
	}
}
