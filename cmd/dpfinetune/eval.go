package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/internal/dicom"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "eval",
		summary: "a model's figures on a dataset: accuracy, AUCs and their intervals, calibration, each class or label; by study, at an operating point, bootstrapped",
		run:     runEval,
	})
}

// evalResult is the JSON form of "dpfinetune eval" and the per-epoch test
// metrics of train.
type evalResult = dptrain.EvalResult

// modelSample returns the per-sample input shape declared by the model
// (C,H,W), or override when given.
func modelSample(g *graph.Graph, override string) ([]int64, error) {
	if len(g.Inputs) != 1 {
		return nil, fmt.Errorf("the model has %d inputs; dpfinetune needs one image input", len(g.Inputs))
	}
	in := g.Inputs[0]
	if override != "" {
		dims, err := parseDims(override)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		return dims, nil
	}
	if len(in.Shape) < 2 {
		return nil, fmt.Errorf("input %q has shape %v; want (batch, C, H, W)", in.Name, in.Shape)
	}
	var dims []int64
	for _, d := range in.Shape[1:] {
		if d.Size <= 0 {
			return nil, fmt.Errorf("input %q has dynamic sample dims %v: give --input-shape C,H,W", in.Name, in.Shape)
		}
		dims = append(dims, d.Size)
	}
	return dims, nil
}

// resizeUsage is the --resize flag's help.
const resizeUsage = "how an image of another size becomes the model's input: stretch (each axis scaled to it), crop (the shorter side scaled to 8/7 of the input's, 256 for 224, then the centre taken: torchvision's Resize+CenterCrop, the aspect ratio kept) or crop=S (the shorter side to S); a shrinking axis is antialiased as torchvision does"

// windowUsage is the --window flag's help.
const windowUsage = "grayscale DICOM and NIfTI images and 16-bit grayscale PNGs and TIFFs: file (a DICOM file's own window or VOI LUT, else its own range; a NIfTI file's display range, else its volume's; a 16-bit photo's high bytes), range (each image through its own range of values), the VOI window C,W every such image is read through instead (a centre and a width in the rescaled values: -600,1500 for a CT's lung window), or three, C,W/C,W/C,W, read as the channels of an RGB image (a head CT's brain, subdural and bone windows: 40,80/80,200/600,2800); other images are read as without it"

// frameUsage is the --frame flag's help.
const frameUsage = "multi-frame DICOM objects (a cine loop, an enhanced CT or MR volume, a tomosynthesis stack): the image each gives — a frame, first, middle (frame n/2+1 of n), last or a number from 1, or a projection of all its frames' rescaled values, max (a maximum intensity projection), mean or min, then windowed as a frame (frame 1's window) —, or all: every frame a sample, each file a user where the data name none (a file's frames are one person's; predict gives a file its frames' mean probabilities); without it such a file is refused (single-frame files are read as they are)"

// seriesUsage is the --series flag's help.
const seriesUsage = "DICOM series: each example a directory of single-frame DICOM images, a CT's or an MR's slices a file each (a folder's class directories' sub-directories, a CSV listing's paths, predict's directories of slices), read as one multi-frame object — its slices ordered along their plane's normal (Image Position), else by Instance Number — through --frame (a slice, a projection of them all, or every slice a sample) or, for a model of clips, T slices picked evenly; a directory holding several series (Series Instance UID) is an example each, named DIR#N by Series Number, the directory their user"

// dicomRead is how DICOM images are read: --window, --frame and
// --series.
type dicomRead struct {
	window, frame string
	series        bool
}

// recordedPreprocess sets *norm, *resize and dcm's window and frame, where
// empty, to what train recorded in the model, else to the defaults.
func recordedPreprocess(m *onnx.Model, norm, resize *string, dcm *dicomRead) {
	for _, f := range []struct {
		v    *string
		key  string
		none string
	}{{norm, "norm", "default"}, {resize, "resize", "stretch"}, {&dcm.window, "window", windowFile}, {&dcm.frame, "frame", ""}} {
		if *f.v == "" {
			*f.v = recorded(m, f.key, f.none)
		}
	}
	dcm.series = dcm.series || recorded(m, "series", "") == "true"
}

// recorded returns the value train recorded in the model's metadata under
// key, or none.
func recorded(m *onnx.Model, key, none string) string {
	v := none
	for _, kv := range m.Proto.GetMetadataProps() {
		if kv.GetKey() == dptrain.MetaPrefix+key {
			v = kv.GetValue()
		}
	}
	return v
}

// dataView is a dataset as train, eval and audit read it: images, resized
// and normalised to the model's input (data.View), or arrays fed to the
// model as they are (data.TensorView).
type dataView interface {
	data.Dataset
	Classes() []string
	CheckSources() error
	Fingerprint() string
}

