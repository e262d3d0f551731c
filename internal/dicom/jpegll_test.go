package dicom

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// jllCase is one entry of testdata/jpegll/cases.json, which
// testdata/gen_jpegll.py writes: a JPEG lossless stream made by dcmcjpeg
// (or by the script's own encoder, checked by dcmdjpeg) and the samples
// it must decode to.
type jllCase struct {
	Name           string
	Width          int
	Height         int
	Components     int
	Precision      int
	Predictor      json.RawMessage // a number, or a list for per-scan predictors
	PointTransform int             `json:"point_transform"`
	TransferSyntax string          `json:"transfer_syntax"`
	Tool           string
	Scans          int
	Expected       string // "u16": NAME.u16 holds them; "bench_value": jllBenchValue
}

const jllDir = "testdata/jpegll"

func jllCases(t testing.TB) []jllCase { return readCases[jllCase](t, jllDir) }

func jllStream(t testing.TB, name string) []byte {
	t.Helper()
	return readFixture(t, filepath.Join(jllDir, name+".ljpg"))
}

// jllBenchValue mirrors bench_value in gen_jpegll.py: the content of the
// 512×512 benchmark fixture, which has no .u16 file.
func jllBenchValue(x, y int) uint16 {
	h := uint32(x*73856093) ^ uint32(y*19349663)
	return uint16(30000 + x + y + int(h>>13&1))
}

// jllExpected returns the samples a case must decode to.
func jllExpected(t testing.TB, c jllCase) []uint16 {
	t.Helper()
	return expectedSamples(t, jllDir, c.Name, c.Expected, c.Width, c.Height, c.Components, jllBenchValue)
}

// TestJPEGLosslessFixtures decodes every stream that dcmtk wrote (or
// decoded, for the script-encoded ones) and requires every sample to
// equal the original image, point-transformed, bit for bit.
func TestJPEGLosslessFixtures(t *testing.T) {
	for _, c := range jllCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			data := jllStream(t, c.Name)
			n := c.Width * c.Height * c.Components
			pix, w, h, nc, p, err := decodeJPEGLossless(data, n)
			if err != nil {
				t.Fatalf("%s (%s, predictor %s, Pt %d): %v", c.Name, c.Tool, c.Predictor, c.PointTransform, err)
			}
			if w != c.Width || h != c.Height || nc != c.Components || p != c.Precision {
				t.Fatalf("got %d×%d×%d precision %d, want %d×%d×%d precision %d",
					w, h, nc, p, c.Width, c.Height, c.Components, c.Precision)
			}
			want := jllExpected(t, c)
			if len(pix) != len(want) {
				t.Fatalf("got %d samples, want %d", len(pix), len(want))
			}
			bad := 0
			for i := range want {
				if pix[i] != want[i] {
					if bad < 5 {
						px := i / c.Components
						t.Errorf("sample %d (x %d, y %d, component %d) = %d, want %d",
							i, px%c.Width, px/c.Width, i%c.Components, pix[i], want[i])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d samples differ", bad, len(want))
			}
			// One sample fewer than the frame holds must be refused.
			if _, _, _, _, _, err := decodeJPEGLossless(data, n-1); err == nil || !strings.Contains(err.Error(), "exceed the limit") {
				t.Errorf("maxSamples %d: err = %v, want the limit refused", n-1, err)
			}
		})
	}
}

