package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ---- helpers ----

// idxFile returns an IDX file of unsigned bytes.
func idxFile(dims []int, data []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, data...)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// seqBytes returns n bytes k*mul+add mod 256.
func seqBytes(n, mul, add int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*mul + add)
	}
	return b
}

// idxSet describes the four files of a synthetic IDX dataset.
type idxSet struct {
	n, h, w       int
	tn            int
	gzip          bool
	labels, tlabs []byte
}

// write writes the set into dir and returns the expected train pixels.
func (s idxSet) write(t *testing.T, dir string) []byte {
	t.Helper()
	pix := seqBytes(s.n*s.h*s.w, 7, 3)
	tpix := seqBytes(s.tn*s.h*s.w, 5, 1)
	files := map[string][]byte{
		"train-images-idx3-ubyte": idxFile([]int{s.n, s.h, s.w}, pix),
		"train-labels-idx1-ubyte": idxFile([]int{len(s.labels)}, s.labels),
		"t10k-images-idx3-ubyte":  idxFile([]int{s.tn, s.h, s.w}, tpix),
		"t10k-labels-idx1-ubyte":  idxFile([]int{len(s.tlabs)}, s.tlabs),
	}
	for name, b := range files {
		if s.gzip {
			name, b = name+".gz", gz(b)
		}
		writeFile(t, filepath.Join(dir, name), b)
	}
	return pix
}

func mustLoad(t *testing.T, spec string) *Images {
	t.Helper()
	m, err := LoadString(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wantErr checks that err is non-nil and contains every fragment.
func wantErr(t *testing.T, err error, frags ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", frags)
	}
	for _, f := range frags {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not contain %q", err, f)
		}
	}
}

