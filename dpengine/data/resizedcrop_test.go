package data

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestResizedCropGolden compares a random resized crop's box, resized to
// the input and flipped, with torchvision's resized_crop and flip in
// PyTorch 1.13 (testdata/gen_resized_crop.py wrote
// testdata/resized_crop.json): boxes that grow, shrink (antialiased) or
// keep their size, a box of one pixel.
func TestResizedCropGolden(t *testing.T) {
	var cases []struct {
		Name              string
		Src               [][]int
		Top, Left, BH, BW int
		H, W              int
		Flip              bool
		Want              []float64
	}
	readGolden(t, "resized_crop.json", &cases)
	for _, tc := range cases {
		// Stored at another size than the input: the box is the stored
		// image's, whatever the view's resize.
		v := mustView(t, goldenImage(t, tc.Src), Preprocess{Channels: 1, Height: tc.H, Width: tc.W, Resize: Resize{Crop: true}})
		x := make([]float32, tc.H*tc.W)
		v.fillOne(x, 0, augDraw{box: true, top: tc.Top, left: tc.Left, bh: tc.BH, bw: tc.BW, flip: tc.Flip})
		for k, want := range tc.Want {
			if got := float64(x[k]) * 255; !near(got, want, 2e-3) {
				t.Errorf("%s: value %d = %.5f, want %.5f", tc.Name, k, got, want)
			}
		}
	}
}

