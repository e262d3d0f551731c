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
		name:    "calibrate",
		summary: "fit a temperature (or each label's map) to a model's logits on validation data and write the calibrated model",
		run:     runCalibrate,
	})
}

// calibrateResult is the JSON form of "dpfinetune calibrate".
type calibrateResult struct {
	Model string `json:"model"`
	Data  string `json:"data"`
	Out   string `json:"out"`
	dptrain.Calibration
}

func runCalibrate(args []string, stdout io.Writer) error {
	fs := newFlagSet("calibrate", "--model M.onnx --data SPEC --out C.onnx [--per-label] [--batch N] [--norm ...] [--resize ...] [--window ...] [--frame ...] [--input-shape C,H,W] [--json]")
	model := fs.String("model", "", "ONNX model file (required)")
	spec := fs.String("data", "", "validation data to fit the temperature on, as eval's --data (default split: test; calibrate on a split you do not report figures of, and on data whose statistics may be released: the temperature is one, outside the guarantee)")
	out := fs.String("out", "", "the calibrated model: the input model, its logits divided by the fitted temperature (required)")
	batch := fs.Int("batch", 256, "samples per forward pass")
	norm := fs.String("norm", "", "input normalisation (default: the one recorded in the model by train, else the dataset's)")
	resize := fs.String("resize", "", "as eval's --resize (default: the one recorded in the model by train, else stretch)")
	window := fs.String("window", "", "as eval's --window (default: the one recorded in the model by train, else file)")
	frame := fs.String("frame", "", "as eval's --frame (default: the one recorded in the model by train)")
	series := fs.Bool("series", false, "as eval's --series (default: as the model was trained)")
	inShape := fs.String("input-shape", "", "per-sample input shape C,H,W (default: the model's)")
	perLabel := fs.Bool("per-label", false, "a multi-label model: fit each label its own map of the logit, a·z + b (Platt scaling against Platt's targets, scikit-learn's sigmoid calibration), instead of one temperature: corrects a label's bias too (a --pos-weight's inflated probabilities), so its decisions at ½ move; its AUC does not")
	asJSON := fs.Bool("json", false, "print JSON")
	devFlag := addDeviceFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dev, err := devFlag.open()
	if err != nil {
		return err
	}
	if *model == "" || *spec == "" || *out == "" {
		return usagef("--model, --data and --out are required")
	}
	if *batch <= 0 {
		return usagef("--batch must be positive, got %d", *batch)
	}
	es, err := openEvaluation(dev, *model, *spec, *batch, *norm, *resize, dicomRead{*window, *frame, *series}, *inShape)
	if err != nil {
		return err
	}
	m, s, v, ev, multi := es.lm.m, es.spec, es.v, es.ev, es.multi
	if *perLabel && !multi {
		return usagef("--per-label calibrates a multi-label model's labels; %s on %s is single-label (one temperature)", *model, s)
	}
	var c *dptrain.Calibration
	if *perLabel {
		c, err = ev.FitLabelScaling(v)
	} else {
		c, err = ev.FitTemperature(v)
	}
	if err != nil {
		return fmt.Errorf("%s on %s: %w", *model, s, err)
	}
	if *perLabel {
		scale, shift := make([]float64, len(c.Labels)), make([]float64, len(c.Labels))
		for j, l := range c.Labels {
			scale[j], shift[j] = l.Scale, l.Shift
		}
		err = dptrain.ApplyLabelScaling(m.Proto, scale, shift)
	} else {
		err = dptrain.ApplyTemperature(m.Proto, c.Temperature)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	if err := m.Save(*out, nil); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(calibrateResult{Model: *model, Data: s, Out: *out, Calibration: *c})
	}
	fmt.Fprintf(stdout, "model:       %s\ndata:        %s (%d examples)\n", *model, s, c.Examples)
	if *perLabel {
		names := v.Classes()
		fmt.Fprintf(stdout, "loss:        %.4f → %.4f\n", c.LossBefore, c.LossAfter)
		writeLabelECE(stdout, c)
		fmt.Fprintf(stdout, "each label's logit z mapped to a·z + b (Platt scaling; its decisions at ½ move, its AUC does not):\n")
		tw := tabwriter.NewWriter(stdout, 0, 4, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "  label\t a\t b\t positives\t negatives\t\n")
		for _, l := range c.Labels {
			name := strconv.Itoa(l.Label)
			if l.Label < len(names) && names[l.Label] != name {
				name += " " + names[l.Label]
			}
			if l.Left != "" {
				fmt.Fprintf(tw, "  %s\t 1\t 0\t %d\t %d\t (left as it was: %s)\n", name, l.Positives, l.Negatives, l.Left)
				continue
			}
			fmt.Fprintf(tw, "  %s\t %.4f\t %.4f\t %d\t %d\t\n", name, l.Scale, l.Shift, l.Positives, l.Negatives)
		}
		tw.Flush()
		fmt.Fprintf(stdout, "written:     %s\n", *out)
		return nil
	}
	fmt.Fprintf(stdout, "temperature: %.4f (the logits divided by it: %s)\n", c.Temperature, map[bool]string{true: "the probabilities were too sure", false: "they were not sure enough"}[c.Temperature > 1])
	fmt.Fprintf(stdout, "loss:        %.4f → %.4f\n", c.LossBefore, c.LossAfter)
	writeLabelECE(stdout, c)
	if c.ECEBefore != nil {
		fmt.Fprintf(stdout, "ECE:         %.2f %% → %.2f %% (expected calibration error, 15 bins)\n", 100**c.ECEBefore, 100**c.ECEAfter)
	}
	fmt.Fprintf(stdout, "no decision moves (the most probable class, a label's side of ½), nor a two-class or multi-label model's AUC; a --threshold T is one of the calibrated probabilities\nwritten:     %s\n", *out)
	return nil
}

// writeLabelECE prints a multi-label calibration's mean label calibration
// error before and after (nothing for a single-label one).
func writeLabelECE(stdout io.Writer, c *dptrain.Calibration) {
	if c.LabelECEBefore != nil {
		fmt.Fprintf(stdout, "ECE:         %.2f %% → %.2f %% (the labels' calibration errors, mean, 15 bins)\n", 100**c.LabelECEBefore, 100**c.LabelECEAfter)
	}
}
