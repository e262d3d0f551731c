package data

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeUserImages writes a small gray PNG at each of rels (slash paths
// under dir), each of its own shade, and returns their full paths by rel.
func writeUserImages(t *testing.T, dir string, rels ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, rel := range rels {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		writePNG(t, p, grayImage(2, 2, func(x, y int) uint8 { return uint8(7*k + x + y) }))
		out[rel] = p
	}
	return out
}

// relUsers returns sampleUsers(m) keyed by the files' slash paths within
// dir.
func relUsers(t *testing.T, m *Images, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p, u := range sampleUsers(t, m) {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.ToSlash(rel)] = u
	}
	return out
}

// TestFolderUsers: :users=REGEX names each image's user from its path
// within its class directory — the first capture group, else the whole
// match — reading a class's per-user sub-directories too (one level);
// the users are numbered in sorted order of their names, one user across
// the classes, and a View, UsersOf and the spec's string form carry them.
func TestFolderUsers(t *testing.T) {
	chest := []string{
		"NORMAL/person1_normal_3.png", "NORMAL/person10_normal_1.png", "NORMAL/person2_x.png",
		"PNEUMONIA/person1_bacteria_1.png", "PNEUMONIA/person1_virus_2.png",
		"PNEUMONIA/person3_virus_7.png", "PNEUMONIA/person10_bacteria_4.png",
	}
	chestUsers := map[string]string{
		"NORMAL/person1_normal_3.png": "person1", "NORMAL/person10_normal_1.png": "person10", "NORMAL/person2_x.png": "person2",
		"PNEUMONIA/person1_bacteria_1.png": "person1", "PNEUMONIA/person1_virus_2.png": "person1",
		"PNEUMONIA/person3_virus_7.png": "person3", "PNEUMONIA/person10_bacteria_4.png": "person10",
	}
	for _, c := range []struct {
		name  string
		files []string // written under the folder
		extra []string // written, not read
		spec  string   // after folder:DIR
		read  string   // the directory the samples' paths are relative to
		want  map[string]string
		names []string
		both  string // a user with images in both classes
	}{
		{
			name: "file names", files: chest, spec: `:users=^(person\d+)_`,
			want: chestUsers, names: []string{"person1", "person10", "person2", "person3"}, both: "person1",
		},
		{
			name: "whole match", files: chest, spec: `:users=^person\d+`,
			want: chestUsers, names: []string{"person1", "person10", "person2", "person3"}, both: "person10",
		},
		{
			name: "per-user directories",
			files: []string{
				"NORMAL/P01/a.png", "NORMAL/P02/b.png", "NORMAL/P02/c.png",
				"PNEUMONIA/P01/c.png", "PNEUMONIA/P03/a.png", "PNEUMONIA/P03/b.png",
			},
			// Deeper directories and hidden ones are not read.
			extra: []string{"PNEUMONIA/P03/deeper/x.png", "PNEUMONIA/.cache/y.png", "NORMAL/P01/.z.png"},
			spec:  `:users=^([^/]+)/`,
			want: map[string]string{
				"NORMAL/P01/a.png": "P01", "NORMAL/P02/b.png": "P02", "NORMAL/P02/c.png": "P02",
				"PNEUMONIA/P01/c.png": "P01", "PNEUMONIA/P03/a.png": "P03", "PNEUMONIA/P03/b.png": "P03",
			},
			names: []string{"P01", "P02", "P03"}, both: "P01",
		},
		{
			name: "test directory",
			files: []string{
				"train/NORMAL/person1_a.png", "train/PNEUMONIA/person2_b.png",
				"test/NORMAL/person7_a.png", "test/PNEUMONIA/person7_b.png", "test/PNEUMONIA/person8_c.png",
			},
			spec: `:users=^(person\d+)_:test`, read: "test",
			want: map[string]string{
				"NORMAL/person7_a.png": "person7", "PNEUMONIA/person7_b.png": "person7", "PNEUMONIA/person8_c.png": "person8",
			},
			names: []string{"person7", "person8"}, both: "person7",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeUserImages(t, dir, c.files...)
			writeUserImages(t, dir, c.extra...)
			m := mustLoad(t, "folder:"+dir+c.spec)
			if m.Len() != len(c.want) {
				t.Errorf("%d samples, want %d", m.Len(), len(c.want))
			}
			got := relUsers(t, m, filepath.Join(dir, c.read))
			for rel, u := range c.want {
				if got[rel] != u {
					t.Errorf("%s: user %q, want %q", rel, got[rel], u)
				}
			}
			for rel := range got {
				if _, ok := c.want[rel]; !ok {
					t.Errorf("%s was read", rel)
				}
			}
			if m.NumUsers() != len(c.names) || !slices.Equal(m.userNames, c.names) {
				t.Errorf("%d users %q, want %q", m.NumUsers(), m.userNames, c.names)
			}
			// The same person in two classes is one user.
			labels := map[int]bool{}
			for i := range m.Len() {
				if m.UserName(m.UserOf(i)) == c.both {
					labels[m.Label(i)] = true
				}
			}
			if len(labels) != 2 {
				t.Errorf("user %s has samples of labels %v, want both classes", c.both, labels)
			}
			if !strings.Contains(m.String(), fmt.Sprintf("%d users", len(c.names))) {
				t.Errorf("String %q does not count the users", m)
			}

			v, err := NewView(m, Preprocess{Height: 3, Width: 3})
			if err != nil {
				t.Fatal(err)
			}
			users, n := UsersOf(v)
			if n != len(c.names) || len(users) != m.Len() {
				t.Fatalf("UsersOf(view): %d users for %d samples; want %d for %d", n, len(users), len(c.names), m.Len())
			}
			for i, u := range users {
				if int(u) != m.UserOf(i) || v.UserName(int(u)) != m.UserName(m.UserOf(i)) {
					t.Errorf("view sample %d: user %d (%s), source's %d", i, u, v.UserName(int(u)), m.UserOf(i))
				}
			}

			// The spec reads back, users and all, and loads the same data.
			s := m.Spec().String()
			again := mustLoad(t, s)
			if again.Spec().String() != s || again.Spec().Users != m.Spec().Users || again.Fingerprint() != m.Fingerprint() {
				t.Errorf("%s reads back as %+v, fingerprint %s; want %+v, %s", s, again.Spec(), again.Fingerprint(), m.Spec(), m.Fingerprint())
			}
		})
	}

	// The users are in the fingerprint: the same images without users, or
	// grouped otherwise, are other data.
	dir := t.TempDir()
	writeUserImages(t, dir, chest...)
	by := mustLoad(t, "folder:"+dir+`:users=^(person\d+)_`)
	whole := mustLoad(t, "folder:"+dir+`:users=^person\d+`)
	byClass := mustLoad(t, "folder:"+dir+`:users=^person\d+_([a-z]+)`) // normal, bacteria, virus, x
	none := mustLoad(t, "folder:"+dir)
	if none.NumUsers() != 0 || none.UserOf(0) != -1 {
		t.Errorf("without users=: %d users", none.NumUsers())
	}
	if by.Fingerprint() != whole.Fingerprint() {
		t.Errorf("the same grouping, two expressions: fingerprints differ")
	}
	if by.Fingerprint() == none.Fingerprint() || by.Fingerprint() == byClass.Fingerprint() {
		t.Errorf("users do not change the fingerprint: %s %s %s", by.Fingerprint(), none.Fingerprint(), byClass.Fingerprint())
	}
	if byClass.NumUsers() != 4 || byClass.UserName(0) != "bacteria" {
		t.Errorf("first group: users %q", byClass.userNames)
	}
}

