package dicom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// j2kCase is one entry of testdata/j2k/cases.json, which
// testdata/gen_j2k.py writes: a codestream (or JP2 file) and the samples
// it must decode to.
type j2kCase struct {
	Name       string
	Width      int
	Height     int
	Components int
	Precision  int
	Signed     bool
	Lossy      bool
	Tool       string
	Origin     string // "original", "opj_decompress" or "pillow"
	Expected   string // "u16", "u16.gz", or "bench_value": j2kBenchValue
}

const j2kDir = "testdata/j2k"

func j2kCases(t testing.TB) []j2kCase { return readCases[j2kCase](t, j2kDir) }

func j2kStream(t testing.TB, name string) []byte {
	t.Helper()
	return readFixture(t, filepath.Join(j2kDir, name+".j2k"))
}

// j2kBenchValue mirrors bench_value in gen_j2k.py: the content of the
// 512×512 benchmark fixture, which has no .u16 file.
func j2kBenchValue(x, y int) uint16 {
	h := uint32(x*73856093) ^ uint32(y*19349663)
	return uint16(20000 + 3*x + 2*y + int(h>>13&1))
}

// j2kExpected returns the samples a case must decode to.
func j2kExpected(t testing.TB, c j2kCase) []uint16 {
	t.Helper()
	return expectedSamples(t, j2kDir, c.Name, c.Expected, c.Width, c.Height, c.Components, j2kBenchValue)
}

// j2kSigned returns a sample's value from its bit pattern.
func j2kSigned(v uint16, prec int, signed bool) int {
	x := int(v)
	if signed && x >= 1<<(prec-1) {
		x -= 1 << prec
	}
	return x
}

// TestJPEG2000Fixtures decodes every fixture. Lossless cases must give
// the original image bit for bit. Lossy (9/7) ones are compared with
// OpenJPEG's decoding: they must match within one level, and the number
// of samples that differ is logged (the float lifting is not OpenJPEG's
// operation for operation).
func TestJPEG2000Fixtures(t *testing.T) {
	for _, c := range j2kCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			data := j2kStream(t, c.Name)
			n := c.Width * c.Height * c.Components
			pix, w, h, nc, p, err := decodeJPEG2000(data, n)
			if err != nil {
				t.Fatalf("%s (%s): %v", c.Name, c.Tool, err)
			}
			if w != c.Width || h != c.Height || nc != c.Components || p != c.Precision {
				t.Fatalf("got %d×%d×%d precision %d, want %d×%d×%d precision %d",
					w, h, nc, p, c.Width, c.Height, c.Components, c.Precision)
			}
			want := j2kExpected(t, c)
			if len(pix) != len(want) {
				t.Fatalf("got %d samples, want %d", len(pix), len(want))
			}
			bad, off1 := 0, 0
			for i := range want {
				if pix[i] == want[i] {
					continue
				}
				d := j2kSigned(pix[i], c.Precision, c.Signed) - j2kSigned(want[i], c.Precision, c.Signed)
				if c.Lossy && (d == 1 || d == -1) {
					off1++
					continue
				}
				if bad < 5 {
					px := i / c.Components
					t.Errorf("sample %d (x %d, y %d, component %d) = %d, want %d",
						i, px%c.Width, px/c.Width, i%c.Components, pix[i], want[i])
				}
				bad++
			}
			if bad > 0 {
				t.Fatalf("%d of %d samples differ (%s)", bad, len(want), c.Tool)
			}
			if off1 > 0 {
				t.Logf("%s: %d of %d samples differ by one level from %s", c.Name, off1, len(want), c.Origin)
			}
			// One sample fewer than the frame holds must be refused.
			if _, _, _, _, _, err := decodeJPEG2000(data, n-1); err == nil || !strings.Contains(err.Error(), "exceed the limit") {
				t.Errorf("maxSamples %d: err = %v, want the limit refused", n-1, err)
			}
		})
	}
}

