package main

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// detDevice is the CPU that records what it is told of determinism
// (runtime.DeterministicDevice).
type detDevice struct {
	runtime.CPU
	calls *[]bool
}

func (d detDevice) SetDeterministic(on bool) { *d.calls = append(*d.calls, on) }

// Close makes detDevice one that bench opens afresh for each mode, as it
// does a GPU.
func (d detDevice) Close() error { return nil }

// TestDeterminismByCommand: a run with secure noise (train or audit
// without --seed) and bench let the device take nondeterministic
// algorithms; a seeded run, eval, predict and norms leave it to its
// deterministic default.
func TestDeterminismByCommand(t *testing.T) {
	var calls []bool
	defer runtime.RegisterDevice("dettest", func() (runtime.Device, error) { return detDevice{calls: &calls}, nil })()
	model := "../../testdata/models/cnn.onnx"
	out := filepath.Join(t.TempDir(), "tuned.onnx")
	train := []string{"train", "--device", "dettest", "--model", model, "--data", fmnist + ":limit=16", "--test-data", "none",
		"--epsilon", "8", "--epochs", "1", "--batch-size", "8", "--quiet", "--out", out}
	for _, c := range []struct {
		name string
		args []string
		want []bool
	}{
		{"train, secure noise", train, []bool{false}},
		{"train, seeded", append(slices.Clone(train), "--seed", "1"), nil},
		// bench opens the device again for each mode: each is told.
		{"bench", []string{"bench", "--device", "dettest", "--model", model, "--batch", "2", "--steps", "1", "--modes", "nondp,bk", "--json"}, []bool{false, false, false}},
		{"eval", []string{"eval", "--device", "dettest", "--model", model, "--data", fmnist + ":limit=8"}, nil},
	} {
		calls = nil
		if _, e, code := run(t, c.args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, e)
		}
		if !slices.Equal(calls, c.want) {
			t.Errorf("%s: SetDeterministic calls %v, want %v", c.name, calls, c.want)
		}
	}
}
