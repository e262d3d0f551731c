package reference_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestClipFactors: the reference backend's clip factors are the CPU's bit
// for bit (the contract: float64, rounded once) for every clip function,
// on random squared norms around R² and on the edge cases 0, R² itself,
// NaN, ±Inf and a squared norm rounding made negative; plus factors
// worked out by hand (a negative squared norm is a norm of 0: factor 1,
// not dropped as non-finite).
func TestClipFactors(t *testing.T) {
	ref, cpu := reference.Device{}, runtime.CPU{}
	r := rand.New(rand.NewPCG(5, 6))
	for _, rule := range []runtime.ClipRule{
		{Fn: runtime.ClipAbadi, R: 1},
		{Fn: runtime.ClipAbadi, R: 0.37},
		{Fn: runtime.ClipAutomatic, R: 2, Gamma: 0.01},
		{Fn: runtime.ClipGlobal, R: 1.5},
	} {
		normSq := []float64{0, rule.R * rule.R, math.NaN(), math.Inf(1), math.Inf(-1), 1e-300, 1e300, -1e-12}
		for range 200 {
			normSq = append(normSq, rule.R*rule.R*4*r.Float64())
		}
		got, want := make([]float32, len(normSq)+1), make([]float32, len(normSq)+1)
		ref.ClipFactors(rule, normSq, got)
		cpu.ClipFactors(rule, normSq, want)
		dpSameBits(t, "ClipFactors", got, want)
		for _, f := range [][]float32{nil, got[:len(normSq)], got[:3]} {
			gn, gc := ref.CountClipped(normSq, f)
			wn, wc := cpu.CountClipped(normSq, f)
			if gn != wn || gc != wc {
				t.Errorf("%v: CountClipped of %d factors = %d, %d, the CPU's %d, %d", rule, len(f), gn, gc, wn, wc)
			}
		}
	}
	if n, c := ref.CountClipped([]float64{1, math.NaN(), math.Inf(1), -1e-9, 0}, []float32{1, 0.5, 0, 1}); n != 2 || c != 2 {
		t.Errorf("CountClipped by hand = %d, %d, want 2, 2", n, c)
	}
	got := make([]float32, 3)
	ref.ClipFactors(runtime.ClipRule{Fn: runtime.ClipAbadi, R: 1}, []float64{0.25, 1, 16}, got)
	dpSameBits(t, "Abadi by hand", got, []float32{1, 1, 0.25})
	ref.ClipFactors(runtime.ClipRule{Fn: runtime.ClipAbadi, R: 1}, []float64{-1e-9, math.Inf(-1), 4}, got)
	dpSameBits(t, "Abadi of a negative squared norm by hand", got, []float32{1, 0, 0.5})
	ref.ClipFactors(runtime.ClipRule{Fn: runtime.ClipAutomatic, R: 1, Gamma: 1}, []float64{0, 9, 1}, got)
	dpSameBits(t, "automatic by hand", got, []float32{1, 0.25, 0.5})
	ref.ClipFactors(runtime.ClipRule{Fn: runtime.ClipGlobal, R: 2}, []float64{3.99, 4, math.NaN()}, got)
	dpSameBits(t, "global by hand", got, []float32{1, 0, 0})
}
