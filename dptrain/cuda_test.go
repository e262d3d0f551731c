//go:build linux && (amd64 || arm64)

package dptrain_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/dptrain"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/cuda"
)

// TestRunOnCUDA trains as TestRunOnSeparateMemory (interrupted, resumed
// from its checkpoint, exported; and a plain run) on the emulated CUDA
// device with guarded memory (a host read of device memory would fault),
// whose parameters, accumulators and optimizer state are blocks of device
// memory, and on the CPU, with the same seed. The noise is the
// same bits on both and the rest the same arithmetic up to the order of
// the GPU's batched sums, so the checkpoints, the test metrics and the
// exports agree to 1e-3 of the largest weight: a stale sync, a state
// restored out of order or a block view off by one would not. Each run's
// report names its device. It runs trainStages' variants: plainly, and
// with a schedule, the parameters' average (which the checkpoint, the
// evaluation and the export read from device memory), adaptive clipping
// and label smoothing, and those on cached features.
func TestRunOnCUDA(t *testing.T) {
	for _, v := range stageVariants {
		t.Run(v.name, func(t *testing.T) { runOnCUDA(t, v.set) })
	}
}

func runOnCUDA(t *testing.T, set func(*dptrain.Config)) {
	// Whatever the environment says (a GPU's own run is gpu-check's): the
	// emulation, its device memory closed to the host as a GPU's is.
	t.Setenv(cuda.EnvDriver, "emulate-guarded")
	dev, err := cuda.Open()
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	defer dev.Close()
	want := trainStages(t, runtime.CPU{}, set)
	got := trainStages(t, dev, set)
	if want.device != "cpu" || !strings.HasPrefix(got.device, "cuda") {
		t.Errorf("the reports name the devices %q and %q", want.device, got.device)
	}
	// A cache's frozen pass takes the GPU's memory beside the engine (and
	// counts against --max-memory there), not the CPU's.
	if got.features.Cached && (got.features.DeviceBytes <= 0 || want.features.DeviceBytes != 0) {
		t.Errorf("the frozen part's pass holds %d bytes of the emulated GPU, %d of the CPU", got.features.DeviceBytes, want.features.DeviceBytes)
	}
	near := func(what string, g, w []float32) {
		scale := 0.0
		for _, v := range w {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for i := range w {
			if !(math.Abs(float64(g[i]-w[i])) <= 1e-3*scale+1e-6) { // NaN fails too
				t.Errorf("%s[%d]: %v on cuda, %v on the cpu", what, i, g[i], w[i])
				return
			}
		}
	}
	if !reflect.DeepEqual(got.ckpt.ParamNames, want.ckpt.ParamNames) {
		t.Fatalf("the checkpoints hold parameters %v and %v", got.ckpt.ParamNames, want.ckpt.ParamNames)
	}
	for k, name := range want.ckpt.ParamNames {
		near("checkpoint "+name, got.ckpt.Params[k], want.ckpt.Params[k])
		for slot, ws := range want.ckpt.Optimizer.Slots {
			near("checkpoint optimizer "+slot+" of "+name, got.ckpt.Optimizer.Slots[slot][k], ws[k])
		}
		if (want.ckpt.Average != nil) != (set != nil) || len(got.ckpt.Average) != len(want.ckpt.Average) {
			t.Fatalf("the checkpoints hold averages of %d and %d tensors", len(got.ckpt.Average), len(want.ckpt.Average))
		}
		if want.ckpt.Average != nil {
			near("checkpoint average of "+name, got.ckpt.Average[k], want.ckpt.Average[k])
		}
	}
	if len(got.epochs) != len(want.epochs) {
		t.Fatalf("%d and %d epoch records", len(got.epochs), len(want.epochs))
	}
	for i := range want.epochs {
		g, w := got.epochs[i], want.epochs[i]
		if !(math.Abs(g.TrainLoss-w.TrainLoss) <= 1e-3*math.Abs(w.TrainLoss)) { // NaN fails too
			t.Errorf("epoch %d: train loss %v on cuda, %v on the cpu", i+1, g.TrainLoss, w.TrainLoss)
		}
	}
	for mi, wm := range want.models {
		for _, v := range wm.Initializers {
			if v.Const == nil || v.Const.F32 == nil {
				continue
			}
			gv := got.models[mi].Values[v.Name]
			if gv == nil || gv.Const == nil {
				t.Fatalf("export %d: no initializer %s", mi+1, v.Name)
			}
			near("export initializer "+v.Name, gv.Const.F32, v.Const.F32)
		}
	}
}
