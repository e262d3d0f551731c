package dicom

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// jlsCase is one entry of testdata/jpegls/cases.json, which
// testdata/gen_jpegls.py writes: a JPEG-LS stream made by dcmcjpls (or by
// the script's own encoder, checked by dcmdjpls where dcmtk can) and the
// samples it must decode to.
type jlsCase struct {
	Name       string
	Width      int
	Height     int
	Components int
	Precision  int
	Near       int
	ILV        int
	Scans      int
	Origin     string // "original", "dcmdjpls", or the encoder's
	Tool       string
	Expected   string // "u16": NAME.u16 holds them; "bench_value": jlsBenchValue
}

const jlsDir = "testdata/jpegls"

func jlsCases(t testing.TB) []jlsCase { return readCases[jlsCase](t, jlsDir) }

func jlsStream(t testing.TB, name string) []byte {
	t.Helper()
	return readFixture(t, filepath.Join(jlsDir, name+".jls"))
}

// jlsBenchValue mirrors bench_value in gen_jpegls.py: the content of the
// 512×512 benchmark fixture, which has no .u16 file.
func jlsBenchValue(x, y int) uint16 {
	h := uint32(x*73856093) ^ uint32(y*19349663)
	return uint16(20000 + 3*x + 2*y + int(h>>13&1))
}

// jlsExpected returns the samples a case must decode to.
func jlsExpected(t testing.TB, c jlsCase) []uint16 {
	t.Helper()
	return expectedSamples(t, jlsDir, c.Name, c.Expected, c.Width, c.Height, c.Components, jlsBenchValue)
}

// TestJPEGLSFixtures decodes every stream and requires every sample to
// equal the expectation bit for bit: the original image for lossless
// streams, dcmdjpls's decoding for near-lossless ones.
func TestJPEGLSFixtures(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range jlsCases(t) {
		seen[strings.Fields(c.Tool)[0]] = true
		seen[fmt.Sprint("ilv", c.ILV)] = true
		if c.Near > 0 {
			seen["near"] = true
		}
		t.Run(c.Name, func(t *testing.T) {
			data := jlsStream(t, c.Name)
			n := c.Width * c.Height * c.Components
			pix, w, h, nc, p, err := decodeJPEGLS(data, n)
			if err != nil {
				t.Fatalf("%s (%s, NEAR %d, ILV %d): %v", c.Name, c.Tool, c.Near, c.ILV, err)
			}
			if w != c.Width || h != c.Height || nc != c.Components || p != c.Precision {
				t.Fatalf("got %d×%d×%d precision %d, want %d×%d×%d precision %d",
					w, h, nc, p, c.Width, c.Height, c.Components, c.Precision)
			}
			want := jlsExpected(t, c)
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
			if _, _, _, _, _, err := decodeJPEGLS(data, n-1); err == nil || !strings.Contains(err.Error(), "exceed the limit") {
				t.Errorf("maxSamples %d: err = %v, want the limit refused", n-1, err)
			}
		})
	}
	for _, k := range []string{"dcmcjpls", "gen_jpegls.py", "ilv0", "ilv1", "ilv2", "near"} {
		if !seen[k] {
			t.Errorf("no fixture covers %s", k)
		}
	}
}

// TestJPEGLSTrailingBytes: DICOM pads an odd-length fragment with one
// byte, and nothing after EOI belongs to the frame.
func TestJPEGLSTrailingBytes(t *testing.T) {
	data := append(bytes.Clone(jlsStream(t, "u8")), 0x00, 0xFF, 0x12)
	if _, _, _, _, _, err := decodeJPEGLS(data, 1<<20); err != nil {
		t.Fatal(err)
	}
}

