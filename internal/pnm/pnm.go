package pnm

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
)

func init() {
	for _, magic := range []string{"P1", "P2", "P3", "P4", "P5", "P6"} {
		image.RegisterFormat("pnm", magic, Decode, DecodeConfig)
	}
}

// header is a Netpbm header: the format's digit (1–6), the size and the
// maximum sample value (1 for bitmaps).
type header struct {
	kind          byte
	width, height int
	maxval        int
}

func (h header) gray() bool   { return h.kind != '3' && h.kind != '6' }
func (h header) binary() bool { return h.kind >= '4' }

// maxDim bounds a side and maxPixels an image (4 GiB as NRGBA): far
// beyond any photograph, and within int on every platform.
const (
	maxDim    = 1 << 24
	maxPixels = 1 << 30
)

// readHeader reads the magic number, width, height and (except bitmaps)
// maxval, and the single whitespace byte that ends a binary header.
func readHeader(r *bufio.Reader) (header, error) {
	var h header
	var magic [2]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return h, fmt.Errorf("pnm: reading the magic number: %w", noEOF(err))
	}
	if magic[0] != 'P' || magic[1] < '1' || magic[1] > '6' {
		return h, fmt.Errorf("pnm: magic number %q: want P1 to P6", magic[:])
	}
	h.kind = magic[1]
	fields := []struct {
		name string
		v    *int
		max  int
	}{{"width", &h.width, maxDim}, {"height", &h.height, maxDim}, {"maxval", &h.maxval, 65535}}
	if h.kind == '1' || h.kind == '4' {
		fields = fields[:2]
		h.maxval = 1
	}
	for _, f := range fields {
		v, err := readNumber(r, f.name, f.max)
		if err != nil {
			return h, err
		}
		if v == 0 {
			return h, fmt.Errorf("pnm: %s is 0", f.name)
		}
		*f.v = v
	}
	if int64(h.width)*int64(h.height) > maxPixels {
		return h, fmt.Errorf("pnm: %d×%d pixels: over the decoder's limit of %d", h.width, h.height, maxPixels)
	}
	if h.binary() {
		// Exactly one whitespace byte separates the header from the raster.
		c, err := r.ReadByte()
		if err != nil {
			return h, fmt.Errorf("pnm: header ends without its raster: %w", noEOF(err))
		}
		if !isSpace(c) {
			return h, fmt.Errorf("pnm: byte %q after the header: want whitespace", c)
		}
	}
	return h, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// skipSpace skips whitespace and comments (from '#' to the end of the
// line) and returns the next byte, unread.
func skipSpace(r *bufio.Reader) (byte, error) {
	for {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		if c == '#' {
			if _, err := r.ReadSlice('\n'); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return 0, err
			}
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			continue
		}
		if !isSpace(c) {
			return c, r.UnreadByte()
		}
	}
}

// readNumber reads a decimal number of at most max after whitespace and
// comments.
func readNumber(r *bufio.Reader, name string, max int) (int, error) {
	c, err := skipSpace(r)
	if err != nil {
		return 0, fmt.Errorf("pnm: reading the %s: %w", name, noEOF(err))
	}
	if c < '0' || c > '9' {
		return 0, fmt.Errorf("pnm: %s starts with %q: want a decimal number", name, c)
	}
	v := 0
	for {
		c, err := r.ReadByte()
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return 0, fmt.Errorf("pnm: reading the %s: %w", name, err)
		}
		if c < '0' || c > '9' {
			if err := r.UnreadByte(); err != nil {
				return 0, err
			}
			return v, nil
		}
		v = 10*v + int(c-'0')
		if v > max {
			return 0, fmt.Errorf("pnm: %s over %d", name, max)
		}
	}
}

// noEOF turns an end of file inside the data into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// DecodeConfig returns the color model and size of a Netpbm image
// without reading its raster.
func DecodeConfig(r io.Reader) (image.Config, error) {
	h, err := readHeader(bufio.NewReader(r))
	if err != nil {
		return image.Config{}, err
	}
	m := color.Model(color.NRGBAModel)
	if h.gray() {
		m = color.GrayModel
	}
	return image.Config{ColorModel: m, Width: h.width, Height: h.height}, nil
}

