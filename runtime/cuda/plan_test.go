//go:build linux && (amd64 || arm64)

package cuda

import (
	"path/filepath"
	"strings"
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

// TestPlanRelease: a plan compiled on the device owns what it allocated
// (runtime.AllocTracker) — its arena, workspace, constants, parameter
// copies, gradients and loss head — and Release gives all of it back: the
// memory in use falls to where it was before the plan but for the
// device's own (its scratch and the compile-time data it keeps until
// Close), a second plan compiled and released after it leaves the device
// where the first left it, and a released plan refuses to run. A
// forward-only plan and a training plan, on two fixtures.
func TestPlanRelease(t *testing.T) {
	d := emuDevice(t)
	dir := filepath.Join("..", "..", "testdata")
	for _, name := range []string{"cnn", "resnet_eval"} {
		for _, forward := range []bool{true, false} {
			g, gold, err := numcheck.LoadFixture(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			x := gold["input"]
			var sample []int64
			for _, s := range x.Shape[1:] {
				sample = append(sample, int64(s))
			}
			batch := x.Shape[0]
			run := func() (held, after int64) {
				before, _ := d.MemoryStats()
				p, err := runtime.CompileForBatch(g, batch, sample, &runtime.Options{Device: d, ForwardOnly: forward})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.LoadParams(); err == nil {
					err = p.SetInput(0, x.F32)
					if err == nil {
						err = p.Forward()
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				held, _ = d.MemoryStats()
				if err := p.Release(); err != nil {
					t.Fatal(err)
				}
				if err := p.Forward(); err == nil || !strings.Contains(err.Error(), "released") {
					t.Errorf("%s: a released plan's Forward: %v", name, err)
				}
				after, _ = d.MemoryStats()
				return held - before, after - before
			}
			held, kept := run()
			arena := int64(0)
			if p, err := runtime.CompileForBatch(g, batch, sample, &runtime.Options{ForwardOnly: forward, PlanOnly: true}); err == nil {
				arena = p.ArenaBytes()
			}
			if held < arena || kept >= arena/4 {
				t.Errorf("%s (forward only %v): the plan held %d bytes (arena %d), %d stayed after Release", name, forward, held, arena, kept)
			}
			t.Logf("%s (forward only %v): held %d bytes (arena %d), %d stayed after Release", name, forward, held, arena, kept)
			held2, kept2 := run()
			if held2 < arena || kept2 > kept {
				t.Errorf("%s (forward only %v): a second plan held %d bytes, left %d more (the first %d)", name, forward, held2, kept2, kept)
			}
		}
	}
}
