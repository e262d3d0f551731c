package dicom

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// This file decodes JPEG-LS, ITU-T T.87 | ISO/IEC 14495-1: the lossless
// and near-lossless LOCO-I coding that DICOM stores under transfer
// syntaxes 1.2.840.10008.1.2.4.80 (lossless, NEAR = 0) and
// 1.2.840.10008.1.2.4.81 (near-lossless, NEAR > 0). It is written from
// the Recommendation: the regular mode with its context modelling,
// prediction and limited-length Golomb codes (A.2 to A.6), the run mode
// with its run interruption samples (A.7), the three interleave modes of
// Annex B, and the marker segments of Annex C, with the restart intervals
// (DRI, RSTm) that T.87 takes over from T.81.
// Mapping tables (LSE ids 2 and 3), oversize dimensions (LSE id 4), the
// HP colour transforms and subsampled components are refused by name.
//
// As the JPEG lossless decoder of jpegll.go does, it fails a scan whose
// entropy-coded data end before the scan does: past the end it shifts in
// zero bits only to look ahead, and an error follows as soon as one of
// them would be consumed. Since a JPEG-LS run can code 32768 samples in
// one bit, the data length does not bound the image: the frame header is
// checked against maxSamples before anything of the image's size is
// allocated.

// JPEG-LS marker codes and constants of T.87 that the decoder needs
// beyond the T.81 markers of jpegll.go.
const (
	jlsLSE  = 0xF8 // preset parameters (C.2.4.1)
	jlsAPP8 = 0xE8 // HP's colour transform segment, "mrfx"

	// C.2.4.1.1: the basic thresholds from which the defaults of T1,
	// T2 and T3 are scaled, and the default RESET.
	jlsBasicT1     = 3
	jlsBasicT2     = 7
	jlsBasicT3     = 21
	jlsDefaultRset = 64

	// A.6.2: the bias correction C[Q] stays within MIN_C..MAX_C.
	jlsMinC = -128
	jlsMaxC = 127

	// jlsContexts is the number of regular-mode contexts, (9^3+1)/2
	// (A.3.4); the two run interruption contexts follow them (A.7.2).
	jlsContexts = 365

	// jlsMaxK bounds the Golomb parameter k. A.5.1 computes k as the
	// least value with N[Q]·2^k ≥ A[Q]; as A[Q]/N[Q] stays below the
	// largest error magnitude, RANGE/2 ≤ 2^15, no valid stream gets
	// near 24. The bound only keeps a hostile stream's shifts sane.
	jlsMaxK = 24
)

