package dpengine

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/internal/numcheck"
)

// engineFixtures are the fixtures whose per-sample norms are defined
// (resnet_train normalizes with batch statistics: samples interact).
var engineFixtures = []string{"cnn", "resnet_eval", "vgg", "mobilenet", "vit", "beit", "crossvit", "vit_nofold", "vit17", "packedqkv", "windowconv"}

type golden struct {
	x      []float32
	y      []int64
	arrays map[string]*npy.Array
}

func loadGolden(t testing.TB, name string) golden {
	t.Helper()
	arr, err := npy.ReadNPZ(filepath.Join("..", "testdata", "golden", name+".npz"))
	if err != nil {
		t.Fatal(err)
	}
	return golden{arr["input"].F32, arr["labels"].I64, arr}
}

func newEngine(t *testing.T, name string, mode Mode, clip Clipping, perLayer bool) *Engine {
	t.Helper()
	return buildEngine(t, name, Config{Mode: mode, Clipping: clip, PerLayer: perLayer, NoiseMultiplier: 0, ExpectedBatch: 8, PhysicalBatch: 8})
}

func newEngineB(b *testing.B, name string, mode Mode, batch int) *Engine {
	return buildEngine(b, name, Config{Mode: mode, Clipping: Clipping{Fn: Abadi, R: 1}, NoiseMultiplier: 1, ExpectedBatch: float64(batch), PhysicalBatch: batch, Optimizer: NewAdam(1e-3, 0, false)})
}

func buildEngine(t testing.TB, name string, cfg Config) *Engine {
	t.Helper()
	g, rp := preparedFixture(t, name, 8)
	e, err := New(g, rp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestPerSampleNormsMatchPyTorch: with clipping that never binds, every DP
// mode's per-sample norms (total and per parameter) equal PyTorch's
// brute-force batch-of-1 norms, and its clipped sum equals the plain
// gradient.
func TestPerSampleNormsMatchPyTorch(t *testing.T) {
	for _, name := range engineFixtures {
		gd := loadGolden(t, name)
		want := gd.arrays["norm_total"].F64
		for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				e := newEngine(t, name, mode, Clipping{Fn: Abadi, R: 1e9}, false)
				sums, norms, err := e.ClippedSum(gd.x, gd.y)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if r := math.Abs(norms[i]-want[i]) / want[i]; r > 1e-3 {
						t.Errorf("sample %d: total norm %v, PyTorch %v (rel %.2e)", i, norms[i], want[i], r)
					}
				}
				for pname, got := range e.ParamNorms() {
					a, ok := gd.arrays["norm/"+pname]
					if !ok {
						t.Errorf("no golden norm for %q", pname)
						continue
					}
					w := a.F64
					for i := range w {
						if d := math.Abs(got[i] - w[i]); d > 1e-3*w[i]+1e-6*want[i] {
							t.Errorf("%s sample %d: norm %v, PyTorch %v", pname, i, got[i], w[i])
						}
					}
				}
				floor := maxAbsAll(gd.arrays, "grad/") * 1e-4
				for pname, got := range sums {
					w := gd.arrays["grad/"+pname].F32
					if err := relCloseFloor(got, w, 1e-3, floor); err != nil {
						t.Errorf("%s: unclipped sum vs PyTorch gradient: %v", pname, err)
					}
				}
			})
		}
	}
}

// maxAbsAll returns the largest magnitude over the arrays with the prefix.
func maxAbsAll(arrays map[string]*npy.Array, prefix string) float64 {
	var m float64
	for k, a := range arrays {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			for _, v := range a.F32 {
				m = math.Max(m, math.Abs(float64(v)))
			}
		}
	}
	return m
}

// relClose compares with tolerance relative to the reference's max-abs.
func relClose(got, want []float32, tol float64) error { return relCloseFloor(got, want, tol, 0) }

// relCloseFloor is relClose with the reference scale floored: a gradient
// that is zero in exact arithmetic (CrossViT's attention key biases, whose
// effect softmax cancels) is rounding noise in both implementations, so it
// is compared at the scale of the model's other gradients.
func relCloseFloor(got, want []float32, tol, floor float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d vs %d", len(got), len(want))
	}
	var scale, worst float64
	for _, v := range want {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	if worst > tol*math.Max(math.Max(scale, floor), 1e-12) {
		return fmt.Errorf("max abs diff %.3e vs scale %.3e", worst, scale)
	}
	return nil
}

