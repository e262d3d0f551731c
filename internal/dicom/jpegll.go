package dicom

import (
	"encoding/binary"
	"fmt"
)

// This file decodes JPEG lossless, ITU-T T.81 process 14: the
// sequential, Huffman-coded, predictive mode of Annex H that DICOM stores
// under transfer syntaxes 1.2.840.10008.1.2.4.57 (any predictor) and
// 1.2.840.10008.1.2.4.70 (predictor 1, "selection value 1").
//
// Truncated entropy-coded data is an error, as T.81 F.2.2.5 (Figure F.18)
// makes it an error to meet a marker where the decoder still needs bits
// (libjpeg instead supplies zero bits and warns). This decoder shifts in zero bits past the
// end only so that it can look ahead freely, and fails the scan as soon
// as one of them would be consumed as part of a code or of its extra
// bits. A stream cut anywhere therefore never decodes silently.

// JPEG marker codes (T.81 Table B.1) that the decoder acts on.
const (
	jpegSOF0  = 0xC0
	jpegSOF3  = 0xC3
	jpegDHT   = 0xC4
	jpegSOF15 = 0xCF
	jpegRST0  = 0xD0
	jpegRST7  = 0xD7
	jpegSOI   = 0xD8
	jpegEOI   = 0xD9
	jpegSOS   = 0xDA
	jpegDRI   = 0xDD
	jpegTEM   = 0x01
	jpegSOF55 = 0xF7 // JPEG-LS (ITU-T T.87), transfer syntaxes .80 and .81
)

// jpegSOFNames says, for each start-of-frame marker that is not SOF3,
// which process it starts, so that a refusal names what the file is.
var jpegSOFNames = map[byte]string{
	0xC0: "baseline",
	0xC1: "extended sequential",
	0xC2: "progressive",
	0xC5: "differential sequential",
	0xC6: "differential progressive",
	0xC7: "differential lossless",
	0xC9: "extended sequential, arithmetic-coded",
	0xCA: "progressive, arithmetic-coded",
	0xCB: "lossless, arithmetic-coded",
	0xCD: "differential sequential, arithmetic-coded",
	0xCE: "differential progressive, arithmetic-coded",
	0xCF: "differential lossless, arithmetic-coded",
}

// jpegFastBits is the width of the direct Huffman lookup. Lossless
// tables have at most 17 symbols, and a table optimised for an image
// (T.81 K.2) gives the frequent difference categories codes of a few
// bits, so nine bits resolve nearly every code in one load; longer codes
// take the canonical search of F.2.2.3.
const jpegFastBits = 9

// jpegHuffman is one DC-class Huffman table (T.81 B.2.4.2, Annex C) in
// the two forms the decoder reads it in.
type jpegHuffman struct {
	// fast maps the next jpegFastBits bits of the stream to
	// length<<8 | symbol for every code of at most jpegFastBits bits;
	// 0 means that no such code is a prefix of those bits (no code has
	// length 0, so 0 is free to mean that).
	fast [1 << jpegFastBits]uint16
	// mincode, maxcode and valptr are MINCODE, MAXCODE and VALPTR of
	// T.81 F.2.2.3 (Figure F.15), indexed by code length 1..16; maxcode
	// is -1 where no code has that length.
	mincode [17]int32
	maxcode [17]int32
	valptr  [17]int32
	vals    [256]uint8
	defined bool
}

// build fills h from the BITS counts and HUFFVAL symbols of a DHT
// segment. It generates the canonical codes of T.81 Annex C (Figures C.1
// to C.3) and refuses a table whose codes overflow their lengths, that is
// whose counts violate the Kraft inequality: such a table describes no
// prefix code, and its "codes" would alias one another. (T.81 reserves
// the all-ones code of each length; some encoders use it anyway, and it
// decodes unambiguously, so it is accepted.)
func (h *jpegHuffman) build(counts *[16]uint8, vals []uint8) error {
	*h = jpegHuffman{}
	copy(h.vals[:], vals)
	code := int32(0)
	k := int32(0)
	for l := 1; l <= 16; l++ {
		n := int32(counts[l-1])
		if n == 0 {
			h.maxcode[l] = -1
		} else {
			if code+n > 1<<l {
				return fmt.Errorf("%d codes of length %d do not fit after the shorter ones", n, l)
			}
			h.valptr[l] = k
			h.mincode[l] = code
			h.maxcode[l] = code + n - 1
			if l <= jpegFastBits {
				// A code of l bits owns every fast index whose
				// top l bits are the code.
				shift := uint(jpegFastBits - l)
				for i := int32(0); i < n; i++ {
					e := uint16(l)<<8 | uint16(vals[k+i])
					lo := (code + i) << shift
					for j := lo; j < lo+1<<shift; j++ {
						h.fast[j] = e
					}
				}
			}
			k += n
			code += n
		}
		code <<= 1
	}
	h.defined = true
	return nil
}

