package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

func init() {
	opTable["Einsum"] = buildEinsum
}

// einsumMap moves the elements of an operand into a target layout:
// element i goes to dst[i] (summed with the others that land there), or
// nowhere when dst[i] < 0 (off the diagonal of a repeated label). A nil
// map means the operand is in the target layout already. The move is
// LayoutOps.IndexGatherBackward over the compiled map im (the target
// reads the operand's elements as an IndexGather's input reads its
// output's gradient); its adjoint is IndexGather.
type einsumMap struct {
	dst []int32
	n   int       // elements of the target
	im  *IndexMap // dst compiled: y = the operand, x = the target
}

// gather computes the target t from operand x (t = Σ of what lands there).
func (m *einsumMap) gather(ops GraphOps, x, t []float32) {
	ops.IndexGatherBackward(x, m.im, t[:m.n])
}

// scatter is gather's adjoint: dx[i] = dt[dst[i]] (0 off the diagonals).
func (m *einsumMap) scatter(ops GraphOps, dt, dx []float32) {
	ops.IndexGather(dt, m.im, dx)
}

// layoutMap builds the map from an operand with labels ls and shape sh to
// the layout that lists the labels order (each once) with sizes size.
// Labels of ls absent from order are summed over; an axis of size 1 under
// a larger label broadcasts (it is absent from the operand, and order must
// not hold it). It returns nil when the map is the identity.
func layoutMap(ls []rune, sh []int, order []rune, size map[rune]int64) *einsumMap {
	axSt, first, s := targetStrides(ls, sh, order, size)
	if numel(sh) == s && inPlace(sh, axSt, first) {
		return nil // no walk over the elements: a large operand's would cost seconds to compile
	}
	m := &einsumMap{dst: make([]int32, numel(sh)), n: s}
	forCoords(sh, func(i int, c []int) {
		j := 0
		for a := range ls {
			if f := first[a]; f >= 0 && c[f] != c[a] {
				j = -1 // off a diagonal
				break
			}
			j += c[a] * axSt[a]
		}
		m.dst[i] = int32(j)
	})
	m.im = NewIndexMap(m.dst, m.n, 0)
	return m
}

// inPlace reports whether target strides st (with first, the earlier
// axis an axis repeats, or −1) send every element of an operand of shape
// sh to its own offset: each axis longer than 1 has its row-major stride
// in the target, and no label repeats over an axis longer than 1 (a
// diagonal, whose other elements land nowhere).
func inPlace(sh, st, first []int) bool {
	s := 1
	for a := len(sh) - 1; a >= 0; a-- {
		if f := first[a]; f >= 0 && (sh[a] != 1 || sh[f] != 1) {
			return false
		}
		if sh[a] != 1 && st[a] != s {
			return false
		}
		s *= sh[a]
	}
	return true
}

// isLayout reports whether an operand with labels ls and shape sh is
// already in the layout that lists the labels order with sizes size
// (layoutMap would return nil), without building the map.
func isLayout(ls []rune, sh []int, order []rune, size map[rune]int64) bool {
	axSt, first, s := targetStrides(ls, sh, order, size)
	return numel(sh) == s && inPlace(sh, axSt, first)
}

// targetStrides returns, per axis of an operand with labels ls and shape
// sh, its stride in the layout that lists the labels order with sizes
// size (0 when summed or broadcast, or when it repeats an earlier axis's
// label) and that earlier axis (−1 if none), and the layout's elements.
func targetStrides(ls []rune, sh []int, order []rune, size map[rune]int64) (axSt, first []int, n int) {
	st := map[rune]int{}
	n = 1
	for i := len(order) - 1; i >= 0; i-- {
		st[order[i]] = n
		n *= int(size[order[i]])
	}
	axSt, first = make([]int, len(ls)), make([]int, len(ls))
	for a, l := range ls {
		first[a] = -1
		for b := 0; b < a; b++ {
			if ls[b] == l {
				first[a] = b
				break
			}
		}
		if first[a] < 0 && (sh[a] != 1 || size[l] == 1) {
			axSt[a] = st[l] // 0 for a label the target does not hold
		}
	}
	return axSt, first, n
}

// operandLayout returns how an einsumStep reads an operand with labels ls
// and shape sh that the product needs in layout order: in place (nil,
// false), in place transposed (nil, true: the layout transposed), or
// through a map to order.
func operandLayout(ls []rune, sh []int, order, transposed []rune, size map[rune]int64) (*einsumMap, bool) {
	switch {
	case isLayout(ls, sh, order, size):
		return nil, false
	case isLayout(ls, sh, transposed, size):
		return nil, true
	}
	return layoutMap(ls, sh, order, size), false
}

