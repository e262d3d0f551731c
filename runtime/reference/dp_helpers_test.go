package reference_test

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The helpers of the DP operations' tests (persample, vector, clip, optim
// and noise; their error metric is numcheck.RelErr, unfloored). Their
// names start with dp so that the graph groups' tests may keep helpers of
// their own in this package.

// dpRand returns n uniform values in [−1, 1) from r.
func dpRand(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(2*r.Float64() - 1)
	}
	return x
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
