package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "predict",
		summary: "run batch inference: a .npy tensor (N,C,H,W) to a .npy of outputs, or image files to their most probable classes",
		run:     runPredict,
	})
}

// intsString formats dims as (8,3,32,32).
func intsString(d []int) string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = fmt.Sprint(v)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

func runPredict(args []string, stdout io.Writer) error {
	fs := newFlagSet("predict", "--model M.onnx (--input x.npy --out y.npy | --images PATH... [--top K] [--json | --csv FILE] [--out y.npy]) [--batch N]")
	model := fs.String("model", "", "ONNX model file (required)")
	input := fs.String("input", "", ".npy float32 input of shape (N, ...) matching the model input")
	var images pathList
	fs.Var(&images, "images", "an image file, or a directory of them read recursively (PNG, JPEG, BMP, TIFF, WebP, Netpbm, DICOM), classified after the preprocessing train recorded in the model; repeat the flag for more")
	out := fs.String("out", "", ".npy file for the model's first output, (N, ...) (required with --input)")
	batch := fs.Int("batch", 32, "samples per forward pass; the last chunk may be smaller")
	top := fs.Int("top", 1, "--images: how many of each image's most probable classes to print")
	norm := fs.String("norm", "", "--images: input normalisation (default: the one recorded in the model by train, else ImageNet's)")
	resize := fs.String("resize", "", "--images: "+resizeUsage+" (default: the one recorded in the model by train, else stretch)")
	window := fs.String("window", "", "--images: "+windowUsage+" (default: the one recorded in the model by train, else file)")
	frame := fs.String("frame", "", "--images: "+frameUsage+" (default: the one recorded in the model by train)")
	series := fs.Bool("series", false, "--images: "+seriesUsage+" (default: as the model was trained)")
	inShape := fs.String("input-shape", "", "--images: per-sample input shape C,H,W (default: the model's)")
	asJSON := fs.Bool("json", false, "--images: print JSON")
	csvOut := fs.String("csv", "", "--images: write a CSV file of a row an image instead of the table — the file, the prediction (the class; a multi-label model's labels decided, separated by |) and every class's probability — as the images are classified (a directory of a million photos streams to it)")
	threshold := fs.String("threshold", "", "--images: a multi-label model's labels decided where their sigmoids exceed this (one number, one a label, or NAME=T pairs, the others ½; default ½); a two-class model's class 1 where its probability exceeds it (default: the more probable class)")
	groupBy := fs.String("group-by", "", "--images: dir predicts for each directory of images as one (a study's views), its images' probabilities combined (--combine), a row a directory in sorted order, written once every image is classified; file, for each multi-frame DICOM file read with --frame all, its frames' (the default with --frame all); study, for each DICOM study (Study Instance UID), its images' (a mammogram's four views); series, for each DICOM series (Series Instance UID), its slices'")
	combine := fs.String("combine", dptrain.CombineMean, "with --group-by, how a directory's probabilities combine its images': mean, or max (each class's or label's largest: a finding seen in any view)")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	switch {
	case *model == "":
		return usagef("--model is required")
	case *input == "" && len(images) == 0:
		return usagef("--input x.npy or --images PATH is required")
	case *input != "" && len(images) > 0:
		return usagef("--input and --images exclude each other")
	case *input != "" && *out == "":
		return usagef("--out is required with --input")
	case *batch <= 0:
		return usagef("--batch must be positive, got %d", *batch)
	case *top <= 0:
		return usagef("--top must be positive, got %d", *top)
	case *csvOut != "" && len(images) == 0:
		return usagef("--csv writes the predictions of --images")
	case *csvOut != "" && *asJSON:
		return usagef("--csv and --json exclude each other")
	case *groupBy != "" && *groupBy != "dir" && *groupBy != "file" && *groupBy != "study" && *groupBy != "series":
		return usagef("--group-by %q: predict groups by dir (each directory's images), file (each file's frames, --frame all), study (each DICOM study's images) or series (each DICOM series' slices)", *groupBy)
	case *groupBy != "" && len(images) == 0:
		return usagef("--group-by groups the predictions of --images")
	case *groupBy != "" && *out != "":
		return usagef("--out writes each image's scores; with --group-by, --csv or --json give each directory's")
	case *combine != dptrain.CombineMean && *combine != dptrain.CombineMax:
		return usagef("--combine %q: want %s or %s", *combine, dptrain.CombineMean, dptrain.CombineMax)
	case *groupBy == "" && *frame != "all" && flagGiven(fs, "combine"):
		return usagef("--combine says how a group's images combine: it needs --group-by dir")
	}
	lm, err := loadGraph(*model)
	if err != nil {
		return err
	}
	m, g := lm.m, lm.g
	if len(g.Inputs) != 1 {
		return fmt.Errorf("%s: predict needs a model with one input, this one has %d", *model, len(g.Inputs))
	}
	if len(images) > 0 {
		return predictImages(m, g, dev, *model, images, predictFlags{out: *out, batch: *batch, top: *top, norm: *norm, resize: *resize, dcm: dicomRead{*window, *frame, *series}, inShape: *inShape, json: *asJSON, csv: *csvOut, threshold: *threshold, groupBy: *groupBy, combine: *combine}, stdout)
	}
	x, err := npy.ReadFile(*input)
	if err != nil {
		return err
	}
	lm.pixelsAsFloat(x)
	if x.DType != npy.Float32 {
		want := "float32"
		if takesPixels(lm.g) {
			want = "uint8 or float32"
		}
		return fmt.Errorf("%s: input is %s, want %s", *input, x.DType, want)
	}
	if err := checkInputShape(g.Inputs[0], x.Shape); err != nil {
		return fmt.Errorf("%s: %w", *input, err)
	}
	n := x.Shape[0]
	if n == 0 {
		return fmt.Errorf("%s: input has no samples (shape %s)", *input, intsString(x.Shape))
	}
	sample := make([]int64, len(x.Shape)-1)
	for i, d := range x.Shape[1:] {
		sample[i] = int64(d)
	}
	per := x.Len() / n
	result, outShape, err := forwardAll(g, dev, *model, n, sample, *batch, nil, func(lo, hi int, buf []float32) error {
		copy(buf, x.F32[lo*per:hi*per])
		return nil
	})
	if err != nil {
		return err
	}
	if err := npy.WriteFile(*out, npy.NewFloat32(result, outShape...)); err != nil {
		return err
	}
	for _, note := range lm.notes("") {
		fmt.Fprintf(stdout, "model %s: %s\n", *model, note)
	}
	fmt.Fprintf(stdout, "wrote %s: %q %s from %d samples (batch %d)\n", *out, g.Outputs[0].Name, intsString(outShape), n, *batch)
	return nil
}

