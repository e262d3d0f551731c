package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// pathList is a flag that may be given several times.
type pathList []string

func (p *pathList) String() string { return strings.Join(*p, ",") }

func (p *pathList) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty path")
	}
	*p = append(*p, v)
	return nil
}

// predictFlags are predict's settings for --images.
type predictFlags struct {
	out                   string
	batch, top            int
	norm, resize, inShape string
	dcm                   dicomRead // --window and --frame: how DICOM images are read
	json                  bool
	// csv is --csv: a file of a row an image, its prediction and every
	// class's probability, written instead of the table.
	csv string
	// threshold is --threshold: a multi-label model's decision
	// thresholds, or a two-class model's class 1's
	// (dptrain.ParseDecisionThreshold; "" decides at ½, or by the more
	// probable class).
	threshold string
	// groupBy is --group-by: "dir" predicts for each directory of
	// images as one, combine (--combine) saying how its images'
	// probabilities combine; "" for each image.
	groupBy, combine string
}

// classScore is one of an image's most probable classes.
type classScore struct {
	Class       string  `json:"class"`
	Label       int     `json:"label"`
	Probability float64 `json:"probability"`
}

// imagePrediction is one image's line of predict --images.
type imagePrediction struct {
	File string       `json:"file"`
	Top  []classScore `json:"top"`
	// Labels are a multi-label model's decided labels (each logit's
	// sigmoid above ½, or above its --threshold), every one of them, by
	// probability; nil for a classifier.
	Labels []string `json:"labels,omitempty"`
	// Decided is a two-class model's class at --threshold: class 1 where
	// its probability exceeds the threshold, else class 0 ("" without).
	Decided string `json:"decided,omitempty"`
	// Images counts a group's images (predict --group-by: File is
	// their directory); 0 for an image's prediction.
	Images int `json:"images,omitempty"`
}

// predictImages classifies image files: the preprocessing (input shape,
// normalisation, resize) is what train recorded in the model unless the
// flags say otherwise, the class names too.
func predictImages(m *onnx.Model, g *graph.Graph, dev runtime.Device, model string, paths []string, f predictFlags, stdout io.Writer) error {
	if f.csv == "" {
		return predictImagesTo(m, g, dev, model, paths, f, stdout, nil)
	}
	n := 0
	err := atomicfile.Write(f.csv, func(w io.Writer) error {
		cw := csv.NewWriter(w)
		if err := predictImagesTo(m, g, dev, model, paths, f, stdout, func(row []string) error {
			n++
			return cw.Write(row)
		}); err != nil {
			return err
		}
		cw.Flush()
		return cw.Error()
	})
	if err == nil {
		fmt.Fprintf(stdout, "%s: %d predictions written to %s\n", model, n-1, f.csv)
	}
	return err
}