// jpegBits reads the entropy-coded segment of a scan MSB first (T.81
// F.2.2.5, Figure F.18). It keeps up to 64 bits in acc, left-aligned, and
// refills it a byte at a time, turning each stuffed 0xFF 0x00 back into
// 0xFF (B.1.1.5) and stopping at the first 0xFF that is not followed by
// 0x00: that is a marker (or a fill byte before one), which ends the
// segment. Past the segment it shifts in zero bytes and counts them in
// pad, so that consumers may peek freely; overrun tells whether any of
// them has actually been consumed.
type jpegBits struct {
	data     []byte
	pos      int    // next byte of data to read
	acc      uint64 // buffered bits; the next one is bit 63
	n        uint   // number of buffered bits, real and padding
	pad      int    // zero bytes appended after the segment ended
	atMarker bool   // pos is at the 0xFF of a marker, or at the end of data
	err      error  // first invalid code met; sticky
}

// reset starts reading a new entropy-coded segment at pos, as the
// decoder does at the start of a scan and after each restart marker
// (T.81 E.2.3, E.2.4: each entropy-coded segment starts byte-aligned).
func (b *jpegBits) reset(pos int) {
	b.pos = pos
	b.acc, b.n, b.pad, b.atMarker = 0, 0, 0, false
}

// fill tops the buffer up to at least 57 bits, which is enough for one
// difference: a code of at most 16 bits and at most 15 extra bits.
func (b *jpegBits) fill() {
	for b.n <= 56 {
		var c byte
		if !b.atMarker {
			if b.pos >= len(b.data) {
				b.atMarker = true
				continue
			}
			c = b.data[b.pos]
			if c == 0xFF {
				if b.pos+1 >= len(b.data) || b.data[b.pos+1] != 0 {
					b.atMarker = true
					continue
				}
				b.pos += 2
			} else {
				b.pos++
			}
		} else {
			b.pad++
		}
		b.acc |= uint64(c) << (56 - b.n)
		b.n += 8
	}
}

// overrun reports whether bits beyond the end of the entropy-coded
// segment have been consumed. The padding bytes are always the last ones
// shifted in, so they are the low pad*8 of the n buffered bits; once n
// has fallen below that, a padding bit has been used. The condition stays
// true afterwards because fill adds padding only together with n.
func (b *jpegBits) overrun() bool {
	return int(b.n) < b.pad*8
}

// leftover is the number of real, not yet consumed bits in the buffer.
func (b *jpegBits) leftover() int {
	return int(b.n) - b.pad*8
}

