package data

import (
	"encoding/json"
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// patterned returns a w×h RGB image whose values vary in both axes and
// across channels, so that every resize weight shows in the result.
func patterned(w, h int) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetNRGBA(x, y, color.NRGBA{uint8((x*37 + y*11) % 256), uint8((x*x + 5*y) % 256), uint8((3*x*y + 17) % 256), 255})
		}
	}
	return m
}

// TestFitAtLoad: a folder loaded fitted to a 24×32 input (LoadFitted)
// holds every image of at least 24·32 pixels as its view's window — the
// input's size, far fewer bytes — and fills each of them, augmented or
// not, with 8-bit levels within one of the unfitted view's values (PIL's
// resample, TestFitGolden); images with fewer pixels fill with the
// unfitted view's bits. Stretched,
// cropped at the default shorter side and cropped at another.
func TestFitAtLoad(t *testing.T) {
	const H, W = 24, 32
	dir := t.TempDir()
	files := []struct {
		path string
		img  image.Image
		fits bool
	}{
		{"a/1.png", patterned(60, 45), true},                                                       // shrinks both axes
		{"b/1.png", grayImage(52, 37, func(x, y int) uint8 { return uint8(x*7 + y*y) }), true},     // gray, shrinks
		{"a/2.png", patterned(W, H), true},                                                         // the input's size
		{"b/2.png", patterned(30, 20), false},                                                      // fewer pixels: grows
		{"a/3.png", grayImage(16, 16, func(x, y int) uint8 { return uint8(x * y) }), false},        // gray, grows
		{"b/3.png", patterned(900, 1), true},                                                       // thin: one axis grows
		{"a/4.png", patterned(20, 70), true},                                                       // tall: mixed axes
		{"b/4.png", grayImage(40, 20, func(x, y int) uint8 { return uint8(200 - x*3 + y) }), true}, // gray, wide
	}
	for _, f := range files {
		writePNG(t, filepath.Join(dir, f.path), f.img)
	}
	spec := Spec{Scheme: SchemeFolder, Dir: dir}
	plainImgs, err := Load(spec)
	if err != nil {
		t.Fatal(err)
	}
	aug := Augment{CropPad: 4, Flip: true}
	for _, rs := range []Resize{{}, {Crop: true}, {Crop: true, Short: 40}} {
		fit := Fit{Height: H, Width: W, Resize: rs}
		fitted, err := LoadFitted(spec, fit)
		if err != nil {
			t.Fatal(err)
		}
		if fitted.Fitted() != fit || plainImgs.Fitted() != (Fit{}) {
			t.Errorf("%s: Fitted() = %v and %v unfitted", rs, fitted.Fitted(), plainImgs.Fitted())
		}
		// Fitting the unfitted images afterwards keeps the same bytes.
		after, err := plainImgs.FitTo(fit)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fitted.Len() {
			ah, aw := after.Size(i)
			fh, fw := fitted.Size(i)
			if ah != fh || aw != fw || string(after.Pixels(i)) != string(fitted.Pixels(i)) || after.Label(i) != fitted.Label(i) {
				t.Errorf("%s: FitTo's sample %d (%d×%d) differs from LoadFitted's (%d×%d)", rs, i, ah, aw, fh, fw)
			}
		}
		if _, err := after.FitTo(fit); err == nil {
			t.Errorf("%s: FitTo of fitted images: no error", rs)
		}
		p := Preprocess{Channels: 3, Height: H, Width: W, Augment: aug, Resize: rs}
		pv, fv := mustView(t, plainImgs, p), mustView(t, fitted, p)
		wantBytes := plainImgs.Bytes()
		rounded := 0
		for i := range fitted.Len() {
			f := files[i] // round-robin over the classes, as listed
			sh, sw := plainImgs.Size(i)
			wh, ww := sh, sw
			if f.fits {
				wh, ww = H, W
				wantBytes -= int64(len(plainImgs.Pixels(i)) - 3*H*W)
			}
			if gh, gw := fitted.Size(i); gh != wh || gw != ww || len(fitted.Pixels(i)) != 3*wh*ww {
				t.Errorf("%s %s: kept at %d×%d (%d bytes), want %d×%d (loaded at %d×%d)", rs, f.path, gh, gw, len(fitted.Pixels(i)), wh, ww, sh, sw)
			}
			for _, seed := range []uint64{0, 1, 2} {
				var r1, r2 *rand.Rand
				if seed > 0 {
					r1, r2 = rand.New(rand.NewPCG(seed, 9)), rand.New(rand.NewPCG(seed, 9))
				}
				want, got := fill(t, pv, r1, i), fill(t, fv, r2, i)
				for k := range want {
					u, g := float64(want[k])*255, float64(got[k])*255
					if !f.fits {
						if got[k] != want[k] {
							t.Fatalf("%s %s seed %d: value %d = %v, unfitted %v", rs, f.path, seed, k, got[k], want[k])
						}
						continue
					}
					// An 8-bit level (padding is 0), within one of the
					// unfitted view's unrounded value: PIL rounds after
					// each of its two passes (TestFitGolden holds the
					// levels to PIL's).
					if !near(g, math.Round(g), 1e-3) || !near(g, u, 1+1e-3) {
						t.Fatalf("%s %s seed %d: value %d = %.4f/255, unfitted %.4f/255: want a level within one of it", rs, f.path, seed, k, g, u)
					}
					if !near(g, u, 1e-3) {
						rounded++
					}
				}
			}
		}
		if rounded == 0 {
			t.Errorf("%s: no fitted value differs from the unfitted one: nothing was rounded", rs)
		}
		if got := fitted.Bytes(); got != wantBytes || got >= plainImgs.Bytes() {
			t.Errorf("%s: fitted images hold %d bytes, want %d (unfitted %d)", rs, got, wantBytes, plainImgs.Bytes())
		}
	}
}

