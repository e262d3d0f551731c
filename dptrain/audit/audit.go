package audit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
)

// Kind is a kind of canary.
type Kind string

const (
	// Gradient canaries are Dirac per-sample gradients injected before
	// clipping (white box).
	Gradient Kind = "gradient"
	// Input canaries are mislabeled examples added to the data (black
	// box).
	Input Kind = "input"
)

// Options configures an audit.
type Options struct {
	Kind Kind
	// Canaries is m, the number of canaries drawn (each included with
	// probability ½).
	Canaries int
	// KPlus and KMinus are how many canaries the auditor guesses
	// "included" (highest scores) and "excluded" (lowest scores); the rest
	// are abstentions. KPlus + KMinus ≤ Canaries.
	KPlus, KMinus int
	// Confidence of the lower bound, e.g. 0.95.
	Confidence float64
	// Pool holds the images input canaries are drawn from (Kind Input);
	// it must have at least Canaries examples and should not overlap the
	// training data.
	Pool data.Dataset
	// Source draws the canaries and their inclusion; nil means a secure
	// source.
	Source *dpengine.Source
}

// Result is the outcome of an audit.
type Result struct {
	Kind       Kind    `json:"kind"`
	Canaries   int     `json:"canaries"`
	Included   int     `json:"included"`
	KPlus      int     `json:"k_plus"`
	KMinus     int     `json:"k_minus"`
	Guesses    int     `json:"guesses"`
	Correct    int     `json:"correct"`
	Confidence float64 `json:"confidence"`
	// Claimed is the ε the accountant reports for the run, at Delta.
	Claimed float64 `json:"claimed_epsilon"`
	Delta   float64 `json:"delta"`
	// Bound is the empirical lower bound on ε.
	Bound float64 `json:"epsilon_lower_bound"`
	// MaxBound is the bound had every guess been right: the most this
	// audit could show.
	MaxBound float64 `json:"max_bound"`
	// Violation says whether the bound exceeds the claimed ε.
	Violation bool   `json:"violation"`
	Statement string `json:"statement"`
	// Report is the training run's report.
	Report *dptrain.Report `json:"run"`
}

