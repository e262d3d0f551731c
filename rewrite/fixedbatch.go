package rewrite

import (
	"fmt"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// BatchParam is the name ReleaseBatch gives the batch axis it makes
// dynamic, as torch.onnx.export's dynamic_axes would.
const BatchParam = "batch"

// releaseTries bounds ReleaseBatch's search, which infers the shapes of
// the whole graph once a try: a few tries for each node it may repair
// (one to meet it, one or two to go back), within maxReleaseWork.
func releaseTries(g *graph.Graph) int {
	sites := 0
	for _, n := range g.Nodes {
		if n.OpType == "Reshape" || n.OpType == "Concat" {
			sites++
		}
	}
	return min(4*sites+16, maxReleaseWork/max(len(g.Nodes), 1))
}

// maxReleaseWork bounds the nodes ReleaseBatch infers in all, so that a
// graph of a million Reshapes costs seconds, not hours (ViT-B/16's search
// may take 264 tries of 774 nodes).
const maxReleaseWork = 1 << 23

// ReleaseBatch makes the batch axis of a model exported with a fixed one
// dynamic. It returns the batch size the export fixed (0 where the batch
// axis was already dynamic, or the model has no single input of rank ≥ 2,
// and then changes nothing), the changes it made, and an error where the
// batch cannot be followed through the graph at another batch size.
//
// torch.onnx.export without dynamic_axes writes the example input's batch
// size, often 1, into the model's input and output shapes — the most
// common export there is — and its constant folding bakes the batch into
// the target shapes of Reshapes ([1, 197, 12, 64]) and into broadcasts (a
// class token expanded to one sample). ReleaseBatch declares the input's
// dimension 0 and the outputs' (where it equals the fixed batch) dynamic,
// forgets the shapes the export declared for intermediate values, and
// repairs the constants that hold the batch, found by inferring the shapes
// at another batch size:
//
//   - a Reshape whose constant target holds the batch gets -1 on the axis
//     where the samples of its input land (the batch block of its input's
//     layout must stay within that axis). Where several axes could hold
//     them (at a batch of 1 an axis of 17 tokens can hold one sample's
//     17 rows as well as the batch), the outermost is tried first and a
//     later inconsistency — a shape that does not fit, samples that
//     interact (the layout analysis), an output whose batch is not on axis
//     0 — sends the search back to the latest choice it depends on;
//   - a Concat of a constant with one sample (the class token) and the
//     batched tokens expands the constant over the batch (fixed batch 1).
//
// Whether the result computes each sample as the export did is for the
// caller to check on values (dpfinetune's loader compares the outputs at
// two batch sizes): the search proves only that shapes fit and samples
// stay apart. On an error g is left part-way (its declarations released):
// release a clone where the model must stay usable as it was.
func ReleaseBatch(g *graph.Graph) (int64, []Change, error) {
	fixed := g.FixedBatch()
	if fixed == 0 {
		return 0, nil, nil
	}
	in := g.Inputs[0]
	sample := in.Shape[1:]
	if !sample.Static() {
		return fixed, nil, fmt.Errorf("its input %q has shape %v: the sample's dimensions are not fixed either", in.Name, in.Shape)
	}
	// The shapes at the fixed batch, for the Reshape targets with their
	// -1 resolved.
	ref := g.Clone()
	if err := ref.InferShapes(map[string][]int64{in.Name: append([]int64{fixed}, sample.Ints()...)}); err != nil {
		return fixed, nil, fmt.Errorf("at its own batch of %d: %w", fixed, err)
	}
	dyn := graph.Dim{Size: -1, Param: BatchParam}
	in.Shape = append(graph.Shape{dyn}, sample...)
	outs := map[*graph.Value]bool{}
	for _, o := range g.Outputs {
		outs[o] = true
		if len(o.Shape) > 0 && o.Shape[0].Size == fixed {
			o.Shape = append(graph.Shape{dyn}, o.Shape[1:]...)
		}
	}
	for _, v := range g.Values {
		if v.Producer != nil && !outs[v] && v.Const == nil {
			v.Shape = nil
		}
	}
	// A -1 (or 0) in a Reshape's target takes in whatever the batch adds
	// without failing where another axis should: every target of a
	// Reshape of the samples is resolved to its shape at the fixed batch,
	// so that the search meets each at its first failure.
	nm := newNamer(g)
	var replaced []string // the targets this leaves unread
	data, constant := valueKinds(g)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.OpType != "Reshape" || len(n.Inputs) < 2 || n.Inputs[1] == nil || !data[n.Inputs[0]] {
			continue
		}
		t, rv := n.Inputs[1], ref.Values[outName(n)]
		if rv == nil || !rv.Shape.Static() || !constant[t] {
			continue
		}
		b := newBuilder(g, nm, n.Name)
		replaced = append(replaced, t.Name)
		n.Inputs[1] = b.constant(int64Tensor([]int64{int64(len(rv.Shape))}, rv.Shape.Ints()...))
		replaced = append(replaced, n.Inputs[1].Name)
		g.ReplaceNode(n, append(b.nodes, n))
	}
	relink(g)
	r := &releaser{base: g, ref: ref, fixed: fixed, batch: fixed + 1, sample: sample.Ints()}
	w, changes, err := r.search()
	if err != nil {
		return fixed, nil, err
	}
	dropUnread(w, replaced)
	*g = *w
	return fixed, changes, nil
}

