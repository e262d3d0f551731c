package cuda

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// Convolutions as GEMMs (the kernels conv_unfold, conv_fold, conv_pack_out
// and add_channel_bias of kernels/nn.cu, the products through
// Driver.Gemm: cuBLAS on the GPU). A convolution is a linear layer on its
// unfolded input (the paper §3): per group, y_i = W·col_i with col_i the
// D×T unfolded input of sample i, dx_i = fold(Wᵀ·dy_i) and dW = Σ_i
// dy_i·col_iᵀ. The direct kernels (conv_fwd, conv_dx, conv_dw: a thread
// per element written, looping over every term) leave a GPU's arithmetic
// units idle on any real layer; cuBLAS runs these products near the
// device's peak, as the CPU runs them on its SGEMM.
//
// The samples go in chunks of nb whose unfolded inputs, D × nb·T, fit the
// scratch (convScratch): the forward and input-gradient products are one
// batched GEMM per chunk and group (sample j's T columns at row stride
// nb·T; a pointwise convolution reads x and writes dx in place, unfolding
// nothing), and the weight gradient one GEMM over the chunk's nb·T
// positions, with the output gradient packed beside the unfolded input
// (conv_pack_out), accumulated over the chunks by β = 1. Shapes with few
// columns or rows per group (depthwise convolutions, D < 16 or fewer than
// 8 output channels per group) keep the direct kernels, whose few terms
// per element cost less than a GEMM's launch.

// Convolution paths: convAuto chooses by shape (convByGEMM); the others
// force one, so that the tests run both on every shape.
const (
	convAuto = iota
	convGEMMs
	convDirect
)

// convPath selects the convolution kernels (tests set it).
var convPath = convAuto

// convChunkFloats bounds the scratch of a chunk, in float32 elements
// (64 MiB), unless one sample needs more; the tests lower it to run
// several chunks.
var convChunkFloats = 1 << 24

// convByGEMM reports whether the convolution s runs as GEMMs.
func convByGEMM(s *runtime.ConvShape) bool {
	mg := s.M / max(s.Group, 1)
	if s.D == 0 || s.T == 0 || mg == 0 || s.N == 0 {
		return false
	}
	switch convPath {
	case convGEMMs:
		return true
	case convDirect:
		return false
	}
	return s.D >= 16 && mg >= 8
}

// pointwise reports whether the convolution s reads each input position
// once, in place: one tap, unit strides, no padding (the unfolded input
// of a sample is its input).
func pointwise(s *runtime.ConvShape) bool {
	if s.K != 1 || s.T != s.InSize {
		return false
	}
	for _, v := range s.Strides {
		if v != 1 {
			return false
		}
	}
	for _, v := range s.Pads {
		if v != 0 {
			return false
		}
	}
	return true
}

// convPerSample is a sample's share of the GEMM path's scratch: its
// unfolded input (D×T) and packed output gradient (M/Group × T).
func convPerSample(s *runtime.ConvShape) int { return s.T * (s.D + s.M/max(s.Group, 1)) }

// convChunk is the number of samples a chunk holds.
func convChunk(s *runtime.ConvShape) int {
	return max(1, min(s.N, convChunkFloats/max(convPerSample(s), 1)))
}

// convScratch is the scratch, in elements, of the GEMM path of s: a
// chunk's unfolded inputs and packed output gradients; 0 on the direct
// kernels.
func convScratch(s *runtime.ConvShape) int {
	if !convByGEMM(s) {
		return 0
	}
	return convChunk(s) * convPerSample(s)
}

// convWork returns the device address of n elements of scratch: ws's when
// it is device memory of d that long, else a piece of the call's staging
// scratch (d.mu held).
func (d *Device) convWork(ws []float32, n int) DevicePtr {
	if n > 0 && len(ws) >= n {
		if p := DevicePtr(uintptr(unsafe.Pointer(&ws[0]))); d.isDevice(p, 4*n) {
			return p
		}
	}
	p, err := d.take(4 * n)
	if err != nil {
		fault(fmt.Errorf("cuda: convolution scratch: %w", err))
	}
	return p
}

// at is the address of element i of the float32 array at p.
func at(p DevicePtr, i int) DevicePtr { return p + DevicePtr(4*i) }

