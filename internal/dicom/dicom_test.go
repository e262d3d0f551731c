package dicom

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is a case of testdata/files/cases.json (gen_dicom.py).
type fixture struct {
	Name, File              string
	Width, Height, Channels int
	Tol                     float64
	Refuse                  string
}

func fixtures(t testing.TB) []fixture { return readCases[fixture](t, "testdata/files") }

// rgbOf returns an image's pixels as 8-bit samples, pixel-major.
func rgbOf(img image.Image) (pix []uint8, channels int) {
	b := img.Bounds()
	if g, ok := img.(*image.Gray); ok {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			pix = append(pix, g.Pix[g.PixOffset(b.Min.X, y):g.PixOffset(b.Max.X, y)]...)
		}
		return pix, 1
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			pix = append(pix, c.R, c.G, c.B)
		}
	}
	return pix, 3
}

// TestDecodeFixtures holds every fixture to pydicom's display pipeline
// (gen_dicom.py): within half a level of its unrounded value where the
// file is lossless, within the case's tolerance where DCMTK's libjpeg and
// Go's image/jpeg decode a lossy frame; and the refused files to their
// reasons. The files are opened through package image, as the data
// loader opens them.
func TestDecodeFixtures(t *testing.T) {
	for _, c := range fixtures(t) {
		t.Run(c.Name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata/files", c.File))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			img, format, err := image.Decode(f)
			if c.Refuse != "" {
				if err == nil || !strings.Contains(err.Error(), c.Refuse) {
					t.Fatalf("decode: %v, want an error saying %q", err, c.Refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if format != "dicom" {
				t.Fatalf("format %q", format)
			}
			if _, err := f.Seek(0, 0); err != nil {
				t.Fatal(err)
			}
			cfg, _, err := image.DecodeConfig(f)
			if err != nil || cfg.Width != c.Width || cfg.Height != c.Height {
				t.Fatalf("config %+v, %v; want %d×%d", cfg, err, c.Width, c.Height)
			}
			tol := c.Tol
			if _, ok := img.(*image.YCbCr); ok {
				// Go's YCbCr model repeats each chroma sample where libjpeg
				// filters them: dpengine/data, which converts as libjpeg
				// does, holds such a frame to the case's tolerance.
				tol = max(tol, 24)
			}
			expectGolden(t, img, filepath.Join("testdata/files", c.Name+".f32"), c.Channels, tol)
		})
	}
}

// TestUserWindow: a window given in Options replaces the file's; the
// file's own window given again changes nothing.
func TestUserWindow(t *testing.T) {
	b, err := os.ReadFile("testdata/files/ct_implicit.dcm")
	if err != nil {
		t.Fatal(err)
	}
	own, err := Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	same, err := DecodeWith(bytes.NewReader(b), Options{Windows: []Window{{Center: 40, Width: 400}}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(own.(*image.Gray).Pix, same.(*image.Gray).Pix) {
		t.Fatal("the file's own window given as an option changed the pixels")
	}
	// Stored value s is s-1024 HU; a lung window -600/1500 by PS3.3's
	// LINEAR formula, from the stored values of the file read raw.
	lung, err := DecodeWith(bytes.NewReader(b), Options{Windows: []Window{{Center: -600, Width: 1500}}})
	if err != nil {
		t.Fatal(err)
	}
	h, r, _, err := readHeader(bytes.NewReader(b))
	if err != nil || h.check() != nil {
		t.Fatal(err)
	}
	raw, err := r.bytes(int64(2 * h.rows * h.cols))
	if err != nil {
		t.Fatal(err)
	}
	differ := 0
	for i, g := range lung.(*image.Gray).Pix {
		hu := float64(binary.LittleEndian.Uint16(raw[2*i:])) - 1024
		c, w := -600-0.5, 1500-1.0
		y := (hu-c)/w + 0.5
		y = min(max(y, 0), 1)
		if hu <= c-w/2 {
			y = 0
		}
		if want := math.Round(y * 255); float64(g) != want {
			t.Fatalf("pixel %d (%g HU): %d, want %g", i, hu, g, want)
		}
		if g != own.(*image.Gray).Pix[i] {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the lung window gave the soft-tissue window's pixels")
	}
	for _, ws := range [][]Window{{{Center: 0, Width: 0}}, {{0, 10}, {0, 10}}, {{math.NaN(), 10}}} {
		if _, err := DecodeWith(bytes.NewReader(b), Options{Windows: ws}); err == nil {
			t.Errorf("windows %v were taken", ws)
		}
	}
	// Three windows: an RGB image whose channels are each window's gray.
	three := []Window{{40, 80}, {-600, 1500}, {600, 2800}}
	rgb, err := DecodeWith(bytes.NewReader(b), Options{Windows: three})
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range three {
		one, err := DecodeWith(bytes.NewReader(b), Options{Windows: []Window{w}})
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range one.(*image.Gray).Pix {
			if c := rgb.(*image.NRGBA).Pix[4*i+k]; c != g {
				t.Fatalf("channel %d, pixel %d: %d, the window alone %d", k, i, c, g)
			}
		}
	}
	// A colour image is decoded as without windows.
	c, err := os.ReadFile("testdata/files/rgb8.dcm")
	if err != nil {
		t.Fatal(err)
	}
	plain, err1 := Decode(bytes.NewReader(c))
	windowed, err2 := DecodeWith(bytes.NewReader(c), Options{Windows: three})
	if err1 != nil || err2 != nil || !bytes.Equal(plain.(*image.NRGBA).Pix, windowed.(*image.NRGBA).Pix) {
		t.Errorf("windows changed a colour image (%v, %v)", err1, err2)
	}
}

func TestParseWindows(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Window
		err  string
	}{
		{"-600,1500", []Window{{-600, 1500}}, ""},
		{" 40 , 80/80,200/600,2800", []Window{{40, 80}, {80, 200}, {600, 2800}}, ""},
		{"40.5,1e3", []Window{{40.5, 1000}}, ""},
		{"40", nil, "want C,W"},
		{"40,80/80,200", nil, "three of them"},
		{"40,0.5", nil, "under 1"},
		{"a,80", nil, "not a decimal"},
		{"40,Inf", nil, "not a decimal"},
	} {
		got, err := ParseWindows(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseWindows(%q): %v, want an error saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("ParseWindows(%q) = %v, %v", c.in, got, err)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("ParseWindows(%q) = %v, want %v", c.in, got, c.want)
			}
		}
		if back, err := ParseWindows(FormatWindows(got)); err != nil || len(back) != len(got) || back[0] != got[0] {
			t.Errorf("FormatWindows(%v) = %q does not read back", got, FormatWindows(got))
		}
	}
}

// The test files below are built by hand: explicit VR little endian
// elements after a meta group naming the syntax.

func elem(tag uint32, vr string, val []byte) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint16(b, uint16(tag>>16))
	b = binary.LittleEndian.AppendUint16(b, uint16(tag))
	if vr == "" { // items and delimiters
		return append(binary.LittleEndian.AppendUint32(b, uint32(len(val))), val...)
	}
	b = append(b, vr...)
	if longVR(vr) {
		b = append(b, 0, 0)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	} else {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(val)))
	}
	return append(b, val...)
}

