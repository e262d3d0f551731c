package dicom

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"strconv"
	"strings"
)

func init() {
	image.RegisterFormat("dicom", strings.Repeat("?", 128)+"DICM", Decode, DecodeConfig)
}

// Window is a VOI window in the Modality LUT's output units (Hounsfield
// units for a CT): values from Center−Width/2 to Center+Width/2 spread over
// the 8 bits, LINEAR as PS3.3 C.11.2.1.2.1 defines it (or the file's VOI
// LUT Function).
type Window struct {
	Center, Width float64
}

// Options are a decode's choices beyond the file's own.
type Options struct {
	// Windows, when set, replace the file's VOI LUT and window for a
	// grayscale image: one window gives a gray image, three an RGB image
	// whose channels are the three windows of the same pixels (a head CT's
	// brain, subdural and bone windows, as RSNA's intracranial haemorrhage
	// models read them). A colour image is decoded as without them.
	Windows []Window
	// Frame chooses the image of a multi-frame object: a frame, or a
	// projection of the frames (a grayscale image's). Without one, a
	// multi-frame object is an error (ErrMultiFrame).
	Frame Frame
	// OwnRange, where no Windows are given, maps each grayscale image
	// (a frame, a projection) through its own range of values, its
	// file's VOI LUT and windows ignored: one contrast for files whose
	// windows were set for other purposes.
	OwnRange bool
}

// ParseWindows parses windows written as C,W (a centre and a width in
// the Modality LUT's output units), one, or three separated by '/':
// "-600,1500" (a CT's lung window), "40,80/80,200/600,2800".
func ParseWindows(s string) ([]Window, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 1 && len(parts) != 3 {
		return nil, fmt.Errorf("window %q: want C,W or three of them, C,W/C,W/C,W (one per channel)", s)
	}
	ws := make([]Window, len(parts))
	for i, p := range parts {
		c, w, ok := strings.Cut(p, ",")
		if !ok {
			return nil, fmt.Errorf("window %q: want C,W (a centre and a width), not %q", s, p)
		}
		var err error
		if ws[i].Center, err = decimal(c); err == nil {
			ws[i].Width, err = decimal(w)
		}
		if err != nil {
			return nil, fmt.Errorf("window %q: %v", s, err)
		}
		if ws[i].Width < 1 {
			return nil, fmt.Errorf("window %q: width %g under 1 (PS3.3 C.11.2.1.2.1)", s, ws[i].Width)
		}
	}
	return ws, nil
}

// FormatWindows is the string ParseWindows reads back to ws.
func FormatWindows(ws []Window) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = strconv.FormatFloat(w.Center, 'g', -1, 64) + "," + strconv.FormatFloat(w.Width, 'g', -1, 64)
	}
	return strings.Join(parts, "/")
}

// Decode decodes a DICOM file's image with the file's own VOI (package
// doc).
func Decode(r io.Reader) (image.Image, error) { return DecodeWith(r, Options{}) }

// DecodeConfig returns the image's size and colour model from the file's
// header, reading nothing of the pixel data.
func DecodeConfig(r io.Reader) (image.Config, error) {
	h, _, _, err := readHeader(r)
	if err != nil {
		return image.Config{}, wrap(err)
	}
	if err := h.check(); err != nil {
		return image.Config{}, wrap(err)
	}
	m := color.Model(color.NRGBAModel)
	if h.gray() {
		m = color.GrayModel
	}
	return image.Config{ColorModel: m, Width: h.cols, Height: h.rows}, nil
}

func wrap(err error) error { return fmt.Errorf("dicom: %w", err) }

// DecodeWith decodes a DICOM file's image: *image.Gray for a grayscale
// image, *image.NRGBA for a colour one, or the JPEG decoder's image for a
// colour JPEG.
func DecodeWith(r io.Reader, opts Options) (image.Image, error) {
	img, err := decode(r, opts)
	if err != nil {
		return nil, wrap(err)
	}
	return img, nil
}

