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
// sequence-first) into one FusedMatMul node; at any rank, also timm's
// q·scale @ k.transpose(-2, -1) (the key read transposed, the scale as
// α). Only products of activations fold: a MatMul reading a parameter is
// hooked by the DP engine, which sees its operands as the graph has them.

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
	// mmTransLast is B stored (nb…, N, K), read transposed: the source of
	// a Transpose swapping the last two axes (timm's k.transpose(-2, -1)),
	// at any rank.
	mmTransLast
)

// mmFold is a FusedMatMul's geometry: the items, the product's sizes, the
// scale α, the layouts of A, B and C, and the operands' rank (3 for the
// sequence-first layouts; the leading rank−2 axes are the items).
type mmFold struct {
	nb, M, K, N int
	alpha       float32
	a, b, c     int
	rank        int
}

// pitch returns the row pitch and item stride of an operand of rows×cols
// per item in layout l.
func (f *mmFold) pitch(l, rows, cols int) (ld, stride int) {
	switch l {
	case mmSeq:
		return f.nb * cols, cols
	case mmTrans: // stored cols×rows per item, at pitch nb·rows
		return f.nb * rows, rows
	case mmTransLast: // stored cols×rows per item, one after another
		return rows, rows * cols
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
	isOut := p.observed()
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
	removed := map[*node]bool{}
	// transposeBy returns the Transpose producing t from a rank-r
	// activation with a perm ok accepts, if t is its only output's single
	// read by nd and neither it nor its input's producer is folded already.
	transposeBy := func(t *tensor, nd *node, r int, ok func(perm []int) bool) *node {
		tr := prod(t)
		if !is(tr, "Transpose", 1) || removed[tr] || len(tr.in[0].shape) != r || !single(t, nd) || !activation(tr.in[0]) || removed[prod(tr.in[0])] {
			return nil
		}
		if perm, err := tr.g.Perm(r); err != nil || !ok(perm) {
			return nil
		}
		return tr
	}
	// transposeOf is transposeBy for the rank-3 perm want.
	transposeOf := func(t *tensor, nd *node, want [3]int) *node {
		return transposeBy(t, nd, 3, func(perm []int) bool { return [3]int(perm) == want })
	}
	// lastTwo accepts a perm that swaps the last two axes only.
	lastTwo := func(perm []int) bool {
		r := len(perm)
		for j := range r - 2 {
			if perm[j] != j {
				return false
			}
		}
		return perm[r-2] == r-1 && perm[r-1] == r-2
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
		r := len(A.shape)
		if r < 3 || len(B.shape) != r || len(Y.shape) != r || !sameInts(A.shape[:r-2], B.shape[:r-2]) || !activation(A) || !activation(B) {
			continue
		}
		fo := fold{mm: mm, f: mmFold{nb: numel(A.shape[:r-2]), M: A.shape[r-2], K: A.shape[r-1], N: B.shape[r-1], alpha: 1, rank: r}, a: A, b: B, y: Y}
		if B.shape[r-2] != fo.f.K || !sameInts(Y.shape[:r-2], A.shape[:r-2]) || Y.shape[r-2] != fo.f.M || Y.shape[r-1] != fo.f.N {
			continue
		}
		// A: [Transpose(1,0,2)] → [Div or Mul by a scalar] → MatMul (the
		// Transpose at rank 3 only).
		if sc := prod(A); sc != nil && (is(sc, "Div", 2) || is(sc, "Mul", 2)) && single(A, mm) && activation(sc.in[0]) && sameInts(sc.in[0].shape, A.shape) {
			if v, ok := scalarValue(sc.in[1]); ok && v != 0 && !removed[prod(sc.in[0])] {
				if sc.g.OpType == "Div" {
					fo.f.alpha = 1 / v
				} else {
					fo.f.alpha = v
				}
				fo.a = sc.in[0]
				fo.gone = append(fo.gone, sc)
				fo.remove = append(fo.remove, A)
				if tr := transposeOf(sc.in[0], sc, [3]int{1, 0, 2}); r == 3 && tr != nil {
					fo.a, fo.f.a = tr.in[0], mmSeq
					fo.gone = append(fo.gone, tr)
					fo.remove = append(fo.remove, sc.in[0])
				}
			}
		}
		if r == 3 && fo.f.a == mmPlain && fo.a == A {
			if tr := transposeOf(A, mm, [3]int{1, 0, 2}); tr != nil {
				fo.a, fo.f.a = tr.in[0], mmSeq
				fo.gone = append(fo.gone, tr)
				fo.remove = append(fo.remove, A)
			}
		}
		// B: at rank 3, Transpose(1,0,2) of a (K, nb, N), or
		// Transpose(1,2,0) of an (N, nb, K) read transposed; at any rank,
		// the swap of the last two axes of an (nb…, N, K).
		tr, layout := transposeBy(B, mm, r, lastTwo), mmTransLast
		if tr == nil && r == 3 {
			if tr, layout = transposeOf(B, mm, [3]int{1, 0, 2}), mmSeq; tr == nil {
				tr, layout = transposeOf(B, mm, [3]int{1, 2, 0}), mmTrans
			}
		}
		if tr != nil {
			fo.f.b = layout
			fo.b = tr.in[0]
			fo.gone = append(fo.gone, tr)
			fo.remove = append(fo.remove, B)
		}
		// C: written sequence-first where its only reader transposes it so.
		if r == 3 && len(Y.cons) == 1 && !isOut[Y] {
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
	p.setNodes(nodes)
}

// buildFusedMatMul compiles a FusedMatMul: C = α·A·B per item, each
// operand read and the result written in its layout (mmFold), and the
// backward dA = α·dC·Bᵀ, dB = α·Aᵀ·dC (stored Bᵀ: dBᵀ = α·dCᵀ·A) in the
// operands' own layouts.
func buildFusedMatMul(p *Plan, nd *node) error {
	f := nd.mm
	a, b, y := nd.in[0], nd.in[1], nd.out[0]
	lda, sa := f.pitch(f.a, f.M, f.K)
	tb := f.b == mmTrans || f.b == mmTransLast
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
// A, 1: B) becomes — an item axis, A's rows or B's columns — or −1 for a
// contracted axis, as MatMul's rule (batchStride) in the operands' and
// the result's layouts.
func (f *mmFold) batchOut(si, k int) int {
	r := f.rank
	// What axis k of the operand holds: 0…r−3 an item axis (the
	// sequence-first layouts' one item axis is 0), r−2 the rows (A) or
	// columns (B) the result keeps, −1 the contracted one.
	item, kept := -1, false
	l := f.a
	if si == 1 {
		l = f.b
	}
	switch {
	case l == mmSeq && si == 0: // (M, nb, K)
		item, kept = [3]int{-1, 0, -1}[k], k == 0
	case l == mmSeq: // (K, nb, N)
		item, kept = [3]int{-1, 0, -1}[k], k == 2
	case l == mmTrans: // (N, nb, K)
		item, kept = [3]int{-1, 0, -1}[k], k == 0
	case k < r-2:
		item = k
	case si == 0: // (…, M, K)
		kept = k == r-2
	case l == mmTransLast: // (…, N, K)
		kept = k == r-2
	default: // (…, K, N)
		kept = k == r-1
	}
	switch {
	case item >= 0 && f.c == mmSeq: // (M, nb, N)
		return 1
	case item >= 0:
		return item
	case !kept:
		return -1
	case f.c == mmSeq && si == 0:
		return 0
	case si == 0:
		return r - 2
	}
	return r - 1
}
