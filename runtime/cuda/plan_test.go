//go:build linux && (amd64 || arm64)

package cuda

import (
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/internal/numcheck"
	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// planTolerance bounds numcheck.RelErr of the CUDA plan's logits, per-sample
// losses and gradients against the reference backend's: both sum in
// float64 and round once, but in different orders and with CUDA's math
// library's activations, GEMMs that sum in float32 (cuBLAS, the CPU's
// SGEMM on the emulation), and ReduceSum's float32 sums: the bound of
// runtime/reference's own test against the CPU.
const planTolerance = 1e-4

// readBack copies s to the host: through the driver when it is d's
// memory (on a GPU the host cannot read it in place), else as it is.
func readBack(d runtime.Device, s []float32) []float32 {
	out := make([]float32, len(s))
	if cd, ok := d.(*Device); ok && len(s) > 0 {
		p := DevicePtr(uintptr(unsafe.Pointer(&s[0])))
		cd.mu.Lock()
		defer cd.mu.Unlock()
		if cd.isDevice(p, 4*len(s)) {
			if err := cd.drv.CopyDtoH(unsafe.Pointer(&out[0]), p, 4*len(s)); err != nil {
				panic(err)
			}
			return out
		}
	}
	copy(out, s)
	return out
}

// TestPlanOnCUDA compiles fixture models of testdata/models on the
// emulated CUDA Device and on the reference backend, fused and unfused,
// and holds the CUDA plan's logits, per-sample losses and parameter
// gradients to the reference's with runtime/reference's metric and bound
// (gradients floored at 1e-3 of the model's largest). The fixtures cover
// every NNOps and ReduceOps operation the models use (convolutions,
// poolings, BatchNormalization, LayerNormalization, softmax, the loss
// head). -short runs cnn and vit only.
func TestPlanOnCUDA(t *testing.T) {
	var dev runtime.Device = emuDevice(t)
	dir := filepath.Join("..", "..", "testdata")
	names, err := numcheck.FixtureNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if testing.Short() && name != "cnn" && name != "vit" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			g, gold, err := numcheck.LoadFixture(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, noFusion := range []bool{false, true} {
				mode := map[bool]string{false: "fused", true: "unfused"}[noFusion]
				want := numcheck.RunPlan(t, g, gold, reference.Device{}, noFusion, nil)
				got := numcheck.RunPlan(t, g, gold, dev, noFusion, func(s []float32) []float32 { return readBack(dev, s) })
				numcheck.ComparePlans(t, mode, got, want, planTolerance)
			}
		})
	}
}
