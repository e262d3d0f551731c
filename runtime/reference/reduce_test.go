package reference

import (
	"fmt"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// TestReduceOps holds every ReduceOps operation of the reference device
// against the CPU's on random inputs: each reduction over single axes,
// several axes and all of them, softmax and log-softmax along contiguous
// and strided axes, and the cross-entropy head, forward and backward.
func TestReduceOps(t *testing.T) {
	var cases []opCase
	xShape := []int{3, 4, 5}
	n := numel(xShape)
	for _, axes := range [][]int{{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}} {
		yShape := append([]int(nil), xShape...)
		for _, a := range axes {
			yShape[a] = 1
		}
		m := numel(yShape)
		grp := runtime.ReduceGroups(xShape, yShape)
		dy := randIn(uint64(100+len(cases)), m, -1, 1)
		for op := runtime.ReduceSum; op <= runtime.ReduceLogSumExp; op++ {
			x := randIn(uint64(200+len(cases)), n, -2, 2)
			switch op {
			case runtime.ReduceLogSum:
				x = randIn(uint64(300+len(cases)), n, 0.1, 2)
			case runtime.ReduceProd:
				x = awayFromZero(uint64(400+len(cases)), n, 0.5, 1.5)
				// One zero in the first output's group, two in the last's
				// (all three in one group when all axes are reduced).
				x[0], x[n-1] = 0, 0
				for i := range x {
					if grp[i] == grp[n-1] && i != n-1 {
						x[i] = 0
						break
					}
				}
			case runtime.ReduceMax, runtime.ReduceMin:
				x[n/2] = float32(math.NaN())
			}
			cases = append(cases, opCase{name: fmt.Sprintf("%v/axes=%v", op, axes), run: func(d runtime.GraphOps) [][]float32 {
				y, dx := make([]float32, m), make([]float32, n)
				state := make([]float64, runtime.ReduceStateLen(op, m))
				d.ReduceAxes(op, x, xShape, y, yShape, grp, state)
				d.ReduceAxesBackward(op, x, xShape, y, dy, yShape, grp, state, dx)
				return [][]float32{y, dx}
			}})
		}
	}
	// Softmax along each axis of (6, 70, 9): strided (inner > 1) and
	// contiguous rows; the backward reads the reference's forward output
	// on both devices.
	sShape := []int{6, 70, 9}
	sx := randIn(500, numel(sShape), -6, 6)
	sdy := randIn(501, numel(sShape), -1, 1)
	for ax := range sShape {
		outer, L, inner := numel(sShape[:ax]), sShape[ax], numel(sShape[ax+1:])
		for _, log := range []bool{false, true} {
			yRef := make([]float32, len(sx))
			if log {
				Device{}.LogSoftmax(sx, outer, L, inner, yRef)
			} else {
				Device{}.Softmax(sx, outer, L, inner, yRef)
			}
			// abs: the CPU's backward subtracts Σ dy·y rounded to float32
			// from dy (|dy| ≤ 1), which cancels.
			cases = append(cases, opCase{name: fmt.Sprintf("Softmax/log=%v/axis=%d", log, ax), abs: 2e-7, run: func(d runtime.GraphOps) [][]float32 {
				y, dx := make([]float32, len(sx)), make([]float32, len(sx))
				if log {
					d.LogSoftmax(sx, outer, L, inner, y)
					d.LogSoftmaxBackward(yRef, sdy, outer, L, inner, dx)
				} else {
					d.Softmax(sx, outer, L, inner, y)
					d.SoftmaxBackward(yRef, sdy, outer, L, inner, dx)
				}
				return [][]float32{y, dx}
			}})
		}
	}
	const N, K = 7, 10
	logits := randIn(600, N*K, -8, 8)
	labels := []int64{0, 9, 3, 3, 5, 1, 8}
	weights := randIn(601, N, 0, 1)
	probsRef, lossRef := make([]float32, N*K), make([]float32, N)
	Device{}.SoftmaxCrossEntropy(logits, labels, N, K, 0, lossRef, probsRef)
	for _, alpha := range []float32{0, 0.1, 0.5} {
		cases = append(cases, opCase{name: fmt.Sprint("SoftmaxCrossEntropy/smoothing", alpha), run: func(d runtime.GraphOps) [][]float32 {
			losses, probs, dl := make([]float32, N), make([]float32, N*K), make([]float32, N*K)
			d.SoftmaxCrossEntropy(logits, labels, N, K, alpha, losses, probs)
			d.SoftmaxCrossEntropyBackward(probsRef, labels, weights, N, K, alpha, dl)
			return [][]float32{losses, probs, dl}
		}})
	}
	// The multi-label head on 5 labels: label sets as bits, then the
	// labels each ignores (runtime.LabelWords: two words a sample; sample
	// 2 ignores label 1, sample 3 labels 0 and 4 — one it has —, sample 6
	// all), large logits of both signs.
	sets := []int64{0, 0, 31, 0, 5, 2, 16, 17, 1, 0, 30, 0, 9, 31}
	mlLogits := randIn(602, N*5, -30, 30)
	mlProbs, mlLoss := make([]float32, N*5), make([]float32, N)
	ones5, posWeight := []float32{1, 1, 1, 1, 1}, []float32{2, 0.5, 1, 3.25, 0}
	// Soft targets of the uncertain (ignored) labels: labels 0 and 4
	// uncertain at 0.7 and 0.2, the others left out.
	none5, soft := make([]float32, 5), []float32{0.7, 0, 0, 0, 0.2}
	Device{}.SigmoidCrossEntropy(mlLogits, sets, N, 5, 0, ones5, none5, mlLoss, mlProbs)
	for _, alpha := range []float32{0, 0.2} {
		for _, pw := range [][]float32{ones5, posWeight} {
			for _, u := range [][]float32{none5, soft} {
				name := fmt.Sprint("SigmoidCrossEntropy/smoothing", alpha)
				if pw[0] != 1 {
					name += "/pos_weight"
				}
				if u[0] != 0 {
					name += "/uncertain"
				}
				cases = append(cases, opCase{name: name, run: func(d runtime.GraphOps) [][]float32 {
					losses, probs, dl := make([]float32, N), make([]float32, N*5), make([]float32, N*5)
					d.SigmoidCrossEntropy(mlLogits, sets, N, 5, alpha, pw, u, losses, probs)
					d.SigmoidCrossEntropyBackward(mlProbs, sets, weights, N, 5, alpha, pw, u, dl)
					return [][]float32{losses, probs, dl}
				}})
			}
		}
	}
	// More labels than a word holds: 130 labels, three words a sample and
	// three of the labels it ignores (runtime.LabelWords), labels in every
	// word, about one in four ignored.
	const wide = 130
	wideSets := make([]int64, N*runtime.LabelWords(wide))
	for i := range wideSets {
		wideSets[i] = int64(uint64(0x9e3779b97f4a7c15) * uint64(i+1) >> 1)
		if i%6 >= 3 {
			wideSets[i] &= int64(uint64(0xd1b54a32d192ed03) * uint64(i+7) >> 1)
		}
		if i%3 == 2 { // no bit at or past label 130
			wideSets[i] &= 1<<(wide-128) - 1
		}
	}
	wideLogits, widePW := randIn(603, N*wide, -20, 20), randIn(604, wide, 0, 4)
	wideSoft := randIn(605, wide, -1, 1) // half the labels' uncertain entries soft, half left out
	for j, v := range wideSoft {
		wideSoft[j] = max(v, 0)
	}
	wideProbs, wideLoss := make([]float32, N*wide), make([]float32, N)
	Device{}.SigmoidCrossEntropy(wideLogits, wideSets, N, wide, 0, widePW, wideSoft, wideLoss, wideProbs)
	cases = append(cases, opCase{name: "SigmoidCrossEntropy/130 labels", run: func(d runtime.GraphOps) [][]float32 {
		losses, probs, dl := make([]float32, N), make([]float32, N*wide), make([]float32, N*wide)
		d.SigmoidCrossEntropy(wideLogits, wideSets, N, wide, 0.1, widePW, wideSoft, losses, probs)
		d.SigmoidCrossEntropyBackward(wideProbs, wideSets, weights, N, wide, 0.1, widePW, wideSoft, dl)
		return [][]float32{losses, probs, dl}
	}})
	// ScatterReduce with repeated offsets (the reductions accumulate in
	// order) and a NaN update.
	data := randIn(700, 50, -1, 1)
	upd := randIn(701, 30, -1, 1)
	upd[4] = float32(math.NaN())
	sIdx := make([]int32, len(upd))
	for i := range sIdx {
		sIdx[i] = int32(i * 7 % 50)
	}
	uniq := make([]int32, len(upd)) // for replacement: distinct offsets
	for i := range uniq {
		uniq[i] = int32(i * 3 % 50)
	}
	for red := runtime.ScatterReduceNone; red <= runtime.ScatterReduceMin; red++ {
		cases = append(cases, opCase{name: fmt.Sprintf("ScatterReduce/%d", red), run: func(d runtime.GraphOps) [][]float32 {
			y := append([]float32(nil), data...)
			idx := sIdx
			if red == runtime.ScatterReduceNone {
				idx = uniq
			}
			d.ScatterReduce(red, upd, idx, y)
			return [][]float32{y}
		}})
	}
	compareWithCPU(t, cases)
}

// TestReduceHand checks the reference device on hand-computed cases.
func TestReduceHand(t *testing.T) {
	var d Device
	x := []float32{1, -2, 3, 0, 5, -6} // 2×3
	rows := func(op runtime.ReduceOp) []float32 {
		y := make([]float32, 2)
		d.ReduceAxes(op, x, []int{2, 3}, y, []int{2, 1}, nil, nil)
		return y
	}
	cols := func(op runtime.ReduceOp, dy []float32) []float32 {
		dx := make([]float32, 6)
		d.ReduceAxesBackward(op, x, []int{2, 3}, nil, dy, []int{1, 3}, nil, nil, dx)
		return dx
	}
	ce := func() []float32 {
		loss, probs := make([]float32, 1), make([]float32, 2)
		d.SoftmaxCrossEntropy([]float32{0, 0}, []int64{1}, 1, 2, 0, loss, probs)
		return append(loss, probs...)
	}
	// Label smoothing by hand: logits (0, ln 3) give p = (¼, ¾); label 1
	// and α = 0.2 over 2 classes give t = (0.1, 0.9): the loss
	// −0.1·ln ¼ − 0.9·ln ¾ and the gradient w·(p − t) = (0.15, −0.15)·2.
	smoothed := func() []float32 {
		loss, probs, dl := make([]float32, 1), make([]float32, 2), make([]float32, 2)
		d.SoftmaxCrossEntropy([]float32{0, float32(math.Log(3))}, []int64{1}, 1, 2, 0.2, loss, probs)
		d.SoftmaxCrossEntropyBackward(probs, []int64{1}, []float32{2}, 1, 2, 0.2, dl)
		return append(loss, dl...)
	}
	// The multi-label head by hand: logits (0, ln 3) are σ = (½, ¾); the
	// label set {1} (bits 0b10) gives the loss (−ln(1−½) − ln ¾)/2 and,
	// of weight 2, the gradient 2·(σ − t)/2 = (½, −¼).
	multiWeighed := func(alpha float32, pw []float32) []float32 {
		loss, probs, dl := make([]float32, 1), make([]float32, 2), make([]float32, 2)
		d.SigmoidCrossEntropy([]float32{0, float32(math.Log(3))}, []int64{2, 0}, 1, 2, alpha, pw, []float32{0, 0}, loss, probs)
		d.SigmoidCrossEntropyBackward(probs, []int64{2, 0}, []float32{2}, 1, 2, alpha, pw, []float32{0, 0}, dl)
		return append(append(loss, probs...), dl...)
	}
	multi := func(alpha float32) []float32 { return multiWeighed(alpha, []float32{1, 1}) }
	// The same set ignoring label 0 (its second word 0b01): label 0's term
	// gone, the mean still over 2 — the loss −ln ¾ / 2 —, its gradient 0,
	// its sigmoid still ½.
	ignoring := func(u []float32) []float32 {
		loss, probs, dl := make([]float32, 1), make([]float32, 2), []float32{9, 9}
		d.SigmoidCrossEntropy([]float32{0, float32(math.Log(3))}, []int64{2, 1}, 1, 2, 0, []float32{1, 1}, u, loss, probs)
		d.SigmoidCrossEntropyBackward(probs, []int64{2, 1}, []float32{2}, 1, 2, 0, []float32{1, 1}, u, dl)
		return append(append(loss, probs...), dl...)
	}
	// Label 0 uncertain at the soft target 0.3 instead: its term
	// −0.3·ln ½ − 0.7·ln ½ = ln 2 back, its gradient 2·(½ − 0.3)/2 = 0.2.
	softTarget := float32((math.Ln2 - math.Log(0.75)) / 2)
	// Label 1's positive term weighed by 3 (label 0's weight 5 weighs
	// nothing: label 0 does not apply): the loss (−ln ½ − 3·ln ¾)/2, the
	// gradient (σ − 0, (1 + 2·1)·σ − 3) = (½, −¾).
	posWeighted := float32((math.Ln2 - 3*math.Log(0.75)) / 2)
	// Smoothed by α = 0.2, the targets are (0.1, 0.9): the loss
	// (−0.9·ln ½ − 0.1·ln ½ − 0.1·ln ¼ − 0.9·ln ¾)/2, the gradient
	// 2·(σ − t)/2 = (0.4, −0.15).
	smoothedMulti := float32((math.Ln2 - 0.1*math.Log(0.25) - 0.9*math.Log(0.75)) / 2)
	// 130 labels by hand: logits z_j = (j − 60)/20, labels 0, 64 and 129
	// applying (one in each word): each term softplus(z) − t·z, their mean
	// — ignoring labels 63 and 129, without their terms and gradients.
	wideHand := func(ignore bool) []float32 {
		const k = 130
		logits := make([]float32, k)
		for j := range logits {
			logits[j] = float32(j-60) / 20
		}
		ones := make([]float32, k)
		for j := range ones {
			ones[j] = 1
		}
		loss, probs, dl := make([]float32, 1), make([]float32, k), make([]float32, k)
		set := []int64{1, 1, 1 << 1, 0, 0, 0}
		if ignore { // labels 63 (word 0's last bit) and 129 ignored
			set[3], set[5] = math.MinInt64, 1<<1
		}
		d.SigmoidCrossEntropy(logits, set, 1, k, 0, ones, make([]float32, k), loss, probs)
		d.SigmoidCrossEntropyBackward(probs, set, []float32{k}, 1, k, 0, ones, make([]float32, k), dl)
		// The gradient of weight k: σ(z) − t, label 64's σ(0.2) − 1.
		return []float32{loss[0], dl[64], dl[63], dl[129], probs[129]}
	}
	wideWant := func(ignore bool) []float32 {
		var want float64
		for j := range 130 {
			if ignore && (j == 63 || j == 129) {
				continue
			}
			z, t := float64(j-60)/20, 0.0
			if j == 0 || j == 64 || j == 129 {
				t = 1
			}
			want += math.Log1p(math.Exp(z)) - t*z
		}
		d63, d129 := float32(1/(1+math.Exp(-0.15))), float32(1/(1+math.Exp(-3.45))-1)
		if ignore {
			d63, d129 = 0, 0
		}
		return []float32{float32(want / 130), float32(1/(1+math.Exp(-0.2)) - 1), d63, d129, float32(1 / (1 + math.Exp(-3.45)))}
	}
	for _, c := range []struct {
		name      string
		got, want []float32
	}{
		{"SigmoidCrossEntropy/130 labels", wideHand(false), wideWant(false)},
		{"SigmoidCrossEntropy/130 labels/ignoring", wideHand(true), wideWant(true)},
		{"SigmoidCrossEntropy/ignoring", ignoring([]float32{0, 0}), []float32{float32(-math.Log(0.75) / 2), 0.5, 0.75, 0, -0.25}},
		{"SigmoidCrossEntropy/uncertain", ignoring([]float32{0.3, 0}), []float32{softTarget, 0.5, 0.75, 0.2, -0.25}},
		{"SigmoidCrossEntropy", multi(0), []float32{float32((math.Ln2 - math.Log(0.75)) / 2), 0.5, 0.75, 0.5, -0.25}},
		{"SigmoidCrossEntropy/smoothing", multi(0.2), []float32{smoothedMulti, 0.5, 0.75, 0.4, -0.15}},
		{"SigmoidCrossEntropy/pos_weight", multiWeighed(0, []float32{5, 3}), []float32{posWeighted, 0.5, 0.75, 0.5, -0.75}},
		{"ReduceSum", rows(runtime.ReduceSum), []float32{2, -1}},
		{"ReduceMean", rows(runtime.ReduceMean), []float32{2.0 / 3, -1.0 / 3}},
		{"ReduceMax", rows(runtime.ReduceMax), []float32{3, 5}},
		{"ReduceProd", rows(runtime.ReduceProd), []float32{-6, 0}},
		{"ReduceL1", rows(runtime.ReduceL1), []float32{6, 11}},
		{"ReduceSumSquare", rows(runtime.ReduceSumSquare), []float32{14, 61}},
		{"ReduceMinBackward", cols(runtime.ReduceMin, []float32{1, 2, 3}), []float32{0, 2, 0, 1, 0, 3}},
		{"ReduceProdBackward", cols(runtime.ReduceProd, []float32{1, 1, 1}), []float32{0, 5, -6, 1, -2, 3}},
		{"SoftmaxCrossEntropy", ce(), []float32{float32(math.Ln2), 0.5, 0.5}},
		{"SoftmaxCrossEntropy/smoothing", smoothed(), []float32{float32(-0.1*math.Log(0.25) - 0.9*math.Log(0.75)), 0.3, -0.3}},
		{"ScatterReduceMul", func() []float32 {
			y := []float32{1, 2, 3}
			d.ScatterReduce(runtime.ScatterReduceMul, []float32{4, 5, -1}, []int32{2, 0, 2}, y)
			return y
		}(), []float32{5, 2, -12}},
	} {
		if err := closeTo(c.got, c.want, 1e-6, 0); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
