package dpengine

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// testClassWeights are distinct, so that a sample weighed by another's
// class, or not at all, changes the sum; class 4's 0 drops its samples.
var testClassWeights = []float64{0.25, 1, 0.5, 0.75, 0, 1, 0.125, 0.875, 0.375, 0.625}

// weighedSum is Σ_i w_i·s_i over the clipped sums s_i of each sample
// alone, parameter by parameter.
func weighedSum(alone []map[string][]float32, w []float64) map[string][]float64 {
	out := map[string][]float64{}
	for i, s := range alone {
		for name, v := range s {
			if out[name] == nil {
				out[name] = make([]float64, len(v))
			}
			for j, x := range v {
				out[name][j] += w[i] * float64(x)
			}
		}
	}
	return out
}

// closeSums holds got to want parameter by parameter, to tol of the
// largest |want| of the model.
func closeSums(t *testing.T, got map[string][]float32, want map[string][]float64, tol float64) {
	t.Helper()
	var scale float64
	for _, v := range want {
		for _, x := range v {
			scale = max(scale, math.Abs(x))
		}
	}
	if scale == 0 {
		t.Fatal("every expected sum is zero: the case holds nothing")
	}
	for name, v := range want {
		g := got[name]
		if len(g) != len(v) {
			t.Fatalf("%s: %d elements, want %d", name, len(g), len(v))
		}
		for j := range v {
			if d := math.Abs(float64(g[j]) - v[j]); d > tol*scale {
				t.Fatalf("%s[%d] = %v, want %v (|Δ| %.3g of the largest %.3g)", name, j, g[j], v[j], d, scale)
			}
		}
	}
}

// clippedAlone returns each sample's clipped sum alone (a ClippedSum of
// one sample, rows rows a sample) of the engine e, and its norms.
func clippedAlone(t *testing.T, e *Engine, x []float32, y []int64, n, rows int) ([]map[string][]float32, []float64) {
	t.Helper()
	sl := len(x) / n
	var out []map[string][]float32
	var norms []float64
	for i := range n {
		s, nm, err := e.ClippedSum(x[i*sl:(i+1)*sl], y[i*rows:(i+1)*rows])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
		norms = append(norms, nm...)
	}
	return out, norms
}

