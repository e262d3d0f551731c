package dpengine

import (
	"errors"
	"fmt"
	"math"
)

// PoissonSampler draws logical batches by Poisson sampling: every example is
// included independently with probability q (the sample rate). This is the
// sampling the accountants assume. Batch sizes vary, Binomial(n, q); a
// batch may be empty.
type PoissonSampler struct {
	n   int
	q   float64
	src *Source
}

// NewPoissonSampler returns a sampler over n examples with sample rate q.
func NewPoissonSampler(n int, q float64, src *Source) (*PoissonSampler, error) {
	if n <= 0 {
		return nil, fmt.Errorf("poisson sampler: dataset size %d must be positive", n)
	}
	if !(q > 0 && q <= 1) {
		return nil, fmt.Errorf("poisson sampler: sample rate %v must be in (0, 1]", q)
	}
	if src == nil {
		return nil, errors.New("poisson sampler: nil random source")
	}
	return &PoissonSampler{n: n, q: q, src: src}, nil
}

// SampleRate returns q.
func (s *PoissonSampler) SampleRate() float64 { return s.q }

// ExpectedBatch returns the expected logical batch size q·n, the
// denominator of the private gradient.
func (s *PoissonSampler) ExpectedBatch() float64 { return s.q * float64(s.n) }

// Next appends the indices of the next logical batch to dst[:0] and returns
// it. Indices are increasing. Each call draws from a fresh generator of the
// source, so a seeded run resumed at the same step draws the same batches.
func (s *PoissonSampler) Next(dst []int) []int {
	dst = dst[:0]
	if s.q == 1 {
		for i := 0; i < s.n; i++ {
			dst = append(dst, i)
		}
		return dst
	}
	r := s.src.Rand()
	// Geometric skipping draws O(q·n) numbers rather than n.
	l := math.Log1p(-s.q)
	for i := geometricSkip(r, l); i < s.n; i += 1 + geometricSkip(r, l) {
		dst = append(dst, i)
	}
	return dst
}

// ShuffleSampler draws fixed-size batches from a random permutation per
// epoch (sampling without replacement). The accountants do NOT model it:
// the ε they report assumes Poisson sampling. It exists for comparison with
// non-private baselines and must be chosen explicitly.
type ShuffleSampler struct {
	n, batch int
	src      *Source
	perm     []int
	pos      int
}

// NewShuffleSampler returns a fixed-size sampler over n examples.
func NewShuffleSampler(n, batch int, src *Source) (*ShuffleSampler, error) {
	if n <= 0 || batch <= 0 || batch > n {
		return nil, fmt.Errorf("shuffle sampler: batch %d must be in [1, %d]", batch, n)
	}
	return &ShuffleSampler{n: n, batch: batch, src: src}, nil
}

// Warning is printed wherever a run uses the shuffle sampler.
const ShuffleWarning = "WARNING: fixed-size shuffled batches; the reported ε assumes Poisson sampling and is not a proven guarantee for this run"

// ExpectedBatch returns the batch size.
func (s *ShuffleSampler) ExpectedBatch() float64 { return float64(s.batch) }

// Next appends the next batch to dst[:0]; a new permutation starts when the
// current one has fewer than batch examples left.
func (s *ShuffleSampler) Next(dst []int) []int {
	if s.perm == nil || s.pos+s.batch > s.n {
		s.perm = s.src.Rand().Perm(s.n)
		s.pos = 0
	}
	dst = append(dst[:0], s.perm[s.pos:s.pos+s.batch]...)
	s.pos += s.batch
	return dst
}

// Split cuts a logical batch into physical batches of at most size
// elements (the last one shorter), without copying.
func Split(batch []int, size int) [][]int {
	if size <= 0 {
		size = len(batch)
	}
	var out [][]int
	for off := 0; off < len(batch); off += size {
		out = append(out, batch[off:min(off+size, len(batch))])
	}
	return out
}
