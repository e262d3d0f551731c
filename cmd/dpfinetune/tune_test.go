package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
)

func readTuneReport(t *testing.T, path string) TuneReport {
	t.Helper()
	var r TuneReport
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTune: a seeded search on the fixture CNN draws its number of runs
// and their settings, trains each at the σ calibrated for the search,
// writes the chosen run's model with the search's ε in its metadata and
// leaves nothing else behind; the report's ε is Papernot and Steinke's
// bound recomputed from its own phase, score noise and trials; the same
// command gives the same model; a search interrupted in its second run
// resumes to that model bit for bit; bad flags are usage errors.
func TestTune(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the fixture CNN several times")
	}
	fm := copyFMNIST(t)
	args := func(out string, extra ...string) []string {
		a := []string{"tune", "--model", "../../testdata/models/cnn.onnx", "--data", "idx:" + fm + ":limit=512", "--epsilon", "4",
			"--epochs", "2", "--batch-size", "64", "--optimizer", "sgd", "--clip", "0.1", "--grid", "lr=0.5,2", "--grid", "momentum=0,0.9",
			"--trials-mean", "3", "--seed", "5", "--quiet", "--out", out, "--report", out + ".json"}
		return append(a, extra...)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "a.onnx")
	var scores []float64
	var settings []map[string]string
	tuneScored = func(i int, set map[string]string, s float64) {
		if i != len(scores) {
			t.Errorf("run %d scored after %d others", i+1, len(scores))
		}
		scores, settings = append(scores, s), append(settings, set)
	}
	o, e, code := run(t, args(out)...)
	tuneScored = nil
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, e, o)
	}
	r := readTuneReport(t, out+".json")
	k := len(scores)
	if k < 2 {
		t.Fatalf("seed 5 drew %d runs; the test interrupts the second", k)
	}
	best := slices.Index(scores, slices.Max(scores))
	if !maps.Equal(r.Chosen, settings[best]) || r.Score != scores[best] {
		t.Errorf("scores %v of runs %v: chose %v (score %v); want the best", scores, settings, r.Chosen, r.Score)
	}
	// The chosen score is the model's accuracy on the test split with the
	// noise of one point of accuracy.
	eo, ee, code := run(t, "eval", "--model", out, "--data", "idx:"+fm, "--json")
	if code != 0 {
		t.Fatalf("eval: %s", ee)
	}
	var ev struct{ Accuracy float64 }
	json.Unmarshal([]byte(eo), &ev)
	if d := math.Abs(r.Score - ev.Accuracy); d == 0 || d > 0.05 {
		t.Errorf("the chosen run's score %v, its accuracy %v: want noise of standard deviation 0.01", r.Score, ev.Accuracy)
	}
	for i, s := range settings {
		if !slices.Contains([]string{"0.5", "2"}, s["lr"]) || !slices.Contains([]string{"0", "0.9"}, s["momentum"]) || len(s) != 2 {
			t.Errorf("run %d's settings %v are not drawn from the grid", i+1, s)
		}
	}
	if r.Run == nil || r.Run.Settings.LR != mustFloat(t, r.Chosen["lr"]) || r.Run.Settings.Momentum != mustFloat(t, r.Chosen["momentum"]) || r.Run.Output != out || r.Run.Checkpoint != "" {
		t.Fatalf("the chosen run's report %+v does not match its settings %v or names its own files", r.Run, r.Chosen)
	}
	// Nothing released says how many runs there were.
	if b, _ := os.ReadFile(out + ".json"); strings.Contains(string(b), "dpfinetune-run") || strings.Contains(string(b), `"runs"`) || !slices.Equal(r.Grid["lr"], []string{"0.5", "2"}) {
		t.Errorf("the report names the runs, or not the grid:\n%s", b)
	}
	if !slices.Equal(r.Run.Phases, []accountant.Phase{r.Phase}) || r.Phase.SampleRate != 0.125 || r.Phase.Steps != 16 {
		t.Errorf("the chosen run's phases %v, the search's phase %+v (q 64/512, 16 steps)", r.Run.Phases, r.Phase)
	}
	if r.ScoreUnits != 1000 || r.PrivacyUnit != "example" || r.ScoreNoise != 0.01 || r.Search.ScoreSigma != 10 {
		t.Errorf("scores: %d units of %s, noise %v, σ_s %v; want the 1000 test examples, 0.01, 10", r.ScoreUnits, r.PrivacyUnit, r.ScoreNoise, r.Search.ScoreSigma)
	}
	tr, _ := accountant.NewTrials(1, 3)
	want, err := accountant.SearchEpsilon([]accountant.Phase{r.Phase}, r.Search.ScoreSigma, tr, r.Search.Delta, accountant.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want.Epsilon != r.Search.Epsilon || r.Search.Epsilon > 4 || r.Search.Epsilon < 4-1e-4 || r.Search.Delta != 1.0/5120 {
		t.Errorf("the search's ε %v at δ %v; recomputed %v; want ≤ 4 and within 1e-4 of it at δ 1/5120", r.Search.Epsilon, r.Search.Delta, want.Epsilon)
	}
	if !(r.Search.RunEpsilon < r.Search.Epsilon) || r.Run.Privacy == nil || math.Abs(r.Run.Privacy.Epsilon-r.Search.RunEpsilon) > 0.05 {
		t.Errorf("one run's ε %v (its own report: %+v), the search's %v", r.Search.RunEpsilon, r.Run.Privacy, r.Search.Epsilon)
	}
	// privacy search plans the same bound.
	po, pe, code := run(t, "privacy", "search", "--sigma", strconv.FormatFloat(r.Phase.Sigma, 'g', -1, 64), "--sample-rate", "0.125", "--steps", "16",
		"--delta", strconv.FormatFloat(r.Search.Delta, 'g', -1, 64), "--trials-mean", "3", "--score-noise-multiplier", "10", "--json")
	if code != 0 {
		t.Fatalf("privacy search: %s", pe)
	}
	var ps struct{ Epsilon float64 }
	json.Unmarshal([]byte(po), &ps)
	if ps.Epsilon != r.Search.Epsilon {
		t.Errorf("privacy search plans ε %v for the search's settings; the search spent %v", ps.Epsilon, r.Search.Epsilon)
	}
	md := metadata(t, out)
	if md["dpfinetune.epsilon"] != strconv.FormatFloat(r.Search.Epsilon, 'g', -1, 64) || md["dpfinetune.run_epsilon"] == "" || !strings.Contains(md["dpfinetune.search"], "the best of K runs (K secret") || strings.Contains(md["dpfinetune.search"], strconv.Itoa(k)+" runs") {
		t.Errorf("metadata: %v; want the search's ε %v", md, r.Search.Epsilon)
	}
	if !strings.Contains(o, "run "+strconv.Itoa(k)+": done") || strings.Contains(o, "run "+strconv.Itoa(k+1)+":") || !strings.Contains(o, "the search spent ε = ") || strings.Contains(o, "accuracy:") || strings.Contains(o, ":holdout split") {
		t.Errorf("log:\n%s", o)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("left behind: %v; want the model and the report", ents)
	}
	first, _ := os.ReadFile(out)

	t.Run("same seed, same model", func(t *testing.T) {
		out2 := filepath.Join(t.TempDir(), "b.onnx")
		if _, e, code := run(t, args(out2)...); code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		if b, _ := os.ReadFile(out2); !bytes.Equal(b, first) {
			t.Error("a second seeded search wrote another model")
		}
	})

	t.Run("interrupted and resumed", func(t *testing.T) {
		out3 := filepath.Join(t.TempDir(), "c.onnx")
		calls := 0
		afterStep = func(step int64) {
			if calls++; calls == r.Phase.Steps+5 { // the second run's fifth step
				syscall.Kill(os.Getpid(), syscall.SIGINT)
				time.Sleep(time.Second)
			}
		}
		_, e, code := run(t, args(out3)...)
		afterStep = nil
		if code != exitError || !strings.Contains(e, "interrupted in run 2;") {
			t.Fatalf("exit %d: %s", code, e)
		}
		if _, err := os.Stat(filepath.Join(out3+".tune", "dpfinetune-run2.ckpt")); err != nil {
			t.Fatalf("the second run's checkpoint: %v", err)
		}
		if _, e, code := run(t, args(out3)...); code != exitError || !strings.Contains(e, "a search is under way") {
			t.Errorf("without --resume: exit %d: %s", code, e)
		}
		other := args(out3, "--resume")
		other[slices.Index(other, "lr=0.5,2")] = "lr=0.5,4"
		if _, e, code := run(t, other...); code != exitError || !strings.Contains(e, "other flags") {
			t.Errorf("resumed with another grid: exit %d: %s", code, e)
		}
		o, e, code := run(t, args(out3, "--resume")...)
		if code != 0 {
			t.Fatalf("resume: exit %d: %s", code, e)
		}
		if !strings.Contains(o, "resuming the search") {
			t.Errorf("log:\n%s", o)
		}
		if b, _ := os.ReadFile(out3); !bytes.Equal(b, first) {
			t.Error("the resumed search wrote another model than the uninterrupted one")
		}
		if _, err := os.Stat(out3 + ".tune"); !os.IsNotExist(err) {
			t.Errorf("the work folder is left: %v", err)
		}
	})

	t.Run("batch sizes and epochs", func(t *testing.T) {
		// Each combination a mechanism of its own: σ calibrated apart,
		// one run of each at the same ε, the search's bound over their
		// largest curve.
		out6 := filepath.Join(t.TempDir(), "f.onnx")
		a := []string{"tune", "--model", "../../testdata/models/cnn.onnx", "--data", "idx:" + fm + ":limit=512", "--epsilon", "4",
			"--optimizer", "sgd", "--clip", "0.1", "--grid", "lr=0.5,2", "--grid", "batch-size=32,64", "--grid", "epochs=1,2",
			"--trials-mean", "3", "--seed", "5", "--quiet", "--out", out6, "--report", out6 + ".json"}
		o, e, code := run(t, a...)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, e, o)
		}
		r := readTuneReport(t, out6+".json")
		if len(r.Mechanisms) != 4 || !slices.Contains(r.Mechanisms, r.Phase) || !slices.Equal(r.Run.Phases, []accountant.Phase{r.Phase}) {
			t.Fatalf("mechanisms %v, the chosen run's %v (its report: %v)", r.Mechanisms, r.Phase, r.Run.Phases)
		}
		b, ep := mustFloat(t, r.Chosen["batch-size"]), mustFloat(t, r.Chosen["epochs"])
		if r.Phase.SampleRate != b/512 || float64(r.Phase.Steps) != ep*512/b {
			t.Errorf("the chosen run (batch %v, %v epochs) spent %+v", b, ep, r.Phase)
		}
		var runs [][]accountant.Phase
		var trained []float64
		for _, m := range r.Mechanisms {
			runs = append(runs, []accountant.Phase{m})
			acc, _ := accountant.New(accountant.RDP)
			acc.Step(m.Sigma, m.SampleRate, m.Steps)
			e, _ := acc.Epsilon(r.Search.Delta)
			trained = append(trained, e.Epsilon)
			if one, _ := accountant.SearchEpsilon([]accountant.Phase{m}, r.Search.ScoreSigma, tr, r.Search.Delta, accountant.Options{}); one.RunEpsilon > r.Search.RunEpsilon {
				t.Errorf("mechanism %+v: one run ε %v, above the search's runs' %v", m, one.RunEpsilon, r.Search.RunEpsilon)
			}
		}
		for _, e := range trained {
			if !(math.Abs(e-trained[0]) <= 1e-4*trained[0]) { // NaN fails too
				t.Errorf("one run's training ε per mechanism %v: want equal", trained)
			}
		}
		want, _ := accountant.SearchEpsilonOf(runs, r.Search.ScoreSigma, tr, r.Search.Delta, accountant.Options{})
		if want.Epsilon != r.Search.Epsilon || r.Search.Epsilon > 4 || r.Search.Epsilon < 4*(1-2e-3) {
			t.Errorf("the search's ε %v; recomputed over its mechanisms %v; want just under 4", r.Search.Epsilon, want.Epsilon)
		}
		if strings.Count(o, "runs:    σ = ") != 4 {
			t.Errorf("log:\n%s", o)
		}
	})

	t.Run("runs that diverge", func(t *testing.T) {
		// A learning rate past float32's range drives the parameters to
		// infinity at the first step: such runs are never chosen, and a
		// search of nothing else releases nothing.
		dir := t.TempDir()
		a := args(filepath.Join(dir, "g.onnx"))
		a[slices.Index(a, "lr=0.5,2")] = "lr=1e39,0.5"
		o, e, code := run(t, a...)
		if code != 0 || !strings.Contains(o, "diverged (its parameters became NaN or infinite): never chosen") {
			t.Fatalf("exit %d: %s\n%s", code, e, o)
		}
		if r := readTuneReport(t, filepath.Join(dir, "g.onnx.json")); r.Chosen["lr"] != "0.5" {
			t.Errorf("chose %v", r.Chosen)
		}
		a = args(filepath.Join(dir, "h.onnx"))
		a[slices.Index(a, "lr=0.5,2")] = "lr=1e39"
		if _, e, code := run(t, a...); code != exitError || !strings.Contains(e, "every run diverged") {
			t.Errorf("every run diverged: exit %d: %s", code, e)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 2 {
			t.Errorf("left: %v; want the first search's model and report", ents)
		}
	})

	t.Run("a work folder of the user's", func(t *testing.T) {
		// The search's files go, the user's stay.
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("keep"), 0o644)
		if _, e, code := run(t, args(filepath.Join(t.TempDir(), "w.onnx"), "--work", dir)...); code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "mine.txt" {
			t.Errorf("the work folder holds %v; want the user's file alone", ents)
		}
	})

	t.Run("linear probe", func(t *testing.T) {
		// The frozen part's features once for the search: every run after
		// the first trains on the first's.
		out5 := filepath.Join(t.TempDir(), "e.onnx")
		n := 0
		tuneScored = func(int, map[string]string, float64) { n++ }
		o, e, code := run(t, args(out5, "--train", `^classifier\.`)...)
		tuneScored = nil
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		if got := strings.Count(o, "(on the frozen part's features an earlier run computed)"); n < 2 || got != n-1 {
			t.Errorf("%d runs, %d on stored features; want all but the first:\n%s", n, got, o)
		}
	})

	t.Run("lora", func(t *testing.T) {
		// LoRA's rank searched beside the grid: runs with and without
		// adapters, the chosen one written with the model's layers.
		out6 := filepath.Join(t.TempDir(), "f.onnx")
		ranks := map[string]int{}
		tuneScored = func(_ int, set map[string]string, _ float64) { ranks[set["lora"]]++ }
		_, e, code := run(t, args(out6, "--grid", "lora=0,2")...)
		tuneScored = nil
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		if ranks["0"] == 0 || ranks["2"] == 0 || len(ranks) != 2 {
			t.Errorf("runs by rank %v; want both 0 and 2 drawn", ranks)
		}
		if got, want := opTypes(t, out6), opTypes(t, "../../testdata/models/cnn.onnx"); got != want {
			t.Errorf("the chosen model's layers %s, want the model's %s", got, want)
		}
		if _, e, code := run(t, args(filepath.Join(t.TempDir(), "g.onnx"), "--grid", "lora=0,2", "--lora-alpha", "4")...); code != 2 || !strings.Contains(e, "need a rank") {
			t.Errorf("rank 0 searched beside --lora-alpha: exit %d: %s", code, e)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		out4 := filepath.Join(t.TempDir(), "d.onnx")
		o, e, code := run(t, args(out4, "--dry-run")...)
		if code != 0 || !strings.Contains(o, "privacy: the search ε = ") || strings.Contains(o, "run 1:") {
			t.Fatalf("exit %d: %s\n%s", code, e, o)
		}
		if ents, _ := os.ReadDir(filepath.Dir(out4)); len(ents) != 0 {
			t.Errorf("a dry run left %v", ents)
		}
	})

	t.Run("usage", func(t *testing.T) {
		base := []string{"tune", "--model", "../../testdata/models/cnn.onnx", "--data", "idx:" + fm, "--epsilon", "3", "--out", filepath.Join(t.TempDir(), "x.onnx")}
		for _, tc := range []struct {
			extra []string
			msg   string
		}{
			{nil, "--grid NAME=V1,V2,… is required"},
			{[]string{"--grid", "mode=bk,ghost"}, "cannot be searched"},
			{[]string{"--grid", "delta=1e-5,1e-6"}, "cannot be searched"},
			{[]string{"--grid", "batch-size=64,0"}, "positive integers"},
			{[]string{"--grid", "lr=1", "--grid", "lr=2"}, "searched twice"},
			{[]string{"--grid", "lr=1,"}, "an empty value"},
			{[]string{"--grid", "lr=1,2", "--lr", "3"}, "both set and searched"},
			{[]string{"--grid", "lr=1,2", "--noise-multiplier", "1"}, "--noise-multiplier: tune sets"},
			{[]string{"--grid", "lr=1,2", "--sampling", "shuffle"}, "Poisson sampling"},
			{[]string{"--grid", "lr=1,2", "--test-data", "none"}, "held-out data"},
			{[]string{"--grid", "lr=1,2", "--trials-mean", "1"}, "mean must be above 1"},
			{[]string{"--grid", "lr=1,2", "--trials-eta", "-1"}, "above −1"},
			{[]string{"--grid", "lr=1,2", "--score-noise", "0"}, "--score-noise must be positive"},
		} {
			_, e, code := run(t, append(slices.Clone(base), tc.extra...)...)
			if code != exitUsage || !strings.Contains(e, tc.msg) {
				t.Errorf("%v: exit %d: %s; want a usage error saying %q", tc.extra, code, e, tc.msg)
			}
		}
		if _, e, code := run(t, append(slices.Clone(base), "--grid", "lr=1,2", "--resume")...); code != exitError || !strings.Contains(e, "no search under way") {
			t.Errorf("--resume with nothing to resume: exit %d: %s", code, e)
		}
	})
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTuneUsers: on a listing of patients the search's runs protect
// patients and the score counts each held-out patient once (its share of
// correctly classified images); a score split that names no users is
// refused at user level.
func TestTuneUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the fixture CNN")
	}
	dir, listing, patients := patientsListing(t)
	out := filepath.Join(t.TempDir(), "m.onnx")
	base := []string{"tune", "--model", "../../testdata/models/cnn.onnx", "--data", "csv:" + listing + ":holdout=0.25", "--epsilon", "30",
		"--epochs", "1", "--batch-size", "2", "--grid", "lr=0.01,0.1", "--score-noise", "2", "--seed", "3", "--quiet", "--out", out, "--report", out + ".json"}
	o, e, code := run(t, base...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, e, o)
	}
	r := readTuneReport(t, out+".json")
	if r.PrivacyUnit != "user" || r.ScoreUnits != 1 || r.Search.ScoreSigma != 2 || r.Phase.SampleRate != 2.0/3 || r.Run.Settings.PrivacyUnit != "user" {
		t.Errorf("unit %q, %d score units, σ_s %v, q %v; want user, the one held-out patient, 2, 2/3", r.PrivacyUnit, r.ScoreUnits, r.Search.ScoreSigma, r.Phase.SampleRate)
	}
	if !strings.Contains(o, "(1 users)") || !strings.Contains(o, "(per user)") || !strings.Contains(o, "adding one user can move another across it") {
		t.Errorf("log:\n%s", o)
	}
	// The images of the folder, per image as a listing without users.
	flat := filepath.Join(dir, "flat.csv")
	var frows []string
	for _, p := range slices.Sorted(maps.Keys(patients)) {
		frows = append(frows, p+","+p[:1])
	}
	os.WriteFile(flat, []byte("path,label\n"+strings.Join(frows, "\n")+"\n"), 0o644)
	bad := append(slices.Clone(base), "--test-data", "csv:"+flat, "--out", filepath.Join(t.TempDir(), "n.onnx"))
	if _, e, code := run(t, bad...); code != exitError || !strings.Contains(e, "names none") {
		t.Errorf("a score split without users at user level: exit %d: %s", code, e)
	}
}