// openView loads a dataset spec and preprocesses it to the model's sample
// shape: images to (C,H,W); arrays of other samples (video clips,
// volumes, normalised tensors) keep their values, and must have the
// model's shape.
func openView(spec string, sample []int64, norm, augment, resize string, dcm dicomRead) (dataView, error) {
	s, err := data.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if s.Scheme != data.SchemeNPY {
		return openViewOf(func(fit data.Fit) (*data.Images, error) { return data.LoadFitted(s, fit) }, sample, norm, augment, resize, dcm)
	}
	a, err := data.LoadArrays(s)
	if err != nil {
		return nil, err
	}
	if len(sample) == 3 {
		im, ok, err := a.Images()
		if err != nil {
			return nil, err
		}
		if ok {
			return openViewOf(func(data.Fit) (*data.Images, error) { return im, nil }, sample, norm, augment, resize, dcm)
		}
	}
	aug, err := data.ParseAugment(augment)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--augment: %v", err)}
	}
	nm, err := data.ParseNorm(norm, data.Norm{})
	if err != nil {
		return nil, usageError{fmt.Sprintf("--norm: %v", err)}
	}
	shape := make([]int, len(sample))
	for i, d := range sample {
		shape[i] = int(d)
	}
	return data.NewTensorView(a, data.TensorPreprocess{Shape: shape, Norm: nm, Augment: aug})
}

// preprocessOf returns the normalisation and resizing v applies, as train
// records them ("" for no resizing: arrays fed as they are).
func preprocessOf(v dataView) (norm, resize string) {
	switch v := v.(type) {
	case *data.View:
		return v.Preprocess().Norm.String(), v.Preprocess().Resize.String()
	case *data.ClipView:
		return v.Preprocess().Norm.String(), v.Preprocess().Resize.String()
	case *data.TensorView:
		return v.Preprocess().Norm.String(), ""
	}
	return "", ""
}

// openViewOf is openView on the images load reads, fitted to the model's
// input as it reads them; for a model of clips (C,T,H,W), each DICOM
// file's T frames picked evenly, a clip (data.ClipView).
func openViewOf(load func(data.Fit) (*data.Images, error), sample []int64, norm, augment, resize string, dcm dicomRead) (dataView, error) {
	clip := 0
	switch len(sample) {
	case 3:
	case 4:
		clip, sample = int(sample[1]), []int64{sample[0], sample[2], sample[3]}
		if dcm.frame != "" {
			return nil, usagef("--frame %s: a model of clips reads %d frames of each file, picked evenly from its first to its last; --frame does not apply", dcm.frame, clip)
		}
	default:
		return nil, fmt.Errorf("model input sample shape %v: want (C, H, W), or (C, T, H, W) for clips of multi-frame DICOM files", sample)
	}
	aug, err := data.ParseAugment(augment)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--augment: %v", err)}
	}
	h, w := int(sample[1]), int(sample[2])
	rs, err := data.ParseResize(resize)
	if err == nil {
		err = rs.Check(h, w)
	}
	if err != nil {
		return nil, usageError{fmt.Sprintf("--resize: %v", err)}
	}
	win, err := parseWindow(dcm.window, sample[0])
	if err != nil {
		return nil, err
	}
	frame, err := parseFrame(dcm.frame)
	if err != nil {
		return nil, err
	}
	// Photos larger than the input are shrunk to it as they load; for a
	// gray model, made gray first, as PIL's convert("L") would. A random
	// resized crop draws its box from the whole photo: kept whole, its
	// shorter side shrunk to the centre crop's.
	imgs, err := load(data.Fit{Height: h, Width: w, Resize: rs, Gray: sample[0] == 1, Whole: aug.ResizedCrop.Max > 0, Window: win, Frame: frame, Clip: clip, Series: dcm.series})
	if err != nil {
		return nil, withFrameHint(err)
	}
	nm, err := data.ParseNorm(norm, imgs.DefaultNorm())
	if err != nil {
		return nil, usageError{fmt.Sprintf("--norm: %v", err)}
	}
	v, err := data.NewView(imgs, data.Preprocess{Channels: int(sample[0]), Height: h, Width: w, Norm: nm, Augment: aug, Resize: rs})
	switch {
	case err != nil:
		return nil, err
	case clip == 0:
		return v, nil
	}
	return data.NewClipView(v, clip)
}

// windowFile is --window's value for each DICOM file's own VOI.
const windowFile = "file"

// parseWindow checks a --window value for a model of channels input
// channels and returns it as data.Fit.Window reads it ("" for the files'
// own).
func parseWindow(window string, channels int64) (string, error) {
	switch window {
	case "", windowFile:
		return "", nil
	case data.WindowRange:
		return window, nil
	}
	ws, err := dicom.ParseWindows(window)
	if err != nil {
		return "", usageError{fmt.Sprintf("--window: %v", err)}
	}
	if len(ws) == 3 && channels == 1 {
		return "", usagef("--window %s: three windows make an RGB image; the model takes 1 channel", window)
	}
	return dicom.FormatWindows(ws), nil
}

