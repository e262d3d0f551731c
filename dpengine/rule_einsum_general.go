package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// A weight of a two-operand Einsum that is not a grouped linear layer
// (rewrite.SplitEinsum refuses it: a weight label summed on its own, a
// data label summed on its own, a diagonal, a broadcast axis): the plan
// makes it an elementwise use, and sample i's gradient is the equation's
// gradient with respect to the weight on the sample's slice of the other
// operand and of the output gradient, instantiated:
//
//	dW[w] = Σ over the labels not fixed by w of A[a]·G[y]
//
// (a diagonal of the weight gets only its diagonal, a broadcast axis of it
// the sum). The batch label has size 1 in the sample's slices, so the
// equation is the node's own.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: einsumOperand}, "Einsum")
}

func einsumOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	if len(ev.Inputs) != 2 {
		return fmt.Errorf("Einsum of %d operands", len(ev.Inputs))
	}
	eq, err := ev.Node.Str("equation")
	if err != nil {
		return err
	}
	data := &ev.Inputs[1-s.k]
	ai, aShape := data.Data, data.Shape
	if data.BatchAxis >= 0 {
		if sc.other, err = gatherOn(s.dev, s.lay, data, s.B, s.i, sc.other); err != nil {
			return err
		}
		ai, aShape = sc.other, sampleShape(data, s.B)
	}
	shapes := make([][]int64, 2)
	shapes[s.k], shapes[1-s.k] = int64s(s.opShape), int64s(aShape)
	spec, err := graph.ParseEinsum(eq, []int{len(shapes[0]), len(shapes[1])})
	if err != nil {
		return err
	}
	size, err := spec.Sizes(shapes)
	if err != nil {
		return err
	}
	var labels []rune
	pos := map[rune]int{}
	for _, ls := range [][]rune{spec.Inputs[0], spec.Inputs[1], spec.Output} {
		for _, c := range ls {
			if _, ok := pos[c]; !ok {
				pos[c] = len(labels)
				labels = append(labels, c)
			}
		}
	}
	dims := make([]int, len(labels))
	for i, c := range labels {
		dims[i] = int(size[c])
	}
	// Per label, the stride of each tensor (0 where it lacks the label or
	// broadcasts it).
	strideOf := func(ls []rune, sh []int) []int {
		st := make([]int, len(labels))
		acc := 1
		for a := len(ls) - 1; a >= 0; a-- {
			if sh[a] != 1 {
				st[pos[ls[a]]] += acc
			}
			acc *= sh[a]
		}
		return st
	}
	gShape := s.gShape
	if len(gShape) != len(spec.Output) {
		return fmt.Errorf("output gradient %v does not match equation %q", gShape, eq)
	}
	stW, stA, stY := strideOf(spec.Inputs[s.k], s.opShape), strideOf(spec.Inputs[1-s.k], aShape), strideOf(spec.Output, gShape)
	// Host scratch: the contraction below runs on the host (host read of
	// the operands; not yet a device operation).
	sc.acc = growF64(sc.acc, len(s.out))
	acc := sc.acc
	clear(acc)
	coord := make([]int, len(labels))
	w, a, y := 0, 0, 0
	for {
		acc[w] += float64(ai[a]) * float64(s.gi[y])
		k := len(labels) - 1
		for ; k >= 0; k-- {
			coord[k]++
			w, a, y = w+stW[k], a+stA[k], y+stY[k]
			if coord[k] < dims[k] {
				break
			}
			w, a, y = w-coord[k]*stW[k], a-coord[k]*stA[k], y-coord[k]*stY[k]
			coord[k] = 0
		}
		if k < 0 {
			break
		}
	}
	for j, v := range acc {
		s.out[j] = float32(v)
	}
	return nil
}

func growF64(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}
