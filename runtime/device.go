package runtime

import (
	"fmt"
	"unsafe"
)

// Buffer is a block of float32 elements owned by a Device.
type Buffer interface {
	// Len returns the number of float32 elements.
	Len() int
	// Floats returns the buffer's elements as the device's operations
	// address them. The operation sets (DPOps, GraphOps) take such slices
	// and sub-slices of them as their operands: on a host device (CPU,
	// the reference backend) they are the memory itself; on an
	// accelerator they are a view of device memory that only the device's
	// operations may dereference, the host reading and writing it through
	// CopyIn and CopyOut.
	Floats() []float32
}

// Kernel is one unit of work a Device runs: on the CPU, a Go function over
// host slices (CPUKernel); a GPU backend defines its own kernel type.
type Kernel interface {
	// KernelName names the kernel in errors and profiles.
	KernelName() string
}

// Device is where a plan's buffers live and its kernels run. The CPU
// implementation is the only one today; a CUDA backend implements the same
// interface (device memory, host↔device copies, launches) and its own
// kernel type.
type Device interface {
	// Name describes the device, e.g. "cpu (2 workers)".
	Name() string
	// Alloc returns a zeroed buffer of n float32 elements.
	Alloc(n int) (Buffer, error)
	// CopyIn copies src into dst starting at element off.
	CopyIn(dst Buffer, off int, src []float32) error
	// CopyOut copies len(dst) elements of src, starting at element off,
	// into dst.
	CopyOut(dst []float32, src Buffer, off int) error
	// Run runs k to completion.
	Run(k Kernel) error
}

// CPU is the host device: buffers are Go slices and kernels run in the
// calling goroutine (the kernels themselves split work over
// kernels.Workers() goroutines).
type CPU struct{}

// cpuBuffer is a host buffer.
type cpuBuffer []float32

func (b cpuBuffer) Len() int { return len(b) }

func (b cpuBuffer) Floats() []float32 { return b }

// CPUKernel is a CPU kernel: a function over host slices captured when
// the plan was compiled.
type CPUKernel struct {
	// Name names the kernel (operator and node).
	Name string
	// Fn does the work.
	Fn func()
}

// KernelName implements Kernel.
func (k *CPUKernel) KernelName() string { return k.Name }

// Name implements Device.
func (CPU) Name() string { return "cpu" }

// Alloc implements Device. The buffer is 64-byte aligned.
func (CPU) Alloc(n int) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("runtime: cpu: negative allocation %d", n)
	}
	raw := make([]float32, n+16)
	off := 0
	if n > 0 {
		off = int((64 - uintptr(unsafe.Pointer(&raw[0]))%64) % 64 / 4)
	}
	return cpuBuffer(raw[off : off+n : off+n]), nil
}

func hostOf(b Buffer) ([]float32, error) {
	hb, ok := b.(cpuBuffer)
	if !ok {
		return nil, fmt.Errorf("runtime: cpu: buffer of type %T is not a host buffer", b)
	}
	return hb, nil
}

// CopyIn implements Device.
func (CPU) CopyIn(dst Buffer, off int, src []float32) error {
	h, err := hostOf(dst)
	if err != nil {
		return err
	}
	if off < 0 || off+len(src) > len(h) {
		return fmt.Errorf("runtime: cpu: copy of %d elements at %d into a buffer of %d", len(src), off, len(h))
	}
	copy(h[off:], src)
	return nil
}

// CopyOut implements Device.
func (CPU) CopyOut(dst []float32, src Buffer, off int) error {
	h, err := hostOf(src)
	if err != nil {
		return err
	}
	if off < 0 || off+len(dst) > len(h) {
		return fmt.Errorf("runtime: cpu: copy of %d elements at %d from a buffer of %d", len(dst), off, len(h))
	}
	copy(dst, h[off:])
	return nil
}

// Run implements Device.
func (CPU) Run(k Kernel) error {
	ck, ok := k.(*CPUKernel)
	if !ok {
		return fmt.Errorf("runtime: cpu: kernel %s of type %T is not a CPU kernel", k.KernelName(), k)
	}
	ck.Fn()
	return nil
}

// HostSlice returns the host memory of a CPU buffer.
func HostSlice(b Buffer) ([]float32, error) { return hostOf(b) }
