//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"github.com/ebitengine/purego"
)

// EnvCUDNN names cuDNN's library for the real driver, or "off" to run
// every convolution on the Device's own GEMM path.
const EnvCUDNN = "DPFINETUNE_CUDNN"

// cuDNN runs the convolutions' products on the GPU where it is found
// (libcudnn.so.9 or .8: PyTorch's NVIDIA wheels bring it), through its
// legacy convolution API (cudnn_cnn.h), which both versions keep: a
// tensor descriptor for X and Y, a filter descriptor for W, a convolution
// descriptor (cross-correlation, float32 compute, the group count, and
// the math type: CUDNN_FMA_MATH for float32 products, which never trades
// mantissa bits, CUDNN_TENSOR_OP_MATH for TF32), an algorithm chosen once
// per shape and product by cuDNN's measurement, kept on disk, or its
// heuristics (EnvCUDNNAlgo: the fastest that is deterministic — the same
// bits run after run, as the Device's own kernels; cuDNN's atomics-based
// ones are not, and run only under EnvCUDNNDeterministic=off — whose math
// type is the one asked for and whose workspace fits EnvCUDNNWorkspace), and
// the driver's own workspace, grown as an algorithm needs. It is optional:
// without it, or for a product it refuses, the Device takes its GEMM path
// (Driver.Conv's contract), so that cuDNN can only speed a product up.

// EnvCUDNNAlgo names how cuDNN's algorithm for each convolution's shape
// and product is chosen: "find" (or unset) by cuDNN's measurement of
// every algorithm on the GPU (cudnnFindConvolution…Algorithm, which
// allocates its own operands for the trial), "heuristic" by its
// heuristics' ranking (cudnnGetConvolution…Algorithm_v7), which costs
// nothing at a shape's first use but picked slower algorithms on an H100
// (docs/BENCHMARKS.md: bk 5–30 % slower on ResNet-50, VGG-16 and VGG-19).
// Either way the algorithm is the first deterministic one of the math
// type asked for and within EnvCUDNNWorkspace; among measured ones within
// dnnFindSlack of the fastest, the one with the smallest workspace, and
// one beyond dnnSmallWorkspace only where it is dnnLargeGain faster.
// A measured choice is kept on disk (dnnChoices: per GPU model, driver
// and cuDNN, under the module cache), so that a shape is measured once
// per machine and every later run — a seeded one included — runs the
// same algorithms and rounds the same way; only a machine's first run,
// or one after its cache is cleared, measures. A cuDNN without the
// measurement's entry points is asked its heuristics.
const EnvCUDNNAlgo = "DPFINETUNE_CUDNN_ALGO"

// EnvCUDNNDeterministic, set to "off", lets cuDNN run algorithms that are
// not deterministic (the atomics-based ones, which PyTorch's default
// allows): faster for some shapes' backward products (ResNet-50's bk step
// on an H100, fourth loan: 68.4 → 61.6 ms), but two runs of the same step
// may round differently. Set to "on", it keeps to the deterministic ones,
// so that a run repeats bit for bit on one machine, as the Device's own
// kernels do. Unset, the run decides (Device.SetDeterministic): the
// deterministic ones, unless the command asks otherwise — dpfinetune's
// train and audit with secure noise, which no two runs share, and bench.
// Either way clipping bounds each sample's contribution: the norms and
// clip factors are the Device's own kernels, and only the rounding of a
// convolution's sums changes.
const EnvCUDNNDeterministic = "DPFINETUNE_CUDNN_DETERMINISTIC"

// EnvCUDNNGEMM names whether cuDNN's products are measured against the
// Device's own GEMM path (cuBLAS over unfolded inputs): "measure", the
// default with cuDNN's algorithms by measurement (EnvCUDNNAlgo), times
// both at a shape's first use, each product back to back as in a step,
// and keeps the faster per shape and product on disk beside the
// algorithms; "off" runs cuDNN wherever it takes a shape, as the
// heuristics (EnvCUDNNAlgo=heuristic) always do. The same holds for a
// convolution's per-sample gradients, cuDNN's filter gradient of the
// samples as groups against the DP engine's unfolding path
// (PreferSampleGrads), timed per sample. cuDNN's legacy API spends
// a few hundred microseconds of host time in some calls (an H100's
// profile, docs/BENCHMARKS.md), more than the device's work of a small
// product: there cuBLAS's few microseconds win.
const EnvCUDNNGEMM = "DPFINETUNE_CUDNN_GEMM"