// j2kSegments returns the main header's marker segments of a codestream
// as a small walker of the test's own finds them: marker, offset of the
// 0xFF, offset just past the segment; it stops at the first SOT.
func j2kSegments(t testing.TB, b []byte) [][3]int {
	t.Helper()
	var segs [][3]int
	for pos := 2; pos+4 <= len(b); {
		if b[pos] != 0xFF {
			t.Fatalf("no marker at %d", pos)
		}
		end := pos + 2 + int(binary.BigEndian.Uint16(b[pos+2:]))
		segs = append(segs, [3]int{int(b[pos+1]), pos, end})
		if b[pos+1] == j2kSOT {
			break
		}
		pos = end
	}
	return segs
}

// j2kFind returns where the first main-header segment with marker m
// starts and ends.
func j2kFind(t testing.TB, b []byte, m int) (at, end int) {
	t.Helper()
	for _, s := range j2kSegments(t, b) {
		if s[0] == m {
			return s[1], s[2]
		}
	}
	t.Fatalf("no marker 0xFF%02X", m)
	return 0, 0
}

// j2kPatch returns a copy of fixture name changed by f.
func j2kPatch(t testing.TB, name string, f func(t testing.TB, b []byte) []byte) []byte {
	t.Helper()
	return f(t, bytes.Clone(j2kStream(t, name)))
}

// j2kSetSIZ returns a patcher that writes v at byte off of SIZ's
// parameters (after Lsiz), n bytes big-endian.
func j2kSetSIZ(off, n int, v uint64) func(t testing.TB, b []byte) []byte {
	return j2kSetIn(j2kSIZ, off, n, v)
}

func j2kSetIn(m, off, n int, v uint64) func(t testing.TB, b []byte) []byte {
	return func(t testing.TB, b []byte) []byte {
		at, _ := j2kFind(t, b, m)
		for i := n - 1; i >= 0; i-- {
			b[at+4+off+i] = byte(v)
			v >>= 8
		}
		return b
	}
}

// j2kInsert returns a patcher that inserts a segment before SOT.
func j2kInsert(seg ...byte) func(t testing.TB, b []byte) []byte {
	return func(t testing.TB, b []byte) []byte {
		at, _ := j2kFind(t, b, j2kSOT)
		return append(append(append([]byte{}, b[:at]...), seg...), b[at:]...)
	}
}