// gemm runs one Driver.Gemm on device addresses (d.mu held): a batch's
// operand addresses written by gemm_ptrs into the call's scratch first,
// where the driver takes them (a real GPU's; the emulation computes its
// products from the strides). A batch in TF32 whose operands are not all
// 16-byte aligned is aligned or runs in float32 (alignForTF32).
func (d *Device) gemm(g GemmArgs, op string) {
	if g.TF32 && g.Batch > 1 && !g.tensorAligned() {
		d.alignForTF32(&g)
	}
	if g.Batch > 1 && !d.props.Emulated {
		g.Ptrs = d.scratch64(3 * g.Batch) // 8-byte addresses
		d.args.Reset()
		d.args.Ptr(g.A).I64(int64(g.StrideA)).Ptr(g.B).I64(int64(g.StrideB)).Ptr(g.C).I64(int64(g.StrideC)).I64(int64(g.Batch)).Ptr(g.Ptrs)
		d.launch("gemm_ptrs", int64(g.Batch))
	}
	d.gemmArgs = g
	if err := d.drv.Gemm(&d.gemmArgs); err != nil {
		fault(fmt.Errorf("cuda: %s: %dx%dx%d GEMM (batch %d): %w", op, g.M, g.N, g.K, g.Batch, err))
	}
}

// alignForTF32 makes a batch of TF32 products whose operands are not all
// 16-byte aligned one the tensor cores take (GemmArgs.TF32), or float32
// (d.mu held). A convolution's weight shared by every product (bk's
// trainable weights lie back to back in one block, runtime.Plan.ParamBlock,
// some off 16 bytes) is copied to an aligned piece of the call's scratch
// first: a copy of one weight against a product per sample. Float32
// rounds less; it stays for the rest (an activation whose samples are not
// 16 bytes apart).
func (d *Device) alignForTF32(g *GemmArgs) {
	a := *g
	if a.StrideA == 0 && uintptr(a.A)%16 != 0 {
		la, _, _ := a.extents()
		if p, err := d.take(4 * la); err == nil && d.drv.CopyDtoD(p, a.A, 4*la) == nil {
			a.A = p
		}
	}
	if a.tensorAligned() {
		*g = a
		d.tf32Staged++
		return
	}
	g.TF32 = false
	d.tf32Unaligned++
}

// convOperands is a convolution's geometry (device copy), its scratch and
// the sizes the GEMM path uses.
type convOperands struct {
	s      *runtime.ConvShape
	geom   DevicePtr
	work   DevicePtr
	groups int
	cg, mg int
	nb     int
	point  bool
}

// convSetup prepares the GEMM path of s (d.mu held).
func (d *Device) convSetup(s *runtime.ConvShape, ws []float32) *convOperands {
	g := max(s.Group, 1)
	return &convOperands{s: s, geom: d.convGeometry(s), work: d.convWork(ws, convScratch(s)),
		groups: g, cg: s.C / g, mg: s.M / g, nb: convChunk(s), point: pointwise(s)}
}

// unfoldSeg is conv_unfold's UNFOLD_SEG: the positions of a row a warp
// unfolds.
const unfoldSeg = 1024

// unfold launches conv_unfold of the chunk [n0, n0+nb) of x, group grp,
// into the scratch: a warp per segment of unfoldSeg positions of a row.
func (d *Device) unfold(c *convOperands, x DevicePtr, grp, n0, nb int) {
	d.args.Reset()
	d.args.Ptr(c.geom).Ptr(x).I32(int32(grp)).I64(int64(n0)).I64(int64(nb)).Ptr(c.work)
	d.launch("conv_unfold", 32*int64(c.s.D*nb)*int64((c.s.T+unfoldSeg-1)/unfoldSeg))
}

// forChunks calls fn for every chunk [n0, n0+b) of the batch and group
// grp, chunk by chunk: chunks of c.nb samples, or the whole batch for a
// pointwise convolution, whose products read and write the tensors in
// place and need no scratch.
func (c *convOperands) forChunks(fn func(n0, b, grp int)) {
	nb := c.nb
	if c.point {
		nb = c.s.N
	}
	for n0 := 0; n0 < c.s.N; n0 += nb {
		for grp := 0; grp < c.groups; grp++ {
			fn(n0, min(nb, c.s.N-n0), grp)
		}
	}
}