// ---- specs ----

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{"idx:/usr/share/datasets/fashion-mnist", Spec{Scheme: "idx", Dir: "/usr/share/datasets/fashion-mnist"}},
		{"IDX:d:split=test:limit=5", Spec{Scheme: "idx", Dir: "d", Split: Test, Limit: 5}},
		{"idx:d:limit=5:test", Spec{Scheme: "idx", Dir: "d", Split: Test, Limit: 5}},
		{"idx:d:classes=26", Spec{Scheme: "idx", Dir: "d", Classes: 26}},
		{"cifar10:./cifar-10-batches-bin:limit=5000", Spec{Scheme: "cifar10", Dir: "./cifar-10-batches-bin", Limit: 5000}},
		{"cifar100:c100:train", Spec{Scheme: "cifar100", Dir: "c100", Split: Train}},
		{"folder:/data/flowers:split=val", Spec{Scheme: "folder", Dir: "/data/flowers", Split: Test, Validation: true}},
		{"folder:/a:b/c:limit=3", Spec{Scheme: "folder", Dir: "/a:b/c", Limit: 3}},
		{"folder:/p:holdout=0.1:test", Spec{Scheme: "folder", Dir: "/p", Split: Test, Holdout: 0.1}},
		{"npy:/data/clips.npz:classes=400:test", Spec{Scheme: "npy", Dir: "/data/clips.npz", Split: Test, Classes: 400}},
		{`folder:/x/chest_xray:users=^(person\d+)_:holdout=0.2`, Spec{Scheme: "folder", Dir: "/x/chest_xray", Holdout: 0.2, Users: `^(person\d+)_`}},
		{`folder:/a:b:test:USERS=^([^/]+)/`, Spec{Scheme: "folder", Dir: "/a:b", Split: Test, Users: `^([^/]+)/`}},
		{`folder:/p:users=^(a=b)\x3a[^/]*:limit=4`, Spec{Scheme: "folder", Dir: "/p", Limit: 4, Users: `^(a=b)\x3a[^/]*`}},
		{"folder:/pacs/cxr:DICOM-USERS:holdout=0.1", Spec{Scheme: "folder", Dir: "/pacs/cxr", Holdout: 0.1, DICOMUsers: true}},
		{"csv:/pacs/labels.csv:dicom-users", Spec{Scheme: "csv", Dir: "/pacs/labels.csv", DICOMUsers: true}},
	} {
		got, err := ParseSpec(tc.in)
		if err != nil {
			t.Errorf("ParseSpec(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSpec(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		back, err := ParseSpec(got.String())
		if err != nil || back.Dir != got.Dir || back.Limit != got.Limit || back.split() != got.split() || back.Validation != got.Validation || back.Classes != got.Classes || back.Holdout != got.Holdout || back.Users != got.Users || back.DICOMUsers != got.DICOMUsers {
			t.Errorf("ParseSpec(%q).String() = %q does not read back: %+v, %v", tc.in, got.String(), back, err)
		}
	}
	for _, tc := range []struct {
		in    string
		frags []string
	}{
		{"mnist:/x", []string{`unknown scheme "mnist"`, "idx, cifar10, cifar100, folder, npy"}},
		{"/usr/share/datasets", []string{"want SCHEME:DIR", "idx, cifar10, cifar100, folder, npy"}},
		{"idx:", []string{"empty directory"}},
		{"idx:d:limit=-1", []string{"limit=-1", "non-negative"}},
		{"idx:d:limit=x", []string{"limit=x"}},
		{"idx:d:split=dev", []string{`unknown split "dev"`}},
		{"cifar10:d:classes=5", []string{"classes= applies to the idx and npy schemes only"}},
		{"npy:d.npz:holdout=0.2", []string{"holdout= applies to the folder and csv schemes only"}},
		{"idx:d:limit=1:limit=2", []string{"limit given twice"}},
		{"idx:d:seed=1", []string{`unknown option "seed"`, "limit=N"}},
		{"folder:d:holdout=0", []string{"holdout=0", "between 0 and 1"}},
		{"folder:d:holdout=1", []string{"holdout=1", "between 0 and 1"}},
		{"folder:d:holdout=NaN", []string{"holdout=NaN"}},
		{"cifar10:d:holdout=0.1", []string{"holdout= applies to the folder and csv schemes only"}},
		{"idx:d:users=x", []string{"users= applies to the folder and csv schemes only"}},
		{"folder:d:root=x", []string{"root= applies to the csv scheme only"}},
		{"npy:d.npz:label=dx", []string{"label= applies to the csv scheme only"}},
		{"csv:l.csv:path=", []string{"path=", "want a column's name"}},
		{"csv:l.csv:labels=A,B:label=C", []string{"give one"}},
		{"csv:l.csv:users=x:user=patient", []string{"users=REGEX", "user=COL", "give one"}},
		{"csv:l.csv:labels=A..", []string{`the range "A.."`, "FIRST..LAST"}},
		{"csv:l.csv:labels=*,A", []string{"* (every column but the image path and user columns) stands alone"}},
		{"csv:l.csv:labels=A,A", []string{"distinct"}},
		{"folder:d:users=(", []string{"users=(", "bad regular expression"}},
		{"folder:d:users=", []string{"users=", "want a regular expression"}},
		{"folder:d:users=a:users=b", []string{"users given twice"}},
		{"folder:d:users=(?i:p)", []string{`directory "d:users=(?i:p)"`, "may not contain ':'"}},
		{"folder:d:users=(?i:p)=1", []string{`unknown option "p)"`, "may not contain ':'"}},
		{"idx:d:dicom-users", []string{"dicom-users applies to the folder and csv schemes only"}},
		{"csv:l.csv:dicom-users:user=pid", []string{"dicom-users", "user=COL", "give one"}},
		{"folder:d:dicom-users=yes", []string{"dicom-users takes no value"}},
		{"folder:d:dicom-users:users=^(p)", []string{"users=REGEX", "dicom-users", "give one"}},
		{"folder:d:dicom-users:dicom-users", []string{"dicom-users given twice"}},
	} {
		_, err := ParseSpec(tc.in)
		wantErr(t, err, tc.frags...)
	}
}

// ---- IDX ----

func TestIDX(t *testing.T) {
	labels := []byte{0, 1, 2, 9, 4}
	for _, tc := range []struct {
		name string
		gzip bool
		opt  string
		n    int
	}{
		{"plain", false, "", 5},
		{"gzip", true, "", 5},
		{"limit", true, ":limit=3", 3},
		{"limit-over", false, ":limit=50", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pix := idxSet{n: 5, h: 3, w: 4, tn: 2, gzip: tc.gzip, labels: labels, tlabs: []byte{7, 8}}.write(t, dir)
			m := mustLoad(t, "idx:"+dir+tc.opt)
			if m.Len() != tc.n || m.NumClasses() != 10 || m.Channels() != 1 {
				t.Fatalf("%s: got %d samples, %d classes, %d channels", m, m.Len(), m.NumClasses(), m.Channels())
			}
			if h, w, ok := m.UniformSize(); !ok || h != 3 || w != 4 {
				t.Fatalf("size %d×%d %v", h, w, ok)
			}
			for i := range tc.n {
				if !bytes.Equal(m.Pixels(i), pix[i*12:(i+1)*12]) {
					t.Errorf("sample %d pixels %v, want %v", i, m.Pixels(i), pix[i*12:(i+1)*12])
				}
				if m.Label(i) != int(labels[i]) {
					t.Errorf("sample %d label %d, want %d", i, m.Label(i), labels[i])
				}
			}
			te := mustLoad(t, "idx:"+dir+":test")
			if te.Len() != 2 || te.Label(1) != 8 {
				t.Errorf("test split: %d samples, labels %v", te.Len(), te.Labels())
			}
		})
	}
}

