package cuda

import (
	"embed"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// EnvDriver selects the driver Open uses: "emulate" for the emulation,
// "emulate-guarded" for the emulation with device memory the host cannot
// touch (EmulatedGuarded), anything else (or unset) for the GPU's driver.
const EnvDriver = "DPFINETUNE_CUDA"

//go:embed kernels/*.cu kernels/common.cuh
var kernelSources embed.FS

// commonHeader is the file of kernels/ that every module's source starts
// with (moduleSource): the definitions several modules share.
const commonHeader = "common.cuh"

// moduleSource returns the source the Device loads for module mod
// (kernels/<mod>): kernels/common.cuh, then the module's file, each with
// a #line directive so that compiler messages name the file and line
// they come from. Both drivers hash the whole text into their cache keys,
// so that an edit of the header recompiles every module.
func moduleSource(mod string) (string, error) {
	common, err := kernelSources.ReadFile("kernels/" + commonHeader)
	if err != nil {
		return "", fmt.Errorf("cuda: kernel header: %w", err)
	}
	src, err := kernelSources.ReadFile("kernels/" + mod)
	if err != nil {
		return "", fmt.Errorf("cuda: kernel module %s: %w", mod, err)
	}
	return fmt.Sprintf("#line 1 %q\n%s#line 1 %q\n%s", commonHeader, common, mod, src), nil
}

// The kernels the Device launches, by module (kernels/<module>.cu).
var deviceKernels = map[string][]string{
	"vector.cu": {"lane_chunks", "lane_finish", "lane_finish_product", "scale", "add", "add_run_sums", "scatter_add", "add_norm_sq", "sum_norm_rows", "sum_rows", "zero_f64", "add_scaled_rows", "scale_rows", "contract", "norm_affine_grads", "norm_affine_tiles", "count_non_finite"},
	"clip.cu":   {"clip_factors", "count_clipped"},
	"optim.cu":  {"adam", "sgd", "sgd_momentum", "average"},
	"noise.cu":  {"aes_expand_key", "add_gaussian_noise"},
	"linalg.cu": {"axpy", "reduce_to_shape", "reduce_to_shape_cols", "reduce_to_shape_split", "reduce_parts", "gemm_scale", "gemm_ptrs"},
	"elementwise.cu": {"binary", "binary_same_add", "binary_same_sub", "binary_same_mul", "binary_same_div", "binary_backward", "binary_backward_block", "binary_backward_cols", "unary", "unary_backward",
		"unary_relu", "unary_backward_relu", "unary_gelu", "unary_backward_gelu", "unary_gelu_tanh", "unary_backward_gelu_tanh",
		"unary_sigmoid", "unary_backward_sigmoid", "unary_tanh", "unary_backward_tanh", "clip_f", "clip_backward", "where_f", "where_backward",
		"prelu", "prelu_backward", "maxmin", "maxmin_winners", "maxmin_grad_direct", "maxmin_grad_scatter"},
	"persample.cu": {"im2col", "conv_weight_grad", "conv_weight_grad_rows", "conv_tap_grams", "std_norm_terms", "std_ghost_terms", "std_vjp"},
	"layout.cu":    {"fill_f", "index_gather", "index_gather_backward", "index_gather_backward_rows", "permute", "rows_copy", "expand"},
	"nn.cu": {"conv_fwd", "conv_dx", "conv_dw", "conv_unfold", "conv_fold", "conv_pack_out", "add_channel_bias", "channel_sums", "channel_sums_block", "max_pool", "max_pool_bwd", "max_pool_winners",
		"avg_pool", "avg_pool_bwd", "global_avg_pool", "global_avg_pool_bwd", "global_max_pool", "global_max_pool_bwd",
		"bn_stats", "bn_apply", "bn_grad_sums", "bn_dx", "row_stats", "row_stats_block", "row_normalize", "row_grad_sums", "row_grad_sums_block", "row_normalize_bwd",
		"row_affine", "row_affine_grad_sums", "row_affine_grad_sums_block", "row_affine_dx", "row_norm_affine_block", "row_affine_bwd_block", "row_run_sums_block", "row_affine_bwd_runs_block", "row_param_grads_runs", "row_param_grads", "row_param_grads_cols", "lrn", "lrn_bwd", "gemm_bias", "gemm_bias_bwd", "gemm_bias_bwd_block"},
	"reduce.cu": {"reduce_axes", "reduce_axes_bwd", "softmax", "softmax_bwd", "softmax_xent", "softmax_xent_bwd", "sigmoid_xent", "sigmoid_xent_bwd", "scatter_reduce"},
}

// Device is the CUDA backend: a runtime.Device whose buffers are device
// memory, and the operation groups as CUDA kernels (kernels/*.cu) and
// cuBLAS's GEMMs: the whole of runtime.Ops (DPOps, and GraphOps: LinalgOps,
// LayoutOps, NNOps, ElementwiseOps, ReduceOps). runtime.OpenDevice("cuda")
// opens it (register.go).
//
// Operands are []float32 (and []float64, []int32) slices. A slice that
// lies in memory this Device allocated — the Floats of its buffers and
// sub-slices of them — is passed to the kernels as it is; any other slice
// is host memory, staged through a device scratch area (copied in, and
// back out when the operation writes it), so that the engine's host-side
// scalars (norms, factors) work unchanged. The address tells which: under
// CUDA's unified addressing, device and host addresses never coincide.
//
// An operation that meets a driver error panics (the operation sets have
// no error results; an error there means a lost device). A Device is safe
// for concurrent use: its calls are serialized.
type Device struct {
	drv   Driver
	props Properties

	mu   sync.Mutex
	fn   map[string]Function
	args *Args
	// spans are the device allocations, sorted by address.
	spans []span
	// tracks are the open trackings of Alloc (TrackAllocs), innermost
	// last.
	tracks []*[]runtime.Buffer
	// scratch stages host operands; it grows to the largest call.
	scratch arena
	pending []copyBack
	// loop holds Contract's loop nest as int32s, reused from call to call.
	loop []int32
	// res receives the scalar results (SumSq, Dot, CountClipped's two).
	res [2]float64

	// tables holds NoiseTables (noise.cu); rk the AES round keys of rkKey.
	tables, rk DevicePtr
	rkKey      runtime.NoiseKey
	rkOK       bool

	// gathers holds the IndexMaps' device forms (layout.go).
	gathers map[*runtime.IndexMap]*gatherPlan

	maxGrid int

	// planData holds device copies of compile-time plans (a convolution's
	// geometry, a normalization's parameter tables), keyed by the plan's
	// pointer: see planCopy.
	planData map[any]DevicePtr
	// runParts holds the per-run sums of the last row normalization's
	// backward whose rows are runs (nn.go's runSums), for the parameter
	// gradients on the same x and dy that the plan asks for next.
	runParts runParts
	// shapes builds an operation's shape arguments, and shapeData holds
	// their device copies, one per distinct pair (stageShapes).
	shapes    []int64
	shapeData map[shapeKey]DevicePtr
	// tf32 runs the forward and input-gradient products of convolutions
	// in TF32 (SetTF32); of the batched products with an operand off 16
	// bytes (alignForTF32), tf32Staged counts those that ran in TF32 on an
	// aligned copy of their weight, tf32Unaligned those that ran in
	// float32 instead.
	tf32                      bool
	tf32Staged, tf32Unaligned int
	// inUse and peak are the bytes allocated now and at most
	// (MemoryStats); peakLog, with EnvPeak, what was held at the peak.
	inUse, peak int64
	peakLog     *peakLog
	// noDNN is set once the driver says it has no convolution library;
	// dnnRefused holds the convolutions the library refused or failed,
	// which take the Device's own path from then on; dnnRuns counts the
	// products it ran (conv.go's dnnConv).
	noDNN      bool
	dnnRefused map[*runtime.ConvShape]error
	dnnRuns    int
	// grouped holds the shapes with samples as groups
	// (ConvSampleWeightGrads), nil for one that cannot be.
	grouped map[groupedKey]*runtime.ConvShape
	// dnnArgs and dnnAxes are dnnConv's arguments, reused.
	dnnArgs ConvArgs
	dnnAxes [3][3]int
	// gemmArgs is gemm's argument to the driver, a field so that passing
	// its address does not move a local to the heap at every product.
	gemmArgs GemmArgs
	// paths holds, per shape and product, whether the library runs it
	// (true) or the GEMM path, as measured or kept (libOrGEMM);
	// pathsMeasured counts the measurements.
	paths         map[pathKey]bool
	pathsMeasured int
	// samplePaths holds, per shape with samples as groups (grouped's),
	// whether the library forms its per-sample gradients (true) or the
	// engine's unfolding path, as measured or kept (PreferSampleGrads);
	// samplesMeasured counts the measurements.
	samplePaths     map[*runtime.ConvShape]bool
	samplesMeasured int
	// prof is the operation profile (EnvProfile), nil when off.
	prof *profile
}

type span struct {
	p     DevicePtr
	bytes int
	who   string // the asker, with EnvPeak
}

// copyBack is a staged operand the operation writes: copied back to the
// host when the call ends.
type copyBack struct {
	host  unsafe.Pointer
	dev   DevicePtr
	bytes int
}

// Open returns the CUDA device: the first GPU through the driver (Real),
// or the emulation when DPFINETUNE_CUDA=emulate (emulate-guarded: with
// guarded memory).
func Open() (*Device, error) { return OpenOrdinal(0) }

// OpenOrdinal returns the CUDA device of the given ordinal (--device
// cuda:N): the driver's GPU N (RealDevice), or under DPFINETUNE_CUDA the
// emulation, which has one device, 0.
func OpenOrdinal(ordinal int) (*Device, error) {
	var drv Driver
	var err error
	switch v := os.Getenv(EnvDriver); v {
	case "emulate", "emulate-guarded":
		if ordinal != 0 {
			return nil, fmt.Errorf("cuda: no GPU %d: the emulation (%s=%s) has one device, 0", ordinal, EnvDriver, v)
		}
		if v == "emulate" {
			drv, err = Emulated()
		} else {
			drv, err = EmulatedGuarded()
		}
	default:
		drv, err = RealDevice(ordinal)
	}
	if err != nil {
		return nil, err
	}
	d, err := New(drv)
	if err != nil {
		drv.Close()
		return nil, err
	}
	return d, nil
}

// New returns the Device on drv: it compiles (or finds in the cache) and
// loads the kernel modules and uploads the noise tables. The Device's
// Close releases drv; if New fails, drv is still the caller's to close.
func New(drv Driver) (*Device, error) {
	d := &Device{drv: drv, props: drv.Properties(), fn: map[string]Function{}, args: new(Args), prof: newProfile(), peakLog: newPeakLog()}
	d.noDNN = strings.HasPrefix(d.props.ConvLibrary, "none")
	d.maxGrid = 16 * max(1, d.props.Multiprocessors)
	for mod, names := range deviceKernels {
		src, err := moduleSource(mod)
		if err != nil {
			return nil, err
		}
		m, err := drv.LoadModule(mod, src)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			f, err := drv.Function(m, n)
			if err != nil {
				return nil, fmt.Errorf("cuda: module %s: %w", mod, err)
			}
			d.fn[n] = f
		}
	}
	if err := d.uploadNoiseTables(); err != nil {
		return nil, err
	}
	return d, nil
}