func u16s(v ...uint16) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

func part10(syntax string, body ...[]byte) []byte {
	b := make([]byte, 128, 4096)
	b = append(b, "DICM"...)
	uid := syntax
	if len(uid)%2 == 1 {
		uid += "\x00"
	}
	b = append(b, elem(tagTransferSyntax, "UI", []byte(uid))...)
	for _, e := range body {
		b = append(b, e...)
	}
	return b
}

// grayModule is the image module of a w×h MONOCHROME2 image.
func grayModule(w, h, alloc, stored, high int) []byte {
	var b []byte
	b = append(b, elem(tagSamples, "US", u16s(1))...)
	b = append(b, elem(tagPhotometric, "CS", []byte("MONOCHROME2 "))...)
	b = append(b, elem(tagRows, "US", u16s(uint16(h)))...)
	b = append(b, elem(tagColumns, "US", u16s(uint16(w)))...)
	b = append(b, elem(tagBitsAllocated, "US", u16s(uint16(alloc)))...)
	b = append(b, elem(tagBitsStored, "US", u16s(uint16(stored)))...)
	b = append(b, elem(tagHighBit, "US", u16s(uint16(high)))...)
	b = append(b, elem(tagPixelRep, "US", u16s(0))...)
	return b
}

// TestHighBitAndMask: 12 bits stored at bits 4..15 of each word, with
// other bits set below them, read as the stored values (PS3.5 8.1.1); a
// window in the file spreading 0..4095 over the 8 bits checks each.
func TestHighBitAndMask(t *testing.T) {
	vals := []uint16{0, 1, 2048, 4095, 100, 4000}
	var px []uint16
	for _, v := range vals {
		px = append(px, v<<4|0x9) // low bits are not the value's
	}
	file := part10(tsExplicitLE,
		grayModule(3, 2, 16, 12, 15),
		elem(tagWindowCenter, "DS", []byte("2048")),
		elem(tagWindowWidth, "DS", []byte("4096")),
		elem(tagPixelData, "OW", u16s(px...)))
	img, err := Decode(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		c, w := 2048-0.5, 4096-1.0
		want := math.Round(min(max((float64(v)-c)/w+0.5, 0), 1) * 255)
		if v == 0 {
			want = 0
		}
		if got := img.(*image.Gray).Pix[i]; float64(got) != want {
			t.Errorf("value %d: %d, want %g", v, got, want)
		}
	}
}

