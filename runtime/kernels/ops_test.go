package kernels

import (
	"fmt"
	"math"
	"testing"
)

func TestSoftmax(t *testing.T) {
	r := newRand(11)
	shape := []int{2, 3, 4}
	for _, axis := range []int{0, 1, 2, -1, -2} {
		a := NormAxis(axis, 3)
		x := randn(r, Numel(shape))
		x[0] += 50 // large logit: the max shift must keep exp finite
		y, ly := make([]float32, len(x)), make([]float32, len(x))
		Softmax(x, shape, axis, y)
		LogSoftmax(x, shape, axis, ly)
		want, lwant := make([]float64, len(x)), make([]float64, len(x))
		for i := range x {
			idx := unravel(i, shape)
			var s float64
			for k := 0; k < shape[a]; k++ {
				j := append([]int{}, idx...)
				j[a] = k
				s += math.Exp(float64(x[bcastIndex(j, shape)]) - 50)
			}
			want[i] = math.Exp(float64(x[i])-50) / s
			lwant[i] = float64(x[i]) - 50 - math.Log(s)
		}
		allClose(t, fmt.Sprint("softmax axis ", axis), y, want, 1e-6, 1e-5)
		allClose(t, fmt.Sprint("logsoftmax axis ", axis), ly, lwant, 1e-5, 1e-5)
		x[0] -= 50
		dx := make([]float32, len(x))
		gradCheck(t, fmt.Sprint("softmax axis ", axis), r, []*param{{"x", x, dx}}, func() []float32 {
			Softmax(x, shape, axis, y)
			return y
		}, func(dy []float32) { SoftmaxBackward(y, dy, shape, axis, dx) })
		gradCheck(t, fmt.Sprint("logsoftmax axis ", axis), r, []*param{{"x", x, dx}}, func() []float32 {
			LogSoftmax(x, shape, axis, ly)
			return ly
		}, func(dy []float32) { LogSoftmaxBackward(ly, dy, shape, axis, dx) })
	}
}

func TestReductions(t *testing.T) {
	r := newRand(12)
	shape := []int{3, 4, 5}
	for _, axes := range [][]int{{0}, {1}, {2}, {-1}, {0, 2}, {-3, -2}, {}, {0, 1, 2}} {
		keep := ReducedShape(shape, axes, true)
		if got := ReducedShape(shape, axes, false); Numel(got) != Numel(keep) || len(got) > len(keep) {
			t.Fatalf("ReducedShape %v: %v vs %v", axes, got, keep)
		}
		name := fmt.Sprint("axes ", axes)
		x := distinct(r, Numel(shape))
		sum, mean, mx := make([]float32, Numel(keep)), make([]float32, Numel(keep)), make([]float32, Numel(keep))
		ReduceSum(x, shape, axes, sum)
		ReduceMean(x, shape, axes, mean)
		ReduceMax(x, shape, axes, mx)
		ws, wm, wx := make([]float64, len(sum)), make([]float64, len(sum)), make([]float64, len(sum))
		for i := range wx {
			wx[i] = math.Inf(-1)
		}
		cnt := Numel(shape) / Numel(keep)
		for i, v := range x {
			j := bcastIndex(unravel(i, shape), keep)
			ws[j] += float64(v)
			wm[j] += float64(v) / float64(cnt)
			wx[j] = math.Max(wx[j], float64(v))
		}
		allClose(t, name+" sum", sum, ws, 1e-4, 1e-5)
		allClose(t, name+" mean", mean, wm, 1e-5, 1e-5)
		allClose(t, name+" max", mx, wx, 0, 0)
		dx := make([]float32, len(x))
		gradCheck(t, name+" sum", r, []*param{{"x", x, dx}}, func() []float32 {
			ReduceSum(x, shape, axes, sum)
			return sum
		}, func(dy []float32) { ReduceSumBackward(dy, shape, axes, dx) })
		gradCheck(t, name+" mean", r, []*param{{"x", x, dx}}, func() []float32 {
			ReduceMean(x, shape, axes, mean)
			return mean
		}, func(dy []float32) { ReduceMeanBackward(dy, shape, axes, dx) })
		wsp := make([]float32, len(mx))
		gradCheck(t, name+" max", r, []*param{{"x", x, dx}}, func() []float32 {
			ReduceMax(x, shape, axes, mx)
			return mx
		}, func(dy []float32) { ReduceMaxBackward(x, shape, axes, mx, dy, dx, wsp) })
	}
	// Ties share the gradient evenly.
	x := []float32{1, 3, 3, 2}
	y := make([]float32, 1)
	ReduceMax(x, []int{4}, nil, y)
	dx := make([]float32, 4)
	ReduceMaxBackward(x, []int{4}, nil, y, []float32{1}, dx, make([]float32, 1))
	allClose32(t, "max ties", dx, []float32{0, 0.5, 0.5, 0}, 0, 0)
}

