package dicom

import (
	"bufio"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// MaxPixels bounds one image: 2²⁸ pixels, the image package's callers'
// bound for every other format.
const MaxPixels = 1 << 28

// maxHeader bounds the bytes of the data set before the pixel data: a
// radiograph's header is a few kilobytes, a few megabytes with private
// tags, icons and overlays; 256 MiB is a deflate bomb or a broken length.
const maxHeader = 256 << 20

// maxDepth bounds the nesting of sequences, each level a recursion.
const maxDepth = 32

// maxLUTEntries bounds a LUT Sequence's table (its descriptor's entries
// are 16-bit: 0 means 65536).
const maxLUTEntries = 1 << 16

// chunk is the most a read allocates ahead of the bytes it has received,
// so that a length field cannot make the decoder allocate what the file
// does not hold.
const chunk = 1 << 20

// Transfer syntax UIDs (PS3.5 A, PS3.6 A).
const (
	tsImplicitLE = "1.2.840.10008.1.2"
	tsExplicitLE = "1.2.840.10008.1.2.1"
	tsDeflatedLE = "1.2.840.10008.1.2.1.99"
	tsExplicitBE = "1.2.840.10008.1.2.2"
	tsRLE        = "1.2.840.10008.1.2.5"
	tsJPEGBase   = "1.2.840.10008.1.2.4.50"
	tsJPEGExt    = "1.2.840.10008.1.2.4.51"
	tsJPEGLL14   = "1.2.840.10008.1.2.4.57"
	tsJPEGLLSV1  = "1.2.840.10008.1.2.4.70"
	tsJPEGLS     = "1.2.840.10008.1.2.4.80"
	tsJPEGLSNear = "1.2.840.10008.1.2.4.81"
	tsJ2K        = "1.2.840.10008.1.2.4.90"
	tsJ2KLossy   = "1.2.840.10008.1.2.4.91"
)

// codecNames names the compressed syntaxes decoded here whose codecs
// code at most 16 bits a sample: a file of 32-bit samples under one is
// refused by name.
var codecNames = map[string]string{
	tsJPEGBase: "JPEG Baseline", tsJPEGExt: "JPEG Extended", tsJPEGLL14: "JPEG Lossless",
	tsJPEGLLSV1: "JPEG Lossless SV1", tsJPEGLS: "JPEG-LS Lossless", tsJPEGLSNear: "JPEG-LS Near-lossless",
	tsJ2K: "JPEG 2000 Lossless", tsJ2KLossy: "JPEG 2000",
}

// refusedSyntaxes names the compressed syntaxes not decoded here.
var refusedSyntaxes = map[string]string{
	"1.2.840.10008.1.2.4.92":  "JPEG 2000 Part 2 Multi-component Lossless",
	"1.2.840.10008.1.2.4.93":  "JPEG 2000 Part 2 Multi-component",
	"1.2.840.10008.1.2.4.201": "HTJ2K Lossless",
	"1.2.840.10008.1.2.4.202": "HTJ2K Lossless RPCL",
	"1.2.840.10008.1.2.4.203": "HTJ2K",
	"1.2.840.10008.1.2.4.100": "MPEG2",
	"1.2.840.10008.1.2.4.101": "MPEG2 High Level",
	"1.2.840.10008.1.2.4.102": "MPEG-4 AVC/H.264",
	"1.2.840.10008.1.2.4.103": "MPEG-4 AVC/H.264 BD",
	"1.2.840.10008.1.2.4.104": "MPEG-4 AVC/H.264 2D",
	"1.2.840.10008.1.2.4.105": "MPEG-4 AVC/H.264 3D",
	"1.2.840.10008.1.2.4.106": "MPEG-4 AVC/H.264 Stereo",
	"1.2.840.10008.1.2.4.107": "HEVC/H.265",
	"1.2.840.10008.1.2.4.108": "HEVC/H.265 Main 10",
}

// Tags the decoder reads (group<<16 | element).
const (
	tagTransferSyntax  = 0x00020010
	tagSamples         = 0x00280002
	tagPhotometric     = 0x00280004
	tagPlanar          = 0x00280006
	tagFrames          = 0x00280008
	tagRows            = 0x00280010
	tagColumns         = 0x00280011
	tagBitsAllocated   = 0x00280100
	tagBitsStored      = 0x00280101
	tagHighBit         = 0x00280102
	tagPixelRep        = 0x00280103
	tagWindowCenter    = 0x00281050
	tagWindowWidth     = 0x00281051
	tagIntercept       = 0x00281052
	tagSlope           = 0x00281053
	tagVOIFunction     = 0x00281056
	tagModalityLUTSeq  = 0x00283000
	tagLUTDescriptor   = 0x00283002
	tagLUTData         = 0x00283006
	tagVOILUTSeq       = 0x00283010
	tagPatientID       = 0x00100020
	tagStudyUID        = 0x0020000D // Study Instance UID
	tagSeriesUID       = 0x0020000E // Series Instance UID
	tagSeriesNumber    = 0x00200011 // Series Number
	tagInstance        = 0x00200013 // Instance Number
	tagPosition        = 0x00200032 // Image Position (Patient)
	tagOrientation     = 0x00200037 // Image Orientation (Patient)
	tagPixelValueXform = 0x00289145 // Pixel Value Transformation Sequence
	tagFrameVOILUT     = 0x00289132 // Frame VOI LUT Sequence
	tagSharedFG        = 0x52009229 // Shared Functional Groups Sequence
	tagPerFrameFG      = 0x52009230 // Per-frame Functional Groups Sequence
	tagExtOffsets      = 0x7FE00001 // Extended Offset Table
	tagPixelData       = 0x7FE00010
	tagItem            = 0xFFFEE000
	tagItemDelim       = 0xFFFEE00D
	tagSeqDelim        = 0xFFFEE0DD
	undefinedLength    = 0xFFFFFFFF
	maxDefinedValueLen = 0xFFFFFFFE
)

// header is what the decoder keeps of a data set.
type header struct {
	syntax      string
	explicit    bool
	big         bool
	rows, cols  int
	samples     int
	photometric string
	planar      int
	frames      int
	bitsAlloc   int
	bitsStored  int
	highBit     int
	pixelRep    int
	seen        map[uint32]bool // which of the image module's tags were present
	patientID   string
	studyUID    string
	// A slice's place in its series (Slice): the values as written,
	// parsed only where asked for.
	instance, position, orientation string
	seriesUID, seriesNumber         string

	slope, intercept float64
	rescale          bool
	windows          []Window
	voiFunction      string
	ownRange         bool // Options.OwnRange
	modalityLUT      *lut
	voiLUT           *lut
	palette          paletteLUTs // PALETTE COLOR's tables (palette.go)

	// An enhanced multi-frame object's functional groups (frames.go): the
	// rescale and window shared by its frames, and each frame's own.
	shared   *frameVOI
	perFrame []*frameVOI
	// extOffsets is the Extended Offset Table: where each frame's
	// fragments start (frames.go).
	extOffsets []uint64
}

// lut is a LUT Sequence item's table (PS3.3 C.11.1.1, C.11.2.1.1): an input
// below first maps to data[0], at or past first+len(data)-1 to the last
// entry; outputs have bits bits.
type lut struct {
	first int
	bits  int
	data  []uint16
}

// reader reads a data set's elements, counting the bytes.
type reader struct {
	r     *bufio.Reader
	order binary.ByteOrder
	pos   int64
	limit int64 // pos past which reading is refused (maxHeader)
	buf   [8]byte
}

// full fills p. It returns io.EOF where the data ends before p's first
// byte (between elements, for the caller that reads an element's first
// bytes; any other caller reports it by truncated).
func (r *reader) full(p []byte) error {
	if r.pos+int64(len(p)) > r.limit {
		return r.overLimit(int64(len(p)))
	}
	n, err := io.ReadFull(r.r, p)
	r.pos += int64(n)
	if err == io.ErrUnexpectedEOF {
		return r.truncated(err)
	}
	return err
}

// truncated is the error of data that ends inside an element.
func (r *reader) truncated(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("file ends inside an element at byte %d: %w", r.pos, io.ErrUnexpectedEOF)
	}
	return err
}