// TestJPEGLSDefaultThresholds pins C.2.4.1.1. The 8-bit and 16-bit
// lossless values are those dcmcjpls writes in its LSE segments (and the
// basic thresholds of Table C.3); the others follow the same formula.
func TestJPEGLSDefaultThresholds(t *testing.T) {
	tests := []struct {
		maxval, near int
		t1, t2, t3   int
	}{
		{255, 0, 3, 7, 21},
		{65535, 0, 18, 67, 276},
		{4095, 0, 18, 67, 276},
		{1023, 0, 6, 19, 72},
		{255, 3, 12, 22, 42},
		{4095, 2, 24, 77, 290},
		{3, 0, 2, 3, 3},
		{3, 1, 3, 3, 3}, // T2 and T3 above MAXVAL: clamped to T1, T2
		{127, 0, 2, 3, 10},
		{15, 0, 2, 3, 4},
	}
	for _, tc := range tests {
		t1, t2, t3 := jlsDefaultThresholds(tc.maxval, tc.near)
		if t1 != tc.t1 || t2 != tc.t2 || t3 != tc.t3 {
			t.Errorf("MAXVAL %d NEAR %d: T = %d, %d, %d, want %d, %d, %d",
				tc.maxval, tc.near, t1, t2, t3, tc.t1, tc.t2, tc.t3)
		}
	}
}

// jlsPack packs a string of '0' and '1' bits (other characters ignored)
// into an entropy-coded segment as T.87 9.1 writes it: MSB first, a 0 bit
// stuffed after every 0xFF byte, the last byte padded with 0 bits.
func jlsPack(s string) []byte {
	var out []byte
	acc, n, cap := 0, 0, 8
	put := func(bit int) {
		acc = acc<<1 | bit
		n++
		if n == cap {
			out = append(out, byte(acc))
			cap = 8
			if acc == 0xFF {
				cap = 7
			}
			acc, n = 0, 0
		}
	}
	for _, c := range s {
		switch c {
		case '0':
			put(0)
		case '1':
			put(1)
		}
	}
	for n > 0 || cap == 7 {
		put(0)
	}
	return out
}

// jlsSeg builds a marker segment with its length.
func jlsSeg(m byte, payload ...byte) []byte {
	n := len(payload) + 2
	return append([]byte{0xFF, m, byte(n >> 8), byte(n)}, payload...)
}

// jlsCat concatenates byte slices.
func jlsCat(parts ...[]byte) []byte {
	return bytes.Join(parts, nil)
}

// jlsLSE1 builds an LSE segment with id 1 and the given values.
func jlsLSE1(maxval, t1, t2, t3, reset int) []byte {
	p := []byte{1}
	for _, v := range []int{maxval, t1, t2, t3, reset} {
		p = append(p, byte(v>>8), byte(v))
	}
	return jlsSeg(0xF8, p...)
}

var (
	jlsSOIm = []byte{0xFF, 0xD8}
	jlsEOIm = []byte{0xFF, 0xD9}
	// A one-component 4×2 frame of precision 8, and its scan: lossless,
	// no interleave.
	jlsSOF = jlsSeg(0xF7, 8, 0, 2, 0, 4, 1, 1, 0x11, 0)
	jlsSOS = jlsSeg(0xDA, 1, 1, 0, 0, 0, 0)
	// A 4×2 image of zeros: every sample is in a run (the line above
	// the first is zeros, A.2.1). Line 0 takes four 1 bits of one sample
	// each (J = 0), leaving RUNindex 4; line 1 two of two samples (J = 1).
	jlsZeros = jlsPack("1111 11")
)

// jlsTiny is the hand-built stream that hostile cases mutate.
func jlsTiny(mid ...[]byte) []byte {
	return jlsCat(jlsSOIm, jlsSOF, jlsCat(mid...), jlsSOS, jlsZeros, jlsEOIm)
}

// TestJPEGLSTiny pins the hand-built stream the hostile cases mutate.
func TestJPEGLSTiny(t *testing.T) {
	pix, w, h, nc, p, err := decodeJPEGLS(jlsTiny(), 8)
	if err != nil {
		t.Fatal(err)
	}
	if w != 4 || h != 2 || nc != 1 || p != 8 || len(pix) != 8 {
		t.Fatalf("got %d×%d×%d P%d, %d samples", w, h, nc, p, len(pix))
	}
	for i, v := range pix {
		if v != 0 {
			t.Fatalf("sample %d = %d, want 0", i, v)
		}
	}
}

