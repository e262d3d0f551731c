package reference

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// Device is the reference backend. Its buffers are host memory; its
// operations are methods with value receivers, like runtime.CPU's.
type Device struct{}

// buffer is a reference buffer: host memory, allocated apart from the CPU
// backend's so that a buffer of one device given to the other is caught.
type buffer struct{ f []float32 }

func (b *buffer) Len() int          { return len(b.f) }
func (b *buffer) Floats() []float32 { return b.f }

// Name implements runtime.Device.
func (Device) Name() string { return "reference" }

// Alloc implements runtime.Device.
func (Device) Alloc(n int) (runtime.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("reference: negative allocation %d", n)
	}
	return &buffer{make([]float32, n)}, nil
}

func own(b runtime.Buffer) (*buffer, error) {
	rb, ok := b.(*buffer)
	if !ok {
		return nil, fmt.Errorf("reference: buffer of type %T is not a reference buffer", b)
	}
	return rb, nil
}

// CopyIn implements runtime.Device.
func (Device) CopyIn(dst runtime.Buffer, off int, src []float32) error {
	b, err := own(dst)
	if err != nil {
		return err
	}
	if off < 0 || off+len(src) > len(b.f) {
		return fmt.Errorf("reference: copy of %d elements at %d into a buffer of %d", len(src), off, len(b.f))
	}
	copy(b.f[off:], src)
	return nil
}

// CopyOut implements runtime.Device.
func (Device) CopyOut(dst []float32, src runtime.Buffer, off int) error {
	b, err := own(src)
	if err != nil {
		return err
	}
	if off < 0 || off+len(dst) > len(b.f) {
		return fmt.Errorf("reference: copy of %d elements at %d from a buffer of %d", len(dst), off, len(b.f))
	}
	copy(dst, b.f[off:])
	return nil
}

// Run implements runtime.Device: a compiled node is a host-side sequence
// of the device's operations.
func (Device) Run(k runtime.Kernel) error {
	ck, ok := k.(*runtime.CPUKernel)
	if !ok {
		return fmt.Errorf("reference: kernel %s of type %T is not a host-side sequence of operations", k.KernelName(), k)
	}
	ck.Fn()
	return nil
}

// Workers implements runtime.DPOps: the reference backend runs one
// sample at a time.
func (Device) Workers() int { return 1 }

// The reference backend implements the whole DP operation set.
var _ runtime.DPOps = Device{}

// AdoptHost implements runtime.HostAdopter: the reference backend's
// memory is host memory, so a host slice becomes a buffer as it is.
func (Device) AdoptHost(host []float32) (runtime.Buffer, bool) { return &buffer{host}, true }

// Separate is the reference backend with memory of its own: it adopts no
// host slice (its AdoptHost refuses), so that the plan copies every
// initializer into distinct buffers, as on an accelerator. Tests run on it
// to catch a host reader of parameters that forgot Plan.SyncParams (or a
// writer that forgot LoadParams): the arithmetic is the reference
// backend's, only where the state lives differs.
type Separate struct{ Device }

// Name implements runtime.Device.
func (Separate) Name() string { return "reference (separate memory)" }

// AdoptHost implements runtime.HostAdopter by refusing: every host slice
// is copied into a buffer of the device's own.
func (Separate) AdoptHost([]float32) (runtime.Buffer, bool) { return nil, false }

var (
	_ runtime.HostAdopter = Device{}
	_ runtime.Ops         = Separate{}
)
