// Package noise draws the Gaussian noise of differentially private
// training: element i of step t's noise vector is a deterministic function
// of (key, t, i) alone, computed from AES-128, so that any range of
// elements can be drawn on its own (a chunk per core, a GPU thread per
// element) and two backends given the same key draw the same bits.
//
// AddGaussian draws a range on all cores; a Generator draws ranges on the
// calling goroutine (the DP engine interleaves them with the optimizer
// update); Reference is the plain scalar model of the specification below,
// which the fast paths (AVX2, SSE2 and scalar Go) match bit for bit
// (TestReferenceMatchesAdd) and which a GPU or reference backend
// reimplements. scripts/noise/reference.py is such a reimplementation from
// this text alone, in Python: TestAddGaussianGolden and TestTablesGolden
// hold the package to the values it wrote (testdata/reference_py.json).
//
// # Specification
//
// Inputs: a 128-bit key K, the step t (a uint64), the element index i
// (0 ≤ i < 2⁴⁸), and per call std (rounded to float32) and post (float32).
// The parameters of a model are laid out one after another, so the index
// of a parameter's first element is its offset in that layout (the DP
// engine starts each at a multiple of 64: runtime.BlockOffsets); every
// element has its own index.
//
// Counter block C(t, d, n), 16 bytes: bytes 0–7 are t big-endian, bytes
// 8–9 the domain d (0 ≤ d < 2¹⁶) big-endian, bytes 10–15 the index n
// (0 ≤ n < 2⁴⁸) big-endian. E(B) is AES-128 encryption of block B under K
// (FIPS-197). Word k (0 ≤ k < 4) of a block is the little-endian uint32 of
// its bytes 4k … 4k+3.
//
// Element i's word: u = word (i mod 4) of E(C(t, 0, ⌊i/4⌋)). Domain 0 is
// thus AES-128 in counter mode from C(t, 0, 0) with a 128-bit big-endian
// counter, read as little-endian uint32s: u is the keystream's word i.
//
// Element i's auxiliary words, used only by the slow path below, in
// order: words 0, 1, 2, 3 of E(C(t, 1, i)), then of E(C(t, 2, i)), …, up
// to domain 65535, then zeros. A draw that reads zeros ends at once (the
// tail accepts x = 0, the wedge test accepts or the next draw is layer 0,
// m = 0); it gets there with probability below 2⁻⁶⁰⁰⁰⁰.
//
// Every counter block is used for one purpose only: domain 0 blocks for
// the elements' words (n < 2⁴⁶), domain d ≥ 1 blocks for the d-th
// auxiliary block of element n. Under a key drawn at random, the outputs of
// AES-128 on distinct blocks are indistinguishable from independent
// uniform bits to an attacker bounded at about 2¹²⁸ operations, so the
// words are as good as independent uniform words, and the noise elements
// independent draws.
//
// The draw, a 256-layer ziggurat (Marsaglia & Tsang 2000) in float32, with
// the tables K (uint32), W and F (float32) of Tables. From u: layer
// L = u & 255, sign s = bit 8 of u, magnitude m = u >> 9 (23 bits).
//
//	if m < K[L]: a = float32(m) · W[L]                      (float32 product)
//	else:        a = slow(L, m)
//	z = a with its sign bit XORed with s                   (so −0 for a = 0, s = 1)
//	dst = (dst + float32(std · z)) · post                  (float32, each operation rounded: no FMA)
//
// slow(L, m) reads the element's auxiliary words with next():
//
//	loop:
//	  if L = 0:                                 the tail beyond r
//	    loop:
//	      x = −ln(1 − uniform()) · (1/r)        (float64; 1/r = 0.27366123732975828)
//	      y = −ln(1 − uniform())
//	      if 2·y ≥ x·x: return float32(r + x)   (float64 sum, rounded once)
//	  x = float32(m) · W[L]                     (float32 from here to the test)
//	  v = float32(next() >> 8) · 2⁻²⁴
//	  y = F[L] + float32(v · (F[L−1] − F[L]))
//	  if y < expf((−0.5 · x) · x): return x
//	  w = next(); L = w & 255; m = w >> 9
//	  if m < K[L]: return float32(m) · W[L]
//
// with r = 3.6541528853610088, uniform() = ((hi << 32 | lo) >> 11) · 2⁻⁵³
// in float64 from the next two words hi then lo, and the two functions
// computed exactly as expf and ln in mathf.go (Cephes expf with every
// product rounded to float32; ln x = e·ln 2 + 2·atanh(s), s = (m−1)/(m+1)
// for x = m·2^e, m ∈ [√½, √2), the series to s²³ in Horner form, ln 2 in
// two parts), which a backend ports line by line: the platform's exp or
// log may round differently in the last place. The ziggurat's fast path
// also has a quicker wedge test (zigWedgeAccept: two lines bounding the
// curve decide all but 0.5 % of the points without expf), proved and
// tested to decide as the expf test does (TestZigWedgeQuick,
// TestZigSlowUnchanged): a backend may use either.
//
// Tables: with f(x) = exp(−x²/2), v = 0.00492867323399 (each layer's
// area), x₂₅₅ = r and x_{j−1} = √(−2·ln(v/x_j + f(x_j))) for j = 255 … 2,
// q = v/f(r): K[0] = ⌊r/q·2²³⌋, K[1] = 0, K[j] = ⌊x_{j−1}/x_j·2²³⌋;
// W[0] = q/2²³, W[j] = x_j/2²³; F[0] = 1, F[j] = f(x_j), all in float64
// (math.Exp, math.Log, math.Sqrt) and then rounded to float32. A backend
// copies them from Tables rather than recomputing them; TestTablesGolden
// holds their hash.
//
// # Speed
//
// A word per element keeps the keystream at four elements per AES block,
// as the sequential generator this package replaced; 98.5 % of the draws
// end in the fast path, which zigFastAVX2 (eight at a time, chosen by a
// CPUID check) or zigFastSSE (four) runs on runs of 1024 words. The 1.5 %
// slow draws of a run get their first auxiliary blocks encrypted together
// with AES-NI, eight blocks interleaved (encryptBlocksAESNI): crypto/aes
// encrypts a lone block in ~50 ns here, longer than the whole draw of the
// ~15 elements of a run that need one. On the 2-core AMD EPYC the package
// was written on, dpengine's BenchmarkAddGaussian took 1.36 ns of CPU time
// per element against 1.48 for the sequential generator it replaced
// (medians of 6 alternating runs of each test binary, -test.benchtime 120x,
// user + system time over the 121·2²² elements drawn; the machine's load
// of 16–22 made wall times vary 2× from run to run).
package noise