// convForward computes y = conv(x, w) + bias (bias may be 0) on the GEMM path.
func (d *Device) convForward(c *convOperands, x, w, bias, y DevicePtr) {
	s := c.s
	c.forChunks(func(n0, b, grp int) {
		g := GemmArgs{M: c.mg, N: s.T, K: s.D, Alpha: 1, A: at(w, grp*c.mg*s.D), LDA: s.D,
			C: at(y, (n0*s.M+grp*c.mg)*s.T), LDC: s.T, StrideC: s.M * s.T, Batch: b, TF32: d.tf32}
		if c.point {
			g.B, g.LDB, g.StrideB = at(x, (n0*s.C+grp*c.cg)*s.InSize), s.InSize, s.C*s.InSize
		} else {
			d.unfold(c, x, grp, n0, b)
			g.B, g.LDB, g.StrideB = c.work, b*s.T, s.T
		}
		d.gemm(g, "Conv")
	})
	if bias != 0 {
		d.addChannelBias(y, bias, s.N, s.M, s.T)
	}
}

// convInputGrad computes dx = convᵀ(dy, w) + bias (bias may be 0) on the GEMM
// path: the convolution's input gradient, and ConvTranspose.
func (d *Device) convInputGrad(c *convOperands, dy, w, bias, dx DevicePtr) {
	s := c.s
	c.forChunks(func(n0, b, grp int) {
		g := GemmArgs{TransA: true, M: s.D, N: s.T, K: c.mg, Alpha: 1, A: at(w, grp*c.mg*s.D), LDA: s.D,
			B: at(dy, (n0*s.M+grp*c.mg)*s.T), LDB: s.T, StrideB: s.M * s.T, Batch: b, TF32: d.tf32}
		if c.point {
			g.C, g.LDC, g.StrideC = at(dx, (n0*s.C+grp*c.cg)*s.InSize), s.InSize, s.C*s.InSize
			d.gemm(g, "ConvBackward")
			return
		}
		g.C, g.LDC, g.StrideC = c.work, b*s.T, s.T
		d.gemm(g, "ConvBackward")
		d.args.Reset()
		d.args.Ptr(c.geom).Ptr(c.work).I32(int32(grp)).I64(int64(n0)).I64(int64(b)).Ptr(bias).Ptr(dx)
		d.launch("conv_fold", int64(b*c.cg*s.InSize))
	})
	if c.point && bias != 0 {
		d.addChannelBias(dx, bias, s.N, s.C, s.InSize)
	}
}

// convWeightGradGEMM computes dw = Σ_i dy_i·col_iᵀ over the batch on the GEMM
// path: one product per chunk and group over the chunk's positions. Never
// in TF32: in a DP step this sum is the clipped Σ_i C_i g_i, and its clip
// bound holds only on float32 products of the norms' own operands.
func (d *Device) convWeightGradGEMM(c *convOperands, x, dy, dw DevicePtr) {
	s := c.s
	packed := at(c.work, c.nb*s.T*s.D)
	for n0 := 0; n0 < s.N; n0 += c.nb {
		b := min(c.nb, s.N-n0)
		for grp := 0; grp < c.groups; grp++ {
			d.unfold(c, x, grp, n0, b)
			d.args.Reset()
			d.args.Ptr(c.geom).Ptr(dy).I32(int32(grp)).I64(int64(n0)).I64(int64(b)).Ptr(packed)
			d.launch("conv_pack_out", int64(c.mg*b*s.T))
			var beta float32
			if n0 > 0 {
				beta = 1
			}
			d.gemm(GemmArgs{TransB: true, M: c.mg, N: s.D, K: b * s.T, Alpha: 1, Beta: beta,
				A: packed, LDA: b * s.T, B: c.work, LDB: b * s.T, C: at(dw, grp*c.mg*s.D), LDC: s.D, Batch: 1}, "ConvBackward")
		}
	}
}

// dnnConv runs product kind of the convolution s through the driver's
// convolution library (cuDNN) on device operands x, w and y (the product
// writes y, x or w as ConvArgs says, β·its old value added), and reports
// whether it did. It does nothing and reports false — the caller's own
// path then runs — where there is no library, where s pads an axis's ends
// differently (cuDNN pads both alike), and where the library refuses or
// fails s, remembered so that s takes the caller's path from then on
// without asking again (d.mu held). The tests' forced paths (convPath)
// keep the Device's own kernels.
func (d *Device) dnnConv(kind ConvKind, s *runtime.ConvShape, x, w, y DevicePtr, beta float32, tf32 bool) bool {
	return d.dnnSetup(kind, s, x, w, y, beta, tf32) && d.dnnRun(s)
}