// diff decodes one difference (T.81 H.1.2.2, F.2.2.1): a Huffman-coded
// category SSSS followed by SSSS extra bits, except category 16, which
// is the difference 32768 alone. An invalid code or a category above 16
// records b.err and yields 0; the caller checks b.err once a row, which
// bounds the work done on a corrupt row to that row.
func (b *jpegBits) diff(h *jpegHuffman) int {
	if b.n < 32 {
		b.fill()
	}
	var l, s uint
	if e := h.fast[b.acc>>(64-jpegFastBits)]; e != 0 {
		l, s = uint(e>>8), uint(e&0xFF)
	} else {
		// F.2.2.3 (Figure F.16), starting past the lengths that the
		// fast table already ruled out. The mincode test is what makes
		// an incomplete table safe: bits that are no code at all fall
		// through to the error instead of indexing a neighbour's value.
		peek := int32(b.acc >> 48)
		for l = jpegFastBits + 1; l <= 16; l++ {
			c := peek >> (16 - l)
			if c <= h.maxcode[l] && c >= h.mincode[l] {
				s = uint(h.vals[h.valptr[l]+c-h.mincode[l]])
				break
			}
		}
		if l > 16 {
			if b.err == nil {
				b.err = fmt.Errorf("invalid Huffman code before offset %d", b.pos)
			}
			return 0
		}
	}
	b.acc <<= l
	b.n -= l
	switch {
	case s == 0:
		return 0
	case s == 16:
		return 32768
	case s > 16:
		if b.err == nil {
			b.err = fmt.Errorf("difference category %d (above 16) before offset %d", s, b.pos)
		}
		return 0
	}
	v := int(b.acc >> (64 - s))
	b.acc <<= s
	b.n -= s
	// EXTEND (F.2.2.1, Figure F.12): the extra bits of a negative
	// difference are its ones' complement, so values below 2^(s-1) map
	// to v - (2^s - 1).
	if v < 1<<(s-1) {
		v -= 1<<s - 1
	}
	return v
}

// jpegComponent is one frame component (T.81 B.2.2).
type jpegComponent struct {
	id      byte
	pt      int  // point transform of the scan that coded it
	decoded bool // a scan has coded it (each may be coded only once)
}

// jpegLossless is the state of one decode.
type jpegLossless struct {
	data       []byte
	maxSamples int
	frame      bool
	width      int
	height     int
	precision  int
	comps      []jpegComponent
	pix        []uint16
	tables     [4]jpegHuffman
	restart    int // restart interval Ri in MCUs (T.81 B.2.4.4); 0: none
	bits       jpegBits
}

// decodeJPEGLossless decodes one JPEG lossless (T.81 process 14) frame:
// the byte stream of one DICOM frame in transfer syntax .57 or .70, from
// SOI to EOI. Interleaved scans of several components and non-interleaved
// scans (one per component) are both read; every component must have
// sampling factors 1×1, the only ones DICOM uses for lossless JPEG.
//
// It returns the samples pixel-major, components interleaved (pixel 0's
// components, then pixel 1's, ...), each the decoded unsigned value of the
// frame's precision (2..16 bits), shifted left by the point transform as
// T.81 H.2.1 says the decoder's output is. Reconstruction is modulo 2^16
// (H.2.1), so a stream whose data exceed its declared precision yields
// the same 16-bit values its encoder computed.
// maxSamples bounds width*height*components before anything of that size
// is allocated.
//
// Errors name the marker or the byte offset at which the stream is wrong.
// Truncated entropy-coded data is an error (see the top of this file), and
// so is a stream without EOI.
func decodeJPEGLossless(data []byte, maxSamples int) (pix []uint16, width, height, components, precision int, err error) {
	d := &jpegLossless{data: data, maxSamples: maxSamples}
	if err := d.decode(); err != nil {
		return nil, 0, 0, 0, 0, fmt.Errorf("jpeg lossless: %w", err)
	}
	return d.pix, d.width, d.height, len(d.comps), d.precision, nil
}

// decode walks the marker segments of T.81 B.2 (Figure B.2): SOI, then
// table and miscellaneous segments, the frame header, scans, and EOI.
func (d *jpegLossless) decode() error {
	return jpegWalk(d.data, func(m byte, at int, seg []byte, pos int) (int, error) {
		switch {
		case m == jpegSOF3:
			if err := d.readFrame(seg); err != nil {
				return 0, fmt.Errorf("SOF3 at offset %d: %w", at, err)
			}
		case m >= jpegSOF0 && m <= jpegSOF15 && jpegSOFNames[m] != "":
			name := jpegSOFNames[m]
			if m == 0xC7 || m == 0xCB || m == 0xCF {
				return 0, fmt.Errorf("JPEG SOF%d (%s) is not supported, only SOF3 (process 14) is (marker at offset %d)", m-jpegSOF0, name, at)
			}
			return 0, fmt.Errorf("JPEG SOF%d (%s) is not lossless (marker at offset %d)", m-jpegSOF0, name, at)
		case m == jpegSOF55:
			return 0, fmt.Errorf("JPEG-LS SOF55 is not JPEG lossless (T.81) (marker at offset %d)", at)
		case m == jpegDHT:
			if err := d.readDHT(seg); err != nil {
				return 0, fmt.Errorf("DHT at offset %d: %w", at, err)
			}
		case m == jpegDRI:
			if len(seg) != 2 {
				return 0, fmt.Errorf("DRI at offset %d: length %d, want 4", at, len(seg)+2)
			}
			d.restart = int(binary.BigEndian.Uint16(seg))
		case m == jpegSOS:
			next, err := d.readScan(seg, pos)
			if err != nil {
				return 0, fmt.Errorf("scan at offset %d: %w", at, err)
			}
			return next, nil
		default:
			// APPn, COM, DQT, DAC, DNL, EXP and reserved segments carry
			// nothing a lossless decode needs; their length skips them.
		}
		return pos, nil
	}, d.finish)
}

