package runtime

// Batched products that read or write through a transposition.
//
// torch 1.13 exports nn.MultiheadAttention sequence-first: q, k and v are
// (T, B·H, d) views of the packed projection, and the products are
//
//	S = Div(Transpose(q, 1,0,2), √d) · Transpose(k, 1,2,0)   (B·H, T, T)
//	O = Transpose(P · Transpose(v, 1,0,2), 1,0,2)             (T, B·H, d)
//
// Each Transpose is a full pass over a (T, B·H, d) tensor forward and
// another backward, and the Div one more each way: on ViT-B/16 at batch
// 32, ten passes of 19 MB a layer. A batched product reads its operands
// at any row pitch and item stride (GemmStrided's lda and stride), so
// product i of the transposed operand is rows t of item i at pitch B·H·d
// and offset i·d: the transposition is free, and the scalar division is
// the product's α. fuseMatMuls folds such Transposes (and a scalar Div or
// Mul of the first operand, and a Transpose of the output back to
// sequence-first) into one FusedMatMul node. Only products of activations
// fold: a MatMul reading a parameter is hooked by the DP engine, which
// sees its operands as the graph has them.

import (
	"github.com/dpfinetune/dpfinetune/graph"
)

// fusedMatMul is the operator name of the folded products.
const fusedMatMul = "FusedMatMul"

// fuseMatMulsOff turns the fold off (tests compare it with the unfolded
// plan).
var fuseMatMulsOff bool

// Layouts of a folded product's operands and result, for items i < nb of
// an M×K by K×N product: plain is (nb, rows, cols); seq is (rows, nb,
// cols), the sequence-first source of a Transpose(1,0,2); trans is (cols,
// nb, rows) read transposed, the source of a Transpose(1,2,0) (B only).
const (
	mmPlain = iota
	mmSeq
	mmTrans
)

// mmFold is a FusedMatMul's geometry: the items, the product's sizes, the
// scale α and the layouts of A, B and C.
type mmFold struct {
	nb, M, K, N int
	alpha       float32
	a, b, c     int
}

// pitch returns the row pitch and item stride of an operand of rows×cols
// per item in layout l.
func (f *mmFold) pitch(l, rows, cols int) (ld, stride int) {
	switch l {
	case mmSeq:
		return f.nb * cols, cols
	case mmTrans: // stored cols×rows per item, at pitch nb·rows
		return f.nb * rows, rows
	}
	return cols, rows * cols
}