func decode(src io.Reader, opts Options) (image.Image, error) {
	if err := checkWindows(opts.Windows); err != nil {
		return nil, err
	}
	if opts.Frame.Kind == FrameAll {
		_, err := opts.Frame.Index(0)
		return nil, err
	}
	h, s, err := start(src)
	if err != nil {
		return nil, err
	}
	h.ownRange = opts.OwnRange
	if h.frames > 1 && opts.Frame.Kind == FrameNone {
		return nil, fmt.Errorf("%w (%d frames) and no frame chosen", ErrMultiFrame, h.frames)
	}
	if opts.Frame.Projection() {
		return h.project(s, opts.Frame, opts.Windows)
	}
	k, err := opts.Frame.Index(h.frames)
	if err != nil {
		return nil, err
	}
	for range k {
		if _, err := s.next(false); err != nil {
			return nil, err
		}
	}
	return h.nextImage(s, k, opts.Windows)
}

// Level maps v, a Modality LUT output, through w as a LINEAR VOI LUT
// Function does (PS3.3 C.11.2.1.2.1) to [0, 1]: what a user's window does
// to a grayscale DICOM image, and to a NIfTI image's scaled values.
func (w Window) Level(v float64) float64 { return linear(w.Center-0.5, w.Width-1, v) }

// linear is the linear VOI of centre c and width wd (as PS3.3 C.11.2.1.2
// adjusts them) at x, to [0, 1].
func linear(c, wd, x float64) float64 {
	switch {
	case x <= c-wd/2:
		return 0
	case x > c+wd/2:
		return 1
	}
	return (x-c)/wd + 0.5
}

// checkWindows refuses windows other than none, one or three, each of a
// finite centre and a width of at least 1.
func checkWindows(ws []Window) error {
	if n := len(ws); n != 0 && n != 1 && n != 3 {
		return fmt.Errorf("%d windows: one, or three (one per channel)", n)
	}
	for _, w := range ws {
		if !(w.Width >= 1) || math.IsInf(w.Width, 0) || math.IsNaN(w.Center) || math.IsInf(w.Center, 0) {
			return fmt.Errorf("window of centre %g and width %g: want a finite centre and a width of at least 1", w.Center, w.Width)
		}
	}
	return nil
}

// DecodeEach decodes every frame of a DICOM file in turn, in one pass over
// it, and gives each to each with its number (from 1); a single-frame
// file's one frame is frame 1. opts.Frame is not read. It stops at the
// first error, each's included.
func DecodeEach(r io.Reader, opts Options, each func(frame int, img image.Image) error) error {
	return DecodeFrames(r, opts, nil, each)
}

// DecodeFrames is DecodeEach of the frames numbered in frames (from 1, in
// increasing order; nil for all): those decoded, the others read past,
// in one pass over the file. A number past the file's frames is an error
// (ErrNoFrame).
func DecodeFrames(r io.Reader, opts Options, frames []int, each func(frame int, img image.Image) error) error {
	for i := 1; i < len(frames); i++ {
		if frames[i] <= frames[i-1] {
			return wrap(fmt.Errorf("frames %v: not in increasing order", frames))
		}
	}
	h, s, err := start(r)
	if err != nil {
		return wrap(err)
	}
	h.ownRange = opts.OwnRange
	if len(frames) > 0 && (frames[0] < 1 || frames[len(frames)-1] > h.frames) {
		return wrap(fmt.Errorf("%w: frames %d to %d of an image of %d frame(s)", ErrNoFrame, frames[0], frames[len(frames)-1], h.frames))
	}
	next := 0 // the next of frames to decode
	for k := range h.frames {
		if frames != nil {
			if next == len(frames) {
				return nil
			}
			if frames[next] != k+1 {
				if _, err := s.next(false); err != nil {
					return wrap(err)
				}
				continue
			}
			next++
		}
		img, err := h.nextImage(s, k, opts.Windows)
		if err != nil {
			return wrap(err)
		}
		if err := each(k+1, img); err != nil {
			return err
		}
	}
	return nil
}

// start reads a file's header, checks it and starts reading its frames.
func start(src io.Reader) (*header, *frameSource, error) {
	h, r, el, err := readHeader(src)
	if err != nil {
		return nil, nil, err
	}
	if err := h.check(); err != nil {
		return nil, nil, err
	}
	r.limit = math.MaxInt64
	s, err := newFrameSource(h, r, el)
	if err != nil {
		return nil, nil, err
	}
	return h, s, nil
}

