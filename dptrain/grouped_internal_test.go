package dptrain

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// groupedCase is a case of testdata/metrics/grouped.json
// (testdata/gen/make_metrics.py's grouped_case).
type groupedCase struct {
	Name             string         `json:"name"`
	K                int            `json:"k"`
	Combine          string         `json:"combine"`
	Groups           []int32        `json:"groups"`
	Samples          int            `json:"samples"`
	Labels           []int64        `json:"labels"`
	Ignored          []int64        `json:"ignored"`
	Logits           [][]float32    `json:"logits"`
	Threshold        float64        `json:"threshold"`
	Accuracy         float64        `json:"accuracy"`
	AccuracyCI       *[2]float64    `json:"accuracy_ci95"`
	ExactMatch       float64        `json:"exact_match"`
	BalancedAccuracy float64        `json:"balanced_accuracy"`
	MacroF1          float64        `json:"macro_f1"`
	PerClass         []ClassMetrics `json:"per_class"`
	Top5             *float64       `json:"top5_accuracy"`
	AUC              *float64       `json:"auc"`
	AUCCI            *[2]float64    `json:"auc_ci95"`
	MAP              *float64       `json:"map"`
	ECE              *float64       `json:"ece"`
	LabelECE         *float64       `json:"label_ece"`
	Loss             float64        `json:"loss"`
	// fileName is the golden file the case was read from (tests set it).
	fileName string
}

// examples returns the case's examples as Evaluator.Losses gives them,
// and its grouping.
func (c *groupedCase) examples(t *testing.T) (*examples, Grouping) {
	t.Helper()
	multi := c.Ignored != nil
	e := newExamples(len(c.Labels), c.K, multi)
	for i, y := range c.Labels {
		if !multi {
			e.set(i, y, nil, nil, c.Logits[i], softmaxLoss(c.Logits[i], y))
			continue
		}
		set, ign := []uint64{uint64(y)}, []uint64{uint64(c.Ignored[i])} // K ≤ 64: one word
		e.set(i, 0, set, ign, c.Logits[i], sigmoidLoss(c.Logits[i], set, ign))
	}
	names := make([]string, c.Samples)
	for g := range names {
		names[g] = "study" + strconv.Itoa(g)
	}
	return e, Grouping{Of: c.Groups, Names: names, Combine: c.Combine}
}

// softmaxLoss is Losses's loss of one example of a single-label model.
func softmaxLoss(logits []float32, y int64) float64 {
	p := make([]float64, len(logits))
	softmax(logits, p)
	return -math.Log(p[y])
}

// TestEvalGrouped holds a grouped evaluation's figures (RunGrouped:
// a study's views scored as one) to scikit-learn's of the groups' combined
// probabilities — the mean of the examples', or the largest of each class
// (then normalized) or label — on seeded cases of groups of one to four
// examples interleaved in the data (testdata/gen/make_metrics.py): two,
// three and twelve classes, a two-class operating point, five labels,
// labels ignored; every figure, the loss that of the combined
// probabilities.
func TestEvalGrouped(t *testing.T) {
	cases := readCases[groupedCase](t, "grouped.json", 10)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			e, gr := c.examples(t)
			var cut []float64
			if c.Threshold != 0 {
				cut = ThresholdCuts([]float64{c.Threshold})
			}
			got, err := grouped(e, gr, cut)
			if err != nil {
				t.Fatal(err)
			}
			near := nearSklearn(t)
			if got.Samples != c.Samples || got.Groups == nil || got.Groups.Examples != len(c.Labels) || got.Groups.Combine != c.Combine {
				t.Fatalf("%d samples, groups %+v; want %d groups of %d examples by %s", got.Samples, got.Groups, c.Samples, len(c.Labels), c.Combine)
			}
			near("accuracy", got.Accuracy, c.Accuracy)
			near("balanced accuracy", got.BalancedAccuracy, c.BalancedAccuracy)
			near("macro F1", got.MacroF1, c.MacroF1)
			near("loss", got.Loss, c.Loss)
			nearCI(t, "accuracy", got.AccuracyCI, c.AccuracyCI)
			if e.multi {
				near("exact match", got.ExactMatch, c.ExactMatch)
				near("mAP", *got.MAP, *c.MAP)
				near("mean label calibration error", *got.LabelECE, *c.LabelECE)
			} else {
				near("ECE", *got.ECE, *c.ECE)
			}
			if (got.Top5 == nil) != (c.Top5 == nil) || c.Top5 != nil && math.Abs(*got.Top5-*c.Top5) > 1e-6 {
				t.Errorf("top-5 %v, want %v", got.Top5, c.Top5)
			}
			if (got.AUC == nil) != (c.AUC == nil) || c.AUC != nil && math.Abs(*got.AUC-*c.AUC) > 1e-6 {
				t.Errorf("AUC %v, want %v", got.AUC, c.AUC)
			}
			nearCI(t, "AUC", got.AUCCI, c.AUCCI)
			nearPerClass(t, got.PerClass, c.PerClass)
		})
	}
}

