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
		{Expand(-1<<40, 80, make([]uint64, 2)), "no partial set"},
		{Expand(1<<40, 80, make([]uint64, 2)), "no interned set"},
		{Expand(c, 70, make([]uint64, 2)), "bits at or past label 70"},
		{Expand(c, 80, make([]uint64, 1)), "1 words for a set of 80"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one with %q", tc.err, tc.want)
		}
	}
}

// TestPartialSets: a set that ignores labels is a negative label, the
// same for the same labels and ignored labels, expanding to the labels
// that apply and, through Ignored, those it ignores; a full set ignores
// none; a label both set and ignored, or ignored past k, is an error;
// sets order by their labels, then by their ignored labels.
func TestPartialSets(t *testing.T) {
	for _, tc := range []struct {
		k           int
		on, ignored []int
	}{{1, nil, []int{0}}, {13, []int{0, 5}, []int{12, 1}}, {Bits, nil, []int{Bits - 1}}, {80, []int{79}, []int{0, 64}},
		{600, []int{1, 599}, []int{300, 2}}, {13, []int{3}, nil}, {80, []int{70}, nil}} {
		name := fmt.Sprintf("%d labels %v, %v ignored", tc.k, tc.on, tc.ignored)
		l, err := OfIgnoring(tc.k, tc.on, tc.ignored)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if Partial(l) != (len(tc.ignored) > 0) {
			t.Errorf("%s: label %d partial: %v", name, l, Partial(l))
		}
		if full, _ := Of(tc.k, tc.on); len(tc.ignored) == 0 && full != l {
			t.Errorf("%s: %d, want Of's %d", name, l, full)
		}
		if again, _ := OfIgnoring(tc.k, slices.Clone(tc.on), slices.Clone(tc.ignored)); again != l {
			t.Errorf("%s: %d then %d", name, l, again)
		}
		w, ign := make([]uint64, Words(tc.k)), make([]uint64, Words(tc.k))
		for i := range ign {
			ign[i] = ^uint64(0) // Ignored must write every word
		}
		if err := Expand(l, tc.k, w); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := Ignored(l, tc.k, ign); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for j := range tc.k {
			if Has(w, j) != slices.Contains(tc.on, j) || Has(ign, j) != slices.Contains(tc.ignored, j) {
				t.Errorf("%s: label %d applies %v, ignored %v", name, j, Has(w, j), Has(ign, j))
			}
		}
		if back, err := FromWordsIgnoring(tc.k, w, ign); err != nil || back != l {
			t.Errorf("%s: FromWordsIgnoring gives %d (%v), want %d", name, back, err, l)
		}
	}
	full, _ := Of(13, []int{3})
	part, _ := OfIgnoring(13, []int{3}, []int{4})
	more, _ := OfIgnoring(13, []int{3}, []int{5})
	next, _ := Of(13, []int{0, 3})
	if Compare(full, part, 13) != -1 || Compare(part, more, 13) != -1 || Compare(more, next, 13) != -1 || Compare(next, part, 13) != 1 || Compare(part, part, 13) != 0 {
		t.Errorf("order: %d %d %d %d", Compare(full, part, 13), Compare(part, more, 13), Compare(more, next, 13), Compare(next, part, 13))
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := OfIgnoring(13, []int{2}, []int{2}); return err }(), "label 2 both applies and is ignored"},
		{func() error { _, err := OfIgnoring(80, []int{70}, []int{1, 70}); return err }(), "label 70 both applies and is ignored"},
		{func() error { _, err := OfIgnoring(13, nil, []int{13}); return err }(), "label 13 of a set of 13"},
		{func() error { _, err := FromWordsIgnoring(70, []uint64{0, 0}, []uint64{0, 1 << 6}); return err }(), "past label 70 (the ignored labels)"},
		{Expand(part, 80, make([]uint64, 2)), "a set of 1 words, not of 80 labels"},
		{Ignored(func() int64 { l, _ := OfIgnoring(13, nil, []int{12}); return l }(), 10, make([]uint64, 1)), "bits at or past label 10"},
		{Ignored(1<<13, 13, make([]uint64, 1)), "bits beyond its 13 labels"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one with %q", tc.err, tc.want)
		}
	}
}
