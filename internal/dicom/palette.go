package dicom

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"math"
)

// PALETTE COLOR (PS3.3 C.7.6.3.1.5, C.7.6.3.1.6 and the Palette Color
// Lookup Table module, C.7.9): each pixel's one sample is an index into
// three tables, red, green and blue. They are read as pydicom 2.3.1's
// apply_color_lut reads them, then made 8-bit:
//
//   - the Red Palette Color LUT Descriptor alone gives the entries, the
//     first mapped value and the nominal bits of all three tables: pydicom
//     reads the green and blue descriptors not at all, so neither does this
//     reader (tables of unequal lengths are refused, below);
//   - the tables are the Palette Color LUT Data where the red one is
//     present, else the Segmented Palette Color LUT Data (C.7.9.2);
//   - a table's entries are as wide as its data say (pydicom's
//     len(data)/entries): one byte each where the data hold one byte an
//     entry, two where two, whatever the descriptor's bits — a writer's
//     quirk is 16 bits in the descriptor over 8-bit data; the other, 8 bits
//     over 16-bit words, an entry a word;
//   - an index below the first mapped value takes the first entry, one past
//     the table the last;
//   - to 8 bits (this package's rule, which docs/serve_preprocess.py's
//     palette_rgb applies to pydicom's output): 8-bit entries as they are;
//     16-bit words of a table whose descriptor says 8 bits, their low byte
//     (the 8-bit entry, as setLUT reads a LUT Sequence's); 16-bit entries
//     of a 16-bit table, round(v·255/65535), as toRGB scales wide samples.
//     A 16-bit table whose entries all lie under 256 is scaled like any
//     other (nearly black): pydicom does not second-guess its descriptor,
//     nor does this reader.
//
// The alpha table (0028,1204 or 0028,1224) is ignored, as the image is
// RGB, but, as pydicom, it must be as long as the others where present;
// its descriptor (0028,1104) and the Palette Color LUT UID (0028,1199) are
// skipped as every attribute not read is.
//
// Where pydicom 2.3.1 reads a valid file wrongly, this reader follows the
// standard: 16-bit Palette Color LUT Data of a big-endian file are read in
// the file's byte order (pydicom reads them in the machine's), and an
// index past 255 into a table of 8-bit entries, or past 65535 into one of
// 16-bit entries, is clipped to the table (pydicom computes its indices in
// the entries' own type, where they wrap). Where pydicom refuses a file,
// this reader does too (tables of unequal lengths, data of neither one nor
// two bytes an entry, a segmented table's malformed segments), and it
// refuses a few pydicom would read part of: a table with fewer entries
// than its descriptor's (pydicom fails only where a pixel indexes past
// it), one expanding past 65536 entries or looping, 1-bit indices.

// Tags of the Palette Color Lookup Table module (PS3.3 C.7.9) read here.
const (
	tagRedPaletteDescriptor = 0x00281101
	tagRedPaletteData       = 0x00281201
	tagAlphaPaletteData     = 0x00281204
	tagRedSegmentedData     = 0x00281221
	tagAlphaSegmentedData   = 0x00281224
)

// maxSegmentedBytes bounds a Segmented Palette Color LUT Data element: a
// table of 65536 entries coded one linear segment an entry (three 16-bit
// words each) is 393216 bytes; 512 KiB is a broken length.
const maxSegmentedBytes = 512 << 10

// maxSegments bounds the segments one segmented table's expansion visits,
// indirect segments' copies included: every segment but a pointless empty
// one adds an entry, and a table has at most 65536.
const maxSegments = 1 << 18

// maxIndirectDepth bounds how deep indirect segments copy segments that
// are themselves indirect (each a recursion, as in pydicom).
const maxIndirectDepth = 64

// channelNames name the red, green, blue and alpha tables in errors.
var channelNames = [4]string{"Red", "Green", "Blue", "Alpha"}