// TestRefusals: files the decoder must refuse with a reason, without
// allocating what their length fields claim.
func TestRefusals(t *testing.T) {
	mod := grayModule(4, 4, 8, 8, 7)
	nest := func(depth int) []byte {
		// A sequence of undefined length holding one item holding the next.
		var b []byte
		for range depth {
			b = append(b, elem(0x00081115, "SQ", nil)...)
			b = b[:len(b)-4]
			b = binary.LittleEndian.AppendUint32(b, undefinedLength)
			b = append(b, elem(tagItem, "", nil)...)
			b = b[:len(b)-4]
			b = binary.LittleEndian.AppendUint32(b, undefinedLength)
		}
		return b
	}
	long := func(n uint32) []byte {
		b := elem(0x00091001, "OB", nil)
		return binary.LittleEndian.AppendUint32(b[:len(b)-4], n)
	}
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"no preamble", []byte("DICM"), "not a DICOM Part 10 file"},
		{"no syntax", append(make([]byte, 128), "DICM\x08\x00\x60\x00CS\x02\x00OT"...), "names no transfer syntax"},
		{"unknown syntax", part10("1.2.3.4"), "unknown transfer syntax"},
		{"HTJ2K", part10("1.2.840.10008.1.2.4.201"), "HTJ2K Lossless compression (transfer syntax 1.2.840.10008.1.2.4.201) is not read here"},
		{"no pixel data", part10(tsExplicitLE, mod), "no pixel data"},
		{"no rows", part10(tsExplicitLE, elem(tagColumns, "US", u16s(4)), elem(tagBitsAllocated, "US", u16s(8)), elem(tagPhotometric, "CS", []byte("RGB ")), elem(tagPixelData, "OB", make([]byte, 16))), "lacks Rows"},
		{"short pixel data", part10(tsExplicitLE, mod, elem(tagPixelData, "OB", make([]byte, 15))), "holds 15 bytes"},
		{"truncated pixel data", func() []byte {
			b := part10(tsExplicitLE, mod, elem(tagPixelData, "OB", make([]byte, 16)))
			return b[:len(b)-5]
		}(), "file ends"},
		{"huge element", part10(tsExplicitLE, mod, long(0xFFFFFFF0)), "broken length"},
		{"long element", part10(tsExplicitLE, mod, long(1<<27)), "file ends"},
		{"too large", part10(tsExplicitLE, grayModule(65535, 65535, 8, 8, 7), elem(tagPixelData, "OB", nil)), "over the limit"},
		{"bits stored over allocated", part10(tsExplicitLE, grayModule(4, 4, 8, 12, 11), elem(tagPixelData, "OB", make([]byte, 16))), "Bits Stored 12"},
		{"24-bit", part10(tsExplicitLE, grayModule(4, 4, 24, 24, 23), elem(tagPixelData, "OB", make([]byte, 48))), "Bits Allocated 24"},
		{"deep nesting", part10(tsExplicitLE, mod, nest(maxDepth+2)), "nested over"},
		{"bad VR", part10(tsExplicitLE, mod, []byte{0x28, 0, 0x30, 0, 'x', 'y', 2, 0, 1, 2}), "not a value representation"},
		{"linear width under 1", part10(tsExplicitLE, mod, elem(tagWindowCenter, "DS", []byte("10")), elem(tagWindowWidth, "DS", []byte("0.5 ")), elem(tagPixelData, "OB", make([]byte, 16))), "LINEAR does not allow"},
		{"bad decimal", part10(tsExplicitLE, mod, elem(tagSlope, "DS", []byte("x1")), elem(tagPixelData, "OB", make([]byte, 16))), "not a decimal number"},
		{"RLE segments", part10(tsRLE, mod, encapsulated(append(binary.LittleEndian.AppendUint32(nil, 2), make([]byte, 60)...))), "2 segments for 1 samples"},
		{"RLE short", part10(tsRLE, mod, encapsulated(append(rleHeader(64), 0x7f, 1, 2))), "literal run of 128 bytes past"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
		})
	}
}

