package dptrain

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestEvalCurves holds the ROC curves (EvalResult.Curve) of the golden
// two-class and multi-label cases to scikit-learn's roc_curve, point for
// point (testdata/metrics/curves.json, testdata/gen/make_metrics.py),
// and the operating points three rules choose (sensitivity=0.9,
// specificity=0.8, youden) to the generator's; each point's threshold,
// taken as a decision threshold (--threshold), decides exactly its
// examples.
func TestEvalCurves(t *testing.T) {
	curves := readCases[struct {
		File   string `json:"file"`
		Name   string `json:"name"`
		Labels map[string]struct {
			Points [][4]int64     `json:"points"` // tp, fp, tn, fn
			Sens   [4]int64       `json:"sensitivity=0.9"`
			Spec   [4]int64       `json:"specificity=0.8"`
			Youden [4]int64       `json:"youden"`
			SensCI [4]*[2]float64 `json:"sensitivity=0.9 ci"`
			SpecCI [4]*[2]float64 `json:"specificity=0.8 ci"`
			YouCI  [4]*[2]float64 `json:"youden ci"`
		} `json:"labels"`
	}](t, "curves.json", 8)
	two := map[string]groupedCase{}
	for _, c := range readCases[groupedCase](t, "cases.json", 9) {
		two[c.Name] = c
	}
	multi := map[string]groupedCase{}
	for _, c := range readCases[groupedCase](t, "multilabel.json", 5) {
		multi[c.Name] = c
	}
	for _, cv := range curves {
		t.Run(cv.Name, func(t *testing.T) {
			var res *EvalResult
			var c groupedCase
			// decided counts label j's examples above threshold th.
			var decided func(j int, th float64) (tp, fp int64)
			cut := func(th float64) float64 { return math.Log(th / (1 - th)) }
			if cv.File == "cases.json" {
				c = two[cv.Name]
				m := newMetrics(len(c.Labels), 2)
				for i, y := range c.Labels {
					m.add(i, y, c.Logits[i], 0)
				}
				res = m.result()
				decided = func(_ int, th float64) (tp, fp int64) {
					for i, y := range c.Labels {
						if float64(c.Logits[i][1])-float64(c.Logits[i][0]) > cut(th) {
							if y == 1 {
								tp++
							} else {
								fp++
							}
						}
					}
					return
				}
			} else {
				c = multi[cv.Name]
				m := newLabelMetrics(len(c.Labels), c.K)
				for i, y := range c.Labels {
					ign := []uint64{0}
					if c.Ignored != nil {
						ign[0] = uint64(c.Ignored[i])
					}
					m.add(i, []uint64{uint64(y)}, ign, c.Logits[i], 0)
				}
				res = m.result()
				decided = func(j int, th float64) (tp, fp int64) {
					for i, y := range c.Labels {
						if c.Ignored != nil && c.Ignored[i]>>j&1 == 1 {
							continue
						}
						if float64(c.Logits[i][j]) > cut(th) {
							if y>>j&1 == 1 {
								tp++
							} else {
								fp++
							}
						}
					}
					return
				}
			}
			if len(cv.Labels) == 0 {
				t.Fatal("no curves in the golden case")
			}
			for js, want := range cv.Labels {
				j, _ := strconv.Atoi(js)
				got := res.Curve(j)
				if len(got) != len(want.Points) {
					t.Fatalf("label %d: %d points, scikit-learn's %d", j, len(got), len(want.Points))
				}
				for i, p := range got {
					if [4]int64{p.TP, p.FP, p.TN, p.FN} != want.Points[i] {
						t.Errorf("label %d point %d: %+v, scikit-learn's (tp, fp, tn, fn) %v", j, i, p, want.Points[i])
					}
					if p.Threshold > 0 && p.Threshold < 1 {
						if tp, fp := decided(j, p.Threshold); tp != p.TP || fp != p.FP {
							t.Errorf("label %d point %d: deciding above %v decides %d and %d false positives, want %d and %d", j, i, p.Threshold, tp, fp, p.TP, p.FP)
						}
					}
				}
				for _, r := range []struct {
					rule string
					want [4]int64
					ci   [4]*[2]float64
				}{{"sensitivity=0.9", want.Sens, want.SensCI}, {"specificity=0.8", want.Spec, want.SpecCI}, {"youden", want.Youden, want.YouCI}} {
					rule, err := ParsePointRule(r.rule)
					if err != nil {
						t.Fatal(err)
					}
					op, ok := res.OperatingPoint(j, rule)
					if !ok || [4]int64{op.TP, op.FP, op.TN, op.FN} != r.want || op.Label != j ||
						op.Sensitivity != op.TPR || op.Specificity != 1-op.FPR || op.PPV != ratio(op.TP, op.TP+op.FP) || op.NPV != ratio(op.TN, op.TN+op.FN) {
						t.Errorf("label %d, %s: %+v (%v); want (tp, fp, tn, fn) %v", j, r.rule, op, ok, r.want)
					}
					for i, ci := range []*[2]float64{op.SensitivityCI, op.SpecificityCI, op.PPVCI, op.NPVCI} {
						nearCI(t, fmt.Sprintf("label %d, %s, figure %d", j, r.rule, i), ci, r.ci[i])
					}
				}
			}
		})
	}
	// By hand: class 1 at 0.9 and 0.7, class 0 at 0.8 and 0.6 (z₁ − z₀
	// their logits): Youden's index ½ twice, the higher threshold taken;
	// sensitivity ½ first reached at 0.9, specificity ½ last kept at 0.7.
	m := newMetrics(4, 2)
	for i, p := range []float64{0.9, 0.8, 0.7, 0.6} {
		m.add(i, int64(1-i%2), []float32{0, float32(math.Log(p / (1 - p)))}, 0)
	}
	res := m.result()
	for _, r := range []struct {
		rule   string
		tp, fp int64
	}{{"youden", 1, 0}, {"sensitivity=0.5", 1, 0}, {"specificity=0.5", 2, 1}, {"sensitivity=1", 2, 1}, {"specificity=1", 1, 0}} {
		rule, _ := ParsePointRule(r.rule)
		if op, ok := res.OperatingPoint(1, rule); !ok || op.TP != r.tp || op.FP != r.fp {
			t.Errorf("by hand, %s: %+v; want %d true and %d false positives", r.rule, op, r.tp, r.fp)
		}
	}
	// No curves where they are undefined: more than two classes.
	for _, c := range readCases[groupedCase](t, "cases.json", 9) {
		if c.K > 2 {
			m := newMetrics(len(c.Labels), c.K)
			for i, y := range c.Labels {
				m.add(i, y, c.Logits[i], 0)
			}
			if res := m.result(); res.CurveLabels() != nil || res.Curve(1) != nil {
				t.Errorf("%s: curves of %d classes", c.Name, c.K)
			}
		}
	}
}

// TestParsePointRule checks the operating point rules read and refused.
func TestParsePointRule(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"sensitivity=0.9", "sensitivity=0.9", ""},
		{"specificity=1", "specificity=1", ""},
		{"youden", "youden", ""},
		{"sensitivity=0", "", "wants S in (0, 1]"},
		{"specificity=1.5", "", "wants S in (0, 1]"},
		{"sensitivity=x", "", "wants S in (0, 1]"},
		{"youden=1", "", "want sensitivity=S"},
		{"sensitivity", "", "want sensitivity=S"},
		{"f1", "", "want sensitivity=S"},
	} {
		r, err := ParsePointRule(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || r.String() != tc.want):
			t.Errorf("%q: %v, %v; want %s", tc.in, r, err, tc.want)
		}
	}
}