// EnvCUDNNWorkspace bounds, in MiB, the workspace a cuDNN algorithm may
// ask for: one that needs more is not chosen. Unset: a sixteenth of the
// device's memory, at most 4 GiB (dnnWorkspaceCap); either way a run's
// memory cap lowers it to a sixteenth of the cap (Device.LimitMemory). The bound was a fixed
// 256 MiB until an H100's kept choices (docs/BENCHMARKS.md) showed what it
// cost: VGG-16's 256-channel convolutions at 56×56 and 512-channel ones at
// 28×28, whose FFT and Winograd algorithms ask for more, ran the implicit
// GEMM at 3.6–5.2 ms a product where the half as wide layers beside them
// took 0.5–0.7 ms. A larger workspace is device memory held for the whole
// run (the Device counts it in its peak, MemoryStats), so beyond
// dnnSmallWorkspace an algorithm must also be dnnLargeGain faster than the
// fastest within it (pickAlgo). Where the workspace cannot be allocated,
// the shape takes the Device's GEMM path, as for any product cuDNN fails.
const EnvCUDNNWorkspace = "DPFINETUNE_CUDNN_WORKSPACE"

// dnnSmallWorkspace is the workspace a measured algorithm may ask for to
// be chosen for any gain (dnnFindSlack); dnnLargeGain is how much faster
// than the fastest within dnnSmallWorkspace one that asks for more must
// be.
const (
	dnnSmallWorkspace = 256 << 20
	dnnLargeGain      = 1.25
)

// dnnWorkspaceCap returns the bound on an algorithm's workspace for a
// device of total bytes (EnvCUDNNWorkspace).
func dnnWorkspaceCap(total int64) (uint64, error) {
	v := os.Getenv(EnvCUDNNWorkspace)
	if v == "" {
		return uint64(min(max(total, 0)/16, 4<<30)), nil
	}
	mib, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("cuda: %s=%q: want a size in MiB, such as 1024", EnvCUDNNWorkspace, v)
	}
	return mib << 20, nil
}

// cuDNN's enumerations (cudnn_ops.h, cudnn_cnn.h), the same in 8 and 9.
const (
	dnnFloat            = 0  // CUDNN_DATA_FLOAT
	dnnNCHW             = 0  // CUDNN_TENSOR_NCHW
	dnnCrossCorrelation = 1  // CUDNN_CROSS_CORRELATION
	dnnDefaultMath      = 0  // CUDNN_DEFAULT_MATH
	dnnTensorOpMath     = 1  // CUDNN_TENSOR_OP_MATH
	dnnFMAMath          = 3  // CUDNN_FMA_MATH
	dnnDeterministic    = 1  // CUDNN_DETERMINISTIC
	dnnAlgoCandidates   = 10 // algorithms asked for at most (cuDNN has 8 forward, 6 and 7 backward)
)

// cudnn is the library's entry points.
type cudnn struct {
	lib                                               string
	version                                           uintptr
	create, destroy, errorString, getVersion          uintptr
	createTensor, setTensorNd, destroyTensor          uintptr
	createFilter, setFilterNd, destroyFilter          uintptr
	createConv, setConvNd, setConvGroups, setConvMath uintptr
	destroyConv                                       uintptr
	fwdAlgos, fwdWorkspace, forward                   uintptr
	dataAlgos, dataWorkspace, backwardData            uintptr
	filterAlgos, filterWorkspace, backwardFilter      uintptr
	// find says the algorithms are chosen by cudnnFind…Algorithm
	// (fwdFind, dataFind, filterFind): EnvCUDNNAlgo unset or "find", and
	// the library has all three.
	find                          bool
	fwdFind, dataFind, filterFind uintptr
	// anyAlgo says algorithms that are not deterministic may be chosen:
	// EnvCUDNNDeterministic=off, or Device.SetDeterministic(false) where
	// the variable is unset (anyAlgoFixed says it is set).
	anyAlgo, anyAlgoFixed bool
	// paths says each product is measured against the GEMM path
	// (EnvCUDNNGEMM, with find).
	paths bool
	// maxWork bounds an algorithm's workspace (EnvCUDNNWorkspace).
	maxWork uint64
	entries []*uintptr
}

