//go:build linux && (amd64 || arm64)

package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// randConv draws an initialized convolution of 1 to 3 spatial axes with
// groups, strides, dilations and asymmetric pads; depthwise ones
// (Group = C, a channel multiplier) with depthwise set.
func randConv(r *rand.Rand, depthwise bool) *runtime.ConvShape {
	for {
		nd := 1 + r.Intn(3)
		s := &runtime.ConvShape{N: 1 + r.Intn(3), C: 1 + r.Intn(4)}
		s.Group = []int{1, 1, s.C}[r.Intn(3)]
		if depthwise {
			s.C = 2 + r.Intn(3)
			s.Group = s.C
		}
		s.M = s.Group * (1 + r.Intn(3))
		for a := 0; a < nd; a++ {
			s.In = append(s.In, 1+r.Intn(map[int]int{1: 20, 2: 9, 3: 5}[nd]))
			s.Kernel = append(s.Kernel, 1+r.Intn(3))
			s.Strides = append(s.Strides, 1+r.Intn(2))
			s.Dilations = append(s.Dilations, 1+r.Intn(2))
		}
		s.Pads = make([]int, 2*nd)
		for a := range s.Pads {
			s.Pads[a] = r.Intn(3)
		}
		if s.Init() == nil && s.T > 0 {
			return s
		}
	}
}

var persampleCases = []valueCase{
	{"Im2ColPlane", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		s := randConv(r, false)
		xi := place(p, unif(r, s.C*s.InSize))
		var out [][]float32
		for g := 0; g < s.Group; g++ {
			col := place(p, filled(s.D*s.T, 7))
			o.Im2ColPlane(s, xi, g, col, make([]float32, s.PlaneSize()))
			out = append(out, fetch(p, col))
		}
		return out, true
	}, 0},
	{"Im2ColBatch", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		s := randConv(r, false)
		x := place(p, unif(r, s.N*s.C*s.InSize))
		i0 := r.Intn(s.N)
		n := 1 + r.Intn(s.N-i0)
		var out [][]float32
		for g := 0; g < s.Group; g++ {
			col := place(p, filled(n*s.D*s.T+1, 7))
			o.Im2ColBatch(s, x, i0, n, g, col, make([]float32, s.PlaneSize()))
			out = append(out, fetch(p, col))
		}
		return out, true
	}, 0},
	// Rows longer than a warp's segment of the GPU's unfolding
	// (im2colSeg), ending inside one.
	{"Im2ColBatch, long rows", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		s := &runtime.ConvShape{N: 2, C: 2, M: 2, In: []int{2*im2colSeg + 1 + r.Intn(im2colSeg)}, Kernel: []int{3}, Strides: []int{1}, Pads: []int{1, 2}}
		if r.Intn(2) == 0 {
			s.In, s.Kernel, s.Strides, s.Pads = []int{30 + r.Intn(20), 40 + r.Intn(20)}, []int{3, 2}, []int{1, 1}, []int{1, 0, 1, 1}
		}
		if err := s.Init(); err != nil {
			panic(err)
		}
		x := place(p, unif(r, s.N*s.C*s.InSize))
		col := place(p, filled(s.N*s.D*s.T+1, 7))
		o.Im2ColBatch(s, x, 0, s.N, 0, col, make([]float32, s.PlaneSize()))
		return [][]float32{fetch(p, col)}, true
	}, 0},
	{"ConvWeightGrad", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		s := randConv(r, r.Intn(3) == 0)
		x, dy := unif(r, s.N*s.C*s.InSize), unif(r, s.N*s.M*s.T)
		dw := place(p, filled(s.M*s.D, 7))
		o.ConvWeightGrad(s, place(p, x), place(p, dy), dw, make([]float32, o.ConvWorkspaceSize(s)))
		return [][]float32{fetch(p, dw)}, true
	}, 1e-5},
	{"DepthwisePerSampleGrad", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		s := randConv(r, true)
		xi, dyi := unif(r, s.C*s.InSize), unif(r, s.M*s.T)
		dw := place(p, filled(s.M*s.K, 7))
		o.DepthwisePerSampleGrad(s, place(p, xi), place(p, dyi), dw, filled(o.DepthwiseScratchSize(s), 3))
		return [][]float32{fetch(p, dw)}, true
	}, 1e-5},
	{"DepthwiseGradBatch", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.PerSampleOps)
		if !ok {
			return nil, false
		}
		s := randConv(r, true)
		x, dy := unif(r, s.N*s.C*s.InSize), unif(r, s.N*s.M*s.T)
		i0 := r.Intn(s.N)
		n := 1 + r.Intn(s.N-i0)
		dw := place(p, filled(n*s.M*s.K+1, 7))
		o.DepthwiseGradBatch(s, place(p, x), place(p, dy), i0, n, dw, filled(o.DepthwiseScratchSize(s), 3))
		return [][]float32{fetch(p, dw)}, true
	}, 1e-5},
}

