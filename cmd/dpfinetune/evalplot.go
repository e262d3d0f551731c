package main

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
)

// maxPlottedCurves is how many labels' ROC curves eval --plot draws with
// a legend; past it, every curve is drawn in gray and the legend names
// the mean AUC only.
const maxPlottedCurves = 16

// writeEvalPlot draws an evaluation as a PNG of a panel of 700×650
// pixels each: the
// ROC curves (a two-class model's class 1, a multi-label model's labels)
// with the chance diagonal and each curve's AUC, and the reliability
// diagram (a single-label model's confidence bins' accuracy against their
// mean confidence; a multi-label model's, each label's bins' share of
// positives against their mean probability; the diagonal perfect
// calibration, the ECE in the title).
func writeEvalPlot(path, model string, res *dptrain.EvalResult) error {
	var panels []*plot.Plot
	if labels := res.CurveLabels(); len(labels) > 0 {
		p, err := rocPanel(res, labels)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if res.Reliability != nil || res.LabelECE != nil {
		p, err := reliabilityPanel(res)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return fmt.Errorf("%s: nothing to draw (no ROC curves nor confidence bins kept)", model)
	}
	panels[0].Title.Text = filepath.Base(model) + ": " + panels[0].Title.Text
	width, height := 700*len(panels), 650
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width)*vg.Inch/96, vg.Length(height)*vg.Inch/96), vgimg.UseDPI(96))
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	grid := [][]*plot.Plot{panels}
	canvases := plot.Align(grid, tiles, draw.New(img))
	for j, p := range panels {
		p.Draw(canvases[0][j])
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	})
}

// curveColors are the ROC curves' colours, label by label.
var curveColors = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255}, color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255},
	color.RGBA{R: 227, G: 119, B: 194, A: 255}, color.RGBA{R: 127, G: 127, B: 127, A: 255}, color.RGBA{R: 188, G: 189, B: 34, A: 255},
	color.RGBA{R: 23, G: 190, B: 207, A: 255},
}

// rocPanel draws the ROC curves of labels.
func rocPanel(res *dptrain.EvalResult, labels []int) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = "ROC", "false positive rate (1 − specificity)", "true positive rate (sensitivity)"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	p.Add(plotter.NewGrid())
	chance, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		return nil, err
	}
	chance.Color, chance.Dashes = color.Gray{Y: 150}, []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(chance)
	many := len(labels) > maxPlottedCurves
	for i, j := range labels {
		curve := res.Curve(j)
		if curve == nil {
			continue
		}
		xys := make(plotter.XYs, len(curve))
		for k, pt := range curve {
			xys[k] = plotter.XY{X: pt.FPR, Y: pt.TPR}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Width = vg.Points(1.5)
		if many {
			l.Color = color.Gray{Y: 160}
			p.Add(l)
			continue
		}
		l.Color = curveColors[i%len(curveColors)]
		p.Add(l)
		name := strconv.Itoa(j)
		if j < len(res.Classes) && res.Classes[j] != name {
			name = res.Classes[j]
		}
		auc := ""
		if j < len(res.PerClass) && res.PerClass[j].AUC != nil && res.MultiLabel {
			auc = fmt.Sprintf(" (AUC %.3f)", *res.PerClass[j].AUC)
		} else if !res.MultiLabel && res.AUC != nil {
			auc = fmt.Sprintf(" (AUC %.3f)", *res.AUC)
		}
		p.Legend.Add(name+auc, l)
	}
	if many && res.AUC != nil {
		p.Title.Text += fmt.Sprintf(" of %d labels (mean AUC %.3f)", len(labels), *res.AUC)
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Millimeter*2, vg.Millimeter*2
	return p, nil
}

// reliabilityPanel draws an evaluation's reliability diagram: a
// single-label model's, each confidence bin's accuracy at its mean
// confidence; a multi-label model's, each label's bins' share of
// positives at their mean probability, a line a label (gray past
// maxPlottedCurves), each label's calibration error in the legend.
func reliabilityPanel(res *dptrain.EvalResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = "reliability", "confidence (top probability)", "accuracy"
	if res.MultiLabel {
		p.X.Label.Text, p.Y.Label.Text = "probability (a label's, the bin's mean)", "share of positives"
	}
	switch {
	case res.ECE != nil:
		p.Title.Text += fmt.Sprintf(" (ECE %.2f %%)", 100**res.ECE)
	case res.LabelECE != nil:
		p.Title.Text += fmt.Sprintf(" (labels' ECE %.2f %%, mean)", 100**res.LabelECE)
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
	p.Add(plotter.NewGrid())
	perfect, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		return nil, err
	}
	perfect.Color, perfect.Dashes = color.Gray{Y: 150}, []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(perfect)
	p.Legend.Add("perfectly calibrated", perfect)
	line := func(bins []dptrain.ReliabilityBin, c color.Color, name string) error {
		var xys plotter.XYs
		for _, b := range bins {
			if b.Examples > 0 {
				xys = append(xys, plotter.XY{X: b.Confidence, Y: b.Accuracy})
			}
		}
		if len(xys) == 0 {
			return nil
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, s.Color = c, c
		p.Add(l, s)
		if name != "" {
			p.Legend.Add(name, l, s)
		}
		return nil
	}
	if !res.MultiLabel {
		if err := line(res.Reliability, curveColors[0], "each bin's accuracy at its mean confidence"); err != nil {
			return nil, err
		}
	}
	many := len(res.PerClass) > maxPlottedCurves
	for j, c := range res.PerClass {
		if !res.MultiLabel || c.ECE == nil {
			continue
		}
		col, name := color.Color(color.Gray{Y: 160}), ""
		if !many {
			col, name = curveColors[j%len(curveColors)], strconv.Itoa(j)
			if j < len(res.Classes) && res.Classes[j] != name {
				name = res.Classes[j]
			}
			name += fmt.Sprintf(" (ECE %.2f %%)", 100**c.ECE)
		}
		if err := line(c.Reliability, col, name); err != nil {
			return nil, err
		}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*2, -vg.Millimeter*2
	return p, nil
}
