package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "tune",
		summary: "choose training settings privately: the best of a random number of private runs, one (ε, δ) for the whole search",
		run:     runTune,
	})
}

// tunable are the train flags a search may vary. Those of mechanisms
// change a run's sample rate and steps, and with them its σ: each of their
// combinations is a mechanism of its own, calibrated apart
// (accountant.CalibrateSearchOf); the others leave the mechanism alone.
var (
	tunable = []string{"lr", "clip", "optimizer", "momentum", "weight-decay", "lr-schedule", "warmup-steps", "min-lr",
		"label-smoothing", "ema", "augment", "clip-fn", "gamma", "examples-per-user", "lora", "class-weight-power", "pos-weight-power", "batch-size", "epochs"}
	mechanisms = []string{"batch-size", "epochs"}
)

// tuneSet are the train flags the search sets on each run itself.
var tuneSet = []string{"epsilon", "noise-multiplier", "out", "report", "checkpoint", "resume", "dry-run", "seed", "test-data", "non-private"}

// gridFlag collects --grid NAME=V1,V2,… flags.
type gridFlag struct {
	names  []string
	values [][]string
}

func (g *gridFlag) String() string {
	var parts []string
	for i, n := range g.names {
		parts = append(parts, n+"="+strings.Join(g.values[i], ","))
	}
	return strings.Join(parts, " ")
}

func (g *gridFlag) Set(s string) error {
	name, vals, ok := strings.Cut(s, "=")
	if !ok || name == "" || vals == "" {
		return fmt.Errorf("want NAME=V1,V2,… (e.g. lr=0.5,1,2), got %q", s)
	}
	name = strings.TrimLeft(name, "-")
	if !slices.Contains(tunable, name) {
		return fmt.Errorf("%q cannot be searched: a search varies settings drawn independently of the data whose mechanism it can account (%s)", name, strings.Join(tunable, ", "))
	}
	if slices.Contains(g.names, name) {
		return fmt.Errorf("%s is searched twice: give its values in one --grid", name)
	}
	var vs []string
	for _, v := range strings.Split(vals, ",") {
		if v = strings.TrimSpace(v); v == "" {
			return fmt.Errorf("--grid %s: an empty value in %q", name, vals)
		}
		vs = append(vs, v)
	}
	if name == "augment" {
		// Augmentations hold commas (crop=4,flip): their values are
		// separated by ';'.
		vs = strings.Split(vals, ";")
	}
	g.names, g.values = append(g.names, name), append(g.values, vs)
	return nil
}

// tuneRun is one run of the search: its settings (drawn independently of
// the data) and, once done, its noisy score.
type tuneRun struct {
	Settings map[string]string `json:"settings"`
	// Phase is the run's mechanism: σ for its sample rate and steps.
	Phase accountant.Phase `json:"phase"`
	Done  bool             `json:"done"`
	// Diverged marks a run whose parameters became NaN or infinite (a
	// function of its noisy updates alone): it has no model, and its
	// score is below every other's.
	Diverged bool `json:"diverged,omitempty"`
	// Score is the run's noisy score (its accuracy on the score data with
	// Gaussian noise): private to the search, kept only while it runs.
	Score float64 `json:"score,omitempty"`
}

// tuneState is a search under way, kept in its work folder so that an
// interrupted search resumes where it stopped with the number of runs and
// their settings it drew.
type tuneState struct {
	Args []string                `json:"args"`
	Plan accountant.SearchResult `json:"plan"`
	// Mechanisms are the runs' mechanisms, one for each combination of
	// the grid's batch sizes and epochs.
	Mechanisms []accountant.Phase `json:"mechanisms"`
	Runs       []tuneRun          `json:"runs"`
	Best       int                `json:"best"`
	Seed       *uint64            `json:"seed,omitempty"`
	Unit       string             `json:"privacy_unit"`
	Units      int                `json:"score_units"`
	Spec       string             `json:"score_data"`
}