func (r *reader) overLimit(n int64) error {
	return fmt.Errorf("a value of %d bytes at byte %d: the data set before the pixel data would be over %d bytes (a broken length?)", n, r.pos, maxHeader)
}

func (r *reader) u16() (uint16, error) {
	if err := r.full(r.buf[:2]); err != nil {
		return 0, err
	}
	return r.order.Uint16(r.buf[:2]), nil
}

func (r *reader) u32() (uint32, error) {
	if err := r.full(r.buf[:4]); err != nil {
		return 0, err
	}
	return r.order.Uint32(r.buf[:4]), nil
}

// bytes reads n bytes. The buffer grows as they arrive — from a chunk,
// doubling, never past n — so that a length field the data does not back
// allocates at most twice what was received.
func (r *reader) bytes(n int64) ([]byte, error) {
	if r.pos+n > r.limit {
		return nil, r.overLimit(n)
	}
	out := make([]byte, 0, min(n, chunk))
	for int64(len(out)) < n {
		if len(out) == cap(out) {
			grown := make([]byte, len(out), min(n, 2*int64(cap(out))))
			copy(grown, out)
			out = grown
		}
		k := len(out) + int(min(n-int64(len(out)), int64(cap(out)-len(out))))
		if err := r.full(out[len(out):k]); err != nil {
			return nil, r.truncated(err)
		}
		out = out[:k]
	}
	return out, nil
}