// noteLeftOut says on stderr which files a load left out
// (data.LeftOutNote), and which 16-bit photos it read by their high bytes
// to 16 levels (data.Narrow16Note).
func noteLeftOut(v any) {
	if d, ok := v.(interface{ LeftOut() []string }); ok {
		if note := data.LeftOutNote(d.LeftOut()); note != "" {
			fmt.Fprintf(os.Stderr, "note: left out %s\n", note)
		}
	}
	if d, ok := v.(interface{ Narrow16() (int, string) }); ok {
		if note := data.Narrow16Note(d.Narrow16()); note != "" {
			fmt.Fprintf(os.Stderr, "note: %s\n", note)
		}
	}
}

// parseFrame checks a --frame value and returns it as data.Fit.Frame reads
// it.
func parseFrame(frame string) (string, error) {
	f, err := dicom.ParseFrame(frame)
	if err != nil {
		return "", usageError{fmt.Sprintf("--frame: %v", err)}
	}
	return f.String(), nil
}

// withFrameHint names --frame in a load's error over a multi-frame DICOM
// object read without it.
func withFrameHint(err error) error {
	if errors.Is(err, dicom.ErrMultiFrame) {
		return fmt.Errorf("%w: choose its image with --frame (first, middle, last, a number, or max, mean, min), or all to make each frame a sample", err)
	}
	return err
}

