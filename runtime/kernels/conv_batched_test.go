package kernels

import (
	"fmt"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// chunkedCases take the chunked path: pads, strides, dilations, odd sizes,
// 1-D and 3-D, and the two cnn-fmnist convolutions.
var chunkedCases = []ConvShape{
	{N: 5, C: 3, M: 4, In: []int{6, 5}, Kernel: []int{3, 3}, Strides: []int{2, 1}, Pads: []int{1, 1, 1, 1}},
	{N: 7, C: 2, M: 3, In: []int{9, 8}, Kernel: []int{3, 2}, Strides: []int{2, 3}, Dilations: []int{2, 1}, Pads: []int{2, 0, 1, 3}},
	{N: 4, C: 3, M: 5, In: []int{11}, Kernel: []int{4}, Strides: []int{2}, Pads: []int{3, 1}},
	{N: 3, C: 2, M: 2, In: []int{4, 5, 6}, Kernel: []int{2, 3, 2}, Strides: []int{1, 2, 2}, Pads: []int{1, 0, 1, 0, 1, 1}},
	{N: 6, C: 4, M: 3, In: []int{5, 5}, Kernel: []int{1, 1}},
	{N: 9, C: 1, M: 16, In: []int{28, 28}, Kernel: []int{8, 8}, Strides: []int{2, 2}, Pads: []int{2, 2, 2, 2}},
	{N: 9, C: 16, M: 32, In: []int{12, 12}, Kernel: []int{4, 4}, Strides: []int{2, 2}},
}

// TestConvChunked checks the chunked convolution path against the
// per-sample path for several chunk sizes and worker counts (chunks that
// do not divide the batch, more workers than chunks), with and without
// the gather map, and with every subset of the gradients.
func TestConvChunked(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		for ci, sh := range chunkedCases {
			s := sh
			if err := s.Init(); err != nil {
				t.Fatal(err)
			}
			if s.gmap == nil {
				t.Fatalf("case %d: no gather map", ci)
			}
			r := newRand(uint64(3 + ci))
			x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
			dy := randn(r, s.N*s.M*s.T)
			one := make([]float32, s.ColSize()) // per-sample path, one worker
			y0 := make([]float32, len(dy))
			ConvForward(&s, x, w, b, y0, one)
			dx0, dw0 := make([]float32, len(x)), make([]float32, len(w))
			ConvBackward(&s, x, w, dy, dx0, dw0, nil, one)
			for _, gather := range []bool{true, false} {
				sc := s
				if !gather {
					sc.gmap = nil
				}
				for _, nb := range []int{2, 3, s.N} {
					for _, workers := range []int{1, 2, 3} {
						name := fmt.Sprintf("case %d gather %v nb %d workers %d", ci, gather, nb, workers)
						ws := make([]float32, workers*chunkWS(&sc, nb)+(workers-1)*sc.WeightSize())
						for i := range ws {
							ws[i] = float32(i%7) - 3 // stale data must not leak
						}
						y1 := make([]float32, len(dy))
						convForwardChunked(&sc, nb, workers, x, w, b, y1, ws)
						allClose32(t, name+" forward", y1, y0, 1e-5, 1e-5)
						dx1, dw1 := make([]float32, len(x)), make([]float32, len(w))
						for i := range dx1 {
							dx1[i] = 9 // overwritten, not accumulated
						}
						convBackwardChunked(&sc, nb, workers, x, w, dy, dx1, dw1, ws)
						allClose32(t, name+" dx", dx1, dx0, 1e-5, 1e-5)
						allClose32(t, name+" dw", dw1, dw0, 1e-4, 1e-5)
						clear(dw1)
						convBackwardChunked(&sc, nb, workers, x, nil, dy, nil, dw1, ws)
						allClose32(t, name+" dw only", dw1, dw0, 1e-4, 1e-5)
						clear(dx1)
						convBackwardChunked(&sc, nb, workers, nil, w, dy, dx1, nil, ws)
						allClose32(t, name+" dx only", dx1, dx0, 1e-5, 1e-5)
					}
				}
			}
		}
	})
}

