package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
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
		"label-smoothing", "ema", "augment", "clip-fn", "gamma", "examples-per-user", "batch-size", "epochs"}
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

func runTune(args []string, stdout io.Writer) error {
	fs := newFlagSet("tune", "--model M.onnx --data SPEC --epsilon E --grid lr=0.5,1,2 [--grid clip=0.1,1] --out tuned.onnx [train's flags]")
	tf := addTrainFlags(fs, "where to write the chosen run's model (required)")
	var grid gridFlag
	fs.Var(&grid, "grid", "a setting to search and its values, NAME=V1,V2,… (repeat for several; each run draws each setting's value uniformly, independently of the data; augment's values are separated by ';'): "+strings.Join(tunable, ", "))
	mean := fs.Float64("trials-mean", 5, "the expected number of runs: the number is drawn at random (it must be, for the search's bound) and every drawn run is made")
	eta := fs.Float64("trials-eta", 1, "the shape η of the number of runs' distribution (Papernot and Steinke's truncated negative binomial; 1: geometric, 0: logarithmic; lower η spends less ε for the same mean but has a longer tail)")
	scoreNoise := fs.Float64("score-noise", 0.01, "the standard deviation of each run's score's Gaussian noise, in accuracy (0.01: one point): the score is computed on private data (--test-data, or the --data source's test split or :holdout) and noised so that choosing among the runs is private")
	work := fs.String("work", "", "the search's folder: its state, the runs' checkpoints and the best run so far, removed when the search ends (default: OUT.tune)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *tf.model == "" || *tf.spec == "" || *tf.out == "":
		return usagef("--model, --data and --out are required")
	case !(*tf.eps > 0) || math.IsInf(*tf.eps, 0):
		return usagef("--epsilon must be positive: the whole search's ε, σ of every run is calibrated to it")
	case len(grid.names) == 0:
		return usagef("--grid NAME=V1,V2,… is required: the settings to choose among (e.g. --grid lr=0.5,1,2,4)")
	case !(*scoreNoise > 0) || math.IsInf(*scoreNoise, 0):
		return usagef("--score-noise must be positive, got %v", *scoreNoise)
	case *tf.sampling != "poisson":
		return usagef("--sampling %s: a search's bound assumes each run's Poisson sampling", *tf.sampling)
	case *tf.testSpec == "none":
		return usagef("--test-data none: a search scores its runs on held-out data")
	}
	for _, n := range []string{"noise-multiplier", "non-private", "checkpoint"} {
		if set[n] {
			return usagef("--%s: tune sets each run's itself (σ calibrated to the search's --epsilon, checkpoints in --work)", n)
		}
	}
	for _, n := range grid.names {
		if set[n] {
			return usagef("--%s is both set and searched (--grid %s=…): give one", n, n)
		}
	}
	trials, err := accountant.NewTrials(*eta, *mean)
	if err != nil {
		return usageError{err.Error()}
	}
	var seed *uint64
	if *tf.seedStr != "" {
		v, err := strconv.ParseUint(*tf.seedStr, 10, 64)
		if err != nil {
			return usagef("--seed must be a non-negative integer, got %q", *tf.seedStr)
		}
		seed = &v
	}
	// The runs' flags: the command line's, less those the search sets.
	var runArgs []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(tuneSet, f.Name) || f.Name == "grid" || f.Name == "trials-mean" || f.Name == "trials-eta" || f.Name == "score-noise" || f.Name == "work" {
			return
		}
		runArgs = append(runArgs, "--"+f.Name+"="+f.Value.String())
	})
	if *work == "" {
		*work = *tf.out + ".tune"
	}
	statePath := filepath.Join(*work, "search.json")
	// What a resumed search must share with the one under way: all but
	// the progress bars.
	fingerprint := slices.DeleteFunc(slices.Clone(runArgs), func(a string) bool { return strings.HasPrefix(a, "--quiet=") })
	fingerprint = append(fingerprint, "grid:"+grid.String(), fmt.Sprintf("trials:%v,%v", *mean, *eta), fmt.Sprint("score-noise:", *scoreNoise), "epsilon:"+fmt.Sprint(*tf.eps), "test-data:"+*tf.testSpec, "seed:"+*tf.seedStr)

	var st tuneState
	switch b, err := os.ReadFile(statePath); {
	case err == nil && !*tf.resume:
		return fmt.Errorf("a search is under way in %s: run the same command with --resume to continue it, or remove the folder to start another", *work)
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%s: %w", statePath, err)
		}
		if !slices.Equal(st.Args, fingerprint) {
			return fmt.Errorf("%s: the search under way had other flags (%s): resume it with the same command", statePath, strings.Join(st.Args, " "))
		}
		fmt.Fprintf(stdout, "tune: resuming the search in %s: %d %s done\n", *work, countDone(st.Runs), plural(countDone(st.Runs), "run"))
	case !errors.Is(err, os.ErrNotExist):
		return err
	case *tf.resume:
		return fmt.Errorf("--resume: no search under way in %s", *work)
	}

	// The score data, and what a unit of it is.
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
	scoreSpec := *tf.testSpec
	if scoreSpec == "" {
		scoreSpec = withSplit(*tf.spec, data.Test)
	}
	scoreView, err := openView(scoreSpec, sample, norm, "none", *tf.resize)
	if err != nil {
		return fmt.Errorf("the runs' score data %s: %w (give held-out data with --test-data, or :holdout=0.1 on a folder or csv)", scoreSpec, err)
	}
	if scoreView.Len() == 0 {
		return fmt.Errorf("the runs' score data %s is empty", scoreSpec)
	}
	if err := os.MkdirAll(*work, 0o700); err != nil {
		return err
	}

	if st.Runs == nil {
		// A dry run of the settings: the mechanism (q, steps, δ, the
		// privacy unit) and everything a run checks before its first
		// step, once.
		dry := filepath.Join(*work, "dry-run.json")
		dryArgs := append(slices.Clone(runArgs), "--noise-multiplier=1", "--dry-run", "--quiet", "--test-data=none",
			"--out="+filepath.Join(*work, "dry-run.onnx"), "--report="+dry)
		for i, n := range grid.names {
			dryArgs = append(dryArgs, "--"+n+"="+grid.values[i][0])
		}
		fmt.Fprintf(stdout, "tune: checking the runs' settings (a dry run)\n")
		if err := runTrain(dryArgs, io.Discard); err != nil {
			return fmt.Errorf("the runs' settings: %w", err)
		}
		var rep dptrain.Report
		b, err := os.ReadFile(dry)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("%s: %w", dry, err)
		}
		os.Remove(dry)
		s := rep.Settings
		unit := s.PrivacyUnit
		if unit == "" {
			unit = dptrain.PrivacyUnitExample
		}
		units := scoreView.Len()
		if unit == dptrain.PrivacyUnitUser {
			if _, n := data.UsersOf(scoreView); n > 0 {
				units = n
			} else {
				return fmt.Errorf("the runs protect users, but the score data %s names none: a user's score must count once (give held-out data that names its users, e.g. :holdout on the listing)", scoreSpec)
			}
		}
		// A unit's score is in [0, 1] (correct or not, or a user's share
		// of correct examples): adding or removing one moves the sum by
		// at most 1, so the noise's standard deviation in units is its
		// noise multiplier. The score data's size is taken as public,
		// as a run's sample rate takes its training data's.
		scoreSigma := *scoreNoise * float64(units)
		// The runs' mechanisms: train's sampling of the units for each
		// batch size and number of epochs the grid holds.
		n := s.Examples
		if unit == dptrain.PrivacyUnitUser {
			n = s.Users
		}
		batches, epochs := []string{strconv.Itoa(*tf.batchSize)}, []string{strconv.Itoa(*tf.epochs)}
		if i := slices.Index(grid.names, "batch-size"); i >= 0 {
			batches = grid.values[i]
		}
		if i := slices.Index(grid.names, "epochs"); i >= 0 {
			epochs = grid.values[i]
		}
		var mechs []accountant.Mechanism
		mechOf := map[[2]string]int{}
		for _, b := range batches {
			for _, e := range epochs {
				l, err1 := strconv.Atoi(b)
				ep, err2 := strconv.Atoi(e)
				if err1 != nil || err2 != nil || l <= 0 || ep <= 0 {
					return usagef("--grid batch-size and epochs take positive integers, got batch size %q and %q epochs", b, e)
				}
				sp := dptrain.Sampling(n, l, ep)
				m := accountant.Mechanism{SampleRate: sp.SampleRate, Steps: sp.Steps}
				k := slices.Index(mechs, m)
				if k < 0 {
					k, mechs = len(mechs), append(mechs, m)
				}
				mechOf[[2]string{b, e}] = k
			}
		}
		if first := mechs[mechOf[[2]string{batches[0], epochs[0]}]]; first.SampleRate != s.SampleRate || first.Steps != s.Steps {
			return fmt.Errorf("the runs' settings: the dry run samples at %v for %d steps, the search planned %v for %d", s.SampleRate, s.Steps, first.SampleRate, first.Steps)
		}
		sigmas, plan, err := accountant.CalibrateSearchOf(*tf.eps, s.Delta, mechs, scoreSigma, trials)
		if err != nil {
			return fmt.Errorf("calibrating the runs' σ: %w", err)
		}
		st = tuneState{Args: fingerprint, Plan: plan, Best: -1, Seed: seed, Unit: unit, Units: units, Spec: scoreSpec}
		for k, m := range mechs {
			st.Mechanisms = append(st.Mechanisms, accountant.Phase{Sigma: sigmas[k], SampleRate: m.SampleRate, Steps: m.Steps})
		}
		rng := tuneRNG(seed, 0)
		k := trials.Draw(rng.Float64())
		for range k {
			r := tuneRun{Settings: map[string]string{}}
			for i, n := range grid.names {
				r.Settings[n] = grid.values[i][rng.IntN(len(grid.values[i]))]
			}
			b, e := batches[0], epochs[0]
			if v, ok := r.Settings["batch-size"]; ok {
				b = v
			}
			if v, ok := r.Settings["epochs"]; ok {
				e = v
			}
			r.Phase = st.Mechanisms[mechOf[[2]string{b, e}]]
			st.Runs = append(st.Runs, r)
		}
		printSearchPlan(stdout, st, trials, *scoreNoise, *tf.eps)
		if sp, err := data.ParseSpec(scoreSpec); err == nil && sp.Holdout > 0 {
			fmt.Fprintf(stdout, "note:    the runs are scored on a :holdout split, decided by the hashes of all the keys: adding one %s can move another across it, so over both sides the guarantee is that of a change of two; held-out data of its own (--test-data) has no such coupling\n", strings.TrimSuffix(map[bool]string{true: "users", false: "examples"}[st.Unit == dptrain.PrivacyUnitUser], "s"))
		}
		if *tf.dryRun {
			cleanWork(*work)
			return nil
		}
		if err := saveTuneState(statePath, st); err != nil {
			return err
		}
	}

	dev, err := tf.dev.open()
	if err != nil {
		return err
	}
	// A frozen part's features (--cache-features) are computed once for
	// all the runs: they differ only in what they train on them.
	store := &dptrain.FeatureStore{}
	defer store.Close()
	for i := range st.Runs {
		r := &st.Runs[i]
		if r.Done {
			continue
		}
		base := runBase(*work, i)
		ra := append(slices.Clone(runArgs), "--noise-multiplier="+strconv.FormatFloat(r.Phase.Sigma, 'g', -1, 64), "--test-data=none",
			"--out="+base+".onnx", "--report="+base+".json", "--checkpoint="+base+".ckpt")
		for _, n := range grid.names {
			ra = append(ra, "--"+n+"="+r.Settings[n])
		}
		if seed != nil {
			// Each run's seed drawn from the search's (no two searches'
			// seeds give their runs the same ones, as seed+i would).
			ra = append(ra, "--seed="+strconv.FormatUint(runSeed(*seed, i), 10))
		}
		if _, err := os.Stat(base + ".ckpt"); err == nil {
			ra = append(ra, "--resume")
		}
		fmt.Fprintf(stdout, "run %d: %s\n", i+1, describeSettings(grid.names, r.Settings))
		t0, reusedBefore := time.Now(), store.Reused
		// A run writes its report last, after its model: one whose report
		// is there finished before the search stopped, and is scored as
		// it is.
		var correct []bool
		if _, err := os.Stat(base + ".json"); err != nil {
			logFile, err := os.OpenFile(base+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				return err
			}
			var rep *dptrain.Report
			rep, err = runTrainWith(ra, logFile, store, scoreView)
			if rep != nil {
				correct = rep.ScoreCorrect
			}
			logFile.Close()
			var ie interruptError
			if errors.As(err, &ie) {
				return fmt.Errorf("interrupted in run %d; its checkpoint and the search's state are in %s: run the same command with --resume to continue", i+1, *work)
			}
			if errors.Is(err, dptrain.ErrDiverged) {
				// Its noisy updates drove it to NaN or infinity: a run
				// that failed, whose score is below every other's.
				r.Done, r.Diverged = true, true
				removeRun(base)
				if err := saveTuneState(statePath, st); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "run %d: diverged (its parameters became NaN or infinite): never chosen\n", i+1)
				continue
			}
			if err != nil {
				return fmt.Errorf("run %d (%s; its log: %s): %w", i+1, describeSettings(grid.names, r.Settings), base+".log", err)
			}
		}
		if err := checkRunPhases(base+".json", r.Phase); err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		if correct == nil {
			// A run that finished before the search stopped: its model
			// is scored as eval would.
			if correct, err = classifyRun(dev, base+".onnx", scoreView, *tf.evalBatch); err != nil {
				return fmt.Errorf("run %d: scoring: %w", i+1, err)
			}
		}
		score, err := unitScore(correct, scoreView, st.Unit)
		if err != nil {
			return fmt.Errorf("run %d: scoring: %w", i+1, err)
		}
		r.Score = (score + float64(st.Units)**scoreNoise*tuneRNG(seed, uint64(i)+1).NormFloat64()) / float64(st.Units)
		r.Done = true
		if tuneScored != nil {
			tuneScored(i, r.Settings, r.Score)
		}
		// Only the best run so far is kept: the search releases it alone.
		prev := st.Best
		if prev < 0 || r.Score > st.Runs[prev].Score {
			st.Best = i
		}
		if err := saveTuneState(statePath, st); err != nil {
			return err
		}
		switch {
		case st.Best != i:
			removeRun(base)
		case prev >= 0:
			removeRun(runBase(*work, prev))
		}
		for _, ext := range []string{".ckpt", ".log"} {
			os.Remove(base + ext)
		}
		reused := ""
		if store.Reused > reusedBefore {
			reused = " (on the frozen part's features an earlier run computed)"
		}
		fmt.Fprintf(stdout, "run %d: done in %s%s\n", i+1, time.Since(t0).Round(time.Second), reused)
	}

	// The chosen run: its model with the search's guarantee, its report.
	if st.Best < 0 {
		cleanWork(*work)
		return fmt.Errorf("every run diverged (its parameters became NaN or infinite): no model to release; lower the grid's learning rates or clip norms")
	}
	best := runBase(*work, st.Best)
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
	setSearchMetadata(m.Proto, st, describeSettings(grid.names, st.Runs[st.Best].Settings))
	if err := m.Save(*tf.out, nil); err != nil {
		return err
	}
	// The run's own paths name its place among the runs.
	rep.Output, rep.Checkpoint = *tf.out, ""
	tr := TuneReport{Search: st.Plan, Phase: st.Runs[st.Best].Phase, Mechanisms: st.Mechanisms, PrivacyUnit: st.Unit, ScoreData: st.Spec, ScoreUnits: st.Units, ScoreNoise: *scoreNoise,
		Grid: map[string][]string{}, Chosen: st.Runs[st.Best].Settings, Score: st.Runs[st.Best].Score, Run: &rep, Seed: st.Seed, Output: *tf.out}
	for i, n := range grid.names {
		tr.Grid[n] = grid.values[i]
	}
	if *tf.reportPath != "" {
		b, _ := json.MarshalIndent(tr, "", "  ")
		if err := atomicfile.WriteBytes(*tf.reportPath, append(b, '\n')); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	cleanWork(*work)
	fmt.Fprintf(stdout, "chosen:  %s (noisy score %.2f %% on %s)\n", describeSettings(grid.names, tr.Chosen), 100*tr.Score, st.Spec)
	fmt.Fprintf(stdout, "done: %s written; the search spent ε = %.4g at δ = %.3g (one run alone: ε = %.4g)\n", *tf.out, st.Plan.Epsilon, st.Plan.Delta, st.Plan.RunEpsilon)
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

// runSeed is the seed of run i of a search seeded with seed.
func runSeed(seed uint64, i int) uint64 { return tuneRNG(&seed, 1<<32+uint64(i)).Uint64() }

// tuneRNG is the search's randomness: stream 0 draws the number of runs
// and their settings, stream i+1 the noise of run i's score, stream
// 2³²+i run i's seed. Seeded (and
// labelled so) only for reproducibility; else from the operating system's
// secure source.
func tuneRNG(seed *uint64, stream uint64) *rand.Rand {
	if seed != nil {
		return rand.New(rand.NewPCG(*seed, 0x74756e65^stream))
	}
	var key [32]byte
	if _, err := crand.Read(key[:]); err != nil {
		// crypto/rand does not fail on the systems Go supports.
		panic(err)
	}
	binary.LittleEndian.PutUint64(key[:8], binary.LittleEndian.Uint64(key[:8])^stream)
	return rand.New(rand.NewChaCha8(key))
}

func printSearchPlan(w io.Writer, st tuneState, t accountant.Trials, scoreNoise, target float64) {
	unit := "examples"
	if st.Unit == dptrain.PrivacyUnitUser {
		unit = "users"
	}
	fmt.Fprintf(w, "search:  the best of K runs, K drawn from a truncated negative binomial (η = %g, γ = %.4g): %.3g in expectation, more than %d with probability 1 %%, more than %d with 0.01 %% (Papernot and Steinke 2022)\n",
		t.Eta, t.Gamma, t.Mean(), t.Draw(0.99), t.Draw(0.9999))
	for _, m := range st.Mechanisms {
		fmt.Fprintf(w, "runs:    σ = %.4g at sample rate %.4g for %d steps (per %s)\n", m.Sigma, m.SampleRate, m.Steps, strings.TrimSuffix(unit, "s"))
	}
	fmt.Fprintf(w, "scores:  accuracy on %s (%d %s) with Gaussian noise of standard deviation %.3g (noise multiplier %.4g)\n", st.Spec, st.Units, unit, scoreNoise, scoreNoise*float64(st.Units))
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

func saveTuneState(path string, st tuneState) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return atomicfile.WriteBytes(path, append(b, '\n'))
}

// runBase is the path of run i's files in the search's folder, less their
// extension.
func runBase(work string, i int) string {
	return filepath.Join(work, fmt.Sprintf("dpfinetune-run%d", i+1))
}

// cleanWork removes the search's files from its folder, and the folder
// where nothing else is left in it (a --work folder of the user's keeps
// what else it holds).
func cleanWork(work string) {
	os.Remove(filepath.Join(work, "search.json"))
	os.Remove(filepath.Join(work, "dry-run.json"))
	if runs, err := filepath.Glob(filepath.Join(work, "dpfinetune-run*")); err == nil {
		for _, f := range runs {
			os.Remove(f)
		}
	}
	os.Remove(work)
}

// removeRun removes a run's files: its model (and external data), report,
// checkpoint and log.
func removeRun(base string) {
	for _, ext := range []string{".onnx", ".onnx.data", ".json", ".ckpt", ".log"} {
		os.Remove(base + ext)
	}
}

// checkRunPhases holds a run's report to the mechanism the search
// accounted: a run that spent otherwise would void its bound.
func checkRunPhases(report string, want accountant.Phase) error {
	b, err := os.ReadFile(report)
	if err != nil {
		return err
	}
	var rep dptrain.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", report, err)
	}
	var steps int
	for _, p := range rep.Phases {
		if p.Sigma != want.Sigma || p.SampleRate != want.SampleRate {
			return fmt.Errorf("the run spent σ = %v at sample rate %v, not the search's σ = %v at %v", p.Sigma, p.SampleRate, want.Sigma, want.SampleRate)
		}
		steps += p.Steps
	}
	if steps != want.Steps {
		return fmt.Errorf("the run took %d steps, not the search's %d", steps, want.Steps)
	}
	return nil
}