// dnnSetup fills d.dnnArgs for dnnConv and reports whether the library
// may run s (d.mu held).
func (d *Device) dnnSetup(kind ConvKind, s *runtime.ConvShape, x, w, y DevicePtr, beta float32, tf32 bool) bool {
	if d.noDNN || convPath != convAuto || d.dnnRefused[s] != nil || s.N == 0 || s.T == 0 {
		return false
	}
	r := len(s.In)
	if r > len(d.dnnAxes[0]) {
		return d.refuseDNN(s, fmt.Errorf("%d spatial axes", r))
	}
	// The Device's own arguments, reused: a call allocates nothing.
	a := &d.dnnArgs
	*a = ConvArgs{Kind: kind, N: s.N, C: s.C, M: s.M, Group: max(s.Group, 1), In: s.In, Kernel: s.Kernel, Out: s.Out,
		Strides: d.dnnAxes[0][:r], Dilations: d.dnnAxes[1][:r], Pads: d.dnnAxes[2][:r], X: x, W: w, Y: y, Alpha: 1, Beta: beta, TF32: tf32}
	for ax := 0; ax < r; ax++ {
		a.Strides[ax], a.Dilations[ax] = axisOr(s.Strides, ax, 1), axisOr(s.Dilations, ax, 1)
		begin, end := axisOr(s.Pads, ax, 0), axisOr(s.Pads, ax+r, 0)
		if begin != end || (s.In[ax]+2*begin-a.Dilations[ax]*(s.Kernel[ax]-1)-1)/a.Strides[ax]+1 != s.Out[ax] {
			return d.refuseDNN(s, fmt.Errorf("pads %v: not the same at both ends of axis %d", s.Pads, ax))
		}
		a.Pads[ax] = begin
	}
	return true
}

// dnnRun runs the product d.dnnArgs describes through the library; false
// where it has none or refuses s (remembered) (d.mu held).
func (d *Device) dnnRun(s *runtime.ConvShape) bool {
	err := d.drv.Conv(&d.dnnArgs)
	switch {
	case errors.Is(err, ErrNoConvLibrary):
		d.noDNN = true
		return false
	case err != nil:
		return d.refuseDNN(s, err)
	}
	d.dnnRuns++
	return true
}

// pathKeeper is a Driver whose convolution library the Device measures
// against a rival path, keeping per shape and product the faster: its own
// GEMM path (libOrGEMM), or the engine's unfolding path for per-sample
// gradients (PreferSampleGrads).
type pathKeeper interface {
	// ConvPath returns the path kept for a's shape and product against
	// rival (lib: the library's) and whether one is kept; measure is
	// false where the library is to run every shape it takes, unmeasured.
	ConvPath(a *ConvArgs, rival pathRival) (lib, kept, measure bool)
	// KeepConvPath keeps the path chosen for a's shape and product
	// against rival and the two times it was chosen on (per product
	// against the GEMM path, per sample against the unfolding).
	KeepConvPath(a *ConvArgs, rival pathRival, lib bool, libMS, rivalMS float32)
}

// pathRival is the path a library product is measured against.
type pathRival int

const (
	// rivalGEMM is the Device's GEMM path for the same product
	// (libOrGEMM).
	rivalGEMM pathRival = iota
	// rivalUnfolding is the DP engine's per-sample gradients from the
	// samples' unfolded inputs, against the library's filter gradient of
	// the samples as groups (PreferSampleGrads).
	rivalUnfolding
)

// pathKey is a shape's product in Device.paths.
type pathKey struct {
	s    *runtime.ConvShape
	kind ConvKind
	tf32 bool
}

// pathTrials is how many times libOrGEMM runs each path back to back for
// its measurement, after a first run of each.
const pathTrials = 3

// pathTimer times run, pathTrials calls of product kind on one path
// (lib: the library's), the device's queue empty before and after: the
// tests replace it.
var pathTimer = func(d *Device, kind ConvKind, lib bool, run func()) time.Duration {
	d.drv.Synchronize()
	t0 := time.Now()
	for range pathTrials {
		run()
	}
	d.drv.Synchronize()
	return time.Since(t0)
}