// TestDepthwiseGradBatchRows holds each row of DepthwiseGradBatch to
// DepthwisePerSampleGrad on its sample bit for bit, on device operands:
// the engine's batched and per-sample paths give one norm.
func TestDepthwiseGradBatchRows(t *testing.T) {
	d := emuDevice(t)
	r := rand.New(rand.NewSource(5))
	for rep := 0; rep < 20; rep++ {
		s := randConv(r, true)
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		x, dy := place(p, unif(r, s.N*s.C*s.InSize)), place(p, unif(r, s.N*s.M*s.T))
		size := s.M * s.K
		rows := place(p, filled(s.N*size, 7))
		d.DepthwiseGradBatch(s, x, dy, 0, s.N, rows, nil)
		got := fetch(p, rows)
		one := place(p, filled(size, 7))
		for i := 0; i < s.N; i++ {
			d.DepthwisePerSampleGrad(s, x[i*s.C*s.InSize:(i+1)*s.C*s.InSize], dy[i*s.M*s.T:(i+1)*s.M*s.T], one, nil)
			want := fetch(p, one)
			for k := range want {
				if math.Float32bits(got[i*size+k]) != math.Float32bits(want[k]) {
					t.Fatalf("case %d, sample %d, weight %d: batch %v, per sample %v", rep, i, k, got[i*size+k], want[k])
				}
			}
		}
		for _, b := range p.bufs {
			d.Free(b)
		}
	}
}

// TestPerSampleOps holds the Device's PerSampleOps to the reference
// backend and the CPU on random convolutions, through the emulation.
func TestPerSampleOps(t *testing.T) {
	testValueCases(t, emuDevice(t), persampleCases, 30)
}

