package data

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// TestGray16: a 16-bit grayscale PNG of 12-bit values is read by its high
// bytes and counted narrow; through its own range (WindowRange) its
// minimum is black and its maximum white; through a window C,W as the
// window's linear VOI maps its values, and three windows make RGB.
func TestGray16(t *testing.T) {
	dir := t.TempDir()
	img := image.NewGray16(image.Rect(0, 0, 5, 3))
	for i := range 15 {
		img.SetGray16(i%5, i/5, color.Gray16{Y: uint16(100 + 250*i)}) // 100 … 3600
	}
	for _, c := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(dir, c), 0o755)
		f, err := os.Create(filepath.Join(dir, c, "x.png"))
		if err != nil {
			t.Fatal(err)
		}
		png.Encode(f, img)
		f.Close()
	}
	p := filepath.Join(dir, "a", "x.png")
	d, err := decodeImage(p, dicom.Options{}, nil)
	if err != nil || !d.gray || !d.narrow || d.pix[0] != 100>>8 || d.pix[14] != 3600>>8 {
		t.Errorf("high bytes: %v, %v (narrow %v)", d.pix, err, d.narrow)
	}
	d, err = decodeImage(p, dicom.Options{OwnRange: true}, nil)
	if err != nil || d.narrow || d.pix[0] != 0 || d.pix[14] != 255 || d.pix[7] != uint8(math.Round(7.0/14*255)) {
		t.Errorf("own range: %v, %v", d.pix, err)
	}
	w := dicom.Window{Center: 1000, Width: 1000}
	d, err = decodeImage(p, dicom.Options{Windows: []dicom.Window{w}}, nil)
	if err != nil || d.pix[3] != uint8(math.Round(w.Level(850)*255)) || d.pix[0] != 0 || d.pix[14] != 255 {
		t.Errorf("window 1000,1000: %v, %v", d.pix, err)
	}
	d, err = decodeImage(p, dicom.Options{Windows: []dicom.Window{w, {Center: 2000, Width: 4000}, {Center: 3000, Width: 100}}}, nil)
	if err != nil || d.gray || len(d.pix) != 45 {
		t.Errorf("three windows: gray %v, %d bytes, %v", d.gray, len(d.pix), err)
	}
	spec, _ := ParseSpec("folder:" + dir)
	im, err := LoadFitted(spec, Fit{})
	if n, first := im.Narrow16(); err != nil || n != 2 || first != p {
		t.Errorf("Narrow16 %d, %q (%v); want 2, the first %s", n, first, err, p)
	}
	if note := Narrow16Note(im.Narrow16()); !strings.Contains(note, "--window range") {
		t.Errorf("note %q", note)
	}
	if im, err = LoadFitted(spec, Fit{Window: WindowRange}); err != nil || im.narrow16 != 0 {
		t.Errorf("with a window range: %d narrow (%v)", im.narrow16, err)
	}
}