func runEval(args []string, stdout io.Writer) error {
	fs := newFlagSet("eval", "--model M.onnx --data SPEC [--threshold T] [--group-by dir|user|file|study|series] [--operating-point RULE] [--roc F.csv] [--plot F.png] [--bootstrap N] [--batch N] [--norm ...] [--resize ...] [--window ...] [--frame ...] [--input-shape C,H,W] [--json]")
	model := fs.String("model", "", "ONNX model file (required)")
	spec := fs.String("data", "", "dataset: idx:DIR, cifar10:DIR, cifar100:DIR, folder:DIR, npy:FILE.npz|DIR or csv:FILE.csv (an image path and a label a row), with :train/:test and :limit=N (default split: test; a csv listing without :holdout is read whole; a :holdout split is train's only with train's options, a folder's :users=REGEX included, which holds out whole users)")
	batch := fs.Int("batch", 256, "samples per forward pass")
	norm := fs.String("norm", "", "input normalisation (default: the one recorded in the model by train, else the dataset's)")
	resize := fs.String("resize", "", "how an image of another size becomes the model's input: stretch, crop or crop=S as train's --resize (default: the one recorded in the model by train, else stretch)")
	window := fs.String("window", "", windowUsage+" (default: the one recorded in the model by train, else file)")
	frame := fs.String("frame", "", frameUsage+" (default: the one recorded in the model by train)")
	series := fs.Bool("series", false, seriesUsage+" (default: as the model was trained)")
	inShape := fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)")
	asJSON := fs.Bool("json", false, "print JSON")
	threshold := fs.String("threshold", "", "an operating point: a multi-label model's labels decided where their sigmoids exceed this (one number, one a label, or NAME=T pairs, the others ½; default ½), a two-class model's class 1 where its probability exceeds it (default: the more probable class); the figures that count decisions follow it, the AUCs and the loss do not")
	groupBy := fs.String("group-by", "", "score groups of examples, not examples: user (the data's users: a listing's user column or user=COL, users=REGEX over the paths) dir (each image's directory: a CheXpert, MURA or MIMIC-CXR study's views), file (a multi-frame DICOM file's frames read with --frame all) study (DICOM images by their Study Instance UID: a mammogram's four views, wherever the export put them) or series (by their Series Instance UID: a CT's slices, a file each); every figure then counts groups, each one example whose probabilities combine its examples' (--combine), all of a group's examples of one label")
	combine := fs.String("combine", dptrain.CombineMean, "with --group-by, how a group's probabilities combine its examples': mean, or max (each class's or label's largest over the group: a finding seen in any view)")
	point := fs.String("operating-point", "", "a two-class or multi-label model's operating point chosen on this data, class 1's or each label's: sensitivity=S (the highest threshold reaching sensitivity S), specificity=S (the lowest keeping specificity S) or youden (the largest sensitivity + specificity − 1); prints each one's threshold, sensitivity, specificity, PPV and NPV, and the --threshold that decides there (choose on a validation split, report on the test split; a threshold chosen on private data is a statistic of it, outside the guarantee)")
	bootstrap := fs.Int("bootstrap", 0, "the figures' 95 % intervals by this many bootstrap resamples (at least 100; 1000 is usual) of the examples, of the groups with --group-by, or of the clusters of --bootstrap-by")
	bootstrapBy := fs.String("bootstrap-by", "", "with --bootstrap: draw clusters of examples — user (each patient's images), dir (each directory's), file (each file's frames, --frame all), study (each DICOM study's images) or series (each DICOM series' slices) — so that the intervals count their likeness (a cluster bootstrap); with --group-by, clusters of groups (--group-by dir --bootstrap-by user: a patient's studies)")
	seed := fs.Uint64("seed", 1, "with --bootstrap: the draws' seed (the same intervals for the same seed and data)")
	plotFile := fs.String("plot", "", "draw the evaluation as a PNG: a two-class or multi-label model's ROC curves, a single-label model's reliability diagram (accuracy against confidence)")
	rocFile := fs.String("roc", "", "write a two-class or multi-label model's ROC curves to this CSV file: a row a point (label, threshold, false and true positive rates, counts), class 1's or each label's")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	var rule dptrain.PointRule
	if *point != "" {
		r, err := dptrain.ParsePointRule(*point)
		if err != nil {
			return usagef("--operating-point: %v", err)
		}
		rule = r
	}
	if *model == "" || *spec == "" {
		return usagef("--model and --data are required")
	}
	if *batch <= 0 {
		return usagef("--batch must be positive, got %d", *batch)
	}
	if err := checkGrouping(fs, *groupBy, *combine, *bootstrap, *bootstrapBy); err != nil {
		return err
	}
	es, err := openEvaluation(dev, *model, *spec, *batch, *norm, *resize, dicomRead{*window, *frame, *series}, *inShape)
	if err != nil {
		return err
	}
	s, v, ev, multi := es.spec, es.v, es.ev, es.multi
	if (*point != "" || *rocFile != "") && !multi && ev.Classes() != 2 {
		return usagef("--operating-point and --roc take a two-class or a multi-label model's curves; %s has %d classes", *model, ev.Classes())
	}
	if *threshold != "" {
		t, err := dptrain.ParseDecisionThreshold(*threshold, multi, v.Classes(), ev.Classes())
		if err != nil {
			return usageError{err.Error()}
		}
		if err := ev.SetThresholds(t); err != nil {
			return fmt.Errorf("%s: %w", *model, err)
		}
	}
	var res *dptrain.EvalResult
	var by string
	var gr *dptrain.Grouping
	if *groupBy != "" {
		g, what, err := groupingOf(v, s, *groupBy, "--group-by")
		if err != nil {
			return err
		}
		g.Combine, gr, by = *combine, &g, what
	}
	switch {
	case *bootstrap > 0:
		o := dptrain.BootstrapOptions{Resamples: *bootstrap, Groups: gr, Seed: *seed}
		if *bootstrapBy != "" {
			c, _, err := groupingOf(v, s, *bootstrapBy, "--bootstrap-by")
			if err != nil {
				return err
			}
			o.Clusters = c.Of
		}
		res, err = ev.Bootstrap(v, o)
	case gr != nil:
		res, err = ev.RunGrouped(v, *gr)
	default:
		res, err = ev.Run(v)
	}
	if err != nil {
		return err
	}
	res.Classes = v.Classes()
	if (*point != "" || *rocFile != "") && res.CurveLabels() == nil {
		return fmt.Errorf("%s: %d examples of %d labels are more scores than eval keeps for curves", *model, v.Len(), ev.Classes())
	}
	if *point != "" {
		res.OperatingRule = rule.String()
		for _, j := range res.CurveLabels() {
			if op, ok := res.OperatingPoint(j, rule); ok {
				res.OperatingPoints = append(res.OperatingPoints, op)
			}
		}
	}
	if *rocFile != "" {
		if err := writeROC(*rocFile, res); err != nil {
			return err
		}
	}
	if *plotFile != "" {
		if err := writeEvalPlot(*plotFile, *model, res); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if res.MultiLabel {
		writeLabelEval(stdout, *model, s, res)
	} else {
		writeEval(stdout, *model, s, res)
	}
	if b := res.Bootstrap; b != nil {
		writeBootstrap(stdout, b, *seed)
	}
	if *point != "" {
		writeOperatingPoints(stdout, res)
	}
	if *rocFile != "" {
		fmt.Fprintf(stdout, "\nROC curves written to %s\n", *rocFile)
	}
	if *plotFile != "" {
		fmt.Fprintf(stdout, "\ndrawn: %s\n", *plotFile)
	}
	if g := res.Groups; g != nil {
		fmt.Fprintf(stdout, "\ngroups:   %d groups (%s) of the %d examples: 1 to %d examples a group, %d of one; each scored by its examples' probabilities' %s; every figure above counts groups\n",
			res.Samples, by, g.Examples, g.Largest, g.Single, g.Combine)
	}
	return nil
}

