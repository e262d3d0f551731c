package kernels

import (
	"fmt"
	"math"
	"sync"
)

// PoolShape describes an N-D pooling window (ONNX MaxPool / AveragePool,
// 1 ≤ d ≤ 3 spatial dimensions) over N×C×In tensors. Fill the exported
// inputs and call Init.
type PoolShape struct {
	N, C            int   // batch and channels
	In              []int // input spatial dims
	Kernel          []int // window dims
	Strides         []int // nil means all 1
	Dilations       []int // nil means all 1
	Pads            []int // [begin_1..begin_d, end_1..end_d]; nil means 0
	CeilMode        bool  // ceil instead of floor for the output size
	CountIncludePad bool  // AveragePool: divide by the window size clipped to the padded input

	// Derived by Init.
	Out    []int // output spatial dims
	T      int   // output spatial size
	InSize int   // input spatial size

	g geom3
}

// Init validates the shape and fills Out, T and InSize.
func (p *PoolShape) Init() error {
	if p.N < 0 || p.C < 1 {
		return fmt.Errorf("kernels: pool N=%d C=%d invalid", p.N, p.C)
	}
	g, out, err := initGeom(p.In, p.Kernel, p.Strides, p.Dilations, p.Pads, p.CeilMode)
	if err != nil {
		return err
	}
	p.g, p.Out = g, out
	p.T = g.out[0] * g.out[1] * g.out[2]
	p.InSize = g.in[0] * g.in[1] * g.in[2]
	return nil
}

func (p *PoolShape) check() {
	if !p.g.ready {
		panic("kernels: PoolShape used before Init")
	}
}

// taps returns the window taps [klo, khi) of output position o along axis
// a whose input index o·s − pb + k·d lies in [lo, hi).
func (g *geom3) taps(a, o, lo, hi int) (klo, khi int) {
	base := o*g.s[a] - g.pb[a]
	d := g.d[a]
	// smallest k with base + k·d ≥ lo
	if base < lo {
		klo = (lo - base + d - 1) / d
	}
	// largest k with base + k·d < hi, plus one
	if hi-1-base < 0 {
		return klo, klo
	}
	khi = min(g.k[a], (hi-1-base)/d+1)
	if khi < klo {
		khi = klo
	}
	return klo, khi
}

// MaxPoolForward computes y = max over each window (padding excluded) and,
// when argmax is non-nil (N·C·T elements), the flat index within the input
// plane (∏In) of each maximum for the backward pass; the first maximum wins
// ties and a NaN wins and stays, as in PyTorch. A window with no input
// element gives −Inf and index −1. Planes are split over workers; 2-D
// windows that all lie inside the input (no padding) take a loop without
// per-window clipping, and 2×2 windows one without data-dependent branches.
func MaxPoolForward(p *PoolShape, x, y []float32, argmax []int32) {
	maxPoolForward(p, x, y, argmax, true)
}

// maxPoolForward is MaxPoolForward; fast false forces the general loop
// (for tests).
func maxPoolForward(p *PoolShape, x, y []float32, argmax []int32, fast bool) {
	p.check()
	planes := p.N * p.C
	checkLen("x", x, planes*p.InSize)
	checkLen("y", y, planes*p.T)
	if argmax != nil && len(argmax) < planes*p.T {
		panic("kernels: argmax too short")
	}
	g := &p.g
	if fast && !(g.inside() && g.k[1] == 2 && g.k[2] == 2 && g.d[1] == 1 && g.d[2] == 1) && maxPoolPadded(p, x, y, argmax) {
		return
	}
	plane := maxPoolPlane
	if fast && g.inside() {
		plane = maxPoolInsidePlane
		if g.k[1] == 2 && g.k[2] == 2 && g.d[1] == 1 && g.d[2] == 1 {
			plane = maxPool2x2Plane
		}
	}
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			var ap []int32
			if argmax != nil {
				ap = argmax[pl*p.T : (pl+1)*p.T]
			}
			plane(g, x[pl*p.InSize:(pl+1)*p.InSize], y[pl*p.T:(pl+1)*p.T], ap)
		}
	})
}