// TestJPEGLSRunBoundsNotData: run mode codes a 1000×1000 flat image in
// 1026 bits, all ones, which the stuffing rule writes as 0xFF 0x7F pairs.
// The data length does not bound the image, maxSamples does; and one bit
// fewer is an error, not a silently zero-filled image.
func TestJPEGLSRunBoundsNotData(t *testing.T) {
	// Line 0 climbs the run orders: 4 segments each of 1, 2, 4 and 8
	// samples, 2 each of 16, 32, 64 and 128, one of 256 (796 samples in
	// 25 bits, RUNindex 25), and a 26th bit for the 204 left, fewer than
	// 2^J[25] = 512. Line 1 takes 512 and then 488 < 1024; every later
	// line one bit for its 1000 < 1024 samples.
	sof := jlsSeg(0xF7, 8, 0x03, 0xE8, 0x03, 0xE8, 1, 1, 0x11, 0)
	stream := func(ones int) []byte {
		return jlsCat(jlsSOIm, sof, jlsSOS, jlsPack(strings.Repeat("1", ones)), jlsEOIm)
	}
	data := stream(1026)
	if len(data) > 200 {
		t.Fatalf("%d bytes", len(data))
	}
	if !bytes.Contains(data, []byte{0xFF, 0x7F, 0xFF, 0x7F}) {
		t.Fatalf("no stuffed bytes in % X", data[:40])
	}
	pix, w, h, _, _, err := decodeJPEGLS(data, 1000*1000)
	if err != nil {
		t.Fatal(err)
	}
	if w != 1000 || h != 1000 {
		t.Fatalf("%d×%d", w, h)
	}
	for i, v := range pix {
		if v != 0 {
			t.Fatalf("sample %d = %d", i, v)
		}
	}
	if _, _, _, _, _, err := decodeJPEGLS(data, 1000*1000-1); err == nil || !strings.Contains(err.Error(), "exceed the limit") {
		t.Errorf("under the limit: err = %v", err)
	}
	if _, _, _, _, _, err := decodeJPEGLS(stream(1025), 1000*1000); err == nil || !strings.Contains(err.Error(), "entropy-coded data end") {
		t.Errorf("one bit short: err = %v", err)
	}
}

// jlsSegments returns the marker segments of a stream up to its first
// SOS, as the test's own small walker finds them: marker, offset of the
// 0xFF, and offset just past the segment.
func jlsSegments(t testing.TB, b []byte) [][3]int {
	t.Helper()
	var segs [][3]int
	i := 2
	for i+4 <= len(b) {
		if b[i] != 0xFF {
			t.Fatalf("no marker at %d", i)
		}
		m := int(b[i+1])
		n := int(b[i+2])<<8 | int(b[i+3])
		segs = append(segs, [3]int{m, i, i + 2 + n})
		if m == 0xDA {
			break
		}
		i += 2 + n
	}
	return segs
}

// jlsFind returns the offset of the first segment with marker m and the
// offset past it.
func jlsFind(t testing.TB, b []byte, m int) (at, end int) {
	t.Helper()
	for _, s := range jlsSegments(t, b) {
		if s[0] == m {
			return s[1], s[2]
		}
	}
	t.Fatalf("no marker 0xFF%02X", m)
	return 0, 0
}

// jlsPatch returns a copy of a fixture with f applied to it.
func jlsPatch(t testing.TB, name string, f func(t testing.TB, b []byte) []byte) []byte {
	return f(t, bytes.Clone(jlsStream(t, name)))
}

