package dicom

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"strconv"
	"strings"
)

// A multi-frame object (Number of Frames over 1: a cine loop, an enhanced
// CT or MR volume, a tomosynthesis stack) decodes to one image as the
// caller chooses, a frame or a projection of them all (Options.Frame), or
// to each of its frames in turn (DecodeEach).

// ErrMultiFrame is returned (wrapped) for a multi-frame image decoded
// without a Frame chosen.
var ErrMultiFrame = errors.New("a multi-frame image")

// ErrNoFrame is returned (wrapped) for a Frame number past an image's
// frames.
var ErrNoFrame = errors.New("no such frame")

// FrameKind is how a Frame picks an image out of a multi-frame object.
type FrameKind int

// The frame choices.
const (
	FrameNone   FrameKind = iota // a multi-frame image is an error (ErrMultiFrame)
	FrameFirst                   // frame 1
	FrameMiddle                  // frame ⌊n/2⌋+1 of n: the one past the middle for even n
	FrameLast                    // frame n
	FrameNumber                  // frame Frame.Number, from 1
	FrameMax                     // the maximum intensity projection, of the Modality LUT's output
	FrameMean                    // the mean of the frames, of the Modality LUT's output
	FrameMin                     // the minimum intensity projection, of the Modality LUT's output
	// FrameAll is every frame an image of its own: a caller's choice
	// (FrameCount, then each FrameNumber), which Decode refuses.
	FrameAll
)

// Frame chooses the image a multi-frame object gives: one of its frames,
// or a projection of all of them. A single-frame image gives its frame
// for every choice but a FrameNumber over 1.
type Frame struct {
	Kind   FrameKind
	Number int // FrameNumber's frame, from 1 as PS3.3 numbers frames
}

var frameNames = map[string]FrameKind{
	"first": FrameFirst, "middle": FrameMiddle, "last": FrameLast,
	"max": FrameMax, "mean": FrameMean, "min": FrameMin, "all": FrameAll,
}

// ParseFrame parses a frame choice: first, middle, last, a frame number
// from 1, a projection, max, mean or min, or all. "" is FrameNone.
func ParseFrame(s string) (Frame, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Frame{}, nil
	}
	if k, ok := frameNames[strings.ToLower(s)]; ok {
		return Frame{Kind: k}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return Frame{}, fmt.Errorf("frame %q: want first, middle, last, a frame number from 1, a projection of the frames (max, mean or min), or all", s)
	}
	return Frame{Kind: FrameNumber, Number: n}, nil
}

// String is the text ParseFrame reads back to f.
func (f Frame) String() string {
	if f.Kind == FrameNumber {
		return strconv.Itoa(f.Number)
	}
	for name, k := range frameNames {
		if k == f.Kind {
			return name
		}
	}
	return ""
}

// Projection reports whether f combines all the frames (FrameMax,
// FrameMean, FrameMin).
func (f Frame) Projection() bool {
	return f.Kind == FrameMax || f.Kind == FrameMean || f.Kind == FrameMin
}

// Index is the 0-based frame f picks of n (frames, or a series' slices,
// or a volume's), for a choice of one frame: the first where f is
// FrameNone; a number past n is ErrNoFrame.
func (f Frame) Index(n int) (int, error) {
	switch f.Kind {
	case FrameAll:
		return 0, errors.New("every frame an image (Frame all) is the caller's to decode, a frame at a time (FrameCount)")
	case FrameMiddle:
		return n / 2, nil
	case FrameLast:
		return n - 1, nil
	case FrameNumber:
		if f.Number > n {
			return 0, fmt.Errorf("%w: frame %d of an image of %d frame(s)", ErrNoFrame, f.Number, n)
		}
		return f.Number - 1, nil
	}
	return 0, nil
}

// FrameCount returns a DICOM file's Number of Frames (1 where it has
// none), reading its header and the start of its pixel data: native pixel
// data must hold that many frames, an offset table must have an offset
// each. Encapsulated frames without an offset table are not counted
// (that takes reading them all): a caller bounds such a count, by the
// file's size for one (each frame takes an item of 8 bytes or more).
func FrameCount(r io.Reader) (int, error) {
	h, _, err := start(r)
	if err != nil {
		return 0, wrap(err)
	}
	return h.frames, nil
}

