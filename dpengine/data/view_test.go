package data

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func mustImages(t testing.TB, c, h, w int, pix []uint8, labels []int64) *Images {
	t.Helper()
	m, err := NewImages(numberedClasses(10), c, h, w, pix, labels)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustView(t testing.TB, m *Images, p Preprocess) *View {
	t.Helper()
	v, err := NewView(m, p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fill fills a batch of the given indices and returns it.
func fill(t testing.TB, v *View, rng *rand.Rand, idx ...int) []float32 {
	t.Helper()
	c, h, w := v.SampleShape()[0], v.SampleShape()[1], v.SampleShape()[2]
	x := make([]float32, len(idx)*c*h*w)
	if err := v.Fill(x, nil, idx, rng); err != nil {
		t.Fatal(err)
	}
	return x
}

// readGolden reads testdata/file, JSON golden cases, into cases.
func readGolden(t *testing.T, file string, cases any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, cases); err != nil {
		t.Fatal(err)
	}
}

// goldenImage is a one-sample gray Images of a golden case's rows of
// pixel values.
func goldenImage(t *testing.T, src [][]int) *Images {
	t.Helper()
	var pix []uint8
	for _, r := range src {
		for _, v := range r {
			pix = append(pix, uint8(v))
		}
	}
	return mustImages(t, 1, len(src), len(src[0]), pix, []int64{0})
}

// TestResizeGolden compares with PyTorch 1.13: F.interpolate(mode=
// "bilinear", align_corners=False, antialias=True) stretched, or the
// shorter side resized and the centre cropped as torchvision's
// Resize+CenterCrop (testdata/gen_resize.py wrote testdata/resize.json):
// axes that grow, shrink (by 1.7 to 5.6) or keep their size, both crop
// offsets' rounding, tall and wide sources.
func TestResizeGolden(t *testing.T) {
	var cases []struct {
		Name  string
		Src   [][]int
		Mode  string
		Short int
		H, W  int
		Want  []float64
	}
	readGolden(t, "resize.json", &cases)
	for _, tc := range cases {
		sh, sw := len(tc.Src), len(tc.Src[0])
		m := goldenImage(t, tc.Src)
		rs := Resize{}
		if tc.Mode == "crop" {
			rs = Resize{Crop: true, Short: tc.Short}
		}
		x := fill(t, mustView(t, m, Preprocess{Channels: 1, Height: tc.H, Width: tc.W, Resize: rs}), nil, 0)
		if len(tc.Want) != tc.H*tc.W {
			t.Fatalf("%s: %d golden values for %d×%d", tc.Name, len(tc.Want), tc.H, tc.W)
		}
		for k, want := range tc.Want {
			if got := float64(x[k]) * 255; !near(got, want, 2e-3) {
				t.Errorf("%s (%d×%d to %d×%d, %s): value %d = %.5f, want %.5f", tc.Name, sh, sw, tc.H, tc.W, rs, k, got, want)
			}
		}
	}
}

func TestChannels(t *testing.T) {
	gray := mustImages(t, 1, 2, 2, []uint8{0, 51, 102, 255}, []int64{0})
	x := fill(t, mustView(t, gray, Preprocess{Channels: 3}), nil, 0)
	for c := range 3 {
		for k, p := range []float64{0, 0.2, 0.4, 1} {
			if !near(float64(x[c*4+k]), p, 1e-6) {
				t.Errorf("gray→RGB channel %d pixel %d = %g, want %g", c, k, x[c*4+k], p)
			}
		}
	}
	// Two RGB pixels: pure red and (10,20,30).
	rgb := mustImages(t, 3, 1, 2, []uint8{255, 10, 0, 20, 0, 30}, []int64{0})
	x = fill(t, mustView(t, rgb, Preprocess{Channels: 1}), nil, 0)
	if !near(float64(x[0]), 0.299, 1e-6) || !near(float64(x[1]), (0.299*10+0.587*20+0.114*30)/255, 1e-6) {
		t.Errorf("RGB→gray luma = %v", x)
	}
	// Resize and luma together.
	x = fill(t, mustView(t, rgb, Preprocess{Channels: 1, Height: 1, Width: 4}), nil, 0)
	want := []float64{255 * 0.299, (0.75*255+0.25*10)*0.299 + 0.25*20*0.587 + 0.25*30*0.114, (0.25*255+0.75*10)*0.299 + 0.75*20*0.587 + 0.75*30*0.114, 0.299*10 + 0.587*20 + 0.114*30}
	for k := range want {
		if !near(float64(x[k])*255, want[k], 1e-3) {
			t.Errorf("resize+luma value %d = %g, want %g", k, x[k]*255, want[k])
		}
	}
}

func TestNormalisation(t *testing.T) {
	gray := mustImages(t, 1, 1, 2, []uint8{0, 255}, []int64{0})
	rgb := mustImages(t, 3, 1, 1, []uint8{255, 128, 0}, []int64{0})
	for _, tc := range []struct {
		name string
		m    *Images
		c    int
		norm string
		want []float64
	}{
		{"fmnist", gray, 1, "fmnist", []float64{-0.2860 / 0.3530, (1 - 0.2860) / 0.3530}},
		{"none", gray, 1, "none", []float64{0, 1}},
		{"half", gray, 1, "half", []float64{-1, 1}},
		{"pixels", rgb, 3, "pixels", []float64{255, 128, 0}},
		{"explicit", gray, 1, "0.5/0.25", []float64{-2, 2}},
		{"broadcast to RGB", gray, 3, "fmnist", []float64{-0.2860 / 0.3530, (1 - 0.2860) / 0.3530, -0.2860 / 0.3530, (1 - 0.2860) / 0.3530, -0.2860 / 0.3530, (1 - 0.2860) / 0.3530}},
		{"cifar10", rgb, 3, "cifar10", []float64{(1 - 0.4914) / 0.2470, (128.0/255 - 0.4822) / 0.2435, -0.4465 / 0.2616}},
		{"imagenet on gray model", gray, 1, "imagenet", []float64{-0.458971 / 0.225609, (1 - 0.458971) / 0.225609}},
	} {
		n, err := ParseNorm(tc.norm, Norm{})
		if err != nil {
			t.Fatal(err)
		}
		x := fill(t, mustView(t, tc.m, Preprocess{Channels: tc.c, Norm: n}), nil, 0)
		for k := range tc.want {
			if !near(float64(x[k]), tc.want[k], 1e-5) {
				t.Errorf("%s: value %d = %g, want %g", tc.name, k, x[k], tc.want[k])
			}
		}
	}
}

// augSrc returns 3 RGB 4×5 samples with distinct pixel values.
func augSrc(t testing.TB) *Images {
	pix := make([]uint8, 3*3*4*5)
	for i := range pix {
		pix[i] = uint8(i + 1)
	}
	return mustImages(t, 3, 4, 5, pix, []int64{0, 1, 2})
}

func TestAugment(t *testing.T) {
	m := augSrc(t)
	const pad = 2
	v := mustView(t, m, Preprocess{Norm: Norm{Mean: []float32{0.5}, Std: []float32{0.5}}, Augment: Augment{CropPad: pad, Flip: true}})
	base := fill(t, v, nil, 0, 1, 2) // nil generator: no augmentation
	plain := fill(t, mustView(t, m, Preprocess{Norm: Norm{Mean: []float32{0.5}, Std: []float32{0.5}}}), nil, 0, 1, 2)
	for k := range base {
		if base[k] != plain[k] {
			t.Fatalf("nil generator augmented: value %d = %g, want %g", k, base[k], plain[k])
		}
	}
	const C, H, W = 3, 4, 5
	flips, shifts := 0, 0
	for seed := range uint64(40) {
		x := fill(t, v, rand.New(rand.NewPCG(seed, 1)), 0, 1, 2)
		again := fill(t, v, rand.New(rand.NewPCG(seed, 1)), 0, 1, 2)
		// Replay the draws: per sample, crop row, crop column, flip.
		r := rand.New(rand.NewPCG(seed, 1))
		for s := range 3 {
			dy, dx := r.IntN(2*pad+1)-pad, r.IntN(2*pad+1)-pad
			flip := r.Float64() < 0.5
			if flip {
				flips++
			}
			if dy != 0 || dx != 0 {
				shifts++
			}
			for c := range C {
				for y := range H {
					for xx := range W {
						k := ((s*C+c)*H+y)*W + xx
						if x[k] != again[k] {
							t.Fatalf("seed %d: not reproducible at %d", seed, k)
						}
						cx := xx
						if flip {
							cx = W - 1 - xx
						}
						sy, sx := y+dy, cx+dx
						want := float32(-1) // padding: (0 - 0.5)/0.5
						if sy >= 0 && sy < H && sx >= 0 && sx < W {
							want = base[((s*C+c)*H+sy)*W+sx]
						}
						if x[k] != want {
							t.Fatalf("seed %d sample %d (dy %d dx %d flip %v): [%d,%d,%d] = %g, want %g", seed, s, dy, dx, flip, c, y, xx, x[k], want)
						}
					}
				}
			}
		}
	}
	if flips == 0 || flips == 120 || shifts == 0 {
		t.Errorf("over 120 draws: %d flips, %d shifts", flips, shifts)
	}
}

func TestFillLabelsAndErrors(t *testing.T) {
	v := mustView(t, augSrc(t), Preprocess{})
	x := make([]float32, 2*60+7)
	y := make([]int64, 3)
	y[2] = -7
	if err := v.Fill(x, y, []int{2, 0}, nil); err != nil {
		t.Fatal(err)
	}
	if y[0] != 2 || y[1] != 0 || y[2] != -7 {
		t.Errorf("labels %v", y)
	}
	if x[120] != 0 {
		t.Errorf("wrote past the batch")
	}
	wantErr(t, v.Fill(x[:119], nil, []int{0, 1}, nil), "batch buffer holds 119 values, want 120", "2 samples of 3×4×5")
	wantErr(t, v.Fill(x, y[:1], []int{0, 1}, nil), "label buffer holds 1 values, want 2")
	wantErr(t, v.Fill(x, nil, []int{0, 3}, nil), "batch position 1: sample index 3 out of range [0,3)")
	if v.Len() != 3 || v.NumClasses() != 10 || v.Label(1) != 1 || len(v.Labels()) != 3 {
		t.Errorf("view accessors")
	}
}

func TestNewViewErrors(t *testing.T) {
	rgb := augSrc(t)
	varied := &Images{classes: []string{"a"}, labels: []int64{0, 0}, channels: 1,
		samples: [][]uint8{{1, 2}, {1, 2, 3}}, sizes: [][2]int32{{1, 2}, {1, 3}}}
	for _, tc := range []struct {
		name  string
		m     *Images
		p     Preprocess
		frags []string
	}{
		{"channels", rgb, Preprocess{Channels: 2}, []string{"cannot convert 3-channel images to 2 channels"}},
		{"norm length", rgb, Preprocess{Norm: Norm{Mean: []float32{1, 2}, Std: []float32{1, 2}}}, []string{"2 values per statistic", "3 channels"}},
		{"norm mismatch", rgb, Preprocess{Norm: Norm{Mean: []float32{1, 2, 3}, Std: []float32{1}}}, []string{"3 means but 1 standard deviations"}},
		{"zero std", rgb, Preprocess{Norm: Norm{Mean: []float32{0}, Std: []float32{0}}}, []string{"standard deviation 0 is 0"}},
		{"varied sizes", varied, Preprocess{Channels: 1}, []string{"varied sizes need an explicit height and width"}},
		{"empty", &Images{classes: []string{"a"}, channels: 1, h: 1, w: 1}, Preprocess{}, []string{"empty dataset"}},
	} {
		_, err := NewView(tc.m, tc.p)
		wantErr(t, err, tc.frags...)
	}
	v := mustView(t, varied, Preprocess{Height: 2, Width: 2})
	x := fill(t, v, nil, 0, 1)
	// Sample 1 is 1×3 [1 2 3], its columns shrunk by 1.5: antialiased,
	// the triangle filter around source 0.75 weighs pixels 0 and 1 by 5:3,
	// around 2.25 pixels 1 and 2 by 3:5 (plain bilinear: 1.25, 2.75).
	if x[0]*255 != 1 || x[1]*255 != 2 || !near(float64(x[4]*255), 1.375, 1e-4) || !near(float64(x[7]*255), 2.625, 1e-4) {
		t.Errorf("varied resize: %v", x)
	}
}

func TestFillAllocs(t *testing.T) {
	m := augSrc(t)
	idx := []int{2, 0, 1, 1}
	for _, tc := range []struct {
		name string
		p    Preprocess
	}{
		{"exact", Preprocess{}},
		{"resize+luma", Preprocess{Channels: 1, Height: 7, Width: 3}},
		{"augment", Preprocess{Channels: 3, Height: 8, Width: 8, Augment: Augment{CropPad: 2, Flip: true}}},
	} {
		v := mustView(t, m, tc.p)
		c, h, w := v.SampleShape()[0], v.SampleShape()[1], v.SampleShape()[2]
		x := make([]float32, len(idx)*c*h*w)
		y := make([]int64, len(idx))
		rng := rand.New(rand.NewPCG(1, 2))
		if n := testing.AllocsPerRun(50, func() {
			if err := v.Fill(x, y, idx, rng); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %g allocations per Fill", tc.name, n)
		}
	}
}

func TestParseNorm(t *testing.T) {
	def := Norm{Mean: []float32{0.1}, Std: []float32{0.2}}
	for _, tc := range []struct{ in, want string }{
		{"", "0.1/0.2"},
		{"default", "0.1/0.2"},
		{"none", "none"},
		{"FMNIST", "0.286/0.353"},
		{"fashion-mnist", "0.286/0.353"},
		{"mnist", "0.1307/0.3081"},
		{"cifar10", "0.4914,0.4822,0.4465/0.247,0.2435,0.2616"},
		{"imagenet", "0.485,0.456,0.406/0.229,0.224,0.225"},
		{"0.5, 0.4,0.3/0.2,0.2,0.2", "0.5,0.4,0.3/0.2,0.2,0.2"},
	} {
		n, err := ParseNorm(tc.in, def)
		if err != nil || n.String() != tc.want {
			t.Errorf("ParseNorm(%q) = %s, %v; want %s", tc.in, n, err, tc.want)
		}
		if back, err := ParseNorm(n.String(), def); err != nil || back.String() != n.String() {
			t.Errorf("ParseNorm(%q) does not read back", n)
		}
	}
	for _, tc := range []struct{ in, frag string }{
		{"zscore", "want one of default, none, fmnist"},
		{"0.5/0", "standard deviation 0 is 0"},
		{"0.5,0.5/0.2", "2 means but 1 standard deviations"},
		{"a/0.2", `mean: "a" is not a number`},
	} {
		_, err := ParseNorm(tc.in, def)
		wantErr(t, err, tc.frag)
	}
}

func TestParseAugment(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Augment
	}{
		{"", Augment{}},
		{"none", Augment{}},
		{"flip", Augment{Flip: true}},
		{"crop=4,flip", Augment{CropPad: 4, Flip: true}},
		{"hflip, crop=2", Augment{CropPad: 2, Flip: true}},
	} {
		a, err := ParseAugment(tc.in)
		if err != nil || a != tc.want {
			t.Errorf("ParseAugment(%q) = %+v, %v", tc.in, a, err)
		}
		if back, _ := ParseAugment(a.String()); back != a {
			t.Errorf("%+v does not read back from %q", a, a.String())
		}
	}
	for _, tc := range []struct{ in, frag string }{
		{"crop", `unknown item "crop"`},
		{"crop=-1", "crop=-1: want a non-negative padding"},
		{"rotate", `unknown item "rotate"`},
	} {
		_, err := ParseAugment(tc.in)
		wantErr(t, err, tc.frag)
	}
}

// BenchmarkFill measures a 32-sample batch: Fashion-MNIST as is, and
// CIFAR-sized images resized to 224×224 with augmentation.
func BenchmarkFill(b *testing.B) {
	for _, bc := range []struct {
		name    string
		c, h, w int
		p       Preprocess
	}{
		{"1x28x28-exact", 1, 28, 28, Preprocess{}},
		{"3x32x32-crop-flip", 3, 32, 32, Preprocess{Augment: Augment{CropPad: 4, Flip: true}}},
		{"3x32x32-to-224", 3, 32, 32, Preprocess{Height: 224, Width: 224, Augment: Augment{Flip: true}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const n = 64
			pix := make([]uint8, n*bc.c*bc.h*bc.w)
			for i := range pix {
				pix[i] = uint8(i * 7)
			}
			v := mustView(b, mustImages(b, bc.c, bc.h, bc.w, pix, make([]int64, n)), bc.p)
			c, h, w := v.SampleShape()[0], v.SampleShape()[1], v.SampleShape()[2]
			idx := make([]int, 32)
			for i := range idx {
				idx[i] = (i * 5) % n
			}
			x := make([]float32, len(idx)*c*h*w)
			rng := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(len(x) * 4))
			for b.Loop() {
				v.Fill(x, nil, idx, rng)
			}
		})
	}
}

// TestFillParallel: a batch large enough to be split over the cores
// (fillBatch on several workers) fills the same bits, with the same labels, and leaves the
// augmentation's generator where one fill after another leaves it, with
// one worker or several; both sizes of sample (resized and not) and
// augmentation on and off.
func TestFillParallel(t *testing.T) {
	const n, c, h, w = 40, 3, 50, 60
	pix := make([]uint8, n*c*h*w)
	for i := range pix {
		pix[i] = uint8(i*31 + i/97)
	}
	labels := make([]int64, n)
	for i := range labels {
		labels[i] = int64(i % 10)
	}
	m := mustImages(t, c, h, w, pix, labels)
	idx := make([]int, 37)
	for k := range idx {
		idx[k] = (k * 7) % n
	}
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(0))
	for _, p := range []Preprocess{
		{Height: 224, Width: 224, Augment: Augment{CropPad: 16, Flip: true}},
		{Height: 224, Width: 224},
		{Augment: Augment{Flip: true}},
	} {
		v := mustView(t, m, p)
		cc, hh, ww := v.SampleShape()[0], v.SampleShape()[1], v.SampleShape()[2]
		if len(idx)*cc*hh*ww/fillGrain < 4 {
			t.Fatalf("%+v: %d values a batch, too few to split over 4 workers", p, len(idx)*cc*hh*ww)
		}
		fill := func(procs int) ([]float32, []int64, uint64) {
			goruntime.GOMAXPROCS(procs)
			x, y := make([]float32, len(idx)*cc*hh*ww), make([]int64, len(idx))
			rng := rand.New(rand.NewPCG(7, 8))
			if err := v.Fill(x, y, idx, rng); err != nil {
				t.Fatal(err)
			}
			return x, y, rng.Uint64()
		}
		x1, y1, r1 := fill(1)
		for _, procs := range []int{2, 4} {
			x, y, r := fill(procs)
			if r != r1 {
				t.Errorf("%+v, %d workers: the generator moved on differently", p, procs)
			}
			for k := range y {
				if y[k] != y1[k] || y[k] != int64(labels[idx[k]]) {
					t.Fatalf("%+v, %d workers: label %d is %d, want %d", p, procs, k, y[k], labels[idx[k]])
				}
			}
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(x1[i]) {
					t.Fatalf("%+v, %d workers: value %d (sample %d) is %v, one worker's %v", p, procs, i, i/(cc*hh*ww), x[i], x1[i])
				}
			}
		}
	}
}

