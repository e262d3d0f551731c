package data

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeptPixels: with DPFINETUNE_PIXEL_CACHE, a load keeps its decoded
// pixels in a file of its owner's alone, and a later load of the same
// files fitted alike maps them from it, decoding none — the same samples,
// sizes, channels, labels and fingerprint as a load in memory, for fitted
// windows, whole photos, gray fits and unfitted photos of varied sizes,
// gray among RGB —; another fit keeps a file of its own; a file touched
// or rewritten, or a kept file that does not read back whole, is decoded
// again (the new pixels, never the kept ones) and kept anew; a bad
// directory is an error.
func TestKeptPixels(t *testing.T) {
	folder := pixelFolder(t)
	spec := mustSpec(t, "folder:"+folder)
	cache := t.TempDir()
	load := func(t *testing.T, fit Fit, kept bool) *Images {
		t.Helper()
		if kept {
			t.Setenv(pixelCacheEnv, cache)
		} else {
			t.Setenv(pixelCacheEnv, "")
		}
		m, err := LoadFitted(spec, fit)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	same := func(t *testing.T, got, want *Images) {
		t.Helper()
		if got.Len() != want.Len() || got.Channels() != want.Channels() || !slices.Equal(got.Labels(), want.Labels()) || got.Fingerprint() != want.Fingerprint() {
			t.Fatalf("%d samples of %d channels, labels %v; want %d, %d, %v (fingerprints equal: %v)",
				got.Len(), got.Channels(), got.Labels(), want.Len(), want.Channels(), want.Labels(), got.Fingerprint() == want.Fingerprint())
		}
		for i := range want.Len() {
			gh, gw := got.Size(i)
			wh, ww := want.Size(i)
			if gh != wh || gw != ww || !slices.Equal(got.Pixels(i), want.Pixels(i)) {
				t.Errorf("sample %d: %d×%d, want %d×%d, pixels equal %v", i, gh, gw, wh, ww, slices.Equal(got.Pixels(i), want.Pixels(i)))
			}
		}
	}
	files := func() []string {
		m, _ := filepath.Glob(filepath.Join(cache, "pixels-*.dpf"))
		return m
	}
	fits := []Fit{
		{Height: 12, Width: 12, Resize: Resize{Crop: true}},
		{Height: 12, Width: 12, Resize: Resize{Crop: true}, Whole: true},
		{Height: 12, Width: 12, Gray: true},
		{}, // unfitted: each photo its own size
	}
	for k, fit := range fits {
		t.Run(fit.String(), func(t *testing.T) {
			mem := load(t, fit, false)
			before := decodedImages.Load()
			first := load(t, fit, true)
			path, reused := first.PixelsKept()
			if path == "" || reused || decodedImages.Load()-before != int64(mem.Len()) {
				t.Fatalf("the first load: kept in %q (reused %v), %d images decoded", path, reused, decodedImages.Load()-before)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(path) != cache {
				t.Errorf("the kept file %s: %v, %v", path, fi.Mode(), err)
			}
			if len(files()) != k+1 {
				t.Errorf("%d kept files after %d fits: %v", len(files()), k+1, files())
			}
			same(t, first, mem)
			before = decodedImages.Load()
			again := load(t, fit, true)
			if p, reused := again.PixelsKept(); p != path || !reused || decodedImages.Load() != before {
				t.Errorf("the second load: from %q (reused %v), %d images decoded; want %s read, none decoded", p, reused, decodedImages.Load()-before, path)
			}
			same(t, again, mem)
			if b, _ := again.PixelsOnDisk(); b == 0 {
				t.Error("the kept pixels are not mapped")
			}
		})
	}
	fit := fits[0]
	path, _ := load(t, fit, true).PixelsKept()
	// A file touched (its content the same): decoded again, kept anew.
	photo := filepath.Join(folder, "dog", "1.png")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(photo, later, later); err != nil {
		t.Fatal(err)
	}
	before := decodedImages.Load()
	m := load(t, fit, true)
	if p, reused := m.PixelsKept(); p != path || reused || decodedImages.Load() == before {
		t.Errorf("after a photo was touched: %q, reused %v, %d decoded", p, reused, decodedImages.Load()-before)
	}
	same(t, m, load(t, fit, false))
	// A photo rewritten: its new pixels.
	writePNG(t, photo, grayImage(30, 30, func(x, y int) uint8 { return uint8(x ^ y) }))
	m = load(t, fit, true)
	if _, reused := m.PixelsKept(); reused {
		t.Error("a rewritten photo's kept pixels were read")
	}
	same(t, m, load(t, fit, false))
	// Kept files that do not read back whole: decoded again, never
	// trusted, and kept anew.
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	index := int64(len(good)) - int64(m.Len())*keptIndexEntry
	for name, bad := range map[string]func([]byte) []byte{
		"truncated":      func(b []byte) []byte { return b[:len(b)-5] },
		"another magic":  func(b []byte) []byte { b[3] = 'X'; return b },
		"no header":      func(b []byte) []byte { return b[:100] },
		"empty":          func(b []byte) []byte { return nil },
		"another digest": func(b []byte) []byte { i := strings.Index(string(b), `"fresh":"`) + 9; b[i] ^= 1; return b },
		"an image past the pixels": func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[index:], uint64(index-10))
			return b
		},
		"a huge image": func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[index+8:], 1<<30)
			return b
		},
		"a negative size": func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[index+12:], 1<<31)
			return b
		},
		"a pixel changed": func(b []byte) []byte { // the first image's eighth byte
			b[binary.LittleEndian.Uint64(b[index:])+7] ^= 0x10
			return b
		},
		"an image in the header": func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[index:], 10)
			return b
		},
	} {
		if err := os.WriteFile(path, bad(slices.Clone(good)), 0o600); err != nil {
			t.Fatal(err)
		}
		before := decodedImages.Load()
		m := load(t, fit, true)
		if _, reused := m.PixelsKept(); reused || decodedImages.Load() == before {
			t.Errorf("%s: the kept file was read (%d decoded)", name, decodedImages.Load()-before)
		}
		same(t, m, load(t, fit, false))
		before = decodedImages.Load()
		if _, reused := load(t, fit, true).PixelsKept(); !reused || decodedImages.Load() != before {
			t.Errorf("%s: the kept file was not kept anew", name)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".pixels-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// A directory made where missing, its owner's alone; a file is none.
	made := filepath.Join(cache, "made", "here")
	t.Setenv(pixelCacheEnv, made)
	if _, err := LoadFitted(spec, fit); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(made); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v (%v)", made, fi.Mode(), err)
	}
	t.Setenv(pixelCacheEnv, path)
	_, err = LoadFitted(spec, fit)
	wantErr(t, err, pixelCacheEnv, path, "not a directory")
}