// paletteLUTs are a PALETTE COLOR image's tables: the elements as read
// (paletteElement), then, once checkPalette has validated them, each
// colour's table made 8-bit.
type paletteLUTs struct {
	desc      []byte     // the Red Palette Color LUT Descriptor's value
	descVR    string     // its VR, "" in implicit VR
	data      [4][]byte  // Red, Green, Blue, Alpha Palette Color LUT Data
	segmented [4][]byte  // their Segmented Palette Color LUT Data
	err       error      // an element's error, reported if the image is PALETTE COLOR
	first     int        // the first mapped value
	rgb       [3][]uint8 // each table's 8-bit entries, as many as the descriptor says
}

// isPaletteTag reports whether t is one of the Palette Color Lookup Table
// module's attributes read here (PS3.3 C.7.9): the red descriptor, and
// the four tables, plain and segmented. The green and blue descriptors,
// the alpha one and the LUT UID are skipped, as pydicom ignores them.
func isPaletteTag(t uint32) bool {
	return t == tagRedPaletteDescriptor ||
		(t >= tagRedPaletteData && t <= tagAlphaPaletteData) ||
		(t >= tagRedSegmentedData && t <= tagAlphaSegmentedData)
}

// paletteName names a palette attribute with its tag, for errors.
func paletteName(t uint32) string {
	switch {
	case t == tagRedPaletteDescriptor:
		return "Red Palette Color LUT Descriptor " + tagString(t)
	case t >= tagRedPaletteData && t <= tagAlphaPaletteData:
		return channelNames[t-tagRedPaletteData] + " Palette Color LUT Data " + tagString(t)
	case t >= tagRedSegmentedData && t <= tagAlphaSegmentedData:
		return "Segmented " + channelNames[t-tagRedSegmentedData] + " Palette Color LUT Data " + tagString(t)
	}
	return tagString(t)
}

// paletteElement reads a Palette Color Lookup Table module attribute. A
// grayscale image may carry these attributes too (a Supplemental Palette
// Color LUT, C.7.6.19), so an element of a wrong length is skipped and its
// error kept for checkPalette, which reports it only for a PALETTE COLOR
// image; what is read is bounded by what a table can hold.
func (h *header) paletteElement(r *reader, el element) error {
	p := &h.palette
	limit := int64(2 * maxLUTEntries) // 65536 entries of 16 bits
	switch {
	case el.tag == tagRedPaletteDescriptor:
		limit = 6
	case el.tag >= tagRedSegmentedData:
		limit = maxSegmentedBytes
	}
	bad := (el.tag == tagRedPaletteDescriptor && el.length != 6) || int64(el.length) > limit
	if bad {
		if p.err == nil {
			if el.tag == tagRedPaletteDescriptor {
				p.err = fmt.Errorf("%s of %d bytes (three 16-bit values expected)", paletteName(el.tag), el.length)
			} else {
				p.err = fmt.Errorf("%s of %d bytes, over the %d a table of at most %d entries takes", paletteName(el.tag), el.length, limit, maxLUTEntries)
			}
		}
		return r.skip(int64(el.length))
	}
	v, err := r.bytes(int64(el.length))
	if err != nil {
		return fmt.Errorf("%s: %w", paletteName(el.tag), err)
	}
	switch {
	case el.tag == tagRedPaletteDescriptor:
		p.desc, p.descVR = v, el.vr
	case el.tag >= tagRedSegmentedData:
		p.segmented[el.tag-tagRedSegmentedData] = v
	default:
		p.data[el.tag-tagRedPaletteData] = v
	}
	return nil
}

// checkPalette validates a PALETTE COLOR image's tables against its
// pixels and makes each 8-bit (the rules at the top of this file).
func (h *header) checkPalette() error {
	if err := h.buildPalette(); err != nil {
		return fmt.Errorf("PALETTE COLOR: %w", err)
	}
	return nil
}