// dnnCompanions are the libraries cuDNN loads by name at run time, from
// wherever the loader finds them (9: libcudnn_graph, the engines, _ops,
// _cnn…; 8: libcudnn_ops_infer…): where cuDNN is found by its path (a
// Python's NVIDIA wheel, on no loader path) they are loaded first from its
// directory, dependencies before their dependents, so that its own
// lookups find them loaded.
var dnnCompanions = []string{
	"libcudnn_graph.so.9*", "libcudnn_engines_precompiled.so.9*", "libcudnn_engines_runtime_compiled.so.9*",
	"libcudnn_heuristic.so.9*", "libcudnn_ops.so.9*", "libcudnn_cnn.so.9*", "libcudnn_adv.so.9*",
	"libcudnn_ops_infer.so.8*", "libcudnn_ops_train.so.8*", "libcudnn_cnn_infer.so.8*", "libcudnn_cnn_train.so.8*",
}

// loadCUDNN loads cuDNN (EnvCUDNN's path, else the usual names) for a
// device of total bytes; nil and no error where it is turned off.
func loadCUDNN(total int64) (*cudnn, error) {
	if os.Getenv(EnvCUDNN) == "off" {
		return nil, nil
	}
	maxWork, err := dnnWorkspaceCap(total)
	if err != nil {
		return nil, err
	}
	h, lib, err := dlopenFound(EnvCUDNN, "libcudnn.so.[89]*", dnnCompanions, "libcudnn.so.9", "libcudnn.so.8", "libcudnn.so")
	if err != nil {
		return nil, err
	}
	d := &cudnn{lib: lib, maxWork: maxWork}
	if err := syms(h, lib, []*uintptr{
		&d.create, &d.destroy, &d.errorString, &d.getVersion,
		&d.createTensor, &d.setTensorNd, &d.destroyTensor,
		&d.createFilter, &d.setFilterNd, &d.destroyFilter,
		&d.createConv, &d.setConvNd, &d.setConvGroups, &d.setConvMath, &d.destroyConv,
		&d.fwdAlgos, &d.fwdWorkspace, &d.forward,
		&d.dataAlgos, &d.dataWorkspace, &d.backwardData,
		&d.filterAlgos, &d.filterWorkspace, &d.backwardFilter,
	}, []string{
		"cudnnCreate", "cudnnDestroy", "cudnnGetErrorString", "cudnnGetVersion",
		"cudnnCreateTensorDescriptor", "cudnnSetTensorNdDescriptor", "cudnnDestroyTensorDescriptor",
		"cudnnCreateFilterDescriptor", "cudnnSetFilterNdDescriptor", "cudnnDestroyFilterDescriptor",
		"cudnnCreateConvolutionDescriptor", "cudnnSetConvolutionNdDescriptor", "cudnnSetConvolutionGroupCount",
		"cudnnSetConvolutionMathType", "cudnnDestroyConvolutionDescriptor",
		"cudnnGetConvolutionForwardAlgorithm_v7", "cudnnGetConvolutionForwardWorkspaceSize", "cudnnConvolutionForward",
		"cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnGetConvolutionBackwardDataWorkspaceSize", "cudnnConvolutionBackwardData",
		"cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnGetConvolutionBackwardFilterWorkspaceSize", "cudnnConvolutionBackwardFilter",
	}); err != nil {
		return nil, err
	}
	switch a := os.Getenv(EnvCUDNNAlgo); a {
	case "heuristic":
	case "", "find":
		d.find = true
		for i, n := range []string{"cudnnFindConvolutionForwardAlgorithm", "cudnnFindConvolutionBackwardDataAlgorithm", "cudnnFindConvolutionBackwardFilterAlgorithm"} {
			p, err := purego.Dlsym(h, n)
			if err != nil || p == 0 {
				d.find = false // an old or trimmed cuDNN: its heuristics
				break
			}
			*[]*uintptr{&d.fwdFind, &d.dataFind, &d.filterFind}[i] = p
		}
	default:
		return nil, fmt.Errorf("cuda: %s=%q: want heuristic or find", EnvCUDNNAlgo, a)
	}
	switch v := os.Getenv(EnvCUDNNGEMM); v {
	case "", "measure":
		d.paths = d.find
	case "off":
	default:
		return nil, fmt.Errorf("cuda: %s=%q: want measure or off", EnvCUDNNGEMM, v)
	}
	switch v := os.Getenv(EnvCUDNNDeterministic); v {
	case "":
	case "on":
		d.anyAlgoFixed = true
	case "off":
		d.anyAlgo, d.anyAlgoFixed = true, true
	default:
		return nil, fmt.Errorf("cuda: %s=%q: want on or off", EnvCUDNNDeterministic, v)
	}
	d.version, _, _ = purego.SyscallN(d.getVersion)
	return d, nil
}