// SetTF32 implements runtime.TF32Device: on, the GEMMs of convolutions'
// forward passes and input gradients (Conv, ConvTranspose, and their
// backward passes' dx) run in TF32 on the tensor cores; the weight
// gradients (ConvBackward's dw, ConvWeightGrad) and every other product
// stay float32.
func (d *Device) SetTF32(on bool) {
	d.mu.Lock()
	d.tf32 = on
	d.mu.Unlock()
}

// SetDeterministic implements runtime.DeterministicDevice: cuDNN's
// algorithms that are not deterministic are allowed (off) or not (on, the
// default) for the shapes chosen after it — their choices kept on disk
// apart — unless EnvCUDNNDeterministic fixes it. The Device's own kernels
// are deterministic either way.
func (d *Device) SetDeterministic(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.drv.(convDeterminism); ok {
		s.setConvDeterministic(on)
		d.props.ConvLibrary = d.drv.Properties().ConvLibrary
	}
}

// convDeterminism is a Driver whose convolution library can be kept to
// deterministic algorithms or not (nvidia.go with cuDNN).
type convDeterminism interface {
	setConvDeterministic(on bool)
}

// LimitMemory implements runtime.MemoryLimiter: the convolution library's
// workspace (Driver.ConvWorkspace) is bounded by a sixteenth of bytes,
// within the tenth of a --max-memory cap its estimate leaves, where that
// is below the bound it had (EnvCUDNNWorkspace); algorithms chosen beyond
// it are chosen again.
func (d *Device) LimitMemory(bytes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l, ok := d.drv.(convWorkspaceLimiter); ok && bytes > 0 {
		l.limitConvWorkspace(uint64(bytes / 16))
	}
}