// maxPoolPlane is the general MaxPoolForward loop on one plane: any
// padding, dilation and ceil mode, windows clipped to the input.
func maxPoolPlane(g *geom3, xp, yp []float32, ap []int32) {
	t := 0
	for od := 0; od < g.out[0]; od++ {
		d0, d1 := g.taps(0, od, 0, g.in[0])
		for oh := 0; oh < g.out[1]; oh++ {
			h0, h1 := g.taps(1, oh, 0, g.in[1])
			for ow := 0; ow < g.out[2]; ow++ {
				w0, w1 := g.taps(2, ow, 0, g.in[2])
				best := float32(math.Inf(-1))
				bi := int32(-1)
				for kd := d0; kd < d1; kd++ {
					id := od*g.s[0] - g.pb[0] + kd*g.d[0]
					for kh := h0; kh < h1; kh++ {
						ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
						row := (id*g.in[1] + ih) * g.in[2]
						for kw := w0; kw < w1; kw++ {
							iw := ow*g.s[2] - g.pb[2] + kw*g.d[2]
							// A NaN wins and stays, as in PyTorch.
							if v := xp[row+iw]; bi < 0 || v > best || v != v && best == best {
								best, bi = v, int32(row+iw)
							}
						}
					}
				}
				yp[t] = best
				if ap != nil {
					ap[t] = bi
				}
				t++
			}
		}
	}
}

// maxPoolPadded is MaxPoolForward for 2-D (or 1-D) pools other than
// the 2×2 inside ones (ResNet's 3×3, stride 2, pad 1): each plane is
// copied as order keys (maxKey) into a scratch plane bordered with −∞'s
// key, where every window lies inside, and each window's maximum is taken
// on the keys by branch-free selects.
// The general loop's per-window clipping and the float maxima's chains of
// NaN and zero checks cost several times more. The first maximum in
// row-major order wins as in the general loop (−0 and +0 share a key, so
// the first zero wins, with its sign); a plane holding a NaN, or one where
// a window's maximum is −∞ and a border tap came first, is redone by the
// general loop. It reports false for shapes it does not take.
func maxPoolPadded(p *PoolShape, x, y []float32, argmax []int32) bool {
	g := &p.g
	if g.in[0] != 1 || g.k[0] != 1 {
		return false
	}
	var P [3]int
	for a := 1; a < 3; a++ {
		P[a] = max((g.out[a]-1)*g.s[a]+(g.k[a]-1)*g.d[a]+1, g.pb[a]+g.in[a])
	}
	H, W, PW, pb1, pb2 := g.in[1], g.in[2], P[2], g.pb[1], g.pb[2]
	OH, OW, KH, KW := g.out[1], g.out[2], g.k[1], g.k[2]
	rs, cs, rd, cd := g.s[1]*PW, g.s[2], g.d[1]*PW, g.d[2]
	size := P[1] * PW
	border := maxKey(float32(math.Inf(-1)))
	parallelFor(p.N*p.C, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		buf := keyPool.Get().(*[]int32)
		if cap(*buf) < size {
			*buf = make([]int32, size)
		}
		keys := (*buf)[:size]
		for i := range keys {
			keys[i] = border
		}
		var rowKeys [32]int64
		var rowIdx [32]int
	planes:
		for k := lo; k < hi; k++ {
			xp, yp := x[k*p.InSize:(k+1)*p.InSize], y[k*p.T:(k+1)*p.T]
			var ap []int32
			if argmax != nil {
				ap = argmax[k*p.T : (k+1)*p.T]
			}
			nan := false
			for h := 0; h < H; h++ {
				row := keys[(h+pb1)*PW+pb2 : (h+pb1)*PW+pb2+W]
				for w, v := range xp[h*W : (h+1)*W] {
					if v != v {
						nan = true
					}
					row[w] = maxKey(v)
				}
			}
			if nan {
				maxPoolPlane(g, xp, yp, ap)
				continue
			}
			for oh := 0; oh < OH; oh++ {
				// A row of windows at a time, taps outer and windows
				// inner: the windows' select chains are independent and
				// overlap (one window's nine selects in a row wait on
				// each other), each window still sees its taps in
				// row-major order.
				for o0 := 0; o0 < OW; o0 += len(rowKeys) {
					n := min(len(rowKeys), OW-o0)
					bk, bi := rowKeys[:n], rowIdx[:n]
					for j := range bk {
						b := oh*rs + (o0+j)*cs
						bk[j], bi[j] = int64(keys[b]), b
					}
					for kh := 0; kh < KH; kh++ {
						for kw := 0; kw < KW; kw++ {
							tap := oh*rs + o0*cs + kh*rd + kw*cd
							for j := range bk {
								// Select without a branch (the winner is
								// random): m is all ones where kv > bk.
								i := tap + j*cs
								kv := int64(keys[i])
								m := (bk[j] - kv) >> 63
								bk[j] ^= (bk[j] ^ kv) & m
								bi[j] ^= (bi[j] ^ i) & int(m)
							}
						}
					}
					for j, i := range bi {
						ih, iw := i/PW-pb1, i%PW-pb2
						if ih < 0 || ih >= H || iw < 0 || iw >= W {
							maxPoolPlane(g, xp, yp, ap)
							continue planes
						}
						t := oh*OW + o0 + j
						yp[t] = xp[ih*W+iw]
						if ap != nil {
							ap[t] = int32(ih*W + iw)
						}
					}
				}
			}
		}
		keyPool.Put(buf)
	})
	return true
}

