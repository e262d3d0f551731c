package data

import (
	"archive/zip"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// writeNPZ writes arrays as a .npz archive, deflated where compress is set
// (np.savez_compressed), and returns its path.
func writeNPZ(t *testing.T, dir string, compress bool, arrays map[string]*npy.Array) string {
	t.Helper()
	path := filepath.Join(dir, "data.npz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	method := zip.Store
	if compress {
		method = zip.Deflate
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range arrays {
			if !yield(k) {
				return
			}
		}
	}) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: k + ".npy", Method: method})
		if err == nil {
			err = npy.Write(w, arrays[k])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// seq returns n float32 values 0, 1, 2, … scaled by s.
func seq(n int, s float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) * s
	}
	return v
}

// TestLoadArrays: the arrays each split reads, from an archive (stored or
// deflated) and from a directory, with the labels' dtypes and shapes, the
// limit and the class count.
func TestLoadArrays(t *testing.T) {
	x := npy.NewFloat32(seq(5*2*3, 0.5), 5, 2, 3)
	y := npy.NewInt64([]int64{0, 2, 1, 2, 0}, 5)
	xt := npy.NewFloat32(seq(2*2*3, -1), 2, 2, 3)
	yt := &npy.Array{DType: npy.Uint8, Shape: []int{2, 1}, U8: []uint8{3, 1}}

	check := func(t *testing.T, a *Arrays, n, classes int, shape []int, first float32, labels []int64) {
		t.Helper()
		if a.Len() != n || a.NumClasses() != classes || !slices.Equal(a.SampleShape(), shape) || a.f32[0] != first || !slices.Equal(a.Labels(), labels) {
			t.Errorf("got %d samples, %d classes, shape %v, first %v, labels %v", a.Len(), a.NumClasses(), a.SampleShape(), a.f32[0], a.Labels())
		}
	}
	for _, compress := range []bool{false, true} {
		dir := t.TempDir()
		path := writeNPZ(t, dir, compress, map[string]*npy.Array{"x_train": x, "y_train": y, "x_test": xt, "y_test": yt})
		a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: path})
		if err != nil {
			t.Fatal(err)
		}
		check(t, a, 5, 3, []int{2, 3}, 0, []int64{0, 2, 1, 2, 0})
		a, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: path, Split: Test})
		if err != nil {
			t.Fatal(err)
		}
		check(t, a, 2, 4, []int{2, 3}, 0, []int64{3, 1})
		if a.f32[1] != -1 {
			t.Errorf("test sample values %v", a.f32[:3])
		}
		a, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: path, Limit: 2, Classes: 7})
		if err != nil {
			t.Fatal(err)
		}
		check(t, a, 2, 7, []int{2, 3}, 0, []int64{0, 2})
		if len(a.f32) != 2*6 {
			t.Errorf("limit 2 keeps %d values", len(a.f32))
		}
	}

	// Class names.
	names := &npy.Array{DType: npy.Unicode, Shape: []int{4}, Str: []string{"cat", "dög", "fish", "🐟"}}
	path := writeNPZ(t, t.TempDir(), true, map[string]*npy.Array{"x": x, "y": y, "classes": names})
	a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: path})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Classes(), names.Str) {
		t.Errorf("classes %q", a.Classes())
	}
	for _, bad := range []struct {
		classes *npy.Array
		spec    string
		frag    string
	}{
		{npy.NewInt64([]int64{0, 1, 2}, 3), "", "want the class names"},
		{&npy.Array{DType: npy.Unicode, Shape: []int{2}, Str: []string{"a", "b"}}, "", "sample 1 has label 2"},
		{&npy.Array{DType: npy.Unicode, Shape: []int{3}, Str: []string{"a", "b", "a"}}, "", `classes 0 and 2 are both named "a"`},
		{&npy.Array{DType: npy.Unicode, Shape: []int{3}, Str: []string{"a", "", "c"}}, "", "class 1 has an empty name"},
		{&npy.Array{DType: npy.Unicode, Shape: []int{3}, Str: []string{"a", "b", "c"}}, ":classes=4", "3 class names, but the spec says classes=4"},
	} {
		s, err := ParseSpec("npy:" + writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{"x": x, "y": y, "classes": bad.classes}) + bad.spec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = LoadArrays(s)
		wantErr(t, err, bad.frag)
	}

	// A directory of x.npy and y.npy; float64 samples, int32 labels.
	dir := t.TempDir()
	if err := npy.WriteFile(filepath.Join(dir, "x.npy"), &npy.Array{DType: npy.Float64, Shape: []int{3, 4}, F64: []float64{0.1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(filepath.Join(dir, "y.npy"), &npy.Array{DType: npy.Int32, Shape: []int{3}, I32: []int32{1, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	_, err = LoadString("npy:" + dir + ":limit=0")
	if err == nil || !strings.Contains(err.Error(), "not 8-bit images") {
		t.Errorf("float samples loaded as images: %v", err)
	}
	a2, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	check(t, a2, 3, 2, []int{4}, float32(0.1), []int64{1, 0, 1})
	if !slices.Equal(a2.Classes(), []string{"0", "1"}) {
		t.Errorf("unnamed classes %q", a2.Classes())
	}
	if err := a2.CheckSources(); err != nil {
		t.Errorf("unchanged: %v", err)
	}
	yp := filepath.Join(dir, "y.npy")
	later := time.Now().Add(time.Minute)
	os.Chtimes(yp, later, later)
	if err := a2.CheckSources(); err == nil || !strings.Contains(err.Error(), yp) {
		t.Errorf("labels touched: %v", err)
	}
}

// TestLoadArraysErrors: every bad archive is refused with a message that
// names what is wrong and where.
func TestLoadArraysErrors(t *testing.T) {
	x := npy.NewFloat32(seq(4*3, 1), 4, 3)
	y := npy.NewInt64([]int64{0, 1, 1, 0}, 4)
	nan := npy.NewFloat32(seq(4*3, 1), 4, 3)
	nan.F32[7] = float32(math.NaN())
	for _, tc := range []struct {
		name   string
		arrays map[string]*npy.Array
		spec   string
		frags  []string
	}{
		{"no labels", map[string]*npy.Array{"x": x, "labels": y}, "", []string{"x and y", "holds labels, x"}},
		{"no test split", map[string]*npy.Array{"x": x, "y": y}, ":test", []string{"test split", "x_test and y_test"}},
		{"one axis", map[string]*npy.Array{"x": npy.NewFloat32(seq(4, 1), 4), "y": y}, "", []string{"shape [4]", "at least one axis a sample"}},
		{"empty sample", map[string]*npy.Array{"x": npy.NewFloat32(nil, 4, 0), "y": y}, "", []string{"no values"}},
		{"no samples", map[string]*npy.Array{"x": npy.NewFloat32(nil, 0, 1<<40, 1<<40), "y": npy.NewInt64(nil, 0)}, "", []string{"no samples"}},
		{"labels count", map[string]*npy.Array{"x": x, "y": npy.NewInt64([]int64{0, 1, 1}, 3)}, "", []string{"y has shape [3]", "(4,)"}},
		{"labels 3-D", map[string]*npy.Array{"x": x, "y": npy.NewInt64(make([]int64, 16), 4, 2, 2)}, "", []string{"y has shape [4 2 2]"}},
		{"multi-hot not 0 or 1", map[string]*npy.Array{"x": x, "y": npy.NewInt64([]int64{0, 1, 1, 0, 2, 0, 0, 0}, 4, 2)}, "", []string{"sample 2 has 2 for label 0", "0s and 1s"}},
		{"multi-hot over classes", map[string]*npy.Array{"x": x, "y": npy.NewInt64(make([]int64, 8), 4, 2)}, ":classes=3", []string{"2 labels", "classes=3"}},
		{"float labels", map[string]*npy.Array{"x": x, "y": npy.NewFloat32(make([]float32, 4), 4)}, "", []string{"float32", "integer labels"}},
		{"uncertain classes", map[string]*npy.Array{"x": x, "y": y}, ":uncertain=zero", []string{"uncertain= says what a multi-hot label's -1 means", "a class a sample"}},
		{"negative label", map[string]*npy.Array{"x": x, "y": npy.NewInt64([]int64{0, 1, -3, 0}, 4)}, "", []string{"sample 2 has label -3"}},
		{"label over classes", map[string]*npy.Array{"x": x, "y": npy.NewInt64([]int64{0, 1, 5, 0}, 4)}, ":classes=3", []string{"sample 2 has label 5", "3 classes"}},
		{"NaN", map[string]*npy.Array{"x": nan, "y": y}, "", []string{"sample 2 holds NaN at element 1"}},
		{"int samples", map[string]*npy.Array{"x": npy.NewInt64(make([]int64, 12), 4, 3), "y": y}, "", []string{"samples of int64", "float32, float64 or uint8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeNPZ(t, t.TempDir(), false, tc.arrays)
			s, err := ParseSpec("npy:" + path + tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			_, err = LoadArrays(s)
			wantErr(t, err, tc.frags...)
		})
	}
	dir := t.TempDir()
	one := filepath.Join(dir, "x.npy")
	if err := npy.WriteFile(one, x); err != nil {
		t.Fatal(err)
	}
	_, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: one})
	wantErr(t, err, "one .npy array", "np.savez")
	_, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: filepath.Join(dir, "nope.npz")})
	wantErr(t, err, "nope.npz")
	_, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: dir})
	wantErr(t, err, "x_train and y_train", "holds x")
}

