package main

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// TestNormsCUDAEmulated: dpfinetune norms --device cuda, on the emulated
// CUDA device (DPFINETUNE_CUDA=emulate), reproduces --device cpu's
// per-sample norms (total and per parameter) on the cnn fixture in bk and
// ghost modes, across physical batches of 3 (the last one padded).
func TestNormsCUDAEmulated(t *testing.T) {
	t.Setenv(cuda.EnvDriver, "emulate")
	dev, err := runtime.OpenDevice(cuda.DeviceName)
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	dev.(*cuda.Device).Close()
	_, xp, yp := goldenInputs(t, "cnn")
	norms := func(device, mode string) normsReport {
		out, errOut, code := run(t, "norms", "--device", device, "--model", "../../testdata/models/cnn.onnx", "--input", xp, "--labels", yp, "--mode", mode, "--batch", "3", "--json")
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
			if math.Abs(got[i]-want[i]) > 1e-4*want[i]+1e-7 {
				t.Errorf("%s sample %d: %v on cuda, %v on the cpu", what, i, got[i], want[i])
			}
		}
	}
	for _, mode := range []string{"bk", "ghost"} {
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
