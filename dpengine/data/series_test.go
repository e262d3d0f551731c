package data

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/dicom"
)

// sliceFile is gray8.dcm made a slice of a series: its Instance Number
// (where inst ≥ 0), its Image Position z on an axial plane (where pos),
// and its pixels marked (a pixel inside the image's range set from mark),
// the elements placed in tag order before the image module.
func sliceFile(t testing.TB, inst int, z float64, pos bool, mark byte) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dicomFiles, "gray8.dcm"))
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, []byte{0x28, 0x00, 0x02, 0x00, 'U', 'S'})
	if at < 0 {
		t.Fatal("no explicit little-endian Samples per Pixel element")
	}
	var els []byte
	el := func(elem uint16, vr, v string) {
		if len(v)%2 == 1 {
			v += " "
		}
		els = append(els, 0x20, 0x00, byte(elem), byte(elem>>8), vr[0], vr[1], byte(len(v)), byte(len(v)>>8))
		els = append(els, v...)
	}
	if inst >= 0 {
		el(0x0013, "IS", fmt.Sprint(inst))
	}
	if pos {
		el(0x0032, "DS", fmt.Sprintf(`-10\-20\%g`, z))
		el(0x0037, "DS", `1\0\0\0\1\0`)
	}
	out := slices.Concat(b[:at], els, b[at:])
	out[len(out)-600] = 40 + mark
	return out
}

// writeSeries writes slices to dir under names.
func writeSeries(t testing.TB, dir string, names []string, slices [][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), slices[i], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSeries: a folder's series — directories of single-frame slices —
// are read as multi-frame objects: their slices ordered by position along
// the plane's normal (not by name or Instance Number), else by Instance
// Number, else by name; a slice picked by Frame, every slice a sample
// (each series a user), or a clip's T; an object without an image left
// out; projections and an unchosen slice refused.
func TestSeries(t *testing.T) {
	dir := t.TempDir()
	// By position: names and Instance Numbers disagree with it.
	writeSeries(t, filepath.Join(dir, "a", "ct1"), []string{"s1", "s2", "s3", "s4"}, [][]byte{
		sliceFile(t, 1, 30, true, 3), sliceFile(t, 2, -10, true, 1), sliceFile(t, 3, 50, true, 4), sliceFile(t, 4, 10, true, 2)})
	// By Instance Number: one slice lacks a position.
	writeSeries(t, filepath.Join(dir, "a", "ct2"), []string{"x1", "x2", "x3"}, [][]byte{
		sliceFile(t, 3, 0, false, 13), sliceFile(t, 1, 5, true, 11), sliceFile(t, 2, 9, true, 12)})
	// By name, and a report left out.
	report := sliceFile(t, 9, 0, false, 0)
	report = report[:bytes.Index(report, []byte{0xE0, 0x7F, 0x10, 0x00})]
	writeSeries(t, filepath.Join(dir, "b", "mr1"), []string{"i2", "i1", "sr"}, [][]byte{
		sliceFile(t, -1, 0, false, 22), sliceFile(t, -1, 0, false, 21), report})
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	// Each slice known by its pixels.
	mark := map[string]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != "sr" {
			dec, err := decodeImage(p, dicom.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(p)
			mark[string(dec.pix)] = b[len(b)-600] - 40
		}
		return nil
	})
	marks := func(im *Images) []byte {
		var m []byte
		for i := range im.Len() {
			m = append(m, mark[string(im.Pixels(i))])
		}
		return m
	}
	im, err := LoadFitted(spec, Fit{Series: true, Frame: "all"})
	if err != nil {
		t.Fatal(err)
	}
	// Round-robin over the classes' series: a/ct1, b/mr1, a/ct2.
	if got, want := marks(im), []byte{1, 2, 3, 4, 21, 22, 11, 12, 13}; !bytes.Equal(got, want) {
		t.Errorf("slices %v, want %v", got, want)
	}
	if strings.Join(im.userNames, " ") != "a/ct1 a/ct2 b/mr1" || len(im.LeftOut()) != 1 || filepath.Base(im.LeftOut()[0]) != "sr" {
		t.Errorf("users %v, left out %v: want each series a user, the report left out", im.userNames, im.LeftOut())
	}
	for _, c := range []struct {
		frame string
		want  []byte
	}{{"first", []byte{1, 21, 11}}, {"middle", []byte{3, 22, 12}}, {"last", []byte{4, 22, 13}}, {"2", []byte{2, 22, 12}}} {
		im, err := LoadFitted(spec, Fit{Series: true, Frame: c.frame})
		if err != nil {
			t.Fatal(err)
		}
		if got := marks(im); !bytes.Equal(got, c.want) || im.NumUsers() != 0 {
			t.Errorf("frame %s: slices %v of %d users, want %v of none", c.frame, got, im.NumUsers(), c.want)
		}
	}
	// A clip of 3: frames 1, 2, 4 of ct1 (n = 4), all of the others.
	im, err = LoadFitted(spec, Fit{Series: true, Clip: 3, Height: 29, Width: 37})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marks(im), []byte{1, 2, 4, 21, 21, 22, 11, 12, 13}; !bytes.Equal(got, want) {
		t.Errorf("clips: slices %v, want %v", got, want)
	}
	for _, c := range []struct{ frame, want string }{
		{"", "a series of 4 slices and no slice chosen"},
		{"max", "a max projection of a series' slices is not read"},
		{"5", "slice 5 of a series of 4"},
	} {
		if _, err := LoadFitted(spec, Fit{Series: true, Frame: c.frame}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("frame %q: %v, want %q", c.frame, err, c.want)
		}
	}
	// A CSV listing of series directories.
	listing := filepath.Join(t.TempDir(), "series.csv")
	os.WriteFile(listing, fmt.Appendf(nil, "path,label\n%[1]s/a/ct1,x\n%[1]s/b/mr1,y\n%[1]s/a/ct2,y\n", dir), 0o644)
	cs, err := ParseSpec("csv:" + listing)
	if err != nil {
		t.Fatal(err)
	}
	if im, err := LoadFitted(cs, Fit{Series: true, Frame: "first"}); err != nil || !bytes.Equal(marks(im), []byte{1, 21, 11}) && !bytes.Equal(marks(im), []byte{1, 11, 21}) {
		t.Errorf("a CSV listing of series: %v", err)
	}
	// Predict's series: each directory of slices under the paths.
	ds, err := SeriesDirs([]string{dir})
	if err != nil || len(ds) != 3 || filepath.Base(ds[0]) != "ct1" {
		t.Errorf("SeriesDirs: %v, %v", ds, err)
	}
	_, names, err := LoadFiles([]string{filepath.Join(dir, "a")}, Fit{Series: true, Frame: "middle"})
	if err != nil || len(names) != 2 || filepath.Base(names[1]) != "ct2" {
		t.Errorf("LoadFiles of series: %v, %v", names, err)
	}
}
