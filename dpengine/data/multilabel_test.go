package data

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/labelset"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// TestCSVMultiLabel: a listing read with :multilabel has label sets — the
// names separated by '|' (or the spec's character), numbered in sorted
// order, an empty label the empty set — as bits of each sample's label;
// a limit takes the label sets round-robin and :holdout splits each set;
// the spec's string form reads back; errors name what is wrong.
func TestCSVMultiLabel(t *testing.T) {
	dir := t.TempDir()
	imgs := csvImages(t, dir, "x", 10, 6)
	rows := []string{"Effusion|Atelectasis", "", "Effusion", "Atelectasis | Mass", "Effusion", "Mass|Effusion|Atelectasis"}
	var b strings.Builder
	b.WriteString("Image Index,Finding Labels,Patient ID\n")
	for k, p := range imgs {
		fmt.Fprintf(&b, "%s,%s,P%d\n", p, rows[k], k%3)
	}
	listing := filepath.Join(dir, "findings.csv")
	writeFile(t, listing, []byte(strings.ReplaceAll(b.String(), "Image Index,Finding Labels", "image,labels")))

	m, err := LoadString("csv:" + listing + ":multilabel")
	if err != nil {
		t.Fatal(err)
	}
	if !m.MultiLabel() || strings.Join(m.Classes(), ",") != "Atelectasis,Effusion,Mass" || m.Len() != 6 || m.NumClasses() != 3 {
		t.Fatalf("multi-label %v, labels %q, %d samples", m.MultiLabel(), m.Classes(), m.Len())
	}
	// Bits: Atelectasis 1, Effusion 2, Mass 4.
	want := map[uint8]int{10: 3, 11: 0, 12: 2, 13: 5, 14: 2, 15: 7}
	for i := 0; i < m.Len(); i++ {
		if px := m.Pixels(i)[0]; m.Label(i) != want[px] {
			t.Errorf("image %d: label set %b, want %b", px, m.Label(i), want[px])
		}
	}
	// Round-robin over the sets in increasing order of their bits:
	// {} (11), {Effusion} (12), {A, E} (10), {A, Mass} (13), {all} (15),
	// then the second {Effusion} (14).
	var order []uint8
	for i := 0; i < m.Len(); i++ {
		order = append(order, m.Pixels(i)[0])
	}
	if fmt.Sprint(order) != "[11 12 10 13 15 14]" {
		t.Errorf("sample order %v", order)
	}
	v, err := NewView(m, Preprocess{})
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.csv")
	writeFile(t, plain, []byte("image,label\n"+imgs[0]+",a\n"+imgs[1]+",b\n"))
	if !IsMultiLabel(v) || IsMultiLabel(mustLoad(t, "csv:"+plain)) {
		t.Error("IsMultiLabel: the view of a multi-label listing, or the listing read with one class a row")
	}
	sp, err := ParseSpec("csv:" + listing + ":multilabel=;:holdout=0.5")
	if err != nil || sp.MultiLabel != ";" {
		t.Fatalf("multilabel=;: %+v %v", sp, err)
	}
	if back, err := ParseSpec(sp.String()); err != nil || back.String() != sp.String() || back.MultiLabel != ";" {
		t.Errorf("%q reads back as %+v (%v)", sp.String(), back, err)
	}
	train, err := LoadString("csv:" + listing + ":multilabel:holdout=0.5")
	if err != nil {
		t.Fatal(err)
	}
	test, err := LoadString("csv:" + listing + ":multilabel:holdout=0.5:test")
	if err != nil {
		t.Fatal(err)
	}
	if train.Len()+test.Len() != 6 || test.Len() != 1 || !test.MultiLabel() {
		t.Errorf("holdout 0.5: %d train, %d test; want the two {Effusion} images split", train.Len(), test.Len())
	}

	var many []string
	for k := range MaxLabels + 1 {
		many = append(many, fmt.Sprint("L", k))
	}
	for _, tc := range []struct{ spec, body, want string }{
		{"folder:" + dir + ":multilabel", "", "csv scheme only"},
		{"csv:" + listing + ":multilabel=ab", "", "want one character"},
		{"csv:%s:multilabel", "image,labels\n" + imgs[0] + ",A|A\n", `label "A" twice`},
		{"csv:%s:multilabel", "image,labels\n" + imgs[0] + ",\n", "no row names a label"},
		{"csv:%s:multilabel", "image,labels\n" + imgs[0] + "," + strings.Join(many, "|") + "\n", fmt.Sprint("one more than the ", MaxLabels, " labels")},
	} {
		spec := tc.spec
		if strings.Contains(spec, "%s") {
			bad := filepath.Join(dir, "bad.csv")
			writeFile(t, bad, []byte(tc.body))
			spec = fmt.Sprintf(spec, bad)
		}
		if _, err := LoadString(spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", spec, err, tc.want)
		}
	}
}