// TestJPEGLSHostile feeds malformed streams, each of which must be refused
// with an error that says what is wrong.
func TestJPEGLSHostile(t *testing.T) {
	sos := func(p ...byte) []byte { return jlsSeg(0xDA, p...) }
	rgbSOF := jlsSeg(0xF7, 8, 0, 2, 0, 4, 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0)
	tests := []struct {
		name string
		data []byte
		max  int
		want string // substring of the error
	}{
		{"empty", nil, 1 << 20, "no SOI"},
		{"garbage", []byte("this is not a JPEG-LS stream at all"), 1 << 20, "no SOI"},
		{"SOI only", jlsSOIm, 1 << 20, "before EOI"},
		{"SOI EOI", jlsCat(jlsSOIm, jlsEOIm), 1 << 20, "before a frame header"},
		{"byte instead of marker", jlsCat(jlsSOIm, []byte{0x12, 0x34}), 1 << 20, "expected a marker"},
		{"segment past end", jlsCat(jlsSOIm, []byte{0xFF, 0xE0, 0x10, 0x00, 1, 2}), 1 << 20, "exceeds"},
		{"segment length 1", jlsCat(jlsSOIm, []byte{0xFF, 0xE0, 0x00, 0x01}), 1 << 20, "length 1 is below 2"},
		{"length cut", jlsCat(jlsSOIm, []byte{0xFF, 0xE0, 0x00}), 1 << 20, "truncated length"},
		{"second SOI", jlsCat(jlsSOIm, jlsSOIm), 1 << 20, "second SOI"},
		{"marker 0xFF00", jlsCat(jlsSOIm, []byte{0xFF, 0x00}), 1 << 20, "invalid marker 0xFF00"},
		{"T.81 lossless", jlsPatch(t, "u8", func(t testing.TB, b []byte) []byte {
			at, _ := jlsFind(t, b, 0xF7)
			b[at+1] = 0xC3
			return b
		}), 1 << 20, "JPEG SOF3 at offset 2 is not JPEG-LS"},
		{"SOF55 0×0", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 0, 0, 0, 1, 1, 0x11, 0)), 1 << 20, "height 0"},
		{"SOF55 width 0", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 0, 1, 1, 0x11, 0)), 1 << 20, "width 0"},
		{"precision 1", jlsCat(jlsSOIm, jlsSeg(0xF7, 1, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "precision 1 outside 2..16"},
		{"precision 17", jlsCat(jlsSOIm, jlsSeg(0xF7, 17, 0, 2, 0, 4, 1, 1, 0x11, 0)), 1 << 20, "precision 17"},
		{"0 components", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 4, 0)), 1 << 20, "0 components"},
		{"5 components", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 4, 5,
			1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0, 5, 0x11, 0)), 1 << 20, "5 components"},
		{"SOF55 short", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 4, 2, 1, 0x11, 0)), 1 << 20, "want 12"},
		{"SOF55 tiny", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2)), 1 << 20, "want at least 6"},
		{"duplicate component id", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 4, 2, 1, 0x11, 0, 1, 0x11, 0)), 1 << 20, "twice"},
		{"subsampled", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 4, 1, 1, 0x21, 0)), 1 << 20, "sampling factors 2×1"},
		{"dims over maxSamples", jlsCat(jlsSOIm, jlsSeg(0xF7, 16, 0xFF, 0xFF, 0xFF, 0xFF, 4,
			1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0)), 1 << 24, "exceed the limit"},
		{"negative maxSamples", jlsTiny(), -1, "exceed the limit"},
		{"two frames", jlsCat(jlsSOIm, jlsSOF, jlsSOF), 1 << 20, "second frame"},
		{"LSE id 2", jlsTiny(jlsSeg(0xF8, 2, 1, 1, 0, 1, 2, 3)), 1 << 20, "mapping table (LSE id 2) is not supported"},
		{"LSE id 3", jlsTiny(jlsSeg(0xF8, 3, 1, 1, 0, 1, 2, 3)), 1 << 20, "mapping table (LSE id 3)"},
		{"LSE id 4", jlsTiny(jlsSeg(0xF8, 4, 2, 0, 0, 0, 4, 0, 0, 0, 2)), 1 << 20, "oversize image dimensions (LSE id 4)"},
		{"LSE id 9", jlsTiny(jlsSeg(0xF8, 9)), 1 << 20, "LSE id 9 is not defined"},
		{"LSE empty", jlsTiny(jlsSeg(0xF8)), 1 << 20, "empty segment"},
		{"LSE id 1 short", jlsTiny(jlsSeg(0xF8, 1, 0, 255, 0, 3)), 1 << 20, "want 11"},
		{"LSE MAXVAL over precision", jlsTiny(jlsLSE1(256, 0, 0, 0, 0)), 1 << 20, "MAXVAL 256 (LSE) does not fit"},
		{"LSE thresholds disordered", jlsTiny(jlsLSE1(0, 9, 5, 30, 0)), 1 << 20, "thresholds T1 9, T2 5, T3 30"},
		{"LSE T3 over MAXVAL", jlsTiny(jlsLSE1(100, 3, 7, 101, 0)), 1 << 20, "thresholds"},
		{"LSE RESET 2", jlsTiny(jlsLSE1(0, 0, 0, 0, 2)), 1 << 20, "RESET 2 outside 3..255"},
		{"LSE RESET over MAXVAL", jlsTiny(jlsLSE1(0, 0, 0, 0, 256)), 1 << 20, "RESET 256"},
		{"NEAR over MAXVAL/2", jlsCat(jlsSOIm, jlsSOF, sos(1, 1, 0, 128, 0, 0), jlsZeros, jlsEOIm), 1 << 20, "NEAR 128 above"},
		{"mrfx colour transform", jlsTiny(jlsSeg(0xE8, 'm', 'r', 'f', 'x', 1)), 1 << 20, "\"mrfx\" colour transform 1"},
		{"mrfx cut", jlsTiny(jlsSeg(0xE8, 'm', 'r', 'f', 'x')), 1 << 20, "colour transform -1"},
		{"SOS before SOF", jlsCat(jlsSOIm, jlsSOS, jlsZeros, jlsEOIm), 1 << 20, "SOS before the frame header"},
		{"missing SOS", jlsCat(jlsSOIm, jlsSOF, jlsEOIm), 1 << 20, "in no scan"},
		{"missing EOI", jlsCat(jlsSOIm, jlsSOF, jlsSOS, jlsZeros), 1 << 20, "before EOI"},
		{"empty SOS", jlsCat(jlsSOIm, jlsSOF, sos(), jlsZeros, jlsEOIm), 1 << 20, "empty scan header"},
		{"unknown component", jlsCat(jlsSOIm, jlsSOF, sos(1, 9, 0, 0, 0, 0), jlsZeros, jlsEOIm), 1 << 20, "id 9 is not in the frame"},
		{"scan of 2 in 1-component frame", jlsCat(jlsSOIm, jlsSOF, sos(2, 1, 0, 1, 0, 0, 1, 0), jlsZeros, jlsEOIm), 1 << 20, "2 components in a scan"},
		{"SOS length", jlsCat(jlsSOIm, jlsSOF, sos(1, 1, 0, 0, 0), jlsZeros, jlsEOIm), 1 << 20, "want 6"},
		{"component coded twice", jlsCat(jlsSOIm, jlsSOF, jlsSOS, jlsZeros, jlsSOS, jlsZeros, jlsEOIm), 1 << 20, "coded twice"},
		{"mapping table selector", jlsCat(jlsSOIm, jlsSOF, sos(1, 1, 5, 0, 0, 0), jlsZeros, jlsEOIm), 1 << 20, "mapping table 5"},
		{"ILV 3", jlsCat(jlsSOIm, jlsSOF, sos(1, 1, 0, 0, 3, 0), jlsZeros, jlsEOIm), 1 << 20, "interleave mode 3"},
		{"ILV 0 with 3 components", jlsCat(jlsSOIm, rgbSOF, sos(3, 1, 0, 2, 0, 3, 0, 0, 0, 0), jlsZeros, jlsEOIm), 1 << 20, "interleave mode 0 with 3 components"},
		{"point transform", jlsCat(jlsSOIm, jlsSOF, sos(1, 1, 0, 0, 0, 1), jlsZeros, jlsEOIm), 1 << 20, "point transform byte 0x01"},
		{"entropy data cut", jlsCat(jlsSOIm, jlsSOF, jlsSOS, jlsEOIm), 1 << 20, "entropy-coded data end"},
		{"entropy data too short", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 200, 0, 200, 1, 1, 0x11, 0), jlsSOS, jlsZeros, jlsEOIm), 1 << 20, "need at least 25"},
		{"prefix past LIMIT", jlsCat(jlsSOIm, jlsSOF, jlsSOS, jlsPack("0"+strings.Repeat("0", 40)+"1111"), jlsEOIm), 1 << 20,
			"invalid Golomb code (a unary prefix of more than 22 zero bits)"},
		{"prefix past LIMIT in real stream", jlsPatch(t, "u16", func(t testing.TB, b []byte) []byte {
			_, end := jlsFind(t, b, 0xDA)
			return jlsCat(b[:end], make([]byte, 64), []byte{0x55}, jlsEOIm)
		}), 1 << 20, "invalid Golomb code"},
		{"run past the end of the line", jlsCat(jlsSOIm, jlsSeg(0xF7, 8, 0, 2, 0, 5, 1, 1, 0x11, 0), jlsSOS,
			jlsPack("11111 11 0 1"), jlsEOIm), 1 << 20, "run of 1 samples past the end of the line"},
		{"DRI length", jlsTiny(jlsSeg(0xDD, 0)), 1 << 20, "want 4 to 6"},
		{"DRI too long", jlsTiny(jlsSeg(0xDD, 0, 0, 0, 0, 1)), 1 << 20, "want 4 to 6"},
		{"restart marker missing", jlsTiny(jlsSeg(0xDD, 0, 1)), 1 << 20, "RST0 expected"},
		{"restart marker wrong", jlsCat(jlsSOIm, jlsSOF, jlsSeg(0xDD, 0, 1), jlsSOS, jlsPack("1111"), []byte{0xFF, 0xD3}, jlsPack("1111"), jlsEOIm), 1 << 20, "RST0 expected at offset"},
		{"restart interval too long", jlsCat(jlsSOIm, jlsSOF, jlsSeg(0xDD, 0, 1), jlsSOS, jlsPack("1111 0000 0000 0000"), []byte{0xFF, 0xD0}, jlsPack("1111"), jlsEOIm), 1 << 20, "bits of the interval"},
		{"restart marker flipped in real stream", jlsPatch(t, "py_rst_u8", func(t testing.TB, b []byte) []byte {
			i := bytes.Index(b, []byte{0xFF, 0xD1})
			if i < 0 {
				t.Fatal("no RST1")
			}
			b[i+1] = 0xD5
			return b
		}), 1 << 20, "RST1 expected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pix, _, _, _, _, err := decodeJPEGLS(tc.data, tc.max)
			if err == nil {
				t.Fatalf("no error; %d samples", len(pix))
			}
			if pix != nil {
				t.Errorf("samples returned with the error")
			}
			if !strings.HasPrefix(err.Error(), "jpeg-ls: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestJPEGLSAccepted: what the decoder must take besides the fixtures:
// a restart interval over the whole image (no RST), an APP8 "mrfx" of
// transform 0, fill bytes, a stray RST after the scan, and a restart
// interval of one line with its RST0.
func TestJPEGLSAccepted(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"restart interval over the image", jlsTiny(jlsSeg(0xDD, 0, 2))},
		{"mrfx none", jlsTiny(jlsSeg(0xE8, 'm', 'r', 'f', 'x', 0))},
		{"APP8 other", jlsTiny(jlsSeg(0xE8, 'S', 'P', 'I', 'F', 'F', 0))},
		{"COM", jlsTiny(jlsSeg(0xFE, 0xFF, 0xD9))},
		{"fill bytes", jlsCat(jlsSOIm, []byte{0xFF, 0xFF}, jlsSOF, jlsSOS, jlsZeros, []byte{0xFF, 0xFF, 0xFF}, jlsEOIm)},
		{"stray RST after the scan", jlsCat(jlsSOIm, jlsSOF, jlsSOS, jlsZeros, []byte{0xFF, 0xD0}, jlsEOIm)},
		{"restart every line", jlsCat(jlsSOIm, jlsSOF, jlsSeg(0xDD, 0, 1), jlsSOS, jlsPack("1111"), []byte{0xFF, 0xFF, 0xD0}, jlsPack("1111"), jlsEOIm)},
		{"restart every line, 4-byte Ri", jlsCat(jlsSOIm, jlsSOF, jlsSeg(0xDD, 0, 0, 0, 1), jlsSOS, jlsPack("1111"), []byte{0xFF, 0xD0}, jlsPack("1111"), jlsEOIm)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pix, _, _, _, _, err := decodeJPEGLS(tc.data, 8)
			if err != nil {
				t.Fatal(err)
			}
			if len(pix) != 8 {
				t.Fatalf("%d samples", len(pix))
			}
			for i, v := range pix {
				if v != 0 {
					t.Fatalf("sample %d = %d", i, v)
				}
			}
		})
	}
}

