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
// and its pixels marked (a pixel inside the image's range set from mark).
func sliceFile(t testing.TB, inst int, z float64, pos bool, mark byte) []byte {
	t.Helper()
	s := testSlice{inst: inst, mark: mark}
	if pos {
		s.z, s.orient = fmt.Sprint(z), `1\0\0\0\1\0`
	}
	return s.file(t)
}

// testSlice is a slice sliceFile and TestSeriesSplit write: gray8.dcm
// with its Series Instance UID and Series Number (where given), its
// Instance Number (where inst ≥ 0), its Image Position's z and its Image
// Orientation (where given), its Patient ID (where given: six
// characters, for gray8.dcm's "P-0001"), and its pixels marked, the
// elements placed in tag order before the image module.
type testSlice struct {
	uid, number string
	inst        int
	z, orient   string
	patient     string
	mark        byte
}

func (s testSlice) file(t testing.TB) []byte {
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
	if s.uid != "" {
		el(0x000E, "UI", s.uid)
	}
	if s.number != "" {
		el(0x0011, "IS", s.number)
	}
	if s.inst >= 0 {
		el(0x0013, "IS", fmt.Sprint(s.inst))
	}
	if s.orient != "" {
		el(0x0032, "DS", `-10\-20\`+s.z)
		el(0x0037, "DS", s.orient)
	}
	out := slices.Concat(b[:at], els, b[at:])
	out[len(out)-600] = 40 + s.mark
	if s.patient != "" {
		out = bytes.Replace(out, []byte("P-0001"), []byte(s.patient), 1)
	}
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
	_, marks := markedSlices(t, dir, "sr")
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
		{"5", "slice 5 of a series of 4"},
	} {
		if _, err := LoadFitted(spec, Fit{Series: true, Frame: c.frame}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("frame %q: %v, want %q", c.frame, err, c.want)
		}
	}
	// Projections: each series one image, the mark of its slices' most
	// (least) marked where the rest are alike; the mean's between.
	for _, c := range []struct {
		frame string
		want  []byte
	}{{"max", []byte{4, 22, 13}}, {"min", []byte{1, 21, 11}}} {
		im, err := LoadFitted(spec, Fit{Series: true, Frame: c.frame})
		if err != nil {
			t.Fatal(err)
		}
		if got := marks(im); !bytes.Equal(got, c.want) || im.NumUsers() != 0 || len(im.LeftOut()) != 1 {
			t.Errorf("%s projection: slices %v of %d users, %d left out; want %v of none, the report left out", c.frame, got, im.NumUsers(), len(im.LeftOut()), c.want)
		}
	}
	im, err = LoadFitted(spec, Fit{Series: true, Frame: "mean"})
	if err != nil {
		t.Fatal(err)
	}
	mx, _ := LoadFitted(spec, Fit{Series: true, Frame: "max"})
	mn, _ := LoadFitted(spec, Fit{Series: true, Frame: "min"})
	// (mr1's marks, 21 and 22, are a level apart: their mean rounds to
	// one of them.)
	for _, i := range []int{0, 2} {
		if p := im.Pixels(i); bytes.Equal(p, mx.Pixels(i)) || bytes.Equal(p, mn.Pixels(i)) {
			t.Errorf("series %d: the mean projection is its max's or its min's", i)
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

// TestSeriesSplit: a directory whose slices name several series is that
// many examples with the directory's label, named DIR#N by their Series
// Numbers (by their UIDs where the numbers are alike), the directory
// their unit (a user where the data name none); a series whose slices lie
// in different planes is ordered by Instance Number; slices naming no
// series beside others are refused, and so are a directory's series of
// different patients with dicom-users.
func TestSeriesSplit(t *testing.T) {
	dir := t.TempDir()
	axial, coronal := `1\0\0\0\1\0`, `1\0\0\0\0\-1`
	write := func(sub string, ss map[string]testSlice) {
		t.Helper()
		var names []string
		var files [][]byte
		for n, s := range ss {
			names, files = append(names, n), append(files, s.file(t))
		}
		writeSeries(t, filepath.Join(dir, sub), names, files)
	}
	// study1: series 3 (by position: 2, 3, 1) and series 1 (12, 11),
	// their files' names interleaved.
	write("a/study1", map[string]testSlice{
		"s1": {uid: "1.2.826.9", number: "3", inst: 1, z: "30", orient: axial, mark: 1},
		"s2": {uid: "1.2.826.8", number: "1", inst: 1, z: "5", orient: axial, mark: 11},
		"s3": {uid: "1.2.826.9", number: "3", inst: 2, z: "10", orient: axial, mark: 2},
		"s4": {uid: "1.2.826.8", number: "1", inst: 2, z: "-5", orient: axial, mark: 12},
		"s5": {uid: "1.2.826.9", number: "3", inst: 3, z: "20", orient: axial, mark: 3},
	})
	// study2: one series naming none, by Instance Number (22, 21).
	write("b/study2", map[string]testSlice{
		"x1": {inst: 2, mark: 21, patient: "P-0002"},
		"x2": {inst: 1, mark: 22, patient: "P-0002"},
	})
	// study3: two series numbered alike, named by UID; the first's slices
	// in two planes, ordered by Instance Number (31, 32), not by their
	// positions along their own normals (y2's, -20, before y1's, 0).
	write("b/study3", map[string]testSlice{
		"y1": {uid: "1.2.9.1", number: "1", inst: 1, z: "0", orient: axial, mark: 31, patient: "P-0003"},
		"y2": {uid: "1.2.9.1", number: "1", inst: 2, z: "40", orient: coronal, mark: 32, patient: "P-0003"},
		"y3": {uid: "1.2.9.2", number: "1", inst: 1, mark: 41, patient: "P-0003"},
	})
	mark, marks := markedSlices(t, dir, "")
	series := func(im *Images) string {
		var s []string
		for i := range im.Len() {
			rel, _ := filepath.Rel(dir, im.SampleSeries(i))
			s = append(s, filepath.ToSlash(rel))
		}
		return strings.Join(s, " ")
	}
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := LoadFitted(spec, Fit{Series: true, Frame: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marks(im), []byte{12, 2, 22, 31, 41}; !bytes.Equal(got, want) {
		t.Errorf("first slices %v, want %v", got, want)
	}
	if got, want := series(im), "a/study1#1 a/study1#3 b/study2 b/study3#1.2.9.1 b/study3#1.2.9.2"; got != want {
		t.Errorf("series %q, want %q", got, want)
	}
	if got := strings.Join(im.userNames, " "); got != "a/study1 b/study2 b/study3" || im.UserOf(0) != im.UserOf(1) || im.UserOf(3) != im.UserOf(4) {
		t.Errorf("users %q (%d, %d, %d, %d, %d): want each directory a user", got, im.UserOf(0), im.UserOf(1), im.UserOf(2), im.UserOf(3), im.UserOf(4))
	}
	if im.Label(0) != 0 || im.Label(1) != 0 || im.Label(4) != 1 {
		t.Errorf("labels %d %d %d: want the directories' classes", im.Label(0), im.Label(1), im.Label(4))
	}
	// Every slice a sample: grouped by series, not by file or directory.
	all, err := LoadFitted(spec, Fit{Series: true, Frame: "all"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marks(all), []byte{12, 11, 2, 3, 1, 22, 21, 31, 32, 41}; !bytes.Equal(got, want) {
		t.Errorf("all slices %v, want %v", got, want)
	}
	group, names, ok := FileGroups(all)
	if !ok || len(names) != 5 || !slices.Equal(group, []int32{0, 0, 1, 1, 1, 2, 2, 3, 3, 4}) {
		t.Errorf("FileGroups %v %v %v: want the five series", group, names, ok)
	}
	// A projection a series.
	mx, err := LoadFitted(spec, Fit{Series: true, Frame: "max"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marks(mx), []byte{12, 3, 22, 32, 41}; !bytes.Equal(got, want) || series(mx) != series(im) {
		t.Errorf("max projections %v of %q, want %v", got, series(mx), want)
	}
	// Kept pixels (DPFINETUNE_PIXEL_CACHE): a projection's later load
	// decodes none, until one of its slices changes.
	t.Setenv(pixelCacheEnv, t.TempDir())
	for k, want := range []int64{5, 0, 5} {
		if k == 2 {
			b := testSlice{uid: "1.2.826.9", number: "3", inst: 1, z: "30", orient: axial, mark: 9}.file(t)
			if err := os.WriteFile(filepath.Join(dir, "a/study1/s1"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			mark[string(decodeTest(t, filepath.Join(dir, "a/study1/s1")))] = 9
		}
		before := decodedImages.Load()
		kept, err := LoadFitted(spec, Fit{Series: true, Frame: "max"})
		if err != nil {
			t.Fatal(err)
		}
		got := marks(kept)
		if n := decodedImages.Load() - before; n != want || k < 2 && !bytes.Equal(got, marks(mx)) || k == 2 && got[1] != 9 {
			t.Errorf("load %d with a pixel cache: %d projections decoded, marks %v; want %d", k, n, got, want)
		}
	}
	t.Setenv(pixelCacheEnv, "")
	// Predict's: each series a name.
	_, got, err := LoadFiles([]string{filepath.Join(dir, "a")}, Fit{Series: true, Frame: "middle"})
	if err != nil || len(got) != 2 || filepath.Base(got[0]) != "study1#1" || filepath.Base(got[1]) != "study1#3" {
		t.Errorf("LoadFiles: %v, %v; want study1's two series", got, err)
	}
	// dicom-users: a directory's series, of one patient, are one user.
	du, err := ParseSpec("folder:" + dir + ":" + dicomUsersOption)
	if err != nil {
		t.Fatal(err)
	}
	if im, err := LoadFitted(du, Fit{Series: true, Frame: "first"}); err != nil || strings.Join(im.userNames, " ") != "P-0001 P-0002 P-0003" || im.UserOf(0) != im.UserOf(1) {
		t.Errorf("dicom-users: %v, %v; want the three patients, study1's series one", im, err)
	}

	// Refused: a slice naming no series beside series; two patients.
	b := testSlice{inst: 9, mark: 5}.file(t)
	os.WriteFile(filepath.Join(dir, "a/study1/s6"), b, 0o644)
	if _, err := LoadFitted(spec, Fit{Series: true, Frame: "first"}); err == nil || !strings.Contains(err.Error(), "its slices name 2 series (Series Instance UID) and 1 slices none") {
		t.Errorf("a slice of no series: %v", err)
	}
	os.Remove(filepath.Join(dir, "a/study1/s6"))
	other := testSlice{uid: "1.2.9.2", number: "1", inst: 1, mark: 41, patient: "P-0004"}.file(t)
	os.WriteFile(filepath.Join(dir, "b/study3/y3"), other, 0o644)
	if _, err := LoadFitted(du, Fit{Series: true, Frame: "first"}); err == nil || !strings.Contains(err.Error(), `its series name patients "P-0003" and "P-0004"`) {
		t.Errorf("a directory's series of two patients: %v", err)
	}
}

// decodeTest is the pixels of the image file at path as decodeImage
// decodes them.
func decodeTest(t *testing.T, path string) []byte {
	t.Helper()
	dec, err := decodeImage(path, dicom.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dec.pix
}

// markedSlices reads the mark of every slice file under dir but those
// named skip (testSlice's: its pixels known by their mark), and returns
// the marks by pixels and a function giving a load's samples' marks.
func markedSlices(t *testing.T, dir, skip string) (map[string]byte, func(*Images) []byte) {
	t.Helper()
	mark := map[string]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != skip {
			b, _ := os.ReadFile(p)
			mark[string(decodeTest(t, p))] = b[len(b)-600] - 40
		}
		return nil
	})
	return mark, func(im *Images) []byte {
		var m []byte
		for i := range im.Len() {
			m = append(m, mark[string(im.Pixels(i))])
		}
		return m
	}
}

// TestSeriesGroups: slices read as images of their own (no Fit.Series),
// a directory holding two series' slices and another's, are grouped by
// their Series Instance UIDs; a slice naming none is an error naming it.
func TestSeriesGroups(t *testing.T) {
	dir := t.TempDir()
	axial := `1\0\0\0\1\0`
	writeSeries(t, filepath.Join(dir, "a"), []string{"s1", "s2", "s3", "s4", "s5"}, [][]byte{
		testSlice{uid: "1.2.826.9", number: "3", inst: 1, z: "30", orient: axial, mark: 1}.file(t),
		testSlice{uid: "1.2.826.8", number: "1", inst: 1, z: "5", orient: axial, mark: 11}.file(t),
		testSlice{uid: "1.2.826.9", number: "3", inst: 2, z: "10", orient: axial, mark: 2}.file(t),
		testSlice{uid: "1.2.826.8", number: "1", inst: 2, z: "-5", orient: axial, mark: 12}.file(t),
		testSlice{uid: "1.2.826.9", number: "3", inst: 3, z: "20", orient: axial, mark: 3}.file(t),
	})
	writeSeries(t, filepath.Join(dir, "b"), []string{"x1"}, [][]byte{testSlice{uid: "1.2.9.1", inst: 1, mark: 21}.file(t)})
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := LoadFitted(spec, Fit{})
	if err != nil {
		t.Fatal(err)
	}
	group, series, ok, err := SeriesGroups(im)
	if !ok || err != nil || strings.Join(series, " ") != "1.2.826.8 1.2.826.9 1.2.9.1" {
		t.Fatalf("series %v (%v, %v)", series, ok, err)
	}
	want := map[string]int32{"s1": 1, "s2": 0, "s3": 1, "s4": 0, "s5": 1, "x1": 2}
	for i, g := range group {
		if f := filepath.Base(im.SamplePath(i)); want[f] != g {
			t.Errorf("sample %d (%s): series %d, want %d", i, f, g, want[f])
		}
	}
	writeSeries(t, filepath.Join(dir, "b"), []string{"x2"}, [][]byte{testSlice{inst: 2, mark: 22}.file(t)})
	if im, err = LoadFitted(spec, Fit{}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := SeriesGroups(im); err == nil || !strings.Contains(err.Error(), "x2") || !strings.Contains(err.Error(), "Series Instance UID (0020,000E)") {
		t.Errorf("a slice naming no series: %v", err)
	}
}

// TestSeriesFlat: with Series, a class directory of slices of its own (no
// series sub-directories) is refused saying the layout series need.
func TestSeriesFlat(t *testing.T) {
	dir := t.TempDir()
	writeSeries(t, filepath.Join(dir, "a"), []string{"x1"}, [][]byte{testSlice{inst: 1, mark: 1}.file(t)})
	writeSeries(t, filepath.Join(dir, "b", "s"), []string{"y1"}, [][]byte{testSlice{inst: 1, mark: 2}.file(t)})
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFitted(spec, Fit{Series: true, Frame: "first"}); err == nil || !strings.Contains(err.Error(), "1 image file(s) of its own and no sub-directories") || !strings.Contains(err.Error(), "CLASS/SERIES/IMAGE") {
		t.Errorf("a flat class directory with series: %v", err)
	}
}

// TestSeriesTwice: a series whose slices lie in two listed directories
// (split over them, or exported twice) is refused, naming both.
func TestSeriesTwice(t *testing.T) {
	dir := t.TempDir()
	axial := `1\0\0\0\1\0`
	writeSeries(t, filepath.Join(dir, "a", "s1"), []string{"x1", "x2"}, [][]byte{
		testSlice{uid: "1.2.7.1", number: "1", inst: 1, z: "0", orient: axial, mark: 1}.file(t),
		testSlice{uid: "1.2.7.1", number: "1", inst: 2, z: "1", orient: axial, mark: 2}.file(t)})
	writeSeries(t, filepath.Join(dir, "b", "s2"), []string{"y1"}, [][]byte{
		testSlice{uid: "1.2.7.1", number: "1", inst: 3, z: "2", orient: axial, mark: 3}.file(t)})
	spec, err := ParseSpec("folder:" + dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadFitted(spec, Fit{Series: true, Frame: "first"})
	if err == nil || !strings.Contains(err.Error(), "Series Instance UID 1.2.7.1") || !strings.Contains(err.Error(), "s1") || !strings.Contains(err.Error(), "s2") {
		t.Errorf("a series in two directories: %v", err)
	}
}