// nextImage decodes the source's next frame, frame k (from 0), to 8 bits
// through its own rescale and window (the user's windows where given).
func (h *header) nextImage(s *frameSource, k int, windows []Window) (image.Image, error) {
	vals, img, err := h.nextFrame(s, k)
	if err != nil {
		return nil, err
	}
	if img != nil {
		return img, nil
	}
	fh := *h // frame k's rescale and window, the header's left for the next frame
	if err := fh.useFrame(k); err != nil {
		return nil, err
	}
	switch {
	case fh.photometric == "PALETTE COLOR":
		return fh.toPalette(vals.narrow) // 8 or 16 bits (checkPalette)
	case fh.gray():
		return fh.toGray(vals, windows)
	case vals.wide != nil:
		return toRGB(&fh, vals.wide)
	}
	return toRGB(&fh, vals.narrow)
}

// samples are a frame's stored values, pixel-major, components
// interleaved: each sample's Bits Stored bits as stored — two's complement
// where Pixel Representation is 1, the sign read where a value is looked
// up (value). They are 16-bit words where Bits Stored is 16 or less, as
// every codec gives them and toGray's tables are indexed by them, and
// 32-bit ones (wide) past that, which only uncompressed and RLE data hold
// (check); one of the two is set.
type samples struct {
	narrow []uint16
	wide   []uint32
}

// wide reports whether the stored values take 32-bit words: Bits Stored
// over 16.
func (h *header) wide() bool { return h.bitsStored > 16 }

// at is sample i's stored bits.
func (s samples) at(i int) uint32 {
	if s.wide != nil {
		return s.wide[i]
	}
	return uint32(s.narrow[i])
}

// len is the number of samples.
func (s samples) len() int {
	if s.wide != nil {
		return len(s.wide)
	}
	return len(s.narrow)
}

// compressed decodes an encapsulated frame to its stored values (the
// codecs but RLE's 16-bit or narrower), or, for a colour JPEG frame, to
// the decoder's image.
func (h *header) compressed(frame []byte) (_ samples, _ image.Image, err error) {
	n := h.rows * h.cols * h.samples
	perByte := pixelsPerByte[h.syntax]
	if int64(h.rows)*int64(h.cols) > int64(perByte)*int64(len(frame))+64 {
		return samples{}, nil, fmt.Errorf("a compressed frame of %d bytes cannot hold a %d×%d image (transfer syntax %s codes at most %d pixels a byte)", len(frame), h.cols, h.rows, h.syntax, perByte)
	}
	var vals []uint16
	switch h.syntax {
	case tsRLE:
		s, err := h.rle(frame)
		if err != nil {
			return samples{}, nil, fmt.Errorf("RLE Lossless: %w", err)
		}
		return s, nil, nil
	case tsJPEGLL14, tsJPEGLLSV1:
		vals, err = h.lossless("JPEG Lossless", decodeJPEGLossless, frame)
	case tsJPEGLS, tsJPEGLSNear:
		vals, err = h.lossless("JPEG-LS", decodeJPEGLS, frame)
	case tsJ2K, tsJ2KLossy:
		vals, err = h.lossless("JPEG 2000", decodeJPEG2000, frame)
	case tsJPEGBase, tsJPEGExt:
		if h.bitsStored > 8 {
			return samples{}, nil, fmt.Errorf("12-bit lossy JPEG (transfer syntax %s, %d bits stored) is not read: write the file uncompressed first, e.g. dcmdjpeg IN OUT or gdcmconv --raw IN OUT", h.syntax, h.bitsStored)
		}
		// The JPEG's own size is checked before Go's decoder allocates
		// the image it claims.
		if cfg, err := jpeg.DecodeConfig(bytes.NewReader(frame)); err != nil {
			return samples{}, nil, fmt.Errorf("JPEG (transfer syntax %s): %v", h.syntax, err)
		} else if cfg.Width != h.cols || cfg.Height != h.rows {
			return samples{}, nil, fmt.Errorf("JPEG frame of %d×%d in an image of %d×%d", cfg.Width, cfg.Height, h.cols, h.rows)
		}
		img, err := jpeg.Decode(bytes.NewReader(frame))
		if err != nil {
			return samples{}, nil, fmt.Errorf("JPEG (transfer syntax %s): %v", h.syntax, err)
		}
		if b := img.Bounds(); b.Dx() != h.cols || b.Dy() != h.rows {
			return samples{}, nil, fmt.Errorf("JPEG frame of %d×%d in an image of %d×%d", b.Dx(), b.Dy(), h.cols, h.rows)
		}
		g, ok := img.(*image.Gray)
		if h.samples != 1 {
			if ok {
				return samples{}, nil, fmt.Errorf("a gray JPEG frame in a %s image", h.photometric)
			}
			// Photometric Interpretation RGB says the frame's components
			// are R, G and B as stored (PS3.5 8.2.1), unless an Adobe
			// marker says they were transformed; Go's decoder, like
			// libjpeg, assumes YCbCr for a frame that says nothing.
			if y, isYCbCr := img.(*image.YCbCr); isYCbCr && h.photometric == "RGB" && !adobeMarker(frame) {
				return samples{}, &RawJPEG{y}, nil
			}
			return samples{}, img, nil
		}
		if !ok {
			return samples{}, nil, fmt.Errorf("a colour JPEG frame in a %s image", h.photometric)
		}
		vals = make([]uint16, n)
		for y := range h.rows {
			row := g.Pix[y*g.Stride : y*g.Stride+h.cols]
			for x, v := range row {
				vals[y*h.cols+x] = h.stored(uint32(v))
			}
		}
	}
	return samples{narrow: vals}, nil, err
}

