package kernels

import (
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// BenchmarkConv2D times one Conv layer forward + backward (dx, dw, db) at
// batch 32, 64→64 channels, 32×32, 3×3, pad 1, on every BLAS backend, and
// reports GFLOP/s counting the three GEMMs (2·N·Cout·Cin·9·H·W flops each).
func BenchmarkConv2D(b *testing.B) {
	for _, be := range blas.Available() {
		b.Run(be, func(b *testing.B) {
			prev, _ := blas.SetBackend(be)
			defer blas.SetBackend(prev)
			s := ConvShape{N: 32, C: 64, M: 64, In: []int{32, 32}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
			if err := s.Init(); err != nil {
				b.Fatal(err)
			}
			r := newRand(1)
			x, w, bias := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
			y, dy := make([]float32, s.N*s.M*s.T), randn(r, s.N*s.M*s.T)
			dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
			ws := make([]float32, ConvWorkspaceSize(&s))
			for b.Loop() {
				ConvForward(&s, x, w, bias, y, ws)
				ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			}
			flops := 3 * 2 * float64(s.N*s.M*s.C*9*s.T)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkRowNorm: GroupNormalization forward and backward of a ResNet-18
// CIFAR block's activation (batch 32, 64 channels in 32 groups, 32×32),
// on one core.
func BenchmarkRowNorm(b *testing.B) {
	r := &RowNorm{Rows: 32 * 32, L: 2 * 32 * 32, Eps: 1e-5, Mode: NormChannel, G: 32, CpG: 2, S: 32 * 32}
	rng := newRand(4)
	n := r.Rows * r.L
	x, dy := randn(rng, n), randn(rng, n)
	scale, bias := randn(rng, 64), randn(rng, 64)
	y, dx := make([]float32, n), make([]float32, n)
	mean, inv := make([]float32, r.Rows), make([]float32, r.Rows)
	b.Run("forward", func(b *testing.B) {
		b.SetBytes(int64(8 * n))
		for i := 0; i < b.N; i++ {
			RowNormForward(r, x, scale, bias, y, mean, inv, 0, r.Rows)
		}
	})
	parts := make([]float64, 2*r.Rows*r.Runs())
	b.Run("backward", func(b *testing.B) {
		b.SetBytes(int64(12 * n))
		for i := 0; i < b.N; i++ {
			RowNormBackward(r, x, scale, mean, inv, dy, dx, parts, 0, r.Rows)
		}
	})
	accS, accB := make([]float64, 64), make([]float64, 64)
	dscale, dbias := make([]float32, 64), make([]float32, 64)
	b.Run("params", func(b *testing.B) {
		b.SetBytes(int64(8 * n))
		for i := 0; i < b.N; i++ {
			RowNormParamGrads(r, x, mean, inv, dy, dscale, dbias, accS, accB)
		}
	})
	// The backward and the parameters' gradients, the latter from x and
	// dy or from the sums the backward kept (as the CPU backend runs them).
	b.Run("backward+params", func(b *testing.B) {
		b.SetBytes(int64(20 * n))
		for i := 0; i < b.N; i++ {
			RowNormBackward(r, x, scale, mean, inv, dy, dx, parts, 0, r.Rows)
			RowNormParamGrads(r, x, mean, inv, dy, dscale, dbias, accS, accB)
		}
	})
	b.Run("backward+params/parts", func(b *testing.B) {
		b.SetBytes(int64(20 * n))
		for i := 0; i < b.N; i++ {
			RowNormBackward(r, x, scale, mean, inv, dy, dx, parts, 0, r.Rows)
			RowNormParamGradsFromParts(r, parts, dscale, dbias, accS, accB)
		}
	})
}
