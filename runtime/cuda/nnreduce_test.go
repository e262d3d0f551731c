//go:build linux && (amd64 || arm64)

package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// graphCase is one GraphOps operation (or a forward and its backward)
// under test: run applies it through ops (runtime.CPU, reference.Device
// or the CUDA Device) to inputs placed by p and returns the outputs.
type graphCase struct {
	name string
	// tol is relative to max(1, |want|); against the reference backend,
	// which sums in float64 as the kernels do, and against the CPU,
	// which sums in float32 in places.
	tol float64
	run func(ops any, p *placer) [][]float32
}

// stale returns n elements holding a value no operation writes, so that
// an output left unwritten shows.
func stale(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 1234
	}
	return x
}

// uniform returns n values in [lo, hi).
func uniform(r *rand.Rand, n int, lo, hi float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return x
}

// fetchAll fetches outputs placed by p (nil stays nil).
func fetchAll(p *placer, outs ...[]float32) [][]float32 {
	res := make([][]float32, len(outs))
	for i, o := range outs {
		if o != nil {
			res[i] = fetch(p, o)
		}
	}
	return res
}

func nnCases() []graphCase {
	rng := rand.New(rand.NewSource(11))
	const tol = 1e-4
	var cases []graphCase
	add := func(name string, tol float64, run func(o runtime.NNOps, p *placer) [][]float32) {
		cases = append(cases, graphCase{name, tol, func(ops any, p *placer) [][]float32 { return run(ops.(runtime.NNOps), p) }})
	}
	convs := []runtime.ConvShape{
		{N: 2, C: 3, M: 4, Group: 1, In: []int{7, 6}, Kernel: []int{3, 3}},
		{N: 2, C: 4, M: 6, Group: 2, In: []int{9, 8}, Kernel: []int{3, 2}, Strides: []int{2, 1}, Dilations: []int{1, 2}, Pads: []int{1, 0, 2, 1}},
		{N: 1, C: 6, M: 6, Group: 6, In: []int{10, 10}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}},
		{N: 3, C: 2, M: 3, Group: 1, In: []int{11}, Kernel: []int{4}, Strides: []int{3}, Dilations: []int{2}, Pads: []int{2, 3}},
		{N: 1, C: 2, M: 2, Group: 1, In: []int{4, 5, 3}, Kernel: []int{2, 3, 2}, Pads: []int{1, 1, 0, 0, 1, 1}},
		{N: 2, C: 8, M: 4, Group: 1, In: []int{1, 1}, Kernel: []int{1, 1}},
		{N: 2, C: 3, M: 5, Group: 1, In: []int{17, 19}, Kernel: []int{5, 5}, Strides: []int{2, 3}, Pads: []int{2, 2, 2, 2}},
		// Shapes the GEMM path takes (convByGEMM), padded alike at both
		// ends so that cuDNN takes them too: its rival (TestConvPathOnFake).
		{N: 2, C: 4, M: 8, Group: 1, In: []int{6, 5}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 3, C: 16, M: 8, Group: 1, In: []int{3, 4}, Kernel: []int{1, 1}},
		// Rows longer than a warp's segment of the unfolding (unfoldSeg),
		// ending inside one.
		{N: 2, C: 2, M: 3, Group: 1, In: []int{36, 40}, Kernel: []int{3, 3}, Pads: []int{1, 1, 1, 1}},
		{N: 1, C: 2, M: 2, Group: 1, In: []int{2100}, Kernel: []int{3}, Pads: []int{1, 1}},
	}
	for i := range convs {
		s := &convs[i]
		if err := s.Init(); err != nil {
			panic(err)
		}
		In, T := numel(s.In), numel(s.Out)
		x := uniform(rng, s.N*s.C*In, -1, 1)
		w := uniform(rng, s.M*s.C/s.Group*numel(s.Kernel), -1, 1)
		b, cb := uniform(rng, s.M, -1, 1), uniform(rng, s.C, -1, 1)
		dy, dyT := uniform(rng, s.N*s.M*T, -1, 1), uniform(rng, s.N*s.C*In, -1, 1)
		name := fmt.Sprintf("N%d C%d M%d G%d in%v k%v s%v d%v p%v", s.N, s.C, s.M, s.Group, s.In, s.Kernel, s.Strides, s.Dilations, s.Pads)
		add("Conv/"+name, tol, func(o runtime.NNOps, p *placer) [][]float32 {
			ws := make([]float32, o.ConvScratchSize(s))
			px, pw, pdy := place(p, x), place(p, w), place(p, dy)
			y, dx, dw, db, y0 := place(p, stale(s.N*s.M*T)), place(p, stale(len(x))), place(p, stale(len(w))), place(p, stale(s.M)), place(p, stale(s.N*s.M*T))
			o.Conv(s, px, pw, place(p, b), y, ws)
			o.ConvBackward(s, px, pw, pdy, dx, dw, db, ws)
			o.Conv(s, px, pw, nil, y0, ws)
			dx2 := place(p, stale(len(x)))
			o.ConvBackward(s, px, pw, pdy, dx2, nil, nil, ws)
			return fetchAll(p, y, dx, dw, db, y0, dx2)
		})
		add("ConvTranspose/"+name, tol, func(o runtime.NNOps, p *placer) [][]float32 {
			ws := make([]float32, o.ConvScratchSize(s))
			px, pw, pdy := place(p, dy), place(p, w), place(p, dyT)
			y, dx, dw, db := place(p, stale(len(dyT))), place(p, stale(len(dy))), place(p, stale(len(w))), place(p, stale(s.C))
			o.ConvTranspose(s, px, pw, place(p, cb), y, ws)
			o.ConvTransposeBackward(s, px, pw, pdy, dx, dw, db, ws)
			return fetchAll(p, y, dx, dw, db)
		})
	}
	pools := []runtime.PoolShape{
		{N: 2, C: 3, In: []int{7, 6}, Kernel: []int{3, 3}, Strides: []int{2, 2}},
		{N: 1, C: 2, In: []int{8, 9}, Kernel: []int{3, 2}, Strides: []int{2, 2}, Pads: []int{1, 0, 1, 1}, CeilMode: true},
		{N: 1, C: 2, In: []int{8, 9}, Kernel: []int{3, 3}, Strides: []int{2, 2}, Pads: []int{1, 1, 1, 1}, CeilMode: true, CountIncludePad: true},
		{N: 2, C: 2, In: []int{6, 6}, Kernel: []int{2, 2}, Strides: []int{2, 2}},
		{N: 2, C: 1, In: []int{9, 7}, Kernel: []int{2, 2}, Dilations: []int{2, 1}, Pads: []int{1, 1, 0, 0}},
		{N: 2, C: 2, In: []int{10}, Kernel: []int{3}, Strides: []int{2}, Pads: []int{1, 1}, CountIncludePad: true},
		{N: 1, C: 2, In: []int{4, 5, 6}, Kernel: []int{2, 3, 2}, Strides: []int{1, 2, 2}, Pads: []int{0, 1, 0, 1, 1, 0}},
		{N: 3, C: 4, In: []int{20, 20}, Kernel: []int{3, 3}, Strides: []int{1, 1}, Pads: []int{1, 1, 1, 1}},
	}
	for i := range pools {
		s := &pools[i]
		if err := s.Init(); err != nil {
			panic(err)
		}
		In, T := numel(s.In), numel(s.Out)
		x, dy := uniform(rng, s.N*s.C*In, -1, 1), uniform(rng, s.N*s.C*T, -1, 1)
		if len(x) > 20 {
			x[7] = x[8] // a tie: the first wins
			x[13] = float32(math.NaN())
		}
		name := fmt.Sprintf("N%d C%d in%v k%v s%v d%v p%v ceil=%v incl=%v", s.N, s.C, s.In, s.Kernel, s.Strides, s.Dilations, s.Pads, s.CeilMode, s.CountIncludePad)
		add("MaxPool/"+name, 1e-6, func(o runtime.NNOps, p *placer) [][]float32 {
			px, pdy := place(p, x), place(p, dy)
			y, dx, dx2, y0 := place(p, stale(s.N*s.C*T)), place(p, stale(len(x))), place(p, stale(len(x))), place(p, stale(s.N*s.C*T))
			arg := place(p, make([]int32, s.N*s.C*T))
			o.MaxPool(s, px, y, arg)
			o.MaxPoolBackward(s, pdy, arg, dx)
			o.MaxPoolBackwardFromOutput(s, px, y, pdy, dx2)
			o.MaxPool(s, px, y0, nil)
			out := fetchAll(p, y, dx, dx2, y0)
			for _, a := range fetch(p, arg) {
				out = append(out, []float32{float32(a)})
			}
			return out
		})
		add("AveragePool/"+name, 1e-6, func(o runtime.NNOps, p *placer) [][]float32 {
			y, dx := place(p, stale(s.N*s.C*T)), place(p, stale(len(x)))
			xx := append([]float32(nil), x...)
			if len(xx) > 20 {
				xx[13] = 0.5
			}
			o.AveragePool(s, place(p, xx), y)
			o.AveragePoolBackward(s, place(p, dy), dx)
			return fetchAll(p, y, dx)
		})
	}
	// 300×40: more elements than the emulation's capped grid has threads
	// (32 blocks of 256), so that the grid-stride loops go round.
	for _, sz := range [][2]int{{6, 50}, {300, 7}, {1, 1}, {300, 40}} {
		planes, L := sz[0], sz[1]
		x, dy := uniform(rng, planes*L, -1, 1), uniform(rng, planes, -1, 1)
		if planes*L > 20 {
			x[3] = x[4]
			x[L+5] = float32(math.NaN())
		}
		add(fmt.Sprint("GlobalPools/", planes, "x", L), 1e-5, func(o runtime.NNOps, p *placer) [][]float32 {
			px, pdy := place(p, x), place(p, dy)
			ya, dxa, ym, dxm := place(p, stale(planes)), place(p, stale(planes*L)), place(p, stale(planes)), place(p, stale(planes*L))
			arg := place(p, make([]int32, planes))
			o.GlobalAveragePool(planes, L, px, ya)
			o.GlobalAveragePoolBackward(planes, L, pdy, dxa)
			o.GlobalMaxPool(planes, L, px, ym, arg)
			o.GlobalMaxPoolBackward(planes, L, pdy, arg, dxm)
			out := fetchAll(p, ya, dxa, ym, dxm)
			for _, a := range fetch(p, arg) {
				out = append(out, []float32{float32(a)})
			}
			return out
		})
	}
	for _, training := range []bool{false, true} {
		for _, sh := range [][3]int{{3, 4, 10}, {2, 300, 3}} {
			s := &runtime.BatchNormShape{N: sh[0], C: sh[1], S: sh[2], Epsilon: 1e-5, Momentum: 0.9, Training: training}
			n := s.N * s.C * s.S
			x, dy := uniform(rng, n, -1, 1), uniform(rng, n, -1, 1)
			scale, bias, rm, rv := uniform(rng, s.C, -1, 1), uniform(rng, s.C, -1, 1), uniform(rng, s.C, -1, 1), uniform(rng, s.C, 0.5, 1.5)
			add(fmt.Sprint("BatchNorm/training=", training, sh), tol, func(o runtime.NNOps, p *placer) [][]float32 {
				px, ps := place(p, x), place(p, scale)
				y, mean, inv, nm, nv := place(p, stale(n)), place(p, stale(s.C)), place(p, stale(s.C)), place(p, stale(s.C)), place(p, stale(s.C))
				dx, ds, db := place(p, stale(n)), place(p, stale(s.C)), place(p, stale(s.C))
				if !training {
					nm, nv = nil, nil
				}
				o.BatchNorm(s, px, ps, place(p, bias), place(p, rm), place(p, rv), y, mean, inv, nm, nv)
				o.BatchNormBackward(s, px, ps, mean, inv, place(p, dy), dx, ds, db)
				dx2 := place(p, stale(n))
				o.BatchNormBackward(s, px, ps, mean, inv, place(p, dy), dx2, nil, nil)
				return fetchAll(p, y, mean, inv, dx, ds, db, nm, nv, dx2)
			})
		}
	}
	for _, sz := range [][2]int{{7, 24}, {260, 5}} {
		rows, L := sz[0], sz[1]
		x, dy := uniform(rng, rows*L, -1, 1), uniform(rng, rows*L, -1, 1)
		for i := range x[:L] {
			x[i] += 30 // a row with |μ| ≫ σ
		}
		add(fmt.Sprint("NormalizeRows/", rows, "x", L), tol, func(o runtime.NNOps, p *placer) [][]float32 {
			y, inv, dx := place(p, stale(rows*L)), place(p, stale(rows)), place(p, stale(rows*L))
			o.NormalizeRows(place(p, x), y, L, 1e-5, inv)
			o.NormalizeRowsBackward(y, place(p, dy), inv, L, dx)
			return fetchAll(p, y, inv, dx)
		})
	}
	for _, nc := range []struct {
		name string
		nr   *runtime.NormRows
	}{
		{"LayerNorm", runtime.NewLayerNormRows(6, 20, 1e-5)},
		{"LayerNorm/long", runtime.NewLayerNormRows(300, 3, 1e-5)},
		{"InstanceNorm", runtime.NewInstanceNormRows(2, 3, 15, 1e-5)},
		{"GroupNorm", runtime.NewGroupNormRows(2, 6, 8, 3, false, 1e-5)},
		{"GroupNorm/per-group", runtime.NewGroupNormRows(2, 6, 8, 3, true, 1e-5)},
		// Parameters of 1500 and 2100 terms: blocks of several warps for
		// row_param_grads on a GPU, and rows of a group far apart.
		{"GroupNorm/wide", runtime.NewGroupNormRows(3, 8, 500, 4, false, 1e-5)},
		{"InstanceNorm/wide", runtime.NewInstanceNormRows(3, 5, 700, 1e-5)},
		// Few rows of 1200 terms: a block each (launchRows' rowBlockMid).
		{"GroupNorm/mid", runtime.NewGroupNormRows(2, 8, 300, 2, false, 1e-5)},
		// Runs (channels of a group) of fewer than 32 terms, more runs
		// than a block has warps, and runs that do not divide the warps
		// (TestRunSumsBlocks).
		{"GroupNorm/runs", runtime.NewGroupNormRows(2, 64, 49, 4, false, 1e-5)},
		{"GroupNorm/threes", runtime.NewGroupNormRows(2, 9, 40, 3, false, 1e-5)},
	} {
		nr := nc.nr
		n, np := nr.Rows()*nr.RowLen(), nr.NumParams()
		x, dy := uniform(rng, n, -1, 1), uniform(rng, n, -1, 1)
		scale, bias := uniform(rng, np, -1, 1), uniform(rng, np, -1, 1)
		add("NormalizeRowsAffine/"+nc.name, tol, func(o runtime.NNOps, p *placer) [][]float32 {
			px, ps, pdy := place(p, x), place(p, scale), place(p, dy)
			y, mean, inv, dx := place(p, stale(n)), place(p, stale(nr.Rows())), place(p, stale(nr.Rows())), place(p, stale(n))
			ds, db, y0, db2 := place(p, stale(np)), place(p, stale(np)), place(p, stale(n)), place(p, stale(np))
			o.NormalizeRowsAffine(nr, px, ps, place(p, bias), y, mean, inv)
			o.NormalizeRowsAffineBackward(nr, px, ps, mean, inv, pdy, dx)
			o.NormalizeRowsAffineParamGrads(nr, px, mean, inv, pdy, ds, db)
			o.NormalizeRowsAffineParamGrads(nr, px, mean, inv, pdy, nil, db2)
			o.NormalizeRowsAffine(nr, px, ps, nil, y0, mean, inv)
			return fetchAll(p, y, mean, inv, dx, ds, db, y0, db2)
		})
	}
	for _, s := range []runtime.LRNShape{
		{N: 2, C: 7, Inner: 6, Size: 3, Alpha: 1e-2, Beta: 0.75, Bias: 1},
		{N: 1, C: 5, Inner: 4, Size: 4, Alpha: 0.5, Beta: 0.6, Bias: 2},
		{N: 2, C: 16, Inner: 20, Size: 5, Alpha: 1e-4, Beta: 0.75, Bias: 1},
	} {
		s := s
		n := s.N * s.C * s.Inner
		x, dy := uniform(rng, n, -1, 1), uniform(rng, n, -1, 1)
		add(fmt.Sprint("LRN/", s.C, "x", s.Size), tol, func(o runtime.NNOps, p *placer) [][]float32 {
			y, dx := place(p, stale(n)), place(p, stale(n))
			px := place(p, x)
			o.LRN(&s, px, y, make([]float32, n))
			o.LRNBackward(&s, px, place(p, dy), dx, make([]float32, n))
			return fetchAll(p, y, dx)
		})
	}
	for _, gc := range []struct {
		beta           float32
		yShape, cShape []int
	}{{1, []int{3, 5}, []int{5}}, {0.5, []int{3, 5}, []int{3, 1}}, {2, []int{3, 5}, []int{3, 5}}, {1, []int{30, 17}, []int{}}, {-1, []int{300, 4}, []int{1, 4}}, {1, []int{300, 40}, []int{40}}, {1, []int{2100, 6}, []int{6}}, {1, []int{3, 1100}, []int{3, 1}}} {
		ny, nc := numel(gc.yShape), numel(gc.cShape)
		c, dy := uniform(rng, nc, -1, 1), uniform(rng, ny, -1, 1)
		add(fmt.Sprint("GemmBias/", gc.beta, gc.yShape, gc.cShape), 1e-5, func(o runtime.NNOps, p *placer) [][]float32 {
			y, dc := place(p, stale(ny)), place(p, stale(nc))
			o.GemmBias(gc.beta, place(p, c), gc.cShape, y, gc.yShape)
			o.GemmBiasBackward(gc.beta, place(p, dy), gc.yShape, dc, gc.cShape)
			return fetchAll(p, y, dc)
		})
	}
	return cases
}