// keyPool holds maxPoolPadded's key planes.
var keyPool = sync.Pool{New: func() any { return new([]int32) }}

// maxKey maps a float32 other than NaN to an int32 of the same order, −0
// and +0 to the same key: the magnitude's bits, negated for negative
// numbers, computed without a branch.
func maxKey(v float32) int32 {
	k := int32(math.Float32bits(v))
	m := k >> 31
	return (k ^ (m & 0x7fffffff)) - m
}

// inside reports whether every window of a 2-D (or 1-D) pooling lies
// entirely inside the input (no padding, and no ceil-mode window hanging
// over the end), so the per-window tap clipping of the general loop can be
// skipped.
func (g *geom3) inside() bool {
	if g.in[0] != 1 || g.k[0] != 1 {
		return false
	}
	for a := 1; a < 3; a++ {
		if g.pb[a] != 0 || g.pe[a] != 0 || (g.out[a]-1)*g.s[a]+(g.k[a]-1)*g.d[a] >= g.in[a] {
			return false
		}
	}
	return true
}

// maxPool2x2Plane is MaxPoolForward on one plane for 2×2 windows (any
// stride) that all lie inside the input. It picks the maximum with
// conditional moves instead of branches on the data, whose outcome is
// random and costs a misprediction in about every other comparison. The
// result matches the general loop exactly: the first maximum in row-major
// order wins ties (the comparisons are strict), and a row of windows that
// holds a NaN, detected through a running sum of the taps, is redone by the
// general rule (first NaN wins).
func maxPool2x2Plane(g *geom3, xp, yp []float32, ap []int32) {
	W, OW, OH := g.in[2], g.out[2], g.out[1]
	sh, sw := g.s[1], g.s[2]
	yp = yp[:OH*OW]
	for oh := 0; oh < OH; oh++ {
		base := oh * sh * W
		yr := yp[oh*OW : (oh+1)*OW]
		var ar []int32
		if ap != nil {
			ar = ap[oh*OW : (oh+1)*OW]
		}
		if acc := maxPoolRow2x2(xp[base:base+2*W], W, sw, int32(base), yr, ar); acc != acc {
			// A NaN (or +Inf and −Inf) somewhere in the row.
			maxPoolRow2x2NaN(xp, base, W, sw, yr, ar)
		}
	}
}

