//go:build amd64 && !purego

package kernels

import (
	"math"
	"testing"
)

// TestSIMDWidthsAgree: the eight-lane AVX2 kernels give the four-lane SSE
// kernels' bits on every element — ordinary arguments, ±0, subnormals,
// the clamps' edges, infinities and NaN — so that a machine's choice of
// width never changes a result (and the CUDA kernels, which follow the SSE
// sequence, keep matching).
func TestSIMDWidthsAgree(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	x := gridPlus(200003, -12, 12, 0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 3.99, 4, 4.01, -4, -88, 88, 88.5, -87.34, -87.5, -100,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32)
	x = x[:len(x)&^7]
	dy := make([]float32, len(x))
	for i := range dy {
		dy[i] = float32(math.Sin(1.3 * float64(i)))
	}
	same := func(name string, a, b []float32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
				t.Fatalf("%s(%v): AVX2 %v (%#x), SSE %v (%#x)", name, x[i], a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
			}
		}
	}
	a, b := make([]float32, len(x)), make([]float32, len(x))
	geluErfAVX2(x, a)
	geluErfSSE(x, b)
	same("gelu", a, b)
	geluErfBackwardAVX2(x, dy, a)
	geluErfBackwardSSE(x, dy, b)
	same("gelu backward", a, b)
	e := make([]float32, len(x))
	for i, v := range x {
		e[i] = min(v, 88) // as Expfs clamps before the kernel's own clamp
	}
	expAVX2(e, a)
	expSSE(e, b)
	same("exp", a, b)
}