// releaser is ReleaseBatch's search for the constants that hold the batch.
type releaser struct {
	base   *graph.Graph // declarations released, no repair
	ref    *graph.Graph // shapes at the fixed batch
	fixed  int64
	batch  int64 // the batch size the repaired graph is checked at
	sample []int64
	// choices are the repairs made so far, in the order the graph reaches
	// them.
	choices []choice
}

// choice is one repaired node (named by its first output, which every
// clone keeps): its candidate repairs and the one in use.
type choice struct {
	node  string
	cands []repair
	pick  int
}

// repair is a candidate for one node: a Reshape's new target, or a
// Concat operand to expand over the batch.
type repair struct {
	target  []int64
	operand int
	why     string
}

// search infers the shapes of the repaired graph at r.batch until they fit
// with every sample apart, adding a choice at each node that fails and
// going back to the latest choice a failure depends on.
func (r *releaser) search() (*graph.Graph, []Change, error) {
	// The error reported is the failure the search got furthest to: the
	// node no choice before it repairs.
	var last error
	deepest := -1
	pos := map[string]int{}
	for i, n := range r.base.Nodes {
		pos[outName(n)] = i
	}
	tries := releaseTries(r.base)
	for try := 0; try < tries; try++ {
		w, changes := r.apply()
		c := w.Clone()
		err := c.InferShapes(map[string][]int64{w.Inputs[0].Name: append([]int64{r.batch}, r.sample...)})
		li := analyzeLayout(c, r.batch)
		at, why := r.firstFailure(c, li, err)
		if at == nil {
			relink(w)
			return w, changes, nil
		}
		if p, ok := pos[outName(at)]; !ok || p >= deepest {
			last, deepest = fmt.Errorf("at a batch of %d, %s", r.batch, why), p
		}
		if cands := r.candidates(c, li, at); len(cands) > 0 && !r.chosen(at) {
			r.choices = append(r.choices, choice{node: outName(at), cands: cands})
			continue
		}
		if !r.backtrack(at) {
			return nil, nil, last
		}
	}
	return nil, nil, fmt.Errorf("%v (gave up after %d tries)", last, tries)
}

func outName(n *graph.Node) string {
	for _, o := range n.Outputs {
		if o != nil {
			return o.Name
		}
	}
	return n.Name
}

func (r *releaser) chosen(n *graph.Node) bool {
	for _, c := range r.choices {
		if c.node == outName(n) {
			return true
		}
	}
	return false
}

// firstFailure returns the first node, in graph order, whose shape does not
// fit at r.batch (err from InferShapes) or where samples interact; and for
// a graph that fits, an output's producer whose batch is not on axis 0.
func (r *releaser) firstFailure(c *graph.Graph, li *layoutInfo, err error) (*graph.Node, string) {
	// Batch statistics mix the samples by design; the BatchNorm rewrite
	// replaces them later.
	var probs []string
	var probAt []*graph.Node
	for i, n := range li.problemAt {
		if n.OpType != "BatchNormalization" {
			probs, probAt = append(probs, li.problems[i]), append(probAt, n)
		}
	}
	if err != nil {
		// InferShapes stops at the node it cannot infer, before pruning
		// folded nodes: the first node with an output left without a
		// static shape.
		for _, n := range c.Nodes {
			for _, o := range n.Outputs {
				if o != nil && o.Const == nil && !o.Shape.Static() {
					if len(probAt) > 0 && before(c, probAt[0], n) {
						return probAt[0], probs[0]
					}
					return n, err.Error()
				}
			}
		}
		return nil, ""
	}
	if len(probAt) > 0 {
		return probAt[0], probs[0]
	}
	for _, o := range c.Outputs {
		if s := li.state(o); s.kind == batched && !s.l.Plain() && o.Producer != nil {
			return o.Producer, fmt.Sprintf("output %s carries the batch on %v", o.Name, s.l)
		}
	}
	return nil, ""
}

func before(g *graph.Graph, a, b *graph.Node) bool {
	for _, n := range g.Nodes {
		switch n {
		case a:
			return true
		case b:
			return false
		}
	}
	return false
}

