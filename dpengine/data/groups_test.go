package data

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSamplePaths: a folder's and a listing's samples name their files —
// each sample's file under its own class's directory, whatever the
// order, limit or holdout — and DirGroups numbers their directories
// (a class's user sub-directories here) in sorted order; IDX samples are
// no files of their own.
func TestSamplePaths(t *testing.T) {
	dir := t.TempDir()
	writeUserImages(t, dir, "a/p1/0.png", "a/p1/1.png", "a/p2/0.png", "b/p3/0.png", "b/p3/1.png", "b/p3/2.png", "b/p4/0.png")
	for _, spec := range []string{"folder:" + dir + ":users=^([^/]+)/", "folder:" + dir + ":users=^([^/]+)/:holdout=0.5:split=test",
		"folder:" + dir + ":users=^([^/]+)/:limit=3"} {
		m, err := LoadString(spec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.Len() {
			p := m.SamplePath(i)
			rel, err := filepath.Rel(dir, p)
			if err != nil || strings.Split(filepath.ToSlash(rel), "/")[0] != m.Classes()[m.Label(i)] {
				t.Errorf("%s: sample %d of class %s read from %q", spec, i, m.Classes()[m.Label(i)], p)
			}
		}
		v, err := NewView(m, Preprocess{Height: 2, Width: 2})
		if err != nil {
			t.Fatal(err)
		}
		group, dirs, ok := DirGroups(v)
		if !ok || len(group) != m.Len() || !slices.IsSorted(dirs) {
			t.Fatalf("%s: DirGroups %v %q %v", spec, group, dirs, ok)
		}
		for i, g := range group {
			if dirs[g] != filepath.Dir(v.SamplePath(i)) {
				t.Errorf("%s: sample %d in group %q, its file %q", spec, i, dirs[g], m.SamplePath(i))
			}
		}
		if spec == "folder:"+dir+":users=^([^/]+)/" && len(dirs) != 4 {
			t.Errorf("%d directories %q, want the 4 users'", len(dirs), dirs)
		}
		if m.SamplePath(-1) != "" || m.SamplePath(m.Len()) != "" {
			t.Errorf("%s: paths of samples out of range", spec)
		}
	}
	m, err := LoadString("idx:../../testdata/fmnist-small:limit=5")
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewView(m, Preprocess{Height: 28, Width: 28})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := DirGroups(v); ok || v.SamplePath(0) != "" {
		t.Errorf("IDX samples as files: %q", m.SamplePath(0))
	}
}