func reduceCases() []graphCase {
	rng := rand.New(rand.NewSource(5))
	var cases []graphCase
	add := func(name string, tol float64, run func(o runtime.ReduceOps, p *placer) [][]float32) {
		cases = append(cases, graphCase{name, tol, func(ops any, p *placer) [][]float32 { return run(ops.(runtime.ReduceOps), p) }})
	}
	for _, xShape := range [][]int{{3, 4, 5}, {2, 300}} {
		n := numel(xShape)
		for mask := 1; mask < 1<<len(xShape); mask++ {
			yShape := append([]int(nil), xShape...)
			for a := range yShape {
				if mask>>a&1 != 0 {
					yShape[a] = 1
				}
			}
			m := numel(yShape)
			grp := runtime.ReduceGroups(xShape, yShape)
			dy := uniform(rng, m, -1, 1)
			for op := runtime.ReduceSum; op <= runtime.ReduceLogSumExp; op++ {
				x := uniform(rng, n, -2, 2)
				tol := 1e-5
				switch op {
				case runtime.ReduceLogSum:
					x = uniform(rng, n, 0.1, 2)
				case runtime.ReduceProd:
					x = uniform(rng, n, 0.7, 1.4)
					for i := range x {
						if rng.Intn(2) == 0 {
							x[i] = -x[i]
						}
					}
					x[0], x[n-1] = 0, 0
					for i := range x {
						if grp[i] == grp[n-1] && i != n-1 {
							x[i] = 0
							break
						}
					}
					tol = 1e-4
				case runtime.ReduceMax, runtime.ReduceMin:
					x[n/2] = float32(math.NaN())
					x[1] = x[2] // a tie
				case runtime.ReduceSum, runtime.ReduceMean:
					tol = 1e-4 // float32 sums
				}
				add(fmt.Sprintf("%v/%v->%v", op, xShape, yShape), tol, func(o runtime.ReduceOps, p *placer) [][]float32 {
					y, dx := place(p, stale(m)), place(p, stale(n))
					state := place(p, make([]float64, runtime.ReduceStateLen(op, m)))
					px := place(p, x)
					o.ReduceAxes(op, px, xShape, y, yShape, place(p, grp), state)
					o.ReduceAxesBackward(op, px, xShape, y, place(p, dy), yShape, place(p, grp), state, dx)
					return fetchAll(p, y, dx)
				})
			}
		}
	}
	sShape := []int{6, 70, 9}
	sx, sdy := uniform(rng, numel(sShape), -6, 6), uniform(rng, numel(sShape), -1, 1)
	for ax := range sShape {
		outer, L, inner := numel(sShape[:ax]), sShape[ax], numel(sShape[ax+1:])
		for _, log := range []bool{false, true} {
			add(fmt.Sprintf("Softmax/log=%v/axis=%d", log, ax), 1e-5, func(o runtime.ReduceOps, p *placer) [][]float32 {
				// The backward reads the reference's forward output.
				yRef := make([]float32, len(sx))
				y, dx := place(p, stale(len(sx))), place(p, stale(len(sx)))
				if log {
					reference.Device{}.LogSoftmax(sx, outer, L, inner, yRef)
					o.LogSoftmax(place(p, sx), outer, L, inner, y)
					o.LogSoftmaxBackward(place(p, yRef), place(p, sdy), outer, L, inner, dx)
				} else {
					reference.Device{}.Softmax(sx, outer, L, inner, yRef)
					o.Softmax(place(p, sx), outer, L, inner, y)
					o.SoftmaxBackward(place(p, yRef), place(p, sdy), outer, L, inner, dx)
				}
				return fetchAll(p, y, dx)
			})
		}
	}
	for _, nk := range [][2]int{{7, 10}, {300, 3}} {
		N, K := nk[0], nk[1]
		logits, weights := uniform(rng, N*K, -8, 8), uniform(rng, N, 0, 1)
		labels := make([]int64, N)
		for i := range labels {
			labels[i] = int64(rng.Intn(K))
		}
		for _, alpha := range []float32{0, 0.1} {
			add(fmt.Sprint("SoftmaxCrossEntropy/", N, "x", K, "/smoothing", alpha), 1e-5, func(o runtime.ReduceOps, p *placer) [][]float32 {
				losses, probs, dl := place(p, stale(N)), place(p, stale(N*K)), place(p, stale(N*K))
				pl := place(p, labels)
				o.SoftmaxCrossEntropy(place(p, logits), pl, N, K, alpha, losses, probs)
				o.SoftmaxCrossEntropyBackward(probs, pl, place(p, weights), N, K, alpha, dl)
				return fetchAll(p, losses, probs, dl)
			})
		}
	}
	// The multi-label head: 40 samples of 6 labels, logits of both signs
	// and large magnitudes; each sample's set, then the labels it ignores
	// (runtime.LabelWords), one in four samples ignoring some.
	{
		const N, K = 40, 6
		logits, weights := uniform(rng, N*K, -40, 40), uniform(rng, N, 0, 1)
		sets := make([]int64, 2*N)
		for i := 0; i < N; i++ {
			sets[2*i] = int64(rng.Intn(1 << K))
			if i%4 == 1 {
				sets[2*i+1] = int64(rng.Intn(1 << K))
			}
		}
		ones, posWeight := []float32{1, 1, 1, 1, 1, 1}, []float32{2, 0.5, 1, 7.5, 0, 1.25}
		// The ignored labels' soft targets: none, or three of six.
		none, soft := make([]float32, K), []float32{0.7, 0, 0.2, 0, 0.55, 0}
		for _, alpha := range []float32{0, 0.2} {
			for _, pw := range [][]float32{ones, posWeight} {
				for _, u := range [][]float32{none, soft} {
					name := fmt.Sprint("SigmoidCrossEntropy/smoothing", alpha)
					if pw[0] != 1 {
						name += "/pos_weight"
					}
					if u[0] != 0 {
						name += "/uncertain"
					}
					add(name, 1e-5, func(o runtime.ReduceOps, p *placer) [][]float32 {
						losses, probs, dl := place(p, stale(N)), place(p, stale(N*K)), place(p, stale(N*K))
						pl, pp, pu := place(p, sets), place(p, pw), place(p, u)
						o.SigmoidCrossEntropy(place(p, logits), pl, N, K, alpha, pp, pu, losses, probs)
						o.SigmoidCrossEntropyBackward(probs, pl, place(p, weights), N, K, alpha, pp, pu, dl)
						return fetchAll(p, losses, probs, dl)
					})
				}
			}
		}
	}
	// 130 labels: three words a sample and three of its ignored labels
	// (runtime.LabelWords), labels in every word, about a quarter ignored.
	{
		const N, K = 9, 130
		logits, weights, pw := uniform(rng, N*K, -20, 20), uniform(rng, N, 0, 1), uniform(rng, K, 0, 4)
		sets := make([]int64, N*runtime.LabelWords(K))
		for i := range sets {
			sets[i] = int64(rng.Uint64())
			if i%6 >= 3 {
				sets[i] &= int64(rng.Uint64())
			}
			if i%3 == 2 {
				sets[i] &= 1<<(K-128) - 1
			}
		}
		soft := uniform(rng, K, -1, 1) // half the labels' uncertain entries soft
		for j, v := range soft {
			soft[j] = max(v, 0)
		}
		add("SigmoidCrossEntropy/130 labels", 1e-5, func(o runtime.ReduceOps, p *placer) [][]float32 {
			losses, probs, dl := place(p, stale(N)), place(p, stale(N*K)), place(p, stale(N*K))
			pl, pp, pu := place(p, sets), place(p, pw), place(p, soft)
			o.SigmoidCrossEntropy(place(p, logits), pl, N, K, 0.1, pp, pu, losses, probs)
			o.SigmoidCrossEntropyBackward(probs, pl, place(p, weights), N, K, 0.1, pp, pu, dl)
			return fetchAll(p, losses, probs, dl)
		})
	}
	data, upd := uniform(rng, 50, -1, 1), uniform(rng, 30, -1, 1)
	upd[4] = float32(math.NaN())
	// max(−0, +0): the CPU's (Go's max) is +0, the reference's −0; the
	// tolerance (no rounding happens) lets both be.
	upd[5], data[5*7%50] = 0, float32(math.Copysign(0, -1))
	sIdx, uniq := make([]int32, len(upd)), make([]int32, len(upd))
	for i := range sIdx {
		sIdx[i], uniq[i] = int32(i*7%50), int32(i*3%50)
	}
	for red := runtime.ScatterReduceNone; red <= runtime.ScatterReduceMin; red++ {
		add(fmt.Sprint("ScatterReduce/", red), 1e-7, func(o runtime.ReduceOps, p *placer) [][]float32 {
			y, idx := place(p, data), sIdx
			if red == runtime.ScatterReduceNone {
				idx = uniq
			}
			o.ScatterReduce(red, place(p, upd), place(p, idx), y)
			return fetchAll(p, y)
		})
	}
	return cases
}

