package dpengine

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// emaFollow moves want, the average the test keeps on the host, towards
// params by the t-th update of the definition (not the engine's helper):
// θ̄ ← θ̄ + (1 − β_t)(θ − θ̄) with β_t = min(β, (1 + t)/(10 + t)), each
// operation rounded to float32.
func emaFollow(want, params [][]float32, beta float64, t int) {
	w := float32(1 - math.Min(beta, float64(1+t)/float64(10+t)))
	for k := range want {
		for i := range want[k] {
			want[k][i] += float32(w * float32(params[k][i]-want[k][i]))
		}
	}
}

// hostParams returns a copy of the engine's parameters as a host reader
// sees them (SyncParams, HostParams).
func hostParams(t *testing.T, e *Engine) [][]float32 {
	t.Helper()
	if err := e.SyncParams(); err != nil {
		t.Fatal(err)
	}
	return copyLists(e.HostParams())
}

// checkAverage holds the engine's average to want, bit for bit.
func checkAverage(t *testing.T, what string, e *Engine, want [][]float32) {
	t.Helper()
	got, err := e.HostAverage()
	if err != nil {
		t.Fatal(err)
	}
	for k, name := range e.ParamNames() {
		if !numcheck.SameBits(got[k], want[k]) {
			t.Fatalf("%s: the average of %s is not the definition's", what, name)
		}
	}
}

// cnnEngine is buildEngine on "cnn" returning New's error.
func cnnEngine(t *testing.T, cfg Config) (*Engine, error) {
	g, rp := preparedFixture(t, "cnn", 8)
	return New(g, rp, cfg)
}

// TestEMA: the engine's average of the parameters (Config.EMADecay) is
// the definition's — starting at the weights before the first step, then
// θ̄ ← θ̄ + (1 − β_t)(θ − θ̄) after every update with the warm-up's β_t —
// bit for bit, on the CPU (tensor by tensor) and on a device with memory
// of its own (one call over the parameters' block), with Adam and SGD,
// over logical batches of one and two physical batches and an empty one;
// a restored average (SetAverage, in another order of names) continues
// the same way; a bad decay, an average without an optimizer and a
// mismatched restore are refused.
func TestEMA(t *testing.T) {
	const beta = 0.9
	_, _, _, fill := engineBatch(t, "cnn", 8)
	cfg := func(dev runtime.Device, opt string) Config {
		o, _ := NewOptimizer(opt, 5e-2, 0.9, 0.01)
		return Config{Device: dev, Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 0.5,
			ExpectedBatch: 8, PhysicalBatch: 8, Source: NewSeededSource(4), Optimizer: o, EMADecay: beta}
	}
	batches := [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {1, 3, 5, 7, 0, 2, 4, 6, 1, 3, 5}, {}, {4, 5, 6}, {0, 2, 4, 6, 7}}
	for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
		for _, opt := range []string{"adamw", "sgd"} {
			t.Run(dev.Name()+"/"+opt, func(t *testing.T) {
				e := buildEngine(t, "cnn", cfg(dev, opt))
				want := hostParams(t, e)
				checkAverage(t, "before the first step", e, want)
				for s, b := range batches {
					if _, err := e.Step(b, fill); err != nil {
						t.Fatal(err)
					}
					p := hostParams(t, e)
					emaFollow(want, p, beta, s)
					checkAverage(t, fmt.Sprintf("step %d", s+1), e, want)
					if s >= 1 && numcheck.SameBits(want[0], p[0]) {
						t.Fatalf("step %d: the average is the parameters: nothing averaged", s+1)
					}
				}
				if e.AverageSteps() != int64(len(batches)) {
					t.Fatalf("AverageSteps %d, want %d", e.AverageSteps(), len(batches))
				}

				// A resume: the parameters and the average restored into a
				// fresh engine, names in reverse order.
				r := buildEngine(t, "cnn", cfg(dev, opt))
				names, avg := e.ParamNames(), copyLists(want)
				rn, rp, ra := make([]string, len(names)), make([][]float32, len(names)), make([][]float32, len(names))
				host := hostParams(t, e)
				for k := range names {
					j := len(names) - 1 - k
					rn[j], rp[j], ra[j] = names[k], host[k], avg[k]
				}
				if err := r.SetParams(rn, rp); err != nil {
					t.Fatal(err)
				}
				if err := r.SetAverage(rn, ra, e.AverageSteps()); err != nil {
					t.Fatal(err)
				}
				checkAverage(t, "restored", r, want)
				if _, err := r.Step(batches[0], fill); err != nil {
					t.Fatal(err)
				}
				emaFollow(want, hostParams(t, r), beta, len(batches))
				checkAverage(t, "the step after the restore", r, want)
			})
		}
	}

	t.Run("refused", func(t *testing.T) {
		for _, bad := range []float64{1, -0.1, math.NaN(), 2} {
			c := cfg(nil, "adam")
			c.EMADecay = bad
			if _, err := cnnEngine(t, c); err == nil || !strings.Contains(err.Error(), "EMA decay") {
				t.Errorf("EMADecay %v: got %v, want a refusal naming the EMA decay", bad, err)
			}
		}
		c := cfg(nil, "adam")
		c.Optimizer = nil
		if _, err := cnnEngine(t, c); err == nil || !strings.Contains(err.Error(), "needs an Optimizer") {
			t.Errorf("no optimizer: got %v", err)
		}
		e := buildEngine(t, "cnn", cfg(nil, "adam"))
		names, vals := e.ParamNames(), hostParams(t, e)
		for _, tc := range []struct {
			names []string
			vals  [][]float32
			steps int64
			want  string
		}{
			{names[:1], vals[:1], 0, "1 of the model's"},
			{append([]string{"nope"}, names[1:]...), vals, 0, `"nope" is not trainable`},
			{names, append([][]float32{vals[0][:1]}, vals[1:]...), 0, "has 1 elements"},
			{names, vals[1:], 0, "names for"},
			{names, vals, -1, "negative"},
		} {
			if err := e.SetAverage(tc.names, tc.vals, tc.steps); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SetAverage: got %v, want an error containing %q", err, tc.want)
			}
		}
		plain := cfg(nil, "adam")
		plain.EMADecay = 0
		p := buildEngine(t, "cnn", plain)
		if err := p.SetAverage(names, vals, 0); err == nil {
			t.Error("SetAverage on an engine without an average: no error")
		}
		if a, err := p.HostAverage(); a != nil || err != nil {
			t.Errorf("HostAverage without an average: %v, %v; want nil, nil", a, err)
		}
	})
}