func TestIDXErrors(t *testing.T) {
	good := idxSet{n: 4, h: 2, w: 2, tn: 1, labels: []byte{0, 1, 2, 3}, tlabs: []byte{0}}
	img := func(dir string) string { return filepath.Join(dir, "train-images-idx3-ubyte") }
	lbl := func(dir string) string { return filepath.Join(dir, "train-labels-idx1-ubyte") }
	for _, tc := range []struct {
		name  string
		spec  string // appended to "idx:"+dir
		setup func(t *testing.T, dir string)
		frags func(dir string) []string
	}{
		{"missing dir", "/nope", func(t *testing.T, dir string) {},
			func(dir string) []string { return []string{"idx: dataset directory", "/nope"} }},
		{"missing images", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			os.Remove(img(dir))
		}, func(dir string) []string {
			return []string{dir, "missing train images file", "train-images-idx3-ubyte, train-images-idx3-ubyte.gz"}
		}},
		{"missing test labels", ":test", func(t *testing.T, dir string) {
			good.write(t, dir)
			os.Remove(filepath.Join(dir, "t10k-labels-idx1-ubyte"))
		}, func(dir string) []string { return []string{"missing t10k labels file", "t10k-labels-idx1-ubyte.gz"} }},
		{"truncated images", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, img(dir), idxFile([]int{4, 2, 2}, make([]byte, 13)))
		}, func(dir string) []string {
			return []string{img(dir), "truncated", "4 images of 2×2 (16 bytes of data)", "file holds only 13"}
		}},
		{"truncated gzip images", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			os.Remove(img(dir))
			z := gz(idxFile([]int{4, 2, 2}, seqBytes(4000, 7, 1)[:16]))
			writeFile(t, img(dir)+".gz", z[:len(z)-20])
		}, func(dir string) []string {
			return []string{img(dir) + ".gz", "truncated", "decompressed file holds only"}
		}},
		{"gzip without trailer", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			os.Remove(img(dir))
			z := gz(idxFile([]int{4, 2, 2}, make([]byte, 16)))
			writeFile(t, img(dir)+".gz", z[:len(z)-4])
		}, func(dir string) []string { return []string{img(dir) + ".gz", "truncated gzip stream"} }},
		{"truncated header", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, img(dir), []byte{0, 0, 8, 3, 0, 0})
		}, func(dir string) []string { return []string{img(dir), "truncated", "3 dimension sizes"} }},
		{"trailing bytes", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, img(dir), idxFile([]int{4, 2, 2}, make([]byte, 20)))
		}, func(dir string) []string { return []string{img(dir), "4 bytes beyond"} }},
		{"labels as images", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, img(dir), idxFile([]int{4}, make([]byte, 4)))
		}, func(dir string) []string {
			return []string{img(dir), "bad magic number 0x00000801, want 0x00000803", "images (idx3)"}
		}},
		{"bad magic labels", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, lbl(dir), []byte("PK\x03\x04 not an idx file"))
		}, func(dir string) []string { return []string{lbl(dir), "bad magic number 0x504b0304, want 0x00000801"} }},
		{"count mismatch", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, lbl(dir), idxFile([]int{3}, []byte{0, 1, 2}))
		}, func(dir string) []string {
			return []string{img(dir) + " holds 4 images but " + lbl(dir) + " holds 3 labels"}
		}},
		{"label out of range", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			writeFile(t, lbl(dir), idxFile([]int{4}, []byte{0, 1, 10, 3}))
		}, func(dir string) []string {
			return []string{lbl(dir), "sample 2 has label 10", "10 classes (labels 0..9)"}
		}},
		{"label out of declared classes", ":classes=3", func(t *testing.T, dir string) {
			good.write(t, dir)
		}, func(dir string) []string { return []string{"sample 3 has label 3", "3 classes"} }},
		{"corrupt gzip", "", func(t *testing.T, dir string) {
			good.write(t, dir)
			os.Remove(img(dir))
			z := gz(idxFile([]int{4, 2, 2}, make([]byte, 16)))
			z[len(z)-6] ^= 0xff // the CRC-32 / size trailer
			writeFile(t, img(dir)+".gz", z)
		}, func(dir string) []string { return []string{img(dir) + ".gz", "gzip"} }},
		{"empty", "", func(t *testing.T, dir string) {
			idxSet{n: 0, h: 2, w: 2, tn: 0}.write(t, dir)
		}, func(dir string) []string { return []string{img(dir), "no images"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			spec := "idx:" + dir + tc.spec
			if strings.HasPrefix(tc.spec, "/") {
				spec = "idx:" + tc.spec
			}
			_, err := LoadString(spec)
			wantErr(t, err, tc.frags(dir)...)
		})
	}
}