// TestFolderUserHoldout: with users=, :holdout=F holds out whole users of
// the training directory — round(F·users) of them, by a hash of their
// names — so that the two splits share no user and together hold every
// image once; each split numbers only its own users, and a limit numbers
// those it keeps.
func TestFolderUserHoldout(t *testing.T) {
	for _, c := range []struct {
		name, expr string
		path       func(user, k int) string // image k of user
	}{
		{"file names", `^(person\d+)_`, func(u, k int) string {
			return fmt.Sprintf("%s/person%d_%s_%d.png", []string{"NORMAL", "PNEUMONIA"}[(u+k)%2], u, []string{"virus", "bacteria"}[k%2], k)
		}},
		{"per-user directories", `^([^/]+)/`, func(u, k int) string {
			return fmt.Sprintf("%s/person%d/%d.png", []string{"NORMAL", "PNEUMONIA"}[(u+k)%2], u, k)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			all := map[string]string{} // image (rel to train/) → user
			userImages := map[string]int{}
			var names []string
			for u := range 10 {
				name := fmt.Sprintf("person%d", u)
				names = append(names, name)
				for k := range 1 + u%4 { // 1 to 4 images a user, over both classes
					rel := c.path(u, k)
					writeUserImages(t, filepath.Join(dir, "train"), rel)
					all[rel] = name
					userImages[name]++
				}
			}
			// A test directory is not read with a holdout.
			writeUserImages(t, filepath.Join(dir, "test"), "NORMAL/person99_x_0.png", "NORMAL/person99/0.png")
			slices.Sort(names)
			base := "folder:" + dir + ":users=" + c.expr + ":holdout=0.3"
			test, train := mustLoad(t, base+":test"), mustLoad(t, base)
			testUsers := relUsers(t, test, filepath.Join(dir, "train"))
			trainUsers := relUsers(t, train, filepath.Join(dir, "train"))

			checkUserHoldout(t, all, names, userImages, test, train, testUsers, trainUsers)
			again := mustLoad(t, base+":test")
			if !slices.Equal(again.userNames, test.userNames) || again.Fingerprint() != test.Fingerprint() {
				t.Errorf("a second load held out %q, the first %q", again.userNames, test.userNames)
			}

			// A limit keeps the first samples round-robin over the classes
			// and numbers only their users, densely.
			lim := mustLoad(t, base+":limit=3")
			if lim.Len() != 3 || lim.NumUsers() > 3 || lim.NumUsers() == 0 {
				t.Fatalf("limit=3: %d samples, %d users", lim.Len(), lim.NumUsers())
			}
			for rel, u := range relUsers(t, lim, filepath.Join(dir, "train")) {
				if all[rel] != u || trainUsers[rel] != u {
					t.Errorf("limit=3: %s: user %q, want %q in the training split", rel, u, all[rel])
				}
			}
		})
	}
}

