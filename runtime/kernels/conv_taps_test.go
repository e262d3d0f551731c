package kernels

import (
	"fmt"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// tapCases take the tap-class path: maps no larger than the kernel's
// reach, where most taps fall on the padding (1-D, 2-D and 3-D, strides,
// dilations, outputs whose every tap is padding, bias or not).
var tapCases = []ConvShape{
	{N: 5, C: 6, M: 7, In: []int{1, 1}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
	{N: 4, C: 5, M: 3, In: []int{2, 2}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
	{N: 3, C: 2, M: 4, In: []int{1, 1}, Kernel: []int{1, 1}, Pads: []int{1, 1, 1, 1}},
	{N: 6, C: 3, M: 2, In: []int{2}, Kernel: []int{5}, Pads: []int{2, 2}, Strides: []int{2}},
	{N: 2, C: 3, M: 5, In: []int{1, 2, 1}, Kernel: []int{3, 3, 3}, Strides: []int{1, 2, 1}, Pads: []int{1, 1, 1, 1, 1, 1}},
	{N: 3, C: 4, M: 3, In: []int{3, 1}, Kernel: []int{3, 3}, Dilations: []int{2, 1}, Strides: []int{3, 1}, Pads: []int{2, 1, 2, 1}},
	{N: 33, C: 16, M: 32, In: []int{1, 1}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
}

// TestConvTaps checks the tap-class path against the dense reference
// convolution and its gradients against the per-sample path (dx, dw, and
// each alone), on the workspace ConvWorkspaceSize advertises and on one
// workspace filled with stale values.
func TestConvTaps(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		for _, threads := range []int{1, 2, 3} {
			prev := blas.SetThreads(threads)
			for ci, sh := range tapCases {
				s := sh
				if err := s.Init(); err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("case %d threads %d", ci, threads)
				if s.taps == nil || !s.taps.gemm {
					t.Fatalf("%s: %v under %v does not take the tap-class path", name, s.In, s.Kernel)
				}
				ws := make([]float32, ConvWorkspaceSize(&s))
				for i := range ws {
					ws[i] = float32(i%5) - 2
				}
				if tapChunking(&s, len(ws), true) == 0 {
					t.Fatalf("%s: the advertised workspace is too small for the tap-class path", name)
				}
				r := newRand(uint64(11 + ci))
				x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
				dy := randn(r, s.N*s.M*s.T)
				for _, bias := range [][]float32{b, nil} {
					y := make([]float32, len(dy))
					ConvForward(&s, x, w, bias, y, ws)
					allClose(t, name+" forward", y, naiveConv(&s, x, w, bias), 1e-4, 1e-4)
				}
				one := make([]float32, s.ColSize()) // per-sample path
				dx0, dw0 := make([]float32, len(x)), make([]float32, len(w))
				ConvBackward(&s, x, w, dy, dx0, dw0, nil, one)
				dx1, dw1 := make([]float32, len(x)), make([]float32, len(w))
				for i := range dx1 {
					dx1[i], dw1[i%len(dw1)] = 7, 7 // overwritten, not accumulated
				}
				ConvBackward(&s, x, w, dy, dx1, dw1, nil, ws)
				allClose32(t, name+" dx", dx1, dx0, 1e-5, 1e-5)
				allClose32(t, name+" dw", dw1, dw0, 1e-4, 1e-5)
				clear(dw1)
				ConvBackward(&s, x, nil, dy, nil, dw1, nil, ws)
				allClose32(t, name+" dw only", dw1, dw0, 1e-4, 1e-5)
				clear(dx1)
				ConvBackward(&s, nil, w, dy, dx1, nil, nil, ws)
				allClose32(t, name+" dx only", dx1, dx0, 1e-5, 1e-5)
			}
			blas.SetThreads(prev)
		}
	})
}

// TestConvTapsSelection checks which shapes take the tap-class path: those
// whose dense product is mostly padding and whose classes' weight blocks
// hold no more taps than the kernel (resnet18-cifar's 1×1 maps and its
// 2×2-to-1×1 convolution), and not the larger maps nor grouped ones.
func TestConvTapsSelection(t *testing.T) {
	for _, c := range resnet18CIFARConvs {
		s := c.s
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		want := c.name == "layer4" || c.name == "layer4.0"
		if got := s.taps != nil && s.taps.gemm; got != want {
			t.Errorf("%s: tap-class products %v, want %v", c.name, got, want)
		}
		// The classes unfold every map with a quarter or more padding.
		wantTaps := want || c.name == "layer3" || c.name == "layer3.0" || c.name == "layer2"
		if got := s.taps != nil; got != wantTaps {
			t.Errorf("%s: tap classes %v, want %v", c.name, got, wantTaps)
		}
	}
	g := ConvShape{N: 2, C: 4, M: 4, Group: 2, In: []int{1, 1}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := g.Init(); err != nil {
		t.Fatal(err)
	}
	if g.taps != nil {
		t.Error("a grouped convolution takes the tap-class path")
	}
	// A workspace smaller than the path's falls back to the other paths.
	s := tapCases[0]
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	if nb := tapChunking(&s, tapWS(&s, true)-1, true); nb != 0 {
		t.Errorf("a short workspace takes the tap-class path (chunk %d)", nb)
	}
}

// TestConvPackedWeights checks the paths that pack the weights once a
// call for the workers' input-gradient products (packedWeights: the
// per-sample and the chunked path) against the one-worker path, and the
// forward (w read in place) against the dense reference, on shapes large
// enough for the AVX-512 backend to pack.
func TestConvPackedWeights(t *testing.T) {
	prevBE, err := blas.SetBackend(blas.AVX512)
	if err != nil {
		t.Skip(err)
	}
	defer blas.SetBackend(prevBE)
	defer blas.SetThreads(blas.SetThreads(2))
	for ci, sh := range []ConvShape{
		{N: 3, C: 8, M: 32, In: []int{16, 16}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}, // per-sample (T = 256)
		{N: 9, C: 8, M: 32, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},   // chunked
		{N: 7, C: 32, M: 48, In: []int{9, 7}, Kernel: []int{3, 2}, Strides: []int{2, 1}},     // chunked, last chunk short
		{N: 2, C: 4, M: 30, In: []int{20, 20}, Kernel: []int{5, 5}, Pads: []int{2, 2, 2, 2}}, // M not a multiple of 12
	} {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		n := s.T
		if nb := convBatch(&s); nb > 0 {
			n = nb * s.T
		}
		if blas.PackedSize(s.D, n, s.M) == 0 {
			t.Fatalf("case %d: %d×%d×%d is not packed; the test needs shapes that are", ci, s.M, n, s.D)
		}
		r := newRand(uint64(60 + ci))
		x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		dy := randn(r, s.N*s.M*s.T)
		ws := make([]float32, ConvWorkspaceSize(&s))
		y := make([]float32, len(dy))
		ConvForward(&s, x, w, b, y, ws)
		name := fmt.Sprintf("case %d", ci)
		allClose(t, name+" forward", y, naiveConv(&s, x, w, b), 1e-3, 1e-4)
		one := make([]float32, s.ColSize())
		dx0, dw0 := make([]float32, len(x)), make([]float32, len(w))
		ConvBackward(&s, x, w, dy, dx0, dw0, nil, one)
		dx1, dw1 := make([]float32, len(x)), make([]float32, len(w))
		ConvBackward(&s, x, w, dy, dx1, dw1, nil, ws)
		allClose32(t, name+" dx", dx1, dx0, 1e-4, 1e-4)
		allClose32(t, name+" dw", dw1, dw0, 1e-3, 1e-4)
		clear(dx1)
		ConvBackward(&s, nil, w, dy, dx1, nil, nil, ws)
		allClose32(t, name+" dx only", dx1, dx0, 1e-4, 1e-4)
	}
}