// Labels with more classes than the default ten load with classes=N.
func TestIDXClasses(t *testing.T) {
	dir := t.TempDir()
	idxSet{n: 2, h: 1, w: 1, tn: 1, labels: []byte{25, 3}, tlabs: []byte{0}}.write(t, dir)
	m := mustLoad(t, "idx:"+dir+":classes=26")
	if m.NumClasses() != 26 || m.Label(0) != 25 {
		t.Errorf("%s: label 0 = %d", m, m.Label(0))
	}
}

func TestFMNISTSmall(t *testing.T) {
	for _, tc := range []struct {
		split    string
		n, first int
	}{
		// Fashion-MNIST's first training image is an ankle boot (9), as
		// is its first test image.
		{"train", fmnistSmallTrain, 9},
		{"test", fmnistSmallTest, 9},
	} {
		m := mustLoad(t, "idx:"+fmnistSmallDir+":"+tc.split)
		if m.Len() != tc.n || m.NumClasses() != 10 || m.Channels() != 1 {
			t.Fatalf("%s", m)
		}
		if h, w, _ := m.UniformSize(); h != 28 || w != 28 {
			t.Fatalf("%s", m)
		}
		if m.Label(0) != tc.first {
			t.Errorf("%s: first label %d, want %d", tc.split, m.Label(0), tc.first)
		}
		count := make([]int, 10)
		for _, l := range m.Labels() {
			count[l]++
		}
		for c, k := range count {
			if k < tc.n/20 {
				t.Errorf("%s: class %d has only %d of %d samples", tc.split, c, k, tc.n)
			}
		}
		if m.DefaultNorm().String() != "0.286/0.353" {
			t.Errorf("default norm %s", m.DefaultNorm())
		}
		// The default normalisation whitens the real data.
		v := mustView(t, m, Preprocess{Norm: m.DefaultNorm()})
		idx := make([]int, m.Len())
		for i := range idx {
			idx[i] = i
		}
		x := make([]float32, m.Len()*28*28)
		if err := v.Fill(x, nil, idx, nil); err != nil {
			t.Fatal(err)
		}
		var s1, s2 float64
		for _, f := range x {
			s1 += float64(f)
			s2 += float64(f) * float64(f)
		}
		mean := s1 / float64(len(x))
		std := math.Sqrt(s2/float64(len(x)) - mean*mean)
		if math.Abs(mean) > 0.03 || math.Abs(std-1) > 0.03 {
			t.Errorf("%s: normalised mean %.4f std %.4f, want about 0 and 1", tc.split, mean, std)
		}
	}
}

// The Debian dataset-fashion-mnist path works as is.
func TestDebianFashionMNIST(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(dir); err != nil {
		t.Skip(err)
	}
	for split, n := range map[string]int{"train": 60000, "test": 10000} {
		m := mustLoad(t, "idx:"+dir+":"+split)
		if m.Len() != n || m.NumClasses() != 10 {
			t.Errorf("%s", m)
		}
	}
}

// ---- CIFAR ----

// cifarRecord returns one CIFAR record with the given label byte(s) and
// pixels filled with seed.
func cifarRecord(seed byte, labels ...byte) []byte {
	return append(append([]byte(nil), labels...), seqBytes(cifarPixels, 3, int(seed))...)
}

func TestCIFAR10(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "cifar-10-batches-bin") // as the tarball extracts
	for b := 1; b <= 5; b++ {
		var f []byte
		for r := range 3 {
			f = append(f, cifarRecord(byte(10*b+r), byte((b+r)%10))...)
		}
		writeFile(t, filepath.Join(sub, "data_batch_"+string(rune('0'+b))+".bin"), f)
	}
	writeFile(t, filepath.Join(sub, "test_batch.bin"), append(cifarRecord(1, 7), cifarRecord(2, 3)...))
	for _, tc := range []struct {
		spec   string
		n      int
		labels []int64
	}{
		{"cifar10:" + dir, 15, []int64{1, 2, 3, 2, 3, 4, 3, 4, 5, 4, 5, 6, 5, 6, 7}},
		{"cifar10:" + sub + ":limit=4", 4, []int64{1, 2, 3, 2}},
		{"cifar10:" + dir + ":test", 2, []int64{7, 3}},
	} {
		m := mustLoad(t, tc.spec)
		if m.Len() != tc.n || m.Channels() != 3 || m.NumClasses() != 10 || m.Classes()[0] != "airplane" {
			t.Fatalf("%s: %s", tc.spec, m)
		}
		if !reflect.DeepEqual(m.Labels(), tc.labels) {
			t.Errorf("%s: labels %v, want %v", tc.spec, m.Labels(), tc.labels)
		}
		if h, w, _ := m.UniformSize(); h != 32 || w != 32 {
			t.Errorf("size %d×%d", h, w)
		}
	}
	m := mustLoad(t, "cifar10:"+dir)
	if want := seqBytes(cifarPixels, 3, 21); !bytes.Equal(m.Pixels(4), want) {
		t.Errorf("sample 4 (batch 2, record 1): pixels differ")
	}
}

