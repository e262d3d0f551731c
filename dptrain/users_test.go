package dptrain_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine/accountant"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
)

// userSet is a dataset whose examples name their users (data.Users,
// promoted from the view) and that records each Fill's indices and
// whether it asked for labels.
type userSet struct {
	*data.View
	calls  [][]int
	labels []bool
}

func (u *userSet) Fill(x []float32, y []int64, indices []int, rng *rand.Rand) error {
	u.calls = append(u.calls, slices.Clone(indices))
	u.labels = append(u.labels, y != nil)
	return u.View.Fill(x, y, indices, rng)
}

// usersOfSlice returns the 96 examples of the Fashion-MNIST slice with
// user(i) naming example i's user.
func usersOfSlice(t *testing.T, user func(i int) string) *data.View {
	t.Helper()
	imgs, err := data.LoadString("idx:../testdata/fmnist-small:limit=96")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, imgs.Len())
	for i := range names {
		names[i] = user(i)
	}
	if imgs, err = imgs.WithUsers(names); err != nil {
		t.Fatal(err)
	}
	v, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func userSettings(unit string, examplesPerUser int) dptrain.Settings {
	seed := uint64(11)
	return dptrain.Settings{
		Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 1, BatchSize: 8,
		Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
		Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed,
		PrivacyUnit: unit, ExamplesPerUser: examplesPerUser,
	}
}