// TestFilteredAugment: where an axis shrinks (the antialiased fill), the
// crop offsets and the flip move the unaugmented fill's values, padding
// with the normalised zero, and RGB→gray mixes the channels' fills by
// the luma weights.
func TestFilteredAugment(t *testing.T) {
	const sh, sw, H, W = 9, 13, 5, 4
	pix := make([]uint8, 3*sh*sw)
	for i := range pix {
		pix[i] = uint8((i*37 + i*i*11) % 256)
	}
	m := mustImages(t, 3, sh, sw, pix, []int64{0})
	norm := Norm{Mean: []float32{0.5}, Std: []float32{0.25}}
	for _, rs := range []Resize{{}, {Crop: true, Short: 6}} {
		v := mustView(t, m, Preprocess{Channels: 3, Height: H, Width: W, Norm: norm, Resize: rs})
		if sm := v.sizes[[2]int{sh, sw}]; sm.cols.taps != nil && sm.rows.taps != nil {
			t.Fatalf("%s: no axis shrinks: the test does not reach the antialiased fill", rs)
		}
		plain := make([]float32, 3*H*W)
		v.fillOne(plain, 0, augDraw{})
		pad := -norm.Mean[0] / norm.Std[0]
		for _, a := range []augDraw{{dy: 1, dx: -2}, {dy: -3, dx: 1, flip: true}, {flip: true}} {
			got := make([]float32, 3*H*W)
			v.fillOne(got, 0, a)
			for c := range 3 {
				for y := range H {
					for x := range W {
						cx := x
						if a.flip {
							cx = W - 1 - x
						}
						ry, rx := y+a.dy, cx+a.dx
						want := pad
						if ry >= 0 && ry < H && rx >= 0 && rx < W {
							want = plain[(c*H+ry)*W+rx]
						}
						if g := got[(c*H+y)*W+x]; g != want {
							t.Errorf("%s %+v: channel %d (%d,%d) = %v, want %v", rs, a, c, y, x, g, want)
						}
					}
				}
			}
		}
		gray := fill(t, mustView(t, m, Preprocess{Channels: 1, Height: H, Width: W, Resize: rs}), nil, 0)
		rgb := fill(t, mustView(t, m, Preprocess{Channels: 3, Height: H, Width: W, Resize: rs}), nil, 0)
		for k := range gray {
			want := lumaR*rgb[k] + lumaG*rgb[H*W+k] + lumaB*rgb[2*H*W+k]
			if !near(float64(gray[k]), float64(want), 1e-6) {
				t.Errorf("%s: gray value %d = %v, luma of the channels %v", rs, k, gray[k], want)
			}
		}
	}
}