// TuneReport is what tune --report writes: the search's guarantee and
// plan, and the chosen run's settings, noisy score and report. It holds
// nothing of the other runs — not even how many there were, which the
// guarantee needs kept secret: the bound is for the best of a number of
// runs nobody outside the search knows.
type TuneReport struct {
	Search accountant.SearchResult `json:"search"`
	// Phase is the chosen run's mechanism: σ calibrated for the search,
	// the sample rate and the steps; Mechanisms are those every run drew
	// among (one for each combination of the grid's batch sizes and
	// epochs).
	Phase       accountant.Phase   `json:"phase"`
	Mechanisms  []accountant.Phase `json:"mechanisms"`
	PrivacyUnit string             `json:"privacy_unit"`
	ScoreData   string             `json:"score_data"`
	ScoreUnits  int                `json:"score_units"`
	// ScoreNoise is the standard deviation of a score's noise, in
	// accuracy (a fraction of the score data's units).
	ScoreNoise float64 `json:"score_noise"`
	// ScoreKind is what a unit's score counts: "right" (its examples got
	// right; of a multi-label example, the share of its labels) or
	// "ranking" (a multi-label example's label ranking average precision).
	ScoreKind string `json:"score_kind"`
	// ScoreClassWeights, where the runs weigh classes (--class-weight),
	// are the weights each scored example's right answer counts with:
	// the score is then the class-weighted accuracy, Σ w_y·right / units,
	// a unit's part still at most 1.
	ScoreClassWeights []float64 `json:"score_class_weights,omitempty"`
	// Grid is the values searched, and Chosen the chosen run's.
	Grid   map[string][]string `json:"grid"`
	Chosen map[string]string   `json:"chosen"`
	// Score is the chosen run's noisy score, in accuracy.
	Score float64 `json:"score"`
	// Run is the chosen run's report (its output the search's).
	Run    *dptrain.Report `json:"run"`
	Seed   *uint64         `json:"seed,omitempty"`
	Output string          `json:"output"`
}

// tuneScored, when set (by tests), is called with each run's index,
// settings and noisy score as the search records it.
var tuneScored func(run int, settings map[string]string, score float64)

// tuneCmd is one search: the command line and the search's state.
type tuneCmd struct {
	stdout     io.Writer
	tf         *trainFlags
	grid       gridFlag
	trials     accountant.Trials
	scoreNoise float64
	seed       *uint64
	// runArgs are the runs' train flags (the command line's less those
	// the search sets), fingerprint what a resumed search must share.
	runArgs, fingerprint []string
	work, statePath      string
	scoreSpec            string
	scoreView            dataView
	// classWeights weigh each scored example's right answer by its class
	// (the runs' --class-weight; nil: 1 each).
	classWeights []float64
	// ranking scores a multi-label run by its examples' label ranking
	// average precision instead of its decisions (--score ranking).
	ranking bool
	st      tuneState
}

func runTune(args []string, stdout io.Writer) error {
	c, err := parseTune(args, stdout)
	if err != nil {
		return err
	}
	resumed, err := c.load()
	if err != nil {
		return err
	}
	if err := c.openScoreData(); err != nil {
		return err
	}
	if !resumed {
		if err := c.plan(); err != nil {
			return err
		}
		if *c.tf.dryRun {
			cleanWork(c.work)
			return nil
		}
		if err := saveTuneState(c.statePath, c.st); err != nil {
			return err
		}
	}
	dev, err := c.tf.dev.open()
	if err != nil {
		return err
	}
	// A frozen part's features (--cache-features) are computed once for
	// all the runs: they differ only in what they train on them.
	store := &dptrain.FeatureStore{}
	defer store.Close()
	for i := range c.st.Runs {
		if !c.st.Runs[i].Done {
			if err := c.run(i, dev, store); err != nil {
				return err
			}
		}
	}
	return c.release()
}

