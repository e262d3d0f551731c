package runtime

import (
	"fmt"
	"sort"

	"github.com/dpfinetune/dpfinetune/graph"
)

// maxResizeMatrix bounds the elements of one axis' interpolation matrix
// (64 MiB of float32): a 4096 → 4096 resize is 16M. Larger axes are far
// beyond the images this engine trains on; refusing them keeps a
// malformed model from allocating without bound.
const maxResizeMatrix = 1 << 24

// buildResize compiles Resize and Upsample from existing device
// operations, so that every backend runs them forward and backward with
// nothing of its own (graph.ResizeSpec reads the node). Interpolation is
// separable and linear in the input:
//
//   - nearest: one IndexGather by the composed per-axis source indices
//     (the extrapolated outputs of tf_crop_and_resize take the map's
//     fill); its backward scatters back (IndexGatherBackward);
//   - linear and cubic: along each axis whose weights are not the
//     identity, y = R·x with R the axis' constant Out×In matrix
//     (graph.ResizeAxis.Matrix), one GEMM per axis — x·Rᵀ for the last
//     axis, R·x_o for every outer index o (a strided GEMM sharing R) for
//     the others — and the backward the adjoint chain, Rᵀ per axis in
//     reverse. A nonzero extrapolation_value is an output constant,
//     broadcast into y before the last GEMM accumulates onto it.
//
// The matrices are compile-time constants of the node on the device, not
// graph values: nothing can take them for parameters. The intermediate
// results between axes live in the plan's workspace, and the backward
// reads only the output gradient, so the node saves no activation.
func buildResize(p *Plan, nd *node) error {
	x := nd.in[0]
	if x == nil {
		return fmt.Errorf("input 0 is missing")
	}
	if x.i64 != nil || x.b != nil {
		return fmt.Errorf("input 0 (%q) is %v; %s runs on float32 data only", x.v.Name, x.v.DType, nd.g.OpType)
	}
	in := make([]int64, len(x.shape))
	for i, d := range x.shape {
		in[i] = int64(d)
	}
	s, err := nd.g.ResizeSpec(in)
	if err != nil {
		return err
	}
	y := nd.out[0]
	for i, d := range s.Out {
		if len(y.shape) != len(s.Out) || int64(y.shape[i]) != d {
			return fmt.Errorf("output %v is not the resized shape %v", y.shape, s.Out)
		}
	}
	var axes []*graph.ResizeAxis
	var dims []int
	for d := range in {
		a, err := s.Axis(d)
		if err != nil {
			return err
		}
		if !a.Identity() {
			axes, dims = append(axes, a), append(dims, d)
		}
	}
	if len(axes) == 0 {
		return buildCopy(p, nd)
	}
	if s.Mode == "nearest" {
		if err := mapBound(nd.g.OpType, x, y); err != nil {
			return err
		}
		buildMap(p, nd, x, newSeparableMap(y.shape, nearestTables(x.shape, y.shape, axes, dims), x.n, s.Extrapolation))
		return nil
	}
	return buildInterpolation(p, nd, s, axes, dims)
}

// nearestTables are nearest interpolation's per-axis terms for
// newSeparableMap: output index o of axis d reads source index
// a.Index[o] (o on an axis the resize leaves alone), times the axis's
// stride, or −1 where the axis extrapolates.
func nearestTables(xShape, yShape []int, axes []*graph.ResizeAxis, dims []int) [][]int32 {
	st := strides(xShape)
	tables := make([][]int32, len(yShape))
	for d, n := range yShape {
		tables[d] = make([]int32, n)
		for o := range tables[d] {
			tables[d][o] = int32(o * st[d])
		}
	}
	for i, a := range axes {
		d := dims[i]
		for o := range tables[d] {
			tables[d][o] = int32(a.Index[o] * st[d])
			if a.Outside != nil && a.Outside[o] {
				tables[d][o] = -1
			}
		}
	}
	return tables
}

// resizeStep is one axis of a linear or cubic resize: from shape in to
// shape in with axis d's length Out, as the GEMM with r (Out×In) over
// Outer blocks of In×Inner elements.
type resizeStep struct {
	outer, inner, in, out int
	r                     []float32 // device copy of the matrix
}

// forward computes dst = R·src along the step's axis; beta 1 adds onto
// dst (the extrapolation constant).
func (st *resizeStep) forward(ops GraphOps, src, dst []float32, beta float32) {
	if st.inner == 1 { // the last axis: dst (outer×out) = src (outer×in) · Rᵀ
		ops.Gemm(false, true, st.outer, st.out, st.in, 1, src, st.in, st.r, st.in, beta, dst, st.out)
		return
	}
	if st.outer == 1 {
		ops.Gemm(false, false, st.out, st.inner, st.in, 1, st.r, st.in, src, st.inner, beta, dst, st.inner)
		return
	}
	ops.GemmStrided(false, false, st.out, st.inner, st.in, 1, st.r, st.in, 0, src, st.inner, st.in*st.inner,
		beta, dst, st.inner, st.out*st.inner, st.outer)
}

