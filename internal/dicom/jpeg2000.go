package dicom

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"sync"
)

// This file decodes JPEG 2000 Part 1 codestreams, ITU-T T.800 |
// ISO/IEC 15444-1, as DICOM stores them under transfer syntaxes
// 1.2.840.10008.1.2.4.90 (lossless only) and 1.2.840.10008.1.2.4.91:
// a raw codestream from SOC to EOC, or, as some writers embed it, a JP2
// file whose 'jp2c' box holds the codestream (Annex I). It is written
// from the Recommendation: the marker segments of Annex A, tier-2 packet
// decoding of Annex B with every progression order, tier-1 code-block
// decoding of Annex D over the MQ decoder of Annex C (jpeg2000_t1.go),
// the dequantization of Annex E, the inverse wavelet transforms of Annex
// F (jpeg2000_dwt.go) and the component transforms and level shift of
// Annex G.
//
// Refused by name: component sub-sampling other than 1×1, region of
// interest (RGN), packed packet headers (PPM, PPT), reversible wavelets
// with scalar quantization and irreversible ones without, and any marker
// segment of a later Part. Progression order changes (POC) are read; as
// OpenJPEG writes only the packets its POC lists, packets that the
// progressions of POC leave out may be absent from the end of a tile's
// data (they decode as empty). Without POC every packet must be there.
//
// Hostile input: every size is checked before it is used; the image is
// checked against maxSamples before anything of its size is allocated
// (every tile holds a sample, so the tiles are bounded too, and only
// those present are kept). Every packet takes at least a byte of its
// tile's data, so a tile's precincts times its layers are checked
// against that length before its structures are built, and its
// code-blocks against its samples. Code-block data are parts of the
// tile's data (or copies of them, concatenated, where a code-block has
// several contributions), so they are bounded by its length, and the
// coding passes a code-block may claim are bounded by its bit-planes (at
// most 3·30−2, B.10.5, D.1), so tier-1 work is bounded by the samples.
// Packets that run past the end of the tile's data are an error.

// JPEG 2000 marker codes (A.2, Table A.2), the second byte after 0xFF.
const (
	j2kSOC = 0x4F
	j2kSOT = 0x90
	j2kSOD = 0x93
	j2kEOC = 0xD9
	j2kSIZ = 0x51
	j2kCOD = 0x52
	j2kCOC = 0x53
	j2kRGN = 0x5E
	j2kQCD = 0x5C
	j2kQCC = 0x5D
	j2kPOC = 0x5F
	j2kTLM = 0x55
	j2kPLM = 0x57
	j2kPLT = 0x58
	j2kPPM = 0x60
	j2kPPT = 0x61
	j2kSOP = 0x91
	j2kEPH = 0x92
	j2kCRG = 0x63
	j2kCOM = 0x64

	// j2kMaxLevels is the largest number of decomposition levels A.6.1
	// allows (Table A.15).
	j2kMaxLevels = 32
	// j2kMaxBitplanes bounds a code-block's magnitude bit-planes: the
	// tier-1 decoder keeps them with one fractional bit in an int32.
	j2kMaxBitplanes = 30
)

// Progression orders (A.6.1, Table A.16).
const (
	j2kLRCP = iota
	j2kRLCP
	j2kRPCL
	j2kPCRL
	j2kCPRL
)

var j2kOrderNames = [...]string{"LRCP", "RLCP", "RPCL", "PCRL", "CPRL"}

// Code-block style flags, SPcod's fourth byte (A.6.1, Table A.19).
const (
	j2kBypass   = 0x01 // selective arithmetic coding bypass
	j2kReset    = 0x02 // reset context probabilities on coding pass boundaries
	j2kTermAll  = 0x04 // termination on each coding pass
	j2kVCausal  = 0x08 // vertically causal context
	j2kPredTerm = 0x10 // predictable termination
	j2kSegSym   = 0x20 // segmentation symbols
)

// Subband orientations; the index into the tier-1 context tables.
const (
	j2kLL = iota
	j2kHL // horizontally high-pass
	j2kLH // vertically high-pass
	j2kHH
)

// j2kCoding holds the coding style of one component: COD's SPcod or
// COC's SPcoc (A.6.1, A.6.2).
type j2kCoding struct {
	levels     int      // number of decomposition levels NL
	xcb, ycb   int      // code-block width and height exponents
	style      int      // code-block style flags
	reversible bool     // 5/3 filter (true) or 9/7 (false)
	pp         [33]byte // PPx | PPy<<4 per resolution level
}

// j2kQuant holds the quantization of one component: QCD's or QCC's
// (A.6.4, A.6.5).
type j2kQuant struct {
	style int // 0: none, 1: scalar derived, 2: scalar expounded
	guard int
	eps   []int // exponents εb, LL then HL, LH, HH per level
	mu    []int // mantissas μb (scalar quantization only)
}

// j2kDefaults is one level of coding defaults: the main header's or a
// tile's, each COD/QCD with per-component COC/QCC overrides.
type j2kDefaults struct {
	hasCOD bool
	scod   int
	order  int
	layers int
	mct    int
	cod    j2kCoding
	coc    map[int]*j2kCoding
	hasQCD bool
	qcd    j2kQuant
	qcc    map[int]*j2kQuant
	pocs   []j2kProgression
}

type j2kComponent struct {
	precision int
	signed    bool
}

// j2kTile is one tile's data as tile-parts deliver it.
type j2kTile struct {
	data  []byte // concatenated tile-part bodies (from SOD)
	parts int
	def   j2kDefaults
	seen  bool
}

type j2kDecoder struct {
	data       []byte
	maxSamples int

	xsiz, ysiz, xo, yo int
	xt, yt, xto, yto   int
	ntx, nty           int
	comps              []j2kComponent
	main               j2kDefaults
	tiles              map[int]*j2kTile
	tileOrder          []int
	width, height      int
	pix                []uint16
	scratch            []j2kPending
	lengths            []int
	*j2kBuffers
}

// j2kBuffers are a decoder's big buffers, reused from tile to tile and,
// through j2kBufferPool, from decode to decode: tile-components'
// coefficient arrays once their tile is written, the wavelet's scratch
// and tier-1's. A 2048×2048 image's coefficients take 16 MB, which the
// runtime would otherwise zero (and the kernel map) afresh each time.
type j2kBuffers struct {
	spareI [][]int32
	spareF [][]float32
	dwtI   []int32
	dwtF   []float32
	t1     j2kT1
}

var j2kBufferPool = sync.Pool{New: func() any { return new(j2kBuffers) }}

// j2kMaxSpares is how many coefficient arrays of each kind j2kBuffers
// keeps between decodes: enough for the components of RGB(A) images.
const j2kMaxSpares = 4

// release returns b to j2kBufferPool with its j2kMaxSpares largest
// spare arrays of each kind, so that what it keeps stays bounded
// whatever the sizes of the images decoded.
func (b *j2kBuffers) release() {
	b.spareI = j2kTrimSpares(b.spareI)
	b.spareF = j2kTrimSpares(b.spareF)
	j2kBufferPool.Put(b)
}

func j2kTrimSpares[T int32 | float32](sp [][]T) [][]T {
	if len(sp) <= j2kMaxSpares {
		return sp
	}
	slices.SortFunc(sp, func(a, b []T) int { return cap(b) - cap(a) })
	clear(sp[j2kMaxSpares:])
	return sp[:j2kMaxSpares]
}

