package reference_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// dpConvShapes are the convolutions of the per-sample tests: 1-D, 2-D and
// 3-D, grouped and depthwise (with a channel multiplier), strided, dilated
// and padded (asymmetrically too), pointwise, and the small maps that take
// the CPU's gather path.
func dpConvShapes() []runtime.ConvShape {
	return []runtime.ConvShape{
		{N: 3, C: 2, M: 3, In: []int{7}, Kernel: []int{3}},
		{N: 2, C: 3, M: 4, In: []int{9}, Kernel: []int{2}, Strides: []int{2}, Dilations: []int{2}, Pads: []int{1, 2}},
		{N: 2, C: 3, M: 5, In: []int{6, 5}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 4, C: 4, M: 6, Group: 2, In: []int{8, 7}, Kernel: []int{3, 2}, Strides: []int{2, 1}, Pads: []int{1, 0, 2, 1}},
		{N: 2, C: 5, M: 5, Group: 5, In: []int{6, 6}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 2, C: 3, M: 6, Group: 3, In: []int{7, 9}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
		{N: 2, C: 4, M: 4, Group: 4, In: []int{5, 6}, Kernel: []int{2, 3}, Dilations: []int{2, 1}},
		{N: 3, C: 4, M: 3, In: []int{5, 5}, Kernel: []int{1, 1}},
		{N: 2, C: 2, M: 3, In: []int{4, 5, 3}, Kernel: []int{2, 3, 2}, Pads: []int{0, 1, 1, 1, 0, 0}},
		{N: 5, C: 8, M: 4, In: []int{3, 3}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
	}
}

// TestPerSampleOps holds every per-sample convolution operation of the
// reference backend to the CPU's on random inputs: unfolding is a copy,
// equal bit for bit; the weight gradients are sums, within 1e-5 of the
// largest gradient (numcheck.RelErr).
func TestPerSampleOps(t *testing.T) {
	ref, cpu := reference.Device{}, runtime.CPU{}
	r := rand.New(rand.NewPCG(1, 2))
	for si, shape := range dpConvShapes() {
		s := shape
		if err := s.Init(); err != nil {
			t.Fatalf("shape %d: %v", si, err)
		}
		t.Run(fmt.Sprintf("%d_in%v_k%v_g%d", si, s.In, s.Kernel, s.Group), func(t *testing.T) {
			xs, ys := s.C*s.InSize, s.M*s.T
			x, dy := dpRand(r, s.N*xs), dpRand(r, s.N*ys)
			for g := 0; g < s.Group; g++ {
				want := make([]float32, s.D*s.T)
				cpu.Im2ColPlane(&s, x[xs:2*xs], g, want, make([]float32, s.PlaneSize()))
				got := dpRand(r, s.D*s.T) // stale contents must not show
				ref.Im2ColPlane(&s, x[xs:2*xs], g, got, make([]float32, ref.ConvWorkspaceSize(&s)))
				dpSameBits(t, fmt.Sprintf("Im2ColPlane group %d", g), got, want)
			}
			want := make([]float32, s.M*s.D)
			cpu.ConvWeightGrad(&s, x, dy, want, make([]float32, cpu.ConvWorkspaceSize(&s)))
			got := dpRand(r, s.M*s.D)
			ref.ConvWeightGrad(&s, x, dy, got, make([]float32, ref.ConvWorkspaceSize(&s)))
			if e := numcheck.RelErr(got, want, 0); e > 1e-5 {
				t.Errorf("ConvWeightGrad: error %.3g > 1e-5", e)
			}
			if !s.IsDepthwise() {
				return
			}
			for i := 0; i < s.N; i++ {
				want := make([]float32, s.M*s.K)
				cpu.DepthwisePerSampleGrad(&s, x[i*xs:(i+1)*xs], dy[i*ys:(i+1)*ys], want, make([]float32, cpu.DepthwiseScratchSize(&s)))
				got := dpRand(r, s.M*s.K)
				ref.DepthwisePerSampleGrad(&s, x[i*xs:(i+1)*xs], dy[i*ys:(i+1)*ys], got, make([]float32, ref.DepthwiseScratchSize(&s)))
				if e := numcheck.RelErr(got, want, 0); e > 1e-5 {
					t.Errorf("DepthwisePerSampleGrad sample %d: error %.3g > 1e-5", i, e)
				}
			}
		})
	}
}

// TestPerSampleOpsByHand: a 1-D convolution of 3 inputs, kernel 2,
// stride 2, pads 1 and 0 (2 output positions), worked out by hand.
func TestPerSampleOpsByHand(t *testing.T) {
	s := runtime.ConvShape{N: 1, C: 1, M: 1, In: []int{3}, Kernel: []int{2}, Strides: []int{2}, Pads: []int{1, 0}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	// Output positions o = 0, 1 read inputs 2o − 1 + k: (−1, 0) and (1, 2).
	x := []float32{1, 2, 3}
	col := make([]float32, s.D*s.T)
	reference.Device{}.Im2ColPlane(&s, x, 0, col, nil)
	// Rows are taps, columns output positions: tap 0 reads (pad, x1), tap 1 (x0, x2).
	dpSameBits(t, "col", col, []float32{0, 2, 1, 3})
	dy := []float32{10, 100}
	dw := make([]float32, 2)
	reference.Device{}.ConvWeightGrad(&s, x, dy, dw, nil)
	// dw[k] = Σ_o dy[o]·x[2o − 1 + k]: dw[0] = 10·0 + 100·2, dw[1] = 10·1 + 100·3.
	dpSameBits(t, "dw", dw, []float32{200, 310})
}
