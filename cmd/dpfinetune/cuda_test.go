package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// useEmulatedCUDA makes the test's --device cuda the emulation with
// guarded memory (DPFINETUNE_CUDA=emulate-guarded: a host read of device
// memory faults, as on a GPU), or skips it where the emulation cannot run.
func useEmulatedCUDA(t *testing.T) {
	t.Setenv(cuda.EnvDriver, "emulate-guarded")
	dev, err := runtime.OpenDevice(cuda.DeviceName)
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	dev.(*cuda.Device).Close()
}

// TestNormsCUDAEmulated: dpfinetune norms --device cuda, on the emulated
// CUDA device (DPFINETUNE_CUDA=emulate), reproduces --device cpu's
// per-sample norms (total and per parameter) on every fixture with a
// golden batch in bk mode, and on cnn and vit in ghost mode too (its
// second backward pass), across physical batches of 3 (the last one
// padded).
func TestNormsCUDAEmulated(t *testing.T) {
	useEmulatedCUDA(t)
	names, err := numcheck.FixtureNames(filepath.Join("..", "..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		modes := []string{"bk"}
		if name == "cnn" || name == "vit" {
			modes = append(modes, "ghost")
		}
		t.Run(name, func(t *testing.T) { compareNormsCUDA(t, name, modes) })
	}
}

// compareNormsCUDA runs norms on fixture name on the cpu and the emulated
// cuda device in each mode and compares them.
func compareNormsCUDA(t *testing.T, name string, modes []string) {
	_, xp, yp := goldenInputs(t, name)
	normsMatchCUDA(t, filepath.Join("..", "..", "testdata", "models", name+".onnx"), xp, yp, modes)
}

// normsMatchCUDA runs norms on model (inputs xp, labels yp) on the cpu and
// the cuda device in each mode, in physical batches of 3, and holds the
// per-sample norms, total and per parameter, to each other (1e-4
// relative, 1e-7 absolute).
func normsMatchCUDA(t *testing.T, model, xp, yp string, modes []string) {
	t.Helper()
	norms := func(device, mode string) normsReport {
		out, errOut, code := run(t, "norms", "--device", device, "--model", model, "--input", xp, "--labels", yp, "--mode", mode, "--batch", "3", "--json")
		if code != 0 {
			t.Fatalf("--device %s --mode %s: exit %d: %s", device, mode, code, errOut)
		}
		var r normsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	near := func(what string, got, want []float64) {
		if len(got) != len(want) {
			t.Fatalf("%s: %d norms, want %d", what, len(got), len(want))
		}
		for i := range want {
			if !(math.Abs(got[i]-want[i]) <= 1e-4*want[i]+1e-7) { // NaN fails too
				t.Errorf("%s sample %d: %v on cuda, %v on the cpu", what, i, got[i], want[i])
			}
		}
	}
	for _, mode := range modes {
		want, got := norms("cpu", mode), norms("cuda", mode)
		near(mode+" total", got.Total, want.Total)
		if len(got.PerParam) != len(want.PerParam) {
			t.Errorf("%s: %d parameters on cuda, %d on the cpu", mode, len(got.PerParam), len(want.PerParam))
		}
		for name, w := range want.PerParam {
			near(mode+" "+name, got.PerParam[name], w)
		}
	}
}

// TestTF32Flag: --tf32 on the emulated CUDA device runs norms in bk mode
// with TF32 convolutions (resnet_eval: the norms move from --device cpu's
// by more than float32 rounding and less than 1e-2) and refuses ghost
// mode, whose second backward pass it would round afresh; bench reports
// it, and each mode's peak device memory. On the CPU --tf32 is a usage
// error (TestDeviceFlag).
func TestTF32Flag(t *testing.T) {
	useEmulatedCUDA(t)
	_, xp, yp := goldenInputs(t, "resnet_eval")
	model := filepath.Join("..", "..", "testdata", "models", "resnet_eval.onnx")
	norms := func(args ...string) normsReport {
		out, errOut, code := run(t, append([]string{"norms", "--model", model, "--input", xp, "--labels", yp, "--mode", "bk", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("norms %v: exit %d: %s", args, code, errOut)
		}
		var r normsReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	cpu, tf32 := norms("--device", "cpu"), norms("--device", "cuda", "--tf32")
	moved := 0.0
	for i, w := range cpu.Total {
		moved = math.Max(moved, math.Abs(tf32.Total[i]-w)/w)
	}
	if moved <= 1e-5 || moved >= 1e-2 {
		t.Errorf("--tf32 moved the norms by %.2g (relative), not within (1e-5, 1e-2)", moved)
	}
	_, errOut, code := run(t, "norms", "--device", "cuda", "--tf32", "--model", model, "--input", xp, "--labels", yp, "--mode", "ghost")
	if code == 0 || !strings.Contains(errOut, "TF32") || !strings.Contains(errOut, "ghost") {
		t.Errorf("norms --tf32 --mode ghost: exit %d, stderr %q; want a refusal naming TF32 and ghost", code, errOut)
	}
	out, errOut, code := run(t, "bench", "--device", "cuda", "--tf32", "--model", model, "--batch", "2", "--steps", "1", "--modes", "nondp,bk", "--json")
	if code != 0 {
		t.Fatalf("bench --tf32: exit %d: %s", code, errOut)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.TF32 || !strings.HasPrefix(rep.Device, "cuda") || len(rep.Rows) != 2 {
		t.Fatalf("bench --tf32 reports device %q, tf32 %v, %d rows", rep.Device, rep.TF32, len(rep.Rows))
	}
	// Each mode on the device opened afresh: its own peak, at least its
	// parameters' copy and at most all the device's work.
	for _, r := range rep.Rows {
		if r.DevicePeakBytes < 4*1000 || r.DevicePeakBytes > 1<<30 {
			t.Errorf("bench --device cuda, mode %s: device peak %d bytes", r.Mode, r.DevicePeakBytes)
		}
	}
}
