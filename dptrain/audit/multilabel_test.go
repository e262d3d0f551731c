package audit

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/testhook"
)

// fmnistGroup is each Fashion-MNIST class's group label (10 upper, 11
// footwear, 12 other): a sample's labels are its class and its group.
var fmnistGroup = [10]int{10, 12, 10, 12, 10, 11, 10, 11, 12, 11}

// multiLabelArrays writes the first n training and test images of the
// Fashion-MNIST slice as an .npz of multi-hot labels — 13 a sample, its
// class's and its group's set — and returns the training and test views.
func multiLabelArrays(t *testing.T, n int) (train, test *data.View) {
	t.Helper()
	arrays := map[string]*npy.Array{}
	for _, split := range []string{"train", "test"} {
		imgs, err := data.LoadString(fmt.Sprintf("idx:../../testdata/fmnist-small:split=%s:limit=%d", split, n))
		if err != nil {
			t.Fatal(err)
		}
		x := &npy.Array{DType: npy.Uint8, Shape: []int{imgs.Len(), 28, 28}}
		y := &npy.Array{DType: npy.Int64, Shape: []int{imgs.Len(), 13}, I64: make([]int64, imgs.Len()*13)}
		for i := range imgs.Len() {
			x.U8 = append(x.U8, imgs.Pixels(i)...)
			y.I64[i*13+imgs.Label(i)] = 1
			y.I64[i*13+fmnistGroup[imgs.Label(i)]] = 1
		}
		arrays["x_"+split], arrays["y_"+split] = x, y
	}
	path := filepath.Join(t.TempDir(), "ml.npz")
	if err := npy.WriteNPZ(path, arrays); err != nil {
		t.Fatal(err)
	}
	view := func(spec string) *data.View {
		imgs, err := data.LoadString(spec)
		if err != nil {
			t.Fatal(err)
		}
		if !imgs.MultiLabel() || imgs.NumClasses() != 13 {
			t.Fatalf("%s: multi-label %v, %d labels", spec, imgs.MultiLabel(), imgs.NumClasses())
		}
		v, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return view("npy:" + path), view("npy:" + path + ":test")
}

// multiLabelConfig is cnnConfig's run, the fixture CNN's head replaced by
// one of 13 labels, on the multi-label data train. Its rate, 0.1, is
// fifty times cnnConfig's: a fresh head's binary cross-entropy
// pushes every logit down for every sample until the model has learnt how
// rare each label is, and that gradient, the same at a coordinate step
// after step, swamps the white-box audit's scores unless the model learns
// it fast (at 2e-3 the audit saw 434 of 500 right with σ/10, no violation;
// at 0.1, 491).
func multiLabelConfig(t *testing.T, train *data.View, eps float64, epochs int) dptrain.Config {
	t.Helper()
	cfg := cnnConfig(t, train, eps, epochs)
	cfg.Settings.Data, cfg.Settings.LR = "fmnist-small multi-label", 0.1
	cfg.Rewrite.NumClasses = 13
	return cfg
}

// TestAuditMultiLabel: a multi-label run is audited. Gradient canaries
// (label-free) find no violation as calibrated and find one with σ divided
// by 10 behind the accountant's back (250 images, 1000 canaries, 10
// epochs, ε = 2); input canaries are images given a label set other than
// their own, scored by the multi-label loss, the run multi-label with them
// among its data; a pool that is not multi-label is refused.
func TestAuditMultiLabel(t *testing.T) {
	train, pool := multiLabelArrays(t, 250)
	o := Options{Kind: Gradient, Canaries: 1000, KPlus: 250, KMinus: 250, Confidence: 0.95, Source: dpengine.NewSeededSource(4)}
	for _, div := range []float64{0, 10} {
		testhook.NoiseDivisor = div
		r, err := Run(multiLabelConfig(t, train, 2, 10), o)
		testhook.NoiseDivisor = 0
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("σ divided by %v: %d/%d correct, bound %.3f (claimed %.3f, at most %.3f)", div, r.Correct, r.Guesses, r.Bound, r.Claimed, r.MaxBound)
		if !r.Report.Settings.MultiLabel {
			t.Fatal("the audited run is not multi-label")
		}
		if r.Violation != (div > 0) {
			t.Errorf("σ divided by %v: violation %v (bound %v, claimed %v)", div, r.Violation, r.Bound, r.Claimed)
		}
	}

	// The canaries' label sets: never the image's own, spread over the
	// 2^13 sets (about half of the 13 labels wrong).
	cfg := multiLabelConfig(t, train, 8, 2)
	in := make([]bool, 200)
	for i := range in {
		in[i] = i%2 == 0
	}
	rng := dpengine.NewSeededSource(6).Rand()
	if _, err := inputCanaries(&cfg, pool, in, make([]float64, len(in)), rng); err != nil {
		t.Fatal(err)
	}
	wc := cfg.Train.(*withCanaries)
	if !data.IsMultiLabel(wc) || wc.Len() != 350 {
		t.Fatalf("training data with the canaries: multi-label %v, %d examples", data.IsMultiLabel(wc), wc.Len())
	}
	wrong := 0
	for i, j := range wc.canaries.idx {
		l := wc.canaries.labels[i]
		if l < 0 || l >= 1<<13 || l == int64(pool.Label(j)) {
			t.Fatalf("canary %d (pool image %d, labels %#x) has label set %#x", i, j, pool.Label(j), l)
		}
		wrong += bits.OnesCount64(uint64(l ^ int64(pool.Label(j))))
	}
	if mean := float64(wrong) / float64(len(wc.canaries.idx)); mean < 5.5 || mean > 7.5 {
		t.Errorf("a canary's label set has %.2f of 13 labels wrong on average, want about 6.5", mean)
	}

	oi := Options{Kind: Input, Canaries: 100, KPlus: 20, KMinus: 20, Confidence: 0.95, Source: dpengine.NewSeededSource(5), Pool: pool}
	r, err := Run(multiLabelConfig(t, train, 8, 2), oi)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("input canaries: %d/%d correct, bound %.3f (claimed %.3f)", r.Correct, r.Guesses, r.Bound, r.Claimed)
	if !r.Report.Settings.MultiLabel || r.Report.Settings.Examples != 250+r.Included || r.Violation || r.Guesses == 0 {
		t.Errorf("input canaries: multi-label %v, %d examples (250 + %d canaries), %d guesses, violation %v", r.Report.Settings.MultiLabel, r.Report.Settings.Examples, r.Included, r.Guesses, r.Violation)
	}

	oi.Pool = view(t, "idx:../../testdata/fmnist-small:split=test:limit=200")
	if _, err := Run(multiLabelConfig(t, train, 8, 1), oi); err == nil {
		t.Error("a pool that is not multi-label for multi-label training data was taken")
	}
}

// TestOtherWideSet: an input canary's label set past a label's 62 bits
// (internal/labelset) is drawn uniformly from the sets other than its
// image's own: never the own set, each label in it about half the time,
// the last word's labels past k never; an image whose set is partial
// (it ignores labels) is given a full set.
func TestOtherWideSet(t *testing.T) {
	const k, draws = 130, 4000
	rng := rand.New(rand.NewPCG(5, 6))
	on := make([]int, k)
	w := make([]uint64, labelset.Words(k))
	owns := []struct{ on, ignored []int }{{}, {on: []int{0, 64, 129}}, {[]int{3}, []int{1, 100}}} // the last partial
	for _, own := range owns {
		mine, err := labelset.OfIgnoring(k, own.on, own.ignored)
		if err != nil {
			t.Fatal(err)
		}
		for range draws {
			l, err := otherWideSet(mine, k, rng)
			if err != nil {
				t.Fatal(err)
			}
			if l == mine || labelset.Partial(l) {
				t.Fatalf("a canary given its own set %v, or a partial set: %d", own, l)
			}
			if err := labelset.Expand(l, k, w); err != nil {
				t.Fatal(err)
			}
			for j := range k {
				if labelset.Has(w, j) {
					on[j]++
				}
			}
		}
	}
	// Each label in with probability ½: 12000 draws, σ ≈ 55; 5σ.
	n := float64(len(owns) * draws)
	for j, c := range on {
		if !(math.Abs(float64(c)-n/2) <= 5*math.Sqrt(n)/2) { // NaN fails too
			t.Errorf("label %d in %d of %v draws", j, c, n)
		}
	}
}