// jpegWalk walks the marker segments of a JPEG or JPEG-LS stream from its
// SOI (T.81 B.1.1, which T.87 C.1 applies): each segment with a length
// goes to seg with its marker code, the offset of its marker, its data
// and the offset past it, and seg returns the offset to go on from (past
// a scan's entropy-coded data for SOS); EOI goes to eoi with its offset.
// Fill bytes before a marker are skipped, markers without a length (RSTn,
// TEM) outside a scan carry nothing, and a stream that ends before EOI is
// an error.
func jpegWalk(data []byte, seg func(m byte, at int, body []byte, pos int) (int, error), eoi func(at int) error) error {
	if len(data) < 2 || data[0] != 0xFF || data[1] != jpegSOI {
		return fmt.Errorf("no SOI marker at offset 0")
	}
	pos := 2
	for {
		// B.1.1.2: a marker is 0xFF and a code; any number of 0xFF fill
		// bytes may precede it.
		if pos >= len(data) {
			return fmt.Errorf("data end at offset %d before EOI", pos)
		}
		if data[pos] != 0xFF {
			return fmt.Errorf("expected a marker at offset %d, found byte 0x%02X", pos, data[pos])
		}
		for pos < len(data) && data[pos] == 0xFF {
			pos++
		}
		if pos >= len(data) {
			return fmt.Errorf("data end at offset %d before EOI", pos)
		}
		m := data[pos]
		at := pos - 1
		pos++
		switch {
		case m == jpegEOI:
			return eoi(at)
		case m == jpegSOI:
			return fmt.Errorf("second SOI at offset %d", at)
		case m == 0x00:
			return fmt.Errorf("invalid marker 0xFF00 at offset %d", at)
		case m == jpegTEM || (m >= jpegRST0 && m <= jpegRST7):
			// Markers without a length segment (B.1.1.3); a restart
			// marker outside entropy-coded data carries nothing.
			continue
		}
		if len(data)-pos < 2 {
			return fmt.Errorf("marker 0x%02X at offset %d: truncated length", m, at)
		}
		n := int(binary.BigEndian.Uint16(data[pos:]))
		if n < 2 {
			return fmt.Errorf("marker 0x%02X at offset %d: length %d is below 2", m, at, n)
		}
		if n > len(data)-pos {
			return fmt.Errorf("marker 0x%02X at offset %d: length %d exceeds the %d bytes left", m, at, n, len(data)-pos)
		}
		next, err := seg(m, at, data[pos+2:pos+n], pos+n)
		if err != nil {
			return err
		}
		pos = next
	}
}

// readFrame parses a frame header (T.81 B.2.2) and checks its size
// against maxSamples; the first scan allocates the samples.
func (d *jpegLossless) readFrame(seg []byte) error {
	if d.frame {
		return fmt.Errorf("second frame header")
	}
	p, h, w, ids, err := jpegFrameHeader(seg, d.maxSamples)
	if err != nil {
		return err
	}
	d.comps = make([]jpegComponent, len(ids))
	for i, id := range ids {
		d.comps[i].id = id
	}
	d.frame = true
	d.width, d.height, d.precision = w, h, p
	return nil
}