// jlsJ is the run-length order table J of A.7.1.2: a run
// segment coded by a single 1 bit in run state RUNindex is 2^J[RUNindex]
// samples long.
var jlsJ = [32]uint8{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// jlsBits reads the entropy-coded segment of a JPEG-LS scan MSB first.
// T.87 9.1 differs from T.81 in its escape: after a 0xFF byte the encoder
// inserts a single 0 bit, so the byte that follows carries 7 bits of data
// in its low bits; a 0xFF followed by a byte with its high bit set is a
// marker, which ends the segment. Like jpegBits, it keeps up to 64 bits in
// acc, left-aligned, and shifts in zero bytes past the end of the segment,
// counting them in pad, so that consumers may peek freely.
type jlsBits struct {
	data     []byte
	pos      int    // next byte of data to read
	acc      uint64 // buffered bits; the next one is bit 63
	n        uint   // number of buffered bits, real and padding
	pad      int    // zero bytes appended after the segment ended
	stuffed  bool   // data[pos] follows a 0xFF: its high bit is the stuffed 0
	atMarker bool   // pos is at the 0xFF of a marker, or at the end of data
	err      error  // first invalid code met; sticky
}

// reset starts reading a new entropy-coded segment at pos: the start of a
// scan, and the byte after each restart marker (each segment starts
// byte-aligned).
func (b *jlsBits) reset(pos int) {
	b.pos = pos
	b.acc, b.n, b.pad, b.stuffed, b.atMarker = 0, 0, 0, false, false
}

// fill tops the buffer up to at least 57 bits, enough for the longest
// unary prefix of a Golomb code with its terminating 1, which golomb
// counts in one go: LIMIT−qbpp−1 zeros and a 1 are at most 57 bits
// (LIMIT is at most 64, and qbpp at least 7 where it is 64).
func (b *jlsBits) fill() {
	for b.n <= 56 {
		if b.atMarker {
			b.pad++
			b.n += 8
			continue
		}
		if b.pos >= len(b.data) {
			b.atMarker = true
			continue
		}
		c := b.data[b.pos]
		if b.stuffed {
			// The look-ahead below made sure that c < 0x80: its
			// 7 low bits follow the 0xFF's 8.
			b.acc |= uint64(c) << (57 - b.n)
			b.n += 7
			b.pos++
			b.stuffed = false
			continue
		}
		if c == 0xFF {
			if b.pos+1 >= len(b.data) || b.data[b.pos+1] >= 0x80 {
				b.atMarker = true
				continue
			}
			b.stuffed = true
		}
		b.acc |= uint64(c) << (56 - b.n)
		b.n += 8
		b.pos++
	}
}

// read consumes k ≤ 32 bits and returns them as an unsigned value.
func (b *jlsBits) read(k uint) int {
	if b.n < k {
		b.fill()
	}
	v := b.acc >> (64 - k) // 0 for k == 0: Go defines the shift by 64
	b.acc <<= k
	b.n -= k
	return int(v)
}

// golomb decodes one limited-length Golomb code (A.5.3): q zero bits and
// a 1 bit, then, if q is below maxq = LIMIT−qbpp−1, the k low bits r of
// the value q·2^k + r; if q equals maxq, the escape, qbpp bits holding
// the value less 1. A longer prefix is no code: it records b.err and
// yields 0, and the caller checks b.err once a line, which bounds the
// work done on a corrupt line to that line.
func (b *jlsBits) golomb(k uint, maxq int, qbpp uint) int {
	if b.n < 57 {
		b.fill()
	}
	// After fill, n ≥ 57 ≥ maxq+1; padding bits are zeros, so a 1
	// found within maxq+1 bits is a real one.
	q := bits.LeadingZeros64(b.acc)
	if q > maxq {
		if b.err == nil {
			if b.leftover() <= maxq {
				// The zeros run into the padding: the data end
				// inside the code (or a corrupt code runs to it).
				b.err = fmt.Errorf("entropy-coded data end at offset %d before the scan does", b.pos)
			} else {
				b.err = fmt.Errorf("invalid Golomb code (a unary prefix of more than %d zero bits) before offset %d", maxq, b.pos)
			}
		}
		return 0
	}
	b.acc <<= uint(q) + 1
	b.n -= uint(q) + 1
	if q < maxq {
		return q<<k | b.read(k)
	}
	return b.read(qbpp) + 1
}

// overrun reports whether bits beyond the end of the entropy-coded
// segment have been consumed (see jpegBits.overrun).
func (b *jlsBits) overrun() bool {
	return int(b.n) < b.pad*8
}

// leftover is the number of real, not yet consumed bits in the buffer.
func (b *jlsBits) leftover() int {
	return int(b.n) - b.pad*8
}

// jlsContext holds the variables of one regular-mode context (A.2.1):
// A, the accumulated error magnitudes; B, the accumulated errors, kept in
// (−N, 0] by the bias correction; C, the bias correction; N, the count.
// A is 64 bits wide because with RESET up to 65535 and errors up to 2^15
// it can pass 2^31 in a valid stream.
type jlsContext struct {
	a    int64
	b, c int32
	n    int32
}

// jlsRunContext holds the variables of one run interruption context
// (A.7.2): A and N as in jlsContext, and Nn, the count of negative errors.
type jlsRunContext struct {
	a     int64
	n, nn int32
}

// jlsParams are the coding parameters of one scan (A.2.1, C.2.4.1.1).
type jlsParams struct {
	maxval int // MAXVAL, the largest sample value
	near   int // NEAR, the largest reconstruction error
	step   int // 2·NEAR+1, the quantization step of the errors
	rng    int // RANGE, the number of quantized error values
	qbpp   int // bits of a quantized error, ⌈log2 RANGE⌉
	limit  int // LIMIT, the longest Golomb code
	t1     int
	t2     int
	t3     int
	reset  int // RESET, the count at which A, B, N are halved
}

// jlsPreset holds the values of an LSE segment with id 1 (C.2.4.1.1);
// 0 means the default, as it does in the segment.
type jlsPreset struct {
	maxval, t1, t2, t3, reset int
}

// jlsComponent is one frame component (C.2.2).
type jlsComponent struct {
	id      byte
	decoded bool // a scan has coded it (each may be coded only once)
}

// jlsDecoder is the state of one decode.
type jlsDecoder struct {
	data       []byte
	maxSamples int
	frame      bool
	width      int
	height     int
	precision  int
	comps      []jlsComponent
	pix        []uint16
	preset     jlsPreset
	restart    int // restart interval in lines (MCUs); 0: none
	bits       jlsBits
	p          jlsParams
	qlut       []int8 // quantize of −T3..T3, at 0..2·T3
	ctx        [jlsContexts]jlsContext
	run        [2]jlsRunContext
}

// decodeJPEGLS decodes one JPEG-LS (T.87) frame: the byte stream of one
// DICOM frame in transfer syntax .80 or .81, from SOI to EOI. The frame
// may be coded in one scan per component (ILV 0), or in scans of several
// components interleaved by line (ILV 1) or by sample (ILV 2); every
// component must have sampling factors 1×1. LSE preset parameters (id 1),
// restart intervals, and APPn and COM segments are read; mapping tables
// (LSE ids 2 and 3, or a scan's table selector), oversize dimensions (LSE
// id 4), point transforms and HP "mrfx" colour transforms other than
// transform 0 (none) are refused.
//
// It returns the samples pixel-major, components interleaved (pixel 0's
// components, then pixel 1's, ...), each the decoded value of the
// frame's precision (2..16 bits). maxSamples bounds width*height*components
// before anything of that size is allocated.
//
// Errors name the marker or the byte offset at which the stream is wrong.
// Truncated entropy-coded data is an error (see the top of this file), and
// so is a stream without EOI.
func decodeJPEGLS(data []byte, maxSamples int) (pix []uint16, width, height, components, precision int, err error) {
	d := &jlsDecoder{data: data, maxSamples: maxSamples}
	if err := d.decode(); err != nil {
		return nil, 0, 0, 0, 0, fmt.Errorf("jpeg-ls: %w", err)
	}
	return d.pix, d.width, d.height, len(d.comps), d.precision, nil
}

// decode walks the marker segments of T.87 Annex C (which follows T.81
// B.2): SOI, then table and miscellaneous segments, the frame header,
// scans, and EOI.
func (d *jlsDecoder) decode() error {
	return jpegWalk(d.data, func(m byte, at int, seg []byte, pos int) (int, error) {
		switch {
		case m == jpegSOF55:
			if err := d.readFrame(seg); err != nil {
				return 0, fmt.Errorf("SOF55 at offset %d: %w", at, err)
			}
		case m >= jpegSOF0 && m <= jpegSOF15 && m != jpegDHT && m != 0xC8 && m != 0xCC:
			return 0, fmt.Errorf("JPEG SOF%d at offset %d is not JPEG-LS (T.87 uses SOF55)", m-jpegSOF0, at)
		case m == jlsLSE:
			if err := d.readLSE(seg); err != nil {
				return 0, fmt.Errorf("LSE at offset %d: %w", at, err)
			}
		case m == jpegDRI:
			// Ri in 2, 3 or 4 bytes: T.87 allows the longer forms,
			// which T.81 does not.
			if len(seg) < 2 || len(seg) > 4 {
				return 0, fmt.Errorf("DRI at offset %d: length %d, want 4 to 6", at, len(seg)+2)
			}
			ri := 0
			for _, c := range seg {
				ri = ri<<8 | int(c)
			}
			d.restart = ri
		case m == jpegSOS:
			next, err := d.readScan(seg, pos)
			if err != nil {
				return 0, fmt.Errorf("scan at offset %d: %w", at, err)
			}
			return next, nil
		case m == jlsAPP8 && len(seg) >= 4 && string(seg[:4]) == "mrfx":
			// HP's extension marks a colour transform of the
			// components (its byte after "mrfx"); transform 0 is
			// none, any other would have to be inverted after
			// decoding, which is not implemented.
			if len(seg) < 5 || seg[4] != 0 {
				t := -1
				if len(seg) >= 5 {
					t = int(seg[4])
				}
				return 0, fmt.Errorf("APP8 \"mrfx\" colour transform %d at offset %d is not supported", t, at)
			}
		default:
			// APPn, COM, and the T.81 table segments, which a
			// JPEG-LS decoder has no use for; their length skips them.
		}
		return pos, nil
	}, d.finish)
}

// readFrame parses a frame header (C.2.2) and checks its size against
// maxSamples; the first scan allocates the samples.
func (d *jlsDecoder) readFrame(seg []byte) error {
	if d.frame {
		return fmt.Errorf("second frame header")
	}
	p, h, w, ids, err := jpegFrameHeader(seg, d.maxSamples)
	if err != nil {
		return err
	}
	d.comps = make([]jlsComponent, len(ids))
	for i, id := range ids {
		d.comps[i].id = id
	}
	d.frame = true
	d.width, d.height, d.precision = w, h, p
	return nil
}

// readLSE parses a JPEG-LS preset parameters segment (C.2.4.1). Only id 1,
// the coding parameters, is implemented; its values take effect for the
// scans that follow, and are checked against the frame and NEAR there.
func (d *jlsDecoder) readLSE(seg []byte) error {
	if len(seg) < 1 {
		return fmt.Errorf("empty segment")
	}
	switch id := seg[0]; id {
	case 1:
		if len(seg) != 11 {
			return fmt.Errorf("preset parameters (id 1) of %d bytes, want 11", len(seg))
		}
		v := func(i int) int { return int(binary.BigEndian.Uint16(seg[1+2*i:])) }
		d.preset = jlsPreset{maxval: v(0), t1: v(1), t2: v(2), t3: v(3), reset: v(4)}
		return nil
	case 2, 3:
		return fmt.Errorf("mapping table (LSE id %d) is not supported", id)
	case 4:
		return fmt.Errorf("oversize image dimensions (LSE id 4) are not supported")
	default:
		return fmt.Errorf("LSE id %d is not defined by T.87", id)
	}
}

// jlsClamp is CLAMP of C.2.4.1.1: i, unless it lies above maxval or
// below j, where it is j.
func jlsClamp(i, j, maxval int) int {
	if i > maxval || i < j {
		return j
	}
	return i
}

// jlsDefaultThresholds computes the default T1, T2 and T3 of C.2.4.1.1
// from MAXVAL and NEAR: the basic thresholds of 8-bit
// lossless coding, scaled to the sample range (up to that of 12 bits) and
// widened by NEAR.
func jlsDefaultThresholds(maxval, near int) (t1, t2, t3 int) {
	if maxval >= 128 {
		f := (min(maxval, 4095) + 128) >> 8
		t1 = jlsClamp(f*(jlsBasicT1-2)+2+3*near, near+1, maxval)
		t2 = jlsClamp(f*(jlsBasicT2-3)+3+5*near, t1, maxval)
		t3 = jlsClamp(f*(jlsBasicT3-4)+4+7*near, t2, maxval)
		return t1, t2, t3
	}
	f := 256 / (maxval + 1)
	t1 = jlsClamp(max(2, jlsBasicT1/f+3*near), near+1, maxval)
	t2 = jlsClamp(max(3, jlsBasicT2/f+5*near), t1, maxval)
	t3 = jlsClamp(max(4, jlsBasicT3/f+7*near), t2, maxval)
	return t1, t2, t3
}

// setParams computes the coding parameters of a scan (A.2.1, C.2.4.1.1)
// from the frame's precision, the scan's NEAR and the preset parameters
// in effect, and checks them against the bounds of C.2.4.1.1 and C.2.3.
func (d *jlsDecoder) setParams(near int) error {
	pr := d.preset
	maxval := pr.maxval
	if maxval == 0 {
		maxval = 1<<d.precision - 1
	} else if maxval >= 1<<d.precision {
		return fmt.Errorf("MAXVAL %d (LSE) does not fit the precision of %d bits", maxval, d.precision)
	}
	if near > min(255, maxval/2) {
		return fmt.Errorf("NEAR %d above min(255, MAXVAL/2) = %d", near, min(255, maxval/2))
	}
	t1, t2, t3 := jlsDefaultThresholds(maxval, near)
	if pr.t1 != 0 {
		t1 = pr.t1
	}
	if pr.t2 != 0 {
		t2 = pr.t2
	}
	if pr.t3 != 0 {
		t3 = pr.t3
	}
	if !(near+1 <= t1 && t1 <= t2 && t2 <= t3 && t3 <= maxval) {
		return fmt.Errorf("thresholds T1 %d, T2 %d, T3 %d are not ordered within NEAR+1 = %d and MAXVAL = %d", t1, t2, t3, near+1, maxval)
	}
	reset := pr.reset
	if reset == 0 {
		reset = jlsDefaultRset
	}
	if reset < 3 || reset > max(255, maxval) {
		return fmt.Errorf("RESET %d outside 3..%d", reset, max(255, maxval))
	}
	step := 2*near + 1
	rng := (maxval+2*near)/step + 1
	bpp := max(2, bits.Len(uint(maxval)))
	if cap(d.qlut) < 2*t3+1 {
		d.qlut = make([]int8, 2*t3+1)
	}
	d.qlut = d.qlut[:2*t3+1]
	d.p = jlsParams{
		maxval: maxval,
		near:   near,
		step:   step,
		rng:    rng,
		qbpp:   bits.Len(uint(rng - 1)),
		limit:  2 * (bpp + max(8, bpp)),
		t1:     t1,
		t2:     t2,
		t3:     t3,
		reset:  reset,
	}
	// Every gradient at or beyond ±T3 quantizes to ±4, so the table
	// covers −T3..T3 and the caller clamps a gradient into it.
	for i := range d.qlut {
		d.qlut[i] = int8(d.p.quantize(i - t3))
	}
	return nil
}

// resetContexts initializes the context variables at the start of a scan
// and of each restart interval (A.2.1).
func (d *jlsDecoder) resetContexts() {
	a := int64(max(2, (d.p.rng+32)/64))
	for i := range d.ctx {
		d.ctx[i] = jlsContext{a: a, n: 1}
	}
	for i := range d.run {
		d.run[i] = jlsRunContext{a: a, n: 1}
	}
}

// readScan parses a scan header (C.2.3) whose entropy-coded data start
// at pos, decodes the scan, and returns the offset of the marker that
// follows it.
func (d *jlsDecoder) readScan(seg []byte, pos int) (int, error) {
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
	var sc [4]int
	for i := range ns {
		id, tm := seg[1+2*i], seg[2+2*i]
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
		if tm != 0 {
			return 0, fmt.Errorf("component id %d uses mapping table %d; mapping tables are not supported", id, tm)
		}
		d.comps[idx].decoded = true // also catches a repeat within this scan
		sc[i] = idx
	}
	near := int(seg[1+2*ns])
	ilv := int(seg[2+2*ns])
	pt := int(seg[3+2*ns])
	switch {
	case ilv > 2:
		return 0, fmt.Errorf("interleave mode %d outside 0..2", ilv)
	case ilv == 0 && ns > 1:
		return 0, fmt.Errorf("interleave mode 0 with %d components, want 1", ns)
	case pt != 0:
		return 0, fmt.Errorf("point transform byte 0x%02X; only 0 is supported", pt)
	}
	if ns == 1 {
		// With one component the modes coincide in B.2 and B.3 but
		// for the run interruption of ILV 2, which a one-component
		// scan is not meant to use (C.2.3: ILV is 0 when Ns is 1).
		ilv = 0
	}
	if err := d.setParams(near); err != nil {
		return 0, err
	}
	// Every line of every component of the scan (of every pixel, for
	// ILV 2) costs at least one bit: a Golomb code or a run bit. A
	// stream too short for that is refused before the samples of a
	// frame it cannot fill are allocated.
	lines := int64(d.height) * int64(ns)
	if ilv == 2 {
		lines = int64(d.height)
	}
	if int64(len(d.data)-pos)*8 < lines {
		return 0, fmt.Errorf("%d bytes left for the %d lines of the scan, which need at least %d", len(d.data)-pos, lines, (lines+7)/8)
	}
	if d.pix == nil {
		d.pix = make([]uint16, d.width*d.height*len(d.comps))
	}
	return d.decodeScan(sc[:ns], ilv, pos)
}

// jlsLines are the line buffers of a scan, one pair per scan component:
// prev holds the line above, cur the line being decoded, each at indices
// 1..width with the edge samples of A.2.1 at 0 and width+1.
type jlsLines struct {
	cur, prev [4][]uint16
	runIndex  [4]int // RUNindex, per component for ILV 1 (B.2)
}

// decodeScan decodes the entropy-coded data of one scan into d.pix and
// returns the offset of the marker after it.
//
// A line of the scan (an MCU, which a restart interval counts) is a line
// of its one component for ILV 0, a line of each component in turn for
// ILV 1 (B.2), and a line of pixels with their components interleaved for
// ILV 2 (B.3). The context variables are shared by the components of a
// scan; for ILV 1 each component keeps its own RUNindex (B.2). At the
// start of the scan and of each restart interval the contexts and RUNindex
// are initialized (A.2.1) and the line above is taken as all zeros, as it
// is for the first line of an image, so that each interval decodes on its
// own.
func (d *jlsDecoder) decodeScan(sc []int, ilv, pos int) (int, error) {
	w, h, nc, ns := d.width, d.height, len(d.comps), len(sc)
	buf := make([]uint16, 2*(w+2)*ns)
	var l jlsLines
	for i := range ns {
		l.prev[i] = buf[2*i*(w+2) : (2*i+1)*(w+2)]
		l.cur[i] = buf[(2*i+1)*(w+2) : (2*i+2)*(w+2)]
	}
	d.resetContexts()
	b := &d.bits
	b.data, b.err = d.data, nil
	b.reset(pos)
	rst := 0
	for y := range h {
		if d.restart > 0 && y > 0 && y%d.restart == 0 {
			if err := d.restartMarker(rst); err != nil {
				return 0, fmt.Errorf("line %d: %w", y, err)
			}
			rst = (rst + 1) & 7
			d.resetContexts()
			l.runIndex = [4]int{}
			clear(buf)
		}
		for i := range ns {
			l.cur[i], l.prev[i] = l.prev[i], l.cur[i]
			// A.2.1: Ra of a line's first sample is the sample
			// above it, Rc that sample's Ra one line up, which
			// cur[0] of the previous line still holds; Rd of its
			// last sample is the sample above that.
			l.cur[i][0] = l.prev[i][1]
			l.prev[i][w+1] = l.prev[i][w]
		}
		if ilv == 2 {
			d.decodeLinePixels(&l, ns)
		} else {
			for i := range ns {
				d.decodeLine(l.cur[i], l.prev[i], &l.runIndex[i])
			}
		}
		row := d.pix[y*w*nc : (y+1)*w*nc]
		for i, c := range sc {
			for x, v := range l.cur[i][1 : w+1] {
				row[x*nc+c] = v
			}
		}
		if err := d.checkBits(); err != nil {
			return 0, fmt.Errorf("line %d: %w", y, err)
		}
	}
	// Padding and junk between the last code and the next marker are
	// skipped (a stray restart marker after the last interval too), as
	// nothing in them could change the decoded samples.
	p := b.pos
	for p+1 < len(d.data) && !(d.data[p] == 0xFF && d.data[p+1] >= 0x80 && d.data[p+1] != 0xFF &&
		(d.data[p+1] < jpegRST0 || d.data[p+1] > jpegRST7)) {
		p++
	}
	return p, nil
}

// jlsNear reports whether |v| ≤ near, in one comparison.
func jlsNear(v, near int) bool {
	return uint(v+near) <= uint(2*near)
}

// decodeLine decodes one line of one component (ILV 0 and 1): each
// sample in the regular mode, or, where the local gradients are all
// within NEAR (A.3.1), a run.
func (d *jlsDecoder) decodeLine(cur, prev []uint16, runIndex *int) {
	w, near := d.width, d.p.near
	for x := 1; x <= w; {
		ra, rb, rc, rd := int(cur[x-1]), int(prev[x]), int(prev[x-1]), int(prev[x+1])
		d1, d2, d3 := rd-rb, rb-rc, rc-ra
		if jlsNear(d1, near) && jlsNear(d2, near) && jlsNear(d3, near) {
			x = d.decodeRun(cur, prev, x, runIndex)
			continue
		}
		cur[x] = uint16(d.regular(d1, d2, d3, ra, rb, rc))
		x++
	}
}

// quantize maps a local gradient to one of the nine regions of A.3.3,
// −4..4. setParams tabulates it in jlsDecoder.qlut.
func (p *jlsParams) quantize(v int) int {
	switch {
	case v <= -p.t3:
		return -4
	case v <= -p.t2:
		return -3
	case v <= -p.t1:
		return -2
	case v < -p.near:
		return -1
	case v <= p.near:
		return 0
	case v < p.t1:
		return 1
	case v < p.t2:
		return 2
	case v < p.t3:
		return 3
	}
	return 4
}

// fix reduces a reconstructed value modulo RANGE·(2·NEAR+1) and clamps it
// to 0..MAXVAL (the decoder's side of A.4.5): the encoder's error
// was reduced modulo RANGE, so a value past either end wraps around.
func (p *jlsParams) fix(rx int) int {
	if rx < -p.near {
		rx += p.rng * p.step
	} else if rx > p.maxval+p.near {
		rx -= p.rng * p.step
	}
	return min(max(rx, 0), p.maxval)
}

// jlsGolombK is the Golomb parameter of A.5.1 (and A.7.2): the least
// k with N·2^k ≥ A. If A has a bits and N n, N·2^(a−n) has a bits too, so
// k is a−n or a−n+1; N·2^(a−n−1) is below A already. A and N are
// positive.
func jlsGolombK(a int64, n int32) uint {
	k := bits.Len64(uint64(a)) - bits.Len32(uint32(n))
	if k < 0 {
		return 0
	}
	if int64(n)<<k < a {
		k++
	}
	return uint(min(k, jlsMaxK))
}

// regular decodes one sample in the regular mode, given its gradients
// D1 = Rd−Rb, D2 = Rb−Rc, D3 = Rc−Ra and its neighbours.
func (d *jlsDecoder) regular(d1, d2, d3, ra, rb, rc int) int {
	p := &d.p
	// A.3.3, A.3.4: the context is the quantized gradient triple with
	// its first non-zero element made positive, the sign remembered.
	// 81·Q1 + 9·Q2 + Q3 is a balanced base-9 number, whose sign is that
	// of its leading non-zero digit and which negation maps to the
	// negated triple: its magnitude, 0..364, indexes the context.
	t3, lut := p.t3, d.qlut
	q := 81*int(lut[min(max(d1, -t3), t3)+t3]) + 9*int(lut[min(max(d2, -t3), t3)+t3]) + int(lut[min(max(d3, -t3), t3)+t3])
	neg := q < 0
	if neg {
		q = -q
	}
	cx := &d.ctx[q]
	// A.4.1: the median edge detector.
	var px int
	switch {
	case rc >= max(ra, rb):
		px = min(ra, rb)
	case rc <= min(ra, rb):
		px = max(ra, rb)
	default:
		px = ra + rb - rc
	}
	// A.4.2: bias correction of the prediction, then clamping.
	if neg {
		px -= int(cx.c)
	} else {
		px += int(cx.c)
	}
	px = min(max(px, 0), p.maxval)
	k := jlsGolombK(cx.a, cx.n)
	m := d.bits.golomb(k, p.limit-p.qbpp-1, uint(p.qbpp))
	// A.5.2 inverted: errors 0, −1, 1, −2, ... map to 0, 1, 2, 3, ...,
	// but for lossless coding with k = 0 and a context whose bias is
	// at most −N/2, which maps 0, −1, 1, ... to 1, 0, 3, 2, ... instead.
	var e int
	if p.near == 0 && k == 0 && 2*cx.b <= -cx.n {
		if m&1 != 0 {
			e = m >> 1
		} else {
			e = -(m >> 1) - 1
		}
	} else {
		if m&1 == 0 {
			e = m >> 1
		} else {
			e = -((m + 1) >> 1)
		}
	}
	if e > p.rng || e < -p.rng {
		// Out of reach of any encoder (A.4.5 reduces errors modulo
		// RANGE); refusing it also keeps A and B far from overflow.
		if d.bits.err == nil {
			d.bits.err = fmt.Errorf("prediction error %d beyond RANGE %d before offset %d", e, p.rng, d.bits.pos)
		}
		e = 0
	}
	// A.6.1: update the context.
	cx.b += int32(e * p.step)
	cx.a += int64(max(e, -e))
	if int(cx.n) == p.reset {
		cx.a >>= 1
		cx.b >>= 1 // floor, which A.6.1 writes as −((1−B)>>1) for B < 0
		cx.n >>= 1
	}
	cx.n++
	// A.6.2: bias computation, keeping B in (−N, 0].
	if cx.b <= -cx.n {
		cx.b += cx.n
		if cx.c > jlsMinC {
			cx.c--
		}
		if cx.b <= -cx.n {
			cx.b = -cx.n + 1
		}
	} else if cx.b > 0 {
		cx.b -= cx.n
		if cx.c < jlsMaxC {
			cx.c++
		}
		if cx.b > 0 {
			cx.b = 0
		}
	}
	// A.4.4 inverted: the error is in units of 2·NEAR+1, and in the
	// sign-normalized context.
	if neg {
		e = -e
	}
	return p.fix(px + e*p.step)
}

// decodeRun decodes a run of one component starting at index x of cur
// (A.7.1, read backwards): each 1 bit stands for 2^J[RUNindex]
// samples equal to Ra, and advances RUNindex; a 1 bit that would pass the
// end of the line ends the run there; a 0 bit is followed by J[RUNindex]
// bits counting the run's last samples, and by the run interruption
// sample (A.7.2), after which RUNindex goes back one step. It returns the
// index after the run (and its interruption sample).
func (d *jlsDecoder) decodeRun(cur, prev []uint16, x int, runIndex *int) int {
	w := d.width
	b := &d.bits
	ra := cur[x-1]
	for x <= w {
		j := jlsJ[*runIndex]
		if b.read(1) == 1 {
			n := min(1<<j, w+1-x)
			for i := x; i < x+n; i++ {
				cur[i] = ra
			}
			x += n
			if n == 1<<j && *runIndex < 31 {
				*runIndex++
			}
			continue
		}
		cnt := b.read(uint(j))
		if cnt > w-x {
			if b.err == nil {
				b.err = fmt.Errorf("run of %d samples past the end of the line before offset %d", cnt, b.pos)
			}
			return w + 1
		}
		for i := x; i < x+cnt; i++ {
			cur[i] = ra
		}
		x += cnt
		cur[x] = uint16(d.interruption(int(ra), int(prev[x]), j))
		if *runIndex > 0 {
			*runIndex--
		}
		return x + 1
	}
	return x
}

// interruption decodes one run interruption sample (A.7.2) with
// neighbours Ra and Rb; j is J[RUNindex] of the run it ends. RItype is 1
// where Ra and Rb are within NEAR, and the prediction is then Ra;
// otherwise it is Rb, with the error's sign flipped where Ra > Rb.
func (d *jlsDecoder) interruption(ra, rb int, j uint8) int {
	p := &d.p
	ritype := 0
	if jlsNear(ra-rb, p.near) {
		ritype = 1
	}
	e := d.interruptionError(ritype, j)
	px := rb
	if ritype == 1 {
		px = ra
	} else if ra > rb {
		e = -e
	}
	return p.fix(px + e*p.step)
}

// interruptionError decodes the error of a run interruption sample in
// context 365+RItype and updates that context (A.7.2).
func (d *jlsDecoder) interruptionError(ritype int, j uint8) int {
	p := &d.p
	cx := &d.run[ritype]
	// A.7.2: the Golomb parameter, from A plus, for RItype 1, N/2.
	temp := cx.a
	if ritype == 1 {
		temp += int64(cx.n >> 1)
	}
	k := jlsGolombK(temp, cx.n)
	// The code's length limit is LIMIT − J[RUNindex] − 1, so that the
	// run bits and the code together stay within LIMIT.
	m := d.bits.golomb(k, p.limit-int(j)-1-p.qbpp-1, uint(p.qbpp))
	// A.7.2 inverted: EMErrval + RItype = 2·|Errval| − map, where the
	// map bit says, with k and Nn, which sign the error has: a
	// positive error has map set exactly when k = 0 and 2·Nn < N, a
	// negative one exactly when not.
	t := m + ritype
	e := (t + 1) >> 1
	if (t&1 == 1) != (k == 0 && 2*cx.nn < cx.n) {
		e = -e
	}
	if e > p.rng || e < -p.rng {
		if d.bits.err == nil {
			d.bits.err = fmt.Errorf("run interruption error %d beyond RANGE %d before offset %d", e, p.rng, d.bits.pos)
		}
		return 0
	}
	// A.7.2: update the context.
	if e < 0 {
		cx.nn++
	}
	cx.a += int64((m + 1 - ritype) >> 1)
	if int(cx.n) == p.reset {
		cx.a >>= 1
		cx.n >>= 1
		cx.nn >>= 1
	}
	cx.n++
	return e
}

// decodeLinePixels decodes one line of a sample-interleaved scan (ILV 2,
// B.3): a pixel is coded in the run mode when the gradients of all its
// components are within NEAR, else each component in turn in the regular
// mode, in contexts shared by the components.
func (d *jlsDecoder) decodeLinePixels(l *jlsLines, ns int) {
	w, near := d.width, d.p.near
	for x := 1; x <= w; {
		flat := true
		for i := range ns {
			cur, prev := l.cur[i], l.prev[i]
			ra, rb, rc, rd := int(cur[x-1]), int(prev[x]), int(prev[x-1]), int(prev[x+1])
			if !jlsNear(rd-rb, near) || !jlsNear(rb-rc, near) || !jlsNear(rc-ra, near) {
				flat = false
				break
			}
		}
		if flat {
			x = d.decodeRunPixels(l, ns, x)
			continue
		}
		for i := range ns {
			cur, prev := l.cur[i], l.prev[i]
			ra, rb, rc, rd := int(cur[x-1]), int(prev[x]), int(prev[x-1]), int(prev[x+1])
			cur[x] = uint16(d.regular(rd-rb, rb-rc, rc-ra, ra, rb, rc))
		}
		x++
	}
}

// decodeRunPixels is decodeRun for ILV 2 (B.3): the run is of pixels
// equal to Ra in every component, one RUNindex counts it, and the
// interruption pixel's components follow in turn as run interruption
// samples (see interruptionPixel).
func (d *jlsDecoder) decodeRunPixels(l *jlsLines, ns, x int) int {
	w := d.width
	b := &d.bits
	runIndex := &l.runIndex[0]
	for x <= w {
		j := jlsJ[*runIndex]
		if b.read(1) == 1 {
			n := min(1<<j, w+1-x)
			for i := range ns {
				cur := l.cur[i]
				ra := cur[x-1]
				for k := x; k < x+n; k++ {
					cur[k] = ra
				}
			}
			x += n
			if n == 1<<j && *runIndex < 31 {
				*runIndex++
			}
			continue
		}
		cnt := b.read(uint(j))
		if cnt > w-x {
			if b.err == nil {
				b.err = fmt.Errorf("run of %d pixels past the end of the line before offset %d", cnt, b.pos)
			}
			return w + 1
		}
		for i := range ns {
			cur, prev := l.cur[i], l.prev[i]
			ra := cur[x-1]
			for k := x; k < x+cnt; k++ {
				cur[k] = ra
			}
			cur[x+cnt] = uint16(d.interruptionPixel(int(ra), int(prev[x+cnt]), j))
		}
		if *runIndex > 0 {
			*runIndex--
		}
		return x + cnt + 1
	}
	return x
}

// interruptionPixel decodes one component of a sample-interleaved run
// interruption pixel. Unlike a sample of ILV 0 or 1, it is coded as one
// of RItype 0 whatever |Ra−Rb| is: predicted by Rb, its error's sign
// flipped where Ra > Rb, in context 365. That is how dcmcjpls (dcmtk
// 3.6.7) writes ILV 2, and dcmdjpls reads it: the fixtures rgb8_ilv2 and
// rgb8_ilv2_near1 do not decode with the per-component RItype of A.7.2.
func (d *jlsDecoder) interruptionPixel(ra, rb int, j uint8) int {
	p := &d.p
	e := d.interruptionError(0, j)
	if ra > rb {
		e = -e
	}
	return p.fix(rb + e*p.step)
}

// checkBits reports an invalid code met so far, or the consumption of
// bits beyond the end of the entropy-coded segment.
func (d *jlsDecoder) checkBits() error {
	b := &d.bits
	if b.err != nil {
		return b.err
	}
	if b.overrun() {
		return fmt.Errorf("entropy-coded data end at offset %d before the scan does", b.pos)
	}
	return nil
}

// restartMarker ends a restart interval: the encoder pads
// the interval's last byte with zero bits, RSTm with m the interval count
// modulo 8 follows (after optional fill bytes), and decoding resumes
// byte-aligned after it.
func (d *jlsDecoder) restartMarker(m int) error {
	b := &d.bits
	if err := d.checkBits(); err != nil {
		return err
	}
	if left := b.leftover(); left >= 8 {
		return fmt.Errorf("RST%d expected, but %d bits of the interval before offset %d are unused", m, left, b.pos)
	}
	p := b.pos
	if b.stuffed {
		// The 7 bits after a final 0xFF are padding.
		p++
	}
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

// finish checks at EOI that every frame component was coded by a scan.
func (d *jlsDecoder) finish(at int) error {
	if !d.frame {
		return fmt.Errorf("EOI at offset %d before a frame header", at)
	}
	for _, c := range d.comps {
		if !c.decoded {
			return fmt.Errorf("EOI at offset %d, but component id %d was in no scan", at, c.id)
		}
	}
	return nil
}