// buildPalette does checkPalette's work.
func (h *header) buildPalette() error {
	p := &h.palette
	if p.err != nil {
		return p.err
	}
	if h.bitsAlloc != 8 && h.bitsAlloc != 16 {
		return fmt.Errorf("indices of Bits Allocated %d (8 or 16 expected: a palette index is a whole sample)", h.bitsAlloc)
	}
	if p.desc == nil {
		return fmt.Errorf("the image lacks the %s", paletteName(tagRedPaletteDescriptor))
	}
	var order binary.ByteOrder = binary.LittleEndian
	if h.big {
		order = binary.BigEndian
	}
	// The descriptor is US or SS (C.7.6.3.1.5): its first mapped value is
	// signed where the VR says SS, or, in implicit VR, where the pixels
	// are, as setLUT reads a LUT Sequence's; its entries are unsigned
	// whatever the VR (pydicom's reading too), 0 meaning 65536.
	n := int(order.Uint16(p.desc[0:]))
	if n == 0 {
		n = 1 << 16
	}
	p.first = int(order.Uint16(p.desc[2:]))
	if p.descVR == "SS" || ((p.descVR == "" || p.descVR == "UN") && h.pixelRep == 1) {
		p.first = int(int16(order.Uint16(p.desc[2:])))
	}
	bits := int(int16(order.Uint16(p.desc[4:])))
	if bits != 8 && bits != 16 {
		return fmt.Errorf("%s says entries of %d bits (8 or 16 expected, C.7.6.3.1.5)", paletteName(tagRedPaletteDescriptor), bits)
	}
	var tables [4][]uint16 // entries as read, alpha's to check its length
	var width int          // bytes an entry: 1 or 2
	if p.data[0] != nil {
		// C.7.6.3.1.6: one table an element, the red one deciding the
		// entries' width (pydicom's len(data)/entries).
		width = len(p.data[0]) / n
		if len(p.data[0])%n != 0 || (width != 1 && width != 2) {
			return fmt.Errorf("%s of %d bytes for the %d entries of its descriptor: neither one nor two bytes an entry", paletteName(tagRedPaletteData), len(p.data[0]), n)
		}
		for c := range tables {
			d := p.data[c]
			if d == nil && c < 3 {
				return fmt.Errorf("the image has a %s but lacks the %s", paletteName(tagRedPaletteData), paletteName(tagRedPaletteData+uint32(c)))
			}
			if len(d) == 0 && c == 3 {
				continue // no alpha (pydicom skips an empty one too)
			}
			if len(d) != len(p.data[0]) {
				return fmt.Errorf("%s of %d bytes and %s of %d: the tables must be the same length", paletteName(tagRedPaletteData), len(p.data[0]), paletteName(tagRedPaletteData+uint32(c)), len(d))
			}
			t := make([]uint16, n)
			for i := range t {
				if width == 1 {
					t[i] = uint16(d[i])
				} else {
					t[i] = order.Uint16(d[2*i:])
				}
			}
			tables[c] = t
		}
	} else {
		if p.segmented[0] == nil {
			return fmt.Errorf("the image lacks the %s and the %s", paletteName(tagRedPaletteData), paletteName(tagRedSegmentedData))
		}
		// C.7.9.2: a segmented table's words are as wide as the
		// descriptor's entries, and so are its expanded entries.
		width = bits / 8
		for c := range tables {
			d := p.segmented[c]
			if d == nil && c < 3 {
				return fmt.Errorf("the image has a %s but lacks the %s", paletteName(tagRedSegmentedData), paletteName(tagRedSegmentedData+uint32(c)))
			}
			if len(d) == 0 && c == 3 {
				continue
			}
			t, err := expandSegmented(d, width, order)
			if err != nil {
				return fmt.Errorf("%s: %w", paletteName(tagRedSegmentedData+uint32(c)), err)
			}
			if len(t) != len(tables[0]) && c > 0 {
				return fmt.Errorf("%s expands to %d entries and %s to %d: the tables must be the same length", paletteName(tagRedSegmentedData), len(tables[0]), paletteName(tagRedSegmentedData+uint32(c)), len(t))
			}
			tables[c] = t
		}
	}
	if len(tables[0]) == 0 || len(tables[0]) < n {
		// pydicom would fail only where a pixel indexes past the table.
		return fmt.Errorf("tables of %d entries where the %s says %d", len(tables[0]), paletteName(tagRedPaletteDescriptor), n)
	}
	for c := range p.rgb {
		t := make([]uint8, n)
		for i, v := range tables[c][:n] {
			switch {
			case width == 1:
				t[i] = uint8(v)
			case bits == 8:
				t[i] = uint8(v & 0xff) // 8-bit entries in 16-bit words
			default:
				// round(v·255/65535) = round(v/257), never a tie: (v+128)/257.
				t[i] = uint8((uint32(v) + 128) / 257)
			}
		}
		p.rgb[c] = t
	}
	return nil
}