// TestScoreRun: a run's score per example is the count of correctly
// classified examples, and per user the sum of each user's share of them —
// on 28×28 images labelled with the fixture CNN's own prediction (right)
// or the next class (wrong), of three users holding 1, 3 and 4 of them.
func TestScoreRun(t *testing.T) {
	model := "../../testdata/models/cnn.onnx"
	const n = 8
	rng := rand.New(rand.NewPCG(1, 2))
	pix := make([]uint8, n*28*28)
	for i := range pix {
		pix[i] = uint8(rng.IntN(256))
	}
	classes := make([]string, 10)
	for i := range classes {
		classes[i] = strconv.Itoa(i)
	}
	images := func(labels []int64) dataView {
		m, err := data.NewImages(classes, 1, 28, 28, pix, labels)
		if err != nil {
			t.Fatal(err)
		}
		m, err = m.WithUsers([]string{"u1", "u2", "u2", "u2", "u3", "u3", "u3", "u3"})
		if err != nil {
			t.Fatal(err)
		}
		v, err := data.NewView(m, data.Preprocess{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The model's predictions.
	lm, err := loadGraph(model)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := dptrain.NewEvaluatorOn(nil, lm.g, []int64{1, 28, 28}, n)
	if err != nil {
		t.Fatal(err)
	}
	pred := make([]int64, n)
	ev.Losses(images(make([]int64, n)), func(i int, _ int64, logits []float32, _ float64) {
		pred[i] = int64(slices.Index(logits, slices.Max(logits)))
	})
	right := []bool{true, false, true, true, true, false, false, true} // u1: 1/1, u2: 2/3, u3: 2/4
	labels := make([]int64, n)
	for i := range labels {
		labels[i] = pred[i]
		if !right[i] {
			labels[i] = (pred[i] + 1) % 10
		}
	}
	v := images(labels)
	for _, tc := range []struct {
		unit string
		want float64
	}{{"example", 5}, {"user", 1 + 2.0/3 + 2.0/4}} {
		correct, err := classifyRun(nil, model, v, 3, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unitScore(correct, v, tc.unit)
		if err != nil {
			t.Fatal(err)
		}
		if !(math.Abs(got-tc.want) <= 1e-12) { // NaN fails too
			t.Errorf("per %s: score %v, want %v", tc.unit, got, tc.want)
		}
	}
	if _, err := unitScore(make([]float64, n-1), v, "example"); err == nil {
		t.Error("a score of 7 classifications of 8 examples: no error")
	}
}

// TestCheckRunPhases: a run whose report spent another σ, sample rate or
// number of steps than the search accounted is refused.
func TestCheckRunPhases(t *testing.T) {
	want := accountant.Phase{Sigma: 1.5, SampleRate: 0.1, Steps: 20}
	for _, tc := range []struct {
		phases []accountant.Phase
		ok     bool
	}{
		{[]accountant.Phase{want}, true},
		{[]accountant.Phase{{Sigma: 1.5, SampleRate: 0.1, Steps: 12}, {Sigma: 1.5, SampleRate: 0.1, Steps: 8}}, true},
		{[]accountant.Phase{{Sigma: 1.4, SampleRate: 0.1, Steps: 20}}, false},
		{[]accountant.Phase{{Sigma: 1.5, SampleRate: 0.2, Steps: 20}}, false},
		{[]accountant.Phase{{Sigma: 1.5, SampleRate: 0.1, Steps: 21}}, false},
		{nil, false},
	} {
		p := filepath.Join(t.TempDir(), "r.json")
		b, _ := json.Marshal(runReport{Phases: tc.phases})
		os.WriteFile(p, b, 0o644)
		if err := checkRunPhases(p, want); (err == nil) != tc.ok {
			t.Errorf("%v: %v, want ok %v", tc.phases, err, tc.ok)
		}
	}
}

// TestTuneRunSeeds: the runs of seeded searches get seeds of their own —
// none shared between the runs of one search, nor between searches whose
// seeds are close (seed+i would give search 1's second run search 2's
// first run's seed).
func TestTuneRunSeeds(t *testing.T) {
	seen := map[uint64]string{}
	for s := uint64(0); s < 20; s++ {
		for i := range 20 {
			v := runSeed(s, i)
			if prev, ok := seen[v]; ok {
				t.Fatalf("search %d run %d has the seed of %s", s, i, prev)
			}
			seen[v] = fmt.Sprintf("search %d run %d", s, i)
		}
	}
}

// TestTuneClassWeights: a search whose runs weigh classes (--class-weight)
// scores them by the class-weighted accuracy — each held-out example right
// counts its class's weight as given, whatever power of them a run trains
// with (--grid class-weight-power) — which the plan's log and the report
// say, within the noise of the chosen model's weighted accuracy by eval.
func TestTuneClassWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the fixture CNN")
	}
	fm := copyFMNIST(t)
	out := filepath.Join(t.TempDir(), "w.onnx")
	weights := []float64{1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25}
	o, e, code := run(t, "tune", "--model", "../../testdata/models/cnn.onnx", "--data", "idx:"+fm+":limit=512", "--epsilon", "4",
		"--epochs", "2", "--batch-size", "64", "--optimizer", "sgd", "--clip", "0.1", "--grid", "lr=0.5,2", "--grid", "class-weight-power=0,0.5,1",
		"--trials-mean", "1.5", "--class-weight", "4,2,2,2,2,2,2,2,2,1", "--seed", "3", "--out", out, "--report", out+".json")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, e, o)
	}
	if !strings.Contains(o, "scores:  class-weighted accuracy (each example right counts its class's --class-weight)") {
		t.Errorf("the plan does not say the score is weighted:\n%s", o)
	}
	r := readTuneReport(t, out+".json")
	// The runs' weights are the given ones to the chosen power; the score's
	// the given ones, whatever the run.
	runWeights, err := dptrain.PowClassWeights(weights, mustFloat(t, r.Chosen["class-weight-power"]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.ScoreClassWeights, weights) || !slices.Equal(r.Run.Settings.ClassWeights, runWeights) {
		t.Errorf("score weights %v, the run's %v at power %s; want %v and %v", r.ScoreClassWeights, r.Run.Settings.ClassWeights, r.Chosen["class-weight-power"], weights, runWeights)
	}
	eo, ee, code := run(t, "eval", "--model", out, "--data", "idx:"+fm, "--json")
	if code != 0 {
		t.Fatalf("eval: %s", ee)
	}
	var ev dptrain.EvalResult
	if err := json.Unmarshal([]byte(eo), &ev); err != nil {
		t.Fatal(err)
	}
	var weighted float64
	for c, m := range ev.PerClass {
		weighted += weights[c] * m.Recall * float64(m.Support)
	}
	weighted /= float64(ev.Samples)
	if d := math.Abs(r.Score - weighted); d > 0.05 || math.Abs(weighted-ev.Accuracy) < 0.01 {
		t.Errorf("the chosen run's score %v, its class-weighted accuracy %v (plain %v): want the weighted one with noise of 0.01", r.Score, weighted, ev.Accuracy)
	}
}