// pixelsPerByte is the most pixels a byte of each codec's frame can code:
// a frame shorter than that for its image is refused before the codec
// allocates it (a file of a few bytes claiming 2²⁸ pixels). JPEG-LS's run
// mode codes up to 2¹⁵ samples in a bit; JPEG 2000 codes an empty
// precinct in a byte, whatever its size (its decoder bounds its work by
// the data and its samples by the image's).
var pixelsPerByte = map[string]int{
	tsRLE: 64, tsJPEGLL14: 8, tsJPEGLLSV1: 8, tsJPEGBase: 256, tsJPEGExt: 256,
	tsJPEGLS: 1 << 18, tsJPEGLSNear: 1 << 18, tsJ2K: 1 << 28, tsJ2KLossy: 1 << 28,
}

// RawJPEG is a colour JPEG frame whose components are R, G and B as
// stored — Photometric Interpretation RGB, and no Adobe marker saying
// that they were transformed — held in the planes of the image.YCbCr Go's
// decoder returned (Y the red, Cb the green, Cr the blue), at their
// subsampling: a reader upsamples them as it would YCbCr's planes, with
// no colour matrix after (pydicom reads such a frame so, through
// Pillow). As an image.Image it gives each pixel its nearest samples.
type RawJPEG struct {
	*image.YCbCr
}

// ColorModel is RGBA: the planes are R, G and B.
func (p *RawJPEG) ColorModel() color.Model { return color.RGBAModel }

// At returns the pixel's samples as R, G and B.
func (p *RawJPEG) At(x, y int) color.Color {
	c := p.YCbCrAt(x, y)
	return color.RGBA{c.Y, c.Cb, c.Cr, 0xff}
}

// adobeMarker reports whether a JPEG stream has an APP14 "Adobe" segment
// with its transform flag before its first scan (T.81 B.2.4.6's markers
// walked by their lengths). A segment too short for the flag (pydicom's
// SC_rgb_jpeg.dcm) says nothing, as Pillow and Go's decoder read it.
func adobeMarker(b []byte) bool {
	for i := 2; i+4 <= len(b) && b[i] == 0xFF; {
		m, n := b[i+1], int(b[i+2])<<8|int(b[i+3])
		if m == 0xDA || n < 2 {
			return false
		}
		if m == 0xEE && n-2 >= 12 && i+4+5 <= len(b) && string(b[i+4:i+9]) == "Adobe" {
			return true
		}
		i += 2 + n
	}
	return false
}

// stored keeps a sample's Bits Stored bits, 16 or fewer.
func (h *header) stored(v uint32) uint16 { return uint16(v & h.mask()) }

