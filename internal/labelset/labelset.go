package labelset

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"
)

// Bits is the most labels a set holds in its label itself: bits 0 to
// Bits−1 of a non-negative int64 (1<<Bits still fits).
const Bits = 62

// Max is the most labels a multi-label head or dataset may have.
const Max = 1 << 14

// Words returns the 64-bit words a set of k labels spans, ⌈k/64⌉: the loss
// head's labels buffer holds this many a sample.
func Words(k int) int { return (k + 63) / 64 }

// interned is a table of word slices: a handle is its index in sets.
type interned struct {
	sync.RWMutex
	sets  [][]uint64
	index map[string]int64 // by the words' bytes
}

// table interns the sets wider than Bits; partial the partial sets of
// every width (their words, then their ignored labels' words).
var table, partial interned

// add returns the handle of words in t, interning a copy where it is new.
func (t *interned) add(words []uint64) int64 {
	key := wordsKey(words)
	t.RLock()
	h, ok := t.index[key]
	t.RUnlock()
	if ok {
		return h
	}
	t.Lock()
	defer t.Unlock()
	if h, ok := t.index[key]; ok {
		return h
	}
	if t.index == nil {
		t.index = map[string]int64{}
	}
	h = int64(len(t.sets))
	t.sets = append(t.sets, slices.Clone(words))
	t.index[key] = h
	return h
}

// get returns the words of handle h, or false where h is none of t's.
func (t *interned) get(h int64) ([]uint64, bool) {
	t.RLock()
	defer t.RUnlock()
	if h < 0 || h >= int64(len(t.sets)) {
		return nil, false
	}
	return t.sets[h], true
}

// Intern returns the handle of the set whose words are words (bit j%64 of
// word j/64 for label j), interning a copy of them where it is new.
// Trailing zero words are not part of a set: the same labels give the same
// handle whatever the word count.
func Intern(words []uint64) int64 {
	n := len(words)
	for n > 0 && words[n-1] == 0 {
		n--
	}
	return table.add(words[:n])
}

