//go:build linux && (amd64 || arm64)

package dpengine

import (
	"fmt"
	"os"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// emulatedCUDA returns the emulated CUDA device, or skips without g++ (and
// under DPFINETUNE_CUDA=gpu: the test reads the engine's parameters and
// gradients in place, which device memory allows on the emulation only).
func emulatedCUDA(t *testing.T) runtime.Device {
	t.Helper()
	if os.Getenv(cuda.EnvDriver) == "gpu" {
		t.Skip("the engine test runs on the emulation")
	}
	drv, err := cuda.Emulated()
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	d, err := cuda.New(drv)
	if err != nil {
		drv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestEngineOnCUDA runs the engine, unchanged, on the emulated CUDA device
// and on the CPU for cnn and vit in bk and ghost modes (AdamW on one,
// SGD with momentum on the other), and holds the CUDA engine to the CPU
// engine with TestEngineOnReferenceBackend's comparison (compareEngines,
// numcheck.RelErr ≤ 1e-4): per-sample total and per-parameter norms, the
// clipped sums, and after a Step with σ = 1 and a seeded noise source (the
// CUDA noise is the CPU's bit for bit) the private gradients, parameters
// and updates.
func TestEngineOnCUDA(t *testing.T) {
	dev := emulatedCUDA(t)
	for fi, name := range []string{"cnn", "vit"} {
		const n = 8
		x, y, batch, fill := engineBatch(t, name, n)
		for mi, mode := range []Mode{BK, Ghost} {
			opt := [2]string{"sgd", "adamw"}[(fi+mi)%2]
			label := fmt.Sprintf("%s/%s/%s", name, mode, opt)
			t.Run(label, func(t *testing.T) {
				clip := Clipping{Fn: Abadi, R: 0.5}
				cpu := buildEngine(t, name, compareConfig(runtime.CPU{}, mode, clip, false, opt, n))
				gpu := buildEngine(t, name, compareConfig(dev, mode, clip, false, opt, n))
				if gpu.Plan().Device() != dev {
					t.Fatalf("the engine's plan runs on %s", gpu.Plan().Device().Name())
				}
				compareEngines(t, label, cpu, gpu, x, y, batch, fill)
			})
		}
	}
}
