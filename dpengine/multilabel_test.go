package dpengine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestMultiLabelNorms: with the multi-label loss head (Config.MultiLabel:
// each of the fixtures' ten logits a label, a sample's labels the bits of
// its label), the engine's per-sample norms in every mode, on the CPU and
// a device with memory of its own, are each sample's own gradient's (the
// norm check's oracle: a plain backward pass of the same loss a sample at
// a time); with label smoothing too (towards ½), whose norms are not the
// plain loss's; with positive weights too (PosWeight); label sets with
// bits beyond the labels are refused.
func TestMultiLabelNorms(t *testing.T) {
	forEachEngine(t, []string{"cnn", "resnet_eval", "vit", "crossvit", "windowconv"}, func(t *testing.T, name string, dev runtime.Device, mode Mode) {
		const n = 3
		x, _, _, _ := engineBatch(t, name, n)
		rng := rand.New(rand.NewPCG(uint64(len(name)), 3))
		y := make([]int64, n)
		for i := range y {
			y[i] = int64(rng.IntN(1 << 10))
		}
		y[0] = 0 // no label applies
		g, rp := preparedFixture(t, name, 4)
		cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
		cfg.MultiLabel = true
		checkedNorms(t, g, rp, cfg, x, y)
	})
	// Label smoothing towards ½: the norm check holds (its direct pass
	// smooths alike) and the norms are not the plain loss's.
	x, _, _, _ := engineBatch(t, "cnn", 3)
	y := []int64{0, 5, 1023}
	totals := map[float64][]float64{}
	for _, alpha := range []float64{0, 0.2} {
		g, rp := preparedFixture(t, "cnn", 4)
		cfg := compareConfig(runtime.CPU{}, BK, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
		cfg.MultiLabel, cfg.LabelSmoothing = true, alpha
		e := checkedNorms(t, g, rp, cfg, x, y)
		_, tot, err := e.ClippedSum(x, y)
		if err != nil {
			t.Fatal(err)
		}
		totals[alpha] = tot
		if alpha == 0 {
			if _, _, err := e.ClippedSum(x[:2*28*28], []int64{1 << 10, 3}); err == nil || !strings.Contains(err.Error(), "beyond its 10 labels") {
				t.Errorf("a label set beyond the labels: %v", err)
			}
		}
	}
	for i := range totals[0] {
		if math.Abs(totals[0][i]-totals[0.2][i]) < 1e-6*totals[0][i] {
			t.Errorf("sample %d: the smoothed loss's norm %v is the plain loss's %v", i, totals[0.2][i], totals[0][i])
		}
	}
	// Positive weights: the norm check holds in every mode (its direct
	// pass weighs alike), the norms are not the plain loss's, and weights
	// that are not one a label, finite and non-negative are refused.
	posWeight := []float64{4, 0.5, 1, 1, 2, 1, 1, 0, 3, 1}
	for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
		for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
			g, rp := preparedFixture(t, "cnn", 4)
			cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
			cfg.MultiLabel, cfg.PosWeight = true, posWeight
			_, tot, err := checkedNorms(t, g, rp, cfg, x, y).ClippedSum(x, y)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(tot); i++ { // sample 0 has no label: no positive term
				if math.Abs(tot[i]-totals[0][i]) < 1e-6*totals[0][i] {
					t.Errorf("%s %s sample %d: the weighed loss's norm %v is the plain loss's %v", dev.Name(), mode, i, tot[i], totals[0][i])
				}
			}
		}
	}
	for _, c := range []struct {
		w     []float64
		multi bool
		want  string
	}{
		{posWeight[:3], true, "3 positive weights for a head of 10 labels"},
		{append([]float64{-1}, posWeight[1:]...), true, "label 0's positive weight -1"},
		{append([]float64{math.Inf(1)}, posWeight[1:]...), true, "label 0's positive weight +Inf"},
		{posWeight, false, "multi-label loss head"},
	} {
		g, rp := preparedFixture(t, "cnn", 4)
		cfg := compareConfig(runtime.CPU{}, BK, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
		cfg.MultiLabel, cfg.PosWeight = c.multi, c.w
		if _, err := New(g, rp, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("positive weights %v (multi-label %v): %v, want %q", c.w, c.multi, err, c.want)
		}
	}
}

// TestWideMultiLabelNorms: a multi-label head of more labels than a
// label's bits hold (130: interned sets of three words, internal/labelset)
// gives each sample's own gradient's norms in every mode, on the CPU and
// a device with memory of its own; the norms follow the sets (a sample's
// labels past the first word change them); an unknown handle is refused.
func TestWideMultiLabelNorms(t *testing.T) {
	const k = 130
	x, _, _, _ := engineBatch(t, "cnn", 3)
	sets := [][]int{{0, 64, 129}, {}, {5, 77, 128}}
	y := make([]int64, len(sets))
	for i, s := range sets {
		var err error
		if y[i], err = labelset.Of(k, s); err != nil {
			t.Fatal(err)
		}
	}
	var first []float64
	for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
		for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
			g, rp := fixturePreparedWith(t, "cnn", nil, rewrite.Options{PlanOptions: rewrite.PlanOptions{Batch: 4}, NumClasses: k, HeadSeed: 1})
			cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
			cfg.MultiLabel = true
			e := checkedNorms(t, g, rp, cfg, x, y)
			_, tot, err := e.ClippedSum(x, y)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = tot
				// Sample 2 without its labels past the first word: other norms.
				y2 := slices.Clone(y)
				if y2[2], err = labelset.Of(k, []int{5}); err != nil {
					t.Fatal(err)
				}
				_, tot2, err := e.ClippedSum(x, y2)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(tot2[2]-tot[2]) < 1e-6*tot[2] || tot2[0] != tot[0] {
					t.Errorf("sample 2's norm %v with labels 77 and 128, %v without; sample 0's %v and %v", tot[2], tot2[2], tot[0], tot2[0])
				}
				if _, _, err := e.ClippedSum(x, []int64{y[0], 1 << 40, y[2]}); err == nil || !strings.Contains(err.Error(), "no interned set") {
					t.Errorf("an unknown label set: %v", err)
				}
			}
			for i := range tot {
				if !(math.Abs(tot[i]-first[i]) <= 1e-4*first[i]) { // NaN fails too
					t.Errorf("%s %s sample %d: norm %v, the CPU's bk %v", dev.Name(), mode, i, tot[i], first[i])
				}
			}
		}
	}
}

