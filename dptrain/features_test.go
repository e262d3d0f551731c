package dptrain_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// forwardPlan runs g forward on the CPU over x, a batch of b samples of
// shape sample, and returns the plan holding its outputs.
func forwardPlan(t *testing.T, g *graph.Graph, b int, sample []int64, x []float32) *runtime.Plan {
	t.Helper()
	p, err := runtime.CompileForBatch(g, b, sample, &runtime.Options{ForwardOnly: true})
	if err == nil {
		err = p.LoadParams()
	}
	if err == nil {
		err = p.SetInput(0, x)
	}
	if err == nil {
		err = p.Forward()
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// forward is forwardPlan's first output.
func forward(t *testing.T, g *graph.Graph, b int, sample []int64, x []float32) []float32 {
	t.Helper()
	out, _ := forwardPlan(t, g, b, sample, x).Output(0)
	return append([]float32(nil), out...)
}

// packed runs split's prefix on the CPU over x, a batch of b samples of
// shape sample, and lays each sample's outputs end to end, as the head
// reads them.
func packed(t *testing.T, split *rewrite.FrozenPrefix, b int, sample []int64, x []float32) []float32 {
	t.Helper()
	p := forwardPlan(t, split.Prefix, b, sample, x)
	if p.NumOutputs() != len(split.Cut) {
		t.Fatalf("the prefix has %d outputs for a cut of %d", p.NumOutputs(), len(split.Cut))
	}
	var rows [][]float32
	for k := range split.Cut {
		out, _ := p.Output(k)
		w := len(out) / b
		for i := range b {
			if k == 0 {
				rows = append(rows, nil)
			}
			rows[i] = append(rows[i], out[i*w:(i+1)*w]...)
		}
	}
	var all []float32
	for _, r := range rows {
		if int64(len(r)) != split.SampleFloats() {
			t.Fatalf("the prefix computes %d floats a sample, the head reads %d", len(r), split.SampleFloats())
		}
		all = append(all, r...)
	}
	return all
}

// TestFeatureCacheHalves: the frozen prefix and the head of a split
// (rewrite.SplitFrozenPrefix) compose to the model — the head's logits on
// the prefix's outputs are the model's on the same inputs — on a CNN's
// classifier, a ResNet's fc and its last block with it, a ViT's head, and
// where the frozen part reaches the trained part through two tensors,
// which the cache packs into one row a sample (CrossViT's two heads, a
// ViT's MLP's second layer with the residual stream beside it).
func TestFeatureCacheHalves(t *testing.T) {
	for _, c := range []struct {
		fixture, train string
		sample         []int64
	}{
		{"cnn", `^classifier\.`, []int64{1, 28, 28}},
		{"resnet_eval", `^fc\.`, []int64{3, 32, 32}},
		{"resnet_eval", `^(layer4|fc)\.`, []int64{3, 32, 32}},
		{"vit", `^heads\.`, []int64{3, 32, 32}},
		{"crossvit", `^heads\.`, []int64{3, 32, 32}},
		{"vit", `encoder_layer_1\.mlp\.3\.`, []int64{3, 32, 32}},
	} {
		t.Run(c.fixture+"/"+c.train, func(t *testing.T) {
			g := fixtureGraph(t, c.fixture)
			opts := rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: c.sample, Batch: 4, Train: regexp.MustCompile(c.train)}}
			rp, err := rewrite.Prepare(g, opts)
			if err != nil {
				t.Fatal(err)
			}
			split, reason, err := rewrite.SplitFrozenPrefix(g, rp, opts.PlanOptions)
			if err != nil || split == nil {
				t.Fatalf("no split: %v %s", err, reason)
			}
			const b = 5
			n := 1
			for _, d := range c.sample {
				n *= int(d)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			x := make([]float32, b*n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			want := forward(t, g, b, c.sample, x)
			feats := packed(t, split, b, c.sample, x)
			got := forward(t, split.Head, b, split.Shape, feats)
			if len(got) != len(want) {
				t.Fatalf("%d logits through the halves, %d through the model", len(got), len(want))
			}
			scale := 0.0
			for _, v := range want {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			for i := range want {
				if !(math.Abs(float64(got[i]-want[i])) <= 1e-6*scale) { // NaN fails too
					t.Fatalf("logit %d: %v through the halves, %v through the model", i, got[i], want[i])
				}
			}
		})
	}
}

// TestRunFeatureCache trains with the same seed twice, on the cached
// outputs of the frozen part and on the whole model at every step: the
// fixture CNN's classifier on the cached output of its frozen
// convolutions, and CrossViT's two heads on the two branches' class
// tokens, packed a sample into one row. The samples, the noise and the
// arithmetic of what is trained are the same, so the runs agree — the
// losses, the test metrics, ε, σ and the trained weights to float32
// rounding — the frozen weights are the model's bit for bit, and the
// trained model (the graph after Run, the whole model) evaluates to the
// last epoch's test metrics, which the cached run took on the head alone:
// the head's graph trains the model's own tensors.
func TestRunFeatureCache(t *testing.T) {
	for _, c := range []struct {
		model, train, trained string
		sample                []int64
		shapes                [][]int64
		tensors, head, prefix int
		users                 bool // examples of 40 users, the guarantee a user's
	}{
		{"cnn", `^classifier\.`, "classifier.", []int64{1, 28, 28}, [][]int64{{512}}, 4, 3, 7, false},
		{"crossvit", `^heads\.`, "heads.", []int64{3, 32, 32}, [][]int64{{32}, {48}}, 4, 0, 0, false},
		// User-level: a sampled user's examples (2 of its 2 or 3) read
		// from the cache, a row each.
		{"cnn", `^classifier\.`, "classifier.", []int64{1, 28, 28}, [][]int64{{512}}, 4, 3, 7, true},
	} {
		name := c.model
		ds := dptrain.FMNISTSlice(t, c.sample)
		if c.users {
			name += "/users"
			ds = usersOfSlice(t, func(i int) string { return fmt.Sprint("user-", i%40) })
		}
		t.Run(name, func(t *testing.T) {
			runFeatureCache(t, ds, c.model, c.train, c.trained, c.sample, c.shapes, c.tensors, c.head, c.prefix)
		})
	}
}

// runFeatureCache trains model's parameters that match train (those
// named trained…) on ds, cached and not, and compares the two runs.
func runFeatureCache(t *testing.T, ds *data.View, model, train, trained string, sample []int64, shapes [][]int64, tensors, headNodes, prefixNodes int) {
	load := func() *graph.Graph { return fixtureGraph(t, model) }
	run := func(cache string) (*dptrain.Report, *graph.Graph) {
		seed := uint64(5)
		g := load()
		rep, err := dptrain.Run(dptrain.Config{
			Settings: dptrain.Settings{
				Model: model + ".onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 2, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 0.5, ClipFn: "abadi",
				Optimizer: "adam", LR: 5e-3, InputShape: sample, Seed: &seed, FeatureCache: cache,
			},
			Graph: g, Train: ds, Test: ds, EvalBatch: 40,
			Rewrite: rewrite.Options{PlanOptions: rewrite.PlanOptions{Train: regexp.MustCompile(train)}},
		})
		if err != nil {
			t.Fatalf("--cache-features %s: %v", cache, err)
		}
		return rep, g
	}
	on, gOn := run(dptrain.FeatureCacheOn)
	off, gOff := run(dptrain.FeatureCacheOff)
	if _, users := data.UsersOf(ds); on.Settings.Users != users || off.Settings.Users != users {
		t.Errorf("%d and %d users trained, the data names %d", on.Settings.Users, off.Settings.Users, users)
	}
	fc := on.FeatureCache
	var floats int64
	for _, sh := range shapes {
		n := int64(1)
		for _, d := range sh {
			n *= d
		}
		floats += n
	}
	if fc == nil || !fc.Cached || len(fc.Tensors) != len(shapes) || !slices.EqualFunc(fc.Shapes, shapes, slices.Equal) ||
		fc.Examples != 2*ds.Len() || fc.Bytes != 4*floats*int64(2*ds.Len()) || headNodes > 0 && (fc.HeadNodes != headNodes || fc.PrefixNodes != prefixNodes) {
		t.Fatalf("the cached run reports %+v", fc)
	}
	if off.FeatureCache == nil || off.FeatureCache.Cached || !strings.Contains(off.FeatureCache.Reason, "off") {
		t.Fatalf("the uncached run reports %+v", off.FeatureCache)
	}
	if on.Settings.Sigma != off.Settings.Sigma || on.Privacy == nil || off.Privacy == nil || on.Privacy.Epsilon != off.Privacy.Epsilon {
		t.Errorf("σ %v and %v, ε %+v and %+v", on.Settings.Sigma, off.Settings.Sigma, on.Privacy, off.Privacy)
	}
	if len(on.Epochs) != 2 || len(off.Epochs) != 2 {
		t.Fatalf("%d and %d epochs", len(on.Epochs), len(off.Epochs))
	}
	for i := range on.Epochs {
		a, b := on.Epochs[i], off.Epochs[i]
		if math.Abs(a.TrainLoss-b.TrainLoss) > 1e-5*b.TrainLoss || a.Test == nil || b.Test == nil ||
			a.Test.Accuracy != b.Test.Accuracy || math.Abs(a.Test.Loss-b.Test.Loss) > 1e-5*b.Test.Loss || a.Clipped != b.Clipped {
			t.Errorf("epoch %d: cached %+v (test %+v), uncached %+v (test %+v)", i+1, a, a.Test, b, b.Test)
		}
	}
	orig := load()
	moved := 0
	for _, v := range orig.Initializers {
		if v.Const == nil || v.Const.F32 == nil {
			continue
		}
		a, b := gOn.Values[v.Name].Const.F32, gOff.Values[v.Name].Const.F32
		if !strings.HasPrefix(v.Name, trained) {
			if !numcheck.SameBits(a, v.Const.F32) || !numcheck.SameBits(b, v.Const.F32) {
				t.Errorf("frozen %s changed", v.Name)
			}
			continue
		}
		if !numcheck.SameBits(a, v.Const.F32) {
			moved++
		}
		for i := range b {
			if !(math.Abs(float64(a[i]-b[i])) <= 1e-6) { // NaN fails too
				t.Errorf("%s[%d]: %v cached, %v uncached", v.Name, i, a[i], b[i])
				break
			}
		}
	}
	if moved != tensors {
		t.Errorf("%d of the %d trained tensors moved in the model", moved, tensors)
	}
	ev, err := dptrain.NewEvaluator(gOn, sample, 40)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ev.Run(ds)
	if err != nil {
		t.Fatal(err)
	}
	last := on.Epochs[1].Test
	if res.Accuracy != last.Accuracy || math.Abs(res.Loss-last.Loss) > 1e-6*last.Loss {
		t.Errorf("the trained model evaluates to %v (loss %v); the last epoch on cached features to %v (%v)", res.Accuracy, res.Loss, last.Accuracy, last.Loss)
	}
}

// TestFeatureCacheRefused: --cache-features on refuses a model or data it
// cannot cache — augmented data, a model trained from its input on — and
// auto (the default) says why it did not cache them; a cached run
// interrupted while caching saves its checkpoint before its first step and
// resumes from it.
func TestFeatureCacheRefused(t *testing.T) {
	ds := smallFMNIST(t)
	base := func(cache, augment, train string) dptrain.Config {
		seed := uint64(1)
		cfg := dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 1, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi", Augment: augment,
				Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed, FeatureCache: cache,
			},
			Graph: cnnGraph(t), Train: ds, DryRun: true,
		}
		if train != "" {
			cfg.Rewrite.Train = regexp.MustCompile(train)
		}
		return cfg
	}
	for _, c := range []struct {
		augment, train, want string
	}{
		{"flip", `^classifier\.`, "augmented (flip)"},
		{"", "", "reads the input itself"},
		{"", `^classifier\.`, ""},
	} {
		for _, cache := range []string{dptrain.FeatureCacheOn, "", "auto"} {
			rep, err := dptrain.Run(base(cache, c.augment, c.train))
			switch {
			case c.want == "" && (err != nil || rep.FeatureCache == nil || !rep.FeatureCache.Cached):
				t.Errorf("%q %q %q: %v, %+v; want it cached", cache, c.augment, c.train, err, rep)
			case c.want != "" && cache == dptrain.FeatureCacheOn && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%q %q %q: error %v; want one saying %q", cache, c.augment, c.train, err, c.want)
			case c.want != "" && cache != dptrain.FeatureCacheOn && (err != nil || rep.FeatureCache == nil || rep.FeatureCache.Cached || !strings.Contains(rep.FeatureCache.Reason, c.want)):
				t.Errorf("%q %q %q: %v, %+v; want no cache because %q", cache, c.augment, c.train, err, rep, c.want)
			}
		}
	}
	if _, err := dptrain.Run(base("yes", "", "")); err == nil || !strings.Contains(err.Error(), "want auto, on or off") {
		t.Errorf("--cache-features yes: %v", err)
	}

	// Interrupted while caching: the checkpoint at step 0, and a resume.
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	cfg := base(dptrain.FeatureCacheOn, "", `^classifier\.`)
	cfg.DryRun, cfg.Checkpoint, cfg.Stop = false, ckpt, func() bool { return true }
	var intr *dptrain.Interrupted
	if _, err := dptrain.Run(cfg); !errors.As(err, &intr) {
		t.Fatalf("stopped while caching: %v", err)
	}
	c, err := dpengine.ReadCheckpoint(ckpt)
	if err != nil || c.Step != 0 {
		t.Fatalf("the checkpoint: %v, %+v", err, c)
	}
	cfg = base(dptrain.FeatureCacheOn, "", `^classifier\.`)
	cfg.DryRun, cfg.Checkpoint, cfg.Resume = false, ckpt, true
	rep, err := dptrain.Run(cfg)
	if err != nil || len(rep.Epochs) != 1 || !rep.FeatureCache.Cached {
		t.Fatalf("resumed: %v, %+v", err, rep)
	}
}

// TestFeatureStore: runs given one store compute the frozen part's
// features once — the second run with other settings of the trained part
// takes the first's rows and trains to the weights it would on its own,
// bit for bit — and recompute them where the key changes: other data,
// other frozen parameters, or test data to cache beside them.
func TestFeatureStore(t *testing.T) {
	sample := []int64{1, 28, 28}
	ds := dptrain.FMNISTSlice(t, sample)
	run := func(store *dptrain.FeatureStore, lr float64, train, test data.Dataset, change func(*graph.Graph)) (*dptrain.Report, *graph.Graph) {
		t.Helper()
		seed := uint64(5)
		g := fixtureGraph(t, "cnn")
		if change != nil {
			change(g)
		}
		cfg := dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 2, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 0.5, ClipFn: "abadi",
				Optimizer: "adam", LR: lr, InputShape: sample, Seed: &seed, FeatureCache: dptrain.FeatureCacheOn,
			},
			Graph: g, Train: train, EvalBatch: 40, FeatureStore: store,
			Rewrite: rewrite.Options{PlanOptions: rewrite.PlanOptions{Train: regexp.MustCompile(`^classifier\.`)}},
		}
		if test != nil {
			cfg.Test = test
		}
		rep, err := dptrain.Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rep, g
	}
	store := &dptrain.FeatureStore{}
	defer store.Close()
	run(store, 5e-3, ds, nil, nil)
	if store.Reused != 0 {
		t.Fatalf("the first run reused %d", store.Reused)
	}
	_, gStored := run(store, 2e-2, ds, nil, nil)
	if store.Reused != 1 {
		t.Fatalf("the second run did not take the stored rows (reused %d)", store.Reused)
	}
	_, gOwn := run(nil, 2e-2, ds, nil, nil)
	sameWeights(t, gOwn, gStored)

	// Each change of the key recomputes; the stored rows are the
	// reference run's before each.
	half := fmnistView(t, "idx:../testdata/fmnist-small:limit=48")
	changeFrozen := func(g *graph.Graph) {
		for _, v := range g.Initializers {
			if v.Const != nil && len(v.Const.F32) > 0 && !strings.HasPrefix(v.Name, "classifier.") {
				v.Const.F32[0] += 0.5
				return
			}
		}
	}
	var gChanged *graph.Graph
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"other data", func() { run(store, 2e-2, half, nil, nil) }},
		{"other frozen parameters", func() { _, gChanged = run(store, 2e-2, ds, nil, changeFrozen) }},
		{"test data to cache too", func() { run(store, 2e-2, ds, ds, nil) }},
	} {
		run(store, 5e-3, ds, nil, nil) // the reference rows, stored or reused
		before := store.Reused
		c.run()
		if store.Reused != before {
			t.Errorf("%s: the stored rows were reused", c.name)
		}
	}
	_, gChangedOwn := run(nil, 2e-2, ds, nil, changeFrozen)
	sameWeights(t, gChangedOwn, gChanged)
}

