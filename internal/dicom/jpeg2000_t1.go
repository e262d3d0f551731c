package dicom

import "fmt"

// Tier-1 of JPEG 2000 (T.800 Annexes C and D): the MQ arithmetic decoder
// and the three coding passes over a code-block's bit-planes.

// j2kQe is the probability estimation table of C.2.6, Table C.2: Qe, the
// next state after an MPS and after an LPS, and whether an LPS switches
// the MPS sense.
var j2kQe = [47]struct {
	qe         uint32
	nmps, nlps uint8
	sw         uint8
}{
	{0x5601, 1, 1, 1}, {0x3401, 2, 6, 0}, {0x1801, 3, 9, 0}, {0x0AC1, 4, 12, 0},
	{0x0521, 5, 29, 0}, {0x0221, 38, 33, 0}, {0x5601, 7, 6, 1}, {0x5401, 8, 14, 0},
	{0x4801, 9, 14, 0}, {0x3801, 10, 14, 0}, {0x3001, 11, 17, 0}, {0x2401, 12, 18, 0},
	{0x1C01, 13, 20, 0}, {0x1601, 29, 21, 0}, {0x5601, 15, 14, 1}, {0x5401, 16, 14, 0},
	{0x5101, 17, 15, 0}, {0x4801, 18, 16, 0}, {0x3801, 19, 17, 0}, {0x3401, 20, 18, 0},
	{0x3001, 21, 19, 0}, {0x2801, 22, 19, 0}, {0x2401, 23, 20, 0}, {0x2201, 24, 21, 0},
	{0x1C01, 25, 22, 0}, {0x1801, 26, 23, 0}, {0x1601, 27, 24, 0}, {0x1401, 28, 25, 0},
	{0x1201, 29, 26, 0}, {0x1101, 30, 27, 0}, {0x0AC1, 31, 28, 0}, {0x09C1, 32, 29, 0},
	{0x08A1, 33, 30, 0}, {0x0521, 34, 31, 0}, {0x0441, 35, 32, 0}, {0x02A1, 36, 33, 0},
	{0x0221, 37, 34, 0}, {0x0141, 38, 35, 0}, {0x0111, 39, 36, 0}, {0x0085, 40, 37, 0},
	{0x0049, 41, 38, 0}, {0x0025, 42, 39, 0}, {0x0015, 43, 40, 0}, {0x0009, 44, 41, 0},
	{0x0005, 45, 42, 0}, {0x0001, 45, 43, 0}, {0x5601, 46, 46, 0},
}

// Context labels (D.3, Table D.7): 0..8 significance, 9..13 sign, 14..16
// magnitude refinement, then run-length and uniform.
const (
	j2kCtxRL      = 17
	j2kCtxUniform = 18
	j2kContexts   = 19
)

// j2kMQ is the MQ decoder of C.3 with the register conventions of Table
// C.1: C holds Chigh in its upper 16 bits.
type j2kMQ struct {
	data []byte
	pos  int // the byte last read into C (BP)
	c, a uint32
	ct   int
	idx  [j2kContexts]uint8
	mps  [j2kContexts]uint8
}

// resetContexts sets every context to its initial state (Table D.7).
func (m *j2kMQ) resetContexts() {
	m.idx = [j2kContexts]uint8{}
	m.mps = [j2kContexts]uint8{}
	m.idx[0] = 4
	m.idx[j2kCtxRL] = 3
	m.idx[j2kCtxUniform] = 46
}

// byteAt returns byte i of the segment; past its end the decoder sees
// 0xFF 0xFF, a marker, as after a terminated segment in a codestream.
func (m *j2kMQ) byteAt(i int) byte {
	if i < len(m.data) {
		return m.data[i]
	}
	return 0xFF
}

// init is INITDEC (C.3.5, Figure C.20).
func (m *j2kMQ) init(data []byte) {
	m.data, m.pos = data, 0
	m.c = uint32(m.byteAt(0)) << 16
	m.bytein()
	m.c <<= 7
	m.ct -= 7
	m.a = 0x8000
}