func TestParseResize(t *testing.T) {
	for _, s := range []string{"stretch", "crop", "crop=256"} {
		r, err := ParseResize(s)
		if err != nil || r.String() != s {
			t.Errorf("ParseResize(%q) = %v, %v; want it back", s, r, err)
		}
	}
	if r, err := ParseResize(""); err != nil || r.Crop {
		t.Errorf("ParseResize(\"\") = %v, %v; want stretch", r, err)
	}
	if got := (Resize{Crop: true}).short(224, 224); got != 256 {
		t.Errorf("crop's default shorter side for 224×224: %d, want 256", got)
	}
	for _, s := range []string{"fit", "crop=", "crop=-3", "crop=x", "stretch=2"} {
		if _, err := ParseResize(s); err == nil {
			t.Errorf("ParseResize(%q): no error", s)
		}
	}
	m := mustImages(t, 1, 5, 7, make([]uint8, 35), []int64{0})
	_, err := NewView(m, Preprocess{Height: 4, Width: 6, Resize: Resize{Crop: true, Short: 5}})
	wantErr(t, err, "crop=5", "fewer than the 4×6 input's")
}

// TestCropThinImage: a crop scales a 1×60000 image's shorter side to 256
// and its longer to 15 million pixels; only the taps of the centre the
// crop keeps are made (all of them were 184 MB), and the fill reads the
// centre of the image.
func TestCropThinImage(t *testing.T) {
	const sw = 60000
	pix := make([]uint8, sw)
	for i := range pix {
		pix[i] = uint8(i % 251)
	}
	m := mustImages(t, 1, 1, sw, pix, []int64{0})
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	v := mustView(t, m, Preprocess{Height: 224, Width: 224, Resize: Resize{Crop: true}})
	goruntime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("NewView allocated %d bytes for one 1×%d image", grew, sw)
	}
	x := fill(t, v, nil, 0)
	// The centre of the 256×15360000 resize is source column ≈ 29999.5.
	if got, want := float64(x[112])*255, (float64(pix[sw/2-1])+float64(pix[sw/2]))/2; !near(got, want, 1) {
		t.Errorf("centre value %g, want ≈ %g", got, want)
	}
}