// TestArraysMultiHot: arrays whose labels are multi-hot, (samples,
// labels) of 0s and 1s — integers or floats — are multi-label, their
// labels the sets as bits, named by a classes array of as many names;
// as images (uint8 samples) and as tensors alike.
func TestArraysMultiHot(t *testing.T) {
	dir := t.TempDir()
	x := &npy.Array{DType: npy.Uint8, Shape: []int{3, 2, 2}, U8: []uint8{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	y := npy.NewFloat32([]float32{1, 0, 1, 0, 0, 0, 1, 1, 1}, 3, 3)
	path := filepath.Join(dir, "multi.npz")
	if err := npy.WriteNPZ(path, map[string]*npy.Array{"x": x, "y": y, "classes": &npy.Array{DType: npy.Unicode, Shape: []int{3}, Str: []string{"a", "b", "c"}}}); err != nil {
		t.Fatal(err)
	}
	a, err := LoadArrays(mustSpec(t, "npy:"+path))
	if err != nil {
		t.Fatal(err)
	}
	if !a.MultiLabel() || strings.Join(a.Classes(), ",") != "a,b,c" || a.NumClasses() != 3 {
		t.Fatalf("multi-label %v, classes %v", a.MultiLabel(), a.Classes())
	}
	im, ok, err := a.Images()
	if err != nil || !ok {
		t.Fatalf("as images: %v %v", ok, err)
	}
	for i, want := range []int{0b101, 0, 0b111} {
		if a.Label(i) != want || im.Label(i) != want {
			t.Errorf("sample %d: label sets %b and %b, want %b", i, a.Label(i), im.Label(i), want)
		}
	}
	if !IsMultiLabel(im) || !IsMultiLabel(a) {
		t.Error("the images or the arrays lost the multi-label mark")
	}
	if err := npy.WriteNPZ(path, map[string]*npy.Array{"x": x, "y": y, "classes": &npy.Array{DType: npy.Unicode, Shape: []int{2}, Str: []string{"a", "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadArrays(mustSpec(t, "npy:"+path)); err == nil || !strings.Contains(err.Error(), "2 names for 3 labels") {
		t.Errorf("two names for three labels: %v", err)
	}
	// -1s (uncertain) as uncertain= says, per label by its number.
	y = npy.NewInt64([]int64{1, -1, 0, -1, 0, -1, 1, 1, 1}, 3, 3)
	if err := npy.WriteNPZ(path, map[string]*npy.Array{"x": x, "y": y}); err != nil {
		t.Fatal(err)
	}
	type set struct{ on, ignored []int }
	for _, tc := range []struct {
		uncertain string
		want      []set
	}{
		{"zero", []set{{on: []int{0}}, {}, {on: []int{0, 1, 2}}}},
		{"ignore", []set{{[]int{0}, []int{1}}, {nil, []int{0, 2}}, {on: []int{0, 1, 2}}}},
		{"one,2=ignore,0=zero", []set{{on: []int{0, 1}}, {nil, []int{2}}, {on: []int{0, 1, 2}}}},
	} {
		a, err := LoadArrays(mustSpec(t, "npy:"+path+":uncertain="+tc.uncertain))
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range tc.want {
			want, err := labelset.OfIgnoring(3, w.on, w.ignored)
			if err != nil {
				t.Fatal(err)
			}
			if int64(a.Label(i)) != want {
				t.Errorf("uncertain=%s: sample %d: label %d, want %d (%v, ignoring %v)", tc.uncertain, i, a.Label(i), want, w.on, w.ignored)
			}
		}
	}
	// Named by a classes array: by their names, or still by their numbers.
	if err := npy.WriteNPZ(path, map[string]*npy.Array{"x": x, "y": y, "classes": &npy.Array{DType: npy.Unicode, Shape: []int{3}, Str: []string{"a", "b", "Edema"}}}); err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"one,edema=ignore,a=zero", "one,2=ignore,0=zero"} {
		a, err := LoadArrays(mustSpec(t, "npy:"+path+":uncertain="+rule))
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := labelset.OfIgnoring(3, []int{0, 1}, nil); int64(a.Label(0)) != want {
			t.Errorf("uncertain=%s: sample 0: label %d, want %d", rule, a.Label(0), want)
		}
		if want, _ := labelset.OfIgnoring(3, nil, []int{2}); int64(a.Label(1)) != want {
			t.Errorf("uncertain=%s: sample 1: label %d, want %d", rule, a.Label(1), want)
		}
	}
	for _, tc := range []struct{ spec, want string }{
		{"", "sample 0 has -1 (uncertain) for label 1: say what it means"},
		{":uncertain=zero,3=one", `"3" is not one of the label columns`},
		{":uncertain=zero,Mass=one", `"Mass" is not one of the label columns`},
	} {
		if _, err := LoadArrays(mustSpec(t, "npy:"+path+tc.spec)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.spec, err, tc.want)
		}
	}
}

func mustSpec(t *testing.T, s string) Spec {
	t.Helper()
	sp, err := ParseSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestCSVLabelColumns: a listing whose labels are columns of their own
// (CheXpert's: 1, 0 or empty, -1 uncertain), read with :labels=…, is
// multi-label, its labels the columns in the order given; -1 is refused
// unless :uncertain= says what it is — zero, one or ignore (a partial
// set), for all columns or per column —; a missing column, a bad value or
// options that cannot go together are named.
func TestCSVLabelColumns(t *testing.T) {
	dir := t.TempDir()
	imgs := csvImages(t, dir, "x", 10, 4)
	body := "Path,Sex,Age,Cardiomegaly,Pleural Effusion,Edema,patient_id\n" +
		imgs[0] + ",F,60,1.0,,0.0,P1\n" +
		imgs[1] + ",M,41,-1.0,1.0,,P2\n" +
		imgs[2] + ",F,70,0,0,1,P2\n" +
		imgs[3] + ",M,52,-1,-1.0,1,P3\n"
	listing := filepath.Join(dir, "chexpert.csv")
	writeFile(t, listing, []byte(body))
	type set struct{ on, ignored []int }
	prints := map[string]string{} // fingerprint: rule; every rule makes other labels
	for _, tc := range []struct {
		uncertain string
		want      []set // by pixel value 10, 11, 12, 13
	}{
		{"zero", []set{{on: []int{0}}, {on: []int{1}}, {on: []int{2}}, {on: []int{2}}}},
		{"one", []set{{on: []int{0}}, {on: []int{0, 1}}, {on: []int{2}}, {on: []int{0, 1, 2}}}},
		{"ignore", []set{{on: []int{0}}, {[]int{1}, []int{0}}, {on: []int{2}}, {[]int{2}, []int{0, 1}}}},
		{"zero,Edema=one,Cardiomegaly=ignore", []set{{on: []int{0}}, {[]int{1}, []int{0}}, {on: []int{2}}, {[]int{2}, []int{0}}}},
		// Exceptions alone, their columns in another case.
		{"pleural effusion=one,CARDIOMEGALY=zero", []set{{on: []int{0}}, {on: []int{1}}, {on: []int{2}}, {on: []int{1, 2}}}},
		// Soft targets: the uncertain labels ignored by the label sets,
		// their targets the dataset's (UncertainTargets).
		{"0.7", []set{{on: []int{0}}, {[]int{1}, []int{0}}, {on: []int{2}}, {[]int{2}, []int{0, 1}}}},
		{"zero,Cardiomegaly=0.25", []set{{on: []int{0}}, {[]int{1}, []int{0}}, {on: []int{2}}, {[]int{2}, []int{0}}}},
	} {
		// A column's name in another case is found too.
		if _, err := LoadString("csv:" + listing + ":labels=pleural effusion:uncertain=" + tc.uncertain); err != nil && !strings.Contains(tc.uncertain, "=") {
			t.Fatal(err)
		}
		m, err := LoadString("csv:" + listing + ":labels=Cardiomegaly,Pleural Effusion,Edema:uncertain=" + tc.uncertain)
		if err != nil {
			t.Fatal(err)
		}
		if !m.MultiLabel() || strings.Join(m.Classes(), ",") != "Cardiomegaly,Pleural Effusion,Edema" || m.NumUsers() != 3 {
			t.Fatalf("multi-label %v, labels %q, %d users", m.MultiLabel(), m.Classes(), m.NumUsers())
		}
		wantSoft := map[string][]float64{"0.7": {0.7, 0.7, 0.7}, "zero,Cardiomegaly=0.25": {0.25, 0, 0}}[tc.uncertain]
		if got := m.UncertainTargets(); fmt.Sprint(got) != fmt.Sprint(wantSoft) {
			t.Errorf("uncertain=%s: soft targets %v, want %v", tc.uncertain, got, wantSoft)
		}
		// Soft rules' label sets are ignore's: the same fingerprint.
		if wantSoft == nil {
			if other, ok := prints[m.Fingerprint()]; ok {
				t.Errorf("uncertain=%s: the fingerprint of uncertain=%s", tc.uncertain, other)
			}
			prints[m.Fingerprint()] = tc.uncertain
		}
		for i := 0; i < m.Len(); i++ {
			px := m.Pixels(i)[0]
			w := tc.want[px-10]
			want, err := labelset.OfIgnoring(3, w.on, w.ignored)
			if err != nil {
				t.Fatal(err)
			}
			if int64(m.Label(i)) != want || labelset.Partial(want) != (len(w.ignored) > 0) {
				t.Errorf("uncertain=%s: image %d: label %d, want %d (%v, ignoring %v)", tc.uncertain, px, m.Label(i), want, w.on, w.ignored)
			}
		}
	}
	for _, tc := range []struct{ spec, want string }{
		{"csv:" + listing + ":labels=Cardiomegaly,Edema", "uncertain: say what it means with :uncertain=zero"},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=Edema=one", `"Cardiomegaly" is -1, uncertain`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=zero,Atelectasis=one", `"Atelectasis" is not one of the label columns`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=maybe", `"maybe": want zero, one, ignore or a soft target in (0, 1)`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=zero,one", `"one": want zero, one, ignore or a soft target`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=zero,Edema=half", `"Edema=half": want COLUMN=zero`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=zero,Edema=1.5", `"Edema=1.5": want COLUMN=zero`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=0", `"0": want zero, one, ignore or a soft target`},
		{"csv:" + listing + ":labels=Cardiomegaly,Edema:uncertain=Edema=one,Edema=zero", `column "Edema" twice`},
		{"csv:" + listing + ":labels=Cardiomegaly,Atelectasis:uncertain=one", `no column "Atelectasis"`},
		{"csv:" + listing + ":labels=Sex:uncertain=one", `"Sex" is "F": want 1, 0, empty or -1`},
		{"csv:" + listing + ":uncertain=one", "uncertain= needs labels=COLUMNS"},
		{"csv:" + listing + ":labels=Edema:multilabel", "give one"},
		{"csv:" + listing + ":labels=Edema,Edema", "distinct"},
		{"folder:" + dir + ":labels=Edema", "csv scheme only"},
	} {
		if _, err := LoadString(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.spec, err, tc.want)
		}
	}
	sp := mustSpec(t, "csv:"+listing+":labels=Cardiomegaly,Pleural Effusion:uncertain=one:holdout=0.5")
	if back := mustSpec(t, sp.String()); strings.Join(back.Labels, "|") != "Cardiomegaly|Pleural Effusion" || back.Uncertain != "one" || back.Holdout != 0.5 {
		t.Errorf("%q reads back as %+v", sp.String(), back)
	}
	sp = mustSpec(t, "csv:"+listing+":labels=Cardiomegaly,Edema:uncertain=ignore,Edema=one")
	if back := mustSpec(t, sp.String()); back.Uncertain != "ignore,Edema=one" {
		t.Errorf("%q reads back as %+v", sp.String(), back)
	}
}