// call calls a cuDNN function and turns its cudnnStatus_t into an error
// naming op (cudnnGetErrorString's name for it).
//
//go:uintptrescapes
func (d *cudnn) call(op string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if r == 0 {
		return nil
	}
	s, _, _ := purego.SyscallN(d.errorString, r)
	return fmt.Errorf("cuda: %s: %s (%d)", op, cString(s), r)
}

// dnnAlgoPerf is cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t, one
// layout for the three.
type dnnAlgoPerf struct {
	algo, status int32
	time         float32
	_            int32
	memory       uint64
	determinism  int32
	mathType     int32
	_            [4]int32
}

// dnnPlan is a convolution's descriptors and, per product, the algorithm
// chosen and its workspace (algo −1: not chosen yet; −2: none fits).
type dnnPlan struct {
	key           dnnKey
	x, y, w, conv uintptr
	algo          [3]int32
	work          [3]uint64
	// ws is the workspace each product's algorithm asks for, queried at
	// its first run (wsKnown): the same for every later call, which then
	// makes one library call, the product's own.
	ws      [3]uint64
	wsKnown [3]bool
}

// dnnKey is what a plan depends on.
type dnnKey struct {
	n, c, m, group, rank int
	in, k, out, st, dil  [3]int
	pad                  [3]int
	tf32                 bool
}

// lift returns c's spatial sizes on at least two axes (cuDNN's tensors
// have four dimensions or five): a 1-D convolution gets a leading unit
// axis.
func lift(v []int, one int) []int {
	if len(v) == 1 {
		return []int{one, v[0]}
	}
	return v
}

func keyOf(c *ConvArgs) (dnnKey, error) {
	r := len(c.In)
	if r < 1 || r > 3 || len(c.Kernel) != r || len(c.Out) != r || len(c.Strides) != r || len(c.Dilations) != r || len(c.Pads) != r {
		return dnnKey{}, fmt.Errorf("cuda: cuDNN: a convolution of %d spatial axes with %d/%d/%d/%d/%d sizes", r, len(c.Kernel), len(c.Out), len(c.Strides), len(c.Dilations), len(c.Pads))
	}
	k := dnnKey{n: c.N, c: c.C, m: c.M, group: c.Group, rank: r, tf32: c.TF32}
	copy(k.in[:], c.In)
	copy(k.k[:], c.Kernel)
	copy(k.out[:], c.Out)
	copy(k.st[:], c.Strides)
	copy(k.dil[:], c.Dilations)
	copy(k.pad[:], c.Pads)
	return k, nil
}

