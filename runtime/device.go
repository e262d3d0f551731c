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

// DeviceFault is what a device's operation panics with when the device
// fails under it: out of memory for the call's own scratch, a launch or a
// copy the driver refused. The operation sets (Ops) return no error — on
// the CPU nothing in them can fail but a bug — so an accelerator's
// operations report such a failure by this panic, and Device.Run and the
// DP engine's entry points recover it (CatchDeviceFault) and return it as
// an error: a batch too large for the GPU is the user's to fix, not a
// crash. Every other panic is a bug and stays one.
type DeviceFault struct{ Err error }

func (f *DeviceFault) Error() string { return f.Err.Error() }

// Unwrap returns the device's error.
func (f *DeviceFault) Unwrap() error { return f.Err }

// CatchDeviceFault, deferred, turns a DeviceFault panic into *err, with
// where as its context; any other panic goes on.
func CatchDeviceFault(err *error, where string) {
	r := recover()
	if r == nil {
		return
	}
	f, ok := r.(*DeviceFault)
	if !ok {
		panic(r)
	}
	*err = fmt.Errorf("%s: %w", where, f)
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
	// CopyIn copies src into dst starting at element off. src is host
	// memory or the device's own (a buffer's Floats, as Plan.BackwardFrom
	// gets from the engine), which a device copies in place.
	CopyIn(dst Buffer, off int, src []float32) error
	// CopyOut copies len(dst) elements of src, starting at element off,
	// into dst, host memory or the device's own as for CopyIn.
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

// HostAdopter is a Device whose memory is host memory (CPU, the reference
// backend): it can take a host slice as one of its buffers without a copy.
// The plan adopts the graph's initializers this way, so that on such a
// device parameters and constants are the graph's own storage — no second
// copy of the model, and the engine's updates land in the initializers —
// while a device with memory of its own (an accelerator) gets a copy
// (AdoptHost). An optional interface rather than a Device method, so that
// a backend without host memory has nothing to implement.
type HostAdopter interface {
	// AdoptHost returns a buffer whose Floats is host itself (same
	// backing array, same length), or false where this device cannot
	// use that memory, in which case the caller copies.
	AdoptHost(host []float32) (Buffer, bool)
}

// Freer is a Device that can release a buffer before it closes (CUDA's
// memory is the device's, not the garbage collector's). The plan gives
// back through it the copies it replaces (Plan.ParamBlock).
type Freer interface {
	Device
	// Free releases b, a buffer of this device no longer used.
	Free(b Buffer) error
}

// AllocTracker is a Device that lists the buffers its Alloc returns
// while a tracking is open (CUDA): a plan compiled on it knows the memory
// it holds, and Plan.Release gives it back through Freer. Memory the
// device allocates for itself (its scratch, caches of compile-time data)
// is not listed: it stays the device's.
type AllocTracker interface {
	Device
	// TrackAllocs opens a tracking; stop closes it and returns the
	// buffers allocated since, in order. Trackings nest: an allocation
	// is listed in the innermost one open.
	TrackAllocs() (stop func() []Buffer)
}

// FloatsFreer is a Device that releases memory by the view a buffer's
// Floats gave: for owners that keep only the view (dpengine's scratch),
// so that memory of the device's own that they outgrow goes back to it
// instead of staying allocated until the device closes.
type FloatsFreer interface {
	Device
	// FreeFloats releases the buffer whose Floats f is (all of it, from
	// its first element), no longer used.
	FreeFloats(f []float32) error
}

// FreeFloats releases f, the whole view of a buffer allocated from d,
// where d frees by view (FloatsFreer); host memory (the CPU, the
// reference backend) is left to the garbage collector.
func FreeFloats(d Device, f []float32) error {
	if ff, ok := d.(FloatsFreer); ok && cap(f) > 0 {
		return ff.FreeFloats(f)
	}
	return nil
}

// MemoryReporter is a Device that counts the memory it allocates (CUDA):
// what a benchmark reports as its peak device memory.
type MemoryReporter interface {
	Device
	// MemoryStats returns the bytes held now and the most held since the
	// device opened.
	MemoryStats() (inUse, peak int64)
}

// TF32Device is a Device that can run the matrix products of
// convolutions' forward passes and input gradients in TF32 (an NVIDIA
// GPU's tensor cores: operands rounded to 10-bit mantissas, float32
// sums), the precision PyTorch gives convolutions by default
// (torch.backends.cudnn.allow_tf32). Weight gradients stay float32
// whatever the setting: every per-sample gradient, its norm and the
// clipped sum Σ_i C_i g_i are computed from the same activations and
// output gradients in float32, so the clip bound holds on exactly what is
// summed. What TF32 changes is which activations and output gradients
// those are: a second backward pass (ghost clipping's) would not
// reproduce the first pass's bit for bit, so the DP engine refuses TF32
// in the modes that take one. Off unless set.
type TF32Device interface {
	Device
	// SetTF32 turns TF32 on or off for the operations issued after it.
	SetTF32(on bool)
	// TF32 reports whether TF32 is on.
	TF32() bool
}

// DeterministicDevice is a device that can run some products by
// algorithms whose results may differ in their last bits from run to run
// (a GPU convolution library's atomics-based ones, which PyTorch allows by
// default) and is told whether it may. A run whose noise is seeded asks
// for determinism, so that it repeats bit for bit; one with secure noise,
// which no two runs share, need not. Either way clipping bounds each
// sample's contribution: only the rounding of the products' sums changes.
type DeterministicDevice interface {
	Device
	// SetDeterministic keeps the device to deterministic algorithms (on,
	// the default) or lets it take faster ones that are not (off), for the
	// operations issued after it; a setting the user fixed for the process
	// (an environment variable) wins over it.
	SetDeterministic(on bool)
}

// MemoryLimiter is a device that holds memory of its own beyond the plans'
// buffers — a convolution library's workspace, sized by the algorithms
// it chooses — which the plans' memory estimates leave out. A run given a
// memory cap (Options.MaxMemory, --max-memory, whose estimate fills nine
// tenths of it) hands the cap to LimitMemory, and the device keeps that
// memory within a share of it small enough for the rest.
type MemoryLimiter interface {
	Device
	// LimitMemory bounds the device's own memory beyond the plans'
	// buffers to a share of bytes.
	LimitMemory(bytes int64)
}

// TF32On reports whether d runs convolutions in TF32 (TF32Device).
func TF32On(d Device) bool {
	t, ok := d.(TF32Device)
	return ok && t.TF32()
}

// OwnMemory reports whether d computes on memory of its own (an
// accelerator, or reference.Separate) rather than on host memory it
// adopts (HostAdopter): where memory, not time, bounds the batch, and
// where the DP engine batches its per-sample work. A nil d is the CPU.
func OwnMemory(d Device) bool {
	if d == nil {
		return false
	}
	a, ok := d.(HostAdopter)
	if !ok {
		return true
	}
	_, adopts := a.AdoptHost(make([]float32, 1))
	return !adopts
}

// AdoptHost returns a buffer of d holding host's elements: host itself
// where d adopts host memory (HostAdopter), else a new buffer of d with a
// copy. Whether the two are the same memory is SameMemory(host, b.Floats()).
func AdoptHost(d Device, host []float32) (Buffer, error) {
	if a, ok := d.(HostAdopter); ok {
		if b, ok := a.AdoptHost(host); ok {
			return b, nil
		}
	}
	b, err := d.Alloc(len(host))
	if err != nil {
		return nil, fmt.Errorf("runtime: %s: allocating %d elements to copy host memory into: %w", d.Name(), len(host), err)
	}
	if err := d.CopyIn(b, 0, host); err != nil {
		return nil, fmt.Errorf("runtime: %s: copying %d host elements in: %w", d.Name(), len(host), err)
	}
	return b, nil
}

// SameMemory reports whether a and b are the same memory: the same length
// and backing array start. A device view is compared as an address, never
// dereferenced, so it may be given for either.
func SameMemory(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b)
}

