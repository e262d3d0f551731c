package data

import (
	"fmt"
	"image"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// pixelFolder writes a folder of two classes of photos larger than a
// 12×12 input, of varied sizes, one of them gray among RGB ones.
func pixelFolder(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	sizes := [][2]int{{20, 30}, {40, 25}, {16, 16}, {33, 50}, {24, 24}}
	for c, class := range []string{"cat", "dog"} {
		for k, s := range sizes {
			path := filepath.Join(dir, class, fmt.Sprintf("%d.png", k))
			if c == 1 && k == 2 {
				writePNG(t, path, grayImage(s[1], s[0], func(x, y int) uint8 { return uint8(x*9 + y*5) }))
				continue
			}
			img := image.NewRGBA(image.Rect(0, 0, s[1], s[0]))
			for y := range s[0] {
				for x := range s[1] {
					img.Set(x, y, color.RGBA{uint8(x*7 + c*50), uint8(y * 11), uint8(x*y + k), 255})
				}
			}
			writePNG(t, path, img)
		}
	}
	return dir
}

// TestPixelsOnDisk: a load whose pixels go to disk (DPFINETUNE_PIXELS=disk,
// or fitted images of more than half the memory) holds the same samples,
// labels and fingerprint as the load in memory — gray images among RGB
// ones made RGB, fitted windows and whole photos alike —, maps them from a
// file already removed from its directory, and fills the same batches;
// a bad setting is an error.
func TestPixelsOnDisk(t *testing.T) {
	folder := pixelFolder(t)
	for _, fit := range []Fit{
		{Height: 12, Width: 12, Resize: Resize{Crop: true}},
		{Height: 12, Width: 12, Resize: Resize{Crop: true}, Whole: true},
		{Height: 12, Width: 12, Gray: true},
	} {
		t.Run(fit.String(), func(t *testing.T) {
			t.Setenv(pixelsEnv, "memory")
			mem, err := LoadFitted(mustSpec(t, "folder:"+folder), fit)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			t.Setenv(pixelsEnv, "disk")
			t.Setenv(pixelDirEnv, dir)
			disk, err := LoadFitted(mustSpec(t, "folder:"+folder), fit)
			if err != nil {
				t.Fatal(err)
			}
			if b, d := mem.PixelsOnDisk(); b != 0 || d != "" {
				t.Errorf("in memory: PixelsOnDisk %d, %q", b, d)
			}
			b, d := disk.PixelsOnDisk()
			if b == 0 || d != dir {
				t.Errorf("on disk: PixelsOnDisk %d, %q; want bytes in %s", b, d, dir)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("the pixel file is still in %s: %v", dir, left)
			}
			if disk.Len() != mem.Len() || disk.Channels() != mem.Channels() || !slices.Equal(disk.Labels(), mem.Labels()) {
				t.Fatalf("on disk: %d samples of %d channels, labels %v; in memory %d, %d, %v", disk.Len(), disk.Channels(), disk.Labels(), mem.Len(), mem.Channels(), mem.Labels())
			}
			for i := range mem.Len() {
				mh, mw := mem.Size(i)
				dh, dw := disk.Size(i)
				if mh != dh || mw != dw || !slices.Equal(mem.Pixels(i), disk.Pixels(i)) {
					t.Errorf("sample %d: %d×%d on disk, %d×%d in memory, pixels equal %v", i, dh, dw, mh, mw, slices.Equal(mem.Pixels(i), disk.Pixels(i)))
				}
			}
			if disk.Fingerprint() != mem.Fingerprint() {
				t.Error("the fingerprint depends on where the pixels are")
			}
			if disk.Bytes() >= mem.Bytes() {
				t.Errorf("memory held: %d bytes on disk, %d in memory", disk.Bytes(), mem.Bytes())
			}
			p := Preprocess{Channels: 3, Height: 12, Width: 12, Resize: fit.Resize}
			if fit.Gray {
				p.Channels = 1
			}
			x, y := make([]float32, mem.Len()*p.Channels*144), make([]float32, mem.Len()*p.Channels*144)
			idx := make([]int, mem.Len())
			for i := range idx {
				idx[i] = i
			}
			if err := mustView(t, mem, p).Fill(x, nil, idx, nil); err != nil {
				t.Fatal(err)
			}
			if err := mustView(t, disk, p).Fill(y, nil, idx, nil); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(x, y) {
				t.Error("a batch of the pixels on disk differs")
			}
		})
	}
	t.Setenv(pixelsEnv, "sometimes")
	_, err := LoadFitted(mustSpec(t, "folder:"+folder), Fit{Height: 12, Width: 12})
	wantErr(t, err, pixelsEnv+"=sometimes", "want disk or memory")
	t.Setenv(pixelsEnv, "disk")
	t.Setenv(pixelDirEnv, filepath.Join(folder, "nowhere"))
	_, err = LoadFitted(mustSpec(t, "folder:"+folder), Fit{Height: 12, Width: 12})
	wantErr(t, err, "pixels on disk", "nowhere")
}

// TestPixelsOnDiskChoice: without DPFINETUNE_PIXELS, fitted images go to
// disk where their estimated bytes exceed half the memory budget, and
// stay in memory otherwise, unfitted ones always (their sizes unknown
// until decoded); disk or memory as told; a directory without room is
// refused, naming the variable to set.
func TestPixelsOnDiskChoice(t *testing.T) {
	fit := Fit{Height: 224, Width: 224}
	for _, tc := range []struct {
		n      int
		fit    Fit
		budget int64
		mode   string
		disk   bool
	}{
		{1000, fit, 1 << 30, "", false},                                       // 150 MB of 1 GiB
		{10000, fit, 1 << 30, "", true},                                       // 1.5 GB of 1 GiB
		{10000, Fit{Height: 224, Width: 224, Gray: true}, 1 << 30, "", false}, // 502 MB (0.47 GiB): under half
		{10000, Fit{}, 1 << 20, "", false},
		{3000, Fit{Height: 224, Width: 224, Resize: Resize{Crop: true}, Whole: true}, 1 << 30, "", true}, // 256²·4/3·3 each: 786 MB
		{10000, fit, 1 << 30, "memory", false},
		{1, Fit{}, 1 << 30, "disk", true},
	} {
		if disk, _ := diskChoice(tc.n, tc.fit, tc.budget, tc.mode); disk != tc.disk {
			t.Errorf("%d images fitted %s, budget %d MiB, mode %q: on disk %v, want %v", tc.n, tc.fit, tc.budget>>20, tc.mode, disk, tc.disk)
		}
	}
	t.Setenv(pixelDirEnv, "/proc")
	if _, err := openPixelFile(1 << 30); err == nil || !strings.Contains(err.Error(), "set "+pixelDirEnv) {
		t.Errorf("a directory without room: %v", err)
	}
}

// TestPixelsOnDiskUnmapped: a load's mapping is released once no Images
// made from it holds it — not while a derived one (users named) does —
// so that parts loaded one after another give their disk back.
func TestPixelsOnDiskUnmapped(t *testing.T) {
	folder := pixelFolder(t)
	dir := t.TempDir()
	t.Setenv(pixelsEnv, "disk")
	t.Setenv(pixelDirEnv, dir)
	released := func() bool { _, ok := unmapped.Load(dir); return ok }
	m, err := LoadFitted(mustSpec(t, "folder:"+folder), Fit{Height: 12, Width: 12})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, m.Len())
	for i := range names {
		names[i] = fmt.Sprint("u", i%3)
	}
	derived, err := m.WithUsers(names)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(derived.Pixels(m.Len() - 1))
	m = nil
	for range 3 {
		runtime.GC()
	}
	if got := derived.Pixels(derived.Len() - 1); !slices.Equal(got, want) {
		t.Fatal("a derived dataset's pixels changed once its source was dropped")
	}
	if released() {
		t.Fatal("the mapping was released while a derived dataset held it")
	}
	runtime.KeepAlive(derived)
	derived = nil
	for range 50 {
		runtime.GC()
		if released() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("the mapping was not released once no dataset held it")
}