// TestFitMismatch: fitted images are read only by a view of the fit's
// size and resize (crop's default shorter side spelled either way), and
// gray ones by a gray view; a fit no view could use is refused before
// anything loads.
func TestFitMismatch(t *testing.T) {
	dir := t.TempDir()
	writePNG(t, filepath.Join(dir, "a", "1.png"), patterned(50, 40))
	spec := Spec{Scheme: SchemeFolder, Dir: dir}
	m, err := LoadFitted(spec, Fit{Height: 24, Width: 32, Resize: Resize{Crop: true}})
	if err != nil {
		t.Fatal(err)
	}
	if h, w, ok := m.UniformSize(); !ok || h != 24 || w != 32 {
		t.Fatalf("one fitted image: size %d×%d uniform %v", h, w, ok)
	}
	mustView(t, m, Preprocess{Height: 24, Width: 32, Resize: Resize{Crop: true, Short: 37}})
	for _, p := range []Preprocess{
		{Height: 24, Width: 32},
		{Height: 24, Width: 32, Resize: Resize{Crop: true, Short: 40}},
		{Height: 32, Width: 24, Resize: Resize{Crop: true}},
	} {
		_, err := NewView(m, p)
		wantErr(t, err, "fitted to 24×32 (crop)", "must load it again")
	}
	// Made gray as it loaded: a gray view only, a third of the bytes.
	g, err := LoadFitted(spec, Fit{Height: 24, Width: 32, Resize: Resize{Crop: true}, Gray: true})
	if err != nil {
		t.Fatal(err)
	}
	if g.Channels() != 1 || g.Bytes() != 24*32+8 {
		t.Errorf("gray fit: %s, %d bytes", g, g.Bytes())
	}
	mustView(t, g, Preprocess{Channels: 1, Height: 24, Width: 32, Resize: Resize{Crop: true}})
	_, err = NewView(g, Preprocess{Channels: 3, Height: 24, Width: 32, Resize: Resize{Crop: true}})
	wantErr(t, err, "fitted to 24×32 (crop), gray")
	for _, f := range []Fit{
		{Height: -1, Width: 3},
		{Height: 3},
		{Height: 1 << 15, Width: 1 << 15},
		{Height: 24, Width: 32, Resize: Resize{Crop: true, Short: 30}},
	} {
		if _, err := LoadFitted(spec, f); err == nil || !strings.HasPrefix(err.Error(), "data: fit") {
			t.Errorf("LoadFitted(%v): %v, want a fit error", f, err)
		}
	}
}

