package runtime

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/blas"
)

// gemmBackends returns the SGEMM backends to compare plans on whose
// products differ in shape or transposition, and whether each gives the
// same bits for both: our own kernels (the pure-Go one, and the AVX-512
// one where it runs every product, without OpenBLAS) compute a product's
// element in one order whatever the operands' transposition; OpenBLAS
// picks among its kernels by shape and transposition (on AVX-512 CPUs a
// direct path for small untransposed products), so under it two such
// plans agree to rounding only. AVX-512 with OpenBLAS loaded leaves some
// products to OpenBLAS (blas.avxTakes) and is not one backend.
func gemmBackends() (names []string, exact []bool) {
	avail := blas.Available()
	for _, b := range avail {
		if b == blas.AVX512 && slices.Contains(avail, blas.OpenBLAS) {
			continue
		}
		names, exact = append(names, b), append(exact, b != blas.OpenBLAS)
	}
	return names, exact
}

// sameOrClose reports whether got is want bit for bit (exact), or else
// within 1e-4 of want's largest magnitude, element by element.
func sameOrClose(got, want []float32, exact bool) bool {
	if exact || len(got) != len(want) {
		return sameBits(got, want)
	}
	scale := float32(0)
	for _, w := range want {
		scale = max(scale, float32(math.Abs(float64(w))))
	}
	for i, w := range want {
		if d := math.Abs(float64(got[i] - w)); !(d <= 1e-4*float64(scale)) {
			return false
		}
	}
	return true
}

// TestFusedMatMul: on the torchvision ViT fixtures (sequence-first
// nn.MultiheadAttention exports) the attention products fold their
// Transposes and the query's scaling (FusedMatMul: four of each layer's
// six Transposes gone), on the timm fixtures (four-axis attention) the
// key's transpose of its last two axes and the query's scaling, and the
// plan computes what the unfolded one does: the same losses, parameter
// gradients, and every hook's data with the same batch axes and strides,
// bit for bit (the scalings are by powers of two, so α rounds as they
// did), with the probabilities kept and recomputed; on each SGEMM backend
// (gemmBackends: OpenBLAS's kernels to rounding).
func TestFusedMatMul(t *testing.T) {
	names, exact := gemmBackends()
	for i, backend := range names {
		t.Run(backend, func(t *testing.T) {
			prev, err := blas.SetBackend(backend)
			if err != nil {
				t.Fatal(err)
			}
			defer blas.SetBackend(prev)
			testFusedMatMul(t, exact[i])
		})
	}
}

func testFusedMatMul(t *testing.T, exact bool) {
	defer func() { fuseMatMulsOff = false }()
	for _, c := range []struct {
		name        string
		folds, gone int // FusedMatMuls, and the Transposes they take
	}{{"vit", 4, 8}, {"vit17", 4, 8}, {"vit_nofold", 4, 8}, {"crossvit", 2, 2}, {"beit", 2, 2}, {"packedqkv", 0, 0}} {
		for _, how := range []Probabilities{ProbabilitiesKeep, ProbabilitiesRecompute} {
			t.Run(fmt.Sprintf("%s/%d", c.name, how), func(t *testing.T) {
				type run struct {
					losses []float32
					grads  map[string][]float32
					hooks  []float32
					axes   []string
					folds  int
					trans  int
				}
				var runs [2]run
				for i, off := range []bool{true, false} {
					fuseMatMulsOff = off
					p, _, labels := compileFixture(t, c.name, &Options{Probabilities: how})
					r := &runs[i]
					for _, nd := range p.nodes {
						switch nd.g.OpType {
						case fusedMatMul:
							r.folds++
						case "Transpose":
							r.trans++
						}
					}
					bo := &BackwardOptions{Hook: func(ev *HookEvent) {
						r.hooks = append(r.hooks, ev.DOut.Data...)
						r.axes = append(r.axes, fmt.Sprintf("%s dout %d/%d", ev.Node.Name, ev.DOut.BatchAxis, ev.DOut.BatchStride))
						for j, in := range ev.Inputs {
							r.axes = append(r.axes, fmt.Sprintf("%s in%d %d/%d", ev.Node.Name, j, in.BatchAxis, in.BatchStride))
							switch ev.Node.OpType {
							case "Add", "Sub": // a batched operand's buffer may be another's
								if !ev.Params[j] && !ev.Derived[j] {
									continue
								}
							}
							r.hooks = append(r.hooks, in.Data...)
						}
					}}
					step(t, p, labels, nil, nil)
					r.hooks, r.axes = nil, nil
					r.losses = step(t, p, labels, nil, bo)
					r.grads = map[string][]float32{}
					for _, pn := range p.Params() {
						r.grads[pn] = append([]float32(nil), p.Grad(pn)...)
					}
				}
				off, on := runs[0], runs[1]
				if off.folds != 0 || on.folds != c.folds {
					t.Fatalf("%d FusedMatMuls (%d with the fold off), want %d", on.folds, off.folds, c.folds)
				}
				if want := off.trans - c.gone; on.trans != want {
					t.Errorf("%d Transposes left of %d, want %d", on.trans, off.trans, want)
				}
				if !sameOrClose(on.losses, off.losses, exact) {
					t.Errorf("losses %v, unfolded %v", on.losses, off.losses)
				}
				for pn, want := range off.grads {
					if !sameOrClose(on.grads[pn], want, exact) {
						t.Errorf("gradient of %s differs from the unfolded plan's", pn)
					}
				}
				if len(off.hooks) == 0 || !sameOrClose(on.hooks, off.hooks, exact) {
					t.Errorf("hook data: %d and %d values, or not the same bits", len(off.hooks), len(on.hooks))
				}
				if fmt.Sprint(on.axes) != fmt.Sprint(off.axes) {
					t.Errorf("hook views' batch axes and strides differ:\n%v\nunfolded:\n%v", on.axes, off.axes)
				}
			})
		}
	}
}