// TestJPEG2000Hostile: invalid or unsupported streams are refused with
// an error that names the problem.
func TestJPEG2000Hostile(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		max  int
		want string
	}{
		{"empty", nil, 1 << 20, "neither a codestream"},
		{"not j2k", []byte{0xFF, 0xD8, 0xFF, 0xE0}, 1 << 20, "neither a codestream"},
		{"jp2 without jp2c", []byte{0, 0, 0, 12, 'j', 'P', ' ', ' ', 0x0D, 0x0A, 0x87, 0x0A}, 1 << 20, "without a 'jp2c'"},
		{"jp2 bad box length", []byte{0, 0, 0, 12, 'j', 'P', ' ', ' ', 0x0D, 0x0A, 0x87, 0x0A, 0, 0, 0, 99, 'j', 'p', '2', 'c'}, 1 << 20, "length 99 invalid"},
		{"SOC only", []byte{0xFF, 0x4F}, 1 << 20, "truncated at offset 2"},
		{"over maxSamples", j2kStream(t, "rgb8_rct"), 23*17*3 - 1, "exceed the limit"},
		{"negative maxSamples", j2kStream(t, "u8_l1"), -1, "exceed the limit"},
		{"2^32 tiles of 1×1", j2kPatch(t, "u8_l1", func(t testing.TB, b []byte) []byte {
			b = j2kSetSIZ(2, 4, 0xFFFFFFFF)(t, b)
			b = j2kSetSIZ(6, 4, 0xFFFFFFFF)(t, b)
			b = j2kSetSIZ(18, 4, 1)(t, b)
			return j2kSetSIZ(22, 4, 1)(t, b)
		}), 1 << 24, "exceed the limit"},
		{"1×1 tiles, one present", j2kPatch(t, "u8_l1", func(t testing.TB, b []byte) []byte {
			b = j2kSetSIZ(18, 4, 1)(t, b)
			return j2kSetSIZ(22, 4, 1)(t, b)
		}), 1 << 24, "tile 1 of 391 is missing"},
		{"zero tile width", j2kPatch(t, "u8_l1", j2kSetSIZ(18, 4, 0)), 1 << 20, "does not cover"},
		{"tile origin after image origin", j2kPatch(t, "u8_offset", j2kSetSIZ(26, 4, 9)), 1 << 20, "does not cover"},
		{"empty image", j2kPatch(t, "u8_l1", j2kSetSIZ(2, 4, 0)), 1 << 20, "empty image area"},
		{"zero components", j2kPatch(t, "u8_l1", j2kSetSIZ(34, 2, 0)), 1 << 20, "Csiz 0"},
		{"precision 17", j2kPatch(t, "u8_l1", j2kSetSIZ(36, 1, 16)), 1 << 20, "precision 17"},
		{"sub-sampling", j2kPatch(t, "u8_l1", j2kSetSIZ(37, 1, 2)), 1 << 20, "sub-sampling 2×1 is not supported"},
		{"33 levels", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 5, 1, 33)), 1 << 20, "33 decomposition levels"},
		{"32 levels", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 5, 1, 32)), 1 << 20, "step sizes for 97 subbands"},
		{"code-block 2^12", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 6, 1, 10)), 1 << 20, "code-block size 2^12×2^6 invalid"},
		{"code-block area", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 6, 2, 0x0808)), 1 << 20, "code-block size 2^10×2^10 invalid"},
		{"code-block style bit 6", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 8, 1, 0x40)), 1 << 20, "reserved bits"},
		{"wavelet 2", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 9, 1, 2)), 1 << 20, "wavelet transform 2 unknown"},
		{"progression 5", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 1, 1, 5)), 1 << 20, "progression order 5 unknown"},
		{"zero layers", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 2, 2, 0)), 1 << 20, "zero quality layers"},
		{"65535 layers", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 2, 2, 65535)), 1 << 20, "cannot hold the packets"},
		{"MCT on one component", j2kPatch(t, "u8_l1", j2kSetIn(j2kCOD, 4, 1, 1)), 1 << 20, "multiple component transform with 1 components"},
		{"quantization style 3", j2kPatch(t, "u8_l1", j2kSetIn(j2kQCD, 0, 1, 0x43)), 1 << 20, "quantization style 3 unknown"},
		{"RGN", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x5E, 0, 5, 0, 0, 3)), 1 << 20, "RGN at offset"},
		{"POC empty", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x5F, 0, 9, 2, 0, 0, 1, 2, 1, 0)), 1 << 20, "is empty or invalid"},
		{"POC order 7", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x5F, 0, 9, 0, 0, 0, 1, 2, 1, 7)), 1 << 20, "progression order 7 unknown"},
		{"POC length", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x5F, 0, 8, 0, 0, 0, 1, 2, 1)), 1 << 20, "not a multiple of 7"},
		{"PPM", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x60, 0, 3, 0)), 1 << 20, "packed packet headers are not supported"},
		{"Part 2 MCT", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x74, 0, 2)), 1 << 20, "marker 0xFF74"},
		{"no EOC", func() []byte { b := j2kStream(t, "u8_l1"); return b[:len(b)-2] }(), 1 << 20, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, _, _, err := decodeJPEG2000(tc.data, tc.max)
			if err == nil {
				t.Fatalf("no error")
			}
			if !strings.HasPrefix(err.Error(), "jpeg 2000: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// j2kCOCQCC returns a patcher that inserts, for component c, a COC and a
// QCC equal to the main COD and QCD: the decoding must not change.
func j2kCOCQCC(c byte) func(t testing.TB, b []byte) []byte {
	return func(t testing.TB, b []byte) []byte {
		at, end := j2kFind(t, b, j2kCOD)
		cod := b[at+4 : end]
		at, end = j2kFind(t, b, j2kQCD)
		qcd := b[at+4 : end]
		coc := append([]byte{c, cod[0] & 1}, cod[5:]...)
		qcc := append([]byte{c}, qcd...)
		seg := append([]byte{0xFF, j2kCOC, 0, byte(len(coc) + 2)}, coc...)
		seg = append(seg, 0xFF, j2kQCC, 0, byte(len(qcc)+2))
		seg = append(seg, qcc...)
		return j2kInsert(seg...)(t, b)
	}
}

// TestJPEG2000COCQCC: COC and QCC are read for their component; one
// with other levels than COD's changes the subband count that QCD must
// cover.
func TestJPEG2000COCQCC(t *testing.T) {
	for _, name := range []string{"u8_l1", "rgb8_rct", "rgb8_ict"} {
		for c := byte(0); c < 3; c++ {
			cs := j2kCases(t)
			var k j2kCase
			for _, x := range cs {
				if x.Name == name {
					k = x
				}
			}
			if int(c) >= k.Components {
				continue
			}
			want, _, _, _, _, err := decodeJPEG2000(j2kStream(t, name), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			got, _, _, _, _, err := decodeJPEG2000(j2kPatch(t, name, j2kCOCQCC(c)), 1<<20)
			if err != nil {
				t.Fatalf("%s component %d: %v", name, c, err)
			}
			if !slicesEqual16(got, want) {
				t.Errorf("%s component %d: samples differ", name, c)
			}
		}
	}
	// A COC for component 5 of 1, and one giving component 0 more levels
	// than QCD has step sizes for.
	if _, _, _, _, _, err := decodeJPEG2000(j2kPatch(t, "u8_l1", j2kCOCQCC(5)), 1<<20); err == nil || !strings.Contains(err.Error(), "component 5 of 1") {
		t.Errorf("COC for a missing component: err = %v", err)
	}
	b := j2kPatch(t, "u8_l1", j2kInsert(0xFF, j2kCOC, 0, 9, 0, 0, 4, 4, 4, 0, 1))
	if _, _, _, _, _, err := decodeJPEG2000(b, 1<<20); err == nil || !strings.Contains(err.Error(), "step sizes for 13 subbands") {
		t.Errorf("COC with 4 levels: err = %v", err)
	}
}

// j2kTileHeader returns a patcher that inserts seg into the first
// tile-part's header (after SOT) and grows Psot to match.
func j2kTileHeader(seg []byte) func(t testing.TB, b []byte) []byte {
	return func(t testing.TB, b []byte) []byte {
		at, end := j2kFind(t, b, j2kSOT)
		psot := binary.BigEndian.Uint32(b[at+6:])
		if psot != 0 {
			binary.BigEndian.PutUint32(b[at+6:], psot+uint32(len(seg)))
		}
		return append(append(append([]byte{}, b[:end]...), seg...), b[end:]...)
	}
}

// TestJPEG2000TileHeader: a tile-part header's COD and QCD override the
// main header's for their tile.
func TestJPEG2000TileHeader(t *testing.T) {
	src := j2kStream(t, "u8_l1")
	at, end := j2kFind(t, src, j2kCOD)
	cod := bytes.Clone(src[at:end])
	at, end = j2kFind(t, src, j2kQCD)
	qcd := bytes.Clone(src[at:end])
	want, _, _, _, _, err := decodeJPEG2000(src, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	same := j2kPatch(t, "u8_l1", j2kTileHeader(append(bytes.Clone(cod), qcd...)))
	got, _, _, _, _, err := decodeJPEG2000(same, 1<<20)
	if err != nil || !slicesEqual16(got, want) {
		t.Fatalf("same COD and QCD in the tile-part header: err = %v", err)
	}
	// The main header made wrong (8 levels, which its QCD cannot cover)
	// is overridden by the tile-part header's right COD and QCD.
	wrong := j2kPatch(t, "u8_l1", func(t testing.TB, b []byte) []byte {
		b = j2kSetIn(j2kCOD, 5, 1, 8)(t, b)
		return j2kTileHeader(append(bytes.Clone(cod), qcd...))(t, b)
	})
	got, _, _, _, _, err = decodeJPEG2000(wrong, 1<<20)
	if err != nil || !slicesEqual16(got, want) {
		t.Fatalf("tile COD overriding a wrong main COD: err = %v", err)
	}
	// A tile-part COD with 8 levels is this tile's, and fails it.
	bad := bytes.Clone(cod)
	bad[4+5] = 8
	b := j2kPatch(t, "u8_l1", j2kTileHeader(bad))
	if _, _, _, _, _, err := decodeJPEG2000(b, 1<<20); err == nil || !strings.Contains(err.Error(), "tile 0: component 0: quantization gives 4 step sizes for 25 subbands") {
		t.Fatalf("wrong tile COD: err = %v", err)
	}
}

// TestJPEG2000Accepted: what may be skipped is skipped.
func TestJPEG2000Accepted(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"COM", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x64, 0, 6, 0, 1, 'h', 'i'))},
		{"TLM", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x55, 0, 4, 0, 0))},
		{"DICOM pad byte", append(j2kStream(t, "u8_l1"), 0)},
		// A POC that reads layer 0 of every resolution in RLCP, then
		// (COD's LRCP) the rest: the one layer of u8_l1 is all read by it.
		{"POC", j2kPatch(t, "u8_l1", j2kInsert(0xFF, 0x5F, 0, 9, 0, 0, 0, 1, 2, 1, 1))},
	} {
		pix, _, _, _, _, err := decodeJPEG2000(tc.data, 1<<20)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want := j2kExpected(t, j2kCase{Name: "u8_l1", Width: 23, Height: 17, Components: 1, Expected: "u16"})
		if !slicesEqual16(pix, want) {
			t.Errorf("%s: samples differ", tc.name)
		}
	}
}