// TestJPEGLosslessTrailingBytes: DICOM pads an odd-length fragment with
// one byte, and nothing after EOI belongs to the frame.
func TestJPEGLosslessTrailingBytes(t *testing.T) {
	data := append(jllStream(t, "u16_sv1"), 0x00, 0xFF, 0x12)
	if _, _, _, _, _, err := decodeJPEGLossless(data, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// jllSegment is one marker segment of a stream, as the test's own small
// walker finds it (it stops at the first SOS).
type jllSegment struct {
	marker byte
	at     int // offset of the 0xFF
	end    int // offset just past the segment
}

func jllSegments(t testing.TB, b []byte) []jllSegment {
	t.Helper()
	var segs []jllSegment
	i := 2
	for i+4 <= len(b) {
		if b[i] != 0xFF {
			t.Fatalf("no marker at %d", i)
		}
		m := b[i+1]
		n := int(b[i+2])<<8 | int(b[i+3])
		segs = append(segs, jllSegment{m, i, i + 2 + n})
		if m == 0xDA {
			break
		}
		i += 2 + n
	}
	return segs
}

// jllFind returns the first segment with marker m.
func jllFind(t testing.TB, b []byte, m byte) jllSegment {
	t.Helper()
	for _, s := range jllSegments(t, b) {
		if s.marker == m {
			return s
		}
	}
	t.Fatalf("no marker 0xFF%02X", m)
	return jllSegment{}
}

// jllPatch returns a copy of a fixture with f applied to it.
func jllPatch(t testing.TB, name string, f func(t testing.TB, b []byte) []byte) []byte {
	b := bytes.Clone(jllStream(t, name))
	return f(t, b)
}

// jllSeg builds a marker segment with its length.
func jllSeg(m byte, payload ...byte) []byte {
	n := len(payload) + 2
	return append([]byte{0xFF, m, byte(n >> 8), byte(n)}, payload...)
}

// jllTable builds the payload of a DHT defining one table: class and
// destination, the 16 code counts (counts padded with zeros) and symbols.
func jllTable(tcth byte, counts []byte, syms ...byte) []byte {
	var c [16]byte
	copy(c[:], counts)
	return jllCat([]byte{tcth}, c[:], syms)
}

// jllCat concatenates byte slices.
func jllCat(parts ...[]byte) []byte {
	return bytes.Join(parts, nil)
}

var (
	jllSOI = []byte{0xFF, 0xD8}
	jllEOI = []byte{0xFF, 0xD9}
	// A one-component 4×2 frame of precision 8 and a DHT whose table 0
	// has the single 1-bit code 0 for category 0.
	jllSOF     = jllSeg(0xC3, 8, 0, 2, 0, 4, 1, 1, 0x11, 0)
	jllDHT     = jllSeg(0xC4, jllTable(0x00, []byte{1}, 0)...)
	jllSOS     = jllSeg(0xDA, 1, 1, 0x00, 1, 0, 0)
	jllZeroRow = []byte{0x00} // eight samples of category 0: a 4×2 image of 128s
)

// TestJPEGLosslessTiny pins the hand-built stream the hostile cases
// mutate: 4×2 samples all predicted as 2^(8-1) with difference 0.
func TestJPEGLosslessTiny(t *testing.T) {
	pix, w, h, nc, p, err := decodeJPEGLossless(jllCat(jllSOI, jllSOF, jllDHT, jllSOS, jllZeroRow, jllEOI), 8)
	if err != nil {
		t.Fatal(err)
	}
	if w != 4 || h != 2 || nc != 1 || p != 8 || len(pix) != 8 {
		t.Fatalf("got %d×%d×%d P%d, %d samples", w, h, nc, p, len(pix))
	}
	for i, v := range pix {
		if v != 128 {
			t.Fatalf("sample %d = %d, want 128", i, v)
		}
	}
}

// TestJPEGLosslessHostile feeds malformed streams, each of which must be
// refused with an error that says what is wrong.
func TestJPEGLosslessHostile(t *testing.T) {
	huge := bytes.Repeat([]byte{0xFF, 0x00}, 64) // sixteen-plus 1-bits: no code
	tests := []struct {
		name string
		data []byte
		max  int
		want string // substring of the error
	}{
		{"empty", nil, 1 << 20, "no SOI"},
		{"garbage", []byte("this is not a JPEG stream at all"), 1 << 20, "no SOI"},
		{"SOI only", jllSOI, 1 << 20, "before EOI"},
		{"SOI EOI", jllCat(jllSOI, jllEOI), 1 << 20, "before a frame header"},
		{"byte instead of marker", jllCat(jllSOI, []byte{0x12, 0x34}), 1 << 20, "expected a marker"},
		{"segment past end", jllCat(jllSOI, []byte{0xFF, 0xE0, 0x10, 0x00, 1, 2}), 1 << 20, "exceeds"},
		{"segment length 1", jllCat(jllSOI, []byte{0xFF, 0xE0, 0x00, 0x01}), 1 << 20, "length 1 is below 2"},
		{"length cut", jllCat(jllSOI, []byte{0xFF, 0xE0, 0x00}), 1 << 20, "truncated length"},
		{"second SOI", jllCat(jllSOI, jllSOI), 1 << 20, "second SOI"},
		{"SOF0", jllPatch(t, "u16_sv1", func(t testing.TB, b []byte) []byte {
			b[jllFind(t, b, 0xC3).at+1] = 0xC0
			return b
		}), 1 << 20, "JPEG SOF0 (baseline) is not lossless"},
		{"SOF2", jllCat(jllSOI, jllSeg(0xC2, 8, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "SOF2 (progressive)"},
		{"SOF11", jllCat(jllSOI, jllSeg(0xCB, 8, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "SOF11 (lossless, arithmetic-coded)"},
		{"JPEG-LS", jllCat(jllSOI, jllSeg(0xF7, 8, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "JPEG-LS"},
		{"SOF3 0x0", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 0, 0, 0, 1, 1, 0x11, 0)), 1 << 20, "height 0"},
		{"SOF3 width 0", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 2, 0, 0, 1, 1, 0x11, 0)), 1 << 20, "width 0"},
		{"precision 1", jllCat(jllSOI, jllSeg(0xC3, 1, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "precision 1"},
		{"precision 17", jllCat(jllSOI, jllSeg(0xC3, 17, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "precision 17"},
		{"0 components", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 2, 0, 4, 0)), 1 << 20, "0 components"},
		{"5 components", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 2, 0, 4, 5,
			1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0, 5, 0x11, 0)), 1 << 20, "5 components"},
		{"SOF3 short", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 2, 0, 4, 2, 1, 0x11, 0)), 1 << 20, "want 12"},
		{"duplicate component id", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 2, 0, 4, 2, 1, 0x11, 0, 1, 0x11, 0)), 1 << 20, "twice"},
		{"subsampled", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 2, 0, 4, 1, 1, 0x21, 0)), 1 << 20, "sampling factors 2×1"},
		{"huge", jllCat(jllSOI, jllSeg(0xC3, 16, 0xFF, 0xFF, 0xFF, 0xFF, 4,
			1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0)), 1 << 24, "exceed the limit"},
		{"two frames", jllCat(jllSOI, jllSOF, jllSOF), 1 << 20, "second frame"},
		{"DHT 300 codes", jllCat(jllSOI, jllSeg(0xC4, jllTable(0x00, []byte{14: 150, 15: 150}, make([]byte, 300)...)...)), 1 << 20, "more than 256"},
		{"DHT counts overflow", jllCat(jllSOI, jllSeg(0xC4, jllTable(0x00, []byte{3}, 0, 1, 2)...)), 1 << 20, "3 codes of length 1 do not fit"},
		{"DHT long codes overflow", jllCat(jllSOI, jllSeg(0xC4, jllTable(0x00, []byte{1, 2, 15: 1}, 0, 1, 2, 3)...)), 1 << 20, "1 codes of length 16 do not fit"},
		{"DHT symbols cut", jllCat(jllSOI, jllSeg(0xC4, jllTable(0x00, []byte{0, 2})...)), 1 << 20, "lists 2 symbols"},
		{"DHT second table cut", jllCat(jllSOI, jllSeg(0xC4, append(jllTable(0x00, []byte{1}, 0), 0x01, 1, 2)...)), 1 << 20, "table header of 3 bytes"},
		{"DHT class 2", jllCat(jllSOI, jllSeg(0xC4, jllTable(0x20, []byte{1}, 0)...)), 1 << 20, "table class 2"},
		{"DHT destination 4", jllCat(jllSOI, jllSeg(0xC4, jllTable(0x04, []byte{1}, 0)...)), 1 << 20, "destination 4"},
		{"DRI length", jllCat(jllSOI, jllSeg(0xDD, 0, 4, 0)), 1 << 20, "want 4"},
		{"SOS before SOF", jllCat(jllSOI, jllDHT, jllSOS, jllZeroRow, jllEOI), 1 << 20, "before the frame header"},
		{"missing SOS", jllCat(jllSOI, jllSOF, jllDHT, jllEOI), 1 << 20, "in no scan"},
		{"missing EOI", jllCat(jllSOI, jllSOF, jllDHT, jllSOS, jllZeroRow), 1 << 20, "before EOI"},
		{"undefined table", jllCat(jllSOI, jllSOF, jllSOS, jllZeroRow, jllEOI), 1 << 20, "undefined Huffman table 0"},
		{"table 1 undefined", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 1, 1, 0x10, 1, 0, 0), jllZeroRow, jllEOI), 1 << 20, "undefined Huffman table 1"},
		{"unknown component", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 1, 9, 0x00, 1, 0, 0), jllZeroRow, jllEOI), 1 << 20, "id 9 is not in the frame"},
		{"predictor 0", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 1, 1, 0x00, 0, 0, 0), jllZeroRow, jllEOI), 1 << 20, "selection value 0"},
		{"predictor 8", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 1, 1, 0x00, 8, 0, 0), jllZeroRow, jllEOI), 1 << 20, "selection value 8"},
		{"Pt = P", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 1, 1, 0x00, 1, 0, 8), jllZeroRow, jllEOI), 1 << 20, "point transform 8"},
		{"scan of 2 in 1-component frame", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 2, 1, 0, 1, 0, 1, 0, 0), jllZeroRow, jllEOI), 1 << 20, "2 components in a scan"},
		{"SOS length", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDA, 1, 1, 0x00, 1, 0), jllZeroRow, jllEOI), 1 << 20, "want 6"},
		{"component coded twice", jllCat(jllSOI, jllSOF, jllDHT, jllSOS, jllZeroRow, jllSOS, jllZeroRow, jllEOI), 1 << 20, "coded twice"},
		{"entropy data cut", jllCat(jllSOI, jllSOF, jllDHT, jllSOS, jllEOI), 1 << 20, "entropy-coded data end"},
		{"entropy data too short", jllCat(jllSOI, jllSeg(0xC3, 8, 0, 200, 0, 200, 1, 1, 0x11, 0), jllDHT, jllSOS, jllZeroRow, jllEOI), 1 << 20, "need at least 5000"},
		{"invalid code", jllCat(jllSOI, jllSOF, jllDHT, jllSOS, []byte{0x80}, jllEOI), 1 << 20, "invalid Huffman code"},
		{"invalid code in real stream", jllPatch(t, "u16_sv1", func(t testing.TB, b []byte) []byte {
			end := jllFind(t, b, 0xDA).end
			return jllCat(b[:end], huge, jllEOI)
		}), 1 << 20, "invalid Huffman code"},
		{"category 17", jllCat(jllSOI, jllSOF, jllSeg(0xC4, jllTable(0x00, []byte{1}, 17)...), jllSOS, jllZeroRow, jllEOI), 1 << 20, "category 17"},
		{"restart not a whole line", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDD, 0, 3), jllSOS, jllZeroRow, jllEOI), 1 << 20, "not a multiple of the 4 MCUs"},
		{"restart marker missing", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDD, 0, 4), jllSOS, jllZeroRow, jllEOI), 1 << 20, "RST0 expected"},
		{"restart marker wrong", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDD, 0, 4), jllSOS, []byte{0x0F, 0xFF, 0xD1, 0x0F}, jllEOI), 1 << 20, "RST0 expected"},
		{"restart interval too long", jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDD, 0, 4), jllSOS, []byte{0x00, 0x00, 0xFF, 0xD0, 0x0F}, jllEOI), 1 << 20, "bits of the interval are unused"},
		{"restart marker flipped in real stream", jllPatch(t, "py_rst_rgb8_sv7", func(t testing.TB, b []byte) []byte {
			i := bytes.Index(b, []byte{0xFF, 0xD1})
			if i < 0 {
				t.Fatal("no RST1")
			}
			b[i+1] = 0xD3
			return b
		}), 1 << 20, "RST1 expected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pix, _, _, _, _, err := decodeJPEGLossless(tc.data, tc.max)
			if err == nil {
				t.Fatalf("no error; %d samples", len(pix))
			}
			if pix != nil {
				t.Errorf("samples returned with the error")
			}
			if !strings.HasPrefix(err.Error(), "jpeg lossless: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestJPEGLosslessHugeNoAlloc: a frame header over maxSamples is refused
// before the samples are allocated.
func TestJPEGLosslessHugeNoAlloc(t *testing.T) {
	data := jllCat(jllSOI, jllSeg(0xC3, 16, 0xFF, 0xFF, 0xFF, 0xFF, 1, 1, 0x11, 0), jllDHT, jllSOS, jllEOI)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, _, _, _, err := decodeJPEGLossless(data, 1<<20)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("65535×65535 accepted under a limit of 2^20 samples")
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Errorf("allocated %d bytes refusing the frame", d)
	}
}

// jllEOIEnd is the length of a stream up to and including its EOI, which
// a DICOM fragment may follow with a padding byte.
func jllEOIEnd(t testing.TB, b []byte) int {
	i := bytes.LastIndex(b, jllEOI)
	if i < 0 {
		t.Fatal("no EOI")
	}
	return i + 2
}

// TestJPEGLosslessTruncated cuts real streams at every offset before the
// end of their EOI: each cut must be an error, including cuts inside the
// entropy-coded data, which the decoder refuses rather than zero-fills.
func TestJPEGLosslessTruncated(t *testing.T) {
	for _, name := range []string{"u16_sv1", "u16_sv6", "u12_sv6_pt2", "rgb8_sv1", "py_rst_rgb8_sv7", "py_planar_rgb8", "py_cat16_sv1", "py_p2_sv7"} {
		data := jllStream(t, name)
		for n := range jllEOIEnd(t, data) {
			pix, _, _, _, _, err := decodeJPEGLossless(data[:n:n], 1<<20)
			if err == nil {
				t.Errorf("%s cut to %d bytes: no error, %d samples", name, n, len(pix))
			}
		}
	}
}

// TestJPEGLosslessFlips flips each byte of real streams in turn: the
// decoder may accept a flip in the entropy-coded data (it can decode to
// other valid samples) but must not panic, and what it accepts must have
// the frame's shape.
func TestJPEGLosslessFlips(t *testing.T) {
	for _, name := range []string{"u16_sv7", "rgb8_sv5_pt1", "py_rst_u12_sv5_pt1", "py_planar_u16x2_sv3"} {
		data := jllStream(t, name)
		for i := range data {
			for _, mask := range []byte{0xFF, 0x01, 0x80} {
				b := bytes.Clone(data)
				b[i] ^= mask
				jllCheckShape(t, b, 1<<20)
			}
		}
	}
}

// jllCheckShape decodes data and, if it is accepted, checks that the
// result is self-consistent.
func jllCheckShape(t testing.TB, data []byte, max int) {
	t.Helper()
	pix, w, h, nc, p, err := decodeJPEGLossless(data, max)
	if err != nil {
		if pix != nil {
			t.Fatalf("samples returned with error %v", err)
		}
		if !strings.HasPrefix(err.Error(), "jpeg lossless: ") {
			t.Fatalf("error without prefix: %v", err)
		}
		return
	}
	if w < 1 || h < 1 || nc < 1 || nc > 4 || p < 2 || p > 16 {
		t.Fatalf("accepted %d×%d×%d precision %d", w, h, nc, p)
	}
	if len(pix) != w*h*nc || len(pix) > max {
		t.Fatalf("%d samples for %d×%d×%d (limit %d)", len(pix), w, h, nc, max)
	}
}

// TestJPEGLosslessRandom throws seeded random bytes after a valid header,
// and random bytes alone, at the decoder.
func TestJPEGLosslessRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	head := jllStream(t, "u16_sv2")
	head = head[:jllFind(t, head, 0xDA).end]
	for range 2000 {
		junk := make([]byte, r.IntN(400))
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		jllCheckShape(t, jllCat(head, junk), 1<<20)
		jllCheckShape(t, jllCat(jllSOI, junk), 1<<20)
	}
}