// TestExpLog checks the kernels' d_exp and d_log (written out without
// FMAs) over float32's range, through operations that compute them alone:
// ReduceLogSum of one-element groups is float32(log x), and its backward
// with dy = 1 is float32(exp(−y)) for any y given. Both are within a unit
// in the last place of float32 of Go's math (where Go's result is not a
// subnormal, whose units are coarser).
func TestExpLog(t *testing.T) {
	d := emuDevice(t)
	var xs []float32
	for e := -149.0; e <= 127; e += 0.37 {
		xs = append(xs, float32(math.Pow(2, e)))
	}
	xs = append(xs, math.SmallestNonzeroFloat32, math.MaxFloat32, 1, 2, 0.5, 1+1e-7, 1-1e-7)
	n := len(xs)
	y := make([]float32, n)
	d.ReduceAxes(runtime.ReduceLogSum, xs, []int{n}, y, []int{n}, nil, make([]float64, n))
	for i, x := range xs {
		if want := float32(math.Log(float64(x))); !ulpClose(y[i], want) {
			t.Errorf("log %g = %g, want %g", x, y[i], want)
		}
	}
	var ys []float32
	for v := -100.0; v <= 110; v += 0.173 {
		ys = append(ys, float32(v))
	}
	ys = append(ys, 0, -88.72283, 87.33655, -1e-30, 1e-30, float32(math.Inf(1)), float32(math.Inf(-1)))
	n = len(ys)
	dx, ones := make([]float32, n), make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	d.ReduceAxesBackward(runtime.ReduceLogSum, ones, []int{n}, ys, ones, []int{n}, nil, nil, dx)
	for i, v := range ys {
		if want := float32(math.Exp(-float64(v))); !ulpClose(dx[i], want) {
			t.Errorf("exp %g = %g, want %g", -v, dx[i], want)
		}
	}
}

