package noise

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	par "github.com/dpfinetune/dpfinetune/internal/workers"
)

// Generator draws the noise of one step under one key: element i of the
// step's noise vector is a function of (key, step, i) alone (doc.go), so
// any range can be drawn on its own, in any order, on any goroutine. A
// Generator is safe for concurrent use.
type Generator struct {
	c    cipherPair
	step uint64
}

// New returns the generator of the given key and step.
func New(key Key, step uint64) *Generator {
	return &Generator{c: newCipherPair(key), step: step}
}

// runWords is how many elements Add draws per keystream run: the words,
// the counter mode's zero input, the slow indices, the auxiliary blocks
// and the values of a run (20 KiB) stay in the 32 KiB first-level cache. With 4096, as the
// sequential generator had, this one drew as fast as that one; with 1024,
// 6–9 % faster (thread CPU time of both in one process, medians of 40
// rounds); 512 drew as 1024 did.
const runWords = 1024

// auxBatch is how many slow draws of a run get their first auxiliary
// block encrypted in one encryptBlocks call.
const auxBatch = 256

// scratch is the per-goroutine working memory of Add, pooled so that a
// step allocates nothing once the pool is warm.
type scratch struct {
	buf  [runWords]uint32
	zero [4 * runWords]byte // the counter mode's input: its output is then the keystream
	slow [runWords]int32
	aux  [auxBatch]block
}

// auxPad rounds the count of first auxiliary blocks up to a multiple of
// encryptBlocksAESNI's eight-block interleave: a block left over costs as
// much as the eight of a group (crypto/aes, one block a call, gets n).
func auxPad(n int) int {
	if !haveAESNI {
		return n
	}
	return min(auxBatch, (n+7)&^7)
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Add sets dst[k] ← (dst[k] + std·z_{offset+k})·post for every k, z_i the
// noise element i of the generator's step, on the calling goroutine. std
// is rounded to float32; offset + len(dst) must not exceed 2⁴⁸.
func (g *Generator) Add(dst []float32, offset uint64, std float64, post float32) {
	g.add(dst, offset, float32(std), post, zigBest)
}

// add is Add with the fast path p, so that the tests and benchmarks can
// run each path the CPU has.
func (g *Generator) add(dst []float32, offset uint64, std, post float32, p zigPath) {
	if len(dst) == 0 {
		return
	}
	checkRange(offset, len(dst))
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	iv := counter(g.step, 0, offset>>2)
	ctr := cipher.NewCTR(g.c.block, iv[:])
	for e := offset; len(dst) > 0; {
		// Domain 0: the blocks holding elements e … e+n−1, four words
		// a block; the first run may start inside a block (skip), every
		// later one starts on a block boundary, so the counter-mode
		// stream runs on without a gap.
		skip := int(e & 3)
		n := min(len(dst), runWords-skip)
		nb := (skip + n + 3) / 4
		words := s.buf[:4*nb]
		if haveVAES && !vaesOff {
			g.keystream(e>>2, words)
		} else {
			ctr.XORKeyStream(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 16*nb), s.zero[:16*nb])
		}
		if bigEndian {
			for i, w := range words {
				words[i] = bits.ReverseBytes32(w)
			}
		}
		words = words[skip : skip+n]
		x := dst[:n]
		ns := zigFast(words, x, std, post, s.slow[:n], p)
		g.finish(s, words, x, e, std, post, s.slow[:ns])
		dst = dst[n:]
		e += uint64(n)
	}
}

// vaesOff turns the VAES keystream off (tests: the crypto/aes path must
// stay tested on CPUs that have VAES).
var vaesOff bool

// keystream writes the counter-mode keystream of domain 0 from block blk
// on into words (four words a block): what XORKeyStream on zeros gives
// (the counter's index never carries into the domain), sixteen blocks at
// a time with VAES, the last up to three with AES-NI.
func (g *Generator) keystream(blk uint64, words []uint32) {
	nb := len(words) / 4
	n4 := nb &^ 3
	if n4 > 0 {
		ctr := [8]uint64{g.step, blk, g.step, blk + 1, g.step, blk + 2, g.step, blk + 3}
		ctrVAES(&g.c.rk, &ctr, (*byte)(unsafe.Pointer(&words[0])), n4)
	}
	if n4 == nb {
		return
	}
	tail := (*[3]block)(unsafe.Pointer(&words[4*n4]))[:nb-n4]
	for i := range tail {
		tail[i] = counter(g.step, 0, blk+uint64(n4+i))
	}
	encryptBlocksAESNI(&g.c.rk, &tail[0], len(tail))
}

// finish draws the slow elements of a run (indices slow into words and x,
// the run starting at element e): their first auxiliary blocks are
// encrypted together, auxBatch at a time. Each slow draw costs a counter
// block, its encryption and the setup of its reader, about 1.5 % of the
// elements: every cycle spent here per slow draw is 0.4 % of the whole.
func (g *Generator) finish(s *scratch, words []uint32, x []float32, e uint64, std, post float32, slow []int32) {
	var hi [8]byte
	binary.BigEndian.PutUint64(hi[:], g.step)
	for len(slow) > 0 {
		batch := slow[:min(len(slow), auxBatch)]
		aux := s.aux[:len(batch)]
		for k, i := range batch {
			*(*[8]byte)(aux[k][:8]) = hi
			binary.BigEndian.PutUint64(aux[k][8:], 1<<48|(e+uint64(i)))
		}
		g.c.encryptBlocks(s.aux[:auxPad(len(batch))])
		for k, i := range batch {
			a := auxWords{g: g, index: e + uint64(i), domain: 1, b: &aux[k]}
			u := words[i]
			x[i] = zigApply(x[i], zigSlow(&a, u&zigMask, u>>zigShift, false), u, std, post)
		}
		slow = slow[len(batch):]
	}
}

