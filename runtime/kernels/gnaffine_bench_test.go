package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkChannelAffine times the per-channel Mul (γ) of a GroupNorm's
// affine as torch 1.13 exports it, forward and backward (both gradients),
// on resnet18-cifar's activations at batch 32: rows of one channel plane,
// from 256 elements down to 4.
func BenchmarkChannelAffine(b *testing.B) {
	r := newRand(1)
	for _, sh := range [][]int{{32, 64, 16, 16}, {32, 64, 8, 8}, {32, 128, 4, 4}, {32, 256, 2, 2}} {
		c := []int{sh[1], 1, 1}
		n := Numel(sh)
		x, g, dy := randn(r, n), randn(r, sh[1]), randn(r, n)
		y, dx, dg := make([]float32, n), make([]float32, n), make([]float32, sh[1])
		name := fmt.Sprintf("%dx%d", sh[1], sh[2]*sh[3])
		b.Run(name+"/fwd", func(b *testing.B) {
			for b.Loop() {
				Binary(Mul, x, sh, g, c, y, sh)
			}
		})
		b.Run(name+"/bwd", func(b *testing.B) {
			for b.Loop() {
				BinaryBackward(Mul, x, sh, g, c, y, dy, sh, dx, dg)
			}
		})
		b.Run(name+"/reduce", func(b *testing.B) {
			for b.Loop() {
				ReduceToShape(dy, sh, dg, c)
			}
		})
	}
}
