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
// Prefix, which computes the one tensor Cut through which all of it
// reaches the trained part; Head computes the model's first output from
// Cut. Prefix has no parameter to train and runs as a pure function of
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
	// Cut names the tensor; Shape is one sample's shape of it.
	Cut   string
	Shape []int64
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

// SampleFloats returns the floats one sample's Cut holds.
func (f *FrozenPrefix) SampleFloats() int64 { return prod(f.Shape) }

// SplitFrozenPrefix cuts g, planned as p with opts (Prepare's graph and
// plan), where its trained part begins. When g has no such cut worth
// making it returns nil and the reason: the first trained parameter reads
// the input itself, the frozen part reaches the trained one through
// several tensors, the tensor does not carry the batch on its first axis,
// or the head's plan would not train exactly what p trains.
func SplitFrozenPrefix(g *graph.Graph, p *Plan, opts PlanOptions) (*FrozenPrefix, string, error) {
	if opts.Multiplicity > 1 {
		return nil, "each sample is fed as several augmented views", nil
	}
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
	case len(cut) > 1:
		names := make([]string, len(cut))
		for i, v := range cut {
			names[i] = fmt.Sprintf("%q", v.Name)
		}
		slices.Sort(names)
		return nil, fmt.Sprintf("the frozen part reaches the trained part through %d tensors (%s), not one", len(cut), strings.Join(names, ", ")), nil
	}
	c := cut[0]
	// One sample's shape of the cut, and its batch axis first: the same
	// at two batch sizes but for the leading axis, which is the batch.
	var shapes [2][]int64
	var dtype graph.DType
	for k, b := range []int64{2, 3} {
		ic, err := inferredClone(g, p.InputShape, b)
		if err != nil {
			return nil, "", err
		}
		iv := ic.Values[c.Name]
		if !iv.DType.IsFloat() {
			return nil, fmt.Sprintf("the tensor %q where the trained part begins is not floating-point", c.Name), nil
		}
		sh := iv.Shape
		dtype = iv.DType
		if !sh.Static() || len(sh) == 0 || sh[0].Size != b {
			return nil, fmt.Sprintf("the tensor %q where the trained part begins does not carry the batch on its first axis (shape %v at batch %d)", c.Name, sh, b), nil
		}
		shapes[k] = sh.Ints()[1:]
	}
	if !slices.Equal(shapes[0], shapes[1]) {
		return nil, fmt.Sprintf("one sample's shape of %q changes with the batch (%v, %v)", c.Name, shapes[0], shapes[1]), nil
	}
	pre, err := g.Subgraph([]string{in.Name}, []string{c.Name})
	if err != nil {
		return nil, "", fmt.Errorf("rewrite: the frozen prefix: %w", err)
	}
	head, err := g.Subgraph([]string{c.Name}, []string{out.Name})
	if err != nil {
		return nil, "", fmt.Errorf("rewrite: the head: %w", err)
	}
	// The head's input: the cut with the model input's batch axis.
	batch := graph.Dim{Size: -1, Param: "batch"}
	if len(in.Shape) > 0 {
		batch = in.Shape[0]
	}
	hin := head.Inputs[0]
	hin.DType = dtype
	hin.Shape = append(graph.Shape{batch}, graph.StaticShape(shapes[0]...)...)
	if err := head.Validate(); err != nil {
		return nil, "", fmt.Errorf("rewrite: the head: %w", err)
	}
	// The head's plan trains what p trains: its trainable parameters by
	// their exact names, every other parameter frozen.
	var names []string
	for v := range trained {
		if head.Values[v.Name] == nil {
			return nil, fmt.Sprintf("the trained parameter %q is outside the part that computes the first output", v.Name), nil
		}
		names = append(names, regexp.QuoteMeta(v.Name))
	}
	slices.Sort(names)
	ho := opts
	ho.InputShape, ho.Freeze, ho.Multiplicity = shapes[0], nil, 0
	ho.Train = regexp.MustCompile("^(?:" + strings.Join(names, "|") + ")$")
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
	return &FrozenPrefix{Prefix: pre, Head: head, HeadPlan: hp, Cut: c.Name, Shape: shapes[0], PrefixNodes: len(pre.Nodes), HeadNodes: len(head.Nodes)}, "", nil
}
