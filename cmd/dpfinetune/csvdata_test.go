package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTrainCSV: a CSV listing of a folder's images, labelled by their
// class directories' names, trains on exactly the folder's samples (the
// same fingerprint of the training data, the same held-out split) and
// records the class names in the model; the listing in another order of
// rows is the same data, and a listing with a duplicate row is refused.
func TestTrainCSV(t *testing.T) {
	dir := photoFolder(t) // a/0.png … a/3.png, b/0.png … b/3.png
	var rows, reversed []string
	for _, c := range []string{"a", "b"} {
		for k := range 4 {
			r := filepath.Join(c, string(rune('0'+k))+".png") + "," + c
			rows = append(rows, r)
			reversed = append([]string{r}, reversed...)
		}
	}
	csvFile := filepath.Join(dir, "labels.csv")
	os.WriteFile(csvFile, []byte("file_name,label\n"+strings.Join(rows, "\n")+"\n"), 0o644)
	// Rows in reverse order: each class's rows in reverse too, which is
	// another order of samples, the same data set.
	revFile := filepath.Join(t.TempDir(), "rev.csv")
	var abs []string
	for _, r := range reversed {
		abs = append(abs, filepath.Join(dir, r))
	}
	os.WriteFile(revFile, []byte(strings.Join(abs, "\n")+"\n"), 0o644)

	train := func(spec string) runReport {
		t.Helper()
		out := filepath.Join(t.TempDir(), "m.onnx")
		rep := out + ".json"
		if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", spec+":holdout=0.25", "--epsilon", "8",
			"--epochs", "1", "--batch-size", "4", "--seed", "1", "--quiet", "--out", out, "--report", rep); code != 0 {
			t.Fatalf("%s: exit %d: %s", spec, code, e)
		}
		var r runReport
		b, _ := os.ReadFile(rep)
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if md := metadata(t, out); md["dpfinetune.classes"] != `["a","b"]` {
			t.Errorf("%s: classes recorded as %q", spec, md["dpfinetune.classes"])
		}
		return r
	}
	folder, listed := train("folder:"+dir), train("csv:"+csvFile)
	// eval reads a listing whole (it has no test split), or its held-out
	// rows where it says :holdout.
	for spec, want := range map[string]float64{"csv:" + csvFile: 8, "csv:" + csvFile + ":holdout=0.25": 2} {
		out, e, code := run(t, "eval", "--model", "../../testdata/models/cnn.onnx", "--data", spec, "--json")
		var r evalResult
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || float64(r.Samples) != want {
			t.Errorf("eval %s: exit %d, %d samples, want %v: %s", spec, code, r.Samples, want, e)
		}
	}
	if folder.Settings.DataSHA256 == "" || listed.Settings.DataSHA256 != folder.Settings.DataSHA256 || listed.Settings.Examples != folder.Settings.Examples {
		t.Errorf("the listing's training data (%d samples, %.12s) is not the folder's (%d, %.12s)", listed.Settings.Examples, listed.Settings.DataSHA256, folder.Settings.Examples, folder.Settings.DataSHA256)
	}
	if len(listed.Epochs) != 1 || listed.Epochs[0].Test == nil || listed.Epochs[0].Test.Samples != folder.Epochs[0].Test.Samples {
		t.Errorf("the listing's held-out split is not the folder's: %+v", listed.Epochs)
	}
	if rev := train("csv:" + revFile); rev.Settings.Examples != folder.Settings.Examples {
		t.Errorf("the reversed listing trains on %d samples, the folder on %d", rev.Settings.Examples, folder.Settings.Examples)
	}

	dup := filepath.Join(dir, "dup.csv")
	os.WriteFile(dup, []byte(rows[0]+"\n"+rows[1]+"\n"+rows[0]+"\n"), 0o644)
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "csv:"+dup, "--epsilon", "8", "--out", filepath.Join(t.TempDir(), "x.onnx")); code == 0 || !strings.Contains(e, "line 3") || !strings.Contains(e, "duplicate") {
		t.Errorf("a duplicate row: exit %d, %s", code, e)
	}
}

