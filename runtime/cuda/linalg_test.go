//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"io"
	"math"
	"math/rand"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime"
	"github.com/dpfinetune/dpfinetune/runtime/reference"
	"github.com/ebitengine/purego"
)

// valueCase is one case of an operation whose contract is a value, not
// the CPU's bits (the GEMMs, the graph groups, PerSampleOps): run draws
// its inputs from r, applies the operation of ops (runtime.CPU,
// reference.Device or the CUDA Device) to operands placed by p and
// returns its outputs; ok is false when ops lacks the operation. The
// Device's outputs are held to the reference backend's and the CPU's
// within tol, relative (0: equal values).
type valueCase struct {
	name string
	run  func(ops any, p *placer, r *rand.Rand) (out [][]float32, ok bool)
	tol  float64
}

// testValueCases runs every case reps times (inputs from seeds 1…reps) on
// d with host operands and with device buffers, against the reference
// backend and the CPU.
func testValueCases(t *testing.T, d *Device, cases []valueCase, reps int) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for rep := 1; rep <= reps; rep++ {
				seed := int64(rep)*7919 + int64(len(c.name))
				ref, ok := c.run(reference.Device{}, &placer{}, rand.New(rand.NewSource(seed)))
				if !ok {
					t.Fatalf("the reference backend lacks %s", c.name)
				}
				cpu, _ := c.run(runtime.CPU{}, &placer{}, rand.New(rand.NewSource(seed)))
				for _, dev := range []bool{false, true} {
					p := &placer{bufs: map[uintptr]runtime.Buffer{}}
					if dev {
						p.dev = d
					}
					got, ok := c.run(d, p, rand.New(rand.NewSource(seed)))
					if !ok {
						t.Fatalf("the Device lacks %s", c.name)
					}
					for _, b := range p.bufs {
						d.Free(b)
					}
					if err := closeTo(got, ref, c.tol); err != nil {
						t.Fatalf("case %d, device operands %v: against the reference backend: %v", rep, dev, err)
					}
					if err := closeTo(got, cpu, c.tol); err != nil {
						t.Fatalf("case %d, device operands %v: against the CPU: %v", rep, dev, err)
					}
				}
			}
		})
	}
}

func closeTo(got, want [][]float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d outputs, want %d", len(got), len(want))
	}
	for k := range got {
		if len(got[k]) != len(want[k]) {
			return fmt.Errorf("output %d: %d elements, want %d", k, len(got[k]), len(want[k]))
		}
		for i := range got[k] {
			g, w := float64(got[k][i]), float64(want[k][i])
			if g == w || math.IsNaN(g) && math.IsNaN(w) {
				continue
			}
			if !(math.Abs(g-w) <= tol*math.Max(1, math.Abs(w))) {
				return fmt.Errorf("output %d [%d] = %v, want %v (tolerance %g)", k, i, g, w, tol)
			}
		}
	}
	return nil
}

// unif returns n values uniform in [−1, 1).
func unif(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	return v
}

