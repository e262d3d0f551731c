package labelset

import (
	"encoding/binary"
	"fmt"
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

// table interns the sets wider than Bits: a handle is its index in sets.
var table struct {
	sync.RWMutex
	sets  [][]uint64
	index map[string]int64 // by the words' bytes
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
	words = words[:n]
	key := wordsKey(words)
	table.RLock()
	h, ok := table.index[key]
	table.RUnlock()
	if ok {
		return h
	}
	table.Lock()
	defer table.Unlock()
	if h, ok := table.index[key]; ok {
		return h
	}
	if table.index == nil {
		table.index = map[string]int64{}
	}
	h = int64(len(table.sets))
	table.sets = append(table.sets, slices.Clone(words))
	table.index[key] = h
	return h
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
func Of(k int, on []int) (int64, error) {
	if err := checkShape(k, Words(k)); err != nil {
		return 0, err
	}
	words := make([]uint64, Words(k))
	for _, j := range on {
		if j < 0 || j >= k {
			return 0, fmt.Errorf("labelset: label %d of a set of %d labels", j, k)
		}
		words[j/64] |= 1 << uint(j%64)
	}
	return FromWords(k, words)
}

// FromWords returns the label of the set of k labels whose words are
// words (Words(k) of them, no bit at or past k): the bits where k ≤ Bits,
// else an interned handle.
func FromWords(k int, words []uint64) (int64, error) {
	if err := checkWords(k, words); err != nil {
		return 0, err
	}
	if k <= Bits {
		return int64(words[0]), nil
	}
	return Intern(words), nil
}

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
// (Words(k) of them): an error where label is not a set of k labels — a
// negative label, bits at or past k, or an unknown handle.
func Expand(label int64, k int, dst []uint64) error {
	if err := checkShape(k, len(dst)); err != nil {
		return err
	}
	if label < 0 {
		return fmt.Errorf("labelset: label %d is not a set", label)
	}
	if k <= Bits {
		if label >= 1<<uint(k) {
			return fmt.Errorf("labelset: label set %#x has bits beyond its %d labels", label, k)
		}
		dst[0] = uint64(label)
		return nil
	}
	table.RLock()
	ok := label < int64(len(table.sets))
	var w []uint64
	if ok {
		w = table.sets[label]
	}
	table.RUnlock()
	switch {
	case !ok:
		return fmt.Errorf("labelset: %d is no interned set of %d labels", label, k)
	case len(w) > len(dst):
		return fmt.Errorf("labelset: set %d has labels beyond its %d", label, k)
	}
	clear(dst)
	copy(dst, w)
	return checkWords(k, dst)
}

// Has reports whether label j applies in words (a set's words).
func Has(words []uint64, j int) bool { return words[j/64]>>uint(j%64)&1 == 1 }

// Compare orders two sets of k labels as the numbers their bits write
// (the set of label 0 alone before that of label 1 alone): −1, 0 or +1.
// Labels that are not sets of k labels order as what Expand left of them.
func Compare(a, b int64, k int) int {
	if k <= Bits {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	wa, wb := make([]uint64, Words(k)), make([]uint64, Words(k))
	Expand(a, k, wa)
	Expand(b, k, wb)
	for i := len(wa) - 1; i >= 0; i-- {
		switch {
		case wa[i] < wb[i]:
			return -1
		case wa[i] > wb[i]:
			return 1
		}
	}
	return 0
}