// TestModesAgree: with a clip norm that binds for most samples, every DP
// mode gives the same noise-free clipped gradient Σ C_i g_i.
func TestModesAgree(t *testing.T) {
	for _, name := range engineFixtures {
		gd := loadGolden(t, name)
		norms := gd.arrays["norm_total"].F64
		s := append([]float64(nil), norms...)
		sort.Float64s(s)
		R := s[len(s)/4] // clips three quarters of the samples
		for _, fn := range []ClipFn{Abadi, Automatic} {
			t.Run(fmt.Sprintf("%s/%s", name, fn), func(t *testing.T) {
				clip := Clipping{Fn: fn, R: R, Gamma: 0.01}
				ref, _, err := newEngine(t, name, Instantiate, clip, false).ClippedSum(gd.x, gd.y)
				if err != nil {
					t.Fatal(err)
				}
				var floor float64
				for _, w := range ref {
					for _, v := range w {
						floor = math.Max(floor, 1e-4*math.Abs(float64(v)))
					}
				}
				for _, mode := range []Mode{Ghost, Mixed, BK} {
					got, _, err := newEngine(t, name, mode, clip, false).ClippedSum(gd.x, gd.y)
					if err != nil {
						t.Fatal(err)
					}
					for pname, w := range ref {
						if err := relCloseFloor(got[pname], w, 1e-4, floor); err != nil {
							t.Errorf("%s %s vs instantiate: %v", mode, pname, err)
						}
					}
				}
			})
		}
	}
}