// fuseMatMuls folds transposed operands and results of 3-D MatMuls of
// activations into FusedMatMul nodes (see the top of this file). It needs
// the consumer lists (linkConsumers), which it leaves stale.
func (p *Plan) fuseMatMuls() {
	if fuseMatMulsOff {
		return
	}
	isOut := map[*tensor]bool{}
	for _, t := range p.outputs {
		isOut[t] = true
	}
	// single reports whether t's only reader is nd and nothing else may
	// observe it: the value a fold removes.
	single := func(t *tensor, nd *node) bool {
		return t != nil && len(t.cons) == 1 && t.cons[0] == nd && !isOut[t] && !t.param && !t.derived && !t.isConst && !t.isInput
	}
	activation := func(t *tensor) bool {
		return t != nil && !t.param && !t.derived && !t.isConst && t.i64 == nil && t.b == nil
	}
	prod := func(t *tensor) *node {
		if t == nil || t.prod < 0 {
			return nil
		}
		return p.nodes[t.prod]
	}
	// transposeOf returns the Transpose node producing t with perm want
	// (3-D), if t is its only output's single read by nd.
	removed := map[*node]bool{}
	transposeOf := func(t *tensor, nd *node, want [3]int) *node {
		tr := prod(t)
		if !is(tr, "Transpose", 1) || removed[tr] || len(tr.in[0].shape) != 3 || !single(t, nd) || !activation(tr.in[0]) || removed[prod(tr.in[0])] {
			return nil
		}
		perm, err := tr.g.Perm(3)
		if err != nil || perm[0] != want[0] || perm[1] != want[1] || perm[2] != want[2] {
			return nil
		}
		return tr
	}
	type fold struct {
		mm     *node
		f      mmFold
		a, b   *tensor
		y      *tensor
		gone   []*node
		remove []*tensor
	}
	var folds []fold
	for _, mm := range p.nodes {
		if !is(mm, "MatMul", 2) || removed[mm] {
			continue
		}
		A, B, Y := mm.in[0], mm.in[1], mm.out[0]
		if len(A.shape) != 3 || len(B.shape) != 3 || len(Y.shape) != 3 || A.shape[0] != B.shape[0] || !activation(A) || !activation(B) {
			continue
		}
		fo := fold{mm: mm, f: mmFold{nb: A.shape[0], M: A.shape[1], K: A.shape[2], N: B.shape[2], alpha: 1}, a: A, b: B, y: Y}
		if B.shape[1] != fo.f.K || Y.shape[0] != fo.f.nb || Y.shape[1] != fo.f.M || Y.shape[2] != fo.f.N {
			continue
		}
		// A: [Transpose(1,0,2)] → [Div or Mul by a scalar] → MatMul.
		at := A
		if sc := prod(at); sc != nil && (is(sc, "Div", 2) || is(sc, "Mul", 2)) && sc.in[0] != nil && single(at, mm) {
			if v, ok := scalarValue(sc.in[1]); ok && v != 0 && sc.in[0].n == at.n {
				if tr := transposeOf(sc.in[0], sc, [3]int{1, 0, 2}); tr != nil {
					if sc.g.OpType == "Div" {
						fo.f.alpha = 1 / v
					} else {
						fo.f.alpha = v
					}
					fo.a, fo.f.a = tr.in[0], mmSeq
					fo.gone = append(fo.gone, sc, tr)
					fo.remove = append(fo.remove, at, sc.in[0])
				}
			}
		}
		if fo.f.a == mmPlain {
			if tr := transposeOf(A, mm, [3]int{1, 0, 2}); tr != nil {
				fo.a, fo.f.a = tr.in[0], mmSeq
				fo.gone = append(fo.gone, tr)
				fo.remove = append(fo.remove, A)
			}
		}
		// B: Transpose(1,0,2) of a (K, nb, N), or Transpose(1,2,0) of an
		// (N, nb, K) read transposed.
		if tr := transposeOf(B, mm, [3]int{1, 0, 2}); tr != nil {
			fo.b, fo.f.b = tr.in[0], mmSeq
			fo.gone = append(fo.gone, tr)
			fo.remove = append(fo.remove, B)
		} else if tr := transposeOf(B, mm, [3]int{1, 2, 0}); tr != nil {
			fo.b, fo.f.b = tr.in[0], mmTrans
			fo.gone = append(fo.gone, tr)
			fo.remove = append(fo.remove, B)
		}
		// C: written sequence-first where its only reader transposes it so.
		if len(Y.cons) == 1 && !isOut[Y] {
			if tr := Y.cons[0]; is(tr, "Transpose", 1) && tr.in[0] == Y && !removed[tr] {
				if perm, err := tr.g.Perm(3); err == nil && perm[0] == 1 && perm[1] == 0 && perm[2] == 2 {
					fo.y, fo.f.c = tr.out[0], mmSeq
					fo.gone = append(fo.gone, tr)
					fo.remove = append(fo.remove, Y)
				}
			}
		}
		if len(fo.gone) == 0 || fo.a == fo.b {
			continue
		}
		for _, g := range fo.gone {
			removed[g] = true
		}
		removed[mm] = true
		folds = append(folds, fo)
	}
	if len(folds) == 0 {
		return
	}
	at := map[*node]*node{}
	for _, fo := range folds {
		g := &graph.Node{Name: fo.mm.g.Name, OpType: fusedMatMul, Opset: fo.mm.g.Opset,
			Inputs: []*graph.Value{fo.a.v, fo.b.v}, Outputs: []*graph.Value{fo.y.v}}
		f := fo.f
		at[fo.mm] = &node{g: g, in: []*tensor{fo.a, fo.b}, out: []*tensor{fo.y}, fused: 1 + len(fo.gone), mm: &f, build: buildFusedMatMul}
		for _, t := range fo.remove {
			delete(p.tensors, t.v)
		}
	}
	nodes := p.nodes[:0:0]
	for _, nd := range p.nodes {
		if r := at[nd]; r != nil {
			nodes = append(nodes, r)
			continue
		}
		if !removed[nd] {
			nodes = append(nodes, nd)
		}
	}
	p.nodes = nodes
	for i, nd := range p.nodes {
		nd.idx = i
		for _, t := range nd.out {
			if t != nil {
				t.prod = i
			}
		}
	}
}

