package dptrain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/sysmem"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Feature caching (Settings.FeatureCache): a model whose trained part
// follows a frozen part (rewrite.SplitFrozenPrefix) has the tensors
// through which the frozen part reaches the trained part computed once
// per example, and each step runs only the trained part on them. A
// sample's clipped gradient is the same function of the sample, so the
// privacy analysis is unchanged; what changes is that the frozen part's
// forward pass runs once instead of once an epoch, and its activations are
// never kept.
const (
	FeatureCacheAuto = "auto"
	FeatureCacheOn   = "on"
	FeatureCacheOff  = "off"
)

// FeatureCacheReport says whether a run cached its frozen part's outputs
// (Report.FeatureCache) and, where it did not, why.
type FeatureCacheReport struct {
	Cached bool `json:"cached"`
	// Reason says why the run computes the whole model at every step.
	Reason string `json:"reason,omitempty"`
	// Tensors name the cut, Shapes are one sample's shapes of them.
	Tensors []string  `json:"tensors,omitempty"`
	Shapes  [][]int64 `json:"shapes,omitempty"`
	// PrefixNodes run once per example, HeadNodes at every step.
	PrefixNodes int `json:"prefix_nodes,omitempty"`
	HeadNodes   int `json:"head_nodes,omitempty"`
	// Examples counts the cached examples (training and test data), Bytes
	// their memory.
	Examples int   `json:"examples,omitempty"`
	Bytes    int64 `json:"bytes,omitempty"`
	// Disk, where the cache did not fit the memory budget, is the folder
	// whose file system holds it instead: a file removed as soon as it
	// was opened, mapped into memory, whose blocks go back when the run
	// ends (crash included), so that no copy of the features outlives it.
	Disk string `json:"disk,omitempty"`
	// PassBatch is the examples of one pass of the frozen part.
	PassBatch int `json:"pass_batch,omitempty"`
	// Seconds is the time computing them took (0 in a dry run).
	Seconds float64 `json:"seconds,omitempty"`
	// FromKept says the training data's rows were read from the folder
	// Config.KeepFeatures, where an earlier run kept them, instead of
	// computed.
	FromKept bool `json:"from_kept,omitempty"`
	// DeviceBytes is, on a device with memory of its own (a GPU), the
	// memory of the frozen part's forward pass at its batch (cachePass):
	// its weights and buffers, planned on the CPU as
	// dpengine.MeasureActivations plans. The pass runs beside the engine
	// (built before it), so --max-memory counts it; its memory goes back
	// to the device when the pass ends (runtime.Plan.Release).
	DeviceBytes int64 `json:"device_bytes,omitempty"`
}