// convWorkspaceLimiter is a Driver whose convolution library's workspace
// can be bounded below its own bound (Device.LimitMemory).
type convWorkspaceLimiter interface {
	limitConvWorkspace(bytes uint64)
}

// TF32 implements runtime.TF32Device.
func (d *Device) TF32() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tf32
}

// Properties describes the device.
func (d *Device) Properties() Properties { return d.props }

// Name implements runtime.Device.
func (d *Device) Name() string { return "cuda (" + d.props.Name + ")" }

// buffer is device memory of n float32 elements at p.
type buffer struct {
	d *Device
	p DevicePtr
	n int
}

func (b *buffer) Len() int { return b.n }

// Floats implements runtime.Buffer: a view of device memory, for the
// device's operations only (the host reads and writes it through CopyIn
// and CopyOut).
func (b *buffer) Floats() []float32 { return floatsAt(b.p, b.n) }

// Alloc implements runtime.Device: n zeroed float32 elements of device
// memory, held until Free or Close.
func (d *Device) Alloc(n int) (runtime.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("cuda: negative allocation %d", n)
	}
	if n == 0 {
		return &buffer{d: d}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.alloc(4 * n)
	if err != nil {
		return nil, err
	}
	b := &buffer{d: d, p: p, n: n}
	if k := len(d.tracks); k > 0 {
		*d.tracks[k-1] = append(*d.tracks[k-1], b)
	}
	return b, nil
}