func TestTranspose(t *testing.T) {
	r := newRand(13)
	for _, c := range []struct{ shape, perm []int }{
		{[]int{2, 3, 4}, []int{0, 2, 1}},
		{[]int{2, 3, 4, 5}, []int{0, 2, 1, 3}}, // attention head split
		{[]int{2, 3, 4}, nil},                  // default: reverse
		{[]int{5, 1, 3}, []int{2, 0, 1}},
		{[]int{7}, []int{0}},
	} {
		x := randn(r, Numel(c.shape))
		os := TransposeShape(c.shape, c.perm)
		y := make([]float32, len(x))
		Transpose(x, c.shape, c.perm, y)
		perm := defaultPerm(c.perm, len(c.shape))
		for i := range y {
			oi := unravel(i, os)
			ii := make([]int, len(oi))
			for a, p := range perm {
				ii[p] = oi[a]
			}
			if y[i] != x[bcastIndex(ii, c.shape)] {
				t.Fatalf("Transpose %v %v wrong at %d", c.shape, c.perm, i)
			}
		}
		back := make([]float32, len(x))
		Transpose(y, os, InversePerm(perm), back)
		allClose32(t, "transpose round trip", back, x, 0, 0)
	}
}

func TestConcat(t *testing.T) {
	r := newRand(14)
	shapes := [][]int{{2, 3, 4}, {2, 1, 4}, {2, 5, 4}}
	for _, axis := range []int{1, -2} {
		xs := make([][]float32, len(shapes))
		for i, s := range shapes {
			xs[i] = randn(r, Numel(s))
		}
		y := make([]float32, 2*9*4)
		Concat(xs, shapes, axis, y)
		for i := range y {
			idx := unravel(i, []int{2, 9, 4})
			k, j := 0, idx[1]
			for j >= shapes[k][1] {
				j -= shapes[k][1]
				k++
			}
			if y[i] != xs[k][(idx[0]*shapes[k][1]+j)*4+idx[2]] {
				t.Fatalf("Concat wrong at %d", i)
			}
		}
		dxs := [][]float32{make([]float32, len(xs[0])), nil, make([]float32, len(xs[2]))}
		ConcatBackward(y, shapes, axis, dxs)
		allClose32(t, "concat back 0", dxs[0], xs[0], 0, 0)
		allClose32(t, "concat back 2", dxs[2], xs[2], 0, 0)
	}
}

