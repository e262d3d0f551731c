package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/dpfinetune/dpfinetune/dptrain"
)

func init() {
	register(&command{
		name:    "compare",
		summary: "compare two models on the same data: McNemar's test of their accuracies, DeLong's paired test of their AUCs",
		run:     runCompare,
	})
}

// compareResult is the JSON form of "dpfinetune compare".
type compareResult struct {
	ModelA   string `json:"model_a"`
	ModelB   string `json:"model_b"`
	Data     string `json:"data"`
	Examples int    `json:"examples"`
	// Accuracy is a single-label pair's McNemar test (nil for
	// multi-label models and for groups).
	Accuracy *dptrain.AccuracyDifference `json:"accuracy,omitempty"`
	// AUC are the paired tests of a two-class pair's class 1 or of each
	// label, MeanAUC the labels' mean's.
	AUC     []dptrain.AUCDifference `json:"auc,omitempty"`
	MeanAUC *dptrain.AUCDifference  `json:"mean_auc,omitempty"`
	// Bootstrap, with --bootstrap, holds the differences' intervals over
	// the same resamples of both models' examples, groups or clusters.
	Bootstrap *dptrain.PairedBootstrapResult `json:"bootstrap,omitempty"`
}

func runCompare(args []string, stdout io.Writer) error {
	fs := newFlagSet("compare", "--model A.onnx --model B.onnx --data SPEC [--group-by dir|user [--combine mean|max]] [--bootstrap N [--bootstrap-by user|dir]] [--batch N] [--json]")
	var models pathList
	fs.Var(&models, "model", "an ONNX model file; give two (A, then B), each read with its own recorded preprocessing")
	spec := fs.String("data", "", "the data both are evaluated on, as eval's --data (default split: test)")
	batch := fs.Int("batch", 256, "samples per forward pass")
	groupBy := fs.String("group-by", "", "compare the models' scores of groups of examples, as eval --group-by: dir, user, file, study or series (the AUCs only)")
	combine := fs.String("combine", dptrain.CombineMean, "with --group-by: mean or max")
	bootstrap := fs.Int("bootstrap", 0, "the differences' 95 % intervals by this many paired bootstrap resamples (at least 100) of the examples, of the groups with --group-by, or of the clusters of --bootstrap-by: both models on the same draws")
	bootstrapBy := fs.String("bootstrap-by", "", "with --bootstrap: draw clusters of examples — user (each patient's images), dir, file, study or series — which the paired tests above take as independent")
	seed := fs.Uint64("seed", 1, "with --bootstrap: the draws' seed")
	asJSON := fs.Bool("json", false, "print JSON")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	switch {
	case len(models) != 2 || *spec == "":
		return usagef("two --model flags and --data are required")
	case *batch <= 0:
		return usagef("--batch must be positive, got %d", *batch)
	}
	if err := checkGrouping(fs, *groupBy, *combine, *bootstrap, *bootstrapBy); err != nil {
		return err
	}
	var es [2]*evaluation
	var res [2]*dptrain.EvalResult
	var kept [2]*dptrain.Kept
	for i, m := range models {
		if es[i], err = openEvaluation(dev, m, *spec, *batch, "", "", dicomRead{}, ""); err != nil {
			return err
		}
		var gr *dptrain.Grouping
		if *groupBy != "" {
			g, _, err := groupingOf(es[i].v, es[i].spec, *groupBy, "--group-by")
			if err != nil {
				return err
			}
			g.Combine, gr = *combine, &g
		}
		switch {
		case *bootstrap > 0:
			res[i], kept[i], err = es[i].ev.Keep(es[i].v, gr)
		case gr != nil:
			res[i], err = es[i].ev.RunGrouped(es[i].v, *gr)
		default:
			res[i], err = es[i].ev.Run(es[i].v)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	a, b := es[0], es[1]
	switch {
	case a.multi != b.multi:
		return fmt.Errorf("%s and %s read %s differently (multi-label for one only)", models[0], models[1], a.spec)
	case a.ev.Classes() != b.ev.Classes():
		return fmt.Errorf("%s has %d outputs, %s %d: compare models of the same classes or labels", models[0], a.ev.Classes(), models[1], b.ev.Classes())
	case a.v.Len() != b.v.Len():
		return fmt.Errorf("%s and %s read %d and %d examples of %s", models[0], models[1], a.v.Len(), b.v.Len(), a.spec)
	}
	out := compareResult{ModelA: models[0], ModelB: models[1], Data: a.spec, Examples: res[0].Samples}
	if !a.multi && *groupBy == "" {
		ra, err := a.ev.Right(a.v)
		if err != nil {
			return err
		}
		rb, err := b.ev.Right(b.v)
		if err != nil {
			return err
		}
		d, err := dptrain.CompareRight(ra, rb)
		if err != nil {
			return err
		}
		out.Accuracy = &d
	}
	if res[0].CurveLabels() != nil {
		for i := range res {
			res[i].Classes = es[i].v.Classes()
		}
		if out.AUC, out.MeanAUC, err = dptrain.CompareAUCs(res[0], res[1]); err != nil {
			return err
		}
	}
	if *bootstrap > 0 {
		o := dptrain.BootstrapOptions{Resamples: *bootstrap, Seed: *seed}
		if *bootstrapBy != "" {
			c, _, err := groupingOf(a.v, a.spec, *bootstrapBy, "--bootstrap-by")
			if err != nil {
				return err
			}
			o.Clusters = c.Of
		}
		if out.Bootstrap, err = dptrain.PairedBootstrap(kept[0], kept[1], o); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	unit := "examples"
	if *groupBy != "" {
		unit = "groups (" + groupNames[*groupBy] + ", their probabilities' " + *combine + ")"
	}
	fmt.Fprintf(stdout, "A:        %s\nB:        %s\ndata:     %s (%d %s)\n", models[0], models[1], a.spec, out.Examples, unit)
	if d := out.Accuracy; d != nil {
		fmt.Fprintf(stdout, "accuracy: A %.2f %%, B %.2f %% (A − B: %+.2f points); McNemar's exact test: p = %.3g (A alone right on %d examples, B alone on %d)\n",
			100*d.A, 100*d.B, 100*(d.A-d.B), d.P, d.AOnly, d.BOnly)
	}
	if len(out.AUC) > 0 {
		names := a.v.Classes()
		fmt.Fprintf(stdout, "\nAUC, DeLong's paired test (the examples independent draws):\n")
		tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  %s\t A\t B\t A − B\t 95 %% CI\t p\t\n", map[bool]string{true: "label", false: "class"}[a.multi])
		row := func(name string, d dptrain.AUCDifference) {
			fmt.Fprintf(tw, "  %s\t %.4f\t %.4f\t %+.4f\t %+.4f to %+.4f\t %.3g\t\n", name, d.A, d.B, d.Difference, d.CI[0], d.CI[1], d.P)
		}
		for _, d := range out.AUC {
			name := strconv.Itoa(d.Label)
			if d.Label < len(names) && names[d.Label] != name {
				name += " " + names[d.Label]
			}
			row(name, d)
		}
		if out.MeanAUC != nil {
			row("mean", *out.MeanAUC)
		}
		tw.Flush()
	} else if a.ev.Classes() > 2 && !a.multi && out.Bootstrap == nil {
		fmt.Fprintf(stdout, "(the AUCs of more than two classes are not compared: the accuracy is; --bootstrap compares their mean)\n")
	}
	if pb := out.Bootstrap; pb != nil {
		fmt.Fprintf(stdout, "\npaired bootstrap: %d resamples of the %d %s, both models on the same draws (percentiles; --seed %d):\n", pb.Resamples, pb.Count, pb.Units, *seed)
		tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  figure\t A − B\t 95 %% interval\t resamples with A above\t\n")
		for _, f := range pb.Figures {
			fmt.Fprintf(tw, "  %s\t %+.4f\t %+.4f to %+.4f\t %.1f %%\t\n", f.Name, f.Difference, f.CI[0], f.CI[1], 100*f.AAbove)
		}
		tw.Flush()
	}
	return nil
}
