package rewrite

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestReleaseBatch: a model exported with a fixed batch gets a dynamic
// batch axis, and the constants that held the batch are repaired so that
// shapes fit at any batch size with the samples apart; where the samples
// interact, it says so.
func TestReleaseBatch(t *testing.T) {
	gemm := func(b *mb, x string) *mb {
		return b.init("w", []int64{3, 6}).node("Gemm", "fc", []string{x, "w"}, []string{"y"}, attrInt("transB", 1))
	}
	cases := []struct {
		name    string
		b       *mb
		fixed   int64
		changes []string // each change's action, in order
		out     []int64  // the output's shape at a batch of 5
		err     string
	}{
		{"dynamic already", newMB().input("x", "N", 6).output("y", "N", 3).init("w", []int64{3, 6}).
			node("Gemm", "fc", []string{"x", "w"}, []string{"y"}, attrInt("transB", 1)), 0, nil, []int64{5, 3}, ""},
		{"declared only", newMB().input("x", 1, 6).output("y", 1, 3).init("w", []int64{3, 6}).
			node("Gemm", "fc", []string{"x", "w"}, []string{"y"}, attrInt("transB", 1)), 1, nil, []int64{5, 3}, ""},
		{"reshape target", gemm(newMB().input("x", 1, 2, 3).output("y", 1, 3).ints("t", 1, 6).
			node("Reshape", "flat", []string{"x", "t"}, []string{"f"}), "f"), 1,
			[]string{"target [1 6] held the batch of 1 on axis 0: now [-1 6]"}, []int64{5, 3}, ""},
		{"reshape target with -1", gemm(newMB().input("x", 1, 2, 3).output("y", 1, 3).ints("t", 1, -1).
			node("Reshape", "flat", []string{"x", "t"}, []string{"f"}), "f"), 1,
			[]string{"target [1 6] held the batch of 1 on axis 0: now [-1 6]"}, []int64{5, 3}, ""},
		{"fixed batch of 2", gemm(newMB().input("x", 2, 2, 3).output("y", 2, 3).ints("t", 2, 6).
			node("Reshape", "flat", []string{"x", "t"}, []string{"f"}), "f"), 2,
			[]string{"target [2 6] held the batch of 2 on axis 0: now [-1 6]"}, []int64{5, 3}, ""},
		// (1, T, D) → (T, 1, D) → (T, B·H, d): at a batch of 1 the tokens'
		// axis could hold the sample as well; taking it makes the heads'
		// product pair rows of one sample with columns of another, so the
		// search goes back to the heads' axis.
		{"attention heads", newMB().input("x", 1, 3, 4).output("y", 1, 2, 3, 3).ints("t", 3, 2, 2).ints("t2", 1, 2, 3, 3).
			node("Transpose", "tokens", []string{"x"}, []string{"xt"}, attrInts("perm", 1, 0, 2)).
			node("Reshape", "heads", []string{"xt", "t"}, []string{"h"}).
			node("Transpose", "bh", []string{"h"}, []string{"q"}, attrInts("perm", 1, 0, 2)).
			node("Transpose", "kt", []string{"q"}, []string{"k"}, attrInts("perm", 0, 2, 1)).
			node("MatMul", "scores", []string{"q", "k"}, []string{"s"}).
			node("Reshape", "out", []string{"s", "t2"}, []string{"y"}), 1,
			[]string{"target [3 2 2] held the batch of 1 on axis 1: now [3 -1 2]", "target [1 2 3 3] held the batch of 1 on axis 0: now [-1 2 3 3]"},
			[]int64{5, 2, 3, 3}, ""},
		{"class token", newMB().input("x", 1, 3, 4).output("y", 1, 4, 4).init("cls", []int64{1, 1, 4}).
			node("Concat", "cat", []string{"cls", "x"}, []string{"y"}, attrInt("axis", 1)), 1,
			[]string{"operand 0 (cls) holds one sample's constant: expanded over the batch"}, []int64{5, 4, 4}, ""},
		{"class token expanded to a fixed batch of 2", newMB().input("x", 2, 3, 4).output("y", 2, 4, 4).init("cls", []int64{1, 1, 4}).ints("to", 2, 1, 4).
			node("Expand", "spread", []string{"cls", "to"}, []string{"clsb"}).
			node("Concat", "cat", []string{"clsb", "x"}, []string{"y"}, attrInt("axis", 1)), 2,
			[]string{"operand 0 (clsb) holds one constant expanded to the 2 samples: expanded over the batch"}, []int64{5, 4, 4}, ""},
		{"position embedding expanded to a fixed batch of 2", newMB().input("x", 2, 3, 4).output("y", 2, 3, 4).init("pos", []int64{1, 3, 4}).ints("to", 2, 3, 4).
			node("Expand", "spread", []string{"pos", "to"}, []string{"posb"}).
			node("Add", "add", []string{"x", "posb"}, []string{"y"}), 2,
			[]string{"operand 1 (posb) holds one constant expanded to the 2 samples: expanded over the batch"}, []int64{5, 3, 4}, ""},
		{"batch mean", newMB().input("x", 1, 6).output("y", 1, 6).
			node("ReduceMean", "mean", []string{"x"}, []string{"m"}, attrInts("axes", 0), attrInt("keepdims", 1)).
			node("Sub", "centre", []string{"x", "m"}, []string{"y"}), 1, nil, nil, "reduces over the batch axis 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.b.build(t)
			fixed, changes, err := ReleaseBatch(g)
			if fixed != c.fixed || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
				t.Fatalf("fixed %d, error %v; want %d, %q", fixed, err, c.fixed, c.err)
			}
			if err != nil {
				return
			}
			var got []string
			for _, ch := range changes {
				got = append(got, ch.Action)
			}
			if !slices.Equal(got, c.changes) {
				t.Errorf("changes %q, want %q", got, c.changes)
			}
			if d := g.Inputs[0].Shape[0]; d.Size >= 0 {
				t.Errorf("input batch axis %v still fixed", d)
			}
			if d := g.Outputs[0].Shape[0]; d.Size >= 0 {
				t.Errorf("output batch axis %v still fixed", d)
			}
			for _, batch := range []int64{1, 5} {
				ic, err := inferredClone(g, g.Inputs[0].Shape[1:].Ints(), batch)
				if err != nil {
					t.Fatalf("at a batch of %d: %v", batch, err)
				}
				li := analyzeLayout(ic, max(batch, 2))
				want := slices.Clone(c.out)
				want[0] = batch
				if got := ic.Outputs[0].Shape.Ints(); !slices.Equal(got, want) || batch > 1 && len(li.problems) > 0 {
					t.Errorf("at a batch of %d: output %v, want %v; problems %q", batch, got, want, li.problems)
				}
			}
			if c.fixed > 0 {
				if err := g.Validate(); err != nil {
					t.Error(err)
				}
				for _, v := range g.Values {
					if v.Producer != nil && v.Producer.OpType == "Constant" && len(v.Consumers) == 0 {
						t.Errorf("left the unread constant %s", v.Name)
					}
				}
			}
		})
	}
}

