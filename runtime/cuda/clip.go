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
