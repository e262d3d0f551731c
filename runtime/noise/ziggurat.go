package noise

import "math"

// The Gaussian noise of a logical batch is one draw per trainable
// parameter: on a VGG with 10⁸ parameters, math/rand's NormFloat64 behind
// the rand.Rand interface (~10 ns a draw) cost more than the training
// step. The draw is a float32 ziggurat (Marsaglia & Tsang 2000, 256
// layers: 98.5 % of draws take the fast path), one 32-bit word per draw in
// the common case, without a branch on the sign. Unlike the classic 32-bit
// version (and math/rand's), the layer index, the sign and the 23-bit
// magnitude come from disjoint bits of the word, so they are independent
// (Doornik 2005 showed the classic reuse of the low bits biases the
// output).
//
// Speed, per draw on one core of the 2-core AMD EPYC (Zen 3) it was tuned
// on, when the draws still came from one sequential keystream per chunk
// (medians of 6–9 runs under other load): 2.5 ns with zigFastSSE and every
// wedge point decided by expf; 2.2 ns with the wedge's quick test
// (zigWedgeAccept); 1.8–2.0 ns with zigFastAVX2 (BenchmarkAddGaussian, two
// cores: 1.40 → 1.1–1.2 ns). What was left then was the AES-256-CTR
// keystream (~45 %; AES-128 since, 11 % faster over all), the vector fast
// path (~33 %) and the slow path (~20 %, mostly branches on its random
// outcomes; expf is 2 %).
const (
	zigLayers = 256
	zigR      = 3.6541528853610088 // x of the base strip's right edge
	zigV      = 0.00492867323399   // area of each layer
	zigScale  = 1 << 23            // the magnitude is a 23-bit integer
	zigMask   = zigLayers - 1      // low 8 bits: layer
	zigSign   = zigLayers          // bit 8: sign
	zigShift  = 9                  // bits 9–31: magnitude
	zigTail   = 1.0 / zigR         // rate of the tail's exponential proposal
)

// Tables returns the ziggurat's tables K, W and F (doc.go), for a backend
// to copy.
func Tables() (k [zigLayers]uint32, w, f [zigLayers]float32) { return zigK, zigW, zigF32 }

// zigK[i] is the acceptance bound of layer i on the 23-bit magnitude
// (x_{i-1}/x_i·2²³; for the base strip r·f(r)/v·2²³), zigW[i] = x_i/2²³
// turns a magnitude into x, zigF[i] = exp(-x_i²/2).
var (
	zigK [zigLayers]uint32
	zigW [zigLayers]float32
	zigF [zigLayers]float64
	// zigF32 is zigF in float32, for the wedge test.
	zigF32 [zigLayers]float32
	// zigKW interleaves zigK[i] and the bits of zigW[i], so that the SSE2
	// fast path loads both with one instruction.
	zigKW [zigLayers][2]uint32
)

func init() {
	dn, tn := float64(zigR), float64(zigR)
	q := zigV / math.Exp(-0.5*dn*dn)
	zigK[0] = uint32(dn / q * zigScale)
	zigK[1] = 0
	zigW[0] = float32(q / zigScale)
	zigW[zigLayers-1] = float32(dn / zigScale)
	zigF[0] = 1
	zigF[zigLayers-1] = math.Exp(-0.5 * dn * dn)
	for i := zigLayers - 2; i >= 1; i-- {
		dn = math.Sqrt(-2 * math.Log(zigV/dn+math.Exp(-0.5*dn*dn)))
		zigK[i+1] = uint32(dn / tn * zigScale)
		tn = dn
		zigF[i] = math.Exp(-0.5 * dn * dn)
		zigW[i] = float32(dn / zigScale)
	}
	for i, f := range zigF {
		zigF32[i] = float32(f)
		zigKW[i] = [2]uint32{zigK[i], math.Float32bits(zigW[i])}
	}
	for i := 1; i < zigLayers; i++ {
		zigWedge[i] = wedgeBounds(i)
	}
}

// zigFastFunc is the signature of a vector fast path (zigFastSSE,
// zigFastAVX2): over words (whose length is a multiple of its width), every
// draw inside its layer's rectangle sets x[i] ← (x[i] + std·z_i)·post with
// the same float32 operations as zigFastGo (so the same bits); the index of
// every other draw goes, in increasing order, to slow (x[i] untouched), and
// their count is returned. x must be at least as long as words and slow
// hold len(words) indices; tab is zigKW.
type zigFastFunc func(words []uint32, x []float32, tab *[zigLayers][2]uint32, std, post float32, slow []int32) int