// checkGrouping checks the grouping and bootstrap flags eval and compare
// share: --group-by, --combine (only with --group-by), --bootstrap and
// --bootstrap-by (only with --bootstrap).
func checkGrouping(fs *flag.FlagSet, groupBy, combine string, bootstrap int, bootstrapBy string) error {
	switch {
	case groupBy != "" && !isGrouping(groupBy):
		return usagef("--group-by %q: want %s", groupBy, groupingValues)
	case combine != dptrain.CombineMean && combine != dptrain.CombineMax:
		return usagef("--combine %q: want %s or %s", combine, dptrain.CombineMean, dptrain.CombineMax)
	case groupBy == "" && flagGiven(fs, "combine"):
		return usagef("--combine says how a group's examples combine: it needs --group-by")
	case bootstrap != 0 && (bootstrap < 100 || bootstrap > 100000):
		return usagef("--bootstrap %d: at least 100 resamples, at most 100000", bootstrap)
	case bootstrapBy != "" && !isGrouping(bootstrapBy):
		return usagef("--bootstrap-by %q: want %s", bootstrapBy, groupingValues)
	case bootstrapBy != "" && bootstrap == 0:
		return usagef("--bootstrap-by says what --bootstrap draws: it needs --bootstrap N")
	}
	return nil
}

// evaluation is a model opened on a dataset for eval or calibrate.
type evaluation struct {
	lm *loadedModel
	// spec is the data's spec, its split made explicit.
	spec string
	v    dataView
	ev   *dptrain.Evaluator
	// multi marks multi-label data, read as label sets (the evaluator
	// set so).
	multi bool
}