// forwardAll runs the model's forward pass over n samples of the given
// shape, batch at a time (fill writes samples lo…hi-1 into the batch's
// input), and returns the first output of all of them with its shape. A
// model that fixes its batch size runs chunks of exactly that, the last
// one padded with zeros whose outputs are dropped. plans, if not nil,
// keeps the compiled plans by batch size from one call to the next.
func forwardAll(g *graph.Graph, dev runtime.Device, model string, n int, sample []int64, batch int, plans map[int]*runtime.Plan, fill func(lo, hi int, buf []float32) error) ([]float32, []int, error) {
	per := 1
	for _, d := range sample {
		per *= int(d)
	}
	chunk := min(batch, n)
	fixed := false
	if d := g.Inputs[0].Shape; len(d) > 0 && d[0].Size > 0 {
		chunk, fixed = int(d[0].Size), true
	}
	if plans == nil {
		plans = map[int]*runtime.Plan{}
	}
	// The batch buffer is allocated once the first plan is compiled: the
	// compile holds a model's fixed batch to the memory limits (a file may
	// fix it at 2⁴⁰), the buffer then fits.
	var buf, result, y []float32
	var outShape []int
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		size := hi - lo
		if fixed {
			size = chunk
		}
		p := plans[size]
		if p == nil {
			var err error
			if p, err = runtime.CompileForBatch(g, size, sample, &runtime.Options{Device: dev, ForwardOnly: true}); err != nil {
				return nil, nil, fmt.Errorf("%s: batch of %d: %w", model, size, err)
			}
			plans[size] = p
		}
		if buf == nil {
			buf = make([]float32, chunk*per)
		}
		clear(buf[(hi-lo)*per:]) // a fixed batch's padding
		if err := fill(lo, hi, buf[:(hi-lo)*per]); err != nil {
			return nil, nil, err
		}
		if err := p.SetInput(0, buf[:size*per]); err != nil {
			return nil, nil, err
		}
		if err := p.Forward(); err != nil {
			return nil, nil, err
		}
		// Output aliases plan memory, which is the device's on a GPU: the
		// logits are copied out to the host.
		_, ys := p.Output(0)
		if len(ys) == 0 || ys[0] != size {
			return nil, nil, fmt.Errorf("%s: output %q has shape %s for a batch of %d; predict needs a leading batch axis", model, g.Outputs[0].Name, intsString(ys), size)
		}
		outPer := 1
		for _, d := range ys[1:] {
			outPer *= d
		}
		if result == nil {
			outShape = append([]int{n}, ys[1:]...)
			result = make([]float32, 0, n*outPer)
		} else if !sameTail(outShape, ys) {
			return nil, nil, fmt.Errorf("%s: output shape %s of a batch of %d does not match %s", model, intsString(ys), size, intsString(outShape))
		}
		if len(y) != size*outPer {
			y = make([]float32, size*outPer)
		}
		if err := p.ReadOutput(0, y); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", model, err)
		}
		result = append(result, y[:(hi-lo)*outPer]...)
	}
	return result, outShape, nil
}

func sameTail(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 1; i < len(a); i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkInputShape compares the .npy shape with the model input's declared
// shape (the leading axis is the batch and may be anything).
func checkInputShape(in *graph.Value, got []int) error {
	if in.Shape == nil {
		if len(got) < 1 {
			return fmt.Errorf("input is a scalar; model input %q needs a batch axis", in.Name)
		}
		return nil
	}
	bad := len(got) != len(in.Shape)
	if !bad {
		for i := 1; i < len(got); i++ {
			if d := in.Shape[i].Size; d >= 0 && int64(got[i]) != d {
				bad = true
			}
		}
	}
	if bad {
		return fmt.Errorf("shape mismatch: model input %q expects %s, got %s", in.Name, in.Shape.String(), intsString(got))
	}
	return nil
}