// zigPath is a vector fast path and the number of lanes it draws at once.
// The zero zigPath (no vector path) leaves every draw to zigFastGo.
type zigPath struct {
	name  string
	fast  zigFastFunc
	lanes int
}

// zigBest is the fast path Generator.Add uses: the first of the platform's
// zigPaths (those the CPU can run, fastest first), if any.
var zigBest = func() zigPath {
	if len(zigPaths) == 0 {
		return zigPath{name: "scalar"}
	}
	return zigPaths[0]
}()

// zigFast runs the fast path p over words: the vector routine on the
// largest multiple of its width, zigFastGo on the rest. It returns the
// number of slow draws listed in slow.
func zigFast(words []uint32, x []float32, std, post float32, slow []int32, p zigPath) int {
	n, ns := 0, 0
	if p.fast != nil {
		n = len(words) / p.lanes * p.lanes
		ns = p.fast(words[:n], x[:n], &zigKW, std, post, slow[:n])
	}
	k := zigFastGo(words[n:], x[n:], std, post, slow[ns:])
	for j := ns; j < ns+k; j++ {
		slow[j] += int32(n)
	}
	return ns + k
}

// zigFastGo is the fast path one word at a time, with the contract of
// zigFastFunc (any length).
func zigFastGo(words []uint32, x []float32, std, post float32, slow []int32) int {
	x = x[:len(words)]
	ns := 0
	for i, u := range words {
		layer := u & zigMask
		m := u >> zigShift
		if m >= zigK[layer] {
			slow[ns] = int32(i)
			ns++
			continue
		}
		x[i] = zigApply(x[i], float32(m)*zigW[layer], u, std, post)
	}
	return ns
}

// zigApply returns (x + std·z)·post for the magnitude |z| = a and the sign
// bit of the element's word u.
func zigApply(x, a float32, u uint32, std, post float32) float32 {
	// The sign bit moved to float32's sign: a branch here would be
	// mispredicted half the time.
	z := math.Float32frombits(math.Float32bits(a) ^ (u&zigSign)<<(31-8))
	// The conversion forbids fusing std·z + x into an FMA (the Go spec
	// allows it, and GOAMD64=v3 builds do it): the vector paths, and any
	// backend, round the product and the sum separately.
	return (x + float32(std*z)) * post
}

// zigSlow finishes a draw that fell outside its layer's inner rectangle:
// the wedge test for the upper layers, Marsaglia's exponential rejection
// for the tail beyond r from the base strip; on rejection it starts a fresh
// draw from the next auxiliary word (whose sign bit is unused: the sign
// was taken from the element's word). It returns |z|. Its bits are the
// element's auxiliary words (a), so that no other element's draw depends
// on it. exact selects the plain expf wedge test (Reference) instead of
// the quick one (zigWedgeAccept): both give the same bits.
func zigSlow(a *auxWords, layer, m uint32, exact bool) float32 {
	for {
		if layer == 0 {
			for {
				x := -ln(1-a.uniform()) * zigTail
				y := -ln(1 - a.uniform())
				if 2*y >= x*x {
					return float32(zigR + x)
				}
			}
		}
		x, y := zigWedgePoint(layer, m, a.next())
		if exact {
			if y < expf(-0.5*x*x) {
				return x
			}
		} else if zigWedgeAccept(layer, x, y) {
			return x
		}
		w := a.next()
		layer, m = w&zigMask, w>>zigShift
		if m < zigK[layer] {
			return float32(m) * zigW[layer]
		}
	}
}

// zigWedgePoint is the point (x, y) of the wedge test of layer ≥ 1 for the
// magnitude m and the auxiliary word w: x = m·zigW (the candidate draw), y
// uniform on [f(x_i), f(x_{i-1})] from w's top 24 bits, both in float32
// (the conversion keeps GOAMD64=v3 builds from fusing y into an FMA, so
// every build draws the same).
func zigWedgePoint(layer, m, w uint32) (x, y float32) {
	x = float32(m) * zigW[layer]
	u := float32(w>>8) * (1.0 / (1 << 24))
	y = zigF32[layer] + float32(u*(zigF32[layer-1]-zigF32[layer]))
	return x, y
}

