package dicom

import (
	"fmt"
	"math/bits"
)

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

// j2kMQEntry is one state of the MQ decoder's probability estimation for
// one context, the index of Table C.2 and the MPS sense together
// (2·index + MPS): Qe, the state after an MPS and after an LPS (the
// sense switched where Table C.2 says so), and the MPS.
type j2kMQEntry struct {
	qe         uint32
	nmps, nlps uint8
	mps        uint8
}

// j2kMQStates is Table C.2 unrolled over the MPS sense, so that a
// decision reads one entry and updates one byte; 256 entries so that a
// byte indexes it without a bounds check.
var j2kMQStates = func() (t [256]j2kMQEntry) {
	for i, q := range j2kQe {
		for mps := range uint8(2) {
			t[2*i+int(mps)] = j2kMQEntry{
				qe:   q.qe,
				nmps: 2*q.nmps + mps,
				nlps: (2*q.nlps + mps) ^ q.sw,
				mps:  mps,
			}
		}
	}
	return
}()

// j2kMQ is the MQ decoder of C.3 with the register conventions of Table
// C.1: C holds Chigh in its upper 16 bits.
type j2kMQ struct {
	data []byte
	pos  int // the byte last read into C (BP)
	c, a uint32
	ct   int
	// cx is each context's state, 2·index + MPS; 32 entries so that
	// cx&31 indexes it without a bounds check.
	cx [32]uint8
}

