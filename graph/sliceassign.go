package graph

import (
	"math"
	"slices"
)

// Slice assignments written as ScatterND are read back as the slices they
// are when the graph is loaded.
//
// PyTorch's TorchScript exporter writes x[:, :, 1:, 1:] = y (an index_put
// with slices: MViT-v2's relative positions added to the attention
// scores) as a ScatterND whose indices are the whole grid of coordinates
// the slices cover, the batch's included, built at run time from the
// input's shape:
//
//	indices = Concat(axis −1) over axes j of
//	          Unsqueeze(Expand(Reshape(v_j, [−1, 1, …]), shape), −1)
//
// v_j the coordinates of axis j (Range(0, dim_j), sliced). At full size
// such a grid holds B·heads·tokens·keys tuples (10⁸ for MViT-v2-S at
// 16×224×224): too large to fold, so neither the batch could be followed
// through it nor could the runtime, which computes only float32 tensors,
// run it. Here the grid is proven one by reading the shapes around it
// (each component's vector laid along its own axis and broadcast to the
// grid's shape, exactly) and the vectors' values, folded at a batch of 2
// and of 3 (at an export's fixed batch, that batch): each is a run of
// consecutive coordinates, the same at both batches or the whole axis at
// each. The ScatterND then writes the box of data those runs span, and it
// is replaced by Slices of the data around the box and Concats that put
// the updates in its place, which the runtime runs and differentiates and
// through which the batch is followed.

// maxAssignInferences bounds the node inferences the slice assignments'
// proofs take (the graph up to the ScatterNDs, at two batch sizes).
const maxAssignInferences = 1 << 23

// boxScatter is a ScatterND whose indices look like a coordinate grid,
// before the proof: comps[j] traces component j of the index tuples.
type boxScatter struct {
	n     *Node
	comps []gridComp
}

// gridComp is one component of a grid: u the Concat's input (the grid's
// shape, one wide on the last axis), e the Expand (the grid's shape), r
// the Expand's input (the vector along its axis), v the 1-D vector of
// coordinates r reshapes.
type gridComp struct{ u, e, r, v *Value }

// orderKeeping reports whether op moves no element: its output, read in
// row-major order, is its first input.
func orderKeeping(n *Node) bool {
	if n == nil || n.Domain != "" {
		return false
	}
	switch n.OpType {
	case "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity":
		return true
	}
	return false
}

// beforeReshapes follows v back through nodes that keep the order of its
// elements.
func beforeReshapes(v *Value) *Value {
	for v != nil && orderKeeping(v.Producer) {
		v = v.Producer.Input(0)
	}
	return v
}

// gridCandidate traces a ScatterND's indices as a grid, or returns nil.
func gridCandidate(n *Node) *boxScatter {
	if n.OpType != "ScatterND" || n.Domain != "" || len(n.Inputs) != 3 || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil
	}
	if r, err := n.ScatterReduction(); err != nil || r != "none" {
		return nil
	}
	idx := n.Input(1)
	if idx == nil || n.Input(0) == nil || n.Input(2) == nil || idx.Producer == nil || idx.Producer.OpType != "Concat" || idx.Producer.Domain != "" {
		return nil
	}
	c := &boxScatter{n: n}
	for _, u := range idx.Producer.Inputs {
		e := beforeReshapes(u)
		if u == nil || e == nil || e.Producer == nil || e.Producer.OpType != "Expand" || e.Producer.Domain != "" {
			return nil
		}
		r := e.Producer.Input(0)
		v := beforeReshapes(r)
		if r == nil || v == nil {
			return nil
		}
		c.comps = append(c.comps, gridComp{u: u, e: e, r: r, v: v})
	}
	return c
}

// box is what one batch size proves of a grid: start and length of each
// axis's run, and the data's dims along those axes.
type box struct{ start, n, dim []int64 }

// proveBox checks candidate c in the graph inferred at one batch size (at
// maps a value of g to its copy there) and returns the box it writes.
func proveBox(c *boxScatter, at func(*Value) *Value) (box, bool) {
	var b box
	static := func(v *Value) ([]int64, bool) {
		cv := at(v)
		if cv == nil || !cv.Shape.Static() {
			return nil, false
		}
		return cv.Shape.Ints(), true
	}
	idx, ok1 := static(c.n.Input(1))
	data, ok2 := static(c.n.Input(0))
	upd, ok3 := static(c.n.Input(2))
	k := len(c.comps)
	if !ok1 || !ok2 || !ok3 || len(idx) != k+1 || idx[k] != int64(k) || k > len(data) {
		return b, false
	}
	grid := idx[:k]
	if !slices.Equal(upd, append(append([]int64{}, grid...), data[k:]...)) {
		return b, false
	}
	for j, comp := range c.comps {
		u, ok1 := static(comp.u)
		e, ok2 := static(comp.e)
		r, ok3 := static(comp.r)
		if !ok1 || !ok2 || !ok3 || !slices.Equal(u, append(append([]int64{}, grid...), 1)) || !slices.Equal(e, grid) || len(r) > k {
			return b, false
		}
		// The vector lies along axis j of the grid: r, its shape padded
		// with leading ones to the grid's rank, is one wide on every
		// other axis, so that Expand repeats v_j[p_j] at every p.
		for a := 0; a < k; a++ {
			d := int64(1)
			if i := a - (k - len(r)); i >= 0 {
				d = r[i]
			}
			if want := int64(1); a == j {
				want = grid[j]
				if d != want {
					return b, false
				}
			} else if d != want {
				return b, false
			}
		}
		cv := at(comp.v)
		if cv == nil || cv.Const == nil || len(cv.Const.Shape) != 1 || int64(len(cv.Const.I64)) != grid[j] || grid[j] < 1 {
			return b, false
		}
		vals := cv.Const.I64
		s := vals[0]
		for i, x := range vals {
			if x != s+int64(i) {
				return b, false
			}
		}
		if s < 0 || s+grid[j] > data[j] {
			return b, false
		}
		b.start, b.n, b.dim = append(b.start, s), append(b.n, grid[j]), append(b.dim, data[j])
	}
	return b, true
}