// TestArraysImages: uint8 samples shaped as images become Images in
// channel-major order; other samples do not.
func TestArraysImages(t *testing.T) {
	// Two 2×3 RGB samples, channels last: pixel p of channel c is 10p+c
	// (+100 for the second sample).
	hwc := make([]uint8, 2*2*3*3)
	for s := range 2 {
		for p := range 6 {
			for c := range 3 {
				hwc[s*18+p*3+c] = uint8(100*s + 10*p + c)
			}
		}
	}
	y := npy.NewInt64([]int64{1, 0}, 2)
	for _, tc := range []struct {
		name    string
		x       *npy.Array
		images  bool
		c, h, w int
	}{
		{"channels last", &npy.Array{DType: npy.Uint8, Shape: []int{2, 2, 3, 3}, U8: hwc}, true, 3, 2, 3},
		{"channels first", &npy.Array{DType: npy.Uint8, Shape: []int{2, 3, 2, 3}, U8: hwc}, true, 3, 2, 3},
		{"gray", &npy.Array{DType: npy.Uint8, Shape: []int{2, 6, 3}, U8: hwc}, true, 1, 6, 3},
		{"four channels", &npy.Array{DType: npy.Uint8, Shape: []int{2, 4, 5, 5}, U8: make([]uint8, 200)}, false, 0, 0, 0},
		{"clips", &npy.Array{DType: npy.Uint8, Shape: []int{2, 3, 1, 2, 3}, U8: hwc}, false, 0, 0, 0},
		{"float", npy.NewFloat32(make([]float32, 36), 2, 3, 2, 3), false, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{"x": tc.x, "y": y})
			a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: path})
			if err != nil {
				t.Fatal(err)
			}
			im, ok, err := a.Images()
			if err != nil || ok != tc.images {
				t.Fatalf("images %v, %v", ok, err)
			}
			if !ok {
				return
			}
			if h, w, _ := im.UniformSize(); im.Channels() != tc.c || h != tc.h || w != tc.w || im.Label(0) != 1 {
				t.Fatalf("%d×%d×%d, label %d", im.Channels(), h, w, im.Label(0))
			}
			px := im.Pixels(1)
			if tc.name == "channels last" {
				// Channel c's plane holds 10p + c + 100.
				for c := range 3 {
					for p := range 6 {
						if px[c*6+p] != uint8(100+10*p+c) {
							t.Fatalf("sample 1, channel %d, pixel %d: %d", c, p, px[c*6+p])
						}
					}
				}
			} else if !slices.Equal(px, hwc[18:]) {
				t.Fatalf("sample 1 pixels %v", px)
			}
			if err := im.CheckSources(); err != nil || len(im.sources) != 1 {
				t.Errorf("sources %v: %v", im.sources, err)
			}
		})
	}
}