// filled returns n copies of v (an output's prior contents).
func filled(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

// randBroadcast draws a shape of rank ≤ 4 and k operand shapes that
// broadcast to it (right-aligned suffixes, some axes 1).
func randBroadcast(r *rand.Rand, k int) (shape []int, ops [][]int) {
	shape = make([]int, r.Intn(5))
	for a := range shape {
		shape[a] = 1 + r.Intn(9)
	}
	for range k {
		s := append([]int(nil), shape[len(shape)-r.Intn(len(shape)+1):]...)
		for a := range s {
			if r.Intn(3) == 0 {
				s[a] = 1
			}
		}
		ops = append(ops, s)
	}
	return broadcastOf(ops...), ops
}

// broadcastOf is the numpy broadcast of shapes.
func broadcastOf(shapes ...[]int) []int {
	var out []int
	for _, s := range shapes {
		for len(out) < len(s) {
			out = append([]int{1}, out...)
		}
		for a, v := range s {
			if o := &out[len(out)-len(s)+a]; v != 1 {
				*o = v
			}
		}
	}
	return out
}

func shapeNumel(s []int) int {
	n := 1
	for _, v := range s {
		n *= v
	}
	return n
}

// gemmDims draws a GEMM: sizes, transpositions, leading dimensions with
// padding, α and β (0 sometimes).
type gemmDims struct {
	ta, tb        bool
	m, n, k       int
	lda, ldb, ldc int
	alpha, beta   float32
}

func randGemm(r *rand.Rand) gemmDims {
	g := gemmDims{ta: r.Intn(2) == 0, tb: r.Intn(2) == 0, m: 1 + r.Intn(40), n: 1 + r.Intn(40), k: r.Intn(60), alpha: float32(r.NormFloat64()), beta: []float32{0, 1, 0.5}[r.Intn(3)]}
	if r.Intn(8) == 0 {
		g.alpha = 0
	}
	cols := func(trans bool, rows, cols int) int {
		if trans {
			return rows
		}
		return cols
	}
	g.lda = max(1, cols(g.ta, g.m, g.k)) + r.Intn(3)
	g.ldb = max(1, cols(g.tb, g.k, g.n)) + r.Intn(3)
	g.ldc = g.n + r.Intn(3)
	return g
}

func (g gemmDims) sizes() (la, lb, lc int) {
	ar, br := g.m, g.k
	if g.ta {
		ar = g.k
	}
	if g.tb {
		br = g.n
	}
	return max(0, ar-1)*g.lda + g.lda, max(0, br-1)*g.ldb + g.ldb, (g.m-1)*g.ldc + g.n
}

// cInit is C's prior contents: NaN where β = 0, which must not be read.
func (g gemmDims) cInit(r *rand.Rand, n int) []float32 {
	if g.beta == 0 {
		return filled(n, float32(math.NaN()))
	}
	return unif(r, n)
}

// binaryOps are the operators of runtime.BinaryOp.
var binaryOps = []runtime.BinaryOp{runtime.BinaryAdd, runtime.BinarySub, runtime.BinaryMul, runtime.BinaryDiv, runtime.BinaryPow}

// powOperands makes a and b Pow's operands in place: bases in
// [0.1, 2.1), exponents 2, 1, 3 or 0.5 (the CPU's exact cases) or 3·b.
func powOperands(r *rand.Rand, a, b []float32) {
	for i := range a {
		a[i] = 0.1 + 2*float32(math.Abs(float64(a[i])))
	}
	for i := range b {
		b[i] = []float32{2, 1, 3, 0.5, b[i] * 3}[r.Intn(5)]
	}
}

// gemmCase is the valueCase of one random GEMM through gemm (Gemm or
// GemmSerial, which share their contract), within 1e-4.
func gemmCase(name string, gemm func(o runtime.LinalgOps, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)) valueCase {
	return valueCase{name, func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LinalgOps)
		if !ok {
			return nil, false
		}
		g := randGemm(r)
		la, lb, lc := g.sizes()
		a, b, c := place(p, unif(r, la)), place(p, unif(r, lb)), place(p, g.cInit(r, lc))
		gemm(o, g.ta, g.tb, g.m, g.n, g.k, g.alpha, a, g.lda, b, g.ldb, g.beta, c, g.ldc)
		return [][]float32{fetch(p, c)}, true
	}, 1e-4}
}

var linalgCases = []valueCase{
	gemmCase("Gemm", runtime.LinalgOps.Gemm),
	gemmCase("GemmSerial", runtime.LinalgOps.GemmSerial),
	{"GemmStrided", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LinalgOps)
		if !ok {
			return nil, false
		}
		g := randGemm(r)
		la, lb, lc := g.sizes()
		batch := 1 + r.Intn(5)
		sa, sb, sc := la+r.Intn(3), lb, lc+r.Intn(2)
		if r.Intn(3) == 0 {
			sa = 0 // one A shared by every product
		}
		if r.Intn(3) == 0 {
			sb = 0
		}
		a, b := place(p, unif(r, (batch-1)*sa+la)), place(p, unif(r, (batch-1)*sb+lb))
		c := place(p, g.cInit(r, (batch-1)*sc+lc))
		o.GemmStrided(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a, g.lda, sa, b, g.ldb, sb, g.beta, c, g.ldc, sc, batch)
		return [][]float32{fetch(p, c)}, true
	}, 1e-4},
	{"Binary", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LinalgOps)
		if !ok {
			return nil, false
		}
		shape, s := randBroadcast(r, 2)
		var out [][]float32
		for _, op := range binaryOps {
			a, b := unif(r, shapeNumel(s[0])), unif(r, shapeNumel(s[1]))
			if op == runtime.BinaryPow {
				powOperands(r, a, b)
			}
			y := place(p, filled(shapeNumel(shape)+1, 7))
			o.Binary(op, place(p, a), s[0], place(p, b), s[1], y, shape)
			out = append(out, fetch(p, y))
		}
		return out, true
	}, 1e-6},
	{"ReduceToShape", func(ops any, p *placer, r *rand.Rand) ([][]float32, bool) {
		o, ok := ops.(runtime.LinalgOps)
		if !ok {
			return nil, false
		}
		shape, s := randBroadcast(r, 2)
		shape = broadcastOf(shape, s[1])
		if r.Intn(4) == 0 {
			s[0] = append([]int{1, 1}, s[0]...) // extra leading unit axes
		}
		t := place(p, filled(shapeNumel(s[0]), 7))
		o.ReduceToShape(place(p, unif(r, shapeNumel(shape))), shape, t, s[0])
		return [][]float32{fetch(p, t)}, true
	}, 1e-5},
}