// decodeJPEG2000 decodes one JPEG 2000 codestream (or JP2 file): the
// byte stream of one DICOM frame in transfer syntax .90 or .91. Any number
// of tiles and tile-parts, components, quality layers, resolution levels
// and precincts are read, in any of the five progression orders, with
// the code-block styles of Table A.19.
//
// It returns the samples pixel-major, components interleaved, each the
// decoded value of its component's precision as an unsigned bit pattern
// (a signed component's two's complement in its precision's bits), and
// the frame's precision (the first component's). Irreversible (9/7)
// output is rounded to nearest (ties to even) and clamped to the
// component's range, as OpenJPEG does.
// maxSamples bounds width*height*components before anything of that size
// is allocated.
func decodeJPEG2000(data []byte, maxSamples int) (pix []uint16, width, height, components, precision int, err error) {
	cs, err := j2kCodestream(data)
	if err != nil {
		return nil, 0, 0, 0, 0, fmt.Errorf("jpeg 2000: %w", err)
	}
	// DICOM pads an odd-length frame with a zero byte after EOC.
	if n := len(cs); n >= 3 && cs[n-1] == 0 && cs[n-3] == 0xFF && cs[n-2] == j2kEOC {
		cs = cs[:n-1]
	}
	d := &j2kDecoder{data: cs, maxSamples: maxSamples}
	d.j2kBuffers = j2kBufferPool.Get().(*j2kBuffers)
	defer d.j2kBuffers.release()
	if err := d.decode(); err != nil {
		return nil, 0, 0, 0, 0, fmt.Errorf("jpeg 2000: %w", err)
	}
	return d.pix, d.width, d.height, len(d.comps), d.comps[0].precision, nil
}

// j2kCodestream returns the codestream of data: data itself when it
// starts with SOC, or the contents of the first 'jp2c' box of a JP2 file
// (I.5.4), whose boxes (I.4) are walked at the top level.
func j2kCodestream(data []byte) ([]byte, error) {
	if len(data) >= 2 && data[0] == 0xFF && data[1] == j2kSOC {
		return data, nil
	}
	if len(data) < 12 || string(data[4:8]) != "jP  " {
		return nil, fmt.Errorf("neither a codestream (SOC) nor a JP2 file at the start")
	}
	for pos := 0; pos < len(data); {
		if len(data)-pos < 8 {
			return nil, fmt.Errorf("JP2 box header truncated at offset %d", pos)
		}
		l := uint64(binary.BigEndian.Uint32(data[pos:]))
		typ := string(data[pos+4 : pos+8])
		hdr := uint64(8)
		switch l {
		case 0:
			l = uint64(len(data) - pos)
		case 1:
			if len(data)-pos < 16 {
				return nil, fmt.Errorf("JP2 box %q: extended length truncated at offset %d", typ, pos)
			}
			l = binary.BigEndian.Uint64(data[pos+8:])
			hdr = 16
		}
		if l < hdr || l > uint64(len(data)-pos) {
			return nil, fmt.Errorf("JP2 box %q at offset %d: length %d invalid", typ, pos, l)
		}
		if typ == "jp2c" {
			return data[pos+int(hdr) : pos+int(l)], nil
		}
		pos += int(l)
	}
	return nil, fmt.Errorf("JP2 file without a 'jp2c' codestream box")
}

func (d *j2kDecoder) decode() error {
	data := d.data
	if len(data) < 2 || data[0] != 0xFF || data[1] != j2kSOC {
		return fmt.Errorf("codestream does not start with SOC")
	}
	pos := 2
	sawSIZ := false
	// Main header (A.4.1, Figure A.3).
	for {
		m, seg, next, err := j2kSegment(data, pos)
		if err != nil {
			return err
		}
		if !sawSIZ && m != j2kSIZ {
			return fmt.Errorf("marker 0xFF%02X at offset %d: SIZ must follow SOC", m, pos)
		}
		if m == j2kSOT {
			break
		}
		switch m {
		case j2kSIZ:
			if sawSIZ {
				return fmt.Errorf("second SIZ at offset %d", pos)
			}
			sawSIZ = true
			if err := d.readSIZ(seg); err != nil {
				return fmt.Errorf("SIZ at offset %d: %w", pos, err)
			}
		default:
			if err := d.readCodingSegment(&d.main, m, seg, pos, true); err != nil {
				return err
			}
		}
		pos = next
	}
	if !d.main.hasCOD {
		return fmt.Errorf("main header lacks COD")
	}
	if !d.main.hasQCD {
		return fmt.Errorf("main header lacks QCD")
	}
	// Tile-parts (A.4.2) until EOC.
	d.tiles = map[int]*j2kTile{}
	for {
		if pos+2 > len(data) {
			return fmt.Errorf("codestream ends at offset %d without EOC", pos)
		}
		if data[pos] != 0xFF {
			return fmt.Errorf("offset %d: 0x%02X where a marker was expected", pos, data[pos])
		}
		if data[pos+1] == j2kEOC {
			break
		}
		if data[pos+1] != j2kSOT {
			return fmt.Errorf("marker 0xFF%02X at offset %d where SOT or EOC was expected", data[pos+1], pos)
		}
		next, err := d.readTilePart(pos)
		if err != nil {
			return err
		}
		pos = next
	}
	return d.decodeTiles()
}

// j2kSegment reads the marker segment at pos: the marker's second byte,
// its parameters (after Lxxx), and the offset after it. SOC, SOD, EOC and
// EPH have no length; SOD and EOC are returned with seg nil.
func j2kSegment(data []byte, pos int) (m byte, seg []byte, next int, err error) {
	if pos+2 > len(data) {
		return 0, nil, 0, fmt.Errorf("codestream truncated at offset %d in a header", pos)
	}
	if data[pos] != 0xFF {
		return 0, nil, 0, fmt.Errorf("offset %d: 0x%02X where a marker was expected", pos, data[pos])
	}
	m = data[pos+1]
	if m == j2kSOD || m == j2kEOC {
		return m, nil, pos + 2, nil
	}
	if m < 0x30 || (m >= 0x30 && m <= 0x3F) || m == j2kSOC || m == j2kEPH {
		return 0, nil, 0, fmt.Errorf("marker 0xFF%02X at offset %d is out of place in a header", m, pos)
	}
	if pos+4 > len(data) {
		return 0, nil, 0, fmt.Errorf("marker 0xFF%02X at offset %d: length truncated", m, pos)
	}
	l := int(binary.BigEndian.Uint16(data[pos+2:]))
	if l < 2 || pos+2+l > len(data) {
		return 0, nil, 0, fmt.Errorf("marker 0xFF%02X at offset %d: length %d runs past the end of the codestream", m, pos, l)
	}
	return m, data[pos+4 : pos+2+l], pos + 2 + l, nil
}