// openEvaluation opens model on the data of spec for forward passes of
// batch samples on dev: the model's preprocessing where norm, resize and
// inShape leave it to the model, the test split by default (a CSV listing
// without a holdout read whole: it lists the images to evaluate), and the
// data as label sets where they are (refused as single labels for a model
// trained multi-label).
func openEvaluation(dev runtime.Device, model, spec string, batch int, norm, resize string, dcm dicomRead, inShape string) (*evaluation, error) {
	lm, err := loadGraph(model)
	if err != nil {
		return nil, err
	}
	if err := lm.dynamicBatch(); err != nil {
		return nil, err
	}
	m, g := lm.m, lm.g
	sample, err := modelSample(g, inShape)
	if err != nil {
		return nil, err
	}
	recordedPreprocess(m, &norm, &resize, &dcm)
	norm = normFor(g, norm)
	if sp, err := data.ParseSpec(spec); err == nil && sp.Split == "" && (sp.Scheme != data.SchemeCSV || sp.Holdout > 0) {
		sp.Split = data.Test
		spec = sp.String()
	}
	v, err := openView(spec, sample, norm, "none", resize, dcm)
	if err != nil {
		return nil, err
	}
	noteLeftOut(v)
	ev, err := dptrain.NewEvaluatorOn(dev, g, sample, min(batch, max(v.Len(), 1)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", model, err)
	}
	// A multi-label model (train recorded it) is evaluated on label sets;
	// multi-label data evaluates any model as multi-label (an export of
	// one trained so elsewhere records nothing).
	multi := data.IsMultiLabel(v)
	if recorded(m, "multi_label", "") == "true" && !multi {
		return nil, usagef("%s is multi-label (each logit a label): read the data as label sets (a csv listing's :multilabel)", model)
	}
	if err := ev.SetMultiLabel(multi); err != nil {
		return nil, fmt.Errorf("%s: %w", model, err)
	}
	return &evaluation{lm: lm, spec: spec, v: v, ev: ev, multi: multi}, nil
}

// groupNames say what each --group-by value groups.
var groupNames = map[string]string{"dir": "each image's directory", "user": "the data's users", "file": "each image file", "study": "each DICOM image's study", "series": "each DICOM image's series"}

// groupingValues are the values --group-by and --bootstrap-by take.
const groupingValues = "user, dir, file, study or series"

// isGrouping reports whether by is one of groupingValues.
func isGrouping(by string) bool { _, ok := groupNames[by]; return ok }

// groupingOf groups v's examples (read from spec) by by (given as flag):
// "user", the data's users, "dir", each image's directory, "file", each
// image file (a multi-frame file's frames, a series' slices), "study",
// each DICOM image's Study Instance UID, or "series", its Series Instance
// UID. It returns the grouping and what the groups are, in
// words.
func groupingOf(v interface{ Len() int }, spec, by, flag string) (dptrain.Grouping, string, error) {
	var gr dptrain.Grouping
	var what string
	switch by {
	case "user":
		users, n := data.UsersOf(v)
		if n == 0 {
			return gr, "", usagef("%s user: %s names no users (a listing's user column, its user=COL, or users=REGEX over the image paths: users=/(patient\\d+/study\\d+)/ groups CheXpert's studies)", flag, spec)
		}
		u := v.(data.Users)
		gr.Of, gr.Names = users, make([]string, n)
		for i := range gr.Names {
			gr.Names[i] = u.UserName(i)
		}
		what = groupNames[by]
	case "dir":
		var ok bool
		if gr.Of, gr.Names, ok = data.DirGroups(v); !ok {
			return gr, "", usagef("%s dir: the examples of %s are not image files of their own (a folder's and a CSV listing's are); %s user groups by the data's users", flag, spec, flag)
		}
		what = groupNames[by]
	case "study", "series":
		var ok bool
		var err error
		groups := data.StudyGroups
		if by == "series" {
			groups = data.SeriesGroups
		}
		if gr.Of, gr.Names, ok, err = groups(v); !ok {
			return gr, "", usagef("%s %s: the examples of %s are not image files of their own (a folder's and a CSV listing's DICOM files are)", flag, by, spec)
		}
		if err != nil {
			return gr, "", fmt.Errorf("%s %s: %w", flag, by, err)
		}
		what = groupNames[by]
	case "file":
		var ok bool
		if gr.Of, gr.Names, ok = data.FileGroups(v); !ok {
			return gr, "", usagef("%s file: the examples of %s are not image files of their own (a folder's and a CSV listing's are)", flag, spec)
		}
		what = groupNames[by]
	}
	if sp, ok := v.(data.SamplePaths); ok {
		gr.Example = sp.SamplePath
	}
	return gr, what, nil
}

// writeBootstrap prints an evaluation's bootstrap intervals.
func writeBootstrap(w io.Writer, b *dptrain.BootstrapResult, seed uint64) {
	fmt.Fprintf(w, "\nbootstrap: 95 %% intervals by %d resamples of the %d %s (percentiles; --seed %d):\n", b.Resamples, b.Count, b.Units, seed)
	for _, f := range []struct {
		name string
		ci   *[2]float64
		pct  bool
	}{{"accuracy", b.Accuracy, true}, {"balanced", b.BalancedAccuracy, true}, {"macro F1", b.MacroF1, true}, {"exact", b.ExactMatch, true},
		{"AUC", b.AUC, false}, {"mAP", b.MAP, false}, {"loss", b.Loss, false}} {
		switch {
		case f.ci == nil:
		case f.pct:
			fmt.Fprintf(w, "  %-9s %.2f–%.2f %%\n", f.name+":", 100*f.ci[0], 100*f.ci[1])
		default:
			fmt.Fprintf(w, "  %-9s %.4f–%.4f\n", f.name+":", f.ci[0], f.ci[1])
		}
	}
}

// writeOperatingPoints prints the operating points eval chose
// (--operating-point), and the --threshold that decides at them.
func writeOperatingPoints(stdout io.Writer, res *dptrain.EvalResult) {
	name := func(j int) string {
		if j < len(res.Classes) && res.Classes[j] != strconv.Itoa(j) {
			return res.Classes[j]
		}
		return strconv.Itoa(j)
	}
	fmt.Fprintf(stdout, "\noperating points (%s, chosen on this data):\n", res.OperatingRule)
	tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  %s\t threshold\t sensitivity\t specificity\t PPV\t NPV\t\n", map[bool]string{true: "label", false: "class"}[res.MultiLabel])
	// A figure and its Wilson interval.
	pct := func(v float64, ci *[2]float64) string {
		if ci == nil {
			return fmt.Sprintf("%.1f %%", 100*v)
		}
		return fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*v, 100*ci[0], 100*ci[1])
	}
	var th []string
	for _, op := range res.OperatingPoints {
		fmt.Fprintf(tw, "  %s\t %.4f\t %s\t %s\t %s\t %s\t\n", name(op.Label), op.Threshold, pct(op.Sensitivity, op.SensitivityCI),
			pct(op.Specificity, op.SpecificityCI), pct(op.PPV, op.PPVCI), pct(op.NPV, op.NPVCI))
		t := strconv.FormatFloat(op.Threshold, 'g', -1, 64)
		if res.MultiLabel {
			t = name(op.Label) + "=" + t
		}
		th = append(th, t)
	}
	tw.Flush()
	if len(th) > 0 {
		fmt.Fprintf(stdout, "  (in brackets: 95 %% Wilson intervals, the threshold taken as given — chosen on this data, its figures here are optimistic)\n")
	}
	switch {
	case len(th) == 0:
		fmt.Fprintf(stdout, "  (none: no label has positives and negatives, or none reaches the rule)\n")
	case res.MultiLabel && len(res.OperatingPoints) < len(res.PerClass):
		fmt.Fprintf(stdout, "  decide there: --threshold %s (the labels without a point at ½)\n", strings.Join(th, ","))
	default:
		fmt.Fprintf(stdout, "  decide there: --threshold %s\n", strings.Join(th, ","))
	}
}

