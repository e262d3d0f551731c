package pnm

import (
	"bytes"
	"image"
	"strings"
	"testing"
)

// TestDecode: every format, comments and whitespace where the format
// allows them, maxvals other than 255 (8 and 16 bits) scaled and rounded,
// bitmaps' 1 as black; decoded through package image's registry as well.
func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		w, h int
		gray bool
		want []uint8 // gray values, or R, G, B per pixel
	}{
		{"P1", "P1\n# a comment\n3 2\n0 1 0\n1 1 0\n", 3, 2, true, []uint8{255, 0, 255, 0, 0, 255}},
		{"P1 packed digits", "P1 3 2 010110", 3, 2, true, []uint8{255, 0, 255, 0, 0, 255}},
		{"P2 maxval 15", "P2 2 2 15\n0 15\n# mid\n7 8", 2, 2, true, []uint8{0, 255, 119, 136}},
		{"P2 maxval 255", "P2\t2 1\r\n255 3 250", 2, 1, true, []uint8{3, 250}},
		{"P3 maxval 1000", "P3 2 1 1000 0 500 1000 1 2 999", 2, 1, false, []uint8{0, 128, 255, 0, 1, 255}},
		{"P4", "P4\n10 2\n" + string([]byte{0b10100000, 0b01000000, 0b00000000, 0b11000000}), 10, 2, true,
			[]uint8{0, 255, 0, 255, 255, 255, 255, 255, 255, 0, 255, 255, 255, 255, 255, 255, 255, 255, 0, 0}},
		{"P5", "P5 # comment in the header\n3 1 255\n" + string([]byte{0, 128, 255}), 3, 1, true, []uint8{0, 128, 255}},
		{"P5 maxval 100", "P5 2 1 100 " + string([]byte{50, 100}), 2, 1, true, []uint8{128, 255}},
		{"P5 16-bit", "P5 2 1 65535 " + string([]byte{0x80, 0x00, 0xff, 0xff}), 2, 1, true, []uint8{128, 255}},
		{"P6", "P6 2 1 255\n" + string([]byte{1, 2, 3, 250, 251, 252}), 2, 1, false, []uint8{1, 2, 3, 250, 251, 252}},
		{"P6 16-bit maxval 1023", "P6 1 1 1023\n" + string([]byte{0x03, 0xff, 0x02, 0x00, 0x00, 0x01}), 1, 1, false, []uint8{255, 128, 0}},
	} {
		cfg, err := DecodeConfig(strings.NewReader(tc.in))
		if err != nil || cfg.Width != tc.w || cfg.Height != tc.h {
			t.Errorf("%s: DecodeConfig = %+v, %v; want %d×%d", tc.name, cfg, err, tc.w, tc.h)
			continue
		}
		img, format, err := image.Decode(strings.NewReader(tc.in))
		if err != nil || format != "pnm" {
			t.Errorf("%s: image.Decode: format %q, %v", tc.name, format, err)
			continue
		}
		var got []uint8
		switch m := img.(type) {
		case *image.Gray:
			if !tc.gray {
				t.Errorf("%s: decoded gray, want RGB", tc.name)
			}
			got = m.Pix
		case *image.NRGBA:
			if tc.gray {
				t.Errorf("%s: decoded RGB, want gray", tc.name)
			}
			for i := 0; i < len(m.Pix); i += 4 {
				if m.Pix[i+3] != 255 {
					t.Errorf("%s: alpha %d, want opaque", tc.name, m.Pix[i+3])
				}
				got = append(got, m.Pix[i:i+3]...)
			}
		default:
			t.Fatalf("%s: decoded %T", tc.name, img)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s: pixels %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDecodeErrors: each malformed file is refused with what is wrong.
func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "magic number"},
		{"P7 1 1 255\n", "magic number"},
		{"P5 x 1 255\n", "width starts with"},
		{"P5 0 1 255\n", "width is 0"},
		{"P5 1 1 0\n", "maxval is 0"},
		{"P5 1 1 65536\n", "maxval over 65535"},
		{"P5 99999999 1 255\n", "width over"},
		{"P5 65536 65536 255\n", "over the decoder's limit"},
		{"P5 2 2 255", "header ends without its raster"},
		{"P5 2 2 255x", "after the header"},
		{"P5 2 2 255\n\x01\x02\x03", "row 1 of 2: unexpected EOF"},
		{"P5 2 1 100\n\x01\xff", "sample 255 over the maxval 100"},
		{"P5 1 1 300\n\x01\x2d", "sample 301 over the maxval 300"},
		{"P2 2 1 10 3 11", "over 10"},
		{"P2 2 1 10 3", "sample 1 of 2: unexpected EOF"},
		{"P1 2 1 0 2", "pixel 1 is '2'"},
		{"P4 9 2\n\x00\x00\x00", "row 1 of 2"},
		{"P3 1 1 255 1 2 # the end", "sample 2 of 3"},
	} {
		_, err := Decode(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

// FuzzDecode: no input makes Decode panic, and what it decodes has the
// size DecodeConfig reads.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"P1 2 2 0101", "P2 2 1 7 1 7", "P3 1 1 255 1 2 3", "P4 8 1 \x81", "P5 2 1 255 \x00\xff", "P6 1 1 65535 \x00\x01\x00\x02\x00\x03", "P5 #c\n1 1 1 \x01"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, cerr := DecodeConfig(bytes.NewReader(b))
		if cerr == nil && int64(cfg.Width)*int64(cfg.Height) > 1<<20 {
			return // a valid header of a large image: not this fuzzer's memory
		}
		img, err := Decode(bytes.NewReader(b))
		if err != nil {
			return
		}
		if cerr != nil {
			t.Fatalf("Decode succeeded where DecodeConfig failed: %v", cerr)
		}
		if r := img.Bounds(); r.Dx() != cfg.Width || r.Dy() != cfg.Height {
			t.Fatalf("decoded %v, config %d×%d", r, cfg.Width, cfg.Height)
		}
	})
}