// jpegFrameHeader parses a frame header as T.81 B.2.2 and T.87 C.2.2
// write it — precision, height, width, and each component's id, sampling
// factors and table selector — and checks what both decoders read: a
// precision of 2..16, a size (DNL's later height, or JPEG-LS's LSE id 4
// width, are not), 1..4 distinct components of 1×1 sampling, and at most
// maxSamples samples, before the caller allocates them.
func jpegFrameHeader(seg []byte, maxSamples int) (p, h, w int, ids []byte, err error) {
	if len(seg) < 6 {
		return 0, 0, 0, nil, fmt.Errorf("header of %d bytes, want at least 6", len(seg))
	}
	p = int(seg[0])
	h = int(binary.BigEndian.Uint16(seg[1:]))
	w = int(binary.BigEndian.Uint16(seg[3:]))
	nf := int(seg[5])
	switch {
	case p < 2 || p > 16:
		return 0, 0, 0, nil, fmt.Errorf("precision %d outside 2..16", p)
	case h == 0:
		return 0, 0, 0, nil, fmt.Errorf("height 0 (defined later by a DNL marker) is not supported")
	case w == 0:
		return 0, 0, 0, nil, fmt.Errorf("width 0 (defined by a JPEG-LS LSE id 4 segment) is not supported")
	case nf < 1 || nf > 4:
		return 0, 0, 0, nil, fmt.Errorf("%d components, want 1..4", nf)
	case len(seg) != 6+3*nf:
		return 0, 0, 0, nil, fmt.Errorf("header of %d bytes for %d components, want %d", len(seg), nf, 6+3*nf)
	}
	// At most 65535·65535·4 < 2^35: exact in uint64 on every platform.
	if n := uint64(w) * uint64(h) * uint64(nf); maxSamples < 0 || n > uint64(maxSamples) {
		return 0, 0, 0, nil, fmt.Errorf("%d×%d×%d samples exceed the limit of %d", w, h, nf, maxSamples)
	}
	ids = make([]byte, nf)
	for i := range nf {
		c := seg[6+3*i:]
		for j := range i {
			if ids[j] == c[0] {
				return 0, 0, 0, nil, fmt.Errorf("component id %d appears twice", c[0])
			}
		}
		if c[1] != 0x11 {
			return 0, 0, 0, nil, fmt.Errorf("component %d has sampling factors %d×%d; only 1×1 is supported", c[0], c[1]>>4, c[1]&15)
		}
		ids[i] = c[0]
	}
	return p, h, w, ids, nil
}

// readDHT parses a DHT segment (T.81 B.2.4.2), which may define several
// tables. Only class 0 (DC, which lossless uses for differences, H.1.2.2)
// tables are kept; class 1 tables are checked and dropped.
func (d *jpegLossless) readDHT(seg []byte) error {
	for len(seg) > 0 {
		if len(seg) < 17 {
			return fmt.Errorf("table header of %d bytes, want 17", len(seg))
		}
		tc, th := seg[0]>>4, seg[0]&15
		if tc > 1 || th > 3 {
			return fmt.Errorf("table class %d, destination %d", tc, th)
		}
		var counts [16]uint8
		copy(counts[:], seg[1:17])
		total := 0
		for _, c := range counts {
			total += int(c)
		}
		if total > 256 {
			return fmt.Errorf("table %d/%d has %d codes, more than 256", tc, th, total)
		}
		if len(seg) < 17+total {
			return fmt.Errorf("table %d/%d lists %d symbols but %d bytes remain", tc, th, total, len(seg)-17)
		}
		var t jpegHuffman
		if err := t.build(&counts, seg[17:17+total]); err != nil {
			return fmt.Errorf("table %d/%d: %w", tc, th, err)
		}
		if tc == 0 {
			d.tables[th] = t
		}
		seg = seg[17+total:]
	}
	return nil
}

// jpegScanComponent is one component of a scan: its index in the frame
// and its Huffman table.
type jpegScanComponent struct {
	index int
	table *jpegHuffman
}

