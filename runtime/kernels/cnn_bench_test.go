package kernels

import "testing"

// BenchmarkCNNLayers times the layers of the cnn-fmnist benchmark model
// (the Opacus MNIST CNN) at batch 256 one by one, forward and backward, so
// that kernel changes can be measured without the whole training step.
func BenchmarkCNNLayers(b *testing.B) {
	const n = 256
	convs := []struct {
		name string
		s    ConvShape
		dx   bool
	}{
		{"conv1", ConvShape{N: n, C: 1, M: 16, In: []int{28, 28}, Kernel: []int{8, 8}, Strides: []int{2, 2}, Pads: []int{2, 2, 2, 2}}, false},
		{"conv2", ConvShape{N: n, C: 16, M: 32, In: []int{12, 12}, Kernel: []int{4, 4}, Strides: []int{2, 2}}, true},
	}
	r := newRand(1)
	for _, c := range convs {
		s := c.s
		if err := s.Init(); err != nil {
			b.Fatal(err)
		}
		x, w, bias := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		y, dy := make([]float32, s.N*s.M*s.T), randn(r, s.N*s.M*s.T)
		var dx []float32
		if c.dx {
			dx = make([]float32, len(x))
		}
		dw, db := make([]float32, len(w)), make([]float32, s.M)
		ws := make([]float32, ConvWorkspaceSize(&s))
		b.Run(c.name+"/fwd", func(b *testing.B) {
			for b.Loop() {
				ConvForward(&s, x, w, bias, y, ws)
			}
		})
		b.Run(c.name+"/bwd", func(b *testing.B) {
			for b.Loop() {
				ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			}
		})
	}
	pools := []struct {
		name string
		p    PoolShape
	}{
		{"pool1", PoolShape{N: n, C: 16, In: []int{13, 13}, Kernel: []int{2, 2}, Strides: []int{1, 1}}},
		{"pool2", PoolShape{N: n, C: 32, In: []int{5, 5}, Kernel: []int{2, 2}, Strides: []int{1, 1}}},
	}
	for _, c := range pools {
		p := c.p
		if err := p.Init(); err != nil {
			b.Fatal(err)
		}
		x := randn(r, p.N*p.C*p.InSize)
		y, dy := make([]float32, p.N*p.C*p.T), randn(r, p.N*p.C*p.T)
		am, dx := make([]int32, len(y)), make([]float32, len(x))
		b.Run(c.name+"/fwd", func(b *testing.B) {
			for b.Loop() {
				MaxPoolForward(&p, x, y, am)
			}
		})
		b.Run(c.name+"/bwd", func(b *testing.B) {
			for b.Loop() {
				MaxPoolBackward(&p, dy, am, dx)
			}
		})
		MaxPoolForward(&p, x, y, am)
		b.Run(c.name+"/bwd-from-output", func(b *testing.B) {
			for b.Loop() {
				MaxPoolBackwardFromOutput(&p, x, y, dy, dx)
			}
		})
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"tanh1", n * 16 * 13 * 13}, {"tanh2", n * 32 * 5 * 5}} {
		x := randn(r, c.n)
		for i := range x {
			x[i] *= 1.5
		}
		y, dy, dx := make([]float32, c.n), randn(r, c.n), make([]float32, c.n)
		b.Run(c.name+"/fwd", func(b *testing.B) {
			for b.Loop() {
				Unary(Tanh, x, y)
			}
		})
		b.Run(c.name+"/bwd", func(b *testing.B) {
			for b.Loop() {
				UnaryBackward(Tanh, nil, y, dy, dx)
			}
		})
	}
}
