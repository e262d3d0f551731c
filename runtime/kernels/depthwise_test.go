package kernels

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// depthwiseCases cover the direct kernels' paths: the nine-tap rows (3×3,
// unit and strided width), the generic rows (other kernel widths, strided
// and dilated), padded and unpadded planes, pads wider than the kernel
// (cropped output-gradient planes), channel multipliers 1 to 3 and 1-D and
// 3-D geometries.
var depthwiseCases = []ConvShape{
	{N: 3, C: 5, M: 5, Group: 5, In: []int{7, 9}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
	{N: 2, C: 4, M: 4, Group: 4, In: []int{8, 8}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
	{N: 2, C: 3, M: 3, Group: 3, In: []int{9, 11}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
	{N: 2, C: 3, M: 6, Group: 3, In: []int{8, 9}, Kernel: []int{3, 3}, Dilations: []int{2, 2}, Pads: []int{0, 2, 1, 1}},
	{N: 2, C: 3, M: 6, Group: 3, In: []int{9, 8}, Kernel: []int{5, 3}, Strides: []int{1, 2}, Dilations: []int{2, 1}, Pads: []int{2, 1, 0, 3}},
	{N: 3, C: 2, M: 6, Group: 2, In: []int{6, 7}, Kernel: []int{3, 3}, Strides: []int{1, 3}, Pads: []int{1, 0, 2, 2}},
	{N: 2, C: 4, M: 4, Group: 4, In: []int{6, 7}, Kernel: []int{3, 3}, Strides: []int{2, 2}},                          // unpadded, ext < in
	{N: 2, C: 3, M: 3, Group: 3, In: []int{6, 8}, Kernel: []int{3, 3}, Strides: []int{2, 2}},                          // unpadded, ext narrower than in
	{N: 2, C: 3, M: 3, Group: 3, In: []int{5, 6}, Kernel: []int{3, 3}},                                                // unpadded, unit stride
	{N: 2, C: 2, M: 4, Group: 2, In: []int{4, 5}, Kernel: []int{3, 2}, Pads: []int{3, 2, 4, 1}},                       // pads beyond the kernel
	{N: 2, C: 3, M: 3, Group: 3, In: []int{7, 6}, Kernel: []int{5, 5}, Pads: []int{2, 2, 2, 2}},                       // generic unit-stride rows
	{N: 2, C: 3, M: 3, Group: 3, In: []int{7, 7}, Kernel: []int{1, 1}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, // 1×1
	{N: 3, C: 4, M: 8, Group: 4, In: []int{13}, Kernel: []int{4}, Dilations: []int{2}, Pads: []int{3, 0}},             // 1-D
	{N: 2, C: 3, M: 3, Group: 3, In: []int{11}, Kernel: []int{3}, Strides: []int{2}, Pads: []int{1, 2}},               // 1-D strided
	{N: 2, C: 2, M: 4, Group: 2, In: []int{4, 5, 6}, Kernel: []int{2, 3, 3}, Pads: []int{1, 1, 0, 0, 1, 2}},           // 3-D
	{N: 2, C: 2, M: 2, Group: 2, In: []int{5, 4, 6}, Kernel: []int{3, 2, 3}, Strides: []int{2, 1, 2}, Pads: []int{1, 0, 1, 1, 1, 0}},
	{N: 2, C: 2, M: 4, Group: 2, In: []int{11, 12}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Dilations: []int{2, 2}, Pads: []int{2, 1, 1, 2}}, // strided and dilated 3×3
	{N: 2, C: 3, M: 3, Group: 3, In: []int{9, 7}, Kernel: []int{3, 3}, Strides: []int{2, 1}, Pads: []int{1, 1, 1, 1}},                           // height stride only
	{N: 2, C: 2, M: 2, Group: 2, In: []int{3, 9, 10}, Kernel: []int{1, 3, 3}, Strides: []int{2, 2, 2}, Pads: []int{0, 1, 1, 0, 1, 0}},           // 3-D, 1×3×3
	{N: 1, C: 3, M: 3, Group: 3, In: []int{5, 5}, Kernel: []int{5, 5}},                                                                          // kernel = input
	{N: 2, C: 32, M: 32, Group: 32, In: []int{4, 4}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},                                              // many channels, small maps
}

// naiveConvBackward is the direct-loop reference of dx and dw, in float64.
func naiveConvBackward(s *ConvShape, x, w, dy []float32) (dx, dw []float64) {
	g := &s.g
	dx, dw = make([]float64, s.N*s.C*s.InSize), make([]float64, s.M*s.D)
	cg, mg := s.C/s.Group, s.M/s.Group
	for n := 0; n < s.N; n++ {
		for m := 0; m < s.M; m++ {
			grp := m / mg
			for od := 0; od < g.out[0]; od++ {
				for oh := 0; oh < g.out[1]; oh++ {
					for ow := 0; ow < g.out[2]; ow++ {
						gv := float64(dy[((n*s.M+m)*g.out[0]+od)*g.out[1]*g.out[2]+oh*g.out[2]+ow])
						for c := 0; c < cg; c++ {
							ci := grp*cg + c
							for kd := 0; kd < g.k[0]; kd++ {
								id := od*g.s[0] - g.pb[0] + kd*g.d[0]
								for kh := 0; kh < g.k[1]; kh++ {
									ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
									for kw := 0; kw < g.k[2]; kw++ {
										iw := ow*g.s[2] - g.pb[2] + kw*g.d[2]
										if id < 0 || ih < 0 || iw < 0 || id >= g.in[0] || ih >= g.in[1] || iw >= g.in[2] {
											continue
										}
										xi := ((n*s.C+ci)*g.in[0]+id)*g.in[1]*g.in[2] + ih*g.in[2] + iw
										wi := ((m*cg+c)*g.k[0]+kd)*g.k[1]*g.k[2] + kh*g.k[2] + kw
										dx[xi] += float64(w[wi]) * gv
										dw[wi] += float64(x[xi]) * gv
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return dx, dw
}

func TestDepthwise(t *testing.T) {
	r := newRand(61)
	for ci, sh := range depthwiseCases {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		if !s.IsDepthwise() {
			t.Fatalf("case %d is not depthwise", ci)
		}
		name := fmt.Sprintf("case %d out %v", ci, s.Out)
		x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		dy := randn(r, s.N*s.M*s.T)
		wantDx, wantDw := naiveConvBackward(&s, x, w, dy)
		ws := make([]float32, ConvWorkspaceSize(&s))
		for _, threads := range []int{1, 2, 3} {
			prev := blas.SetThreads(threads)
			y := make([]float32, s.N*s.M*s.T)
			ConvForward(&s, x, w, b, y, ws)
			allClose(t, fmt.Sprintf("%s threads %d forward", name, threads), y, naiveConv(&s, x, w, b), 1e-4, 1e-4)
			dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
			ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			allClose(t, fmt.Sprintf("%s threads %d dx", name, threads), dx, wantDx, 1e-4, 1e-4)
			allClose(t, fmt.Sprintf("%s threads %d dw", name, threads), dw, wantDw, 1e-4, 1e-4)
			// dx alone and dw alone give the same numbers.
			dx2, dw2 := make([]float32, len(x)), make([]float32, len(w))
			ConvBackward(&s, x, w, dy, dx2, nil, nil, ws)
			ConvBackward(&s, x, w, dy, nil, dw2, nil, ws)
			allClose32(t, name+" dx alone", dx2, dx, 0, 0)
			allClose32(t, name+" dw alone", dw2, dw, 0, 0)
			blas.SetThreads(prev)
		}
	}
}

// TestDepthwiseMatchesGrouped compares the direct kernels with the grouped
// im2col + GEMM path they replace, and checks that they are reproducible.
func TestDepthwiseMatchesGrouped(t *testing.T) {
	r := newRand(62)
	defer blas.SetThreads(blas.SetThreads(2))
	for ci, sh := range depthwiseCases {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("case %d", ci)
		x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		dy := randn(r, s.N*s.M*s.T)
		run := func(off bool) (y, dx, dw, db []float32) {
			dwOff = off
			defer func() { dwOff = false }()
			ws := make([]float32, ConvWorkspaceSize(&s))
			y = make([]float32, s.N*s.M*s.T)
			dx, dw, db = make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
			ConvForward(&s, x, w, b, y, ws)
			ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			return
		}
		y0, dx0, dw0, db0 := run(true)
		y1, dx1, dw1, db1 := run(false)
		allClose32(t, name+" forward", y1, y0, 1e-5, 1e-5)
		allClose32(t, name+" dx", dx1, dx0, 1e-5, 1e-5)
		allClose32(t, name+" dw", dw1, dw0, 1e-4, 1e-5)
		allClose32(t, name+" db", db1, db0, 0, 0)

		_, dx2, dw2, _ := run(false)
		allClose32(t, name+" dx reproducible", dx2, dx1, 0, 0)
		allClose32(t, name+" dw reproducible", dw2, dw1, 0, 0)
	}
}

// TestDepthwiseSmallWorkspace: a workspace too small for the direct
// kernels' planes falls back to the grouped path, which needs ColSize().
func TestDepthwiseSmallWorkspace(t *testing.T) {
	r := newRand(63)
	s := ConvShape{N: 2, C: 3, M: 3, Group: 3, In: []int{9, 9}, Kernel: []int{1, 1}, Strides: []int{4, 4}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	if s.ColSize() >= s.dwForwardWS() {
		t.Fatalf("ColSize %d, plane %d: the case does not exercise the fallback", s.ColSize(), s.dwForwardWS())
	}
	x, w := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D)
	dy := randn(r, s.N*s.M*s.T)
	y := make([]float32, s.N*s.M*s.T)
	ConvForward(&s, x, w, nil, y, make([]float32, s.ColSize()))
	allClose(t, "forward", y, naiveConv(&s, x, w, nil), 1e-5, 1e-5)
	dx, dw := make([]float32, len(x)), make([]float32, len(w))
	ConvBackward(&s, x, w, dy, dx, dw, nil, make([]float32, s.ColSize()))
	wantDx, wantDw := naiveConvBackward(&s, x, w, dy)
	allClose(t, "dx", dx, wantDx, 1e-5, 1e-5)
	allClose(t, "dw", dw, wantDw, 1e-5, 1e-5)
}

func TestDepthwisePerSampleGrad(t *testing.T) {
	r := newRand(64)
	for ci, sh := range depthwiseCases {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		x, w := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D)
		dy := randn(r, s.N*s.M*s.T)
		xs, ys := s.C*s.InSize, s.M*s.T
		// Scratch full of garbage, as another layer would leave it.
		ws := randn(r, DepthwiseScratchSize(&s)+3)
		got := make([]float32, s.M*s.K)
		sum := make([]float32, s.M*s.K)
		for i := 0; i < s.N; i++ {
			one := s
			one.N = 1
			if err := one.Init(); err != nil {
				t.Fatal(err)
			}
			xi, dyi := x[i*xs:(i+1)*xs], dy[i*ys:(i+1)*ys]
			_, want := naiveConvBackward(&one, xi, w, dyi)
			for k := range got {
				got[k] = 1e9 // overwritten
			}
			DepthwisePerSampleGrad(&s, xi, dyi, got, ws)
			allClose(t, fmt.Sprintf("case %d sample %d", ci, i), got, want, 1e-4, 1e-4)
			for k, v := range got {
				sum[k] += v
			}
		}
		dw := make([]float32, len(w))
		ConvBackward(&s, x, w, dy, nil, dw, nil, make([]float32, ConvWorkspaceSize(&s)))
		allClose32(t, fmt.Sprintf("case %d sum of samples", ci), sum, dw, 1e-4, 1e-4)
	}
}

// TestDepthwiseKnownValues pins a hand-computed case: one 3×3 channel,
// all-ones taps, pad 1, so y is the sum of each 3×3 neighbourhood.
func TestDepthwiseKnownValues(t *testing.T) {
	s := ConvShape{N: 1, C: 2, M: 2, Group: 2, In: []int{3, 3}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	x := []float32{
		1, 2, 3,
		4, 5, 6,
		7, 8, 9,
		0, 0, 0,
		0, 1, 0,
		0, 0, 0,
	}
	w := make([]float32, 18)
	for k := range w[:9] {
		w[k] = 1
	}
	w[9+4], w[9+0] = 2, -1 // channel 1: centre 2, top-left −1
	y := make([]float32, 18)
	ConvForward(&s, x, w, []float32{0, 0.5}, y, make([]float32, ConvWorkspaceSize(&s)))
	want := []float32{
		12, 21, 16,
		27, 45, 33,
		24, 39, 28,
		0.5, 0.5, 0.5,
		0.5, 2.5, 0.5,
		0.5, 0.5, -0.5,
	}
	allClose32(t, "forward", y, want, 0, 0)
	// dy = 1 everywhere: dw[k] is the sum of the inputs tap k reads.
	dy := make([]float32, 18)
	for k := range dy {
		dy[k] = 1
	}
	dw := make([]float32, 18)
	DepthwisePerSampleGrad(&s, x, dy, dw, make([]float32, DepthwiseScratchSize(&s)))
	wantDw := []float32{
		12, 21, 16, 27, 45, 33, 24, 39, 28,
		1, 1, 1, 1, 1, 1, 1, 1, 1,
	}
	allClose32(t, "per-sample dw", dw, wantDw, 0, 0)
}

func TestDepthwiseAllocs(t *testing.T) {
	defer blas.SetThreads(blas.SetThreads(2))
	r := newRand(65)
	s := ConvShape{N: 4, C: 16, M: 16, Group: 16, In: []int{16, 16}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
	y, dy := make([]float32, s.N*s.M*s.T), randn(r, s.N*s.M*s.T)
	dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
	ws := make([]float32, ConvWorkspaceSize(&s))
	scratch := make([]float32, DepthwiseScratchSize(&s))
	for _, c := range []struct {
		name string
		f    func()
		max  float64
	}{
		{"forward", func() { ConvForward(&s, x, w, b, y, ws) }, 4},
		{"backward", func() { ConvBackward(&s, x, w, dy, dx, dw, db, ws) }, 8},
		{"per-sample", func() { DepthwisePerSampleGrad(&s, x[:s.C*s.InSize], dy[:s.M*s.T], dw, scratch) }, 0},
	} {
		if n := testing.AllocsPerRun(5, c.f); n > c.max {
			t.Errorf("%s: %.0f allocs/call > %.0f", c.name, n, c.max)
		}
	}
}

// BenchmarkDepthwise times MobileNetV2's depthwise layers at 32×32 inputs
// and batch 32, direct kernels against the grouped path.
func BenchmarkDepthwise(b *testing.B) {
	const n = 32
	layers := []struct {
		name string
		s    ConvShape
	}{
		{"144x32x32", ConvShape{N: n, C: 144, M: 144, Group: 144, In: []int{32, 32}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
		{"144x32x32s2", ConvShape{N: n, C: 144, M: 144, Group: 144, In: []int{32, 32}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}},
		{"384x8x8", ConvShape{N: n, C: 384, M: 384, Group: 384, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
		{"960x4x4", ConvShape{N: n, C: 960, M: 960, Group: 960, In: []int{4, 4}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}},
	}
	r := newRand(1)
	for _, l := range layers {
		s := l.s
		if err := s.Init(); err != nil {
			b.Fatal(err)
		}
		x, w, bias := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		y, dy := make([]float32, s.N*s.M*s.T), randn(r, s.N*s.M*s.T)
		dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
		scratch := make([]float32, DepthwiseScratchSize(&s))
		for _, path := range []string{"direct", "grouped"} {
			dwOff = path == "grouped"
			ws := make([]float32, ConvWorkspaceSize(&s))
			b.Run(l.name+"/"+path+"/fwd", func(b *testing.B) {
				defer cpuPerOp(b)()
				for b.Loop() {
					ConvForward(&s, x, w, bias, y, ws)
				}
			})
			b.Run(l.name+"/"+path+"/bwd", func(b *testing.B) {
				defer cpuPerOp(b)()
				for b.Loop() {
					ConvBackward(&s, x, w, dy, dx, dw, db, ws)
				}
			})
		}
		dwOff = false
		b.Run(l.name+"/persample", func(b *testing.B) {
			defer cpuPerOp(b)()
			for b.Loop() {
				for i := 0; i < s.N; i++ {
					DepthwisePerSampleGrad(&s, x[i*s.C*s.InSize:(i+1)*s.C*s.InSize], dy[i*s.M*s.T:(i+1)*s.M*s.T], dw, scratch)
				}
			}
		})
	}
}

// cpuPerOp reports the process's CPU time per operation (cpu-ms/op), which
// on a loaded machine says more than the wall time: defer cpuPerOp(b)().
func cpuPerOp(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64(cpu()-start)/1e6/float64(b.N), "cpu-ms/op")
	}
}
