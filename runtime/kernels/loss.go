package kernels

import (
	"fmt"
	"math"
)

// SoftmaxCrossEntropy computes the per-sample loss
// loss_i = logsumexp(logits_i) − logits_i[label_i] for logits (n × k) and
// int64 labels (n). An out-of-range label is an error.
func SoftmaxCrossEntropy(logits []float32, n, k int, labels []int64, loss []float32) error {
	checkLen("logits", logits, n*k)
	checkLen("loss", loss, n)
	if err := checkLabels(labels, n, k); err != nil {
		return err
	}
	parallelFor(n, max(1, 4096/max(1, k)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := logits[i*k : (i+1)*k]
			mx, lse := logSumExp(row)
			loss[i] = float32(mx + lse - float64(row[labels[i]]))
		}
	})
	return nil
}

// SoftmaxCrossEntropyBackward writes the gradient of Σ_i w_i·loss_i with
// respect to the logits: dlogits_i = w_i·(softmax(logits_i) − onehot(label_i)).
// weights (n) may be nil for all ones; the DP engine passes the clipping
// factors C_i for its second backward pass.
func SoftmaxCrossEntropyBackward(logits []float32, n, k int, labels []int64, weights []float32, dlogits []float32) error {
	checkLen("logits", logits, n*k)
	checkLen("dlogits", dlogits, n*k)
	if weights != nil {
		checkLen("weights", weights, n)
	}
	if err := checkLabels(labels, n, k); err != nil {
		return err
	}
	parallelFor(n, max(1, 4096/max(1, k)), func(i0, i1 int) {
		for i := i0; i < i1; i++ {
			row := logits[i*k : (i+1)*k]
			d := dlogits[i*k : (i+1)*k]
			w := float64(1)
			if weights != nil {
				w = float64(weights[i])
			}
			mx, lse := logSumExp(row)
			for j, v := range row {
				d[j] = float32(w * math.Exp(float64(v)-mx-lse))
			}
			d[labels[i]] -= float32(w)
		}
	})
	return nil
}

// logSumExp returns the row maximum and log Σ exp(v − max), the stable
// split of logsumexp.
func logSumExp(row []float32) (mx, lse float64) {
	mx = math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return mx, math.Log(s)
}

func checkLabels(labels []int64, n, k int) error {
	if len(labels) < n {
		panic(fmt.Sprintf("kernels: %d labels for %d samples", len(labels), n))
	}
	for i, l := range labels[:n] {
		if l < 0 || l >= int64(k) {
			return fmt.Errorf("kernels: label %d of sample %d out of range [0, %d)", l, i, k)
		}
	}
	return nil
}