// backward computes dsrc = Rᵀ·ddst along the step's axis, overwriting
// dsrc.
func (st *resizeStep) backward(ops GraphOps, ddst, dsrc []float32) {
	if st.inner == 1 { // dsrc (outer×in) = ddst (outer×out) · R
		ops.Gemm(false, false, st.outer, st.in, st.out, 1, ddst, st.out, st.r, st.in, 0, dsrc, st.in)
		return
	}
	if st.outer == 1 {
		ops.Gemm(true, false, st.in, st.inner, st.out, 1, st.r, st.in, ddst, st.inner, 0, dsrc, st.inner)
		return
	}
	ops.GemmStrided(true, false, st.in, st.inner, st.out, 1, st.r, st.in, 0, ddst, st.inner, st.out*st.inner,
		0, dsrc, st.inner, st.in*st.inner, st.outer)
}

// buildInterpolation compiles linear and cubic resizing as a chain of
// per-axis GEMMs (see buildResize).
func buildInterpolation(p *Plan, nd *node, s *graph.ResizeSpec, axes []*graph.ResizeAxis, dims []int) error {
	x, y := nd.in[0], nd.out[0]
	// Shrinking axes first keeps the intermediate results, and the GEMMs
	// after them, small.
	order := make([]int, len(axes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := axes[order[i]], axes[order[j]]
		return a.Out*b.In < b.Out*a.In
	})
	shape := append([]int(nil), x.shape...)
	steps := make([]*resizeStep, len(order))
	sizes := make([]int, len(order)) // elements of each step's result
	for k, i := range order {
		a, d := axes[i], dims[i]
		if a.Out*a.In > maxResizeMatrix {
			return fmt.Errorf("axis %d resized from %d to %d: its %d×%d interpolation matrix is over the %d elements supported", d, a.In, a.Out, a.Out, a.In, maxResizeMatrix)
		}
		m := a.Matrix()
		host := make([]float32, len(m))
		for j, v := range m {
			host[j] = float32(v)
		}
		buf, err := AdoptHost(p.dev, host)
		if err != nil {
			return fmt.Errorf("axis %d's interpolation matrix: %w", d, err)
		}
		nd.auxBytes += 4 * int64(len(host))
		steps[k] = &resizeStep{outer: numel(shape[:d]), inner: numel(shape[d+1:]), in: a.In, out: a.Out, r: buf.Floats()}
		shape[d] = a.Out
		sizes[k] = numel(shape)
	}
	// Intermediate k (the result of step k < last) lives in workspace
	// region k%2, forward and backward alike, so that a step never reads
	// and writes one region.
	var region [2]int
	for k := 0; k < len(steps)-1; k++ {
		region[k%2] = max(region[k%2], sizes[k])
	}
	p.needWS(region[0] + region[1])
	mid := func(k int) []float32 {
		if k%2 == 0 {
			return p.ws[:sizes[k]]
		}
		return p.ws[region[0] : region[0]+sizes[k]]
	}
	var bias []float32 // the extrapolation constant, broadcast over the axes not resized
	var biasShape []int
	if s.Extrapolation != 0 {
		var err error
		if bias, biasShape, err = extrapolationBias(p, y.shape, axes, dims, s.Extrapolation); err != nil {
			return err
		}
	}
	last := len(steps) - 1
	nd.fwd = func() {
		src := x.data
		for k, st := range steps {
			if k == last {
				beta := float32(0)
				if bias != nil {
					p.ops.Expand(bias, biasShape, y.data, y.shape)
					beta = 1
				}
				st.forward(p.ops, src, y.data, beta)
				return
			}
			dst := mid(k)
			st.forward(p.ops, src, dst, 0)
			src = dst
		}
	}
	nd.bwd = func() {
		ddst := y.grad
		for k := last; k >= 0; k-- {
			if k == 0 {
				steps[0].backward(p.ops, ddst, nd.dIn[0])
				return
			}
			dsrc := mid(k - 1)
			steps[k].backward(p.ops, ddst, dsrc)
			ddst = dsrc
		}
	}
	return nil
}

// extrapolationBias returns the constant a tf_crop_and_resize with a
// nonzero extrapolation_value adds to the interpolated values: v where
// any resized axis extrapolates (its rows of R are zero there), 0
// elsewhere, with shape y's on the resized axes and 1 on the others. It
// is nil when no output extrapolates.
func extrapolationBias(p *Plan, yShape []int, axes []*graph.ResizeAxis, dims []int, v float32) ([]float32, []int, error) {
	shape := make([]int, len(yShape))
	outside := make([][]bool, len(yShape))
	extrapolates := false
	for d := range shape {
		shape[d] = 1
	}
	for i, a := range axes {
		shape[dims[i]] = yShape[dims[i]]
		outside[dims[i]] = a.Outside
		extrapolates = extrapolates || a.Outside != nil
	}
	if !extrapolates {
		return nil, nil, nil
	}
	host := make([]float32, numel(shape))
	forCoords(shape, func(i int, c []int) {
		for d, cd := range c {
			if outside[d] != nil && outside[d][cd] {
				host[i] = v
				return
			}
		}
	})
	buf, err := AdoptHost(p.dev, host)
	if err != nil {
		return nil, nil, fmt.Errorf("the extrapolation constant: %w", err)
	}
	return buf.Floats(), shape, nil
}