// TestRunScore: a run given data to score classifies it once with the
// released model — the whole model, or the trained part on the frozen
// part's cached outputs, the parameters' average with --ema — exactly as
// the exported model does; with a store the rows to score are computed
// once for several runs.
func TestRunScore(t *testing.T) {
	sample := []int64{1, 28, 28}
	ds := dptrain.FMNISTSlice(t, sample)
	score := fmnistView(t, "idx:../testdata/fmnist-small:split=test:limit=50")
	store := &dptrain.FeatureStore{}
	defer store.Close()
	var logs bytes.Buffer
	for _, c := range []struct {
		cache string
		ema   float64
		store *dptrain.FeatureStore
	}{{dptrain.FeatureCacheOff, 0, nil}, {dptrain.FeatureCacheOn, 0, nil}, {dptrain.FeatureCacheOn, 0.9, nil}, {dptrain.FeatureCacheOn, 0, store}, {dptrain.FeatureCacheOn, 0.5, store}} {
		seed := uint64(5)
		g := fixtureGraph(t, "cnn")
		rep, err := dptrain.Run(dptrain.Config{
			Settings: dptrain.Settings{
				Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 2, BatchSize: 32,
				Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 0.5, ClipFn: "abadi",
				Optimizer: "adam", LR: 1e-2, InputShape: sample, Seed: &seed, FeatureCache: c.cache, EMADecay: c.ema,
			},
			Graph: g, Train: ds, Score: score, EvalBatch: 16, FeatureStore: c.store, Log: &logs,
			Rewrite: rewrite.Options{PlanOptions: rewrite.PlanOptions{Train: regexp.MustCompile(`^classifier\.`)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if cached := rep.FeatureCache != nil && rep.FeatureCache.Cached; cached != (c.cache == dptrain.FeatureCacheOn) {
			t.Fatalf("%+v: cached %v", c, cached)
		}
		// The released weights are the graph's after the run.
		ev, err := dptrain.NewEvaluator(g, sample, 16)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, score.Len())
		ev.Losses(score, func(i int, label int64, logits []float32, _ float64) {
			if int64(slices.Index(logits, slices.Max(logits))) == label {
				want[i] = 1
			}
		})
		if !slices.Equal(rep.ScoreRight, want) {
			t.Errorf("%+v: scored %v, the released model classifies %v", c, rep.ScoreRight, want)
		}
		if n := len(slices.DeleteFunc(slices.Clone(want), func(b float64) bool { return b == 0 })); n == 0 || n == len(want) {
			t.Errorf("%+v: %d of %d right: the comparison tells nothing", c, n, len(want))
		}
	}
	if got := strings.Count(logs.String(), "for the 50 examples to score computed"); got != 3 {
		t.Errorf("the rows to score computed %d times in four cached runs, two of them with one store; want 3", got)
	}
}

// fmnistView loads spec, Fashion-MNIST images, as the CNN's 1×28×28
// inputs with the data set's normalization.
func fmnistView(t *testing.T, spec string) *data.View {
	t.Helper()
	imgs, err := data.LoadString(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