// parseTune parses and checks the command line.
func parseTune(args []string, stdout io.Writer) (*tuneCmd, error) {
	c := &tuneCmd{stdout: stdout}
	fs := newFlagSet("tune", "--model M.onnx --data SPEC --epsilon E --grid lr=0.5,1,2 [--grid clip=0.1,1] --out tuned.onnx [train's flags]")
	tf := addTrainFlags(fs, "where to write the chosen run's model (required)")
	c.tf = tf
	fs.Var(&c.grid, "grid", "a setting to search and its values, NAME=V1,V2,… (repeat for several; each run draws each setting's value uniformly, independently of the data; augment's values are separated by ';'): "+strings.Join(tunable, ", "))
	mean := fs.Float64("trials-mean", 5, "the expected number of runs: the number is drawn at random (it must be, for the search's bound) and every drawn run is made")
	eta := fs.Float64("trials-eta", 1, "the shape η of the number of runs' distribution (Papernot and Steinke's truncated negative binomial; 1: geometric, 0: logarithmic; lower η spends less ε for the same mean but has a longer tail)")
	scoreNoise := fs.Float64("score-noise", 0.01, "the standard deviation of each run's score's Gaussian noise, in accuracy (0.01: one point): the score is computed on private data (--test-data, or the --data source's test split or :holdout) and noised so that choosing among the runs is private")
	work := fs.String("work", "", "the search's folder: its state, the runs' checkpoints and the best run so far, removed when the search ends (default: OUT.tune)")
	score := fs.String("score", "right", "what a held-out example scores, in [0, 1]: right (1 where the model gets it right; a multi-label example, the share of its labels decided right) or ranking (a multi-label example's label ranking average precision: how far up the model ranks the labels that apply, whatever the thresholds — for rare labels, which deciding every label absent gets mostly right)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *tf.model == "" || *tf.spec == "" || *tf.out == "":
		return nil, usagef("--model, --data and --out are required")
	case !(*tf.eps > 0) || math.IsInf(*tf.eps, 0):
		return nil, usagef("--epsilon must be positive: the whole search's ε, σ of every run is calibrated to it")
	case len(c.grid.names) == 0:
		return nil, usagef("--grid NAME=V1,V2,… is required: the settings to choose among (e.g. --grid lr=0.5,1,2,4)")
	case !(*scoreNoise > 0) || math.IsInf(*scoreNoise, 0):
		return nil, usagef("--score-noise must be positive, got %v", *scoreNoise)
	case *tf.sampling != "poisson":
		return nil, usagef("--sampling %s: a search's bound assumes each run's Poisson sampling", *tf.sampling)
	case *tf.testSpec == "none":
		return nil, usagef("--test-data none: a search scores its runs on held-out data")
	case *score != "right" && *score != "ranking":
		return nil, usagef("--score %s: want right or ranking", *score)
	}
	c.ranking = *score == "ranking"
	for _, n := range []string{"noise-multiplier", "non-private", "checkpoint"} {
		if set[n] {
			return nil, usagef("--%s: tune sets each run's itself (σ calibrated to the search's --epsilon, checkpoints in --work)", n)
		}
	}
	for _, n := range c.grid.names {
		if set[n] {
			return nil, usagef("--%s is both set and searched (--grid %s=…): give one", n, n)
		}
	}
	if i := slices.Index(c.grid.names, "lora"); i >= 0 && (set["lora-alpha"] || set["lora-target"]) {
		for _, v := range c.grid.values[i] {
			if r, err := strconv.ParseInt(v, 10, 64); err == nil && r == 0 {
				return nil, usagef("--grid lora=… has 0 (no adapters) beside --lora-alpha or --lora-target, which need a rank: leave 0 out or search without them")
			}
		}
	}
	trials, err := accountant.NewTrials(*eta, *mean)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	c.trials, c.scoreNoise = trials, *scoreNoise
	if *tf.seedStr != "" {
		v, err := strconv.ParseUint(*tf.seedStr, 10, 64)
		if err != nil {
			return nil, usagef("--seed must be a non-negative integer, got %q", *tf.seedStr)
		}
		c.seed = &v
	}
	// The runs' flags: the command line's, less those the search sets.
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(tuneSet, f.Name) || f.Name == "grid" || f.Name == "trials-mean" || f.Name == "trials-eta" || f.Name == "score-noise" || f.Name == "score" || f.Name == "work" {
			return
		}
		c.runArgs = append(c.runArgs, "--"+f.Name+"="+f.Value.String())
	})
	if *work == "" {
		*work = *tf.out + ".tune"
	}
	c.work, c.statePath = *work, filepath.Join(*work, "search.json")
	// What a resumed search must share with the one under way: all but
	// the progress bars.
	fingerprint := slices.DeleteFunc(slices.Clone(c.runArgs), func(a string) bool { return strings.HasPrefix(a, "--quiet=") })
	fingerprint = append(fingerprint, "grid:"+c.grid.String(), fmt.Sprintf("trials:%v,%v", *mean, *eta), fmt.Sprint("score-noise:", *scoreNoise), "score:"+*score, "epsilon:"+fmt.Sprint(*tf.eps), "test-data:"+*tf.testSpec, "seed:"+*tf.seedStr)
	c.fingerprint = fingerprint
	return c, nil
}

