package dpengine

import (
	"math"
	"testing"
)

// TestDiracCanary: a gradient canary in an otherwise empty, noise-free
// logical batch contributes its clipped value, divided by the expected
// batch size, at its coordinate and nothing elsewhere; clipping follows
// the clip function and per-layer clipping; a canary outside the
// parameters is refused.
func TestDiracCanary(t *testing.T) {
	noFill := func([]int, []float32, []int64) error { return nil }
	for _, c := range []struct {
		name     string
		clip     Clipping
		perLayer bool
		value    float64
		want     func(K int) float64 // the clipped value
	}{
		{"abadi, clipped", Clipping{Fn: Abadi, R: 1}, false, 7, func(int) float64 { return 1 }},
		{"abadi, below R", Clipping{Fn: Abadi, R: 1}, false, -0.25, func(int) float64 { return -0.25 }},
		{"automatic", Clipping{Fn: Automatic, R: 2, Gamma: 0.5}, false, 3, func(int) float64 { return 2 * 3 / 3.5 }},
		{"per layer", Clipping{Fn: Abadi, R: 1}, true, 7, func(K int) float64 { return 1 / math.Sqrt(float64(K)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := buildEngine(t, "cnn", Config{Mode: BK, Clipping: c.clip, PerLayer: c.perLayer, ExpectedBatch: 4, PhysicalBatch: 8})
			names := e.ParamNames()
			k := DiracCanary{Param: 1, Index: 3, Value: c.value}
			if err := e.CheckCanary(k); err != nil {
				t.Fatal(err)
			}
			e.InjectCanaries([]DiracCanary{k})
			if _, err := e.Step(nil, noFill); err != nil {
				t.Fatal(err)
			}
			want := c.want(len(names)) / 4
			for p, name := range names {
				for i, v := range e.Gradient(name) {
					w := 0.0
					if p == k.Param && i == k.Index {
						w = want
					}
					if math.Abs(float64(v)-w) > 1e-6 {
						t.Fatalf("%s[%d] = %v, want %v", name, i, v, w)
					}
				}
			}
			// The canary is used once: the next step is empty.
			if _, err := e.Step(nil, noFill); err != nil {
				t.Fatal(err)
			}
			if v := e.Gradient(names[1])[3]; v != 0 {
				t.Errorf("canary still present in the next step: %v", v)
			}
		})
	}
	e := buildEngine(t, "cnn", Config{Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, ExpectedBatch: 4, PhysicalBatch: 8})
	for _, k := range []DiracCanary{{Param: -1}, {Param: 99}, {Param: 0, Index: 1 << 30}, {Param: 0, Value: math.NaN()}} {
		if err := e.CheckCanary(k); err == nil {
			t.Errorf("CheckCanary(%+v) accepted", k)
		}
	}
}