// readSIZ reads the image and tile size segment (A.5.1).
func (d *j2kDecoder) readSIZ(seg []byte) error {
	if len(seg) < 36 {
		return fmt.Errorf("length %d too short", len(seg)+2)
	}
	u := func(i int) int { return int(binary.BigEndian.Uint32(seg[i:])) }
	d.xsiz, d.ysiz, d.xo, d.yo = u(2), u(6), u(10), u(14)
	d.xt, d.yt, d.xto, d.yto = u(18), u(22), u(26), u(30)
	nc := int(binary.BigEndian.Uint16(seg[34:]))
	if nc < 1 || nc > 16384 {
		return fmt.Errorf("Csiz %d out of range 1..16384", nc)
	}
	if len(seg) != 36+3*nc {
		return fmt.Errorf("length %d does not match %d components", len(seg)+2, nc)
	}
	if d.xsiz <= d.xo || d.ysiz <= d.yo {
		return fmt.Errorf("empty image area: Xsiz %d, XOsiz %d, Ysiz %d, YOsiz %d", d.xsiz, d.xo, d.ysiz, d.yo)
	}
	if d.xt == 0 || d.yt == 0 || d.xto > d.xo || d.yto > d.yo || d.xto+d.xt <= d.xo || d.yto+d.yt <= d.yo {
		return fmt.Errorf("tile grid %d×%d at (%d,%d) does not cover image offset (%d,%d)", d.xt, d.yt, d.xto, d.yto, d.xo, d.yo)
	}
	d.width, d.height = d.xsiz-d.xo, d.ysiz-d.yo
	d.ntx = (d.xsiz - d.xto + d.xt - 1) / d.xt
	d.nty = (d.ysiz - d.yto + d.yt - 1) / d.yt
	if d.maxSamples <= 0 || d.width > d.maxSamples || d.height > d.maxSamples/d.width || nc > d.maxSamples/(d.width*d.height) {
		return fmt.Errorf("%d×%d×%d samples exceed the limit of %d", d.width, d.height, nc, d.maxSamples)
	}
	// Every tile holds a sample, so the tile count is at most the
	// image's: bounded by maxSamples too.
	d.comps = make([]j2kComponent, nc)
	for i := range d.comps {
		s, xr, yr := seg[36+3*i], seg[37+3*i], seg[38+3*i]
		p := int(s&0x7F) + 1
		if p > 16 {
			return fmt.Errorf("component %d: precision %d beyond 16 bits", i, p)
		}
		if xr != 1 || yr != 1 {
			return fmt.Errorf("component %d: sub-sampling %d×%d is not supported", i, xr, yr)
		}
		d.comps[i] = j2kComponent{precision: p, signed: s&0x80 != 0}
	}
	return nil
}

// readCodingSegment reads a COD, COC, QCD, QCC segment into def, or skips
// or refuses the other segments of a main (main) or tile-part header.
func (d *j2kDecoder) readCodingSegment(def *j2kDefaults, m byte, seg []byte, at int, main bool) error {
	var err error
	switch m {
	case j2kCOD:
		err = d.readCOD(def, seg)
	case j2kCOC:
		err = d.readCOC(def, seg)
	case j2kQCD:
		if err = j2kReadQuant(&def.qcd, seg); err == nil {
			def.hasQCD = true
		}
	case j2kQCC:
		c, n, e := d.componentIndex(seg)
		if e != nil {
			err = e
			break
		}
		q := new(j2kQuant)
		if err = j2kReadQuant(q, seg[n:]); err == nil {
			if def.qcc == nil {
				def.qcc = map[int]*j2kQuant{}
			}
			def.qcc[c] = q
		}
	case j2kRGN:
		return fmt.Errorf("RGN at offset %d: region of interest coding is not supported", at)
	case j2kPOC:
		err = d.readPOC(def, seg)
	case j2kPPM, j2kPPT:
		return fmt.Errorf("marker 0xFF%02X at offset %d: packed packet headers are not supported", m, at)
	case j2kCOM:
	case j2kTLM, j2kPLM, j2kCRG:
		if !main {
			return fmt.Errorf("marker 0xFF%02X at offset %d is not allowed in a tile-part header", m, at)
		}
	case j2kPLT:
		if main {
			return fmt.Errorf("PLT at offset %d is not allowed in the main header", at)
		}
	default:
		return fmt.Errorf("marker 0xFF%02X at offset %d is not supported", m, at)
	}
	if err != nil {
		return fmt.Errorf("marker 0xFF%02X at offset %d: %w", m, at, err)
	}
	return nil
}

// readPOC reads a progression order change segment (A.6.6, Table A.32)
// and appends its progressions to def's.
func (d *j2kDecoder) readPOC(def *j2kDefaults, seg []byte) error {
	cb := 1
	if len(d.comps) > 256 {
		cb = 2
	}
	n := 5 + 2*cb
	if len(seg) == 0 || len(seg)%n != 0 {
		return fmt.Errorf("length %d is not a multiple of %d", len(seg)+2, n)
	}
	comp := func(b []byte) int {
		if cb == 2 {
			return int(binary.BigEndian.Uint16(b))
		}
		return int(b[0])
	}
	for ; len(seg) > 0; seg = seg[n:] {
		p := j2kProgression{
			rs:    int(seg[0]),
			cs:    comp(seg[1:]),
			lye:   int(binary.BigEndian.Uint16(seg[1+cb:])),
			re:    int(seg[3+cb]),
			ce:    comp(seg[4+cb:]),
			order: int(seg[4+2*cb]),
		}
		if p.ce == 0 && cb == 1 {
			p.ce = 256 // Table A.32: CEpoc 0 is 256
		}
		if p.order > j2kCPRL {
			return fmt.Errorf("progression order %d unknown", p.order)
		}
		if p.rs >= p.re || p.cs >= p.ce || p.lye == 0 || p.re > j2kMaxLevels+1 {
			return fmt.Errorf("progression of resolutions %d..%d, components %d..%d, %d layers is empty or invalid", p.rs, p.re, p.cs, p.ce, p.lye)
		}
		if len(def.pocs) >= 4096 {
			return fmt.Errorf("more than 4096 progressions")
		}
		def.pocs = append(def.pocs, p)
	}
	return nil
}

// componentIndex reads Ccoc/Cqcc: one byte, or two when Csiz > 256.
func (d *j2kDecoder) componentIndex(seg []byte) (c, n int, err error) {
	if len(d.comps) > 256 {
		if len(seg) < 2 {
			return 0, 0, fmt.Errorf("segment too short")
		}
		c, n = int(binary.BigEndian.Uint16(seg)), 2
	} else {
		if len(seg) < 1 {
			return 0, 0, fmt.Errorf("segment too short")
		}
		c, n = int(seg[0]), 1
	}
	if c >= len(d.comps) {
		return 0, 0, fmt.Errorf("component %d of %d", c, len(d.comps))
	}
	return c, n, nil
}

func (d *j2kDecoder) readCOD(def *j2kDefaults, seg []byte) error {
	if len(seg) < 5 {
		return fmt.Errorf("segment too short")
	}
	def.scod = int(seg[0])
	if def.scod&^7 != 0 {
		return fmt.Errorf("Scod 0x%02X has reserved bits set", def.scod)
	}
	def.order = int(seg[1])
	if def.order > j2kCPRL {
		return fmt.Errorf("progression order %d unknown", def.order)
	}
	def.layers = int(binary.BigEndian.Uint16(seg[2:]))
	if def.layers == 0 {
		return fmt.Errorf("zero quality layers")
	}
	def.mct = int(seg[4])
	if def.mct > 1 {
		return fmt.Errorf("multiple component transform %d unknown", def.mct)
	}
	if def.mct == 1 && len(d.comps) < 3 {
		return fmt.Errorf("multiple component transform with %d components", len(d.comps))
	}
	if err := j2kReadCoding(&def.cod, seg[5:], def.scod&1 != 0); err != nil {
		return err
	}
	def.hasCOD = true
	return nil
}