// zigWedgeAccept is the wedge test y < f(x) of layer ≥ 1, f(x) = exp(-x²/2).
//
// The test is done in float32 (expf: ≤ 1e-7 relative error, 3× faster
// than math.Exp; with the float32 rounding of -x²/2 its result is within
// 5e-7 of f(x) relative): its rounding moves the density by that much,
// below float32's own resolution of the output. expf was more than
// half of the slow path's time, so a point is first compared with two
// lines that bound f on the layer's wedge (zigWedge; the idea is
// McFarland 2016's): a point under the lower line is under the curve, one
// over the upper line is over it, and only those between the lines, 0.5 %
// of the wedge's points, call expf. The lines stand off f by wedgeMargin
// more than the exact bound, 20× the expf test's error, so a quick
// decision is the one the exact test would make and also the one the expf
// test makes: the draws are the same, bit for bit, as with the expf test
// alone (TestZigWedgeQuick, TestZigSlowUnchanged), and the random words
// consumed are the same whichever decides.
func zigWedgeAccept(layer uint32, x, y float32) bool {
	b := &zigWedge[layer]
	c := b.a + b.b*float64(x)
	switch yy := float64(y); {
	case yy < c-b.below:
		return true
	case yy > c+b.above:
		return false
	}
	return y < expf(-0.5*x*x)
}

// zigWedgeLines bounds f(x) = exp(-x²/2) on one layer's wedge:
// a + b·x − below ≤ f(x) ≤ a + b·x + above for every x the layer's wedge
// test can see, margins included.
type zigWedgeLines struct{ a, b, below, above float64 }

// zigWedge[i] bounds f on layer i ≥ 1: the chord across the layer's wedge,
// offset each way by the largest deviation of f from it plus the margin.
var zigWedge [zigLayers]zigWedgeLines

// wedgeMargin is how much farther than the exact bound the lines stand off
// f, relative to f's largest value on the layer: it covers the float64
// rounding of the bounds (~1e-15) and makes the quick decision agree with
// the expf test, whose error is ≤ 5e-7 relative (TestZigWedgeQuick finds
// disagreements with a margin of 1e-7, none from 3e-7 up). A larger margin
// only sends a few more points to expf: 1e-5 leaves 0.53 % of them.
const wedgeMargin = 1e-5

// wedgeBounds returns the lines of layer i ≥ 1. The chord joins
// (x_{i-1}, f(x_{i-1})) and (x_i, f(x_i)) (x_0 = 0); f − chord has f's
// second derivative (x²−1)f, so it is concave for x < 1 and convex for
// x > 1: on each side of 1 one of its extremes is at an end of the interval
// and the other is the single interior maximum of a concave function,
// found by ternary search. The interval is that of the float32 x the layer
// produces, widened by 1e-6 relative for their rounding. In the layers
// wholly on one side of 1 one offset is about the margin alone (McFarland's
// chord test); the layer straddling 1 gets both offsets.
func wedgeBounds(i int) zigWedgeLines {
	f := func(x float64) float64 { return math.Exp(-0.5 * x * x) }
	xr := float64(zigW[i]) * zigScale
	xl := 0.0
	if i > 1 {
		xl = float64(zigW[i-1]) * zigScale
	}
	b := (f(xr) - f(xl)) / (xr - xl)
	a := f(xl) - b*xl
	dev := func(x float64) float64 { return f(x) - (a + b*x) }
	lo := float64(zigK[i]) * float64(zigW[i]) * (1 - 1e-6)
	hi := zigScale * float64(zigW[i]) * (1 + 1e-6)
	above := max(dev(lo), dev(hi), 0)
	below := max(-dev(lo), -dev(hi), 0)
	if lo < 1 {
		// f − chord is concave on [lo, min(hi, 1)]: its maximum may be
		// inside, its minimum is at an end.
		above = max(above, maxConcave(dev, lo, min(hi, 1)))
		below = max(below, -dev(min(hi, 1)))
	}
	if hi > 1 {
		below = max(below, maxConcave(func(x float64) float64 { return -dev(x) }, max(lo, 1), hi))
		above = max(above, dev(max(lo, 1)))
	}
	margin := wedgeMargin * f(lo)
	return zigWedgeLines{a: a, b: b, below: below + margin, above: above + margin}
}

// maxConcave returns the maximum of the concave h on [lo, hi] by ternary
// search (to float64 resolution: the error in the value is far below
// wedgeMargin).
func maxConcave(h func(float64) float64, lo, hi float64) float64 {
	best := max(h(lo), h(hi))
	for range 200 {
		m1, m2 := lo+(hi-lo)/3, hi-(hi-lo)/3
		if h(m1) < h(m2) {
			lo = m1
		} else {
			hi = m2
		}
	}
	return max(best, h((lo+hi)/2))
}
