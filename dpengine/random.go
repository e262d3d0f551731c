package dpengine

import (
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Source is the randomness behind sampling and noise. Secure sources (the
// default) key their generators — ChaCha8 for sampling and augmentation,
// AES-128 in counter mode for the Gaussian noise, both cryptographically
// strong — from the operating system's entropy; a seeded source is deterministic, for
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
	return "secure (ChaCha8 and AES-128-CTR keyed from crypto/rand)"
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
	s.addGaussianScaled(std, 1, xs...)
}

// noiseChunk is the number of elements drawn from one keystream. Fixed, so
// that a seeded source gives the same noise on any number of cores.
const noiseChunk = 1 << 18

// addGaussianScaled sets x ← (x + std·z)·post for every element, z ~ N(0, 1)
// i.i.d.: the noise and the division by the expected batch size in one pass
// over the parameters (on a 100 M-parameter model each pass is ~0.4 GB of
// memory traffic).
//
// The bits come from AES-128 in counter mode under a fresh 128-bit key per
// call (from crypto/rand, or derived from the seed and the stream
// position), the generator of PyTorch's torchcsprng behind Opacus's secure
// mode: with AES-NI it produces ~5 GB/s on one core here against ~1 GB/s
// for ChaCha8, and the Gaussian noise of a 10⁸-parameter model needs
// 0.4 GB of random bits per logical batch. AES-256's 14 rounds against 10
// made the whole noise 11 % slower (BenchmarkAddGaussian, 1.34 against
// 1.17 ns per element) for no gain that matters here: the keystream only
// has to be indistinguishable from random to an attacker bounded at 2¹²⁸.
// Chunk c uses counter blocks starting at c·2³², so chunks never share
// keystream.
func (s *Source) addGaussianScaled(std float64, post float32, xs ...[]float32) {
	s.addGaussianScaledThen(std, post, xs, nil)
}

// addGaussianScaledThen is addGaussianScaled calling then(k, lo, hi) on
// each noised piece xs[k][lo:hi] right after drawing it, on the same core,
// while the piece is still in cache: the optimizer update runs there, and
// the noised gradient of a 10⁸-parameter model is not read back from
// memory a second time.
func (s *Source) addGaussianScaledThen(std float64, post float32, xs [][]float32, then func(k, lo, hi int)) {
	var chunks int
	for _, x := range xs {
		chunks += (len(x) + noiseChunk - 1) / noiseChunk
	}
	if chunks == 0 {
		return
	}
	s.mu.Lock()
	n := s.stream
	s.stream++
	s.mu.Unlock()
	key := s.key(n)
	block, err := aes.NewCipher(key[:16]) // AES-128: the seed and stream, or 16 random bytes
	if err != nil {
		panic(fmt.Sprintf("dpengine: AES: %v", err)) // a 16-byte key cannot fail
	}
	var next atomic.Int64
	work := func() {
		var g noiseBits
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			g.reset(block, uint64(c))
			k, lo, hi := chunkAt(xs, c)
			gaussianInto(&g, xs[k][lo:hi], float32(std), post)
			if then != nil {
				then(k, lo, hi)
			}
		}
	}
	workers := min(runtime.GOMAXPROCS(0), chunks)
	var wg sync.WaitGroup
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

// chunkAt locates the c-th noiseChunk-sized piece of the concatenation of
// xs: xs[k][lo:hi] (a chunk never spans two slices).
func chunkAt(xs [][]float32, c int) (k, lo, hi int) {
	for k, x := range xs {
		n := (len(x) + noiseChunk - 1) / noiseChunk
		if c < n {
			return k, c * noiseChunk, min((c+1)*noiseChunk, len(x))
		}
		c -= n
	}
	return 0, 0, 0
}

// noiseBits hands out 32-bit words of an AES-CTR keystream: the main
// draws in runs of up to 4096 words (take), the ziggurat's rare extra
// draws from a separate small buffer (aux), both refilled from the same
// stream.
type noiseBits struct {
	ctr   cipher.Stream
	buf   [4096]uint32
	pos   int
	extra [64]uint32
	epos  int
	zero  [4096 * 4]byte
	// slow lists the draws of a run of buf that left the ziggurat's fast
	// path (zigFastAVX2 or zigFastSSE).
	slow [4096]int32
}

// reset starts the keystream of chunk c.
func (g *noiseBits) reset(block cipher.Block, c uint64) {
	var iv [aes.BlockSize]byte
	binary.BigEndian.PutUint64(iv[0:], c>>32)
	binary.BigEndian.PutUint32(iv[8:], uint32(c))
	g.ctr = cipher.NewCTR(block, iv[:])
	g.pos, g.epos = len(g.buf), len(g.extra)
}

// fill writes the next keystream words into w.
func (g *noiseBits) fill(w []uint32) {
	g.ctr.XORKeyStream(unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w)), g.zero[:4*len(w)])
}

// take returns the next min(n, 4096) or fewer words of the main run.
func (g *noiseBits) take(n int) []uint32 {
	if g.pos == len(g.buf) {
		g.fill(g.buf[:])
		g.pos = 0
	}
	n = min(n, len(g.buf)-g.pos)
	w := g.buf[g.pos : g.pos+n]
	g.pos += n
	return w
}

// aux returns the next 32 random bits of the auxiliary buffer.
func (g *noiseBits) aux() uint32 {
	if g.epos == len(g.extra) {
		g.fill(g.extra[:])
		g.epos = 0
	}
	w := g.extra[g.epos]
	g.epos++
	return w
}

// uniform returns a uniform float64 in [0, 1) with 53 random bits.
func (g *noiseBits) uniform() float64 {
	return float64(uint64(g.aux())<<21^uint64(g.aux())>>11) * (1.0 / (1 << 53))
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