// TestLinalgOps holds the Device's LinalgOps to the reference backend and
// the CPU on random shapes, through the emulation.
func TestLinalgOps(t *testing.T) {
	d := emuDevice(t)
	testValueCases(t, d, linalgCases, 40)
	// Every ReduceToShape element a warp's, however few its terms.
	defer func(w int) { reduceWide = w }(reduceWide)
	reduceWide = 1
	for _, c := range linalgCases {
		if c.name == "ReduceToShape" {
			t.Run("wide", func(t *testing.T) { testValueCases(t, d, []valueCase{c}, 40) })
		}
	}
}

// TestGemmEdges covers the GEMMs' edge sizes on the emulation: empty
// products (M, N or the batch 0: C untouched), K = 0 and α = 0 (C ← β·C)
// and a product larger than the kernels' grid.
func TestGemmEdges(t *testing.T) {
	d := emuDevice(t)
	r := rand.New(rand.NewSource(1))
	for _, c := range []struct{ m, n, k, batch int }{{0, 3, 2, 1}, {3, 0, 2, 1}, {3, 3, 2, 0}, {3, 4, 0, 2}, {70, 90, 130, 2}} {
		for _, alpha := range []float32{0, 1.5} {
			for _, beta := range []float32{0, 2} {
				a, b := unif(r, c.batch*c.m*c.k+1), unif(r, c.batch*c.k*c.n+1)
				c0 := unif(r, c.batch*c.m*c.n+1)
				want := append([]float32(nil), c0...)
				got := append([]float32(nil), c0...)
				reference.Device{}.GemmStrided(false, false, c.m, c.n, c.k, alpha, a, c.k, c.m*c.k, b, c.n, c.k*c.n, beta, want, c.n, c.m*c.n, c.batch)
				d.GemmStrided(false, false, c.m, c.n, c.k, alpha, a, c.k, c.m*c.k, b, c.n, c.k*c.n, beta, got, c.n, c.m*c.n, c.batch)
				if err := closeTo([][]float32{got}, [][]float32{want}, 1e-4); err != nil {
					t.Errorf("%+v α=%v β=%v: %v", c, alpha, beta, err)
				}
			}
		}
	}
}

// TestGraphOpsOnFake runs the GEMMs through the real driver's cuBLAS
// calls on the stand-in (testdata/fakecuda.c, whose cuBLAS is
// column-major and checks the arguments as cuBLAS does): the operand
// swap, the leading dimensions and the batched pointer arrays; and the
// other operations of this file's tables through the real driver's
// launches (their by-value shape arguments).
func TestGraphOpsOnFake(t *testing.T) {
	drv := fakeDriver(t)
	d, err := New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var gemms, others []valueCase
	for _, c := range linalgCases {
		if regexp.MustCompile(`^Gemm`).MatchString(c.name) {
			gemms = append(gemms, c)
		} else {
			others = append(others, c)
		}
	}
	testValueCases(t, d, gemms, 15)
	others = append(append(append(others, layoutCases...), elementwiseCases...), persampleCases...)
	testValueCases(t, d, others, 1)
}

