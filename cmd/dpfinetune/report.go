package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/internal/atomicfile"
)

func init() {
	register(&command{
		name:    "report",
		summary: "draw a run report (train --report) as a PNG: loss, accuracy, ε spent, ε(δ)",
		run:     runReportCmd,
	})
}

func runReportCmd(args []string, stdout io.Writer) error {
	fs := newFlagSet("report", "run.json [--out run.png] [--width PX --height PX]")
	out := fs.String("out", "", "PNG to write (default: the report's name with .png)")
	width := fs.Int("width", 1200, "picture width in pixels")
	height := fs.Int("height", 1200, "picture height in pixels")
	// The report file comes first, as in "dpfinetune report run.json".
	var in string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		in, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if in == "" {
		return usagef("a report file is needed: dpfinetune report run.json")
	}
	if *width < 200 || *height < 150 || *width > 10000 || *height > 10000 {
		return usagef("--width and --height must be in [200, 10000] and [150, 10000] pixels, got %d×%d", *width, *height)
	}
	if *out == "" {
		*out = strings.TrimSuffix(in, filepath.Ext(in)) + ".png"
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var r dptrain.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: not a run report: %v", in, err)
	}
	if len(r.Epochs) == 0 {
		return fmt.Errorf("%s: the report has no epochs to draw", in)
	}
	img, err := drawReport(&r, *width, *height)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := atomicfile.Write(*out, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%d×%d)\n", *out, *width, *height)
	return nil
}

