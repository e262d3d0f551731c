package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The NNOps of the device (runtime/device_nn.go; kernels in kernels/nn.cu):
// one thread per output element, sums in float64 in a fixed order rounded
// once, so that results do not depend on the schedule. A convolution's or
// pooling's geometry and an affine row normalization's parameter layout
// reach the kernels as device copies of the compile-time plan, made at
// first use and cached on the Device under the plan's pointer (planCopy);
// the shapes of GemmBias go to the device once each (stageShapes).

// Geometry fields, as kernels/nn.cu's G_* enumeration.
const (
	geoN = iota
	geoC
	geoM
	geoCg
	geoMg
	geoK
	geoT
	geoIn
	geoIncl
	geoAxes // in, kernel, strides, dilations, pads begin, pads end, out: 3 each
	geoLen  = geoAxes + 7*3
)

// packGeometry returns the int32 geometry kernels/nn.cu reads: the sizes
// and each axis's window, lifted to three spatial axes by leading unit
// axes.
func packGeometry(sizes [geoAxes]int, in, kernel, strides, dilations, pads, out []int) []byte {
	var g [geoLen]int32
	for i, v := range sizes {
		g[i] = int32(v)
	}
	r := len(in)
	if r > 3 {
		panic(fmt.Sprintf("cuda: a window of %d spatial axes (at most 3)", r))
	}
	if len(out) != r || len(kernel) != r {
		panic(fmt.Sprintf("cuda: a window over %v with kernel %v and output %v (a shape used before its Init)", in, kernel, out))
	}
	for a := 0; a < 3; a++ {
		in3, k3, s3, d3, pb, pe, o3 := 1, 1, 1, 1, 0, 0, 1
		if b := a - (3 - r); b >= 0 {
			in3, k3, o3 = in[b], kernel[b], out[b]
			if strides != nil {
				s3 = strides[b]
			}
			if dilations != nil {
				d3 = dilations[b]
			}
			if pads != nil {
				pb, pe = pads[b], pads[r+b]
			}
		}
		for f, v := range []int{in3, k3, s3, d3, pb, pe, o3} {
			g[geoAxes+3*f+a] = int32(v)
		}
	}
	b := make([]byte, 4*geoLen)
	copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&g[0])), len(b)))
	return b
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// convGeometry returns the device copy of s's geometry (d.mu held).
func (d *Device) convGeometry(s *runtime.ConvShape) DevicePtr {
	return d.planCopy(s, func() []byte {
		G := max(s.Group, 1)
		return packGeometry([geoAxes]int{s.N, s.C, s.M, s.C / G, s.M / G, numel(s.Kernel), numel(s.Out), numel(s.In), 0},
			s.In, s.Kernel, s.Strides, s.Dilations, s.Pads, s.Out)
	})
}

// poolGeometry returns the device copy of s's geometry (d.mu held).
func (d *Device) poolGeometry(s *runtime.PoolShape) DevicePtr {
	return d.planCopy(s, func() []byte {
		incl := 0
		if s.CountIncludePad {
			incl = 1
		}
		return packGeometry([geoAxes]int{s.N, s.C, s.C, 1, 1, numel(s.Kernel), numel(s.Out), numel(s.In), incl},
			s.In, s.Kernel, s.Strides, s.Dilations, s.Pads, s.Out)
	})
}

// i32Out is an int32 operand the kernel writes.
func i32Out(s []int32, d *Device) DevicePtr {
	if len(s) == 0 {
		return 0
	}
	return d.operand(unsafe.Pointer(&s[0]), 4*len(s), false, true)
}

// i64In is an int64 operand the kernel reads.
func i64In(s []int64, d *Device) DevicePtr {
	if len(s) == 0 {
		return 0
	}
	return d.operand(unsafe.Pointer(&s[0]), 8*len(s), true, false)
}

// opt is s[:n], or nil when s is nil (an output to skip).
func opt(s []float32, n int) []float32 {
	if s == nil {
		return nil
	}
	return s[:n]
}

// scratch64 returns n float64 elements of the call's scratch (d.mu held).
func (d *Device) scratch64(n int) DevicePtr {
	p, err := d.take(8 * max(n, 1))
	if err != nil {
		fault(err)
	}
	return p
}

// lanesFor is the number of threads that sum a result of terms terms
// (LANES_FOR_EACH): a warp from reduceWide terms on, else one.
func lanesFor(terms int) int32 {
	if terms >= reduceWide {
		return 32
	}
	return 1
}

// launchRows launches a per-row statistic, name (row_stats,
// row_grad_sums), over rows rows of L terms: from rowBlockWide terms a
// block per row (name_block: its threads split the row and add their
// sums by block_sum, the block's size from L alone, so the order depends
// on the shape alone), else launchLanes' threads per row (d.mu held).
// ResNet-50's GroupNorms at batch 32 have 1024 rows of up to 100 352
// terms: a warp per row left most of the GPU idle (the row statistics
// were a third of the normalizations' time in the H100's profile).
//
// Rows from rowBlockMid terms take blocks too where they are too few for
// a warp each to fill the device (fewer than rowWarpsPerSM a
// multiprocessor): most of ResNet-50's GroupNorms have rows of 1568–6272
// terms, 1024 of them at batch 32 (32 groups): 1024 warps on an H100's
// 132 multiprocessors. ViT-B/16's LayerNorms (6304 rows of 768) stay a
// warp each.
func (d *Device) launchRows(name string, rows, L int) {
	block := d.rowBlock(rows, L)
	if block == 0 {
		d.launchLanes(name, rows, L)
		return
	}
	d.args.I32(0)
	d.launchGrid(name+"_block", D1(min(rows, d.maxGrid)), D1(block))
}