func (r *reader) skip(n int64) error {
	if r.pos+n > r.limit {
		return r.overLimit(n)
	}
	k, err := io.CopyN(io.Discard, r.r, n)
	r.pos += k
	return r.truncated(err)
}

// element is one element's header.
type element struct {
	tag    uint32
	vr     string
	length uint32
}

func tagString(t uint32) string { return fmt.Sprintf("(%04X,%04X)", t>>16, t&0xffff) }

// longVR are the explicit VRs with a reserved field and a 4-byte length
// (PS3.5 7.1.2).
func longVR(vr string) bool {
	switch vr {
	case "OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV":
		return true
	}
	return false
}

// next reads an element header. Items and delimiters have no VR in
// either encoding (PS3.5 7.5).
func (r *reader) next(explicit bool) (element, error) {
	g, err := r.u16()
	if err != nil {
		return element{}, err // io.EOF: the data ends between elements
	}
	el, err := r.rest(g, explicit)
	return el, r.truncated(err)
}

// rest reads an element header after its group number.
func (r *reader) rest(g uint16, explicit bool) (element, error) {
	e, err := r.u16()
	if err != nil {
		return element{}, err
	}
	el := element{tag: uint32(g)<<16 | uint32(e)}
	if !explicit || g == 0xFFFE {
		el.length, err = r.u32()
		return el, err
	}
	if err := r.full(r.buf[:2]); err != nil {
		return element{}, err
	}
	if r.buf[0] < 'A' || r.buf[0] > 'Z' || r.buf[1] < 'A' || r.buf[1] > 'Z' {
		return element{}, fmt.Errorf("element %s at byte %d: not a value representation: % x (the file says explicit VR)", tagString(el.tag), r.pos-6, r.buf[:2])
	}
	el.vr = string(r.buf[:2])
	if longVR(el.vr) {
		if err := r.skip(2); err != nil {
			return element{}, err
		}
		el.length, err = r.u32()
		return el, err
	}
	l, err := r.u16()
	el.length = uint32(l)
	return el, err
}

// ErrNoImage is returned (wrapped) for a DICOM object that holds no image
// (no Pixel Data element): a structured report, a presentation state, a
// key object selection.
var ErrNoImage = errors.New("a DICOM object without an image")

// PatientID returns the Patient ID (0010,0020) of a DICOM file, the one
// attribute of the patient module read here: a data set's user for a
// user-level guarantee. It reads the header only, of an object without an
// image too; one without a Patient ID is an error.
func PatientID(src io.Reader) (string, error) {
	return identifier(src, "Patient ID (0010,0020)", func(h *header) string { return h.patientID })
}

// StudyUID returns the Study Instance UID (0020,000D) of a DICOM file: the
// study its image belongs to — a mammogram's four views, a chest
// radiograph's two —, to score a study as one. It reads the header only;
// a file without one is an error.
func StudyUID(src io.Reader) (string, error) {
	return identifier(src, "Study Instance UID (0020,000D)", func(h *header) string { return h.studyUID })
}

// SeriesUID returns the Series Instance UID (0020,000E) of a DICOM file:
// the series its image belongs to — a CT's or an MR's slices, a file each
// —, to score a series as one. It reads the header only; a file without
// one is an error.
func SeriesUID(src io.Reader) (string, error) {
	return identifier(src, "Series Instance UID (0020,000E)", func(h *header) string { return h.seriesUID })
}

// Slice is where a single-frame image lies in its series (a CT's or an
// MR's slices, one a file): the series — its Series Instance UID
// (0020,000E) and Series Number (0020,0011) —, its position along the
// normal of its plane — Image Position (Patient) (0020,0032) · (row ×
// column of Image Orientation (Patient) (0020,0037)), in mm — and its
// Instance Number (0020,0013), each where the file gives it, well formed.
type Slice struct {
	// Series is the Series Instance UID ("" where the file has none): an
	// archive's export may put a study's series — a CT's soft-tissue and
	// bone reconstructions, its scout — in one directory.
	Series          string
	SeriesNumber    int
	HasSeriesNumber bool
	Position        float64
	HasPosition     bool
	Instance        int
	HasInstance     bool
	// Normal is the plane's normal (row × column), which a series' slices
	// share (where they all give one: HasPosition).
	Normal [3]float64
}

