package dpengine

import (
	"github.com/dpfinetune/dpfinetune/runtime"
)

// Add, Sub, Mul and Div with numpy broadcasting: biases, layer scales,
// position embeddings, relative-position biases, the Mul/Add form of
// normalization affines.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: arithmeticOperand}, "Add", "Sub", "Mul", "Div")
}

// arithmeticOperand is sample s.i's gradient with respect to input s.k of
// a binary arithmetic node: the output gradient times the local
// derivative, reduced over the axes along which the operand broadcasts.
func arithmeticOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	op, k, gi, gShape := ev.Node.OpType, s.k, s.gi, s.gShape
	d := gi
	other := &ev.Inputs[1-k]
	if op == "Sub" && k == 1 {
		s.ops.Scale(-1, d)
	}
	if op == "Mul" || op == "Div" {
		ov, oShape := other.Data, other.Shape
		if other.BatchAxis >= 0 {
			var err error
			if sc.other, err = gatherOn(s.dev, s.lay, other, s.B, s.i, sc.other); err != nil {
				return err
			}
			ov, oShape = sc.other, sampleShape(other, s.B)
		}
		var err error
		if sc.d, err = growOn(s.dev, sc.d, len(gi)); err != nil {
			return err
		}
		d = sc.d
		switch {
		case op == "Mul":
			s.ops.Binary(runtime.BinaryMul, gi, gShape, ov, oShape, d, gShape)
		case k == 0: // d(a/b)/da = 1/b
			s.ops.Binary(runtime.BinaryDiv, gi, gShape, ov, oShape, d, gShape)
		default: // d(a/b)/db = -a/b² = -(a/b)/b
			self := s.op.Data
			sShape := s.op.Shape
			if s.op.BatchAxis >= 0 {
				if sc.self, err = gatherOn(s.dev, s.lay, s.op, s.B, s.i, sc.self); err != nil {
					return err
				}
				self, sShape = sc.self, s.opShape
			}
			if sc.q, err = growOn(s.dev, sc.q, len(gi)); err != nil {
				return err
			}
			q := sc.q
			s.ops.Binary(runtime.BinaryDiv, ov, oShape, self, sShape, q, gShape)
			s.ops.Binary(runtime.BinaryDiv, q, gShape, self, sShape, q, gShape)
			s.ops.Binary(runtime.BinaryMul, gi, gShape, q, gShape, d, gShape)
			s.ops.Scale(-1, d)
		}
	}
	s.ops.ReduceToShape(d, gShape, s.out, s.opShape)
	return nil
}