func TestSlice(t *testing.T) {
	r := newRand(15)
	const big = math.MaxInt64
	shape := []int{5, 6, 7}
	cases := []struct {
		starts, ends, axes, steps []int64
	}{
		{[]int64{1, 0}, []int64{4, 6}, nil, nil},
		{[]int64{-1}, []int64{-big}, []int64{2}, []int64{-1}},             // reverse an axis
		{[]int64{4, 10}, []int64{0, -10}, []int64{0, 1}, []int64{-2, -3}}, // negative steps, clamped start
		{[]int64{1}, []int64{big}, []int64{-1}, []int64{3}},
		{[]int64{3}, []int64{1}, []int64{0}, []int64{1}}, // empty
		{[]int64{-100}, []int64{100}, []int64{1}, []int64{2}},
	}
	for _, c := range cases {
		start, step, count, err := ResolveSlice(shape, c.starts, c.ends, c.axes, c.steps)
		if err != nil {
			t.Fatal(err)
		}
		// Reference: enumerate indices per axis as numpy would.
		sel := make([][]int, 3)
		for a := range shape {
			for i := 0; i < count[a]; i++ {
				sel[a] = append(sel[a], start[a]+i*step[a])
			}
			for _, v := range sel[a] {
				if v < 0 || v >= shape[a] {
					t.Fatalf("%v: index %d out of range on axis %d", c, v, a)
				}
			}
		}
		x := randn(r, Numel(shape))
		y := make([]float32, Numel(count))
		Slice(x, shape, start, step, count, y)
		for i := range y {
			idx := unravel(i, count)
			src := []int{sel[0][idx[0]], sel[1][idx[1]], sel[2][idx[2]]}
			if y[i] != x[bcastIndex(src, shape)] {
				t.Fatalf("Slice %v wrong at %d", c, i)
			}
		}
		dx := make([]float32, len(x))
		gradCheck(t, fmt.Sprint("slice ", c), r, []*param{{"x", x, dx}}, func() []float32 {
			Slice(x, shape, start, step, count, y)
			return y
		}, func(dy []float32) { SliceBackward(dy, shape, start, step, count, dx) })
	}
	// Known ONNX results: starts -1, ends -INT64_MAX, step -1 reverses.
	_, _, count, _ := ResolveSlice([]int{10}, []int64{-1}, []int64{-big}, nil, []int64{-1})
	if count[0] != 10 {
		t.Fatalf("reverse count %d", count[0])
	}
	if _, _, _, err := ResolveSlice([]int{10}, []int64{0}, []int64{1}, nil, []int64{0}); err == nil {
		t.Fatal("step 0 accepted")
	}
}

func TestGather(t *testing.T) {
	r := newRand(16)
	ds := []int{4, 5, 3}
	for _, axis := range []int{0, 1, -1} {
		for _, ind := range []struct {
			idx   []int64
			shape []int
		}{
			{[]int64{0, -1, 2, 2}, []int{2, 2}}, // repeated and negative
			{[]int64{1}, []int{}},               // scalar index
		} {
			a := NormAxis(axis, 3)
			os := GatherShape(ds, ind.shape, axis)
			x := randn(r, Numel(ds))
			y := make([]float32, Numel(os))
			if err := Gather(x, ds, ind.idx, ind.shape, axis, y); err != nil {
				t.Fatal(err)
			}
			for i := range y {
				oi := unravel(i, os)
				k := bcastIndex(oi[a:a+len(ind.shape)], ind.shape)
				ix := int(ind.idx[k])
				if ix < 0 {
					ix += ds[a]
				}
				src := append(append(append([]int{}, oi[:a]...), ix), oi[a+len(ind.shape):]...)
				if y[i] != x[bcastIndex(src, ds)] {
					t.Fatalf("Gather axis %d wrong at %d", axis, i)
				}
			}
			dx := make([]float32, len(x))
			gradCheck(t, fmt.Sprint("gather ", axis), r, []*param{{"x", x, dx}}, func() []float32 {
				Gather(x, ds, ind.idx, ind.shape, axis, y)
				return y
			}, func(dy []float32) { GatherBackward(dy, ds, ind.idx, ind.shape, axis, dx) })
		}
	}
	if err := Gather(make([]float32, 4), []int{4}, []int64{4}, []int{1}, 0, make([]float32, 1)); err == nil {
		t.Fatal("out-of-range index accepted")
	}
}

func TestPad(t *testing.T) {
	r := newRand(17)
	shape := []int{2, 3, 4}
	// numpy.pad references for a 1-D row [a b c d] with pads (3, 2).
	row := []float32{1, 2, 3, 4}
	for _, c := range []struct {
		mode PadMode
		want []float32
	}{
		{PadConstant, []float32{9, 9, 9, 1, 2, 3, 4, 9, 9}},
		{PadReflect, []float32{4, 3, 2, 1, 2, 3, 4, 3, 2}},
		{PadEdge, []float32{1, 1, 1, 1, 2, 3, 4, 4, 4}},
		{PadWrap, []float32{2, 3, 4, 1, 2, 3, 4, 1, 2}},
	} {
		y := make([]float32, 9)
		Pad(row, []int{4}, []int{3, 2}, c.mode, 9, y)
		allClose32(t, fmt.Sprint("pad mode ", c.mode), y, c.want, 0, 0)
	}
	for _, pads := range [][]int{{0, 1, 2, 1, 0, 1}, {1, -1, 2, 0, 2, -1}, {0, 0, 0, 0, 0, 0}} {
		for _, mode := range []PadMode{PadConstant, PadReflect, PadEdge, PadWrap} {
			x := randn(r, Numel(shape))
			os := PadShape(shape, pads)
			y := make([]float32, Numel(os))
			dx := make([]float32, len(x))
			gradCheck(t, fmt.Sprint("pad ", pads, mode), r, []*param{{"x", x, dx}}, func() []float32 {
				Pad(x, shape, pads, mode, 0.5, y)
				return y
			}, func(dy []float32) { PadBackward(dy, shape, pads, mode, dx) })
		}
	}
	if _, err := ParsePadMode("bogus"); err == nil {
		t.Fatal("bad mode accepted")
	}
}

