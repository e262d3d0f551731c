package dicom

import (
	"bytes"
	"encoding/binary"
	"image"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// paletteDir holds gen_palette.py's fixtures.
const paletteDir = "testdata/palette"

// paletteCase is a case of testdata/palette/cases.json: a file, and
// either NAME.rgb, pydicom's apply_color_lut made 8-bit by palette.go's
// rule, or the words the decoder's refusal must hold (and what pydicom
// makes of the file).
type paletteCase struct {
	Name, File, Syntax string
	Width, Height      int
	Refuse, Pydicom    string
}

func paletteCases(t testing.TB) []paletteCase { return readCases[paletteCase](t, paletteDir) }

// TestPaletteFixtures holds every PALETTE COLOR fixture — 8- and 16-bit
// indices and tables, a first mapped value above 0 and below (SS, and
// implicit VR's signed pixels), 65536 entries, segmented tables of every
// segment type, big endian, deflated and RLE, both writers' quirks of the
// entries' width — to pydicom's mapping byte for byte, and the refused
// files to their reasons. The files are opened through package image.
func TestPaletteFixtures(t *testing.T) {
	cases := paletteCases(t)
	syntaxes := map[string]bool{}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			b := readFixture(t, filepath.Join(paletteDir, c.File))
			img, format, err := image.Decode(bytes.NewReader(b))
			if c.Refuse != "" {
				if err == nil || !strings.Contains(err.Error(), c.Refuse) || !strings.Contains(err.Error(), "PALETTE COLOR") {
					t.Fatalf("decode: %v, want a PALETTE COLOR error saying %q", err, c.Refuse)
				}
				t.Logf("%v (pydicom: %s)", err, c.Pydicom)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			syntaxes[c.Syntax] = true
			if format != "dicom" {
				t.Fatalf("format %q", format)
			}
			cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
			if err != nil || cfg.Width != c.Width || cfg.Height != c.Height {
				t.Fatalf("config %+v, %v; want %d×%d", cfg, err, c.Width, c.Height)
			}
			m, ok := img.(*image.NRGBA)
			if !ok {
				t.Fatalf("decoded to %T, want *image.NRGBA", img)
			}
			want := readFixture(t, filepath.Join(paletteDir, c.Name+".rgb"))
			if len(want) != 3*c.Width*c.Height {
				t.Fatalf("%d expected samples for %d×%d", len(want), c.Width, c.Height)
			}
			bad := 0
			for i := range c.Width * c.Height {
				got, w := m.Pix[4*i:4*i+4], want[3*i:3*i+3]
				if got[0] != w[0] || got[1] != w[1] || got[2] != w[2] || got[3] != 0xff {
					if bad++; bad <= 5 {
						t.Errorf("pixel %d: %v, want pydicom's %v and alpha 255", i, got, w)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d pixels differ", bad, c.Width*c.Height)
			}
		})
	}
	for _, ts := range []string{tsExplicitLE, tsImplicitLE, tsExplicitBE, tsDeflatedLE, tsRLE} {
		if !syntaxes[ts] {
			t.Errorf("no fixture decoded under transfer syntax %s", ts)
		}
	}
}

// paletteModule is the image module of a w×h PALETTE COLOR image of
// 8-bit indices.
func paletteModule(w, h int) []byte {
	var b []byte
	b = append(b, elem(tagSamples, "US", u16s(1))...)
	b = append(b, elem(tagPhotometric, "CS", []byte("PALETTE COLOR "))...)
	b = append(b, elem(tagRows, "US", u16s(uint16(h)))...)
	b = append(b, elem(tagColumns, "US", u16s(uint16(w)))...)
	b = append(b, elem(tagBitsAllocated, "US", u16s(8))...)
	b = append(b, elem(tagBitsStored, "US", u16s(8))...)
	b = append(b, elem(tagHighBit, "US", u16s(7))...)
	b = append(b, elem(tagPixelRep, "US", u16s(0))...)
	return b
}

// segmentedFile is a 2×2 PALETTE COLOR image of indices 0..3 whose three
// tables are seg, 8-bit words, under a descriptor of n entries.
func segmentedFile(n uint16, seg []byte) []byte {
	return part10(tsExplicitLE, paletteModule(2, 2),
		elem(tagRedPaletteDescriptor, "US", u16s(n, 0, 8)),
		elem(tagRedSegmentedData, "OW", seg),
		elem(tagRedSegmentedData+1, "OW", seg),
		elem(tagRedSegmentedData+2, "OW", seg),
		elem(tagPixelData, "OB", []byte{0, 1, 2, 3}))
}

// TestPaletteHostile: tables a hand-built file gets wrong are refused with
// the tag and the reason, never a panic; what a grayscale image carries of
// the module does not stop it from decoding.
func TestPaletteHostile(t *testing.T) {
	table := make([]byte, 256)
	lutFile := func(desc []byte, data ...[]byte) []byte {
		body := [][]byte{paletteModule(2, 2), elem(tagRedPaletteDescriptor, "US", desc)}
		for c, d := range data {
			body = append(body, elem(tagRedPaletteData+uint32(c), "OW", d))
		}
		return part10(tsExplicitLE, append(body, elem(tagPixelData, "OB", []byte{0, 1, 2, 3}))...)
	}
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"descriptor of 4 bytes", lutFile(u16s(256, 0), table, table, table), "Red Palette Color LUT Descriptor (0028,1101) of 4 bytes"},
		{"empty table", lutFile(u16s(256, 0, 8), nil, nil, nil), "Red Palette Color LUT Data (0028,1201) of 0 bytes"},
		{"bits 0", lutFile(u16s(256, 0, 0), table, table, table), "entries of 0 bits"},
		{"table over 65536 entries", lutFile(u16s(0, 0, 16), make([]byte, 2*maxLUTEntries+2), table, table), "Red Palette Color LUT Data (0028,1201) of 131074 bytes, over the 131072"},
		{"blue shorter", lutFile(u16s(256, 0, 8), table, table, table[:128]), "Blue Palette Color LUT Data (0028,1203) of 128: the tables must be the same length"},
		{"unknown segment type", segmentedFile(4, []byte{0, 1, 7, 3, 1, 0}), "Segmented Red Palette Color LUT Data (0028,1221): a segment of unknown type 3 at word 3"},
		{"linear cut short", segmentedFile(4, []byte{0, 1, 7, 1, 3}), "a linear segment at word 3 is cut short"},
		{"indirect cut short", segmentedFile(4, []byte{0, 1, 7, 2, 1, 0, 0, 0}), "an indirect segment at word 3 is cut short"},
		{"indirect first", segmentedFile(4, []byte{2, 1, 0, 0, 0, 0}), "cannot be the first"},
		{"indirect past the data", segmentedFile(4, []byte{0, 1, 7, 2, 1, 99, 0, 0, 0}), "tables of 1 entries where"},
		{"16-bit words of odd length", part10(tsExplicitLE, paletteModule(2, 2),
			elem(tagRedPaletteDescriptor, "US", u16s(4, 0, 16)),
			elem(tagRedSegmentedData, "OW", []byte{0, 0, 1, 0, 7}),
			elem(tagRedSegmentedData+1, "OW", nil), elem(tagRedSegmentedData+2, "OW", nil),
			elem(tagPixelData, "OB", []byte{0, 1, 2, 3})), "5 bytes: not a whole number of 2-byte words"},
		{"segmented over its bound", part10(tsExplicitLE, paletteModule(2, 2),
			elem(tagRedPaletteDescriptor, "US", u16s(4, 0, 8)),
			elem(tagRedSegmentedData, "OW", make([]byte, maxSegmentedBytes+2)),
			elem(tagPixelData, "OB", []byte{0, 1, 2, 3})), "Segmented Red Palette Color LUT Data (0028,1221) of 524290 bytes"},
		{"16-bit indices a 1-entry table", func() []byte {
			m := bytes.Replace(paletteModule(2, 2), elem(tagBitsAllocated, "US", u16s(8)), elem(tagBitsAllocated, "US", u16s(16)), 1)
			return part10(tsExplicitLE, m, elem(tagRedPaletteDescriptor, "US", u16s(1, 0, 8)),
				elem(tagRedPaletteData, "OW", []byte{9, 0}), elem(tagRedPaletteData+1, "OW", []byte{9, 0}), elem(tagRedPaletteData+2, "OW", []byte{9, 0}),
				elem(tagPixelData, "OW", make([]byte, 8)))
		}(), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img, err := Decode(bytes.NewReader(c.file))
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				// One entry of 16 bits per two bytes: the descriptor's 8
				// bits over 16-bit words, the low byte.
				if p := img.(*image.NRGBA).Pix; p[0] != 9 || p[12] != 9 {
					t.Fatalf("pixels %v, want the one entry 9", p)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "PALETTE COLOR") {
				t.Fatalf("err %v, want a PALETTE COLOR error saying %q", err, c.want)
			}
		})
	}

	// A grayscale image with a broken palette attribute decodes: the
	// module is not its own.
	gray := part10(tsExplicitLE, grayModule(2, 2, 8, 8, 7),
		elem(tagRedPaletteDescriptor, "US", u16s(1)),
		elem(tagRedSegmentedData, "OW", make([]byte, maxSegmentedBytes+2)),
		elem(tagPixelData, "OB", []byte{0, 1, 2, 3}))
	if _, err := Decode(bytes.NewReader(gray)); err != nil {
		t.Errorf("a MONOCHROME2 image with a broken palette attribute: %v", err)
	}
}

