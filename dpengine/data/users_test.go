package data

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// sampleUsers returns the user name of every sample of m by the file it
// was read from (the sources of a listing's samples are their images, in
// sample order), and checks that the users are dense and sorted by name.
func sampleUsers(t *testing.T, m *Images) map[string]string {
	t.Helper()
	names := make([]string, m.NumUsers())
	for u := range names {
		names[u] = m.UserName(u)
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("user names %q: want distinct and sorted", names)
	}
	seen := make([]bool, m.NumUsers())
	out := map[string]string{}
	for i := range m.Len() {
		u := m.UserOf(i)
		if u < 0 || u >= m.NumUsers() {
			t.Fatalf("sample %d: user %d of %d", i, u, m.NumUsers())
		}
		seen[u] = true
		out[m.sources[i].path] = m.UserName(u)
	}
	for u, ok := range seen {
		if !ok {
			t.Errorf("user %d (%s) has no samples: the users are not dense", u, names[u])
		}
	}
	return out
}

// TestCSVUsers: a listing's user column (any of its names, in any case)
// names each image's user; the users are numbered in sorted order of
// their names, and a View, FitTo and UsersOf give the same users. A
// listing without the column, or without a header, names none.
func TestCSVUsers(t *testing.T) {
	dir := t.TempDir()
	cats := csvImages(t, dir, "cats", 10, 4)
	dogs := csvImages(t, dir, "dogs", 50, 3)
	// "p10" sorts between "p1" and "p2": the names sort as strings.
	want := map[string]string{
		cats[0]: "p2", cats[1]: "p10", cats[2]: "p2", cats[3]: "p1",
		dogs[0]: "p1", dogs[1]: "p10", dogs[2]: "p1",
	}
	listing := func(column string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "file,%s,label\n", column)
		for _, p := range append(slices.Clone(cats), dogs...) {
			class := "cat"
			if strings.HasPrefix(p, "dogs") {
				class = "dog"
			}
			fmt.Fprintf(&b, "%s, %s ,%s\n", p, want[p], class)
		}
		path := filepath.Join(dir, "users.csv")
		writeFile(t, path, []byte(b.String()))
		return path
	}
	for _, column := range []string{"patient_id", "Patient_ID", "USER", "subject", "participant_id", "group"} {
		t.Run(column, func(t *testing.T) {
			m := mustLoad(t, "csv:"+listing(column))
			if m.NumUsers() != 3 || m.UserName(0) != "p1" || m.UserName(1) != "p10" || m.UserName(2) != "p2" {
				t.Fatalf("%d users %q…; want p1, p10, p2", m.NumUsers(), m.userNames)
			}
			for p, u := range sampleUsers(t, m) {
				rel, _ := filepath.Rel(dir, p)
				if want[rel] != u {
					t.Errorf("%s: user %q, want %q", rel, u, want[rel])
				}
			}
			if !strings.Contains(m.String(), "3 users") {
				t.Errorf("String %q does not count the users", m)
			}

			v, err := NewView(m, Preprocess{Height: 4, Width: 4})
			if err != nil {
				t.Fatal(err)
			}
			users, n := UsersOf(v)
			if n != 3 || len(users) != m.Len() {
				t.Fatalf("UsersOf(view): %d users for %d samples; want 3 for %d", n, len(users), m.Len())
			}
			for i, u := range users {
				if int(u) != m.UserOf(i) || v.UserName(int(u)) != m.UserName(int(u)) {
					t.Errorf("view sample %d: user %d (%s), source's %d", i, u, v.UserName(int(u)), m.UserOf(i))
				}
			}

			f, err := m.FitTo(Fit{Height: 1, Width: 1})
			if err != nil {
				t.Fatal(err)
			}
			if f.NumUsers() != 3 || !slices.Equal(f.users, m.users) || !slices.Equal(f.userNames, m.userNames) {
				t.Errorf("FitTo: users %v %q, want %v %q", f.users, f.userNames, m.users, m.userNames)
			}
		})
	}

	// No user column, no header: no users.
	plain := filepath.Join(dir, "plain.csv")
	writeFile(t, plain, []byte("path,label,id\n"+cats[0]+",cat,1\n"+dogs[0]+",dog,2\n"))
	bare := filepath.Join(dir, "bare.csv")
	writeFile(t, bare, []byte(cats[0]+",cat,p1\n"+dogs[0]+",dog,p2\n"))
	for _, p := range []string{plain, bare} {
		m := mustLoad(t, "csv:"+p)
		v, err := NewView(m, Preprocess{})
		if err != nil {
			t.Fatal(err)
		}
		if users, n := UsersOf(v); users != nil || n != 0 || m.NumUsers() != 0 || m.UserOf(0) != -1 {
			t.Errorf("%s: users %v, %d (NumUsers %d, UserOf(0) %d); want none", filepath.Base(p), users, n, m.NumUsers(), m.UserOf(0))
		}
		if strings.Contains(m.String(), "users") {
			t.Errorf("String %q counts users that are not named", m)
		}
	}
}

