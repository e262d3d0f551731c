package rewrite

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dpfinetune/dpfinetune/graph"
)

// FrozenPrefix is a model cut where its trained part begins. Everything
// of the model that reads the input and no trained parameter — the frozen
// backbone of a linear probe or of a fine-tune of its last blocks — is
// Prefix, which computes the tensors (Cut) through which all of it
// reaches the trained part; Head computes the model's first output from
// them. Prefix has no parameter to train and runs as a pure function of
// each sample (the runtime runs Dropout as the identity), so its outputs
// can be computed once per example and reused at every step: a sample's
// gradient through Head at its cached Cut is its gradient through the
// whole model (Tramèr & Boneh 2021's transfer learning on frozen
// features, without changing what is trained or the privacy analysis).
//
// Head's initializers are the model's tensors (graph.Subgraph): training
// Head in place trains the model.
type FrozenPrefix struct {
	Prefix, Head *graph.Graph
	// HeadPlan is the plan of Head with the model plan's trainable
	// parameters, and no other, trainable.
	HeadPlan *Plan
	// Cut names the tensors of the cut, in the order the model computes
	// them, and Shapes is one sample's shape of each. Shape is one
	// sample's shape of Head's input: Shapes[0] where the cut is one
	// tensor, else their floats laid end to end (PackedInput), which Head
	// slices and reshapes back.
	Cut    []string
	Shapes [][]int64
	Shape  []int64
	// PrefixNodes and HeadNodes count the nodes on either side (a node
	// that computes from constants alone may be on both).
	PrefixNodes, HeadNodes int
}

// Nodes says n nodes in words ("1 node", "28 nodes").
func Nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// SampleFloats returns the floats of one sample's cut.
func (f *FrozenPrefix) SampleFloats() int64 { return prod(f.Shape) }

// SplitFrozenPrefix cuts g, planned as p with opts (Prepare's graph and
// plan), where its trained part begins. When g has no such cut worth
// making it returns nil and the reason: a trained parameter reads the
// input itself, a tensor of the cut is not float32 or does not carry the
// batch on its first axis, or the head's plan would not train exactly what
// p trains. Where opts reads several rows a sample (Multiplicity: a user's
// examples under user-level privacy), the head reads as many cut rows a
// sample: the rows must be inputs fixed for the run — augmented views,
// which differ at every step, are the caller's to refuse.
func SplitFrozenPrefix(g *graph.Graph, p *Plan, opts PlanOptions) (*FrozenPrefix, string, error) {
	if p.Trainable.Tensors == 0 {
		return nil, "nothing is trained", nil
	}
	in, err := inputOf(g)
	if err != nil {
		return nil, "", err
	}
	if len(g.Outputs) == 0 {
		return nil, "", fmt.Errorf("rewrite: the model has no output")
	}
	trained := map[*graph.Value]bool{}
	for _, prm := range p.Params {
		if prm.Trainable() {
			if v := g.Values[prm.Name]; v != nil {
				trained[v] = true
			}
		}
	}
	// A node is the prefix's when it reads the input, through any path,
	// and no trained parameter.
	data := map[*graph.Value]bool{in: true}
	touched := map[*graph.Value]bool{}
	prefix := map[*graph.Node]bool{}
	for v := range trained {
		touched[v] = true
	}
	for _, n := range g.Nodes {
		d, t := false, false
		for _, v := range n.Inputs {
			d = d || data[v]
			t = t || touched[v]
		}
		for _, v := range n.Outputs {
			if v != nil {
				data[v], touched[v] = d, t
			}
		}
		prefix[n] = d && !t
	}
	// The cut: the prefix's values (the input among them) that the
	// head's nodes read, the head being what the first output needs
	// beyond the prefix.
	out := g.Outputs[0]
	if !touched[out] {
		return nil, "no trained parameter reaches the first output", nil
	}
	var cut []*graph.Value
	seenCut := map[*graph.Value]bool{}
	seen := map[*graph.Node]bool{}
	var visit func(v *graph.Value)
	visit = func(v *graph.Value) {
		if v == nil || v.Const != nil {
			return
		}
		n := v.Producer
		if n == nil || prefix[n] {
			if !seenCut[v] {
				seenCut[v] = true
				cut = append(cut, v)
			}
			return
		}
		if seen[n] {
			return
		}
		seen[n] = true
		for _, u := range n.Inputs {
			visit(u)
		}
	}
	visit(out)
	switch {
	case len(cut) == 0:
		return nil, "the first output does not depend on the input", nil
	case slices.Contains(cut, in):
		return nil, "a trained parameter reads the input itself: nothing before it is frozen", nil
	}
	// The cut in the order the model computes it.
	pos := map[*graph.Node]int{}
	for i, n := range g.Nodes {
		pos[n] = i
	}
	slices.SortFunc(cut, func(a, b *graph.Value) int { return pos[a.Producer] - pos[b.Producer] })
	// One sample's shape of each tensor of the cut, and its batch axis
	// first: the same at two batch sizes but for the leading axis, which
	// is the batch.
	shapes := make([][]int64, len(cut))
	var dtype graph.DType
	for _, b := range []int64{2, 3} {
		ic, err := inferredClone(g, p.InputShape, b)
		if err != nil {
			return nil, "", err
		}
		for k, c := range cut {
			iv := ic.Values[c.Name]
			if iv.DType != graph.Float32 {
				return nil, fmt.Sprintf("the tensor %q where the trained part begins is not float32 (%v)", c.Name, iv.DType), nil
			}
			sh := iv.Shape
			dtype = iv.DType
			if !sh.Static() || len(sh) == 0 || sh[0].Size != b {
				return nil, fmt.Sprintf("the tensor %q where the trained part begins does not carry the batch on its first axis (shape %v at batch %d)", c.Name, sh, b), nil
			}
			if shapes[k] != nil && !slices.Equal(shapes[k], sh.Ints()[1:]) {
				return nil, fmt.Sprintf("one sample's shape of %q changes with the batch (%v, %v)", c.Name, shapes[k], sh.Ints()[1:]), nil
			}
			shapes[k] = sh.Ints()[1:]
		}
	}
	names := make([]string, len(cut))
	for k, c := range cut {
		names[k] = c.Name
	}
	pre, err := g.Subgraph([]string{in.Name}, names)
	if err != nil {
		return nil, "", fmt.Errorf("rewrite: the frozen prefix: %w", err)
	}
	heavy := false
	for _, n := range pre.Nodes {
		heavy = heavy || productOps[n.OpType]
	}
	if !heavy {
		return nil, "the frozen part before the trained part has no convolution or matrix product (the input's preprocessing at most): caching it would save nothing", nil
	}
	head, err := g.Subgraph(names, []string{out.Name})
	if err != nil {
		return nil, "", fmt.Errorf("rewrite: the head: %w", err)
	}
	// The head's input: the cut with the model input's batch axis, or,
	// where the cut is several tensors, one tensor of each sample's
	// tensors flattened and laid end to end, which the head slices and
	// reshapes back.
	batch := graph.Dim{Size: -1, Param: "batch"}
	if len(in.Shape) > 0 {
		batch = in.Shape[0]
	}
	shape := shapes[0]
	if len(cut) == 1 {
		hin := head.Inputs[0]
		hin.DType = dtype
		hin.Shape = append(graph.Shape{batch}, graph.StaticShape(shape...)...)
	} else {
		var reason string
		if shape, reason = packCut(head, shapes, batch); reason != "" {
			return nil, reason, nil
		}
	}
	if err := head.Validate(); err != nil {
		return nil, "", fmt.Errorf("rewrite: the head: %w", err)
	}
	// The head's plan trains what p trains: its trainable parameters by
	// their exact names, every other parameter frozen.
	var sel []string
	for v := range trained {
		if head.Values[v.Name] == nil {
			return nil, fmt.Sprintf("the trained parameter %q is outside the part that computes the first output", v.Name), nil
		}
		sel = append(sel, regexp.QuoteMeta(v.Name))
	}
	slices.Sort(sel)
	ho := opts
	ho.InputShape, ho.Freeze = shape, nil
	ho.Train = regexp.MustCompile("^(?:" + strings.Join(sel, "|") + ")$")
	hp, err := Analyze(head, ho)
	if err != nil {
		return nil, "", fmt.Errorf("rewrite: the head: %w", err)
	}
	if err := hp.Err(); err != nil {
		return nil, fmt.Sprintf("the head alone: %v", err), nil
	}
	if hp.Trainable != p.Trainable {
		return nil, fmt.Sprintf("the head alone would train %d tensors (%d scalars), the model %d (%d)", hp.Trainable.Tensors, hp.Trainable.Scalars, p.Trainable.Tensors, p.Trainable.Scalars), nil
	}
	for _, prm := range hp.Params {
		if q := p.Param(prm.Name); q == nil || q.Trainable() != prm.Trainable() || prm.Trainable() && q.Kind != prm.Kind {
			return nil, fmt.Sprintf("the head alone would plan %q otherwise than the model", prm.Name), nil
		}
	}
	hp.Changes, hp.ExportForm = nil, p.ExportForm
	return &FrozenPrefix{Prefix: pre, Head: head, HeadPlan: hp, Cut: names, Shapes: shapes, Shape: shape, PrefixNodes: len(pre.Nodes), HeadNodes: len(head.Nodes)}, "", nil
}