// maxPoolRow2x2 computes one output row of 2×2 windows over the input rows
// x[:W] and x[W:2W] (flat index base) and returns the sum of the taps,
// which is NaN when the row needs the NaN rule. A separate function keeps
// the loop's few values in registers.
func maxPoolRow2x2(x []float32, W, sw int, base int32, yr []float32, ar []int32) float32 {
	r0, r1 := x[:W], x[W:2*W]
	var acc float32
	start := 0
	if havePoolSSE && sw == 1 && len(yr) >= 4 {
		// Four windows per step in SSE2, the same selects; the tail
		// below.
		start = len(yr) &^ 3
		if W < len(yr)+1 || ar != nil && len(ar) < start {
			panic(fmt.Sprintf("kernels: 2×2 pooling row of %d outputs over %d inputs", len(yr), W))
		}
		acc = maxPoolRow2x2S1SSE(r0, r1, base, yr, ar)
	}
	for ow := start; ow < len(yr); ow++ {
		j := ow * sw
		p, q := r0[j:j+2], r1[j:j+2]
		a, b, c, d := p[0], p[1], q[0], q[1]
		acc += a + b + c + d
		// The selects carry the winner's bits and offset in integer
		// registers, all computed beforehand: Go turns such selects into
		// conditional moves, whereas a selected float or load address, or
		// work inside the if, makes it branch.
		ua, ub := math.Float32bits(a), math.Float32bits(b)
		uc, ud := math.Float32bits(c), math.Float32bits(d)
		ka, kc := 0, W
		if b > a {
			ka, ua = 1, ub
		}
		if d > c {
			kc, uc = W+1, ud
		}
		if math.Float32frombits(uc) > math.Float32frombits(ua) {
			ka, ua = kc, uc
		}
		yr[ow] = math.Float32frombits(ua)
		if ar != nil {
			ar[ow] = base + int32(j+ka)
		}
	}
	return acc
}

// maxPoolRow2x2NaN redoes one row of 2×2 windows starting at x[base] by the
// general rule: the first maximum or the first NaN, in row-major order.
func maxPoolRow2x2NaN(x []float32, base, W, sw int, yr []float32, ar []int32) {
	for ow := range yr {
		b := base + ow*sw
		bi, v := b, x[b]
		for _, o := range [3]int{b + 1, b + W, b + W + 1} {
			if u := x[o]; u > v || u != u && v == v {
				bi, v = o, u
			}
		}
		yr[ow] = v
		if ar != nil {
			ar[ow] = int32(bi)
		}
	}
}

// maxPoolInsidePlane is MaxPoolForward on one plane for any window that
// lies inside the input: the maximum through the branch-free max builtin,
// then the first tap that attains it.
func maxPoolInsidePlane(g *geom3, xp, yp []float32, ap []int32) {
	W, OW, OH := g.in[2], g.out[2], g.out[1]
	KH, KW, DH, DW := g.k[1], g.k[2], g.d[1], g.d[2]
	t := 0
	for oh := 0; oh < OH; oh++ {
		for ow := 0; ow < OW; ow++ {
			b := oh*g.s[1]*W + ow*g.s[2]
			best := xp[b]
			for kh := 0; kh < KH; kh++ {
				row := xp[b+kh*DH*W : b+kh*DH*W+(KW-1)*DW+1]
				for kw := 0; kw < KW; kw++ {
					best = max(best, row[kw*DW])
				}
			}
			// Locate the first tap equal to the maximum (or the first NaN,
			// which max propagates); reading y back from it keeps the sign
			// of a zero maximum as the general loop does.
			bi := -1
		find:
			for kh := 0; kh < KH; kh++ {
				off := b + kh*DH*W
				for kw := 0; kw < KW; kw++ {
					if v := xp[off+kw*DW]; v == best || v != v {
						bi = off + kw*DW
						break find
					}
				}
			}
			yp[t] = xp[bi]
			if ap != nil {
				ap[t] = int32(bi)
			}
			t++
		}
	}
}

// MaxPoolBackward routes dy to the argmax positions recorded by
// MaxPoolForward: dx (N·C·InSize) is overwritten.
func MaxPoolBackward(p *PoolShape, dy []float32, argmax []int32, dx []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("dy", dy, planes*p.T)
	checkLen("dx", dx, planes*p.InSize)
	if len(argmax) < planes*p.T {
		panic("kernels: argmax too short")
	}
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			dxp := dx[pl*p.InSize : (pl+1)*p.InSize]
			clear(dxp)
			ap := argmax[pl*p.T : (pl+1)*p.T]
			for t, g := range dy[pl*p.T : (pl+1)*p.T] {
				if i := ap[t]; i >= 0 {
					dxp[i] += g
				}
			}
		}
	})
}

