package audit

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dpengine"
	"github.com/dpfinetune/dpfinetune/dpengine/data"
	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// TestAuditUsers: on data that names users the audit runs the
// example-level mechanism that its canaries, examples, take part in (the
// run's report says so), and refuses to claim a user-level one.
func TestAuditUsers(t *testing.T) {
	imgs, err := data.LoadString("idx:../../testdata/fmnist-small:limit=64")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, imgs.Len())
	for i := range names {
		names[i] = fmt.Sprint("user-", i%16)
	}
	if imgs, err = imgs.WithUsers(names); err != nil {
		t.Fatal(err)
	}
	ds, err := data.NewView(imgs, data.Preprocess{Channels: 1, Height: 28, Width: 28, Norm: imgs.DefaultNorm()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(unit string) dptrain.Config {
		m, err := onnx.Load("../../testdata/models/cnn.onnx")
		if err != nil {
			t.Fatal(err)
		}
		g, err := graph.FromONNX(m)
		if err != nil {
			t.Fatal(err)
		}
		seed := uint64(2)
		return dptrain.Config{Graph: g, Train: ds, Settings: dptrain.Settings{
			Model: "cnn.onnx", Data: "fmnist-small", Epsilon: 8, Epochs: 1, BatchSize: 16,
			Accountant: "rdp", Sampling: "poisson", Mode: "bk", Clip: 1, ClipFn: "abadi",
			Optimizer: "sgd", LR: 1e-2, InputShape: []int64{1, 28, 28}, Seed: &seed, PrivacyUnit: unit,
		}}
	}
	o := Options{Kind: Gradient, Canaries: 8, KPlus: 2, KMinus: 2, Confidence: 0.95, Source: dpengine.NewSeededSource(3)}
	if _, err := Run(cfg(dptrain.PrivacyUnitUser), o); err == nil || !strings.Contains(err.Error(), "--privacy-unit example") {
		t.Errorf("user level: err = %v", err)
	}
	r, err := Run(cfg(""), o)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Report.Settings; s.PrivacyUnit != dptrain.PrivacyUnitExample || s.Examples != 64+r.Included || s.Users != 0 {
		t.Errorf("the audited run: unit %q, %d examples, %d users", s.PrivacyUnit, s.Examples, s.Users)
	}
}
