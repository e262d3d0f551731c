package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/internal/hostile"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// npyHeader is a .npy file of format 1.0 whose header declares descr and
// shape, with no data.
func npyHeader(descr, shape string) []byte {
	h := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }"
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	return append([]byte{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, byte(len(h)), byte(len(h) >> 8)}, h...)
}

// pngWithSize is hostile.PNG: a 1×1 PNG whose header claims w×h pixels.
func pngWithSize(_ testing.TB, w, h uint32) []byte { return hostile.PNG(w, h) }

// TestHostileData: sizes declared by data files are checked before they
// are allocated, with a message naming the file and the limit.
func TestHostileData(t *testing.T) {
	png1 := func(t *testing.T, path string) { writePNG(t, path, grayImage(2, 2, func(x, y int) uint8 { return 1 })) }
	for _, tc := range []struct {
		name   string
		scheme string
		setup  func(t *testing.T, dir string)
		frags  func(dir string) []string
	}{
		{"png header 2^20×2^20", "folder", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
			writeFile(t, filepath.Join(dir, "b", "bomb.png"), pngWithSize(t, 1<<20, 1<<20))
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "b", "bomb.png"), "1048576×1048576 pixels", "limit of 268435456 pixels"}
		}},
		{"png header 20000×20000", "folder", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
			writeFile(t, filepath.Join(dir, "a", "2.png"), pngWithSize(t, 20000, 20000))
		}, func(dir string) []string { return []string{filepath.Join(dir, "a", "2.png"), "20000×20000"} }},
		{"png header 0 wide", "folder", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
			writeFile(t, filepath.Join(dir, "a", "2.png"), pngWithSize(t, 0, 5))
		}, func(dir string) []string { return []string{filepath.Join(dir, "a", "2.png")} }},
		{"idx header 512 GiB", "idx", func(t *testing.T, dir string) {
			idxSet{n: 4, h: 2, w: 2, tn: 1, labels: []byte{0, 1, 2, 3}, tlabs: []byte{0}}.write(t, dir)
			writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxFile([]int{1 << 19, 1 << 10, 1 << 10}, make([]byte, 16)))
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "train-images-idx3-ubyte"), "524288 images of 1024×1024", "memory available"}
		}},
		{"idx header over 1 TiB", "idx", func(t *testing.T, dir string) {
			idxSet{n: 4, h: 2, w: 2, tn: 1, labels: []byte{0, 1, 2, 3}, tlabs: []byte{0}}.write(t, dir)
			writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxFile([]int{1 << 31, 1 << 31, 1 << 31}, nil))
		}, func(dir string) []string { return []string{"implausibly large"} }},
		// 2⁴⁰ after two dimensions, then ×(2³²−1) overflows int64 (found
		// by FuzzIDX: the wrapped size reached make).
		{"idx header overflowing int64", "idx", func(t *testing.T, dir string) {
			idxSet{n: 4, h: 2, w: 2, tn: 1, labels: []byte{0, 1, 2, 3}, tlabs: []byte{0}}.write(t, dir)
			writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxFile([]int{1<<32 - 1, 1 << 8, 1<<32 - 1}, nil))
		}, func(dir string) []string { return []string{"implausibly large"} }},
		{"cifar sparse 1 TiB batch", "cifar10", func(t *testing.T, dir string) {
			f, err := os.Create(filepath.Join(dir, "data_batch_1.bin"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(1 << 40); err != nil {
				t.Skipf("no sparse 1 TiB file here: %v", err)
			}
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "data_batch_1.bin"), "1048576 MiB file", "memory available"}
		}},
		{"npy header 512 GiB", "npy", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "x.npy"), npyHeader("<f4", "(131072, 1024, 1024)"))
			if err := npy.WriteFile(filepath.Join(dir, "y.npy"), npy.NewInt64(make([]int64, 131072), 131072)); err != nil {
				t.Fatal(err)
			}
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "x.npy"), "[131072 1024 1024]", "memory available"}
		}},
		{"npy labels of 2^40", "npy", func(t *testing.T, dir string) {
			if err := npy.WriteFile(filepath.Join(dir, "x.npy"), npy.NewFloat32(make([]float32, 4), 4, 1)); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "y.npy"), npyHeader("<i8", "(1099511627776,)"))
		}, func(dir string) []string { return []string{filepath.Join(dir, "y.npy"), "too large"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := LoadString(tc.scheme + ":" + dir)
			wantErr(t, err, tc.frags(dir)...)
		})
	}
}

// TestSourcesChanged: a data file rewritten after loading (same size,
// other bytes, a new modification time) is detected, naming the file; the
// fingerprint of the samples follows their content, not the files' names.
func TestSourcesChanged(t *testing.T) {
	dir := t.TempDir()
	set := idxSet{n: 4, h: 2, w: 2, tn: 1, labels: []byte{0, 1, 2, 3}, tlabs: []byte{0}}
	set.write(t, dir)
	a, err := LoadString("idx:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CheckSources(); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	dir2 := t.TempDir()
	set.write(t, dir2)
	b, err := LoadString("idx:" + dir2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint() != b.Fingerprint() || len(a.Fingerprint()) != 64 {
		t.Errorf("same samples, fingerprints %s and %s", a.Fingerprint(), b.Fingerprint())
	}
	img := filepath.Join(dir, "train-images-idx3-ubyte")
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	writeFile(t, img, raw)
	later := time.Now().Add(time.Minute)
	os.Chtimes(img, later, later)
	if err := a.CheckSources(); err == nil || !strings.Contains(err.Error(), img) || !strings.Contains(err.Error(), "changed since it was loaded") {
		t.Errorf("rewritten: %v", err)
	}
	c, err := LoadString("idx:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Fingerprint() == a.Fingerprint() {
		t.Error("one pixel changed, same fingerprint")
	}
	os.Remove(img)
	if err := a.CheckSources(); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("removed: %v", err)
	}
}