func naiveMatMul(s *MatMulShape, a, b []float32) []float64 {
	y := make([]float64, s.Batch*s.M*s.N)
	for q := 0; q < s.Batch; q++ {
		for i := 0; i < s.M; i++ {
			for j := 0; j < s.N; j++ {
				var acc float64
				for p := 0; p < s.K; p++ {
					acc += float64(a[s.aOff[q]+i*s.K+p]) * float64(b[s.bOff[q]+p*s.N+j])
				}
				y[(q*s.M+i)*s.N+j] = acc
			}
		}
	}
	return y
}

func TestMatMul(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := newRand(18)
		for _, c := range [][2][]int{
			{{3, 4}, {4, 5}},
			{{2, 7, 3}, {3, 4}},          // shared weight: flattened
			{{2, 7, 3}, {2, 3, 4}},       // uniform batch
			{{3, 4}, {2, 4, 5}},          // shared left operand
			{{2, 1, 3, 4}, {1, 3, 4, 2}}, // broadcast both ways
			{{4}, {4, 3}},                // 1-D left
			{{2, 3, 4}, {4}},             // 1-D right
			{{4}, {4}},                   // dot
			{{2, 2, 5, 3}, {2, 2, 3, 5}}, // attention scores
		} {
			s := MatMulShape{A: c[0], B: c[1]}
			if err := s.Init(); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprint("matmul ", c[0], c[1], " → ", s.Out)
			a, b := randn(r, Numel(s.A)), randn(r, Numel(s.B))
			y := make([]float32, Numel(s.Out))
			MatMul(&s, a, b, y)
			allClose(t, name, y, naiveMatMul(&s, a, b), 1e-5, 1e-5)
			da, db := make([]float32, len(a)), make([]float32, len(b))
			gradCheck(t, name, r, []*param{{"a", a, da}, {"b", b, db}}, func() []float32 {
				MatMul(&s, a, b, y)
				return y
			}, func(dy []float32) { MatMulBackward(&s, a, b, dy, da, db) })
		}
		bad := MatMulShape{A: []int{2, 3}, B: []int{4, 5}}
		if bad.Init() == nil {
			t.Fatal("mismatched inner dims accepted")
		}
	})
}

func TestGemm(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		r := newRand(19)
		m, n, k := 3, 5, 4
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, cs := range [][]int{{n}, {m, n}, {m, 1}, {1}, nil} {
				ta, tb := tr[0], tr[1]
				a, b := randn(r, m*k), randn(r, k*n)
				var c []float32
				if cs != nil {
					c = randn(r, Numel(cs))
				}
				alpha, beta := float32(0.7), float32(1.3)
				y := make([]float32, m*n)
				Gemm(ta, tb, m, n, k, alpha, a, b, beta, c, cs, y)
				want := make([]float64, m*n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var acc float64
						for p := 0; p < k; p++ {
							av := a[i*k+p]
							if ta {
								av = a[p*m+i]
							}
							bv := b[p*n+j]
							if tb {
								bv = b[j*k+p]
							}
							acc += float64(av) * float64(bv)
						}
						want[i*n+j] = float64(alpha) * acc
						if c != nil {
							want[i*n+j] += float64(beta) * float64(c[bcastIndex([]int{i, j}, cs)])
						}
					}
				}
				name := fmt.Sprint("gemm ", tr, cs)
				allClose(t, name, y, want, 1e-5, 1e-5)
				da, db := make([]float32, len(a)), make([]float32, len(b))
				params := []*param{{"a", a, da}, {"b", b, db}}
				var dc []float32
				if c != nil {
					dc = make([]float32, len(c))
					params = append(params, &param{"c", c, dc})
				}
				gradCheck(t, name, r, params, func() []float32 {
					Gemm(ta, tb, m, n, k, alpha, a, b, beta, c, cs, y)
					return y
				}, func(dy []float32) { GemmBackward(ta, tb, m, n, k, alpha, a, b, beta, cs, dy, da, db, dc) })
			}
		}
	})
}