// ulpClose reports whether got is want or a float32 neighbour of it (any
// two subnormals or zeros within 2⁻¹²⁶·2⁻²⁰ of each other pass).
func ulpClose(got, want float32) bool {
	if got == want {
		return true
	}
	if math.Abs(float64(want)) < 0x1p-126 {
		return math.Abs(float64(got)-float64(want)) <= 0x1p-146
	}
	return got == math.Nextafter32(want, float32(math.Inf(1))) || got == math.Nextafter32(want, float32(math.Inf(-1)))
}

// TestNNReduceOps holds the Device's NNOps and ReduceOps to the reference
// backend and to runtime.CPU on random inputs, with host operands (staged)
// and with device buffers.
func TestNNReduceOps(t *testing.T) {
	d := emuDevice(t)
	checkNNReduceOps(t, d)
	// Every statistic and reduction a warp's, however few its terms
	// (launchLanes, ReduceToShape).
	defer func(w int) { reduceWide = w }(reduceWide)
	reduceWide = 1
	t.Run("wide", func(t *testing.T) { checkNNReduceOps(t, d) })
	// And every row statistic a block's (launchRows), however short the
	// row.
	defer func(w int) { rowBlockWide = w }(rowBlockWide)
	rowBlockWide = 1
	t.Run("block", func(t *testing.T) { checkNNReduceOps(t, d) })
}