// TestCSVUserHoldout: with a user column, :holdout=F holds out whole
// users — round(F·users) of them, by a hash of their names — so that the
// two splits share no user and together hold every image once; each
// split numbers only its own users.
func TestCSVUserHoldout(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("image_path,class,patient_id\n")
	all := map[string]string{} // image → user
	userImages := map[string]int{}
	var names []string
	for u := range 10 {
		name := fmt.Sprintf("patient-%d", u)
		names = append(names, name)
		// 1 to 4 images a user, over both classes.
		for k, p := range csvImages(t, dir, name, 10*u, 1+u%4) {
			fmt.Fprintf(&b, "%s,%s,%s\n", p, []string{"a", "b"}[(u+k)%2], name)
			all[filepath.Join(dir, p)] = name
			userImages[name]++
		}
	}
	listing := filepath.Join(dir, "patients.csv")
	writeFile(t, listing, []byte(b.String()))
	test := mustLoad(t, "csv:"+listing+":holdout=0.3:split=test")
	train := mustLoad(t, "csv:"+listing+":holdout=0.3")
	testUsers, trainUsers := sampleUsers(t, test), sampleUsers(t, train)

	checkUserHoldout(t, all, names, userImages, test, train, testUsers, trainUsers)
	again := mustLoad(t, "csv:"+listing+":holdout=0.3:split=test")
	if !slices.Equal(again.userNames, test.userNames) {
		t.Errorf("a second load held out %q, the first %q", again.userNames, test.userNames)
	}
}

// TestCSVUserLimit: a limit keeps the round-robin over the classes, and
// the samples kept keep their users, numbered densely over those left.
func TestCSVUserLimit(t *testing.T) {
	dir := t.TempDir()
	a := csvImages(t, dir, "a", 0, 3)
	b := csvImages(t, dir, "b", 100, 3)
	listing := filepath.Join(dir, "l.csv")
	writeFile(t, listing, []byte("user,path,label\n"+
		"u1,"+a[0]+",a\nu1,"+a[1]+",a\nu3,"+a[2]+",a\n"+
		"u2,"+b[0]+",b\nu4,"+b[1]+",b\nu4,"+b[2]+",b\n"))
	// Round-robin: a0 (u1), b0 (u2), a1 (u1), b1 (u4); u3 is left out.
	m := mustLoad(t, "csv:"+listing+":limit=4")
	if m.Len() != 4 || m.Label(0) == m.Label(1) {
		t.Fatalf("limit 4: %d samples, labels %v; want 4, balanced", m.Len(), m.labels)
	}
	if got, want := fmt.Sprint(m.userNames, m.users), fmt.Sprint([]string{"u1", "u2", "u4"}, []int32{0, 1, 0, 2}); got != want {
		t.Errorf("users %s, want %s", got, want)
	}
	sampleUsers(t, m)
	if full := mustLoad(t, "csv:"+listing); full.NumUsers() != 4 {
		t.Errorf("no limit: %d users, want 4", full.NumUsers())
	}
}