func slicesEqual16(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// j2kCheckShape decodes data, which must not panic, and checks that a
// result it accepts is consistent and within max.
func j2kCheckShape(t testing.TB, data []byte, max int) error {
	pix, w, h, nc, p, err := decodeJPEG2000(data, max)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "jpeg 2000: ") {
			t.Fatalf("error without prefix: %v", err)
		}
		return err
	}
	if w <= 0 || h <= 0 || nc <= 0 || p < 1 || p > 16 || len(pix) != w*h*nc || len(pix) > max {
		t.Fatalf("accepted %d×%d×%d P%d with %d samples (max %d)", w, h, nc, p, len(pix), max)
	}
	for i, v := range pix {
		if int(v) >= 1<<p {
			t.Fatalf("sample %d = %d beyond precision %d", i, v, p)
		}
	}
	return nil
}

// TestJPEG2000Truncated: every fixture cut at many offsets is an error
// (EOC is missing), never a panic.
func TestJPEG2000Truncated(t *testing.T) {
	for _, c := range j2kCases(t) {
		data := j2kStream(t, c.Name)
		step := max(1, len(data)/97)
		for n := 0; n < len(data)-1; n += step {
			if err := j2kCheckShape(t, data[:n], c.Width*c.Height*c.Components); err == nil {
				t.Errorf("%s cut to %d bytes: no error", c.Name, n)
			}
		}
	}
}