// BenchmarkIm2ColEmulated times the unfolding of ResNet-50's 3×3
// convolutions at 56×56 (64 channels, 4 samples) on the emulation: a
// proxy for the kernel's instruction count until a GPU times it.
func BenchmarkIm2ColEmulated(b *testing.B) {
	d := emuDevice(b)
	s := &runtime.ConvShape{N: 4, C: 64, M: 64, In: []int{56, 56}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
	x := place(p, make([]float32, s.N*s.C*s.InSize))
	col := place(p, make([]float32, s.N*s.D*s.T))
	d.Im2ColBatch(s, x, 0, s.N, 0, col, nil) // compile and load the module
	b.ResetTimer()
	for range b.N {
		d.Im2ColBatch(s, x, 0, s.N, 0, col, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(col)), "ns/element")
}

// BenchmarkMaxPoolBackwardEmulated times a 2×2 max pool's backward of
// stride 2 (VGG-16's, at 56×56, 64 channels, 2 samples) on the
// emulation: a proxy for the gather's instruction count until a GPU
// times it.
func BenchmarkMaxPoolBackwardEmulated(b *testing.B) {
	d := emuDevice(b)
	s := &runtime.PoolShape{N: 2, C: 64, In: []int{56, 56}, Kernel: []int{2, 2}, Strides: []int{2, 2}}
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	in, out := s.N*s.C*56*56, s.N*s.C*28*28
	p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
	x, y, dy, dx := place(p, unif(rand.New(rand.NewSource(1)), in)), place(p, make([]float32, out)), place(p, make([]float32, out)), place(p, make([]float32, in))
	arg := place(p, make([]int32, out))
	d.MaxPool(s, x, y, arg)
	d.MaxPoolBackward(s, dy, arg, dx) // compile and load the module
	b.ResetTimer()
	for range b.N {
		d.MaxPoolBackward(s, dy, arg, dx)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(in), "ns/element")
}

// TestConvTapGrams holds ConvTapGrams to the sum it documents, taken in
// float64 in tap order and rounded once — bit for bit, on random
// ungrouped convolutions (strides, dilations, asymmetric pads, 1 to 3
// axes) and a 3×3 one whose Grams span many warps, through the emulation.
func TestConvTapGrams(t *testing.T) {
	d := emuDevice(t)
	r := rand.New(rand.NewSource(9))
	var shapes []*runtime.ConvShape
	for len(shapes) < 40 {
		if s := randConv(r, false); s.Group <= 1 {
			shapes = append(shapes, s)
		}
	}
	big := &runtime.ConvShape{N: 2, C: 3, M: 4, In: []int{12, 13}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := big.Init(); err != nil {
		t.Fatal(err)
	}
	shapes = append(shapes, big)
	for c, s := range shapes {
		S, T := s.InSize, s.T
		X := unif(r, s.N*S*S)
		want := make([]float32, s.N*T*T)
		// pos is the input position tap k of output position t reads, or −1.
		pos := func(k, t int) int {
			p, kr, tr := 0, k, t
			for a := len(s.In) - 1; a >= 0; a-- {
				ka, ta := kr%s.Kernel[a], tr%s.Out[a]
				kr, tr = kr/s.Kernel[a], tr/s.Out[a]
				i := ta*axisOr(s.Strides, a, 1) + ka*axisOr(s.Dilations, a, 1) - axisOr(s.Pads, a, 0)
				if i < 0 || i >= s.In[a] {
					return -1
				}
				stride := 1
				for b := a + 1; b < len(s.In); b++ {
					stride *= s.In[b]
				}
				p += i * stride
			}
			return p
		}
		for i := 0; i < s.N; i++ {
			for tt := 0; tt < T; tt++ {
				for u := 0; u < T; u++ {
					var sum float64
					for k := 0; k < s.K; k++ {
						if a, b := pos(k, tt), pos(k, u); a >= 0 && b >= 0 {
							sum += float64(X[i*S*S+a*S+b])
						}
					}
					want[(i*T+tt)*T+u] = float32(sum)
				}
			}
		}
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		aa := place(p, filled(s.N*T*T, 7))
		d.ConvTapGrams(s, place(p, X), s.N, aa)
		got := fetch(p, aa)
		for e := range want {
			if math.Float32bits(got[e]) != math.Float32bits(want[e]) {
				t.Fatalf("case %d (in %v kernel %v strides %v dilations %v pads %v): element %d: %v, want %v", c, s.In, s.Kernel, s.Strides, s.Dilations, s.Pads, e, got[e], want[e])
			}
		}
		for _, b := range p.bufs {
			d.Free(b)
		}
	}
}

// BenchmarkGhostGramEmulated times a ghost norm's a_i a_iᵀ of a 3×3
// convolution of stride 1 (64 channels at 28×28, 2 samples) on the
// emulation both ways the DP engine forms it on a GPU: from the unfolded
// input (Im2ColBatch, then a batched GEMM of T×T×D) and from the input's
// Gram (a batched GEMM of S×S×C, then ConvTapGrams) — a proxy for the
// work until a GPU times it.
func BenchmarkGhostGramEmulated(b *testing.B) {
	d := emuDevice(b)
	s := &runtime.ConvShape{N: 2, C: 64, M: 64, In: []int{28, 28}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}}
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	S, T, D, n := s.InSize, s.T, s.D, s.N
	p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
	x := place(p, unif(rand.New(rand.NewSource(1)), n*s.C*S))
	col, X, aa := place(p, make([]float32, n*D*T)), place(p, make([]float32, n*S*S)), place(p, make([]float32, n*T*T))
	b.Run("unfolded", func(b *testing.B) {
		for range b.N {
			d.Im2ColBatch(s, x, 0, n, 0, col, nil)
			d.GemmStrided(true, false, T, T, D, 1, col, T, D*T, col, T, D*T, 0, aa, T, T*T, n)
		}
	})
	b.Run("input Gram", func(b *testing.B) {
		for range b.N {
			d.GemmStrided(true, false, S, S, s.C, 1, x, S, s.C*S, x, S, s.C*S, 0, X, S, S*S, n)
			d.ConvTapGrams(s, X, n, aa)
		}
	})
}
