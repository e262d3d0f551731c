package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// The LayoutOps of the device (runtime/device_layout.go; kernels in
// kernels/layout.cu): Copy is one copy of the driver's, the others one
// thread per element moved. An IndexMap's device
// form (its element map and, for the adjoint, each source element's
// readers in increasing order) is built at the map's first use and kept
// on the Device keyed by the map's pointer — plans are read-only and live
// as long as the plan that holds them — until Close; a PermPlan and
// RowBlocks need nothing on the device: their shapes go to the kernels as
// arguments (iterLayout; a launch per part).

// gatherPlan is an IndexMap in device memory.
type gatherPlan struct {
	// idx is the element map (Len int32s); start and readers the
	// adjoint's: the y elements reading x element j are
	// readers[start[j]:start[j+1]], increasing.
	idx, start, readers DevicePtr
}

// Copy implements runtime.LayoutOps with one copy of the driver's (no
// kernel, no staging): device to device, or between the host and the
// device, or a host copy when neither operand is device memory. The
// engine copies many small blocks, each one call.
func (d *Device) Copy(x, y []float32) {
	n := len(x)
	if n == 0 {
		return
	}
	y = y[:n]
	d.mu.Lock()
	defer d.mu.Unlock()
	px, py := DevicePtr(uintptr(unsafe.Pointer(&x[0]))), DevicePtr(uintptr(unsafe.Pointer(&y[0])))
	var err error
	switch xd, yd := d.isDevice(px, 4*n), d.isDevice(py, 4*n); {
	case xd && yd:
		err = d.drv.CopyDtoD(py, px, 4*n)
	case xd:
		err = d.drv.CopyDtoH(unsafe.Pointer(&y[0]), px, 4*n)
	case yd:
		err = d.drv.CopyHtoD(py, unsafe.Pointer(&x[0]), 4*n)
	default:
		copy(y, x)
	}
	if err != nil {
		fault(fmt.Errorf("cuda: Copy of %d elements: %w", n, err))
	}
}

// Fill implements runtime.LayoutOps.
func (d *Device) Fill(v float32, y []float32) {
	if len(y) == 0 {
		return
	}
	a := d.begin()
	defer d.end("Fill")
	a.F32(v).Ptr(f32(y, opOut, d)).I64(int64(len(y)))
	d.launch("fill_f", int64(len(y)))
}

// gatherPlanOf returns m's device form, building it at first use (d.mu
// held).
func (d *Device) gatherPlanOf(m *runtime.IndexMap) *gatherPlan {
	if gp := d.gathers[m]; gp != nil {
		return gp
	}
	idx := m.Idx
	if idx == nil {
		idx = make([]int32, m.Len)
		for i := range idx {
			idx[i] = -1
		}
		if r := m.Runs; r != nil {
			for k := range r.Dst {
				for e := int32(0); e < r.N[k]; e++ {
					idx[r.Dst[k]+e] = r.Src[k] + e
				}
			}
		}
	}
	start := make([]int32, m.SrcLen+1)
	for _, j := range idx {
		if j >= 0 {
			start[j+1]++
		}
	}
	for j := 0; j < m.SrcLen; j++ {
		start[j+1] += start[j]
	}
	readers := make([]int32, start[m.SrcLen])
	next := append([]int32(nil), start[:m.SrcLen]...)
	for i, j := range idx {
		if j >= 0 {
			readers[next[j]] = int32(i)
			next[j]++
		}
	}
	gp := &gatherPlan{idx: d.upload(idx), start: d.upload(start), readers: d.upload(readers)}
	if d.gathers == nil {
		d.gathers = map[*runtime.IndexMap]*gatherPlan{}
	}
	d.gathers[m] = gp
	return gp
}

// upload copies v into new device memory, held until Close (d.mu held).
func (d *Device) upload(v []int32) DevicePtr {
	if len(v) == 0 {
		return 0
	}
	p, err := d.alloc(4 * len(v))
	if err == nil {
		err = d.drv.CopyHtoD(p, unsafe.Pointer(&v[0]), 4*len(v))
	}
	if err != nil {
		fault(fmt.Errorf("cuda: uploading a plan: %w", err))
	}
	return p
}

// IndexGather implements runtime.LayoutOps.
func (d *Device) IndexGather(x []float32, m *runtime.IndexMap, y []float32) {
	if m.Len == 0 {
		return
	}
	a := d.begin()
	defer d.end("IndexGather")
	gp := d.gatherPlanOf(m)
	a.Ptr(f32(x[:m.SrcLen], opIn, d)).Ptr(gp.idx).F32(m.Fill).Ptr(f32(y[:m.Len], opOut, d)).I64(int64(m.Len))
	d.launch("index_gather", int64(m.Len))
}

// IndexGatherBackward implements runtime.LayoutOps: one thread per element
// of dx, adding its readers' gradients in increasing order.
func (d *Device) IndexGatherBackward(dy []float32, m *runtime.IndexMap, dx []float32) {
	if m.SrcLen == 0 {
		return
	}
	a := d.begin()
	defer d.end("IndexGatherBackward")
	gp := d.gatherPlanOf(m)
	a.Ptr(f32(dy[:m.Len], opIn, d)).Ptr(gp.start).Ptr(gp.readers).Ptr(f32(dx[:m.SrcLen], opOut, d)).I64(int64(m.SrcLen))
	d.launch("index_gather_backward", int64(m.SrcLen))
}