// TestReleaseBatchGivesUp: the search is bounded (releaseTries), and says
// where it stopped: ten Reshapes of (B, 6) to (1, 6) at a fixed batch of 1,
// each of which could hold the sample on either axis, before a mean over
// the batch that no choice repairs, would take 2¹⁰ tries.
func TestReleaseBatchGivesUp(t *testing.T) {
	b := newMB().input("x", 1, 6).output("y", 1, 6)
	x := "x"
	for i := range 10 {
		name := fmt.Sprintf("t%d", i)
		b.ints(name, 1, 6).node("Reshape", "r"+name, []string{x, name}, []string{"v" + name})
		x = "v" + name
	}
	b.node("ReduceMean", "mean", []string{x}, []string{"m"}, attrInts("axes", 0), attrInt("keepdims", 1)).
		node("Sub", "centre", []string{x, "m"}, []string{"y"})
	g := b.build(t)
	_, _, err := ReleaseBatch(g)
	want := fmt.Sprintf("gave up after %d tries", releaseTries(g))
	if err == nil || !strings.Contains(err.Error(), "at a batch of 2") || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestReleaseTries: four tries a Reshape or Concat and 16 more, within
// maxReleaseWork node inferences in all.
func TestReleaseTries(t *testing.T) {
	for _, n := range []int{0, 10, 1500, 4000} {
		b := newMB().input("x", 1, 6).output("y", 1, 6).ints("t", 1, 6)
		x := "x"
		for i := range n {
			y := fmt.Sprintf("v%d", i)
			b.node("Reshape", "r"+y, []string{x, "t"}, []string{y})
			x = y
		}
		b.node("Identity", "out", []string{x}, []string{"y"})
		g := b.build(t)
		got := releaseTries(g)
		want := min(4*n+16, maxReleaseWork/(n+1))
		if got != want || got*len(g.Nodes) > maxReleaseWork+len(g.Nodes) {
			t.Errorf("%d Reshapes: %d tries, want %d", n, got, want)
		}
	}
}
