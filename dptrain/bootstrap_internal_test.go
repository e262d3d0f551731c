package dptrain

import (
	"math"
	"testing"
)

// TestBootstrap checks the bootstrap's intervals against what they must
// be: on the golden two-class case the AUC's bootstrap standard error is
// DeLong's within 15 %; with every example three times over, drawing
// the examples one by one narrows the interval by about √3 (the copies
// taken as independent) while drawing them as clusters of their copies
// gives the original data's interval back; the same seed draws the same
// intervals, another seed others; multi-label figures have intervals too.
func TestBootstrap(t *testing.T) {
	cases := readCases[groupedCase](t, "cases.json", 9)
	c := cases[0] // "binary"
	if c.Name != "binary" {
		t.Fatalf("case %q", c.Name)
	}
	c.Samples, c.Groups = 1, make([]int32, len(c.Labels))
	e, _ := c.examples(t)
	width := func(ci *[2]float64) float64 {
		if ci == nil {
			t.Fatal("no interval")
		}
		return ci[1] - ci[0]
	}
	const resamples = 2000
	base := bootstrapOf(t, e, BootstrapOptions{Resamples: resamples, Seed: 1})
	res := e.evaluate(nil, nil)
	if r := width(base.AUC) / width(res.AUCCI); math.Abs(r-1) > 0.15 {
		t.Errorf("the AUC's bootstrap interval %v is %.3f× DeLong's %v", *base.AUC, r, *res.AUCCI)
	}
	if !(base.Accuracy[0] <= res.Accuracy && res.Accuracy <= base.Accuracy[1]) || base.Units != "examples" || base.Count != e.n {
		t.Errorf("bootstrap %+v around accuracy %v", base, res.Accuracy)
	}
	again := bootstrapOf(t, e, BootstrapOptions{Resamples: resamples, Seed: 1})
	other := bootstrapOf(t, e, BootstrapOptions{Resamples: resamples, Seed: 2})
	if *again.AUC != *base.AUC || *other.AUC == *base.AUC {
		t.Errorf("seed 1 twice: %v, %v; seed 2: %v", *base.AUC, *again.AUC, *other.AUC)
	}

	// Every example three times: as examples, and as clusters.
	d := c
	d.Labels, d.Logits, d.Groups = nil, nil, nil
	var clusters []int32
	for i := range c.Labels {
		for range 3 {
			d.Labels, d.Logits = append(d.Labels, c.Labels[i]), append(d.Logits, c.Logits[i])
			clusters = append(clusters, int32(i))
		}
	}
	d.Groups = make([]int32, len(d.Labels))
	e3, _ := d.examples(t)
	flat := bootstrapOf(t, e3, BootstrapOptions{Resamples: resamples, Seed: 1})
	clustered := bootstrapOf(t, e3, BootstrapOptions{Resamples: resamples, Seed: 1, Clusters: clusters})
	for _, f := range []struct {
		name           string
		b, flat, clust *[2]float64
	}{{"AUC", base.AUC, flat.AUC, clustered.AUC}, {"accuracy", base.Accuracy, flat.Accuracy, clustered.Accuracy}, {"loss", base.Loss, flat.Loss, clustered.Loss}} {
		if r := width(f.flat) / width(f.b) * math.Sqrt(3); math.Abs(r-1) > 0.15 {
			t.Errorf("%s: the copies drawn one by one: %.3f× the interval over √3", f.name, r)
		}
		if r := width(f.clust) / width(f.b); math.Abs(r-1) > 0.15 {
			t.Errorf("%s: the copies drawn as clusters: %.3f× the original interval", f.name, r)
		}
	}
	if clustered.Units != "clusters" || clustered.Count != len(c.Labels) {
		t.Errorf("clusters: %s, %d", clustered.Units, clustered.Count)
	}

	// Multi-label: the label AUCs, their mean, mAP and exact matches.
	ml := goldenCases(t, "multilabel.json")[0]
	ml.Samples, ml.Groups = 1, make([]int32, len(ml.Labels))
	em, _ := ml.examples(t)
	b := bootstrapOf(t, em, BootstrapOptions{Resamples: 200, Seed: 1})
	if b.AUC == nil || b.MAP == nil || b.ExactMatch == nil || len(b.PerClass) != ml.K || b.PerClass[0] == nil {
		t.Errorf("multi-label bootstrap %+v", b)
	}
}

