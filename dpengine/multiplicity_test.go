package dpengine

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// directViews returns, for each sample of x (views rows of the model's
// sample each) with label y[i], the gradient of the mean of its views'
// losses by a plain backward pass of g: augmentation multiplicity's
// per-sample gradient by definition, no per-sample rule involved. Where y
// holds a label a row (len(x)/per-view rows), each view has its own.
func directViews(t *testing.T, g *graph.Graph, names []string, sample []int64, views int, x []float32, y []int64) []map[string][]float64 {
	t.Helper()
	ref, err := runtime.CompileForBatch(g, views, sample, &runtime.Options{Trainable: names})
	if err != nil {
		t.Fatal(err)
	}
	viewLen := 1
	for _, d := range sample {
		viewLen *= int(d)
	}
	per := views * viewLen
	n := len(x) / per
	rowLabels := len(y) == n*views && views > 1
	labels := make([]int64, views)
	losses := make([]float32, views)
	weights := make([]float32, views)
	for r := range weights {
		weights[r] = float32(1 / float64(views))
	}
	var out []map[string][]float64
	for i := range n {
		for r := range labels {
			if rowLabels {
				labels[r] = y[i*views+r]
			} else {
				labels[r] = y[i]
			}
		}
		if err := ref.SetInput(0, x[i*per:(i+1)*per]); err != nil {
			t.Fatal(err)
		}
		if err := ref.Forward(); err != nil {
			t.Fatal(err)
		}
		if err := ref.Loss(labels, losses); err != nil {
			t.Fatal(err)
		}
		if err := ref.Backward(weights, nil); err != nil {
			t.Fatal(err)
		}
		gi := map[string][]float64{}
		for _, name := range names {
			for _, v := range ref.Grad(name) {
				gi[name] = append(gi[name], float64(v))
			}
		}
		out = append(out, gi)
	}
	return out
}

// TestAugmentMultiplicity: with each sample fed as several augmented
// views, every fixture's engine, in every DP mode, on the CPU and on a
// device with memory of its own (the batched rules), clips each sample's
// gradient as the mean of its views' gradients: the per-sample norms and
// the clipped sum Σ_i C_i ḡ_i equal those of each sample's own gradient
// by a plain backward pass over its views (directViews), with a clip norm
// that clips some samples and, on the CPU, one that clips none (where a
// view's loss weight of 1 instead of 1/views would show in the sum), and
// per-layer clipping in bk and instantiate (each parameter's own factor,
// R/√K); and the norm check passes.
func TestAugmentMultiplicity(t *testing.T) {
	for _, name := range engineFixtures {
		for _, views := range []int{2, 3} {
			if views == 3 && name != "cnn" && name != "windowconv" && name != "vit" {
				continue
			}
			for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
				for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
					t.Run(fmt.Sprintf("%s/x%d/%s/%s", name, views, dev.Name(), mode), func(t *testing.T) {
						checkMultiplicity(t, name, views, dev, mode, false, 4)
					})
				}
			}
		}
	}
}

// TestViewsOneSample: at a physical batch of one sample, its rows folded
// into the leading axis are the batch's, a later axis of size one (the
// cnn's one-channel image) notwithstanding: every mode clips the sample's
// views' mean gradient, with a label a view or a row.
func TestViewsOneSample(t *testing.T) {
	for _, rowLabels := range []bool{false, true} {
		for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
			for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
				t.Run(fmt.Sprintf("%v/%s/%s", rowLabels, dev.Name(), mode), func(t *testing.T) {
					checkMultiplicity(t, "cnn", 2, dev, mode, rowLabels, 1)
				})
			}
		}
	}
}

// TestRowLabels: with a label a row (Config.RowLabels: user-level
// privacy, a user's rows different images with labels of their own), each
// sample's gradient is the mean of its rows' gradients, each under its own
// label, clipped as one: norms and clipped sums as directViews gives them
// with the rows' labels, in every mode, on the CPU and on a device with
// memory of its own.
func TestRowLabels(t *testing.T) {
	for _, name := range []string{"cnn", "vit", "windowconv"} {
		for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
			for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
				t.Run(fmt.Sprintf("%s/%s/%s", name, dev.Name(), mode), func(t *testing.T) {
					checkMultiplicity(t, name, 3, dev, mode, true, 4)
				})
			}
		}
	}
}