// load reads the state of a search under way in the work folder: with
// --resume it must be there, with the same flags; without, it must not.
func (c *tuneCmd) load() (resumed bool, err error) {
	switch b, err := os.ReadFile(c.statePath); {
	case err == nil && !*c.tf.resume:
		return false, fmt.Errorf("a search is under way in %s: run the same command with --resume to continue it, or remove the folder to start another", c.work)
	case err == nil:
		if err := json.Unmarshal(b, &c.st); err != nil {
			return false, fmt.Errorf("%s: %w", c.statePath, err)
		}
		if !slices.Equal(c.st.Args, c.fingerprint) {
			return false, fmt.Errorf("%s: the search under way had other flags (%s): resume it with the same command", c.statePath, strings.Join(c.st.Args, " "))
		}
		n := countDone(c.st.Runs)
		fmt.Fprintf(c.stdout, "tune: resuming the search in %s: %d %s done\n", c.work, n, plural(n, "run"))
		return true, nil
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	case *c.tf.resume:
		return false, fmt.Errorf("--resume: no search under way in %s", c.work)
	}
	return false, nil

}

// openScoreData opens the data the runs are scored on (held out from
// their training) and makes the search's folder.
func (c *tuneCmd) openScoreData() error {
	// The score data, and what a unit of it is.
	tf := c.tf
	lm, err := loadGraph(*tf.model)
	if err != nil {
		return err
	}
	if err := lm.dynamicBatch(); err != nil {
		return err
	}
	sample, err := modelSample(lm.g, *tf.inShape)
	if err != nil {
		return err
	}
	norm := normFor(lm.g, *tf.norm)
	c.scoreSpec = *tf.testSpec
	if c.scoreSpec == "" {
		c.scoreSpec = withSplit(*tf.spec, data.Test)
	}
	scoreView, err := openView(c.scoreSpec, sample, norm, "none", *tf.resize, tf.dicomRead())
	if err != nil {
		return fmt.Errorf("the runs' score data %s: %w (give held-out data with --test-data, or :holdout=0.1 on a folder or csv)", c.scoreSpec, err)
	}
	if scoreView.Len() == 0 {
		return fmt.Errorf("the runs' score data %s is empty", c.scoreSpec)
	}

	c.scoreView = scoreView
	if c.ranking && !data.IsMultiLabel(scoreView) {
		return usagef("--score ranking ranks a multi-label model's labels; the runs' score data %s holds one class an example (score by right)", c.scoreSpec)
	}
	// The runs weigh classes: so does their score, the objective they
	// train for (weights at most 1: a unit's score stays in [0, 1]).
	if c.classWeights, err = dptrain.ParseClassWeights(*tf.classWeight, scoreView.Classes(), scoreView.NumClasses()); err != nil {
		return usagef("the runs' score data %s: %v", c.scoreSpec, err)
	}
	return os.MkdirAll(c.work, 0o700)
}