// TestJPEG2000Flips: flipped bytes anywhere give an error or a
// well-formed image, never a panic or a hang.
func TestJPEG2000Flips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range j2kCases(t) {
		if c.Name == "bench_u16_512" {
			continue
		}
		data := j2kStream(t, c.Name)
		n := c.Width * c.Height * c.Components
		for range 60 {
			b := bytes.Clone(data)
			for range 1 + rng.IntN(3) {
				b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			}
			j2kCheckShape(t, b, n)
		}
		// Every byte of the main header in turn.
		end, _ := j2kFind(t, data[j2kOffset(data):], j2kSOT)
		for i := 0; i < end; i++ {
			b := bytes.Clone(data)
			b[j2kOffset(data)+i] ^= 0xA5
			j2kCheckShape(t, b, n)
		}
	}
}

// j2kOffset returns where the codestream starts within a fixture (after
// the JP2 boxes before 'jp2c').
func j2kOffset(b []byte) int {
	if i := bytes.Index(b, []byte{0xFF, 0x4F, 0xFF, 0x51}); i >= 0 {
		return i
	}
	return 0
}

// TestJPEG2000ErrorsWrap: errors carry the codec's prefix once.
func TestJPEG2000ErrorsWrap(t *testing.T) {
	_, _, _, _, _, err := decodeJPEG2000([]byte{0xFF, 0x4F, 0xFF, 0x51, 0, 2}, 1<<20)
	if err == nil || strings.Count(err.Error(), "jpeg 2000:") != 1 {
		t.Fatalf("err = %v", err)
	}
	if errors.Unwrap(err) == nil {
		t.Fatalf("err = %v does not wrap", err)
	}
}