func TestCIFAR100(t *testing.T) {
	dir := t.TempDir()
	// Coarse label first, fine label second.
	writeFile(t, filepath.Join(dir, "train.bin"), append(cifarRecord(5, 19, 99), cifarRecord(6, 0, 42)...))
	writeFile(t, filepath.Join(dir, "test.bin"), cifarRecord(7, 1, 1))
	m := mustLoad(t, "cifar100:"+dir)
	if m.Len() != 2 || m.NumClasses() != 100 || m.Label(0) != 99 || m.Label(1) != 42 {
		t.Fatalf("%s: labels %v", m, m.Labels())
	}
	if !bytes.Equal(m.Pixels(1), seqBytes(cifarPixels, 3, 6)) {
		t.Errorf("pixels differ")
	}
	if m.DefaultNorm().String() != "0.5071,0.4865,0.4409/0.2673,0.2564,0.2762" {
		t.Errorf("default norm %s", m.DefaultNorm())
	}
}

func TestCIFARErrors(t *testing.T) {
	batch := func(labels ...byte) []byte {
		var b []byte
		for _, l := range labels {
			b = append(b, cifarRecord(l, l)...)
		}
		return b
	}
	full := func(t *testing.T, dir string) {
		for b := 1; b <= 5; b++ {
			writeFile(t, filepath.Join(dir, "data_batch_"+string(rune('0'+b))+".bin"), batch(1, 2))
		}
		writeFile(t, filepath.Join(dir, "test_batch.bin"), batch(3))
	}
	for _, tc := range []struct {
		name   string
		scheme string
		split  string
		setup  func(t *testing.T, dir string)
		frags  func(dir string) []string
	}{
		{"missing batch", "cifar10", "", func(t *testing.T, dir string) {
			full(t, dir)
			os.Remove(filepath.Join(dir, "data_batch_4.bin"))
		}, func(dir string) []string { return []string{dir, "missing train split file data_batch_4.bin"} }},
		{"missing test", "cifar10", ":test", func(t *testing.T, dir string) {
			full(t, dir)
			os.Remove(filepath.Join(dir, "test_batch.bin"))
		}, func(dir string) []string { return []string{"missing test split file test_batch.bin"} }},
		{"truncated", "cifar10", "", func(t *testing.T, dir string) {
			full(t, dir)
			writeFile(t, filepath.Join(dir, "data_batch_2.bin"), batch(1, 2)[:2*3073-100])
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "data_batch_2.bin"), "truncated", "1 whole 3073-byte records and 2973 bytes over"}
		}},
		{"empty", "cifar10", ":test", func(t *testing.T, dir string) {
			full(t, dir)
			writeFile(t, filepath.Join(dir, "test_batch.bin"), nil)
		}, func(dir string) []string { return []string{filepath.Join(dir, "test_batch.bin"), "empty file"} }},
		{"label", "cifar10", "", func(t *testing.T, dir string) {
			full(t, dir)
			writeFile(t, filepath.Join(dir, "data_batch_3.bin"), batch(1, 12))
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "data_batch_3.bin"), "record 1 (sample 5) has label 12", "10 classes"}
		}},
		{"fine label", "cifar100", "", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "train.bin"), append(cifarRecord(0, 1, 2), cifarRecord(0, 1, 100)...))
		}, func(dir string) []string {
			return []string{"train.bin", "record 1 (sample 1) has label 100", "100 classes"}
		}},
		{"cifar100 truncated", "cifar100", "", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "train.bin"), cifarRecord(0, 1)) // one label byte short
		}, func(dir string) []string { return []string{"train.bin", "truncated", "3074-byte records"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := LoadString(tc.scheme + ":" + dir + tc.split)
			wantErr(t, err, tc.frags(dir)...)
		})
	}
}

// ---- folders ----

func writePNG(t testing.TB, path string, img image.Image) {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, buf.Bytes())
}

func writeJPEG(t *testing.T, path string, img image.Image) {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, buf.Bytes())
}

func grayImage(w, h int, f func(x, y int) uint8) *image.Gray {
	g := image.NewGray(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			g.SetGray(x, y, color.Gray{f(x, y)})
		}
	}
	return g
}