// TrackAllocs implements runtime.AllocTracker: the buffers Alloc returns
// until stop, which a plan compiled meanwhile owns (runtime.Plan.Release).
// The device's own memory (scratch, compile-time plans, uploads) comes
// from alloc, not Alloc, and is never listed.
func (d *Device) TrackAllocs() (stop func() []runtime.Buffer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	list := new([]runtime.Buffer)
	d.tracks = append(d.tracks, list)
	return func() []runtime.Buffer {
		d.mu.Lock()
		defer d.mu.Unlock()
		if i := slices.Index(d.tracks, list); i >= 0 {
			d.tracks = slices.Delete(d.tracks, i, i+1)
		}
		return *list
	}
}

// alloc allocates device memory and records it (d.mu held).
func (d *Device) alloc(bytes int) (DevicePtr, error) {
	p, err := d.drv.Alloc(bytes)
	if err != nil {
		return 0, fmt.Errorf("cuda: allocating %d bytes: %w", bytes, err)
	}
	i := sort.Search(len(d.spans), func(i int) bool { return d.spans[i].p > p })
	d.spans = append(d.spans, span{})
	copy(d.spans[i+1:], d.spans[i:])
	d.spans[i] = span{p: p, bytes: bytes}
	d.inUse += int64(bytes)
	if d.peakLog != nil {
		d.spans[i].who = asker()
		if d.inUse > d.peak {
			d.peakLog.held = append(d.peakLog.held[:0], d.spans...)
		}
	}
	d.peak = max(d.peak, d.inUse)
	return p, nil
}

// free releases memory alloc returned (d.mu held).
func (d *Device) free(p DevicePtr) error {
	i := sort.Search(len(d.spans), func(i int) bool { return d.spans[i].p >= p })
	if i == len(d.spans) || d.spans[i].p != p {
		return fmt.Errorf("cuda: free of %#x, not an allocation of this device", uintptr(p))
	}
	d.inUse -= int64(d.spans[i].bytes)
	d.spans = append(d.spans[:i], d.spans[i+1:]...)
	return d.drv.Free(p)
}

