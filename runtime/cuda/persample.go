package cuda

import (
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The PerSampleOps of the device (runtime/device_dp.go; kernels in
// kernels/persample.cu): direct kernels on the convolution's geometry,
// which need no scratch, and ConvWeightGrad as GEMMs (conv.go). The geometry
// (convGeom) is a by-value kernel argument built from the ConvShape's
// exported fields at each call: a few dozen integers, nothing cached.

// convGeom is the kernels' ConvGeom, field for field: the shape lifted to
// three spatial axes by leading unit axes.
type convGeom struct {
	in, k, s, d, pb, out              [3]int32
	n, c, m, group, t, kk, dd, inSize int32
}

// geomOf lifts s (initialized) to convGeom.
func geomOf(s *runtime.ConvShape) convGeom {
	nd := len(s.In)
	if nd < 1 || nd > 3 || len(s.Kernel) != nd || len(s.Out) != nd {
		panic(fmt.Sprintf("cuda: convolution of %d spatial axes (kernel %v, output %v): the kernels take 1 to 3", nd, s.Kernel, s.Out))
	}
	g := convGeom{n: i32Of(s.N), c: i32Of(s.C), m: i32Of(s.M), group: i32Of(max(1, s.Group)), t: i32Of(s.T), kk: i32Of(s.K), dd: i32Of(s.D), inSize: i32Of(s.InSize)}
	for a := 0; a < 3; a++ {
		g.in[a], g.k[a], g.s[a], g.d[a], g.out[a] = 1, 1, 1, 1, 1
	}
	for a := 0; a < nd; a++ {
		l := 3 - nd + a
		g.in[l], g.k[l], g.out[l] = i32Of(s.In[a]), i32Of(s.Kernel[a]), i32Of(s.Out[a])
		if s.Strides != nil {
			g.s[l] = i32Of(s.Strides[a])
		}
		if s.Dilations != nil {
			g.d[l] = i32Of(s.Dilations[a])
		}
		if s.Pads != nil {
			g.pb[l] = i32Of(s.Pads[a])
		}
	}
	return g
}

func (g *convGeom) arg(a *Args) *Args {
	return a.Bytes(unsafe.Slice((*byte)(unsafe.Pointer(g)), unsafe.Sizeof(*g)))
}

// Im2ColPlane implements runtime.PerSampleOps (im2col). plane is not
// used.
func (d *Device) Im2ColPlane(s *runtime.ConvShape, xi []float32, g int, col, plane []float32) {
	d.im2col(s, xi[:s.C*s.InSize], 1, g, col, "Im2ColPlane")
}

// Im2ColBatch implements runtime.PerSampleOps (im2col). plane is not
// used.
func (d *Device) Im2ColBatch(s *runtime.ConvShape, x []float32, i0, n, g int, col, plane []float32) {
	xs := s.C * s.InSize
	// x from sample i0 on, so that a host operand stages only the chunk.
	d.im2col(s, x[i0*xs:(i0+n)*xs], n, g, col, "Im2ColBatch")
}

// im2colSeg is the kernel's IM2COL_SEG: the positions of a row a warp
// unfolds.
const im2colSeg = 1024

// im2col launches im2col over the n samples at the start of x: a warp
// per segment of im2colSeg positions of a row.
func (d *Device) im2col(s *runtime.ConvShape, x []float32, n, g int, col []float32, op string) {
	total := n * s.D * s.T
	if total == 0 {
		return
	}
	if s.InSize > math.MaxInt32 || s.T > math.MaxInt32-im2colSeg {
		panic(fmt.Sprintf("cuda: %s: a plane of %d elements and %d positions, more than the kernel's 32-bit indices take", op, s.InSize, s.T))
	}
	geom := geomOf(s)
	rows, segs := int64(n*s.D), int64((s.T+im2colSeg-1)/im2colSeg)
	a := d.begin()
	defer d.end(op)
	geom.arg(a).Ptr(f32(x, opIn, d)).I32(int32(g)).Ptr(f32(col[:total], opOut, d)).I64(rows).I32(int32(segs))
	d.launch("im2col", 32*rows*segs)
}

// ConvWeightGrad implements runtime.PerSampleOps: the convolution's weight
// gradient through cuDNN where the driver has it (float32 products), else
// as GEMMs over chunks of samples (conv.go; ws is scratch of
// ConvWorkspaceSize(s)), or a warp per weight for the shapes convByGEMM
// leaves to the direct kernel.
func (d *Device) ConvWeightGrad(s *runtime.ConvShape, x, dy, dw, ws []float32) {
	n := s.M * s.D
	if n == 0 {
		return
	}
	if s.N == 0 || s.T == 0 {
		d.Fill(0, dw[:n])
		return
	}
	d.begin()
	defer d.end("ConvWeightGrad")
	d.profConv(s, s.N)
	px, pdy, pdw := f32(x[:s.N*s.C*s.InSize], opIn, d), f32(dy[:s.N*s.M*s.T], opIn, d), f32(dw[:n], opOut, d)
	switch {
	case d.libOrGEMM(ConvBackwardFilter, s, px, pdw, pdy, false, ws): // float32: the clipped sum
	case convByGEMM(s):
		d.convWeightGradGEMM(d.convSetup(s, ws), px, pdy, pdw)
	default:
		d.launchWeightGrad(s, s.N, px, pdy, pdw)
	}
}

// ConvSampleWeightGrads implements runtime.ConvSampleGrads through cuDNN:
// samples i0 … i0+n−1 as the groups of one grouped convolution — their
// inputs the n·C channels of one image, their output gradients its n·M —
// whose filter gradient, n·M filters of C/G·K taps, is the samples'
// gradients one after another in the weights' layout. Float32 (no TF32:
// these are what the norms are taken of). False where there is no
// library or it refuses the shape (no deterministic algorithm within the
// workspace, asymmetric pads).
func (d *Device) ConvSampleWeightGrads(s *runtime.ConvShape, x, dy []float32, i0, n int, inst []float32) bool {
	if n <= 0 || s.T == 0 || s.M*s.D == 0 {
		return false
	}
	d.begin()
	defer d.end("ConvSampleWeightGrads")
	d.profConv(s, n)
	gs := d.samplesAsGroups(s, n)
	if d.noDNN || gs == nil {
		return false
	}
	cx, cy := s.C*s.InSize, s.M*s.T
	px, pdy := f32(x[i0*cx:(i0+n)*cx], opIn, d), f32(dy[i0*cy:(i0+n)*cy], opIn, d)
	return d.dnnConv(ConvBackwardFilter, gs, px, f32(inst[:n*s.M*s.D], opOut, d), pdy, 0, false)
}

// PreferSampleGrads implements runtime.ConvSampleGrads: whether cuDNN's
// filter gradient of n samples as groups (ConvSampleWeightGrads) forms
// s's per-sample gradients faster per sample than own, the engine's
// unfolding path for ownN samples. The first use of the shape measures
// both, pathTrials runs each back to back after a first run of each (as
// libOrGEMM measures cuDNN against the GEMM path), and the driver keeps
// the choice on disk beside cuDNN's algorithms, so that later runs take
// the same path and round the same way. The library wherever it runs s
// where the driver does not measure (EnvCUDNNGEMM=off, cuDNN's
// heuristics); false where it cannot run s.
//
// The third loan's kept choices are why: VGG-16's filter gradient of 32
// samples as groups at 224×224 took cuDNN 7.1 ms, as long as its summed
// filter gradient of the same batch, while the unfolding path's products
// and unfolding of its other early layers were 72 of a bk step's 173
// profiled ms.
func (d *Device) PreferSampleGrads(s *runtime.ConvShape, x, dy []float32, n int, inst []float32, ownN int, own func()) bool {
	if n <= 0 || ownN <= 0 {
		return false
	}
	d.mu.Lock()
	gs := d.samplesAsGroups(s, n)
	lib, known := d.samplePaths[gs]
	d.mu.Unlock()
	switch {
	case gs == nil:
		return false
	case known:
		return lib
	case !d.ConvSampleWeightGrads(s, x, dy, 0, n, inst):
		return false // no library, or it refuses the shape (remembered)
	}
	d.mu.Lock()
	a := d.dnnArgs // gs's library arguments, as the run above set them
	pk, ok := d.drv.(pathKeeper)
	var kept, measure bool
	lib = true
	if ok {
		lib, kept, measure = pk.ConvPath(&a, rivalUnfolding)
	}
	d.mu.Unlock()
	if measure && !kept {
		tLib := pathTimer(d, ConvBackwardFilter, true, func() { d.ConvSampleWeightGrads(s, x, dy, 0, n, inst) })
		own()
		tOwn := pathTimer(d, ConvBackwardFilter, false, own)
		perSample := func(t time.Duration, samples int) float32 {
			return float32(t.Seconds() * 1e3 / pathTrials / float64(samples))
		}
		libMS, ownMS := perSample(tLib, n), perSample(tOwn, ownN)
		lib = libMS <= ownMS
		d.mu.Lock()
		d.samplesMeasured++
		pk.KeepConvPath(&a, rivalUnfolding, lib, libMS, ownMS)
		d.mu.Unlock()
	} else if !measure {
		lib = true
	}
	d.mu.Lock()
	if d.samplePaths == nil {
		d.samplePaths = map[*runtime.ConvShape]bool{}
	}
	d.samplePaths[gs] = lib
	d.mu.Unlock()
	return lib
}

// samplesAsGroups returns s with n samples as the groups of one image
// (ConvSampleWeightGrads), made at first use and kept (d.mu held); nil
// where the shape cannot be one.
func (d *Device) samplesAsGroups(s *runtime.ConvShape, n int) *runtime.ConvShape {
	key := groupedKey{s, n}
	if gs, ok := d.grouped[key]; ok {
		return gs
	}
	gs := &runtime.ConvShape{N: 1, C: n * s.C, M: n * s.M, Group: n * max(s.Group, 1),
		In: s.In, Kernel: s.Kernel, Strides: s.Strides, Dilations: s.Dilations, Pads: s.Pads}
	if err := gs.Init(); err != nil || gs.T != s.T || gs.D != s.D {
		gs = nil
	}
	if d.grouped == nil {
		d.grouped = map[groupedKey]*runtime.ConvShape{}
	}
	d.grouped[key] = gs
	return gs
}

// groupedKey names a shape with a count of samples as its groups.
type groupedKey struct {
	s *runtime.ConvShape
	n int
}

// convWeightGrad is the direct weight gradient of s over the first
// samples samples of x and dy (conv_weight_grad).
func (d *Device) convWeightGrad(s *runtime.ConvShape, samples int, x, dy, dw []float32, op string) {
	n := s.M * s.D
	if n == 0 {
		return
	}
	if samples == 0 || s.T == 0 {
		d.Fill(0, dw[:n])
		return
	}
	d.begin()
	defer d.end(op)
	d.launchWeightGrad(s, samples, f32(x[:samples*s.C*s.InSize], opIn, d), f32(dy[:samples*s.M*s.T], opIn, d), f32(dw[:n], opOut, d))
}

// launchWeightGrad launches conv_weight_grad over the first samples
// samples of the device operands x and dy into dw (d.mu held).
func (d *Device) launchWeightGrad(s *runtime.ConvShape, samples int, x, dy, dw DevicePtr) {
	n := s.M * s.D
	geom := geomOf(s)
	d.args.Reset()
	geom.arg(d.args).Ptr(x).Ptr(dy).Ptr(dw).I32(i32Of(samples)).I64(int64(n))
	d.launch("conv_weight_grad", 32*int64(n))
}

// ConvWorkspaceSize implements runtime.PerSampleOps: the GEMM path's
// scratch (ConvScratchSize), none on the direct kernel.
func (d *Device) ConvWorkspaceSize(s *runtime.ConvShape) int { return convScratch(s) }

// ConvTapGrams implements runtime.ConvTapGrams: a thread per element of
// the Grams (conv_tap_grams), its taps' sum in double in tap order,
// rounded once — the sum the CPU's gather of the taps and ReduceToShape
// take.
func (d *Device) ConvTapGrams(s *runtime.ConvShape, X []float32, n int, aa []float32) {
	if max(s.Group, 1) != 1 {
		panic(fmt.Sprintf("cuda: ConvTapGrams of a convolution with %d groups", s.Group))
	}
	total := n * s.T * s.T
	if total == 0 {
		return
	}
	geom := geomOf(s)
	a := d.begin()
	defer d.end("ConvTapGrams")
	d.profConv(s, n)
	geom.arg(a).Ptr(f32(X[:n*s.InSize*s.InSize], opIn, d)).Ptr(f32(aa[:total], opOut, d)).I64(int64(total))
	d.launch("conv_tap_grams", int64(total))
}

// DepthwisePerSampleGrad implements runtime.PerSampleOps: the convolution's
// weight gradient of one sample (a depthwise group is one input channel),
// one thread per weight. ws is not used.
func (d *Device) DepthwisePerSampleGrad(s *runtime.ConvShape, xi, dyi, dw, ws []float32) {
	if !s.IsDepthwise() {
		panic(fmt.Sprintf("cuda: DepthwisePerSampleGrad of a convolution with %d groups and %d channels, not depthwise", s.Group, s.C))
	}
	d.convWeightGrad(s, 1, xi, dyi, dw, "DepthwisePerSampleGrad")
}

// DepthwiseGradBatch implements runtime.PerSampleOps: the n samples'
// depthwise weight gradients in one launch, a warp per weight of each
// sample (conv_weight_grad_rows), each row the bits DepthwisePerSampleGrad
// writes for its sample. ws is not used.
func (d *Device) DepthwiseGradBatch(s *runtime.ConvShape, x, dy []float32, i0, n int, dw, ws []float32) {
	if !s.IsDepthwise() {
		panic(fmt.Sprintf("cuda: DepthwiseGradBatch of a convolution with %d groups and %d channels, not depthwise", s.Group, s.C))
	}
	size := s.M * s.D
	if n == 0 || size == 0 {
		return
	}
	if s.T == 0 {
		d.Fill(0, dw[:n*size])
		return
	}
	geom := geomOf(s)
	a := d.begin()
	defer d.end("DepthwiseGradBatch")
	geom.arg(a).Ptr(f32(x[:(i0+n)*s.C*s.InSize], opIn, d)).Ptr(f32(dy[:(i0+n)*s.M*s.T], opIn, d)).Ptr(f32(dw[:n*size], opOut, d)).I64(int64(i0)).I64(int64(n)).I64(int64(size))
	d.launch("conv_weight_grad_rows", 32*int64(n*size))
}

// DepthwiseScratchSize implements runtime.PerSampleOps: the kernel needs
// no scratch.
func (d *Device) DepthwiseScratchSize(s *runtime.ConvShape) int { return 0 }

// StandardizedNormTerms implements runtime.PerSampleOps: a warp per row of
// a sample (std_norm_terms), its five sums in the lane order, the CPU's
// (runtime.StdRowSums), combined as runtime.StdResidualSq.
func (d *Device) StandardizedNormTerms(g, xhat, coefW, coefG []float32, rows, k, n, ld int, tW, tG []float64) {
	if n == 0 || rows == 0 {
		return
	}
	last := (rows-1)*ld + n
	a := d.begin()
	defer d.end("StandardizedNormTerms")
	var pcg, ptg DevicePtr
	if tG != nil {
		pcg, ptg = f32(coefG[:rows], opIn, d), f64(tG[:last], opInOut, d)
	}
	a.Ptr(f32(g[:n*rows*k], opIn, d)).Ptr(f32(xhat[:rows*k], opIn, d)).Ptr(f32(coefW[:rows], opIn, d)).Ptr(pcg)
	a.I64(int64(rows)).I64(int64(k)).I64(int64(n)).I64(int64(ld)).I64(runtime.SumChunk).Ptr(f64(tW[:last], opInOut, d)).Ptr(ptg)
	d.launch("std_norm_terms", 32*int64(n*rows))
}

// StandardizedGhostTerms implements runtime.PerSampleOps: a warp per row
// of a sample (std_ghost_terms), its two sums in the lane order, the
// CPU's (runtime.DotLanes), combined as runtime.StdGhostTerm.
func (d *Device) StandardizedGhostTerms(dy, z, u, cA, cB, coefG []float32, rows, groups, t, n, ld int, tW, tG []float64) {
	if n == 0 || rows == 0 {
		return
	}
	last := (rows-1)*ld + n
	a := d.begin()
	defer d.end("StandardizedGhostTerms")
	var pcg, ptg DevicePtr
	if tG != nil {
		pcg, ptg = f32(coefG[:rows], opIn, d), f64(tG[:last], opInOut, d)
	}
	a.Ptr(f32(dy[:n*rows*t], opIn, d)).Ptr(f32(z[:n*rows*t], opIn, d)).Ptr(f32(u[:n*groups*t], opIn, d))
	a.Ptr(f32(cA[:rows], opIn, d)).Ptr(f32(cB[:rows], opIn, d)).Ptr(pcg)
	a.I64(int64(rows)).I64(int64(groups)).I64(int64(t)).I64(int64(n)).I64(int64(ld)).I64(runtime.SumChunk).Ptr(f64(tW[:last], opInOut, d)).Ptr(ptg)
	d.launch("std_ghost_terms", 32*int64(n*rows))
}

// StandardizedVJP implements runtime.PerSampleOps: a warp per row
// (std_vjp), its two sums in the CPU's lane order, each element as
// runtime.StdVJP.
func (d *Device) StandardizedVJP(s, xhat, c, gs []float32, rows, k int, gain []float32) {
	if rows == 0 {
		return
	}
	a := d.begin()
	defer d.end("StandardizedVJP")
	var pgs, pg DevicePtr
	if gain != nil {
		pgs, pg = f32(gs[:rows], opIn, d), f32(gain[:rows], opOut, d)
	}
	a.Ptr(f32(s[:rows*k], opInOut, d)).Ptr(f32(xhat[:rows*k], opIn, d)).Ptr(f32(c[:rows], opIn, d)).Ptr(pgs)
	a.I64(int64(rows)).I64(int64(k)).I64(runtime.SumChunk).Ptr(pg)
	d.launch("std_vjp", 32*int64(rows))
}