// frameVOI is a functional group's Pixel Value Transformation (a rescale)
// and Frame VOI LUT (a window) (PS3.3 C.7.6.16.2.9, C.7.6.16.2.10): an
// enhanced object's frames carry their own, in the per-frame group or the
// shared one, where a classic image has them at the top level.
type frameVOI struct {
	seen             map[uint32]bool
	slope, intercept float64
	window           Window
	function         string
}

// frameVOITags are the attributes a functional group's two sequences hold
// that a frame's pixels go through.
var frameVOITags = map[uint32]bool{
	tagSlope: true, tagIntercept: true, tagWindowCenter: true, tagWindowWidth: true, tagVOIFunction: true,
}

// group is the functional group an item of a functional groups sequence
// fills: the shared sequence's first item, or the per-frame sequence's
// item-th, each frame's.
func (h *header) group(seq uint32, item int) *frameVOI {
	g := &frameVOI{seen: map[uint32]bool{}}
	switch {
	case seq == tagPerFrameFG:
		h.perFrame = append(h.perFrame, g)
	case item == 0:
		h.shared = g
	}
	return g
}

// frameValue reads a functional group's rescale or window attribute; the
// first item's value stands where a sequence holds several.
func (h *header) frameValue(r *reader, el element, g *frameVOI) error {
	if el.length > 1024 {
		return fmt.Errorf("element %s of %d bytes, too long for its kind", tagString(el.tag), el.length)
	}
	v, err := r.bytes(int64(el.length))
	if err != nil {
		return fmt.Errorf("element %s: %w", tagString(el.tag), err)
	}
	str := strings.TrimRight(strings.TrimLeft(string(v), " "), " \x00")
	if str == "" || g.seen[el.tag] {
		return nil
	}
	g.seen[el.tag] = true
	if el.tag == tagVOIFunction {
		g.function = strings.ToUpper(str)
		return nil
	}
	f, err := decimal(strings.Split(str, `\`)[0])
	if err != nil {
		return fmt.Errorf("functional group element %s: %w", tagString(el.tag), err)
	}
	switch el.tag {
	case tagSlope:
		g.slope = f
	case tagIntercept:
		g.intercept = f
	case tagWindowCenter:
		g.window.Center = f
	case tagWindowWidth:
		g.window.Width = f
	}
	return nil
}

// maxExtOffsets bounds the Extended Offset Table: 2²⁴ frames (a whole
// slide image's tiles number in the hundred thousands).
const maxExtOffsets = 1 << 24

// readExtOffsets reads the Extended Offset Table (7FE0,0001): 64-bit
// offsets of each frame's first fragment (PS3.5 A.4).
func (h *header) readExtOffsets(r *reader, el element) error {
	if el.length%8 != 0 || el.length/8 > maxExtOffsets {
		return fmt.Errorf("Extended Offset Table (7FE0,0001) of %d bytes (8 a frame, at most %d frames)", el.length, maxExtOffsets)
	}
	v, err := r.bytes(int64(el.length))
	if err != nil {
		return fmt.Errorf("Extended Offset Table (7FE0,0001): %w", err)
	}
	h.extOffsets = make([]uint64, len(v)/8)
	for i := range h.extOffsets {
		h.extOffsets[i] = binary.LittleEndian.Uint64(v[8*i:]) // OV, little endian in every syntax that encapsulates
	}
	return nil
}

// useFrame makes frame k's rescale and window (its per-frame group's, else
// the shared group's, else the data set's own) the header's, where the
// object has functional groups.
func (h *header) useFrame(k int) error {
	var groups []*frameVOI
	if k < len(h.perFrame) {
		groups = append(groups, h.perFrame[k])
	}
	if h.shared != nil {
		groups = append(groups, h.shared)
	}
	for _, g := range groups {
		if g.seen[tagSlope] && g.seen[tagIntercept] {
			h.slope, h.intercept, h.rescale = g.slope, g.intercept, true
			break
		}
	}
	for _, g := range groups {
		if g.seen[tagWindowCenter] && g.seen[tagWindowWidth] {
			h.windows = []Window{g.window}
			h.voiFunction = g.function
			break
		}
	}
	if h.voiFunction != "" && h.voiFunction != "LINEAR" && h.voiFunction != "LINEAR_EXACT" && h.voiFunction != "SIGMOID" {
		return fmt.Errorf("frame %d: VOI LUT Function (0028,1056) %q (LINEAR, LINEAR_EXACT or SIGMOID expected)", k+1, h.voiFunction)
	}
	return nil
}

// frameSource reads a multi-frame object's frames in order from the pixel
// data element.
type frameSource struct {
	h  *header
	r  *reader
	el element
	k  int // the next frame's index

	// Native pixel data: each frame's bytes, or bits for a bitmap, whose
	// frames follow each other bit by bit (PS3.5 8.1.1); the bits of the
	// bitmap read so far.
	frameBytes int
	bits       []byte
	bitsRead   int

	// Encapsulated pixel data (PS3.5 A.4): where each frame's fragments
	// start, from the first fragment's item tag (the Basic or Extended
	// Offset Table), or none; how far the fragments have been read; the
	// fragment read past a frame's end, which starts the next.
	offsets []int64
	pos     int64
	ended   bool
}

// newFrameSource starts reading the pixel data element el: for native
// data, its length is checked against all the frames; for encapsulated
// data, the Basic Offset Table is read.
func newFrameSource(h *header, r *reader, el element) (*frameSource, error) {
	s := &frameSource{h: h, r: r, el: el}
	n := h.rows * h.cols * h.samples
	if h.native() {
		if el.length == undefinedLength {
			return nil, fmt.Errorf("encapsulated pixel data under the native transfer syntax %s", h.syntax)
		}
		s.frameBytes = n * (h.bitsAlloc / 8)
		switch {
		case h.bitsAlloc == 1:
			s.frameBytes = 0
		case h.photometric == "YBR_FULL_422":
			s.frameBytes = n * 2 / 3 // Y1 Y2 Cb Cr for each two pixels (PS3.3 C.7.6.3.1.2)
			if h.bitsAlloc != 8 || h.planar != 0 || h.cols%2 != 0 {
				return nil, fmt.Errorf("uncompressed YBR_FULL_422 of %d bits, planar configuration %d, %d columns: 8 bits, interleaved, an even count are read", h.bitsAlloc, h.planar, h.cols)
			}
		}
		need := int64(s.frameBytes) * int64(h.frames)
		if h.bitsAlloc == 1 {
			need = (int64(n)*int64(h.frames) + 7) / 8 // a bitmap (a mask), bits packed from each byte's low bit
		}
		if int64(el.length) < need {
			what := ""
			if h.frames > 1 {
				what = fmt.Sprintf("%d frames of ", h.frames)
			}
			return nil, fmt.Errorf("Pixel Data (7FE0,0010) holds %d bytes; %sa %d×%d image of %d samples of %d bits needs %d", el.length, what, h.cols, h.rows, h.samples, h.bitsAlloc, need)
		}
		return s, nil
	}
	if el.length != undefinedLength {
		return nil, fmt.Errorf("Pixel Data (7FE0,0010) not encapsulated under the compressed transfer syntax %s", h.syntax)
	}
	if h.bitsAlloc == 1 {
		return nil, fmt.Errorf("a 1-bit image under the compressed transfer syntax %s (1-bit images are read uncompressed)", h.syntax)
	}
	// The Basic Offset Table: empty, or a 32-bit offset a frame.
	bot, err := r.next(false)
	if err != nil {
		return nil, fmt.Errorf("Pixel Data (7FE0,0010): %w", err)
	}
	if bot.tag != tagItem || bot.length == undefinedLength {
		return nil, fmt.Errorf("Pixel Data (7FE0,0010): element %s of length %d where the Basic Offset Table item was expected", tagString(bot.tag), bot.length)
	}
	if bot.length > 0 && h.frames > 1 {
		if bot.length%4 != 0 || bot.length/4 != uint32(h.frames) {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010): a Basic Offset Table of %d bytes for %d frames (4 bytes a frame)", bot.length, h.frames)
		}
		v, err := r.bytes(int64(bot.length))
		if err != nil {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010): Basic Offset Table: %w", err)
		}
		s.offsets = make([]int64, h.frames)
		for i := range s.offsets {
			s.offsets[i] = int64(binary.LittleEndian.Uint32(v[4*i:]))
		}
	} else {
		if err := r.skip(int64(bot.length)); err != nil {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010): %w", err)
		}
		if h.frames > 1 && len(h.extOffsets) > 0 {
			if len(h.extOffsets) != h.frames {
				return nil, fmt.Errorf("an Extended Offset Table (7FE0,0001) of %d offsets for %d frames", len(h.extOffsets), h.frames)
			}
			s.offsets = make([]int64, h.frames)
			for i, o := range h.extOffsets {
				if o > math.MaxInt64/2 {
					return nil, fmt.Errorf("Extended Offset Table (7FE0,0001): offset %d of frame %d", o, i+1)
				}
				s.offsets[i] = int64(o)
			}
		}
	}
	if s.offsets != nil {
		if s.offsets[0] != 0 {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010): the offset table puts frame 1 at byte %d of the fragments, not 0", s.offsets[0])
		}
		for i := 1; i < len(s.offsets); i++ {
			if s.offsets[i] <= s.offsets[i-1] {
				return nil, fmt.Errorf("Pixel Data (7FE0,0010): the offset table puts frame %d at byte %d, not past frame %d's %d", i+1, s.offsets[i], i, s.offsets[i-1])
			}
		}
	}
	return s, nil
}

// native reports whether the transfer syntax holds the pixels
// uncompressed.
func (h *header) native() bool {
	switch h.syntax {
	case tsImplicitLE, tsExplicitLE, tsExplicitBE, tsDeflatedLE:
		return true
	}
	return false
}

// next reads the next frame's data: its raw bytes (native), or its
// compressed bytes, the fragments joined (encapsulated). keep false reads
// past the frame, returning nothing.
func (s *frameSource) next(keep bool) ([]byte, error) {
	h := s.h
	k := s.k
	s.k++
	if k >= h.frames {
		return nil, fmt.Errorf("frame %d of %d", k+1, h.frames)
	}
	if h.native() {
		if h.bitsAlloc == 1 {
			return s.nextBits(k, keep)
		}
		if !keep {
			return nil, s.r.skip(int64(s.frameBytes))
		}
		raw, err := s.r.bytes(int64(s.frameBytes))
		if err != nil {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010): %w", err)
		}
		if h.big && h.bitsAlloc == 8 && s.el.vr == "OW" {
			// 8-bit samples in big-endian 16-bit words (PS3.5 8.1.1).
			for i := 0; i+1 < len(raw); i += 2 {
				raw[i], raw[i+1] = raw[i+1], raw[i]
			}
		}
		return raw, nil
	}
	n := h.rows * h.cols * h.samples
	limit := int64(2*n*(h.bitsAlloc/8) + 1<<16)
	frame, err := s.fragments(k, limit, keep)
	if err != nil {
		if h.frames > 1 {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010), frame %d: %w", k+1, err)
		}
		return nil, fmt.Errorf("Pixel Data (7FE0,0010): %w", err)
	}
	return frame, nil
}

// nextBits reads a bitmap's frame k: its n bits from bit k·n, repacked
// from bit 0.
func (s *frameSource) nextBits(k int, keep bool) ([]byte, error) {
	n := s.h.rows * s.h.cols
	end := (int64(k+1)*int64(n) + 7) / 8 // the bytes frame k reaches into
	if grow := end - int64(s.bitsRead); grow > 0 {
		b, err := s.r.bytes(grow)
		if err != nil {
			return nil, fmt.Errorf("Pixel Data (7FE0,0010): %w", err)
		}
		// Only the byte a frame ends inside is kept for the next one.
		if len(s.bits) > 0 {
			s.bits = append(s.bits[len(s.bits)-1:], b...)
		} else {
			s.bits = b
		}
		s.bitsRead = int(end)
	}
	if !keep {
		return nil, nil
	}
	first := int64(k) * int64(n)                         // frame k's first bit
	base := (int64(s.bitsRead) - int64(len(s.bits))) * 8 // the first bit s.bits holds
	out := make([]byte, (n+7)/8)
	for i := range n {
		b := first + int64(i) - base
		if s.bits[b/8]>>(b%8)&1 != 0 {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return out, nil
}

// fragments reads frame k's fragments, joined; at most limit bytes. A
// frame's fragments are those the offset table puts before the next
// frame's; without a table, the only frame's, or, of several, one
// fragment a frame (RLE: PS3.5 G.2), or those up to one that ends a
// JPEG-family codestream with its EOI (or EOC) marker, as pydicom
// splits them.
func (s *frameSource) fragments(k int, limit int64, keep bool) ([]byte, error) {
	h := s.h
	split := s.offsets == nil && h.frames > 1 // frames told apart by their fragments' ends
	var frame []byte
	size := int64(0)
	for {
		// With an offset table, a frame ends where the next one starts.
		if s.offsets != nil && k+1 < len(s.offsets) {
			if s.pos == s.offsets[k+1] {
				break
			}
			if s.pos > s.offsets[k+1] {
				return nil, fmt.Errorf("the offset table puts frame %d at byte %d of the fragments, inside a fragment", k+2, s.offsets[k+1])
			}
		}
		if s.ended {
			if s.offsets != nil && k+1 < len(s.offsets) && size > 0 {
				return nil, fmt.Errorf("the fragments end at byte %d, before frame %d's offset, %d", s.pos, k+2, s.offsets[k+1])
			}
			break
		}
		el, err := s.r.next(false)
		if err != nil {
			return nil, err
		}
		switch el.tag {
		case tagSeqDelim:
			s.ended = true
			continue
		case tagItem:
		default:
			return nil, fmt.Errorf("element %s where a fragment was expected", tagString(el.tag))
		}
		if el.length == undefinedLength {
			return nil, fmt.Errorf("a fragment of undefined length")
		}
		s.pos += 8 + int64(el.length)
		size += int64(el.length)
		if size > limit {
			return nil, fmt.Errorf("fragments of over %d bytes for one frame", limit)
		}
		var b []byte
		if keep || split {
			if b, err = s.r.bytes(int64(el.length)); err != nil {
				return nil, err
			}
		} else if err := s.r.skip(int64(el.length)); err != nil {
			return nil, err
		}
		if keep {
			if frame == nil { // most frames are one fragment: no copy
				frame = b
			} else {
				frame = append(frame, b...)
			}
		}
		if split && (h.syntax == tsRLE || endsCodestream(b)) {
			break
		}
	}
	if size == 0 {
		if k > 0 {
			return nil, fmt.Errorf("the fragments hold %d frames; Number of Frames (0028,0008) says %d", k, h.frames)
		}
		return nil, fmt.Errorf("no fragment after the offset table")
	}
	return frame, nil
}

// endsCodestream reports whether a fragment ends a JPEG, JPEG-LS or JPEG
// 2000 codestream: with the EOI marker (JPEG 2000's EOC is the same
// bytes, FFD9), before a pad byte to the fragment's even length. Their
// coding keeps FFD9 out of the coded data.
func endsCodestream(b []byte) bool {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return len(b) >= 2 && b[len(b)-2] == 0xFF && b[len(b)-1] == 0xD9
}

// nextFrame reads the source's next frame, frame k (from 0), and decodes
// it to its stored values, or, for a colour JPEG frame, to the decoder's
// image; its errors name the frame where the object has several.
func (h *header) nextFrame(s *frameSource, k int) (samples, image.Image, error) {
	data, err := s.next(true)
	if err != nil {
		return samples{}, nil, err
	}
	var vals samples
	var img image.Image
	if h.native() {
		vals = h.nativeValues(data, s.r.order)
	} else {
		vals, img, err = h.compressed(data)
	}
	if err != nil && h.frames > 1 {
		err = fmt.Errorf("frame %d: %w", k+1, err)
	}
	return vals, img, err
}

// project combines all the frames' Modality LUT outputs pixel by pixel
// (the maximum, the mean or the minimum) and maps the result to 8 bits as
// a frame's: the user's windows, else frame 1's VOI LUT or window, else the
// projection's own range.
func (h *header) project(s *frameSource, f Frame, windows []Window) (image.Image, error) {
	if !h.gray() {
		return nil, fmt.Errorf("a %s projection of a %s image: projections are of grayscale images (choose a frame)", f, h.photometric)
	}
	acc := accumulator{kind: f.Kind, acc: make([]float64, h.rows*h.cols)}
	for k := range h.frames {
		vals, _, err := h.nextFrame(s, k)
		if err != nil {
			return nil, err
		}
		fh := *h // frame k's rescale, the header's left for the next frame
		if err := fh.useFrame(k); err != nil {
			return nil, err
		}
		acc.add(&fh, vals)
	}
	if err := h.useFrame(0); err != nil {
		return nil, err
	}
	return h.grayOf(len(acc.acc), acc.at, windows)
}

// accumulator combines images' Modality LUT outputs pixel by pixel: their
// maximum, mean or minimum (kind).
type accumulator struct {
	kind FrameKind
	acc  []float64
	n    int // the images added
}

// add combines one image's stored values, read through h's rescale or
// Modality LUT.
func (a *accumulator) add(h *header, vals samples) {
	for i := range vals.len() {
		m := h.modality(float64(h.value(int(vals.at(i)))))
		switch {
		case a.n == 0:
			a.acc[i] = m
		case a.kind == FrameMax:
			a.acc[i] = max(a.acc[i], m)
		case a.kind == FrameMin:
			a.acc[i] = min(a.acc[i], m)
		default:
			a.acc[i] += m
		}
	}
	a.n++
}

// at is pixel i of the combination.
func (a *accumulator) at(i int) float64 {
	if a.kind == FrameMean {
		return a.acc[i] / float64(a.n)
	}
	return a.acc[i]
}

// A Projection combines the images of several single-frame grayscale DICOM
// objects — a series' slices, a file each, as archives export a CT or an
// MR — pixel by pixel, as a projection Frame combines a multi-frame
// object's frames: the maximum, the mean or the minimum of their Modality
// LUT outputs (a maximum intensity projection of a CT's slab shows its
// vessels and nodules), mapped to 8 bits as the first image would be.
type Projection struct {
	frame Frame
	first *header
	acc   accumulator
}

// NewProjection starts a projection of kind f: FrameMax, FrameMean or
// FrameMin.
func NewProjection(f Frame) (*Projection, error) {
	if !f.Projection() {
		return nil, wrap(fmt.Errorf("frame %q is no projection: want max, mean or min", f))
	}
	return &Projection{frame: f, acc: accumulator{kind: f.Kind}}, nil
}

// Add reads one DICOM object from src and combines its image into the
// projection. It must be a single-frame grayscale image of the first's
// rows, columns and photometric interpretation. An object without an
// image is ErrNoImage, and leaves the projection as it was.
func (p *Projection) Add(src io.Reader) error {
	h, s, err := start(src)
	if err != nil {
		return wrap(err)
	}
	switch {
	case h.frames > 1:
		return wrap(fmt.Errorf("an image of %d frames: a projection combines single-frame images", h.frames))
	case !h.gray():
		return wrap(fmt.Errorf("a %s projection of a %s image: projections are of grayscale images", p.frame, h.photometric))
	case p.first != nil && (h.rows != p.first.rows || h.cols != p.first.cols):
		return wrap(fmt.Errorf("an image of %d×%d pixels (rows × columns) in a projection of images of %d×%d", h.rows, h.cols, p.first.rows, p.first.cols))
	case p.first != nil && h.photometric != p.first.photometric:
		return wrap(fmt.Errorf("a %s image in a projection of %s images", h.photometric, p.first.photometric))
	}
	vals, _, err := h.nextFrame(s, 0)
	if err != nil {
		return wrap(err)
	}
	if err := h.useFrame(0); err != nil {
		return wrap(err)
	}
	if p.first == nil {
		p.first = h
		p.acc.acc = make([]float64, h.rows*h.cols)
	}
	p.acc.add(h, vals)
	return nil
}

// Len is the number of images added.
func (p *Projection) Len() int { return p.acc.n }

// Image maps the projection to 8 bits: through opts.Windows where given
// (one, or three for an RGB image), else (unless opts.OwnRange) the first
// image's VOI LUT or window, else the projection's own range;
// MONOCHROME1 inverted. opts.Frame is not read.
func (p *Projection) Image(opts Options) (image.Image, error) {
	if p.first == nil {
		return nil, wrap(errors.New("a projection of no images"))
	}
	if err := checkWindows(opts.Windows); err != nil {
		return nil, wrap(err)
	}
	p.first.ownRange = opts.OwnRange
	img, err := p.first.grayOf(len(p.acc.acc), p.acc.at, opts.Windows)
	if err != nil {
		return nil, wrap(err)
	}
	return img, nil
}
