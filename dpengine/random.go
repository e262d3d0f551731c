package dpengine

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
)

// Source is the randomness behind sampling and noise. Secure sources (the
// default) seed ChaCha8, a cryptographically strong generator, from the
// operating system's entropy; a seeded source is deterministic, for
// reproducible experiments only, and is labelled so wherever it is
// reported.
type Source struct {
	seeded bool
	seed   uint64
	// stream counts the generators handed out, so that a seeded source
	// derives a distinct, reproducible stream for each.
	stream uint64
	mu     sync.Mutex
}

// NewSecureSource returns a source whose every generator is seeded from
// crypto/rand.
func NewSecureSource() *Source { return &Source{} }

// NewSeededSource returns a deterministic source. Noise drawn from it is
// NOT suitable for privacy: anyone who knows the seed can remove it.
func NewSeededSource(seed uint64) *Source { return &Source{seeded: true, seed: seed} }

// Seeded reports whether the source is deterministic.
func (s *Source) Seeded() bool { return s.seeded }

// Describe names the source for reports.
func (s *Source) Describe() string {
	if s.seeded {
		return fmt.Sprintf("seeded (seed %d): reproducible, NOT secure", s.seed)
	}
	return "secure (ChaCha8 seeded from crypto/rand)"
}

// Stream returns the position of a seeded source (how many generators it
// has handed out), for checkpoints.
func (s *Source) Stream() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream
}

// SetStream restores the position saved by Stream.
func (s *Source) SetStream(n uint64) {
	s.mu.Lock()
	s.stream = n
	s.mu.Unlock()
}

// newChaCha returns the next generator of the source.
func (s *Source) newChaCha() *rand.ChaCha8 {
	var key [32]byte
	s.mu.Lock()
	n := s.stream
	s.stream++
	s.mu.Unlock()
	if s.seeded {
		binary.LittleEndian.PutUint64(key[0:], s.seed)
		binary.LittleEndian.PutUint64(key[8:], n)
		binary.LittleEndian.PutUint64(key[16:], 0x6470666e74756e65) // domain separation: "dpfntune"
	} else if _, err := crand.Read(key[:]); err != nil {
		// crypto/rand does not fail on supported platforms; if it ever
		// does, continuing with weak noise would silently break privacy.
		panic(fmt.Sprintf("dpengine: crypto/rand failed: %v", err))
	}
	return rand.NewChaCha8(key)
}

// Rand returns a new generator from the source.
func (s *Source) Rand() *rand.Rand { return rand.New(s.newChaCha()) }

// AddGaussian adds std·N(0, 1) to every element of each slice. The work is
// split into fixed chunks, each with its own generator from the source, so
// the result is deterministic for a seeded source whatever the number of
// cores.
func (s *Source) AddGaussian(std float64, xs ...[]float32) {
	const chunk = 1 << 16
	type job struct {
		x   []float32
		rng *rand.Rand
	}
	var jobs []job
	for _, x := range xs {
		for off := 0; off < len(x); off += chunk {
			end := min(off+chunk, len(x))
			jobs = append(jobs, job{x[off:end], s.Rand()})
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	var wg sync.WaitGroup
	next := make(chan job)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				for i := range j.x {
					j.x[i] += float32(std * j.rng.NormFloat64())
				}
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
}

// geometricSkip returns the number of failures before the next success of
// Bernoulli(q) trials: floor(log U / log(1-q)).
func geometricSkip(r *rand.Rand, logOneMinusQ float64) int {
	u := 1 - r.Float64() // (0, 1]
	k := math.Floor(math.Log(u) / logOneMinusQ)
	if k > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(k)
}