// IndexGatherBackwardRows implements runtime.LayoutOps in one launch: a
// thread per element of dx's rows, each row's sums IndexGatherBackward's.
func (d *Device) IndexGatherBackwardRows(dy []float32, m *runtime.IndexMap, rows int, dx []float32) {
	if m.SrcLen == 0 || rows == 0 {
		return
	}
	a := d.begin()
	defer d.end("IndexGatherBackwardRows")
	gp := d.gatherPlanOf(m)
	a.Ptr(f32(dy[:rows*m.Len], opIn, d)).Ptr(gp.start).Ptr(gp.readers).Ptr(f32(dx[:rows*m.SrcLen], opOut, d)).I64(int64(m.Len)).I64(int64(m.SrcLen)).I64(int64(rows * m.SrcLen))
	d.launch("index_gather_backward_rows", int64(rows*m.SrcLen))
}

// permLayout is the iteration over the transposed shape with x's strides
// as operand 0.
func permLayout(pp *runtime.PermPlan) (iterLayout, int) {
	var ab [stackRank]axis
	axes := ab[:0]
	for _, p := range pp.Perm {
		ax := axis{dim: pp.Shape[p]}
		ax.st[0] = numElems(pp.Shape[p+1:])
		axes = append(axes, ax)
	}
	return compactLayout(axes, 1, pp.Shape, pp.Perm), numElems(pp.Shape)
}

// Transpose implements runtime.LayoutOps: one thread per element of y.
func (d *Device) Transpose(x []float32, pp *runtime.PermPlan, y []float32) {
	d.permute(x, y, pp, false, "Transpose")
}

// TransposeBackward implements runtime.LayoutOps: one thread per element
// of dy, written to its place in dx.
func (d *Device) TransposeBackward(dy []float32, pp *runtime.PermPlan, dx []float32) {
	d.permute(dx, dy, pp, true, "TransposeBackward")
}

func (d *Device) permute(x, y []float32, pp *runtime.PermPlan, scatter bool, op string) {
	l, n := permLayout(pp)
	if n == 0 {
		return
	}
	xk, yk, sc := opIn, opOut, int32(0)
	if scatter {
		xk, yk, sc = opOut, opIn, 1
	}
	a := d.begin()
	defer d.end(op)
	a.Ptr(f32(x[:n], xk, d)).Ptr(f32(y[:n], yk, d)).I32(sc).I64(int64(n))
	l.arg(a)
	d.launch("permute", int64(n))
}

// Expand implements runtime.LayoutOps: one thread per element of y.
func (d *Device) Expand(x []float32, xShape []int, y []float32, yShape []int) {
	n := numElems(yShape)
	if n == 0 {
		return
	}
	if numElems(xShape) == n { // nothing broadcast: a copy
		d.Copy(x[:n], y[:n])
		return
	}
	l := newLayout(yShape, nil, xShape)
	a := d.begin()
	defer d.end("Expand")
	a.Ptr(f32(x[:numElems(xShape)], opIn, d)).Ptr(f32(y[:n], opOut, d)).I64(int64(n))
	l.arg(a)
	d.launch("expand", int64(n))
}

// Concat implements runtime.LayoutOps: y zeroed first where a part is nil
// or the parts leave gaps, then a launch per part.
func (d *Device) Concat(xs [][]float32, b *runtime.RowBlocks, y []float32) {
	n := b.Outer * b.Row
	if n == 0 {
		return
	}
	y = y[:n]
	covered, whole := 0, true
	for k, x := range xs {
		covered += b.Size[k]
		whole = whole && x != nil
	}
	if covered != b.Row || !whole {
		d.Fill(0, y)
	}
	d.rows(y, b, xs, false, "Concat")
}

// Split implements runtime.LayoutOps: a launch per non-nil part.
func (d *Device) Split(x []float32, b *runtime.RowBlocks, ys [][]float32) {
	if b.Outer*b.Row == 0 {
		return
	}
	d.rows(x[:b.Outer*b.Row], b, ys, true, "Split")
}

func (d *Device) rows(whole []float32, b *runtime.RowBlocks, parts [][]float32, split bool, op string) {
	a := d.begin()
	defer d.end(op)
	wk, pk, sp := opInOut, opIn, int32(0)
	if split {
		wk, pk, sp = opIn, opOut, 1
	}
	w := f32(whole, wk, d)
	for k, part := range parts {
		n := b.Outer * b.Size[k]
		if part == nil || n == 0 {
			continue
		}
		a.Reset()
		a.Ptr(w).I64(int64(b.Row)).I64(int64(b.Off[k])).Ptr(f32(part[:n], pk, d)).I64(int64(b.Size[k])).I32(sp).I64(int64(n))
		d.launch("rows_copy", int64(n))
	}
}