// libOrGEMM runs product kind of s (device operands as dnnConv takes
// them, β = 0) through the library or through the Device's own GEMM path
// (gemmProduct, with ws the plan's workspace for it), whichever this
// machine measured faster for the shape and product, and reports whether
// either ran (false: no library, or it refuses s; the caller's own path
// runs then). The first use of a shape and product measures both,
// pathTrials products each back to back — so that a library call's host
// time (cuDNN's legacy API spends a few hundred microseconds in some)
// counts as it would in a step, hidden behind the device's work where
// that is longer — and the driver keeps the choice on disk beside
// cuDNN's algorithms, so that later runs take the same path and round the
// same way. The result written is the chosen path's, at the first use
// too. Where the GEMM path does not take s (convByGEMM), or the driver
// does not measure: the library wherever it runs s (d.mu held).
func (d *Device) libOrGEMM(kind ConvKind, s *runtime.ConvShape, x, w, y DevicePtr, tf32 bool, ws []float32) bool {
	if !d.dnnSetup(kind, s, x, w, y, 0, tf32) {
		return false
	}
	d.dnnArgs.Work, d.dnnArgs.WorkBytes = d.lend(ws)
	pk, ok := d.drv.(pathKeeper)
	if !ok || !convByGEMM(s) {
		return d.dnnRun(s)
	}
	key := pathKey{s, kind, tf32}
	lib, known := d.paths[key]
	if !known {
		var kept, measure bool
		if lib, kept, measure = pk.ConvPath(&d.dnnArgs, rivalGEMM); !measure {
			return d.dnnRun(s)
		}
		if !kept {
			a := d.dnnArgs // the library's arguments, for KeepConvPath
			if !d.dnnRun(s) {
				return false
			}
			tLib := pathTimer(d, kind, true, func() { d.drv.Conv(&a) })
			d.gemmProduct(kind, s, ws, x, w, y)
			tGEMM := pathTimer(d, kind, false, func() { d.gemmProduct(kind, s, ws, x, w, y) })
			lib = tLib <= tGEMM
			d.pathsMeasured++
			ms := func(t time.Duration) float32 { return float32(t.Seconds() * 1e3 / pathTrials) }
			pk.KeepConvPath(&a, rivalGEMM, lib, ms(tLib), ms(tGEMM))
			d.dnnArgs = a
		}
		if d.paths == nil {
			d.paths = map[pathKey]bool{}
		}
		d.paths[key] = lib
	}
	if lib {
		return d.dnnRun(s)
	}
	d.gemmProduct(kind, s, ws, x, w, y)
	return true
}

// gemmProduct runs product kind of s on the GEMM path, operands as
// dnnConv takes them (d.mu held).
func (d *Device) gemmProduct(kind ConvKind, s *runtime.ConvShape, ws []float32, x, w, y DevicePtr) {
	c := d.convSetup(s, ws)
	switch kind {
	case ConvForward:
		d.convForward(c, x, w, 0, y)
	case ConvBackwardData:
		d.convInputGrad(c, y, w, 0, x)
	default:
		d.convWeightGradGEMM(c, x, y, w)
	}
}

// dnnWorkAlign is the alignment, in bytes, of a workspace lent to the
// convolution library (ConvArgs.Work): cuMemAlloc's, more than any of
// cuDNN's algorithms asks for.
const dnnWorkAlign = 256

// lend returns ws as a workspace to lend the convolution library for one
// product (ConvArgs.Work): its address and bytes where it is device memory
// of d starting at a dnnWorkAlign boundary (the plan's workspace is its
// own allocation), else none (d.mu held).
func (d *Device) lend(ws []float32) (DevicePtr, int) {
	if len(ws) == 0 {
		return 0, 0
	}
	p := DevicePtr(uintptr(unsafe.Pointer(&ws[0])))
	if p%dnnWorkAlign != 0 || !d.isDevice(p, 4*len(ws)) {
		return 0, 0
	}
	return p, 4 * len(ws)
}

// refuseDNN remembers that the library does not run s, and why; false.
func (d *Device) refuseDNN(s *runtime.ConvShape, err error) bool {
	if d.dnnRefused == nil {
		d.dnnRefused = map[*runtime.ConvShape]error{}
	}
	d.dnnRefused[s] = err
	return false
}

// axisOr is v[a], or def where v is too short (ONNX's omitted strides,
// dilations and pads).
func axisOr(v []int, a, def int) int {
	if a < len(v) {
		return v[a]
	}
	return def
}

// addChannelBias launches add_channel_bias over y (N×C×P) (d.mu held).
func (d *Device) addChannelBias(y, bias DevicePtr, n, c, p int) {
	d.args.Reset()
	d.args.Ptr(y).Ptr(bias).I64(int64(c)).I64(int64(p)).I64(int64(n * c * p))
	d.launch("add_channel_bias", int64(n*c*p))
}