// TestFolderUserErrors: an image the expression does not name (no match,
// or an empty user), a bad or colon-holding expression, and the option on
// another scheme are refused, saying what and where.
func TestFolderUserErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []string
		spec  string // after folder:DIR, or a whole spec when it has no leading ':'
		want  func(dir string) []string
	}{
		{"no match", []string{"NORMAL/person1_a.png", "PNEUMONIA/IM-0007.png"}, `:users=^(person\d+)_`, func(dir string) []string {
			return []string{"folder: " + dir, filepath.Join(dir, "PNEUMONIA", "IM-0007.png"), `"IM-0007.png"`, `users=^(person\d+)_`, "does not match"}
		}},
		{"no match in a sub-directory", []string{"NORMAL/person1_a.png", "NORMAL/extra/person2_b.png"}, `:users=^(person\d+)_`, func(dir string) []string {
			return []string{filepath.Join(dir, "NORMAL", "extra", "person2_b.png"), `"extra/person2_b.png"`, "does not match"}
		}},
		{"no match in the test directory", []string{"train/A/p1_a.png", "test/A/q.png"}, `:users=^(p\d+)_:test`, func(dir string) []string {
			return []string{filepath.Join(dir, "test", "A", "q.png"), `users=^(p\d+)_`, "does not match"}
		}},
		{"no match, holdout", []string{"A/p1_a.png", "A/p2_a.png", "B/x.png"}, `:users=^(p\d+)_:holdout=0.5`, func(dir string) []string {
			return []string{filepath.Join(dir, "B", "x.png"), "does not match"}
		}},
		{"empty group", []string{"A/p1_a.png", "A/_b.png"}, `:users=^([a-z0-9]*)_`, func(dir string) []string {
			return []string{filepath.Join(dir, "A", "_b.png"), `users=^([a-z0-9]*)_`, "empty user"}
		}},
		{"empty match", []string{"A/p1_a.png", "A/_b.png"}, `:users=^p?\d*`, func(dir string) []string {
			return []string{filepath.Join(dir, "A", "_b.png"), "empty user"}
		}},
		{"group that does not take part", []string{"A/p1_a.png", "A/q_b.png"}, `:users=^(p\d)?`, func(dir string) []string {
			return []string{filepath.Join(dir, "A", "q_b.png"), "empty user"}
		}},
		{"bad regexp", []string{"A/p1.png"}, `:users=^(p\d+`, func(dir string) []string {
			return []string{"users=^(p\\d+", "bad regular expression", "missing closing )"}
		}},
		{"empty regexp", []string{"A/p1.png"}, `:users=`, func(dir string) []string {
			return []string{"users=", "want a regular expression"}
		}},
		{"colon in the expression", []string{"A/p1.png"}, `:users=(?i:p)\d`, func(dir string) []string {
			return []string{"users=", "may not contain ':'"}
		}},
		{"colon before an option", []string{"A/p1.png"}, `:users=(?i:p)=\d:limit=2`, func(dir string) []string {
			return []string{"users=", "may not contain ':'"}
		}},
		{"idx", nil, `idx:DIR:users=x`, func(dir string) []string {
			return []string{"users= applies to the folder and csv schemes only"}
		}},
		{"npy", nil, `npy:DIR/a.npz:limit=3:users=x`, func(dir string) []string {
			return []string{"users= applies to the folder and csv schemes only"}
		}},
		// One user: holding out "at least one of two or more" leaves
		// the test split empty, an error and not a panic (nor, without
		// users, a folder whose classes hold one image each).
		{"single user held out", []string{"A/p1_a.png", "B/p1_b.png"}, `:users=^(p\d+)_:holdout=0.5:test`, func(dir string) []string {
			return []string{"folder: " + dir, "no images in the test split"}
		}},
		{"single images held out", []string{"A/p1_a.png", "B/p1_b.png"}, `:holdout=0.5:test`, func(dir string) []string {
			return []string{"folder: " + dir, "no images in the test split"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeUserImages(t, dir, c.files...)
			spec := "folder:" + dir + c.spec
			if !strings.HasPrefix(c.spec, ":") {
				spec = strings.ReplaceAll(c.spec, "DIR", dir)
			}
			_, err := LoadString(spec)
			wantErr(t, err, c.want(dir)...)
		})
	}

	// A Spec built without ParseSpec is checked at load time.
	dir := t.TempDir()
	writeUserImages(t, dir, "A/p1_a.png")
	for _, c := range []struct {
		spec Spec
		want []string
	}{
		{Spec{Scheme: SchemeFolder, Dir: dir, Users: `^(p\d+`}, []string{"folder: " + dir, `users=^(p\d+`, "bad regular expression"}},
		{Spec{Scheme: SchemeFolder, Dir: dir, Users: `(?:p)\d`}, []string{"folder: " + dir, "may not contain ':'"}},
		{Spec{Scheme: SchemeIDX, Dir: dir, Users: `x`}, []string{"idx", dir, "users= applies to the folder and csv schemes only"}},
	} {
		_, err := Load(c.spec)
		wantErr(t, err, c.want...)
	}
	// A literal colon written as \x3a is fine.
	if m, err := Load(Spec{Scheme: SchemeFolder, Dir: dir, Users: `^(p\d+)\x3a?_`}); err != nil || m.NumUsers() != 1 {
		t.Errorf("users=^(p\\d+)\\x3a?_: %v", err)
	}
}

