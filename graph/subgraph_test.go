package graph

import (
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/onnx"
)

// TestSubgraph cuts the fixture CNN at its flattened features: the part
// before takes the model's input to them, the part after takes them to
// the logits; each keeps exactly the nodes and initializers it needs, the
// initializers' tensors are the model's, and the cuts that cannot be made
// are refused with the value they name.
func TestSubgraph(t *testing.T) {
	m, err := onnx.Load("../testdata/models/cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	var cut string
	for _, n := range g.Nodes {
		if n.OpType == "Flatten" {
			cut = n.Outputs[0].Name
		}
	}
	in, out := g.Inputs[0].Name, g.Outputs[0].Name
	pre, err := g.Subgraph([]string{in}, []string{cut})
	if err != nil {
		t.Fatal(err)
	}
	head, err := g.Subgraph([]string{cut}, []string{out})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		sub      *Graph
		in, out  string
		nodes    int
		initials []string
	}{
		{"prefix", pre, in, cut, 7, []string{"features.0.weight", "features.0.bias", "features.3.weight", "features.3.bias"}},
		{"head", head, cut, out, 3, []string{"classifier.1.weight", "classifier.1.bias", "classifier.3.weight", "classifier.3.bias"}},
	} {
		s := c.sub
		if len(s.Inputs) != 1 || s.Inputs[0].Name != c.in || s.Inputs[0].Producer != nil || len(s.Outputs) != 1 || s.Outputs[0].Name != c.out {
			t.Errorf("%s: %v → %v", c.name, s.Inputs, s.Outputs)
		}
		if len(s.Nodes) != c.nodes {
			t.Errorf("%s: %d nodes, want %d", c.name, len(s.Nodes), c.nodes)
		}
		var names []string
		for _, v := range s.Initializers {
			names = append(names, v.Name)
			if v.Const != g.Values[v.Name].Const {
				t.Errorf("%s: initializer %s is a copy of the model's tensor", c.name, v.Name)
			}
		}
		if strings.Join(names, " ") != strings.Join(c.initials, " ") {
			t.Errorf("%s: initializers %q, want %q", c.name, names, c.initials)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// The model is unchanged: its cut value still has its producer.
	if g.Values[cut].Producer == nil || len(g.Nodes) != 10 {
		t.Errorf("the model changed: %d nodes", len(g.Nodes))
	}
	for _, c := range []struct {
		ins, outs []string
		want      string
	}{
		{[]string{"nope"}, []string{out}, `no value "nope"`},
		{[]string{cut}, []string{"nope"}, `no value "nope"`},
		{[]string{"features.0.weight"}, []string{out}, "is a constant"},
		{[]string{cut, cut}, []string{out}, "given twice"},
		{[]string{cut}, []string{cut, out, pre.Nodes[2].Outputs[0].Name}, "depends on graph input"},
		{nil, []string{out}, "extract"},
	} {
		if _, err := g.Subgraph(c.ins, c.outs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Subgraph(%q, %q): %v; want an error saying %q", c.ins, c.outs, err, c.want)
		}
	}
}