func rleHeader(offset uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 1)
	b = binary.LittleEndian.AppendUint32(b, offset)
	return append(b, make([]byte, 56)...)
}

// encapsulated is a Pixel Data element of undefined length holding an
// empty offset table and frame as one fragment.
func encapsulated(frame []byte) []byte {
	b := elem(tagPixelData, "OB", nil)
	b = binary.LittleEndian.AppendUint32(b[:len(b)-4], undefinedLength)
	b = append(b, elem(tagItem, "", nil)...)
	b = append(b, elem(tagItem, "", frame)...)
	return append(b, elem(tagSeqDelim, "", nil)...)
}

// TestTruncatedFixtures: every fixture cut at every length is refused
// with an error, never a panic.
func TestTruncatedFixtures(t *testing.T) {
	for _, c := range fixtures(t) {
		b, err := os.ReadFile(filepath.Join("testdata/files", c.File))
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(b); n++ {
			if _, err := Decode(bytes.NewReader(b[:n])); err == nil && c.Refuse == "" {
				// Padding past the image may go; the image may not.
				if n < len(b)-8 {
					t.Errorf("%s cut at %d of %d bytes decoded", c.Name, n, len(b))
				}
			}
		}
	}
}

// FuzzDecode: no input panics the decoder or makes it allocate past its
// bounds, whatever frame of a multi-frame object is asked for.
func FuzzDecode(f *testing.F) {
	for _, c := range fixtures(f) {
		f.Add(readFixture(f, filepath.Join("testdata/files", c.File)), uint8(0))
	}
	for k, c := range readCases[frameCase](f, "testdata/frames") {
		if c.Refuse == "" && k%3 == 0 {
			fr, _ := ParseFrame(c.Frame)
			f.Add(readFixture(f, filepath.Join("testdata/frames", c.File)), uint8(fr.Kind)|uint8(fr.Number)<<3)
		}
	}
	seen := map[string]bool{}
	for _, c := range readCases[frameCase](f, "testdata/bits32") {
		if !seen[c.File] { // a file once, with its first case's choice
			seen[c.File] = true
			fr, _ := ParseFrame(c.Frame)
			f.Add(readFixture(f, filepath.Join("testdata/bits32", c.File)), uint8(fr.Kind)|uint8(fr.Number)<<3)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, choice uint8) {
		if cfg, err := DecodeConfig(bytes.NewReader(b)); err == nil && int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
			t.Fatalf("config of %d×%d passed", cfg.Width, cfg.Height)
		}
		fr := Frame{Kind: FrameKind(choice & 7), Number: int(choice >> 3)}
		if fr.Kind == FrameNumber && fr.Number == 0 {
			fr.Number = 1
		}
		img, err := DecodeWith(bytes.NewReader(b), Options{Frame: fr})
		if err == nil && (img.Bounds().Dx() <= 0 || img.Bounds().Dy() <= 0) {
			t.Fatalf("an empty image decoded")
		}
		// Every frame in one pass, or every other one (a clip's picks).
		var picks []int
		if n, err := FrameCount(bytes.NewReader(b)); err == nil && choice&1 == 1 {
			for k := 1; k <= min(n, 64); k += 2 {
				picks = append(picks, k)
			}
		}
		DecodeFrames(bytes.NewReader(b), Options{}, picks, func(_ int, img image.Image) error {
			if img.Bounds().Dx() <= 0 || img.Bounds().Dy() <= 0 {
				t.Fatalf("an empty frame decoded")
			}
			return nil
		})
	})
}