// TestConvChunkedSelection checks that ConvForward/ConvBackward take the
// chunked path with the advertised workspace, fall back to fewer workers
// or the per-sample path with less, and agree in every case.
func TestConvChunkedSelection(t *testing.T) {
	defer blas.SetThreads(blas.SetThreads(2))
	s := chunkedCases[5]
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	nb := convBatch(&s)
	if nb < 2 {
		t.Fatalf("convBatch = %d", nb)
	}
	full := ConvWorkspaceSize(&s)
	if _, w := convChunking(&s, full, true); w != 2 {
		t.Fatalf("full workspace: %d workers, want 2", w)
	}
	if _, w := convChunking(&s, chunkWS(&s, nb), true); w != 1 {
		t.Fatalf("one chunk buffer: %d workers, want 1", w)
	}
	if n, _ := convChunking(&s, s.ColSize(), true); n != 0 {
		t.Fatalf("col-sized workspace takes the chunked path (nb %d)", n)
	}
	r := newRand(5)
	x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
	dy := randn(r, s.N*s.M*s.T)
	var ref [3][]float32
	for k, wsLen := range []int{s.ColSize(), chunkWS(&s, nb), full} {
		ws := make([]float32, wsLen)
		y, dx, dw, db := make([]float32, len(dy)), make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
		ConvForward(&s, x, w, b, y, ws)
		ConvBackward(&s, x, w, dy, dx, dw, db, ws)
		if k == 0 {
			ref = [3][]float32{y, dx, dw}
			continue
		}
		allClose32(t, "y", y, ref[0], 1e-5, 1e-5)
		allClose32(t, "dx", dx, ref[1], 1e-5, 1e-5)
		allClose32(t, "dw", dw, ref[2], 1e-4, 1e-5)
	}
}

// naiveIm2Col is the reference unfolding: every tap of every output
// position, tested against the input bounds.
func naiveIm2Col(s *ConvShape, xi []float32) []float32 {
	g := &s.g
	col := make([]float32, s.D*s.T)
	r := 0
	for c := 0; c < s.C; c++ {
		for kd := 0; kd < g.k[0]; kd++ {
			for kh := 0; kh < g.k[1]; kh++ {
				for kw := 0; kw < g.k[2]; kw++ {
					t := 0
					for od := 0; od < g.out[0]; od++ {
						for oh := 0; oh < g.out[1]; oh++ {
							for ow := 0; ow < g.out[2]; ow++ {
								id := od*g.s[0] - g.pb[0] + kd*g.d[0]
								ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
								iw := ow*g.s[2] - g.pb[2] + kw*g.d[2]
								if id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2] {
									col[r*s.T+t] = xi[c*s.InSize+(id*g.in[1]+ih)*g.in[2]+iw]
								}
								t++
							}
						}
					}
					r++
				}
			}
		}
	}
	return col
}