// TestNNReduceOpsOnFake runs TestNNReduceOps' cases through the real driver's
// code on the stand-in (testdata/fakecuda.c).
func TestNNReduceOpsOnFake(t *testing.T) {
	d, err := New(fakeDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	checkNNReduceOps(t, d)
}

func checkNNReduceOps(t *testing.T, d *Device) {
	for _, c := range append(nnCases(), reduceCases()...) {
		t.Run(c.name, func(t *testing.T) { checkGraphCase(t, d, c) })
	}
}

// checkGraphCase holds c on d, with host and with device operands, to the
// reference backend and the CPU.
func checkGraphCase(t *testing.T, d *Device, c graphCase) {
	ref := c.run(reference.Device{}, &placer{})
	cpu := c.run(runtime.CPU{}, &placer{})
	for _, dev := range []bool{false, true} {
		p := &placer{bufs: map[uintptr]runtime.Buffer{}}
		if dev {
			p.dev = d
		}
		got := c.run(d, p)
		for _, b := range p.bufs {
			d.Free(b)
		}
		if err := closeOutputs(got, ref, c.tol); err != nil {
			t.Errorf("device operands=%v: against the reference: %v", dev, err)
		}
		if err := closeOutputs(got, cpu, max(c.tol, 1e-4)); err != nil {
			t.Errorf("device operands=%v: against the CPU: %v", dev, err)
		}
	}
}

// closeOutputs compares outputs element by element: equal (NaN with
// NaN), or within tol·max(1, |want|).
func closeOutputs(got, want [][]float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for k := range got {
		if len(got[k]) != len(want[k]) {
			return fmt.Errorf("output %d: %d elements, want %d", k, len(got[k]), len(want[k]))
		}
		for i := range got[k] {
			g, w := float64(got[k][i]), float64(want[k][i])
			if g == w && math.Signbit(g) == math.Signbit(w) || math.IsNaN(g) && math.IsNaN(w) {
				continue
			}
			if tol == 0 || !(math.Abs(g-w) <= tol*math.Max(1, math.Abs(w))) {
				return fmt.Errorf("output %d [%d] = %v, want %v (tolerance %g)", k, i, g, w, tol)
			}
		}
	}
	return nil
}

// TestConvPaths runs the convolution cases of TestNNReduceOps and the
// ConvWeightGrad cases of TestPerSampleOps on each path forced — the
// GEMMs, with a scratch so small that every chunk is one sample, and the
// direct kernels — so that both are held to the reference backend and the
// CPU on every shape, whichever convByGEMM would choose.
func TestConvPaths(t *testing.T) {
	d := emuDevice(t)
	var convs []graphCase
	for _, c := range nnCases() {
		if strings.HasPrefix(c.name, "Conv") {
			convs = append(convs, c)
		}
	}
	var weightGrads []valueCase
	for _, c := range persampleCases {
		if c.name == "ConvWeightGrad" {
			weightGrads = append(weightGrads, c)
		}
	}
	defer func(p, f int) { convPath, convChunkFloats = p, f }(convPath, convChunkFloats)
	for _, path := range []struct {
		name        string
		path, chunk int
	}{{"gemm", convGEMMs, 1 << 24}, {"gemm-chunked", convGEMMs, 1}, {"direct", convDirect, 1 << 24}} {
		convPath, convChunkFloats = path.path, path.chunk
		t.Run(path.name, func(t *testing.T) {
			for _, c := range convs {
				t.Run(c.name, func(t *testing.T) { checkGraphCase(t, d, c) })
			}
			testValueCases(t, d, weightGrads, 30)
		})
	}
}

// TestSoftmaxRegisters holds the softmax kernels' register path (a warp's
// line of at most 32·SOFTMAX_REGS elements kept in its lanes) to the bits
// of their passes over memory, forward and backward, plain and log, on
// lines from 1 element to 256 and past it.
func TestSoftmaxRegisters(t *testing.T) {
	d := emuDevice(t)
	rng := rand.New(rand.NewSource(11))
	for _, n := range []int{1, 31, 64, 197, 256, 257} {
		const outer = 5
		x, dy := uniform(rng, outer*n, -6, 6), uniform(rng, outer*n, -1, 1)
		for _, log := range []bool{false, true} {
			run := func(regs bool) []float32 {
				defer func(r bool) { softmaxRegs = r }(softmaxRegs)
				softmaxRegs = regs
				y, dx := make([]float32, len(x)), make([]float32, len(x))
				if log {
					d.LogSoftmax(x, outer, n, 1, y)
					d.LogSoftmaxBackward(y, dy, outer, n, 1, dx)
				} else {
					d.Softmax(x, outer, n, 1, y)
					d.SoftmaxBackward(y, dy, outer, n, 1, dx)
				}
				return append(y, dx...)
			}
			got, want := run(true), run(false)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d log=%v: output %d = %v in registers, %v in passes", n, log, i, got[i], want[i])
				}
			}
		}
	}
}

