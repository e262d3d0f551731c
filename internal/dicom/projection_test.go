package dicom

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// grayObject is a w×h MONOCHROME2 16-bit object of frames (each w·h
// stored values), rescaled by intercept and windowed by the window
// (40, 400) where window.
func grayObject(w, h int, intercept int, window bool, frames ...[]uint16) []byte {
	body := [][]byte{grayModule(w, h, 16, 16, 15)}
	if len(frames) > 1 {
		body = append(body, elem(tagFrames, "IS", []byte(fmt.Sprintf("%-2d", len(frames)))))
	}
	if window {
		body = append(body, elem(tagWindowCenter, "DS", []byte("40")), elem(tagWindowWidth, "DS", []byte("400 ")))
	}
	ic := fmt.Sprint(intercept)
	if len(ic)%2 == 1 {
		ic += " "
	}
	body = append(body, elem(tagIntercept, "DS", []byte(ic)), elem(tagSlope, "DS", []byte("1 ")))
	var pix []byte
	for _, f := range frames {
		pix = append(pix, u16s(f...)...)
	}
	body = append(body, elem(tagPixelData, "OW", pix))
	return part10("1.2.840.10008.1.2.1", body...)
}

// TestProjection: a projection of single-frame objects — a series' slices,
// each with a rescale of its own — is the multi-frame projection of the
// same Modality LUT outputs, windowed by the first slice's window (and by
// the user's, where given); what cannot be combined is refused.
func TestProjection(t *testing.T) {
	// Three slices of 3×2 pixels, their intercepts 0, 250 and -120: the
	// multi-frame object holds their stored values plus their
	// intercepts, read with none.
	raw := [][]uint16{{100, 300, 50, 400, 120, 90}, {10, 30, 200, 0, 60, 5}, {400, 150, 300, 500, 130, 220}}
	icpt := []int{0, 250, -120}
	var shifted [][]uint16
	var slices [][]byte
	for k, f := range raw {
		s := make([]uint16, len(f))
		for i, v := range f {
			s[i] = uint16(int(v) + icpt[k] + 200)
		}
		shifted = append(shifted, s)
		slices = append(slices, grayObject(3, 2, icpt[k], k == 0, f))
	}
	multi := grayObject(3, 2, -200, true, shifted...)
	for _, kind := range []string{"max", "mean", "min"} {
		for _, windows := range [][]Window{nil, {{Center: 100, Width: 300}}} {
			f, _ := ParseFrame(kind)
			want, err := DecodeWith(bytes.NewReader(multi), Options{Frame: f, Windows: windows})
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewProjection(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range slices {
				if err := p.Add(bytes.NewReader(s)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := p.Image(Options{Windows: windows})
			if err != nil {
				t.Fatal(err)
			}
			g, _ := rgbOf(got)
			w, _ := rgbOf(want)
			if p.Len() != 3 || !bytes.Equal(g, w) {
				t.Errorf("%s projection, windows %v: %v of %d slices, want the multi-frame object's %v", kind, windows, g, p.Len(), w)
			}
			// Without the rescales the maximum would be slice 3's
			// everywhere stored values are largest: not the same image.
			if kind == "max" && windows == nil {
				q, _ := NewProjection(f)
				for k := range raw {
					q.Add(bytes.NewReader(grayObject(3, 2, 0, k == 0, raw[k])))
				}
				img, _ := q.Image(Options{})
				if n, _ := rgbOf(img); bytes.Equal(n, w) {
					t.Errorf("the projection is the same without the slices' rescales: the test cannot see them")
				}
			}
		}
	}

	f, _ := ParseFrame("max")
	for _, c := range []struct {
		name   string
		first  []byte
		second []byte
		want   string
	}{
		{"size", slices[0], grayObject(2, 3, 0, false, raw[1]), "an image of 3×2 pixels (rows × columns) in a projection of images of 2×3"},
		{"frames", slices[0], grayObject(3, 2, 0, false, raw[1], raw[2]), "an image of 2 frames"},
		{"photometric", slices[0], bytes.Replace(slices[1], []byte("MONOCHROME2"), []byte("MONOCHROME1"), 1), "a MONOCHROME1 image in a projection of MONOCHROME2 images"},
	} {
		p, _ := NewProjection(f)
		if err := p.Add(bytes.NewReader(c.first)); err != nil {
			t.Fatal(err)
		}
		if err := p.Add(bytes.NewReader(c.second)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := NewProjection(Frame{Kind: FrameMiddle}); err == nil {
		t.Error("a projection of kind middle made")
	}
	p, _ := NewProjection(f)
	if _, err := p.Image(Options{}); err == nil {
		t.Error("an image of no slices")
	}
	if err := p.Add(bytes.NewReader(part10("1.2.840.10008.1.2.1", elem(tagPatientID, "LO", []byte("P1"))))); !errors.Is(err, ErrNoImage) {
		t.Errorf("an object without an image: %v, want ErrNoImage", err)
	}
	p.Add(bytes.NewReader(slices[0]))
	if _, err := p.Image(Options{Windows: []Window{{Center: 1, Width: 0}}}); err == nil {
		t.Error("a window of width 0 taken")
	}
}