// mask is Bits Stored's bits, up to 32.
func (h *header) mask() uint32 { return uint32(uint64(1)<<h.bitsStored - 1) }

// value is the number a sample's stored bits (up to 32) represent: two's
// complement where the pixel representation is 1. It is reckoned in 64
// bits, where 1<<Bits Stored does not overflow.
func (h *header) value(bits int) int64 {
	v := int64(uint32(bits))
	if h.pixelRep == 1 && v&(int64(1)<<(h.bitsStored-1)) != 0 {
		v -= int64(1) << h.bitsStored
	}
	return v
}

// nativeValues reads uncompressed samples: pixel-major, components
// interleaved (a planar image's planes interleaved here), each value
// masked to Bits Stored below High Bit (PS3.5 8.1.1: the other bits may
// hold anything).
func (h *header) nativeValues(raw []byte, order binary.ByteOrder) samples {
	n := h.rows * h.cols * h.samples
	if h.wide() {
		vals := make([]uint32, n)
		readNative(h, raw, order, vals)
		return samples{wide: vals}
	}
	vals := make([]uint16, n)
	switch {
	case h.bitsAlloc == 1:
		for i := range vals {
			vals[i] = uint16(raw[i/8]>>(i%8)) & 1
		}
		return samples{narrow: vals}
	case h.photometric == "YBR_FULL_422":
		// Each pair of pixels shares its chroma: repeated, as pydicom
		// expands it, into YBR_FULL.
		for p := 0; p < h.rows*h.cols; p += 2 {
			y1, y2, cb, cr := uint16(raw[2*p]), uint16(raw[2*p+1]), uint16(raw[2*p+2]), uint16(raw[2*p+3])
			v := vals[3*p : 3*p+6]
			v[0], v[1], v[2], v[3], v[4], v[5] = y1, cb, cr, y2, cb, cr
		}
		return samples{narrow: vals}
	}
	readNative(h, raw, order, vals)
	return samples{narrow: vals}
}

// readNative fills vals with raw's samples of 8, 16 or 32 bits, each
// shifted down from High Bit and masked to Bits Stored: 16-bit words where
// Bits Stored is 16 or less, whatever Bits Allocated, 32-bit ones past it.
func readNative[T uint16 | uint32](h *header, raw []byte, order binary.ByteOrder, vals []T) {
	shift := h.highBit - h.bitsStored + 1
	mask := h.mask()
	plane := h.rows * h.cols
	at := func(i int) int { // raw index of interleaved sample i
		if h.planar == 1 && h.samples > 1 {
			return (i%h.samples)*plane + i/h.samples
		}
		return i
	}
	for i := range vals {
		j := at(i)
		var v uint32
		switch h.bitsAlloc {
		case 8:
			v = uint32(raw[j])
		case 16:
			v = uint32(order.Uint16(raw[2*j:]))
		default:
			v = order.Uint32(raw[4*j:])
		}
		vals[i] = T(v >> shift & mask)
	}
}

// rle decodes an RLE Lossless frame (PS3.5 G): a header of segment offsets,
// then one PackBits segment per byte of each sample, most significant
// byte first, components in turn.
func (h *header) rle(frame []byte) (samples, error) {
	if len(frame) < 64 {
		return samples{}, fmt.Errorf("frame of %d bytes, shorter than its header", len(frame))
	}
	bps := h.bitsAlloc / 8
	nseg := int(binary.LittleEndian.Uint32(frame))
	if nseg != h.samples*bps {
		return samples{}, fmt.Errorf("%d segments for %d samples of %d bytes", nseg, h.samples, bps)
	}
	plane := h.rows * h.cols
	// A segment codes at most 128 bytes in 2 (a repeat run), and segments
	// do not overlap: a frame too short for all of them is refused before
	// their planes are allocated (32-bit RGB has 12).
	if int64(plane)*int64(nseg) > 64*int64(len(frame)) {
		return samples{}, fmt.Errorf("a frame of %d bytes cannot hold %d segments of %d bytes", len(frame), nseg, plane)
	}
	raw := make([]byte, plane*nseg)
	for s := range nseg {
		start := int64(binary.LittleEndian.Uint32(frame[4+4*s:]))
		end := int64(len(frame))
		if s+1 < nseg {
			end = int64(binary.LittleEndian.Uint32(frame[8+4*s:]))
		}
		if start < 64 || end < start || end > int64(len(frame)) {
			return samples{}, fmt.Errorf("segment %d at bytes %d to %d of a %d-byte frame", s, start, end, len(frame))
		}
		if err := unpackBits(frame[start:end], raw[s*plane:(s+1)*plane]); err != nil {
			return samples{}, fmt.Errorf("segment %d: %w", s, err)
		}
	}
	if h.wide() {
		vals := make([]uint32, plane*h.samples)
		joinSegments(h, raw, vals)
		return samples{wide: vals}, nil
	}
	vals := make([]uint16, plane*h.samples)
	joinSegments(h, raw, vals)
	return samples{narrow: vals}, nil
}

