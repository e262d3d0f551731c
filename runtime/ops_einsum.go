package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

func init() {
	opTable["Einsum"] = buildEinsum
}

// einsumMap moves the elements of an operand into a target layout:
// element i goes to dst[i] (summed with the others that land there), or
// nowhere when dst[i] < 0 (off the diagonal of a repeated label). A nil
// map means the operand is in the target layout already.
type einsumMap struct {
	dst []int32
	n   int // elements of the target
}

// gather computes the target t from operand x (t = Σ of what lands there).
func (m *einsumMap) gather(x, t []float32) {
	clear(t[:m.n])
	for i, j := range m.dst {
		if j >= 0 {
			t[j] += x[i]
		}
	}
}

// scatter is gather's adjoint: dx[i] = dt[dst[i]].
func (m *einsumMap) scatter(dt, dx []float32) {
	for i, j := range m.dst {
		if j >= 0 {
			dx[i] = dt[j]
		} else {
			dx[i] = 0
		}
	}
}

// layoutMap builds the map from an operand with labels ls and shape sh to
// the layout that lists the labels order (each once) with sizes size.
// Labels of ls absent from order are summed over; an axis of size 1 under
// a larger label broadcasts (it is absent from the operand, and order must
// not hold it). It returns nil when the map is the identity.
func layoutMap(ls []rune, sh []int, order []rune, size map[rune]int64) *einsumMap {
	st := map[rune]int{}
	s := 1
	for i := len(order) - 1; i >= 0; i-- {
		st[order[i]] = s
		s *= int(size[order[i]])
	}
	m := &einsumMap{dst: make([]int32, numel(sh)), n: s}
	identity := len(m.dst) == s
	// Per axis: its stride in the target (0 when summed or broadcast, or
	// when it repeats an earlier axis's label), and that earlier axis.
	axSt, first := make([]int, len(ls)), make([]int, len(ls))
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
		if j != i {
			identity = false
		}
	})
	if identity {
		return nil
	}
	return m
}