// TestRunUserLevel: on data whose 96 examples belong to 20 users of 1 to 9
// examples, the default privacy unit is the user (its events say so): the sample rate, the
// steps, δ's default and σ are those of 20 units at an expected batch of
// 8 (σ as the accountant calibrates it for them), every step reads the
// median user's count of rows a sampled user, all of them that user's
// own examples each read ⌊k/m⌋ or ⌈k/m⌉ times, a label a row, and ε is
// within its target. With --privacy-unit example the same data is 96
// units and a warning says the users are named and what group privacy
// leaves the largest user (nothing, at ε = 8); a user-level run on
// data that names no users, with an audit's canaries or with
// augmentation multiplicity, is refused.
func TestRunUserLevel(t *testing.T) {
	// User u holds examples [start(u), start(u+1)): sizes 1…9 cycling.
	var owner []int
	for u := 0; len(owner) < 96; u++ {
		for range 1 + u%9 {
			owner = append(owner, u)
		}
	}
	owner = owner[:96]
	users := owner[95] + 1
	ds := &userSet{View: usersOfSlice(t, func(i int) string { return fmt.Sprintf("patient-%03d", owner[i]) })}
	sizes := make([]int, users)
	for _, u := range owner {
		sizes[u]++
	}
	sorted := slices.Clone(sizes)
	slices.Sort(sorted)
	k := sorted[len(sorted)/2]

	perUser := map[bool]int{}
	rep, err := dptrain.Run(dptrain.Config{Settings: userSettings("", 0), Graph: cnnGraph(t), Train: ds,
		Events: func(e dptrain.Event) { perUser[e.PerUser]++ }})
	if err != nil {
		t.Fatal(err)
	}
	if perUser[false] != 0 || perUser[true] == 0 {
		t.Errorf("events with PerUser set and not: %v; want all set", perUser)
	}
	s := rep.Settings
	if s.PrivacyUnit != dptrain.PrivacyUnitUser || s.Users != users || s.ExamplesPerUser != k || s.Examples != 96 {
		t.Fatalf("settings: unit %q, %d users, %d examples a user, %d examples; want user, %d, %d, 96", s.PrivacyUnit, s.Users, s.ExamplesPerUser, s.Examples, users, k)
	}
	if q := 8.0 / float64(users); s.SampleRate != q || s.StepsPerEpoch != (users+7)/8 || s.Delta != 1/(10*float64(users)) {
		t.Errorf("sample rate %g, %d steps an epoch, δ %g; want %g, %d, %g", s.SampleRate, s.StepsPerEpoch, s.Delta, q, (users+7)/8, 1/(10*float64(users)))
	}
	acct, err := accountant.New("rdp")
	if err != nil {
		t.Fatal(err)
	}
	cal, err := accountant.Calibrate(acct.State(), 8, s.Delta, s.SampleRate, s.Steps)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sigma != cal.Sigma || rep.Privacy == nil || rep.Privacy.Epsilon > 8 {
		t.Errorf("σ %g (the accountant's for %d users: %g), privacy %+v", s.Sigma, users, cal.Sigma, rep.Privacy)
	}
	var rows int
	for c, idx := range ds.calls {
		if len(idx) == 0 || !ds.labels[c] {
			continue // evaluation and the norm check read no users
		}
		if len(idx)%k != 0 {
			t.Fatalf("fill %d of %d rows, not whole users of %d", c, len(idx), k)
		}
		for at := 0; at < len(idx); at += k {
			u := owner[idx[at]]
			m := sizes[u]
			count := map[int]int{}
			for _, i := range idx[at : at+k] {
				if owner[i] != u {
					t.Fatalf("fill %d: the rows of a user %v hold examples of users %d and %d", c, idx[at:at+k], u, owner[i])
				}
				count[i]++
			}
			for i, n := range count {
				if n != k/m && n != k/m+1 {
					t.Errorf("fill %d: user %d (%d examples) has example %d %d times in %d rows", c, u, m, i, n, k)
				}
			}
			rows += k
		}
	}
	if rows == 0 {
		t.Fatal("no training rows recorded")
	}

	// Per example: 96 units, and the users named in a warning.
	var warn bytes.Buffer
	rep, err = dptrain.Run(dptrain.Config{Settings: userSettings(dptrain.PrivacyUnitExample, 0), Graph: cnnGraph(t), Train: &userSet{View: ds.View}, Warn: &warn})
	if err != nil {
		t.Fatal(err)
	}
	if s := rep.Settings; s.PrivacyUnit != dptrain.PrivacyUnitExample || s.Users != 0 || s.SampleRate != 8.0/96 {
		t.Errorf("per example: unit %q, %d users, q %g; want example, 0, %g", s.PrivacyUnit, s.Users, s.SampleRate, 8.0/96)
	}
	if !strings.Contains(warn.String(), fmt.Sprintf("names %d users", users)) || !strings.Contains(warn.String(), "the most examples (9) is not protected at all") {
		t.Errorf("per example on data naming users: warning %q", warn.String())
	}

	for _, c := range []struct {
		name string
		cfg  dptrain.Config
		want string
	}{
		{"no users", dptrain.Config{Settings: userSettings(dptrain.PrivacyUnitUser, 0), Train: smallFMNIST(t)}, "names each example's user"},
		{"multiplicity", dptrain.Config{Settings: func() dptrain.Settings { s := userSettings("", 0); s.AugmentMultiplicity = 2; return s }(), Train: ds.View}, "raise --examples-per-user"},
		{"too many", dptrain.Config{Settings: userSettings("", 1000), Train: ds.View}, "--examples-per-user 1000"},
		{"unknown", dptrain.Config{Settings: userSettings("person", 0), Train: ds.View}, `--privacy-unit "person"`},
	} {
		c.cfg.Graph = cnnGraph(t)
		_, err := dptrain.Run(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// TestRunUserLevelOneExampleEach: where every user has one example (named
// in the examples' order), a user-level run with one example a user is
// the example-level run: with one seed, the same settings but the unit,
// the same losses, the same ε and bit-identical weights.
func TestRunUserLevelOneExampleEach(t *testing.T) {
	ds := usersOfSlice(t, func(i int) string { return fmt.Sprintf("u%03d", i) })
	var weights [2][]float32
	var reps [2]*dptrain.Report
	for r, unit := range []string{dptrain.PrivacyUnitUser, dptrain.PrivacyUnitExample} {
		g := cnnGraph(t)
		rep, err := dptrain.Run(dptrain.Config{Settings: userSettings(unit, 1), Graph: g, Train: ds, Test: ds})
		if err != nil {
			t.Fatal(err)
		}
		reps[r] = rep
		names := slices.Sorted(maps.Keys(g.Values))
		for _, name := range names {
			if v := g.Values[name]; v.Const != nil && v.Const.F32 != nil {
				weights[r] = append(weights[r], v.Const.F32...)
			}
		}
	}
	if reps[0].Settings.Users != 96 || reps[0].Settings.SampleRate != reps[1].Settings.SampleRate || reps[0].Settings.Sigma != reps[1].Settings.Sigma {
		t.Fatalf("users %d, q %g vs %g, σ %g vs %g", reps[0].Settings.Users, reps[0].Settings.SampleRate, reps[1].Settings.SampleRate, reps[0].Settings.Sigma, reps[1].Settings.Sigma)
	}
	a, b := reps[0].Epochs[0], reps[1].Epochs[0]
	if a.TrainLoss != b.TrainLoss || a.Epsilon != b.Epsilon || a.Test.Loss != b.Test.Loss {
		t.Errorf("per user %+v, per example %+v", a, b)
	}
	if !slices.Equal(weights[0], weights[1]) {
		t.Error("the weights differ")
	}
}

// TestRunUserLevelResume: a user-level run that crashes mid-run and resumes
// from its checkpoint ends in the weights of the run that did not, bit for
// bit (which rows a user gives is drawn from the checkpointed stream); a
// resume with another privacy unit or another --examples-per-user is
// refused.
func TestRunUserLevelResume(t *testing.T) {
	ds := usersOfSlice(t, func(i int) string { return fmt.Sprint("p", i%30) })
	dir := t.TempDir()
	ckpt, crashed := filepath.Join(dir, "run.ckpt"), filepath.Join(dir, "crashed.ckpt")
	cfg := func(g *graph.Graph, path string, resume bool, unit string, k int) dptrain.Config {
		s := userSettings(unit, k)
		s.Epochs = 3
		return dptrain.Config{Settings: s, Graph: g, Train: ds, Checkpoint: path, Resume: resume, CheckpointEvery: 2}
	}
	full := cnnGraph(t)
	c := cfg(full, ckpt, false, "", 0)
	c.Events = func(e dptrain.Event) {
		if e.Kind == dptrain.StepDone && e.Step == 4 {
			b, _ := os.ReadFile(ckpt)
			os.WriteFile(crashed, b, 0o644)
		}
	}
	rep, err := dptrain.Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Settings.Users != 30 || rep.Settings.Steps < 6 {
		t.Fatalf("%d users, %d steps", rep.Settings.Users, rep.Settings.Steps)
	}
	for _, bad := range []struct {
		unit string
		k    int
		want string
	}{
		{dptrain.PrivacyUnitExample, 0, "--privacy-unit was user, now example"},
		{"", 2, "--examples-per-user was 3, now 2"},
	} {
		if _, err := dptrain.Run(cfg(cnnGraph(t), crashed, true, bad.unit, bad.k)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("resumed with %q, %d: err = %v, want %q", bad.unit, bad.k, err, bad.want)
		}
	}
	resumed := cnnGraph(t)
	if _, err := dptrain.Run(cfg(resumed, crashed, true, "", 0)); err != nil {
		t.Fatal(err)
	}
	sameWeights(t, full, resumed)
}