// TestCommonHeader checks that what several kernel modules share
// (kernels/common.cuh: FOR_EACH, WARP_FOR_EACH, warp_sum, Layout, d_exp and d_log) exists once: every
// module's loaded source starts with the header, the header defines no
// kernel of its own, and no module's file carries a copy of a definition.
func TestCommonHeader(t *testing.T) {
	common, err := kernelSources.ReadFile("kernels/" + commonHeader)
	if err != nil {
		t.Fatal(err)
	}
	if k := KernelNames(string(common)); len(k) != 0 {
		t.Errorf("%s defines kernels %v", commonHeader, k)
	}
	defs := []string{"#define FOR_EACH", "#define WARP_FOR_EACH", "double warp_sum(", "#define LANES_FOR_EACH", "double lanes_total(", "struct Layout {", "void layout_offsets(", "double d_pow2(", "double d_exp(", "double d_log("}
	for _, d := range defs {
		if n := strings.Count(string(common), d); n != 1 {
			t.Errorf("%s: %q %d times, want once", commonHeader, d, n)
		}
	}
	for mod := range deviceKernels {
		b, err := kernelSources.ReadFile("kernels/" + mod)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range defs {
			if strings.Contains(string(b), d) {
				t.Errorf("%s has its own %q (%s holds it)", mod, d, commonHeader)
			}
		}
		src, err := moduleSource(mod)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(src, string(common)) || !strings.HasSuffix(src, string(b)) {
			t.Errorf("%s: the loaded source is not %s and the module's file", mod, commonHeader)
		}
	}
}

// TestCUBLASAbsent checks the real driver's error when cuBLAS is missing
// (on the stand-in, which has the driver and NVRTC): it names the library
// and the variable that points at it.
func TestCUBLASAbsent(t *testing.T) {
	for _, lib := range []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"} {
		if h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
			purego.Dlclose(h)
			t.Skipf("this machine has %s: the error path is not reachable", lib)
		}
	}
	fakeDriver(t).Close()
	t.Setenv(EnvCUBLAS, filepath.Join(t.TempDir(), "libcublas.so.13"))
	drv, err := Real()
	if err == nil {
		drv.Close()
		t.Fatal("Real() succeeded without cuBLAS")
	}
	if msg := err.Error(); !strings.Contains(msg, "cuBLAS") || !strings.Contains(msg, "libcublas.so") || !strings.Contains(msg, EnvCUBLAS) {
		t.Errorf("error %q does not say that cuBLAS is missing and how to point at it", msg)
	}
}

// TestReduceToShapeSplit: sums of few results over many terms — a bias's
// gradient over a batch of tokens, (B·T, D) to D — run in runs of terms
// (reduce_to_shape_split, reduce_parts) where the results' tiles alone
// would leave the device's multiprocessors idle, and agree with the sums
// in float64; results enough to fill it take the column tiles.
func TestReduceToShapeSplit(t *testing.T) {
	t.Setenv(EnvProfile, "1")
	d := emuDevice(t)
	d.prof.out = io.Discard
	r := rand.New(rand.NewSource(4))
	for _, c := range []struct {
		rows, cols int
		split      bool
	}{{200, 40, true}, {1000, 7, true}, {200, 300, false}} {
		x := unif(r, c.rows*c.cols)
		p := &placer{dev: d, bufs: map[uintptr]runtime.Buffer{}}
		out := place(p, filled(c.cols, 7))
		d.ResetProfile()
		d.ReduceToShape(place(p, x), []int{c.rows, c.cols}, out, []int{c.cols})
		got := fetch(p, out)
		for j := 0; j < c.cols; j++ {
			var s, mag float64
			for i := 0; i < c.rows; i++ {
				s += float64(x[i*c.cols+j])
				mag += math.Abs(float64(x[i*c.cols+j]))
			}
			if !(math.Abs(float64(got[j])-s) <= 1e-6*mag) { // NaN fails too
				t.Fatalf("%d×%d: result %d = %v, want %v", c.rows, c.cols, j, got[j], s)
			}
		}
		if ran := d.prof.kernels["reduce_to_shape_split"] != nil && d.prof.kernels["reduce_parts"] != nil; ran != c.split {
			t.Errorf("%d×%d: runs of terms %v, want %v", c.rows, c.cols, ran, c.split)
		}
	}
}
