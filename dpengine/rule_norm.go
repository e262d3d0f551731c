package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The scale and bias of native normalization nodes: LayerNormalization
// (opset 17), GroupNormalization (opset 18, per-group or per-channel
// affine) and InstanceNormalization. With x̂ the normalized input of a
// sample (from the runtime's own row statistics),
// sample i's gradient is Σ g·x̂ for the scale and Σ g for the bias, summed
// over the positions that share a parameter element.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: normOperand}, "LayerNormalization", "GroupNormalization", "InstanceNormalization")
}

// normOperand is sample s.i's gradient with respect to the scale (input 1)
// or the bias (input 2) of a normalization node. The rows, their
// statistics and the parameter each element uses are the runtime's own
// (runtime.NormRows), so x̂ has the forward's bits.
func normOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	if s.k != 1 && s.k != 2 {
		return fmt.Errorf("%s input %d is not a scale or bias", ev.Node.OpType, s.k)
	}
	nr, x := ev.Norm, &ev.Inputs[0]
	if nr == nil {
		return fmt.Errorf("%s was not compiled as a normalization", ev.Node.OpType)
	}
	if x.BatchAxis < 0 {
		return fmt.Errorf("%s input has no batch axis", ev.Node.OpType)
	}
	L := nr.RowLen()
	var err error
	if sc.self, err = gatherOn(s.dev, s.lay, x, s.B, s.i, sc.self); err != nil {
		return err
	}
	xi, gi := sc.self, s.gi
	if len(xi) != len(gi) || len(xi)%L != 0 || x.BatchStride%L != 0 {
		return fmt.Errorf("%s input of %d and output gradient of %d elements per sample for rows of %d (batch stride %d)",
			ev.Node.OpType, len(xi), len(gi), L, x.BatchStride)
	}
	// Host scratch: these sums run on the host (host read of the
	// gathered sample and the output gradient; not yet a device
	// operation), so their accumulator is host memory.
	if cap(sc.acc) < len(s.out) {
		sc.acc = make([]float64, len(s.out))
	}
	acc := sc.acc[:len(s.out)]
	clear(acc)
	// gatherSample took blocks s.i, s.i+B, … of BatchStride elements: the
	// sample's row r is row r mod perBlock of block s.i + (r / perBlock)·B.
	perBlock := x.BatchStride / L
	for row := 0; row < len(xi)/L; row++ {
		global := (s.i+row/perBlock*s.B)*perBlock + row%perBlock
		xr, gr := xi[row*L:(row+1)*L], gi[row*L:(row+1)*L]
		if s.k == 2 {
			for j, g := range gr {
				acc[nr.Param(global, j)] += float64(g)
			}
			continue
		}
		mf, ivf := nr.Stats(global)
		for j, g := range gr {
			acc[nr.Param(global, j)] += float64(g * (xr[j] - mf) * ivf)
		}
	}
	for k, v := range acc {
		s.out[k] = float32(v)
	}
	return nil
}