// writeROC writes the evaluation's ROC curves to a CSV file: a row a
// point of each label's curve (class 1's for a two-class model).
func writeROC(path string, res *dptrain.EvalResult) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		cw := csv.NewWriter(w)
		cw.Write([]string{"label", "name", "threshold", "fpr", "tpr", "tp", "fp", "tn", "fn"})
		for _, j := range res.CurveLabels() {
			name := strconv.Itoa(j)
			if j < len(res.Classes) {
				name = res.Classes[j]
			}
			for _, p := range res.Curve(j) {
				cw.Write([]string{strconv.Itoa(j), name, strconv.FormatFloat(p.Threshold, 'g', -1, 64),
					strconv.FormatFloat(p.FPR, 'g', -1, 64), strconv.FormatFloat(p.TPR, 'g', -1, 64),
					strconv.FormatInt(p.TP, 10), strconv.FormatInt(p.FP, 10), strconv.FormatInt(p.TN, 10), strconv.FormatInt(p.FN, 10)})
			}
		}
		cw.Flush()
		return cw.Error()
	})
}

// meanCI is the mean AUC's 95 % interval for its line, "" without one.
func meanCI(res *dptrain.EvalResult) string {
	if res.AUCCI == nil {
		return ""
	}
	return fmt.Sprintf("; 95 %% CI %.4f–%.4f, DeLong's with the AUCs' covariances", res.AUCCI[0], res.AUCCI[1])
}

// counted says what an evaluation's figures count: its examples, or
// its groups of them (--group-by).
func counted(res *dptrain.EvalResult) string {
	if res.Groups != nil {
		return fmt.Sprintf("%d examples in %d groups, the figures the groups'", res.Groups.Examples, res.Samples)
	}
	return fmt.Sprintf("%d examples", res.Samples)
}

// scored names what an evaluation scores: samples, or groups.
func scored(res *dptrain.EvalResult) string {
	if res.Groups != nil {
		return "groups"
	}
	return "samples"
}

// writeLabelEval prints a multi-label evaluation: the figures, then each
// label's precision, recall, F1, positives, AUC, average precision and
// calibration error.
func writeLabelEval(stdout io.Writer, model, spec string, res *dptrain.EvalResult) {
	above := "½"
	if res.Thresholds != nil {
		above = "its threshold (" + strings.Trim(fmt.Sprint(res.Thresholds), "[]") + ")"
	}
	fmt.Fprintf(stdout, "model:    %s\ndata:     %s (%s, multi-label: %d labels, each decided by its logit's sigmoid above %s)\n", model, spec, counted(res), len(res.PerClass), above)
	if res.AUC != nil {
		fmt.Fprintf(stdout, "AUC:      %.4f (mean of the labels' with positives and negatives%s)\n", *res.AUC, meanCI(res))
	}
	if res.MAP != nil {
		fmt.Fprintf(stdout, "mAP:      %.4f (mean average precision of the labels with positives)\n", *res.MAP)
	}
	fmt.Fprintf(stdout, "labels right: %.2f %% (of every sample's label decisions)\nexact:    %.2f %% (samples with every label right)\n", 100*res.Accuracy, 100*res.ExactMatch)
	if res.IgnoredLabels > 0 {
		fmt.Fprintf(stdout, "ignored:  %d of the %d labels of the %s (uncertain=ignore), in none of these figures\n", res.IgnoredLabels, int64(res.Samples)*int64(len(res.PerClass)), scored(res))
	}
	fmt.Fprintf(stdout, "balanced: %.2f %% (each label's balanced accuracy, mean)\nmacro F1: %.2f %%\nloss:     %.4f\n", 100*res.BalancedAccuracy, 100*res.MacroF1, res.Loss)
	if res.LabelECE != nil {
		fmt.Fprintf(stdout, "ECE:      %.2f %% (each label's calibration error, mean: its share of positives against its probability, 15 bins)\n", 100**res.LabelECE)
	}
	fmt.Fprintf(stdout, "\nper label:\n")
	tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  label\t precision\t recall\t F1\t positives\t AUC\t 95 %% CI\t AP\t ECE\t\n")
	for i, c := range res.PerClass {
		label := strconv.Itoa(i)
		if i < len(res.Classes) && res.Classes[i] != label {
			label += " " + res.Classes[i]
		}
		auc, ci, ap, ece := "–", "–", "–", "–"
		if c.AUC != nil {
			auc = fmt.Sprintf("%.4f", *c.AUC)
		}
		if c.AUCCI != nil {
			ci = fmt.Sprintf("%.4f–%.4f", c.AUCCI[0], c.AUCCI[1])
		}
		if c.AP != nil {
			ap = fmt.Sprintf("%.4f", *c.AP)
		}
		if c.ECE != nil {
			ece = fmt.Sprintf("%.2f %%", 100**c.ECE)
		}
		fmt.Fprintf(tw, "  %s\t %.1f %%\t %.1f %%\t %.1f %%\t %d\t %s\t %s\t %s\t %s\t\n", label, 100*c.Precision, 100*c.Recall, 100*c.F1, c.Support, auc, ci, ap, ece)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "  (95 %% CI: each AUC's interval by DeLong's method, the test examples taken as independent draws)\n")
}