// readScan parses a scan header (T.81 B.2.3) whose entropy-coded data
// start at pos, decodes the scan, and returns the offset of the marker
// that follows it.
func (d *jpegLossless) readScan(seg []byte, pos int) (int, error) {
	if !d.frame {
		return 0, fmt.Errorf("SOS before the frame header")
	}
	if len(seg) < 1 {
		return 0, fmt.Errorf("empty scan header")
	}
	ns := int(seg[0])
	if ns < 1 || ns > len(d.comps) {
		return 0, fmt.Errorf("%d components in a scan of a %d-component frame", ns, len(d.comps))
	}
	if len(seg) != 4+2*ns {
		return 0, fmt.Errorf("header of %d bytes for %d components, want %d", len(seg), ns, 4+2*ns)
	}
	var sc [4]jpegScanComponent
	for i := range ns {
		id, td := seg[1+2*i], int(seg[2+2*i]>>4)
		idx := -1
		for j := range d.comps {
			if d.comps[j].id == id {
				idx = j
			}
		}
		if idx < 0 {
			return 0, fmt.Errorf("component id %d is not in the frame", id)
		}
		if d.comps[idx].decoded {
			return 0, fmt.Errorf("component id %d coded twice", id)
		}
		if td > 3 || !d.tables[td].defined {
			return 0, fmt.Errorf("component id %d uses undefined Huffman table %d", id, td)
		}
		d.comps[idx].decoded = true // also catches a repeat within this scan
		sc[i] = jpegScanComponent{index: idx, table: &d.tables[td]}
	}
	pred := int(seg[1+2*ns])
	pt := int(seg[3+2*ns] & 15)
	if pred < 1 || pred > 7 {
		return 0, fmt.Errorf("predictor selection value %d outside 1..7", pred)
	}
	if pt >= d.precision {
		return 0, fmt.Errorf("point transform %d not below precision %d", pt, d.precision)
	}
	for i := range ns {
		d.comps[sc[i].index].pt = pt
	}
	// Every Huffman code is at least one bit long, so a scan needs at
	// least one bit per sample: a stream too short for that is refused
	// before the samples of a frame it cannot fill are allocated.
	if n := d.width * d.height * ns; int64(len(d.data)-pos)*8 < int64(n) {
		return 0, fmt.Errorf("%d bytes left for the %d samples of the scan, which need at least %d", len(d.data)-pos, n, (n+7)/8)
	}
	if d.pix == nil {
		d.pix = make([]uint16, d.width*d.height*len(d.comps))
	}
	return d.decodeScan(sc[:ns], pred, pt, pos)
}

// decodeScan decodes the entropy-coded data of one scan into d.pix and
// returns the offset of the marker after it.
//
// Prediction follows T.81 H.1.2.1 and Table H.1. The first line of the
// scan, and the first line of each restart interval, is predicted from
// the left neighbour Ra alone; the first sample of each later line from
// the one above, Rb; its first sample, at the start of the scan and of
// each restart interval, from 2^(P-Pt-1). The predictor works on the
// point-transformed values, so d.pix holds those until finish shifts
// them. Since a lossless MCU is one sample of each scan component (all
// sampling factors are 1), a restart interval that T.81 requires to be
// a whole number of MCU rows is a whole number of lines.
func (d *jpegLossless) decodeScan(sc []jpegScanComponent, pred, pt, pos int) (int, error) {
	w, h, nc := d.width, d.height, len(d.comps)
	stride := w * nc
	rowsPerInterval := h
	if d.restart > 0 {
		if d.restart%w != 0 {
			return 0, fmt.Errorf("restart interval of %d MCUs is not a multiple of the %d MCUs in a line", d.restart, w)
		}
		if r := d.restart / w; r < h {
			rowsPerInterval = r
		}
	}
	b := &d.bits
	b.data, b.err = d.data, nil
	b.reset(pos)
	initial := 1 << (d.precision - pt - 1)
	rst := 0
	pix := d.pix
	for y := range h {
		first := y%rowsPerInterval == 0
		if first && y > 0 {
			if err := d.restartMarker(rst); err != nil {
				return 0, err
			}
			rst = (rst + 1) & 7
		}
		row := y * stride
		// The first MCU of the line.
		for _, c := range sc {
			i := row + c.index
			px := initial
			if !first {
				px = int(pix[i-stride])
			}
			// Adding in int and truncating to uint16 is the
			// modulo-2^16 reconstruction of H.2.1.
			pix[i] = uint16(px + b.diff(c.table))
		}
		sel := pred
		if first {
			sel = 1
		}
		for x := 1; x < w; x++ {
			base := row + x*nc
			for _, c := range sc {
				i := base + c.index
				ra := int(pix[i-nc])
				var px int
				if sel == 1 {
					px = ra
				} else {
					px = jpegPredict(sel, ra, int(pix[i-stride]), int(pix[i-stride-nc]))
				}
				pix[i] = uint16(px + b.diff(c.table))
			}
		}
		if err := d.checkBits(); err != nil {
			return 0, fmt.Errorf("line %d: %w", y, err)
		}
	}
	// Junk between the last code and the next marker (some encoders
	// append a restart marker after the last interval) is skipped, as
	// nothing in it could change the decoded samples.
	p := b.pos
	for p+1 < len(d.data) && !(d.data[p] == 0xFF && d.data[p+1] != 0 && d.data[p+1] != 0xFF &&
		(d.data[p+1] < jpegRST0 || d.data[p+1] > jpegRST7)) {
		p++
	}
	return p, nil
}

