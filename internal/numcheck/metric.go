package numcheck

import "math"

// RelErr returns max_k |got_k − want_k| / max(max_k |want_k|, floor): the
// largest absolute difference scaled by the largest magnitude of want (the
// trusted side), or by floor where that is larger. 0 when got equals want
// (both all zero included); +Inf for different lengths, a NaN on one side
// only, or a difference where want is all zero and floor is 0. NaNs on both
// sides at one index count as equal.
//
// The floor serves quantities that are analytically zero on some tensors
// (attention key biases, to which softmax is invariant): both devices give
// float rounding noise there, different on each, with no scale of its own,
// so callers floor them at a fraction of the model's largest value.
func RelErr[T float32 | float64](got, want []T, floor float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) != math.IsNaN(w) {
			return math.Inf(1)
		}
		if math.IsNaN(w) {
			continue
		}
		d = math.Max(d, math.Abs(g-w))
		m = math.Max(m, math.Abs(w))
	}
	if d == 0 {
		return 0
	}
	return d / math.Max(m, floor)
}

// Largest returns the largest magnitude over every slice of m (0 for an
// empty map): the scale a floor of RelErr is a fraction of.
func Largest[T float32 | float64](m map[string][]T) float64 {
	var l float64
	for _, v := range m {
		for _, x := range v {
			l = math.Max(l, math.Abs(float64(x)))
		}
	}
	return l
}

// SameBits reports whether a and b hold the same float32 bit patterns (so
// that −0 differs from 0 and a NaN equals only the same NaN).
func SameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