// plan checks the runs' settings with a dry run, calibrates σ for each
// of the runs' mechanisms so that the search meets --epsilon, and draws
// the number of runs and their settings.
func (c *tuneCmd) plan() error {
	s, err := c.dryRun()
	if err != nil {
		return err
	}
	unit := s.PrivacyUnit
	if unit == "" {
		unit = dptrain.PrivacyUnitExample
	}
	units := c.scoreView.Len()
	if unit == dptrain.PrivacyUnitUser {
		if _, n := data.UsersOf(c.scoreView); n > 0 {
			units = n
		} else {
			return fmt.Errorf("the runs protect users, but the score data %s names none: a user's score must count once (give held-out data that names its users, e.g. :holdout on the listing)", c.scoreSpec)
		}
	}
	// A unit's score is in [0, 1] (correct or not, or a user's share
	// of correct examples): adding or removing one moves the sum by
	// at most 1, so the noise's standard deviation in units is its
	// noise multiplier. The score data's size is taken as public,
	// as a run's sample rate takes its training data's.
	scoreSigma := c.scoreNoise * float64(units)
	// The runs' mechanisms: train's sampling of the units for each
	// batch size and number of epochs the grid holds.
	n := s.Examples
	if unit == dptrain.PrivacyUnitUser {
		n = s.Users
	}
	rm, err := c.mechanisms(n)
	if err != nil {
		return err
	}
	if first := rm.mechs[0]; first.SampleRate != s.SampleRate || first.Steps != s.Steps {
		return fmt.Errorf("the runs' settings: the dry run samples at %v for %d steps, the search planned %v for %d", s.SampleRate, s.Steps, first.SampleRate, first.Steps)
	}
	sigmas, plan, err := accountant.CalibrateSearchOf(*c.tf.eps, s.Delta, rm.mechs, scoreSigma, c.trials)
	if err != nil {
		return fmt.Errorf("calibrating the runs' σ: %w", err)
	}
	st := tuneState{Args: c.fingerprint, Plan: plan, Best: -1, Seed: c.seed, Unit: unit, Units: units, Spec: c.scoreSpec}
	for k, m := range rm.mechs {
		st.Mechanisms = append(st.Mechanisms, accountant.Phase{Sigma: sigmas[k], SampleRate: m.SampleRate, Steps: m.Steps})
	}
	rng := tuneRNG(c.seed, 0)
	k := c.trials.Draw(rng.Float64())
	for range k {
		r := tuneRun{Settings: map[string]string{}}
		for i, n := range c.grid.names {
			r.Settings[n] = c.grid.values[i][rng.IntN(len(c.grid.values[i]))]
		}
		r.Phase = st.Mechanisms[rm.of(r.Settings)]
		st.Runs = append(st.Runs, r)
	}
	printSearchPlan(c.stdout, st, c.trials, c.scoreNoise, *c.tf.eps, c.classWeights != nil, c.ranking)
	if sp, err := data.ParseSpec(c.scoreSpec); err == nil && sp.Holdout > 0 {
		fmt.Fprintf(c.stdout, "note:    the runs are scored on a :holdout split, decided by the hashes of all the keys: adding one %s can move another across it, so over both sides the guarantee is that of a change of two; held-out data of its own (--test-data) has no such coupling\n", strings.TrimSuffix(map[bool]string{true: "users", false: "examples"}[st.Unit == dptrain.PrivacyUnitUser], "s"))
	}
	c.st = st
	return nil
}

