package kernels

import (
	"math"
	"testing"
)

// TestTree16 holds the unrolled tree16 to the halves it documents.
func TestTree16(t *testing.T) {
	var c [16]float64
	for i := range c {
		c[i] = math.Sin(float64(i)*1.9) * math.Pow(10, float64(i%5*4))
	}
	v := c
	for w := 8; w > 0; w /= 2 {
		for i := 0; i < w; i++ {
			v[i] += v[i+w]
		}
	}
	if got := tree16(&c); math.Float64bits(got) != math.Float64bits(v[0]) {
		t.Fatalf("tree16 %v, the halves %v", got, v[0])
	}
}