// TestPairedBootstrap: a model against itself differs by 0 in every
// resample; against a noised copy (testdata/metrics/compare.json's) the
// AUC difference's interval is about DeLong's paired one (within 20 %) and
// its point the paired test's; with every example three times over,
// drawing the copies as clusters gives the original interval back.
func TestPairedBootstrap(t *testing.T) {
	c := readCases[groupedCase](t, "cases.json", 9)[0]
	c.Samples, c.Groups = 1, make([]int32, len(c.Labels))
	b := c
	b.Logits = readCases[struct {
		BLogits [][]float32 `json:"b_logits"`
	}](t, "compare.json", 3)[0].BLogits
	kept := func(c groupedCase) *Kept { e, _ := c.examples(t); return &Kept{e: e} }
	ka, kb := kept(c), kept(b)
	self, err := PairedBootstrap(ka, ka, BootstrapOptions{Resamples: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range self.Figures {
		if f.Difference != 0 || f.CI != [2]float64{0, 0} || f.AAbove != 0.5 {
			t.Errorf("itself: %+v", f)
		}
	}
	pb, err := PairedBootstrap(ka, kb, BootstrapOptions{Resamples: 2000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	per, _, err := CompareAUCs(ka.e.evaluate(nil, nil), kb.e.evaluate(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	auc := func(r *PairedBootstrapResult) PairedBootstrapFigure {
		for _, f := range r.Figures {
			if f.Name == "AUC" {
				return f
			}
		}
		t.Fatalf("no AUC in %+v", r)
		return PairedBootstrapFigure{}
	}
	f := auc(pb)
	if math.Abs(f.Difference-per[0].Difference) > 1e-6 || math.Abs((f.CI[1]-f.CI[0])/(per[0].CI[1]-per[0].CI[0])-1) > 0.2 {
		t.Errorf("the AUC difference %+v; DeLong's paired test %+v", f, per[0])
	}
	// Three copies of every example, drawn as clusters.
	var clusters []int32
	c3, b3 := c, b
	c3.Labels, c3.Logits, b3.Logits = nil, nil, nil
	for i := range c.Labels {
		for range 3 {
			c3.Labels, c3.Logits, b3.Logits = append(c3.Labels, c.Labels[i]), append(c3.Logits, c.Logits[i]), append(b3.Logits, b.Logits[i])
			clusters = append(clusters, int32(i))
		}
	}
	b3.Labels = c3.Labels
	c3.Groups, b3.Groups = make([]int32, len(c3.Labels)), make([]int32, len(c3.Labels))
	p3, err := PairedBootstrap(kept(c3), kept(b3), BootstrapOptions{Resamples: 2000, Seed: 1, Clusters: clusters})
	if err != nil {
		t.Fatal(err)
	}
	if f3 := auc(p3); math.Abs((f3.CI[1]-f3.CI[0])/(f.CI[1]-f.CI[0])-1) > 0.15 || p3.Units != "clusters" || p3.Count != len(c.Labels) {
		t.Errorf("clusters of copies: %+v (%s, %d); the original %+v", f3, p3.Units, p3.Count, f)
	}
	if _, err := PairedBootstrap(ka, kept(c3), BootstrapOptions{Resamples: 200}); err == nil {
		t.Error("a paired bootstrap of different data")
	}
}

// bootstrapOf bootstraps the kept examples e as Evaluator.Bootstrap does.
func bootstrapOf(t *testing.T, e *examples, o BootstrapOptions) *BootstrapResult {
	t.Helper()
	k := &Kept{e: e}
	units, kind, err := k.units(o.Clusters)
	if err != nil {
		t.Fatal(err)
	}
	return k.bootstrap(o, units, kind)
}