// joinSegments fills vals with the samples of an RLE frame's decoded
// segments, raw (each a plane of one byte of one component, most
// significant first): whole composite codes (PS3.5 G.2), each shifted
// down from High Bit and masked to Bits Stored as uncompressed samples
// are.
func joinSegments[T uint16 | uint32](h *header, raw []byte, vals []T) {
	bps := h.bitsAlloc / 8
	plane := h.rows * h.cols
	shift := h.highBit - h.bitsStored + 1
	mask := h.mask()
	for p := range plane {
		for c := range h.samples {
			var v uint32
			for b := range bps {
				v = v<<8 | uint32(raw[(c*bps+b)*plane+p])
			}
			vals[p*h.samples+c] = T(v >> shift & mask)
		}
	}
}

// unpackBits fills dst from a PackBits segment (PS3.5 G.3.1): a header byte
// n of 0..127 copies n+1 literal bytes, of −127..−1 repeats the next byte
// 1−n times, −128 does nothing. A segment that falls short of dst is an
// error; bytes past it are padding.
func unpackBits(src, dst []byte) error {
	o := 0
	for i := 0; i < len(src) && o < len(dst); {
		n := int(int8(src[i]))
		i++
		switch {
		case n >= 0:
			if i+n+1 > len(src) || o+n+1 > len(dst) {
				return fmt.Errorf("a literal run of %d bytes past the segment or the image", n+1)
			}
			copy(dst[o:], src[i:i+n+1])
			i += n + 1
			o += n + 1
		case n > -128:
			if i >= len(src) || o+1-n > len(dst) {
				return fmt.Errorf("a repeat run of %d bytes past the segment or the image", 1-n)
			}
			b := src[i]
			i++
			for k := range 1 - n {
				dst[o+k] = b
			}
			o += 1 - n
		}
	}
	if o < len(dst) {
		return fmt.Errorf("decodes to %d of the image's %d bytes", o, len(dst))
	}
	return nil
}

// lossless decodes a frame of a predictive codec (JPEG Lossless, JPEG-LS)
// by decode to stored values.
func (h *header) lossless(codec string, decode func([]byte, int) ([]uint16, int, int, int, int, error), frame []byte) ([]uint16, error) {
	pix, w, ht, comps, prec, err := decode(frame, h.rows*h.cols*h.samples)
	if err != nil {
		return nil, err
	}
	if w != h.cols || ht != h.rows || comps != h.samples {
		return nil, fmt.Errorf("%s frame of %d×%d, %d components, in an image of %d×%d, %d samples", codec, w, ht, comps, h.cols, h.rows, h.samples)
	}
	if prec > h.bitsAlloc {
		return nil, fmt.Errorf("%s frame of %d-bit precision in %d-bit samples", codec, prec, h.bitsAlloc)
	}
	for i, v := range pix {
		pix[i] = h.stored(uint32(v))
	}
	return pix, nil
}

