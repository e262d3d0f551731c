package reference_test

import (
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
)

// TestDevice: the reference device's buffers are its own (a CPU buffer is
// refused, and the other way round), copies are bounds-checked, and it
// runs host-side kernels and refuses others.
func TestDevice(t *testing.T) {
	d := reference.Device{}
	if _, err := d.Alloc(-1); err == nil {
		t.Error("negative allocation accepted")
	}
	b, err := d.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 4 || len(b.Floats()) != 4 {
		t.Fatalf("buffer of %d elements (%d floats), want 4", b.Len(), len(b.Floats()))
	}
	dpSameBits(t, "new buffer", b.Floats(), []float32{0, 0, 0, 0})
	if err := d.CopyIn(b, 1, []float32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 2)
	if err := d.CopyOut(out, b, 2); err != nil {
		t.Fatal(err)
	}
	dpSameBits(t, "copied out", out, []float32{2, 3})
	if err := d.CopyIn(b, 2, []float32{1, 2, 3}); err == nil {
		t.Error("copy past the end accepted")
	}
	if err := d.CopyOut(out, b, 3); err == nil {
		t.Error("copy out past the end accepted")
	}
	if err := d.CopyIn(b, -1, nil); err == nil {
		t.Error("negative offset accepted")
	}
	cb, err := runtime.CPU{}.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyIn(cb, 0, []float32{1}); err == nil || !strings.Contains(err.Error(), "not a reference buffer") {
		t.Errorf("CPU buffer given to the reference device: got %v", err)
	}
	if err := (runtime.CPU{}).CopyIn(b, 0, []float32{1}); err == nil {
		t.Error("reference buffer given to the CPU accepted")
	}
	ran := false
	if err := d.Run(&runtime.CPUKernel{Name: "k", Fn: func() { ran = true }}); err != nil || !ran {
		t.Errorf("host kernel: ran %v, error %v", ran, err)
	}
	if err := d.Run(otherKernel{}); err == nil || !strings.Contains(err.Error(), "other") {
		t.Errorf("foreign kernel: got %v, want an error naming it", err)
	}
	if d.Name() != "reference" || d.Workers() != 1 {
		t.Errorf("name %q, %d workers", d.Name(), d.Workers())
	}
	var _ runtime.DPOps = d
}

// otherKernel is a kernel type the reference device does not run.
type otherKernel struct{}

func (otherKernel) KernelName() string { return "other" }