// BenchmarkFillPhotos: a batch of 32 photos of 1600×1200 pixels cropped
// to 224×224 (torchvision's Resize(256)+CenterCrop(224)) and flipped,
// filtered from the full photos each batch or copied from their windows
// fitted as they loaded.
func BenchmarkFillPhotos(b *testing.B) {
	const n, c, h, w = 8, 3, 1200, 1600
	pix := make([]uint8, n*c*h*w)
	for i := range pix {
		pix[i] = uint8(i*7 + i/w)
	}
	full := mustImages(b, c, h, w, pix, make([]int64, n))
	p := Preprocess{Height: 224, Width: 224, Resize: Resize{Crop: true}, Augment: Augment{Flip: true}}
	fitted, err := full.FitTo(Fit{Height: 224, Width: 224, Resize: p.Resize})
	if err != nil {
		b.Fatal(err)
	}
	// A random resized crop (rrc,flip) of the photos kept whole, their
	// shorter side 256: a box's own resize weights every sample.
	whole, err := full.FitTo(Fit{Height: 224, Width: 224, Resize: p.Resize, Whole: true})
	if err != nil {
		b.Fatal(err)
	}
	rrc := p
	rrc.Augment = Augment{Flip: true, ResizedCrop: AreaRange{0.08, 1}}
	for _, bc := range []struct {
		name string
		m    *Images
		p    Preprocess
	}{{"full", full, p}, {"fitted", fitted, p}, {"whole-rrc", whole, rrc}} {
		b.Run(bc.name, func(b *testing.B) {
			v := mustView(b, bc.m, bc.p)
			idx := make([]int, 32)
			for i := range idx {
				idx[i] = i % n
			}
			x := make([]float32, len(idx)*c*224*224)
			rng := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(len(x) * 4))
			for b.Loop() {
				v.Fill(x, nil, idx, rng)
			}
		})
	}
}

// TestLoadFiles: directories are read recursively in lexical order, their
// hidden entries and files of other extensions skipped; a file named
// explicitly is read whatever its name; large images are fitted; the
// errors name the path.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	writePNG(t, filepath.Join(dir, "z", "b.png"), patterned(40, 30))
	writePNG(t, filepath.Join(dir, "z", "a", "c.png"), patterned(5, 4))
	writePNG(t, filepath.Join(dir, "y.PNG"), grayImage(6, 6, func(x, y int) uint8 { return uint8(x + y) }))
	writePNG(t, filepath.Join(dir, ".hidden", "h.png"), patterned(5, 5))
	writePNG(t, filepath.Join(dir, "z", ".h.png"), patterned(5, 5))
	writeFile(t, filepath.Join(dir, "z", "notes.txt"), []byte("x"))
	other := filepath.Join(t.TempDir(), "scan.dat")
	writePNG(t, other, patterned(3, 2))
	fit := Fit{Height: 8, Width: 8}
	m, files, err := LoadFiles([]string{dir, other}, fit)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "y.PNG"), filepath.Join(dir, "z", "a", "c.png"), filepath.Join(dir, "z", "b.png"), other}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", files, want)
	}
	if m.Len() != 4 || m.Channels() != 3 || m.NumClasses() != 1 || m.Fitted() != fit {
		t.Errorf("%s, fit %v", m, m.Fitted())
	}
	for i, size := range [][2]int{{6, 6}, {4, 5}, {8, 8}, {2, 3}} {
		if h, w := m.Size(i); h != size[0] || w != size[1] || m.Label(i) != 0 {
			t.Errorf("%s: %d×%d label %d, want %d×%d label 0", files[i], h, w, m.Label(i), size[0], size[1])
		}
	}
	empty := filepath.Join(t.TempDir(), "empty")
	writeFile(t, filepath.Join(empty, "a.txt"), []byte("x"))
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{nil, "no files or directories"},
		{[]string{filepath.Join(dir, "none")}, "none: no such file"},
		{[]string{empty}, "empty holds no images"},
		{[]string{filepath.Join(dir, "z", "notes.txt")}, "notes.txt: corrupt or unsupported image"},
	} {
		_, _, err := LoadFiles(c.paths, Fit{})
		wantErr(t, err, c.want)
	}
}