// toGray maps stored values to 8 bits through the Modality LUT, the VOI
// (the user's windows, the file's VOI LUT, its window, or the image's own
// range) and MONOCHROME1's inversion (package doc): a gray image, or an
// RGB one of three windows. For 16 bits or fewer each distinct stored
// value is mapped once, into a table indexed by the stored bits; wider
// values, too many for a table, are mapped a pixel at a time.
func (h *header) toGray(s samples, windows []Window) (image.Image, error) {
	if s.wide != nil {
		return h.grayOf(len(s.wide), func(i int) float64 { return h.modality(float64(h.value(int(s.wide[i])))) }, windows)
	}
	vals := s.narrow
	used := make([]bool, 1<<h.bitsStored)
	n := 0
	for _, v := range vals {
		if !used[v] {
			used[v], n = true, n+1
		}
	}
	distinct := make([]int, 0, n)
	for v, u := range used {
		if u {
			distinct = append(distinct, v)
		}
	}
	levels, err := h.grayLevels(len(distinct), func(j int) float64 { return h.modality(float64(h.value(distinct[j]))) }, windows)
	if err != nil {
		return nil, err
	}
	table := make([]uint8, len(used))
	for c, l := range levels {
		for j, v := range distinct {
			table[v] = l[j]
		}
		out := make([]uint8, len(vals))
		for i, v := range vals {
			out[i] = table[v]
		}
		levels[c] = out
	}
	return h.grayOrRGB(levels), nil
}

// grayOf maps n pixels' Modality LUT outputs, m(i), to 8 bits (grayLevels)
// a pixel at a time, for values too many or too wide for toGray's table:
// 32-bit samples', a projection's.
func (h *header) grayOf(n int, m func(i int) float64, windows []Window) (image.Image, error) {
	levels, err := h.grayLevels(n, m, windows)
	if err != nil {
		return nil, err
	}
	return h.grayOrRGB(levels), nil
}

// grayLevels maps n Modality LUT outputs, m(i), to 8 bits a channel:
// through the VOI (where it is the image's own range, the m(i)'s) and
// MONOCHROME1's inversion.
func (h *header) grayLevels(n int, m func(i int) float64, windows []Window) ([][]uint8, error) {
	vois, err := h.vois(windows, func() (float64, float64) {
		mn, mx := math.Inf(1), math.Inf(-1)
		for i := range n {
			v := m(i)
			mn, mx = min(mn, v), max(mx, v)
		}
		return mn, mx
	})
	if err != nil {
		return nil, err
	}
	out := make([][]uint8, len(vois))
	for c, voi := range vois {
		out[c] = make([]uint8, n)
		for i := range out[c] {
			out[c][i] = h.eight(voi(m(i)))
		}
	}
	return out, nil
}

// modality is the Modality LUT: its table, or the rescale.
func (h *header) modality(v float64) float64 {
	if l := h.modalityLUT; l != nil {
		return float64(l.at(v))
	}
	return v*h.slope + h.intercept
}

// vois are the VOI functions to [0, 1] of a grayscale image's channels:
// one a window of the user's, else one: the file's VOI LUT, its window,
// or the image's own range, which rangeOf gives (the range alone where
// the caller asked for it: Options.OwnRange).
func (h *header) vois(windows []Window, rangeOf func() (lo, hi float64)) ([]func(float64) float64, error) {
	fn := h.voiFunction
	if fn == "" {
		fn = "LINEAR"
	}
	switch {
	case len(windows) == 0 && h.ownRange:
		return []func(float64) float64{rangeVOI(rangeOf())}, nil
	case len(windows) > 0:
		vois := make([]func(float64) float64, len(windows))
		for k, w := range windows {
			var err error
			if vois[k], err = windowFunc(fn, w); err != nil {
				return nil, err
			}
		}
		return vois, nil
	case h.voiLUT != nil:
		l := h.voiLUT
		top := float64(int(1)<<l.bits - 1)
		return []func(float64) float64{func(x float64) float64 { return float64(l.at(x)) / top }}, nil
	case len(h.windows) > 0:
		voi, err := windowFunc(fn, h.windows[0])
		if err != nil {
			return nil, err
		}
		return []func(float64) float64{voi}, nil
	}
	return []func(float64) float64{rangeVOI(rangeOf())}, nil
}

// rangeVOI maps [mn, mx], an image's own range, to [0, 1] (all to 0 where
// the image is one value).
func rangeVOI(mn, mx float64) func(float64) float64 {
	return func(x float64) float64 {
		if mx == mn {
			return 0
		}
		return (x - mn) / (mx - mn)
	}
}

