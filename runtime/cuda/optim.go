package cuda

import (
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// AdamUpdate implements runtime.OptimOps (kernels/optim.cu), bit for bit
// the CPU's update.
func (d *Device) AdamUpdate(p, g, m, v []float32, c runtime.AdamCoeffs) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	if n == 0 {
		return
	}
	// The kernel's AdamCoeffs, field by field.
	k := [10]float32{c.GradScale, c.L2, c.Decay, c.Beta1, c.OneMinusBeta1, c.Beta2, c.OneMinusBeta2, c.StepSize, c.SqrtBC2, c.Eps}
	a := d.begin()
	defer d.end("AdamUpdate")
	a.Ptr(f32(p, opInOut, d)).Ptr(f32(g, opIn, d)).Ptr(f32(m, opInOut, d)).Ptr(f32(v, opInOut, d)).I64(int64(n))
	a.Bytes(unsafe.Slice((*byte)(unsafe.Pointer(&k[0])), 4*len(k)))
	d.launch("adam", int64(n))
}

// SGDUpdate implements runtime.OptimOps, bit for bit the CPU's update.
func (d *Device) SGDUpdate(p, g, vel []float32, c runtime.SGDCoeffs) {
	n := len(p)
	g = g[:n]
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("SGDUpdate")
	if c.Momentum == 0 {
		a.Ptr(f32(p, opInOut, d)).Ptr(f32(g, opIn, d)).I64(int64(n)).F32(c.LR).F32(c.WeightDecay).F32(c.GradScale)
		d.launch("sgd", int64(n))
		return
	}
	vel = vel[:n]
	first := int32(0)
	if c.First {
		first = 1
	}
	// On the first step the velocity is only written.
	velKind := opInOut
	if c.First {
		velKind = opOut
	}
	a.Ptr(f32(p, opInOut, d)).Ptr(f32(g, opIn, d)).Ptr(f32(vel, velKind, d)).I64(int64(n))
	a.F32(c.LR).F32(c.Momentum).F32(c.WeightDecay).F32(c.GradScale).I32(first)
	d.launch("sgd_momentum", int64(n))
}

// AverageUpdate implements runtime.OptimOps (kernels/optim.cu), bit for
// bit the CPU's.
func (d *Device) AverageUpdate(avg, p []float32, w float32) {
	n := len(avg)
	p = p[:n]
	if n == 0 {
		return
	}
	a := d.begin()
	defer d.end("AverageUpdate")
	a.Ptr(f32(avg, opInOut, d)).Ptr(f32(p, opIn, d)).I64(int64(n)).F32(w)
	d.launch("average", int64(n))
}