// goldenCases reads a golden file of ungrouped cases — cases.json's
// single-label or multilabel.json's multi-label ones — as groupedCases,
// a multi-label case's Ignored filled (zeros where it ignores nothing):
// Ignored is how a groupedCase is known to be multi-label. Callers set
// Groups and Samples.
func goldenCases(t *testing.T, file string) []groupedCase {
	t.Helper()
	cases := readCases[groupedCase](t, file, map[string]int{"cases.json": 9, "multilabel.json": 5}[file])
	for i, c := range cases {
		if file == "multilabel.json" && c.Ignored == nil {
			cases[i].Ignored = make([]int64, len(c.Labels))
		}
	}
	return cases
}

// goldenByName is both golden files' cases (goldenCases) by "file/name".
func goldenByName(t *testing.T) map[string]groupedCase {
	t.Helper()
	byName := map[string]groupedCase{}
	for _, file := range []string{"cases.json", "multilabel.json"} {
		for _, c := range goldenCases(t, file) {
			byName[file+"/"+c.Name] = c
		}
	}
	return byName
}

// TestEvalGroupedSingles checks that groups of one example each are
// scored exactly as the examples are ungrouped, figure for figure, by
// either combination.
func TestEvalGroupedSingles(t *testing.T) {
	for _, file := range []string{"cases.json", "multilabel.json"} {
		for _, c := range goldenCases(t, file) {
			for _, combine := range []string{CombineMean, CombineMax} {
				t.Run(file+"/"+c.Name+"/"+combine, func(t *testing.T) {
					c.Samples = len(c.Labels)
					c.Groups = make([]int32, len(c.Labels))
					for i := range c.Groups {
						c.Groups[i] = int32(i)
					}
					c.Combine = combine
					e, gr := c.examples(t)
					got, err := grouped(e, gr, nil)
					if err != nil {
						t.Fatal(err)
					}
					var want *EvalResult
					if e.multi {
						m := newLabelMetrics(e.n, e.k)
						for i := range e.n {
							m.add(i, e.truth[i*e.w:(i+1)*e.w], e.ignored[i*e.w:(i+1)*e.w], c.Logits[i], e.loss[i])
						}
						want = m.result()
					} else {
						m := newMetrics(e.n, e.k)
						for i, y := range c.Labels {
							m.add(i, y, c.Logits[i], e.loss[i])
						}
						want = m.result()
					}
					if got.Groups.Single != e.n || got.Groups.Largest != 1 {
						t.Errorf("groups %+v; want %d of one example", got.Groups, e.n)
					}
					got.Groups = nil
					if !slices.Equal(got.CurveLabels(), want.CurveLabels()) {
						t.Errorf("curves of labels %v, want %v", got.CurveLabels(), want.CurveLabels())
					}
					for _, j := range want.CurveLabels() {
						if !slices.Equal(got.Curve(j), want.Curve(j)) {
							t.Errorf("label %d's ROC curve differs", j)
						}
					}
					got.roc, want.roc = nil, nil
					if !reflect.DeepEqual(got, want) {
						t.Errorf("groups of one scored\n%+v\nungrouped\n%+v", got, want)
					}
				})
			}
		}
	}
}

// TestEvalGroupedErrors checks that a group of examples of different
// labels is refused naming both, as are groupings that do not fit.
func TestEvalGroupedErrors(t *testing.T) {
	logits := [][]float32{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}
	single := &groupedCase{K: 3, Labels: []int64{0, 0, 2}, Logits: logits, Groups: []int32{0, 1, 0}, Samples: 2, Combine: CombineMean}
	multi := &groupedCase{K: 3, Labels: []int64{0b011, 0b011, 0b001}, Ignored: []int64{0, 0, 0b010}, Logits: logits, Groups: []int32{1, 0, 1}, Samples: 2, Combine: CombineMax}
	for _, tc := range []struct {
		name string
		c    *groupedCase
		edit func(*Grouping)
		want string
	}{
		{"classes", single, nil, `group "study0": a.jpg is of class 0, c.jpg of class 2`},
		{"label sets", multi, nil, `group "study1": label 1: a.jpg has it, c.jpg ignores it`},
		{"combine", single, func(g *Grouping) { g.Combine = "median" }, `"median": want mean or max`},
		{"group out of range", single, func(g *Grouping) { g.Of = []int32{0, 2, 0} }, "b.jpg: group 2 of 2"},
		{"empty group", single, func(g *Grouping) { g.Of = []int32{0, 0, 0} }, `group "study1" has no examples`},
		{"unnamed", single, func(g *Grouping) { g.Example = nil }, "example 0 is of class 0, example 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, gr := tc.c.examples(t)
			gr.Example = func(i int) string { return string(rune('a'+i)) + ".jpg" }
			if tc.edit != nil {
				tc.edit(&gr)
			}
			_, err := grouped(e, gr, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// grouped scores e's groups of gr as RunGrouped does; cut are the
// decision thresholds as logits (nil: none).
func grouped(e *examples, gr Grouping, cut []float64) (*EvalResult, error) {
	ge, sum, err := e.groups(gr)
	if err != nil {
		return nil, err
	}
	res := ge.evaluate(nil, cut)
	res.Groups = sum
	return res, nil
}