func flatRGB(w, h int, c color.NRGBA) *image.NRGBA {
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.SetNRGBA(x, y, c)
		}
	}
	return m
}

func TestFolderGray(t *testing.T) {
	dir := t.TempDir()
	// Class names sort to labels: cat 0, dog 1, emu 2. Hidden entries and
	// other files are ignored.
	writePNG(t, filepath.Join(dir, "dog", "b.png"), grayImage(3, 2, func(x, y int) uint8 { return uint8(10*y + x) }))
	writePNG(t, filepath.Join(dir, "dog", "a.png"), grayImage(3, 2, func(x, y int) uint8 { return 200 }))
	writePNG(t, filepath.Join(dir, "cat", "z.PNG"), grayImage(3, 2, func(x, y int) uint8 { return 1 }))
	writeJPEG(t, filepath.Join(dir, "emu", "e.jpg"), grayImage(3, 2, func(x, y int) uint8 { return 128 }))
	writeFile(t, filepath.Join(dir, "emu", "notes.txt"), []byte("not an image"))
	writeFile(t, filepath.Join(dir, ".cache", "x.png"), []byte("ignored"))
	writeFile(t, filepath.Join(dir, "dog", ".hidden.png"), []byte("ignored"))

	m := mustLoad(t, "folder:"+dir)
	if !reflect.DeepEqual(m.Classes(), []string{"cat", "dog", "emu"}) {
		t.Fatalf("classes %v", m.Classes())
	}
	// Round-robin over classes: cat/z, dog/a, emu/e, dog/b.
	if !reflect.DeepEqual(m.Labels(), []int64{0, 1, 2, 1}) {
		t.Fatalf("labels %v", m.Labels())
	}
	if m.Channels() != 1 {
		t.Fatalf("channels %d", m.Channels())
	}
	if !bytes.Equal(m.Pixels(3), []byte{0, 1, 2, 10, 11, 12}) || m.Pixels(1)[0] != 200 || m.Pixels(0)[5] != 1 {
		t.Errorf("pixels %v %v %v", m.Pixels(3), m.Pixels(1), m.Pixels(0))
	}
	if p := m.Pixels(2); p[0] < 126 || p[0] > 130 {
		t.Errorf("gray JPEG pixel %d, want about 128", p[0])
	}
	if m.DefaultNorm().String() != "0.485,0.456,0.406/0.229,0.224,0.225" {
		t.Errorf("default norm %s", m.DefaultNorm())
	}
	if l := mustLoad(t, "folder:"+dir+":limit=2"); !reflect.DeepEqual(l.Labels(), []int64{0, 1}) {
		t.Errorf("limit=2: labels %v", l.Labels())
	}
}

func TestFolderMixed(t *testing.T) {
	dir := t.TempDir()
	// An RGB PNG with alpha, a gray PNG of another size, and an RGB JPEG:
	// the dataset is RGB and keeps each size.
	writePNG(t, filepath.Join(dir, "train", "a", "1.png"), flatRGB(4, 3, color.NRGBA{200, 100, 50, 128}))
	writePNG(t, filepath.Join(dir, "train", "a", "2.png"), grayImage(2, 5, func(x, y int) uint8 { return 77 }))
	writeJPEG(t, filepath.Join(dir, "train", "b", "1.jpeg"), flatRGB(8, 8, color.NRGBA{0, 128, 255, 255}))
	writePNG(t, filepath.Join(dir, "val", "b", "9.png"), grayImage(2, 2, func(x, y int) uint8 { return 9 }))

	m := mustLoad(t, "folder:"+dir)
	if m.Len() != 3 || m.Channels() != 3 || m.NumClasses() != 2 {
		t.Fatalf("%s", m)
	}
	if _, _, ok := m.UniformSize(); ok {
		t.Fatal("sizes should vary")
	}
	// Order: a/1, b/1, a/2.
	if h, w := m.Size(0); h != 3 || w != 4 {
		t.Errorf("sample 0 size %d×%d", h, w)
	}
	if h, w := m.Size(2); h != 5 || w != 2 {
		t.Errorf("sample 2 size %d×%d", h, w)
	}
	if p := m.Pixels(0); p[0] != 200 || p[12] != 100 || p[24] != 50 {
		t.Errorf("NRGBA pixels: R %d G %d B %d, want 200 100 50 (alpha dropped)", p[0], p[12], p[24])
	}
	if p := m.Pixels(2); len(p) != 30 || p[0] != 77 || p[10] != 77 || p[29] != 77 {
		t.Errorf("gray replicated to RGB: %v", p)
	}
	p := m.Pixels(1)
	for c, want := range []int{0, 128, 255} {
		if got := int(p[c*64+27]); got < want-3 || got > want+3 {
			t.Errorf("JPEG channel %d = %d, want about %d", c, got, want)
		}
	}
	te := mustLoad(t, "folder:"+dir+":test")
	if te.Len() != 1 || te.Label(0) != 1 || te.NumClasses() != 2 || te.Channels() != 1 {
		t.Errorf("val split: %s labels %v", te, te.Labels())
	}

	// Varied sizes are resized by the view.
	v, err := NewView(m, Preprocess{Channels: 3, Height: 6, Width: 6})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 3*3*36)
	if err := v.Fill(x, nil, []int{0, 1, 2}, nil); err != nil {
		t.Fatal(err)
	}
	if got := x[2*108+36*1+7] * 255; got < 76.99 || got > 77.01 {
		t.Errorf("resized flat gray image: %g, want 77", got)
	}
}

