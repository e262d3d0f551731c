package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

// studiesListing writes a CheXpert-like tree of Fashion-MNIST test
// images, ROOT/patientP/studyS/viewV.png — six patients of one to three
// studies of one to three views, every view of a patient's studies of the
// patient's class — and a listing of them (path, label, patient_id). It
// returns the root, the listing, each image's study directory and class.
func studiesListing(t *testing.T) (root, listing string, study map[string]string, class map[string]int) {
	t.Helper()
	m, err := data.LoadString(fmnist + ":test:limit=400")
	if err != nil {
		t.Fatal(err)
	}
	root = t.TempDir()
	study, class = map[string]string{}, map[string]int{}
	byClass := map[int][]int{}
	for i := range m.Len() {
		byClass[m.Label(i)] = append(byClass[m.Label(i)], i)
	}
	var rows strings.Builder
	rows.WriteString("path,label,patient_id\n")
	for p := range 6 {
		c := (3 * p) % 10
		for s := range 1 + p%3 {
			dir := filepath.Join(root, fmt.Sprintf("patient%02d", p), fmt.Sprintf("study%d", s+1))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for v := range 1 + (p+s)%3 {
				i := byClass[c][0]
				byClass[c] = byClass[c][1:]
				path := filepath.Join(dir, fmt.Sprintf("view%d.png", v+1))
				writeGrayPNG(t, path, m.Pixels(i))
				study[path], class[path] = dir, c
				rel, _ := filepath.Rel(root, path)
				fmt.Fprintf(&rows, "%s,%d,patient%02d\n", filepath.ToSlash(rel), c, p)
			}
		}
	}
	listing = filepath.Join(root, "valid.csv")
	if err := os.WriteFile(listing, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, listing, study, class
}

// TestEvalGroupedStudies: eval --group-by dir scores a listing's studies
// (each image's directory) and --group-by user its patients, each by its
// images' probabilities combined (mean, max): the figures those of
// predict's probabilities of the images combined here, by study or
// patient — the count of groups, the accuracy and the loss —; the JSON
// and the text say the groups; a group whose images differ in class, data
// whose samples are not files, a listing without users, and --combine
// alone are refused with what to do.
func TestEvalGroupedStudies(t *testing.T) {
	root, listing, study, class := studiesListing(t)
	model := "../../testdata/models/cnn.onnx"
	o, e, code := run(t, "predict", "--model", model, "--images", root, "--top", "10", "--json")
	if code != 0 {
		t.Fatalf("predict: exit %d: %s", code, e)
	}
	var pred struct {
		Predictions []struct {
			File string `json:"file"`
			Top  []struct {
				Label       int     `json:"label"`
				Probability float64 `json:"probability"`
			} `json:"top"`
		} `json:"predictions"`
	}
	if err := json.Unmarshal([]byte(o), &pred); err != nil {
		t.Fatal(err)
	}
	if len(pred.Predictions) != len(study) {
		t.Fatalf("predict classified %d images, want %d", len(pred.Predictions), len(study))
	}
	patient := func(path string) string {
		r, _ := filepath.Rel(root, path)
		return strings.SplitN(filepath.ToSlash(r), "/", 2)[0]
	}
	for _, tc := range []struct {
		by, combine string
		key         func(path string) string
		groups      int
	}{
		{"dir", "mean", func(p string) string { return study[p] }, 12},
		{"dir", "max", func(p string) string { return study[p] }, 12},
		{"user", "mean", patient, 6},
		{"user", "max", patient, 6},
	} {
		t.Run(tc.by+"/"+tc.combine, func(t *testing.T) {
			// The oracle: each group's probabilities combined from
			// predict's, then its prediction and loss.
			probs, labels := map[string][]float64{}, map[string]int{}
			for _, p := range pred.Predictions {
				k := tc.key(p.File)
				if probs[k] == nil {
					probs[k] = make([]float64, 10)
				}
				labels[k] = class[p.File]
				for _, s := range p.Top {
					if tc.combine == "mean" {
						probs[k][s.Label] += s.Probability
					} else {
						probs[k][s.Label] = math.Max(probs[k][s.Label], s.Probability)
					}
				}
			}
			var right int
			var loss float64
			for k, p := range probs {
				var sum float64
				best := 0
				for c, v := range p {
					sum += v
					if v > p[best] {
						best = c
					}
				}
				if best == labels[k] {
					right++
				}
				loss -= math.Log(p[labels[k]] / sum)
			}
			if tc.by == "dir" {
				// predict --group-by dir: each study's combined
				// probabilities, a study a row.
				o, e, code := run(t, "predict", "--model", model, "--images", root, "--top", "10", "--json", "--group-by", "dir", "--combine", tc.combine)
				if code != 0 {
					t.Fatalf("predict --group-by dir: exit %d: %s", code, e)
				}
				var got struct {
					Predictions []struct {
						File   string `json:"file"`
						Images int    `json:"images"`
						Top    []struct {
							Label       int     `json:"label"`
							Probability float64 `json:"probability"`
						} `json:"top"`
					} `json:"predictions"`
				}
				if err := json.Unmarshal([]byte(o), &got); err != nil {
					t.Fatal(err)
				}
				if len(got.Predictions) != tc.groups {
					t.Fatalf("predict --group-by dir: %d rows, want %d studies", len(got.Predictions), tc.groups)
				}
				for _, p := range got.Predictions {
					want, images := probs[p.File], 0
					for _, s := range study {
						if s == p.File {
							images++
						}
					}
					if want == nil || p.Images != images || len(p.Top) != 10 {
						t.Fatalf("predict --group-by dir: %s of %d images, %d classes; want a study of %d", p.File, p.Images, len(p.Top), images)
					}
					var sum float64
					for _, v := range want {
						sum += v
					}
					for _, c := range p.Top {
						if w := want[c.Label] / sum; math.Abs(c.Probability-w) > 1e-6 {
							t.Errorf("predict --group-by dir: %s: class %d's probability %.7f, want %.7f", p.File, c.Label, c.Probability, w)
						}
					}
				}
			}
			res := evalJSON(t, model, "csv:"+listing, "--group-by", tc.by, "--combine", tc.combine)
			if res.Samples != tc.groups || len(probs) != tc.groups || res.Groups == nil || res.Groups.Examples != len(study) || res.Groups.Combine != tc.combine || res.Groups.Largest < 2 {
				t.Fatalf("%d samples, groups %+v; want %d groups of %d images by %s", res.Samples, res.Groups, tc.groups, len(study), tc.combine)
			}
			if want := float64(right) / float64(tc.groups); res.Accuracy != want {
				t.Errorf("accuracy %v, want %v (the groups' combined predictions)", res.Accuracy, want)
			}
			if want := loss / float64(tc.groups); math.Abs(res.Loss-want) > 1e-5*math.Max(1, want) {
				t.Errorf("loss %.7f, want %.7f (the groups' combined probabilities)", res.Loss, want)
			}
		})
	}
	// --bootstrap draws the images, the studies (--group-by) or the
	// patients (--bootstrap-by user): its intervals hold the figures.
	for _, c := range []struct {
		args  []string
		units string
		count int
	}{{nil, "examples", 24}, {[]string{"--group-by", "dir"}, "groups", 12}, {[]string{"--bootstrap-by", "user"}, "clusters", 6},
		{[]string{"--group-by", "dir", "--bootstrap-by", "user"}, "clusters", 6}} {
		res := evalJSON(t, model, "csv:"+listing, append([]string{"--bootstrap", "200"}, c.args...)...)
		b := res.Bootstrap
		if b == nil || b.Units != c.units || b.Count != c.count || b.Resamples != 200 || b.Accuracy == nil ||
			!(b.Accuracy[0] <= res.Accuracy && res.Accuracy <= b.Accuracy[1]) || !(b.Loss[0] <= res.Loss && res.Loss <= b.Loss[1]) {
			t.Errorf("eval --bootstrap %v: %+v around accuracy %v, loss %v", c.args, b, res.Accuracy, res.Loss)
		}
	}
	// Ungrouped, the examples are the images; the text says the groups.
	if res := evalJSON(t, model, "csv:"+listing); res.Samples != len(study) || res.Groups != nil {
		t.Errorf("ungrouped: %d samples, groups %+v; want %d images", res.Samples, res.Groups, len(study))
	}
	o, e, code = run(t, "eval", "--model", model, "--data", "csv:"+listing, "--group-by", "dir", "--combine", "max")
	if code != 0 || !strings.Contains(o, "groups:   12 groups (each image's directory) of the 24 examples: 1 to 3 examples a group, 4 of one;") || !strings.Contains(o, "probabilities' max") {
		t.Errorf("eval --group-by dir: exit %d: %s%s", code, o, e)
	}

	// train --test-group-by: each epoch's test figures the studies',
	// what eval --group-by gives of the model written.
	trained, report := filepath.Join(root, "trained.onnx"), filepath.Join(root, "report.json")
	if _, e, code := run(t, "train", "--model", model, "--data", "csv:"+listing, "--test-data", "csv:"+listing, "--test-group-by", "dir", "--test-combine", "max",
		"--non-private", "--num-classes", "10", "--epochs", "2", "--batch-size", "8", "--lr", "0.01", "--seed", "1", "--quiet", "--out", trained, "--report", report); code != 0 {
		t.Fatalf("train --test-group-by: exit %d: %s", code, e)
	}
	var rep dptrain.Report
	if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &rep) != nil || len(rep.Epochs) != 2 {
		t.Fatalf("train --test-group-by: report %v", err)
	}
	last, ev := rep.Epochs[1].Test, evalJSON(t, trained, "csv:"+listing, "--group-by", "dir", "--combine", "max")
	if last == nil || last.Samples != 12 || last.Groups == nil || last.Groups.Combine != "max" || last.Accuracy != ev.Accuracy || math.Abs(last.Loss-ev.Loss) > 1e-6 {
		t.Errorf("train --test-group-by: the last epoch's test %+v; eval --group-by %+v", last, ev)
	}
	// compare by study, the bootstrap drawing patients with their
	// studies.
	o, e, code = run(t, "compare", "--model", model, "--model", trained, "--data", "csv:"+listing, "--group-by", "dir", "--bootstrap", "100", "--bootstrap-by", "user", "--json")
	var cr compareResult
	if err := json.Unmarshal([]byte(o), &cr); code != 0 || err != nil || cr.Examples != 12 || cr.Accuracy != nil || cr.Bootstrap == nil ||
		cr.Bootstrap.Units != "clusters" || cr.Bootstrap.Count != 6 {
		t.Errorf("compare by study: exit %d (%v): %+v %s", code, err, cr, e)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--test-group-by", "exam"}, `--test-group-by "exam": want user, dir, file, study or series`},
		{[]string{"--test-combine", "max"}, "it needs --test-group-by"},
		{[]string{"--test-group-by", "dir", "--test-data", "none"}, "this run has none"},
		{[]string{"--test-group-by", "user", "--test-data", "csv:" + filepath.Join(root, "nousers.csv")}, "--test-group-by user: csv:"},
	} {
		if tc.args[0] == "--test-group-by" && tc.args[1] == "user" {
			// The listing without its patient_id column.
			rows, err := readCSVFile(listing)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, r := range rows {
				b.WriteString(r[0] + "," + r[1] + "\n")
			}
			if err := os.WriteFile(filepath.Join(root, "nousers.csv"), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		args := append([]string{"train", "--model", model, "--data", "csv:" + listing, "--non-private", "--num-classes", "10", "--epochs", "1", "--quiet", "--out", trained}, tc.args...)
		if _, e, code := run(t, args...); code != 2 || !strings.Contains(e, tc.want) {
			t.Errorf("train %v: exit %d: %s", tc.args, code, e)
		}
	}

	// A study whose views differ in class is refused, naming both.
	bad := filepath.Join(root, "bad.csv")
	b, err := os.ReadFile(listing)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	lines[3] = strings.Replace(lines[3], ",3,", ",7,", 1) // patient01/study1/view2.png
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	// data --group-by counts the groups and the one eval refuses.
	for _, c := range []struct {
		spec, by      string
		groups, mixed int
	}{{"csv:" + bad, "dir", 12, 1}, {"csv:" + listing, "user", 6, 0}, {"csv:" + listing, "dir", 12, 0}} {
		o, e, code := run(t, "data", "--data", c.spec, "--group-by", c.by, "--json")
		var rep dataReport
		if err := json.Unmarshal([]byte(o), &rep); code != 0 || err != nil || rep.Groups == nil {
			t.Fatalf("data --group-by %s: exit %d (%v): %s%s", c.by, code, err, o, e)
		}
		g := rep.Groups
		if g.Groups != c.groups || g.Mixed != c.mixed || c.by == "dir" && (g.Sizes != [3]int{1, 2, 3} || g.Single != 4) ||
			c.mixed > 0 && !strings.Contains(g.FirstMixed, filepath.Join("patient01", "study1", "view2.png")) {
			t.Errorf("data %s --group-by %s: %+v", c.spec, c.by, g)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--data", "csv:" + bad, "--group-by", "dir"}, 1, "view1.png is of class 3, " + filepath.Join(root, "patient01", "study1", "view2.png") + " of class 7"},
		{[]string{"--data", fmnist, "--group-by", "dir"}, 2, "are not image files of their own"},
		{[]string{"--data", fmnist, "--group-by", "user"}, 2, "names no users"},
		{[]string{"--data", "csv:" + listing, "--combine", "max"}, 2, "it needs --group-by"},
		{[]string{"--data", "csv:" + listing, "--group-by", "exam"}, 2, `--group-by "exam": want user, dir, file, study or series`},
		{[]string{"--data", "csv:" + listing, "--group-by", "dir", "--combine", "median"}, 2, `--combine "median": want mean or max`},
		{[]string{"--data", "csv:" + listing, "--bootstrap", "10"}, 2, "at least 100 resamples"},
		{[]string{"--data", "csv:" + listing, "--bootstrap", "1000000"}, 2, "at most 100000"},
		{[]string{"--data", "csv:" + listing, "--bootstrap-by", "user"}, 2, "it needs --bootstrap N"},
		{[]string{"--data", "csv:" + listing, "--bootstrap", "100", "--bootstrap-by", "dir", "--group-by", "user"}, 1, "has examples of two clusters"},
		{[]string{"--data", fmnist, "--bootstrap", "100", "--bootstrap-by", "user"}, 2, "--bootstrap-by user: " + fmnist},
	} {
		o, e, code := run(t, append([]string{"eval", "--model", model}, tc.args...)...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("eval %v: exit %d, %q%q; want exit %d and %q", tc.args, code, o, e, tc.code, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--group-by", "user"}, `--group-by "user": predict groups by dir`},
		{[]string{"--group-by", "dir", "--out", filepath.Join(root, "y.npy")}, "--out writes each image's scores"},
		{[]string{"--combine", "max"}, "it needs --group-by dir"},
	} {
		o, e, code := run(t, append([]string{"predict", "--model", model, "--images", root}, tc.args...)...)
		if code != 2 || !strings.Contains(e, tc.want) {
			t.Errorf("predict %v: exit %d, %q%q; want exit 2 and %q", tc.args, code, o, e, tc.want)
		}
	}
	// The CSV: a row a study, its images counted.
	out := filepath.Join(root, "studies.csv")
	if o, e, code := run(t, "predict", "--model", model, "--images", root, "--group-by", "dir", "--csv", out); code != 0 {
		t.Fatalf("predict --csv: exit %d: %s%s", code, o, e)
	}
	b, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(rows) != 13 || !strings.HasPrefix(rows[0], "group,images,prediction,0,1,") || !strings.HasPrefix(rows[1], filepath.Join(root, "patient00", "study1")+",1,") {
		t.Errorf("predict --group-by dir --csv wrote\n%s", b)
	}
}

// readCSVFile reads every row of a CSV file.
func readCSVFile(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return csv.NewReader(f).ReadAll()
}

// pngSize returns a PNG file's width and height.
func pngSize(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg.Width, cfg.Height
}
