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
		scale(d, -1)
	}
	if op == "Mul" || op == "Div" {
		ov, oShape := other.Data, other.Shape
		if other.BatchAxis >= 0 {
			sc.other = gatherSample(other, s.B, s.i, sc.other)
			ov, oShape = sc.other, sampleShape(other, s.B)
		}
		sc.d = grow(sc.d, len(gi))
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
				sc.self = gatherSample(s.op, s.B, s.i, sc.self)
				self, sShape = sc.self, s.opShape
			}
			sc.q = grow(sc.q, len(gi))
			q := sc.q
			s.ops.Binary(runtime.BinaryDiv, ov, oShape, self, sShape, q, gShape)
			s.ops.Binary(runtime.BinaryDiv, q, gShape, self, sShape, q, gShape)
			s.ops.Binary(runtime.BinaryMul, gi, gShape, q, gShape, d, gShape)
			scale(d, -1)
		}
	}
	s.ops.ReduceToShape(d, gShape, s.out, s.opShape)
	return nil
}
