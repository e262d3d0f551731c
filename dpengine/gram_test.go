package dpengine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestInputGram: a convolution's a_i a_iᵀ from its input's Gram
// (inputGram) equals colᵀcol of the unfolded input, on padded, strided,
// dilated, rectangular, 1-D and 3-D shapes; and the form is only taken
// where it does fewer operations (not for a strided convolution whose
// input is much larger than its output, nor a grouped or instantiated one).
func TestInputGram(t *testing.T) {
	ops := runtime.CPU{}
	r := rand.New(rand.NewPCG(5, 6))
	for ci, sh := range []runtime.ConvShape{
		{N: 1, C: 5, M: 4, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 1, C: 6, M: 3, In: []int{4, 4}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 1, C: 7, M: 2, In: []int{2, 2}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 1, C: 9, M: 2, In: []int{7, 6}, Kernel: []int{3, 2}, Dilations: []int{2, 1}, Pads: []int{2, 0, 1, 1}},
		{N: 1, C: 12, M: 2, In: []int{9}, Kernel: []int{5}, Pads: []int{2, 2}},
		{N: 1, C: 16, M: 2, In: []int{3, 4, 4}, Kernel: []int{3, 3, 3}, Pads: []int{1, 1, 1, 1, 1, 1}},
	} {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		gm := inputGramFor(&s, 1, rewrite.Ghost)
		if gm == nil {
			t.Fatalf("case %d: no input-Gram form for %v under %v", ci, s.In, s.Kernel)
		}
		x := make([]float32, s.C*s.InSize)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		col := make([]float32, s.D*s.T)
		ops.Im2ColPlane(&s, x, 0, col, make([]float32, s.PlaneSize()))
		want := make([]float32, s.T*s.T)
		ops.GemmSerial(true, false, s.T, s.T, s.D, 1, col, s.T, col, s.T, 0, want, s.T)
		S := gm.S
		X, G, aa := make([]float32, S*S), make([]float32, gm.K*gm.T*gm.T), make([]float32, s.T*s.T)
		ops.GemmSerial(true, false, S, S, s.C, 1, x, S, x, S, 0, X, S)
		ops.IndexGather(X, gm.m, G)
		ops.ReduceToShape(G, gm.gShape, aa, gm.aShape)
		for i := range want {
			if d := math.Abs(float64(aa[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("case %d: aa[%d] = %v from the Gram, %v unfolded", ci, i, aa[i], want[i])
			}
		}
	}
	for ci, c := range []struct {
		s      runtime.ConvShape
		groups int
		d      rewrite.Decision
	}{
		{runtime.ConvShape{N: 1, C: 64, M: 128, In: []int{8, 8}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, 1, rewrite.Ghost},
		{runtime.ConvShape{N: 1, C: 8, M: 8, Group: 2, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}, 2, rewrite.Ghost},
		{runtime.ConvShape{N: 1, C: 5, M: 4, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}, 1, rewrite.Instantiate},
	} {
		s := c.s
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		if gm := inputGramFor(&s, c.groups, c.d); gm != nil {
			t.Errorf("case %d (%s): input-Gram form taken", ci, fmt.Sprint(c.d))
		}
	}
}