// TestUnfoldPaths checks im2colLd (rows clipped per kernel column, short
// and long rows, unit and other strides, kernels wider than its range
// cache) and the chunked path's gather and scatter against the brute-force
// unfolding and its adjoint.
func TestUnfoldPaths(t *testing.T) {
	shapes := append([]ConvShape{
		{N: 1, C: 2, M: 1, In: []int{40}, Kernel: []int{20}, Pads: []int{5, 7}},
		{N: 1, C: 2, M: 1, In: []int{45}, Kernel: []int{19}, Strides: []int{3}, Pads: []int{4, 2}},
		{N: 1, C: 1, M: 1, In: []int{3, 40}, Kernel: []int{2, 3}, Strides: []int{1, 2}, Pads: []int{1, 1, 0, 2}},
		{N: 1, C: 2, M: 1, In: []int{6, 30}, Kernel: []int{3, 5}, Pads: []int{2, 4, 2, 4}},
		{N: 1, C: 1, M: 1, In: []int{7, 9}, Kernel: []int{3, 3}, Dilations: []int{3, 4}, Pads: []int{4, 4, 4, 4}},
		{N: 1, C: 1, M: 1, In: []int{3, 3}, Kernel: []int{3, 3}, Pads: []int{5, 5, 5, 5}},
	}, chunkedCases...)
	// Shapes unfolded by tap classes (tapIm2Col), whether or not their
	// products take them.
	shapes = append(shapes, tapCases...)
	shapes = append(shapes,
		ConvShape{N: 1, C: 5, M: 1, In: []int{4, 4}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		ConvShape{N: 1, C: 3, M: 1, In: []int{2, 2}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		ConvShape{N: 1, C: 2, M: 1, In: []int{4, 5}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}})
	r := newRand(11)
	tapped := 0
	for ci, sh := range shapes {
		s := sh
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		xi := randn(r, s.C*s.InSize)
		want := naiveIm2Col(&s, xi)
		got := make([]float32, s.D*s.T)
		Im2Col(&s, xi, 0, got)
		allClose32(t, fmt.Sprintf("case %d Im2Col", ci), got, want, 0, 0)
		// Im2ColPlane with a plane full of garbage (as left by another
		// shape) and a column buffer full of garbage.
		plane := make([]float32, s.PlaneSize()+5)
		for i := range plane {
			plane[i] = 7
		}
		for i := range got {
			got[i] = -3
		}
		Im2ColPlane(&s, xi, 0, got, plane)
		allClose32(t, fmt.Sprintf("case %d Im2ColPlane", ci), got, want, 0, 0)
		if s.taps != nil && s.T < 16 {
			tapped++
		}
		if s.gmap == nil {
			continue
		}
		// Gather with a row stride beyond T, as in a chunk.
		ld := 2*s.T + 3
		col := make([]float32, s.D*ld)
		plane = make([]float32, s.planeSize())
		s.gatherCol(xi, col[s.T:], ld, plane)
		for d := 0; d < s.D; d++ {
			allClose32(t, fmt.Sprintf("case %d gather row %d", ci, d), col[d*ld+s.T:d*ld+2*s.T], want[d*s.T:(d+1)*s.T], 0, 0)
		}
		// Scatter is the adjoint: it matches Col2Im bit for bit.
		c := randn(r, s.D*s.T)
		for d := 0; d < s.D; d++ {
			copy(col[d*ld+s.T:], c[d*s.T:(d+1)*s.T])
		}
		dx0, dx1 := make([]float32, len(xi)), make([]float32, len(xi))
		Col2Im(&s, c, 0, dx0)
		for i := range dx1 {
			dx1[i] = 5 // overwritten
		}
		s.scatterCol(col[s.T:], ld, dx1, plane)
		allClose32(t, fmt.Sprintf("case %d scatter", ci), dx1, dx0, 0, 0)
		for i, v := range plane {
			if v != 0 {
				t.Fatalf("case %d: scatter left plane[%d] = %g", ci, i, v)
			}
		}
	}
	if tapped < len(tapCases)+2 {
		t.Errorf("%d shapes unfolded by tap classes, want at least %d", tapped, len(tapCases)+2)
	}
}

// TestChunkedAllocs bounds the per-call heap allocations of the chunked
// convolution and the pooling fast paths with two workers: closures only,
// never buffers, and no more with a larger batch. It runs on the pure-Go
// BLAS: the OpenBLAS call wrapper allocates once per GEMM (one per chunk).
func TestChunkedAllocs(t *testing.T) {
	defer blas.SetThreads(blas.SetThreads(2))
	prev, err := blas.SetBackend(blas.Go)
	if err != nil {
		t.Fatal(err)
	}
	defer blas.SetBackend(prev)
	r := newRand(41)
	for _, n := range []int{8, 64} {
		s := chunkedCases[5]
		s.N = n
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		x, w, b := randn(r, s.N*s.C*s.InSize), randn(r, s.M*s.D), randn(r, s.M)
		y, dy := make([]float32, s.N*s.M*s.T), randn(r, s.N*s.M*s.T)
		dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.M)
		ws := make([]float32, ConvWorkspaceSize(&s))
		p := PoolShape{N: n, C: 16, In: []int{13, 13}, Kernel: []int{2, 2}, Strides: []int{1, 1}}
		if err := p.Init(); err != nil {
			t.Fatal(err)
		}
		px := randn(r, p.N*p.C*p.InSize)
		py, am, pdx := make([]float32, p.N*p.C*p.T), make([]int32, p.N*p.C*p.T), make([]float32, len(px))
		for _, c := range []struct {
			name string
			f    func()
		}{
			{"ConvForward", func() { ConvForward(&s, x, w, b, y, ws) }},
			{"ConvBackward", func() { ConvBackward(&s, x, w, dy, dx, dw, db, ws) }},
			{"MaxPoolForward", func() { MaxPoolForward(&p, px, py, am) }},
			{"MaxPoolBackward", func() { MaxPoolBackward(&p, py, am, pdx) }},
			{"Tanh", func() { Unary(Tanh, px, px) }},
		} {
			if a := testing.AllocsPerRun(5, c.f); a > 4 {
				t.Errorf("batch %d %s: %.0f allocs/call", n, c.name, a)
			}
		}
	}
}