// dryRun runs train's dry run of the first settings of the grid: every
// check a run makes before its first step, once, and the run's mechanism
// (sample rate, steps, δ, the privacy unit and its count).
func (c *tuneCmd) dryRun() (dptrain.Settings, error) {
	dry := filepath.Join(c.work, "dry-run.json")
	args := append(slices.Clone(c.runArgs), "--noise-multiplier=1", "--dry-run", "--quiet", "--test-data=none",
		"--out="+filepath.Join(c.work, "dry-run.onnx"), "--report="+dry)
	for i, n := range c.grid.names {
		args = append(args, "--"+n+"="+c.grid.values[i][0])
	}
	fmt.Fprintf(c.stdout, "tune: checking the runs' settings (a dry run)\n")
	if err := runTrain(args, io.Discard); err != nil {
		return dptrain.Settings{}, fmt.Errorf("the runs' settings: %w", err)
	}
	defer os.Remove(dry)
	var rep dptrain.Report
	b, err := os.ReadFile(dry)
	if err != nil {
		return dptrain.Settings{}, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return dptrain.Settings{}, fmt.Errorf("%s: %w", dry, err)
	}
	return rep.Settings, nil
}

// runMechanisms are the runs' mechanisms: train's sampling of the units
// for each batch size and number of epochs the grid holds (the command
// line's where it holds none), the first settings' first.
type runMechanisms struct {
	batches, epochs []string
	mechs           []accountant.Mechanism
	index           map[[2]string]int
}

// mechanisms returns the runs' mechanisms over n units.
func (c *tuneCmd) mechanisms(n int) (*runMechanisms, error) {
	rm := &runMechanisms{batches: []string{strconv.Itoa(*c.tf.batchSize)}, epochs: []string{strconv.Itoa(*c.tf.epochs)}, index: map[[2]string]int{}}
	if i := slices.Index(c.grid.names, "batch-size"); i >= 0 {
		rm.batches = c.grid.values[i]
	}
	if i := slices.Index(c.grid.names, "epochs"); i >= 0 {
		rm.epochs = c.grid.values[i]
	}
	for _, b := range rm.batches {
		for _, e := range rm.epochs {
			l, err1 := strconv.Atoi(b)
			ep, err2 := strconv.Atoi(e)
			if err1 != nil || err2 != nil || l <= 0 || ep <= 0 {
				return nil, usagef("--grid batch-size and epochs take positive integers, got batch size %q and %q epochs", b, e)
			}
			sp := dptrain.Sampling(n, l, ep)
			m := accountant.Mechanism{SampleRate: sp.SampleRate, Steps: sp.Steps}
			k := slices.Index(rm.mechs, m)
			if k < 0 {
				k, rm.mechs = len(rm.mechs), append(rm.mechs, m)
			}
			rm.index[[2]string{b, e}] = k
		}
	}
	return rm, nil
}

// of returns the index of a run's mechanism, by its settings.
func (rm *runMechanisms) of(settings map[string]string) int {
	b, e := rm.batches[0], rm.epochs[0]
	if v, ok := settings["batch-size"]; ok {
		b = v
	}
	if v, ok := settings["epochs"]; ok {
		e = v
	}
	return rm.index[[2]string{b, e}]
}