// TestTrainUsers: a CSV listing whose rows name their patients trains with
// a guarantee per patient by default: the report's settings count the
// users (q = L/users, a median patient's examples a step), the log says
// so, the model's metadata records the unit, and :holdout holds out whole
// patients (the test examples are the held-out patient's). With
// --privacy-unit example the same listing trains per image and the log
// names the users; plan --examples-per-user plans a user's rows as the
// sample; bad values of the flags are usage errors.
func TestTrainUsers(t *testing.T) {
	dir, listing, patients := patientsListing(t)

	train := func(extra ...string) (runReport, string, string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "m.onnx")
		args := append([]string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", "csv:" + listing + ":holdout=0.25", "--epsilon", "8",
			"--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet", "--out", out, "--report", out + ".json"}, extra...)
		o, e, code := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, e)
		}
		var r runReport
		b, _ := os.ReadFile(out + ".json")
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if md := metadata(t, out); md["dpfinetune.privacy_unit"] != map[bool]string{true: "user"}[r.Settings.PrivacyUnit == "user"] {
			t.Errorf("%v: metadata privacy_unit %q, settings %q", extra, md["dpfinetune.privacy_unit"], r.Settings.PrivacyUnit)
		}
		return r, o, e
	}
	r, log, _ := train()
	s := r.Settings
	if s.PrivacyUnit != "user" || s.Users != 3 || s.SampleRate != 2.0/3 || s.ExamplesPerUser != 2 {
		t.Errorf("per patient: unit %q, %d users, q %g, %d examples a user; want user, 3, 2/3, 2", s.PrivacyUnit, s.Users, s.SampleRate, s.ExamplesPerUser)
	}
	if !strings.Contains(log, "examples of 3 users") || !strings.Contains(log, "the guarantee is per user") || !strings.Contains(log, "users/s, ") || !strings.Contains(log, "of users' gradients clipped") {
		t.Errorf("the log does not say the guarantee is per user:\n%s", log)
	}
	// One patient of four held out: all of its images, and no other's.
	held := 8 - s.Examples
	if len(r.Epochs) != 1 || r.Epochs[0].Test == nil || r.Epochs[0].Test.Samples != held {
		t.Fatalf("%d training examples and test %+v", s.Examples, r.Epochs)
	}
	count := map[string]int{}
	for _, p := range patients {
		count[p]++
	}
	if !slices.Contains(slices.Collect(maps.Values(count)), held) {
		t.Errorf("%d images held out: no patient has as many (%v)", held, count)
	}

	r, log, _ = train("--privacy-unit", "example")
	if r.Settings.PrivacyUnit != "example" || r.Settings.Users != 0 || r.Settings.SampleRate != 2/float64(r.Settings.Examples) || !strings.Contains(log, "names 3 users and the guarantee is per example") {
		t.Errorf("per image: settings %+v, log %q", r.Settings, log)
	}
	if r, _, _ := train("--examples-per-user", "3"); r.Settings.ExamplesPerUser != 3 {
		t.Errorf("--examples-per-user 3: settings %d", r.Settings.ExamplesPerUser)
	}
	// A folder names its users by its images' paths: k.png is patient
	// k's in either class, four patients.
	out := filepath.Join(t.TempDir(), "f.onnx")
	if _, e, code := run(t, "train", "--model", "../../testdata/models/cnn.onnx", "--data", "folder:"+dir+":users=^([0-9])\\.png$", "--epsilon", "8",
		"--epochs", "1", "--batch-size", "2", "--seed", "1", "--quiet", "--out", out, "--report", out+".json"); code != 0 {
		t.Errorf("folder with users: exit %d: %s", code, e)
	} else {
		var fr runReport
		b, _ := os.ReadFile(out + ".json")
		if err := json.Unmarshal(b, &fr); err != nil || fr.Settings.PrivacyUnit != "user" || fr.Settings.Users != 4 || fr.Settings.Examples != 8 {
			t.Errorf("folder with users: %v, settings %+v", err, fr.Settings)
		}
	}

	// plan: a user's rows are the sample.
	o, e, code := run(t, "plan", "--model", "../../testdata/models/cnn.onnx", "--examples-per-user", "3", "--json")
	var p struct {
		ExamplesPerUser int64 `json:"examples_per_user"`
		Multiplicity    int64 `json:"augment_multiplicity"`
	}
	if code != 0 || json.Unmarshal([]byte(o), &p) != nil || p.ExamplesPerUser != 3 || p.Multiplicity != 3 {
		t.Errorf("plan --examples-per-user 3: exit %d, %+v: %s", code, p, e)
	}
	if _, e, code := run(t, "plan", "--model", "../../testdata/models/cnn.onnx", "--examples-per-user", "3", "--augment-multiplicity", "2"); code != 2 {
		t.Errorf("plan with both: exit %d: %s", code, e)
	}
	// A user's rows are fixed examples: their features cache; augmented
	// views are not.
	for flag, cacheable := range map[string]bool{"--examples-per-user": true, "--augment-multiplicity": false} {
		o, e, code := run(t, "plan", "--model", "../../testdata/models/cnn.onnx", "--train", `^classifier\.`, flag, "3", "--json")
		var p struct {
			FeatureCache struct {
				Cacheable bool   `json:"cacheable"`
				Reason    string `json:"reason"`
			} `json:"feature_cache"`
		}
		if code != 0 || json.Unmarshal([]byte(o), &p) != nil || p.FeatureCache.Cacheable != cacheable {
			t.Errorf("plan %s 3: exit %d, feature cache %+v: %s", flag, code, p.FeatureCache, e)
		}
	}
	for _, bad := range [][]string{
		{"--privacy-unit", "patient"},
		{"--examples-per-user", "-1"},
		{"--examples-per-user", "2", "--privacy-unit", "example"},
	} {
		args := append([]string{"train", "--model", "../../testdata/models/cnn.onnx", "--data", "csv:" + listing, "--epsilon", "8", "--out", filepath.Join(t.TempDir(), "m.onnx")}, bad...)
		if _, e, code := run(t, args...); code != 2 || !strings.Contains(e, bad[0]) {
			t.Errorf("%v: exit %d: %s", bad, code, e)
		}
	}
}

// patientsListing writes a CSV listing of photoFolder's eight images
// (a/0.png … b/3.png, labelled by their folder) naming four patients, of 3,
// 2, 1 and 2 images, in a patient_id column; it returns the folder, the
// listing and each image's patient.
func patientsListing(t *testing.T) (dir, listing string, patients map[string]string) {
	t.Helper()
	dir = photoFolder(t)
	patients = map[string]string{
		"a/0.png": "p1", "a/1.png": "p1", "b/0.png": "p1",
		"a/2.png": "p2", "b/1.png": "p2",
		"a/3.png": "p3",
		"b/2.png": "p4", "b/3.png": "p4",
	}
	var rows []string
	for _, p := range slices.Sorted(maps.Keys(patients)) {
		rows = append(rows, p+","+p[:1]+","+patients[p])
	}
	listing = filepath.Join(dir, "patients.csv")
	if err := os.WriteFile(listing, []byte("path,label,patient_id\n"+strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, listing, patients
}