// dnnPlanOf returns c's plan, building its descriptors at first use (the
// context current).
func (c *nvidia) dnnPlanOf(a *ConvArgs) (*dnnPlan, error) {
	key, err := keyOf(a)
	if err != nil {
		return nil, err
	}
	if p := c.dnnPlans[key]; p != nil {
		return p, nil
	}
	d := c.dnn
	p := &dnnPlan{key: key, algo: [3]int32{-1, -1, -1}}
	in, k, out := lift(a.In, 1), lift(a.Kernel, 1), lift(a.Out, 1)
	st, dil, pad := lift(a.Strides, 1), lift(a.Dilations, 1), lift(a.Pads, 0)
	i32 := func(v ...int) []int32 {
		out := make([]int32, len(v))
		for i, x := range v {
			out[i] = int32(x)
		}
		return out
	}
	packed := func(dims []int32) []int32 { // NC… strides of a contiguous tensor
		s := make([]int32, len(dims))
		acc := int32(1)
		for i := len(dims) - 1; i >= 0; i-- {
			s[i] = acc
			acc *= dims[i]
		}
		return s
	}
	tensor := func(desc *uintptr, sizes ...int) error {
		dims := i32(sizes...)
		if err := d.call("cudnnCreateTensorDescriptor", d.createTensor, uintptr(unsafe.Pointer(desc))); err != nil {
			return err
		}
		str := packed(dims)
		return d.call("cudnnSetTensorNdDescriptor", d.setTensorNd, *desc, dnnFloat, uintptr(len(dims)),
			uintptr(unsafe.Pointer(&dims[0])), uintptr(unsafe.Pointer(&str[0])))
	}
	g := max(a.Group, 1)
	err = errors.Join(
		tensor(&p.x, append([]int{a.N, a.C}, in...)...),
		tensor(&p.y, append([]int{a.N, a.M}, out...)...),
	)
	if err == nil {
		fdims := i32(append([]int{a.M, a.C / g}, k...)...)
		err = d.call("cudnnCreateFilterDescriptor", d.createFilter, uintptr(unsafe.Pointer(&p.w)))
		if err == nil {
			err = d.call("cudnnSetFilterNdDescriptor", d.setFilterNd, p.w, dnnFloat, dnnNCHW, uintptr(len(fdims)), uintptr(unsafe.Pointer(&fdims[0])))
		}
	}
	if err == nil {
		pads, strides, dils := i32(pad...), i32(st...), i32(dil...)
		math := uintptr(dnnFMAMath)
		if a.TF32 {
			math = dnnTensorOpMath
		}
		err = d.call("cudnnCreateConvolutionDescriptor", d.createConv, uintptr(unsafe.Pointer(&p.conv)))
		if err == nil {
			err = errors.Join(
				d.call("cudnnSetConvolutionNdDescriptor", d.setConvNd, p.conv, uintptr(len(pads)), uintptr(unsafe.Pointer(&pads[0])),
					uintptr(unsafe.Pointer(&strides[0])), uintptr(unsafe.Pointer(&dils[0])), dnnCrossCorrelation, dnnFloat),
				d.call("cudnnSetConvolutionGroupCount", d.setConvGroups, p.conv, uintptr(g)),
				d.call("cudnnSetConvolutionMathType", d.setConvMath, p.conv, math))
		}
	}
	if err != nil {
		c.dnnFree(p)
		return nil, err
	}
	if c.dnnPlans == nil {
		c.dnnPlans = map[dnnKey]*dnnPlan{}
	}
	c.dnnPlans[key] = p
	return p, nil
}

// dnnFree destroys p's descriptors.
func (c *nvidia) dnnFree(p *dnnPlan) error {
	d := c.dnn
	var errs []error
	for _, t := range []uintptr{p.x, p.y} {
		if t != 0 {
			errs = append(errs, d.call("cudnnDestroyTensorDescriptor", d.destroyTensor, t))
		}
	}
	if p.w != 0 {
		errs = append(errs, d.call("cudnnDestroyFilterDescriptor", d.destroyFilter, p.w))
	}
	if p.conv != 0 {
		errs = append(errs, d.call("cudnnDestroyConvolutionDescriptor", d.destroyConv, p.conv))
	}
	return errors.Join(errs...)
}

