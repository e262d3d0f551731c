package data

import (
	"encoding/json"
	"image"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// TestFormatsGolden: every format a folder reads decodes to what PIL
// decodes (testdata/gen_formats.py wrote the files and formats.json with
// Pillow 9.4: Image.open(path).convert("RGB"), as torchvision's
// ImageFolder loads an image): BMP (24-bit, 16 colours, gray), TIFF
// (uncompressed, LZW, deflate, gray), WebP (lossless, with alpha; lossy,
// of even and odd sizes, with alpha: libwebp's limited-range colours and
// chroma filter), PPM, PGM and PBM — the same bytes, gray where PIL opens
// the file as gray — and JPEG (4:2:0, 4:2:2, 4:4:4, progressive, gray)
// within the inverse DCT's rounding. The folder loader reads a class of
// them all.
func TestFormatsGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/formats.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		File          string
		Width, Height int
		Gray          bool
		RGB           []int
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 20 {
		t.Fatalf("%d cases in formats.json", len(cases))
	}
	dir := t.TempDir()
	for _, tc := range cases {
		path := filepath.Join("testdata", "formats", tc.File)
		d, err := decodeImage(path, dicom.Options{}, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.File, err)
			continue
		}
		if d.w != tc.Width || d.h != tc.Height || d.gray != tc.Gray {
			t.Errorf("%s: %d×%d gray %v, PIL %d×%d gray %v", tc.File, d.w, d.h, d.gray, tc.Width, tc.Height, tc.Gray)
			continue
		}
		pix := d.pix
		if d.gray {
			pix = grayToRGB(pix)
		}
		plane := d.w * d.h
		worst, total := 0, 0
		for k := range plane {
			for c := range 3 {
				diff := int(pix[c*plane+k]) - tc.RGB[3*k+c]
				worst = max(worst, diff, -diff)
				total += max(diff, -diff)
			}
		}
		// JPEG: Go's inverse DCT rounds otherwise than libjpeg-turbo's, by a
		// level or two here and there: a mean of 0.036–0.046 on these files
		// (the image package's colour matrix made it 0.21 on 4:4:4, its
		// replicated chroma 3.8 on 4:2:0; the 4:2:0 filter's rounding of
		// the right pixel as the left's 0.11).
		maxDiff, maxMean := 0, 0.0
		if strings.HasSuffix(tc.File, ".jpg") || strings.HasSuffix(tc.File, ".jpeg") {
			maxDiff, maxMean = 3, 0.08
		}
		if mean := float64(total) / float64(3*plane); worst > maxDiff || mean > maxMean {
			t.Errorf("%s: values differ from PIL's by %d at most, %.3f on average (want at most %d, %.2f)", tc.File, worst, mean, maxDiff, maxMean)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "all", tc.File), raw)
	}
	m := mustLoad(t, "folder:"+dir)
	if m.Len() != len(cases) || m.Channels() != 3 {
		t.Errorf("a class of every format: %s", m)
	}
}

// TestDecoderPanic: a decoder that panics on a file fails that file's
// load with an error naming it; the run goes on.
func TestDecoderPanic(t *testing.T) {
	image.RegisterFormat("panics", "PANIC", func(io.Reader) (image.Image, error) { panic("index out of range") },
		func(io.Reader) (image.Config, error) { return image.Config{Width: 2, Height: 2}, nil })
	path := filepath.Join(t.TempDir(), "bad.png")
	writeFile(t, path, []byte("PANIC and more"))
	_, err := decodeImage(path, dicom.Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "bad.png") || !strings.Contains(err.Error(), "the decoder failed: index out of range") {
		t.Errorf("decoding a file whose decoder panics: %v", err)
	}
}
