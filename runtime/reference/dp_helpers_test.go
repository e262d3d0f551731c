package reference_test

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The helpers of the DP operations' tests (persample, vector, clip, optim
// and noise). Their names start with dp so that the graph groups' tests
// may keep helpers of their own in this package.

// dpRand returns n uniform values in [−1, 1) from r.
func dpRand(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(2*r.Float64() - 1)
	}
	return x
}

// dpErr is the error metric of the reference tests: max_k |got_k −
// want_k| / max_k |want_k| (the absolute error scaled by the largest
// magnitude of want; 0 when both are all zero), +Inf for different
// lengths or a NaN in one but not the other.
func dpErr(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var maxErr, maxWant float64
	for k := range want {
		g, w := float64(got[k]), float64(want[k])
		if math.IsNaN(g) != math.IsNaN(w) {
			return math.Inf(1)
		}
		if math.IsNaN(w) {
			continue
		}
		maxErr = math.Max(maxErr, math.Abs(g-w))
		maxWant = math.Max(maxWant, math.Abs(w))
	}
	if maxErr == 0 {
		return 0
	}
	return maxErr / maxWant
}

// dpSameBits fails t unless got and want are equal bit for bit.
func dpSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for k := range want {
		if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
			t.Fatalf("%s: element %d is %v (%08x), the CPU's %v (%08x)", what, k, got[k], math.Float32bits(got[k]), want[k], math.Float32bits(want[k]))
		}
	}
}

// dpClone copies x.
func dpClone[T any](x []T) []T { return append([]T(nil), x...) }