// dnnAlgo chooses p's algorithm for product kind: the choice kept on
// disk from an earlier measurement, else cuDNN's measurement (kept on
// disk in turn) or its heuristics (EnvCUDNNAlgo). Either way the choice is
// deterministic, of the math type asked for (FMA: float32, no TF32) and
// needs a workspace within EnvCUDNNWorkspace (pickAlgo).
func (c *nvidia) dnnAlgo(p *dnnPlan, kind ConvKind, tf32 bool) error {
	if p.algo[kind] >= 0 {
		return nil
	}
	if p.algo[kind] == -2 {
		return fmt.Errorf("cuda: cuDNN: no %s algorithm fits", dnnKindName[kind])
	}
	d := c.dnn
	var key string
	if d.find {
		if c.dnnChoices == nil {
			c.dnnChoices = openDNNChoices(c.cache, c.props, d)
		}
		key = dnnChoiceKey(p.key, kind)
		if ch, ok := c.dnnChoices.get(key); ok {
			p.algo[kind], p.work[kind] = ch.Algo, ch.Workspace
			return nil
		}
	}
	perf := new([dnnAlgoCandidates]dnnAlgoPerf)
	got := new(int32)
	// The heuristics' and the measurement's entry points take the same
	// arguments: the descriptors in the product's order, the count asked
	// for, the count returned and the results.
	names := [3][2]string{
		{"cudnnGetConvolutionForwardAlgorithm_v7", "cudnnFindConvolutionForwardAlgorithm"},
		{"cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnFindConvolutionBackwardDataAlgorithm"},
		{"cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnFindConvolutionBackwardFilterAlgorithm"},
	}[kind]
	fns := [3][2]uintptr{{d.fwdAlgos, d.fwdFind}, {d.dataAlgos, d.dataFind}, {d.filterAlgos, d.filterFind}}[kind]
	desc := [3][4]uintptr{{p.x, p.w, p.conv, p.y}, {p.w, p.y, p.conv, p.x}, {p.x, p.y, p.conv, p.w}}[kind]
	how := 0
	if d.find {
		how = 1
	}
	if err := d.call(names[how], fns[how], c.dnnHandle, desc[0], desc[1], desc[2], desc[3], dnnAlgoCandidates, uintptr(unsafe.Pointer(got)), uintptr(unsafe.Pointer(&perf[0]))); err != nil {
		return err
	}
	want := int32(dnnFMAMath)
	if tf32 {
		want = dnnTensorOpMath
	}
	best := pickAlgo(perf[:min(int(*got), dnnAlgoCandidates)], want, d.find, !d.anyAlgo, d.maxWork)
	if best < 0 {
		p.algo[kind] = -2
		which := "deterministic "
		if d.anyAlgo {
			which = ""
		}
		return fmt.Errorf("cuda: cuDNN: none of %d %s algorithms is %swith math type %d and a workspace of at most %d bytes (%s)", *got, dnnKindName[kind], which, want, d.maxWork, EnvCUDNNWorkspace)
	}
	p.algo[kind], p.work[kind] = perf[best].algo, perf[best].memory
	if d.find {
		c.dnnFound++
		c.dnnChoices.put(key, dnnChoice{Algo: perf[best].algo, Workspace: perf[best].memory, MS: perf[best].time})
	}
	return nil
}

// dnnFindSlack is how much slower than the fastest a measured algorithm
// may be and still be chosen for a smaller workspace: cuDNN's trial times
// vary by a few per cent run to run, a workspace is device memory held for
// the whole run.
const dnnFindSlack = 1.05

// pickAlgo returns the index in perf (cuDNN's ranking, best first) of the
// algorithm to run, or −1: the first that succeeded, is deterministic
// (where deterministic asks it), of math type want (or the default math,
// which runs under the descriptor's) and within maxWork bytes of
// workspace; for a measurement (measured), among those within
// dnnFindSlack of its time, the one with the smallest workspace, and one
// asking for more than dnnSmallWorkspace only where it is dnnLargeGain
// faster than the choice within dnnSmallWorkspace.
func pickAlgo(perf []dnnAlgoPerf, want int32, measured, deterministic bool, maxWork uint64) int {
	// The heuristics list an algorithm per math type it runs in; one
	// listed for CUDNN_DEFAULT_MATH (0) runs under the descriptor's math
	// type too, which stays the one asked for.
	ok := func(q *dnnAlgoPerf, limit uint64) bool {
		return q.status == 0 && (q.determinism == dnnDeterministic || !deterministic) && (q.mathType == want || q.mathType == dnnDefaultMath) && q.memory <= limit
	}
	pick := func(limit uint64) int {
		best := -1
		for i := range perf {
			if ok(&perf[i], limit) {
				best = i
				break
			}
		}
		if best < 0 || !measured {
			return best
		}
		slack := perf[best].time * dnnFindSlack
		for i := best + 1; i < len(perf); i++ {
			if q := &perf[i]; ok(q, limit) && q.time <= slack && q.memory < perf[best].memory {
				best = i
			}
		}
		return best
	}
	best := pick(maxWork)
	if measured && best >= 0 && perf[best].memory > dnnSmallWorkspace {
		if small := pick(min(maxWork, dnnSmallWorkspace)); small >= 0 && perf[small].time <= perf[best].time*dnnLargeGain {
			best = small
		}
	}
	return best
}

var dnnKindName = [3]string{"forward", "backward-data", "backward-filter"}

