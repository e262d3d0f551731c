package cuda

import "github.com/dpfinetune/dpfinetune/runtime"

// ClipFactors implements runtime.ClipOps (kernels/clip.cu): the factors in
// float64 as runtime.ClipRule.Factor, rounded once.
func (d *Device) ClipFactors(r runtime.ClipRule, normSq []float64, dst []float32) {
	dst = dst[:len(normSq)]
	if len(normSq) == 0 {
		return
	}
	a := d.begin()
	defer d.end("ClipFactors")
	a.I32(int32(r.Fn)).F64(r.R).F64(r.Gamma).Ptr(f64(normSq, opIn, d)).Ptr(f32(dst, opOut, d)).I64(int64(len(normSq)))
	d.launch("clip_factors", int64(len(normSq)))
}

// CountClipped implements runtime.ClipOps (kernels/clip.cu), on one
// thread: the two counts come back as the call's result.
func (d *Device) CountClipped(normSq []float64, factors []float32) (nonFinite, clipped int) {
	if len(normSq) == 0 && len(factors) == 0 {
		return 0, 0
	}
	a := d.begin()
	defer d.end("CountClipped")
	a.Ptr(f64(normSq, opIn, d)).I64(int64(len(normSq))).Ptr(f32(factors, opIn, d)).I64(int64(len(factors))).Ptr(f64(d.res[:2], opOut, d))
	d.launchOne("count_clipped")
	d.flush("CountClipped")
	return int(d.res[0]), int(d.res[1])
}