// Run audits one training run of cfg: it draws the canaries, adds the
// included ones to cfg's training data (or gradients), runs dptrain.Run
// with cfg otherwise unchanged, scores the canaries and computes the bound.
// cfg.Events, if set, still sees every event.
func Run(cfg dptrain.Config, o Options) (*Result, error) {
	m := o.Canaries
	switch {
	case m < 1:
		return nil, fmt.Errorf("audit: need at least one canary, got %d", m)
	case o.KPlus < 0 || o.KMinus < 0 || o.KPlus+o.KMinus > m || o.KPlus+o.KMinus == 0:
		return nil, fmt.Errorf("audit: guesses k+ = %d and k- = %d must be non-negative, not both 0, and sum to at most the %d canaries", o.KPlus, o.KMinus, m)
	case !(o.Confidence > 0 && o.Confidence < 1):
		return nil, fmt.Errorf("audit: confidence %v must be in (0, 1)", o.Confidence)
	case cfg.Settings.NonPrivate:
		return nil, errors.New("audit: a non-private run claims no ε to audit")
	case cfg.Resume:
		return nil, errors.New("audit: a resumed run cannot be audited (the canaries' scores are not checkpointed)")
	case cfg.GradientCanaries > 0:
		return nil, errors.New("audit: the configuration already has gradient canaries")
	case len(cfg.Settings.ClassWeights) > 0 && o.Kind == Input:
		// An input canary of a class weighed below 1 would move the sum
		// less than the worst case the guarantee bounds; a gradient
		// canary has no class and weighs 1.
		return nil, errors.New("audit: input canaries of a run with class weights would weigh their class's weight, not the worst case's 1: audit it with gradient canaries (--canary-kind gradient)")
	}
	// The canaries are units of the run's privacy unit: at user level
	// (where the data names users, or --privacy-unit user) each is a user
	// of its own, sampled, clipped and noised as one — a gradient canary a
	// user of one Dirac gradient, an input canary a user of one
	// mislabeled image — so that the audit measures the guarantee the run
	// claims, per example or per user.
	src := o.Source
	if src == nil {
		src = dpengine.NewSecureSource()
	}
	rng := src.Rand()
	in := make([]bool, m)
	included := 0
	for i := range in {
		in[i] = rng.IntN(2) == 1
		if in[i] {
			included++
		}
	}
	scores := make([]float64, m)
	var score func() error
	switch o.Kind {
	case Gradient:
		s, err := gradientCanaries(&cfg, in, scores, rng)
		if err != nil {
			return nil, err
		}
		score = s
	case Input:
		s, err := inputCanaries(&cfg, o.Pool, in, scores, rng)
		if err != nil {
			return nil, err
		}
		score = s
	default:
		return nil, fmt.Errorf("audit: unknown canary kind %q (want gradient or input)", o.Kind)
	}
	rep, err := dptrain.Run(cfg)
	if err != nil {
		return nil, err
	}
	if err := score(); err != nil {
		return nil, err
	}
	r, v := Guess(scores, in, o.KPlus, o.KMinus)
	res := &Result{Kind: o.Kind, Canaries: m, Included: included, KPlus: o.KPlus, KMinus: o.KMinus, Guesses: r, Correct: v,
		Confidence: o.Confidence, Report: rep}
	if rep.Privacy != nil {
		res.Claimed, res.Delta = rep.Privacy.Epsilon, rep.Privacy.Delta
	}
	if res.Bound, err = EpsilonLowerBound(m, r, v, res.Delta, o.Confidence); err != nil {
		return nil, err
	}
	if res.MaxBound, err = EpsilonLowerBound(m, r, r, res.Delta, o.Confidence); err != nil {
		return nil, err
	}
	res.Violation = res.Bound > res.Claimed
	res.Statement = statement(res)
	return res, nil
}

// statement says in words what the numbers mean.
func statement(r *Result) string {
	conf := 100 * r.Confidence
	if r.Violation {
		return fmt.Sprintf("VIOLATION: with %g %% confidence the run is not (%.3g, %.3g)-DP, yet the accountant claims ε = %.3g: "+
			"the clipping, the noise or the sampling does not do what the accountant assumes", conf, r.Bound, r.Delta, r.Claimed)
	}
	s := fmt.Sprintf("no violation found: the %s-canary audit shows ε ≥ %.3g with %g %% confidence, not above the claimed ε = %.3g. "+
		"This is a lower bound from one run, not a proof of privacy", r.Kind, r.Bound, conf, r.Claimed)
	if r.MaxBound <= r.Claimed {
		s += fmt.Sprintf("; with these %d guesses even a perfect score could only show ε ≥ %.3g, so it could not have caught a violation of this size: use more canaries or guesses", r.Guesses, r.MaxBound)
	}
	return s
}

// Guess ranks the canaries by score, guesses "included" for the kPlus
// highest and "excluded" for the kMinus lowest, and returns the number of
// guesses r and of correct ones v. Ties are broken by index.
func Guess(scores []float64, in []bool, kPlus, kMinus int) (r, v int) {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return 0
	})
	for k, i := range idx {
		switch {
		case k < kPlus:
			r++
			if in[i] {
				v++
			}
		case k >= len(idx)-kMinus:
			r++
			if !in[i] {
				v++
			}
		}
	}
	return r, v
}