// BenchmarkDecodeRadiograph decodes a 2048×2048 radiograph of 12 bits
// stored in 16, windowed: the read, the mask and the table lookups.
func BenchmarkDecodeRadiograph(b *testing.B) {
	const w, h = 2048, 2048
	px := make([]uint16, w*h)
	for i := range px {
		px[i] = uint16((i*7 + i/w*13) % 4096)
	}
	file := part10(tsExplicitLE,
		grayModule(w, h, 16, 12, 11),
		elem(tagWindowCenter, "DS", []byte("2048")),
		elem(tagWindowWidth, "DS", []byte("4000")),
		elem(tagPixelData, "OW", u16s(px...)))
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(bytes.NewReader(file)); err != nil {
			b.Fatal(err)
		}
	}
}

// implicitElem is an element in implicit VR little endian.
func implicitElem(tag uint32, val []byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16(tag>>16))
	b = binary.LittleEndian.AppendUint16(b, uint16(tag))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	return append(b, val...)
}

// TestWritersQuirks holds the decoder to files as writers leave them,
// each a bug pydicom's test files found (TestPydicomTestFiles in
// dpengine/data, which needs pydicom): kept here without it.
func TestWritersQuirks(t *testing.T) {
	pix := []byte{0, 50, 100, 150, 200, 250}
	want := []uint8{0, 51, 102, 153, 204, 255} // the image's own range to 8 bits
	grayImplicit := func() []byte {
		var b []byte
		for _, e := range []struct {
			tag uint32
			val []byte
		}{
			{tagSamples, u16s(1)}, {tagPhotometric, []byte("MONOCHROME2 ")}, {tagRows, u16s(2)}, {tagColumns, u16s(3)},
			{tagBitsAllocated, u16s(8)}, {tagBitsStored, u16s(8)}, {tagHighBit, u16s(7)}, {tagPixelRep, u16s(0)},
			{tagPixelData, pix},
		} {
			b = append(b, implicitElem(e.tag, e.val)...)
		}
		return b
	}
	// An undefined-length UN (a sequence, in implicit VR) holding an item
	// that holds an undefined-length sequence of its own.
	unSeq := elem(0x00091010, "UN", nil)
	unSeq = binary.LittleEndian.AppendUint32(unSeq[:len(unSeq)-4], undefinedLength)
	unSeq = append(unSeq, implicitElem(tagItem, nil)[:4]...)
	unSeq = binary.LittleEndian.AppendUint32(unSeq, undefinedLength)
	inner := implicitElem(0x00081115, nil)
	unSeq = append(unSeq, binary.LittleEndian.AppendUint32(inner[:4], undefinedLength)...)
	unSeq = append(unSeq, implicitElem(tagItem, implicitElem(0x00081150, []byte("1.2\x00")))...)
	unSeq = append(unSeq, implicitElem(tagSeqDelim, nil)...)
	unSeq = append(unSeq, implicitElem(tagItemDelim, nil)...)
	unSeq = append(unSeq, implicitElem(tagSeqDelim, nil)...)
	tiff := part10(tsExplicitLE, grayModule(3, 2, 8, 8, 7), elem(tagPixelData, "OB", pix))
	copy(tiff, "II*\x00\x08\x00\x00\x00") // a TIFF header in the preamble (GE)
	for _, c := range []struct {
		name string
		file []byte
	}{
		{"implicit data set under an explicit syntax", part10(tsExplicitLE, grayImplicit())},
		{"sequence inside an implicit UN", part10(tsExplicitLE, grayModule(3, 2, 8, 8, 7), unSeq, elem(tagPixelData, "OB", pix))},
		{"TIFF preamble", tiff},
	} {
		t.Run(c.name, func(t *testing.T) {
			img, err := Decode(bytes.NewReader(c.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := img.(*image.Gray).Pix; !bytes.Equal(got, want) {
				t.Errorf("pixels %v, want %v", got, want)
			}
		})
	}
}

// TestRawRGBJPEG: a JPEG frame of Photometric Interpretation RGB without
// an Adobe colour flag holds R, G and B as stored (PS3.5 8.2.1): its
// planes come back unconverted, where YBR_FULL_422 converts them.
func TestRawRGBJPEG(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 16, 8))
	for i := range src.Pix {
		src.Pix[i] = uint8(i * 37)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, src, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	if adobeMarker(buf.Bytes()) {
		t.Fatal("Go's encoder wrote an Adobe marker")
	}
	frame := func(photometric string) []byte {
		var b []byte
		b = append(b, elem(tagSamples, "US", u16s(3))...)
		b = append(b, elem(tagPhotometric, "CS", []byte(photometric))...)
		b = append(b, elem(tagRows, "US", u16s(8))...)
		b = append(b, elem(tagColumns, "US", u16s(16))...)
		b = append(b, elem(tagBitsAllocated, "US", u16s(8))...)
		b = append(b, elem(tagBitsStored, "US", u16s(8))...)
		b = append(b, elem(tagHighBit, "US", u16s(7))...)
		b = append(b, elem(tagPixelRep, "US", u16s(0))...)
		return part10(tsJPEGBase, b, encapsulated(buf.Bytes()))
	}
	raw, err := Decode(bytes.NewReader(frame("RGB ")))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := raw.(*RawJPEG)
	if !ok {
		t.Fatalf("RGB frame decoded as %T, want *RawJPEG", raw)
	}
	ycc, err := Decode(bytes.NewReader(frame("YBR_FULL_422")))
	if err != nil {
		t.Fatal(err)
	}
	y, ok := ycc.(*image.YCbCr)
	if !ok {
		t.Fatalf("YBR_FULL_422 frame decoded as %T", ycc)
	}
	if c, p := r.At(3, 2).(color.RGBA), y.YCbCrAt(3, 2); c.R != p.Y || c.G != p.Cb || c.B != p.Cr {
		t.Errorf("raw RGB pixel %v, want the planes %v as stored", c, p)
	}
	if a, b := color.NRGBAModel.Convert(r.At(3, 2)), color.NRGBAModel.Convert(y.At(3, 2)); a == b {
		t.Errorf("the RGB and YBR frames decode alike (%v): the planes were converted", a)
	}
}
