package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// naiveConv is the direct-loop reference convolution, in float64, for
// shapes already validated by Init (it uses the 3-D lifted geometry).
func naiveConv(s *ConvShape, x, w, bias []float32) []float64 {
	g := &s.g
	y := make([]float64, s.N*s.M*s.T)
	cg, mg := s.C/s.Group, s.M/s.Group
	for n := 0; n < s.N; n++ {
		for m := 0; m < s.M; m++ {
			grp := m / mg
			for od := 0; od < g.out[0]; od++ {
				for oh := 0; oh < g.out[1]; oh++ {
					for ow := 0; ow < g.out[2]; ow++ {
						var acc float64
						if bias != nil {
							acc = float64(bias[m])
						}
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
										xv := x[((n*s.C+ci)*g.in[0]+id)*g.in[1]*g.in[2]+ih*g.in[2]+iw]
										wv := w[((m*cg+c)*g.k[0]+kd)*g.k[1]*g.k[2]+kh*g.k[2]+kw]
										acc += float64(xv) * float64(wv)
									}
								}
							}
						}
						y[((n*s.M+m)*g.out[0]+od)*g.out[1]*g.out[2]+oh*g.out[2]+ow] = acc
					}
				}
			}
		}
	}
	return y
}

var convCases = []ConvShape{
	{N: 2, C: 3, M: 4, In: []int{7, 6}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
	{N: 3, C: 4, M: 6, Group: 2, In: []int{9, 8}, Kernel: []int{3, 2}, Strides: []int{2, 3}, Pads: []int{0, 1, 2, 1}},
	{N: 2, C: 2, M: 3, In: []int{10, 9}, Kernel: []int{3, 3}, Dilations: []int{2, 3}, Pads: []int{2, 0, 1, 3}},
	{N: 2, C: 6, M: 6, Group: 6, In: []int{7, 7}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}}, // depthwise
	{N: 2, C: 4, M: 5, In: []int{5, 6}, Kernel: []int{1, 1}},                                                          // pointwise fast path
	{N: 2, C: 4, M: 2, Group: 2, In: []int{5, 6}, Kernel: []int{1, 1}},
	{N: 1, C: 3, M: 4, In: []int{6, 7}, Kernel: []int{1, 1}, Strides: []int{2, 2}},
	{N: 3, C: 2, M: 3, In: []int{11}, Kernel: []int{4}, Strides: []int{3}, Dilations: []int{2}, Pads: []int{2, 1}},         // 1-D
	{N: 2, C: 2, M: 2, In: []int{5, 4, 6}, Kernel: []int{2, 3, 2}, Strides: []int{1, 2, 2}, Pads: []int{1, 0, 1, 0, 1, 1}}, // 3-D
	{N: 5, C: 3, M: 2, In: []int{8, 8}, Kernel: []int{8, 8}},                                                               // kernel = input
	{N: 1, C: 1, M: 1, In: []int{1, 1}, Kernel: []int{1, 1}},
}

func TestConvForwardBackward(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := newRand(1)
		for ci, sh := range convCases {
			s := sh
			if err := s.Init(); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("case %d %+v", ci, s.Out)
			x := randn(r, s.N*s.C*s.InSize)
			w := randn(r, s.M*s.D)
			b := randn(r, s.M)
			y := make([]float32, s.N*s.M*s.T)
			ws := make([]float32, ConvWorkspaceSize(&s))
			ConvForward(&s, x, w, b, y, ws)
			allClose(t, name+" forward", y, naiveConv(&s, x, w, b), 1e-4, 1e-4)

			// Workspace for a single worker only: same results.
			y1 := make([]float32, len(y))
			ConvForward(&s, x, w, b, y1, make([]float32, s.ColSize()))
			allClose32(t, name+" forward 1 worker", y1, y, 1e-5, 1e-5)

			dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
			params := []*param{{"x", x, dx}, {"w", w, dw}, {"b", b, db}}
			gradCheck(t, name, r, params, func() []float32 {
				ConvForward(&s, x, w, b, y, ws)
				return y
			}, func(dy []float32) {
				ConvBackward(&s, x, w, dy, dx, dw, db, ws)
			})
		}
	})
}