// AllocFloat64 returns n float64 elements of device memory, zeroed, for
// what the DP operations keep in float64 (per-sample squared norms, whose
// sums over millions of elements float32 would round). It is carved from
// a float32 buffer of 2n elements, so that a device has one allocation
// type (Alloc) and a backend nothing more to implement; the buffer's
// alignment is checked, float64 needing 8 bytes. Like Buffer.Floats, the
// slice is host memory on a host device and a view only the device's
// operations dereference on an accelerator.
func AllocFloat64(d Device, n int) ([]float64, error) {
	if n < 0 {
		return nil, fmt.Errorf("runtime: %s: negative float64 allocation %d", d.Name(), n)
	}
	if n == 0 {
		return []float64{}, nil
	}
	_, ptr, err := alloc8(d, n, "float64")
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*float64)(ptr), n), nil
}

// AllocInt32 returns n int32 elements of device memory, zeroed, for the
// int32 state the device's operations write and read (MaxPool's winners),
// carved from a float32 buffer of n elements (same size and alignment) as
// AllocFloat64 describes.
func AllocInt32(d Device, n int) ([]int32, error) {
	if n < 0 {
		return nil, fmt.Errorf("runtime: %s: negative int32 allocation %d", d.Name(), n)
	}
	if n == 0 {
		return []int32{}, nil
	}
	b, err := d.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("runtime: %s: allocating %d int32 elements: %w", d.Name(), n, err)
	}
	f := b.Floats()
	if len(f) != n {
		return nil, fmt.Errorf("runtime: %s: a buffer of %d elements for %d int32s has %d", d.Name(), n, n, len(f))
	}
	return int32View(f), nil
}