// productOps are the operators whose cost a cache of the frozen part
// saves: where the frozen part has none of them (a Cast, a normalization
// of the input, a pooling), caching it would cost memory for nothing.
var productOps = set("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum")

// PackedInput names the head's input where the cut is several tensors.
const PackedInput = "dpfinetune.features"

// packCut replaces head's inputs, one sample's shapes of them shapes, by
// one input of their floats a sample laid end to end (PackedInput, with
// the batch axis batch), sliced and reshaped back at the head's start. It
// returns the packed input's sample shape, or the reason it cannot.
func packCut(head *graph.Graph, shapes [][]int64, batch graph.Dim) ([]int64, string) {
	nm := newNamer(head)
	b := newBuilder(head, nm, "/dpfinetune/features")
	if b.opset < 10 {
		return nil, fmt.Sprintf("the frozen part reaches the trained part through %d tensors, which a model of opset %d cannot slice from one (Slice's inputs: opset 10)", len(shapes), b.opset)
	}
	var total int64
	for _, sh := range shapes {
		total += prod(sh)
	}
	packed := &graph.Value{Name: nm.value(PackedInput), DType: graph.Float32, Shape: graph.Shape{batch, {Size: total}}}
	head.Values[packed.Name] = packed
	var off int64
	for k, v := range head.Inputs {
		n := prod(shapes[k])
		sl := b.op("Slice", nil, packed, b.constant(int64Tensor([]int64{1}, off)), b.constant(int64Tensor([]int64{1}, off+n)), b.constant(int64Tensor([]int64{1}, 1)))
		to := append([]int64{-1}, shapes[k]...)
		b.opInto(v, "Reshape", nil, sl, b.constant(int64Tensor([]int64{int64(len(to))}, to...)))
		off += n
	}
	head.Nodes = append(b.nodes, head.Nodes...)
	head.Inputs = []*graph.Value{packed}
	relink(head)
	return []int64{total}, ""
}
