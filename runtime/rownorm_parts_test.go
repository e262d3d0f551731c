package runtime

import (
	"math"
	"testing"
)

// TestCPUGroupNormParamGradsFromBackward: the CPU backend's GroupNorm
// parameter gradients are the same, bit for bit, whether they come from
// the sums its backward kept (the plan's order: backward, then parameter
// gradients, on the same x and dy) or from x and dy; after a backward of
// another gradient, from that gradient's, never from stale sums.
func TestCPUGroupNormParamGradsFromBackward(t *testing.T) {
	const N, C, S, G = 3, 6, 10, 3
	nr := NewGroupNormRows(N, C, S, G, false, 1e-5)
	x, dy, dy2 := make([]float32, N*C*S), make([]float32, N*C*S), make([]float32, N*C*S)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.7))
		dy[i] = float32(math.Cos(float64(i) * 1.3))
		dy2[i] = float32(math.Sin(float64(i)*0.3 + 1))
	}
	scale, bias := make([]float32, C), make([]float32, C)
	for k := range scale {
		scale[k], bias[k] = 1+0.1*float32(k), -0.2*float32(k)
	}
	y, mean, inv, dx := make([]float32, len(x)), make([]float32, N*G), make([]float32, N*G), make([]float32, len(x))
	cpu := CPU{}
	cpu.NormalizeRowsAffine(nr, x, scale, bias, y, mean, inv)
	grads := func(g []float32, backwardFirst []float32) ([]float32, []float32) {
		ds, db := make([]float32, C), make([]float32, C)
		if backwardFirst != nil {
			cpu.NormalizeRowsAffineBackward(nr, x, scale, mean, inv, backwardFirst, dx)
		}
		cpu.NormalizeRowsAffineParamGrads(nr, x, mean, inv, g, ds, db)
		return ds, db
	}
	for _, c := range []struct {
		name                  string
		g, backward, directly []float32
	}{
		{"after its backward", dy, dy, dy},
		{"after another gradient's backward", dy2, dy, dy2},
		{"with no backward", dy2, nil, dy2},
	} {
		ds, db := grads(c.g, c.backward)
		ws, wb := grads(c.directly, nil)
		for k := range ds {
			if ds[k] != ws[k] || db[k] != wb[k] {
				t.Errorf("%s: param %d (%v, %v), from x and dy (%v, %v)", c.name, k, ds[k], db[k], ws[k], wb[k])
			}
		}
	}
}
