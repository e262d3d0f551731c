package cuda

// Axpy implements runtime.LinalgOps.Axpy (kernels/linalg.cu): y ← y + α·x,
// the product rounded before the sum, as the CPU's.
func (d *Device) Axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	if len(x) == 0 {
		return
	}
	a := d.begin()
	defer d.end("Axpy")
	a.F32(alpha).Ptr(f32(x, opIn, d)).Ptr(f32(y, opInOut, d)).I64(int64(len(x)))
	d.launch("axpy", int64(len(x)))
}