// TestJPEGLSHugeNoAlloc: a frame header over maxSamples is refused
// before the samples are allocated.
func TestJPEGLSHugeNoAlloc(t *testing.T) {
	data := jlsCat(jlsSOIm, jlsSeg(0xF7, 16, 0xFF, 0xFF, 0xFF, 0xFF, 1, 1, 0x11, 0), jlsSOS, jlsEOIm)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, _, _, _, err := decodeJPEGLS(data, 1<<20)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("65535×65535 accepted under a limit of 2^20 samples")
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Errorf("allocated %d bytes refusing the frame", d)
	}
}

// jlsEOIEnd is the length of a stream up to and including its last EOI,
// which a DICOM fragment may follow with a padding byte.
func jlsEOIEnd(t testing.TB, b []byte) int {
	i := bytes.LastIndex(b, jlsEOIm)
	if i < 0 {
		t.Fatal("no EOI")
	}
	return i + 2
}

// TestJPEGLSTruncated cuts real streams at every offset before the end of
// their EOI: each cut must be an error, including cuts inside the
// entropy-coded data, which the decoder refuses rather than zero-fills.
func TestJPEGLSTruncated(t *testing.T) {
	for _, name := range []string{"u16", "u8_near3", "rgb8_ilv0", "rgb8_ilv1", "rgb8_ilv2_near1", "py_rst_u8",
		"py_rst_rgb8_ilv2_near1", "py_lse_u12", "py_longrun_u8", "py_4c_ilv2"} {
		data := jlsStream(t, name)
		for n := range jlsEOIEnd(t, data) {
			pix, _, _, _, _, err := decodeJPEGLS(data[:n:n], 1<<20)
			if err == nil {
				t.Errorf("%s cut to %d bytes: no error, %d samples", name, n, len(pix))
			}
		}
	}
}

