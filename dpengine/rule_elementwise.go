package dpengine

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// Add, Sub, Mul and Div with numpy broadcasting: biases, layer scales,
// position embeddings, relative-position biases, the Mul/Add form of
// normalization affines.

func init() {
	registerElementwise(&elementwiseRule{operandGrad: arithmeticOperand, batch: arithmeticBatch}, "Add", "Sub", "Mul", "Div")
}

// arithmeticBatchOff turns arithmeticBatch off (tests compare it with the
// sample-by-sample path).
var arithmeticBatchOff bool

// arithmeticBatch is the per-sample gradient of a parameter added to or
// multiplied with a batched activation of the output's own shape (a
// GroupNorm's γ and β as torch exports them, a per-channel bias or scale),
// for the whole physical batch in one call: the operation's gradient with
// respect to the parameter reduced to [B, parameter shape] instead of to
// the parameter's shape, which keeps each sample's sum apart. The
// sample-by-sample path gathers each sample's output gradient and other
// operand, multiplies and reduces, at ResNet-18's 20 affines about 4 % of
// a book-keeping step. The sums are the same float64 sums of float32
// products (in another order within a row). Activations whose leading
// axis holds batch blocks (B·nW windows of a Swin stage, a sample's
// windows contiguous) reduce as [B, nW, …]. An operand that copies
// parameters through a layout-only path (useState.rowsMap: BEiT's
// relative-position bias gathered from its table, a q/v bias concatenated
// with zeros, a slice of a packed bias) takes the same reduction onto the
// operand's shape, each parameter's rows then mapped back at once
// (addPathRows) instead of the sub-plan sample by sample. It reports
// false, doing nothing, for any other case.
func arithmeticBatch(e *Engine, ev *runtime.HookEvent, g *useGroup) bool {
	op := ev.Node.OpType
	if arithmeticBatchOff || (op != "Add" && op != "Mul") {
		return false
	}
	us := g.uses[0]
	direct := len(g.uses) == 1 && g.sub == nil && us.idx == nil
	if !direct && us.rowsMap == nil {
		return false
	}
	k := us.use.Operand
	if k < 0 || k > 1 || len(ev.Inputs) != 2 {
		return false
	}
	B := e.cfg.PhysicalBatch
	prm, other, dy := &ev.Inputs[k], &ev.Inputs[1-k], &ev.DOut
	yShape := dy.Shape
	if len(other.Shape) != len(yShape) {
		return false
	}
	for d := range yShape {
		if other.Shape[d] != yShape[d] {
			return false
		}
	}
	if ax := dy.BatchAxis; ax >= 0 && ax < len(yShape) && B > 0 && yShape[ax] != B && yShape[ax]%B == 0 && dy.BatchStride == yShape[ax]/B*numel(yShape[ax+1:]) {
		// Batch blocks: the batch axis holds B blocks of rows, a
		// sample's block contiguous (Swin's window-batched tokens, B·nW
		// windows; a sample's augmented views, also inside a
		// sequence-first (T, B·k, D) attention's): seen as
		// [… B, k, …], the sample's rows are one more axis its sums run
		// over.
		if cap(e.blockShape) < len(yShape)+1 {
			e.blockShape = make([]int, len(yShape)+1)
		}
		ws := e.blockShape[:len(yShape)+1]
		copy(ws, yShape[:ax])
		ws[ax], ws[ax+1] = B, yShape[ax]/B
		copy(ws[ax+2:], yShape[ax+1:])
		yShape = ws
	}
	r := len(yShape)
	P := len(us.p.data) // the operand's elements: the parameter's, or the path's output
	if !direct {
		P = us.rowsMap.Len
	}
	ba := dy.BatchAxis // 0, or 1 for sequence-first (T, B, …) activations
	// A parameter's leading unit axes broadcast over the batch's (a ViT's
	// position embedding, 1 × T × D): they are not its own.
	pShape := prm.Shape
	for len(pShape) > r-1-ba && len(pShape) > 0 && pShape[0] == 1 {
		pShape = pShape[1:]
	}
	if prm.BatchAxis >= 0 || ba < 0 || other.BatchAxis != ba || r < ba+2 || yShape[ba] != B ||
		len(pShape) > r-1-ba || numel(pShape) != P || P == 0 ||
		len(other.Data) != len(dy.Data) || len(dy.Data) != numel(yShape) {
		return false
	}
	// [1…, B, 1…, parameter shape]: the parameter right-aligned after
	// the batch axis, each sample's reduction kept apart; the axes before
	// the batch's are reduced too, so that sample i's sums are the P
	// values at i·P.
	tShape := e.sampleTarget(r, ba, B)
	copy(tShape[r-len(pShape):], pShape)
	for d := range tShape {
		if d != ba && tShape[d] != 1 && tShape[d] != yShape[d] {
			return false
		}
	}
	buf, err := growOn(e.dev, e.affineScratch, 2*B*P)
	if err != nil {
		return false // the general path reports it
	}
	if !direct {
		size := 0
		for _, u := range g.uses {
			size = max(size, len(u.p.data))
		}
		if !e.reservePathRows(e.n, size) {
			return false
		}
	}
	e.affineScratch = buf
	buf, stand := buf[:B*P], buf[B*P:]
	if op == "Add" {
		e.ops.ReduceToShape(dy.Data, yShape, buf, tShape)
	} else {
		// d(x·γ)/dγ, reduced per sample; stand is γ's stand-in of
		// the reduced shape, which the gradient with respect to it does
		// not read.
		e.lay.BinaryBackward(runtime.BinaryMul, other.Data, yShape, stand, tShape, nil, dy.Data, yShape, nil, buf) // other's shape is dy's
	}
	if direct {
		return e.addSampleRows(us.p, 0, buf[:e.n*P])
	}
	for _, u := range g.uses {
		if !e.addPathRows(u.p, u.rowsMap, 0, e.n, buf[:e.n*P]) {
			panic("dpengine: path rows' scratch reserved, then refused") // reservePathRows grew it
		}
	}
	return true
}

