package main

import (
	"encoding/json"
	"os"
	"path/filepath"
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
