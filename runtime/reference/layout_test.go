package reference

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
)

// vsCPU is one case of a table-driven comparison of the reference backend
// with runtime.CPU on one operation group T: run computes the case's
// outputs on a device's operations (its inputs drawn beforehand, so both
// devices see the same), and want, if set, is the hand-computed answer.
type vsCPU[T any] struct {
	name string
	run  func(ops T) [][]float32
	want [][]float32
	tol  float64 // relative tolerance; 0 means exact equality
}

// testVsCPU runs every case on ref and cpu and compares the outputs, and
// with want where the case has one.
func testVsCPU[T any](t *testing.T, ref, cpu T, cases []vsCPU[T]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, base := c.run(ref), c.run(cpu)
			compareOutputs(t, "reference vs cpu", got, base, c.tol)
			if c.want != nil {
				compareOutputs(t, "reference vs hand-computed", got, c.want, c.tol)
			}
		})
	}
}

func compareOutputs(t *testing.T, what string, got, want [][]float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for k := range got {
		if len(got[k]) != len(want[k]) {
			t.Fatalf("%s: output %d has %d elements, want %d", what, k, len(got[k]), len(want[k]))
		}
		bad := 0
		for i := range got[k] {
			g, w := float64(got[k][i]), float64(want[k][i])
			d := math.Abs(g - w)
			if !(d <= tol*math.Max(1, math.Abs(w))) && !(math.IsNaN(g) && math.IsNaN(w)) && g != w {
				if bad++; bad <= 5 {
					t.Errorf("%s: output %d [%d] = %v, want %v", what, k, i, g, w)
				}
			}
		}
	}
}

// randFloats returns n values in [-1, 1).
func randFloats(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	return x
}

// stale returns n elements holding a value no operation writes, so that
// an output an operation leaves unwritten shows.
func stale(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 1234
	}
	return x
}