// TestResizedCropDraws: the boxes are RandomResizedCrop's — each within
// the image, its area a fraction of the image's in [min, max] and its
// aspect ratio in [3/4, 4/3] but for the sides' rounding, at every place
// (the first row and column and the last reached); an image no box of
// those ratios fits in often enough (1×60) falls back to the centre crop
// of the widest box its ratios allow; a fill with rrc draws a box per
// sample, none without a generator (evaluation: the view's resize), and
// allocates nothing in the steady state.
func TestResizedCropDraws(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range []AreaRange{{0.08, 1}, {0.5, 0.5}, {0.9, 1}} {
		const h, w = 40, 60
		sawTop, sawLeft, sawEnd := false, false, false
		for range 4000 {
			top, left, bh, bw := resizedCropBox(rng, h, w, r)
			if top < 0 || left < 0 || bh < 1 || bw < 1 || top+bh > h || left+bw > w {
				t.Fatalf("%v: box %d,%d %d×%d outside %d×%d", r, top, left, bh, bw, h, w)
			}
			frac := float64(bh*bw) / (h * w)
			// Rounding moves each side by at most ½.
			slack := (float64(bh+bw)/2 + 0.25) / (h * w)
			if frac < r.Min-slack || frac > r.Max+slack {
				t.Fatalf("%v: box %d×%d is %.3f of the area", r, bh, bw, frac)
			}
			ratio := float64(bw) / float64(bh)
			if lo, hi := (float64(bw)-0.5)/(float64(bh)+0.5), (float64(bw)+0.5)/(float64(bh)-0.5); hi < 3.0/4 || lo > 4.0/3 {
				t.Fatalf("%v: box %d×%d of ratio %.3f", r, bh, bw, ratio)
			}
			sawTop = sawTop || top == 0
			sawLeft = sawLeft || left == 0
			sawEnd = sawEnd || top+bh == h && left+bw == w
		}
		if !sawTop || !sawLeft || !sawEnd {
			t.Errorf("%v: boxes at the first row %v, column %v, at the far corner %v", r, sawTop, sawLeft, sawEnd)
		}
	}
	// 1×60: ratio 60 — no draw fits; the centre crop 1×1 (round(4/3)).
	for range 20 {
		if top, left, bh, bw := resizedCropBox(rng, 1, 60, AreaRange{0.08, 1}); bh != 1 || bw != 1 || top != 0 || left != 29 {
			t.Errorf("1×60: box %d,%d %d×%d, want the centre 0,29 1×1", top, left, bh, bw)
		}
	}
	// 50×10 (ratio 0.2): the centre 13×10 box (10/0.75 rounded to even).
	top, left, bh, bw := 0, 0, 0, 0
	for range 200 {
		if top, left, bh, bw = resizedCropBox(rng, 50, 10, AreaRange{0.99, 1}); bh == 13 {
			break
		}
	}
	if bh != 13 || bw != 10 || top != 18 || left != 0 {
		t.Errorf("50×10: box %d,%d %d×%d, want the centre 18,0 13×10", top, left, bh, bw)
	}

	a, err := ParseAugment("rrc=0.25,flip")
	if err != nil || a.ResizedCrop != (AreaRange{0.25, 1}) || !a.Flip || a.String() != "rrc=0.25-1,flip" {
		t.Fatalf("rrc=0.25,flip: %+v %v (%s)", a, err, a)
	}
	pix := make([]uint8, 3*30*40)
	for i := range pix {
		pix[i] = uint8(i * 7)
	}
	v := mustView(t, mustImages(t, 3, 30, 40, pix, []int64{0}), Preprocess{Height: 16, Width: 16, Augment: a})
	plain := mustView(t, mustImages(t, 3, 30, 40, pix, []int64{0}), Preprocess{Height: 16, Width: 16})
	eval, base := make([]float32, 3*16*16), make([]float32, 3*16*16)
	if err := v.Fill(eval, nil, []int{0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := plain.Fill(base, nil, []int{0}, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eval, base) {
		t.Error("evaluation (no generator) is not the plain resize")
	}
	x := make([]float32, 4*3*16*16)
	idx := []int{0, 0, 0, 0}
	g := rand.New(rand.NewPCG(1, 1))
	if err := v.Fill(x, nil, idx, g); err != nil {
		t.Fatal(err)
	}
	distinct := 0
	for k := 1; k < 4; k++ {
		if !slices.Equal(x[k*768:(k+1)*768], x[:768]) {
			distinct++
		}
	}
	if distinct == 0 {
		t.Error("four draws of one image filled the same values")
	}
	if n := testing.AllocsPerRun(50, func() { v.Fill(x, nil, idx, g) }); n > 0 && !raceEnabled {
		t.Errorf("a fill with rrc allocates %v times", n)
	}

	for _, tc := range []struct{ in, want string }{
		{"rrc=0", "0 < min ≤ max ≤ 1"},
		{"rrc=0.5-0.2", "0 < min ≤ max ≤ 1"},
		{"rrc=0.5-1.5", "0 < min ≤ max ≤ 1"},
		{"rrc=x", "want rrc, rrc=MIN or rrc=MIN-MAX"},
		{"rrc,crop=4", "give one"},
	} {
		if _, err := ParseAugment(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestFitWhole: a whole fit (for a random resized crop) keeps each large
// image whole, its shorter side shrunk to the centre crop's (18 for a
// 16×16 input): PIL's resize of the whole photo, whose centre window is
// the ordinary fit's bit for bit; so a view of it without augmentation
// (evaluation) fills what the ordinary fit's view fills; small images are
// kept as they are.
func TestFitWhole(t *testing.T) {
	const sh, sw = 64, 96
	pix := make([]uint8, 3*sh*sw)
	for i := range pix {
		pix[i] = uint8(i*i*7 + i/5)
	}
	src := mustImages(t, 3, sh, sw, pix, []int64{0})
	small := mustImages(t, 3, 12, 20, pix[:3*12*20], []int64{0})
	rs := Resize{Crop: true}
	whole, err := src.FitTo(Fit{Height: 16, Width: 16, Resize: rs, Whole: true})
	if err != nil {
		t.Fatal(err)
	}
	window, err := src.FitTo(Fit{Height: 16, Width: 16, Resize: rs})
	if err != nil {
		t.Fatal(err)
	}
	if h, w := whole.Size(0); h != 18 || w != 27 {
		t.Fatalf("whole fit: %d×%d, want 18×27", h, w)
	}
	// The ordinary window: rows 1…16, columns 6…21 (torchvision's offsets).
	wp, win := whole.Pixels(0), window.Pixels(0)
	for c := range 3 {
		for y := range 16 {
			for x := range 16 {
				if a, b := wp[c*18*27+(y+1)*27+x+6], win[c*256+y*16+x]; a != b {
					t.Fatalf("channel %d (%d, %d): whole %d, window %d", c, y, x, a, b)
				}
			}
		}
	}
	a, err := ParseAugment("rrc,flip")
	if err != nil {
		t.Fatal(err)
	}
	vw := mustView(t, whole, Preprocess{Height: 16, Width: 16, Resize: rs, Augment: a})
	vn := mustView(t, window, Preprocess{Height: 16, Width: 16, Resize: rs})
	x, y := make([]float32, 3*256), make([]float32, 3*256)
	if err := vw.Fill(x, nil, []int{0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := vn.Fill(y, nil, []int{0}, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x, y) {
		t.Error("evaluation of the whole fit is not the ordinary fit's")
	}
	if _, err := NewView(window, Preprocess{Height: 16, Width: 16, Resize: Resize{}, Augment: a}); err == nil {
		t.Error("a stretched view of images fitted to crop")
	}
	kept, err := small.FitTo(Fit{Height: 16, Width: 16, Resize: rs, Whole: true})
	if err != nil {
		t.Fatal(err)
	}
	if h, w := kept.Size(0); h != 12 || w != 20 || !slices.Equal(kept.Pixels(0), small.Pixels(0)) {
		t.Errorf("a 12×20 image whole-fitted to 18: %d×%d", h, w)
	}
}
