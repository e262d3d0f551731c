package audit

import (
	"fmt"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/testhook"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// usersConfig is a run on the first n images of the Fashion-MNIST slice
// grouped into users of per images each (user i%(n/per)), the guarantee
// per user unless unit says otherwise.
func usersConfig(t *testing.T, n, per int, unit string, eps float64, epochs int) dptrain.Config {
	t.Helper()
	imgs, err := data.LoadString(fmt.Sprintf("idx:../../testdata/fmnist-small:limit=%d", n))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, imgs.Len())
	for i := range names {
		names[i] = fmt.Sprint("user-", i%(n/per))
	}
	if imgs, err = imgs.WithUsers(names); err != nil {
		t.Fatal(err)
	}
	ds, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cnnConfig(t, ds, eps, epochs)
	cfg.Settings.PrivacyUnit = unit
	return cfg
}

// cnnConfig is a run of the fixture CNN on train (1×28×28 samples): ε at
// δ = 1e-5 over epochs of 64 expected examples, bk at clip norm 1, SGD
// at 2e-3, seeded noise.
func cnnConfig(t *testing.T, train data.Dataset, eps float64, epochs int) dptrain.Config {
	t.Helper()
	m, err := onnx.Load("../../testdata/models/cnn.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(3)
	return dptrain.Config{Graph: g, Train: train, Settings: dptrain.Settings{
		Model: "cnn.onnx", Data: "fmnist-small", Epsilon: eps, Delta: 1e-5, Epochs: epochs, BatchSize: 64,
		Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
		Optimizer: "sgd", LR: 2e-3, InputShape: []int64{1, 28, 28}, Seed: &seed,
	}}
}

// TestAuditUsers: on data that names users the audit measures the
// guarantee the run claims — per user by default, each canary a user of
// its own sampled at the users' rate (q = L/(users + included canaries)); per
// example with --privacy-unit example — and the input canaries join the
// data as users of one image each.
func TestAuditUsers(t *testing.T) {
	o := Options{Kind: Gradient, Canaries: 8, KPlus: 2, KMinus: 2, Confidence: 0.95, Source: dpengine.NewSeededSource(3)}
	r, err := Run(usersConfig(t, 64, 4, "", 8, 1), o)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Report.Settings; s.PrivacyUnit != dptrain.PrivacyUnitUser || s.Users != 16 || s.SampleRate != 1 || s.Examples != 64+r.Included {
		t.Errorf("per user: unit %q, %d users, q %v, %d examples; want user, 16, 1 (64 of %d units), %d", s.PrivacyUnit, s.Users, s.SampleRate, s.Examples, 16+r.Included, 64+r.Included)
	}
	cfg := usersConfig(t, 64, 4, "", 8, 1)
	cfg.Settings.BatchSize = 6
	r, err = Run(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Report.Settings; s.SampleRate != 6.0/float64(16+r.Included) {
		t.Errorf("per user: q %v, want 6/(16 users + %d included canaries)", s.SampleRate, r.Included)
	}
	r, err = Run(usersConfig(t, 64, 4, dptrain.PrivacyUnitExample, 8, 1), o)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Report.Settings; s.PrivacyUnit != dptrain.PrivacyUnitExample || s.Users != 0 || s.Examples != 64+r.Included {
		t.Errorf("per example: unit %q, %d users, %d examples", s.PrivacyUnit, s.Users, s.Examples)
	}

	pv := view(t, "idx:../../testdata/fmnist-small:split=test:limit=8")
	oi := o
	oi.Kind, oi.Pool = Input, pv
	cfg = usersConfig(t, 64, 4, "", 8, 1)
	cfg.Settings.BatchSize = 6
	r, err = Run(cfg, oi)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Report.Settings; s.PrivacyUnit != dptrain.PrivacyUnitUser || s.Users != 16+r.Included || s.SampleRate != 6.0/float64(16+r.Included) {
		t.Errorf("input canaries per user: unit %q, %d users, q %v; want user, 16 + %d canaries", s.PrivacyUnit, s.Users, s.SampleRate, r.Included)
	}
}

// TestAuditUsersBroken: the gradient-canary audit of a user-level run —
// 1000 images, 250 users of 4, 1000 canary users, 10 epochs of 64 users in
// expectation, ε = 2 per user — finds no violation as calibrated, and
// finds one with σ divided by 10 behind the accountant's back.
func TestAuditUsersBroken(t *testing.T) {
	if testing.Short() {
		t.Skip("two audited runs of 10 epochs")
	}
	o := Options{Kind: Gradient, Canaries: 1000, KPlus: 250, KMinus: 250, Confidence: 0.95, Source: dpengine.NewSeededSource(3)}
	for _, div := range []float64{0, 10} {
		testhook.NoiseDivisor = div
		r, err := Run(usersConfig(t, 1000, 4, "", 2, 10), o)
		testhook.NoiseDivisor = 0
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("σ divided by %v: %d/%d correct, bound %.3f (claimed %.3f per %s, at most %.3f)", div, r.Correct, r.Guesses, r.Bound, r.Claimed, r.Report.Settings.PrivacyUnit, r.MaxBound)
		if r.Report.Settings.PrivacyUnit != dptrain.PrivacyUnitUser || r.Report.Settings.Users != 250 {
			t.Fatalf("the audited run is per %s of %d users", r.Report.Settings.PrivacyUnit, r.Report.Settings.Users)
		}
		if r.Violation != (div > 0) {
			t.Errorf("σ divided by %v: violation %v (bound %v, claimed %v)", div, r.Violation, r.Bound, r.Claimed)
		}
	}
}

// TestGradientCanariesNoneIncluded: an audit whose draw includes none of
// its gradient canaries still draws their coordinates and scores them
// (it panicked on the first step: the coordinates were drawn only with a
// canary in the run).
func TestGradientCanariesNoneIncluded(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		o := Options{Kind: Gradient, Canaries: 2, KPlus: 1, KMinus: 1, Confidence: 0.95, Source: dpengine.NewSeededSource(seed)}
		cfg := usersConfig(t, 64, 1, dptrain.PrivacyUnitExample, 8, 1)
		r, err := Run(cfg, o)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if r.Included == 0 {
			return
		}
	}
	t.Fatal("no seed of 40 left both canaries out")
}
