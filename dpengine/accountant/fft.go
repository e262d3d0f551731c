package accountant

import (
	"math"
	"math/bits"
	"runtime"
	"sync"
)

// fftPlan holds the bit-reversal permutation and twiddle factors of an
// in-place iterative radix-2 FFT of length n (a power of two).
type fftPlan struct {
	n       int
	rev     []int32
	twiddle []complex128 // exp(-2πik/n), k < n/2
	conj    []complex128 // exp(+2πik/n), for the inverse
}

func newFFTPlan(n int) *fftPlan {
	if n < 2 || n&(n-1) != 0 {
		panic("fft length must be a power of two ≥ 2") // internal: callers pass powers of two
	}
	logn := bits.TrailingZeros(uint(n))
	p := &fftPlan{n: n, rev: make([]int32, n), twiddle: make([]complex128, n/2), conj: make([]complex128, n/2)}
	for i := range n {
		p.rev[i] = int32(bits.Reverse(uint(i)) >> (bits.UintSize - logn))
	}
	// Each twiddle is computed directly (not by recurrence), so its error
	// is one rounding.
	for k := range n / 2 {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		p.twiddle[k] = complex(c, s)
		p.conj[k] = complex(c, -s)
	}
	return p
}

// transform computes the DFT of x in place: X[k] = Σ_j x[j] exp(∓2πijk/n),
// with the minus sign for the forward transform. The inverse is not scaled.
// Large transforms run on all CPUs; every butterfly is computed the same
// way whatever the split, so the result does not depend on the CPU count.
func (p *fftPlan) transform(x []complex128, inverse bool) {
	n := p.n
	tw := p.twiddle
	if inverse {
		tw = p.conj
	}
	parallelRange(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if j := int(p.rev[i]); i < j {
				x[i], x[j] = x[j], x[i]
			}
		}
	})
	for size := 2; size <= n; size <<= 1 {
		half := size >> 1
		step := n / size
		blocks := n / size
		if blocks >= 64 {
			parallelRange(blocks, func(lo, hi int) {
				for blk := lo; blk < hi; blk++ {
					butterflies(x[blk*size:blk*size+half], x[blk*size+half:blk*size+size], tw, step, 0)
				}
			})
		} else {
			for blk := range blocks {
				a, b := x[blk*size:blk*size+half], x[blk*size+half:blk*size+size]
				parallelRange(half, func(lo, hi int) { butterflies(a[lo:hi], b[lo:hi], tw, step, lo) })
			}
		}
	}
}

// butterflies combines a[k], b[k] with twiddle tw[(k0+k)·step].
func butterflies(a, b, tw []complex128, step, k0 int) {
	b = b[:len(a)]
	t := k0 * step
	for k := range a {
		u, v := a[k], b[k]*tw[t]
		a[k], b[k] = u+v, u-v
		t += step
	}
}

// parallelThreshold is the amount of work below which parallelRange runs
// inline.
const parallelThreshold = 1 << 14

// parallelRange calls f on contiguous sub-ranges covering [0, n), on up to
// GOMAXPROCS goroutines. f must treat every index independently.
func parallelRange(n int, f func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers <= 1 || n < parallelThreshold {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		wg.Go(func() { f(lo, min(lo+per, n)) })
	}
	wg.Wait()
}