// buildEinsum compiles Einsum. One operand is a layout map (transpose,
// diagonal, sums). Two operands become one batched GEMM (einsumStep); more
// operands a chain of them (buildEinsumChain).
func buildEinsum(p *Plan, nd *node) error {
	eq, err := nd.g.Str("equation")
	if err != nil {
		return err
	}
	shapes := make([][]int64, len(nd.in))
	ranks := make([]int, len(nd.in))
	for i := range nd.in {
		t, err := floatIn(nd, i)
		if err != nil {
			return err
		}
		shapes[i], ranks[i] = to64(t.shape), len(t.shape)
	}
	s, err := graph.ParseEinsum(eq, ranks)
	if err != nil {
		return err
	}
	size, err := s.Sizes(shapes)
	if err != nil {
		return fmt.Errorf("equation %q: %w", eq, err)
	}
	y := nd.out[0]
	if len(nd.in) == 1 {
		x := nd.in[0]
		m := layoutMap(s.Inputs[0], x.shape, s.Output, size)
		if m == nil {
			return buildCopy(p, nd)
		}
		if m.n != y.n {
			return fmt.Errorf("equation %q: output %v does not hold %d elements", eq, y.shape, m.n)
		}
		nd.fwd = func() { m.gather(p.ops, x.data, y.data) }
		nd.bwd = func() { m.scatter(p.ops, y.grad, nd.dIn[0]) }
		return nil
	}
	for i := range nd.saveIn {
		nd.saveIn[i] = true
	}
	if len(nd.in) == 2 {
		st, err := newEinsumStep(s.Inputs[0], nd.in[0].shape, s.Inputs[1], nd.in[1].shape, s.Output, y.shape)
		if err != nil {
			return fmt.Errorf("equation %q: %w", eq, err)
		}
		p.needWS(st.ws)
		a, b := nd.in[0], nd.in[1]
		nd.fwd = func() { st.forward(p.ops, a.data, b.data, y.data, p.ws) }
		nd.bwd = func() { st.backward(p.ops, a.data, b.data, y.grad, nd.dIn[0], nd.dIn[1], p.ws) }
		return nil
	}
	return buildEinsumChain(p, nd, s, eq)
}

// buildEinsumChain compiles an Einsum of three or more operands as a chain
// of two-operand steps, left to right: step i contracts the running result
// with operand i into the labels that a later operand or the output still
// needs (in order of first appearance; the last step writes the output).
// The intermediate results and their gradients are kept outside the arena,
// in device buffers of the node's own, for the backward pass.
func buildEinsumChain(p *Plan, nd *node, s *graph.EinsumSpec, eq string) error {
	y := nd.out[0]
	n := len(nd.in)
	steps := make([]*einsumStep, n-1)
	mids := make([][]float32, n-2)  // running results 1 … n−2
	dmids := make([][]float32, n-2) // their gradients
	labels, shape := s.Inputs[0], nd.in[0].shape
	for i := 1; i < n; i++ {
		var out []rune
		var outShape []int
		if i == n-1 {
			out, outShape = s.Output, y.shape
		} else {
			needed := map[rune]bool{}
			for _, ls := range append(append([][]rune{}, s.Inputs[i+1:]...), s.Output) {
				for _, l := range ls {
					needed[l] = true
				}
			}
			// Each label's size in this step: the larger of the two
			// operands' (a size-1 axis broadcasts).
			sz := map[rune]int{}
			for _, side := range []struct {
				ls []rune
				sh []int
			}{{labels, shape}, {s.Inputs[i], nd.in[i].shape}} {
				for a, l := range side.ls {
					sz[l] = max(sz[l], side.sh[a])
				}
			}
			seen := map[rune]bool{}
			for _, l := range append(append([]rune{}, labels...), s.Inputs[i]...) {
				if needed[l] && !seen[l] {
					seen[l] = true
					out = append(out, l)
					outShape = append(outShape, sz[l])
				}
			}
		}
		st, err := newEinsumStep(labels, shape, s.Inputs[i], nd.in[i].shape, out, outShape)
		if err != nil {
			return fmt.Errorf("equation %q, step %d: %w", eq, i, err)
		}
		steps[i-1] = st
		p.needWS(st.ws)
		if i < n-1 {
			k := numel(outShape)
			for _, dst := range []*[]float32{&mids[i-1], &dmids[i-1]} {
				buf, err := p.dev.Alloc(k)
				if err != nil {
					return err
				}
				*dst = buf.Floats()
			}
			nd.auxBytes += 8 * int64(k)
		}
		labels, shape = out, outShape
	}
	// lhs returns step i's first operand (forward value and gradient
	// target): operand 0 for the first step, the running result after.
	lhs := func(i int) ([]float32, []float32) {
		if i == 0 {
			return nd.in[0].data, nd.dIn[0]
		}
		return mids[i-1], dmids[i-1]
	}
	out := func(i int) ([]float32, []float32) {
		if i == n-2 {
			return y.data, y.grad
		}
		return mids[i], dmids[i]
	}
	nd.fwd = func() {
		for i, st := range steps {
			a, _ := lhs(i)
			o, _ := out(i)
			st.forward(p.ops, a, nd.in[i+1].data, o, p.ws)
		}
	}
	nd.bwd = func() {
		for i := len(steps) - 1; i >= 0; i-- {
			a, da := lhs(i)
			_, do := out(i)
			steps[i].backward(p.ops, a, nd.in[i+1].data, do, da, nd.dIn[i+1], p.ws)
		}
	}
	return nil
}