// TestJPEGLSTruncatedScan cuts the entropy-coded data of real streams and
// closes them with EOI: the decoder must say that the data end early (or,
// where the cut leaves a byte that reads as a bad code, that the code is
// invalid), never return samples.
func TestJPEGLSTruncatedScan(t *testing.T) {
	for _, name := range []string{"u16", "u8", "rgb8_ilv2", "u12_near2"} {
		data := jlsStream(t, name)
		_, start := jlsFind(t, data, 0xDA)
		end := jlsEOIEnd(t, data) - 2
		for n := start; n < end-1; n++ {
			cut := jlsCat(data[:n], jlsEOIm)
			pix, _, _, _, _, err := decodeJPEGLS(cut, 1<<20)
			if err == nil {
				t.Errorf("%s scan cut at %d of %d: no error, %d samples", name, n, end, len(pix))
				continue
			}
			if !strings.Contains(err.Error(), "entropy-coded data end") && !strings.Contains(err.Error(), "invalid Golomb code") &&
				!strings.Contains(err.Error(), "past the end of the line") && !strings.Contains(err.Error(), "beyond RANGE") &&
				!strings.Contains(err.Error(), "need at least") {
				t.Errorf("%s scan cut at %d: %v", name, n, err)
			}
		}
	}
}

// TestJPEGLSFlips flips each byte of real streams in turn: the decoder
// may accept a flip in the entropy-coded data (it can decode to other
// valid samples) but must not panic, and what it accepts must have the
// frame's shape.
func TestJPEGLSFlips(t *testing.T) {
	for _, name := range []string{"u16_near1", "rgb8_ilv2", "rgb8_ilv1_near2", "py_rst_rgb8_ilv1", "py_lse_u12_near4", "py_4c_ilv1_near2", "py_p2_mrfx"} {
		data := jlsStream(t, name)
		for i := range data {
			for _, mask := range []byte{0xFF, 0x01, 0x80} {
				b := bytes.Clone(data)
				b[i] ^= mask
				jlsCheckShape(t, b, 1<<20)
			}
		}
	}
}

