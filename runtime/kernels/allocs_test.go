package kernels

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// TestAllocs reports per-call heap allocations of hot kernels; large
// buffers are never allocated (all of them are small metadata or goroutine
// closures), and the bound keeps it that way.
func TestAllocs(t *testing.T) {
	defer blas.SetThreads(blas.SetThreads(2)) // goroutine closures scale with workers
	r := newRand(40)
	s := ConvShape{N: 4, C: 8, M: 8, In: []int{16, 16}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
	y, dy := make([]float32, s.N*s.M*s.T), randn(r, s.N*s.M*s.T)
	dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
	ws := make([]float32, ConvWorkspaceSize(&s))
	shape := []int{4, 8, 16, 16}
	cshape := []int{1, 8, 1, 1}
	cases := []struct {
		name string
		f    func()
		max  float64
	}{
		{"ConvForward", func() { ConvForward(&s, x, w, b, y, ws) }, 16},
		{"ConvBackward", func() { ConvBackward(&s, x, w, dy, dx, dw, db, ws) }, 24},
		{"Binary", func() { Binary(Mul, x, shape, b, cshape, y, shape) }, 8},
		{"BinaryBackward", func() { BinaryBackward(Mul, x, shape, b, cshape, y, dy, shape, dx, db) }, 12},
		{"Unary", func() { Unary(Tanh, x, y) }, 8},
		{"Softmax", func() { Softmax(x, shape, -1, y) }, 8},
	}
	for _, c := range cases {
		n := testing.AllocsPerRun(5, c.f)
		t.Logf("%s: %.0f allocs/call", c.name, n)
		if n > c.max {
			t.Errorf("%s: %.0f allocs/call > %.0f", c.name, n, c.max)
		}
	}
}