// buildEinsum compiles one- and two-operand Einsum. One operand is a
// layout map (transpose, diagonal, sums). Two operands become one batched
// GEMM: each label is a batch label (in both operands and the output), a
// row label (first operand and output), a column label (second operand and
// output) or a contracted label (both operands, not the output); labels of
// one operand that the output drops are summed before the product. Each
// operand is mapped to (batch, rows, contracted) / (batch, contracted,
// columns), the product gives (batch, rows, columns), mapped to the output.
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
		shapes[i], ranks[i] = int64s(t.shape), len(t.shape)
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
	switch len(nd.in) {
	case 1:
		x := nd.in[0]
		m := layoutMap(s.Inputs[0], x.shape, s.Output, size)
		if m == nil {
			return buildCopy(p, nd)
		}
		if m.n != y.n {
			return fmt.Errorf("equation %q: output %v does not hold %d elements", eq, y.shape, m.n)
		}
		nd.fwd = func() { m.gather(x.data, y.data) }
		nd.bwd = func() { m.scatter(y.grad, nd.dIn[0]) }
		return nil
	case 2:
	default:
		return fmt.Errorf("equation %q: Einsum of %d operands is not supported (one or two)", eq, len(nd.in))
	}
	a, b := nd.in[0], nd.in[1]
	// present: the labels an operand really has (not broadcast from 1).
	present := func(k int) map[rune]bool {
		out := map[rune]bool{}
		for ax, l := range s.Inputs[k] {
			if shapes[k][ax] != 1 || size[l] == 1 {
				out[l] = true
			}
		}
		return out
	}
	inA, inB := present(0), present(1)
	inY := map[rune]bool{}
	for _, l := range s.Output {
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
	for _, l := range s.Output {
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
	for _, l := range s.Inputs[1] {
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
	nb, M, N, K := prod(batch), prod(rows), prod(cols), prod(con)
	cat := func(parts ...[]rune) []rune {
		var out []rune
		for _, q := range parts {
			out = append(out, q...)
		}
		return out
	}
	// An operand already laid out as the product needs it, or as its
	// transpose (k·d of attention's keys), is read in place: the GEMM
	// transposes it. Only other layouts are gathered through a map.
	mA := layoutMap(s.Inputs[0], a.shape, cat(batch, rows, con), size)
	tA := false
	if mA != nil && layoutMap(s.Inputs[0], a.shape, cat(batch, con, rows), size) == nil {
		mA, tA = nil, true
	}
	mB := layoutMap(s.Inputs[1], b.shape, cat(batch, con, cols), size)
	tB := false
	if mB != nil && layoutMap(s.Inputs[1], b.shape, cat(batch, cols, con), size) == nil {
		mB, tB = nil, true
	}
	lda, ldb := K, N // leading dimensions of A′ (M×K or K×M) and B′ (K×N or N×K)
	if tA {
		lda = M
	}
	if tB {
		ldb = K
	}
	// The output map: element j of y comes from element yIdx[j] of the
	// product (a permutation, since every output label is in it once).
	cOrder := cat(batch, rows, cols)
	cSt := map[rune]int{}
	st := 1
	for i := len(cOrder) - 1; i >= 0; i-- {
		cSt[cOrder[i]] = st
		st *= int(size[cOrder[i]])
	}
	if st != y.n {
		return fmt.Errorf("equation %q: output %v does not hold %d elements", eq, y.shape, st)
	}
	var yIdx []int32
	forCoords(y.shape, func(j int, c []int) {
		i := 0
		for ax, l := range s.Output {
			i += c[ax] * cSt[l]
		}
		if i != j && yIdx == nil {
			yIdx = make([]int32, y.n)
			for q := 0; q < j; q++ {
				yIdx[q] = int32(q)
			}
		}
		if yIdx != nil {
			yIdx[j] = int32(i)
		}
	})
	// Workspace: A′, B′ (when mapped), the product or its gradient (when
	// the output is permuted), and dA′, dB′ (when mapped).
	sizeA, sizeB, sizeC := nb*M*K, nb*K*N, nb*M*N
	offB, offC := 0, 0
	if mA != nil {
		offB = sizeA
	}
	offC = offB
	if mB != nil {
		offC += sizeB
	}
	offDA := offC
	if yIdx != nil {
		offDA += sizeC
	}
	offDB := offDA
	if mA != nil {
		offDB += sizeA
	}
	end := offDB
	if mB != nil {
		end += sizeB
	}
	p.needWS(end)
	nd.saveIn[0], nd.saveIn[1] = true, true
	operands := func(ws []float32) (av, bv []float32) {
		av, bv = a.data, b.data
		if mA != nil {
			av = ws[:sizeA]
			mA.gather(a.data, av)
		}
		if mB != nil {
			bv = ws[offB : offB+sizeB]
			mB.gather(b.data, bv)
		}
		return av, bv
	}
	nd.fwd = func() {
		ws := p.ws
		av, bv := operands(ws)
		c := y.data
		if yIdx != nil {
			c = ws[offC : offC+sizeC]
		}
		blas.SgemmStrided(tA, tB, M, N, K, 1, av, lda, M*K, bv, ldb, K*N, 0, c, N, M*N, nb)
		if yIdx != nil {
			for j, i := range yIdx {
				y.data[j] = c[i]
			}
		}
	}
	nd.bwd = func() {
		ws := p.ws
		av, bv := operands(ws)
		dc := y.grad
		if yIdx != nil {
			dc = ws[offC : offC+sizeC]
			for j, i := range yIdx {
				dc[i] = y.grad[j]
			}
		}
		if da := nd.dIn[0]; da != nil {
			t := da
			if mA != nil {
				t = ws[offDA : offDA+sizeA]
			}
			if tA { // dA′ (K×M) = op(B′)·dCᵀ
				blas.SgemmStrided(tB, true, K, M, N, 1, bv, ldb, K*N, dc, N, M*N, 0, t, M, M*K, nb)
			} else { // dA′ (M×K) = dC·op(B′)ᵀ
				blas.SgemmStrided(false, !tB, M, K, N, 1, dc, N, M*N, bv, ldb, K*N, 0, t, K, M*K, nb)
			}
			if mA != nil {
				mA.scatter(t, da)
			}
		}
		if db := nd.dIn[1]; db != nil {
			t := db
			if mB != nil {
				t = ws[offDB : offDB+sizeB]
			}
			if tB { // dB′ (N×K) = dCᵀ·op(A′)
				blas.SgemmStrided(true, tA, N, K, M, 1, dc, N, M*N, av, lda, M*K, 0, t, K, K*N, nb)
			} else { // dB′ (K×N) = op(A′)ᵀ·dC
				blas.SgemmStrided(!tA, false, K, N, M, 1, av, lda, M*K, dc, N, M*N, 0, t, N, K*N, nb)
			}
			if mB != nil {
				mB.scatter(t, db)
			}
		}
	}
	return nil
}