// bytein is BYTEIN (C.3.4, Figure C.19): after 0xFF a byte above 0x8F is
// a marker, which feeds 1 bits without advancing.
func (m *j2kMQ) bytein() {
	if m.byteAt(m.pos) == 0xFF {
		if b1 := m.byteAt(m.pos + 1); b1 > 0x8F {
			m.c += 0xFF00
			m.ct = 8
		} else {
			m.pos++
			m.c += uint32(b1) << 9
			m.ct = 7
		}
		return
	}
	m.pos++
	m.c += uint32(m.byteAt(m.pos)) << 8
	m.ct = 8
}

// decode is DECODE (C.3.2, Figures C.15 to C.18) in context cx.
func (m *j2kMQ) decode(cx int) int {
	s := &j2kQe[m.idx[cx]]
	qe := s.qe
	m.a -= qe
	var d int
	if m.c>>16 < qe {
		// LPS_EXCHANGE
		if m.a < qe {
			d = int(m.mps[cx])
			m.idx[cx] = s.nmps
		} else {
			d = 1 - int(m.mps[cx])
			m.mps[cx] ^= s.sw
			m.idx[cx] = s.nlps
		}
		m.a = qe
	} else {
		m.c -= qe << 16
		if m.a&0x8000 != 0 {
			return int(m.mps[cx])
		}
		// MPS_EXCHANGE
		if m.a < qe {
			d = 1 - int(m.mps[cx])
			m.mps[cx] ^= s.sw
			m.idx[cx] = s.nlps
		} else {
			d = int(m.mps[cx])
			m.idx[cx] = s.nmps
		}
	}
	// RENORMD (Figure C.18)
	for {
		if m.ct == 0 {
			m.bytein()
		}
		m.a <<= 1
		m.c <<= 1
		m.ct--
		if m.a&0x8000 != 0 {
			break
		}
	}
	return d
}

// j2kRaw reads the raw (bypassed) passes of D.6: bits MSB first, where a
// byte after 0xFF carries 7 bits. Past the end it reads 0xFF bytes.
type j2kRaw struct {
	data []byte
	pos  int
	c    byte
	ct   uint
}

func (r *j2kRaw) init(data []byte) { r.data, r.pos, r.c, r.ct = data, 0, 0, 0 }

func (r *j2kRaw) bit() int {
	if r.ct == 0 {
		b := byte(0xFF)
		if r.pos < len(r.data) {
			b = r.data[r.pos]
			r.pos++
		}
		r.ct = 8
		if r.c == 0xFF {
			r.ct = 7
		}
		r.c = b
	}
	r.ct--
	return int(r.c>>r.ct) & 1
}

// Code-block sample state flags.
const (
	j2kSig    = 1 // significant
	j2kNeg    = 2 // negative
	j2kVisit  = 4 // coded in this bit-plane's significance propagation pass
	j2kRefine = 8 // refined at least once
)

// j2kZC gives the significance context (Table D.1) by orientation and
// the counts of significant horizontal (0..2), vertical (0..2) and
// diagonal (0..4) neighbours: index h*15+v*5+d.
var j2kZC = func() (t [4][45]uint8) {
	for h := 0; h <= 2; h++ {
		for v := 0; v <= 2; v++ {
			for d := 0; d <= 4; d++ {
				i := h*15 + v*5 + d
				t[j2kLL][i] = j2kZCLL(h, v, d)
				t[j2kLH][i] = t[j2kLL][i]
				t[j2kHL][i] = j2kZCLL(v, h, d)
				var c uint8
				hv := h + v
				switch {
				case d >= 3:
					c = 8
				case d == 2 && hv >= 1:
					c = 7
				case d == 2:
					c = 6
				case d == 1 && hv >= 2:
					c = 5
				case d == 1 && hv == 1:
					c = 4
				case d == 1:
					c = 3
				case hv >= 2:
					c = 2
				case hv == 1:
					c = 1
				}
				t[j2kHH][i] = c
			}
		}
	}
	return
}()

// j2kZCLL is Table D.1's column for the LL and LH subbands.
func j2kZCLL(h, v, d int) uint8 {
	switch {
	case h == 2:
		return 8
	case h == 1 && v >= 1:
		return 7
	case h == 1 && d >= 1:
		return 6
	case h == 1:
		return 5
	case v == 2:
		return 4
	case v == 1:
		return 3
	case d >= 2:
		return 2
	case d == 1:
		return 1
	}
	return 0
}