func TestIm2ColCol2Im(t *testing.T) {
	r := newRand(2)
	for ci, sh := range convCases {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		xi := randn(r, s.C*s.InSize)
		for g := 0; g < s.Group; g++ {
			col := make([]float32, s.ColSize())
			Im2Col(&s, xi, g, col)
			// Adjointness: <Im2Col(x), c> = <x, Col2Im(c)>.
			c := randn(r, s.ColSize())
			dxi := make([]float32, len(xi))
			Col2Im(&s, c, g, dxi)
			var lhs, rhs float64
			for i := range c {
				lhs += float64(col[i]) * float64(c[i])
			}
			for i := range xi {
				rhs += float64(xi[i]) * float64(dxi[i])
			}
			if d := lhs - rhs; d > 1e-3 || d < -1e-3 {
				t.Fatalf("case %d group %d: Col2Im is not the adjoint of Im2Col: %g vs %g", ci, g, lhs, rhs)
			}
		}
	}
}

// TestConvPerSampleContract checks the identities the DP engine relies on
// (DESIGN §3): with col = Im2Col(x_i) (= a_iᵀ) and dY_i (p×T) the output
// gradient of sample i, the per-sample weight gradient dY_i·colᵀ equals
// ConvBackward on a batch of one, and its squared norm equals the ghost norm
// ⟨a_i a_iᵀ, g_i g_iᵀ⟩ = ⟨colᵀ·col, dY_iᵀ·dY_i⟩.
func TestConvPerSampleContract(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := newRand(30)
		for ci, sh := range convCases {
			s := sh
			if err := s.Init(); err != nil {
				t.Fatal(err)
			}
			x := randn(r, s.N*s.C*s.InSize)
			dy := randn(r, s.N*s.M*s.T)
			w := randn(r, s.M*s.D)
			one := s
			one.N = 1
			if err := one.Init(); err != nil {
				t.Fatal(err)
			}
			mg := s.M / s.Group
			for i := 0; i < s.N; i++ {
				xi := x[i*s.C*s.InSize : (i+1)*s.C*s.InSize]
				dyi := dy[i*s.M*s.T : (i+1)*s.M*s.T]
				ref := make([]float32, s.M*s.D)
				ConvBackward(&one, xi, w, dyi, nil, ref, nil, make([]float32, ConvWorkspaceSize(&one)))
				col := make([]float32, s.ColSize())
				gi := make([]float32, s.M*s.D)
				for g := 0; g < s.Group; g++ {
					Im2Col(&s, xi, g, col)
					dyg := dyi[g*mg*s.T : (g+1)*mg*s.T]
					blas.Sgemm(false, true, mg, s.D, s.T, 1, dyg, s.T, col, s.T, 0, gi[g*mg*s.D:], s.D)
					// Ghost norm of this group.
					aa := make([]float32, s.T*s.T)
					gg := make([]float32, s.T*s.T)
					blas.Sgemm(true, false, s.T, s.T, s.D, 1, col, s.T, col, s.T, 0, aa, s.T)
					blas.Sgemm(true, false, s.T, s.T, mg, 1, dyg, s.T, dyg, s.T, 0, gg, s.T)
					var ghost, direct float64
					for j := range aa {
						ghost += float64(aa[j]) * float64(gg[j])
					}
					for _, v := range gi[g*mg*s.D : (g+1)*mg*s.D] {
						direct += float64(v) * float64(v)
					}
					if !(math.Abs(ghost-direct) <= 1e-3*(1+direct)) { // NaN fails too
						t.Fatalf("case %d sample %d group %d: ghost norm %g, direct %g", ci, i, g, ghost, direct)
					}
				}
				allClose32(t, fmt.Sprintf("case %d sample %d per-sample grad", ci, i), gi, ref, 1e-4, 1e-4)
			}
		}
	})
}

func TestResolveAutoPad(t *testing.T) {
	cases := []struct {
		mode                    string
		in, k, s, d, pads, want []int
	}{
		{"SAME_UPPER", []int{7, 8}, []int{3, 3}, []int{2, 2}, nil, nil, []int{1, 0, 1, 1}},
		{"SAME_LOWER", []int{7, 8}, []int{3, 3}, []int{2, 2}, nil, nil, []int{1, 1, 1, 0}},
		{"SAME_UPPER", []int{5}, []int{3}, nil, []int{2}, nil, []int{2, 2}},
		{"VALID", []int{5}, []int{3}, nil, nil, []int{1, 1}, []int{0, 0}},
		{"NOTSET", []int{5}, []int{3}, nil, nil, []int{1, 2}, []int{1, 2}},
		{"", []int{5, 5}, []int{3, 3}, nil, nil, nil, []int{0, 0, 0, 0}},
	}
	for _, c := range cases {
		got, err := ResolveAutoPad(c.mode, c.in, c.k, c.s, c.d, c.pads)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("%s %v: got %v %v, want %v", c.mode, c.in, got, err, c.want)
		}
		// SAME keeps out = ceil(in/stride).
		if c.mode == "SAME_UPPER" || c.mode == "SAME_LOWER" {
			for i := range c.in {
				s, d := 1, 1
				if c.s != nil {
					s = c.s[i]
				}
				if c.d != nil {
					d = c.d[i]
				}
				o := OutputSize(c.in[i], c.k[i], s, d, got[i], got[len(c.in)+i], false)
				if o != (c.in[i]+s-1)/s {
					t.Fatalf("%s: out %d, want ceil(%d/%d)", c.mode, o, c.in[i], s)
				}
			}
		}
	}
	if _, err := ResolveAutoPad("BOGUS", []int{3}, []int{3}, nil, nil, nil); err == nil {
		t.Fatal("unknown auto_pad accepted")
	}
}