// Decode reads a Netpbm image: an *image.Gray for P1, P2, P4 and P5, an
// *image.NRGBA for P3 and P6.
func Decode(r io.Reader) (image.Image, error) {
	br := bufio.NewReader(r)
	h, err := readHeader(br)
	if err != nil {
		return nil, err
	}
	ch := 3
	var pix []uint8
	var img image.Image
	rect := image.Rect(0, 0, h.width, h.height)
	if h.gray() {
		g := image.NewGray(rect)
		pix, img, ch = g.Pix, g, 1
	} else {
		n := image.NewNRGBA(rect)
		pix, img = n.Pix, n
	}
	// An 8-bit sample through a table; a 16-bit one computed.
	var lut [256]uint8
	for v := range min(h.maxval, 255) + 1 {
		lut[v] = scale(v, h.maxval)
	}
	set := func(i int, v int) { // i counts samples in raster order
		if ch == 1 {
			pix[i] = uint8(v)
			return
		}
		p := i/3*4 + i%3
		pix[p] = uint8(v)
		if i%3 == 2 {
			pix[p+1] = 0xff
		}
	}
	n := h.width * h.height * ch
	switch h.kind {
	case '4': // rows of bits, each row padded to a byte
		row := make([]byte, (h.width+7)/8)
		for y := range h.height {
			if _, err := io.ReadFull(br, row); err != nil {
				return nil, fmt.Errorf("pnm: row %d of %d: %w", y, h.height, noEOF(err))
			}
			for x := range h.width {
				bit := int(row[x/8]>>(7-x%8)) & 1
				set(y*h.width+x, 255*(1-bit))
			}
		}
	case '5', '6':
		if h.maxval < 256 {
			buf := make([]byte, h.width*ch)
			for y := range h.height {
				if _, err := io.ReadFull(br, buf); err != nil {
					return nil, fmt.Errorf("pnm: row %d of %d: %w", y, h.height, noEOF(err))
				}
				for k, v := range buf {
					if int(v) > h.maxval {
						return nil, fmt.Errorf("pnm: row %d: sample %d over the maxval %d", y, v, h.maxval)
					}
					set(y*h.width*ch+k, int(lut[v]))
				}
			}
			break
		}
		buf := make([]byte, 2*h.width*ch)
		for y := range h.height {
			if _, err := io.ReadFull(br, buf); err != nil {
				return nil, fmt.Errorf("pnm: row %d of %d: %w", y, h.height, noEOF(err))
			}
			for k := 0; k < len(buf); k += 2 {
				v := int(buf[k])<<8 | int(buf[k+1])
				if v > h.maxval {
					return nil, fmt.Errorf("pnm: row %d: sample %d over the maxval %d", y, v, h.maxval)
				}
				set(y*h.width*ch+k/2, int(scale(v, h.maxval)))
			}
		}
	case '1': // one digit per pixel, whitespace optional
		for i := range n {
			c, err := skipSpace(br)
			if err == nil {
				_, err = br.ReadByte()
			}
			if err != nil {
				return nil, fmt.Errorf("pnm: pixel %d of %d: %w", i, n, noEOF(err))
			}
			if c != '0' && c != '1' {
				return nil, fmt.Errorf("pnm: pixel %d is %q: want 0 or 1", i, c)
			}
			set(i, 255*int('1'-c))
		}
	default: // '2', '3': decimal samples
		for i := range n {
			v, err := readNumber(br, fmt.Sprintf("sample %d of %d", i, n), h.maxval)
			if err != nil {
				return nil, err
			}
			set(i, int(scale(v, h.maxval)))
		}
	}
	return img, nil
}

// scale maps a sample of [0, maxval] to [0, 255], rounded half up.
func scale(v, maxval int) uint8 {
	if maxval == 255 {
		return uint8(v)
	}
	return uint8((v*255*2 + maxval) / (2 * maxval))
}