// TestPaletteAllocation: a table's length field the file does not back
// allocates no more than the bytes present, and a table over its bound is
// skipped unread.
func TestPaletteAllocation(t *testing.T) {
	claim := func(tag uint32, n uint32) []byte {
		b := elem(tag, "OW", nil)
		return binary.LittleEndian.AppendUint32(b[:len(b)-4], n)
	}
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"data", part10(tsExplicitLE, paletteModule(2, 2), claim(tagRedPaletteData, 2*maxLUTEntries)), "file ends"},
		{"segmented", part10(tsExplicitLE, paletteModule(2, 2), claim(tagRedSegmentedData, maxSegmentedBytes)), "file ends"},
		{"over its bound", part10(tsExplicitLE, paletteModule(2, 2), claim(tagRedSegmentedData, 1<<27)), "file ends"},
		{"huge", part10(tsExplicitLE, paletteModule(2, 2), claim(tagRedSegmentedData, 1<<30)), "broken length"},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Decode(bytes.NewReader(c.file))
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
			t.Errorf("%s: a file of %d bytes allocated %d", c.name, len(c.file), grew)
		}
	}
}

// TestPaletteLinear holds the linear segment's entries to numpy's
// linspace and around, computed by hand: ties to even, one entry, falling.
func TestPaletteLinear(t *testing.T) {
	for _, c := range []struct {
		y0, y1, n int
		want      []uint16
	}{
		{0, 1, 2, []uint16{0, 1}},        // 0.5 → 0 (even), 1
		{1, 2, 2, []uint16{2, 2}},        // 1.5 → 2 (even), 2
		{10, 0, 4, []uint16{8, 5, 2, 0}}, // 7.5 → 8, 5, 2.5 → 2, 0
		{3, 9, 1, []uint16{9}},
		{5, 5, 3, []uint16{5, 5, 5}},
	} {
		e := &segmentExpander{}
		if err := e.linear(c.y0, c.y1, c.n, 0); err != nil {
			t.Fatal(err)
		}
		if !slicesEqual16(e.out, c.want) {
			t.Errorf("linear %d→%d over %d: %v, want %v", c.y0, c.y1, c.n, e.out, c.want)
		}
	}
}

// FuzzPalette: no PALETTE COLOR file — the fixtures, refused ones
// included, mutated — panics the decoder, loops, or decodes to an empty
// image.
func FuzzPalette(f *testing.F) {
	for _, c := range paletteCases(f) {
		f.Add(readFixture(f, filepath.Join(paletteDir, c.File)))
	}
	f.Add(segmentedFile(4, []byte{0, 1, 7, 2, 2, 0, 0, 0, 0}))
	f.Add(segmentedFile(0, []byte{0, 1, 7, 1, 0xff, 9, 2, 0xff, 3, 0, 0, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if cfg, err := DecodeConfig(bytes.NewReader(b)); err == nil && int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
			t.Fatalf("config of %d×%d passed", cfg.Width, cfg.Height)
		}
		img, err := Decode(bytes.NewReader(b))
		if err == nil && (img.Bounds().Dx() <= 0 || img.Bounds().Dy() <= 0) {
			t.Fatalf("an empty image decoded")
		}
	})
}
