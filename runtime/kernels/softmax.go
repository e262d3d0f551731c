package kernels

import "math"

// axisSplit views shape as outer × n × inner around axis.
func axisSplit(shape []int, axis int) (outer, n, inner int) {
	axis = NormAxis(axis, len(shape))
	outer, inner = 1, 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	return outer, shape[axis], inner
}

// Softmax computes y = exp(x − max)/Σexp(x − max) along axis (ONNX opset
// ≥ 13 semantics: a single axis, negative allowed). Subtracting the maximum
// keeps exp from overflowing; sums are in float64.
func Softmax(x []float32, shape []int, axis int, y []float32) {
	softmaxImpl(x, shape, axis, y, false)
}

// LogSoftmax computes y = x − max − log Σexp(x − max) along axis.
func LogSoftmax(x []float32, shape []int, axis int, y []float32) {
	softmaxImpl(x, shape, axis, y, true)
}

func softmaxImpl(x []float32, shape []int, axis int, y []float32, logOut bool) {
	outer, n, inner := axisSplit(shape, axis)
	total := outer * n * inner
	checkLen("x", x, total)
	checkLen("y", y, total)
	if n == 0 {
		return
	}
	cols := outer * inner
	parallelFor(cols, max(1, 4096/n), func(lo, hi int) {
		for c := lo; c < hi; c++ {
			o, j := c/inner, c%inner
			base := o*n*inner + j
			mx := float32(math.Inf(-1))
			for k := 0; k < n; k++ {
				if v := x[base+k*inner]; v > mx {
					mx = v
				}
			}
			var sum float64
			for k := 0; k < n; k++ {
				e := float64(Expf(x[base+k*inner] - mx))
				sum += e
				if !logOut {
					y[base+k*inner] = float32(e)
				}
			}
			if logOut {
				lse := float32(math.Log(sum))
				for k := 0; k < n; k++ {
					y[base+k*inner] = x[base+k*inner] - mx - lse
				}
				continue
			}
			inv := float32(1 / sum)
			for k := 0; k < n; k++ {
				y[base+k*inner] *= inv
			}
		}
	})
}

// SoftmaxBackward computes dx = y ⊙ (dy − Σ_axis dy ⊙ y) from the forward
// output y.
func SoftmaxBackward(y, dy []float32, shape []int, axis int, dx []float32) {
	softmaxGrad(y, dy, shape, axis, dx, false)
}

// LogSoftmaxBackward computes dx = dy − exp(y)·Σ_axis dy from the forward
// output y.
func LogSoftmaxBackward(y, dy []float32, shape []int, axis int, dx []float32) {
	softmaxGrad(y, dy, shape, axis, dx, true)
}

func softmaxGrad(y, dy []float32, shape []int, axis int, dx []float32, logOut bool) {
	outer, n, inner := axisSplit(shape, axis)
	total := outer * n * inner
	checkLen("y", y, total)
	checkLen("dy", dy, total)
	checkLen("dx", dx, total)
	cols := outer * inner
	parallelFor(cols, max(1, 4096/max(1, n)), func(lo, hi int) {
		for c := lo; c < hi; c++ {
			o, j := c/inner, c%inner
			base := o*n*inner + j
			var s float64
			for k := 0; k < n; k++ {
				i := base + k*inner
				if logOut {
					s += float64(dy[i])
				} else {
					s += float64(dy[i]) * float64(y[i])
				}
			}
			sf := float32(s)
			for k := 0; k < n; k++ {
				i := base + k*inner
				if logOut {
					dx[i] = dy[i] - float32(math.Exp(float64(y[i])))*sf
				} else {
					dx[i] = y[i] * (dy[i] - sf)
				}
			}
		}
	})
}