// FuzzKeptPixels feeds a load arbitrary kept pixel files — a good one's
// bytes, mutated —: it never panics, and reads one only whole (the
// samples inside the mapping, of the channels and sizes its index gives,
// the pixels their digest's).
func FuzzKeptPixels(f *testing.F) {
	folder := pixelFolder(f)
	cache := f.TempDir()
	f.Setenv(pixelCacheEnv, cache)
	spec, err := ParseSpec("folder:" + folder)
	if err != nil {
		f.Fatal(err)
	}
	fit := Fit{Height: 12, Width: 12, Resize: Resize{Crop: true}}
	m, err := LoadFitted(spec, fit)
	if err != nil {
		f.Fatal(err)
	}
	path, _ := m.PixelsKept()
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	// The load's kept file as its header says it.
	js, _, _ := strings.Cut(string(good[len(keptMagic):keptHeader]), "\x00")
	var head keptHead
	if err := json.Unmarshal([]byte(js), &head); err != nil || head.Images != m.Len() {
		f.Fatalf("the kept file's header %q: %v", js, err)
	}
	kf := &keptFile{dir: cache, path: path, fresh: head.Fresh, images: head.Images}
	if !kf.load(&Images{}) {
		f.Fatal("the good kept file does not load")
	}
	f.Add(good)
	f.Add(good[:keptHeader])
	f.Add([]byte(keptMagic + `{"fresh":"` + kf.fresh + `","images":10,"channels":3,"index":4096,"size":4256}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "k.dpf")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		k := *kf
		k.path = p
		var im Images
		if !k.load(&im) {
			return
		}
		if len(im.samples) != m.Len() || im.channels != 1 && im.channels != 3 {
			t.Fatalf("read %d samples of %d channels", len(im.samples), im.channels)
		}
		for i := range im.samples {
			h, w := im.Size(i)
			if h <= 0 || w <= 0 || len(im.Pixels(i)) != im.channels*h*w {
				t.Fatalf("sample %d: %d×%d, %d bytes", i, h, w, len(im.Pixels(i)))
			}
		}
	})
}

// TestPruneKept: a load that keeps a file removes the kept files no load
// has read for keptMaxAge and the temporary files of loads that did not
// finish older than keptTempMaxAge, and leaves the others — and a load
// that reads a kept file marks it used.
func TestPruneKept(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	files := map[string]time.Duration{ // name: age
		"pixels-old.dpf":      keptMaxAge + time.Hour,
		"pixels-recent.dpf":   keptMaxAge - time.Hour,
		".pixels-1.tmp":       keptTempMaxAge + time.Hour,
		".pixels-2.tmp":       time.Hour,
		"users-notes.txt":     10 * keptMaxAge,
		"pixels-elsewhere.db": 10 * keptMaxAge,
	}
	for name, age := range files {
		p := filepath.Join(dir, name)
		writeFile(t, p, []byte("x"))
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	pruneKept(dir, now)
	for name := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := err != nil; gone != (name == "pixels-old.dpf" || name == ".pixels-1.tmp") {
			t.Errorf("%s: removed %v", name, gone)
		}
	}
	// Through loads: an old kept file goes when another is kept; one read
	// is marked used.
	folder := pixelFolder(t)
	t.Setenv(pixelCacheEnv, dir)
	m, err := LoadFitted(mustSpec(t, "folder:"+folder), Fit{Height: 12, Width: 12})
	if err != nil {
		t.Fatal(err)
	}
	path, _ := m.PixelsKept()
	old := now.Add(-keptMaxAge - time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFitted(mustSpec(t, "folder:"+folder), Fit{Height: 12, Width: 12}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || now.Sub(fi.ModTime()) > time.Hour {
		t.Fatalf("a kept file read is not marked used: %v (%v)", fi.ModTime(), err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFitted(mustSpec(t, "folder:"+folder), Fit{Height: 10, Width: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a kept file no load read for keptMaxAge was not removed when another was kept")
	}
}