// predictImagesTo is predictImages, the rows of its CSV (a header, then a
// row an image) given to row where it is set, instead of the table.
func predictImagesTo(m *onnx.Model, g *graph.Graph, dev runtime.Device, model string, paths []string, f predictFlags, stdout io.Writer, row func([]string) error) error {
	sample, err := modelSample(g, f.inShape)
	if err != nil {
		return err
	}
	recordedPreprocess(m, &f.norm, &f.resize, &f.dcm)
	f.norm = normFor(g, f.norm)
	if f.groupBy == "" && f.dcm.frame == "all" {
		// Every frame a sample: a file's rows combined into its one (--out
		// still writes each frame's scores).
		f.groupBy = "file"
	}
	if f.dcm.series && (f.groupBy == "study" || f.groupBy == "series") {
		return usagef("--group-by %s reads each image file's UID, and with --series (given or recorded in %s) each example is a series' directory: --group-by dir groups the series in one directory's sub-directories, file a series' slices (--frame all)", f.groupBy, model)
	}
	files, err := data.ImageFiles(paths)
	if f.dcm.series {
		files, err = data.SeriesDirs(paths) // a series a unit
	}
	if err != nil {
		return err
	}
	// A part of the files at a time: a directory of a million photos
	// holds a part's windows in memory, not all of them.
	var (
		logits   []float32
		groups   map[string][]float32 // --group-by: each directory's images' scores as logits
		k        int
		preds    []imagePrediction
		names    []string
		cut      []float64 // the decisions' thresholds as logits (nil: 0)
		binaryT  float64   // a two-class model's threshold of class 1 (0: none)
		prob2    [2]float64
		kind     = outputKind(m, g)
		plans    = map[int]*runtime.Plan{}
		tw       = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		partSize = max(predictPart, f.batch)
	)
	// emit writes the prediction of file's scores (of the given kind) —
	// with --group-by a directory's combined scores, of images images.
	emit := func(file string, scores []float32, kind, images int) error {
		p := topClasses(file, scores, kind, names, f.top, cut)
		p.Images = images
		if binaryT > 0 {
			// The operating point: class 1 where its probability
			// exceeds the threshold, as eval --threshold decides.
			toProbabilities(scores, kind, prob2[:])
			p.Decided = names[0]
			if prob2[1] > binaryT {
				p.Decided = names[1]
			}
		}
		if row != nil {
			r := csvPrediction(p, scores, kind)
			if f.groupBy != "" {
				r = slices.Insert(r, 1, strconv.Itoa(images))
			}
			return row(r)
		}
		if f.json {
			preds = append(preds, p)
			return nil
		}
		fmt.Fprint(tw, p.File)
		if images > 0 {
			what := "images"
			if f.groupBy == "file" {
				what = "frames"
			}
			if images == 1 {
				what = what[:len(what)-1]
			}
			fmt.Fprintf(tw, "\t(%d %s)", images, what)
		}
		for _, c := range p.Top {
			fmt.Fprintf(tw, "\t%s\t%5.1f %%", c.Class, 100*c.Probability)
		}
		if p.Decided != "" {
			fmt.Fprintf(tw, "\tdecided: %s", p.Decided)
		}
		if kind == outSigmoids {
			fmt.Fprintf(tw, "\tlabels: %s", strings.Join(p.Labels, ", "))
			if len(p.Labels) == 0 {
				fmt.Fprint(tw, "none")
			}
		}
		fmt.Fprintln(tw)
		return nil
	}
	for lo := 0; lo < len(files); lo += partSize {
		var part []string // each sample's file: a file's frames, with --frame all
		v, err := openViewOf(func(fit data.Fit) (*data.Images, error) {
			imgs, got, err := data.LoadFiles(files[lo:min(lo+partSize, len(files))], fit)
			part = got
			return imgs, err
		}, sample, f.norm, "none", f.resize, f.dcm)
		if err != nil {
			return err
		}
		noteLeftOut(v)
		if cv, ok := v.(*data.ClipView); ok {
			// A clip a file: its name once.
			t := cv.SampleShape()[1]
			for i := range cv.Len() {
				part[i] = part[i*t]
			}
			part = part[:cv.Len()]
		}
		idx := make([]int, v.Len())
		for i := range idx {
			idx[i] = i
		}
		l, outShape, err := forwardAll(g, dev, model, len(idx), sample, f.batch, plans, func(lo, hi int, buf []float32) error {
			return v.Fill(buf, nil, idx[lo:hi], nil)
		})
		if err != nil {
			return err
		}
		if len(outShape) != 2 {
			return fmt.Errorf("%s: output %q has shape %s: predict --images needs (batch, classes) scores", model, g.Outputs[0].Name, intsString(outShape))
		}
		if names == nil {
			k = outShape[1]
			names = classNames(m, k)
			if row != nil {
				head := []string{"file", "prediction"}
				if f.groupBy != "" {
					head = []string{"group", "images", "prediction"}
				}
				if err := row(append(head, names...)); err != nil {
					return err
				}
			}
			if f.threshold != "" {
				t, err := dptrain.ParseDecisionThreshold(f.threshold, kind == outSigmoids, names, k)
				if err != nil {
					return usageError{fmt.Sprintf("%s: %v", model, err)}
				}
				if kind == outSigmoids {
					cut = dptrain.ThresholdCuts(t)
				} else {
					binaryT = t[0]
				}
			}
		}
		if f.out != "" {
			logits = append(logits, l...)
		}
		if f.groupBy != "" {
			// Kept until every image is classified: a directory's
			// images need not be listed together.
			if groups == nil {
				groups = map[string][]float32{}
			}
			for i, file := range part {
				d := file
				switch f.groupBy {
				case "dir":
					d = filepath.Dir(file)
				case "study":
					if d, err = data.FileStudy(file); err != nil {
						return fmt.Errorf("--group-by study: %w", err)
					}
				case "series":
					if d, err = data.FileSeries(file); err != nil {
						return fmt.Errorf("--group-by series: %w", err)
					}
				}
				groups[d] = appendAsLogits(groups[d], l[i*k:(i+1)*k], kind)
			}
			continue
		}
		for i, file := range part {
			if err := emit(file, l[i*k:(i+1)*k], kind, 0); err != nil {
				return err
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if f.groupBy != "" {
		gkind := outLogits
		if kind == outSigmoids {
			gkind = outSigmoids
		}
		for _, d := range slices.Sorted(maps.Keys(groups)) {
			rows := groups[d]
			z := dptrain.CombineLogits(rows, k, kind == outSigmoids, f.combine == dptrain.CombineMax)
			if err := emit(d, z, gkind, len(rows)/k); err != nil {
				return err
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if f.out != "" {
		if err := npy.WriteFile(f.out, npy.NewFloat32(logits, len(logits)/max(k, 1), k)); err != nil {
			return err
		}
	}
	if !f.json {
		return nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Model       string            `json:"model"`
		Predictions []imagePrediction `json:"predictions"`
	}{model, preds})
}

// csvPrediction is an image's row of predict's CSV: the file, what is
// predicted — the most probable class, a two-class model's class at
// --threshold, a multi-label model's labels decided, separated by '|' —
// and each class's (label's) probability.
func csvPrediction(p imagePrediction, scores []float32, kind int) []string {
	pred := p.Top[0].Class
	switch {
	case p.Decided != "":
		pred = p.Decided
	case kind == outSigmoids:
		pred = strings.Join(p.Labels, "|")
	}
	probs := make([]float64, len(scores))
	toProbabilities(scores, kind, probs)
	out := make([]string, 0, 2+len(probs))
	out = append(out, p.File, pred)
	for _, q := range probs {
		out = append(out, strconv.FormatFloat(q, 'g', 7, 64))
	}
	return out
}

// appendAsLogits appends an image's scores of the given kind to rows as
// logits whose softmax (sigmoids, a multi-label model's) are its
// probabilities: a classifier's probabilities as their logarithms.
func appendAsLogits(rows, scores []float32, kind int) []float32 {
	if kind != outProbabilities {
		return append(rows, scores...)
	}
	for _, p := range scores {
		// The smallest float32 above 0 for a probability of 0: finite.
		rows = append(rows, float32(math.Log(math.Max(float64(p), math.SmallestNonzeroFloat32))))
	}
	return rows
}

// predictPart is how many files predict --images loads at a time (at
// least a batch): 1024 windows of 224×224 RGB are 150 MB. Tests lower it.
var predictPart = 1024

// topClasses returns file's most probable top classes from its scores;
// a multi-label model's labels are those whose logits exceed their cut
// (the thresholds as logits; nil: 0, the sigmoid above ½).
func topClasses(file string, scores []float32, kind int, names []string, top int, cut []float64) imagePrediction {
	probs := make([]float64, len(scores))
	toProbabilities(scores, kind, probs)
	order := make([]int, len(scores))
	for j := range order {
		order[j] = j
	}
	sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
	p := imagePrediction{File: file}
	for _, j := range order[:min(top, len(order))] {
		p.Top = append(p.Top, classScore{Class: names[j], Label: j, Probability: probs[j]})
	}
	if kind == outSigmoids {
		p.Labels = []string{}
		set := make([]uint64, labelset.Words(len(scores)))
		dptrain.Decide(scores, cut, set) // as eval decides
		for _, j := range order {
			if labelset.Has(set, j) {
				p.Labels = append(p.Labels, names[j])
			}
		}
	}
	return p
}

// classNames returns k class names: those train recorded in the model for
// its labels, the label's number past them or without any.
func classNames(m *onnx.Model, k int) []string {
	var rec []string
	if s := recorded(m, "classes", ""); s != "" {
		_ = json.Unmarshal([]byte(s), &rec) // a malformed record names nothing
	}
	names := make([]string, k)
	for j := range names {
		names[j] = strconv.Itoa(j)
		if j < len(rec) && rec[j] != "" {
			names[j] = rec[j]
		}
	}
	return names
}

// Scores a model's output may hold.
const (
	outLogits = iota
	outProbabilities
	outLogProbabilities
	// outSigmoids: a multi-label model's logits, a label each, whose
	// probabilities are their sigmoids.
	outSigmoids
)

// outputKind says whether the model's first output is a multi-label
// model's logits (train recorded it), a Softmax's or a LogSoftmax's (a
// classifier exported with its activation), else logits.
func outputKind(m *onnx.Model, g *graph.Graph) int {
	if recorded(m, "multi_label", "") == "true" {
		return outSigmoids
	}
	if p := g.Outputs[0].Producer; p != nil {
		switch p.OpType {
		case "Softmax":
			return outProbabilities
		case "LogSoftmax":
			return outLogProbabilities
		}
	}
	return outLogits
}

// toProbabilities writes the class probabilities of one sample's scores.
func toProbabilities(scores []float32, kind int, probs []float64) {
	switch kind {
	case outProbabilities:
		for j, s := range scores {
			probs[j] = float64(s)
		}
		return
	case outLogProbabilities:
		for j, s := range scores {
			probs[j] = math.Exp(float64(s))
		}
		return
	case outSigmoids:
		for j, s := range scores {
			probs[j] = 1 / (1 + math.Exp(-float64(s)))
		}
		return
	}
	hi := math.Inf(-1)
	for _, s := range scores {
		hi = math.Max(hi, float64(s))
	}
	total := 0.0
	for j, s := range scores {
		probs[j] = math.Exp(float64(s) - hi)
		total += probs[j]
	}
	for j := range probs {
		probs[j] /= total
	}
}