// j2kSC gives the sign context and XOR bit (Table D.3) by the
// horizontal and vertical contributions (−1..1), index (H+1)*3+V+1.
var j2kSC = [9]struct{ ctx, xor uint8 }{
	{13, 1}, {12, 1}, {11, 1}, // H = −1: V = −1, 0, 1
	{10, 1}, {9, 0}, {10, 0}, // H = 0
	{11, 0}, {12, 0}, {13, 0}, // H = 1
}

// j2kT1 decodes code-blocks; its buffers are reused from block to block.
type j2kT1 struct {
	w, h, stride int
	data         []int32 // magnitudes with one fractional bit, then signed
	flags        []uint8 // (w+2)×(h+2), a border of zeros around
	mq           j2kMQ
	raw          j2kRaw
	zc           *[45]uint8
	vcausal      bool
}

// decode decodes code-block cb of a subband of orientation orient with
// code-block style style, leaving its coefficients in t.data (row-major,
// cb's width): signed, with one fractional bit: 2·|q| + 1 for a fully
// decoded nonzero q, the mid-point of the interval (E.1.1.2, r = 1/2)
// when bit-planes are missing.
func (t *j2kT1) decode(cb *j2kCblk, orient, style int) error {
	w, h := cb.x1-cb.x0, cb.y1-cb.y0
	t.w, t.h, t.stride = w, h, w+2
	n := w * h
	if cap(t.data) < n {
		t.data = make([]int32, n)
	}
	t.data = t.data[:n]
	clear(t.data)
	nf := (w + 2) * (h + 2)
	if cap(t.flags) < nf {
		t.flags = make([]uint8, nf)
	}
	t.flags = t.flags[:nf]
	clear(t.flags)
	t.zc = &j2kZC[orient]
	t.vcausal = style&j2kVCausal != 0
	t.mq.resetContexts()
	p := cb.numbps - 1
	ptype := 2 // the first pass is a cleanup pass (D.3)
	k := 0
	for _, sg := range cb.segs {
		seg := cb.data[sg.start:sg.end]
		raw := style&j2kBypass != 0 && k >= 10 && ptype != 2
		if raw {
			t.raw.init(seg)
		} else {
			t.mq.init(seg)
		}
		for j := 0; j < sg.passes; j++ {
			if p < 0 {
				return fmt.Errorf("coding pass %d below bit-plane 0", k)
			}
			switch ptype {
			case 0:
				t.significance(p, raw)
			case 1:
				t.refinement(p, raw)
			case 2:
				t.cleanup(p, style&j2kSegSym != 0)
			}
			if style&j2kReset != 0 {
				t.mq.resetContexts()
			}
			ptype++
			if ptype == 3 {
				ptype = 0
			}
			if ptype == 0 {
				p--
			}
			k++
		}
	}
	for y := 0; y < h; y++ {
		row := t.data[y*w : (y+1)*w]
		fr := t.flags[(y+1)*t.stride+1:]
		for x := range row {
			if fr[x]&j2kNeg != 0 {
				row[x] = -row[x]
			}
		}
	}
	return nil
}

// neighbours counts the significant horizontal, vertical and diagonal
// neighbours of flag index i in row y; with the vertically causal
// context the row below a stripe's last row counts as insignificant
// (D.7).
func (t *j2kT1) neighbours(i, y int) (h, v, d int) {
	f, s := t.flags, t.stride
	h = int(f[i-1]&j2kSig + f[i+1]&j2kSig)
	v = int(f[i-s] & j2kSig)
	d = int(f[i-s-1]&j2kSig + f[i-s+1]&j2kSig)
	if !t.vcausal || y&3 != 3 {
		v += int(f[i+s] & j2kSig)
		d += int(f[i+s-1]&j2kSig + f[i+s+1]&j2kSig)
	}
	return
}

