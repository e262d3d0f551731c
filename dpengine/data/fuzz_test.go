package data

import (
	"bytes"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// FuzzIDX decodes arbitrary bytes as IDX images and labels (plain or
// gzip): an error or data exactly as long as the header says, never a
// panic.
func FuzzIDX(f *testing.F) {
	f.Add(idxFile([]int{2, 2, 2}, seqBytes(8, 3, 1)), uint8(3))
	f.Add(idxFile([]int{4}, []byte{0, 1, 2, 3}), uint8(1))
	f.Add(gz(idxFile([]int{1, 3, 3}, seqBytes(9, 5, 2))), uint8(3))
	f.Add(idxFile([]int{1 << 19, 1 << 10, 1 << 10}, nil), uint8(3))
	f.Add([]byte{0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff}, uint8(3))
	if b, err := os.ReadFile("../../testdata/fmnist-small/t10k-labels-idx1-ubyte.gz"); err == nil {
		f.Add(b, uint8(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, nd uint8) {
		ndims := 1 + int(nd)%3
		data, dims, err := readIDXFrom(bytes.NewReader(b), "fuzz", ndims)
		if err != nil {
			return
		}
		n := 1
		for _, d := range dims {
			n *= d
		}
		if len(dims) != ndims || len(data) != n {
			t.Errorf("dims %v with %d bytes", dims, len(data))
		}
	})
}

// FuzzCIFAR loads arbitrary bytes as a CIFAR-10 or CIFAR-100 test batch.
func FuzzCIFAR(f *testing.F) {
	f.Add(append(cifarRecord(3, 7), cifarRecord(9, 1)...), false)
	f.Add(append([]byte{1}, cifarRecord(42, 2)...), true)
	f.Add(cifarRecord(200, 1), false)
	f.Add([]byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, b []byte, hundred bool) {
		dir := t.TempDir()
		name := "test_batch.bin"
		if hundred {
			name = "test.bin"
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		scheme := "cifar10"
		if hundred {
			scheme = "cifar100"
		}
		m, err := LoadString(scheme + ":" + dir + ":test")
		if err != nil {
			return
		}
		if m.Len() == 0 || len(m.labels) != m.Len() || len(m.pix) != m.Len()*cifarPixels {
			t.Errorf("%d samples, %d labels, %d pixels", m.Len(), len(m.labels), len(m.pix))
		}
	})
}

// FuzzImage decodes arbitrary bytes as an image of any format a folder
// reads (the header is checked before the decoder allocates; a decoder's
// panic is an error), seeded with one file of each (testdata/formats) and
// internal/dicom's fixtures.
func FuzzImage(f *testing.F) {
	var buf bytes.Buffer
	jpeg.Encode(&buf, flatRGB(8, 8, color.NRGBA{10, 200, 30, 255}), nil)
	f.Add(buf.Bytes())
	seeds, _ := filepath.Glob("testdata/formats/*")
	dicoms, _ := filepath.Glob(filepath.Join(dicomFiles, "*.dcm"))
	seeds = append(seeds, dicoms...)
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add(pngWithSize(f, 3, 2))
	f.Add(pngWithSize(f, 1<<20, 1<<20))
	f.Add([]byte("\x89PNG\r\n\x1a\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeImageFrom(bytes.NewReader(b), "fuzz", dicom.Options{}, nil)
		if err != nil {
			return
		}
		c := 3
		if d.gray {
			c = 1
		}
		if d.w <= 0 || d.h <= 0 || len(d.pix) != c*d.w*d.h {
			t.Errorf("%d×%d image with %d bytes (gray %v)", d.w, d.h, len(d.pix), d.gray)
		}
	})
}

// FuzzArrays loads arbitrary bytes as the x.npy and y.npy of an npy
// dataset and, where they load, fills every sample through a TensorView
// of their shape and through Images where they are images: an error,
// never a panic, and labels within the classes.
func FuzzArrays(f *testing.F) {
	var xb, yb, ub bytes.Buffer
	npy.Write(&xb, npy.NewFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 1, 3))
	npy.Write(&yb, npy.NewInt64([]int64{0, 2}, 2))
	npy.Write(&ub, &npy.Array{DType: npy.Uint8, Shape: []int{2, 3, 1}, U8: []uint8{1, 2, 3, 4, 5, 6}})
	f.Add(xb.Bytes(), yb.Bytes(), uint8(0))
	f.Add(ub.Bytes(), yb.Bytes(), uint8(1))
	f.Add(npyHeader("<f4", "(131072, 1024, 1024)"), yb.Bytes(), uint8(2))
	f.Add(npyHeader("<f4", "(0, 1099511627776, 1099511627776)"), npyHeader("<i8", "(0,)"), uint8(3))
	f.Fuzz(func(t *testing.T, x, y []byte, crop uint8) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "x.npy"), x)
		writeFile(t, filepath.Join(dir, "y.npy"), y)
		a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: dir})
		if err != nil {
			return
		}
		for i := range a.Len() {
			if l := a.Label(i); l < 0 || l >= a.NumClasses() {
				t.Fatalf("sample %d: label %d of %d classes", i, l, a.NumClasses())
			}
		}
		idx := make([]int, a.Len())
		for i := range idx {
			idx[i] = i
		}
		aug := Augment{CropPad: int(crop % 3), Flip: crop&4 != 0}
		if len(a.SampleShape()) < 2 {
			aug = Augment{}
		}
		v, err := NewTensorView(a, TensorPreprocess{Shape: a.SampleShape(), Augment: aug})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]float32, a.Len()*a.per)
		if err := v.Fill(buf, make([]int64, len(idx)), idx, rand.New(rand.NewPCG(1, uint64(crop)))); err != nil {
			t.Fatal(err)
		}
		if im, ok, err := a.Images(); err == nil && ok {
			if im.Len() != a.Len() {
				t.Fatalf("%d images of %d samples", im.Len(), a.Len())
			}
		}
	})
}