// gradientCanaries makes the included canaries Dirac gradient canaries of
// cfg, each at its own coordinate of the trainable parameters (drawn
// without replacement once the engine exists) with a value just under the
// clip norm (the largest contribution clipping allows, for every clip
// function), and arranges for every step's private gradient at each
// canary's coordinate, included or not, to be added to its score.
func gradientCanaries(cfg *dptrain.Config, in []bool, scores []float64, rng *rand.Rand) (func() error, error) {
	m := len(in)
	value := cfg.Settings.Clip * (1 - 1e-6)
	if cfg.Settings.ClipQuantile > 0 {
		// Adaptive clipping moves the clip norm R_t: a canary beyond any
		// of them is clipped to R_t at every step, the largest
		// contribution it allows (Abadi's clipping, the only one it
		// adapts), and its score counts each step's coordinate in units
		// of that step's R_t, the noise's scale too.
		value = math.MaxFloat32
	}
	clip := cfg.Settings.Clip // the clip norm of the step under way
	coords := make([]dpengine.DiracCanary, m)
	var names []string
	for _, b := range in {
		if b {
			cfg.GradientCanaries++
		}
	}
	cfg.DrawCanaries = func(e *dpengine.Engine) ([]dpengine.DiracCanary, error) {
		names = e.ParamNames()
		params := e.Params()
		total := 0
		for _, p := range params {
			total += len(p)
		}
		if total < m {
			return nil, fmt.Errorf("audit: %d gradient canaries need as many coordinates, but the model has %d trainable parameters", m, total)
		}
		// m distinct flat positions (Floyd's algorithm), then mapped to
		// (tensor, index).
		seen := make(map[int]bool, m)
		flat := make([]int, 0, m)
		for j := total - m; j < total; j++ {
			t := rng.IntN(j + 1)
			if seen[t] {
				t = j
			}
			seen[t] = true
			flat = append(flat, t)
		}
		for i, f := range flat {
			k := 0
			for f >= len(params[k]) {
				f -= len(params[k])
				k++
			}
			coords[i] = dpengine.DiracCanary{Param: k, Index: f, Value: value}
		}
		var out []dpengine.DiracCanary
		for i, c := range coords {
			if in[i] {
				out = append(out, c)
			}
		}
		return out, nil
	}
	user := cfg.Events
	var g [1]float32 // one element of a private gradient, copied to the host
	cfg.Events = func(ev dptrain.Event) {
		if ev.Kind == dptrain.StepDone {
			// The auditor sees every private gradient (white box): each
			// canary's coordinate, copied from the device.
			for i, c := range coords {
				if !ev.Engine.CopyGradient(names[c.Param], c.Index, g[:]) {
					// DrawCanaries drew the coordinates from the model.
					panic(fmt.Sprintf("audit: canary coordinate %d of parameter %q is not in the model", c.Index, names[c.Param]))
				}
				scores[i] += float64(g[0]) / clip
			}
			clip = ev.ClipNorm // the next step's
		}
		if user != nil {
			user(ev)
		}
	}
	return func() error { return nil }, nil
}