// TestClassWeights: with Config.ClassWeights the clipped sum of a batch is
// Σ_i w_{y_i}·C_i·g_i — each sample's clipped sum alone (an engine without
// weights) times its class's weight — in every mode on the CPU and a
// device with memory of its own, the norms still the unweighted
// gradients'; with per-layer clipping; in nondp the weighted loss's
// gradient (bk with a clip norm that never binds); a user's rows weigh
// their mean; and weights that could raise the sensitivity are refused.
func TestClassWeights(t *testing.T) {
	const n = 4
	forEachEngine(t, []string{"cnn", "vit", "resnet_eval"}, func(t *testing.T, name string, dev runtime.Device, mode Mode) {
		x, _, _, _ := engineBatch(t, name, n)
		y := []int64{0, 2, 3, 7}
		build := func(perLayer bool, cw []float64) *Engine {
			g, rp := preparedFixture(t, name, n)
			cfg := compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.05}, perLayer, "sgd", n)
			cfg.ClassWeights = cw
			e, err := New(g, rp, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		w := make([]float64, n)
		for i, c := range y {
			w[i] = testClassWeights[c]
		}
		layers := []bool{false}
		if mode == BK || mode == Instantiate {
			layers = append(layers, true)
		}
		for _, perLayer := range layers {
			alone, norms := clippedAlone(t, build(perLayer, nil), x, y, n, 1)
			got, gotNorms, err := build(perLayer, testClassWeights).ClippedSum(x, y)
			if err != nil {
				t.Fatal(err)
			}
			closeSums(t, got, weighedSum(alone, w), 1e-4)
			for i := range norms {
				if !(math.Abs(gotNorms[i]-norms[i]) <= 1e-4*norms[i]) { // NaN fails too
					t.Errorf("per layer %v: sample %d's norm %v with class weights, %v without", perLayer, i, gotNorms[i], norms[i])
				}
			}
		}
	})
	x, _, _, _ := engineBatch(t, "cnn", n)
	y := []int64{0, 2, 3, 7}
	engine := func(g *graph.Graph, rp *rewrite.Plan, mode Mode, r float64, cw []float64, rows bool) *Engine {
		cfg := compareConfig(runtime.CPU{}, mode, Clipping{Fn: Abadi, R: r}, false, "sgd", n)
		cfg.ClassWeights, cfg.RowLabels = cw, rows
		e, err := New(g, rp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	t.Run("nondp", func(t *testing.T) {
		g, rp := preparedFixture(t, "cnn", n)
		want, _, err := engine(g, rp, BK, 1e9, testClassWeights, false).ClippedSum(x, y)
		if err != nil {
			t.Fatal(err)
		}
		plain, _, err := engine(g, rp, NonDP, 0, nil, false).ClippedSum(x, y)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := engine(g, rp, NonDP, 0, testClassWeights, false).ClippedSum(x, y)
		if err != nil {
			t.Fatal(err)
		}
		w64 := map[string][]float64{}
		for name, v := range want {
			for _, f := range v {
				w64[name] = append(w64[name], float64(f))
			}
		}
		closeSums(t, got, w64, 1e-5)
		if fmt.Sprint(plain) == fmt.Sprint(got) {
			t.Error("nondp's gradient is the same with and without class weights")
		}
	})
	t.Run("user rows", func(t *testing.T) {
		// Two rows a sample, each with a label of its own: a sample weighs
		// its rows' mean weight.
		const views = 2
		g, rp := multipliedFixture(t, "cnn", n, views)
		xr := make([]float32, 0, len(x)*views)
		sl := len(x) / n
		for i := range n {
			for v := range views {
				xr = append(xr, x[((i+v)%n)*sl:((i+v)%n+1)*sl]...)
			}
		}
		yr := []int64{0, 1, 2, 2, 3, 9, 7, 4}
		for _, mode := range []Mode{BK, Ghost} {
			alone, _ := clippedAlone(t, engine(g, rp, mode, 0.05, nil, true), xr, yr, n, views)
			got, _, err := engine(g, rp, mode, 0.05, testClassWeights, true).ClippedSum(xr, yr)
			if err != nil {
				t.Fatal(err)
			}
			w := make([]float64, n)
			for i := range w {
				w[i] = (testClassWeights[yr[2*i]] + testClassWeights[yr[2*i+1]]) / 2
			}
			closeSums(t, got, weighedSum(alone, w), 1e-4)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			cw    []float64
			multi bool
			want  string
		}{
			{[]float64{1, 1.5}, false, "outside [0, 1]"},
			{[]float64{1, -0.5}, false, "outside [0, 1]"},
			{[]float64{1, math.NaN()}, false, "outside [0, 1]"},
			{make([]float64, 11), false, "11 class weights for a model of 10 classes"},
			{[]float64{1, 1}, true, "multi-label"},
		} {
			g, rp := preparedFixture(t, "cnn", n)
			cfg := compareConfig(runtime.CPU{}, BK, Clipping{Fn: Abadi, R: 1}, false, "sgd", n)
			cfg.ClassWeights, cfg.MultiLabel = c.cw, c.multi
			if _, err := New(g, rp, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("class weights %v (multi-label %v): %v, want %q", c.cw, c.multi, err, c.want)
			}
		}
		// Fewer weights than classes: a label beyond them is refused.
		g, rp := preparedFixture(t, "cnn", n)
		e := engine(g, rp, BK, 1, []float64{1, 0.5, 1, 1}, false)
		if _, _, err := e.ClippedSum(x, y); err == nil || !strings.Contains(err.Error(), "label 7 of sample 3 has no class weight") {
			t.Errorf("a label without a weight: %v", err)
		}
	})
}
