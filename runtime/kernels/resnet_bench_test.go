package kernels

import (
	"fmt"
	"testing"
)

// resnet18CIFARConvs are the distinct convolutions of the resnet18-cifar
// benchmark model (torchvision ResNet-18 on 32×32 inputs) at batch 32, with
// how many times each occurs: the maps shrink to 2×2 and 1×1, where most
// taps of a 3×3 kernel fall on the padding.
var resnet18CIFARConvs = []struct {
	name  string
	count int
	dx    bool
	s     ConvShape
}{
	{"conv1", 1, false, ConvShape{N: 32, C: 3, M: 64, In: []int{32, 32}, Kernel: []int{7, 7}, Strides: []int{2, 2}, Pads: []int{3, 3, 3, 3}}},
	{"layer1", 4, true, ConvShape{N: 32, C: 64, M: 64, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
	{"layer2.0", 1, true, ConvShape{N: 32, C: 64, M: 128, In: []int{8, 8}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}},
	{"layer2", 3, true, ConvShape{N: 32, C: 128, M: 128, In: []int{4, 4}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
	{"layer2.ds", 1, true, ConvShape{N: 32, C: 64, M: 128, In: []int{8, 8}, Kernel: []int{1, 1}, Strides: []int{2, 2}}},
	{"layer3.0", 1, true, ConvShape{N: 32, C: 128, M: 256, In: []int{4, 4}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}},
	{"layer3", 3, true, ConvShape{N: 32, C: 256, M: 256, In: []int{2, 2}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
	{"layer3.ds", 1, true, ConvShape{N: 32, C: 128, M: 256, In: []int{4, 4}, Kernel: []int{1, 1}, Strides: []int{2, 2}}},
	{"layer4.0", 1, true, ConvShape{N: 32, C: 256, M: 512, In: []int{2, 2}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}},
	{"layer4", 3, true, ConvShape{N: 32, C: 512, M: 512, In: []int{1, 1}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
	{"layer4.ds", 1, true, ConvShape{N: 32, C: 256, M: 512, In: []int{2, 2}, Kernel: []int{1, 1}, Strides: []int{2, 2}}},
}

// BenchmarkResNet18Layers times each distinct convolution of resnet18-cifar
// forward and backward (dx, dw, db) at batch 32 on Workers() cores. The
// ns/op of a layer times its count, summed, is the step's convolution time;
// "GMAC/s" counts the dense product (every tap, padding included).
func BenchmarkResNet18Layers(b *testing.B) {
	r := newRand(1)
	for _, c := range resnet18CIFARConvs {
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
		macs := float64(s.N * s.M * s.D * s.T)
		b.Run(fmt.Sprintf("%s/fwd", c.name), func(b *testing.B) {
			for b.Loop() {
				ConvForward(&s, x, w, bias, y, ws)
			}
			b.ReportMetric(macs*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		b.Run(fmt.Sprintf("%s/bwd", c.name), func(b *testing.B) {
			for b.Loop() {
				ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			}
			n := 1.0
			if c.dx {
				n = 2
			}
			b.ReportMetric(n*macs*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}
