//go:build linux && (amd64 || arm64)

package cuda

import (
	"math/rand"
	"slices"
	"testing"
	"unsafe"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// randIndexMap draws an IndexMap onto nx source elements: element by
// element (random indices, repeats and fills: the Idx form) or as slices
// of x (long runs: the Runs form), with or without fills.
func randIndexMap(r *rand.Rand) *runtime.IndexMap {
	nx := 1 + r.Intn(3000)
	var idx []int32
	if r.Intn(2) == 0 {
		idx = make([]int32, r.Intn(4000))
		for i := range idx {
			idx[i] = int32(r.Intn(nx+nx/8)) - int32(nx/8) // some −k: fill
			if idx[i] < 0 {
				idx[i] = -1
			}
		}
	} else {
		for len(idx) < 5000 && r.Intn(8) != 0 {
			s, n := r.Intn(nx), 10+r.Intn(200)
			for k := 0; k < n && s+k < nx; k++ {
				idx = append(idx, int32(s+k))
			}
			for k := r.Intn(3) * 5; k > 0; k-- {
				idx = append(idx, -1)
			}
		}
	}
	return runtime.NewIndexMap(idx, nx, float32(r.NormFloat64()))
}

// randPerm draws a shape of rank ≤ 5 and a permutation of its axes.
func randPerm(r *rand.Rand) *runtime.PermPlan {
	shape := make([]int, r.Intn(6))
	for a := range shape {
		shape[a] = 1 + r.Intn(8)
	}
	return runtime.NewPermPlan(shape, r.Perm(len(shape)))
}

// randBlocks draws row blocks (some gaps between parts) and their parts,
// some nil.
func randBlocks(r *rand.Rand) (*runtime.RowBlocks, []int) {
	outer, k := r.Intn(40), 1+r.Intn(4)
	var off, size []int
	row := 0
	for range k {
		row += r.Intn(2) * r.Intn(3) // a gap sometimes
		off = append(off, row)
		s := r.Intn(50)
		size = append(size, s)
		row += s
	}
	row += r.Intn(2)
	return runtime.NewRowBlocks(outer, row, off, size), size
}

var layoutCases = []valueCase{
	{"Copy", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		n := r.Intn(600)
		if r.Intn(4) == 0 {
			n = r.Intn(10000) // beyond the emulation's grid
		}
		y := place(p, filled(n+3, 7))
		o.Copy(place(p, unif(r, n)), y)
		return [][]float32{fetch(p, y)}, true
	}, 0},
	{"Fill", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		y := place(p, filled(r.Intn(600)+r.Intn(4)/3*9000, 7))
		o.Fill([]float32{0, 1.5}[r.Intn(2)], y)
		return [][]float32{fetch(p, y)}, true
	}, 0},
	{"IndexGather", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		m := randIndexMap(r)
		y := place(p, filled(m.Len, 7)) // exactly: the CPU fills all of a longer y
		o.IndexGather(place(p, unif(r, m.SrcLen)), m, y)
		return [][]float32{fetch(p, y)}, true
	}, 0},
	{"IndexGatherBackward", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		m := randIndexMap(r)
		dx := place(p, filled(m.SrcLen, 7)) // the CPU clears all of a longer dx
		o.IndexGatherBackward(place(p, unif(r, m.Len)), m, dx)
		return [][]float32{fetch(p, dx)}, true
	}, 1e-6},
	{"IndexGatherBackwardRows", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		m := randIndexMap(r)
		rows := r.Intn(4)
		dx := place(p, filled(rows*m.SrcLen+1, 7)) // the element past the rows stays
		o.IndexGatherBackwardRows(place(p, unif(r, rows*m.Len)), m, rows, dx)
		return [][]float32{fetch(p, dx)}, true
	}, 1e-6},
	{"Transpose", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		pp := randPerm(r)
		n := shapeNumel(pp.Shape)
		x, y, dx := unif(r, n), place(p, filled(n, 7)), place(p, filled(n, 7))
		o.Transpose(place(p, x), pp, y)
		o.TransposeBackward(place(p, unif(r, n)), pp, dx)
		return [][]float32{fetch(p, y), fetch(p, dx)}, true
	}, 0},
	{"Expand", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		shape, s := randBroadcast(r, 1)
		y := place(p, filled(shapeNumel(shape), 7))
		o.Expand(place(p, unif(r, shapeNumel(s[0]))), s[0], y, shape)
		return [][]float32{fetch(p, y)}, true
	}, 0},
	{"ConcatSplit", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LayoutOps)
		if !ok {
			return nil, false
		}
		b, size := randBlocks(r)
		xs, ys := make([][]float32, len(size)), make([][]float32, len(size))
		for k, s := range size {
			if r.Intn(4) != 0 {
				xs[k] = place(p, unif(r, b.Outer*s))
				ys[k] = place(p, filled(b.Outer*s, 7))
			}
		}
		y := place(p, filled(b.Outer*b.Row, 7))
		o.Concat(xs, b, y)
		o.Split(place(p, unif(r, b.Outer*b.Row)), b, ys)
		out := [][]float32{fetch(p, y)}
		for _, v := range ys {
			if v != nil {
				out = append(out, fetch(p, v))
			}
		}
		return out, true
	}, 0},
}