// limitConvWorkspace implements convWorkspaceLimiter: an algorithm's
// workspace is bounded by bytes where that is below the bound cuDNN was
// loaded with; the choices kept on disk are those of the new bound (a
// file of their own), products chosen beyond it choose again, and a
// workspace grown beyond it is released (the context current).
func (c *nvidia) limitConvWorkspace(bytes uint64) {
	if c.dnn == nil || bytes >= c.dnn.maxWork {
		return
	}
	c.dnn.maxWork = bytes
	c.dnnChoices = nil
	for _, p := range c.dnnPlans {
		for kind := range p.algo {
			if p.algo[kind] >= 0 && p.work[kind] > bytes {
				p.algo[kind], p.wsKnown[kind] = -1, false
			}
		}
	}
	if uint64(c.dnnWorkLen) > bytes && c.dnnWork != 0 {
		if done, err := c.bind(); err == nil {
			if c.call("cuMemFree", c.cu.memFree, uintptr(c.dnnWork)) == nil {
				c.dnnWork, c.dnnWorkLen = 0, 0
			}
			done()
		}
	}
}

// describe is Properties.ConvLibrary with cuDNN: the library and how
// its algorithms are chosen.
func (d *cudnn) describe() string {
	s := fmt.Sprintf("cuDNN %d (%s)", d.version, d.lib)
	if d.paths {
		s += " or GEMMs, whichever measures faster"
	}
	if d.find {
		s += ", algorithms by measurement"
	} else {
		s += ", algorithms by heuristics"
	}
	if d.anyAlgo {
		s += ", nondeterministic ones allowed"
	}
	return s
}

// setConvDeterministic implements convDeterminism: the algorithms chosen
// so far are chosen again under the new setting, from its own file of
// kept choices.
func (c *nvidia) setConvDeterministic(on bool) {
	if c.dnn == nil || c.dnn.anyAlgoFixed || c.dnn.anyAlgo == !on {
		return
	}
	c.dnn.anyAlgo = !on
	c.dnnChoices = nil
	for _, p := range c.dnnPlans {
		for kind := range p.algo {
			if p.algo[kind] >= 0 {
				p.algo[kind], p.wsKnown[kind] = -1, false
			}
		}
	}
	c.props.ConvLibrary = c.dnn.describe()
}

// dnnWorkspace returns device memory of at least n bytes, the driver's
// workspace grown as needed (the context current).
func (c *nvidia) dnnWorkspace(n uint64) (DevicePtr, error) {
	if n == 0 {
		return 0, nil
	}
	if n > uint64(c.dnnWorkLen) {
		if c.dnnWork != 0 {
			if err := c.call("cuMemFree", c.cu.memFree, uintptr(c.dnnWork)); err != nil {
				return 0, err
			}
			c.dnnWork, c.dnnWorkLen = 0, 0
		}
		p := new(DevicePtr)
		if err := c.call("cuMemAlloc", c.cu.memAlloc, uintptr(unsafe.Pointer(p)), uintptr(n)); err != nil {
			return 0, err
		}
		c.dnnWork, c.dnnWorkLen = *p, int(n)
	}
	return c.dnnWork, nil
}

// ConvPath implements pathKeeper with the choices kept beside cuDNN's
// algorithms (dnnChoices).
func (c *nvidia) ConvPath(a *ConvArgs, rival pathRival) (lib, kept, measure bool) {
	if c.dnn == nil || !c.dnn.paths {
		return true, false, false
	}
	k, err := keyOf(a)
	if err != nil {
		return true, false, false
	}
	if c.dnnChoices == nil {
		c.dnnChoices = openDNNChoices(c.cache, c.props, c.dnn)
	}
	ch, ok := c.dnnChoices.getPath(pathChoiceKey(k, a.Kind, rival))
	return ch.Library, ok, true
}

// KeepConvPath implements pathKeeper.
func (c *nvidia) KeepConvPath(a *ConvArgs, rival pathRival, lib bool, libMS, rivalMS float32) {
	k, err := keyOf(a)
	if err != nil || c.dnn == nil {
		return
	}
	if c.dnnChoices == nil {
		c.dnnChoices = openDNNChoices(c.cache, c.props, c.dnn)
	}
	c.dnnChoices.putPath(pathChoiceKey(k, a.Kind, rival), pathChoice{Library: lib, LibraryMS: libMS, GEMMMS: rivalMS})
}

// ConvWorkspace implements Driver: cuDNN's workspace.
func (c *nvidia) ConvWorkspace() int { return c.dnnWorkLen }

