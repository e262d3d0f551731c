package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/runtime"
)

func init() {
	register(&command{
		name:    "predict",
		summary: "run batch inference: a .npy input tensor (N,C,H,W) to a .npy of model outputs",
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
	fs := newFlagSet("predict", "--model M.onnx --input x.npy --out y.npy [--batch N]")
	model := fs.String("model", "", "ONNX model file (required)")
	input := fs.String("input", "", ".npy float32 input of shape (N, ...) matching the model input (required)")
	out := fs.String("out", "", ".npy file for the model's first output, (N, ...) (required)")
	batch := fs.Int("batch", 32, "samples per forward pass; the last chunk may be smaller")
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
	case *input == "":
		return usagef("--input is required")
	case *out == "":
		return usagef("--out is required")
	case *batch <= 0:
		return usagef("--batch must be positive, got %d", *batch)
	}
	_, g, err := loadGraph(*model)
	if err != nil {
		return err
	}
	if len(g.Inputs) != 1 {
		return fmt.Errorf("%s: predict needs a model with one input, this one has %d", *model, len(g.Inputs))
	}
	x, err := npy.ReadFile(*input)
	if err != nil {
		return err
	}
	if x.DType != npy.Float32 {
		return fmt.Errorf("%s: input is %s, want float32", *input, x.DType)
	}
	in := g.Inputs[0]
	if err := checkInputShape(in, x.Shape); err != nil {
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
	chunk := *batch
	if d := in.Shape; len(d) > 0 && d[0].Size > 0 {
		// The model fixes its batch size: run chunks of exactly that.
		chunk = int(d[0].Size)
		if n%chunk != 0 {
			return fmt.Errorf("%s: model input %q has a fixed batch of %d, which does not divide %d samples", *input, in.Name, chunk, n)
		}
	}
	plans := map[int]*runtime.Plan{}
	var result []float32
	var outShape []int
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		size := hi - lo
		p := plans[size]
		if p == nil {
			if p, err = runtime.CompileForBatch(g, size, sample, &runtime.Options{Device: dev, ForwardOnly: true}); err != nil {
				return fmt.Errorf("%s: batch of %d: %w", *model, size, err)
			}
			plans[size] = p
		}
		if err := p.SetInput(0, x.F32[lo*per:hi*per]); err != nil {
			return err
		}
		if err := p.Forward(); err != nil {
			return err
		}
		y, ys := p.Output(0)
		if len(ys) == 0 || ys[0] != size {
			return fmt.Errorf("%s: output %q has shape %s for a batch of %d; predict needs a leading batch axis", *model, g.Outputs[0].Name, intsString(ys), size)
		}
		if result == nil {
			outShape = append([]int{n}, ys[1:]...)
			result = make([]float32, 0, n*len(y)/size)
		} else if !sameTail(outShape, ys) {
			return fmt.Errorf("%s: output shape %s of a batch of %d does not match %s", *model, intsString(ys), size, intsString(outShape))
		}
		result = append(result, y...)
	}
	if err := npy.WriteFile(*out, npy.NewFloat32(result, outShape...)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %q %s from %d samples (batch %d)\n", *out, g.Outputs[0].Name, intsString(outShape), n, *batch)
	return nil
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
