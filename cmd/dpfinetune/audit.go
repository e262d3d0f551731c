package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/dptrain/audit"
)

func init() {
	register(&command{
		name:    "audit",
		summary: "train once with canaries and report an empirical lower bound on ε (privacy auditing in one run)",
		run:     runAudit,
	})
}

// errViolation is returned, after the results are printed, when the
// audit's lower bound exceeds the claimed ε.
var errViolation = errors.New("the audit's lower bound on ε exceeds the ε the accountant claims: the mechanism is broken")

func runAudit(args []string, stdout io.Writer) error {
	fs := newFlagSet("audit", "--model M.onnx --data SPEC --epsilon E [train flags] [--canary-kind gradient|input] [--canaries M] [--json]")
	tf := addTrainFlags(fs, "where to write the audited model (optional)")
	kind := fs.String("canary-kind", "gradient", "gradient: Dirac per-sample gradients injected before clipping (white box); input: mislabeled images added to the data (black box)")
	m := fs.Int("canaries", 1000, "number of canaries m, each included with probability ½")
	kPlus := fs.Int("k-plus", -1, "guess \"included\" for this many highest-scoring canaries (default m/4)")
	kMinus := fs.Int("k-minus", -1, "guess \"excluded\" for this many lowest-scoring canaries (default m/4)")
	conf := fs.Float64("confidence", 0.95, "confidence of the lower bound")
	canaryData := fs.String("canary-data", "", "images for input canaries, not in the training data (default: the --data source's test split)")
	asJSON := fs.Bool("json", false, "print the result as JSON (the training log goes to stderr, or nowhere with --quiet)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *tf.resume {
		return usagef("--resume: an audit is one uninterrupted run (the canaries' scores are not checkpointed)")
	}
	if *tf.nonPrivate {
		return usagef("--non-private: a run without privacy claims no ε to audit")
	}
	if *tf.dryRun {
		return usagef("--dry-run: an audit is its run (try train --dry-run with the same flags)")
	}
	if *m < 1 {
		return usagef("--canaries must be positive, got %d", *m)
	}
	if *kPlus < 0 {
		*kPlus = *m / 4
	}
	if *kMinus < 0 {
		*kMinus = *m / 4
	}
	if *kPlus+*kMinus == 0 || *kPlus+*kMinus > *m {
		return usagef("--k-plus %d and --k-minus %d must add up to between 1 and --canaries %d", *kPlus, *kMinus, *m)
	}
	if !(*conf > 0 && *conf < 1) {
		return usagef("--confidence must be in (0, 1), got %g", *conf)
	}
	k := audit.Kind(*kind)
	if k != audit.Gradient && k != audit.Input {
		return usagef("--canary-kind must be gradient or input, got %q", *kind)
	}
	log := stdout
	if *asJSON {
		log = os.Stderr
		if *tf.quiet {
			log = io.Discard
		}
	}
	cfg, err := tf.config(log, false)
	if err != nil {
		return err
	}
	cfg.Log = log
	if *tf.out == "" {
		cfg.Checkpoint = ""
	}
	opts := audit.Options{Kind: k, Canaries: *m, KPlus: *kPlus, KMinus: *kMinus, Confidence: *conf}
	if s := cfg.Settings.Seed; s != nil {
		// Its own stream: the training run's draws stay those of train
		// with the same seed.
		opts.Source = dpengine.NewSeededSource(*s ^ 0x61756469745f6361) // "audit_ca"
	}
	if k == audit.Input {
		spec := *canaryData
		if spec == "" {
			spec = withSplit(*tf.spec, data.Test)
		}
		pool, err := openView(spec, cfg.Settings.InputShape, *tf.norm, *tf.augment, *tf.resize, tf.dicomRead())
		if err != nil {
			return fmt.Errorf("canary images: %w", err)
		}
		opts.Pool = pool
	}
	var res *audit.Result
	err = withProgress(cfg, *tf.quiet, func(c dptrain.Config) (err error) {
		res, err = audit.Run(c, opts)
		return err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		printAudit(stdout, res)
	}
	if res.Violation {
		return errViolation
	}
	return nil
}

func printAudit(w io.Writer, r *audit.Result) {
	fmt.Fprintf(w, "\naudit (%s canaries, privacy auditing in one run):\n", r.Kind)
	fmt.Fprintf(w, "  canaries:  m = %d, %d included (each with probability ½)\n", r.Canaries, r.Included)
	fmt.Fprintf(w, "  guesses:   %d \"included\" (highest scores) + %d \"excluded\" (lowest) = %d, %d correct\n", r.KPlus, r.KMinus, r.Guesses, r.Correct)
	fmt.Fprintf(w, "  claimed:   ε = %.4g at δ = %.3g (accountant %s)\n", r.Claimed, r.Delta, r.Report.Settings.Accountant)
	fmt.Fprintf(w, "  bound:     ε ≥ %.4g with %g %% confidence (at most %.4g with %d guesses, had all been right)\n", r.Bound, 100*r.Confidence, r.MaxBound, r.Guesses)
	fmt.Fprintf(w, "  %s\n", r.Statement)
}