func (d *j2kDecoder) readCOC(def *j2kDefaults, seg []byte) error {
	c, n, err := d.componentIndex(seg)
	if err != nil {
		return err
	}
	if len(seg) < n+1 {
		return fmt.Errorf("segment too short")
	}
	s := seg[n]
	if s&^1 != 0 {
		return fmt.Errorf("Scoc 0x%02X has reserved bits set", s)
	}
	cc := new(j2kCoding)
	if err := j2kReadCoding(cc, seg[n+1:], s&1 != 0); err != nil {
		return err
	}
	if def.coc == nil {
		def.coc = map[int]*j2kCoding{}
	}
	def.coc[c] = cc
	return nil
}

// j2kReadCoding reads SPcod/SPcoc (Tables A.15, A.18, A.19, A.20, A.21).
func j2kReadCoding(c *j2kCoding, p []byte, precincts bool) error {
	if len(p) < 5 {
		return fmt.Errorf("segment too short")
	}
	c.levels = int(p[0])
	if c.levels > j2kMaxLevels {
		return fmt.Errorf("%d decomposition levels, more than %d", c.levels, j2kMaxLevels)
	}
	c.xcb, c.ycb = int(p[1])+2, int(p[2])+2
	if c.xcb > 10 || c.ycb > 10 || c.xcb+c.ycb > 12 {
		return fmt.Errorf("code-block size 2^%d×2^%d invalid", c.xcb, c.ycb)
	}
	c.style = int(p[3])
	if c.style&^0x3F != 0 {
		return fmt.Errorf("code-block style 0x%02X has reserved bits set", c.style)
	}
	switch p[4] {
	case 0:
		c.reversible = false
	case 1:
		c.reversible = true
	default:
		return fmt.Errorf("wavelet transform %d unknown", p[4])
	}
	n := 5
	if precincts {
		if len(p) != n+c.levels+1 {
			return fmt.Errorf("length does not match %d precinct sizes", c.levels+1)
		}
		for r := 0; r <= c.levels; r++ {
			v := p[n+r]
			if r > 0 && (v&0x0F == 0 || v>>4 == 0) {
				return fmt.Errorf("precinct size 2^%d×2^%d at resolution %d", v&0x0F, v>>4, r)
			}
			c.pp[r] = v
		}
	} else {
		if len(p) != n {
			return fmt.Errorf("length does not match the coding style")
		}
		for r := range c.pp {
			c.pp[r] = 0xFF
		}
	}
	return nil
}

// j2kReadQuant reads Sqcx and SPqcx (A.6.4, Tables A.28 to A.30).
func j2kReadQuant(q *j2kQuant, p []byte) error {
	if len(p) < 1 {
		return fmt.Errorf("segment too short")
	}
	q.style, q.guard = int(p[0]&0x1F), int(p[0]>>5)
	p = p[1:]
	q.eps, q.mu = q.eps[:0], q.mu[:0]
	switch q.style {
	case 0:
		if len(p) == 0 || len(p) > 3*j2kMaxLevels+1 {
			return fmt.Errorf("%d exponents", len(p))
		}
		for _, b := range p {
			if b&7 != 0 {
				return fmt.Errorf("reserved bits of an exponent set")
			}
			q.eps = append(q.eps, int(b>>3))
		}
	case 1, 2:
		if len(p)%2 != 0 || len(p) == 0 || len(p) > 2*(3*j2kMaxLevels+1) || (q.style == 1 && len(p) != 2) {
			return fmt.Errorf("quantization style %d with %d bytes of step sizes", q.style, len(p))
		}
		for i := 0; i < len(p); i += 2 {
			v := int(binary.BigEndian.Uint16(p[i:]))
			q.eps = append(q.eps, v>>11)
			q.mu = append(q.mu, v&0x7FF)
		}
	default:
		return fmt.Errorf("quantization style %d unknown", q.style)
	}
	return nil
}

// readTilePart reads the tile-part at pos (SOT, A.4.2) and its header up
// to SOD, and keeps its body for its tile. It returns the offset of the
// next tile-part (or EOC).
func (d *j2kDecoder) readTilePart(pos int) (int, error) {
	_, seg, next, err := j2kSegment(d.data, pos)
	if err != nil {
		return 0, err
	}
	if len(seg) != 8 {
		return 0, fmt.Errorf("SOT at offset %d: length %d, want 10", pos, len(seg)+2)
	}
	isot := int(binary.BigEndian.Uint16(seg))
	psot := int(binary.BigEndian.Uint32(seg[2:]))
	tpsot := int(seg[6])
	if isot >= d.ntx*d.nty {
		return 0, fmt.Errorf("SOT at offset %d: tile %d of %d", pos, isot, d.ntx*d.nty)
	}
	end := len(d.data)
	if psot != 0 {
		if psot < 14 || psot > len(d.data)-pos {
			return 0, fmt.Errorf("SOT at offset %d: tile-part length %d runs past the end of the codestream", pos, psot)
		}
		end = pos + psot
	} else if len(d.data) >= 2 && d.data[len(d.data)-2] == 0xFF && d.data[len(d.data)-1] == j2kEOC {
		end = len(d.data) - 2
	}
	t := d.tiles[isot]
	if t == nil {
		t = &j2kTile{}
		d.tiles[isot] = t
		d.tileOrder = append(d.tileOrder, isot)
	}
	if tpsot != t.parts {
		return 0, fmt.Errorf("SOT at offset %d: tile %d part %d, want part %d", pos, isot, tpsot, t.parts)
	}
	t.parts++
	for p := next; ; {
		if p >= end {
			return 0, fmt.Errorf("tile-part at offset %d: header runs past its end without SOD", pos)
		}
		m, seg, n, err := j2kSegment(d.data[:end], p)
		if err != nil {
			return 0, err
		}
		if m == j2kSOD {
			t.data = append(t.data, d.data[n:end]...)
			return end, nil
		}
		if m == j2kEOC || m == j2kSOT || m == j2kSIZ {
			return 0, fmt.Errorf("marker 0xFF%02X at offset %d in a tile-part header", m, p)
		}
		if (m == j2kCOD || m == j2kCOC || m == j2kQCD || m == j2kQCC) && tpsot != 0 {
			return 0, fmt.Errorf("marker 0xFF%02X at offset %d in tile-part %d: only the first tile-part may set coding", m, p, tpsot)
		}
		if err := d.readCodingSegment(&t.def, m, seg, p, false); err != nil {
			return 0, err
		}
		p = n
	}
}

// coding returns component c's coding style in tile t: tile COC, tile
// COD, main COC, main COD, in that precedence (A.6).
func (d *j2kDecoder) coding(t *j2kTile, c int) *j2kCoding {
	if cc := t.def.coc[c]; cc != nil {
		return cc
	}
	if t.def.hasCOD {
		return &t.def.cod
	}
	if cc := d.main.coc[c]; cc != nil {
		return cc
	}
	return &d.main.cod
}

func (d *j2kDecoder) quant(t *j2kTile, c int) *j2kQuant {
	if q := t.def.qcc[c]; q != nil {
		return q
	}
	if t.def.hasQCD {
		return &t.def.qcd
	}
	if q := d.main.qcc[c]; q != nil {
		return q
	}
	return &d.main.qcd
}

func (d *j2kDecoder) decodeTiles() error {
	if len(d.tiles) != d.ntx*d.nty {
		for i := 0; i < d.ntx*d.nty; i++ {
			if d.tiles[i] == nil {
				return fmt.Errorf("tile %d of %d is missing", i, d.ntx*d.nty)
			}
		}
	}
	d.pix = make([]uint16, d.width*d.height*len(d.comps))
	for _, i := range d.tileOrder {
		if err := d.decodeTile(i, d.tiles[i]); err != nil {
			return fmt.Errorf("tile %d: %w", i, err)
		}
		d.tiles[i].data = nil
	}
	return nil
}