func TestFolderErrors(t *testing.T) {
	png1 := func(t *testing.T, path string) { writePNG(t, path, grayImage(2, 2, func(x, y int) uint8 { return 1 })) }
	for _, tc := range []struct {
		name  string
		split string
		setup func(t *testing.T, dir string)
		frags func(dir string) []string
	}{
		{"missing", "", func(t *testing.T, dir string) { os.Remove(dir) },
			func(dir string) []string { return []string{"folder: dataset directory", dir} }},
		{"empty folder", "", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "readme.txt"), []byte("x"))
		}, func(dir string) []string { return []string{dir, "no class sub-directories"} }},
		{"empty class", "", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
			writeFile(t, filepath.Join(dir, "b", "x.txt"), []byte("x"))
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "b"), "holds no images (PNG, JPEG, BMP, TIFF, WebP, Netpbm, DICOM or NIfTI", "DICOM files named without an extension"}
		}},
		{"corrupt png", "", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
			writeFile(t, filepath.Join(dir, "a", "2.png"), []byte("\x89PNG\r\n\x1a\ngarbage"))
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "a", "2.png"), "corrupt or unsupported image"}
		}},
		{"truncated jpeg", "", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
			var buf bytes.Buffer
			jpeg.Encode(&buf, flatRGB(16, 16, color.NRGBA{1, 2, 3, 255}), nil)
			writeFile(t, filepath.Join(dir, "b", "cut.jpg"), buf.Bytes()[:buf.Len()/2])
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "b", "cut.jpg"), "corrupt or unsupported image"}
		}},
		{"no test split", ":test", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "a", "1.png"))
		}, func(dir string) []string { return []string{dir, "has no test split", filepath.Join(dir, "train")} }},
		{"train without test", ":test", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "train", "a", "1.png"))
		}, func(dir string) []string { return []string{"has a train/ directory but no test/ or val/"} }},
		{"unknown test class", ":test", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "train", "a", "1.png"))
			png1(t, filepath.Join(dir, "test", "zebra", "1.png"))
		}, func(dir string) []string {
			return []string{filepath.Join(dir, "test", "zebra"), `class "zebra" is not among the 1 training classes`}
		}},
		{"empty test", ":test", func(t *testing.T, dir string) {
			png1(t, filepath.Join(dir, "train", "a", "1.png"))
			os.MkdirAll(filepath.Join(dir, "test"), 0o755)
		}, func(dir string) []string { return []string{filepath.Join(dir, "test"), "no class sub-directories"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := LoadString("folder:" + dir + tc.split)
			wantErr(t, err, tc.frags(dir)...)
		})
	}
}

func TestNewImages(t *testing.T) {
	if _, err := NewImages([]string{"a", "b"}, 1, 1, 2, []uint8{1, 2, 3, 4}, []int64{0, 2}); err == nil {
		t.Error("label 2 of 2 classes accepted")
	} else {
		wantErr(t, err, "sample 1 has label 2", "2 classes (labels 0..1)")
	}
	if _, err := NewImages([]string{"a"}, 1, 1, 2, []uint8{1, 2, 3}, []int64{0, 0}); err == nil {
		t.Error("short pixels accepted")
	}
	m, err := NewImages([]string{"a"}, 1, 1, 2, []uint8{1, 2, 3, 4}, []int64{0, 0})
	if err != nil || m.Len() != 2 || m.Bytes() != 4+2*8 {
		t.Errorf("%v %v", m, err)
	}
}

