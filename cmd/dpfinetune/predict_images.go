package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/graph"
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
	json                  bool
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
}

// predictImages classifies image files: the preprocessing (input shape,
// normalisation, resize) is what train recorded in the model unless the
// flags say otherwise, the class names too.
func predictImages(m *onnx.Model, g *graph.Graph, dev runtime.Device, model string, paths []string, f predictFlags, stdout io.Writer) error {
	sample, err := modelSample(g, f.inShape)
	if err != nil {
		return err
	}
	recordedPreprocess(m, &f.norm, &f.resize)
	var files []string
	v, err := openViewOf(func(fit data.Fit) (*data.Images, error) {
		imgs, fl, err := data.LoadFiles(paths, fit)
		files = fl
		return imgs, err
	}, sample, f.norm, "none", f.resize)
	if err != nil {
		return err
	}
	n := v.Len()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	logits, outShape, err := forwardAll(g, dev, model, n, sample, f.batch, func(lo, hi int, buf []float32) error {
		return v.Fill(buf, nil, idx[lo:hi], nil)
	})
	if err != nil {
		return err
	}
	if len(outShape) != 2 {
		return fmt.Errorf("%s: output %q has shape %s: predict --images needs (batch, classes) scores", model, g.Outputs[0].Name, intsString(outShape))
	}
	if f.out != "" {
		if err := npy.WriteFile(f.out, npy.NewFloat32(logits, outShape...)); err != nil {
			return err
		}
	}
	k := outShape[1]
	names := classNames(m, k)
	kind := outputKind(g)
	preds := make([]imagePrediction, n)
	probs := make([]float64, k)
	order := make([]int, k)
	for i := range preds {
		toProbabilities(logits[i*k:(i+1)*k], kind, probs)
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
		p := imagePrediction{File: files[i]}
		for _, j := range order[:min(f.top, k)] {
			p.Top = append(p.Top, classScore{Class: names[j], Label: j, Probability: probs[j]})
		}
		preds[i] = p
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Model       string            `json:"model"`
			Predictions []imagePrediction `json:"predictions"`
		}{model, preds})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, p := range preds {
		fmt.Fprint(tw, p.File)
		for _, c := range p.Top {
			fmt.Fprintf(tw, "\t%s\t%5.1f %%", c.Class, 100*c.Probability)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
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
)

// outputKind says whether the model's first output is a Softmax's or a
// LogSoftmax's (a classifier exported with its activation), else logits.
func outputKind(g *graph.Graph) int {
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