// Geometry helpers (B.5, B.6): integer ceil(a/2^s) and floor(a/2^s) of
// non-negative a, and ceil(a/b) of possibly negative a.
func j2kCeilShift(a, s int) int { return (a + (1 << s) - 1) >> s }

func j2kCeilDiv(a, b int) int {
	if a >= 0 {
		return (a + b - 1) / b
	}
	return -((-a) / b)
}

// j2kCblk is one code-block: its area in subband coordinates and the
// coded data that packets have delivered.
type j2kCblk struct {
	x0, y0, x1, y1 int
	included       bool
	numbps         int // magnitude bit-planes Mb minus the missing MSBs
	lblock         int
	passes         int // coding passes delivered
	data           []byte
	segs           []j2kSeg
	seg1           [1]j2kSeg // segs' first backing array: most blocks have one segment
}

// j2kSeg is one codeword segment (B.10.7.1): bytes data[start:end] of
// the code-block coding passes of it; done once its last pass terminated.
type j2kSeg struct {
	start, end, passes int
	done               bool
}

// j2kPrecBand is a precinct's part of one subband: its code-blocks and
// the inclusion and zero bit-plane tag trees (B.10.2).
type j2kPrecBand struct {
	band      *j2kBand
	cw, ch    int
	cbs       []j2kCblk
	incl, zbp j2kTagTree
}

type j2kPrecinct struct {
	bands      [3]j2kPrecBand
	nb         int
	hitX, hitY int // where the position loops of B.12.1.3 meet it
	c, r, idx  int
	next       int // the layer of its next packet
}

type j2kBand struct {
	orient         int
	x0, y0, x1, y1 int // subband coordinates (B-15)
	offX, offY     int // where its coefficients lie in the component's array
	mb             int // magnitude bit-planes Mb (E-2)
	delta          float32
}

type j2kRes struct {
	x0, y0, x1, y1 int
	ppx, ppy       int
	pw, ph         int
	bands          []j2kBand
	precs          []j2kPrecinct
	xcb, ycb       int
}

type j2kTileComp struct {
	x0, y0, x1, y1 int
	cod            *j2kCoding
	res            []j2kRes
	ci             []int32
	cf             []float32
}

// j2kPending is a code-block's contribution to the packet being read.
type j2kPending struct {
	cb     *j2kCblk
	groups []int // (length, passes) per codeword segment part
}

// decodeTile decodes tile i: tier-2, tier-1, dequantization, inverse
// wavelet and component transforms, and writes its samples into d.pix.
func (d *j2kDecoder) decodeTile(ti int, t *j2kTile) error {
	p, q := ti%d.ntx, ti/d.ntx
	tx0 := max(d.xto+p*d.xt, d.xo)
	tx1 := min(d.xto+(p+1)*d.xt, d.xsiz)
	ty0 := max(d.yto+q*d.yt, d.yo)
	ty1 := min(d.yto+(q+1)*d.yt, d.ysiz)
	def := &d.main
	if t.def.hasCOD {
		def = &t.def
	}
	scod, order, layers, mct := def.scod, def.order, def.layers, def.mct
	tcs := make([]j2kTileComp, len(d.comps))
	var precs []*j2kPrecinct
	packets := len(t.data)
	for c := range tcs {
		tc := &tcs[c]
		tc.x0, tc.y0, tc.x1, tc.y1 = tx0, ty0, tx1, ty1
		tc.cod = d.coding(t, c)
		if err := d.buildComponent(tc, d.quant(t, c), c, t.data, layers, &packets); err != nil {
			return fmt.Errorf("component %d: %w", c, err)
		}
		for r := range tc.res {
			for k := range tc.res[r].precs {
				precs = append(precs, &tc.res[r].precs[k])
			}
		}
	}
	if mct == 1 {
		for c := 1; c < 3; c++ {
			if tcs[c].cod.reversible != tcs[0].cod.reversible {
				return fmt.Errorf("component transform over components with different wavelets")
			}
		}
	}
	pocs := d.main.pocs
	if t.def.pocs != nil {
		pocs = t.def.pocs
	}
	if err := d.readPackets(t.data, tcs, precs, pocs, order, layers, scod); err != nil {
		return err
	}
	for c := range tcs {
		if err := d.decodeBlocks(&tcs[c]); err != nil {
			return fmt.Errorf("component %d: %w", c, err)
		}
		j2kInverseDWT(&tcs[c], &d.dwtI, &d.dwtF)
	}
	d.writeTile(tcs, mct == 1)
	for c := range tcs {
		if tcs[c].ci != nil {
			d.spareI = append(d.spareI, tcs[c].ci)
		}
		if tcs[c].cf != nil {
			d.spareF = append(d.spareF, tcs[c].cf)
		}
	}
	return nil
}

// j2kTake returns n zeros: a spare buffer big enough, taken from
// spares, or a new one.
func j2kTake[T int32 | float32](spares *[][]T, n int) []T {
	sp := *spares
	for k, b := range sp {
		if cap(b) >= n {
			sp[k] = sp[len(sp)-1]
			*spares = sp[:len(sp)-1]
			b = b[:n]
			clear(b)
			return b
		}
	}
	return make([]T, n)
}