func TestNormalizations(t *testing.T) {
	r := newRand(20)
	n, c, sp := 3, 6, 5
	const eps = 1e-5
	for _, groups := range []int{1, 2, 3, 6} {
		x := randn(r, n*c*sp)
		for i := range x {
			x[i] += 3 // offset mean: exercises the two-pass variance
		}
		scale, bias := randn(r, c), randn(r, c)
		y := make([]float32, len(x))
		mean, inv := make([]float32, n*groups), make([]float32, n*groups)
		GroupNormForward(x, n, c, sp, groups, scale, bias, eps, y, mean, inv)
		cg := c / groups
		want := make([]float64, len(x))
		for i := 0; i < n; i++ {
			for g := 0; g < groups; g++ {
				seg := x[(i*c+g*cg)*sp : (i*c+(g+1)*cg)*sp]
				var mu, v float64
				for _, e := range seg {
					mu += float64(e)
				}
				mu /= float64(len(seg))
				for _, e := range seg {
					v += (float64(e) - mu) * (float64(e) - mu)
				}
				v /= float64(len(seg))
				for j, e := range seg {
					ch := g*cg + j/sp
					want[(i*c+g*cg)*sp+j] = (float64(e)-mu)/math.Sqrt(v+eps)*float64(scale[ch]) + float64(bias[ch])
				}
			}
		}
		name := fmt.Sprint("groupnorm groups ", groups)
		allClose(t, name, y, want, 1e-4, 1e-4)
		dx, ds, db := make([]float32, len(x)), make([]float32, c), make([]float32, c)
		gradCheck(t, name, r, []*param{{"x", x, dx}, {"scale", scale, ds}, {"bias", bias, db}}, func() []float32 {
			GroupNormForward(x, n, c, sp, groups, scale, bias, eps, y, mean, inv)
			return y
		}, func(dy []float32) { GroupNormBackward(x, n, c, sp, groups, scale, mean, inv, dy, dx, ds, db) })

		// Per-sample parameter gradients sum to the batch gradient and
		// match a batch of one.
		dy := randn(r, len(x))
		GroupNormForward(x, n, c, sp, groups, scale, bias, eps, y, mean, inv)
		GroupNormBackward(x, n, c, sp, groups, scale, mean, inv, dy, nil, ds, db)
		pds, pdb := make([]float32, n*c), make([]float32, n*c)
		NormParamGrads(x, n, groups, cg, sp, mean, inv, dy, n, pds, pdb)
		for ch := 0; ch < c; ch++ {
			var s1, s2 float64
			for i := 0; i < n; i++ {
				s1 += float64(pds[i*c+ch])
				s2 += float64(pdb[i*c+ch])
			}
			allClose(t, name+" per-sample sum", []float32{ds[ch], db[ch]}, []float64{s1, s2}, 1e-4, 1e-4)
		}
		one := make([]float32, c)
		GroupNormBackward(x[c*sp:2*c*sp], 1, c, sp, groups, scale, mean[groups:], inv[groups:], dy[c*sp:2*c*sp], nil, one, nil)
		allClose32(t, name+" per-sample = batch of one", pds[c:2*c], one, 1e-5, 1e-5)
	}

	// InstanceNorm = GroupNorm with one channel per group.
	x := randn(r, n*c*sp)
	scale, bias := randn(r, c), randn(r, c)
	y1, y2 := make([]float32, len(x)), make([]float32, len(x))
	m1, i1 := make([]float32, n*c), make([]float32, n*c)
	InstanceNormForward(x, n, c, sp, scale, bias, eps, y1, m1, i1)
	GroupNormForward(x, n, c, sp, c, scale, bias, eps, y2, m1, i1)
	allClose32(t, "instancenorm", y1, y2, 0, 0)
	dx, ds, db := make([]float32, len(x)), make([]float32, c), make([]float32, c)
	gradCheck(t, "instancenorm", r, []*param{{"x", x, dx}, {"scale", scale, ds}, {"bias", bias, db}}, func() []float32 {
		InstanceNormForward(x, n, c, sp, scale, bias, eps, y1, m1, i1)
		return y1
	}, func(dy []float32) { InstanceNormBackward(x, n, c, sp, scale, m1, i1, dy, dx, ds, db) })
}