// TestCSVUserErrors: a listing with a user column must name every row's
// user, and a duplicated image is refused with the user-level reason.
func TestCSVUserErrors(t *testing.T) {
	dir := t.TempDir()
	imgs := csvImages(t, dir, "a", 0, 2)
	for _, c := range []struct {
		name, body string
		want, not  []string
	}{
		{"empty user", "path,label,patient_id\n" + imgs[0] + ",x,p1\n" + imgs[1] + ",x,  \n", []string{"bad.csv", "line 3", "empty user", "patient_id"}, nil},
		{"quoted empty user", "subject,path,label\n\"\"," + imgs[0] + ",x\n", []string{"line 2", "empty user", "subject"}, nil},
		{"no user field", "path,label,user\n" + imgs[0] + ",x\n", []string{"bad.csv", "line 2", "2 fields", "a user (column 3, \"user\")"}, nil},
		{"duplicate with users", "path,label,user\n" + imgs[0] + ",x,u\n" + imgs[1] + ",x,v\n" + imgs[0] + ",y,w\n", []string{"line 4", "first on line 2", "count twice for its user", "duplicate"}, []string{"one individual"}},
		{"duplicate without users", "path,label\n" + imgs[0] + ",x\n" + imgs[0] + ",y\n", []string{"line 3", "one individual to the accountant"}, []string{"its user"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.csv")
			writeFile(t, path, []byte(c.body))
			_, err := LoadString("csv:" + path)
			wantErr(t, err, append([]string{"csv"}, c.want...)...)
			for _, s := range c.not {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q says %q", err, s)
				}
			}
		})
	}
}