// rowBlock returns the threads of launchRows' block per row for rows of
// L terms, or 0 where it takes a warp (or fewer lanes) per row.
func (d *Device) rowBlock(rows, L int) int {
	if L < rowBlockWide && (L < rowBlockMid || rows >= rowWarpsPerSM*max(1, d.props.Multiprocessors)) {
		return 0
	}
	if d.props.Emulated {
		return emuRowBlock
	}
	return min(1024, max(32, (L/32+31)/32*32))
}

// emuRowBlock is rowBlock's block on the emulation, whose block threads
// are real threads: a warp, so that plans run fast; tests raise it to run
// the kernels' forms for blocks of several warps.
var emuRowBlock = 32

// fuseRowBlocks lets a row normalization whose rows take a block each run
// its statistics and its output (or its gradient's sums and the gradient)
// in one kernel (row_norm_affine_block, row_affine_bwd_block), the same
// bits as the two; tests turn it off to compare.
var fuseRowBlocks = true

// rowBlockWide is the row length from which launchRows takes a block per
// row (tests lower it to run both forms), rowBlockMid the one from which
// it does when the rows are few, fewer than rowWarpsPerSM a
// multiprocessor.
var rowBlockWide = 8192

const (
	rowBlockMid   = 1024
	rowWarpsPerSM = 32
)

// launchLanes launches kernel name over n results of terms terms each,
// with its last argument, lanes, the threads per result (lanesFor) (d.mu
// held).
func (d *Device) launchLanes(name string, n, terms int) {
	lanes := lanesFor(terms)
	d.args.I32(lanes)
	d.launch(name, int64(lanes)*int64(n))
}

// ConvScratchSize implements runtime.NNOps: a chunk's unfolded input and
// packed output gradient on the GEMM path (conv.go), none on the direct
// kernels.
func (d *Device) ConvScratchSize(s *runtime.ConvShape) int { return convScratch(s) }

// convSizes returns the element counts of x, w and y.
func convSizes(s *runtime.ConvShape) (nx, nw, ny int) {
	return s.N * s.C * numel(s.In), s.M * s.C / max(s.Group, 1) * numel(s.Kernel), s.N * s.M * numel(s.Out)
}

// Conv implements runtime.NNOps: cuDNN where the driver has it (dnnConv),
// else GEMMs (conv.go), or a thread per output element for the shapes
// convByGEMM leaves to the direct kernel.
func (d *Device) Conv(s *runtime.ConvShape, x, w, bias, y, ws []float32) {
	nx, nw, ny := convSizes(s)
	if ny == 0 {
		return
	}
	a := d.begin()
	defer d.end("Conv")
	d.profConv(s, s.N)
	px, pw, pb, py := f32(x[:nx], opIn, d), f32(w[:nw], opIn, d), f32(opt(bias, s.M), opIn, d), f32(y[:ny], opOut, d)
	if d.libOrGEMM(ConvForward, s, px, pw, py, d.tf32, ws) {
		if pb != 0 {
			d.addChannelBias(py, pb, s.N, s.M, s.T)
		}
		return
	}
	if convByGEMM(s) {
		d.convForward(d.convSetup(s, ws), px, pw, pb, py)
		return
	}
	a.Ptr(d.convGeometry(s)).Ptr(px).Ptr(pw).Ptr(pb).Ptr(py)
	d.launch("conv_fwd", int64(ny))
}

// ConvBackward implements runtime.NNOps: cuDNN where the driver has it,
// else GEMMs (conv.go), or a thread per element of dx (gathering the taps
// that read it) and of dw; a warp per element of db.
func (d *Device) ConvBackward(s *runtime.ConvShape, x, w, dy, dx, dw, db, ws []float32) {
	nx, nw, ny := convSizes(s)
	a := d.begin()
	defer d.end("ConvBackward")
	d.profConv(s, s.N)
	g := d.convGeometry(s)
	pdy := f32(dy[:ny], opIn, d)
	gemm := convByGEMM(s)
	var c *convOperands
	if gemm {
		c = d.convSetup(s, ws)
	}
	if dx != nil && nx > 0 {
		pdx, pw := f32(dx[:nx], opOut, d), f32(w[:nw], opIn, d)
		switch {
		case d.libOrGEMM(ConvBackwardData, s, pdx, pw, pdy, d.tf32, ws):
		case gemm:
			d.convInputGrad(c, pdy, pw, 0, pdx)
		default:
			a.Reset()
			a.Ptr(g).Ptr(pdy).Ptr(pw).Ptr(0).Ptr(pdx)
			d.launch("conv_dx", int64(nx))
		}
	}
	if dw != nil && nw > 0 {
		d.convWeights(s, c, g, f32(x[:nx], opIn, d), pdy, f32(dw[:nw], opOut, d), ws)
	}
	if db != nil {
		d.channelSums(pdy, s.N, s.M, numel(s.Out), db[:s.M])
	}
}