// expandSegmented expands a Segmented Palette Color LUT Data element's
// value (PS3.3 C.7.9.2) as pydicom 2.3.1's _expand_segmented_lut does: its
// words width bytes each (one byte where the table's entries are 8-bit),
// in the file's byte order.
func expandSegmented(b []byte, width int, order binary.ByteOrder) ([]uint16, error) {
	if len(b)%width != 0 {
		return nil, fmt.Errorf("%d bytes: not a whole number of %d-byte words", len(b), width)
	}
	e := &segmentExpander{data: make([]int, len(b)/width), width: width, big: order == binary.BigEndian}
	for i := range e.data {
		if width == 1 {
			e.data[i] = int(b[i])
		} else {
			e.data[i] = int(order.Uint16(b[2*i:]))
		}
	}
	if err := e.expand(0, 0, 0); err != nil {
		return nil, err
	}
	return e.out, nil
}

// segmentExpander holds a segmented table's words and its expansion.
type segmentExpander struct {
	data     []int
	width    int
	big      bool
	out      []uint16
	segments int
}

// expand appends the segments from word base on (an indirect segment's
// copy reads count of them, its offsets relative to base; the top level,
// count 0, all of them). Segment types (C.7.9.2): 0 discrete, the next
// length words are entries; 1 linear, length entries rising or falling
// from the previous entry to the next word; 2 indirect, length segments
// copied from a word offset.
func (e *segmentExpander) expand(base, count, depth int) error {
	start := len(e.out) // this level's entries are out[start:]
	data := e.data[base:]
	for off, read := 0, 0; off+1 < len(data); {
		// off+1: pydicom's guard against a trailing pad word, every
		// segment being longer than two.
		e.segments++
		if e.segments > maxSegments {
			return fmt.Errorf("over %d segments (indirect segments in a loop?)", maxSegments)
		}
		op, length := data[off], data[off+1]
		off += 2
		switch op {
		case 0:
			// pydicom takes what the data hold of a discrete segment cut short.
			end := min(off+length, len(data))
			if len(e.out)+end-off > maxLUTEntries {
				return e.overflow()
			}
			for _, v := range data[off:end] {
				e.out = append(e.out, uint16(v))
			}
			off += length
		case 1:
			var y0 int
			switch {
			case len(e.out) > start:
				y0 = int(e.out[len(e.out)-1])
			case depth > 0 && e.out[start-1] != 0:
				// The first segment an indirect one copies continues
				// from the entry before the copy.
				y0 = int(e.out[start-1])
			case depth > 0:
				// pydicom 2.3.1 takes an entry of 0 there for none (its
				// "elif last_value") and refuses the table: so does this
				// reader, which would otherwise decode what it cannot.
				return fmt.Errorf("a linear segment at word %d, the first an indirect segment copies, continues from an entry of 0, which pydicom 2.3.1 refuses", base+off-2)
			default:
				return fmt.Errorf("a linear segment at word %d has no entry before it to start from", base+off-2)
			}
			if off >= len(data) {
				return fmt.Errorf("a linear segment at word %d is cut short", base+off-2)
			}
			y1 := data[off]
			off++
			if len(e.out)+length > maxLUTEntries {
				return e.overflow()
			}
			if err := e.linear(y0, y1, length, base+off-3); err != nil {
				return err
			}
		case 2:
			if len(e.out) == start {
				return fmt.Errorf("an indirect segment at word %d has no entry before it (it cannot be the first)", base+off-2)
			}
			// The offset is two words, least significant first; where the
			// words are bytes, pydicom reads them as the two 16-bit words
			// of the file's byte order they are.
			var at int
			if e.width == 1 {
				if off+4 > len(data) {
					return fmt.Errorf("an indirect segment at word %d is cut short", base+off-2)
				}
				w := func(i int) int { // the 16-bit word at data[i:i+2]
					if e.big {
						return data[i]<<8 | data[i+1]
					}
					return data[i+1]<<8 | data[i]
				}
				at = w(off+2)<<16 | w(off)
				off += 4
			} else {
				if off+2 > len(data) {
					return fmt.Errorf("an indirect segment at word %d is cut short", base+off-2)
				}
				at = data[off+1]<<16 | data[off]
				off += 2
			}
			if depth+1 > maxIndirectDepth {
				return fmt.Errorf("indirect segments nested over %d deep (a loop?)", maxIndirectDepth)
			}
			// An offset past the data copies nothing, as pydicom's slice.
			if at < len(data) {
				if err := e.expand(base+at, length, depth+1); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("a segment of unknown type %d at word %d (0, 1 or 2 expected)", op, base+off-2)
		}
		read++
		if read == count {
			return nil
		}
	}
	return nil
}

// linear appends a linear segment's length entries from after y0 to y1
// exactly as pydicom computes them: numpy's linspace from
// y0 + (y1−y0)/length to y1, rounded half to even (numpy's around).
func (e *segmentExpander) linear(y0, y1, length, at int) error {
	if y0 == y1 {
		for range length {
			e.out = append(e.out, uint16(y1))
		}
		return nil
	}
	if length == 0 {
		return fmt.Errorf("a linear segment at word %d of no entries from %d to %d (pydicom divides by its length)", at, y0, y1)
	}
	start := float64(y0) + float64(y1-y0)/float64(length)
	stop := float64(y1)
	delta := stop - start
	div := float64(length - 1)
	step := delta / div
	for i := range length {
		var y float64
		switch {
		case length == 1:
			y = float64(float64(i)*delta) + start
		case step == 0:
			y = float64(float64(float64(i)/div)*delta) + start
		default:
			// float64(...) rounds the product: numpy does not fuse it
			// with the sum.
			y = float64(float64(i)*step) + start
		}
		if i == length-1 && length > 1 {
			y = stop
		}
		e.out = append(e.out, uint16(math.RoundToEven(y)))
	}
	return nil
}

// overflow is the error of a segmented table past 65536 entries.
func (e *segmentExpander) overflow() error {
	return fmt.Errorf("expands past %d entries, the most a table holds (C.7.6.3.1.5)", maxLUTEntries)
}

// toPalette maps a PALETTE COLOR image's stored values through its tables
// to 8-bit RGB: each value as a number (Pixel Representation), less the
// first mapped value, clipped to the table (C.7.6.3.1.5).
func (h *header) toPalette(vals []uint16) (image.Image, error) {
	p := &h.palette
	if p.rgb[0] == nil {
		return nil, errors.New("PALETTE COLOR: the tables were not read")
	}
	if len(vals) < h.rows*h.cols {
		return nil, fmt.Errorf("PALETTE COLOR: %d values for a %d×%d image", len(vals), h.cols, h.rows)
	}
	last := len(p.rgb[0]) - 1
	img := image.NewNRGBA(image.Rect(0, 0, h.cols, h.rows))
	for i, s := range vals[:h.rows*h.cols] {
		k := min(max(int(h.value(int(s)))-p.first, 0), last)
		px := img.Pix[4*i : 4*i+4]
		px[0], px[1], px[2], px[3] = p.rgb[0][k], p.rgb[1][k], p.rgb[2][k], 0xff
	}
	return img, nil
}