// TestUsersFingerprint: without users the fingerprints are those the
// code gave before users were named (fixed values); naming users, or
// grouping the same images otherwise, changes them.
func TestUsersFingerprint(t *testing.T) {
	const (
		newImagesFP = "a0c170a1c7f6183bcf9ab0e6cfb1e51d1b2b8f7f4dcc620445cf19dac19a64ba"
		csvFP       = "565668332c3ba133e418c8b4684b19986a703d63596f7ec5e5ac00f47ca16eb4"
	)
	m, err := NewImages([]string{"a", "b"}, 1, 1, 2, []uint8{1, 2, 3, 4, 5, 6}, []int64{0, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Fingerprint(); got != newImagesFP {
		t.Errorf("NewImages without users: fingerprint %s, was %s", got, newImagesFP)
	}
	grouped := map[string]string{}
	for _, users := range [][]string{{"x", "x", "y"}, {"x", "y", "y"}, {"x", "y", "z"}} {
		u, err := m.WithUsers(users)
		if err != nil {
			t.Fatal(err)
		}
		fp := u.Fingerprint()
		if fp == newImagesFP || grouped[fp] != "" {
			t.Errorf("users %q: fingerprint %s, that of %q", users, fp, grouped[fp])
		}
		grouped[fp] = fmt.Sprint(users)
	}
	if m.Fingerprint() != newImagesFP || m.NumUsers() != 0 {
		t.Error("WithUsers changed the images it was called on")
	}
	if _, err := m.WithUsers([]string{"x", ""}); err == nil {
		t.Error("WithUsers took 2 names for 3 samples")
	}
	if _, err := m.WithUsers([]string{"x", "", "y"}); err == nil || !strings.Contains(err.Error(), "sample 1") {
		t.Errorf("WithUsers of an empty name: %v", err)
	}

	dir := t.TempDir()
	imgs := csvImages(t, dir, "p", 20, 3)
	load := func(body string) string {
		t.Helper()
		path := filepath.Join(dir, "l.csv")
		writeFile(t, path, []byte(body))
		return mustLoad(t, "csv:"+path).Fingerprint()
	}
	plain := load("path,label\n" + imgs[0] + ",x\n" + imgs[1] + ",y\n" + imgs[2] + ",x\n")
	if plain != csvFP {
		t.Errorf("listing without users: fingerprint %s, was %s", plain, csvFP)
	}
	one := load("path,label,user\n" + imgs[0] + ",x,a\n" + imgs[1] + ",y,a\n" + imgs[2] + ",x,b\n")
	other := load("path,label,user\n" + imgs[0] + ",x,a\n" + imgs[1] + ",y,b\n" + imgs[2] + ",x,b\n")
	same := load("user,path,label\na," + imgs[0] + ",x\na," + imgs[1] + ",y\nb," + imgs[2] + ",x\n")
	if one == plain || other == plain || one == other {
		t.Errorf("fingerprints: no users %s, grouped %s, regrouped %s; want three", plain, one, other)
	}
	if same != one {
		t.Errorf("the same grouping, columns reordered: fingerprint %s, was %s", same, one)
	}
}

// TestArraysUsers: the optional users array names each sample's user,
// numbered in numeric order of the ids, from an archive or a directory,
// through a limit, Images and a TensorView; a bad users array is refused
// naming it; the fingerprint follows the grouping and is unchanged
// without users.
func TestArraysUsers(t *testing.T) {
	const arraysFP = "b424d48e039e3216beac65a5479d09c39bfc0f34801d74e1e1986980ba72395c"
	x := &npy.Array{DType: npy.Uint8, Shape: []int{5, 2, 2}, U8: []uint8(seqBytes(20, 3, 1))}
	y := npy.NewInt64([]int64{0, 1, 0, 1, 1}, 5)
	// -2 < 7 < 30 < 100, where "100" < "30" as strings.
	users := npy.NewInt64([]int64{30, -2, 30, 7, 100}, 5)
	wantNames, wantUsers := []string{"-2", "7", "30", "100"}, []int32{2, 0, 2, 1, 3}
	check := func(t *testing.T, what string, a *Arrays, names []string, user []int32) {
		t.Helper()
		got := make([]int32, a.Len())
		for i := range got {
			got[i] = int32(a.UserOf(i))
		}
		gotNames := make([]string, a.NumUsers())
		for u := range gotNames {
			gotNames[u] = a.UserName(u)
		}
		if !slices.Equal(gotNames, names) || !slices.Equal(got, user) {
			t.Errorf("%s: users %q %v, want %q %v", what, gotNames, got, names, user)
		}
	}

	npz := writeNPZ(t, t.TempDir(), true, map[string]*npy.Array{"x": x, "y": y, "users": users})
	a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: npz})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "archive", a, wantNames, wantUsers)

	dir := t.TempDir()
	for name, arr := range map[string]*npy.Array{"x": x, "y": y, "users": {DType: npy.Int32, Shape: []int{5, 1}, I32: []int32{30, -2, 30, 7, 100}}} {
		if err := npy.WriteFile(filepath.Join(dir, name+".npy"), arr); err != nil {
			t.Fatal(err)
		}
	}
	d, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "directory", d, wantNames, wantUsers)
	if d.Fingerprint() != a.Fingerprint() {
		t.Error("the same arrays and users, other fingerprints")
	}

	lim, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: npz, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "limit 3", lim, []string{"-2", "30"}, []int32{1, 0, 1})

	im, ok, err := a.Images()
	if err != nil || !ok {
		t.Fatalf("Images: %v %v", ok, err)
	}
	v, err := NewView(im, Preprocess{})
	if err != nil {
		t.Fatal(err)
	}
	if u, n := UsersOf(v); n != 4 || !slices.Equal(u, wantUsers) || v.UserName(3) != "100" {
		t.Errorf("Images: users %v of %d, want %v of 4", u, n, wantUsers)
	}
	tv, err := NewTensorView(a, TensorPreprocess{Shape: []int{1, 2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if u, n := UsersOf(tv); n != 4 || !slices.Equal(u, wantUsers) {
		t.Errorf("TensorView: users %v of %d, want %v of 4", u, n, wantUsers)
	}

	// The test split reads users_test, and only it.
	split := writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{
		"x_train": x, "y_train": y, "users": users,
		"x_test": x, "y_test": y, "users_test": npy.NewInt64([]int64{1, 1, 2, 2, 3}, 5),
	})
	test, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: split, Split: Test})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "users_test", test, []string{"1", "2", "3"}, []int32{0, 0, 1, 1, 2})

	// Fingerprints: unchanged without users, changed by the grouping.
	plainX, plainY := npy.NewFloat32(seq(6, 1), 2, 3), npy.NewInt64([]int64{0, 1}, 2)
	fp := func(u *npy.Array) string {
		t.Helper()
		arrays := map[string]*npy.Array{"x": plainX, "y": plainY}
		if u != nil {
			arrays["users"] = u
		}
		a, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: writeNPZ(t, t.TempDir(), false, arrays)})
		if err != nil {
			t.Fatal(err)
		}
		return a.Fingerprint()
	}
	if got := fp(nil); got != arraysFP {
		t.Errorf("arrays without users: fingerprint %s, was %s", got, arraysFP)
	}
	together, apart := fp(npy.NewInt64([]int64{4, 4}, 2)), fp(npy.NewInt64([]int64{4, 5}, 2))
	if together == arraysFP || apart == arraysFP || together == apart {
		t.Errorf("fingerprints: no users %s, one user %s, two %s; want three", arraysFP, together, apart)
	}

	for _, c := range []struct {
		name  string
		users *npy.Array
		want  []string
	}{
		{"length", npy.NewInt64([]int64{1, 2, 3, 4}, 4), []string{"users", "shape [4]", "one user a sample", "(5,)"}},
		{"2-D", npy.NewInt64(make([]int64, 10), 5, 2), []string{"users", "shape [5 2]"}},
		{"float", npy.NewFloat32(make([]float32, 5), 5), []string{"users", "float32", "integer user ids"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeNPZ(t, t.TempDir(), false, map[string]*npy.Array{"x": x, "y": y, "users": c.users})
			_, err := LoadArrays(Spec{Scheme: SchemeNPY, Dir: path})
			wantErr(t, err, append([]string{"npy", "data.npz"}, c.want...)...)
		})
	}
}