// MaxPoolBackwardFromOutput is MaxPoolBackward without a stored argmax:
// each window's winner is found again from the forward's input x and
// output y as its first tap with y's bits. MaxPoolForward's output always
// carries its winner's bits, and an earlier tap with the same bits would
// have won (first maximum wins; the first NaN wins), so this is the tap it
// chose — signed zeros and NaNs included. dx is overwritten, adding in
// MaxPoolBackward's order, so the result is the same bit for bit. A plan
// takes it when x and y both stay alive until the pool's backward anyway
// (book-keeping keeps a pool's output when a trained layer reads it), so
// the argmax, as large as y, need not exist.
func MaxPoolBackwardFromOutput(p *PoolShape, x, y, dy, dx []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("x", x, planes*p.InSize)
	checkLen("y", y, planes*p.T)
	checkLen("dy", dy, planes*p.T)
	checkLen("dx", dx, planes*p.InSize)
	g := &p.g
	plane := maxPoolBackPlane
	if g.inside() && g.k[1] == 2 && g.k[2] == 2 && g.d[1] == 1 && g.d[2] == 1 {
		plane = maxPoolBack2x2Plane
	}
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			dxp := dx[pl*p.InSize : (pl+1)*p.InSize]
			clear(dxp)
			plane(g, x[pl*p.InSize:(pl+1)*p.InSize], y[pl*p.T:(pl+1)*p.T], dy[pl*p.T:(pl+1)*p.T], dxp)
		}
	})
}

// maxPoolBackPlane is MaxPoolBackwardFromOutput on one plane for any
// window, visiting the taps in maxPoolPlane's order.
func maxPoolBackPlane(g *geom3, xp, yp, dyp, dxp []float32) {
	t := 0
	for od := 0; od < g.out[0]; od++ {
		d0, d1 := g.taps(0, od, 0, g.in[0])
		for oh := 0; oh < g.out[1]; oh++ {
			h0, h1 := g.taps(1, oh, 0, g.in[1])
			for ow := 0; ow < g.out[2]; ow++ {
				w0, w1 := g.taps(2, ow, 0, g.in[2])
				yb := math.Float32bits(yp[t])
			find:
				for kd := d0; kd < d1; kd++ {
					id := od*g.s[0] - g.pb[0] + kd*g.d[0]
					for kh := h0; kh < h1; kh++ {
						ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
						row := (id*g.in[1] + ih) * g.in[2]
						for kw := w0; kw < w1; kw++ {
							i := row + ow*g.s[2] - g.pb[2] + kw*g.d[2]
							if math.Float32bits(xp[i]) == yb {
								dxp[i] += dyp[t]
								break find
							}
						}
					}
				}
				t++
			}
		}
	}
}

// bitsEq returns all ones if v's bits are b, else 0, without a branch.
func bitsEq(v float32, b uint32) uint32 {
	d := uint64(math.Float32bits(v) ^ b)
	return -uint32((d - 1) >> 63)
}

// negZeroBits is −0: adding it leaves every float32 as it is (+0 + −0 is
// +0), so a masked-out contribution is −0, not +0.
const negZeroBits = 1 << 31

