package main

import (
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// TestClipSum checks clipsum's output on the cnn fixture: with a clip norm
// that never binds it is PyTorch's batch gradient Σ_i g_i (the golden
// grad/ arrays); with R below every sample's norm, bk and instantiate (two
// different algorithms of the engine) give the same clipped sum; -freeze
// leaves out exactly the parameters it selects.
func TestClipSum(t *testing.T) {
	const model = "../../../testdata/models/cnn.onnx"
	gd, err := npy.ReadNPZ("../../../testdata/golden/cnn.npz")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	xp, yp := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	if err := npy.WriteFile(xp, gd["input"]); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(yp, gd["labels"]); err != nil {
		t.Fatal(err)
	}
	minNorm := math.Inf(1)
	for _, v := range gd["norm_total"].F64 {
		minNorm = math.Min(minNorm, v)
	}
	sums := func(mode string, clip float64, freeze string) map[string]*npy.Array {
		t.Helper()
		out := filepath.Join(dir, mode+".npz")
		if err := run(model, xp, yp, out, mode, clip, freeze); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		a, err := npy.ReadNPZ(out)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cases := []struct {
		name       string
		got, want  map[string]*npy.Array
		tol        float64
		wantFrozen []string
	}{
		{name: "unclipped = batch gradient", got: sums("bk", 1e30, ""), want: golden(gd), tol: 1e-5},
		{name: "bk = instantiate, every sample clipped", got: sums("bk", minNorm/2, ""), want: sums("instantiate", minNorm/2, ""), tol: 1e-5},
		{name: "freeze", got: sums("bk", 1e30, "^features"), want: golden(gd), tol: 1e-5, wantFrozen: []string{"features.0.bias", "features.0.weight", "features.3.bias", "features.3.weight"}},
	}
	for _, c := range cases {
		var frozen []string
		for name, w := range c.want {
			g, ok := c.got[name]
			if !ok {
				frozen = append(frozen, name)
				continue
			}
			if len(g.F32) != len(w.F32) {
				t.Fatalf("%s: %s has %d values, want %d", c.name, name, len(g.F32), len(w.F32))
			}
			var d, n float64
			for i := range w.F32 {
				d += math.Pow(float64(g.F32[i]-w.F32[i]), 2)
				n += math.Pow(float64(w.F32[i]), 2)
			}
			if n == 0 || math.Sqrt(d/n) > c.tol {
				t.Errorf("%s: %s relative error %.3g (norm %.3g)", c.name, name, math.Sqrt(d/n), math.Sqrt(n))
			}
		}
		sort.Strings(frozen)
		if strings.Join(frozen, ",") != strings.Join(c.wantFrozen, ",") {
			t.Errorf("%s: left out %v, want %v", c.name, frozen, c.wantFrozen)
		}
	}
}

// golden returns the fixture's batch gradients keyed by parameter name.
func golden(gd map[string]*npy.Array) map[string]*npy.Array {
	out := map[string]*npy.Array{}
	for k, v := range gd {
		if name, ok := strings.CutPrefix(k, "grad/"); ok {
			out[name] = v
		}
	}
	return out
}