func TestLayoutOpsVsCPU(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var cases []vsCPU[runtime.LayoutOps]
	add := func(name string, tol float64, want [][]float32, run func(ops runtime.LayoutOps) [][]float32) {
		cases = append(cases, vsCPU[runtime.LayoutOps]{name: name, run: run, want: want, tol: tol})
	}

	x := randFloats(rng, 37)
	add("Copy", 0, [][]float32{append([]float32(nil), x...)}, func(ops runtime.LayoutOps) [][]float32 {
		y := stale(37)
		ops.Copy(x, y)
		return [][]float32{y}
	})
	add("Fill", 0, [][]float32{{2.5, 2.5, 2.5}}, func(ops runtime.LayoutOps) [][]float32 {
		y := stale(3)
		ops.Fill(2.5, y)
		return [][]float32{y}
	})
	add("Fill0", 0, [][]float32{{0, 0}}, func(ops runtime.LayoutOps) [][]float32 {
		y := stale(2)
		ops.Fill(0, y)
		return [][]float32{y}
	})

	// Index maps: element maps (random, with repeats and padding) and
	// maps that compile to runs (slices, repeated rows, pads).
	maps := []struct {
		name string
		nx   int
		idx  []int32
	}{
		{"random", 20, func() []int32 {
			idx := make([]int32, 50)
			for i := range idx {
				idx[i] = int32(rng.Intn(24) - 4) // some < 0: fill
			}
			return idx
		}()},
		{"slice_runs", 60, func() []int32 {
			var idx []int32
			for r := 0; r < 5; r++ {
				for j := 1; j < 11; j++ {
					idx = append(idx, int32(r*12+j))
				}
			}
			return idx
		}()},
		{"repeated_rows", 30, func() []int32 {
			var idx []int32
			for _, row := range []int{2, 0, 2, 1, 2} {
				for j := 0; j < 10; j++ {
					idx = append(idx, int32(row*10+j))
				}
			}
			return idx
		}()},
		{"pad_runs", 32, func() []int32 {
			var idx []int32
			for r := 0; r < 4; r++ {
				idx = append(idx, -1, -1)
				for j := 0; j < 8; j++ {
					idx = append(idx, int32(r*8+j))
				}
			}
			return append(idx, -1, -1, -1)
		}()},
	}
	for _, mc := range maps {
		m := runtime.NewIndexMap(mc.idx, mc.nx, -0.75)
		x, dy := randFloats(rng, mc.nx), randFloats(rng, len(mc.idx))
		wantY, acc := make([]float32, len(mc.idx)), make([]float64, mc.nx)
		for i, j := range mc.idx {
			if j < 0 {
				wantY[i] = -0.75
				continue
			}
			wantY[i] = x[j]
			acc[j] += float64(dy[i])
		}
		wantDx := make([]float32, mc.nx)
		for j, v := range acc {
			wantDx[j] = float32(v)
		}
		add(fmt.Sprintf("IndexGather/%s/runs=%v", mc.name, m.Runs != nil), 1e-6, [][]float32{wantY, wantDx}, func(ops runtime.LayoutOps) [][]float32 {
			y, dx := stale(len(mc.idx)), stale(mc.nx)
			ops.IndexGather(x, m, y)
			ops.IndexGatherBackward(dy, m, dx)
			return [][]float32{y, dx}
		})
	}

	perms := []struct{ shape, perm []int }{
		{[]int{3, 4}, []int{1, 0}},
		{[]int{2, 3, 4, 5}, []int{0, 2, 1, 3}}, // row copies
		{[]int{2, 3, 4, 5}, []int{0, 3, 1, 2}}, // tiles
		{[]int{17, 33}, []int{1, 0}},
		{[]int{2, 1, 3, 1, 4}, []int{4, 3, 2, 1, 0}},
		{[]int{5}, []int{0}},
	}
	for _, pc := range perms {
		pp := runtime.NewPermPlan(pc.shape, pc.perm)
		n := 1
		for _, d := range pc.shape {
			n *= d
		}
		x, dy := randFloats(rng, n), randFloats(rng, n)
		add(fmt.Sprint("Transpose/", pc.shape, pc.perm), 0, nil, func(ops runtime.LayoutOps) [][]float32 {
			y, dx := stale(n), stale(n)
			ops.Transpose(x, pp, y)
			ops.TransposeBackward(dy, pp, dx)
			return [][]float32{y, dx}
		})
	}
	add("Transpose/hand", 0, [][]float32{{1, 4, 2, 5, 3, 6}}, func(ops runtime.LayoutOps) [][]float32 {
		y := stale(6)
		ops.Transpose([]float32{1, 2, 3, 4, 5, 6}, runtime.NewPermPlan([]int{2, 3}, []int{1, 0}), y)
		return [][]float32{y}
	})

	for _, ec := range []struct{ xs, ys []int }{
		{[]int{3, 1}, []int{2, 3, 4}},
		{[]int{1}, []int{5}},
		{[]int{2, 1, 3}, []int{2, 4, 3}},
	} {
		nx, ny := 1, 1
		for _, d := range ec.xs {
			nx *= d
		}
		for _, d := range ec.ys {
			ny *= d
		}
		x := randFloats(rng, nx)
		add(fmt.Sprint("Expand/", ec.xs, ec.ys), 0, nil, func(ops runtime.LayoutOps) [][]float32 {
			y := stale(ny)
			ops.Expand(x, ec.xs, y, ec.ys)
			return [][]float32{y}
		})
	}

	// Concat and Split: parts covering the rows, and parts with gaps and
	// a nil part (a fused split's backward).
	for _, bc := range []struct {
		name       string
		outer, row int
		off, size  []int
		nilPart    int
	}{
		{"cover", 3, 9, []int{0, 2, 7}, []int{2, 5, 2}, -1},
		{"gaps_nil", 4, 12, []int{1, 5, 9}, []int{3, 2, 3}, 1},
		{"wide", 70, 600, []int{0, 300}, []int{300, 300}, -1},
	} {
		b := runtime.NewRowBlocks(bc.outer, bc.row, bc.off, bc.size)
		parts := make([][]float32, len(bc.size))
		for k, s := range bc.size {
			if k != bc.nilPart {
				parts[k] = randFloats(rng, bc.outer*s)
			}
		}
		x := randFloats(rng, bc.outer*bc.row)
		add("Concat/"+bc.name, 0, nil, func(ops runtime.LayoutOps) [][]float32 {
			y := stale(bc.outer * bc.row)
			ops.Concat(parts, b, y)
			return [][]float32{y}
		})
		add("Split/"+bc.name, 0, nil, func(ops runtime.LayoutOps) [][]float32 {
			ys := make([][]float32, len(bc.size))
			for k, s := range bc.size {
				if k != bc.nilPart {
					ys[k] = stale(bc.outer * s)
				}
			}
			ops.Split(x, b, ys)
			out := [][]float32{}
			for _, y := range ys {
				if y != nil {
					out = append(out, y)
				}
			}
			return out
		})
	}
	add("Concat/hand", 0, [][]float32{{1, 2, 0, 7, 3, 4, 0, 8}}, func(ops runtime.LayoutOps) [][]float32 {
		y := stale(8)
		b := runtime.NewRowBlocks(2, 4, []int{0, 3}, []int{2, 1})
		ops.Concat([][]float32{{1, 2, 3, 4}, {7, 8}}, b, y)
		return [][]float32{y}
	})

	testVsCPU[runtime.LayoutOps](t, Device{}, runtime.CPU{}, cases)
}