// run makes run i: trains it (or resumes it from its checkpoint), scores
// it and keeps its files where it is the best so far.
func (c *tuneCmd) run(i int, dev runtime.Device, store *dptrain.FeatureStore) error {
	r := &c.st.Runs[i]
	base := runBase(c.work, i)
	ra := append(slices.Clone(c.runArgs), "--noise-multiplier="+strconv.FormatFloat(r.Phase.Sigma, 'g', -1, 64), "--test-data=none",
		"--out="+base+".onnx", "--report="+base+".json", "--checkpoint="+base+".ckpt")
	for _, n := range c.grid.names {
		ra = append(ra, "--"+n+"="+r.Settings[n])
	}
	if c.seed != nil {
		// Each run's seed drawn from the search's (no two searches'
		// seeds give their runs the same ones, as seed+i would).
		ra = append(ra, "--seed="+strconv.FormatUint(runSeed(*c.seed, i), 10))
	}
	if _, err := os.Stat(base + ".ckpt"); err == nil {
		ra = append(ra, "--resume")
	}
	fmt.Fprintf(c.stdout, "run %d: %s\n", i+1, describeSettings(c.grid.names, r.Settings))
	t0, reusedBefore := time.Now(), store.Reused
	// A run writes its report last, after its model: one whose report
	// is there finished before the search stopped, and is scored as
	// it is.
	var correct []float64
	if _, err := os.Stat(base + ".json"); err != nil {
		logFile, err := os.OpenFile(base+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		var rep *dptrain.Report
		rep, err = runTrainWith(ra, logFile, store, c.scoreView, c.ranking)
		if rep != nil {
			correct = rep.ScoreRight
		}
		logFile.Close()
		var ie interruptError
		if errors.As(err, &ie) {
			return fmt.Errorf("interrupted in run %d; its checkpoint and the search's state are in %s: run the same command with --resume to continue", i+1, c.work)
		}
		if errors.Is(err, dptrain.ErrDiverged) {
			// Its noisy updates drove it to NaN or infinity: a run
			// that failed, whose score is below every other's.
			r.Done, r.Diverged = true, true
			removeRun(base)
			if err := saveTuneState(c.statePath, c.st); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "run %d: diverged (its parameters became NaN or infinite): never chosen\n", i+1)
			return nil
		}
		if err != nil {
			return fmt.Errorf("run %d (%s; its log: %s): %w", i+1, describeSettings(c.grid.names, r.Settings), base+".log", err)
		}
	}
	if err := checkRunPhases(base+".json", r.Phase); err != nil {
		return fmt.Errorf("run %d: %w", i+1, err)
	}
	if correct == nil {
		// A run that finished before the search stopped: its model
		// is scored as eval would.
		var err error
		if correct, err = classifyRun(dev, base+".onnx", c.scoreView, *c.tf.evalBatch, c.ranking); err != nil {
			return fmt.Errorf("run %d: scoring: %w", i+1, err)
		}
	}
	if c.classWeights != nil {
		correct = weighByClass(correct, c.scoreView, c.classWeights)
	}
	score, err := unitScore(correct, c.scoreView, c.st.Unit)
	if err != nil {
		return fmt.Errorf("run %d: scoring: %w", i+1, err)
	}
	r.Score = (score + float64(c.st.Units)*c.scoreNoise*tuneRNG(c.seed, uint64(i)+1).NormFloat64()) / float64(c.st.Units)
	r.Done = true
	if tuneScored != nil {
		tuneScored(i, r.Settings, r.Score)
	}
	// Only the best run so far is kept: the search releases it alone.
	prev := c.st.Best
	if prev < 0 || r.Score > c.st.Runs[prev].Score {
		c.st.Best = i
	}
	if err := saveTuneState(c.statePath, c.st); err != nil {
		return err
	}
	switch {
	case c.st.Best != i:
		removeRun(base)
	case prev >= 0:
		removeRun(runBase(c.work, prev))
	}
	for _, ext := range []string{".ckpt", ".log"} {
		os.Remove(base + ext)
	}
	reused := ""
	if store.Reused > reusedBefore {
		reused = " (on the frozen part's features an earlier run computed)"
	}
	fmt.Fprintf(c.stdout, "run %d: done in %s%s\n", i+1, time.Since(t0).Round(time.Second), reused)
	return nil
}