// TestLayoutOps holds the Device's LayoutOps to the reference backend and
// the CPU on random maps, permutations and blocks, through the emulation.
func TestLayoutOps(t *testing.T) {
	testValueCases(t, emuDevice(t), layoutCases, 25)
}

// TestEmptyOperands runs the operations on empty operands and shapes with
// a zero extent: nothing to do, nothing launched, nothing written.
func TestEmptyOperands(t *testing.T) {
	d := emuDevice(t)
	y := []float32{7}
	d.Copy(nil, y)
	d.Fill(1, nil)
	d.Expand(nil, []int{0, 3}, nil, []int{2, 0, 3})
	d.Transpose(nil, runtime.NewPermPlan([]int{2, 0}, []int{1, 0}), nil)
	d.IndexGather(nil, runtime.NewIndexMap(nil, 0, 0), nil)
	d.Concat([][]float32{nil}, runtime.NewRowBlocks(0, 3, []int{0}, []int{3}), nil)
	d.Binary(runtime.BinaryAdd, nil, []int{0}, []float32{1}, []int{1}, nil, []int{0})
	d.ReduceToShape(nil, []int{0, 2}, y[:0], []int{0, 1})
	t2 := []float32{7, 7}
	d.ReduceToShape(nil, []int{0, 2}, t2, []int{2}) // sums of nothing
	d.Unary(runtime.UnaryExp, runtime.UnaryParams{}, nil, nil)
	d.UnaryBackward(runtime.UnaryExp, runtime.UnaryParams{}, nil, nil, nil, nil)
	d.Gemm(false, false, 0, 3, 2, 1, nil, 2, make([]float32, 6), 3, 0, nil, 3)
	d.MaxMin(false, [][]float32{nil}, [][]int32{nil}, nil)
	if y[0] != 7 || t2[0] != 0 || t2[1] != 0 {
		t.Errorf("after empty operations: y %v, t %v", y, t2)
	}
}

// TestCopyMixed copies between host slices and device buffers in every
// combination, and within one buffer.
func TestCopyMixed(t *testing.T) {
	d := emuDevice(t)
	r := rand.New(rand.NewSource(3))
	src := unif(r, 1000)
	for _, xdev := range []bool{false, true} {
		for _, ydev := range []bool{false, true} {
			px, py := &placer{bufs: map[uintptr]runtime.Buffer{}}, &placer{bufs: map[uintptr]runtime.Buffer{}}
			if xdev {
				px.dev = d
			}
			if ydev {
				py.dev = d
			}
			x, y := place(px, src), place(py, filled(1001, 7))
			d.Copy(x[10:], y[1:])
			got := fetch(py, y)
			if got[0] != 7 || got[1000] != 7 || got[1] != src[10] || got[990] != src[999] {
				t.Errorf("x on the device %v, y on the device %v: got %v … %v", xdev, ydev, got[:3], got[989:])
			}
		}
	}
}

// kindDriver counts the copies a Driver is asked for by kind.
type kindDriver struct {
	Driver
	htod, dtoh, dtod int
}

func (k *kindDriver) CopyHtoD(dst DevicePtr, src unsafe.Pointer, bytes int) error {
	k.htod++
	return k.Driver.CopyHtoD(dst, src, bytes)
}

func (k *kindDriver) CopyDtoH(dst unsafe.Pointer, src DevicePtr, bytes int) error {
	k.dtoh++
	return k.Driver.CopyDtoH(dst, src, bytes)
}

func (k *kindDriver) CopyDtoD(dst, src DevicePtr, bytes int) error {
	k.dtod++
	return k.Driver.CopyDtoD(dst, src, bytes)
}

// TestCopyInOutDevice: CopyIn from and CopyOut into slices of the
// device's own memory (a sub-plan's backward pass seeded from an engine
// buffer) copy device to device, not as host memory, and the host slices
// still go through the host copies.
func TestCopyInOutDevice(t *testing.T) {
	drv, err := Emulated()
	if err != nil {
		t.Skipf("no CUDA emulation here: %v", err)
	}
	k := &kindDriver{Driver: drv}
	d, err := New(k)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	k.htod, k.dtoh, k.dtod = 0, 0, 0 // New's and Alloc's own copies
	host := []float32{1, 2, 3, 4}
	if err := d.CopyIn(a, 2, host); err != nil { // host → a[2:6]
		t.Fatal(err)
	}
	if err := d.CopyIn(b, 0, a.Floats()[2:6]); err != nil { // a's memory → b[0:4]
		t.Fatal(err)
	}
	if err := d.CopyOut(a.Floats()[4:8], b, 1); err != nil { // b[1:5] → a's memory
		t.Fatal(err)
	}
	got := make([]float32, 8)
	if err := d.CopyOut(got, a, 0); err != nil { // a → host
		t.Fatal(err)
	}
	if want := []float32{0, 0, 1, 2, 2, 3, 4, 0}; !slices.Equal(got, want) {
		t.Errorf("a = %v, want %v", got, want)
	}
	if k.htod != 1 || k.dtoh != 1 || k.dtod != 2 {
		t.Errorf("copies: %d host to device, %d device to host, %d device to device; want 1, 1, 2", k.htod, k.dtoh, k.dtod)
	}
}