// int32View returns f's memory as int32s, as many as f has floats: a
// buffer of a device holds 4-byte elements of either kind.
func int32View(f []float32) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(f))), len(f))
}

// alloc8 returns a buffer of d of 2n float32 elements (n > 0) and its
// start, checked 8-byte aligned: the storage of n 8-byte elements of the
// given kind (float64, int64), carved as AllocFloat64 describes.
func alloc8(d Device, n int, kind string) (Buffer, unsafe.Pointer, error) {
	b, err := d.Alloc(2 * n)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime: %s: allocating %d %s elements: %w", d.Name(), n, kind, err)
	}
	f := b.Floats()
	if len(f) != 2*n {
		return nil, nil, fmt.Errorf("runtime: %s: a buffer of %d elements for %d %ss has %d", d.Name(), 2*n, n, kind, len(f))
	}
	ptr := unsafe.Pointer(unsafe.SliceData(f))
	if uintptr(ptr)%8 != 0 {
		return nil, nil, fmt.Errorf("runtime: %s: buffer at %p is not 8-byte aligned for %s", d.Name(), ptr, kind)
	}
	return b, ptr, nil
}

// allocInt64 returns n int64 elements of device memory (n > 0), carved
// like AllocFloat64, with the buffer that holds them, which CopyIn fills
// from a host []int64 seen as float32s (bitsOf64): the plan's labels.
func allocInt64(d Device, n int) (Buffer, []int64, error) {
	b, ptr, err := alloc8(d, n, "int64")
	if err != nil {
		return nil, nil, err
	}
	return b, unsafe.Slice((*int64)(ptr), n), nil
}

// bitsOf64 returns the memory of v as 2·len(v) float32s, for CopyIn and
// CopyOut of 8-byte elements: the copies move bits, never values.
func bitsOf64(v []int64) []float32 {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(v))), 2*len(v))
}

// AdoptHost implements HostAdopter: a host slice is a CPU buffer as it is.
func (CPU) AdoptHost(host []float32) (Buffer, bool) { return cpuBuffer(host), true }
