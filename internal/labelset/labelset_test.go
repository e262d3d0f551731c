package labelset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestLabels: a set of at most Bits labels is its own bits; a wider one
// an interned handle, the same for the same labels, expanding to its
// words; bad sets and labels are errors.
func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		k  int
		on []int
	}{{1, nil}, {1, []int{0}}, {13, []int{0, 5, 12}}, {Bits, []int{0, Bits - 1}}, {63, []int{62}}, {64, []int{63, 0}},
		{80, nil}, {80, []int{79}}, {80, []int{0, 63, 64, 79}}, {600, []int{1, 599, 300}}, {Max, []int{Max - 1}}} {
		name := fmt.Sprintf("%d labels %v", tc.k, tc.on)
		l, err := Of(tc.k, tc.on)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tc.k <= Bits {
			var want int64
			for _, j := range tc.on {
				want |= 1 << j
			}
			if l != want {
				t.Errorf("%s: label %#x, want the bits %#x", name, l, want)
			}
		}
		again, _ := Of(tc.k, slices.Clone(tc.on))
		if again != l {
			t.Errorf("%s: %d then %d for the same set", name, l, again)
		}
		w := make([]uint64, Words(tc.k))
		if err := Expand(l, tc.k, w); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for j := range tc.k {
			if Has(w, j) != slices.Contains(tc.on, j) {
				t.Errorf("%s: label %d applies: %v", name, j, Has(w, j))
			}
		}
		if back, err := FromWords(tc.k, w); err != nil || back != l {
			t.Errorf("%s: FromWords gives %d (%v), want %d", name, back, err, l)
		}
	}
	a, _ := Of(80, []int{3})
	b, _ := Of(80, []int{70})
	c, _ := Of(80, []int{3, 70})
	if a == b || a == c || Compare(a, b, 80) != -1 || Compare(c, b, 80) != 1 || Compare(b, b, 80) != 0 {
		t.Errorf("handles %d %d %d, order %d %d", a, b, c, Compare(a, b, 80), Compare(c, b, 80))
	}
	if Compare(1, 2, 10) != -1 || Compare(4, 2, 10) != 1 {
		t.Error("narrow sets order as their bits")
	}
	// The same labels, interned from fewer or more words: one handle.
	if Intern([]uint64{8, 0, 0}) != Intern([]uint64{8}) {
		t.Error("trailing zero words make another set")
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := Of(0, nil); return err }(), "0 labels"},
		{func() error { _, err := Of(Max+1, nil); return err }(), "want 1 to"},
		{func() error { _, err := Of(80, []int{80}); return err }(), "label 80 of a set of 80"},
		{func() error { _, err := FromWords(70, []uint64{0, 1 << 6}); return err }(), "bits at or past label 70"},
		{func() error { _, err := FromWords(70, []uint64{0}); return err }(), "1 words for a set of 70"},
		{Expand(1<<13, 13, make([]uint64, 1)), "bits beyond its 13 labels"},
		{Expand(-1, 80, make([]uint64, 2)), "not a set"},
		{Expand(1<<40, 80, make([]uint64, 2)), "no interned set"},
		{Expand(c, 70, make([]uint64, 2)), "bits at or past label 70"},
		{Expand(c, 80, make([]uint64, 1)), "1 words for a set of 80"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one with %q", tc.err, tc.want)
		}
	}
}
