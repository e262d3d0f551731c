package kernels

import (
	"fmt"
	"math"
)

// ReducedShape returns the shape of reducing shape over axes (negative
// allowed; empty means all axes), keeping reduced axes as 1 when keepDims.
// ONNX noop_with_empty_axes is the caller's business (it makes the op an
// identity).
func ReducedShape(shape, axes []int, keepDims bool) []int {
	red := reducedMask(shape, axes)
	var out []int
	for i, d := range shape {
		switch {
		case !red[i]:
			out = append(out, d)
		case keepDims:
			out = append(out, 1)
		}
	}
	if out == nil {
		out = []int{}
	}
	return out
}

func reducedMask(shape, axes []int) []bool {
	red := make([]bool, len(shape))
	if len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
		return red
	}
	for _, a := range axes {
		a = NormAxis(a, len(shape))
		if red[a] {
			panic(fmt.Sprintf("kernels: repeated axis %d", a))
		}
		red[a] = true
	}
	return red
}

// ReduceSum sums x (shape) over axes into y (Numel(ReducedShape) elements;
// the layout is the same with or without keepdims).
func ReduceSum(x []float32, shape, axes []int, y []float32) {
	ReduceToShape(x, shape, y, ReducedShape(shape, axes, true))
}

// ReduceMean averages x over axes into y.
func ReduceMean(x []float32, shape, axes []int, y []float32) {
	keep := ReducedShape(shape, axes, true)
	ReduceToShape(x, shape, y, keep)
	ny, nx := Numel(keep), Numel(shape)
	if ny == 0 {
		return
	}
	inv := float32(float64(ny) / float64(nx))
	for i := range y[:ny] {
		y[i] *= inv
	}
}

// ReduceSumBackward broadcasts dy back over the reduced axes: dx = dy.
func ReduceSumBackward(dy []float32, shape, axes []int, dx []float32) {
	Expand(dy, ReducedShape(shape, axes, true), dx, shape)
}

// ReduceMeanBackward broadcasts dy/count back over the reduced axes.
func ReduceMeanBackward(dy []float32, shape, axes []int, dx []float32) {
	keep := ReducedShape(shape, axes, true)
	Expand(dy, keep, dx, shape)
	nx := Numel(shape)
	if nx == 0 {
		return
	}
	scale := float32(float64(Numel(keep)) / float64(nx))
	parallelFor(nx, elementwiseGrain, func(lo, hi int) {
		for i := range dx[lo:hi] {
			dx[lo+i] *= scale
		}
	})
}

// ReduceMax takes the maximum of x over axes into y (−Inf for an empty
// reduction; a NaN propagates).
func ReduceMax(x []float32, shape, axes []int, y []float32) {
	keep := ReducedShape(shape, axes, true)
	ny := Numel(keep)
	checkLen("x", x, Numel(shape))
	checkLen("y", y, ny)
	for i := range y[:ny] {
		y[i] = float32(math.Inf(-1))
	}
	if Numel(shape) == 0 {
		return
	}
	it := newBcastIter(shape, shape, keep)
	nrows, rowLen := it.rows()
	sy := it.inner()[1]
	it.each(0, nrows, func(off [maxOps]int) {
		row := x[off[0] : off[0]+rowLen]
		if sy == 0 {
			m := y[off[1]]
			for _, v := range row {
				if v > m || v != v {
					m = v
					if m != m {
						break
					}
				}
			}
			y[off[1]] = m
			return
		}
		dst := y[off[1] : off[1]+rowLen]
		for j, v := range row {
			if v > dst[j] || v != v {
				dst[j] = v
			}
		}
	})
}

// ReduceMaxBackward routes dy to the positions of x equal to the maximum y,
// split evenly among ties (the gradient of torch.amax). ws must hold
// Numel(ReducedShape(shape, axes, true)) elements (tie counts).
func ReduceMaxBackward(x []float32, shape, axes []int, y, dy, dx, ws []float32) {
	keep := ReducedShape(shape, axes, true)
	ny, nx := Numel(keep), Numel(shape)
	checkLen("x", x, nx)
	checkLen("y", y, ny)
	checkLen("dy", dy, ny)
	checkLen("dx", dx, nx)
	checkLen("ws", ws, ny)
	if nx == 0 {
		return
	}
	cnt := ws[:ny]
	clear(cnt)
	it := newBcastIter(shape, shape, keep)
	nrows, rowLen := it.rows()
	sy := it.inner()[1]
	it.each(0, nrows, func(off [maxOps]int) {
		for j, v := range x[off[0] : off[0]+rowLen] {
			if v == y[off[1]+j*sy] {
				cnt[off[1]+j*sy]++
			}
		}
	})
	it.each(0, nrows, func(off [maxOps]int) {
		d := dx[off[0] : off[0]+rowLen]
		for j, v := range x[off[0] : off[0]+rowLen] {
			k := off[1] + j*sy
			if v == y[k] {
				d[j] = dy[k] / cnt[k]
			} else {
				d[j] = 0
			}
		}
	})
}
