package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Gemm and MatMul weights (y = α·x·W or x·Wᵀ for Gemm with transB), and
// Gemm's bias C.

func init() {
	registerLinear(&linearRule{perSample: matrixUse, weightedSum: matrixWeightedSum}, "Gemm", "MatMul")
	registerElementwise(&elementwiseRule{operandGrad: gemmBias}, "Gemm")
}

// matrixUse is the per-sample rule of a Gemm or MatMul weight: a_i is
// sample i's rows of the data operand (T×D) and g_i its rows of the output
// gradient (T×p), wherever the batch sits in them.
func matrixUse(e *Engine, ev *runtime.HookEvent, us *useState) error {
	ls, p := us.linear, us.p
	B := e.cfg.PhysicalBatch
	dout := &ev.DOut
	if dout.BatchAxis < 0 {
		return fmt.Errorf("output gradient has no batch axis")
	}
	data := &ev.Inputs[us.use.Data]
	if data.BatchAxis < 0 {
		return fmt.Errorf("input %q has no batch axis", data.Name)
	}
	ls.alpha = 1
	ls.weightLayoutPD = false
	if ev.Node.OpType == "Gemm" {
		if a, err := ev.Node.Float("alpha"); err == nil {
			ls.alpha = a
		}
		if ta, _ := ev.Node.Int("transA"); ta != 0 {
			return fmt.Errorf("Gemm with transA=1 is not supported for per-sample gradients")
		}
		if tb, _ := ev.Node.Int("transB"); tb != 0 {
			ls.weightLayoutPD = true
		}
	}
	if us.use.Operand != 1 {
		return fmt.Errorf("%s parameter as operand %d is not supported", ev.Node.OpType, us.use.Operand)
	}
	D, P := int(ls.layer.D), int(ls.layer.P)
	T := len(data.Data) / B / D
	if T*B*D != len(data.Data) || T*B*P != len(dout.Data) {
		return fmt.Errorf("unexpected shapes %v and %v for D=%d p=%d", data.Shape, dout.Shape, D, P)
	}
	ls.T = T
	if e.cfg.Mode == BK && p.ps == nil {
		ls.x, ls.xStride = data.Data, data.BatchStride
		ls.dy, ls.dyStride = dout.Data, dout.BatchStride
	}
	size := D * P // the operand's: the parameter's unless through a path
	need := T*D + T*P + 2*T*T
	if ls.decision == rewrite.Instantiate {
		need = T*D + T*P + size
	}
	bufs, err := e.workerBufs(need)
	if err != nil {
		return err
	}
	e.forSamples(e.n, func(w, i int) {
		buf := bufs[w]
		a := gatherSample(e.lay, data, B, i, buf[:0:T*D])
		g := gatherSample(e.lay, dout, B, i, buf[T*D:T*D:T*D+T*P])
		rest := buf[T*D+T*P:]
		if ls.decision == rewrite.Ghost {
			p.normSq[i] += float64(ls.alpha*ls.alpha) * ghostNormSq(e.ops, a, T, D, g, P, rest) // host write: a device accumulation
			return
		}
		inst := rest[:size]
		if ls.weightLayoutPD {
			e.ops.GemmSerial(true, false, P, D, T, ls.alpha, g, P, a, D, 0, inst, D)
		} else {
			e.ops.GemmSerial(true, false, D, P, T, ls.alpha, a, D, g, P, 0, inst, P)
		}
		us.addSample(e.ops, i, 0, inst)
	})
	return nil
}

// matrixWeightedSum is book-keeping's Σ_i c_i g_iᵀa_i of a Gemm or MatMul
// weight (see linearState.weightedSum).
func matrixWeightedSum(ls *linearState, c []float32, B int, accum []float32, overwrite bool, _ *[]float32, _ []float32) error {
	D, P := int(ls.layer.D), int(ls.layer.P)
	rows := len(ls.dy) / P
	// Σ_i c_i g_iᵀa_i = Σ_rows (c_{sample(row)} g_row)ᵀ a_row: scale each
	// output-gradient row by its sample's factor and take one GEMM over
	// all rows, whatever the layout of the batch in them.
	scaled := ls.dy
	for r := 0; r < rows; r++ {
		ci := c[(r*P/ls.dyStride)%B] * ls.alpha
		ls.ops.Scale(ci, scaled[r*P:(r+1)*P])
	}
	beta := float32(1)
	if overwrite {
		beta = 0
	}
	if ls.weightLayoutPD {
		ls.ops.Gemm(true, false, P, D, rows, 1, scaled, P, ls.x, D, beta, accum, D)
	} else {
		ls.ops.Gemm(true, false, D, P, rows, 1, ls.x, D, scaled, P, beta, accum, P)
	}
	return nil
}

// gemmBias is sample s.i's gradient with respect to a Gemm's bias C:
// β times the output gradient summed over the sample's rows.
func gemmBias(ev *runtime.HookEvent, s sampleGrad, _ *opScratch) error {
	if s.k != 2 {
		return fmt.Errorf("Gemm operand %d is not the bias C", s.k)
	}
	if beta, err := ev.Node.Float("beta"); err == nil && beta != 1 {
		s.ops.Scale(beta, s.gi)
	}
	p := s.gShape[len(s.gShape)-1]
	s.ops.ReduceToShape(s.gi, []int{len(s.gi) / p, p}, s.out, s.opShape)
	return nil
}
