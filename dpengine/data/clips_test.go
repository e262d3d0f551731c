package data

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// TestClipFrames: t frames of n picked evenly from the first to the last,
// as torchvision's UniformTemporalSubsample's floor of linspace picks them.
func TestClipFrames(t *testing.T) {
	for _, c := range []struct {
		n, t int
		want []int
	}{
		{4, 4, []int{1, 2, 3, 4}},
		{10, 4, []int{1, 4, 7, 10}}, // linspace(0, 9, 4) = 0, 3, 6, 9
		{11, 4, []int{1, 4, 7, 11}}, // 0, 3.33, 6.67, 10
		{3, 5, []int{1, 1, 2, 2, 3}},
		{7, 1, []int{1}},
		{2, 3, []int{1, 1, 2}},
	} {
		if got := clipFrames(c.n, c.t); !slices.Equal(got, c.want) {
			t.Errorf("clipFrames(%d, %d) = %v, want %v", c.n, c.t, got, c.want)
		}
	}
}

// TestClipView: a folder of multi-frame DICOM objects read as clips of T
// frames — each clip its file's picked frames, each frame filled as the
// frames' View fills it, laid out (C,T,H,W); one augmentation a clip, so
// that all its frames flip alike; a file of one frame refused.
func TestClipView(t *testing.T) {
	const frames = "../../internal/dicom/testdata/frames"
	dir := t.TempDir()
	for rel, fixture := range map[string]string{"a/cine.dcm": "cine8.dcm", "a/ct.dcm": "enhanced_ct_rle.dcm", "b/mri.dcm": "perframe_rescale.dcm", "b/long.dcm": "cine16_extended.dcm"} {
		b, err := os.ReadFile(filepath.Join(frames, fixture))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	const T, H, W = 5, 16, 16
	im, err := LoadFitted(spec, Fit{Height: H, Width: W, Clip: T})
	if err != nil {
		t.Fatal(err)
	}
	if im.Len() != 4*T || im.NumUsers() != 0 {
		t.Fatalf("%d frames of %d users, want %d of none", im.Len(), im.NumUsers(), 4*T)
	}
	fv, err := NewView(im, Preprocess{Channels: 3, Height: H, Width: W, Augment: Augment{Flip: true}})
	if err != nil {
		t.Fatal(err)
	}
	cv, err := NewClipView(fv, T)
	if err != nil {
		t.Fatal(err)
	}
	if cv.Len() != 4 || !slices.Equal(cv.SampleShape(), []int{3, T, H, W}) {
		t.Fatalf("%d clips of %v", cv.Len(), cv.SampleShape())
	}
	// The frames each file gives: 4 frames picked 1,1,2,3,4 for T = 5; 3
	// frames (cine16_extended) 1,1,2,2,3.
	for i := range cv.Len() {
		n := 4
		if strings.HasSuffix(cv.SamplePath(i), "long.dcm") {
			n = 3
		}
		for k, f := range clipFrames(n, T) {
			one, err := decodeImage(cv.SamplePath(i), dicomFrame(f), nil)
			if err != nil {
				t.Fatal(err)
			}
			fh, fw := Fit{Height: H, Width: W}.size(one.h, one.w)
			want := fitPixels(one.pix, 1, one.h, one.w, Fit{Height: H, Width: W})
			if got := im.Pixels(i*T + k); fh != H || fw != W || !slices.Equal(got, want) {
				t.Errorf("clip %d (%s), frame %d: not frame %d of its file", i, cv.SamplePath(i), k, f)
			}
		}
	}
	// The layout, and one flip a clip.
	per := 3 * T * H * W
	x := make([]float32, 4*per)
	idx := []int{0, 1, 2, 3}
	if err := cv.Fill(x, nil, idx, nil); err != nil {
		t.Fatal(err)
	}
	plain := make([]float32, 3*H*W)
	for i := range 4 {
		for k := range T {
			fv.Fill(plain, nil, []int{i*T + k}, nil)
			for c := range 3 {
				got := x[i*per+(c*T+k)*H*W : i*per+(c*T+k+1)*H*W]
				if !slices.Equal(got, plain[c*H*W:(c+1)*H*W]) {
					t.Fatalf("clip %d, channel %d, time %d: not the frame's fill", i, c, k)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	flipped := 0
	for range 8 {
		if err := cv.Fill(x, nil, idx, rng); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			same := 0
			for k := range T {
				fv.Fill(plain, nil, []int{i*T + k}, nil)
				if slices.Equal(x[i*per+k*H*W:i*per+(k+1)*H*W], plain[:H*W]) {
					same++
				}
			}
			if same != 0 && same != T {
				t.Fatalf("clip %d: %d of its %d frames flipped", i, T-same, T)
			}
			if same == 0 {
				flipped++
			}
		}
	}
	if flipped == 0 || flipped == 32 {
		t.Errorf("%d of 32 clips flipped", flipped)
	}
	// A single image cannot be a clip.
	b, err := os.ReadFile(filepath.Join(dicomFiles, "gray8.dcm"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "b", "one.dcm"), b, 0o644)
	if _, err := LoadFitted(spec, Fit{Height: H, Width: W, Clip: T}); err == nil || !strings.Contains(err.Error(), "one.dcm: a single image") {
		t.Errorf("a single image as a clip: %v", err)
	}
}

// dicomFrame is the options that decode frame k.
func dicomFrame(k int) dicom.Options {
	return dicom.Options{Frame: dicom.Frame{Kind: dicom.FrameNumber, Number: k}}
}
