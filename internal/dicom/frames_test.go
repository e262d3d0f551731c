package dicom

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// frameCase is a case of testdata/frames/cases.json (gen_frames.py).
type frameCase struct {
	Name, File, Frame       string
	Width, Height, Channels int
	Refuse                  string
}

// TestDecodeFrames holds every frame choice on the multi-frame fixtures —
// uncompressed, RLE, JPEG-LS and JPEG Lossless, with a Basic Offset Table,
// an empty one and an Extended Offset Table, one fragment a frame or
// several; an enhanced CT whose frames have their own windows and a shared
// rescale, an MR whose frames have their own rescales; a bitmap whose
// frames run on across bytes — to gen_frames.py's values, within half a
// level; and the refusals to their words.
func TestDecodeFrames(t *testing.T) {
	const dir = "testdata/frames"
	for _, c := range readCases[frameCase](t, dir) {
		t.Run(c.Name, func(t *testing.T) {
			f, err := ParseFrame(c.Frame)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.String(); got != c.Frame {
				t.Errorf("ParseFrame(%q).String() = %q", c.Frame, got)
			}
			b := readFixture(t, filepath.Join(dir, c.File))
			img, err := DecodeWith(bytes.NewReader(b), Options{Frame: f})
			if c.Refuse != "" {
				if err == nil || !strings.Contains(err.Error(), c.Refuse) {
					t.Fatalf("decode: %v, want an error saying %q", err, c.Refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := DecodeConfig(bytes.NewReader(b))
			if err != nil || cfg.Width != c.Width || cfg.Height != c.Height {
				t.Fatalf("config %+v, %v; want %d×%d", cfg, err, c.Width, c.Height)
			}
			expectGolden(t, img, filepath.Join(dir, c.Name+".f32"), c.Channels, 0.5)
		})
	}
}

// TestFrameChoicesDiffer: the fixtures' frame choices are not one image
// under several names — each frame of the enhanced CT decodes differently
// (its own window), and a projection differs from every frame — so that
// TestDecodeFrames would see a decoder that read the wrong frame or
// ignored the functional groups.
func TestFrameChoicesDiffer(t *testing.T) {
	b := readFixture(t, "testdata/frames/enhanced_ct.dcm")
	seen := map[string]string{}
	for _, s := range []string{"1", "2", "3", "4", "max", "mean", "min"} {
		f, _ := ParseFrame(s)
		img, err := DecodeWith(bytes.NewReader(b), Options{Frame: f})
		if err != nil {
			t.Fatal(err)
		}
		pix, _ := rgbOf(img)
		if other, ok := seen[string(pix)]; ok {
			t.Errorf("frame %s decodes as %s does", s, other)
		}
		seen[string(pix)] = s
	}
	if n, err := FrameCount(bytes.NewReader(b)); n != 4 || err != nil {
		t.Errorf("FrameCount: %d, %v; want 4", n, err)
	}
	if _, err := DecodeWith(bytes.NewReader(b), Options{Frame: Frame{Kind: FrameAll}}); err == nil || !strings.Contains(err.Error(), "FrameCount") {
		t.Errorf("Frame all decoded as one image: %v", err)
	}
	// Without a choice: ErrMultiFrame.
	if _, err := Decode(bytes.NewReader(b)); !errors.Is(err, ErrMultiFrame) {
		t.Errorf("no frame chosen: %v, want ErrMultiFrame", err)
	}
}

// TestParseFrame: the choices' spellings and the refused ones.
func TestParseFrame(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Frame
		err  bool
	}{
		{"", Frame{}, false},
		{"first", Frame{Kind: FrameFirst}, false},
		{"Middle", Frame{Kind: FrameMiddle}, false},
		{"last", Frame{Kind: FrameLast}, false},
		{"7", Frame{Kind: FrameNumber, Number: 7}, false},
		{"max", Frame{Kind: FrameMax}, false},
		{"mean", Frame{Kind: FrameMean}, false},
		{"min", Frame{Kind: FrameMin}, false},
		{"all", Frame{Kind: FrameAll}, false},
		{"0", Frame{}, true},
		{"-1", Frame{}, true},
		{"mip", Frame{}, true},
		{"1.5", Frame{}, true},
	} {
		got, err := ParseFrame(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseFrame(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestFrameSingle: every choice of a single-frame image gives its frame,
// but a frame number past 1.
func TestFrameSingle(t *testing.T) {
	b, err := os.ReadFile("testdata/files/ct_rle.dcm")
	if err != nil {
		t.Fatal(err)
	}
	own, err := Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := rgbOf(own)
	for _, s := range []string{"first", "middle", "last", "1", "max", "mean", "min"} {
		f, _ := ParseFrame(s)
		img, err := DecodeWith(bytes.NewReader(b), Options{Frame: f})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if got, _ := rgbOf(img); !bytes.Equal(got, want) {
			t.Errorf("%s: not the image's one frame", s)
		}
	}
	if _, err := DecodeWith(bytes.NewReader(b), Options{Frame: Frame{Kind: FrameNumber, Number: 2}}); err == nil || !strings.Contains(err.Error(), "frame 2 of an image of 1 frame") {
		t.Errorf("frame 2 of 1: %v", err)
	}
}

// TestFrameOffsetTables: offset tables that lie are refused, naming what
// they say, and pixel data that hold fewer frames than Number of Frames
// says are refused, whichever frame is asked for.
func TestFrameOffsetTables(t *testing.T) {
	b := readFixture(t, "testdata/frames/enhanced_ct_rle.dcm")
	// The Basic Offset Table: its item tag, length 16, then four offsets.
	bot := bytes.Index(b, []byte{0xFE, 0xFF, 0x00, 0xE0, 16, 0, 0, 0})
	if bot < 0 {
		t.Fatal("no 16-byte Basic Offset Table in the fixture")
	}
	at := func(k int) int { return bot + 8 + 4*k }
	last, _ := ParseFrame("last")
	for _, c := range []struct {
		name  string
		edit  func([]byte)
		frame Frame
		want  string
	}{
		{"inside a fragment", func(p []byte) { binary.LittleEndian.PutUint32(p[at(2):], binary.LittleEndian.Uint32(p[at(2):])+2) }, last, "inside a fragment"},
		{"not increasing", func(p []byte) { copy(p[at(2):at(3)], p[at(1):at(2)]) }, last, "not past frame 2's"},
		{"frame 1 not at 0", func(p []byte) { p[at(0)] = 8 }, last, "puts frame 1 at byte 8"},
		{"past the data", func(p []byte) { binary.LittleEndian.PutUint32(p[at(3):], 1<<20) }, last, "before frame 4's offset, 1048576"},
		{"past the data, a middle frame", func(p []byte) { binary.LittleEndian.PutUint32(p[at(3):], 1<<20) }, Frame{Kind: FrameNumber, Number: 3}, "before frame 4's offset, 1048576"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := bytes.Clone(b)
			c.edit(p)
			_, err := DecodeWith(bytes.NewReader(p), Options{Frame: c.frame})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want an error saying %q", err, c.want)
			}
		})
	}
	// Number of Frames over what the data hold: native and encapsulated.
	for _, name := range []string{"cine8.dcm", "cine8_rle_nobot.dcm"} {
		p := bytes.Replace(readFixture(t, "testdata/frames/"+name), []byte("IS\x02\x004 "), []byte("IS\x02\x009 "), 1)
		if bytes.Equal(p, readFixture(t, "testdata/frames/"+name)) {
			t.Fatalf("%s: no Number of Frames of 4 to edit", name)
		}
		_, err := DecodeWith(bytes.NewReader(p), Options{Frame: last})
		if err == nil || !(strings.Contains(err.Error(), "9 frames of") || strings.Contains(err.Error(), "hold 4 frames; Number of Frames (0028,0008) says 9")) {
			t.Errorf("%s claiming 9 frames: %v", name, err)
		}
	}
}

// TestTruncatedFrames: a multi-frame fixture cut anywhere before its last
// frame's end is refused when that frame, or a projection, is asked for.
func TestTruncatedFrames(t *testing.T) {
	for _, name := range []string{"cine8", "enhanced_ct_jpegls_frag", "enhanced_ct_jpegll_frag", "cine16_extended", "mask3"} {
		b := readFixture(t, filepath.Join("testdata/frames", name+".dcm"))
		for _, choice := range []string{"last", "max"} {
			f, _ := ParseFrame(choice)
			for n := 0; n < len(b)-8; n++ {
				if _, err := DecodeWith(bytes.NewReader(b[:n]), Options{Frame: f}); err == nil {
					t.Errorf("%s cut at %d of %d bytes decoded (%s)", name, n, len(b), choice)
					break
				}
			}
		}
	}
}

// TestDecodeEach: one pass over a multi-frame object gives each frame as
// decoding it by its number does — every compression and offset table of
// the fixtures, the functional groups' per-frame windows and rescales —
// and a single-frame file's image as frame 1.
func TestDecodeEach(t *testing.T) {
	names := []string{"cine8", "enhanced_ct", "enhanced_ct_implicit", "perframe_rescale", "enhanced_ct_rle",
		"enhanced_ct_jpegls_frag", "enhanced_ct_jpegll_frag", "cine8_rle_nobot", "cine16_extended", "mask3", "rgb_cine", "../files/ct_rle"}
	for _, name := range names {
		b := readFixture(t, filepath.Join("testdata/frames", name+".dcm"))
		n, err := FrameCount(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		err = DecodeEach(bytes.NewReader(b), Options{}, func(k int, img image.Image) error {
			seen++
			if k != seen {
				t.Errorf("%s: frame %d given as %d", name, seen, k)
			}
			return expectFrame(t, name, b, k, img)
		})
		if err != nil || seen != n {
			t.Errorf("%s: %d of %d frames given, %v", name, seen, n, err)
		}
	}
}

// TestDecodeFramesSubset: a subset of a multi-frame object's frames decoded in
// one pass are each the frame its number decodes; frames out of order or
// past the last are refused.
func TestDecodeFramesSubset(t *testing.T) {
	for _, name := range []string{"cine8", "enhanced_ct_jpegls_frag", "enhanced_ct_jpegll_frag", "cine16_extended", "mask3"} {
		b := readFixture(t, filepath.Join("testdata/frames", name+".dcm"))
		n, err := FrameCount(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		want := []int{1, n}
		if n > 2 {
			want = []int{2, n}
		}
		var got []int
		err = DecodeFrames(bytes.NewReader(b), Options{}, want, func(k int, img image.Image) error {
			got = append(got, k)
			return expectFrame(t, name, b, k, img)
		})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: frames %v decoded of %v, %v", name, got, want, err)
		}
		for _, bad := range [][]int{{2, 1}, {1, 1}, {n + 1}, {0}} {
			if err := DecodeFrames(bytes.NewReader(b), Options{}, bad, func(int, image.Image) error { return nil }); err == nil {
				t.Errorf("%s: frames %v decoded", name, bad)
			}
		}
	}
}

// expectFrame holds img, frame k of the file b (name), to the frame its
// number decodes.
func expectFrame(t *testing.T, name string, b []byte, k int, img image.Image) error {
	t.Helper()
	one, err := DecodeWith(bytes.NewReader(b), Options{Frame: Frame{Kind: FrameNumber, Number: k}})
	if err != nil {
		return err
	}
	a, _ := rgbOf(img)
	w, _ := rgbOf(one)
	if !bytes.Equal(a, w) {
		t.Errorf("%s: frame %d differs from its decode by number", name, k)
	}
	return nil
}