// TestJPEG2000PydicomFiles decodes pydicom's test files that have no
// fixture here (too big), where pydicom is installed: each must decode
// without error to the size its DICOM header gives.
func TestJPEG2000PydicomFiles(t *testing.T) {
	dir := "/usr/lib/python3/dist-packages/pydicom/data/test_files"
	for _, tc := range []struct {
		file       string
		w, h, c, p int
	}{
		{"693_J2KI.dcm", 512, 512, 1, 16}, // BitsStored 14; its SIZ says 16
		{"J2K_pixelrep_mismatch.dcm", 512, 512, 1, 13},
		{"GDCMJ2K_TextGBR.dcm", 400, 400, 3, 8},
	} {
		b, err := os.ReadFile(filepath.Join(dir, tc.file))
		if err != nil {
			t.Logf("%s: %v; skipped", tc.file, err)
			continue
		}
		// The first fragment after the (empty) basic offset table: the
		// codestream starts at SOC or, for JP2, at its first box.
		i := bytes.Index(b, []byte{0xFF, 0x4F, 0xFF, 0x51})
		if j := bytes.Index(b, []byte("jP  ")); j >= 4 && (i < 0 || j < i) {
			i = j - 4
		}
		if i < 0 {
			t.Fatalf("%s: no codestream", tc.file)
		}
		frag := b[i:]
		if k := bytes.Index(frag, []byte{0xFE, 0xFF, 0xDD, 0xE0}); k >= 0 {
			frag = frag[:k]
		}
		pix, w, h, nc, p, err := decodeJPEG2000(frag, tc.w*tc.h*tc.c)
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if w != tc.w || h != tc.h || nc != tc.c || p != tc.p || len(pix) != w*h*nc {
			t.Errorf("%s: got %d×%d×%d P%d", tc.file, w, h, nc, p)
		}
	}
}

func FuzzJPEG2000(f *testing.F) {
	for _, c := range j2kCases(f) {
		if c.Name != "bench_u16_512" {
			f.Add(j2kStream(f, c.Name))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j2kCheckShape(t, data, 1<<16)
	})
}

func BenchmarkJPEG2000(b *testing.B) {
	data := j2kStream(b, "bench_u16_512")
	b.SetBytes(512 * 512 * 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, _, _, err := decodeJPEG2000(data, 512*512); err != nil {
			b.Fatal(err)
		}
	}
}

// j2kRadiograph mirrors radiograph in gen_j2k.py: sample (x, y) of a
// w×h 12-bit radiograph's outline with noiseBits of hashed noise.
func j2kRadiograph(w, h, noiseBits, x, y int) uint16 {
	hash := uint32(x*73856093) ^ uint32(y*19349663)
	v := 300 + (x+2*y)/8
	dx, dy := x-w/2, y-h/2
	r2 := dx*dx + 2*dy*dy
	big := (w * 7 / 16) * (w * 7 / 16)
	if r2 < big {
		v += (big - r2) / (big/1500 + 1)
		if (x+y/2)%300 < 40 {
			v += 900
		}
	}
	v += int(hash>>11) & (1<<noiseBits - 1)
	return uint16(min(max(v, 0), 4095))
}

// j2kTiles2x2 returns a codestream of 2×2 tiles, each the single tile of
// the one-tile codestream cs, whose size is a multiple of its code-block
// and precinct sizes and of 2^levels, so that every tile decodes to cs's
// image.
func j2kTiles2x2(b testing.TB, cs []byte) []byte {
	at, _ := j2kFind(b, cs, j2kSOT)
	psot := int(binary.BigEndian.Uint32(cs[at+6:]))
	if psot == 0 || at+psot+2 != len(cs) {
		b.Fatal("not one tile-part")
	}
	w := binary.BigEndian.Uint32(cs[8:])
	h := binary.BigEndian.Uint32(cs[12:])
	out := bytes.Clone(cs[:at])
	out = j2kSetSIZ(2, 4, uint64(2*w))(b, out)
	out = j2kSetSIZ(6, 4, uint64(2*h))(b, out)
	out = j2kSetSIZ(18, 4, uint64(w))(b, out)
	out = j2kSetSIZ(22, 4, uint64(h))(b, out)
	for i := range 4 {
		tile := bytes.Clone(cs[at : at+psot])
		binary.BigEndian.PutUint16(tile[4:], uint16(i))
		out = append(out, tile...)
	}
	return append(out, 0xFF, j2kEOC)
}

