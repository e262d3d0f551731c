package dpengine

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	par "github.com/dpfinetune/dpfinetune/internal/workers"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/noise"
)

// Source is the randomness behind sampling and noise. Secure sources (the
// default) key their generators — ChaCha8 for sampling and augmentation,
// AES-128 on counter blocks for the Gaussian noise (runtime/noise), both
// cryptographically strong — from the operating system's entropy, a fresh
// key per generator; a seeded source is deterministic, for reproducible
// experiments only, and is labelled so wherever it is reported.
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
	return "secure (ChaCha8 and AES-128 keyed from crypto/rand)"
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
	s.mu.Lock()
	n := s.stream
	s.stream++
	s.mu.Unlock()
	return rand.NewChaCha8(s.key(n))
}

// key returns the 256-bit key of stream n: derived from the seed for a
// seeded source, fresh from crypto/rand (n unused) for a secure one.
func (s *Source) key(n uint64) [32]byte {
	var key [32]byte
	if s.seeded {
		binary.LittleEndian.PutUint64(key[0:], s.seed)
		binary.LittleEndian.PutUint64(key[8:], n)
		binary.LittleEndian.PutUint64(key[16:], 0x6470666e74756e65) // domain separation: "dpfntune"
	} else if _, err := crand.Read(key[:]); err != nil {
		// crypto/rand does not fail on supported platforms; if it ever
		// does, continuing with weak noise would silently break privacy.
		panic(fmt.Sprintf("dpengine: crypto/rand failed: %v", err))
	}
	return key
}

// Rand returns a new generator from the source.
func (s *Source) Rand() *rand.Rand { return rand.New(s.newChaCha()) }

// AddGaussian adds std·N(0, 1) to every element of each slice. The work is
// split into fixed chunks, each with its own keystream, so the result is
// deterministic for a seeded source whatever the number of cores.
func (s *Source) AddGaussian(std float64, xs ...[]float32) {
	s.addGaussianScaled(runtime.CPU{}, std, 1, xs...)
}

// noiseChunk is the piece of the gradient one core draws at a time (and
// hands to the optimizer right after). Element i of the noise does not
// depend on the split (runtime/noise), so this only sets the scheduling.
const noiseChunk = 1 << 18

// addGaussianScaled sets x ← (x + std·z)·post for every element, z ~ N(0, 1)
// i.i.d.: the noise and the division by the expected batch size in one pass
// over the parameters (on a 100 M-parameter model each pass is ~0.4 GB of
// memory traffic). The device of ops draws it (DPOps.AddGaussianNoise);
// the source only picks the key and step.
//
// The noise is runtime/noise's: element i of the parameters laid out one
// after another (xs[0], then xs[1], …; the engine's accumulators at their
// padded offsets, addGaussianScaledThen's bases) is a function of (key, step, i)
// through AES-128, the generator of PyTorch's torchcsprng behind Opacus's
// secure mode, under a fresh 128-bit key per call (from crypto/rand, or
// derived from the seed and the stream position), with the stream position
// as the step. AES-256's 14 rounds against 10 made the whole noise 11 %
// slower (BenchmarkAddGaussian, 1.34 against 1.17 ns per element) for no
// gain that matters here: the keystream only has to be indistinguishable
// from random to an attacker bounded at 2¹²⁸.
func (s *Source) addGaussianScaled(ops runtime.DPOps, std float64, post float32, xs ...[]float32) {
	s.addGaussianScaledThen(ops, std, post, xs, nil, false, nil)
}

// addGaussianScaledThen is addGaussianScaled calling then(k, lo, hi) on
// each noised piece xs[k][lo:hi] right after drawing it, on the same core,
// while the piece is still in cache: the optimizer update runs there, and
// the noised gradient of a 10⁸-parameter model is not read back from
// memory a second time. With whole (Engine.batchSamples: a GPU) a piece is
// a whole slice, one launch: there smaller pieces would only add launches,
// and the optimizer reads no core's cache.
//
// bases, if not nil, are the noise positions of the xs' first elements
// (the engine's accumulators' offsets in their block, which has padding
// between them: runtime.BlockOffsets) instead of their lengths' running
// sum.
func (s *Source) addGaussianScaledThen(ops runtime.DPOps, std float64, post float32, xs [][]float32, bases []uint64, whole bool, then func(k, lo, hi int)) {
	size := noiseChunk
	if whole {
		size = 1
		for _, x := range xs {
			size = max(size, len(x))
		}
	}
	var chunks int
	for _, x := range xs {
		chunks += (len(x) + size - 1) / size
	}
	if chunks == 0 {
		return
	}
	n := ops.PrepareNoise(s.nextNoise())
	var next atomic.Int64
	work := func() {
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			k, lo, hi, base := chunkAt(xs, c, size)
			if bases != nil {
				base = bases[k]
			}
			ops.AddGaussianNoise(xs[k][lo:hi], n, base+uint64(lo), std, post)
			if then != nil {
				then(k, lo, hi)
			}
		}
	}
	workers := min(goruntime.GOMAXPROCS(0), chunks)
	var wg par.Group
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

// nextNoise advances the source by one generator and returns the key and
// step of the noise it stands for: 16 bytes from crypto/rand, or for a
// seeded source the seed and the position (the key's first half, so AES-128
// sees both), with the position as the step. A backend that draws the
// noise where the gradient lives takes these two and nothing else.
func (s *Source) nextNoise() (noise.Key, uint64) {
	s.mu.Lock()
	n := s.stream
	s.stream++
	s.mu.Unlock()
	key := s.key(n)
	return noise.Key(key[:16]), n
}

// chunkAt locates the c-th piece of size elements of the concatenation of
// xs: xs[k][lo:hi] (a piece never spans two slices), and the index of
// xs[k][0] in the concatenation.
func chunkAt(xs [][]float32, c, size int) (k, lo, hi int, base uint64) {
	for k, x := range xs {
		n := (len(x) + size - 1) / size
		if c < n {
			return k, c * size, min((c+1)*size, len(x)), base
		}
		c -= n
		base += uint64(len(x))
	}
	return 0, 0, 0, 0
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