func wordsKey(words []uint64) string {
	b := make([]byte, 0, 8*len(words))
	for _, w := range words {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return string(b)
}

// Of returns the label of the set of k labels in which the labels on
// apply: the bits themselves where k ≤ Bits, else an interned handle.
// Every index must lie in [0, k).
func Of(k int, on []int) (int64, error) { return OfIgnoring(k, on, nil) }

// OfIgnoring returns the label of the set of k labels in which the labels
// on apply and the labels ignored are left out — not known, their loss
// terms not counted (CheXpert's uncertain labels under U-Ignore): Of's
// label where ignored is empty, else a partial set's (Partial). A label
// both on and ignored is an error.
func OfIgnoring(k int, on, ignored []int) (int64, error) {
	if err := checkShape(k, Words(k)); err != nil {
		return 0, err
	}
	words, ign := make([]uint64, Words(k)), make([]uint64, Words(k))
	for i, set := range [][]int{on, ignored} {
		w := [][]uint64{words, ign}[i]
		for _, j := range set {
			if j < 0 || j >= k {
				return 0, fmt.Errorf("labelset: label %d of a set of %d labels", j, k)
			}
			w[j/64] |= 1 << uint(j%64)
		}
	}
	return FromWordsIgnoring(k, words, ign)
}

// FromWords returns the label of the set of k labels whose words are
// words (Words(k) of them, no bit at or past k): the bits where k ≤ Bits,
// else an interned handle.
func FromWords(k int, words []uint64) (int64, error) { return FromWordsIgnoring(k, words, nil) }

// FromWordsIgnoring is FromWords for the set whose ignored labels' words
// are ign (Words(k) of them, or nil for none): FromWords's label where no
// label is ignored, else a partial set's, −1 − its handle among the
// partial sets. A label both set and ignored is an error.
func FromWordsIgnoring(k int, words, ign []uint64) (int64, error) {
	if err := checkWords(k, words); err != nil {
		return 0, err
	}
	if ign != nil && slices.ContainsFunc(ign, func(w uint64) bool { return w != 0 }) {
		if err := checkWords(k, ign); err != nil {
			return 0, fmt.Errorf("%w (the ignored labels)", err)
		}
		for i, w := range ign {
			if w&words[i] != 0 {
				j := i*64 + bits.TrailingZeros64(w&words[i])
				return 0, fmt.Errorf("labelset: label %d both applies and is ignored", j)
			}
		}
		return -1 - partial.add(slices.Concat(words, ign)), nil
	}
	if k <= Bits {
		return int64(words[0]), nil
	}
	return Intern(words), nil
}

// Partial reports whether label is a partial set's, one that ignores some
// of its labels (OfIgnoring): a negative label.
func Partial(label int64) bool { return label < 0 }

// checkShape refuses a count of labels outside [1, Max] and n words that
// are not a set of k labels' Words(k).
func checkShape(k, n int) error {
	if k < 1 || k > Max {
		return fmt.Errorf("labelset: %d labels; want 1 to %d", k, Max)
	}
	if n != Words(k) {
		return fmt.Errorf("labelset: %d words for a set of %d labels; want %d", n, k, Words(k))
	}
	return nil
}

// checkWords is checkShape, and no bit at or past label k.
func checkWords(k int, words []uint64) error {
	if err := checkShape(k, len(words)); err != nil {
		return err
	}
	if r := k % 64; r != 0 && words[len(words)-1]>>uint(r) != 0 {
		return fmt.Errorf("labelset: a set of %d labels has bits at or past label %d", k, k)
	}
	return nil
}

// Expand writes the words of the set of k labels that label is into dst
// (Words(k) of them) — of a partial set, the labels that apply among
// those it does not ignore —: an error where label is not a set of k
// labels — bits at or past k, or an unknown handle.
func Expand(label int64, k int, dst []uint64) error {
	return expand(label, k, dst, false)
}

// Ignored writes into dst (Words(k) of them) the words of the labels that
// label, a set of k labels, ignores: all zero but for a partial set's.
// Its errors are Expand's.
func Ignored(label int64, k int, dst []uint64) error {
	return expand(label, k, dst, true)
}

// expand is Expand, or Ignored where ignored.
func expand(label int64, k int, dst []uint64, ignored bool) error {
	if err := checkShape(k, len(dst)); err != nil {
		return err
	}
	if Partial(label) {
		w, ok := partial.get(-1 - label)
		if !ok {
			return fmt.Errorf("labelset: %d is no partial set", label)
		}
		if len(w) != 2*len(dst) {
			return fmt.Errorf("labelset: partial set %d is a set of %d words, not of %d labels", label, len(w)/2, k)
		}
		if ignored {
			w = w[len(dst):]
		}
		copy(dst, w[:len(dst)])
		return checkWords(k, dst)
	}
	if ignored {
		clear(dst)
	}
	if k <= Bits {
		if label >= 1<<uint(k) {
			return fmt.Errorf("labelset: label set %#x has bits beyond its %d labels", label, k)
		}
		if !ignored {
			dst[0] = uint64(label)
		}
		return nil
	}
	w, ok := table.get(label)
	switch {
	case !ok:
		return fmt.Errorf("labelset: %d is no interned set of %d labels", label, k)
	case len(w) > len(dst):
		return fmt.Errorf("labelset: set %d has labels beyond its %d", label, k)
	case ignored:
		return nil
	}
	clear(dst)
	copy(dst, w)
	return checkWords(k, dst)
}

// Has reports whether label j applies in words (a set's words).
func Has(words []uint64, j int) bool { return words[j/64]>>uint(j%64)&1 == 1 }

// Compare orders two sets of k labels as the numbers their bits write
// (the set of label 0 alone before that of label 1 alone), then as the
// numbers their ignored labels write (a full set before the partial sets
// of its labels): −1, 0 or +1. Labels that are not sets of k labels order
// as what Expand and Ignored left of them.
func Compare(a, b int64, k int) int {
	if k <= Bits && !Partial(a) && !Partial(b) {
		return cmp.Compare(a, b)
	}
	n := Words(k)
	w := make([]uint64, 4*n)
	sa, sb, ia, ib := w[:n], w[n:2*n], w[2*n:3*n], w[3*n:]
	Expand(a, k, sa)
	Expand(b, k, sb)
	Ignored(a, k, ia)
	Ignored(b, k, ib)
	if c := compareWords(sa, sb); c != 0 {
		return c
	}
	return compareWords(ia, ib)
}

// compareWords orders two sets' words as the numbers they write.
func compareWords(a, b []uint64) int {
	for i := len(a) - 1; i >= 0; i-- {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}