// inputCanaries draws m distinct images from pool, gives each a random
// wrong label, adds the included ones to cfg's training data, and returns
// the scoring: minus the trained model's loss on each canary (black box:
// only the final model is used).
func inputCanaries(cfg *dptrain.Config, pool data.Dataset, in []bool, scores []float64, rng *rand.Rand) (func() error, error) {
	m := len(in)
	if pool == nil || pool.Len() < m {
		n := 0
		if pool != nil {
			n = pool.Len()
		}
		return nil, fmt.Errorf("audit: %d input canaries need as many images, the canary pool has %d", m, n)
	}
	k := cfg.Train.NumClasses()
	multi := data.IsMultiLabel(cfg.Train)
	// The labels a canary can be given: K classes, or on multi-label data
	// the 2^K label sets (as bits to K = labelset.Bits, drawn word by
	// word past it: wideSets).
	labels := int64(k)
	switch {
	case multi && data.IsMultiLabel(pool) && pool.NumClasses() == k && k > labelset.Bits:
		labels = math.MaxInt64
	case multi && data.IsMultiLabel(pool) && pool.NumClasses() == k:
		labels = 1 << k
	case multi:
		return nil, fmt.Errorf("audit: the training data is multi-label with %d labels, the canary pool is not (read it as the training data is, e.g. a csv listing's :multilabel)", k)
	case data.IsMultiLabel(pool):
		return nil, errors.New("audit: the canary pool is multi-label, the training data is not")
	}
	if labels < 2 {
		return nil, fmt.Errorf("audit: mislabeled canaries need at least 2 classes, the data has %d", k)
	}
	if ps, ts := pool.SampleShape(), cfg.Train.SampleShape(); !slices.Equal(ps, ts) {
		return nil, fmt.Errorf("audit: canary samples have shape %v, training samples %v", ps, ts)
	}
	all := &canarySet{pool: pool, idx: rng.Perm(pool.Len())[:m], labels: make([]int64, m), classes: k, multi: multi}
	for i, j := range all.idx {
		// A uniformly random label other than the true one: on
		// multi-label data a label set other than the image's own, each
		// label wrong with probability about ½.
		if multi && k > labelset.Bits {
			l, err := otherWideSet(int64(pool.Label(j)), k, rng)
			if err != nil {
				return nil, fmt.Errorf("audit: canary %d: %w", i, err)
			}
			all.labels[i] = l
			continue
		}
		own := int64(pool.Label(j))
		if multi && labelset.Partial(own) {
			// A partial set is none of the full sets: any of them.
			all.labels[i] = rng.Int64N(labels)
			continue
		}
		l := rng.Int64N(labels - 1)
		if l >= own {
			l++
		}
		all.labels[i] = l
	}
	inc := &canarySet{pool: pool, labels: []int64{}, classes: k, multi: multi}
	for i, b := range in {
		if b {
			inc.idx = append(inc.idx, all.idx[i])
			inc.labels = append(inc.labels, all.labels[i])
		}
	}
	cfg.Train = &withCanaries{base: cfg.Train, canaries: inc}
	g := cfg.Graph
	var sample []int64
	for _, d := range pool.SampleShape() {
		sample = append(sample, int64(d))
	}
	return func() error {
		ev, err := dptrain.NewEvaluatorOn(cfg.Device, g, sample, min(256, m))
		if err == nil {
			err = ev.SetMultiLabel(multi) // the loss the run trained on
		}
		if err != nil {
			return fmt.Errorf("audit: scoring the input canaries: %w", err)
		}
		return ev.Losses(all, func(i int, _ int64, _ []float32, loss float64) {
			scores[i] = -loss
		})
	}, nil
}

// otherWideSet draws a set of k > labelset.Bits labels uniformly from
// those other than own's (each label in or out with probability ½, drawn
// again where it is own; a partial own is none of them), interned
// (labelset).
func otherWideSet(own int64, k int, rng *rand.Rand) (int64, error) {
	w := labelset.Words(k)
	mine, draw := make([]uint64, w), make([]uint64, w)
	if err := labelset.Expand(own, k, mine); err != nil {
		return 0, err
	}
	for {
		for i := range draw {
			draw[i] = rng.Uint64()
		}
		if r := k % 64; r != 0 {
			draw[w-1] &= 1<<uint(r) - 1
		}
		if labelset.Partial(own) || !slices.Equal(draw, mine) {
			return labelset.FromWords(k, draw)
		}
	}
}

// canarySet is a set of pool images with replaced labels: classes, or
// label sets where multi is set (data.MultiLabeled).
type canarySet struct {
	pool    data.Dataset
	idx     []int
	labels  []int64
	classes int
	multi   bool
}

func (c *canarySet) MultiLabel() bool { return c.multi }

func (c *canarySet) Len() int           { return len(c.idx) }
func (c *canarySet) NumClasses() int    { return c.classes }
func (c *canarySet) Label(i int) int    { return int(c.labels[i]) }
func (c *canarySet) SampleShape() []int { return c.pool.SampleShape() }
func (c *canarySet) Labels() []int64    { return slices.Clone(c.labels) }