// convWeights computes the weight gradient dw of s for input x and output
// gradient dy (device addresses, nw > 0): on the GEMM path when c is not
// nil, else conv_dw, whose sums (over N·T terms each) take a warp per
// weight; zeros when there is nothing to sum (d.mu held).
func (d *Device) convWeights(s *runtime.ConvShape, c *convOperands, g, x, dy, dw DevicePtr, ws []float32) {
	nw := s.M * s.D
	if s.N == 0 || s.T == 0 {
		d.args.Reset()
		d.args.F32(0).Ptr(dw).I64(int64(nw))
		d.launch("fill_f", int64(nw))
		return
	}
	// Never TF32: in a DP step this is the clipped sum Σ_i C_i g_i
	// (convWeightGradGEMM).
	if d.libOrGEMM(ConvBackwardFilter, s, x, dw, dy, false, ws) {
		return
	}
	if c != nil {
		d.convWeightGradGEMM(c, x, dy, dw)
		return
	}
	d.args.Reset()
	d.args.Ptr(g).Ptr(x).Ptr(dy).Ptr(dw)
	d.launch("conv_dw", 32*int64(nw))
}

// channelSums launches channel_sums of x (device address, N×C×P) into
// out (d.mu held).
func (d *Device) channelSums(x DevicePtr, N, C, P int, out []float32) {
	if C == 0 {
		return
	}
	d.args.Reset()
	d.args.Ptr(x).I64(int64(N)).I64(int64(C)).I64(int64(P)).Ptr(f32(out, opOut, d))
	d.launchSums("channel_sums", "channel_sums_block", int64(C), int64(N*P))
}

// ConvTranspose implements runtime.NNOps: the convolution's input
// gradient with the bias, as GEMMs or the direct kernel.
func (d *Device) ConvTranspose(s *runtime.ConvShape, x, w, bias, y, ws []float32) {
	nx, nw, ny := convSizes(s) // ConvTranspose: input ny, output nx
	if nx == 0 {
		return
	}
	a := d.begin()
	defer d.end("ConvTranspose")
	px, pw, pb, py := f32(x[:ny], opIn, d), f32(w[:nw], opIn, d), f32(opt(bias, s.C), opIn, d), f32(y[:nx], opOut, d)
	if d.libOrGEMM(ConvBackwardData, s, py, pw, px, d.tf32, ws) {
		if pb != 0 {
			d.addChannelBias(py, pb, s.N, s.C, s.InSize)
		}
		return
	}
	if convByGEMM(s) {
		d.convInputGrad(d.convSetup(s, ws), px, pw, pb, py)
		return
	}
	a.Ptr(d.convGeometry(s)).Ptr(px).Ptr(pw).Ptr(pb).Ptr(py)
	d.launch("conv_dx", int64(nx))
}

// ConvTransposeBackward implements runtime.NNOps: the convolution of dy,
// the weight gradient with dy as input and x as output gradient (GEMMs or
// the direct kernels), and the channel sums of dy.
func (d *Device) ConvTransposeBackward(s *runtime.ConvShape, x, w, dy, dx, dw, db, ws []float32) {
	nx, nw, ny := convSizes(s) // ConvTranspose: input x (ny), output dy (nx)
	a := d.begin()
	defer d.end("ConvTransposeBackward")
	g := d.convGeometry(s)
	pdy := f32(dy[:nx], opIn, d)
	var c *convOperands
	if convByGEMM(s) {
		c = d.convSetup(s, ws)
	}
	if dx != nil && ny > 0 {
		pdx, pw := f32(dx[:ny], opOut, d), f32(w[:nw], opIn, d)
		switch {
		case d.libOrGEMM(ConvForward, s, pdy, pw, pdx, d.tf32, ws):
		case c != nil:
			d.convForward(c, pdy, pw, 0, pdx)
		default:
			a.Reset()
			a.Ptr(g).Ptr(pdy).Ptr(pw).Ptr(0).Ptr(pdx)
			d.launch("conv_fwd", int64(ny))
		}
	}
	if dw != nil && nw > 0 {
		d.convWeights(s, c, g, pdy, f32(x[:ny], opIn, d), f32(dw[:nw], opOut, d), ws)
	}
	if db != nil {
		d.channelSums(pdy, s.N, s.C, numel(s.In), db[:s.C])
	}
}

// poolSizes returns the element counts of a pooling's input and output.
func poolSizes(s *runtime.PoolShape) (nx, ny int) {
	return s.N * s.C * numel(s.In), s.N * s.C * numel(s.Out)
}

// MaxPool implements runtime.NNOps: a thread per output.
func (d *Device) MaxPool(s *runtime.PoolShape, x, y []float32, argmax []int32) {
	nx, ny := poolSizes(s)
	if ny == 0 {
		return
	}
	a := d.begin()
	defer d.end("MaxPool")
	if argmax != nil {
		argmax = argmax[:ny]
	}
	a.Ptr(d.poolGeometry(s)).Ptr(f32(x[:nx], opIn, d)).Ptr(f32(y[:ny], opOut, d)).Ptr(i32Out(argmax, d))
	d.launch("max_pool", int64(ny))
}

// MaxPoolBackward implements runtime.NNOps: a thread per input element,
// summing the gradients of the windows it won.
func (d *Device) MaxPoolBackward(s *runtime.PoolShape, dy []float32, argmax []int32, dx []float32) {
	nx, ny := poolSizes(s)
	if nx == 0 {
		return
	}
	a := d.begin()
	defer d.end("MaxPoolBackward")
	a.Ptr(d.poolGeometry(s)).Ptr(f32(dy[:ny], opIn, d)).Ptr(i32(argmax[:ny], d)).Ptr(f32(dx[:nx], opOut, d))
	d.launch("max_pool_bwd", int64(nx))
}