// candidates lists the repairs of a failing node n of the inferred clone c.
func (r *releaser) candidates(c *graph.Graph, li *layoutInfo, n *graph.Node) []repair {
	switch n.OpType {
	case "Reshape":
		x, t := n.Input(0), n.Input(1)
		s := li.state(x)
		in, ok := dims(x)
		if !ok || t == nil || t.Const == nil || s.kind != batched {
			return nil
		}
		rv := r.ref.Values[outName(n)]
		if rv == nil || !rv.Shape.Static() {
			return nil
		}
		t0 := rv.Shape.Ints()
		var elems, want int64 = 1, 1
		for _, d := range in {
			elems *= d
		}
		for _, d := range t0 {
			want *= d
		}
		if want*r.batch != elems*r.fixed {
			return nil
		}
		sb := s.l.Inner
		for _, d := range in[s.l.Axis+1:] {
			sb *= d
		}
		var cands []repair
		suffix := int64(1)
		var ks []int
		for k := len(t0) - 1; k >= 0; k-- {
			if sb%suffix == 0 && t0[k]%(r.fixed*(sb/suffix)) == 0 {
				ks = append(ks, k)
			}
			suffix *= t0[k]
		}
		for i := len(ks) - 1; i >= 0; i-- { // outermost first
			k := ks[i]
			t := append([]int64(nil), t0...)
			t[k] = -1
			cands = append(cands, repair{target: t, operand: -1,
				why: fmt.Sprintf("target %v held the batch of %d on axis %d: now %v", t0, r.fixed, k, t)})
		}
		return cands
	case "Concat", "Add", "Sub", "Mul", "Div", "Where", "Max", "Min", "Sum", "Mean":
		// A constant per sample of the fixed batch, combined with the
		// batched operands: concatenated (a class token) or, where the
		// fixed batch is above 1 so that it does not broadcast, combined
		// elementwise (a position embedding expanded to the batch).
		concat := n.OpType == "Concat"
		if !concat && r.fixed == 1 {
			return nil
		}
		var lay *BatchLayout
		var bd []int64 // the batched operand's shape (the node's own failed)
		for _, x := range n.Inputs {
			if s := li.state(x); s.kind == batched {
				l := s.l
				lay = &l
				bd, _ = dims(x)
				break
			}
		}
		if lay == nil || !lay.Plain() {
			return nil
		}
		a, _ := n.Int("axis")
		var whys []string
		for i, x := range n.Inputs {
			d, ok := dims(x)
			if !ok || li.state(x).kind != indep || len(d) == 0 || d[0] != r.fixed {
				continue
			}
			if concat && (a == 0 || a == -int64(len(d))) || !concat && len(d) != len(bd) {
				continue
			}
			if e, ok := r.spreadable(x); ok && (concat || e != nil) {
				what := "one sample's constant"
				if r.fixed > 1 {
					what = fmt.Sprintf("one constant expanded to the %d samples", r.fixed)
				}
				whys = append(whys, fmt.Sprintf("operand %d (%s) holds %s: expanded over the batch", i, x.Name, what))
			}
		}
		if len(whys) == 0 {
			return nil
		}
		// One repair expands every such operand.
		return []repair{{operand: -2, why: strings.Join(whys, "; ")}}
	}
	return nil
}

// spreadable reports whether a Concat operand x that does not depend on
// the input, with the fixed batch's rows on axis 0, can be spread over any
// batch: it is an Expand of one row (its target is made [N, …]; returned),
// or, at a fixed batch of 1, the row itself (a new Expand; nil returned).
func (r *releaser) spreadable(x *graph.Value) (*graph.Node, bool) {
	if p := x.Producer; p != nil && p.OpType == "Expand" && len(p.Inputs) == 2 {
		if d, ok := dims(r.refValue(p.Inputs[0])); ok && len(d) > 0 && d[0] == 1 {
			return p, true
		}
	}
	return nil, r.fixed == 1
}

// backtrack moves the latest choice that the failing node depends on to
// its next candidate, dropping the later ones; it reports false where none
// is left.
func (r *releaser) backtrack(at *graph.Node) bool {
	anc := ancestors(r.base, at)
	for i := len(r.choices) - 1; i >= 0; i-- {
		c := &r.choices[i]
		if c.node != outName(at) && !anc[c.node] {
			continue
		}
		if c.pick+1 < len(c.cands) {
			c.pick++
			r.choices = r.choices[:i+1]
			return true
		}
	}
	return false
}

