package numcheck

import (
	"math"
	"testing"
)

// TestRelErr checks the metric on hand-computed cases: the largest
// difference over the largest magnitude of want, the floor, and the cases
// that are +Inf.
func TestRelErr(t *testing.T) {
	nan, inf := float32(math.NaN()), math.Inf(1)
	for _, c := range []struct {
		name      string
		got, want []float32
		floor     float64
		err       float64
	}{
		{"equal", []float32{1, -2}, []float32{1, -2}, 0, 0},
		{"both zero", []float32{0, 0}, []float32{0, 0}, 0, 0},
		{"scaled by want", []float32{1, -2.5}, []float32{1, -2}, 0, 0.25},
		{"floored", []float32{1, -2.5}, []float32{1, -2}, 5, 0.1},
		{"floor below the scale", []float32{1, -2.5}, []float32{1, -2}, 1, 0.25},
		{"want zero", []float32{1e-9}, []float32{0}, 0, inf},
		{"length", []float32{1}, []float32{1, 2}, 0, inf},
		{"NaN on one side", []float32{nan, 1}, []float32{3, 1}, 0, inf},
		{"NaN on both", []float32{nan, 1.5}, []float32{nan, 1}, 0, 0.5},
	} {
		if e := RelErr(c.got, c.want, c.floor); e != c.err && math.Abs(e-c.err) > 1e-12 {
			t.Errorf("%s: RelErr = %g, want %g", c.name, e, c.err)
		}
	}
	if e := RelErr([]float64{3}, []float64{4}, 0); e != 0.25 {
		t.Errorf("float64: RelErr = %g, want 0.25", e)
	}
	if l := Largest(map[string][]float32{"a": {1, -3}, "b": {2}}); l != 3 {
		t.Errorf("Largest = %g, want 3", l)
	}
	if !SameBits([]float32{1, nan}, []float32{1, nan}) || SameBits([]float32{0}, []float32{float32(math.Copysign(0, -1))}) || SameBits([]float32{1}, nil) {
		t.Error("SameBits: wrong answer")
	}
}