// Fill implements data.Dataset: one pool image at a time (canaries are
// few), with the canary's label.
func (c *canarySet) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	per := sampleLen(c.pool)
	if len(x) < len(indices)*per || (y != nil && len(y) < len(indices)) {
		return fmt.Errorf("audit: canary batch buffers too small for %d samples", len(indices))
	}
	var one [1]int
	for k, i := range indices {
		if i < 0 || i >= len(c.idx) {
			return fmt.Errorf("audit: canary index %d out of range [0,%d)", i, len(c.idx))
		}
		one[0] = c.idx[i]
		if err := c.pool.Fill(x[k*per:(k+1)*per], nil, one[:], rng); err != nil {
			return err
		}
		if y != nil {
			y[k] = c.labels[i]
		}
	}
	return nil
}

// withCanaries is the training data followed by the included canaries.
type withCanaries struct {
	base     data.Dataset
	canaries *canarySet
}

// NumUsers, UserOf and UserName implement data.Users where the training
// data names users: each canary is a user of its own, numbered after the
// data's (a name no data user has: it holds a NUL byte).
func (d *withCanaries) NumUsers() int {
	u, ok := d.base.(data.Users)
	if !ok || u.NumUsers() <= 0 {
		return 0
	}
	return u.NumUsers() + d.canaries.Len()
}

func (d *withCanaries) UserOf(i int) int {
	u := d.base.(data.Users)
	if n := d.base.Len(); i >= n {
		return u.NumUsers() + i - n
	}
	return u.UserOf(i)
}

func (d *withCanaries) UserName(k int) string {
	u := d.base.(data.Users)
	if n := u.NumUsers(); k >= n {
		return fmt.Sprintf("\x00audit canary %d", k-n)
	}
	return u.UserName(k)
}

// MultiLabel implements data.MultiLabeled: the training data's.
func (d *withCanaries) MultiLabel() bool { return data.IsMultiLabel(d.base) }

// UncertainTargets is the training data's (data.UncertainTargetsOf): the
// canaries' label sets are full, and ignore none.
func (d *withCanaries) UncertainTargets() []float64 { return data.UncertainTargetsOf(d.base) }

// Classes names the training data's classes or labels, where it does.
func (d *withCanaries) Classes() []string {
	if c, ok := d.base.(interface{ Classes() []string }); ok {
		return c.Classes()
	}
	return nil
}

func (d *withCanaries) Len() int           { return d.base.Len() + d.canaries.Len() }
func (d *withCanaries) NumClasses() int    { return d.base.NumClasses() }
func (d *withCanaries) SampleShape() []int { return d.base.SampleShape() }
func (d *withCanaries) Label(i int) int {
	if n := d.base.Len(); i >= n {
		return d.canaries.Label(i - n)
	}
	return d.base.Label(i)
}
func (d *withCanaries) Labels() []int64 {
	return append(d.base.Labels(), d.canaries.Labels()...)
}

// Fill implements data.Dataset: runs of training examples in one call to
// the base data, canaries one by one.
func (d *withCanaries) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	per := sampleLen(d.base)
	if len(x) < len(indices)*per || (y != nil && len(y) < len(indices)) {
		return fmt.Errorf("audit: batch buffers too small for %d samples", len(indices))
	}
	n := d.base.Len()
	var one [1]int
	for k := 0; k < len(indices); {
		if i := indices[k]; i >= n {
			one[0] = i - n
			var yk []int64
			if y != nil {
				yk = y[k : k+1]
			}
			if err := d.canaries.Fill(x[k*per:(k+1)*per], yk, one[:], rng); err != nil {
				return err
			}
			k++
			continue
		}
		e := k
		for e < len(indices) && indices[e] < n {
			e++
		}
		var yk []int64
		if y != nil {
			yk = y[k:e]
		}
		if err := d.base.Fill(x[k*per:e*per], yk, indices[k:e], rng); err != nil {
			return err
		}
		k = e
	}
	return nil
}

// sampleLen returns the values of one sample of d.
func sampleLen(d data.Dataset) int {
	n := 1
	for _, s := range d.SampleShape() {
		n *= s
	}
	return n
}