// Conv implements Driver with cuDNN: the product a describes on the
// default stream, as the kernels and the GEMMs.
func (c *nvidia) Conv(a *ConvArgs) error {
	if c.dnn == nil {
		return ErrNoConvLibrary
	}
	done, err := c.bind()
	if err != nil {
		return err
	}
	defer done()
	if c.dnnHandle == 0 {
		h := new(uintptr)
		if err := c.dnn.call("cudnnCreate", c.dnn.create, uintptr(unsafe.Pointer(h))); err != nil {
			return err
		}
		c.dnnHandle = *h
	}
	p, err := c.dnnPlanOf(a)
	if err != nil {
		return err
	}
	if err := c.dnnAlgo(p, a.Kind, a.TF32); err != nil {
		return err
	}
	// The size is written into the plan itself (heap memory already), so
	// that no call moves a local to the heap.
	wsp := uintptr(unsafe.Pointer(&p.ws[a.Kind]))
	switch {
	case p.wsKnown[a.Kind]:
	case a.Kind == ConvForward:
		err = c.dnn.call("cudnnGetConvolutionForwardWorkspaceSize", c.dnn.fwdWorkspace, c.dnnHandle, p.x, p.w, p.conv, p.y, uintptr(p.algo[a.Kind]), wsp)
	case a.Kind == ConvBackwardData:
		err = c.dnn.call("cudnnGetConvolutionBackwardDataWorkspaceSize", c.dnn.dataWorkspace, c.dnnHandle, p.w, p.y, p.conv, p.x, uintptr(p.algo[a.Kind]), wsp)
	default:
		err = c.dnn.call("cudnnGetConvolutionBackwardFilterWorkspaceSize", c.dnn.filterWorkspace, c.dnnHandle, p.x, p.y, p.conv, p.w, uintptr(p.algo[a.Kind]), wsp)
	}
	if err != nil {
		return err
	}
	p.wsKnown[a.Kind] = true
	wsSize := p.ws[a.Kind]
	// The caller's lent workspace where it is large enough (the plan's:
	// free during the product), so that the driver's own grows only for
	// the algorithms that need more.
	ws := a.Work
	if ws == 0 || uint64(a.WorkBytes) < wsSize {
		if ws, err = c.dnnWorkspace(wsSize); err != nil {
			return err
		}
	}
	// α and β through host pointers, read during the call.
	ab := c.ab
	ab[0], ab[1] = a.Alpha, a.Beta
	alpha, beta := uintptr(unsafe.Pointer(&ab[0])), uintptr(unsafe.Pointer(&ab[1]))
	algo := uintptr(p.algo[a.Kind])
	switch a.Kind {
	case ConvForward:
		err = c.dnn.call("cudnnConvolutionForward", c.dnn.forward, c.dnnHandle, alpha, p.x, uintptr(a.X), p.w, uintptr(a.W),
			p.conv, algo, uintptr(ws), uintptr(wsSize), beta, p.y, uintptr(a.Y))
	case ConvBackwardData:
		err = c.dnn.call("cudnnConvolutionBackwardData", c.dnn.backwardData, c.dnnHandle, alpha, p.w, uintptr(a.W), p.y, uintptr(a.Y),
			p.conv, algo, uintptr(ws), uintptr(wsSize), beta, p.x, uintptr(a.X))
	default:
		err = c.dnn.call("cudnnConvolutionBackwardFilter", c.dnn.backwardFilter, c.dnnHandle, alpha, p.x, uintptr(a.X), p.y, uintptr(a.Y),
			p.conv, algo, uintptr(ws), uintptr(wsSize), beta, p.w, uintptr(a.W))
	}
	runtime.KeepAlive(ab)
	return err
}

// dnnClose releases cuDNN's plans, workspace and handle (the context
// current).
func (c *nvidia) dnnClose() error {
	if c.dnn == nil {
		return nil
	}
	var errs []error
	for k, p := range c.dnnPlans {
		errs = append(errs, c.dnnFree(p))
		delete(c.dnnPlans, k)
	}
	if c.dnnWork != 0 {
		errs = append(errs, c.call("cuMemFree", c.cu.memFree, uintptr(c.dnnWork)))
		c.dnnWork, c.dnnWorkLen = 0, 0
	}
	if c.dnnHandle != 0 {
		errs = append(errs, c.dnn.call("cudnnDestroy", c.dnn.destroy, c.dnnHandle))
		c.dnnHandle = 0
	}
	return errors.Join(errs...)
}
