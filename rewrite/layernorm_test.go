package rewrite

import (
	"fmt"
	"sort"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// lnModel is x (N,3,4) → a LayerNorm over the last axis decomposed as
// torch exports it before opset 17, with the variations FuseLayerNorm
// takes (and some it must not): y is the model's output.
func lnModel(t *testing.T, variant string) *graph.Graph {
	dims := []any{"N", 3, 4}
	if variant == "rank 2" { // after pooling: (N, D)
		dims = []any{"N", 4}
	}
	b := newMB().input("x", dims...).output("y", dims...).
		init("ln.weight", []int64{4}, 0.5, 1.5, -1, 2).init("ln.bias", []int64{4}, 0.1, -0.2, 0.3, 0).
		node("Constant", "/ln/Constant_1", nil, []string{"eps"}, attrTensor("value", floatTensor(graph.Float32, nil, []float64{1e-5})))
	mean := func(name, in, out string) {
		switch {
		case variant == "opset 18":
			b.node("ReduceMean", name, []string{in, "axes"}, []string{out})
		case variant == "other axis":
			b.node("ReduceMean", name, []string{in}, []string{out}, attrInts("axes", 1))
		default:
			b.node("ReduceMean", name, []string{in}, []string{out}, attrInts("axes", -1))
		}
	}
	if variant == "opset 18" {
		b.opset = 18
		b.node("Constant", "/ln/Constant_2", nil, []string{"axes"}, attrTensor("value", int64Tensor([]int64{1}, -1)))
	}
	mean("/ln/ReduceMean", "x", "m")
	b.node("Sub", "/ln/Sub", []string{"x", "m"}, []string{"d"})
	if variant == "square by Mul" {
		b.node("Mul", "/ln/Mul_sq", []string{"d", "d"}, []string{"sq"})
	} else {
		b.node("Constant", "/ln/Constant", nil, []string{"two"}, attrTensor("value", floatTensor(graph.Float32, nil, []float64{2}))).
			node("Pow", "/ln/Pow", []string{"d", "two"}, []string{"sq"})
	}
	mean("/ln/ReduceMean_1", "sq", "v")
	b.node("Add", "/ln/Add", []string{"v", "eps"}, []string{"ve"}).
		node("Sqrt", "/ln/Sqrt", []string{"ve"}, []string{"sd"}).
		node("Div", "/ln/Div", []string{"d", "sd"}, []string{"n"})
	switch variant {
	case "no affine":
		b.node("Identity", "/ln/Identity", []string{"n"}, []string{"y"})
	case "no shift":
		b.node("Mul", "/ln/Mul", []string{"n", "ln.weight"}, []string{"y"})
	case "swapped":
		b.node("Mul", "/ln/Mul", []string{"ln.weight", "n"}, []string{"nm"}).
			node("Add", "/ln/Add_1", []string{"ln.bias", "nm"}, []string{"y"})
	default:
		b.node("Mul", "/ln/Mul", []string{"n", "ln.weight"}, []string{"nm"}).
			node("Add", "/ln/Add_1", []string{"nm", "ln.bias"}, []string{"y"})
	}
	if variant == "observed" { // an intermediate value is an output too
		b.output("d", "N", 3, 4)
	}
	return b.build(t)
}

// TestFuseLayerNorm: each decomposed LayerNorm FuseLayerNorm takes becomes
// one LayerNormalization node computing the same (the float64 reference
// evaluator, within rounding), and ExportGraph writes back the exporter's
// decomposition, node for node and name for name, where the opset has no
// LayerNormalization (at 18 the node stays); the chains it must not take
// stay as they are.
func TestFuseLayerNorm(t *testing.T) {
	x := randInput(2, 2, 3, 4)
	var sample []int64 // the current case's
	run := func(g *graph.Graph) map[string]*tens {
		c := roundTrip(t, g).Clone()
		full := append([]int64{2}, sample...)
		if err := c.InferShapes(map[string][]int64{"x": full}); err != nil {
			t.Fatal(err)
		}
		shape := make([]int, len(full))
		n := 1
		for i, d := range full {
			shape[i], n = int(d), n*int(d)
		}
		return evaluate(t, c, map[string]*tens{"x": {shape: shape, d: x.d[:n]}}, nil)
	}
	nodes := func(g *graph.Graph) string {
		var s []string
		for _, n := range g.Nodes {
			s = append(s, n.OpType+" "+n.Name)
		}
		sort.Strings(s)
		return fmt.Sprint(s)
	}
	for _, c := range []struct {
		variant string
		fused   bool
	}{
		{"torch", true}, {"swapped", true}, {"square by Mul", true}, {"no shift", true}, {"opset 18", true}, {"rank 2", true},
		{"no affine", false}, {"observed", false}, {"other axis", false},
	} {
		t.Run(c.variant, func(t *testing.T) {
			sample = []int64{3, 4}
			if c.variant == "rank 2" {
				sample = []int64{4}
			}
			orig := lnModel(t, c.variant)
			g := lnModel(t, c.variant)
			shapes, err := StaticShapes(g, sample, 2)
			if err != nil {
				t.Fatal(err)
			}
			changes, err := FuseLayerNorm(g, shapes)
			if err != nil {
				t.Fatal(err)
			}
			var ln []*graph.Node
			for _, n := range g.Nodes {
				if n.OpType == "LayerNormalization" {
					ln = append(ln, n)
				}
			}
			if !c.fused {
				if len(changes) != 0 || len(ln) != 0 || nodes(g) != nodes(orig) {
					t.Fatalf("fused %d: %v", len(ln), changes)
				}
				return
			}
			want := run(orig)
			if len(ln) != 1 || len(changes) != 1 || len(g.Nodes) != 1 {
				t.Fatalf("%d LayerNormalization nodes of %d, changes %v", len(ln), len(g.Nodes), changes)
			}
			if n := ln[0]; n.Name != "/ln/LayerNormalization" || n.Inputs[1].Name != "ln.weight" || (c.variant == "no shift") != (n.Input(2) == nil) {
				t.Errorf("node %s reads %v", n.Name, n.Inputs)
			}
			got := run(g)
			for name, w := range want {
				if d := got[name].maxAbsDiff(w); d > 1e-6*w.maxAbs() {
					t.Errorf("%s: fused differs from the decomposition by %g", name, d)
				}
			}
			// Before opset 17 the export is the exporter's decomposition
			// (the square as Pow); from 17 on, the node.
			e := exported(t, g)
			switch exp := nodes(orig); c.variant {
			case "opset 18":
				exp = nodes(g)
				fallthrough
			case "torch", "swapped", "no shift", "rank 2":
				if nodes(e) != exp {
					t.Errorf("export:\n%s\nwant\n%s", nodes(e), exp)
				}
			}
			if len(g.Nodes) != 1 {
				t.Error("the export changed the training graph")
			}
			for name, w := range want {
				if d := run(e)[name].maxAbsDiff(w); d > 1e-12*w.maxAbs() {
					t.Errorf("%s: the export differs from the model by %g", name, d)
				}
			}
		})
	}
}

// TestFuseLayerNormFixtures: Prepare trains every decomposed LayerNorm of
// the transformer fixtures as one node (two per block and the last), γ and
// β normalization parameters, and the export gives back the model's own
// nodes; a model's own LayerNormalization (opset 17) stays as it is.
func TestFuseLayerNormFixtures(t *testing.T) {
	for _, c := range []struct {
		name string
		want int
	}{{"vit", 5}, {"vit_nofold", 5}, {"beit", 5}, {"crossvit", 12}, {"vit17", 5}} {
		t.Run(c.name, func(t *testing.T) {
			orig := loadFixture(t, c.name)
			g := loadFixture(t, c.name)
			p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: fixtureSample(c.name), Batch: 2}})
			if err != nil {
				t.Fatal(err)
			}
			kind := map[string]Kind{}
			for _, prm := range p.Params {
				kind[prm.Name] = prm.Kind
			}
			ln, fused := 0, 0
			for _, n := range g.Nodes {
				if n.OpType == "LayerNormalization" {
					ln++
					for _, v := range n.Inputs[1:] {
						if v != nil && kind[v.Name] != KindElementwise {
							t.Errorf("%s: %s is %q", n.Name, v.Name, kind[v.Name])
						}
					}
				}
			}
			for _, ch := range p.Changes {
				if ch.Pass == "layernorm" {
					fused++
				}
			}
			if ln != c.want || (c.name == "vit17") != (fused == 0) {
				t.Errorf("%d LayerNormalization nodes (want %d), %d fused", ln, c.want, fused)
			}
			e := exported(t, g)
			count := func(g *graph.Graph, op string) int {
				k := 0
				for _, n := range g.Nodes {
					if n.OpType == op {
						k++
					}
				}
				return k
			}
			for _, op := range []string{"LayerNormalization", "ReduceMean", "Sqrt", "Pow"} {
				if a, b := count(e, op), count(orig, op); a != b {
					t.Errorf("the export has %d %s, the model %d", a, op, b)
				}
			}
		})
	}
}
