package reference

import (
	"math"

	"github.com/dpfinetune/dpfinetune/runtime"
)

var _ runtime.ReduceOps = Device{}

// groups returns, for every output of the reduction of x (xShape) onto
// yShape, the indices of the elements of x it reduces, in order. It reads
// only the shapes (not ReduceAxes's group map).
func groups(xShape, yShape []int) [][]int {
	g := make([][]int, numel(yShape))
	for i := 0; i < numel(xShape); i++ {
		j := broadcastIndex(i, xShape, yShape)
		g[j] = append(g[j], i)
	}
	return g
}

// reduce64 is the reduction op of the elements of x at idx, in float64.
func reduce64(op runtime.ReduceOp, x []float32, idx []int) float64 {
	var s float64
	switch op {
	case runtime.ReduceSum, runtime.ReduceMean, runtime.ReduceLogSum:
		for _, i := range idx {
			s += float64(x[i])
		}
		switch op {
		case runtime.ReduceMean:
			s /= float64(len(idx))
		case runtime.ReduceLogSum:
			s = math.Log(s)
		}
	case runtime.ReduceMax, runtime.ReduceMin:
		return float64(x[extremeOf(op, x, idx)])
	case runtime.ReduceProd:
		s = 1
		for _, i := range idx {
			s *= float64(x[i])
		}
	case runtime.ReduceL1:
		for _, i := range idx {
			s += math.Abs(float64(x[i]))
		}
	case runtime.ReduceL2, runtime.ReduceSumSquare:
		for _, i := range idx {
			s += float64(x[i]) * float64(x[i])
		}
		if op == runtime.ReduceL2 {
			s = math.Sqrt(s)
		}
	case runtime.ReduceLogSumExp:
		m := math.Inf(-1)
		for _, i := range idx {
			m = math.Max(m, float64(x[i]))
		}
		for _, i := range idx {
			s += math.Exp(float64(x[i]) - m)
		}
		s = m + math.Log(s)
	default:
		panic("reference: unknown reduction " + op.String())
	}
	return s
}

// extremeOf returns the element of x at idx that ReduceMax (ReduceMin)
// picks: the first NaN, else the first that attains the extreme.
func extremeOf(op runtime.ReduceOp, x []float32, idx []int) int {
	best := idx[0]
	for _, i := range idx {
		v := x[i]
		if v != v {
			return i
		}
		if op == runtime.ReduceMax && v > x[best] || op == runtime.ReduceMin && v < x[best] {
			best = i
		}
	}
	return best
}

// ReduceAxes implements runtime.ReduceOps from the shapes; it keeps no
// state (the backward recomputes what it needs from x).
func (Device) ReduceAxes(op runtime.ReduceOp, x []float32, xShape []int, y []float32, yShape []int, grp []int32, state []float64) {
	for g, idx := range groups(xShape, yShape) {
		y[g] = float32(reduce64(op, x, idx))
	}
}

// ReduceAxesBackward implements runtime.ReduceOps from the derivative of
// each reduction, in float64.
func (Device) ReduceAxesBackward(op runtime.ReduceOp, x []float32, xShape []int, y, dy []float32, yShape []int, grp []int32, state []float64, dx []float32) {
	for g, idx := range groups(xShape, yShape) {
		d := float64(dy[g])
		switch op {
		case runtime.ReduceSum:
			for _, i := range idx {
				dx[i] = float32(d)
			}
			continue
		case runtime.ReduceMean:
			for _, i := range idx {
				dx[i] = float32(d / float64(len(idx)))
			}
			continue
		case runtime.ReduceMax, runtime.ReduceMin:
			w := extremeOf(op, x, idx)
			for _, i := range idx {
				dx[i] = 0
			}
			dx[w] = float32(d)
			continue
		}
		r := reduce64(op, x, idx)
		for k, i := range idx {
			v := float64(x[i])
			var der float64
			switch op {
			case runtime.ReduceProd:
				der = 1
				for l, j := range idx {
					if l != k {
						der *= float64(x[j])
					}
				}
			case runtime.ReduceL1:
				switch {
				case v > 0:
					der = 1
				case v < 0:
					der = -1
				}
			case runtime.ReduceL2:
				if r != 0 {
					der = v / r
				}
			case runtime.ReduceSumSquare:
				der = 2 * v
			case runtime.ReduceLogSum:
				der = 1 / math.Exp(r)
			case runtime.ReduceLogSumExp:
				der = math.Exp(v - r)
			}
			dx[i] = float32(d * der)
		}
	}
}

// softmaxLine calls fn with the indices of every line of x viewed as
// outer × n × inner along its middle axis.
func softmaxLine(outer, n, inner int, fn func(idx []int)) {
	idx := make([]int, n)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			for j := range idx {
				idx[j] = (o*n+j)*inner + in
			}
			fn(idx)
		}
	}
}

// logSumExp64 returns log Σ exp(x_i) over idx, in float64.
func logSumExp64(x []float32, idx []int) float64 {
	m := math.Inf(-1)
	for _, i := range idx {
		m = math.Max(m, float64(x[i]))
	}
	var s float64
	for _, i := range idx {
		s += math.Exp(float64(x[i]) - m)
	}
	return m + math.Log(s)
}

// Softmax implements runtime.ReduceOps.
func (Device) Softmax(x []float32, outer, n, inner int, y []float32) {
	softmaxLine(outer, n, inner, func(idx []int) {
		lse := logSumExp64(x, idx)
		for _, i := range idx {
			y[i] = float32(math.Exp(float64(x[i]) - lse))
		}
	})
}

// LogSoftmax implements runtime.ReduceOps.
func (Device) LogSoftmax(x []float32, outer, n, inner int, y []float32) {
	softmaxLine(outer, n, inner, func(idx []int) {
		lse := logSumExp64(x, idx)
		for _, i := range idx {
			y[i] = float32(float64(x[i]) - lse)
		}
	})
}