// TestPerLayerClipping: per-layer clipping bounds each parameter's
// clipped per-sample norm by R/√K, and bk and instantiate agree.
func TestPerLayerClipping(t *testing.T) {
	gd := loadGolden(t, "cnn")
	clip := Clipping{Fn: Abadi, R: 0.1}
	a, _, err := newEngine(t, "cnn", BK, clip, true).ClippedSum(gd.x, gd.y)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := newEngine(t, "cnn", Instantiate, clip, true).ClippedSum(gd.x, gd.y)
	if err != nil {
		t.Fatal(err)
	}
	for k := range a {
		if err := relClose(a[k], b[k], 1e-4); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if _, err := New(nil, nil, Config{Mode: Ghost, PerLayer: true, PhysicalBatch: 1, Clipping: clip, ExpectedBatch: 1}); err == nil {
		t.Error("per-layer clipping accepted in ghost mode")
	}
}

// TestNoiseOncePerLogicalBatch: a logical batch of 16 examples split into
// two physical batches gets noise of standard deviation σR/E[B] per
// coordinate once: the private gradient minus the noise-free clipped sums
// of both halves (divided by E[B]) has that variance, not twice it. Over
// 26,010 coordinates the sample variance has a relative standard error of
// √(2/n) ≈ 0.9 %; the 5 % bound is more than 5 of them (false-failure
// rate < 1e-6), and the mean is within 5 standard errors of 0.
func TestNoiseOncePerLogicalBatch(t *testing.T) {
	gd := loadGolden(t, "cnn")
	clip := Clipping{Fn: Abadi, R: 0.5}
	const sigma, expected = 2.0, 10.0
	e := newEngine(t, "cnn", BK, clip, false)
	e.cfg.NoiseMultiplier = sigma
	e.cfg.ExpectedBatch = expected
	e.cfg.Source = NewSeededSource(11)
	x := append(append([]float32(nil), gd.x...), gd.x...)
	y := append(append([]int64(nil), gd.y...), gd.y...)
	sl := len(gd.x) / 8
	batch := make([]int, 16)
	for i := range batch {
		batch[i] = i
	}
	if _, err := e.Step(batch, func(idx []int, xs []float32, ys []int64) error {
		for k, i := range idx {
			copy(xs[k*sl:(k+1)*sl], x[i*sl:(i+1)*sl])
			ys[k] = y[i]
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	private := map[string][]float32{}
	for _, name := range e.ParamNames() {
		private[name] = append([]float32(nil), e.Gradient(name)...)
	}
	clean, _, err := newEngine(t, "cnn", BK, clip, false).ClippedSum(gd.x, gd.y)
	if err != nil {
		t.Fatal(err)
	}
	var n, sum, sumSq float64
	for name, g := range private {
		for k, v := range g {
			// Both halves are the same 8 examples.
			noise := float64(v) - 2*float64(clean[name][k])/expected
			n++
			sum += noise
			sumSq += noise * noise
		}
	}
	mean := sum / n
	variance := sumSq/n - mean*mean
	want := math.Pow(sigma*clip.R/expected, 2)
	if !(math.Abs(variance-want) <= 0.05*want) { // NaN fails too
		t.Errorf("noise variance %.4g, want %.4g (σR/E[B])²", variance, want)
	}
	if !(math.Abs(mean) <= 5*math.Sqrt(want/n)) { // NaN fails too
		t.Errorf("noise mean %.3g", mean)
	}
}

// TestEmptyBatchStillSteps: an empty Poisson batch adds noise and updates.
func TestEmptyBatchStillSteps(t *testing.T) {
	e := newEngine(t, "cnn", BK, Clipping{Fn: Abadi, R: 1}, false)
	e.cfg.NoiseMultiplier = 1
	e.cfg.Optimizer = &SGD{LR: 0.1}
	before := append([]float32(nil), e.Params()[0]...)
	st, err := e.Step(nil, func([]int, []float32, []int64) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples != 0 {
		t.Errorf("samples %d", st.Samples)
	}
	changed := false
	for i, v := range e.Params()[0] {
		if v != before[i] {
			changed = true
		}
	}
	if !changed {
		t.Error("empty batch did not update the parameters")
	}
}

// TestNonDPMatchesPyTorch: nondp mode gives the plain summed gradient.
func TestNonDPMatchesPyTorch(t *testing.T) {
	gd := loadGolden(t, "vit")
	e := newEngine(t, "vit", NonDP, Clipping{}, false)
	sums, _, err := e.ClippedSum(gd.x, gd.y)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range sums {
		if err := relClose(got, gd.arrays["grad/"+name].F32, 1e-3); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestAccumulatorsRestartEachLogicalBatch: the clipped-sum accumulators
// are overwritten by a logical batch's first contribution rather than
// cleared beforehand, so nothing of an earlier batch may survive: after a
// first Step on other data, a two-physical-batch Step must give the sum of
// its halves' clipped sums divided by E[B], in every mode, and an empty
// Step a zero gradient (noise off).
func TestAccumulatorsRestartEachLogicalBatch(t *testing.T) {
	gd := loadGolden(t, "cnn")
	clip := Clipping{Fn: Abadi, R: 0.5}
	const expected = 16.0
	sl := len(gd.x) / 8
	// Second half: the same examples in reverse order, labels shifted.
	x2 := make([]float32, len(gd.x))
	y2 := make([]int64, len(gd.y))
	for i := 0; i < 8; i++ {
		copy(x2[i*sl:(i+1)*sl], gd.x[(7-i)*sl:(8-i)*sl])
		y2[i] = (gd.y[7-i] + 3) % 10
	}
	feed := func() Fill {
		return func(idx []int, xs []float32, ys []int64) error {
			for k, i := range idx {
				src, lab := gd.x, gd.y
				if i >= 8 {
					src, lab = x2, y2
				}
				j := i % 8
				copy(xs[k*sl:(k+1)*sl], src[j*sl:(j+1)*sl])
				ys[k] = lab[j]
			}
			return nil
		}
	}
	all := make([]int, 16)
	for i := range all {
		all[i] = i
	}
	for _, mode := range []Mode{Instantiate, Ghost, Mixed, BK} {
		t.Run(string(mode), func(t *testing.T) {
			ref := newEngine(t, "cnn", mode, clip, false)
			a, _, err := ref.ClippedSum(gd.x, gd.y)
			if err != nil {
				t.Fatal(err)
			}
			a = copyGrads(a)
			b, _, err := ref.ClippedSum(x2, y2)
			if err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, "cnn", mode, clip, false)
			e.cfg.ExpectedBatch = expected
			if _, err := e.Step(all[8:], feed()); err != nil { // other data first
				t.Fatal(err)
			}
			if _, err := e.Step(all, feed()); err != nil {
				t.Fatal(err)
			}
			for name, g := range a {
				got := e.Gradient(name)
				for k := range g {
					want := (float64(g[k]) + float64(b[name][k])) / expected
					if d := math.Abs(float64(got[k]) - want); d > 1e-5*(math.Abs(want)+1e-3) {
						t.Fatalf("%s[%d] = %g, want %g", name, k, got[k], want)
					}
				}
			}
			if _, err := e.Step(nil, feed()); err != nil {
				t.Fatal(err)
			}
			for _, name := range e.ParamNames() {
				for k, v := range e.Gradient(name) {
					if v != 0 {
						t.Fatalf("empty batch: %s[%d] = %g, want 0", name, k, v)
					}
				}
			}
		})
	}
}

func copyGrads(m map[string][]float32) map[string][]float32 {
	out := map[string][]float32{}
	for k, v := range m {
		out[k] = append([]float32(nil), v...)
	}
	return out
}

// TestElementwiseWorkersAgree: elementwise parameters' per-sample
// gradients are split over the cores for small samples and left to the
// kernels for large ones (serialOpBelow). Whatever the split — all serial,
// all split, or some of each, where per-worker buffers sized for one
// group must not leak into the next — the norms and the clipped sum are
// the same bit for bit.
func TestElementwiseWorkersAgree(t *testing.T) {
	defer func(v int) { serialOpBelow = v }(serialOpBelow)
	for _, name := range []string{"vit", "mobilenet"} {
		gd := loadGolden(t, name)
		for _, mode := range []Mode{BK, Mixed} {
			var ref map[string][]float32
			var refNorms map[string][]float64
			for _, below := range []int{0, 3000, 1 << 30} {
				serialOpBelow = below
				e := newEngine(t, name, mode, Clipping{Fn: Abadi, R: 0.1}, false)
				sums, _, err := e.ClippedSum(gd.x, gd.y)
				if err != nil {
					t.Fatal(err)
				}
				norms := e.ParamNorms()
				if ref == nil {
					ref, refNorms = copyGrads(sums), norms
					continue
				}
				for pn, want := range ref {
					for k, v := range sums[pn] {
						if math.Float32bits(v) != math.Float32bits(want[k]) {
							t.Fatalf("%s %s serialOpBelow %d: %s[%d] = %v, all serial %v", name, mode, below, pn, k, v, want[k])
						}
					}
					for i, v := range norms[pn] {
						if v != refNorms[pn][i] {
							t.Fatalf("%s %s serialOpBelow %d: norm of %s, sample %d = %v, all serial %v", name, mode, below, pn, i, v, refNorms[pn][i])
						}
					}
				}
			}
		}
	}
}

// TestArithmeticBatchMatchesSamples: the batched per-sample gradients of
// Add and Mul parameters (arithmeticBatch: LayerNorm affines, biases, layer
// scales) give the per-sample norms and the clipped sum of the
// sample-by-sample path, on the fixtures that have them, in every mode.
func TestArithmeticBatchMatchesSamples(t *testing.T) {
	checkBatchMatchesSamples(t, &arithmeticBatchOff, []string{"vit", "beit", "crossvit", "vit_nofold", "packedqkv"}, false)
}

// TestConcatBatchMatchesSamples: the batched per-sample gradients of
// class tokens expanded over the batch and concatenated with the patch
// tokens (concatBatch, broadcastPath) give the per-sample norms and the
// clipped sums of the sample-by-sample path through the sub-plan, on the
// fixtures that have them, in every mode; and the batched path does run
// there.
func TestConcatBatchMatchesSamples(t *testing.T) {
	names := []string{"vit", "beit", "crossvit", "vit_nofold"}
	for _, name := range names {
		e := buildEngine(t, name, compareConfig(nil, BK, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4))
		found := false
		for _, gs := range e.groups {
			for _, g := range gs {
				found = found || g.bcast != nil && g.op == "Concat"
			}
		}
		if !found {
			t.Errorf("%s: no class token on the batched path", name)
		}
	}
	checkBatchMatchesSamples(t, &concatBatchOff, names, false)
}

// TestNormBatchMatchesSamples: the batched per-sample gradients of native
// normalizations' scales and biases (normBatch, NormAffineGrads) give the
// per-sample norms of the sample-by-sample path bit for bit (the same
// terms in the same order, and SquaredNorms then AddNormSq is AddSumSq),
// and its clipped sums, on vit17 (opset 17 LayerNormalization) in every
// mode.
func TestNormBatchMatchesSamples(t *testing.T) {
	checkBatchMatchesSamples(t, &normBatchOff, []string{"vit17"}, true)
}

// TestGemmBiasBatchMatchesSamples: the batched per-sample gradients of
// Gemm biases (gemmBiasBatch: classifier heads, a sequence-first
// attention's out_proj on (T·B, D) rows) give the per-sample norms and the
// clipped sums of the sample-by-sample path.
func TestGemmBiasBatchMatchesSamples(t *testing.T) {
	checkBatchMatchesSamples(t, &gemmBiasBatchOff, []string{"cnn", "vit", "packedqkv", "crossvit"}, false)
}

// checkBatchMatchesSamples runs the engine on the fixtures with *off
// false (the batch hook) and true (the sample-by-sample path) in every
// mode and compares per-sample norms (bit for bit with exact) and
// clipped sums.
func checkBatchMatchesSamples(t *testing.T, off *bool, fixtures []string, exact bool) {
	defer func() { *off = false }()
	for _, name := range fixtures {
		gd := loadGolden(t, name)
		for _, mode := range []Mode{BK, Ghost, Instantiate} {
			var norms [2][]float64
			var sums [2]map[string][]float32
			for k, o := range []bool{true, false} {
				*off = o
				e := newEngine(t, name, mode, Clipping{Fn: Abadi, R: 1e-3}, false)
				s, n, err := e.ClippedSum(gd.x, gd.y)
				if err != nil {
					t.Fatal(err)
				}
				norms[k], sums[k] = n, s
			}
			for i := range norms[0] {
				d := math.Abs(norms[1][i] - norms[0][i])
				if exact && d != 0 || d > 1e-6*norms[0][i] {
					t.Errorf("%s %v sample %d: norm %v batched, %v sample by sample", name, mode, i, norms[1][i], norms[0][i])
				}
			}
			for p, want := range sums[0] {
				got := sums[1][p]
				for j := range want {
					if d := math.Abs(float64(got[j] - want[j])); d > 1e-5*(1e-3+math.Abs(float64(want[j]))) {
						t.Errorf("%s %v %s[%d]: clipped sum %v batched, %v sample by sample", name, mode, p, j, got[j], want[j])
						break
					}
				}
			}
		}
	}
}

// TestPhysicalBatchOfOne: an engine of physical batch 1 (where no axis of
// a shape tells the batch: runtime's propagateOne) gives each sample the
// per-sample norm and the clipped gradient an engine of the fixture's
// whole golden batch gives it, on every fixture with a golden batch, in
// every DP mode: the norms within 1e-5 and the samples' clipped
// gradients, summed one by one, the batch's clipped sum.
func TestPhysicalBatchOfOne(t *testing.T) {
	names, err := numcheck.FixtureNames(filepath.Join("..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	clip := Clipping{Fn: Abadi, R: 0.5}
	for _, name := range names {
		for _, mode := range []Mode{BK, Mixed, Ghost, Instantiate} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				const n = 4
				x, y, _, _ := engineBatch(t, name, n)
				sl := len(x) / n
				all := buildEngine(t, name, compareConfig(nil, mode, clip, false, "sgd", n))
				want, norms, err := all.ClippedSum(x, y)
				if err != nil {
					t.Fatal(err)
				}
				one := buildEngine(t, name, compareConfig(nil, mode, clip, false, "sgd", 1))
				got := map[string][]float32{}
				for i := 0; i < n; i++ {
					s, nu, err := one.ClippedSum(x[i*sl:(i+1)*sl], y[i:i+1])
					if err != nil {
						t.Fatalf("sample %d alone: %v", i, err)
					}
					if d := math.Abs(nu[0] - norms[i]); d > 1e-5*norms[i] {
						t.Errorf("sample %d: norm %v alone, %v in the batch", i, nu[0], norms[i])
					}
					for p, g := range s {
						if got[p] == nil {
							got[p] = make([]float32, len(g))
						}
						for j, v := range g {
							got[p][j] += v
						}
					}
				}
				for p, w := range want {
					scale := 0.0
					for _, v := range w {
						scale = math.Max(scale, math.Abs(float64(v)))
					}
					for j := range w {
						if d := math.Abs(float64(got[p][j] - w[j])); d > 1e-4*scale+1e-7 {
							t.Errorf("%s[%d]: Σ of the samples' clipped gradients %v, the batch's %v", p, j, got[p][j], w[j])
							break
						}
					}
				}
			})
		}
	}
}