// MemoryStats implements runtime.MemoryReporter: the device memory this
// Device holds now and the most it has held, in bytes: its allocations
// (buffers, scratch, staging, kernel tables) and the convolution
// library's workspace (Driver.ConvWorkspace), counted on top of the peak
// as if it had been held all along — an upper bound, never less.
func (d *Device) MemoryStats() (inUse, peak int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := int64(d.drv.ConvWorkspace())
	return d.inUse + ws, d.peak + ws
}

// Free releases a buffer of this device.
func (d *Device) Free(b runtime.Buffer) error {
	db, err := d.own(b)
	if err != nil || db.n == 0 {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err = d.free(db.p)
	db.p, db.n = 0, 0
	return err
}

// FreeFloats implements runtime.FloatsFreer: f must begin an allocation
// of d's, whose Buffer is not freed again.
func (d *Device) FreeFloats(f []float32) error {
	if cap(f) == 0 {
		return nil
	}
	p := DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(f))))
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.spans), func(i int) bool { return d.spans[i].p >= p })
	if i == len(d.spans) || d.spans[i].p != p {
		return fmt.Errorf("cuda: FreeFloats of %#x, not the start of an allocation of this device", uintptr(p))
	}
	return d.free(p)
}

func (d *Device) own(b runtime.Buffer) (*buffer, error) {
	db, ok := b.(*buffer)
	if !ok || db.d != d {
		return nil, fmt.Errorf("cuda: buffer of type %T is not a buffer of this device", b)
	}
	return db, nil
}

// CopyIn implements runtime.Device.
func (d *Device) CopyIn(dst runtime.Buffer, off int, src []float32) error {
	b, err := d.own(dst)
	if err != nil {
		return err
	}
	if off < 0 || off+len(src) > b.n {
		return fmt.Errorf("cuda: copy of %d elements at %d into a buffer of %d", len(src), off, b.n)
	}
	if len(src) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// src may be this device's memory (an engine's per-sample gradient
	// seeding a sub-plan's backward pass): a device-to-device copy, which
	// neither reads device memory as host memory nor waits for the host.
	if p := DevicePtr(uintptr(unsafe.Pointer(&src[0]))); d.isDevice(p, 4*len(src)) {
		return d.drv.CopyDtoD(b.p+DevicePtr(4*off), p, 4*len(src))
	}
	return d.drv.CopyHtoD(b.p+DevicePtr(4*off), unsafe.Pointer(&src[0]), 4*len(src))
}

// CopyOut implements runtime.Device.
func (d *Device) CopyOut(dst []float32, src runtime.Buffer, off int) error {
	b, err := d.own(src)
	if err != nil {
		return err
	}
	if off < 0 || off+len(dst) > b.n {
		return fmt.Errorf("cuda: copy of %d elements at %d from a buffer of %d", len(dst), off, b.n)
	}
	if len(dst) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := DevicePtr(uintptr(unsafe.Pointer(&dst[0]))); d.isDevice(p, 4*len(dst)) {
		return d.drv.CopyDtoD(p, b.p+DevicePtr(4*off), 4*len(dst))
	}
	return d.drv.CopyDtoH(unsafe.Pointer(&dst[0]), b.p+DevicePtr(4*off), 4*len(dst))
}

// Run implements runtime.Device: a compiled node is a host-side sequence
// of the device's operations.
func (d *Device) Run(k runtime.Kernel) (err error) {
	ck, ok := k.(*runtime.CPUKernel)
	if !ok {
		return fmt.Errorf("cuda: kernel %s of type %T is not a host-side sequence of operations", k.KernelName(), k)
	}
	defer runtime.CatchDeviceFault(&err, ck.Name)
	ck.Fn()
	return nil
}

// fault reports a failure of the device under an operation (runtime.DeviceFault).
func fault(err error) { panic(&runtime.DeviceFault{Err: err}) }

