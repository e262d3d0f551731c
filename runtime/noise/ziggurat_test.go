package noise

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestZigFastSlowLanes: each vector fast path, on groups with every
// pattern of slow lanes (layer 1 has no inner rectangle, so its draws
// always leave the fast path), stores exactly the accepted lanes with
// zigFastGo's bits, leaves the others untouched and lists their indices in
// increasing order.
func TestZigFastSlowLanes(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, p := range zigPaths {
		n := 256 * p.lanes
		words := make([]uint32, n)
		for i := range words {
			w := r.Uint32()
			if w&zigMask == 1 || w&zigMask == 0 {
				w |= 2 // a layer with an inner rectangle
			}
			if w>>zigShift >= zigK[w&zigMask] {
				w = w&(1<<zigShift-1) | (w>>zigShift%zigK[w&zigMask])<<zigShift
			}
			if (i/p.lanes)>>(i%p.lanes)&1 != 0 {
				w = w&^zigMask | 1 // slow
			}
			words[i] = w
		}
		const std, post = 0.81, 0.3
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		orig := append([]float32(nil), x...)
		slow := make([]int32, n)
		ns := p.fast(words, x, &zigKW, std, post, slow)
		var want []int32
		for i, u := range words {
			layer, m := u&zigMask, u>>zigShift
			if m >= zigK[layer] {
				want = append(want, int32(i))
				if math.Float32bits(x[i]) != math.Float32bits(orig[i]) {
					t.Fatalf("%s: slow lane %d written: %v, was %v", p.name, i, x[i], orig[i])
				}
				continue
			}
			z := math.Float32frombits(math.Float32bits(float32(m)*zigW[layer]) ^ (u&zigSign)<<(31-8))
			if v := (orig[i] + float32(std*z)) * post; math.Float32bits(x[i]) != math.Float32bits(v) {
				t.Fatalf("%s: lane %d: %v, scalar %v", p.name, i, x[i], v)
			}
		}
		if ns != len(want) {
			t.Fatalf("%s: %d slow lanes, want %d", p.name, ns, len(want))
		}
		for k, i := range want {
			if slow[k] != i {
				t.Fatalf("%s: slow[%d] = %d, want %d", p.name, k, slow[k], i)
			}
		}
	}
}

// TestZigWedgeQuick: wherever the lines of zigWedge decide the wedge test
// they agree with the exact test y < exp(-x²/2) in float64, and with the
// expf test they stand in for (so the draws did not change), on uniformly
// random points and on points within a few float32 steps of the curve.
func TestZigWedgeQuick(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	check := func(layer, m, w uint32) (decided bool) {
		x, y := zigWedgePoint(layer, m, w)
		b := &zigWedge[layer]
		c := b.a + b.b*float64(x)
		yy := float64(y)
		var accept bool
		switch {
		case yy < c-b.below:
			accept = true
		case yy > c+b.above:
		default:
			return false
		}
		xx := float64(x)
		if exact := yy < math.Exp(-xx*xx/2); accept != exact {
			t.Fatalf("layer %d m %d w %#x: x %v y %v: quick accept %v, exact %v", layer, m, w, x, y, accept, exact)
		}
		if expf := y < expf(-0.5*x*x); accept != expf {
			t.Fatalf("layer %d m %d w %#x: x %v y %v: quick accept %v, expf %v", layer, m, w, x, y, accept, expf)
		}
		if zigWedgeAccept(layer, x, y) != accept {
			t.Fatalf("layer %d m %d w %#x: zigWedgeAccept disagrees with the lines", layer, m, w)
		}
		return true
	}
	const n = 1 << 21
	undecided := 0
	for range n {
		layer := 1 + r.Uint32N(zigLayers-1)
		m := zigK[layer] + r.Uint32N(1<<23-zigK[layer])
		if !check(layer, m, r.Uint32()) {
			undecided++
		}
	}
	t.Logf("uniform wedge points left to expf: %.2f %%", 100*float64(undecided)/n)
	// Near the lines and the curve: the u whose y is closest to each,
	// and its neighbours, where the quick decisions come closest to the
	// curve and a margin too thin would show.
	near := 0
	for range n / 64 {
		layer := 1 + r.Uint32N(zigLayers-1)
		m := zigK[layer] + r.Uint32N(1<<23-zigK[layer])
		x := float64(float32(m) * zigW[layer])
		lo, hi := float64(zigF32[layer]), float64(zigF32[layer-1])
		b := &zigWedge[layer]
		c := b.a + b.b*x
		for _, yc := range []float64{c - b.below, math.Exp(-x * x / 2), c + b.above} {
			u := int64((yc - lo) / (hi - lo) * (1 << 24))
			for d := int64(-256); d <= 256; d += 1 + int64(r.IntN(8)) {
				if v := u + d; v >= 0 && v < 1<<24 && check(layer, m, uint32(v)<<8|r.Uint32N(256)) {
					near++
				}
			}
		}
	}
	if near < n/64*50 {
		t.Fatalf("only %d points near the lines decided", near)
	}
}

// TestZigSlowUnchanged: the slow path with its quick wedge test draws,
// bit for bit, what the expf test alone draws (Reference's), over 2²⁰ slow
// draws, and reads the same auxiliary words.
func TestZigSlowUnchanged(t *testing.T) {
	g := New(Key{9}, 3)
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 1 << 20 {
		layer := 1 + r.Uint32N(zigLayers-1)
		m := zigK[layer] + r.Uint32N(1<<23-zigK[layer])
		first := counter(3, 1, uint64(i))
		g.c.block.Encrypt(first[:], first[:])
		second := first
		a := auxWords{g: g, index: uint64(i), domain: 1, b: &first}
		b := auxWords{g: g, index: uint64(i), domain: 1, b: &second, ref: true}
		if x, y := zigSlow(&a, layer, m, false), zigSlow(&b, layer, m, true); math.Float32bits(x) != math.Float32bits(y) {
			t.Fatalf("draw %d (layer %d, m %d): %v, expf alone %v", i, layer, m, x, y)
		}
		if a.domain != b.domain || a.pos != b.pos {
			t.Fatalf("draw %d: the auxiliary words read differ", i)
		}
	}
}
