package runtime

import (
	"fmt"
	"testing"
)

// TestBatchedMatMulGradCheck covers the batched MatMul paths: uniform
// batches (SgemmStrided), one operand shared by every product (a stride of
// 0: its gradient sums over the batch), and batch broadcasts that are not
// uniform (the per-product loop).
func TestBatchedMatMulGradCheck(t *testing.T) {
	cases := []struct{ a, b []int64 }{
		{[]int64{3, 4, 5}, []int64{3, 5, 2}},       // uniform
		{[]int64{1, 4, 5}, []int64{3, 5, 2}},       // A shared
		{[]int64{3, 4, 5}, []int64{1, 5, 2}},       // B shared (batched axis of 1)
		{[]int64{2, 1, 4, 5}, []int64{1, 3, 5, 2}}, // not uniform
		{[]int64{2, 3, 4, 5}, []int64{2, 3, 5, 2}}, // uniform, two batch axes
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.a, c.b), func(t *testing.T) {
			b := newBuilder(9, 14)
			b.param("a", c.a...)
			b.param("b", c.b...)
			b.node("MatMul", []string{"a", "b"}, "y")
			gradCheck(t, b.graph(t, "y"), nil)
		})
	}
}