// Workers is 1: the device parallelizes inside each operation, so the
// engine gives it one sample at a time.
func (d *Device) Workers() int { return 1 }

// Synchronize waits for the device's work.
func (d *Device) Synchronize() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.Synchronize()
}

// Close releases every allocation and the driver.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.spans {
		d.drv.Free(s.p)
	}
	d.spans, d.scratch, d.gathers, d.planData, d.shapeData, d.inUse = nil, arena{}, nil, nil, nil, 0
	d.runParts = runParts{}
	if d.peakLog != nil {
		d.peakLog.report(d.peakLog.out, d.drv.ConvWorkspace())
		d.peakLog = nil
	}
	if d.prof != nil {
		d.prof.write(d.prof.out, 40)
		gemms := 0
		for _, lib := range d.paths {
			if !lib {
				gemms++
			}
		}
		unfolded := 0
		for _, lib := range d.samplePaths {
			if !lib {
				unfolded++
			}
		}
		fmt.Fprintf(d.prof.out, "cuda profile: convolution library %q: %d products, %d shapes refused; %d shapes' products measured against the GEMM path, %d of %d on it; %d per-sample gradients measured against the unfolding, %d of %d on it\n",
			d.props.ConvLibrary, d.dnnRuns, len(d.dnnRefused), d.pathsMeasured, gemms, len(d.paths), d.samplesMeasured, unfolded, len(d.samplePaths))
		for s, err := range d.dnnRefused { // one example
			fmt.Fprintf(d.prof.out, "  refused %s: %v\n", convKey(s), err)
			break
		}
		d.prof = nil
	}
	return d.drv.Close()
}

// isDevice reports whether [p, p+bytes) lies in one of d's allocations.
func (d *Device) isDevice(p DevicePtr, bytes int) bool {
	i := sort.Search(len(d.spans), func(i int) bool { return d.spans[i].p > p }) - 1
	return i >= 0 && uintptr(p)+uintptr(bytes) <= uintptr(d.spans[i].p)+uintptr(d.spans[i].bytes)
}

// arena is the scratch that stages host operands: chunks of device
// memory handed out in 256-byte-aligned pieces for one call, reset after
// it. A call that outgrows the last chunk gets a new one (the earlier
// pieces stay valid); reset merges the chunks into one of their total
// size, so a steady workload stages without allocating.
type arena struct {
	chunks []chunk
}

type chunk struct {
	p          DevicePtr
	size, used int
}

const minScratch = 1 << 20

// take returns bytes bytes of scratch (d.mu held).
func (d *Device) take(bytes int) (DevicePtr, error) {
	bytes = (bytes + 255) &^ 255
	a := &d.scratch
	if n := len(a.chunks); n > 0 && a.chunks[n-1].size-a.chunks[n-1].used >= bytes {
		c := &a.chunks[n-1]
		p := c.p + DevicePtr(c.used)
		c.used += bytes
		return p, nil
	}
	size := max(bytes, minScratch)
	if n := len(a.chunks); n > 0 {
		size = max(size, 2*a.chunks[n-1].size)
	}
	p, err := d.alloc(size)
	if err != nil {
		return 0, err
	}
	a.chunks = append(a.chunks, chunk{p, size, bytes})
	return p, nil
}

// resetScratch ends a call's use of the scratch (d.mu held).
func (d *Device) resetScratch() {
	a := &d.scratch
	if len(a.chunks) <= 1 {
		for i := range a.chunks {
			a.chunks[i].used = 0
		}
		return
	}
	total := 0
	for _, c := range a.chunks {
		total += c.size
		d.free(c.p)
	}
	a.chunks = a.chunks[:0]
	if p, err := d.alloc(total); err == nil {
		a.chunks = append(a.chunks, chunk{p, total, 0})
	}
}