// sliceAssignments replaces each ScatterND proven a slice assignment (see
// above) and reports how many it replaced.
func (g *Graph) sliceAssignments() (int, error) {
	var cands []*boxScatter
	for _, n := range g.Nodes {
		if c := gridCandidate(n); c != nil {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return 0, nil
	}
	var want []*Value
	for _, c := range cands {
		want = append(want, c.n.Inputs...)
		for _, comp := range c.comps {
			want = append(want, comp.u, comp.e, comp.r, comp.v)
		}
	}
	budget := maxAssignInferences
	var at [2]func(*Value) *Value
	sizes := g.probeBatches()
	for i, b := range sizes {
		if i > 0 && b == sizes[0] {
			at[i] = at[0] // a fixed batch: one size
			continue
		}
		f, ok := g.inferAt(b, want, &budget)
		if !ok {
			return 0, nil
		}
		at[i] = f
	}
	var done []*boxScatter
	for _, c := range cands {
		b0, ok0 := proveBox(c, at[0])
		b1, ok1 := proveBox(c, at[1])
		if !ok0 || !ok1 {
			continue
		}
		// Each axis is written whole at both batches (it may be the
		// batch's), or in one run that the batch does not move.
		var axes []int
		ok := true
		for j := range b0.n {
			full0 := b0.start[j] == 0 && b0.n[j] == b0.dim[j]
			full1 := b1.start[j] == 0 && b1.n[j] == b1.dim[j]
			switch {
			case full0 && full1:
			case b0.start[j] == b1.start[j] && b0.n[j] == b1.n[j] && b0.dim[j] == b1.dim[j]:
				axes = append(axes, j)
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		g.assignBox(c.n, axes, b0)
		done = append(done, c)
	}
	if len(done) == 0 {
		return 0, nil
	}
	g.relink()
	g.dropDeadIndices(done)
	return len(done), g.sortTopological()
}

// assignBox replaces ScatterND n by Slices and Concats that write its
// updates over the box bx of its data, cut on axes (the others written
// whole). Cut on axes a₁ < … < a_m, the data restricted to the box on the
// first i of them is D_i (D_0 the data); the result R_0 is built from the
// updates, R_m, outwards: R_{i−1} is D_{i−1} before the run on a_i, R_i,
// and D_{i−1} after it, joined along a_i.
func (g *Graph) assignBox(n *Node, axes []int, bx box) {
	names := make(map[string]bool, len(g.Nodes))
	for _, m := range g.Nodes {
		names[m.Name] = true
	}
	scope := n.Name
	if scope == "" {
		scope = n.Outputs[0].Name + "/ScatterND"
	}
	b := &expansion{g: g, n: n, scope: scope, names: names, next: map[string]int{}}
	data, upd := n.Input(0), n.Input(2)
	slice := func(x *Value, a int, from, to int64) *Value {
		return b.op("Slice", nil, x, b.ints(from), b.ints(to), b.ints(int64(a)))
	}
	d := []*Value{data}
	for i, a := range axes {
		if i < len(axes)-1 {
			d = append(d, slice(d[i], a, bx.start[a], bx.start[a]+bx.n[a]))
		}
	}
	r := upd
	for i := len(axes) - 1; i >= 0; i-- {
		a := axes[i]
		var parts []*Value
		if s := bx.start[a]; s > 0 {
			parts = append(parts, slice(d[i], a, 0, s))
		}
		parts = append(parts, r)
		if e := bx.start[a] + bx.n[a]; e < bx.dim[a] {
			parts = append(parts, slice(d[i], a, e, math.MaxInt64))
		}
		r = b.op("Concat", attrs(intAttr("axis", int64(a))), parts...)
	}
	if r == upd {
		// Every axis written whole: the result is the updates.
		r = b.op("Identity", nil, upd)
	}
	b.finish(r, n.Outputs[0])
	g.ReplaceNode(n, b.nodes)
}

// dropDeadIndices removes the nodes that computed the replaced
// ScatterNDs' indices and that nothing reads any more (the index grids
// the runtime would otherwise be asked to compute).
func (g *Graph) dropDeadIndices(done []*boxScatter) {
	var idx []*Value
	for _, c := range done {
		idx = append(idx, c.n.Input(1))
	}
	anc := producers(idx)
	isOut := map[*Value]bool{}
	for _, v := range g.Outputs {
		isOut[v] = true
	}
	g.dropUnread(isOut, func(n *Node) bool { return anc[n] })
	g.relink()
}

// producers returns the nodes that compute vs, directly or through
// others.
func producers(vs []*Value) map[*Node]bool {
	need := map[*Node]bool{}
	var visit func(v *Value)
	visit = func(v *Value) {
		if v == nil || v.Producer == nil || need[v.Producer] {
			return
		}
		need[v.Producer] = true
		for _, in := range v.Producer.Inputs {
			visit(in)
		}
	}
	for _, v := range vs {
		visit(v)
	}
	return need
}
