package dptrain

import (
	"math"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
)

// TestGradientSigma: the gradient's σ_g and the count's 2σ_b compose to
// the accounted σ (Andrew et al.'s Theorem 1: σ⁻² = σ_g⁻² + (2σ_b)⁻²),
// σ_g ≥ σ, and a count noise that would take the whole budget is refused.
func TestGradientSigma(t *testing.T) {
	for _, c := range []struct{ sigma, countNoise float64 }{{1.1, 12.8}, {0.6, 3.2}, {2, 1.01}, {5, 100}} {
		g, err := gradientSigma(c.sigma, c.countNoise)
		if err != nil {
			t.Fatal(err)
		}
		composed := 1 / math.Sqrt(1/(g*g)+1/(4*c.countNoise*c.countNoise))
		if math.Abs(composed-c.sigma) > 1e-12*c.sigma || g < c.sigma {
			t.Errorf("σ = %v, σ_b = %v: σ_g = %v composes to %v", c.sigma, c.countNoise, g, composed)
		}
	}
	for _, countNoise := range []float64{0.5, 0.3} {
		if _, err := gradientSigma(1, countNoise); err == nil || !strings.Contains(err.Error(), "more than σ/2") {
			t.Errorf("σ_b = %v for σ = 1: %v", countNoise, err)
		}
	}
}

// TestUnclippedFraction: the noisy unclipped fraction is the centred count
// plus N(0, σ_b²) over L, plus ½: over 4000 draws of a seeded source its
// mean is the true fraction's and its spread σ_b/L (within 4 standard
// errors and 5 %); and the clip norm's update is the geometric one.
func TestUnclippedFraction(t *testing.T) {
	src := dpengine.NewSeededSource(5)
	const n, countNoise, L = 4000, 5.0, 50.0
	var sum, sq float64
	for range n {
		f := unclippedFraction(src, countNoise, 30, 40, L)
		sum += f
		sq += f * f
	}
	mean := sum / n
	std := math.Sqrt(sq/n - mean*mean)
	want, wantStd := (30-20)/L+0.5, countNoise/L
	if math.Abs(mean-want) > 4*wantStd/math.Sqrt(n) || math.Abs(std-wantStd) > 0.05*wantStd {
		t.Errorf("unclipped fraction: mean %v, std %v over %d draws; want %v and %v", mean, std, n, want, wantStd)
	}
	if got, want := nextClipNorm(2, 0.9, 0.5, 0.2), 2*math.Exp(-0.2*0.4); got != want {
		t.Errorf("next clip norm %v, want %v", got, want)
	}
	if nextClipNorm(2, 0.1, 0.5, 0.2) <= 2 {
		t.Error("too few samples unclipped, and the clip norm does not grow")
	}
}