// SliceOf reads a DICOM file's Slice from its header. A file without an
// image is ErrNoImage; attributes absent or malformed are left out of
// the Slice, not errors (a series is then ordered by what its files
// share).
func SliceOf(src io.Reader) (Slice, error) {
	h, _, _, err := readHeader(src)
	if err != nil {
		return Slice{}, wrap(err)
	}
	s := Slice{Series: h.seriesUID}
	if n, err := strconv.Atoi(strings.TrimSpace(h.instance)); err == nil {
		s.Instance, s.HasInstance = n, true
	}
	if n, err := strconv.Atoi(strings.TrimSpace(h.seriesNumber)); err == nil {
		s.SeriesNumber, s.HasSeriesNumber = n, true
	}
	pos, okP := decimals(h.position, 3)
	ori, okO := decimals(h.orientation, 6)
	if okP && okO {
		r, c := ori[:3], ori[3:]
		s.Normal = [3]float64{r[1]*c[2] - r[2]*c[1], r[2]*c[0] - r[0]*c[2], r[0]*c[1] - r[1]*c[0]}
		s.Position = pos[0]*s.Normal[0] + pos[1]*s.Normal[1] + pos[2]*s.Normal[2]
		s.HasPosition = true
	}
	return s, nil
}

// decimals parses a DS value of n backslash-separated numbers.
func decimals(v string, n int) ([]float64, bool) {
	parts := strings.Split(v, `\`)
	if len(parts) != n {
		return nil, false
	}
	out := make([]float64, n)
	for i, p := range parts {
		f, err := decimal(p)
		if err != nil {
			return nil, false
		}
		out[i] = f
	}
	return out, true
}

// identifier reads a file's header, of an object without an image too,
// and returns the identifier get takes from it, which must not be empty.
func identifier(src io.Reader, name string, get func(*header) string) (string, error) {
	h, _, _, err := readHeader(src)
	if err != nil && !(errors.Is(err, ErrNoImage) && h != nil) {
		return "", wrap(err)
	}
	if get(h) == "" {
		return "", wrap(fmt.Errorf("the file has no %s, or an empty one", name))
	}
	return get(h), nil
}

// PrefixLen is how many bytes of a file IsPart10 reads.
const PrefixLen = 132

// IsPart10 reports whether b, a file's first bytes, starts as a DICOM
// Part 10 file does (PS3.10 7.1): a 128-byte preamble, whatever it holds
// (a TIFF header, in GE's files), and "DICM".
func IsPart10(b []byte) bool { return len(b) >= PrefixLen && string(b[128:PrefixLen]) == "DICM" }

// errNotDICOM is returned for data without the Part 10 prefix.
var errNotDICOM = errors.New("not a DICOM Part 10 file: no \"DICM\" after the 128-byte preamble")

// readHeader reads the file meta information and the data set up to the
// pixel data's element, leaving r at its value.
func readHeader(src io.Reader) (*header, *reader, element, error) {
	br := bufio.NewReaderSize(src, 64<<10)
	pre := make([]byte, PrefixLen)
	if _, err := io.ReadFull(br, pre); err != nil || !IsPart10(pre) {
		return nil, nil, element{}, errNotDICOM
	}
	r := &reader{r: br, order: binary.LittleEndian, pos: 132, limit: maxHeader}
	h := &header{seen: map[uint32]bool{}, samples: 1, frames: 1}
	// The file meta group is explicit VR little endian whatever the data
	// set's syntax (PS3.10 7.1); it ends where group 0002 does.
	for {
		p, err := br.Peek(2)
		if err != nil || binary.LittleEndian.Uint16(p) != 0x0002 {
			break
		}
		el, err := r.next(true)
		if err != nil {
			return nil, nil, element{}, fmt.Errorf("meta information: %w", err)
		}
		if el.length == undefinedLength {
			return nil, nil, element{}, fmt.Errorf("meta information element %s of undefined length", tagString(el.tag))
		}
		if el.tag != tagTransferSyntax {
			if err := r.skip(int64(el.length)); err != nil {
				return nil, nil, element{}, fmt.Errorf("meta information: %w", err)
			}
			continue
		}
		if el.length > 64 {
			return nil, nil, element{}, fmt.Errorf("transfer syntax UID of %d bytes", el.length)
		}
		v, err := r.bytes(int64(el.length))
		if err != nil {
			return nil, nil, element{}, fmt.Errorf("meta information: %w", err)
		}
		h.syntax = strings.TrimRight(string(v), "\x00 ")
	}
	if h.syntax == "" {
		return nil, nil, element{}, fmt.Errorf("the meta information names no transfer syntax (0002,0010)")
	}
	switch h.syntax {
	case tsImplicitLE:
	case tsExplicitLE, tsRLE, tsJPEGBase, tsJPEGExt, tsJPEGLL14, tsJPEGLLSV1, tsJPEGLS, tsJPEGLSNear, tsJ2K, tsJ2KLossy:
		h.explicit = true
	case tsExplicitBE:
		h.explicit, h.big = true, true
		r.order = binary.BigEndian
	case tsDeflatedLE:
		h.explicit = true
		r.r = bufio.NewReaderSize(flate.NewReader(br), 64<<10)
	default:
		if name, ok := refusedSyntaxes[h.syntax]; ok {
			return nil, nil, element{}, fmt.Errorf("%s compression (transfer syntax %s) is not read here: write the file uncompressed first, e.g. gdcmconv --raw IN OUT", name, h.syntax)
		}
		return nil, nil, element{}, fmt.Errorf("unknown transfer syntax %q", h.syntax)
	}
	// Some writers encode the data set in the other little-endian VR than
	// the meta information says (pydicom's test file SC_rgb_jpeg.dcm: JPEG
	// Baseline, implicit VR). The first element tells, as pydicom reads it:
	// its two bytes after the tag are a VR's letters or a length's.
	if !h.big {
		if p, err := r.r.Peek(6); err == nil && binary.LittleEndian.Uint16(p) != 0xFFFE {
			h.explicit = knownVR[string(p[4:6])]
		}
	}
	for {
		el, err := r.next(h.explicit)
		if err == io.EOF {
			// A DICOM object without an image — a structured report, a
			// presentation state, a key object selection, as an archive's
			// exports hold beside the images —: its header is whole.
			return h, nil, element{}, fmt.Errorf("%w: the file holds no pixel data (7FE0,0010)", ErrNoImage)
		}
		if err != nil {
			return nil, nil, element{}, err
		}
		if el.tag == tagPixelData {
			return h, r, el, nil
		}
		if err := h.element(r, el, 0, scope{}, h.explicit); err != nil {
			return nil, nil, element{}, err
		}
	}
}

// knownVR are the value representations of PS3.5 Table 6.2-1.
var knownVR = map[string]bool{
	"AE": true, "AS": true, "AT": true, "CS": true, "DA": true, "DS": true, "DT": true, "FL": true,
	"FD": true, "IS": true, "LO": true, "LT": true, "OB": true, "OD": true, "OF": true, "OL": true,
	"OV": true, "OW": true, "PN": true, "SH": true, "SL": true, "SQ": true, "SS": true, "ST": true,
	"SV": true, "TM": true, "UC": true, "UI": true, "UL": true, "UN": true, "UR": true, "US": true,
	"UT": true, "UV": true,
}

// scope is where in the data set an element lies, which says what of it
// is read.
type scope struct {
	kind  scopeKind
	attrs *frameVOI // the functional group an item of scopeGroup or scopeValues fills
}

type scopeKind int

const (
	scopeTop    scopeKind = iota // the data set's own elements
	scopeSkip                    // an item nothing of which is read
	scopeGroup                   // a functional group item: its two sequences read
	scopeValues                  // a Pixel Value Transformation or Frame VOI LUT item
)

// element reads or skips one element of the data set, or of a sequence
// item in scope sc, whose elements are explicit VR where explicit.
func (h *header) element(r *reader, el element, depth int, sc scope, explicit bool) error {
	if el.tag>>16 == 0xFFFE {
		return fmt.Errorf("item tag %s outside a sequence at byte %d", tagString(el.tag), r.pos-8)
	}
	// In implicit VR a sequence of defined length is known by its tag alone:
	// those the decoder reads are; any other is skipped as bytes.
	sequence := el.vr == "SQ" || el.length == undefinedLength || (el.vr == "" && sequenceTags[el.tag])
	if sequence {
		keep, sub := false, scope{kind: scopeSkip}
		switch {
		case sc.kind == scopeTop && (el.tag == tagModalityLUTSeq || el.tag == tagVOILUTSeq):
			keep = true
		case sc.kind == scopeTop && (el.tag == tagSharedFG || el.tag == tagPerFrameFG):
			sub.kind = scopeGroup
		case sc.kind == scopeGroup && (el.tag == tagPixelValueXform || el.tag == tagFrameVOILUT):
			sub = scope{kind: scopeValues, attrs: sc.attrs}
		}
		// An undefined-length UN is a sequence in implicit VR (PS3.5 6.2.2),
		// and so is all it holds.
		return h.sequence(r, el, explicit && el.vr != "UN", depth+1, keep, sub)
	}
	switch {
	case sc.kind == scopeValues && frameVOITags[el.tag]:
		return h.frameValue(r, el, sc.attrs)
	case sc.kind == scopeTop && el.tag == tagExtOffsets:
		return h.readExtOffsets(r, el)
	case sc.kind == scopeTop && isPaletteTag(el.tag):
		return h.paletteElement(r, el)
	}
	if sc.kind != scopeTop || !wanted[el.tag] {
		return r.skip(int64(el.length))
	}
	if el.length > 1024 {
		return fmt.Errorf("element %s of %d bytes, too long for its kind", tagString(el.tag), el.length)
	}
	v, err := r.bytes(int64(el.length))
	if err != nil {
		return fmt.Errorf("element %s: %w", tagString(el.tag), err)
	}
	return h.set(r.order, el, v)
}

// wanted are the top-level attributes set reads.
var wanted = map[uint32]bool{
	tagSamples: true, tagPhotometric: true, tagPlanar: true, tagFrames: true,
	tagRows: true, tagColumns: true, tagBitsAllocated: true, tagBitsStored: true,
	tagHighBit: true, tagPixelRep: true, tagWindowCenter: true, tagWindowWidth: true,
	tagIntercept: true, tagSlope: true, tagVOIFunction: true, tagPatientID: true, tagStudyUID: true,
	tagInstance: true, tagPosition: true, tagOrientation: true, tagSeriesUID: true, tagSeriesNumber: true,
}

// sequenceTags are the sequences the decoder reads into, known in
// implicit VR by their tags.
var sequenceTags = map[uint32]bool{
	tagModalityLUTSeq: true, tagVOILUTSeq: true, tagSharedFG: true, tagPerFrameFG: true,
	tagPixelValueXform: true, tagFrameVOILUT: true,
}

// sequence reads a sequence's items, keeping a LUT item's table where
// keep (the first item only: the LUT pydicom applies by default), and
// reading its items in scope sub otherwise: a functional groups
// sequence's items each a group of their own (the shared one's first).
func (h *header) sequence(r *reader, el element, explicit bool, depth int, keep bool, sub scope) error {
	if depth > maxDepth {
		return fmt.Errorf("sequences nested over %d deep at %s", maxDepth, tagString(el.tag))
	}
	saved := r.order
	if el.vr == "UN" {
		r.order = binary.LittleEndian
	}
	defer func() { r.order = saved }()
	end := int64(-1)
	if el.length != undefinedLength {
		end = r.pos + int64(el.length)
	}
	for item := 0; ; item++ {
		if end >= 0 && r.pos >= end {
			if r.pos > end {
				return fmt.Errorf("sequence %s: items overrun its length", tagString(el.tag))
			}
			return nil
		}
		it, err := r.next(explicit)
		if err != nil {
			return fmt.Errorf("sequence %s: %w", tagString(el.tag), err)
		}
		switch it.tag {
		case tagSeqDelim:
			return nil
		case tagItem:
		default:
			return fmt.Errorf("sequence %s: element %s where an item was expected", tagString(el.tag), tagString(it.tag))
		}
		itemEnd := int64(-1)
		if it.length != undefinedLength {
			itemEnd = r.pos + int64(it.length)
		}
		var l *lut
		if keep && item == 0 {
			l = &lut{}
		}
		itemScope := sub
		if sub.kind == scopeGroup {
			itemScope.attrs = h.group(el.tag, item)
		}
		var desc, data []byte
		descSigned := false
		for {
			if itemEnd >= 0 && r.pos >= itemEnd {
				if r.pos > itemEnd {
					return fmt.Errorf("sequence %s: an item's elements overrun its length", tagString(el.tag))
				}
				break
			}
			e, err := r.next(explicit)
			if err != nil {
				return fmt.Errorf("sequence %s: %w", tagString(el.tag), err)
			}
			if e.tag == tagItemDelim {
				break
			}
			if l != nil && (e.tag == tagLUTDescriptor || e.tag == tagLUTData) && e.length != undefinedLength && e.vr != "SQ" {
				if e.tag == tagLUTDescriptor && e.length != 6 {
					return fmt.Errorf("%s LUT Descriptor of %d bytes (three 16-bit values expected)", tagString(el.tag), e.length)
				}
				if e.tag == tagLUTData && int64(e.length) > 2*maxLUTEntries {
					return fmt.Errorf("%s LUT Data of %d bytes, over %d entries", tagString(el.tag), e.length, maxLUTEntries)
				}
				v, err := r.bytes(int64(e.length))
				if err != nil {
					return fmt.Errorf("sequence %s: %w", tagString(el.tag), err)
				}
				if e.tag == tagLUTDescriptor {
					desc, descSigned = v, e.vr == "SS" || (e.vr == "" && h.pixelRep == 1)
				} else {
					data = v
				}
				continue
			}
			if err := h.element(r, e, depth, itemScope, explicit); err != nil {
				return err
			}
		}
		if l != nil {
			if err := h.setLUT(el.tag, r.order, desc, data, descSigned); err != nil {
				return err
			}
		}
	}
}

// setLUT keeps a LUT Sequence's first item.
// The descriptor's first mapped value is signed where its VR is SS, or,
// in implicit VR, where the pixels are (PS3.3 C.11.1.1.1: "US or SS").
func (h *header) setLUT(seq uint32, order binary.ByteOrder, desc, data []byte, signed bool) error {
	name := "VOI LUT Sequence (0028,3010)"
	if seq == tagModalityLUTSeq {
		name = "Modality LUT Sequence (0028,3000)"
	}
	if desc == nil || data == nil {
		return fmt.Errorf("%s: its first item lacks a LUT Descriptor or LUT Data", name)
	}
	n := int(order.Uint16(desc[0:]))
	if n == 0 {
		n = 1 << 16
	}
	first := int(order.Uint16(desc[2:]))
	if signed {
		first = int(int16(order.Uint16(desc[2:])))
	}
	bits := int(order.Uint16(desc[4:]))
	if bits < 8 || bits > 16 {
		return fmt.Errorf("%s: LUT of %d-bit entries (8 to 16 expected)", name, bits)
	}
	if len(data)%2 != 0 || len(data)/2 < n {
		return fmt.Errorf("%s: LUT Data of %d bytes for %d entries", name, len(data), n)
	}
	l := &lut{first: first, bits: bits, data: make([]uint16, n)}
	for i := range l.data {
		v := order.Uint16(data[2*i:])
		if bits == 8 {
			v &= 0xff
		}
		l.data[i] = v
	}
	if seq == tagModalityLUTSeq {
		h.modalityLUT = l
	} else {
		h.voiLUT = l
	}
	return nil
}

// set keeps an Image Pixel, Modality LUT or VOI LUT module attribute.
func (h *header) set(order binary.ByteOrder, el element, v []byte) error {
	us := func(dst *int) error {
		if len(v) < 2 {
			return fmt.Errorf("element %s: %d bytes for a 16-bit value", tagString(el.tag), len(v))
		}
		*dst = int(order.Uint16(v))
		return nil
	}
	str := func() string { return strings.TrimRight(strings.TrimLeft(string(v), " "), " \x00") }
	switch el.tag {
	case tagPhotometric, tagVOIFunction, tagFrames, tagSlope, tagIntercept, tagWindowCenter, tagWindowWidth, tagPatientID, tagStudyUID:
		if str() == "" {
			return nil // an empty value is an absent one, as pydicom reads it
		}
	}
	h.seen[el.tag] = true
	switch el.tag {
	case tagSamples:
		return us(&h.samples)
	case tagPlanar:
		return us(&h.planar)
	case tagRows:
		return us(&h.rows)
	case tagColumns:
		return us(&h.cols)
	case tagBitsAllocated:
		return us(&h.bitsAlloc)
	case tagBitsStored:
		return us(&h.bitsStored)
	case tagHighBit:
		return us(&h.highBit)
	case tagPixelRep:
		return us(&h.pixelRep)
	case tagPatientID:
		h.patientID = strings.TrimSpace(str())
	case tagStudyUID:
		h.studyUID = strings.TrimSpace(str())
	case tagSeriesUID:
		h.seriesUID = strings.TrimSpace(str())
	case tagSeriesNumber:
		h.seriesNumber = str()
	case tagInstance:
		h.instance = str()
	case tagPosition:
		h.position = str()
	case tagOrientation:
		h.orientation = str()
	case tagPhotometric:
		h.photometric = strings.ToUpper(str())
	case tagVOIFunction:
		h.voiFunction = strings.ToUpper(str())
	case tagFrames:
		n, err := strconv.Atoi(strings.TrimSpace(str()))
		if err != nil || n < 1 {
			return fmt.Errorf("Number of Frames (0028,0008) %q is not a positive integer", str())
		}
		h.frames = n
	case tagSlope, tagIntercept:
		f, err := decimal(str())
		if err != nil {
			return fmt.Errorf("element %s: %w", tagString(el.tag), err)
		}
		if el.tag == tagSlope {
			h.slope = f
		} else {
			h.intercept = f
		}
	case tagWindowCenter, tagWindowWidth:
		f, err := decimal(strings.Split(str(), `\`)[0])
		if err != nil {
			return fmt.Errorf("element %s: %w", tagString(el.tag), err)
		}
		if len(h.windows) == 0 {
			h.windows = []Window{{}}
		}
		if el.tag == tagWindowCenter {
			h.windows[0].Center = f
		} else {
			h.windows[0].Width = f
		}
	}
	return nil
}

// decimal parses a DS value.
func decimal(s string) (float64, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	return f, nil
}

// check validates the image module against what the decoder reads.
func (h *header) check() error {
	for _, t := range []struct {
		tag  uint32
		name string
	}{{tagRows, "Rows"}, {tagColumns, "Columns"}, {tagBitsAllocated, "Bits Allocated"}, {tagPhotometric, "Photometric Interpretation"}} {
		if !h.seen[t.tag] {
			return fmt.Errorf("the image lacks %s %s", t.name, tagString(t.tag))
		}
	}
	if !h.seen[tagBitsStored] {
		h.bitsStored = h.bitsAlloc
	}
	if !h.seen[tagHighBit] {
		h.highBit = h.bitsStored - 1
	}
	h.rescale = h.seen[tagSlope] && h.seen[tagIntercept]
	if !h.rescale {
		h.slope, h.intercept = 1, 0
	}
	if len(h.windows) > 0 && (!h.seen[tagWindowCenter] || !h.seen[tagWindowWidth]) {
		h.windows = nil // pydicom's rule too: a window needs both
	}
	switch {
	case h.rows <= 0 || h.cols <= 0:
		return fmt.Errorf("image of %d×%d pixels", h.cols, h.rows)
	case int64(h.rows)*int64(h.cols) > MaxPixels:
		return fmt.Errorf("image of %d×%d pixels, over the limit of %d pixels", h.cols, h.rows, MaxPixels)
	case h.bitsAlloc != 1 && h.bitsAlloc != 8 && h.bitsAlloc != 16 && h.bitsAlloc != 32:
		return fmt.Errorf("Bits Allocated %d: 1, 8, 16 or 32 are read", h.bitsAlloc)
	case h.bitsAlloc == 32 && codecNames[h.syntax] != "":
		// As pydicom's handlers refuse them: these codecs code at most 16
		// bits a sample.
		return fmt.Errorf("Bits Allocated 32 under %s (transfer syntax %s): 32-bit samples are read uncompressed or RLE Lossless", codecNames[h.syntax], h.syntax)
	case h.bitsAlloc == 1 && h.samples != 1:
		return fmt.Errorf("Bits Allocated 1 with %d samples a pixel", h.samples)
	case h.bitsStored < 1 || h.bitsStored > h.bitsAlloc:
		return fmt.Errorf("Bits Stored %d with Bits Allocated %d", h.bitsStored, h.bitsAlloc)
	case h.highBit < h.bitsStored-1 || h.highBit >= h.bitsAlloc:
		return fmt.Errorf("High Bit %d with Bits Stored %d and Bits Allocated %d", h.highBit, h.bitsStored, h.bitsAlloc)
	case h.pixelRep != 0 && h.pixelRep != 1:
		return fmt.Errorf("Pixel Representation %d (0 or 1 expected)", h.pixelRep)
	case h.planar != 0 && h.planar != 1:
		return fmt.Errorf("Planar Configuration %d (0 or 1 expected)", h.planar)
	}
	switch h.photometric {
	case "MONOCHROME1", "MONOCHROME2":
		if h.samples != 1 {
			return fmt.Errorf("%s with %d samples a pixel", h.photometric, h.samples)
		}
	case "RGB", "YBR_FULL", "YBR_FULL_422", "YBR_ICT", "YBR_RCT":
		if h.samples != 3 {
			return fmt.Errorf("%s with %d samples a pixel", h.photometric, h.samples)
		}
	case "PALETTE COLOR":
		if h.samples != 1 {
			return fmt.Errorf("%s with %d samples a pixel", h.photometric, h.samples)
		}
		return h.checkPalette()
	default:
		return fmt.Errorf("Photometric Interpretation %q is not read", h.photometric)
	}
	if h.voiFunction != "" && h.voiFunction != "LINEAR" && h.voiFunction != "LINEAR_EXACT" && h.voiFunction != "SIGMOID" {
		return fmt.Errorf("VOI LUT Function (0028,1056) %q (LINEAR, LINEAR_EXACT or SIGMOID expected)", h.voiFunction)
	}
	return nil
}

// gray reports whether the image decodes to gray: one sample a pixel
// that is not a palette index.
func (h *header) gray() bool { return h.samples == 1 && h.photometric != "PALETTE COLOR" }