// MaxPoolBackwardFromOutput implements runtime.NNOps: as MaxPoolBackward,
// each window's winner found again as the first element with its output's
// bits (max_pool_winners, into the call's scratch).
func (d *Device) MaxPoolBackwardFromOutput(s *runtime.PoolShape, x, y, dy, dx []float32) {
	nx, ny := poolSizes(s)
	if nx == 0 {
		return
	}
	a := d.begin()
	defer d.end("MaxPoolBackwardFromOutput")
	g := d.poolGeometry(s)
	px, py, pdy, pdx := f32(x[:nx], opIn, d), f32(y[:ny], opIn, d), f32(dy[:ny], opIn, d), f32(dx[:nx], opOut, d)
	var win DevicePtr
	if ny > 0 {
		var err error
		if win, err = d.take(4 * ny); err != nil {
			fault(fmt.Errorf("cuda: MaxPoolBackwardFromOutput: %w", err))
		}
		a.Ptr(g).Ptr(px).Ptr(py).Ptr(win)
		d.launch("max_pool_winners", int64(ny))
	}
	a.Reset()
	a.Ptr(g).Ptr(pdy).Ptr(win).Ptr(pdx)
	d.launch("max_pool_bwd", int64(nx))
}

// AveragePool implements runtime.NNOps: a thread per output.
func (d *Device) AveragePool(s *runtime.PoolShape, x, y []float32) {
	nx, ny := poolSizes(s)
	if ny == 0 {
		return
	}
	a := d.begin()
	defer d.end("AveragePool")
	a.Ptr(d.poolGeometry(s)).Ptr(f32(x[:nx], opIn, d)).Ptr(f32(y[:ny], opOut, d))
	d.launch("avg_pool", int64(ny))
}

// AveragePoolBackward implements runtime.NNOps: a thread per input
// element.
func (d *Device) AveragePoolBackward(s *runtime.PoolShape, dy, dx []float32) {
	nx, ny := poolSizes(s)
	if nx == 0 {
		return
	}
	a := d.begin()
	defer d.end("AveragePoolBackward")
	a.Ptr(d.poolGeometry(s)).Ptr(f32(dy[:ny], opIn, d)).Ptr(f32(dx[:nx], opOut, d))
	d.launch("avg_pool_bwd", int64(nx))
}

// GlobalAveragePool implements runtime.NNOps: a thread per plane.
func (d *Device) GlobalAveragePool(planes, spatial int, x, y []float32) {
	if planes == 0 {
		return
	}
	a := d.begin()
	defer d.end("GlobalAveragePool")
	a.Ptr(f32(x[:planes*spatial], opIn, d)).I64(int64(planes)).I64(int64(spatial)).Ptr(f32(y[:planes], opOut, d))
	d.launch("global_avg_pool", int64(planes))
}

// GlobalAveragePoolBackward implements runtime.NNOps.
func (d *Device) GlobalAveragePoolBackward(planes, spatial int, dy, dx []float32) {
	if planes*spatial == 0 {
		return
	}
	a := d.begin()
	defer d.end("GlobalAveragePoolBackward")
	a.Ptr(f32(dy[:planes], opIn, d)).I64(int64(planes)).I64(int64(spatial)).Ptr(f32(dx[:planes*spatial], opOut, d))
	d.launch("global_avg_pool_bwd", int64(planes*spatial))
}

// GlobalMaxPool implements runtime.NNOps: a thread per plane.
func (d *Device) GlobalMaxPool(planes, spatial int, x, y []float32, argmax []int32) {
	if planes == 0 {
		return
	}
	a := d.begin()
	defer d.end("GlobalMaxPool")
	a.Ptr(f32(x[:planes*spatial], opIn, d)).I64(int64(planes)).I64(int64(spatial)).Ptr(f32(y[:planes], opOut, d)).Ptr(i32Out(argmax[:planes], d))
	d.launch("global_max_pool", int64(planes))
}

// GlobalMaxPoolBackward implements runtime.NNOps.
func (d *Device) GlobalMaxPoolBackward(planes, spatial int, dy []float32, argmax []int32, dx []float32) {
	if planes*spatial == 0 {
		return
	}
	a := d.begin()
	defer d.end("GlobalMaxPoolBackward")
	a.Ptr(f32(dy[:planes], opIn, d)).Ptr(i32(argmax[:planes], d)).I64(int64(planes)).I64(int64(spatial)).Ptr(f32(dx[:planes*spatial], opOut, d))
	d.launch("global_max_pool_bwd", int64(planes*spatial))
}