// SoftmaxBackward implements runtime.ReduceOps.
func (Device) SoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32) {
	softmaxLine(outer, n, inner, func(idx []int) {
		var s float64
		for _, i := range idx {
			s += float64(dy[i]) * float64(y[i])
		}
		for _, i := range idx {
			dx[i] = float32(float64(y[i]) * (float64(dy[i]) - s))
		}
	})
}

// LogSoftmaxBackward implements runtime.ReduceOps.
func (Device) LogSoftmaxBackward(y, dy []float32, outer, n, inner int, dx []float32) {
	softmaxLine(outer, n, inner, func(idx []int) {
		var s float64
		for _, i := range idx {
			s += float64(dy[i])
		}
		for _, i := range idx {
			dx[i] = float32(float64(dy[i]) - math.Exp(float64(y[i]))*s)
		}
	})
}

// SoftmaxCrossEntropy implements runtime.ReduceOps.
func (Device) SoftmaxCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, losses, probs []float32) {
	a := float64(alpha)
	softmaxLine(n, k, 1, func(idx []int) {
		lse := logSumExp64(logits, idx)
		var all float64
		for _, i := range idx {
			probs[i] = float32(math.Exp(float64(logits[i]) - lse))
			all += float64(logits[i])
		}
		s := idx[0] / k
		// −Σ_j t_j log p_j = lse − Σ_j t_j z_j.
		losses[s] = float32(lse - (1-a)*float64(logits[idx[labels[s]]]) - a/float64(k)*all)
	})
}

// SoftmaxCrossEntropyBackward implements runtime.ReduceOps.
func (Device) SoftmaxCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, dlogits []float32) {
	a := float64(alpha)
	for s := 0; s < n; s++ {
		w := float64(weights[s])
		for j := 0; j < k; j++ {
			p := float64(probs[s*k+j]) - a/float64(k)
			if int64(j) == labels[s] {
				p -= 1 - a
			}
			dlogits[s*k+j] = float32(w * p)
		}
	}
}

// labelOf is 1 where label j applies to sample s of labels holding sets
// of k labels, runtime.LabelWords(k) words a sample (bit j%64 of word
// j/64), else 0.
func labelOf(labels []int64, k, s, j int) float64 {
	word := labels[s*runtime.LabelWords(k)+j/64]
	return float64(uint64(word) >> uint(j%64) & 1)
}

// ignoredOf reports whether sample s ignores label j: bit j%64 of word
// j/64 of the sample's second half of runtime.LabelWords(k) words.
func ignoredOf(labels []int64, k, s, j int) bool {
	w := runtime.LabelWords(k)
	return uint64(labels[s*w+w/2+j/64])>>uint(j%64)&1 == 1
}

// SigmoidCrossEntropy implements runtime.ReduceOps, in float64.
func (Device) SigmoidCrossEntropy(logits []float32, labels []int64, n, k int, alpha float32, posWeight, uncertain, losses, probs []float32) {
	a := float64(alpha)
	for s := 0; s < n; s++ {
		var sum float64
		for j := 0; j < k; j++ {
			z := float64(logits[s*k+j])
			probs[s*k+j] = float32(1 / (1 + math.Exp(-z)))
			t := (1-a)*labelOf(labels, k, s, j) + a/2
			if ignoredOf(labels, k, s, j) {
				if uncertain[j] <= 0 {
					continue // no term; the mean still over k
				}
				t = (1-a)*float64(uncertain[j]) + a/2
			}
			p := float64(posWeight[j])
			// −p·t·log σ(z) − (1−t)·log(1−σ(z)), σ(z) = 1/(1 + e^{−z}).
			sum += p*t*math.Log1p(math.Exp(-z)) + (1-t)*math.Log1p(math.Exp(z))
		}
		losses[s] = float32(sum / float64(k))
	}
}

// SigmoidCrossEntropyBackward implements runtime.ReduceOps.
func (Device) SigmoidCrossEntropyBackward(probs []float32, labels []int64, weights []float32, n, k int, alpha float32, posWeight, uncertain, dlogits []float32) {
	a := float64(alpha)
	for s := 0; s < n; s++ {
		w := float64(weights[s]) / float64(k)
		for j := 0; j < k; j++ {
			t := (1-a)*labelOf(labels, k, s, j) + a/2
			if ignoredOf(labels, k, s, j) {
				if uncertain[j] <= 0 {
					dlogits[s*k+j] = 0
					continue
				}
				t = (1-a)*float64(uncertain[j]) + a/2
			}
			p := float64(posWeight[j])
			// d/dz of −p·t·log σ(z) − (1−t)·log(1−σ(z)) = (p·t + 1 − t)·σ(z) − p·t.
			dlogits[s*k+j] = float32(w * ((p*t+1-t)*float64(probs[s*k+j]) - p*t))
		}
	}
}

// ScatterReduce implements runtime.ReduceOps: each update in turn, the
// combination in float64 (max and min propagate NaN).
func (Device) ScatterReduce(red runtime.ScatterReduction, u []float32, idx []int32, y []float32) {
	for i, j := range idx {
		a, b := float64(y[j]), float64(u[i])
		switch red {
		case runtime.ScatterReduceNone:
			a = b
		case runtime.ScatterReduceAdd:
			a += b
		case runtime.ScatterReduceMul:
			a *= b
		case runtime.ScatterReduceMax:
			if b > a || b != b {
				a = b
			}
		case runtime.ScatterReduceMin:
			if b < a || b != b {
				a = b
			}
		default:
			panic("reference: unknown scatter reduction")
		}
		y[j] = float32(a)
	}
}