// planFeatureCache decides whether the run caches its frozen part's
// outputs and splits the model where it does: on, off, or auto — cache
// where the model splits, in memory where the cache fits its memory
// budget — half the memory the machine has available, or on the CPU half
// of maxMemory where set (on a GPU half of it bounds the frozen part's
// pass instead) — else on disk in spillDir where its file system has the
// room ("" : nowhere). The
// trained part then runs as split.Head with split.HeadPlan; the frozen
// part runs on dev in passes of at most pass examples, whose plan is
// compiled here (PlanOnly: sizes checked against maxMemory or the
// machine, nothing allocated; halved until it fits), so that a dry run
// checks it too.
func planFeatureCache(set Settings, dev runtime.Device, g *graph.Graph, rp *rewrite.Plan, opts rewrite.PlanOptions, examples, pass int, maxMemory int64, spillDir string) (*rewrite.FrozenPrefix, *FeatureCacheReport, error) {
	mode := set.FeatureCache
	switch mode {
	case "", FeatureCacheAuto:
		mode = FeatureCacheAuto
	case FeatureCacheOn, FeatureCacheOff:
	default:
		return nil, nil, fmt.Errorf("feature cache %q: want auto, on or off", set.FeatureCache)
	}
	if mode == FeatureCacheOff {
		return nil, &FeatureCacheReport{Reason: "--cache-features off"}, nil
	}
	refuse := func(reason string) (*rewrite.FrozenPrefix, *FeatureCacheReport, error) {
		if mode == FeatureCacheOn {
			return nil, nil, fmt.Errorf("--cache-features on: %s", reason)
		}
		return nil, &FeatureCacheReport{Reason: reason}, nil
	}
	aug, err := data.ParseAugment(set.Augment)
	if err != nil {
		return nil, nil, err
	}
	if !aug.IsNone() {
		return refuse(fmt.Sprintf("the training data is augmented (%s): a sample's input differs at every step", set.Augment))
	}
	split, reason, err := rewrite.SplitFrozenPrefix(g, rp, opts)
	if err != nil {
		return nil, nil, err
	}
	if split == nil {
		return refuse(reason)
	}
	rep := &FeatureCacheReport{Cached: true, Tensors: split.Cut, Shapes: split.Shapes, PrefixNodes: split.PrefixNodes, HeadNodes: split.HeadNodes,
		Examples: examples, Bytes: 4 * split.SampleFloats() * int64(examples)}
	// The cache is host memory: on the CPU --max-memory's, on a GPU the
	// host's alone.
	_, own := dev.(runtime.Freer)
	budget, what := int64(-1), ""
	if avail, _, ok := availableMemory(); ok {
		budget, what = avail/2, "half the memory available"
	}
	if maxMemory > 0 && !own && (budget < 0 || maxMemory/2 < budget) {
		budget, what = maxMemory/2, "half of --max-memory"
	}
	if budget >= 0 && rep.Bytes > budget {
		// On disk, where its file system has the room (a tenth kept free).
		over := fmt.Sprintf("the %d examples' features (%d floats each, %s) exceed %s (%s)", examples, split.SampleFloats(), FormatBytes(rep.Bytes), what, FormatBytes(budget))
		if spillDir == "" {
			return refuse(over)
		}
		free, err := sysmem.DiskFree(spillDir)
		if err != nil {
			return refuse(fmt.Sprintf("%s, and the free space of %s is unknown: %v", over, spillDir, err))
		}
		if rep.Bytes > free-free/10 {
			return refuse(fmt.Sprintf("%s and nine tenths of the free space of %s (%s)", over, spillDir, FormatBytes(free)))
		}
		rep.Disk = spillDir
	}
	// The pass's plan, halved until it fits the memory limit (on a GPU,
	// beside the engine, half of it).
	deviceBytes := func(pp *runtime.Plan) int64 {
		b := pp.ArenaBytes()
		for _, v := range split.Prefix.Initializers {
			if v.DType.IsFloat() {
				b += 4 * v.Shape.NumElements()
			}
		}
		return b
	}
	for rep.PassBatch = max(1, min(pass, examples)); ; rep.PassBatch /= 2 {
		var pp *runtime.Plan
		pp, err = runtime.CompileForBatch(split.Prefix, rep.PassBatch, rp.InputShape, &runtime.Options{ForwardOnly: true, PlanOnly: true, MaxMemory: maxMemory})
		if err == nil && own {
			rep.DeviceBytes = deviceBytes(pp)
			if maxMemory > 0 && rep.DeviceBytes > maxMemory/2 {
				err = fmt.Errorf("%s on the device, over half of --max-memory (%s)", FormatBytes(rep.DeviceBytes), FormatBytes(maxMemory/2))
			}
		}
		if err == nil || rep.PassBatch == 1 {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the frozen part's pass of one example: %w", err)
	}
	return split, rep, nil
}

// maxCachePass bounds the examples of one pass of the frozen part: its
// forward pass at the default physical batch holds no more than a
// training step of the whole model would, where the evaluation batch
// (256 by default) would hold four times that.
const maxCachePass = 64

// cachePass is the frozen part's batch: evalBatch, at most maxCachePass
// and, where the caller fixed one (physical > 0), the physical batch,
// which the caller chose for the memory a pass of the whole model takes.
func cachePass(evalBatch, physical int) int {
	p := min(evalBatch, maxCachePass)
	if physical > 0 {
		p = min(p, physical)
	}
	return max(1, p)
}

// availableMemory is the memory the cache's budget is half of (a
// variable for the tests of the cache on disk).
var availableMemory = sysmem.Available

// features is a dataset of cached outputs of a model's frozen part: one
// row of Shape's floats per example of the dataset it was computed from,
// which gives the labels. Its rows are memory, or a file mapped into
// memory (FeatureCacheReport.Disk) that close gives back.
type features struct {
	data.Dataset
	shape   []int
	row     int
	x       []float32
	release func() error
}

// close gives back a cache on disk; the rows are gone after it.
func (f *features) close() error {
	if f == nil || f.release == nil {
		return nil
	}
	err := f.release()
	f.x, f.release = nil, nil
	return err
}

// SampleShape returns one row's shape.
func (f *features) SampleShape() []int { return f.shape }

// Fill copies the rows at indices; rng is not used (the rows are of
// unaugmented inputs: planFeatureCache refuses augmentation).
func (f *features) Fill(x []float32, y []int64, indices []int, _ *rand.Rand) error {
	if len(x) < len(indices)*f.row {
		return fmt.Errorf("dptrain: features: %d floats for %d rows of %d", len(x), len(indices), f.row)
	}
	for k, i := range indices {
		if i < 0 || i >= f.Dataset.Len() {
			return fmt.Errorf("dptrain: features: index %d out of range [0, %d)", i, f.Dataset.Len())
		}
		copy(x[k*f.row:(k+1)*f.row], f.x[i*f.row:(i+1)*f.row])
		if y != nil {
			y[k] = int64(f.Dataset.Label(i))
		}
	}
	return nil
}

// CheckSources and Fingerprint are the source dataset's, when it has them
// (the run's resume check and its per-epoch check of the files).
func (f *features) CheckSources() error {
	if s, ok := f.Dataset.(sourced); ok {
		return s.CheckSources()
	}
	return nil
}

func (f *features) Fingerprint() string {
	if s, ok := f.Dataset.(sourced); ok {
		return s.Fingerprint()
	}
	return ""
}

// computeFeatures runs the frozen prefix over every example of v (without
// augmentation) on dev, batch examples a pass (its buffers held to
// maxMemory, or the machine's memory where 0), and returns its outputs as
// a dataset, in memory or, where disk is a folder, on disk there. stop, when set, is polled between passes: it returning true
// abandons the work (ok false).
func computeFeatures(dev runtime.Device, split *rewrite.FrozenPrefix, sample []int64, v data.Dataset, batch int, maxMemory int64, disk string, stop func() bool) (f *features, ok bool, err error) {
	n := v.Len()
	batch = max(1, min(batch, n))
	plan, err := runtime.CompileForBatch(split.Prefix, batch, sample, &runtime.Options{Device: dev, ForwardOnly: true, MaxMemory: maxMemory})
	if err != nil {
		return nil, false, fmt.Errorf("the frozen prefix: %w", err)
	}
	// On a GPU the plan's memory goes back to the device with the pass
	// (runtime.Plan.Release); elsewhere the garbage collector takes it.
	defer plan.Release()
	if err := plan.LoadParams(); err != nil {
		return nil, false, fmt.Errorf("the frozen prefix: %w", err)
	}
	// A sample's row: the cut's tensors' floats end to end.
	row := int(split.SampleFloats())
	widths := make([]int, len(split.Cut))
	outs := make([][]float32, len(split.Cut))
	total := 0
	for k := range split.Cut {
		_, oshape := plan.Output(k)
		widths[k] = int(prodInts(split.Shapes[k]))
		if len(oshape) == 0 || oshape[0] != batch || prodInts(oshape[1:]) != widths[k] {
			return nil, false, fmt.Errorf("the frozen prefix computes %q of shape %v at batch %d; the plan's is %v a sample", split.Cut[k], oshape, batch, split.Shapes[k])
		}
		outs[k] = make([]float32, batch*widths[k])
		total += widths[k]
	}
	if total != row {
		return nil, false, fmt.Errorf("the frozen prefix's outputs hold %d floats a sample, the head's input %d", total, row)
	}
	fc := &features{Dataset: v, row: row}
	if disk == "" {
		fc.x = make([]float32, n*row)
	} else if fc.x, fc.release, err = spillFloats(disk, n*row); err != nil {
		return nil, false, fmt.Errorf("the feature cache on disk: %w", err)
	}
	defer func() {
		if err != nil || !ok {
			fc.close() // the results are nil by now
		}
	}()
	f = fc
	for _, d := range split.Shape {
		f.shape = append(f.shape, int(d))
	}
	in, _ := plan.Input(0)
	x := make([]float32, len(in))
	sl := len(x) / batch
	idx := make([]int, 0, batch)
	for off := 0; off < n; off += batch {
		if stop != nil && stop() {
			return nil, false, nil
		}
		m := min(batch, n-off)
		idx = idx[:0]
		for i := range m {
			idx = append(idx, off+i)
		}
		clear(x[m*sl:])
		if err := v.Fill(x[:m*sl], nil, idx, nil); err != nil {
			return nil, false, err
		}
		if err := plan.SetInput(0, x); err != nil {
			return nil, false, err
		}
		if err := plan.Forward(); err != nil {
			return nil, false, fmt.Errorf("the frozen prefix: %w", err)
		}
		at := 0
		for k, w := range widths {
			if err := plan.ReadOutput(k, outs[k]); err != nil {
				return nil, false, err
			}
			for i := range m {
				copy(f.x[(off+i)*row+at:(off+i)*row+at+w], outs[k][i*w:(i+1)*w])
			}
			at += w
		}
	}
	return f, true, nil
}

func prodInts[T int | int64](d []T) T {
	var n T = 1
	for _, v := range d {
		n *= v
	}
	return n
}

// cacheFeatures computes the training (and test) data's features for a
// run, logging what it does; ok false means stop asked it to stop. The
// caller closes them.
func cacheFeatures(cfg *Config, split *rewrite.FrozenPrefix, rep *FeatureCacheReport, sample []int64, logf func(string, ...any)) (train, test *features, ok bool, err error) {
	t0 := time.Now()
	st := cfg.FeatureStore
	var key string
	if st != nil {
		key = featureKey(cfg, split, cfg.Train)
		if f := st.train.take(key); f != nil && cfg.Test == nil {
			st.Reused++
			logf("  features:  the frozen part's %s for %d training examples: as an earlier run of the search computed them (%s)\n", cutNames(split), cfg.Train.Len(), FormatBytes(rep.Bytes))
			return f, nil, true, nil
		}
	}
	what := fmt.Sprintf("%d training", cfg.Train.Len())
	if cfg.Test != nil {
		what += fmt.Sprintf(" and %d test", cfg.Test.Len())
	}
	logf("  features:  the frozen part's %s for %s examples (%s, once)…\n", cutNames(split), what, rewrite.Nodes(split.PrefixNodes))
	train, rep.FromKept, ok, err = obtainFeatures(cfg, split, rep, sample, cfg.Train, "training", logf)
	if err != nil || !ok {
		return nil, nil, ok, err
	}
	if cfg.Test != nil {
		test, _, ok, err = obtainFeatures(cfg, split, rep, sample, cfg.Test, "test", logf)
		if err != nil || !ok {
			train.close()
			return nil, nil, ok, err
		}
	}
	rep.Seconds = time.Since(t0).Seconds()
	if st != nil {
		// The store keeps the training rows for the next run.
		st.train.put(key, train)
	}
	where := ""
	if rep.Disk != "" {
		where = ", on disk in " + rep.Disk
	}
	logf("  features:  cached in %.1f s (%s%s)\n", rep.Seconds, FormatBytes(rep.Bytes), where)
	return train, test, true, nil
}

// obtainFeatures returns the frozen part's rows over ds (what: the
// data's role, for the log): read from the folder Config.KeepFeatures
// where an earlier run kept them (fromKept), else computed — and kept
// there for the next run. Only data with a fingerprint of its samples is
// kept (keepable); a kept file that is not whole or not these rows is
// said and computed afresh, and a failure to keep them is a warning: the
// run does not need the file.
func obtainFeatures(cfg *Config, split *rewrite.FrozenPrefix, rep *FeatureCacheReport, sample []int64, ds data.Dataset, what string, logf func(string, ...any)) (f *features, fromKept, ok bool, err error) {
	warn := func(format string, a ...any) {
		if cfg.Warn != nil {
			fmt.Fprintf(cfg.Warn, "warning: "+format, a...)
		}
	}
	dir := cfg.KeepFeatures
	var key string
	if dir != "" && keepable(ds) {
		key = featureKey(cfg, split, ds)
		shape := make([]int, len(split.Shape))
		for i, d := range split.Shape {
			shape[i] = int(d)
		}
		f, err := loadKept(dir, key, ds, shape)
		if err != nil {
			warn("the kept features of the %s data: %v; computing them afresh\n", what, err)
		}
		if f != nil {
			logf("  features:  the %s data's read from %s, as an earlier run kept them\n", what, keptPath(dir, key))
			return f, true, true, nil
		}
	}
	f, ok, err = computeFeatures(cfg.Device, split, sample, ds, rep.PassBatch, cfg.MaxMemory, rep.Disk, cfg.Stop)
	if err != nil || !ok {
		return nil, false, ok, err
	}
	if key != "" {
		if err := keep(dir, key, f); err != nil {
			warn("keeping the %s data's features in %s: %v\n", what, dir, err)
		} else {
			logf("  features:  the %s data's kept in %s for later runs (derived from the data: as private as it)\n", what, keptPath(dir, key))
		}
	}
	return f, false, true, nil
}

// cutNames says which tensors a split caches: "\"name\" [shape]", and so
// for each where several are packed.
func cutNames(split *rewrite.FrozenPrefix) string {
	parts := make([]string, len(split.Cut))
	for k, name := range split.Cut {
		parts[k] = fmt.Sprintf("%q %v", name, split.Shapes[k])
	}
	return strings.Join(parts, ", ")
}

// FeatureStore keeps a run's feature cache beyond the run, for later runs
// that cache the same frozen part of the same model over the same
// training data: the runs of a search over settings (dpfinetune tune),
// which differ in what the trained part does with the features alone. A
// run given a store (Config.FeatureStore) takes its training rows from it
// where the store holds rows of the same key — the frozen part's cut and
// parameters, the data and its preprocessing, the device — and otherwise
// computes them and leaves them there, replacing what the store held.
// The rows are a pure function of that key (the frozen part is not
// trained and its input not augmented), so a run on stored rows trains
// as it would on its own. Close gives them back; a FeatureStore is for
// one goroutine's runs in turn.
type FeatureStore struct {
	train, score storedRows
	// Reused counts the runs that took their training rows from the
	// store.
	Reused int
}

// storedRows are a store's rows of one role and their key.
type storedRows struct {
	key string
	f   *features
}

// take returns the rows where they are key's, nil otherwise.
func (r *storedRows) take(key string) *features {
	if r.f != nil && r.key == key {
		return r.f
	}
	return nil
}

// put keeps f as key's rows; the rows it held before go back.
func (r *storedRows) put(key string, f *features) {
	if r.f != f {
		r.f.close()
	}
	r.key, r.f = key, f
}

// Close gives back the rows the store holds (a cache on disk is gone
// after it).
func (s *FeatureStore) Close() error {
	if s == nil {
		return nil
	}
	err := errors.Join(s.train.f.close(), s.score.f.close())
	s.train, s.score = storedRows{}, storedRows{}
	return err
}

// scoreFeatures returns the frozen part's rows over cfg.Score: from the
// store where it holds them, else computed (and left in the store where
// there is one: owned false, the store closes them; else the caller does).
func scoreFeatures(cfg *Config, split *rewrite.FrozenPrefix, rep *FeatureCacheReport, sample []int64, logf func(string, ...any)) (f *features, owned, ok bool, err error) {
	st := cfg.FeatureStore
	var key string
	if st != nil {
		key = featureKey(cfg, split, cfg.Score)
		if f := st.score.take(key); f != nil {
			return f, false, true, nil
		}
	}
	t0 := time.Now()
	f, fromKept, ok, err := obtainFeatures(cfg, split, rep, sample, cfg.Score, "score", logf)
	if err != nil || !ok {
		return nil, false, ok, err
	}
	if !fromKept {
		logf("  features:  the frozen part's %s for the %d examples to score computed in %.1f s\n", cutNames(split), cfg.Score.Len(), time.Since(t0).Seconds())
	}
	if st != nil {
		st.score.put(key, f)
		return f, false, true, nil
	}
	return f, true, true, nil
}

// featureKey identifies the rows of split's cut over ds, cfg's training
// data or its data to score: the cut tensors and their shapes, the frozen
// part's parameters' values, the data's fingerprint and preprocessing, and
// the device.
func featureKey(cfg *Config, split *rewrite.FrozenPrefix, ds data.Dataset) string {
	h := sha256.New()
	fmt.Fprintf(h, "cut %q %v nodes %d\n", split.Cut, split.Shapes, split.PrefixNodes)
	s := cfg.Settings
	fmt.Fprintf(h, "data %q norm %q resize %q shape %v augment %q\n", s.Data, s.Norm, s.Resize, s.InputShape, s.Augment)
	if src, ok := ds.(sourced); ok {
		fmt.Fprintf(h, "fingerprint %s\n", src.Fingerprint())
	}
	if v, ok := ds.(interface{ Preprocess() data.Preprocess }); ok {
		fmt.Fprintf(h, "preprocess %+v\n", v.Preprocess())
	}
	fmt.Fprintf(h, "examples %d shape %v\n", ds.Len(), ds.SampleShape())
	if cfg.Device != nil {
		fmt.Fprintf(h, "device %s\n", cfg.Device.Name())
	}
	var b [8]byte
	for _, v := range split.Prefix.Initializers {
		fmt.Fprintf(h, "param %q\n", v.Name)
		if t := v.Const; t != nil {
			fmt.Fprintf(h, "%v %v %d\n", t.DType, t.Shape, len(t.Raw))
			for _, x := range t.F32 {
				binary.LittleEndian.PutUint32(b[:4], math.Float32bits(x))
				h.Write(b[:4])
			}
			for _, x := range t.F64 {
				binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
				h.Write(b[:])
			}
			for _, x := range t.I64 {
				binary.LittleEndian.PutUint64(b[:], uint64(x))
				h.Write(b[:])
			}
			h.Write(t.Raw)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