// TestFusedMatMulGradCheck holds the folded products' backward to central
// differences on small graphs of activations (an input times parameters):
// the sequence-first attention (q scaled, k read transposed, v and the
// result sequence-first: two folds), the four-axis one (k's last two axes
// swapped, q scaled: one fold), and a Transpose that also moves an item
// axis, which must not fold.
func TestFusedMatMulGradCheck(t *testing.T) {
	for _, c := range []struct {
		name  string
		shape []int64
		build func(b *modelBuilder)
		folds int
	}{
		{"sequence-first", []int64{4, 6, 3}, func(b *modelBuilder) {
			for _, n := range []string{"q", "k", "v"} {
				b.param("w"+n, 3)
				b.node("Mul", []string{"x", "w" + n}, n)
			}
			b.floats("two", []float32{2}, 1)
			b.node("Transpose", []string{"q"}, "qt", aInts("perm", 1, 0, 2))
			b.node("Div", []string{"qt", "two"}, "qs")
			b.node("Transpose", []string{"k"}, "kt", aInts("perm", 1, 2, 0))
			b.node("MatMul", []string{"qs", "kt"}, "s")
			b.node("Softmax", []string{"s"}, "p", aInt("axis", -1))
			b.node("Transpose", []string{"v"}, "vt", aInts("perm", 1, 0, 2))
			b.node("MatMul", []string{"p", "vt"}, "o")
			b.node("Transpose", []string{"o"}, "y", aInts("perm", 1, 0, 2))
		}, 2},
		{"four axes", []int64{2, 3, 4, 5}, func(b *modelBuilder) {
			for _, n := range []string{"q", "k"} {
				b.param("w"+n, 5)
				b.node("Mul", []string{"x", "w" + n}, n)
			}
			b.floats("scale", []float32{0.3}, 1)
			b.node("Mul", []string{"q", "scale"}, "qs")
			b.node("Transpose", []string{"k"}, "kt", aInts("perm", 0, 1, 3, 2))
			b.node("MatMul", []string{"qs", "kt"}, "y")
		}, 1},
		{"an item axis moved too", []int64{2, 3, 4, 5}, func(b *modelBuilder) {
			for _, n := range []string{"q", "k"} {
				b.param("w"+n, 5)
				b.node("Mul", []string{"x", "w" + n}, n)
			}
			b.node("Transpose", []string{"q"}, "qt", aInts("perm", 1, 0, 2, 3))
			b.node("Transpose", []string{"k"}, "kt", aInts("perm", 1, 0, 3, 2))
			b.node("MatMul", []string{"qt", "kt"}, "y")
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(5, 14)
			c.build(b)
			g := b.build(t, "x", c.shape, "y")
			p, err := Compile(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			folds := 0
			for _, nd := range p.nodes {
				if nd.g.OpType == fusedMatMul {
					folds++
				}
			}
			if folds != c.folds {
				t.Fatalf("%d FusedMatMuls, want %d", folds, c.folds)
			}
			x := make([]float32, numel(ints64(c.shape)))
			for i := range x {
				x[i] = float32(i%7)/7 - 0.4
			}
			if err := p.SetInput(0, x); err != nil {
				t.Fatal(err)
			}
			gradCheckPlan(t, p)
		})
	}
}

// TestFusedMatMulBatchAxes: the result's axis each operand axis becomes
// (mmFold.batchOut), per layout: the items, A's rows, B's columns, and
// −1 for the contracted axis.
func TestFusedMatMulBatchAxes(t *testing.T) {
	for _, c := range []struct {
		f    mmFold
		si   int
		want []int // by operand axis
	}{
		{mmFold{rank: 3}, 0, []int{0, 1, -1}},                       // A (nb, M, K) → (nb, M, N)
		{mmFold{rank: 3}, 1, []int{0, -1, 2}},                       // B (nb, K, N)
		{mmFold{rank: 3, a: mmSeq, c: mmSeq}, 0, []int{0, 1, -1}},   // A (M, nb, K) → (M, nb, N)
		{mmFold{rank: 3, a: mmSeq}, 0, []int{1, 0, -1}},             // A (M, nb, K) → (nb, M, N)
		{mmFold{rank: 3, b: mmSeq}, 1, []int{-1, 0, 2}},             // B (K, nb, N)
		{mmFold{rank: 3, b: mmTrans}, 1, []int{2, 0, -1}},           // B (N, nb, K)
		{mmFold{rank: 3, b: mmTrans, c: mmSeq}, 1, []int{2, 1, -1}}, // B (N, nb, K) → (M, nb, N)
		{mmFold{rank: 4}, 0, []int{0, 1, 2, -1}},                    // A (b, h, M, K)
		{mmFold{rank: 4, b: mmTransLast}, 1, []int{0, 1, 3, -1}},    // B (b, h, N, K)
		{mmFold{rank: 4}, 1, []int{0, 1, -1, 3}},                    // B (b, h, K, N)
	} {
		for k, want := range c.want {
			if got := c.f.batchOut(c.si, k); got != want {
				t.Errorf("layouts a=%d b=%d c=%d rank %d, operand %d axis %d: result axis %d, want %d", c.f.a, c.f.b, c.f.c, c.f.rank, c.si, k, got, want)
			}
		}
	}
}

func ints64(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}