// TestJPEGLosslessErrorsWrap: errors are plain fmt errors with context,
// and none are sentinel values a caller might compare.
func TestJPEGLosslessErrorsWrap(t *testing.T) {
	_, _, _, _, _, err := decodeJPEGLossless(jllCat(jllSOI, jllSOF, jllDHT, jllSOS, []byte{0x80}, jllEOI), 100)
	if err == nil || errors.Unwrap(err) == nil {
		t.Fatalf("err = %v, want a wrapped error", err)
	}
	if !strings.Contains(err.Error(), "scan at offset") || !strings.Contains(err.Error(), "line 0") {
		t.Errorf("err = %q lacks where", err)
	}
}

// FuzzJPEGLossless checks that no input makes the decoder panic, hang or
// return samples inconsistent with the shape it reports; the fixtures
// seed it.
func FuzzJPEGLossless(f *testing.F) {
	for _, c := range jllCases(f) {
		if c.Expected == "u16" {
			f.Add(jllStream(f, c.Name))
		}
	}
	f.Add(jllCat(jllSOI, jllSOF, jllDHT, jllSOS, jllZeroRow, jllEOI))
	f.Add(jllCat(jllSOI, jllSOF, jllDHT, jllSeg(0xDD, 0, 4), jllSOS, []byte{0x0F, 0xFF, 0xD0, 0x0F}, jllEOI))
	f.Fuzz(func(t *testing.T, data []byte) {
		jllCheckShape(t, data, 1<<16)
	})
}

// BenchmarkJPEGLossless decodes the 512×512 16-bit SV1 fixture that
// dcmcjpeg wrote; bytes/s counts decoded output (2 bytes a sample).
func BenchmarkJPEGLossless(b *testing.B) {
	data := jllStream(b, "bench_u16_512")
	b.SetBytes(512 * 512 * 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, _, _, err := decodeJPEGLossless(data, 512*512); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(512*512*b.N)/b.Elapsed().Seconds()/1e6, "Msamples/s")
}