// resetContexts sets every context to its initial state (Table D.7).
func (m *j2kMQ) resetContexts() {
	m.cx = [32]uint8{}
	m.cx[0] = 2 * 4
	m.cx[j2kCtxRL] = 2 * 3
	m.cx[j2kCtxUniform] = 2 * 46
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

// bytein is BYTEIN (C.3.4, Figure C.19) on m.c.
func (m *j2kMQ) bytein() { m.c = m.fill(m.c) }

// fill is BYTEIN on the register C given and returned: after 0xFF a
// byte above 0x8F is a marker, which feeds 1 bits without advancing.
func (m *j2kMQ) fill(c uint32) uint32 {
	if m.byteAt(m.pos) == 0xFF {
		b1 := m.byteAt(m.pos + 1)
		if b1 > 0x8F {
			m.ct = 8
			return c + 0xFF00
		}
		m.pos++
		m.ct = 7
		return c + uint32(b1)<<9
	}
	m.pos++
	m.ct = 8
	return c + uint32(m.byteAt(m.pos))<<8
}

// decode is DECODE (C.3.2, Figures C.15 to C.18) in context cx: the
// common case, an MPS that leaves A at 0x8000 or more (no exchange, no
// renormalization), here, the rest in slow.
func (m *j2kMQ) decode(cx int) int {
	s := &j2kMQStates[m.cx[cx&31]]
	a := m.a - s.qe
	if a&0x8000 != 0 && m.c >= s.qe<<16 {
		m.a = a
		m.c -= s.qe << 16
		return int(s.mps)
	}
	d, a, c := m.slow(cx&31, s, a, m.c)
	m.a, m.c = a, c
	return d
}

// slow is the rest of DECODE in context cx, in state s, after A −= Qe:
// LPS_EXCHANGE or MPS_EXCHANGE (Figures C.16, C.17), then RENORMD
// (Figure C.18). A and C are passed and returned rather than kept in m,
// so that the coding passes can keep them in registers.
func (m *j2kMQ) slow(cx int, s *j2kMQEntry, a, c uint32) (d int, _, _ uint32) {
	qe := s.qe
	if c>>16 < qe {
		// LPS_EXCHANGE
		if a < qe {
			d = int(s.mps)
			m.cx[cx] = s.nmps
		} else {
			d = 1 - int(s.mps)
			m.cx[cx] = s.nlps
		}
		a = qe
	} else {
		c -= qe << 16
		// MPS_EXCHANGE
		if a < qe {
			d = 1 - int(s.mps)
			m.cx[cx] = s.nlps
		} else {
			d = int(s.mps)
			m.cx[cx] = s.nmps
		}
	}
	// RENORMD: A doubles (and C with it) until A ≥ 0x8000, a byte read
	// whenever CT reaches 0 before a doubling. Where CT covers all the
	// doublings they are one shift.
	if n := bits.LeadingZeros32(a) - 16; n <= m.ct {
		m.ct -= n
		return d, a << n, c << n
	}
	for {
		if m.ct == 0 {
			c = m.fill(c)
		}
		a <<= 1
		c <<= 1
		m.ct--
		if a&0x8000 != 0 {
			return d, a, c
		}
	}
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

// Code-block sample state, one uint16 a sample (plus a border of zeros
// around the block): the sample's own flags and, kept up to date as
// samples become significant, the significance of its eight neighbours
// and the signs of its four horizontal and vertical ones. The contexts
// of Tables D.1 (significance), D.3 (sign) and D.4 (refinement) then
// depend on the sample's word alone, and are table lookups.
const (
	j2kNW = 1 << iota // significant neighbours
	j2kN
	j2kNE
	j2kW
	j2kE
	j2kSW
	j2kS
	j2kSE
	j2kNNeg // negative significant neighbours (sign contexts)
	j2kSNeg
	j2kWNeg
	j2kENeg
	j2kSig    // significant
	j2kNeg    // negative
	j2kVisit  // coded in this bit-plane's significance propagation pass (j2kSig<<2)
	j2kRefine // refined at least once

	j2kNbr = j2kNW | j2kN | j2kNE | j2kW | j2kE | j2kSW | j2kS | j2kSE
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

// j2kZCFlags is j2kZC indexed by a state word's eight neighbour bits.
var j2kZCFlags = func() (t [4][256]uint8) {
	for f := range 256 {
		h := f>>3&1 + f>>4&1
		v := f>>1&1 + f>>6&1
		d := f&1 + f>>2&1 + f>>5&1 + f>>7&1
		for o := range t {
			t[o][f] = j2kZC[o][h*15+v*5+d]
		}
	}
	return
}()

// j2kSC gives the sign context and XOR bit (Table D.3) by the
// horizontal and vertical contributions (−1..1), index (H+1)*3+V+1.
var j2kSC = [9]struct{ ctx, xor uint8 }{
	{13, 1}, {12, 1}, {11, 1}, // H = −1: V = −1, 0, 1
	{10, 1}, {9, 0}, {10, 0}, // H = 0
	{11, 0}, {12, 0}, {13, 0}, // H = 1
}

// j2kSCFlags is j2kSC indexed by a state word's low 12 bits (the
// neighbours' significance and signs): context<<1 | XOR bit.
var j2kSCFlags = func() (t [1 << 12]uint8) {
	contrib := func(f, sig, neg int) int {
		if f&sig == 0 {
			return 0
		}
		if f&neg != 0 {
			return -1
		}
		return 1
	}
	for f := range t {
		hc := contrib(f, j2kW, j2kWNeg) + contrib(f, j2kE, j2kENeg)
		vc := contrib(f, j2kN, j2kNNeg) + contrib(f, j2kS, j2kSNeg)
		hc, vc = max(-1, min(1, hc)), max(-1, min(1, vc))
		sc := j2kSC[(hc+1)*3+vc+1]
		t[f] = sc.ctx<<1 | sc.xor
	}
	return
}()

// j2kT1 decodes code-blocks; its buffers are reused from block to block
// (and from decode to decode, in j2kBuffers).
type j2kT1 struct {
	w, h, stride int
	// data holds the magnitudes of significant samples, with one
	// fractional bit, at the flag indexes; the sign is flags' j2kNeg.
	// Insignificant samples (whose coefficients are zero) have stale
	// entries, never read.
	data    []int32
	flags   []uint16 // (w+2)×(h+2) state words, a border of zeros around
	mq      j2kMQ
	raw     j2kRaw
	zc      *[256]uint8
	vcausal bool
}

// decode decodes code-block cb of a subband of orientation orient with
// code-block style style, leaving its coefficients in t.data and
// t.flags: sample (x, y) at index (y+1)·t.stride + x+1, zero unless
// flags has j2kSig, else of sign j2kNeg and magnitude data (one
// fractional bit): 2·|q| + 1 for a fully decoded nonzero q, the
// mid-point of the interval (E.1.1.2, r = 1/2) when bit-planes are
// missing.
func (t *j2kT1) decode(cb *j2kCblk, orient, style int) error {
	w, h := cb.x1-cb.x0, cb.y1-cb.y0
	t.w, t.h, t.stride = w, h, w+2
	nf := (w + 2) * (h + 2)
	if cap(t.flags) < nf {
		t.flags = make([]uint16, nf)
		t.data = make([]int32, nf)
	}
	t.flags = t.flags[:nf]
	t.data = t.data[:nf]
	// data needs no clearing: an entry is written when its sample
	// becomes significant, before anything reads it.
	clear(t.flags)
	t.zc = &j2kZCFlags[orient]
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
	return nil
}

// sign decodes the sign of the sample at flag index i of row y (D.3.2)
// (with the MQ registers A and C given and returned),
// its context from Table D.3 by the state word, and makes it
// significant with magnitude 1.5·2^p; the neighbours' words record it.
// With the vertically causal context (D.7) the row above a stripe's
// first row does not see it: that row is the previous stripe's last,
// whose contexts leave the row below out.
func (t *j2kT1) sign(i, y, p int, raw bool, a, c uint32) (uint32, uint32) {
	f := t.flags
	var neg uint16
	if raw {
		neg = uint16(t.raw.bit())
	} else {
		// m.decode, written out as in the passes.
		mq := &t.mq
		sc := j2kSCFlags[f[i]&(1<<12-1)]
		cx := int(sc >> 1)
		st := &j2kMQStates[mq.cx[cx&31]]
		a -= st.qe
		var bit int
		if a&0x8000 != 0 && c >= st.qe<<16 {
			c -= st.qe << 16
			bit = int(st.mps)
		} else {
			bit, a, c = mq.slow(cx&31, st, a, c)
		}
		neg = uint16(bit^int(sc&1)) & 1
	}
	s := t.stride
	_ = f[i+s+1]
	_ = f[i-s-1]
	f[i] |= j2kSig | neg*j2kNeg
	f[i-1] |= j2kE | neg*j2kENeg
	f[i+1] |= j2kW | neg*j2kWNeg
	f[i+s-1] |= j2kNE
	f[i+s] |= j2kN | neg*j2kNNeg
	f[i+s+1] |= j2kNW
	if !t.vcausal || y&3 != 0 {
		f[i-s-1] |= j2kSE
		f[i-s] |= j2kS | neg*j2kSNeg
		f[i-s+1] |= j2kSW
	}
	t.data[i] = int32(3) << p
	return a, c
}

// The coding passes below decode their most frequent decisions with
// DECODE's common case written out, A and C in locals: an MPS with no
// renormalization (C.3.2, Figure C.15 without Figures C.16 to C.18),
// which is most decisions. The rest goes to slow, A and C passed in
// registers. This is m.decode without a call (Go does not inline it)
// and without A and C going through memory, on the critical path of
// every decision.

// significance is the significance propagation pass (D.3.1).
func (t *j2kT1) significance(p int, raw bool) {
	s, flags, zc, mq := t.stride, t.flags, t.zc, &t.mq
	a, c := mq.a, mq.c
	for y0 := 0; y0 < t.h; y0 += 4 {
		y1 := min(y0+4, t.h)
		for x := 0; x < t.w; x++ {
			i := (y0+1)*s + x + 1
			if y1-y0 == 4 {
				// A stripe column with no significant
				// neighbour, or all significant, has
				// nothing to code.
				f0, f1, f2, f3 := flags[i], flags[i+s], flags[i+2*s], flags[i+3*s]
				if (f0|f1|f2|f3)&j2kNbr == 0 || f0&f1&f2&f3&j2kSig != 0 {
					continue
				}
			}
			for y := y0; y < y1; y, i = y+1, i+s {
				f := flags[i]
				// Only insignificant samples with a significant
				// neighbour are coded.
				if f&j2kSig != 0 || f&j2kNbr == 0 {
					continue
				}
				var bit int
				if raw {
					bit = t.raw.bit()
				} else {
					cx := int(zc[f&j2kNbr])
					st := &j2kMQStates[mq.cx[cx&31]]
					a -= st.qe
					if a&0x8000 != 0 && c >= st.qe<<16 {
						c -= st.qe << 16
						bit = int(st.mps)
					} else {
						bit, a, c = mq.slow(cx&31, st, a, c)
					}
				}
				if bit != 0 {
					a, c = t.sign(i, y, p, raw, a, c)
				}
				flags[i] |= j2kVisit
			}
		}
	}
	mq.a, mq.c = a, c
}

// refinement is the magnitude refinement pass (D.3.3).
func (t *j2kT1) refinement(p int, raw bool) {
	s, flags, data, mq := t.stride, t.flags, t.data, &t.mq
	a, c := mq.a, mq.c
	for y0 := 0; y0 < t.h; y0 += 4 {
		y1 := min(y0+4, t.h)
		for x := 0; x < t.w; x++ {
			i := (y0+1)*s + x + 1
			if y1-y0 == 4 && (flags[i]|flags[i+s]|flags[i+2*s]|flags[i+3*s])&j2kSig == 0 {
				continue // nothing significant to refine
			}
			for y := y0; y < y1; y, i = y+1, i+s {
				f := flags[i]
				if f&(j2kSig|j2kVisit) != j2kSig {
					continue
				}
				var bit int
				if raw {
					bit = t.raw.bit()
				} else {
					// Table D.4.
					cx := 16
					if f&j2kRefine == 0 {
						cx = 14
						if f&j2kNbr != 0 {
							cx = 15
						}
					}
					st := &j2kMQStates[mq.cx[cx&31]]
					a -= st.qe
					if a&0x8000 != 0 && c >= st.qe<<16 {
						c -= st.qe << 16
						bit = int(st.mps)
					} else {
						bit, a, c = mq.slow(cx&31, st, a, c)
					}
				}
				if bit != 0 {
					data[i] += 1 << p
				} else {
					data[i] -= 1 << p
				}
				flags[i] = f | j2kRefine
			}
		}
	}
	mq.a, mq.c = a, c
}

// cleanup is the cleanup pass with its run-length mode (D.3.4), and the
// segmentation symbol after it (D.5); it ends the bit-plane, clearing
// the samples' j2kVisit as it goes.
func (t *j2kT1) cleanup(p int, segsym bool) {
	s, flags, zc, mq := t.stride, t.flags, t.zc, &t.mq
	a, c := mq.a, mq.c
	for y0 := 0; y0 < t.h; y0 += 4 {
		y1 := min(y0+4, t.h)
		for x := 0; x < t.w; x++ {
			i := (y0+1)*s + x + 1
			y := y0
			if y1-y0 == 4 {
				f0, f1, f2, f3 := flags[i], flags[i+s], flags[i+2*s], flags[i+3*s]
				// j2kVisit is j2kSig<<2: a column whose samples
				// are all significant or coded has nothing to
				// code.
				if (f0|f0>>2)&(f1|f1>>2)&(f2|f2>>2)&(f3|f3>>2)&j2kSig != 0 {
					flags[i], flags[i+s], flags[i+2*s], flags[i+3*s] = f0&^j2kVisit, f1&^j2kVisit, f2&^j2kVisit, f3&^j2kVisit
					continue
				}
				// Run-length mode: a full stripe column of
				// samples insignificant, not yet coded and with
				// no significant neighbour.
				if (f0|f1|f2|f3)&(j2kSig|j2kVisit|j2kNbr) == 0 {
					st := &j2kMQStates[mq.cx[j2kCtxRL]]
					a -= st.qe
					var bit int
					if a&0x8000 != 0 && c >= st.qe<<16 {
						c -= st.qe << 16
						bit = int(st.mps)
					} else {
						bit, a, c = mq.slow(j2kCtxRL, st, a, c)
					}
					if bit == 0 {
						continue
					}
					mq.a, mq.c = a, c
					r := mq.decode(j2kCtxUniform) << 1
					r |= mq.decode(j2kCtxUniform)
					y += r
					i += r * s
					a, c = mq.a, mq.c
					a, c = t.sign(i, y, p, false, a, c)
					y, i = y+1, i+s
				}
			}
			for ; y < y1; y, i = y+1, i+s {
				f := flags[i]
				if f&(j2kSig|j2kVisit) != 0 {
					flags[i] = f &^ j2kVisit
					continue
				}
				cx := int(zc[f&j2kNbr])
				st := &j2kMQStates[mq.cx[cx&31]]
				a -= st.qe
				var bit int
				if a&0x8000 != 0 && c >= st.qe<<16 {
					c -= st.qe << 16
					bit = int(st.mps)
				} else {
					bit, a, c = mq.slow(cx&31, st, a, c)
				}
				if bit != 0 {
					a, c = t.sign(i, y, p, false, a, c)
				}
			}
		}
	}
	mq.a, mq.c = a, c
	if segsym {
		for range 4 {
			mq.decode(j2kCtxUniform)
		}
	}
}