func flag(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// BatchNorm implements runtime.NNOps: a thread or a warp per channel for
// the statistics (kept in float64 scratch; launchLanes), then a thread
// per element.
func (d *Device) BatchNorm(s *runtime.BatchNormShape, x, scale, bias, runMean, runVar, y, mean, invStd, newMean, newVar []float32) {
	n, C := s.N*s.C*s.S, s.C
	if C == 0 {
		return
	}
	a := d.begin()
	defer d.end("BatchNorm")
	st := d.scratch64(2 * C)
	px := f32(x[:n], opIn, d)
	a.Ptr(px).I64(int64(s.N)).I64(int64(C)).I64(int64(s.S)).I32(flag(s.Training)).F32(s.Epsilon).F32(s.Momentum)
	a.Ptr(f32(opt(runMean, C), opIn, d)).Ptr(f32(opt(runVar, C), opIn, d)).Ptr(st)
	a.Ptr(f32(mean[:C], opOut, d)).Ptr(f32(invStd[:C], opOut, d)).Ptr(f32(opt(newMean, C), opOut, d)).Ptr(f32(opt(newVar, C), opOut, d))
	d.launchLanes("bn_stats", C, s.N*s.S)
	if n == 0 {
		return
	}
	a.Reset()
	a.Ptr(px).I64(int64(s.N)).I64(int64(C)).I64(int64(s.S)).Ptr(st).Ptr(f32(scale[:C], opIn, d)).Ptr(f32(bias[:C], opIn, d)).Ptr(f32(y[:n], opOut, d))
	d.launch("bn_apply", int64(n))
}

// BatchNormBackward implements runtime.NNOps: a thread or a warp per
// channel for the sums, then a thread per element of dx.
func (d *Device) BatchNormBackward(s *runtime.BatchNormShape, x, scale, mean, invStd, dy, dx, dscale, dbias []float32) {
	n, C := s.N*s.C*s.S, s.C
	if C == 0 {
		return
	}
	a := d.begin()
	defer d.end("BatchNormBackward")
	sums := d.scratch64(2 * C)
	px, pdy, pm, piv := f32(x[:n], opIn, d), f32(dy[:n], opIn, d), f32(mean[:C], opIn, d), f32(invStd[:C], opIn, d)
	a.Ptr(px).Ptr(pdy).I64(int64(s.N)).I64(int64(C)).I64(int64(s.S)).Ptr(pm).Ptr(piv).Ptr(sums)
	a.Ptr(f32(opt(dscale, C), opOut, d)).Ptr(f32(opt(dbias, C), opOut, d))
	d.launchLanes("bn_grad_sums", C, s.N*s.S)
	if dx == nil || n == 0 {
		return
	}
	a.Reset()
	a.Ptr(px).Ptr(pdy).I64(int64(s.N)).I64(int64(C)).I64(int64(s.S)).Ptr(f32(scale[:C], opIn, d)).Ptr(pm).Ptr(piv).Ptr(sums)
	a.I32(flag(s.Training)).Ptr(f32(dx[:n], opOut, d))
	d.launch("bn_dx", int64(n))
}

// NormalizeRows implements runtime.NNOps: a thread or a warp per row for
// the statistics, then a thread per element.
func (d *Device) NormalizeRows(x, y []float32, L int, eps float32, invStd []float32) {
	rows := len(invStd)
	if rows == 0 {
		return
	}
	a := d.begin()
	defer d.end("NormalizeRows")
	st := d.scratch64(2 * rows)
	px := f32(x[:rows*L], opIn, d)
	a.Ptr(px).I64(int64(rows)).I64(int64(L)).F64(float64(eps)).Ptr(st).Ptr(0).Ptr(f32(invStd, opOut, d))
	d.launchRows("row_stats", rows, L)
	if L == 0 {
		return
	}
	a.Reset()
	a.Ptr(px).I64(int64(rows)).I64(int64(L)).Ptr(st).Ptr(f32(y[:rows*L], opOut, d))
	d.launch("row_normalize", int64(rows*L))
}

// NormalizeRowsBackward implements runtime.NNOps.
func (d *Device) NormalizeRowsBackward(y, dy, invStd []float32, L int, dx []float32) {
	rows := len(invStd)
	if rows*L == 0 {
		return
	}
	a := d.begin()
	defer d.end("NormalizeRowsBackward")
	sums := d.scratch64(2 * rows)
	py, pdy := f32(y[:rows*L], opIn, d), f32(dy[:rows*L], opIn, d)
	a.Ptr(py).Ptr(pdy).I64(int64(rows)).I64(int64(L)).Ptr(sums)
	d.launchRows("row_grad_sums", rows, L)
	a.Reset()
	a.Ptr(py).Ptr(pdy).Ptr(f32(invStd, opIn, d)).I64(int64(rows)).I64(int64(L)).Ptr(sums).Ptr(f32(dx[:rows*L], opOut, d))
	d.launch("row_normalize_bwd", int64(rows*L))
}

// normTable returns the device copy of n's parameter table (kernels/nn.cu:
// ncol, row_off, col_off, col_start, col_list), whose parameter of element
// j of row r is row_off[r] + col_off[j] with row_off[r] = n.Param(r, 0)
// and col_off[j] = n.Param(0, j): the layouts of LayerNormalization (j),
// InstanceNormalization and GroupNormalization (the row's channel or
// group, plus j's channel within the group) all separate so; the table's
// construction checks it for every element (d.mu held).
func (d *Device) normTable(n *runtime.NormRows) DevicePtr {
	return d.planCopy(n, func() []byte {
		rows, L := n.Rows(), n.RowLen()
		rowOff, colOff := make([]int32, rows), make([]int32, L)
		ncol := 0
		for j := range colOff {
			colOff[j] = int32(n.Param(0, j))
			ncol = max(ncol, int(colOff[j])+1)
		}
		for r := range rowOff {
			rowOff[r] = int32(n.Param(r, 0) - n.Param(0, 0))
			for j := range colOff {
				if k := n.Param(r, j); k != int(rowOff[r]+colOff[j]) || k < 0 || k >= n.NumParams() {
					panic(fmt.Sprintf("cuda: a row normalization whose parameter of element %d of row %d (%d) is not that of the row's first plus that of the first row's element", j, r, k))
				}
			}
		}
		// The columns of each column offset, in increasing order.
		start := make([]int32, ncol+1)
		for _, b := range colOff {
			start[b+1]++
		}
		for b := 0; b < ncol; b++ {
			start[b+1] += start[b]
		}
		list, next := make([]int32, L), append([]int32(nil), start[:ncol]...)
		for j, b := range colOff {
			list[next[b]] = int32(j)
			next[b]++
		}
		tab := append(append(append(append([]int32{int32(ncol)}, rowOff...), colOff...), start...), list...)
		return unsafe.Slice((*byte)(unsafe.Pointer(&tab[0])), 4*len(tab))
	})
}

// NormalizeRowsAffine implements runtime.NNOps: a thread or a warp per
// row for the statistics, then a thread per element.
func (d *Device) NormalizeRowsAffine(n *runtime.NormRows, x, scale, bias, y, mean, invStd []float32) {
	rows, L, np := n.Rows(), n.RowLen(), n.NumParams()
	if rows == 0 {
		return
	}
	a := d.begin()
	defer d.end("NormalizeRowsAffine")
	tab := d.normTable(n)
	if block := d.rowBlock(rows, L); block > 0 && fuseRowBlocks && L > 0 {
		a.Ptr(f32(x[:rows*L], opIn, d)).I64(int64(rows)).I64(int64(L)).F64(n.Epsilon())
		a.Ptr(f32(scale[:np], opIn, d)).Ptr(f32(opt(bias, np), opIn, d)).Ptr(tab)
		a.Ptr(f32(mean[:rows], opOut, d)).Ptr(f32(invStd[:rows], opOut, d)).Ptr(f32(y[:rows*L], opOut, d)).I32(0)
		d.launchGrid("row_norm_affine_block", D1(min(rows, d.maxGrid)), D1(block))
		return
	}
	st := d.scratch64(2 * rows)
	px := f32(x[:rows*L], opIn, d)
	a.Ptr(px).I64(int64(rows)).I64(int64(L)).F64(n.Epsilon()).Ptr(st).Ptr(f32(mean[:rows], opOut, d)).Ptr(f32(invStd[:rows], opOut, d))
	d.launchRows("row_stats", rows, L)
	if L == 0 {
		return
	}
	a.Reset()
	a.Ptr(px).I64(int64(rows)).I64(int64(L)).Ptr(st).Ptr(f32(scale[:np], opIn, d)).Ptr(f32(opt(bias, np), opIn, d)).Ptr(tab).Ptr(f32(y[:rows*L], opOut, d))
	d.launch("row_affine", int64(rows*L))
}

// runParts is the device's buffer of per-run sums (kernels/nn.cu's
// block_run_sums), grown to the largest normalization's, and which
// backward they are of: n's, on the x and dy at x and dy (nil: none).
type runParts struct {
	p     DevicePtr
	bytes int
	n     *runtime.NormRows
	x, dy *float32
}

// runSums reports whether n's gradient sums go through its runs' sums
// (kernels/nn.cu: row_run_sums_block, row_affine_bwd_runs_block,
// row_param_grads_runs): rows of cpg runs that take a block each.
func (d *Device) runSums(n *runtime.NormRows) (g, cpg, s int, ok bool) {
	g, cpg, s = n.ParamMap()
	return g, cpg, s, cpg > 0 && d.rowBlock(n.Rows(), n.RowLen()) > 0
}

// runPartsFor returns the runs' sums buffer with room for n's (d.mu
// held), forgetting whose sums it held.
func (d *Device) runPartsFor(n *runtime.NormRows, cpg int) DevicePtr {
	rp := &d.runParts
	rp.n, rp.x, rp.dy = nil, nil, nil
	if bytes := 16 * n.Rows() * cpg; bytes > rp.bytes {
		if rp.bytes > 0 {
			if err := d.free(rp.p); err != nil {
				fault(err)
			}
			rp.p, rp.bytes = 0, 0
		}
		p, err := d.alloc(bytes)
		if err != nil {
			fault(err)
		}
		rp.p, rp.bytes = p, bytes
	}
	return rp.p
}

// NormalizeRowsAffineBackward implements runtime.NNOps: a thread or a
// warp per row for the sums, then a thread per element; rows of runs that
// take a block each keep their runs' sums for
// NormalizeRowsAffineParamGrads on the same x and dy, which the plan
// calls right after it (runSums).
func (d *Device) NormalizeRowsAffineBackward(n *runtime.NormRows, x, scale, mean, invStd, dy, dx []float32) {
	rows, L, np := n.Rows(), n.RowLen(), n.NumParams()
	if rows*L == 0 {
		return
	}
	a := d.begin()
	defer d.end("NormalizeRowsAffineBackward")
	tab := d.normTable(n)
	px, ps, pm, piv, pdy := f32(x[:rows*L], opIn, d), f32(scale[:np], opIn, d), f32(mean[:rows], opIn, d), f32(invStd[:rows], opIn, d), f32(dy[:rows*L], opIn, d)
	if g, cpg, s, ok := d.runSums(n); ok {
		parts, block := d.runPartsFor(n, cpg), D1(d.rowBlock(rows, L))
		if fuseRowBlocks {
			a.Ptr(px).Ptr(ps).Ptr(pm).Ptr(piv).Ptr(pdy).I64(int64(rows)).I64(int64(L)).Ptr(tab)
			a.I64(int64(g)).I64(int64(cpg)).I64(int64(s)).Ptr(parts).Ptr(f32(dx[:rows*L], opOut, d)).I32(0)
			d.launchGrid("row_affine_bwd_runs_block", D1(min(rows, d.maxGrid)), block)
		} else {
			sums := d.scratch64(2 * rows)
			a.Ptr(px).Ptr(ps).Ptr(pm).Ptr(piv).Ptr(pdy).I64(int64(rows)).I64(int64(L))
			a.I64(int64(g)).I64(int64(cpg)).I64(int64(s)).Ptr(parts).Ptr(sums).I32(0)
			d.launchGrid("row_run_sums_block", D1(min(rows, d.maxGrid)), block)
			a.Reset()
			a.Ptr(px).Ptr(ps).Ptr(pm).Ptr(piv).Ptr(pdy).I64(int64(rows)).I64(int64(L)).Ptr(tab).Ptr(sums).Ptr(f32(dx[:rows*L], opOut, d))
			d.launch("row_affine_dx", int64(rows*L))
		}
		d.runParts.n, d.runParts.x, d.runParts.dy = n, &x[0], &dy[0]
		return
	}
	if block := d.rowBlock(rows, L); block > 0 && fuseRowBlocks {
		a.Ptr(px).Ptr(ps).Ptr(pm).Ptr(piv).Ptr(pdy).I64(int64(rows)).I64(int64(L)).Ptr(tab).Ptr(f32(dx[:rows*L], opOut, d)).I32(0)
		d.launchGrid("row_affine_bwd_block", D1(min(rows, d.maxGrid)), D1(block))
		return
	}
	sums := d.scratch64(2 * rows)
	a.Ptr(px).Ptr(ps).Ptr(pm).Ptr(piv).Ptr(pdy).I64(int64(rows)).I64(int64(L)).Ptr(tab).Ptr(sums)
	d.launchRows("row_affine_grad_sums", rows, L)
	a.Reset()
	a.Ptr(px).Ptr(ps).Ptr(pm).Ptr(piv).Ptr(pdy).I64(int64(rows)).I64(int64(L)).Ptr(tab).Ptr(sums).Ptr(f32(dx[:rows*L], opOut, d))
	d.launch("row_affine_dx", int64(rows*L))
}

// NormalizeRowsAffineParamGrads implements runtime.NNOps: for rows of
// runs that take a block each, from the runs' sums the backward kept for
// this x and dy, else from a pass of row_run_sums_block (runSums), a
// thread per parameter adding its rows' (row_param_grads_runs); otherwise
// a block per parameter, its threads splitting the parameter's terms
// (row_param_grads), the block's size from the terms a parameter has
// (sumsBlock); in LayerNorm's layout column tiles (row_param_grads_cols).
func (d *Device) NormalizeRowsAffineParamGrads(n *runtime.NormRows, x, mean, invStd, dy, dscale, dbias []float32) {
	rows, L, np := n.Rows(), n.RowLen(), n.NumParams()
	if np == 0 || (dscale == nil && dbias == nil) {
		return
	}
	a := d.begin()
	defer d.end("NormalizeRowsAffineParamGrads")
	if g, cpg, s, ok := d.runSums(n); ok {
		rp := &d.runParts
		parts := rp.p
		if rows*L > 0 && (rp.n != n || rp.x != &x[0] || rp.dy != &dy[0]) { // none kept for this x and dy
			parts = d.runPartsFor(n, cpg)
			a.Ptr(f32(x[:rows*L], opIn, d)).Ptr(0).Ptr(f32(mean[:rows], opIn, d)).Ptr(f32(invStd[:rows], opIn, d)).Ptr(f32(dy[:rows*L], opIn, d))
			a.I64(int64(rows)).I64(int64(L)).I64(int64(g)).I64(int64(cpg)).I64(int64(s)).Ptr(parts).Ptr(0).I32(0)
			d.launchGrid("row_run_sums_block", D1(min(rows, d.maxGrid)), D1(d.rowBlock(rows, L)))
			a.Reset()
		}
		rp.n, rp.x, rp.dy = nil, nil, nil
		a.Ptr(parts).I64(int64(rows)).I64(int64(g)).I64(int64(cpg)).I64(int64(np))
		a.Ptr(f32(opt(dscale, np), opOut, d)).Ptr(f32(opt(dbias, np), opOut, d))
		d.launch("row_param_grads_runs", int64(np))
		return
	}
	G, CpG, S := n.ParamMap()
	a.Ptr(f32(x[:rows*L], opIn, d)).Ptr(f32(mean[:rows], opIn, d)).Ptr(f32(invStd[:rows], opIn, d)).Ptr(f32(dy[:rows*L], opIn, d))
	a.I64(int64(rows)).I64(int64(L)).I64(int64(G)).I64(int64(CpG)).I64(int64(S)).I64(int64(np))
	a.Ptr(f32(opt(dscale, np), opOut, d)).Ptr(f32(opt(dbias, np), opOut, d))
	if G == 1 && CpG == 0 && S == 1 { // LayerNorm's layout: parameter k is column k
		d.launchCols("row_param_grads_cols", int64(np), int64(rows))
		return
	}
	d.launchGrid("row_param_grads", D1(min(np, d.maxGrid)), D1(int(d.sumsBlock(int64(rows/G*S)))))
}

// LRN implements runtime.NNOps: a thread per element (ws unused).
func (d *Device) LRN(s *runtime.LRNShape, x, y, _ []float32) {
	n := s.N * s.C * s.Inner
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("LRN")
	a.Ptr(f32(x[:n], opIn, d)).I64(int64(s.N)).I64(int64(s.C)).I64(int64(s.Inner)).I32(int32(s.Size)).F64(s.Alpha).F64(s.Beta).F64(s.Bias)
	a.Ptr(f32(y[:n], opOut, d))
	d.launch("lrn", int64(n))
}

// LRNBackward implements runtime.NNOps: a thread per element (ws unused).
func (d *Device) LRNBackward(s *runtime.LRNShape, x, dy, dx, _ []float32) {
	n := s.N * s.C * s.Inner
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("LRNBackward")
	a.Ptr(f32(x[:n], opIn, d)).Ptr(f32(dy[:n], opIn, d)).I64(int64(s.N)).I64(int64(s.C)).I64(int64(s.Inner)).I32(int32(s.Size))
	a.F64(s.Alpha).F64(s.Beta).F64(s.Bias).Ptr(f32(dx[:n], opOut, d))
	d.launch("lrn_bwd", int64(n))
}

// stageShapes stages full and part, part aligned to full's rank by
// leading 1s, as one int64 operand of 2·len(full) elements (d.mu held).
func (d *Device) stageShapes(full, part []int) DevicePtr {
	r := len(full)
	if len(part) > r {
		panic(fmt.Sprintf("cuda: shape %v of higher rank than %v", part, full))
	}
	sh := d.shapes[:0]
	for _, v := range full {
		sh = append(sh, int64(v))
	}
	for i := 0; i < r-len(part); i++ {
		sh = append(sh, 1)
	}
	for i, v := range part {
		if f := full[r-len(part)+i]; v != 1 && v != f {
			panic(fmt.Sprintf("cuda: shape %v is not %v or broadcast to it", part, full))
		}
		sh = append(sh, int64(v))
	}
	d.shapes = sh
	if len(sh) > len(shapeKey{}.v) {
		return i64In(sh, d)
	}
	key := shapeKey{n: len(sh)}
	copy(key.v[:], sh)
	if p, ok := d.shapeData[key]; ok {
		return p
	}
	// A model has a few dozen distinct shapes at most: each goes to the
	// device once, for the device's lifetime. A staged copy per call
	// would be a host-to-device copy from pageable memory, which waits
	// for every queued kernel — a synchronisation per GemmBias in the
	// middle of a step.
	p, err := d.alloc(8 * len(sh))
	if err != nil {
		fault(err)
	}
	if err := d.drv.CopyHtoD(p, unsafe.Pointer(&sh[0]), 8*len(sh)); err != nil {
		fault(fmt.Errorf("cuda: copying shapes to the device: %w", err))
	}
	if d.shapeData == nil {
		d.shapeData = map[shapeKey]DevicePtr{}
	}
	d.shapeData[key] = p
	return p
}

// shapeKey is a staged shape pair's values: stageShapes keeps a device
// copy of each (Device.shapeData).
type shapeKey struct {
	n int
	v [16]int64
}

// gemmBiasRank panics unless Gemm's output has at most the 8 axes the
// bias kernels divide by (a Gemm's has 2).
func gemmBiasRank(yShape []int) {
	if len(yShape) > 8 {
		panic(fmt.Sprintf("cuda: GemmBias over a rank-%d output, more than 8 axes", len(yShape)))
	}
}

// GemmBias implements runtime.NNOps: a thread per element of y.
func (d *Device) GemmBias(beta float32, c []float32, cShape []int, y []float32, yShape []int) {
	gemmBiasRank(yShape)
	ny, nc := numel(yShape), numel(cShape)
	if ny == 0 {
		return
	}
	a := d.begin()
	defer d.end("GemmBias")
	sh := d.stageShapes(yShape, cShape)
	a.F32(beta).Ptr(f32(c[:nc], opIn, d)).Ptr(sh).I32(int32(len(yShape))).Ptr(f32(y[:ny], opOut, d)).I64(int64(ny))
	d.launch("gemm_bias", int64(ny))
}

// GemmBiasBackward implements runtime.NNOps: a thread per element of dc,
// summing the elements of dy it was broadcast to in increasing order.
func (d *Device) GemmBiasBackward(beta float32, dy []float32, yShape []int, dc []float32, cShape []int) {
	gemmBiasRank(yShape)
	ny, nc := numel(yShape), numel(cShape)
	if nc == 0 {
		return
	}
	a := d.begin()
	defer d.end("GemmBiasBackward")
	sh := d.stageShapes(yShape, cShape)
	a.F32(beta).Ptr(f32(dy[:ny], opIn, d)).Ptr(sh).I32(int32(len(yShape))).Ptr(f32(dc[:nc], opOut, d)).I64(int64(nc)).I64(int64(ny / nc))
	d.launchSums("gemm_bias_bwd", "gemm_bias_bwd_block", int64(nc), int64(ny/nc))
}