// operand returns the device address of the operand at host, bytes long:
// the address itself when it is device memory of d, else a piece of
// scratch holding a copy (in) that is copied back when the call ends
// (out) (d.mu held).
func (d *Device) operand(host unsafe.Pointer, bytes int, in, out bool) DevicePtr {
	if bytes == 0 {
		return 0
	}
	p := DevicePtr(uintptr(host))
	if d.isDevice(p, bytes) {
		return p
	}
	s, err := d.take(bytes)
	if err != nil {
		fault(err)
	}
	if in {
		if err := d.drv.CopyHtoD(s, host, bytes); err != nil {
			fault(fmt.Errorf("cuda: staging an operand: %w", err))
		}
	}
	if out {
		d.pending = append(d.pending, copyBack{host, s, bytes})
	}
	return s
}

// Operand kinds: what a kernel does with an operand.
const (
	opIn    = iota // reads it
	opOut          // overwrites it
	opInOut        // reads and writes it
)

func f32(s []float32, kind int, d *Device) DevicePtr {
	if len(s) == 0 {
		return 0
	}
	return d.operand(unsafe.Pointer(&s[0]), 4*len(s), kind != opOut, kind != opIn)
}

func f64(s []float64, kind int, d *Device) DevicePtr {
	if len(s) == 0 {
		return 0
	}
	return d.operand(unsafe.Pointer(&s[0]), 8*len(s), kind != opOut, kind != opIn)
}

func i32(s []int32, d *Device) DevicePtr {
	if len(s) == 0 {
		return 0
	}
	return d.operand(unsafe.Pointer(&s[0]), 4*len(s), true, false)
}

// begin starts an operation: it locks d and returns the reset argument
// list.
func (d *Device) begin() *Args {
	d.mu.Lock()
	d.args.Reset()
	if d.prof != nil {
		d.drv.Synchronize()
		d.prof.opStart, d.prof.shape = time.Now(), ""
	}
	return d.args
}

// end finishes an operation: the staged outputs come back to the host
// (the copies wait for the kernels), the scratch is reset and d unlocked.
func (d *Device) end(op string) {
	defer d.mu.Unlock()
	for _, c := range d.pending {
		if err := d.drv.CopyDtoH(c.host, c.dev, c.bytes); err != nil {
			d.pending = d.pending[:0]
			d.resetScratch()
			fault(fmt.Errorf("cuda: %s: %w", op, err))
		}
	}
	d.pending = d.pending[:0]
	d.resetScratch()
	if d.prof != nil {
		host := time.Since(d.prof.opStart)
		d.drv.Synchronize()
		t := time.Since(d.prof.opStart)
		d.prof.add(d.prof.ops, op, t)
		d.prof.ops[op].host += host
		if d.prof.shape != "" {
			d.prof.add(d.prof.convs, op+" "+d.prof.shape, t)
			d.prof.shape = ""
		}
	}
}

// planCopy returns the device copy of the read-only compile-time plan key
// (a pointer), made from fill's bytes at its first use and kept until
// Close (d.mu held). The map holds the pointer, so the plan cannot be
// collected and its address reused by another while its copy is cached.
func (d *Device) planCopy(key any, fill func() []byte) DevicePtr {
	if p, ok := d.planData[key]; ok {
		return p
	}
	b := fill()
	p, err := d.alloc(max(len(b), 1))
	if err != nil {
		fault(err)
	}
	if len(b) > 0 {
		if err := d.drv.CopyHtoD(p, unsafe.Pointer(&b[0]), len(b)); err != nil {
			fault(fmt.Errorf("cuda: copying a plan to the device: %w", err))
		}
	}
	if d.planData == nil {
		d.planData = map[any]DevicePtr{}
	}
	d.planData[key] = p
	return p
}

// launch runs kernel name over n work items, a thread each (grid-stride
// loops cover the rest when the grid is capped) (d.mu held). Blocks are
// 256 threads, fewer (whole warps) for fewer items: the kernels loop over
// any block size. On the emulation, whose block threads are real threads
// woken and joined at each launch, blocks are 32 threads: a whole plan's
// thousands of launches run 3.5× faster so than with items-sized blocks
// (TestPlanOnCUDA on every fixture: 37 s → 10 s).
func (d *Device) launch(name string, n int64) {
	block := min(int64(256), max(32, (n+31)/32*32))
	if d.props.Emulated {
		block = 32
	}
	grid := min((n+block-1)/block, int64(d.maxGrid))
	d.launchGrid(name, D1(int(max(grid, 1))), D1(int(block)))
}

