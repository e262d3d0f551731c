package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// naivePool is the reference: every tap of every window, checked against
// the input and padded-input bounds directly.
func naivePool(p *PoolShape, x []float32, isMax bool) []float64 {
	g := &p.g
	y := make([]float64, p.N*p.C*p.T)
	for pl := 0; pl < p.N*p.C; pl++ {
		t := 0
		for od := 0; od < g.out[0]; od++ {
			for oh := 0; oh < g.out[1]; oh++ {
				for ow := 0; ow < g.out[2]; ow++ {
					best := math.Inf(-1)
					var sum float64
					var n, npad int
					for kd := 0; kd < g.k[0]; kd++ {
						for kh := 0; kh < g.k[1]; kh++ {
							for kw := 0; kw < g.k[2]; kw++ {
								pos := [3]int{od*g.s[0] - g.pb[0] + kd*g.d[0], oh*g.s[1] - g.pb[1] + kh*g.d[1], ow*g.s[2] - g.pb[2] + kw*g.d[2]}
								in, padded := true, true
								for a := 0; a < 3; a++ {
									if pos[a] < 0 || pos[a] >= g.in[a] {
										in = false
									}
									if pos[a] < -g.pb[a] || pos[a] >= g.in[a]+g.pe[a] {
										padded = false
									}
								}
								if padded {
									npad++
								}
								if !in {
									continue
								}
								v := float64(x[pl*p.InSize+(pos[0]*g.in[1]+pos[1])*g.in[2]+pos[2]])
								best = math.Max(best, v)
								sum += v
								n++
							}
						}
					}
					if isMax {
						y[pl*p.T+t] = best
					} else if p.CountIncludePad {
						y[pl*p.T+t] = sum / float64(npad)
					} else {
						y[pl*p.T+t] = sum / float64(n)
					}
					t++
				}
			}
		}
	}
	return y
}

var poolCases = []PoolShape{
	{N: 2, C: 3, In: []int{6, 7}, Kernel: []int{2, 2}, Strides: []int{2, 2}},
	{N: 2, C: 3, In: []int{7, 7}, Kernel: []int{3, 3}, Strides: []int{2, 2}, CeilMode: true},
	{N: 1, C: 2, In: []int{7, 8}, Kernel: []int{3, 2}, Strides: []int{2, 3}, Pads: []int{1, 0, 1, 1}, CeilMode: true},
	{N: 1, C: 2, In: []int{7, 8}, Kernel: []int{3, 2}, Strides: []int{2, 3}, Pads: []int{1, 0, 1, 1}, CeilMode: true, CountIncludePad: true},
	{N: 2, C: 2, In: []int{9, 9}, Kernel: []int{3, 3}, Strides: []int{1, 2}, Dilations: []int{2, 2}, Pads: []int{2, 1, 0, 2}},
	{N: 2, C: 2, In: []int{5, 6}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}, CountIncludePad: true},
	{N: 2, C: 2, In: []int{4, 4}, Kernel: []int{2, 2}, Strides: []int{1, 1}}, // cnn-fmnist MaxPool 2 s1
	{N: 3, C: 2, In: []int{10}, Kernel: []int{3}, Strides: []int{3}, Pads: []int{1, 0}, CeilMode: true},
	{N: 2, C: 2, In: []int{4, 5, 6}, Kernel: []int{2, 2, 3}, Strides: []int{2, 2, 2}, Pads: []int{0, 1, 1, 1, 0, 1}, CeilMode: true},
	{N: 2, C: 3, In: []int{9, 8}, Kernel: []int{2, 3}, Strides: []int{2, 1}, Dilations: []int{2, 2}}, // inside, dilated
	{N: 3, C: 2, In: []int{11}, Kernel: []int{2}, Strides: []int{2}},                                 // inside, 1-D
}

// maxPoolInput returns n pooling inputs of the given trial: 0 distinct
// values, 1 many ties, else ties, signed zeros, infinities and a few NaNs.
func maxPoolInput(r *rand.Rand, n, trial int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2, float32(math.Inf(1)), float32(math.Inf(-1))}
	x := make([]float32, n)
	for i := range x {
		switch trial {
		case 0:
			x[i] = float32(r.NormFloat64())
		case 1:
			x[i] = float32(r.IntN(3))
		case 4: // mostly −∞: whole windows of it
			x[i] = float32(math.Inf(-1))
			if r.IntN(8) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			}
		default:
			x[i] = specials[r.IntN(len(specials))]
			if r.IntN(40) == 0 {
				x[i] = float32(math.NaN())
			}
		}
	}
	return x
}