// sampleTarget returns the engine's scratch shape of rank r, all ones but
// B on the batch axis ba, for a batched rule to fill with its parameter's
// shape: the shape a batch's gradient reduces to with each sample's sums
// kept apart. A hook runs once a step per node: the shape is reused, not
// allocated.
func (e *Engine) sampleTarget(r, ba, B int) []int {
	if cap(e.affineShape) < r {
		e.affineShape = make([]int, r)
	}
	t := e.affineShape[:r]
	for d := range t {
		t[d] = 1
	}
	t[ba] = B
	return t
}

// addSampleRows adds the per-sample gradients g (rows of the parameter's
// size, of the samples i0, i0+1, …) of a direct use to the parameter, as
// addSample does sample by sample, in one call or two: to its per-sample
// gradients, or their squared norms to the samples' (SquaredNorms then
// AddNormSq, the bits of AddSumSq row by row). It reports false, doing
// nothing, when the norms' scratch cannot be had (the caller's general
// path then runs and reports it).
func (e *Engine) addSampleRows(p *param, i0 int, g []float32) bool {
	size := len(p.data)
	if p.ps != nil {
		e.ops.Add(g, p.ps[i0*size:i0*size+len(g)])
		return true
	}
	n := len(g) / max(size, 1)
	if n == 0 {
		return true
	}
	buf, err := growF64On(e.dev, e.rowNorms, n)
	if err != nil {
		return false
	}
	e.rowNorms = buf
	e.ops.SquaredNorms(g[:n*size], buf[:n])
	e.ops.AddNormSq(buf[:n], p.normSq[i0:i0+n])
	return true
}

// arithmeticOperand is sample s.i's gradient with respect to input s.k of
// a binary arithmetic node: the output gradient times the local
// derivative, reduced over the axes along which the operand broadcasts.
func arithmeticOperand(ev *runtime.HookEvent, s sampleGrad, sc *opScratch) error {
	op, k, gi, gShape := ev.Node.OpType, s.k, s.gi, s.gShape
	if !reducesTo(gShape, s.opShape) {
		// An operand larger than a sample's output gradient along some
		// axis: a value of the batch's size taken for one computed from
		// parameters alone (a Resize of a parameter to the input's whole
		// shape). Its per-sample gradient is no reduction of the sample's.
		return fmt.Errorf("operand %d of shape %v: not a reduction of a sample's output gradient (%v)", k, s.opShape, gShape)
	}
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

// reducesTo reports whether a gradient of shape from sums to shape to by
// numpy broadcasting's adjoint: to aligned from the right, each of its
// axes 1 or from's.
func reducesTo(from, to []int) bool {
	if len(to) > len(from) {
		return false
	}
	for d, n := range to {
		if f := from[len(from)-len(to)+d]; n != 1 && n != f {
			return false
		}
	}
	return true
}

// numel is the number of elements of a shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