// einsumStep is a compiled two-operand Einsum: one batched GEMM between
// the operands, each read in place (possibly transposed) or gathered into
// the product's layout, and the product mapped to the output.
type einsumStep struct {
	mA, mB       *einsumMap
	tA, tB       bool
	lda, ldb     int
	nb, M, N, K  int
	yIdx         []int32
	yMap         *IndexMap // yIdx compiled: y = the output, x = the product
	offB, offC   int
	offDA, offDB int
	sizeA, sizeB int
	sizeC        int
	ws           int // workspace elements it needs
}

// newEinsumStep compiles the Einsum of operands with labels la (shape sa)
// and lb (shape sb) into labels lo (shape so). Each label is a batch label
// (in both operands and the output), a row label (first operand and
// output), a column label (second operand and output) or a contracted
// label (both operands, not the output); labels of one operand that the
// output drops are summed before the product; an axis of size 1 against a
// larger label broadcasts.
func newEinsumStep(la []rune, sa []int, lb []rune, sb []int, lo []rune, so []int) (*einsumStep, error) {
	s := &graph.EinsumSpec{Inputs: [][]rune{la, lb}, Output: lo}
	size, err := s.Sizes([][]int64{to64(sa), to64(sb)})
	if err != nil {
		return nil, err
	}
	for i, l := range lo {
		if _, ok := size[l]; !ok {
			size[l] = 1
		}
		if int(size[l]) != so[i] {
			return nil, fmt.Errorf("output label %d has size %d, the operands give %d", i, so[i], size[l])
		}
	}
	present := func(ls []rune, sh []int) map[rune]bool {
		out := map[rune]bool{}
		for ax, l := range ls {
			if sh[ax] != 1 || size[l] == 1 {
				out[l] = true
			}
		}
		return out
	}
	inA, inB := present(la, sa), present(lb, sb)
	inY := map[rune]bool{}
	for _, l := range lo {
		inY[l] = true
	}
	var batch, rows, cols, con []rune
	add := func(dst *[]rune, l rune) {
		for _, v := range *dst {
			if v == l {
				return
			}
		}
		*dst = append(*dst, l)
	}
	// Labels in output order first, so that the product lands in the
	// output's layout whenever the output allows it.
	for _, l := range lo {
		switch {
		case inA[l] && inB[l]:
			add(&batch, l)
		case inA[l]:
			add(&rows, l)
		case inB[l]:
			add(&cols, l)
		default: // size-1 label broadcast from both: a unit axis
			add(&rows, l)
		}
	}
	for _, l := range lb {
		if inA[l] && inB[l] && !inY[l] {
			add(&con, l)
		}
	}
	prod := func(ls []rune) int {
		n := 1
		for _, l := range ls {
			n *= int(size[l])
		}
		return n
	}
	cat := func(parts ...[]rune) []rune {
		var out []rune
		for _, q := range parts {
			out = append(out, q...)
		}
		return out
	}
	e := &einsumStep{nb: prod(batch), M: prod(rows), N: prod(cols), K: prod(con)}
	// An operand already laid out as the product needs it, or as its
	// transpose (k·d of attention's keys), is read in place: the GEMM
	// transposes it. Only other layouts are gathered through a map.
	e.mA, e.tA = operandLayout(la, sa, cat(batch, rows, con), cat(batch, con, rows), size)
	e.mB, e.tB = operandLayout(lb, sb, cat(batch, con, cols), cat(batch, cols, con), size)
	e.lda, e.ldb = e.K, e.N // leading dimensions of A′ (M×K or K×M) and B′ (K×N or N×K)
	if e.tA {
		e.lda = e.M
	}
	if e.tB {
		e.ldb = e.K
	}
	// The output map: element j of the output comes from element yIdx[j]
	// of the product (a permutation, since every output label is in it
	// once).
	cOrder := cat(batch, rows, cols)
	cSt := map[rune]int{}
	st := 1
	for i := len(cOrder) - 1; i >= 0; i-- {
		cSt[cOrder[i]] = st
		st *= int(size[cOrder[i]])
	}
	if st != numel(so) {
		return nil, fmt.Errorf("output %v does not hold %d elements", so, st)
	}
	ySt, yFirst := make([]int, len(lo)), make([]int, len(lo))
	for ax, l := range lo {
		ySt[ax], yFirst[ax] = cSt[l], -1
	}
	if !inPlace(so, ySt, yFirst) {
		e.yIdx = make([]int32, numel(so))
		forCoords(so, func(j int, c []int) {
			i := 0
			for ax := range lo {
				i += c[ax] * ySt[ax]
			}
			e.yIdx[j] = int32(i)
		})
		e.yMap = NewIndexMap(e.yIdx, e.nb*e.M*e.N, 0)
	}
	// Workspace: A′, B′ (when mapped), the product or its gradient (when
	// the output is permuted), and dA′, dB′ (when mapped).
	e.sizeA, e.sizeB, e.sizeC = e.nb*e.M*e.K, e.nb*e.K*e.N, e.nb*e.M*e.N
	if e.mA != nil {
		e.offB = e.sizeA
	}
	e.offC = e.offB
	if e.mB != nil {
		e.offC += e.sizeB
	}
	e.offDA = e.offC
	if e.yIdx != nil {
		e.offDA += e.sizeC
	}
	e.offDB = e.offDA
	if e.mA != nil {
		e.offDB += e.sizeA
	}
	e.ws = e.offDB
	if e.mB != nil {
		e.ws += e.sizeB
	}
	return e, nil
}

