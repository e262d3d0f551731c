package dicom

import (
	"bytes"
	"encoding/binary"
	"image"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBits32Fixtures holds the 32-bit fixtures (gen_bits32.py) to
// pydicom's display pipeline, within half a level: signed samples past 16
// bits with a rescale and a window, in every little-endian syntax, big
// endian and RLE; Bits Stored 24 at High Bit 27 among random bits;
// MONOCHROME1 over the whole unsigned range, its own range; a Modality LUT
// Sequence and a VOI LUT Sequence read by 32-bit values; RGB interleaved,
// planar and RLE, YBR_FULL; and a three-frame object's every frame choice,
// the projections included.
func TestBits32Fixtures(t *testing.T) {
	const dir = "testdata/bits32"
	for _, c := range readCases[frameCase](t, dir) {
		t.Run(c.Name, func(t *testing.T) {
			f, err := ParseFrame(c.Frame)
			if err != nil {
				t.Fatal(err)
			}
			b := readFixture(t, filepath.Join(dir, c.File))
			img, err := DecodeWith(bytes.NewReader(b), Options{Frame: f})
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != c.Width || b.Dy() != c.Height {
				t.Fatalf("%v, want %d×%d", b, c.Width, c.Height)
			}
			expectGolden(t, img, filepath.Join(dir, c.Name+".f32"), c.Channels, 0.5)
		})
	}
}

// TestBits32Value: a sample's stored bits read as the number they
// represent, two's complement where Pixel Representation is 1, at every
// width up to 32 (where 1<<Bits Stored overflows 32 bits).
func TestBits32Value(t *testing.T) {
	for _, c := range []struct {
		stored, rep int
		bits        uint32
		want        int64
	}{
		{32, 1, 0xFFFFFFFF, -1},
		{32, 1, 0x80000000, math.MinInt32},
		{32, 1, 0x7FFFFFFF, math.MaxInt32},
		{32, 0, 0xFFFFFFFF, math.MaxUint32},
		{32, 0, 0x80000000, 1 << 31},
		{31, 1, 0x40000000, -1 << 30},
		{24, 1, 0xFFFFFF, -1},
		{24, 1, 0x800000, -1 << 23},
		{24, 1, 0x7FFFFF, 1<<23 - 1},
		{17, 1, 0x10000, -1 << 16},
		{16, 1, 0x8000, -32768},
		{12, 0, 0xFFF, 4095},
	} {
		h := &header{bitsStored: c.stored, pixelRep: c.rep}
		if got := h.value(int(c.bits)); got != c.want {
			t.Errorf("value(%#x) of %d bits, representation %d: %d, want %d", c.bits, c.stored, c.rep, got, c.want)
		}
		if got, want := h.mask(), uint32(uint64(1)<<c.stored-1); got != want {
			t.Errorf("mask of %d bits: %#x, want %#x", c.stored, got, want)
		}
	}
}

// bits32File is an explicit VR little endian file of a w×h image of 32-bit
// samples: photometric's, samples a pixel, Bits Stored stored at High Bit
// high, signed where rep is 1, with the elements extra before the pixels.
func bits32File(syntax, photometric string, w, h, samples, stored, high, rep int, px []byte, extra ...[]byte) []byte {
	body := [][]byte{
		elem(tagSamples, "US", u16s(uint16(samples))),
		elem(tagPhotometric, "CS", []byte(photometric)),
		elem(tagRows, "US", u16s(uint16(h))),
		elem(tagColumns, "US", u16s(uint16(w))),
		elem(tagBitsAllocated, "US", u16s(32)),
		elem(tagBitsStored, "US", u16s(uint16(stored))),
		elem(tagHighBit, "US", u16s(uint16(high))),
		elem(tagPixelRep, "US", u16s(uint16(rep))),
	}
	body = append(body, extra...)
	if syntax == tsExplicitLE {
		body = append(body, elem(tagPixelData, "OB", px))
	} else {
		body = append(body, encapsulated(px))
	}
	return part10(syntax, body...)
}

func u32s(v ...uint32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

// TestBits32Refused: the JPEG family and JPEG 2000 code at most 16 bits a
// sample, so a 32-bit file under one is refused by the codec's name, as
// is a 32-bit palette index; pydicom refuses them too.
func TestBits32Refused(t *testing.T) {
	frame := make([]byte, 256)
	for _, c := range []struct {
		syntax, photometric, want string
	}{
		{tsJPEGBase, "MONOCHROME2", "Bits Allocated 32 under JPEG Baseline"},
		{tsJPEGLL14, "MONOCHROME2", "Bits Allocated 32 under JPEG Lossless"},
		{tsJPEGLLSV1, "MONOCHROME2", "Bits Allocated 32 under JPEG Lossless SV1"},
		{tsJPEGLS, "MONOCHROME2", "Bits Allocated 32 under JPEG-LS Lossless"},
		{tsJPEGLSNear, "MONOCHROME2", "Bits Allocated 32 under JPEG-LS Near-lossless"},
		{tsJ2K, "MONOCHROME2", "Bits Allocated 32 under JPEG 2000 Lossless"},
		{tsJ2KLossy, "MONOCHROME2", "Bits Allocated 32 under JPEG 2000 (transfer syntax"},
		{tsExplicitLE, "PALETTE COLOR", "indices of Bits Allocated 32"},
	} {
		b := bits32File(c.syntax, c.photometric, 4, 4, 1, 16, 15, 0, frame[:64])
		if _, err := Decode(bytes.NewReader(b)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want an error saying %q", c.syntax, c.photometric, err, c.want)
		}
		if _, err := DecodeConfig(bytes.NewReader(b)); err == nil {
			t.Errorf("%s %s: DecodeConfig passed it", c.syntax, c.photometric)
		}
	}
}

// TestBits32Narrow: 32-bit samples of 16 bits or fewer stored take the
// table path as 16-bit ones do, to the same image: 12 bits at High Bit 19
// among set bits, signed, rescaled, windowed, the same as those 12 bits at
// High Bit 11 of 16-bit samples; and a signed 32-bit image whose values
// fit in 16 bits decodes as the 16-bit image of the same values.
func TestBits32Narrow(t *testing.T) {
	const w, h = 16, 8
	var px16, px32, full16, full32 []byte
	for i := range w * h {
		v := uint32(i*37) & 0xFFF // 12 bits, the top one a sign
		px16 = binary.LittleEndian.AppendUint16(px16, uint16(v))
		px32 = binary.LittleEndian.AppendUint32(px32, v<<8|0xFFF000FF) // set bits around the stored ones
		s := int16(i*521 - 30000)
		full16 = binary.LittleEndian.AppendUint16(full16, uint16(s))
		full32 = binary.LittleEndian.AppendUint32(full32, uint32(int32(s)))
	}
	voi := [][]byte{
		elem(tagWindowCenter, "DS", []byte("-100")), elem(tagWindowWidth, "DS", []byte("1500")),
		elem(tagIntercept, "DS", []byte("-24 ")), elem(tagSlope, "DS", []byte("2 ")),
	}
	a16 := bits16File(w, h, 12, 11, px16, voi...)
	a32 := bits32File(tsExplicitLE, "MONOCHROME2", w, h, 1, 12, 19, 1, px32, voi...)
	b16 := bits16File(w, h, 16, 15, full16)
	b32 := bits32File(tsExplicitLE, "MONOCHROME2", w, h, 1, 32, 31, 1, full32)
	for _, p := range [][2][]byte{{a16, a32}, {b16, b32}} {
		want, err := Decode(bytes.NewReader(p[0]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(bytes.NewReader(p[1]))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.(*image.Gray).Pix, want.(*image.Gray).Pix) {
			t.Errorf("32-bit samples decode to %v, the 16-bit ones to %v", got.(*image.Gray).Pix[:16], want.(*image.Gray).Pix[:16])
		}
	}
}

// bits16File is bits32File's image of signed 16-bit samples.
func bits16File(w, h, stored, high int, px []byte, extra ...[]byte) []byte {
	body := [][]byte{
		elem(tagSamples, "US", u16s(1)),
		elem(tagPhotometric, "CS", []byte("MONOCHROME2 ")),
		elem(tagRows, "US", u16s(uint16(h))),
		elem(tagColumns, "US", u16s(uint16(w))),
		elem(tagBitsAllocated, "US", u16s(16)),
		elem(tagBitsStored, "US", u16s(uint16(stored))),
		elem(tagHighBit, "US", u16s(uint16(high))),
		elem(tagPixelRep, "US", u16s(1)),
	}
	body = append(body, extra...)
	return part10(tsExplicitLE, append(body, elem(tagPixelData, "OW", px))...)
}

// TestBits32Windows: the user's three windows of a 32-bit image are each
// the image under that window alone.
func TestBits32Windows(t *testing.T) {
	b := readFixture(t, "testdata/bits32/s32_window.dcm")
	ws := []Window{{Center: 0, Width: 1e6}, {Center: -1e6, Width: 5e5}, {Center: 1.5e6, Width: 2e6}}
	img, err := DecodeWith(bytes.NewReader(b), Options{Windows: ws})
	if err != nil {
		t.Fatal(err)
	}
	rgb, ch := rgbOf(img)
	if ch != 3 {
		t.Fatalf("%d channels", ch)
	}
	for c, w := range ws {
		one, err := DecodeWith(bytes.NewReader(b), Options{Windows: []Window{w}})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range one.(*image.Gray).Pix {
			if rgb[3*i+c] != v {
				t.Fatalf("window %d, pixel %d: %d in the three, %d alone", c, i, rgb[3*i+c], v)
			}
		}
	}
}

// TestBits32Memory: a 32-bit image, unsigned over the whole range (no
// table of 2³² entries, nor of its distinct values), allocates under 16
// bytes a pixel in all: the frame's bytes (4), its stored values (4),
// the 8-bit image (1).
func TestBits32Memory(t *testing.T) {
	const w, h = 1024, 1024
	px := make([]byte, 0, 4*w*h)
	for i := range w * h {
		px = binary.LittleEndian.AppendUint32(px, uint32(i)*2654435761)
	}
	file := bits32File(tsExplicitLE, "MONOCHROME1", w, h, 1, 32, 31, 0, px)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	img, err := Decode(bytes.NewReader(file))
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(after.TotalAlloc-before.TotalAlloc) / (w * h); per > 16 {
		t.Errorf("%.1f bytes allocated a pixel, want at most 16", per)
	}
	if g := img.(*image.Gray); g.Pix[0] != 255 || g.Pix[w*h-1] == 255 {
		t.Errorf("MONOCHROME1 min–max: first pixel %d (value 0, want 255), last %d", g.Pix[0], g.Pix[w*h-1])
	}
}