// maxPoolBack2x2Plane is MaxPoolBackwardFromOutput on one plane of 2×2
// windows inside the input (maxPool2x2Plane's case). The winner is
// selected through bit masks, first match kept, and every tap of a window
// gets an addition at a fixed address: the gradient if it won, −0
// otherwise. Adding at the winner's address alone made each load wait on
// the store before it (neighbouring windows share taps), and branching on
// the winner was mispredicted about every other window: 7× the argmax
// backward's time, against 2.6× this way (BenchmarkCNNLayers/pool1,
// with the SSE2 row loop). The additions happen in
// MaxPoolBackward's order, so the result is the same bit for bit.
func maxPoolBack2x2Plane(g *geom3, xp, yp, dyp, dxp []float32) {
	W, OW, OH := g.in[2], g.out[2], g.out[1]
	sh, sw := g.s[1], g.s[2]
	for oh := 0; oh < OH; oh++ {
		base := oh * sh * W
		r0, r1 := xp[base:base+W], xp[base+W:base+2*W]
		d0, d1 := dxp[base:base+W], dxp[base+W:base+2*W]
		yr, dyr := yp[oh*OW:(oh+1)*OW], dyp[oh*OW:(oh+1)*OW]
		if sw == 1 {
			maxPoolBackRowS1(r0[:OW+1], r1[:OW+1], yr, dyr, d0[:OW+1], d1[:OW+1])
			continue
		}
		// Windows of a row share no taps: each tap gets one addition.
		for ow, yv := range yr {
			j := ow * sw
			yb, gb := math.Float32bits(yv), math.Float32bits(dyr[ow])
			ea := bitsEq(r0[j], yb)
			eb := bitsEq(r0[j+1], yb) &^ ea
			ec := bitsEq(r1[j], yb) &^ (ea | eb)
			ed := ^(ea | eb | ec)
			d0[j] += math.Float32frombits(gb&ea | negZeroBits&^ea)
			d0[j+1] += math.Float32frombits(gb&eb | negZeroBits&^eb)
			d1[j] += math.Float32frombits(gb&ec | negZeroBits&^ec)
			d1[j+1] += math.Float32frombits(gb&ed | negZeroBits&^ed)
		}
	}
}

// maxPoolBackRowS1 routes one output row of 2×2 stride-1 windows: window
// i's taps are r0[i], r0[i+1], r1[i], r1[i+1] (len(r0) = len(yr)+1), its
// gradient goes to the same places of d0 and d1. The right column's
// additions ride to the next window in ct and cb, so that d0[i] receives
// window i−1's share before window i's, as in MaxPoolBackward.
func maxPoolBackRowS1(r0, r1, yr, dyr, d0, d1 []float32) {
	n := len(yr)
	r0, r1, d0, d1 = r0[:n+1], r1[:n+1], d0[:n+1], d1[:n+1]
	dyr = dyr[:n]
	ct, cb := math.Float32frombits(negZeroBits), math.Float32frombits(negZeroBits)
	i := 0
	if havePoolSSE && n >= 4 {
		i = n &^ 3
		carry := [2]float32{ct, cb}
		maxPoolBackS1SSE(r0, r1, yr, dyr, d0, d1, i, &carry)
		ct, cb = carry[0], carry[1]
	}
	for ; i < n; i++ {
		yb, gb := math.Float32bits(yr[i]), math.Float32bits(dyr[i])
		ea := bitsEq(r0[i], yb)
		eb := bitsEq(r0[i+1], yb) &^ ea
		ec := bitsEq(r1[i], yb) &^ (ea | eb)
		ed := ^(ea | eb | ec)
		d0[i] = d0[i] + ct + math.Float32frombits(gb&ea|negZeroBits&^ea)
		d1[i] = d1[i] + cb + math.Float32frombits(gb&ec|negZeroBits&^ec)
		ct = math.Float32frombits(gb&eb | negZeroBits&^eb)
		cb = math.Float32frombits(gb&ed | negZeroBits&^ed)
	}
	d0[n] += ct
	d1[n] += cb
}

// avgDivisor returns the number of taps the average of output position
// (od, oh, ow) divides by: taps inside the input, or with CountIncludePad
// taps inside the padded input [−pb, in+pe) (which ceil mode can exceed, as
// in PyTorch).
func (p *PoolShape) avgDivisor(od, oh, ow int) float32 {
	g := &p.g
	if !p.CountIncludePad {
		d0, d1 := g.taps(0, od, 0, g.in[0])
		h0, h1 := g.taps(1, oh, 0, g.in[1])
		w0, w1 := g.taps(2, ow, 0, g.in[2])
		return float32((d1 - d0) * (h1 - h0) * (w1 - w0))
	}
	d0, d1 := g.taps(0, od, -g.pb[0], g.in[0]+g.pe[0])
	h0, h1 := g.taps(1, oh, -g.pb[1], g.in[1]+g.pe[1])
	w0, w1 := g.taps(2, ow, -g.pb[2], g.in[2]+g.pe[2])
	return float32((d1 - d0) * (h1 - h0) * (w1 - w0))
}