// TestTensorView: samples fed as they are, of the model's shape or
// channels last or without the model's single channel; normalised per
// channel; cropped and flipped over the last two axes; the same bits
// whatever the number of workers.
func TestTensorView(t *testing.T) {
	// Two clips (C,T,H,W) = (2,2,3,4), value 1000s + 100c + 10·(4t+h)… kept simple: the index.
	const n, C, T, H, W = 2, 2, 2, 3, 4
	per := C * T * H * W
	vals := seq(n*per, 1)
	y := npy.NewInt64([]int64{0, 1}, n)
	load := func(t *testing.T, x *npy.Array) *Arrays {
		t.Helper()
		a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{"x": x, "y": y})})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	model := []int{C, T, H, W}
	fill := func(t *testing.T, v *TensorView, idx []int, rng *rand.Rand) []float32 {
		t.Helper()
		x := make([]float32, len(idx)*per)
		yy := make([]int64, len(idx))
		if err := v.Fill(x, yy, idx, rng); err != nil {
			t.Fatal(err)
		}
		for k, i := range idx {
			if yy[k] != int64(i) {
				t.Fatalf("labels %v for %v", yy, idx)
			}
		}
		return x
	}

	exact, err := NewTensorView(load(t, npy.NewFloat32(vals, n, C, T, H, W)), TensorPreprocess{Shape: model})
	if err != nil {
		t.Fatal(err)
	}
	if got := fill(t, exact, []int{1, 0}, nil); !slices.Equal(got[:per], vals[per:]) || !slices.Equal(got[per:], vals[:per]) {
		t.Fatalf("as they are: %v", got)
	}
	if !slices.Equal(exact.SampleShape(), model) {
		t.Errorf("shape %v", exact.SampleShape())
	}
	buf, lab, two := make([]float32, 2*per), make([]int64, 2), []int{1, 0}
	if a := testing.AllocsPerRun(20, func() { exact.Fill(buf, lab, two, nil) }); a != 0 {
		t.Errorf("%v allocations per Fill", a)
	}

	// Channels last: (T,H,W,C) holds at [t,h,w,c] what (C,T,H,W) holds at [c,t,h,w].
	last := make([]float32, n*per)
	for s := range n {
		for c := range C {
			for p := range T * H * W {
				last[s*per+p*C+c] = vals[s*per+c*T*H*W+p]
			}
		}
	}
	cl, err := NewTensorView(load(t, npy.NewFloat32(last, n, T, H, W, C)), TensorPreprocess{Shape: model})
	if err != nil {
		t.Fatal(err)
	}
	if got := fill(t, cl, []int{0, 1}, nil); !slices.Equal(got, vals) {
		t.Fatalf("channels last: %v", got)
	}

	// uint8 samples and a per-channel normalisation: (v/255 − m)/s.
	u8 := make([]uint8, n*per)
	for i := range u8 {
		u8[i] = uint8(i)
	}
	nv, err := NewTensorView(load(t, &npy.Array{DType: npy.Uint8, Shape: []int{n, C, T, H, W}, U8: u8}),
		TensorPreprocess{Shape: model, Norm: Norm{Mean: []float32{0.5, 0.25}, Std: []float32{0.5, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	got := fill(t, nv, []int{1}, nil)
	for j, g := range got {
		c := j / (T * H * W)
		m, s := []float32{0.5, 0.25}[c], []float32{0.5, 2}[c]
		if want := (float32(per+j)/255 - m) / s; math.Abs(float64(g-want)) > 1e-6 {
			t.Fatalf("element %d: %v, want %v", j, g, want)
		}
	}

	// A model of one channel takes samples without that axis.
	one, err := NewTensorView(load(t, npy.NewFloat32(vals, n, C*T, H, W)), TensorPreprocess{Shape: []int{1, C * T, H, W}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fill(t, one, []int{0, 1}, nil); !slices.Equal(got, vals) {
		t.Fatal("single channel added")
	}

	for _, bad := range []struct {
		shape []int
		p     TensorPreprocess
		frag  string
	}{
		{[]int{n, C, T, H, W}, TensorPreprocess{Shape: []int{C, T, W, H}}, "samples of shape 2×2×3×4, the model takes 2×2×4×3 (or channels last, 2×4×3×2)"},
		{[]int{n, C, T, H, W}, TensorPreprocess{Shape: model, Norm: Norm{Mean: []float32{0, 0, 0}, Std: []float32{1, 1, 1}}}, "3 values"},
		{[]int{n, per}, TensorPreprocess{Shape: []int{per}, Augment: Augment{Flip: true}}, "one axis"},
	} {
		_, err := NewTensorView(load(t, npy.NewFloat32(vals, bad.shape...)), bad.p)
		wantErr(t, err, bad.frag)
	}

	// Augmented: every (H,W) plane of a sample cropped by the same offset
	// and flipped alike, padding 0 before normalisation.
	aug, err := NewTensorView(load(t, npy.NewFloat32(vals, n, C, T, H, W)),
		TensorPreprocess{Shape: model, Norm: Norm{Mean: []float32{1}, Std: []float32{2}}, Augment: Augment{CropPad: 1, Flip: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Two generators of one seed: one predicts what Fill draws from the other.
	rng, pred := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	seen := map[augDraw]bool{}
	for range 40 {
		var d augDraw
		d.dy, d.dx = pred.IntN(3)-1, pred.IntN(3)-1
		d.flip = pred.Float64() < 0.5
		seen[d] = true
		got := fill(t, aug, []int{1}, rng)
		for pl := range C * T {
			for yy := range H {
				for xx := range W {
					cx := xx
					if d.flip {
						cx = W - 1 - xx
					}
					ry, rx := yy+d.dy, cx+d.dx
					want := float32(-0.5)
					if ry >= 0 && ry < H && rx >= 0 && rx < W {
						want = (vals[per+pl*H*W+ry*W+rx] - 1) / 2
					}
					if g := got[pl*H*W+yy*W+xx]; g != want {
						t.Fatalf("draw %+v, plane %d, (%d,%d): %v, want %v", d, pl, yy, xx, g, want)
					}
				}
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("40 draws gave %d distinct augmentations", len(seen))
	}

	// Many large samples fill on several workers with the bits of one.
	big := 64
	bv := seq(big*4096, 0.001)
	ys := make([]int64, big)
	a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{"x": npy.NewFloat32(bv, big, 1, 64, 64), "y": npy.NewInt64(ys, big)})})
	if err != nil {
		t.Fatal(err)
	}
	bview, err := NewTensorView(a, TensorPreprocess{Shape: []int{1, 64, 64}, Augment: Augment{CropPad: 4, Flip: true}})
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, big)
	for i := range idx {
		idx[i] = big - 1 - i
	}
	all := make([]float32, big*4096)
	if err := bview.Fill(all, nil, idx, rand.New(rand.NewPCG(7, 7))); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	for k, i := range idx {
		one := make([]float32, 4096)
		if err := bview.Fill(one, nil, []int{i}, r); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(one, all[k*4096:(k+1)*4096]) {
			t.Fatalf("sample %d differs filled in a batch", k)
		}
	}
}

// TestArraysFingerprint: the fingerprint follows the values and labels.
func TestArraysFingerprint(t *testing.T) {
	y := npy.NewInt64([]int64{0, 1}, 2)
	fp := func(x *npy.Array, y *npy.Array) string {
		a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{"x": x, "y": y})})
		if err != nil {
			t.Fatal(err)
		}
		return a.Fingerprint()
	}
	base := fp(npy.NewFloat32(seq(6, 1), 2, 3), y)
	if len(base) != 64 || base != fp(npy.NewFloat32(seq(6, 1), 2, 3), y) {
		t.Fatal("same arrays, other fingerprints")
	}
	changed := seq(6, 1)
	changed[4] = math.Nextafter32(changed[4], 10)
	for name, other := range map[string]string{
		"value":  fp(npy.NewFloat32(changed, 2, 3), y),
		"label":  fp(npy.NewFloat32(seq(6, 1), 2, 3), npy.NewInt64([]int64{1, 1}, 2)),
		"shape":  fp(npy.NewFloat32(seq(6, 1), 2, 3, 1), y),
		"uint8s": fp(&npy.Array{DType: npy.Uint8, Shape: []int{2, 3}, U8: []uint8{0, 1, 2, 3, 4, 5}}, y),
	} {
		if other == base {
			t.Errorf("%s changed, same fingerprint", name)
		}
	}
}

// TestMedMNIST: MedMNIST's archives load as they ship — train_images and
// train_labels ((N, 1) uint8), the test split test_images and test_labels
// before val_images and val_labels (which :val reads), ChestMNIST's
// multi-hot labels, and a
// 3-D set's (N, D, H, W) volumes fed to a (1, D, H, W) model — and a
// pair is taken whole: x_val with test_labels is no split.
func TestMedMNIST(t *testing.T) {
	u8 := func(n int, shape ...int) *npy.Array {
		size := 1
		for _, d := range shape {
			size *= d
		}
		b := make([]uint8, size)
		for i := range b {
			b[i] = uint8(i*7 + n)
		}
		return &npy.Array{DType: npy.Uint8, Shape: shape, U8: b}
	}
	labels := func(v ...uint8) *npy.Array { return &npy.Array{DType: npy.Uint8, Shape: []int{len(v), 1}, U8: v} }
	path := writeNPZ(t, t.TempDir(), true, map[string]*npy.Array{
		"train_images": u8(1, 4, 28, 28), "train_labels": labels(0, 1, 2, 1),
		"val_images": u8(2, 2, 28, 28), "val_labels": labels(2, 2),
		"test_images": u8(3, 3, 28, 28), "test_labels": labels(1, 0, 1),
	})
	a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: path})
	if err != nil || a.Len() != 4 || a.u8[0] != 1 || !slices.Equal(a.Labels(), []int64{0, 1, 2, 1}) {
		t.Fatalf("train: %v, %v", a, err)
	}
	if im, ok, err := a.Images(); !ok || err != nil || im.Len() != 4 {
		t.Errorf("train as images: %v %v", ok, err)
	}
	if a, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: path, Split: Test}); err != nil || a.Len() != 3 || a.u8[0] != 3 {
		t.Fatalf("test: %v, %v; want test_images", a, err)
	}
	// Asked for as validation: val_images, the test split left unseen.
	vs, err := ParseSpec("npy:" + path + ":val")
	if err != nil || !vs.Validation || vs.String() != "npy:"+path+":split=val" {
		t.Fatalf("spec %+v (%q), %v", vs, vs.String(), err)
	}
	if a, err = LoadArrays(vs); err != nil || a.Len() != 2 || a.u8[0] != 2 {
		t.Fatalf("val: %v, %v; want val_images", a, err)
	}
	// ChestMNIST: 14 findings a row.
	hot := &npy.Array{DType: npy.Uint8, Shape: []int{2, 14}, U8: make([]uint8, 28)}
	hot.U8[3], hot.U8[14], hot.U8[27] = 1, 1, 1
	chest := writeNPZ(t, t.TempDir(), true, map[string]*npy.Array{"train_images": u8(4, 2, 28, 28), "train_labels": hot})
	if a, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: chest}); err != nil || !a.MultiLabel() || a.NumClasses() != 14 {
		t.Errorf("ChestMNIST: %v, %v; want 14 labels", a, err)
	}
	// OrganMNIST3D: volumes for a Conv3d model.
	vol := writeNPZ(t, t.TempDir(), true, map[string]*npy.Array{"train_images": u8(5, 2, 28, 28, 28), "train_labels": labels(0, 1)})
	if a, err = LoadArrays(Spec{Scheme: SchemeNPY, Dir: vol}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTensorView(a, TensorPreprocess{Shape: []int{1, 28, 28, 28}}); err != nil {
		t.Errorf("3-D volumes for a (1, 28, 28, 28) model: %v", err)
	}
	mixed := writeNPZ(t, t.TempDir(), true, map[string]*npy.Array{"x_train": u8(1, 2, 28, 28), "y_train": labels(0, 1), "x_val": u8(2, 2, 28, 28), "test_labels": labels(1, 0)})
	if _, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: mixed, Split: Test}); err == nil || !strings.Contains(err.Error(), "under one pair of names — x_test and y_test, x_val and y_val, test_images and test_labels, val_images and val_labels") {
		t.Errorf("x_val with test_labels: %v", err)
	}
}