// classifyRun says which of v's examples a run's model classifies
// correctly (its largest logit the label's, the first where several are
// largest).
func classifyRun(dev runtime.Device, model string, v dataView, batch int) ([]bool, error) {
	lm, err := loadGraph(model)
	if err != nil {
		return nil, err
	}
	if err := lm.dynamicBatch(); err != nil {
		return nil, err
	}
	shape := v.SampleShape()
	sample := make([]int64, len(shape))
	for i, d := range shape {
		sample[i] = int64(d)
	}
	ev, err := dptrain.NewEvaluatorOn(dev, lm.g, sample, min(batch, max(v.Len(), 1)))
	if err != nil {
		return nil, err
	}
	correct := make([]bool, v.Len())
	err = ev.Losses(v, func(i int, label int64, logits []float32, _ float64) {
		best := 0
		for j, x := range logits {
			if x > logits[best] {
				best = j
			}
		}
		correct[i] = int64(best) == label
	})
	return correct, err
}

// unitScore is a run's score on v from which of its examples it gets
// right: their count, or at user level the sum over users of each one's
// share of correctly classified examples (each unit's score in [0, 1]).
func unitScore(correct []bool, v dataView, unit string) (float64, error) {
	if len(correct) != v.Len() {
		return 0, fmt.Errorf("%d examples classified of %d to score", len(correct), v.Len())
	}
	var score float64
	if users, n := data.UsersOf(v); unit == dptrain.PrivacyUnitUser && n > 0 {
		right, all := make([]float64, n), make([]float64, n)
		for i, u := range users {
			all[u]++
			if correct[i] {
				right[u]++
			}
		}
		for u := range all {
			if all[u] > 0 {
				score += right[u] / all[u]
			}
		}
		return score, nil
	}
	for _, c := range correct {
		if c {
			score++
		}
	}
	return score, nil
}

// setSearchMetadata records the search's guarantee in the chosen model:
// its ε and δ are the search's, the run's own ε kept beside them.
func setSearchMetadata(p *onnxpb.ModelProto, st tuneState, chosen string) {
	kv := map[string]string{
		"epsilon":     fmt.Sprint(st.Plan.Epsilon),
		"delta":       fmt.Sprint(st.Plan.Delta),
		"run_epsilon": fmt.Sprint(st.Plan.RunEpsilon),
		"search":      fmt.Sprintf("the best of K runs (K secret, drawn with mean %.3g, η = %g) by noisy accuracy on %s: %s", st.Plan.MeanTrials, st.Plan.Trials.Eta, st.Spec, chosen),
	}
	for _, e := range p.MetadataProps {
		k := strings.TrimPrefix(e.GetKey(), dptrain.MetaPrefix)
		if v, ok := kv[k]; ok && k != e.GetKey() {
			e.Value = proto.String(v)
			delete(kv, k)
		}
	}
	for _, k := range []string{"epsilon", "delta", "run_epsilon", "search"} {
		if v, ok := kv[k]; ok {
			p.MetadataProps = append(p.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(dptrain.MetaPrefix + k), Value: proto.String(v)})
		}
	}
}