// writeEval prints an evaluation: the figures, the confusion matrix and
// each class's precision, recall and F1.
func writeEval(stdout io.Writer, model, spec string, res *dptrain.EvalResult) {
	fmt.Fprintf(stdout, "model:    %s\ndata:     %s (%s)\n", model, spec, counted(res))
	if len(res.Thresholds) == 1 {
		fmt.Fprintf(stdout, "decided:  class 1 where its probability exceeds %g (--threshold; the AUC, loss and ECE do not depend on it)\n", res.Thresholds[0])
	}
	fmt.Fprintf(stdout, "accuracy: %.2f %% (95 %% interval %.2f–%.2f %%: the test set's size)\n", 100*res.Accuracy, 100*res.AccuracyCI[0], 100*res.AccuracyCI[1])
	fmt.Fprintf(stdout, "balanced: %.2f %% (mean recall of the classes)\nmacro F1: %.2f %%\n", 100*res.BalancedAccuracy, 100*res.MacroF1)
	if res.Top5 != nil {
		fmt.Fprintf(stdout, "top-5:    %.2f %%\n", 100**res.Top5)
	}
	name := func(i int) string {
		label := strconv.Itoa(i)
		if i < len(res.Classes) && res.Classes[i] != label {
			label += " " + res.Classes[i]
		}
		return label
	}
	k := len(res.Confusion)
	switch {
	case res.AUC != nil && k == 2:
		ci := ""
		if res.AUCCI != nil {
			ci = fmt.Sprintf("; 95 %% CI %.4f–%.4f, DeLong's", res.AUCCI[0], res.AUCCI[1])
		}
		fmt.Fprintf(stdout, "AUC:      %.4f (ROC of class %s's probability%s)\n", *res.AUC, name(1), ci)
	case res.AUC != nil:
		fmt.Fprintf(stdout, "AUC:      %.4f (ROC of each class against the rest, mean%s)\n", *res.AUC, meanCI(res))
	}
	if k == 2 && len(res.PerClass) == 2 {
		fmt.Fprintf(stdout, "sensitivity: %.2f %% (class %s's recall), specificity: %.2f %% (class %s's)\n", 100*res.PerClass[1].Recall, name(1), 100*res.PerClass[0].Recall, name(0))
	}
	if res.ECE != nil {
		fmt.Fprintf(stdout, "ECE:      %.2f %% (expected calibration error: accuracy against confidence, 15 bins)\n", 100**res.ECE)
	}
	fmt.Fprintf(stdout, "loss:     %.4f\n", res.Loss)
	fmt.Fprintf(stdout, "\nconfusion matrix (rows: true class, columns: predicted; the class's accuracy at the end):\n")
	tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
	for i, row := range res.Confusion {
		label := name(i)
		fmt.Fprintf(tw, "  %s:\t", label)
		var total int64
		for _, c := range row {
			fmt.Fprintf(tw, " %d\t", c)
			total += c
		}
		if total > 0 {
			fmt.Fprintf(tw, "  %.1f %%\t", 100*float64(row[i])/float64(total))
		} else {
			fmt.Fprint(tw, "  –\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nper class:\n")
	tw = tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
	// Each class's AUC against the rest (more than two classes), with its
	// DeLong interval, where the evaluation has them.
	aucs := slices.ContainsFunc(res.PerClass, func(m dptrain.ClassMetrics) bool { return m.AUC != nil })
	head := "  class\t precision\t recall\t F1\t support\t"
	if aucs {
		head += " AUC\t 95 % CI\t"
	}
	fmt.Fprintln(tw, head)
	for i, m := range res.PerClass {
		fmt.Fprintf(tw, "  %s\t %.1f %%\t %.1f %%\t %.1f %%\t %d\t", name(i), 100*m.Precision, 100*m.Recall, 100*m.F1, m.Support)
		if aucs {
			auc, ci := "–", "–"
			if m.AUC != nil {
				auc = fmt.Sprintf("%.4f", *m.AUC)
			}
			if m.AUCCI != nil {
				ci = fmt.Sprintf("%.4f–%.4f", m.AUCCI[0], m.AUCCI[1])
			}
			fmt.Fprintf(tw, " %s\t %s\t", auc, ci)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if aucs {
		fmt.Fprintf(stdout, "  (AUC: the class's probability against the rest's; 95 %% CI: its interval by DeLong's method)\n")
	}
}