// TestFolderSubdirectories: without users= a class directory's
// sub-directories are not read, as before the option; with it, they are,
// one level down.
func TestFolderSubdirectories(t *testing.T) {
	dir := t.TempDir()
	writeUserImages(t, dir, "A/p1_a.png", "A/p2_b.png", "B/p1_c.png")
	writeUserImages(t, dir, "A/sub/p3_d.png", "B/p4_e.png/p5_f.png", "B/sub/deeper/p6_g.png")
	for _, c := range []struct {
		spec string
		want []string
	}{
		{"", []string{"A/p1_a.png", "B/p1_c.png", "A/p2_b.png"}},
		{":limit=2", []string{"A/p1_a.png", "B/p1_c.png"}},
		// Round-robin over the classes, each in name order with its
		// sub-directories where they stand (ReadDir's order).
		{`:users=(p\d+)_[a-z]\.png$`, []string{"A/p1_a.png", "B/p1_c.png", "A/p2_b.png", "B/p4_e.png/p5_f.png", "A/sub/p3_d.png"}},
	} {
		m := mustLoad(t, "folder:"+dir+c.spec)
		var got []string
		for _, s := range m.sources {
			rel, _ := filepath.Rel(dir, s.path)
			got = append(got, filepath.ToSlash(rel))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("folder%s: read %q, want %q", c.spec, got, c.want)
		}
		if wantUsers := strings.Contains(c.spec, "users="); (m.NumUsers() > 0) != wantUsers {
			t.Errorf("folder%s: %d users", c.spec, m.NumUsers())
		} else if wantUsers && !slices.Equal(m.userNames, []string{"p1", "p2", "p3", "p5"}) {
			t.Errorf("folder%s: users %q, want p1, p2, p3, p5", c.spec, m.userNames)
		}
	}
}