// TestRowBlocksFused: where a row normalization's rows take a block each,
// its statistics and output run as one kernel, as do its gradient's sums
// and the gradient (fuseRowBlocks), with the same bits as the separate
// kernels: every NormalizeRowsAffine case, each row a block.
func TestRowBlocksFused(t *testing.T) {
	t.Setenv(EnvProfile, "1")
	defer func(w int, f bool) { rowBlockWide, fuseRowBlocks = w, f }(rowBlockWide, fuseRowBlocks)
	rowBlockWide = 1
	var cases []graphCase
	for _, c := range nnCases() {
		if strings.HasPrefix(c.name, "NormalizeRowsAffine/") {
			cases = append(cases, c)
		}
	}
	if len(cases) < 6 {
		t.Fatalf("%d NormalizeRowsAffine cases", len(cases))
	}
	kernels := map[bool]string{}
	outs := map[bool][][][]float32{}
	for _, fused := range []bool{false, true} {
		fuseRowBlocks = fused
		d := emuDevice(t)
		var prof bytes.Buffer
		d.prof.out = &prof
		for _, c := range cases {
			p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
			outs[fused] = append(outs[fused], c.run(d, p))
			for _, b := range p.bufs {
				d.Free(b)
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		kernels[fused] = prof.String()
	}
	for _, k := range []string{"row_norm_affine_block", "row_affine_bwd_block", "row_affine_bwd_runs_block"} {
		if !strings.Contains(kernels[true], k) || strings.Contains(kernels[false], k) {
			t.Errorf("kernel %s: fused profile has it %v, separate %v", k, strings.Contains(kernels[true], k), strings.Contains(kernels[false], k))
		}
	}
	// Rows of runs: the backward keeps its runs' sums, the first
	// parameter gradients take them, the second (db2) sums the runs anew.
	runCases := 0
	for _, c := range nnCases() {
		if runsCase(c.name) {
			runCases++
		}
	}
	for _, want := range []struct {
		fused  bool
		kernel string
		calls  int
	}{
		{true, "row_affine_bwd_runs_block", runCases},
		{true, "row_run_sums_block", runCases},
		{true, "row_param_grads_runs", 2 * runCases},
		{false, "row_run_sums_block", 2 * runCases},
		{false, "row_param_grads_runs", 2 * runCases},
	} {
		if got := profileCalls(kernels[want.fused], want.kernel); got != want.calls {
			t.Errorf("fused=%v: %s ran %d times, want %d", want.fused, want.kernel, got, want.calls)
		}
	}
	for _, k := range []string{"row_stats_block", "row_affine_grad_sums_block", "row_affine_dx", "row_affine "} {
		if strings.Contains(kernels[true], k) {
			t.Errorf("fused: %s still ran", k)
		}
	}
	for i, c := range cases {
		for k := range outs[false][i] {
			for j, w := range outs[false][i][k] {
				if g := outs[true][i][k][j]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("%s: output %d element %d: fused %v, separate %v", c.name, k, j, g, w)
				}
			}
		}
	}
}

// profileCalls returns the calls of kernel in a profile's kernels table.
func profileCalls(prof, kernel string) int {
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(kernel) + `\s+(\d+) calls`).FindStringSubmatch(prof)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestRunSumsBlocks holds the normalizations whose rows are runs of a
// parameter's terms (runSums) to the reference backend and the CPU with
// blocks of one to eight warps per row: runs a warp each, several to a
// warp, and several warps to a run (kernels/nn.cu's block_run_sums).
func TestRunSumsBlocks(t *testing.T) {
	defer func(w, b int) { rowBlockWide, emuRowBlock = w, b }(rowBlockWide, emuRowBlock)
	rowBlockWide = 1
	d := emuDevice(t)
	var cases []graphCase
	for _, c := range nnCases() {
		if runsCase(c.name) {
			cases = append(cases, c)
		}
	}
	if len(cases) < 8 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, block := range []int{32, 96, 256} {
		emuRowBlock = block
		t.Run(fmt.Sprint("block=", block), func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { checkGraphCase(t, d, c) })
			}
		})
	}
}

// runsCase reports whether nnCases' case name is a normalization whose
// rows are runs of a parameter's terms (runSums): GroupNorm's and
// InstanceNorm's.
func runsCase(name string) bool {
	return strings.HasPrefix(name, "NormalizeRowsAffine/GroupNorm") || strings.HasPrefix(name, "NormalizeRowsAffine/InstanceNorm")
}