// AveragePoolForward computes the window averages (ONNX AveragePool,
// including dilations and count_include_pad). A window with no element
// gives 0.
func AveragePoolForward(p *PoolShape, x, y []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("x", x, planes*p.InSize)
	checkLen("y", y, planes*p.T)
	g := &p.g
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			xp := x[pl*p.InSize : (pl+1)*p.InSize]
			yp := y[pl*p.T : (pl+1)*p.T]
			t := 0
			for od := 0; od < g.out[0]; od++ {
				d0, d1 := g.taps(0, od, 0, g.in[0])
				for oh := 0; oh < g.out[1]; oh++ {
					h0, h1 := g.taps(1, oh, 0, g.in[1])
					for ow := 0; ow < g.out[2]; ow++ {
						w0, w1 := g.taps(2, ow, 0, g.in[2])
						var s float32
						for kd := d0; kd < d1; kd++ {
							id := od*g.s[0] - g.pb[0] + kd*g.d[0]
							for kh := h0; kh < h1; kh++ {
								ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
								row := (id*g.in[1] + ih) * g.in[2]
								for kw := w0; kw < w1; kw++ {
									s += xp[row+ow*g.s[2]-g.pb[2]+kw*g.d[2]]
								}
							}
						}
						if div := p.avgDivisor(od, oh, ow); div > 0 {
							s /= div
						}
						yp[t] = s
						t++
					}
				}
			}
		}
	})
}

// AveragePoolBackward spreads each dy over its window's input taps divided
// by the forward divisor; dx is overwritten.
func AveragePoolBackward(p *PoolShape, dy, dx []float32) {
	p.check()
	planes := p.N * p.C
	checkLen("dy", dy, planes*p.T)
	checkLen("dx", dx, planes*p.InSize)
	g := &p.g
	parallelFor(planes, max(1, 8192/max(1, p.T)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			dxp := dx[pl*p.InSize : (pl+1)*p.InSize]
			clear(dxp)
			dyp := dy[pl*p.T : (pl+1)*p.T]
			t := 0
			for od := 0; od < g.out[0]; od++ {
				d0, d1 := g.taps(0, od, 0, g.in[0])
				for oh := 0; oh < g.out[1]; oh++ {
					h0, h1 := g.taps(1, oh, 0, g.in[1])
					for ow := 0; ow < g.out[2]; ow++ {
						w0, w1 := g.taps(2, ow, 0, g.in[2])
						v := dyp[t]
						t++
						div := p.avgDivisor(od, oh, ow)
						if div == 0 {
							continue
						}
						v /= div
						for kd := d0; kd < d1; kd++ {
							id := od*g.s[0] - g.pb[0] + kd*g.d[0]
							for kh := h0; kh < h1; kh++ {
								ih := oh*g.s[1] - g.pb[1] + kh*g.d[1]
								row := (id*g.in[1] + ih) * g.in[2]
								for kw := w0; kw < w1; kw++ {
									dxp[row+ow*g.s[2]-g.pb[2]+kw*g.d[2]] += v
								}
							}
						}
					}
				}
			}
		}
	})
}

// GlobalAveragePool averages each of the planes (N·C of them, each of
// spatial elements) of x into y, summing in float64.
func GlobalAveragePool(planes, spatial int, x, y []float32) {
	checkLen("x", x, planes*spatial)
	checkLen("y", y, planes)
	parallelFor(planes, max(1, elementwiseGrain/max(1, spatial)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			var s float64
			for _, v := range x[pl*spatial : (pl+1)*spatial] {
				s += float64(v)
			}
			y[pl] = float32(s / float64(spatial))
		}
	})
}

// GlobalAveragePoolBackward spreads dy/spatial over each plane of dx.
func GlobalAveragePoolBackward(planes, spatial int, dy, dx []float32) {
	checkLen("dy", dy, planes)
	checkLen("dx", dx, planes*spatial)
	parallelFor(planes, max(1, elementwiseGrain/max(1, spatial)), func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			v := dy[pl] / float32(spatial)
			row := dx[pl*spatial : (pl+1)*spatial]
			for i := range row {
				row[i] = v
			}
		}
	})
}