// buildComponent lays out a tile-component's resolutions, subbands,
// precincts and code-blocks (B.5 to B.7) and its quantization (E.1).
func (d *j2kDecoder) buildComponent(tc *j2kTileComp, qu *j2kQuant, c int, tileData []byte, layers int, packets *int) error {
	cod := tc.cod
	nl := cod.levels
	w, h := tc.x1-tc.x0, tc.y1-tc.y0
	// The number of subbands to quantize; derived quantization has one
	// value for all.
	nbands := 3*nl + 1
	if qu.style != 1 && len(qu.eps) < nbands {
		return fmt.Errorf("quantization gives %d step sizes for %d subbands", len(qu.eps), nbands)
	}
	if qu.style == 0 && !cod.reversible {
		return fmt.Errorf("irreversible wavelet without quantization")
	}
	if cod.reversible && qu.style != 0 {
		return fmt.Errorf("reversible wavelet with scalar quantization is not supported")
	}
	if cod.style&^(j2kBypass|j2kReset|j2kTermAll|j2kVCausal|j2kPredTerm|j2kSegSym) != 0 {
		return fmt.Errorf("code-block style 0x%02X unknown", cod.style)
	}
	if w*h > 0 {
		if cod.reversible {
			tc.ci = j2kTake(&d.spareI, w*h)
		} else {
			tc.cf = j2kTake(&d.spareF, w*h)
		}
	}
	budget := 2*w*h + 64 // code-blocks and precincts (non-empty ones hold a sample)
	tc.res = make([]j2kRes, nl+1)
	prec := d.comps[c].precision
	for r := 0; r <= nl; r++ {
		rs := &tc.res[r]
		s := nl - r
		rs.x0, rs.y0 = j2kCeilShift(tc.x0, s), j2kCeilShift(tc.y0, s)
		rs.x1, rs.y1 = j2kCeilShift(tc.x1, s), j2kCeilShift(tc.y1, s)
		rs.ppx, rs.ppy = int(cod.pp[r]&0x0F), int(cod.pp[r]>>4)
		rs.xcb, rs.ycb = cod.xcb, cod.ycb
		if r > 0 {
			rs.xcb, rs.ycb = min(rs.xcb, rs.ppx-1), min(rs.ycb, rs.ppy-1)
		} else {
			rs.xcb, rs.ycb = min(rs.xcb, rs.ppx), min(rs.ycb, rs.ppy)
		}
		if rs.x1 > rs.x0 && rs.y1 > rs.y0 {
			rs.pw = j2kCeilShift(rs.x1, rs.ppx) - rs.x0>>rs.ppx
			rs.ph = j2kCeilShift(rs.y1, rs.ppy) - rs.y0>>rs.ppy
		}
		// Subbands (B.5): LL at r = 0, else HL, LH, HH of level nb.
		var orients []int
		if r == 0 {
			orients = []int{j2kLL}
		} else {
			orients = []int{j2kHL, j2kLH, j2kHH}
		}
		nb := nl - r + 1
		if r == 0 {
			nb = nl
		}
		// The low-pass extent of this resolution, where the high-pass
		// subbands start in the Mallat layout.
		lw := j2kCeilShift(rs.x1, 1) - j2kCeilShift(rs.x0, 1)
		lh := j2kCeilShift(rs.y1, 1) - j2kCeilShift(rs.y0, 1)
		for bi, o := range orients {
			b := j2kBand{orient: o}
			xob, yob := 0, 0
			if o == j2kHL || o == j2kHH {
				xob = 1
			}
			if o == j2kLH || o == j2kHH {
				yob = 1
			}
			if r == 0 {
				b.x0, b.y0, b.x1, b.y1 = rs.x0, rs.y0, rs.x1, rs.y1
			} else {
				half := 1 << (nb - 1)
				b.x0 = j2kCeilDiv(tc.x0-xob*half, 1<<nb)
				b.y0 = j2kCeilDiv(tc.y0-yob*half, 1<<nb)
				b.x1 = j2kCeilDiv(tc.x1-xob*half, 1<<nb)
				b.y1 = j2kCeilDiv(tc.y1-yob*half, 1<<nb)
				b.offX, b.offY = xob*lw, yob*lh
			}
			// Quantization (E.1.1): band index in SPqcd order.
			k := 0
			if r > 0 {
				k = 3*(r-1) + 1 + bi
			}
			var eps, mu int
			if qu.style == 1 {
				eps = qu.eps[0] - nl + nb
				if r == 0 {
					eps = qu.eps[0]
				}
				mu = qu.mu[0]
				if eps < 0 {
					return fmt.Errorf("derived exponent %d of subband %d negative", eps, k)
				}
			} else {
				eps = qu.eps[k]
				if qu.style == 2 {
					mu = qu.mu[k]
				}
			}
			b.mb = qu.guard + eps - 1
			if !cod.reversible {
				gain := [4]int{0, 1, 1, 2}[o]
				b.delta = float32(math.Ldexp(1+float64(mu)/2048, prec+gain-eps))
			}
			rs.bands = append(rs.bands, b)
		}
		if rs.pw*rs.ph > budget {
			return fmt.Errorf("resolution %d: %d×%d precincts", r, rs.pw, rs.ph)
		}
		budget -= rs.pw * rs.ph
		// Every packet takes at least a byte of the tile's data (B.9:
		// packed headers are refused), which bounds the precincts.
		*packets -= rs.pw * rs.ph * layers
		if *packets < 0 {
			return fmt.Errorf("%d bytes of tile data cannot hold the packets of %d×%d precincts at resolution %d", len(tileData), rs.pw, rs.ph, r)
		}
		rs.precs = make([]j2kPrecinct, rs.pw*rs.ph)
		gx0, gy0 := rs.x0>>rs.ppx, rs.y0>>rs.ppy
		for py := 0; py < rs.ph; py++ {
			for px := 0; px < rs.pw; px++ {
				pr := &rs.precs[py*rs.pw+px]
				pr.c, pr.r, pr.idx = c, r, py*rs.pw+px
				gx, gy := gx0+px, gy0+py
				pr.hitX = max(tc.x0, gx<<rs.ppx<<s)
				pr.hitY = max(tc.y0, gy<<rs.ppy<<s)
				pr.nb = len(rs.bands)
				for bi := range rs.bands {
					b := &rs.bands[bi]
					pb := &pr.bands[bi]
					pb.band = b
					sx, sy := rs.ppx, rs.ppy
					if r > 0 {
						sx, sy = sx-1, sy-1
					}
					x0, y0 := max(b.x0, gx<<sx), max(b.y0, gy<<sy)
					x1, y1 := min(b.x1, (gx+1)<<sx), min(b.y1, (gy+1)<<sy)
					if x1 <= x0 || y1 <= y0 {
						continue
					}
					cx0, cy0 := x0>>rs.xcb, y0>>rs.ycb
					pb.cw = j2kCeilShift(x1, rs.xcb) - cx0
					pb.ch = j2kCeilShift(y1, rs.ycb) - cy0
					if pb.cw*pb.ch > budget {
						return fmt.Errorf("resolution %d: too many code-blocks", r)
					}
					budget -= pb.cw * pb.ch
					pb.cbs = make([]j2kCblk, pb.cw*pb.ch)
					for j := 0; j < pb.ch; j++ {
						for i := 0; i < pb.cw; i++ {
							cb := &pb.cbs[j*pb.cw+i]
							cb.x0 = max(x0, (cx0+i)<<rs.xcb)
							cb.y0 = max(y0, (cy0+j)<<rs.ycb)
							cb.x1 = min(x1, (cx0+i+1)<<rs.xcb)
							cb.y1 = min(y1, (cy0+j+1)<<rs.ycb)
							cb.lblock = 3
						}
					}
					pb.incl.init(pb.cw, pb.ch)
					pb.zbp.init(pb.cw, pb.ch)
				}
			}
		}
	}
	return nil
}

// j2kProgression is one progression of a tile: the default one of COD,
// or one of POC's (A.6.6): layers below lye, resolutions rs..re−1,
// components cs..ce−1, in order.
type j2kProgression struct {
	rs, cs, lye, re, ce, order int
}