// ancestors names (by first output) the nodes of g upstream of the node
// producing at's first output.
func ancestors(g *graph.Graph, at *graph.Node) map[string]bool {
	out := map[string]bool{}
	v := g.Values[outName(at)]
	if v == nil || v.Producer == nil {
		return out
	}
	stack := []*graph.Node{v.Producer}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, x := range n.Inputs {
			if x == nil || x.Producer == nil || out[outName(x.Producer)] {
				continue
			}
			out[outName(x.Producer)] = true
			stack = append(stack, x.Producer)
		}
	}
	return out
}

// apply returns a copy of r.base with the chosen repairs and their
// changes.
func (r *releaser) apply() (*graph.Graph, []Change) {
	w := r.base.Clone()
	nm := newNamer(w)
	// What each repair adds reads only the input's shape: the values
	// computed from its data stay those of r.base.
	data, _ := valueKinds(w)
	var changes []Change
	for _, c := range r.choices {
		v := w.Values[c.node]
		if v == nil || v.Producer == nil {
			continue
		}
		n := v.Producer
		rp := c.cands[c.pick]
		b := newBuilder(w, nm, n.Name)
		at := n // where the new nodes go
		switch {
		case rp.target != nil:
			n.Inputs[1] = b.constant(int64Tensor([]int64{int64(len(rp.target))}, rp.target...))
		default:
			// The constant operands over N samples, N read from the
			// input's shape: their Expand's target made [N, …], or a new
			// Expand(x, [N, 1, …, 1]).
			shape := b.op("Shape", nil, w.Inputs[0])
			nv := b.op("Gather", []*onnxpb.AttributeProto{attrInt("axis", 0)}, shape, b.constant(int64Tensor([]int64{1}, 0)))
			for i, x := range n.Inputs {
				d, ok := dims(r.refValue(x))
				if !ok || len(d) == 0 || d[0] != r.fixed || data[x] {
					continue
				}
				e, ok := r.spreadable(x)
				if !ok {
					continue
				}
				rest := d[1:]
				if e == nil {
					rest = make([]int64, len(d)-1)
					for j := range rest {
						rest[j] = 1
					}
				}
				target := nv
				if len(rest) > 0 {
					target = b.op("Concat", []*onnxpb.AttributeProto{attrInt("axis", 0)}, nv, b.constant(int64Tensor([]int64{int64(len(rest))}, rest...)))
				}
				if e != nil {
					e.Inputs[1] = target
					if before(w, e, at) {
						at = e
					}
				} else {
					n.Inputs[i] = b.op("Expand", nil, x, target)
				}
			}
		}
		// The new nodes (they read only the graph input) go before the
		// first node that reads them.
		w.ReplaceNode(at, append(b.nodes, at))
		changes = append(changes, Change{Pass: "batch", Target: nodeLabel(n), Action: rp.why,
			Reason: fmt.Sprintf("the export fixed the batch at %d", r.fixed)})
	}
	relink(w)
	return w, changes
}

// refValue is x's value in the graph inferred at the fixed batch.
func (r *releaser) refValue(x *graph.Value) *graph.Value {
	if x == nil {
		return nil
	}
	if v := r.ref.Values[x.Name]; v != nil {
		return v
	}
	return x
}

// valueKinds sorts g's values in one pass over its nodes: data holds what
// is computed from the graph inputs' values (not only their shapes),
// constant what is computed from constants alone (not from a Shape or Size).
// One pass, not a walk from each value: a file may hold a million nodes.
func valueKinds(g *graph.Graph) (data, constant map[*graph.Value]bool) {
	data, constant = map[*graph.Value]bool{}, map[*graph.Value]bool{}
	for _, v := range g.Inputs {
		data[v] = true
	}
	for _, v := range g.Values {
		if v.Const != nil {
			constant[v] = true
		}
	}
	for _, n := range g.Nodes {
		if n.OpType == "Shape" || n.OpType == "Size" {
			continue
		}
		anyData, allConst := false, true
		for _, in := range n.Inputs {
			if in != nil {
				anyData = anyData || data[in]
				allConst = allConst && constant[in]
			}
		}
		for _, o := range n.Outputs {
			if o != nil {
				data[o] = data[o] || anyData
				constant[o] = constant[o] || allConst
			}
		}
	}
	return data, constant
}

// dropUnread removes the constants named that nothing reads any more: the
// Reshape targets ReleaseBatch replaced.
func dropUnread(g *graph.Graph, names []string) {
	relink(g)
	for _, name := range names {
		v := g.Values[name]
		switch {
		case v == nil || len(v.Consumers) > 0 || isGraphOutput(g, v):
		case v.Initializer:
			removeInitializerIfUnused(g, v)
		case v.Producer != nil && v.Producer.OpType == "Constant":
			g.ReplaceNode(v.Producer, nil)
			delete(g.Values, name)
		}
	}
	relink(g)
}