// buildFusedMatMul compiles a FusedMatMul: C = α·A·B per item, each
// operand read and the result written in its layout (mmFold), and the
// backward dA = α·dC·Bᵀ, dB = α·Aᵀ·dC (stored Bᵀ: dBᵀ = α·dCᵀ·A) in the
// operands' own layouts.
func buildFusedMatMul(p *Plan, nd *node) error {
	f := nd.mm
	a, b, y := nd.in[0], nd.in[1], nd.out[0]
	lda, sa := f.pitch(f.a, f.M, f.K)
	tb := f.b == mmTrans
	ldb, sb := f.pitch(f.b, f.K, f.N)
	ldc, sc := f.pitch(f.c, f.M, f.N)
	nd.saveIn[0], nd.saveIn[1] = true, true
	nd.fwd = func() {
		p.ops.GemmStrided(false, tb, f.M, f.N, f.K, f.alpha, a.data, lda, sa, b.data, ldb, sb, 0, y.data, ldc, sc, f.nb)
	}
	nd.bwd = func() {
		if da := nd.dIn[0]; da != nil {
			p.ops.GemmStrided(false, !tb, f.M, f.K, f.N, f.alpha, y.grad, ldc, sc, b.data, ldb, sb, 0, da, lda, sa, f.nb)
		}
		if db := nd.dIn[1]; db != nil {
			if tb {
				p.ops.GemmStrided(true, false, f.N, f.K, f.M, f.alpha, y.grad, ldc, sc, a.data, lda, sa, 0, db, ldb, sb, f.nb)
			} else {
				p.ops.GemmStrided(true, false, f.K, f.N, f.M, f.alpha, a.data, lda, sa, y.grad, ldc, sc, 0, db, ldb, sb, f.nb)
			}
		}
	}
	return nil
}

// batchOut returns the axis of the result that axis k of operand si (0:
// A, 1: B) becomes — its items, A's rows or B's columns — or −1 for a
// contracted axis, as MatMul's rule (batchStride) in the operands' and
// the result's layouts.
func (f *mmFold) batchOut(si, k int) int {
	// What axis k of the operand holds: 0 the items, 1 the rows (A) or
	// columns (B) that the result keeps, −1 the contracted one.
	var what int
	switch l := f.a; {
	case si == 0 && l == mmPlain:
		what = [3]int{0, 1, -1}[k]
	case si == 0: // (M, nb, K)
		what = [3]int{1, 0, -1}[k]
	case f.b == mmPlain: // (nb, K, N)
		what = [3]int{0, -1, 1}[k]
	case f.b == mmSeq: // (K, nb, N)
		what = [3]int{-1, 0, 1}[k]
	default: // (N, nb, K)
		what = [3]int{1, 0, -1}[k]
	}
	if what < 0 {
		return -1
	}
	// The result's axis of the items, of A's rows and of B's columns.
	axes := [3]int{0, 1, 2} // plain (nb, M, N)
	if f.c == mmSeq {
		axes = [3]int{1, 0, 2} // (M, nb, N)
	}
	switch {
	case what == 0:
		return axes[0]
	case si == 0:
		return axes[1]
	}
	return axes[2]
}