// checkMultiplicity holds the engine on fixture name, reading views rows
// a sample at a physical batch of phys samples, to directViews on
// min(phys, 2) samples; rowLabels gives each row its own label.
func checkMultiplicity(t *testing.T, name string, views int, dev runtime.Device, mode Mode, rowLabels bool, phys int) {
	n := min(phys, 2)
	gd := loadGolden(t, name)
	per := len(gd.x) / len(gd.y)
	if len(gd.y) < n*views {
		t.Fatalf("the golden batch has %d samples, want %d", len(gd.y), n*views)
	}
	x := gd.x[:n*views*per]
	y := []int64{gd.y[0], gd.y[1]}[:n]
	checkY := y
	if rowLabels {
		// The golden batch's own labels, a row each, and the first
		// sample's rows made to differ wherever they agree.
		y = append([]int64(nil), gd.y[:n*views]...)
		if y[0] == y[1] {
			y[1] = (y[0] + 1) % 2
		}
	}
	g, rp := multipliedFixture(t, name, int64(phys), int64(views))
	if rp.Multiplicity != int64(views) {
		t.Fatalf("plan multiplicity %d, want %d", rp.Multiplicity, views)
	}
	// A clip norm that clips none shows a view's loss weight of 1 instead
	// of 1/views in the sum (clipped, the factor cancels it): the
	// weighing is the engine's, the same on every device, so it is held
	// on the CPU.
	// Per-layer clipping (bk and instantiate) scales each parameter's
	// rows by its own factor, also held on the CPU.
	type setting struct {
		r        float64
		perLayer bool
	}
	settings := []setting{{0.5, false}}
	if _, cpu := dev.(runtime.CPU); cpu {
		settings = append(settings, setting{1e6, false})
		if mode == BK || mode == Instantiate {
			settings = append(settings, setting{0.5, true})
		}
	}
	for _, st := range settings {
		r := st.r
		clip := Clipping{Fn: Abadi, R: r}
		cfg := compareConfig(dev, mode, clip, st.perLayer, "sgd", phys)
		cfg.RowLabels = rowLabels
		e, err := New(g, rp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if e.Views() != views || len(e.SampleShape()) != len(rp.InputShape)+1 || e.SampleShape()[0] != int64(views) {
			t.Fatalf("engine reads %d views of %v", e.Views(), e.SampleShape())
		}
		sums, totals, err := e.ClippedSum(x, y)
		if err != nil {
			t.Fatal(err)
		}
		// On a device that batches its per-sample work, a class token
		// prepended to each view (vit, beit, crossvit: concatBatch's
		// folded rows), the in-projection biases of torch's
		// sequence-first attention (the vit fixtures: batch axis 1, the
		// views inside it: arithmeticBatch's blocks) and the
		// convolutions over windows folded around the views
		// (windowconv: runs of K rows a sample, convRows.batchable) take
		// no loop over the samples, nor does any other parameter.
		if e.batchSamples && e.sampleLoops != 0 {
			t.Errorf("%+v: %d per-sample loops", st, e.sampleLoops)
		}
		names := e.ParamNames()
		direct := directViews(t, g, names, rp.InputShape, views, x, y)
		want := map[string][]float64{}
		var largest float64
		for i, gi := range direct {
			var sq float64
			for _, nm := range names {
				for _, v := range gi[nm] {
					sq += v * v
				}
			}
			norm := math.Sqrt(sq)
			if d := math.Abs(totals[i]-norm) / norm; d > 1e-4 {
				t.Errorf("%+v: sample %d: norm %.7g, its views' mean gradient's %.7g", st, i, totals[i], norm)
			}
			c := clip.Factor(norm)
			for _, nm := range names {
				if want[nm] == nil {
					want[nm] = make([]float64, len(gi[nm]))
				}
				if st.perLayer {
					var own float64
					for _, v := range gi[nm] {
						own += v * v
					}
					layer := Clipping{Fn: Abadi, R: r / math.Sqrt(float64(len(names)))}
					c = layer.Factor(math.Sqrt(own))
				}
				for k, v := range gi[nm] {
					want[nm][k] += c * v
					largest = math.Max(largest, math.Abs(want[nm][k]))
				}
			}
		}
		var worst float64
		for _, nm := range names {
			for k, v := range sums[nm] {
				worst = math.Max(worst, math.Abs(float64(v)-want[nm][k]))
			}
		}
		if worst > 1e-4*largest {
			t.Errorf("%+v: clipped sum differs from the views' mean gradients' by %.3g (largest element %.3g)", st, worst, largest)
		}
		if _, err := e.CheckNorms(g, x, checkY, checkTol); err != nil {
			t.Errorf("%+v: norm check: %v", st, err)
		}
	}
}