// launchSums runs one of the reductions that have two forms: perThread,
// a thread per result, or perBlock, a block per result whose threads
// split the terms and add their sums by block_sum, for n results of m
// terms each (d.mu held). The block form is for few results with many
// terms — a per-channel parameter's gradient over a batch of feature maps,
// where a thread per channel would leave the GPU nearly idle. The form
// and the block size depend on n and m alone, so that the sums' order
// depends on the shape alone (the emulation's blocks are one warp).
func (d *Device) launchSums(perThread, perBlock string, n, m int64) {
	if m < 64 || (m < 1024 && n > 1<<16) {
		d.launch(perThread, n)
		return
	}
	d.launchGrid(perBlock, D1(int(min(n, int64(d.maxGrid)))), D1(int(d.sumsBlock(m))))
}

// launchCols runs a column-tile reduction (a _cols kernel: cols_total)
// over n results of m terms each whose neighbouring results are
// neighbouring addresses: a block of 32 results × colRows(m) threads
// (d.mu held). The block's shape, and so the sums' order, depends on m
// alone.
func (d *Device) launchCols(name string, n, m int64) {
	d.launchGrid(name, D1(int(min((n+31)/32, int64(d.maxGrid)))), Dim3{32, uint32(d.colRows(m)), 1})
}

// colRows is a column tile's threads per result: a power of two, at
// least 64 terms a thread, at most 32 (two on the emulation, whose threads
// are host threads: enough for cols_total's tree to run).
func (d *Device) colRows(m int64) int64 {
	by := int64(1)
	for by < 32 && by*64 < m {
		by *= 2
	}
	if d.props.Emulated {
		by = min(by, 2)
	}
	return by
}

// innerKept reports whether a reduction of shape over the axes red keeps
// its innermost axis (of more than one element), so that neighbouring
// results are neighbouring addresses (launchCols).
func innerKept(shape []int, red []bool) bool {
	inner := len(shape) - 1
	for inner > 0 && shape[inner] == 1 {
		inner--
	}
	return inner >= 0 && !red[inner]
}

// sumsBlock is the block size of a block-per-result sum of m terms: about
// 32 terms a thread, from a warp to 1024 threads (one warp on the
// emulation, whose threads of a block are host threads).
func (d *Device) sumsBlock(m int64) int64 {
	if d.props.Emulated {
		return 32
	}
	return min(int64(1024), max(32, (m/32+31)/32*32))
}

// launchOne runs kernel name on one thread (d.mu held).
func (d *Device) launchOne(name string) { d.launchGrid(name, D1(1), D1(1)) }

func (d *Device) launchGrid(name string, grid, block Dim3) {
	var t0 time.Time
	if d.prof != nil {
		d.drv.Synchronize()
		t0 = time.Now()
	}
	if err := d.drv.Launch(d.fn[name], grid, block, 0, d.args); err != nil {
		fault(fmt.Errorf("cuda: %s: %w", name, err))
	}
	if d.prof != nil {
		d.drv.Synchronize()
		d.prof.add(d.prof.kernels, name, time.Since(t0))
	}
}

var (
	_ runtime.Device          = (*Device)(nil)
	_ runtime.VectorOps       = (*Device)(nil)
	_ runtime.ClipOps         = (*Device)(nil)
	_ runtime.OptimOps        = (*Device)(nil)
	_ runtime.NoiseOps        = (*Device)(nil)
	_ runtime.LinalgOps       = (*Device)(nil)
	_ runtime.LayoutOps       = (*Device)(nil)
	_ runtime.ElementwiseOps  = (*Device)(nil)
	_ runtime.PerSampleOps    = (*Device)(nil)
	_ runtime.DPOps           = (*Device)(nil)
	_ runtime.NNOps           = (*Device)(nil)
	_ runtime.ReduceOps       = (*Device)(nil)
	_ runtime.GraphOps        = (*Device)(nil)
	_ runtime.Ops             = (*Device)(nil)
	_ runtime.ConvSampleGrads = (*Device)(nil)
	_ runtime.ConvTapGrams    = (*Device)(nil)
)