// sign decodes the sign of the sample at flag index i (D.3.2) and makes
// it significant with magnitude 1.5·2^p.
func (t *j2kT1) sign(i, y, x, p int, raw bool) {
	f, s := t.flags, t.stride
	contrib := func(g uint8) int {
		if g&j2kSig == 0 {
			return 0
		}
		if g&j2kNeg != 0 {
			return -1
		}
		return 1
	}
	hc := contrib(f[i-1]) + contrib(f[i+1])
	vc := contrib(f[i-s])
	if !t.vcausal || y&3 != 3 {
		vc += contrib(f[i+s])
	}
	hc, vc = max(-1, min(1, hc)), max(-1, min(1, vc))
	var bit int
	if raw {
		bit = t.raw.bit()
	} else {
		sc := j2kSC[(hc+1)*3+vc+1]
		bit = t.mq.decode(int(sc.ctx)) ^ int(sc.xor)
	}
	f[i] |= j2kSig
	if bit != 0 {
		f[i] |= j2kNeg
	}
	t.data[y*t.w+x] = int32(3) << p
}

// significance is the significance propagation pass (D.3.1).
func (t *j2kT1) significance(p int, raw bool) {
	for y0 := 0; y0 < t.h; y0 += 4 {
		y1 := min(y0+4, t.h)
		for x := 0; x < t.w; x++ {
			for y := y0; y < y1; y++ {
				i := (y+1)*t.stride + x + 1
				if t.flags[i]&j2kSig != 0 {
					continue
				}
				h, v, d := t.neighbours(i, y)
				if h+v+d == 0 {
					continue
				}
				var bit int
				if raw {
					bit = t.raw.bit()
				} else {
					bit = t.mq.decode(int(t.zc[h*15+v*5+d]))
				}
				if bit != 0 {
					t.sign(i, y, x, p, raw)
				}
				t.flags[i] |= j2kVisit
			}
		}
	}
}

// refinement is the magnitude refinement pass (D.3.3).
func (t *j2kT1) refinement(p int, raw bool) {
	for y0 := 0; y0 < t.h; y0 += 4 {
		y1 := min(y0+4, t.h)
		for x := 0; x < t.w; x++ {
			for y := y0; y < y1; y++ {
				i := (y+1)*t.stride + x + 1
				f := t.flags[i]
				if f&(j2kSig|j2kVisit) != j2kSig {
					continue
				}
				var bit int
				if raw {
					bit = t.raw.bit()
				} else {
					ctx := 16
					if f&j2kRefine == 0 {
						h, v, d := t.neighbours(i, y)
						ctx = 14
						if h+v+d > 0 {
							ctx = 15
						}
					}
					bit = t.mq.decode(ctx)
				}
				if bit != 0 {
					t.data[y*t.w+x] += 1 << p
				} else {
					t.data[y*t.w+x] -= 1 << p
				}
				t.flags[i] = f | j2kRefine
			}
		}
	}
}

// cleanup is the cleanup pass with its run-length mode (D.3.4), and the
// segmentation symbol after it (D.5); it ends the bit-plane.
func (t *j2kT1) cleanup(p int, segsym bool) {
	s := t.stride
	for y0 := 0; y0 < t.h; y0 += 4 {
		y1 := min(y0+4, t.h)
		for x := 0; x < t.w; x++ {
			y := y0
			if y1-y0 == 4 {
				run := true
				for yy := y0; yy < y1 && run; yy++ {
					i := (yy+1)*s + x + 1
					if t.flags[i]&(j2kSig|j2kVisit) != 0 {
						run = false
						break
					}
					if h, v, d := t.neighbours(i, yy); h+v+d != 0 {
						run = false
					}
				}
				if run {
					if t.mq.decode(j2kCtxRL) == 0 {
						continue
					}
					r := t.mq.decode(j2kCtxUniform) << 1
					r |= t.mq.decode(j2kCtxUniform)
					y = y0 + r
					t.sign((y+1)*s+x+1, y, x, p, false)
					y++
				}
			}
			for ; y < y1; y++ {
				i := (y+1)*s + x + 1
				if t.flags[i]&(j2kSig|j2kVisit) != 0 {
					continue
				}
				h, v, d := t.neighbours(i, y)
				if t.mq.decode(int(t.zc[h*15+v*5+d])) != 0 {
					t.sign(i, y, x, p, false)
				}
			}
		}
	}
	for i := range t.flags {
		t.flags[i] &^= j2kVisit
	}
	if segsym {
		for range 4 {
			t.mq.decode(j2kCtxUniform)
		}
	}
}