// drawReport lays out six panels: train loss, test accuracy and ε spent
// against epochs, the privacy curve ε(δ) of the run's accountant, the
// fraction of gradients clipped (what a user reads to choose the clip
// norm) and the learning rate — or, where the run adapted it, the clip
// norm — at each epoch's end.
func drawReport(r *dptrain.Report, width, height int) (*vgimg.Canvas, error) {
	// ε spent starts at 0 before the first step.
	loss, eps := plotter.XYs{}, plotter.XYs{{X: 0, Y: 0}}
	clipped, rate := plotter.XYs{}, plotter.XYs{}
	adaptive := r.Settings.ClipQuantile > 0
	for _, e := range r.Epochs {
		x := float64(e.Epoch)
		if !r.Settings.NonPrivate && !r.Settings.PerLayer {
			clipped = append(clipped, plotter.XY{X: x, Y: 100 * e.Clipped})
		}
		switch {
		case adaptive && e.ClipNorm > 0:
			rate = append(rate, plotter.XY{X: x, Y: e.ClipNorm})
		case !adaptive && e.LR > 0:
			rate = append(rate, plotter.XY{X: x, Y: e.LR})
		}
		if !math.IsNaN(e.TrainLoss) && !math.IsInf(e.TrainLoss, 0) {
			loss = append(loss, plotter.XY{X: x, Y: e.TrainLoss})
		}
		if e.Epsilon > 0 && !r.Settings.NonPrivate {
			eps = append(eps, plotter.XY{X: x, Y: e.Epsilon})
		}
	}
	title := filepath.Base(r.Settings.Model)
	p1, err := linePanel("train loss (not private)", "epoch", "loss", loss, color.RGBA{R: 31, G: 119, B: 180, A: 255})
	if err != nil {
		return nil, err
	}
	accTitle, accLabel, acc := testSeries(r)
	if r.Settings.EMADecay > 0 {
		accTitle += " of the parameters' average"
	}
	p2, err := linePanel(accTitle, "epoch", accLabel, acc, color.RGBA{R: 44, G: 160, B: 44, A: 255})
	if err != nil {
		return nil, err
	}
	if len(eps) == 1 {
		eps = nil
	}
	p3, err := linePanel("ε spent", "epoch", "ε", eps, color.RGBA{R: 214, G: 39, B: 40, A: 255})
	if err != nil {
		return nil, err
	}
	if r.Settings.Epsilon > 0 && len(eps) > 0 {
		target, err := plotter.NewLine(plotter.XYs{{X: eps[0].X, Y: r.Settings.Epsilon}, {X: eps[len(eps)-1].X, Y: r.Settings.Epsilon}})
		if err != nil {
			return nil, err
		}
		target.Color = color.Gray{Y: 120}
		target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p3.Add(target)
		p3.Legend.Add(fmt.Sprintf("target ε = %g", r.Settings.Epsilon), target)
		p3.Legend.Top = false
		p3.Legend.YOffs = vg.Millimeter * 4
	}
	p4, err := privacyCurvePanel(r)
	if err != nil {
		return nil, err
	}
	p5, err := linePanel("gradients clipped (not private)", "epoch", "clipped (%)", clipped, color.RGBA{R: 148, G: 103, B: 189, A: 255})
	if err != nil {
		return nil, err
	}
	rateTitle, rateLabel := "learning rate at the epoch's end", "lr"
	if adaptive {
		rateTitle, rateLabel = fmt.Sprintf("clip norm (adaptive, towards the %g-quantile)", r.Settings.ClipQuantile), "R"
	}
	p6, err := linePanel(rateTitle, "epoch", rateLabel, rate, color.RGBA{R: 255, G: 127, B: 14, A: 255})
	if err != nil {
		return nil, err
	}
	p1.Title.Text = title + ": " + p1.Title.Text

	img := vgimg.NewWith(vgimg.UseWH(vg.Length(width)*vg.Inch/96, vg.Length(height)*vg.Inch/96), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := [][]*plot.Plot{{p1, p2}, {p3, p4}, {p5, p6}}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	return img, nil
}

// testSeries is the test panel's title, axis label and points: each
// epoch's test accuracy, or a multi-label run's mean label AUC (its
// accuracy, the share of label decisions right, says little of rare
// labels), said to be of groups where the test data were scored so.
func testSeries(r *dptrain.Report) (title, label string, xys plotter.XYs) {
	multi, grouped := false, false
	for _, e := range r.Epochs {
		if e.Test != nil {
			multi, grouped = multi || e.Test.MultiLabel, grouped || e.Test.Groups != nil
		}
	}
	title, label = "test accuracy", "accuracy (%)"
	if multi {
		title, label = "test AUC (mean of the labels')", "AUC"
	}
	if grouped {
		title += " by group"
	}
	xys = plotter.XYs{}
	for _, e := range r.Epochs {
		switch {
		case e.Test == nil:
		case multi && e.Test.AUC != nil:
			xys = append(xys, plotter.XY{X: float64(e.Epoch), Y: *e.Test.AUC})
		case !multi:
			xys = append(xys, plotter.XY{X: float64(e.Epoch), Y: 100 * e.Test.Accuracy})
		}
	}
	return title, label, xys
}

func linePanel(title, xl, yl string, xys plotter.XYs, c color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xl, yl
	p.Add(plotter.NewGrid())
	if len(xys) == 0 {
		p.Title.Text += " (none in the report)"
		return p, nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", title, err)
	}
	l.Color, s.Color = c, c
	p.Add(l, s)
	// A constant series (a constant learning rate) gets the range from 0
	// to twice its value, not a sliver around it.
	lo, hi := xys[0].Y, xys[0].Y
	for _, xy := range xys {
		lo, hi = math.Min(lo, xy.Y), math.Max(hi, xy.Y)
	}
	if lo == hi {
		p.Y.Min, p.Y.Max = math.Min(0, 2*lo), math.Max(0, 2*hi)
		if lo == 0 {
			p.Y.Max = 1
		}
	}
	return p, nil
}

// privacyCurvePanel draws ε(δ) for the run's whole training: the steps
// composed so far at the run's σ and sample rate (one phase: a resumed run
// keeps both), evaluated by the run's accountant over δ from 1e-12 to 1e-1.
func privacyCurvePanel(r *dptrain.Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = "privacy curve ε(δ)", "δ", "ε"
	if r.Settings.PrivacyUnit == dptrain.PrivacyUnitUser {
		p.Title.Text += fmt.Sprintf(" per user (%d users)", r.Settings.Users)
	}
	p.Add(plotter.NewGrid())
	if r.Privacy == nil || r.Settings.NonPrivate || r.Settings.Sigma <= 0 || r.Privacy.Steps <= 0 {
		p.Title.Text += " (non-private run)"
		return p, nil
	}
	acc, err := accountant.New(r.Settings.Accountant)
	if err != nil {
		return nil, err
	}
	if err := acc.Step(r.Settings.Sigma, r.Settings.SampleRate, r.Privacy.Steps); err != nil {
		return nil, fmt.Errorf("privacy curve: %w", err)
	}
	var xys plotter.XYs
	for k := 0; k <= 22; k++ {
		delta := math.Pow(10, -12+float64(k)*11/22)
		res, err := acc.Epsilon(delta)
		if err != nil || math.IsInf(res.Epsilon, 0) || math.IsNaN(res.Epsilon) {
			continue
		}
		xys = append(xys, plotter.XY{X: delta, Y: res.Epsilon})
	}
	if len(xys) == 0 {
		return nil, fmt.Errorf("privacy curve: the %s accountant answered no δ in [1e-12, 0.1]", r.Settings.Accountant)
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = decadeTicks{}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, err
	}
	l.Color = color.RGBA{R: 148, G: 103, B: 189, A: 255}
	s.Color = l.Color
	p.Add(l, s)
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Millimeter * 4
	p.Legend.Add(fmt.Sprintf("%s, σ = %.3g, q = %.3g, %d steps", r.Settings.Accountant, r.Settings.Sigma, r.Settings.SampleRate, r.Privacy.Steps), l)
	if r.Privacy.Delta > 0 {
		pt, err := plotter.NewScatter(plotter.XYs{{X: r.Privacy.Delta, Y: r.Privacy.Epsilon}})
		if err != nil {
			return nil, err
		}
		pt.Color = color.RGBA{R: 214, G: 39, B: 40, A: 255}
		pt.Radius = vg.Points(4)
		p.Add(pt)
		p.Legend.Add(fmt.Sprintf("reported (δ = %.2g, ε = %.3g)", r.Privacy.Delta, r.Privacy.Epsilon), pt)
	}
	return p, nil
}

// decadeTicks labels every other power of ten of a log axis ("1e-6") and
// marks the others, so that twelve decades stay readable.
type decadeTicks struct{}

// Ticks implements plot.Ticker.
func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		v := math.Pow(10, e)
		if v < min*(1-1e-9) || v > max*(1+1e-9) {
			continue
		}
		t := plot.Tick{Value: v}
		if int(e)%2 == 0 {
			t.Label = fmt.Sprintf("1e%d", int(e))
		}
		ts = append(ts, t)
	}
	return ts
}