// operands returns A′ and B′: the operands themselves, or gathered into ws.
func (e *einsumStep) operands(ops GraphOps, a, b, ws []float32) (av, bv []float32) {
	av, bv = a, b
	if e.mA != nil {
		av = ws[:e.sizeA]
		e.mA.gather(ops, a, av)
	}
	if e.mB != nil {
		bv = ws[e.offB : e.offB+e.sizeB]
		e.mB.gather(ops, b, bv)
	}
	return av, bv
}

func (e *einsumStep) forward(ops GraphOps, a, b, y, ws []float32) {
	av, bv := e.operands(ops, a, b, ws)
	c := y
	if e.yIdx != nil {
		c = ws[e.offC : e.offC+e.sizeC]
	}
	M, N, K := e.M, e.N, e.K
	ops.GemmStrided(e.tA, e.tB, M, N, K, 1, av, e.lda, M*K, bv, e.ldb, K*N, 0, c, N, M*N, e.nb)
	if e.yIdx != nil {
		ops.IndexGather(c, e.yMap, y) // y[j] = c[yIdx[j]]
	}
}

// backward writes the gradients of both operands (da, db; either may be
// nil) from the output gradient dy.
func (e *einsumStep) backward(ops GraphOps, a, b, dy, da, db, ws []float32) {
	av, bv := e.operands(ops, a, b, ws)
	M, N, K, nb := e.M, e.N, e.K, e.nb
	dc := dy
	if e.yIdx != nil {
		dc = ws[e.offC : e.offC+e.sizeC]
		ops.IndexGatherBackward(dy, e.yMap, dc) // dc[yIdx[j]] = dy[j], a permutation
	}
	if da != nil {
		t := da
		if e.mA != nil {
			t = ws[e.offDA : e.offDA+e.sizeA]
		}
		if e.tA { // dA′ (K×M) = op(B′)·dCᵀ
			ops.GemmStrided(e.tB, true, K, M, N, 1, bv, e.ldb, K*N, dc, N, M*N, 0, t, M, M*K, nb)
		} else { // dA′ (M×K) = dC·op(B′)ᵀ
			ops.GemmStrided(false, !e.tB, M, K, N, 1, dc, N, M*N, bv, e.ldb, K*N, 0, t, K, M*K, nb)
		}
		if e.mA != nil {
			e.mA.scatter(ops, t, da)
		}
	}
	if db != nil {
		t := db
		if e.mB != nil {
			t = ws[e.offDB : e.offDB+e.sizeB]
		}
		if e.tB { // dB′ (N×K) = dCᵀ·op(A′)
			ops.GemmStrided(true, e.tA, N, K, M, 1, dc, N, M*N, av, e.lda, M*K, 0, t, K, K*N, nb)
		} else { // dB′ (K×N) = op(A′)ᵀ·dC
			ops.GemmStrided(!e.tA, false, K, N, M, 1, av, e.lda, M*K, dc, N, M*N, 0, t, N, K*N, nb)
		}
		if e.mB != nil {
			e.mB.scatter(ops, t, db)
		}
	}
}