// readPackets reads every packet of a tile in its progression order
// (B.12) and hands each code-block its coded data. With POC, the
// progressions it lists come first, each skipping the packets an earlier
// one read (B.12.2); the progression of COD then reads any left.
func (d *j2kDecoder) readPackets(data []byte, tcs []j2kTileComp, precs []*j2kPrecinct, pocs []j2kProgression, order, layers, scod int) error {
	br := j2kPacketReader{data: data}
	maxR := 0
	for c := range tcs {
		maxR = max(maxR, len(tcs[c].res))
	}
	progs := append(pocs[:len(pocs):len(pocs)], j2kProgression{0, 0, layers, maxR, len(tcs), order})
	// Each progression visits at most every packet; bound their work by
	// the data as the packets' count is.
	if len(progs)*layers*len(precs) > 64*len(data)+1<<22 {
		return fmt.Errorf("%d progressions over %d packets", len(progs), layers*len(precs))
	}
	sorted := make([]*j2kPrecinct, 0, len(precs))
	for pi, pg := range progs {
		lye, re, ce := min(pg.lye, layers), min(pg.re, maxR), min(pg.ce, len(tcs))
		packet := func(pr *j2kPrecinct, l int) error {
			if l != pr.next {
				return nil // read by an earlier progression
			}
			if pi > 0 && pi == len(progs)-1 && br.pos >= len(data) {
				// OpenJPEG writes only the packets its POC lists: those
				// left over are absent, and decode as empty.
				return nil
			}
			pr.next++
			if err := d.readPacket(&br, &tcs[pr.c], pr, l, scod); err != nil {
				return fmt.Errorf("packet of layer %d, resolution %d, component %d, precinct %d (%s): %w", l, pr.r, pr.c, pr.idx, j2kOrderNames[pg.order], err)
			}
			return nil
		}
		switch pg.order {
		case j2kLRCP, j2kRLCP:
			loop := func(l, r int) error {
				for c := pg.cs; c < ce; c++ {
					if r >= len(tcs[c].res) {
						continue
					}
					for k := range tcs[c].res[r].precs {
						if err := packet(&tcs[c].res[r].precs[k], l); err != nil {
							return err
						}
					}
				}
				return nil
			}
			if pg.order == j2kLRCP {
				for l := 0; l < lye; l++ {
					for r := pg.rs; r < re; r++ {
						if err := loop(l, r); err != nil {
							return err
						}
					}
				}
			} else {
				for r := pg.rs; r < re; r++ {
					for l := 0; l < lye; l++ {
						if err := loop(l, r); err != nil {
							return err
						}
					}
				}
			}
		default:
			key := func(p *j2kPrecinct) [4]int {
				switch pg.order {
				case j2kRPCL:
					return [4]int{p.r, p.hitY, p.hitX, p.c}
				case j2kPCRL:
					return [4]int{p.hitY, p.hitX, p.c, p.r}
				}
				return [4]int{p.c, p.hitY, p.hitX, p.r}
			}
			sorted = sorted[:0]
			for _, p := range precs {
				if p.r >= pg.rs && p.r < re && p.c >= pg.cs && p.c < ce {
					sorted = append(sorted, p)
				}
			}
			sort.SliceStable(sorted, func(i, j int) bool {
				a, b := key(sorted[i]), key(sorted[j])
				for k := range a {
					if a[k] != b[k] {
						return a[k] < b[k]
					}
				}
				return false
			})
			for _, pr := range sorted {
				for l := 0; l < lye; l++ {
					if err := packet(pr, l); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// j2kPacketReader reads packet headers (B.10.1): bits MSB first, where a
// byte after 0xFF carries only 7 bits (its MSB is a stuffed 0).
type j2kPacketReader struct {
	data  []byte
	pos   int  // next byte
	cur   byte // byte being read
	n     uint // bits left in cur
	after bool // cur is 0xFF
	err   bool
}

func (b *j2kPacketReader) bit() int {
	if b.n == 0 {
		if b.pos >= len(b.data) {
			b.err = true
			return 0
		}
		b.after = b.cur == 0xFF
		b.cur = b.data[b.pos]
		b.pos++
		b.n = 8
		if b.after {
			b.n = 7
		}
	}
	b.n--
	return int(b.cur>>b.n) & 1
}

func (b *j2kPacketReader) bitsN(n int) int {
	v := 0
	for ; n > 0; n-- {
		v = v<<1 | b.bit()
	}
	return v
}

// align ends a packet header: the rest of the byte is padding, and a
// header whose last byte is 0xFF is followed by a stuffed byte.
func (b *j2kPacketReader) align() {
	b.n = 0
	if b.cur == 0xFF {
		if b.pos >= len(b.data) {
			b.err = true
			return
		}
		b.pos++
	}
	b.cur = 0
}

// j2kTerminates tells whether coding pass k (from 0) of a code-block
// ends a codeword segment (D.4.1, Table D.9).
func j2kTerminates(style, k int) bool {
	if style&j2kTermAll != 0 {
		return true
	}
	if style&j2kBypass != 0 {
		if k < 9 {
			return false
		}
		if k == 9 {
			return true
		}
		return k%3 != 1
	}
	return false
}

// readPacket reads one packet (B.9, B.10): its header, then the data of
// each code-block it includes.
func (d *j2kDecoder) readPacket(br *j2kPacketReader, tc *j2kTileComp, pr *j2kPrecinct, layer, scod int) error {
	data := br.data
	if br.pos >= len(data) {
		return fmt.Errorf("tile data end at byte %d", br.pos)
	}
	if scod&2 != 0 && br.pos+1 < len(data) && data[br.pos] == 0xFF && data[br.pos+1] == j2kSOP {
		if br.pos+6 > len(data) || binary.BigEndian.Uint16(data[br.pos+2:]) != 4 {
			return fmt.Errorf("SOP at tile byte %d malformed", br.pos)
		}
		br.pos += 6
	}
	br.n, br.cur = 0, 0
	style := tc.cod.style
	pend := d.scratch[:0]
	lengths := &d.lengths
	*lengths = (*lengths)[:0]
	if br.bit() == 1 {
		for bi := 0; bi < pr.nb; bi++ {
			pb := &pr.bands[bi]
			for k := range pb.cbs {
				cb := &pb.cbs[k]
				x, y := k%pb.cw, k/pb.cw
				var inc bool
				if !cb.included {
					inc = pb.incl.decode(br, x, y, layer+1) <= layer
				} else {
					inc = br.bit() == 1
				}
				if br.err {
					return fmt.Errorf("header runs past the tile data")
				}
				if !inc {
					continue
				}
				if !cb.included {
					zb := 0
					for thr := 1; ; thr++ {
						if thr > 64 || br.err {
							return fmt.Errorf("zero bit-plane tag tree undecodable")
						}
						if v := pb.zbp.decode(br, x, y, thr); v < thr {
							zb = v
							break
						}
					}
					cb.numbps = pb.band.mb - zb
					if cb.numbps > j2kMaxBitplanes {
						return fmt.Errorf("code-block with %d bit-planes", cb.numbps)
					}
					cb.included = true
				}
				// Number of coding passes (Table B.4).
				np := 1
				if br.bit() == 1 {
					np = 2
					if br.bit() == 1 {
						v := br.bitsN(2)
						np = 3 + v
						if v == 3 {
							v = br.bitsN(5)
							np = 6 + v
							if v == 31 {
								np = 37 + br.bitsN(7)
							}
						}
					}
				}
				for br.bit() == 1 {
					cb.lblock++
					if cb.lblock > 32 || br.err {
						return fmt.Errorf("Lblock beyond 32")
					}
				}
				if cb.passes+np > 3*cb.numbps-2 {
					return fmt.Errorf("code-block given %d coding passes for %d bit-planes", cb.passes+np, cb.numbps)
				}
				// Codeword segments (B.10.7): a length per terminated
				// group of passes, and for the last, unterminated one.
				first := len(*lengths)
				for k0 := cb.passes; k0 < cb.passes+np; {
					k1 := k0
					for k1 < cb.passes+np-1 && !j2kTerminates(style, k1) {
						k1++
					}
					n := k1 - k0 + 1
					l := br.bitsN(cb.lblock + bits.Len(uint(n)) - 1)
					*lengths = append(*lengths, l, n)
					k0 = k1 + 1
				}
				pend = append(pend, j2kPending{cb: cb, groups: (*lengths)[first:len(*lengths):len(*lengths)]})
				cb.passes += np
				if br.err {
					return fmt.Errorf("header runs past the tile data")
				}
			}
		}
	}
	br.align()
	if br.err {
		return fmt.Errorf("header runs past the tile data")
	}
	if scod&4 != 0 {
		if br.pos+2 > len(data) || data[br.pos] != 0xFF || data[br.pos+1] != j2kEPH {
			return fmt.Errorf("EPH missing at tile byte %d", br.pos)
		}
		br.pos += 2
	}
	for _, p := range pend {
		cb := p.cb
		for g := 0; g < len(p.groups); g += 2 {
			l, n := p.groups[g], p.groups[g+1]
			if l > len(data)-br.pos {
				return fmt.Errorf("code-block data of %d bytes run past the tile data", l)
			}
			if len(cb.data)+l > 1<<30 {
				return fmt.Errorf("code-block data too long")
			}
			// Tile data cannot hold more: cb.data grows with the
			// codestream only. A code-block's first contribution is
			// the tile data itself, not a copy (the tile data outlive
			// tier-1 and are not written); its capacity ends there, so
			// that a later contribution appends to a copy.
			start := len(cb.data)
			if start == 0 {
				cb.data = data[br.pos : br.pos+l : br.pos+l]
			} else {
				cb.data = append(cb.data, data[br.pos:br.pos+l]...)
			}
			br.pos += l
			last := cb.passesBefore(p, g) + n - 1
			if k := len(cb.segs); k > 0 && !cb.segs[k-1].done {
				cb.segs[k-1].end += l
				cb.segs[k-1].passes += n
				cb.segs[k-1].done = j2kTerminates(style, last)
			} else {
				if cb.segs == nil {
					cb.segs = cb.seg1[:0]
				}
				cb.segs = append(cb.segs, j2kSeg{start: start, end: start + l, passes: n, done: j2kTerminates(style, last)})
			}
		}
	}
	d.scratch = pend[:0]
	return nil
}

// passesBefore returns the index of the first pass of group g of pending
// contribution p: the passes delivered before the packet, plus those of
// the earlier groups.
func (cb *j2kCblk) passesBefore(p j2kPending, g int) int {
	total := 0
	for i := 1; i < len(p.groups); i += 2 {
		total += p.groups[i]
	}
	k := cb.passes - total
	for i := 0; i < g; i += 2 {
		k += p.groups[i+1]
	}
	return k
}

// j2kTagTree is a tag tree (B.10.2): a node per 2×2 children per level;
// each node's value is at least its parent's. Values are decoded
// lazily, against increasing thresholds: low is a node's lower bound,
// known whether it is its value.
type j2kTagTree struct {
	lv    []j2kTagLevel // leaves first, root last
	low   []int32
	known []bool
}

type j2kTagLevel struct{ w, off int }

func (t *j2kTagTree) init(w, h int) {
	n := 0
	t.lv = t.lv[:0]
	for {
		t.lv = append(t.lv, j2kTagLevel{w, n})
		n += w * h
		if w == 1 && h == 1 {
			break
		}
		w, h = (w+1)/2, (h+1)/2
	}
	t.low = make([]int32, n)
	t.known = make([]bool, n)
}

// decode decodes leaf (x, y) against threshold thr: it returns its value
// if that is below thr, else thr or more.
func (t *j2kTagTree) decode(br *j2kPacketReader, x, y, thr int) int {
	low := int32(0)
	th := int32(thr)
	for l := len(t.lv) - 1; l >= 0; l-- {
		n := t.lv[l].off + (y>>l)*t.lv[l].w + x>>l
		if t.low[n] < low {
			t.low[n] = low
		}
		for !t.known[n] && t.low[n] < th {
			if br.bit() == 1 {
				t.known[n] = true
			} else {
				t.low[n]++
			}
			if br.err {
				return thr
			}
		}
		low = t.low[n]
	}
	return int(low)
}

// decodeBlocks runs tier-1 on every code-block of a tile-component and
// dequantizes the coefficients into its array (E.1).
func (d *j2kDecoder) decodeBlocks(tc *j2kTileComp) error {
	w := tc.x1 - tc.x0
	for r := range tc.res {
		rs := &tc.res[r]
		for k := range rs.precs {
			pr := &rs.precs[k]
			for bi := 0; bi < pr.nb; bi++ {
				pb := &pr.bands[bi]
				b := pb.band
				for i := range pb.cbs {
					cb := &pb.cbs[i]
					if cb.passes == 0 {
						continue
					}
					if err := d.t1.decode(cb, b.orient, tc.cod.style); err != nil {
						return fmt.Errorf("resolution %d code-block at (%d,%d): %w", r, cb.x0, cb.y0, err)
					}
					cw := cb.x1 - cb.x0
					base := (b.offY+cb.y0-b.y0)*w + b.offX + cb.x0 - b.x0
					st := d.t1.stride
					for y := 0; y < cb.y1-cb.y0; y++ {
						at := (y+1)*st + 1
						mag := d.t1.data[at : at+cw]
						fl := d.t1.flags[at : at+cw]
						o := base + y*w
						if tc.ci != nil {
							// Magnitudes have one fractional bit
							// (E-6 with r = 0 for fully decoded
							// samples; the bit is dropped).
							dst := tc.ci[o : o+cw]
							for x, f := range fl {
								var v int32
								if f&j2kSig != 0 {
									v = mag[x] >> 1
									if f&j2kNeg != 0 {
										v = -v
									}
								}
								dst[x] = v
							}
						} else {
							dst := tc.cf[o : o+cw]
							half := b.delta / 2
							for x, f := range fl {
								var v int32
								if f&j2kSig != 0 {
									v = mag[x]
									if f&j2kNeg != 0 {
										v = -v
									}
								}
								dst[x] = float32(v) * half
							}
						}
					}
					cb.data, cb.segs = nil, nil
				}
			}
		}
	}
	return nil
}

// writeTile applies the inverse component transform (G.2, G.3) and the
// DC level shift (G.1.2) and stores the tile's samples.
func (d *j2kDecoder) writeTile(tcs []j2kTileComp, mct bool) {
	tc0 := &tcs[0]
	w, h := tc0.x1-tc0.x0, tc0.y1-tc0.y0
	n := w * h
	if mct {
		if tc0.ci != nil {
			a, b, c := tcs[0].ci, tcs[1].ci, tcs[2].ci
			for i := 0; i < n; i++ {
				y0, y1, y2 := a[i], b[i], c[i]
				g := y0 - (y1+y2)>>2
				a[i], b[i], c[i] = y2+g, g, y1+g
			}
		} else {
			a, b, c := tcs[0].cf, tcs[1].cf, tcs[2].cf
			for i := 0; i < n; i++ {
				y, cb, cr := a[i], b[i], c[i]
				// Each product rounded on its own (no fused
				// multiply-add), as in the lifting.
				a[i] = y + float32(1.402*cr)
				b[i] = y - float32(0.34413*cb) - float32(0.71414*cr)
				c[i] = y + float32(1.772*cb)
			}
		}
	}
	if w <= 0 {
		return
	}
	nc := len(d.comps)
	for ci := range tcs {
		tc := &tcs[ci]
		comp := d.comps[ci]
		lo, hi := 0, 1<<comp.precision-1
		shift := 1 << (comp.precision - 1)
		if comp.signed {
			lo, hi, shift = -shift, shift-1, 0
		}
		mask := 1<<comp.precision - 1
		for y := 0; y < h; y++ {
			o := ((tc.y0-d.yo+y)*d.width+tc.x0-d.xo)*nc + ci
			dst := d.pix[o : o+(w-1)*nc+1]
			if tc.ci != nil {
				for x, c := range tc.ci[y*w : (y+1)*w] {
					v := min(max(int(c)+shift, lo), hi)
					dst[x*nc] = uint16(v & mask)
				}
				continue
			}
			for x, c := range tc.cf[y*w : (y+1)*w] {
				f := min(max(float64(c), -(1<<30)), 1<<30)
				v := min(max(int(math.RoundToEven(f))+shift, lo), hi)
				dst[x*nc] = uint16(v & mask)
			}
		}
	}
}