// checkUserHoldout holds a holdout of 0.3 over the 10 users that all maps
// each sample to (keyed as testUsers and trainUsers, the splits' samples'
// users, key theirs) to its rule: every sample in exactly one split, under
// its own user; no user on both sides; round(0.3·10) users held out, those
// that holdoutKeys picks over names (sorted), each with all of its
// userImages.
func checkUserHoldout(t *testing.T, all map[string]string, names []string, userImages map[string]int, test, train *Images, testUsers, trainUsers map[string]string) {
	t.Helper()
	seen := map[string]int{}
	for _, split := range []map[string]string{testUsers, trainUsers} {
		for p, u := range split {
			seen[p]++
			if all[p] != u {
				t.Errorf("%s: user %q, want %q", p, u, all[p])
			}
		}
	}
	for p := range all {
		if seen[p] != 1 {
			t.Errorf("%s is in %d splits, want 1", p, seen[p])
		}
	}
	if len(seen) != len(all) || test.Len()+train.Len() != len(all) {
		t.Errorf("%d test and %d training samples of %d images", test.Len(), train.Len(), len(all))
	}
	for _, u := range test.userNames {
		if slices.Contains(train.userNames, u) {
			t.Errorf("user %s has images in both splits", u)
		}
	}
	if want := int(math.Round(0.3 * 10)); test.NumUsers() != want || train.NumUsers() != 10-want {
		t.Errorf("%d users held out, %d trained; want %d and %d", test.NumUsers(), train.NumUsers(), want, 10-want)
	}
	held := holdoutKeys(names, 0.3)
	for k, name := range names {
		in := slices.Contains(test.userNames, name)
		if in != held[k] {
			t.Errorf("user %s held out: %v, the rule says %v", name, in, held[k])
		}
		n := 0
		for _, u := range testUsers {
			if u == name {
				n++
			}
		}
		if in && n != userImages[name] {
			t.Errorf("user %s: %d of %d images held out", name, n, userImages[name])
		}
	}
}