func TestLayerNorm(t *testing.T) {
	r := newRand(21)
	outer, size := 6, 8
	const eps = 1e-6
	x := randn(r, outer*size)
	scale, bias := randn(r, size), randn(r, size)
	y := make([]float32, len(x))
	mean, inv := make([]float32, outer), make([]float32, outer)
	LayerNormForward(x, outer, size, scale, bias, eps, y, mean, inv)
	want := make([]float64, len(x))
	for o := 0; o < outer; o++ {
		row := x[o*size : (o+1)*size]
		var mu, v float64
		for _, e := range row {
			mu += float64(e)
		}
		mu /= float64(size)
		for _, e := range row {
			v += (float64(e) - mu) * (float64(e) - mu)
		}
		v /= float64(size)
		allClose(t, "layernorm mean/invstd", []float32{mean[o], inv[o]}, []float64{mu, 1 / math.Sqrt(v+eps)}, 1e-5, 1e-5)
		for j, e := range row {
			want[o*size+j] = (float64(e)-mu)/math.Sqrt(v+eps)*float64(scale[j]) + float64(bias[j])
		}
	}
	allClose(t, "layernorm", y, want, 1e-5, 1e-4)
	dx, ds, db := make([]float32, len(x)), make([]float32, size), make([]float32, size)
	gradCheck(t, "layernorm", r, []*param{{"x", x, dx}, {"scale", scale, ds}, {"bias", bias, db}}, func() []float32 {
		LayerNormForward(x, outer, size, scale, bias, eps, y, mean, inv)
		return y
	}, func(dy []float32) { LayerNormBackward(x, outer, size, scale, mean, inv, dy, dx, ds, db) })
	// Without the optional Mean/InvStdDev outputs.
	y2 := make([]float32, len(y))
	LayerNormForward(x, outer, size, scale, bias, eps, y, mean, inv)
	LayerNormForward(x, outer, size, scale, bias, eps, y2, nil, nil)
	allClose32(t, "layernorm without stats", y2, y, 0, 0)
	// Without affine parameters.
	gradCheck(t, "layernorm no affine", r, []*param{{"x", x, dx}}, func() []float32 {
		LayerNormForward(x, outer, size, nil, nil, eps, y, mean, inv)
		return y
	}, func(dy []float32) { LayerNormBackward(x, outer, size, nil, mean, inv, dy, dx, nil, nil) })
}