func TestConvShapeErrors(t *testing.T) {
	bad := []ConvShape{
		{N: 1, C: 3, M: 4, Group: 2, In: []int{5, 5}, Kernel: []int{3, 3}},
		{N: 1, C: 2, M: 2, In: []int{2, 2}, Kernel: []int{3, 3}},
		{N: 1, C: 2, M: 2, In: []int{5, 5}, Kernel: []int{3}},
		{N: 1, C: 2, M: 2, In: []int{5, 5, 5, 5}, Kernel: []int{1, 1, 1, 1}},
		{N: 1, C: 2, M: 2, In: []int{5, 5}, Kernel: []int{3, 3}, Pads: []int{-1, 0, 0, 0}},
	}
	for i, s := range bad {
		if err := s.Init(); err == nil {
			t.Fatalf("case %d accepted", i)
		}
	}
}

// TestGatherColAVX512: gatherCol through the AVX-512 gather (where the CPU
// has it) writes exactly what the scalar gather writes, on padded and
// unpadded, strided and dilated shapes whose tap lengths leave tails.
func TestGatherColAVX512(t *testing.T) {
	if !haveGatherAVX512 {
		t.Skip("no AVX-512 here")
	}
	r := newRand(7)
	for _, s := range []ConvShape{
		{N: 1, C: 1, M: 16, In: []int{28, 28}, Kernel: []int{8, 8}, Strides: []int{2, 2}, Pads: []int{2, 2, 2, 2}},
		{N: 1, C: 16, M: 32, In: []int{12, 12}, Kernel: []int{4, 4}, Strides: []int{2, 2}},
		{N: 1, C: 3, M: 4, In: []int{8, 8}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 1, C: 2, M: 4, In: []int{5, 7}, Kernel: []int{2, 3}, Dilations: []int{2, 1}, Pads: []int{0, 1, 1, 0}},
		{N: 1, C: 2, M: 2, In: []int{3, 3}, Kernel: []int{1, 1}},
		// A tap row spanning 29 floats of the 31-wide padded plane:
		// both load masks, the last row's reads at the plane's end.
		{N: 1, C: 2, M: 2, In: []int{10, 29}, Kernel: []int{3, 3}, Strides: []int{1, 2}, Pads: []int{1, 1, 1, 1}},
	} {
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		if s.gmap == nil {
			t.Fatalf("%v: no gather map", s.In)
		}
		// Every case here but the tail-free 8×8 map (T = 64) takes the
		// row permutes (buildPerm).
		if (s.permIdx != nil) != (s.T%16 != 0) {
			t.Fatalf("in %v kernel %v (T %d): row permutes %v", s.In, s.Kernel, s.T, s.permIdx != nil)
		}
		x := randn(r, s.C*s.InSize)
		ld := s.T + 3 // a row stride wider than T, as in a chunk
		got, want := make([]float32, s.D*ld), make([]float32, s.D*ld)
		s.gatherCol(x, got, ld, make([]float32, s.planeSize()))
		haveGatherAVX512 = false // the scalar map, no permutes either
		s.gatherCol(x, want, ld, make([]float32, s.planeSize()))
		haveGatherAVX512 = true
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("in %v kernel %v: col[%d] = %v, want %v", s.In, s.Kernel, i, got[i], want[i])
			}
		}
	}
}

// TestAddTo: addTo (AVX where built) is the scalar dst[j] += src[j], bit
// for bit, on every tail length.
func TestAddTo(t *testing.T) {
	r := newRand(8)
	for n := 0; n < 50; n++ {
		a, b := randn(r, n), randn(r, n)
		want := append([]float32(nil), a...)
		for j := range want {
			want[j] += b[j]
		}
		addTo(a, b)
		for j := range a {
			if math.Float32bits(a[j]) != math.Float32bits(want[j]) {
				t.Fatalf("n=%d: [%d] = %v, want %v", n, j, a[j], want[j])
			}
		}
	}
}
