package runtime

import (
	"math/rand"
	"testing"
)

// walkIsLayout is isLayout by definition: every element of the operand
// lands at its own offset of the target (the walk layoutMap makes).
func walkIsLayout(ls []rune, sh []int, order []rune, size map[rune]int64) bool {
	st := map[rune]int{}
	s := 1
	for i := len(order) - 1; i >= 0; i-- {
		st[order[i]] = s
		s *= int(size[order[i]])
	}
	if numel(sh) != s {
		return false
	}
	ok := true
	forCoords(sh, func(i int, c []int) {
		j := 0
		for a, l := range ls {
			for b := 0; b < a; b++ {
				if ls[b] == l && c[b] != c[a] {
					j = -1 << 40 // off a diagonal: lands nowhere
				}
			}
			if _, in := st[l]; in && (sh[a] != 1 || size[l] == 1) {
				j += c[a] * st[l]
			}
		}
		if j != i {
			ok = false
		}
	})
	return ok
}

// TestIsLayout holds the closed-form layout test (which spares a large
// operand a walk over its elements at compile time: MaxViT's attention
// einsums cost 100 s to plan before it) to the walk, over random labels,
// shapes (unit axes, repeated and summed labels among them) and target
// orders, and layoutMap's nil to both.
func TestIsLayout(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	labels := []rune("abcd")
	agree, inPlaceSeen := 0, 0
	for trial := 0; trial < 4000; trial++ {
		size := map[rune]int64{}
		for _, l := range labels {
			size[l] = int64(1 + rng.Intn(3))
		}
		rank := 1 + rng.Intn(4)
		ls := make([]rune, rank)
		sh := make([]int, rank)
		for a := range ls {
			ls[a] = labels[rng.Intn(len(labels))]
			sh[a] = int(size[ls[a]])
			if rng.Intn(6) == 0 {
				sh[a] = 1 // broadcast against the label's size
			}
		}
		// The target: a random order of a random subset of the labels (the
		// operand's own order included often, so that both answers occur).
		var order []rune
		if rng.Intn(2) == 0 {
			seen := map[rune]bool{}
			for _, l := range ls {
				if !seen[l] {
					seen[l] = true
					order = append(order, l)
				}
			}
		} else {
			for _, i := range rng.Perm(len(labels)) {
				if rng.Intn(3) > 0 {
					order = append(order, labels[i])
				}
			}
		}
		want := walkIsLayout(ls, sh, order, size)
		if got := isLayout(ls, sh, order, size); got != want {
			t.Fatalf("isLayout(%q, %v, %q, %v) = %v, the walk says %v", string(ls), sh, string(order), size, got, want)
		}
		// layoutMap's nil where the target has every label it needs: it
		// is defined for the layouts einsumStep asks of it.
		if m := layoutMap(ls, sh, order, size); (m == nil) != want {
			t.Fatalf("layoutMap(%q, %v, %q, %v) nil %v, the walk says in place %v", string(ls), sh, string(order), size, m == nil, want)
		}
		agree++
		if want {
			inPlaceSeen++
		}
	}
	if inPlaceSeen < 100 || agree-inPlaceSeen < 100 {
		t.Fatalf("%d of %d cases in place: the trials do not exercise both answers", inPlaceSeen, agree)
	}
}

// TestEinsumStepInPlace: attention's two einsums as PyTorch's dynamo
// export writes MaxViT's (windows as a batch axis) are GEMMs over the
// operands as they lie — the keys read transposed — with no map built
// for any operand or the output, at the size of a real model's layer.
func TestEinsumStepInPlace(t *testing.T) {
	const B, G, H, I, D = 8, 64, 2, 49, 32
	for _, c := range []struct {
		eq             string
		la, lb, lo     string
		sa, sb, so     []int
		wantTA, wantTB bool
	}{
		{"scores", "BGHID", "BGHJD", "BGHIJ", []int{B, G, H, I, D}, []int{B, G, H, I, D}, []int{B, G, H, I, I}, false, true},
		{"values", "BGHIJ", "BGHJD", "BGHID", []int{B, G, H, I, I}, []int{B, G, H, I, D}, []int{B, G, H, I, D}, false, false},
		{"transposed queries", "BGHDI", "BGHJD", "BGHIJ", []int{B, G, H, D, I}, []int{B, G, H, I, D}, []int{B, G, H, I, I}, true, true},
	} {
		st, err := newEinsumStep([]rune(c.la), c.sa, []rune(c.lb), c.sb, []rune(c.lo), c.so)
		if err != nil {
			t.Fatalf("%s: %v", c.eq, err)
		}
		if st.mA != nil || st.mB != nil || st.yIdx != nil || st.yMap != nil {
			t.Errorf("%s: maps built (A %v, B %v, output %v): the operands and output are in place", c.eq, st.mA != nil, st.mB != nil, st.yIdx != nil)
		}
		if st.tA != c.wantTA || st.tB != c.wantTB {
			t.Errorf("%s: transposes A %v B %v, want %v %v", c.eq, st.tA, st.tB, c.wantTA, c.wantTB)
		}
		if st.nb != B*G*H || st.M != I || st.K != map[bool]int{true: D, false: I}[c.eq != "values"] {
			t.Errorf("%s: batch %d, M %d, K %d", c.eq, st.nb, st.M, st.K)
		}
	}
	// An output the product does not lie in still gets its map.
	st, err := newEinsumStep([]rune("bhid"), []int{2, 3, 4, 5}, []rune("bhjd"), []int{2, 3, 6, 5}, []rune("bihj"), []int{2, 4, 3, 6})
	if err != nil {
		t.Fatal(err)
	}
	if st.yIdx == nil || st.yMap == nil {
		t.Error("bhid,bhjd->bihj: no output map, but the product is (b,h,i,j)")
	}
}