func TestBatchNorm(t *testing.T) {
	r := newRand(22)
	n, c, sp := 4, 3, 5
	const eps = 1e-5
	x := randn(r, n*c*sp)
	scale, bias := randn(r, c), randn(r, c)
	rm, rv := randn(r, c), randn(r, c)
	for i := range rv {
		rv[i] = float32(math.Abs(float64(rv[i]))) + 0.5
	}
	y := make([]float32, len(x))
	BatchNormInference(x, n, c, sp, scale, bias, rm, rv, eps, y)
	for i, v := range x {
		ch := (i / sp) % c
		w := (float64(v)-float64(rm[ch]))/math.Sqrt(float64(rv[ch])+eps)*float64(scale[ch]) + float64(bias[ch])
		if !(math.Abs(float64(y[i])-w) <= 1e-5*(1+math.Abs(w))) { // NaN fails too
			t.Fatalf("batchnorm inference [%d] = %v, want %v", i, y[i], w)
		}
	}
	dx, ds, db := make([]float32, len(x)), make([]float32, c), make([]float32, c)
	gradCheck(t, "batchnorm inference", r, []*param{{"x", x, dx}, {"scale", scale, ds}, {"bias", bias, db}}, func() []float32 {
		BatchNormInference(x, n, c, sp, scale, bias, rm, rv, eps, y)
		return y
	}, func(dy []float32) { BatchNormInferenceBackward(x, n, c, sp, scale, rm, rv, eps, dy, dx, ds, db) })

	for _, unbiased := range []bool{false, true} {
		opt := BatchNormTrainOptions{Epsilon: eps, Momentum: 0.9, UnbiasedRunningVar: unbiased}
		nm, nv, sm, si := make([]float32, c), make([]float32, c), make([]float32, c), make([]float32, c)
		BatchNormTrainForward(x, n, c, sp, scale, bias, rm, rv, opt, y, nm, nv, sm, si)
		cnt := n * sp
		for ch := 0; ch < c; ch++ {
			var mu, v float64
			for i := 0; i < n; i++ {
				for _, e := range x[(i*c+ch)*sp : (i*c+ch+1)*sp] {
					mu += float64(e)
				}
			}
			mu /= float64(cnt)
			for i := 0; i < n; i++ {
				for _, e := range x[(i*c+ch)*sp : (i*c+ch+1)*sp] {
					v += (float64(e) - mu) * (float64(e) - mu)
				}
			}
			rvv := v / float64(cnt)
			if unbiased {
				rvv = v / float64(cnt-1)
			}
			v /= float64(cnt)
			allClose(t, "batchnorm running stats", []float32{nm[ch], nv[ch], sm[ch], si[ch]},
				[]float64{float64(rm[ch])*0.9 + mu*0.1, float64(rv[ch])*0.9 + rvv*0.1, mu, 1 / math.Sqrt(v+eps)}, 1e-5, 1e-5)
			for i := 0; i < n; i++ {
				for j, e := range x[(i*c+ch)*sp : (i*c+ch+1)*sp] {
					w := (float64(e)-mu)/math.Sqrt(v+eps)*float64(scale[ch]) + float64(bias[ch])
					if g := y[(i*c+ch)*sp+j]; math.Abs(float64(g)-w) > 1e-4 {
						t.Fatalf("batchnorm training y = %v, want %v", g, w)
					}
				}
			}
		}
	}
	opt := BatchNormTrainOptions{Epsilon: eps, Momentum: 0.9}
	sm, si := make([]float32, c), make([]float32, c)
	gradCheck(t, "batchnorm training", r, []*param{{"x", x, dx}, {"scale", scale, ds}, {"bias", bias, db}}, func() []float32 {
		BatchNormTrainForward(x, n, c, sp, scale, bias, rm, rv, opt, y, nil, nil, sm, si)
		return y
	}, func(dy []float32) { BatchNormTrainBackward(x, n, c, sp, scale, sm, si, dy, dx, ds, db) })
}

func TestSoftmaxCrossEntropy(t *testing.T) {
	r := newRand(23)
	n, k := 5, 7
	logits := randn(r, n*k)
	logits[3] += 80 // stability
	labels := []int64{0, 6, 3, 3, 1}
	w := []float32{1, 0.5, 0, 2, 0.25}
	loss := make([]float32, n)
	if err := SoftmaxCrossEntropy(logits, n, k, labels, loss); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, n)
	for i := 0; i < n; i++ {
		row := logits[i*k : (i+1)*k]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		want[i] = mx + math.Log(s) - float64(row[labels[i]])
	}
	allClose(t, "ce loss", loss, want, 1e-5, 1e-5)
	logits[3] -= 80
	d := make([]float32, n*k)
	// Weighted sum of losses: use a one-output "forward" Σ w_i loss_i.
	total := make([]float32, 1)
	gradCheckTol(t, "ce grad", r, []*param{{"logits", logits, d}}, func() []float32 {
		SoftmaxCrossEntropy(logits, n, k, labels, loss)
		var s float64
		for i, v := range loss {
			s += float64(w[i]) * float64(v)
		}
		total[0] = float32(s)
		return total
	}, func(dy []float32) {
		scaled := make([]float32, n)
		for i := range scaled {
			scaled[i] = w[i] * dy[0]
		}
		if err := SoftmaxCrossEntropyBackward(logits, n, k, labels, scaled, d); err != nil {
			t.Fatal(err)
		}
	}, 1e-2, 2e-3, 2e-2)
	if err := SoftmaxCrossEntropy(logits, n, k, []int64{0, 1, 2, 3, 7}, loss); err == nil {
		t.Fatal("out-of-range label accepted")
	}
}