// TestFitGolden: a fitted window is torchvision's Resize (and
// CenterCrop) of the PIL image, bit for bit: PIL 9.4's 8-bit bilinear
// resample, its fixed-point weights and its rounding between the
// horizontal and the vertical pass (testdata/gen_fit.py wrote fit.json):
// shrinking by up to 5.3, one axis growing, a 900×1 image, crops at the
// default and other shorter sides, tall sources, and an image of the
// input's size cropped, and an RGB image made gray first (PIL's
// convert("L"), a gray model's pipeline).
func TestFitGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/fit.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name           string
		W, H, Channels int
		Gray           bool
		Coef           [4]int
		Mode           string
		Short          int
		OutH           int `json:"out_h"`
		OutW           int `json:"out_w"`
		Want           []int
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 8 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, c := range cases {
		pix := make([]uint8, c.Channels*c.H*c.W)
		for k := range c.Channels {
			for y := range c.H {
				for x := range c.W {
					pix[(k*c.H+y)*c.W+x] = uint8((x*c.Coef[0] + y*c.Coef[1] + x*y*c.Coef[2] + k*c.Coef[3]) % 256)
				}
			}
		}
		fit := Fit{Height: c.OutH, Width: c.OutW, Resize: Resize{Crop: c.Mode == "crop", Short: c.Short}, Gray: c.Gray}
		m := mustImages(t, c.Channels, c.H, c.W, pix, []int64{0})
		fm, err := m.FitTo(fit)
		if err != nil {
			t.Fatal(err)
		}
		got := fm.Pixels(0)
		if len(got) != len(c.Want) {
			t.Fatalf("%s: %d values, want %d", c.Name, len(got), len(c.Want))
		}
		bad := 0
		for i, w := range c.Want {
			if int(got[i]) != w {
				if bad < 3 {
					t.Errorf("%s: value %d = %d, PIL's %d", c.Name, i, got[i], w)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ from PIL's", c.Name, bad, len(c.Want))
		}
	}
}

// BenchmarkFitPhoto: one 12-megapixel RGB photo (3000×4000) to a
// 224×224 window, torchvision's Resize(256)+CenterCrop(224): fitPixels'
// two integer passes (PIL's), beside the view's float filter of the same
// photo (the antialiased fill, which fitting used before it was PIL's).
func BenchmarkFitPhoto(b *testing.B) {
	const c, h, w = 3, 3000, 4000
	pix := make([]uint8, c*h*w)
	for i := range pix {
		pix[i] = uint8(i*7 + i/w)
	}
	fit := Fit{Height: 224, Width: 224, Resize: Resize{Crop: true}}
	b.Run("pil", func(b *testing.B) {
		for b.Loop() {
			fitPixels(pix, c, h, w, fit)
		}
	})
	b.Run("float-filter", func(b *testing.B) {
		v := mustView(b, mustImages(b, c, h, w, pix, []int64{0}), Preprocess{Height: 224, Width: 224, Resize: fit.Resize})
		x := make([]float32, c*224*224)
		for b.Loop() {
			v.fillOne(x, 0, augDraw{})
		}
	})
}
