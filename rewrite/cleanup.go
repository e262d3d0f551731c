package rewrite

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

// Cleanup prepares a graph for training: it elides Identity and Dropout
// nodes and then removes dead nodes and unused initializers (RemoveDead).
//
//   - Identity of a floating-point initializer is how PyTorch's exporter
//     aliases initializers it de-duplicated because their values were
//     equal (torchvision's zero conv biases, for example): distinct
//     parameters of the PyTorch model that would otherwise train as one.
//     Such an Identity is replaced by an initializer of its own, named as
//     the Identity's output, holding a copy of the data ("untied").
//   - Any other Identity is elided: its readers read its input.
//   - Dropout is elided when its mask output is unused. Dropout does not
//     mix samples, but the engine trains without it (the noise of DP-SGD
//     regularizes), and eval-mode exports never contain it.
//
// An Identity or Dropout whose output is a graph output is kept, so that
// output names do not change. Every elision is exact: the graph computes
// the same outputs.
func Cleanup(g *graph.Graph) ([]Change, error) {
	var changes []Change
	relink(g)
	var kept []*graph.Node
	for _, n := range g.Nodes {
		if n.Domain != "" || (n.OpType != "Identity" && n.OpType != "Dropout") {
			kept = append(kept, n)
			continue
		}
		in, out := n.Input(0), n.Outputs[0]
		if in == nil || out == nil {
			kept = append(kept, n)
			continue
		}
		if isGraphOutput(g, out) {
			changes = append(changes, Change{Pass: "cleanup", Target: nodeLabel(n), Action: "kept " + n.OpType, Reason: "its output is the graph output " + out.Name})
			kept = append(kept, n)
			continue
		}
		if n.OpType == "Dropout" {
			if len(n.Outputs) > 1 && n.Outputs[1] != nil && (len(n.Outputs[1].Consumers) > 0 || isGraphOutput(g, n.Outputs[1])) {
				changes = append(changes, Change{Pass: "cleanup", Target: nodeLabel(n), Action: "kept Dropout", Reason: "its mask output is used"})
				kept = append(kept, n)
				continue
			}
			replaceUses(g, out, in)
			relink(g)
			delete(g.Values, out.Name)
			if len(n.Outputs) > 1 && n.Outputs[1] != nil {
				delete(g.Values, n.Outputs[1].Name)
			}
			changes = append(changes, Change{Pass: "cleanup", Target: nodeLabel(n), Action: "elided Dropout", Reason: "training plans run without dropout; its readers read " + in.Name})
			continue
		}
		if in.IsParam() && in.Const != nil {
			// Untie an exporter alias: out becomes an initializer.
			cp := copyTensor(in.Const)
			out.Producer = nil
			out.Initializer = true
			setInitializer(out, cp)
			g.Initializers = append(g.Initializers, out)
			changes = append(changes, Change{Pass: "cleanup", Target: out.Name, Action: fmt.Sprintf("untied from %s (new initializer, copied data)", in.Name),
				Reason: "Identity of an initializer: the exporter de-duplicated equal-valued parameters"})
			continue
		}
		replaceUses(g, out, in)
		relink(g)
		delete(g.Values, out.Name)
		changes = append(changes, Change{Pass: "cleanup", Target: nodeLabel(n), Action: "elided Identity", Reason: "its readers read " + in.Name})
	}
	g.Nodes = kept
	relink(g)
	changes = append(changes, RemoveDead(g)...)
	return changes, g.Validate()
}

// RemoveDead removes nodes none of whose outputs is read or is a graph
// output, repeatedly, and then initializers that nothing reads.
func RemoveDead(g *graph.Graph) []Change {
	var changes []Change
	relink(g)
	live := map[*graph.Node]bool{}
	needed := map[*graph.Value]bool{}
	for _, v := range g.Outputs {
		needed[v] = true
	}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		for _, o := range n.Outputs {
			if o != nil && needed[o] {
				live[n] = true
			}
		}
		if live[n] {
			for _, in := range n.Inputs {
				if in != nil {
					needed[in] = true
				}
			}
		}
	}
	var kept []*graph.Node
	for _, n := range g.Nodes {
		if live[n] {
			kept = append(kept, n)
			continue
		}
		for _, o := range n.Outputs {
			if o != nil {
				delete(g.Values, o.Name)
			}
		}
		changes = append(changes, Change{Pass: "cleanup", Target: nodeLabel(n), Action: "removed dead " + n.OpType, Reason: "no graph output depends on it"})
	}
	g.Nodes = kept
	relink(g)
	var inits []*graph.Value
	for _, v := range g.Initializers {
		if g.Values[v.Name] != v {
			continue
		}
		if len(v.Consumers) == 0 && !isGraphOutput(g, v) {
			delete(g.Values, v.Name)
			changes = append(changes, Change{Pass: "cleanup", Target: v.Name, Action: "removed unused initializer", Reason: "no node reads it"})
			continue
		}
		inits = append(inits, v)
	}
	g.Initializers = inits
	return changes
}