// release writes the chosen run's model, with the search's guarantee in
// its metadata, and the search's report, and removes the search's files.
func (c *tuneCmd) release() error {
	// The chosen run: its model with the search's guarantee, its report.
	if c.st.Best < 0 {
		cleanWork(c.work)
		return fmt.Errorf("every run diverged (its parameters became NaN or infinite): no model to release; lower the grid's learning rates or clip norms")
	}
	best := runBase(c.work, c.st.Best)
	var rep dptrain.Report
	if b, err := os.ReadFile(best + ".json"); err != nil {
		return err
	} else if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", best+".json", err)
	}
	m, err := onnx.Load(best + ".onnx")
	if err != nil {
		return err
	}
	setSearchMetadata(m.Proto, c.st, describeSettings(c.grid.names, c.st.Runs[c.st.Best].Settings), c.ranking)
	if err := m.Save(*c.tf.out, nil); err != nil {
		return err
	}
	// The run's own paths name its place among the runs.
	rep.Output, rep.Checkpoint = *c.tf.out, ""
	tr := TuneReport{Search: c.st.Plan, Phase: c.st.Runs[c.st.Best].Phase, Mechanisms: c.st.Mechanisms, PrivacyUnit: c.st.Unit, ScoreData: c.st.Spec, ScoreUnits: c.st.Units, ScoreNoise: c.scoreNoise, ScoreKind: map[bool]string{false: "right", true: "ranking"}[c.ranking], ScoreClassWeights: c.classWeights,
		Grid: map[string][]string{}, Chosen: c.st.Runs[c.st.Best].Settings, Score: c.st.Runs[c.st.Best].Score, Run: &rep, Seed: c.st.Seed, Output: *c.tf.out}
	for i, n := range c.grid.names {
		tr.Grid[n] = c.grid.values[i]
	}
	if *c.tf.reportPath != "" {
		b, _ := json.MarshalIndent(tr, "", "  ")
		if err := atomicfile.WriteBytes(*c.tf.reportPath, append(b, '\n')); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	cleanWork(c.work)
	fmt.Fprintf(c.stdout, "chosen:  %s (noisy score %.2f %% on %s)\n", describeSettings(c.grid.names, tr.Chosen), 100*tr.Score, c.st.Spec)
	fmt.Fprintf(c.stdout, "done: %s written; the search spent ε = %.4g at δ = %.3g (one run alone: ε = %.4g)\n", *c.tf.out, c.st.Plan.Epsilon, c.st.Plan.Delta, c.st.Plan.RunEpsilon)
	return nil
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

func countDone(runs []tuneRun) int {
	n := 0
	for _, r := range runs {
		if r.Done {
			n++
		}
	}
	return n
}

func printSearchPlan(w io.Writer, st tuneState, t accountant.Trials, scoreNoise, target float64, weighted, ranking bool) {
	unit := "examples"
	if st.Unit == dptrain.PrivacyUnitUser {
		unit = "users"
	}
	fmt.Fprintf(w, "search:  the best of K runs, K drawn from a truncated negative binomial (η = %g, γ = %.4g): %.3g in expectation, more than %d with probability 1 %%, more than %d with 0.01 %% (Papernot and Steinke 2022)\n",
		t.Eta, t.Gamma, t.Mean(), t.Draw(0.99), t.Draw(0.9999))
	for _, m := range st.Mechanisms {
		fmt.Fprintf(w, "runs:    σ = %.4g at sample rate %.4g for %d steps (per %s)\n", m.Sigma, m.SampleRate, m.Steps, strings.TrimSuffix(unit, "s"))
	}
	what := "accuracy"
	if weighted {
		what = "class-weighted accuracy (each example right counts its class's --class-weight)"
	}
	if ranking {
		what = "label ranking average precision (each example's, in [0, 1])"
	}
	fmt.Fprintf(w, "scores:  %s on %s (%d %s) with Gaussian noise of standard deviation %.3g (noise multiplier %.4g)\n", what, st.Spec, st.Units, unit, scoreNoise, scoreNoise*float64(st.Units))
	fmt.Fprintf(w, "privacy: the search ε = %.4g ≤ %g at δ = %.3g (one run alone: ε = %.4g; RDP, order %v)\n", st.Plan.Epsilon, target, st.Plan.Delta, st.Plan.RunEpsilon, st.Plan.Order)
	fmt.Fprintf(w, "note:    how many runs there are, their settings, scores and times stay on this console: the report and the model hold the chosen run alone, and the bound is for a number of runs nobody else knows (publishing this log voids it)\n")
}

func describeSettings(names []string, s map[string]string) string {
	var parts []string
	for _, n := range names {
		parts = append(parts, n+"="+s[n])
	}
	return strings.Join(parts, " ")
}
