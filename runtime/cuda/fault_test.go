//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// failingAlloc is a driver whose allocations fail while armed, as a GPU's
// do when a batch does not fit.
type failingAlloc struct {
	Driver
	armed bool
}

var errTestOOM = errors.New("CUDA_ERROR_OUT_OF_MEMORY (test)")

func (f *failingAlloc) Alloc(bytes int) (DevicePtr, error) {
	if f.armed {
		return 0, errTestOOM
	}
	return f.Driver.Alloc(bytes)
}

// TestDeviceFaultIsAnError: an operation whose own scratch cannot be had
// (MaxPoolBackwardFromOutput's winners, the largest-batch search's crash
// on the H100) fails its node's Run with an error naming the node, and
// the device goes on working; a bug's panic stays a panic.
func TestDeviceFaultIsAnError(t *testing.T) {
	drv := &failingAlloc{Driver: emuDriver(t)}
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := &runtime.PoolShape{N: 2, C: 3, In: []int{6, 6}, Kernel: []int{2, 2}, Strides: []int{2, 2}}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	nx, ny := poolSizes(s)
	buf := func(n int) []float32 {
		b, err := d.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b.Floats()
	}
	x, y, dy, dx := buf(nx), buf(ny), buf(ny), buf(nx)
	node := &runtime.CPUKernel{Name: "node /pool (MaxPool) backward", Fn: func() {
		d.MaxPool(s, x, y, nil)
		d.MaxPoolBackwardFromOutput(s, x, y, dy, dx)
	}}
	drv.armed = true
	err = d.Run(node)
	var f *runtime.DeviceFault
	if !errors.As(err, &f) || !errors.Is(err, errTestOOM) || !strings.Contains(err.Error(), node.Name) {
		t.Fatalf("Run with the allocation failing: %v, want a DeviceFault naming the node and the driver's error", err)
	}
	drv.armed = false
	if err := d.Run(node); err != nil {
		t.Fatalf("Run once memory is there again: %v", err)
	}
	defer func() {
		if r := recover(); r != "a bug" {
			t.Errorf("a bug's panic came back as %v", r)
		}
	}()
	d.Run(&runtime.CPUKernel{Name: "bug", Fn: func() { panic("a bug") }})
	t.Error("a bug's panic was swallowed")
}

// TestCatchDeviceFault: only a DeviceFault becomes the error.
func TestCatchDeviceFault(t *testing.T) {
	run := func(fn func()) (err error) {
		defer runtime.CatchDeviceFault(&err, "step")
		fn()
		return nil
	}
	if err := run(func() { fault(errTestOOM) }); !errors.Is(err, errTestOOM) || !strings.HasPrefix(err.Error(), "step: ") {
		t.Errorf("fault: %v", err)
	}
	if err := run(func() {}); err != nil {
		t.Errorf("no fault: %v", err)
	}
}