// TestFolderHoldout: holdout=F splits the training classes — round(F·n)
// of a class held out, at least one of two or more, never all — into
// disjoint test and training splits that together are the class, chosen
// the same at every load and by the files' paths, not their contents; a
// test directory is not read; adding a file moves at most one other.
func TestFolderHoldout(t *testing.T) {
	png1 := func(t *testing.T, path string) { writePNG(t, path, grayImage(2, 2, func(x, y int) uint8 { return 1 })) }
	dir := t.TempDir()
	sizes := map[string]int{"one": 1, "two": 2, "ten": 10, "seven": 7}
	for class, n := range sizes {
		for k := range n {
			png1(t, filepath.Join(dir, "train", class, fmt.Sprintf("%02d.png", k)))
		}
	}
	png1(t, filepath.Join(dir, "test", "ten", "x.png")) // not read with holdout
	held := func(spec string) map[string]map[string]bool {
		t.Helper()
		s, err := ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(s)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]bool{}
		for _, st := range m.sources {
			class := filepath.Base(filepath.Dir(st.path))
			if out[class] == nil {
				out[class] = map[string]bool{}
			}
			out[class][filepath.Base(st.path)] = true
		}
		return out
	}
	for _, c := range []struct {
		f    string
		want map[string]int
	}{
		{"0.3", map[string]int{"one": 0, "two": 1, "ten": 3, "seven": 2}},
		{"0.2", map[string]int{"one": 0, "two": 1, "ten": 2, "seven": 1}}, // two: round(0.4) = 0, but one
		{"0.8", map[string]int{"one": 0, "two": 1, "ten": 8, "seven": 6}}, // one, two: never all
	} {
		test := held("folder:" + dir + ":holdout=" + c.f + ":test")
		train := held("folder:" + dir + ":holdout=" + c.f)
		for class, n := range sizes {
			if len(test[class]) != c.want[class] || len(train[class]) != n-c.want[class] {
				t.Errorf("holdout=%s, %s: %d held out, %d trained; want %d of %d held out", c.f, class, len(test[class]), len(train[class]), c.want[class], n)
			}
			for f := range test[class] {
				if train[class][f] {
					t.Errorf("holdout=%s: %s/%s in both splits", c.f, class, f)
				}
			}
		}
	}
	test := held("folder:" + dir + ":holdout=0.3:test")
	if test["ten"]["x.png"] {
		t.Error("the test directory was read")
	}
	again := held("folder:" + dir + ":holdout=0.3:test")
	if fmt.Sprint(again) != fmt.Sprint(test) {
		t.Errorf("a second load held out %v, the first %v", again, test)
	}
	// Other contents, same names: the same files held out.
	for f := range test["seven"] {
		writePNG(t, filepath.Join(dir, "train", "seven", f), grayImage(3, 3, func(x, y int) uint8 { return 200 }))
	}
	if got := held("folder:" + dir + ":holdout=0.3:test"); fmt.Sprint(got) != fmt.Sprint(test) {
		t.Errorf("rewriting the held-out images changed the split: %v, was %v", got, test)
	}
	// One more file in "ten" (11: still 3 held out): at most one file
	// of the class changes sides.
	png1(t, filepath.Join(dir, "train", "ten", "10.png"))
	after := held("folder:" + dir + ":holdout=0.3:test")["ten"]
	moved := 0
	for f := range test["ten"] {
		if !after[f] {
			moved++
		}
	}
	if len(after) != 3 || moved > 1 {
		t.Errorf("after adding a file: held out %v, was %v", after, test["ten"])
	}
}

// TestFolderValidation: a folder with both val/ and test/ reads test/ for
// the test split and val/ where the split is asked for as validation
// (:val, :split=validation); a folder with val/ alone reads it either way.
func TestFolderValidation(t *testing.T) {
	dir := t.TempDir()
	writePNG(t, filepath.Join(dir, "train", "a", "1.png"), grayImage(2, 2, func(x, y int) uint8 { return 1 }))
	writePNG(t, filepath.Join(dir, "train", "b", "1.png"), grayImage(2, 2, func(x, y int) uint8 { return 2 }))
	writePNG(t, filepath.Join(dir, "val", "a", "v.png"), grayImage(2, 2, func(x, y int) uint8 { return 30 }))
	writePNG(t, filepath.Join(dir, "test", "a", "t.png"), grayImage(2, 2, func(x, y int) uint8 { return 40 }))
	for _, c := range []struct {
		spec string
		want uint8
	}{{":test", 40}, {":split=test", 40}, {":val", 30}, {":split=validation", 30}, {":split=valid", 30}} {
		if m := mustLoad(t, "folder:"+dir+c.spec); m.Len() != 1 || m.Pixels(0)[0] != c.want {
			t.Errorf("%s: %d images, the first %d; want %d", c.spec, m.Len(), m.Pixels(0)[0], c.want)
		}
	}
	os.RemoveAll(filepath.Join(dir, "test"))
	for _, sp := range []string{":test", ":val"} {
		if m := mustLoad(t, "folder:"+dir+sp); m.Pixels(0)[0] != 30 {
			t.Errorf("%s without test/: %d, want val/'s", sp, m.Pixels(0)[0])
		}
	}
}