// TestPartialSetNorms: label sets that ignore labels (labelset.OfIgnoring:
// CheXpert's uncertain findings under uncertain=ignore), of 10 labels (a
// label's bits) and of 130 (interned words), give each sample's own
// gradient's norms in every mode, on the CPU and a device with memory of
// its own (the norm check's direct pass); a sample that ignores every
// label has no gradient (norm 0, not NaN); ignoring a label changes that
// sample's norm and no other's.
func TestPartialSetNorms(t *testing.T) {
	x, _, _, _ := engineBatch(t, "cnn", 3)
	for _, k := range []int{10, 130} {
		all := make([]int, k)
		for j := range all {
			all[j] = j
		}
		sets := []struct{ on, ignored []int }{{[]int{0, 3}, []int{1, k - 1}}, {nil, all}, {[]int{2, k - 2}, nil}}
		y := make([]int64, len(sets))
		for i, s := range sets {
			var err error
			if y[i], err = labelset.OfIgnoring(k, s.on, s.ignored); err != nil {
				t.Fatal(err)
			}
		}
		// Sample 2 ignoring label 2, which applies to it.
		y2 := slices.Clone(y)
		var err error
		if y2[2], err = labelset.OfIgnoring(k, []int{k - 2}, []int{2}); err != nil {
			t.Fatal(err)
		}
		for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
			for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
				g, rp := fixturePreparedWith(t, "cnn", nil, rewrite.Options{PlanOptions: rewrite.PlanOptions{Batch: 4}, NumClasses: int64(k), HeadSeed: 1})
				cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4)
				cfg.MultiLabel = true
				e := checkedNorms(t, g, rp, cfg, x, y)
				_, tot, err := e.ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				_, tot2, err := e.ClippedSum(x, y2)
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%d labels, %s %s", k, dev.Name(), mode)
				if tot[1] != 0 || tot2[1] != 0 {
					t.Errorf("%s: a sample ignoring every label has norm %v (%v), want 0", name, tot[1], tot2[1])
				}
				if !(tot[0] > 0) || !(tot[2] > 0) || tot2[0] != tot[0] || !(math.Abs(tot2[2]-tot[2]) > 1e-6*tot[2]) {
					t.Errorf("%s: norms %v; with sample 2 ignoring label 2, %v", name, tot, tot2)
				}
				// The ignored labels uncertain against soft targets (every
				// third label's 0.7): the norm check holds, the sample that
				// ignores every label has a gradient, sample 2 (none
				// ignored) keeps its norm.
				g, rp = fixturePreparedWith(t, "cnn", nil, rewrite.Options{PlanOptions: rewrite.PlanOptions{Batch: 4}, NumClasses: int64(k), HeadSeed: 1})
				cfg.UncertainTargets = make([]float64, k)
				for j := 0; j < k; j += 3 {
					cfg.UncertainTargets[j] = 0.7
				}
				_, soft, err := checkedNorms(t, g, rp, cfg, x, y).ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				if !(soft[1] > 0) || !(math.Abs(soft[0]-tot[0]) > 1e-6*tot[0]) || !(math.Abs(soft[2]-tot[2]) <= 1e-6*tot[2]) {
					t.Errorf("%s: norms with soft targets %v, without %v", name, soft, tot)
				}
			}
		}
	}
}