// FuzzCSV: any listing reads without a panic, and every row it accepts has
// a path and a label and a line within the listing, and a user where any
// row has one (a header's user column names every row's).
func FuzzCSV(f *testing.F) {
	for _, seed := range []string{
		"path,label\na.png,cat\nb.png,dog\n",
		"path,label,patient_id\na.png,cat,p1\nb.png,dog,p2\nc.png,dog,p1\n",
		"Subject,file,y\n\"s 1\",a.png,0\n,b.png,1\n",
		"\ufeff# c\nx.png,1\n",
		"id,file_name,class\n1,\"a,b.png\",x\n",
		"a.png\n",
		"\"unterminated,x\n",
		"label\nfoo\n",
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte("Path,Edema,Mass,patient_id\na.png,1.0,,P1\nb.png,-1,0,P2\n"))
	f.Add([]byte("path,labels\na.png,A|B\nb.png,\nc.png,B\n"))
	f.Add([]byte("image_id,Bald,Smiling,Young\n000001.jpg,-1,1,1\n000002.jpg,-1,-1,1\n"))
	f.Add([]byte("id,Edema,Mass,who\na.png,1,0,x\nb.png,,-1,y\n"))
	f.Add([]byte("path,Edema,who\na.png,1,x\nb.png,?,z\nc.png,0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lines := bytes.Count(b, []byte("\n")) + 1
		// The label-column form and the label-set form: no crash, label
		// sets within their labels, every row on a line of the file.
		if rows, names, _, err := readCSVColumns(bytes.NewReader(b), "fuzz.csv", []string{"Edema", "Mass"}, "one", csvPick{}); err == nil {
			for _, r := range rows {
				if r.path == "" || r.line < 1 || r.line > lines || r.set < 0 || r.set > 3 || len(names) != 2 {
					t.Fatalf("row %+v of a listing of %d lines, labels %q", r, lines, names)
				}
			}
		}
		// Uncertain labels ignored (partial sets), one column's made one:
		// each row's set and ignored labels within the two, apart.
		if rows, names, _, err := readCSVColumns(bytes.NewReader(b), "fuzz.csv", []string{"Edema", "Mass"}, "ignore,Mass=one", csvPick{}); err == nil {
			set, ign := make([]uint64, 1), make([]uint64, 1)
			for _, r := range rows {
				if r.path == "" || r.line < 1 || r.line > lines || len(names) != 2 || labelset.Expand(r.set, 2, set) != nil ||
					labelset.Ignored(r.set, 2, ign) != nil || set[0]&ign[0] != 0 || ign[0]&2 != 0 || labelset.Partial(r.set) != (ign[0] != 0) {
					t.Fatalf("uncertain=ignore: row %+v of a listing of %d lines, labels %q: set %b, ignored %b", r, lines, names, set[0], ign[0])
				}
			}
		}
		// Every other column, or a range, as labels; columns named.
		for _, tc := range []struct {
			labels []string
			pick   csvPick
		}{{[]string{"*"}, csvPick{}}, {[]string{"Edema..Mass"}, csvPick{path: "id", user: "who"}},
			{[]string{"Edema"}, csvPick{where: &csvWhere{col: "who", values: []string{"x", "y"}}}}} {
			if rows, names, _, err := readCSVColumns(bytes.NewReader(b), "fuzz.csv", tc.labels, "zero", tc.pick); err == nil {
				if len(names) == 0 || len(names) > MaxLabels {
					t.Fatalf("%v: %d labels", tc.labels, len(names))
				}
				words := make([]uint64, labelset.Words(len(names)))
				for _, r := range rows {
					if r.path == "" || r.line < 1 || r.line > lines || labelset.Expand(r.set, len(names), words) != nil {
						t.Fatalf("%v: row %+v of a listing of %d lines, labels %q", tc.labels, r, lines, names)
					}
				}
			}
		}
		if rows, err := readCSVRows(bytes.NewReader(b), "fuzz.csv", true, csvPick{}); err == nil {
			if classes, err := labelSets(rows, "|", "fuzz.csv"); err == nil {
				words := make([]uint64, labelset.Words(len(classes)))
				for _, r := range rows {
					if err := labelset.Expand(r.set, len(classes), words); err != nil {
						t.Fatalf("row %+v of %d labels: %v", r, len(classes), err)
					}
				}
			}
		}
		rows, err := readCSVRows(bytes.NewReader(b), "fuzz.csv", false, csvPick{})
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.path == "" || r.label == "" || r.line < 1 || r.line > lines {
				t.Fatalf("row %+v of a listing of %d lines", r, lines)
			}
			if (r.user == "") != (rows[0].user == "") {
				t.Fatalf("row %+v has a user where row %+v has none, or the reverse", r, rows[0])
			}
		}
	})
}
