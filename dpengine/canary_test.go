package dpengine

import (
	"math"
	"testing"
)

// TestDiracCanary: in every DP mode, a gradient canary adds its clipped
// value, divided by the expected batch size, at its coordinate and nothing
// elsewhere to the noise-free private gradient, alone or beside real
// examples; clipping follows the clip function and per-layer clipping; a
// canary outside the parameters is refused.
func TestDiracCanary(t *testing.T) {
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
		for _, mode := range []Mode{BK, Instantiate, Ghost, Mixed} {
			if c.perLayer && (mode == Ghost || mode == Mixed) {
				continue
			}
			t.Run(c.name+"/"+string(mode), func(t *testing.T) {
				testCanary(t, mode, c.clip, c.perLayer, c.value, c.want)
			})
		}
	}
	e := buildEngine(t, "cnn", Config{Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, ExpectedBatch: 4, PhysicalBatch: 8})
	for _, k := range []DiracCanary{{Param: -1}, {Param: 99}, {Param: 0, Index: 1 << 30}, {Param: 0, Value: math.NaN()}} {
		if err := e.CheckCanary(k); err != nil {
			continue
		}
		t.Errorf("CheckCanary(%+v) accepted", k)
	}
}

// testCanary checks one engine configuration: a canary alone in a logical
// batch, a canary beside three real examples (the difference from the same
// batch without it), and that a canary is used for one Step only.
func testCanary(t *testing.T, mode Mode, clip Clipping, perLayer bool, value float64, wantFn func(K int) float64) {
	gold := loadGolden(t, "cnn")
	per := len(gold.x) / len(gold.y)
	fill := func(idx []int, x []float32, y []int64) error {
		for k, i := range idx {
			copy(x[k*per:(k+1)*per], gold.x[i*per:(i+1)*per])
			y[k] = gold.y[i]
		}
		return nil
	}
	e := buildEngine(t, "cnn", Config{Mode: mode, Clipping: clip, PerLayer: perLayer, ExpectedBatch: 4, PhysicalBatch: 8})
	names := e.ParamNames()
	k := DiracCanary{Param: 1, Index: 3, Value: value}
	if err := e.CheckCanary(k); err != nil {
		t.Fatal(err)
	}
	want := wantFn(len(names)) / 4
	grads := func() [][]float32 {
		var out [][]float32
		for _, name := range names {
			out = append(out, append([]float32(nil), e.Gradient(name)...))
		}
		return out
	}
	for _, batch := range [][]int{nil, {0, 1, 2}} {
		if _, err := e.Step(batch, fill); err != nil {
			t.Fatal(err)
		}
		base := grads()
		e.InjectCanaries([]DiracCanary{k})
		if _, err := e.Step(batch, fill); err != nil {
			t.Fatal(err)
		}
		with := grads()
		for p, name := range names {
			for i := range with[p] {
				w := 0.0
				if p == k.Param && i == k.Index {
					w = want
				}
				if d := float64(with[p][i] - base[p][i]); math.Abs(d-w) > 1e-5 {
					t.Fatalf("batch %v: %s[%d] changed by %v with the canary, want %v", batch, name, i, d, w)
				}
			}
		}
	}
	// The canary is used once: the next step is empty.
	if _, err := e.Step(nil, fill); err != nil {
		t.Fatal(err)
	}
	if v := e.Gradient(names[1])[3]; v != 0 {
		t.Errorf("canary still present in the next step: %v", v)
	}
}