// jlsCheckShape decodes data and, if it is accepted, checks that the
// result is self-consistent.
func jlsCheckShape(t testing.TB, data []byte, max int) {
	t.Helper()
	pix, w, h, nc, p, err := decodeJPEGLS(data, max)
	if err != nil {
		if pix != nil {
			t.Fatalf("samples returned with error %v", err)
		}
		if !strings.HasPrefix(err.Error(), "jpeg-ls: ") {
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
	for i, v := range pix {
		if int(v) >= 1<<p {
			t.Fatalf("sample %d = %d does not fit precision %d", i, v, p)
		}
	}
}

// TestJPEGLSRandom throws seeded random bytes after valid headers, and
// random bytes alone, at the decoder.
func TestJPEGLSRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var heads [][]byte
	for _, name := range []string{"u16", "rgb8_ilv2", "rgb8_ilv1_near2", "py_rst_u8"} {
		b := jlsStream(t, name)
		_, end := jlsFind(t, b, 0xDA)
		heads = append(heads, b[:end])
	}
	for i := range 3000 {
		junk := make([]byte, r.IntN(400))
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		jlsCheckShape(t, jlsCat(heads[i%len(heads)], junk), 1<<20)
		jlsCheckShape(t, jlsCat(heads[i%len(heads)], junk, jlsEOIm), 1<<20)
		jlsCheckShape(t, jlsCat(jlsSOIm, junk), 1<<20)
	}
}

// TestJPEGLSErrorsWrap: errors are plain fmt errors with context, and
// none are sentinel values a caller might compare.
func TestJPEGLSErrorsWrap(t *testing.T) {
	data := jlsCat(jlsSOIm, jlsSOF, jlsSOS, jlsPack(strings.Repeat("0", 40)+"1"), jlsEOIm)
	_, _, _, _, _, err := decodeJPEGLS(data, 100)
	if err == nil || errors.Unwrap(err) == nil {
		t.Fatalf("err = %v, want a wrapped error", err)
	}
	if !strings.Contains(err.Error(), "scan at offset 15") || !strings.Contains(err.Error(), "line 0") {
		t.Errorf("err = %q lacks where", err)
	}
}

// FuzzJPEGLS checks that no input makes the decoder panic, hang or return
// samples inconsistent with the shape it reports; the fixtures seed it.
func FuzzJPEGLS(f *testing.F) {
	for _, c := range jlsCases(f) {
		if c.Expected == "u16" {
			f.Add(jlsStream(f, c.Name))
		}
	}
	f.Add(jlsTiny())
	f.Add(jlsCat(jlsSOIm, jlsSOF, jlsSeg(0xDD, 0, 1), jlsSOS, jlsPack("1111"), []byte{0xFF, 0xD0}, jlsPack("1111"), jlsEOIm))
	f.Add(jlsTiny(jlsLSE1(200, 4, 9, 30, 5)))
	f.Fuzz(func(t *testing.T, data []byte) {
		jlsCheckShape(t, data, 1<<16)
	})
}

// BenchmarkJPEGLS decodes the 512×512 16-bit fixture that dcmcjpls wrote
// (every sample in the regular mode); bytes/s counts decoded output
// (2 bytes a sample).
func BenchmarkJPEGLS(b *testing.B) {
	data := jlsStream(b, "bench_u16_512")
	b.SetBytes(512 * 512 * 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, _, _, err := decodeJPEGLS(data, 512*512); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(512*512*b.N)/b.Elapsed().Seconds()/1e6, "Msamples/s")
}