// jpegPredict is Table H.1 for selection values 2..7, on values that fit
// in 16 bits. The halvings are arithmetic right shifts, which round
// towards minus infinity when Rb-Rc or Ra-Rc is negative, as the
// encoders of record (libjpeg's lossless mode among them) compute them;
// int keeps Ra+Rb and Ra+Rb-Rc exact before the modulo-2^16 sum.
func jpegPredict(sel, ra, rb, rc int) int {
	switch sel {
	case 2:
		return rb
	case 3:
		return rc
	case 4:
		return ra + rb - rc
	case 5:
		return ra + (rb-rc)>>1
	case 6:
		return rb + (ra-rc)>>1
	default:
		return (ra + rb) >> 1
	}
}

// checkBits reports an invalid code met so far, or the consumption of
// bits beyond the end of the entropy-coded segment.
func (d *jpegLossless) checkBits() error {
	b := &d.bits
	if b.err != nil {
		return b.err
	}
	if b.overrun() {
		return fmt.Errorf("entropy-coded data end at offset %d before the scan does", b.pos)
	}
	return nil
}

// restartMarker ends a restart interval (T.81 E.2.4 and B.2.4.4):
// the remaining bits of the last byte are padding, the marker RSTm with
// m the interval count modulo 8 must follow (after optional fill bytes),
// and decoding resumes with an empty bit buffer after it.
func (d *jpegLossless) restartMarker(m int) error {
	b := &d.bits
	if err := d.checkBits(); err != nil {
		return err
	}
	if left := b.leftover(); left >= 8 {
		return fmt.Errorf("RST%d expected at offset %d, but %d bits of the interval are unused", m, b.pos-left/8, left)
	}
	p := b.pos
	for p+1 < len(d.data) && d.data[p] == 0xFF && d.data[p+1] == 0xFF {
		p++
	}
	if p+1 >= len(d.data) {
		return fmt.Errorf("data end at offset %d where RST%d is expected", p, m)
	}
	if d.data[p] != 0xFF || d.data[p+1] != byte(jpegRST0+m) {
		return fmt.Errorf("RST%d expected at offset %d, found 0x%02X%02X", m, p, d.data[p], d.data[p+1])
	}
	b.reset(p + 2)
	return nil
}

// finish checks at EOI that every frame component was coded by a scan,
// then applies the output side of the point transform: the decoder's
// output is the reconstructed value shifted left by Pt (H.2.1).
func (d *jpegLossless) finish(at int) error {
	if !d.frame {
		return fmt.Errorf("EOI at offset %d before a frame header", at)
	}
	nc := len(d.comps)
	for c := range d.comps {
		if !d.comps[c].decoded {
			return fmt.Errorf("EOI at offset %d, but component id %d was in no scan", at, d.comps[c].id)
		}
		if pt := d.comps[c].pt; pt > 0 {
			for i := c; i < len(d.pix); i += nc {
				d.pix[i] <<= pt
			}
		}
	}
	return nil
}