// auxWords reads one element's auxiliary words: the four little-endian
// words of the encrypted counter block (step, domain, element) for domain
// 1, 2, …, maxDomain in turn, then zeros (doc.go: a draw that gets there
// ends at once). b holds the current block, encrypted, and is overwritten
// by the next.
type auxWords struct {
	g      *Generator
	index  uint64
	b      *block
	pos    int    // of the next word's first byte in b
	domain uint32 // of the block in b
	ref    bool   // encrypt with crypto/aes alone (Reference)
}

// next returns the element's next auxiliary word.
func (a *auxWords) next() uint32 {
	if a.pos == len(a.b) {
		a.pos = 0
		if a.domain == maxDomain {
			*a.b = block{} // exhausted: zeros from here on
		} else {
			a.domain++
			*a.b = counter(a.g.step, uint16(a.domain), a.index)
			if a.ref {
				a.g.c.block.Encrypt(a.b[:], a.b[:])
			} else {
				a.g.c.encryptBlocks(unsafe.Slice(a.b, 1))
			}
		}
	}
	w := binary.LittleEndian.Uint32(a.b[a.pos:])
	a.pos += 4
	return w
}

// uniform returns a uniform float64 in [0, 1) from the next two words:
// their 64 bits, high word first, shifted right by 11.
func (a *auxWords) uniform() float64 {
	hi := uint64(a.next())
	lo := uint64(a.next())
	return float64((hi<<32|lo)>>11) * (1.0 / (1 << 53))
}

// bigEndian reports whether this machine stores words big-end first: the
// keystream's words are little-endian by definition.
var bigEndian = binary.NativeEndian.Uint16([]byte{1, 0}) != 1

// checkRange panics unless [offset, offset+n) lies within the 2⁴⁸
// elements the counter block can name: no model comes near (2⁴⁸ float32
// values are 1 PiB), so only a caller's bug gets there.
func checkRange(offset uint64, n int) {
	if offset >= maxIndex || uint64(n) > maxIndex-offset {
		panic(fmt.Sprintf("noise: elements [%d, %d) beyond the 2^48 a step can draw", offset, offset+uint64(n)))
	}
}

// parChunk is the piece of dst one goroutine of AddGaussian draws at a
// time: big enough that the scheduling costs nothing, small enough to
// balance two to sixteen cores on a model's 10⁵–10⁸ parameters.
const parChunk = 1 << 16

// AddGaussian sets dst[k] ← (dst[k] + std·z_{offset+k})·post for every k,
// where z_i is element i of the noise of the given key and step (doc.go):
// offset is the index of dst[0] in the step's noise vector (the parameters
// laid out one after another). The result does not depend on how the work
// is split: large inputs are drawn on all cores (GOMAXPROCS). std is
// rounded to float32; offset + len(dst) must not exceed 2⁴⁸.
func AddGaussian(dst []float32, key Key, step, offset uint64, std float64, post float32) {
	if len(dst) == 0 {
		return
	}
	checkRange(offset, len(dst))
	g := New(key, step)
	chunks := (len(dst) + parChunk - 1) / parChunk
	workers := min(runtime.GOMAXPROCS(0), chunks)
	if workers == 1 {
		g.Add(dst, offset, std, post)
		return
	}
	var next atomic.Int64
	var wg par.Group
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo, hi := c*parChunk, min((c+1)*parChunk, len(dst))
				g.Add(dst[lo:hi], offset+uint64(lo), std, post)
			}
		}()
	}
	wg.Wait()
}

// Reference is AddGaussian as the plainest code can say it, the model a
// backend reproduces bit for bit: one element at a time, each counter
// block encrypted on its own by crypto/aes, the scalar ziggurat with the
// wedge test always through expf. It is slow (~100 ns an element) and
// meant for tests.
func Reference(dst []float32, key Key, step, offset uint64, std float64, post float32) {
	if len(dst) == 0 {
		return
	}
	checkRange(offset, len(dst))
	g := New(key, step)
	sd := float32(std)
	ab := new(block)
	for k := range dst {
		i := offset + uint64(k)
		b := counter(step, 0, i/4)
		g.c.block.Encrypt(b[:], b[:])
		u := binary.LittleEndian.Uint32(b[4*(i%4):])
		layer, m := u&zigMask, u>>zigShift
		var a float32
		if m < zigK[layer] {
			a = float32(m) * zigW[layer]
		} else {
			*ab = counter(step, 1, i)
			g.c.block.Encrypt(ab[:], ab[:])
			aux := auxWords{g: g, index: i, domain: 1, b: ab, ref: true}
			a = zigSlow(&aux, layer, m, true)
		}
		z := a
		if u&zigSign != 0 {
			z = -a
		}
		dst[k] = (dst[k] + float32(sd*z)) * post
	}
}
