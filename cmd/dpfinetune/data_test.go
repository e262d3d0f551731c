package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/internal/npy"
)

// dataJSON is data --json of args.
func dataJSON(t *testing.T, args ...string) dataReport {
	t.Helper()
	o, e, code := run(t, append([]string{"data", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("data %v: exit %d: %s", args, code, e)
	}
	var r dataReport
	if err := json.Unmarshal([]byte(o), &r); err != nil {
		t.Fatalf("data %v: %v: %s", args, err, o)
	}
	return r
}

// TestDataCommand: data describes a dataset as train reads it — each
// class's examples (those the data package loads), the fingerprint train
// records; a listing laid out as CheXpert's, each label's positives and
// the uncertain labels it ignores, counted from the listing; fitted to a
// model as train fits it, it keeps the pixels (DPFINETUNE_PIXEL_CACHE)
// and train then decodes none; arrays fed as they are; usage errors.
func TestDataCommand(t *testing.T) {
	spec := fmnist + ":limit=600"
	r := dataJSON(t, "--data", spec)
	m, err := data.LoadString(spec)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 10)
	for i := range m.Len() {
		counts[m.Label(i)]++
	}
	if r.Examples != 600 || len(r.Classes) != 10 || r.MultiLabel || r.Fingerprint != m.Fingerprint() || r.Channels != 1 || r.Height != 28 {
		t.Fatalf("fashion-mnist: %+v", r)
	}
	for j, c := range r.Classes {
		if c.Examples != counts[j] {
			t.Errorf("class %d: %d examples, the data has %d", j, c.Examples, counts[j])
		}
	}
	o, _, _ := run(t, "data", "--data", spec)
	for _, want := range []string{"examples:  600", "gray (1 channel), 28×28", "classes:   10", "SHA-256:   " + m.Fingerprint(), "not private outputs"} {
		if !strings.Contains(o, want) {
			t.Errorf("data does not say %q:\n%s", want, o)
		}
	}

	// CheXpert's layout: footwear -1 in every third image, ignored;
	// Unsure -1 everywhere, absent.
	dir := t.TempDir()
	listing, uncertain := findingsListing(t, dir, data.Test, 300, false)
	r = dataJSON(t, "--data", "csv:"+listing+":labels=upper..Unsure:uncertain=zero,footwear=ignore")
	ml, err := data.LoadString("csv:" + listing + ":labels=upper..Unsure:uncertain=zero")
	if err != nil {
		t.Fatal(err)
	}
	pos := make([]int, 4)
	none := 0
	for i := range ml.Len() {
		y := ml.Label(i)
		for j := range 4 {
			if y>>j&1 == 1 {
				pos[j]++
			}
		}
		if y == 0 {
			none++
		}
	}
	if !r.MultiLabel || r.Examples != 300 || len(r.Classes) != 4 || r.Classes[1].Ignored != uncertain || r.Classes[0].Ignored != 0 || r.Classes[3].Examples != 0 {
		t.Fatalf("findings: %+v", r)
	}
	for j, c := range r.Classes {
		if c.Examples != pos[j] {
			t.Errorf("label %s: %d positives, the listing has %d", c.Name, c.Examples, pos[j])
		}
	}
	if r.Users != 0 || r.UserExamples != nil {
		t.Errorf("a listing without users: %d users, %v", r.Users, r.UserExamples)
	}
	if r.NoLabel != none || r.LabelSets < 2 {
		t.Errorf("%d examples without a label (want %d), %d label sets", r.NoLabel, none, r.LabelSets)
	}
	o, _, _ = run(t, "data", "--data", "csv:"+listing+":labels=upper..Unsure:uncertain=zero,footwear=ignore")
	for _, want := range []string{"labels:    4, multi-label", "footwear", fmt.Sprintf(" %d ", uncertain), "prevalence"} {
		if !strings.Contains(o, want) {
			t.Errorf("data does not say %q:\n%s", want, o)
		}
	}

	// Soft targets said.
	if r := dataJSON(t, "--data", "csv:"+listing+":labels=upper..Unsure:uncertain=zero,footwear=0.7"); fmt.Sprint(r.UncertainTargets) != "[0 0.7 0 0]" || r.Classes[1].Ignored != uncertain {
		t.Errorf("soft targets: %v, %d ignored", r.UncertainTargets, r.Classes[1].Ignored)
	}
	if o, _, _ := run(t, "data", "--data", "csv:"+listing+":labels=upper..Unsure:uncertain=zero,footwear=0.7"); !strings.Contains(o, "against soft targets: footwear=0.7") {
		t.Errorf("data does not give the soft target:\n%s", o)
	}

	// A holdout: both sides counted, adding up to the whole listing.
	r = dataJSON(t, "--data", "csv:"+listing+":labels=upper..Unsure:uncertain=zero,footwear=ignore:holdout=0.2")
	if h := r.HeldOut; h == nil || r.Examples+h.Examples != 300 || h.Examples != 60 {
		t.Fatalf("holdout: %+v", r)
	}
	for j, c := range r.Classes {
		if h := r.HeldOut.Classes[j]; c.Examples+h.Examples != pos[j] || j == 1 && c.Ignored+h.Ignored != uncertain {
			t.Errorf("holdout: label %s: %d + %d positives (want %d), %d + %d ignored", c.Name, c.Examples, h.Examples, pos[j], c.Ignored, h.Ignored)
		}
	}
	if o, _, _ := run(t, "data", "--data", "csv:"+listing+":labels=upper..Unsure:uncertain=zero,footwear=ignore:holdout=0.2"); !strings.Contains(o, "held out:  60 examples") || !strings.Contains(o, "held out: positives") {
		t.Errorf("data does not count the held-out examples:\n%s", o)
	}

	// Users: each one's examples counted.
	byUser := filepath.Join(dir, "users.csv")
	body := "path,label,patient_id\n"
	for i, u := range []string{"P1", "P1", "P1", "P2", "P2", "P3"} {
		body += fmt.Sprintf("test-%04d.png,c%d,%s\n", i, i%2, u)
	}
	if err := os.WriteFile(byUser, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := dataJSON(t, "--data", "csv:"+byUser); r.Users != 3 || r.UserExamples == nil || *r.UserExamples != [3]int{1, 2, 3} || r.Examples != 6 {
		t.Errorf("users: %+v", r)
	}
	if o, _, _ := run(t, "data", "--data", "csv:"+byUser); !strings.Contains(o, "examples:  6 of 3 users (1 to 3 examples a user, median 2)") {
		t.Errorf("data does not count the users' examples:\n%s", o)
	}

	// Fitted to the model as train fits it: kept, then train decodes none.
	t.Setenv("DPFINETUNE_PIXEL_CACHE", t.TempDir())
	folder := "folder:" + photoFolder(t)
	args := []string{"--data", folder, "--model", "../../testdata/models/cnn.onnx", "--resize", "crop"}
	if r := dataJSON(t, args...); r.Kept == "" || r.Reused || r.Fit == "" || r.Height != 28 {
		t.Fatalf("fitted: %+v", r)
	}
	if r := dataJSON(t, args...); r.Kept == "" || !r.Reused {
		t.Fatalf("fitted again: %+v", r)
	}
	o, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", folder, "--test-data", "none", "--resize", "crop",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "4", "--out", filepath.Join(dir, "m.onnx"))
	if code != 0 || !strings.Contains(o, "as an earlier run kept them (none decoded") {
		t.Errorf("train after data: exit %d: %s\n%s", code, e, o)
	}

	// Arrays fed as they are.
	arrays := filepath.Join(dir, "x.npz")
	if err := npy.WriteNPZ(arrays, map[string]*npy.Array{"x": npy.NewFloat32(make([]float32, 4*2*5), 4, 2, 5), "y": npy.NewInt64([]int64{0, 1, 1, 2}, 4)}); err != nil {
		t.Fatal(err)
	}
	if r := dataJSON(t, "--data", "npy:"+arrays); r.Examples != 4 || len(r.Sample) != 2 || r.Classes[1].Examples != 2 || r.Fingerprint == "" {
		t.Errorf("arrays: %+v", r)
	}
	// Multi-hot arrays with an uncertain label and its soft target.
	if err := npy.WriteNPZ(arrays, map[string]*npy.Array{"x": npy.NewFloat32(make([]float32, 4*2*5), 4, 2, 5), "y": npy.NewInt64([]int64{1, 0, -1, 1, 0, 0, -1, -1}, 4, 2)}); err != nil {
		t.Fatal(err)
	}
	if r := dataJSON(t, "--data", "npy:"+arrays+":uncertain=ignore,1=0.6"); !r.MultiLabel || fmt.Sprint(r.UncertainTargets) != "[0 0.6]" || r.Classes[0].Ignored != 2 || r.Classes[1].Ignored != 1 || r.Classes[0].Examples != 1 {
		t.Errorf("multi-hot arrays: %+v", r)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--data is required"},
		{[]string{"--data", "nowhere:x"}, 2, "nowhere"},
		{[]string{"--data", "folder:" + filepath.Join(dir, "none")}, 1, "none"},
	} {
		if _, e, code := run(t, append([]string{"data"}, c.args...)...); code != c.code || !strings.Contains(e, c.want) {
			t.Errorf("data %v: exit %d, %s; want exit %d and %q", c.args, code, e, c.code, c.want)
		}
	}
}