// BenchmarkJPEG2000Lossless decodes a 2048×2048 12-bit lossless (5/3)
// radiograph: four 1024×1024 tiles, each bench_u12_1024's.
func BenchmarkJPEG2000Lossless(b *testing.B) {
	data := j2kTiles2x2(b, j2kStream(b, "bench_u12_1024"))
	const n = 2048
	pix, w, h, _, _, err := decodeJPEG2000(data, n*n)
	if err != nil || w != n || h != n {
		b.Fatalf("%d×%d, %v", w, h, err)
	}
	for y := range n {
		for x := range n {
			if want := j2kRadiograph(1024, 1024, 3, x%1024, y%1024); pix[y*n+x] != want {
				b.Fatalf("(%d,%d) = %d, want %d", x, y, pix[y*n+x], want)
			}
		}
	}
	b.SetBytes(n * n * 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, _, _, err := decodeJPEG2000(data, n*n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJPEG2000Lossy decodes a 2048×2048 12-bit irreversible (9/7)
// radiograph compressed 30:1, one tile.
func BenchmarkJPEG2000Lossy(b *testing.B) {
	data := j2kStream(b, "bench_u12_2048_97")
	const n = 2048
	pix, w, h, _, p, err := decodeJPEG2000(data, n*n)
	if err != nil || w != n || h != n || p != 12 {
		b.Fatalf("%d×%d P%d, %v", w, h, p, err)
	}
	// OpenJPEG's decoding is within a few levels of the original at
	// this rate away from edges; a grossly wrong decoder is not.
	far := 0
	for y := range n {
		for x := range n {
			if d := int(pix[y*n+x]) - int(j2kRadiograph(n, n, 6, x, y)); d < -200 || d > 200 {
				far++
			}
		}
	}
	if far > n*n/100 {
		b.Fatalf("%d samples more than 200 from the original", far)
	}
	b.SetBytes(n * n * 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, _, _, err := decodeJPEG2000(data, n*n); err != nil {
			b.Fatal(err)
		}
	}
}

// TestJPEG2000TruncatedTileData cuts the data of a one-tile-part stream
// at many points, with Psot made to match and EOC after it, so that
// packet headers and code-block data run short: an error each time
// (but for POC streams, whose missing trailing packets decode as empty
// as OpenJPEG writes them), never a panic.
func TestJPEG2000TruncatedTileData(t *testing.T) {
	for _, c := range j2kCases(t) {
		data := j2kStream(t, c.Name)
		cs := data[j2kOffset(data):]
		at, _ := j2kFind(t, cs, j2kSOT)
		psot := int(binary.BigEndian.Uint32(cs[at+6:]))
		if psot == 0 || at+psot+2 != len(cs) {
			continue // several tile-parts
		}
		sod := bytes.Index(cs[at:], []byte{0xFF, j2kSOD})
		if sod < 0 {
			t.Fatalf("%s: no SOD", c.Name)
		}
		sod += at + 2
		step := max(1, (at+psot-sod)/61)
		for end := sod; end < at+psot; end += step {
			b := append(bytes.Clone(cs[:end]), 0xFF, j2kEOC)
			binary.BigEndian.PutUint32(b[at+6:], uint32(end-at))
			err := j2kCheckShape(t, b, c.Width*c.Height*c.Components)
			if err == nil && !strings.Contains(c.Name, "poc") {
				t.Errorf("%s: tile data cut to %d of %d bytes: no error", c.Name, end-sod, at+psot-sod)
			}
		}
	}
}
