package data

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// csvImages writes n 2×2 gray PNGs under dir/sub, image k of value
// base+k, and returns their paths relative to dir.
func csvImages(t *testing.T, dir, sub string, base, n int) []string {
	t.Helper()
	var rel []string
	for k := range n {
		r := filepath.Join(sub, fmt.Sprintf("%02d.png", k))
		v := uint8(base + k)
		writePNG(t, filepath.Join(dir, r), grayImage(2, 2, func(x, y int) uint8 { return v }))
		rel = append(rel, r)
	}
	return rel
}

// TestCSV: a CSV listing loads its images with their labels — class
// names numbered in sorted order (ImageFolder's), or integer labels as
// they are — with or without a header (any column order, a byte-order
// mark, comments), paths relative to the listing or absolute; a limit
// keeps the classes balanced (round-robin, each class in file order);
// :holdout splits each class by a hash of the paths, the same as a
// folder's; and the listing itself is a source whose change is caught.
func TestCSV(t *testing.T) {
	dir := t.TempDir()
	cats := csvImages(t, dir, "cats", 10, 4)
	dogs := csvImages(t, dir, "dogs", 50, 3)
	abs := filepath.Join(dir, dogs[2])

	var b strings.Builder
	b.WriteString("\ufeff# pets\nid,Label,file_name\n")
	for k, p := range cats {
		fmt.Fprintf(&b, "%d,cat,%s\n", k, p)
	}
	fmt.Fprintf(&b, "9,dog,%s\n9,dog,%s\n9,dog,%s\n", dogs[0], dogs[1], abs)
	named := filepath.Join(dir, "pets.csv")
	writeFile(t, named, []byte(b.String()))

	m, err := LoadString("csv:" + named)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(m.Classes(), ","); got != "cat,dog" || m.Len() != 7 {
		t.Fatalf("classes %q, %d samples; want cat,dog and 7", got, m.Len())
	}
	// Round-robin over the classes, each in file order: cat 0, dog 0,
	// cat 1, dog 1, cat 2, dog 2, cat 3.
	wantPix := []uint8{10, 50, 11, 51, 12, 52, 13}
	wantLab := []int{0, 1, 0, 1, 0, 1, 0}
	for i := range wantPix {
		if px := m.Pixels(i); px[0] != wantPix[i] || m.Label(i) != wantLab[i] {
			t.Errorf("sample %d: pixel %d label %d, want %d and %d", i, px[0], m.Label(i), wantPix[i], wantLab[i])
		}
	}
	lim, err := LoadString("csv:" + named + ":limit=4")
	if err != nil {
		t.Fatal(err)
	}
	if lim.Len() != 4 || lim.Label(0) == lim.Label(1) {
		t.Errorf("limit 4: %d samples, first labels %d, %d; want 4, balanced", lim.Len(), lim.Label(0), lim.Label(1))
	}
	if fmt.Sprint(m.DefaultNorm()) != fmt.Sprint(presetNorm("imagenet")) {
		t.Error("a CSV listing's images take the ImageNet normalisation, as a folder's")
	}

	// No header, integer labels: the labels themselves, classes 0…max.
	numbered := filepath.Join(dir, "numbered.csv")
	writeFile(t, numbered, []byte(cats[0]+",3\n"+dogs[0]+",0\n"))
	n, err := LoadString("csv:" + numbered)
	if err != nil {
		t.Fatal(err)
	}
	if n.NumClasses() != 4 || n.Label(0) != 0 || n.Label(1) != 3 {
		t.Errorf("integer labels: %d classes, labels %d %d; want 4 classes, the dog's 0 first", n.NumClasses(), n.Label(0), n.Label(1))
	}

	// Holdout: the same choice as a folder's, by the paths under the
	// listing's directory; the two splits part the rows.
	test, err := LoadString("csv:" + named + ":holdout=0.5:test")
	if err != nil {
		t.Fatal(err)
	}
	train, err := LoadString("csv:" + named + ":holdout=0.5")
	if err != nil {
		t.Fatal(err)
	}
	if test.Len()+train.Len() != 7 || test.Len() == 0 || train.Len() == 0 {
		t.Fatalf("holdout 0.5: %d test and %d training samples of 7", test.Len(), train.Len())
	}
	catPaths := make([]string, len(cats))
	for k, p := range cats {
		catPaths[k] = filepath.Join(dir, p)
	}
	held := holdout(dir, len(cats), func(k int) string { return catPaths[k] }, 0.5)
	heldCats := 0
	for _, h := range held {
		if h {
			heldCats++
		}
	}
	gotCats := 0
	for i := range test.Len() {
		if test.Label(i) == 0 {
			gotCats++
		}
	}
	if gotCats != heldCats {
		t.Errorf("holdout: %d cats held out, the folder's rule holds %d", gotCats, heldCats)
	}

	// The listing is a source: relabelling a row under a run is caught.
	if err := m.CheckSources(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, named, []byte(strings.Replace(b.String(), "9,dog,"+dogs[0], "9,cat,"+dogs[0], 1)))
	if err := m.CheckSources(); err == nil || !strings.Contains(err.Error(), "pets.csv") {
		t.Errorf("a relabelled listing: %v, want an error naming it", err)
	}
}

// TestCSVErrors: every malformed listing is refused with the file and
// line, before any image is decoded where the listing is at fault.
func TestCSVErrors(t *testing.T) {
	dir := t.TempDir()
	imgs := csvImages(t, dir, "a", 0, 2)
	writeFile(t, filepath.Join(dir, "bad.png"), []byte("not an image"))
	for _, c := range []struct {
		name, body, opts string
		want             []string
	}{
		{"empty", "", "", []string{"lists no images"}},
		{"header only", "path,label\n", "", []string{"lists no images"}},
		{"one field", imgs[0] + "\n", "", []string{"line 1", "1 fields"}},
		{"empty label", imgs[0] + ",\n", "", []string{"line 1", "empty image path or label"}},
		{"missing file", imgs[0] + ",x\nnope.png,y\n", "", []string{"line 2", "nope.png"}},
		{"a directory", "a,x\n", "", []string{"line 1", "not a file"}},
		{"duplicate", "path,label\n" + imgs[0] + ",x\n" + imgs[1] + ",x\n./" + imgs[0] + ",y\n", "", []string{"line 4", "first on line 2", "duplicate"}},
		{"header without label", "path,kind\n" + imgs[0] + ",x\n", "", []string{"no label column", "label, labels"}},
		{"header without path", "name,label\n" + imgs[0] + ",x\n", "", []string{"no image path column", "file_name"}},
		{"bad quotes", imgs[0] + ",\"x\n" + imgs[1] + ",y\n", "", []string{"bad.csv", "line"}},
		{"not an image", "bad.png,x\n", "", []string{"bad.png"}},
		{"test split", imgs[0] + ",x\n", ":test", []string{"no test split", ":holdout=F"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.csv")
			writeFile(t, path, []byte(c.body))
			_, err := LoadString("csv:" + path + c.opts)
			wantErr(t, err, append([]string{"csv"}, c.want...)...)
		})
	}
	if _, err := LoadString("csv:" + filepath.Join(dir, "none.csv")); err == nil || !strings.Contains(err.Error(), "none.csv") {
		t.Errorf("a missing listing: %v", err)
	}
	if _, err := LoadString("csv:" + dir); err == nil || !strings.Contains(err.Error(), "is not a file") {
		t.Errorf("a directory for a listing: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
