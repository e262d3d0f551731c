package rewrite

import (
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// cleanupModel: a Gemm whose bias is an exporter alias (Identity of the
// first layer's bias), a Dropout, an Identity on activations, a dead
// branch, an unused initializer, and an Identity producing the output.
func cleanupModel(t *testing.T, maskUsed bool) *graph.Graph {
	b := newMB().input("x", "N", 4).output("y", "N", 4).
		init("w1", []int64{4, 4}).init("b1", []int64{4}).init("w2", []int64{4, 4}).init("unused", []int64{3}).
		node("Gemm", "fc1", []string{"x", "w1", "b1"}, []string{"h"}, attrInt("transB", 1)).
		node("Identity", "alias", []string{"b1"}, []string{"b2"}).
		node("Dropout", "drop", []string{"h"}, []string{"d", "mask"}).
		node("Identity", "id", []string{"d"}, []string{"di"}).
		node("Gemm", "fc2", []string{"di", "w2", "b2"}, []string{"z"}, attrInt("transB", 1)).
		node("Relu", "dead", []string{"z"}, []string{"unread"}).
		node("Identity", "out", []string{"z"}, []string{"y"})
	if maskUsed {
		b.node("Cast", "m", []string{"mask"}, []string{"mf"}, attrInt("to", 1)).output("mf", "N", 4)
	}
	return b.build(t)
}

func TestCleanup(t *testing.T) {
	g := cleanupModel(t, false)
	x := randInput(2, 4)
	run := func(g *graph.Graph) *tens {
		c := g.Clone()
		if err := c.InferShapes(map[string][]int64{"x": {2, 4}}); err != nil {
			t.Fatal(err)
		}
		return evaluate(t, c, map[string]*tens{"x": x}, nil)["y"]
	}
	want := run(g)
	changes, err := Cleanup(g)
	if err != nil {
		t.Fatal(err)
	}
	var log []string
	for _, c := range changes {
		log = append(log, c.String())
	}
	all := strings.Join(log, "\n")
	for _, s := range []string{"b2: untied from b1", "drop: elided Dropout", "id: elided Identity", "out: kept Identity",
		"dead: removed dead Relu", "unused: removed unused initializer"} {
		if !strings.Contains(all, s) {
			t.Errorf("no change %q in\n%s", s, all)
		}
	}
	ops := opHistogram(g)
	if ops != "Gemm×02 Identity×01" {
		t.Errorf("operators after cleanup: %s", ops)
	}
	b2 := g.Values["b2"]
	if b2 == nil || !b2.Initializer || b2.Const == g.Values["b1"].Const {
		t.Error("b2 is not an initializer of its own")
	}
	if d := run(roundTrip(t, g)).maxAbsDiff(want); d != 0 {
		t.Errorf("cleanup changed the output by %g", d)
	}
	// The untied biases are two parameters now.
	p, err := Analyze(g, PlanOptions{InputShape: []int64{4}, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if p.Param("b1").Shared || p.Param("b2") == nil || p.Trainable.Tensors != 4 {
		t.Errorf("after untying: %+v", p.Trainable)
	}

	// A Dropout whose mask is read stays.
	g = cleanupModel(t, true)
	changes, err = Cleanup(g)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range changes {
		found = found || (c.Target == "drop" && c.Action == "kept Dropout")
	}
	if !found {
		t.Errorf("Dropout with a used mask: %v", changes)
	}
}

// TestCleanupFixtures: cleanup changes nothing on the fixtures but BEiT's
// index alias (an int64 buffer, elided rather than untied).
func TestCleanupFixtures(t *testing.T) {
	for _, name := range fixtureNames(t) {
		g := loadFixture(t, name)
		changes, err := Cleanup(g)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if name == "beit" {
			want = 1
		}
		if len(changes) != want {
			t.Errorf("%s: %v", name, changes)
		}
	}
}