// eight is a VOI output in [0, 1] as 8 bits: MONOCHROME1 (higher values
// darker) inverted, clipped, ×255 rounded.
func (h *header) eight(y float64) uint8 {
	if h.photometric == "MONOCHROME1" {
		y = 1 - y
	}
	return uint8(math.Round(min(max(y, 0), 1) * 255))
}

// grayOrRGB is one channel's pixels as a gray image, or three's as an
// RGB one.
func (h *header) grayOrRGB(ch [][]uint8) image.Image {
	r := image.Rect(0, 0, h.cols, h.rows)
	if len(ch) == 1 {
		return &image.Gray{Pix: ch[0], Stride: h.cols, Rect: r}
	}
	img := image.NewNRGBA(r)
	for i := range ch[0] {
		px := img.Pix[4*i : 4*i+4]
		px[0], px[1], px[2], px[3] = ch[0][i], ch[1][i], ch[2][i], 0xff
	}
	return img
}

// at looks an input up in the table as pydicom's apply_voi does: below the
// first mapped value the first entry, past the table the last, a value
// between two inputs the lower one's.
func (l *lut) at(x float64) uint16 {
	i := math.Floor(x - float64(l.first))
	switch {
	case i <= 0 || math.IsNaN(i):
		return l.data[0]
	case i >= float64(len(l.data)-1):
		return l.data[len(l.data)-1]
	}
	return l.data[int(i)]
}

// windowFunc is a VOI LUT Function (PS3.3 C.11.2.1.2) scaled to [0, 1].
func windowFunc(name string, w Window) (func(float64) float64, error) {
	c, wd := w.Center, w.Width
	switch name {
	case "LINEAR":
		if wd < 1 {
			return nil, fmt.Errorf("window width %g under 1, which LINEAR does not allow (PS3.3 C.11.2.1.2.1)", wd)
		}
		c, wd = c-0.5, wd-1
	case "LINEAR_EXACT":
		if wd <= 0 {
			return nil, fmt.Errorf("window width %g: LINEAR_EXACT needs a positive one", wd)
		}
	case "SIGMOID":
		if wd <= 0 {
			return nil, fmt.Errorf("window width %g: SIGMOID needs a positive one", wd)
		}
		return func(x float64) float64 { return 1 / (1 + math.Exp(-4*(x-c)/wd)) }, nil
	}
	return func(x float64) float64 { return linear(c, wd, x) }, nil
}

// toRGB makes 8-bit RGB of a colour image's stored values: YBR_FULL
// converted by PS3.3 C.7.6.3.1.2's equations, samples of more than 8 bits
// (up to 32) scaled to 8.
func toRGB[T uint16 | uint32](h *header, vals []T) (image.Image, error) {
	if h.pixelRep == 1 {
		return nil, fmt.Errorf("a %s image of signed samples", h.photometric)
	}
	ybr := h.photometric == "YBR_FULL" || h.photometric == "YBR_FULL_422" // expanded by native
	// YBR_RCT and YBR_ICT name the component transform of a JPEG 2000
	// codestream (PS3.3 C.7.6.3.1.2), which its decoder has inverted.
	j2kRGB := (h.photometric == "YBR_RCT" || h.photometric == "YBR_ICT") && (h.syntax == tsJ2K || h.syntax == tsJ2KLossy)
	if !ybr && !j2kRGB && h.photometric != "RGB" {
		return nil, fmt.Errorf("%s outside a JPEG frame is not read", h.photometric)
	}
	top := float64(uint64(1)<<h.bitsStored - 1)
	scale := func(v float64) uint8 { return uint8(math.Round(min(max(v, 0), top) * 255 / top)) }
	img := image.NewNRGBA(image.Rect(0, 0, h.cols, h.rows))
	mid := float64(uint64(1) << (h.bitsStored - 1))
	for p := range h.rows * h.cols {
		a, b, c := float64(vals[3*p]), float64(vals[3*p+1]), float64(vals[3*p+2])
		if ybr {
			y, cb, cr := a, b-mid, c-mid
			a = y + 1.402*cr
			b = y - 0.114*1.772/0.587*cb - 0.299*1.402/0.587*cr
			c = y + 1.772*cb
		}
		px := img.Pix[4*p : 4*p+4]
		px[0], px[1], px[2], px[3] = scale(a), scale(b), scale(c), 0xff
	}
	return img, nil
}