// TestMaxPoolFastPaths checks the inside-the-input MaxPool loops (2×2 and
// general windows) against the general loop bit for bit, values and
// argmax, on data full of ties, signed zeros, infinities and NaNs (and
// planes of mostly −∞), on shapes inside the input and on padded or
// ceil-mode ones, which go through a −∞-bordered copy (maxPoolPadded).
func TestMaxPoolFastPaths(t *testing.T) {
	shapes := []PoolShape{
		{N: 2, C: 3, In: []int{13, 13}, Kernel: []int{2, 2}, Strides: []int{1, 1}},
		{N: 2, C: 3, In: []int{5, 5}, Kernel: []int{2, 2}, Strides: []int{1, 1}},
		{N: 1, C: 2, In: []int{8, 9}, Kernel: []int{2, 2}, Strides: []int{2, 2}},
		{N: 1, C: 2, In: []int{9, 7}, Kernel: []int{2, 2}, Strides: []int{2, 1}},
		{N: 1, C: 2, In: []int{7, 10}, Kernel: []int{2, 2}, Strides: []int{3, 3}},
		{N: 1, C: 2, In: []int{9, 9}, Kernel: []int{2, 2}, Strides: []int{2, 2}, CeilMode: true},          // last window hangs over
		{N: 1, C: 2, In: []int{8, 8}, Kernel: []int{2, 2}, Strides: []int{2, 2}, CeilMode: true},          // ceil, still inside
		{N: 1, C: 2, In: []int{8, 8}, Kernel: []int{2, 2}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, // padded
		{N: 1, C: 2, In: []int{8, 8}, Kernel: []int{2, 2}, Dilations: []int{2, 1}},
		{N: 2, C: 2, In: []int{7, 7}, Kernel: []int{3, 3}, Strides: []int{2, 2}},
		{N: 2, C: 2, In: []int{7, 6}, Kernel: []int{3, 3}},
		{N: 1, C: 3, In: []int{10, 11}, Kernel: []int{3, 2}, Strides: []int{1, 3}, Dilations: []int{2, 3}},
		{N: 1, C: 2, In: []int{12}, Kernel: []int{3}, Strides: []int{2}},
		{N: 1, C: 2, In: []int{12}, Kernel: []int{2}},
		{N: 1, C: 2, In: []int{4, 5, 6}, Kernel: []int{1, 2, 2}}, // 3-D: general loop
		// Padded or ceil-mode: copied into a −∞-bordered plane.
		{N: 2, C: 3, In: []int{16, 16}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, // ResNet's stem
		{N: 1, C: 2, In: []int{7, 9}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 0, 1, 1}, CeilMode: true},
		{N: 1, C: 2, In: []int{6, 7}, Kernel: []int{3, 2}, Strides: []int{1, 2}, Dilations: []int{2, 1}, Pads: []int{2, 0, 2, 1}},
		{N: 1, C: 2, In: []int{11}, Kernel: []int{4}, Strides: []int{3}, Pads: []int{2, 1}},
		{N: 1, C: 1, In: []int{1, 1}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
	}
	r := newRand(9)
	for ci, sh := range shapes {
		p := sh
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		n := p.N * p.C * p.InSize
		for trial := 0; trial < 5; trial++ {
			x := maxPoolInput(r, n, trial)
			y0, y1 := make([]float32, p.N*p.C*p.T), make([]float32, p.N*p.C*p.T)
			a0, a1 := make([]int32, len(y0)), make([]int32, len(y0))
			maxPoolForward(&p, x, y0, a0, false)
			maxPoolForward(&p, x, y1, a1, true)
			for i := range y0 {
				same := math.Float32bits(y0[i]) == math.Float32bits(y1[i]) || y0[i] != y0[i] && y1[i] != y1[i]
				if !same || a0[i] != a1[i] {
					t.Fatalf("case %d trial %d [%d]: fast (%v, %d), general (%v, %d)", ci, trial, i, y1[i], a1[i], y0[i], a0[i])
				}
			}
			clear(y1)
			maxPoolForward(&p, x, y1, nil, true) // no argmax
			for i := range y0 {
				if math.Float32bits(y0[i]) != math.Float32bits(y1[i]) && (y0[i] == y0[i] || y1[i] == y1[i]) {
					t.Fatalf("case %d trial %d [%d] without argmax: %v, want %v", ci, trial, i, y1[i], y0[i])
				}
			}
		}
	}
}

// TestMaxPoolBackwardFromOutput checks that routing the gradient by
// finding each window's winner again from x and y gives MaxPoolBackward's
// result bit for bit, on the fast-path shapes and the general ones, with
// ties, signed zeros, infinities and NaNs.
func TestMaxPoolBackwardFromOutput(t *testing.T) {
	shapes := append([]PoolShape{
		{N: 2, C: 3, In: []int{13, 13}, Kernel: []int{2, 2}, Strides: []int{1, 1}},
		{N: 1, C: 2, In: []int{8, 9}, Kernel: []int{2, 2}, Strides: []int{2, 2}},
		{N: 1, C: 2, In: []int{9, 9}, Kernel: []int{2, 2}, Strides: []int{2, 2}, CeilMode: true},
		{N: 1, C: 2, In: []int{8, 8}, Kernel: []int{2, 2}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
		{N: 2, C: 2, In: []int{7, 7}, Kernel: []int{3, 3}, Strides: []int{2, 2}},
	}, poolCases...)
	r := newRand(11)
	for ci, sh := range shapes {
		p := sh
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		n := p.N * p.C * p.InSize
		for trial := 0; trial < 5; trial++ {
			x := maxPoolInput(r, n, trial)
			y, am := make([]float32, p.N*p.C*p.T), make([]int32, p.N*p.C*p.T)
			MaxPoolForward(&p, x, y, am)
			dy := randn(r, len(y))
			want, got := make([]float32, n), make([]float32, n)
			MaxPoolBackward(&p, dy, am, want)
			for i := range got {
				got[i] = 7 // overwritten
			}
			MaxPoolBackwardFromOutput(&p, x, y, dy, got)
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("case %d trial %d dx[%d] = %v, want %v", ci, trial, i, got[i], want[i])
				}
			}
		}
	}
}

func TestPools(t *testing.T) {
	r := newRand(3)
	for ci, sh := range poolCases {
		p := sh
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("case %d out %v", ci, p.Out)
		x := distinct(r, p.N*p.C*p.InSize)
		y := make([]float32, p.N*p.C*p.T)
		am := make([]int32, len(y))
		MaxPoolForward(&p, x, y, am)
		allClose(t, name+" max", y, naivePool(&p, x, true), 0, 0)
		dx := make([]float32, len(x))
		gradCheck(t, name+" max", r, []*param{{"x", x, dx}}, func() []float32 {
			MaxPoolForward(&p, x, y, am)
			return y
		}, func(dy []float32) { MaxPoolBackward(&p, dy, am, dx) })

		x = randn(r, len(x))
		AveragePoolForward(&p, x, y)
		allClose(t, name+" avg", y, naivePool(&p, x, false), 1e-6, 1e-5)
		gradCheck(t, name+" avg", r, []*param{{"x", x, dx}}, func() []float32 {
			AveragePoolForward(&p, x, y)
			return y
		}, func(dy []float32) { AveragePoolBackward(&p, dy, dx) })
	}
}

func TestPoolOutputShapes(t *testing.T) {
	// ONNX backend test averagepool_2d_ceil: 4×4, k3 s2, ceil → 2×2.
	p := PoolShape{N: 1, C: 1, In: []int{4, 4}, Kernel: []int{3, 3}, Strides: []int{2, 2}, CeilMode: true}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	y := make([]float32, 4)
	AveragePoolForward(&p, x, y)
	allClose32(t, "averagepool_2d_ceil", y, []float32{6, 7.5, 12, 13.5}, 1e-6, 0)
	MaxPoolForward(&p, x, y, nil)
	allClose32(t, "maxpool_2d_ceil", y, []float32{11, 12, 15, 16}, 0, 0)
	// Ceil mode drops a window that would start in the end padding
	// (PyTorch): in 5, k 2, s 2, pad 1+1 → 3 windows, not 4.
	if o := OutputSize(5, 2, 2, 1, 1, 1, true); o != 3 {
		t.Fatalf("OutputSize ceil = %d, want 3", o)
	}
	if o := OutputSize(6, 3, 2, 1, 0, 0, true); o != 3 {
		t.Fatalf("OutputSize ceil = %d, want 3", o)
	}
	if o := OutputSize(6, 3, 2, 1, 0, 0, false); o != 2 {
		t.Fatalf("OutputSize floor = %d, want 2", o)
	}
}

func TestGlobalAveragePool(t *testing.T) {
	r := newRand(4)
	planes, spatial := 6, 35
	x := randn(r, planes*spatial)
	y := make([]float32, planes)
	GlobalAveragePool(planes, spatial, x, y)
	want := make([]float64, planes)
	for i := range want {
		for _, v := range x[i*spatial : (i+1)*spatial] {
			want[i] += float64(v)
		}
		want[i] /= float64(spatial)
	}
	allClose(t, "gap", y, want, 1e-6, 1e-6)
	dx := make([]float32, len(x))
	gradCheck(t, "gap", r, []*param{{"x", x, dx}}, func() []float32 {
		GlobalAveragePool(planes, spatial, x, y)
		return y
	}, func(dy []float32) { GlobalAveragePoolBackward(planes, spatial, dy, dx) })
}

// TestMaxPoolRow2x2Bits: the 2×2 row kernel (four windows per SSE2 step
// where built, stride 1) picks the same values, bit for bit, and the same
// argmax offsets as the general first-maximum rule (maxPoolRow2x2NaN), on
// rows full of ties and signed zeros, for every width and stride; a row
// with a NaN reports it through the returned sum.
func TestMaxPoolRow2x2Bits(t *testing.T) {
	r := newRand(9)
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2, float32(math.Inf(1)), float32(math.Inf(-1))}
	for W := 2; W < 40; W++ {
		for _, sw := range []int{1, 2} {
			OW := (W-2)/sw + 1
			for trial := 0; trial < 20; trial++ {
				x := make([]float32, 2*W)
				for i := range x {
					x[i] = vals[r.IntN(len(vals)-2)] // no infinities: they may meet
				}
				if trial%4 == 3 {
					// In a window: the last columns may be no tap.
					x[r.IntN(2)*W+r.IntN((OW-1)*sw+2)] = float32(math.NaN())
				}
				const base = 1000
				y, a := make([]float32, OW), make([]int32, OW)
				acc := maxPoolRow2x2(x, W, sw, base, y, a)
				// Without argmax: the same values.
				y2 := make([]float32, OW)
				if acc2 := maxPoolRow2x2(x, W, sw, base, y2, nil); math.Float32bits(acc2) != math.Float32bits(acc) && acc == acc {
					t.Fatalf("W=%d sw=%d: sum %v without argmax, %v with", W, sw, acc2, acc)
				}
				for i := range y {
					if math.Float32bits(y2[i]) != math.Float32bits(y[i]) && y[i] == y[i] {
						t.Fatalf("W=%d sw=%d: [%d] = %v without argmax, %v with", W, sw, i, y2[i], y[i])
					}
				}
				if trial%4 == 3 {
					if acc == acc {
						t.Fatalf("W=%d sw=%d: a NaN tap, sum %v", W, sw, acc)
					}
					continue
				}
				if acc != acc {
					t.Fatalf("W=%d sw=%d: no NaN, sum %v", W, sw, acc)
				}
				xf := make([]float32, base+2*W)
				copy(xf[base:], x)
				wy, wa := make([]float32, OW), make([]int32, OW)
				maxPoolRow2x2NaN(xf, base, W, sw, wy, wa)
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(wy[i]) || a[i] != wa[i] {
						t.Fatalf("W=%d sw=%d x=%v: [%d] = %v at %d, want %v at %d", W, sw, x, i, y[i], a[i], wy[i], wa[i])
					}
				}
			}
		}
	}
}
