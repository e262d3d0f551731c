package dpengine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/testhook"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestCheckNorms: on every fixture whose per-sample norms are defined, in
// every DP mode, on the CPU and on a device with memory of its own (the
// batched rules), the engine's per-sample norms pass the check against
// each sample's own gradient with a margin (below 1e-5, at most 3.8e-7 on
// 2026-11-27, where train's bound is 1e-3), with a physical batch the
// samples fill only partly.
func TestCheckNorms(t *testing.T) {
	for _, name := range engineFixtures {
		for _, dev := range []runtime.Device{runtime.CPU{}, reference.Separate{}} {
			for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
				t.Run(fmt.Sprintf("%s/%s/%s", name, dev.Name(), mode), func(t *testing.T) {
					const n = 3
					x, y, _, _ := engineBatch(t, name, n)
					g, rp := preparedFixture(t, name, 4)
					e, err := New(g, rp, compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4))
					if err != nil {
						t.Fatal(err)
					}
					r, err := e.CheckNorms(g, x, y, 1e-3)
					if err != nil {
						t.Fatal(err)
					}
					if r.Samples != n || r.Params != len(e.ParamNames()) || r.Worst > 1e-5 {
						t.Errorf("checked %d samples, %d parameters, worst %.3g (%s, sample %d)", r.Samples, r.Params, r.Worst, r.Param, r.Sample)
					}
				})
			}
		}
	}
}

// TestCheckNormsCatches: an engine that takes a convolution's windows for
// samples (testhook.ConvWindowsAsSamples: the bug convRows fixed, on
// windowconv's folded convolutions) fails
// the check, naming a parameter it clips wrongly.
func TestCheckNormsCatches(t *testing.T) {
	defer func() { testhook.ConvWindowsAsSamples = false }()
	testhook.ConvWindowsAsSamples = true
	for _, mode := range []Mode{BK, Ghost} {
		t.Run(string(mode), func(t *testing.T) {
			x, y, _, _ := engineBatch(t, "windowconv", 3)
			g, rp := preparedFixture(t, "windowconv", 4)
			e, err := New(g, rp, compareConfig(runtime.CPU{}, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4))
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.CheckNorms(g, x, y, 1e-3)
			var mm *NormMismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("err = %v, want a NormMismatchError", err)
			}
			if mm.Param == "" || mm.Relative <= 1e-3 {
				t.Errorf("mismatch %+v", mm)
			}
			t.Log(err)
		})
	}
}
