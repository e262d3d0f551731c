package dpengine

import (
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// countingOps is the CPU's DP operations, counting the calls of each
// group, so that a test sees the engine compute through its device.
type countingOps struct {
	runtime.CPU
	gemm, axpy, elementwise, conv, vector, clip, adam, sgd, noise atomic.Int64
}

func (c *countingOps) Gemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, out []float32, ldc int) {
	c.gemm.Add(1)
	c.CPU.Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc)
}

func (c *countingOps) GemmSerial(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, out []float32, ldc int) {
	c.gemm.Add(1)
	c.CPU.GemmSerial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc)
}

func (c *countingOps) Axpy(alpha float32, x, y []float32) {
	c.axpy.Add(1)
	c.CPU.Axpy(alpha, x, y)
}

func (c *countingOps) Binary(op runtime.BinaryOp, a []float32, aShape []int, b []float32, bShape []int, y []float32, yShape []int) {
	c.elementwise.Add(1)
	c.CPU.Binary(op, a, aShape, b, bShape, y, yShape)
}

func (c *countingOps) ReduceToShape(x []float32, xShape []int, t []float32, tShape []int) {
	c.elementwise.Add(1)
	c.CPU.ReduceToShape(x, xShape, t, tShape)
}

func (c *countingOps) Im2ColBatch(s *runtime.ConvShape, x []float32, i0, n, g int, col, plane []float32) {
	c.conv.Add(1)
	c.CPU.Im2ColBatch(s, x, i0, n, g, col, plane)
}

func (c *countingOps) Im2ColPlane(s *runtime.ConvShape, xi []float32, g int, col, plane []float32) {
	c.conv.Add(1)
	c.CPU.Im2ColPlane(s, xi, g, col, plane)
}

func (c *countingOps) ConvWeightGrad(s *runtime.ConvShape, x, dy, dw, ws []float32) {
	c.conv.Add(1)
	c.CPU.ConvWeightGrad(s, x, dy, dw, ws)
}

func (c *countingOps) DepthwisePerSampleGrad(s *runtime.ConvShape, xi, dyi, dw, ws []float32) {
	c.conv.Add(1)
	c.CPU.DepthwisePerSampleGrad(s, xi, dyi, dw, ws)
}

func (c *countingOps) DepthwiseGradBatch(s *runtime.ConvShape, x, dy []float32, i0, n int, dw, ws []float32) {
	c.conv.Add(1)
	c.CPU.DepthwiseGradBatch(s, x, dy, i0, n, dw, ws)
}

func (c *countingOps) AdamUpdate(p, g, m, v []float32, co runtime.AdamCoeffs) {
	c.adam.Add(1)
	c.CPU.AdamUpdate(p, g, m, v, co)
}

func (c *countingOps) SGDUpdate(p, g, vel []float32, co runtime.SGDCoeffs) {
	c.sgd.Add(1)
	c.CPU.SGDUpdate(p, g, vel, co)
}

func (c *countingOps) AddGaussianNoise(x []float32, n runtime.Noise, offset uint64, std float64, post float32) {
	c.noise.Add(1)
	c.CPU.AddGaussianNoise(x, n, offset, std, post)
}

func (c *countingOps) SumSq(x []float32) float64 {
	c.vector.Add(1)
	return c.CPU.SumSq(x)
}

func (c *countingOps) SquaredNorms(x []float32, dst []float64) {
	c.vector.Add(1)
	c.CPU.SquaredNorms(x, dst)
}

func (c *countingOps) Dot(a, b []float32) float64 {
	c.vector.Add(1)
	return c.CPU.Dot(a, b)
}

func (c *countingOps) Scale(alpha float32, x []float32) {
	c.vector.Add(1)
	c.CPU.Scale(alpha, x)
}

func (c *countingOps) Add(x, y []float32) {
	c.vector.Add(1)
	c.CPU.Add(x, y)
}

func (c *countingOps) AddRunSums(x, dst []float32) {
	c.vector.Add(1)
	c.CPU.AddRunSums(x, dst)
}

func (c *countingOps) ScatterAdd(dst, src []float32, idx []int32) {
	c.vector.Add(1)
	c.CPU.ScatterAdd(dst, src, idx)
}

func (c *countingOps) AddNormSq(x, y []float64) {
	c.vector.Add(1)
	c.CPU.AddNormSq(x, y)
}

func (c *countingOps) SumRows(g []float32, T, p int, out []float32) {
	c.vector.Add(1)
	c.CPU.SumRows(g, T, p, out)
}

func (c *countingOps) SumNormRows(x, dst []float64) {
	c.vector.Add(1)
	c.CPU.SumNormRows(x, dst)
}

func (c *countingOps) ZeroNormSq(x []float64) {
	c.vector.Add(1)
	c.CPU.ZeroNormSq(x)
}

func (c *countingOps) AddSumSq(x []float32, dst []float64) {
	c.vector.Add(1)
	c.CPU.AddSumSq(x, dst)
}

func (c *countingOps) AddDot(alpha float64, a, b []float32, dst []float64) {
	c.vector.Add(1)
	c.CPU.AddDot(alpha, a, b, dst)
}

func (c *countingOps) AddSumSqProducts(alpha float64, a, b []float32, dst []float64) {
	c.vector.Add(1)
	c.CPU.AddSumSqProducts(alpha, a, b, dst)
}

func (c *countingOps) AddDots(alpha float64, a, b []float32, dst []float64) {
	c.vector.Add(1)
	c.CPU.AddDots(alpha, a, b, dst)
}

func (c *countingOps) AddSumSqProduct(alpha float64, a, b []float32, dst []float64) {
	c.vector.Add(1)
	c.CPU.AddSumSqProduct(alpha, a, b, dst)
}

// AddScaledRows is the instantiated clipped sum Σ_i C_i g_i: one Axpy per
// sample, counted as such.
func (c *countingOps) AddScaledRows(cs, x, y []float32) {
	c.axpy.Add(1)
	c.CPU.AddScaledRows(cs, x, y)
}

func (c *countingOps) ScaleRows(f []float32, alpha float32, x []float32, row, stride int) {
	c.vector.Add(1)
	c.CPU.ScaleRows(f, alpha, x, row, stride)
}

func (c *countingOps) CountClipped(normSq []float64, factors []float32) (int, int) {
	c.clip.Add(1)
	return c.CPU.CountClipped(normSq, factors)
}

func (c *countingOps) ClipFactors(r runtime.ClipRule, normSq []float64, dst []float32) {
	c.clip.Add(1)
	c.CPU.ClipFactors(r, normSq, dst)
}

// useOps moves a built engine and its optimizer onto ops. (runtime.Compile
// runs plans on the CPU only, so the engine is built there.)
func useOps(e *Engine, ops runtime.DPOps) {
	e.ops = ops
	for _, p := range e.params {
		for _, ls := range p.linear {
			ls.ops = ops
		}
	}
	if so, ok := e.cfg.Optimizer.(scaledOptimizer); ok {
		so.setDevice(ops)
	}
}

// TestEngineComputesThroughDevice: an engine whose DP operations are
// replaced calls them (each group a mode needs) and only them: its update
// equals the CPU engine's bit for bit.
func TestEngineComputesThroughDevice(t *testing.T) {
	for _, c := range []struct {
		name string
		mode Mode
		opt  string // "sgd" (with momentum and weight decay) or "adamw"
		// perLayer clips each parameter on its own, with automatic
		// clipping
		perLayer bool
		// groups that must be reached
		gemm, axpy, elementwise, conv bool
	}{
		{"cnn", Instantiate, "sgd", false, true, true, false, true},
		{"cnn", Ghost, "adamw", false, true, false, false, true},
		{"cnn", BK, "sgd", false, true, false, false, true},
		{"cnn", BK, "adamw", true, true, false, false, true},
		{"vit", Instantiate, "adamw", false, true, true, true, false},
		{"vit", Mixed, "sgd", false, true, false, true, false},
		{"vit", BK, "adamw", false, true, false, true, false},
		{"vit", Instantiate, "sgd", true, true, true, true, false},
	} {
		name := c.name + "/" + string(c.mode) + "/" + c.opt
		if c.perLayer {
			name += "/perlayer"
		}
		t.Run(name, func(t *testing.T) {
			gd := loadGolden(t, c.name)
			cfg := func() Config {
				var opt Optimizer = NewAdam(1e-2, 0.01, true)
				if c.opt == "sgd" {
					opt = &SGD{LR: 1e-2, Momentum: 0.9, WeightDecay: 0.01}
				}
				clip := Clipping{Fn: Abadi, R: 0.5}
				if c.perLayer {
					clip = Clipping{Fn: Automatic, R: 0.5, Gamma: 0.01}
				}
				return Config{Mode: c.mode, Clipping: clip, PerLayer: c.perLayer, NoiseMultiplier: 1, ExpectedBatch: 8,
					PhysicalBatch: 8, Source: NewSeededSource(3), Optimizer: opt}
			}
			ref := buildEngine(t, c.name, cfg())
			dev := buildEngine(t, c.name, cfg())
			ops := &countingOps{}
			useOps(dev, ops)
			sl := len(gd.x) / 8
			batch := []int{0, 1, 2, 3, 4, 5, 6, 7}
			fill := func(idx []int, xs []float32, ys []int64) error {
				for k, i := range idx {
					copy(xs[k*sl:(k+1)*sl], gd.x[i*sl:(i+1)*sl])
					ys[k] = gd.y[i]
				}
				return nil
			}
			for _, e := range []*Engine{ref, dev} {
				if _, err := e.Step(batch, fill); err != nil {
					t.Fatal(err)
				}
			}
			want, got := ref.Params(), dev.Params()
			for k, name := range ref.ParamNames() {
				for i := range want[k] {
					if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
						t.Fatalf("%s[%d]: %v on the counting device, %v on the CPU", name, i, got[k][i], want[k][i])
					}
				}
			}
			var missing []string
			for _, g := range []struct {
				name string
				want bool
				n    int64
			}{
				{"gemm", c.gemm, ops.gemm.Load()}, {"axpy", c.axpy, ops.axpy.Load()},
				{"elementwise", c.elementwise, ops.elementwise.Load()}, {"conv", c.conv, ops.conv.Load()},
				{"adam", c.opt == "adamw", ops.adam.Load()}, {"sgd", c.opt == "sgd", ops.sgd.Load()},
				{"vector", true, ops.vector.Load()}, {"clip", true, ops.clip.Load()}, {"noise", true, ops.noise.Load()},
			} {
				if g.want && g.n == 0 {
					missing = append(missing, g.name)
				}
			}
			if len(missing) > 0 {
				t.Errorf("no call of the device's %s operations", strings.Join(missing, ", "))
			}
		})
	}
}

// noDPOps is a device without DP operations.
type noDPOps struct{ runtime.Device }

func (noDPOps) Name() string { return "nodp-test" }

// TestNewRejectsDeviceWithoutDPOps: New refuses, naming the device,
// before any work.
func TestNewRejectsDeviceWithoutDPOps(t *testing.T) {
	g, rp := preparedCNN(t)
	_, err := New(g, rp, Config{Device: noDPOps{runtime.CPU{}}, Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, ExpectedBatch: 8, PhysicalBatch: 8})
	if err == nil || !strings.Contains(err.Error(), "nodp-test") || !strings.Contains(err.Error(), "DPOps") {
		t.Fatalf("got %v, want an error naming the device and runtime.DPOps", err)
	}
}

// limitedCPU is the CPU with a runtime.MemoryLimiter that records its cap.
type limitedCPU struct {
	runtime.CPU
	capped *int64
}

func (d limitedCPU) LimitMemory(bytes int64) { *d.capped = bytes }

// TestNewLimitsDeviceMemory: a memory cap reaches a device that holds
// memory of its own beyond the plan's buffers (runtime.MemoryLimiter: the
// GPU's convolution workspace); without a cap the device is left alone.
func TestNewLimitsDeviceMemory(t *testing.T) {
	g, rp := preparedCNN(t)
	for _, limit := range []int64{0, 1 << 30} {
		got := int64(-1)
		if _, err := New(g, rp, Config{Device: limitedCPU{capped: &got}, Mode: BK, Clipping: Clipping{Fn: Abadi, R: 1}, ExpectedBatch: 8, PhysicalBatch: 8, MaxMemory: limit}); err != nil {
			t.Fatal(err)
		}
		if want := map[int64]int64{0: -1, 1 << 30: 1 << 30}[limit]; got != want {
			t.Errorf("MaxMemory %d: the device's limit %d, want %d (−1: not set)", limit, got, want)
		}
	}
}

// preparedCNN is the cnn fixture after rewrite.Prepare (batch 8).
func preparedCNN(t *testing.T) (*graph.Graph, *rewrite.Plan) {
	t.Helper()
	m, err := onnx.Load(filepath.Join("..", "testdata", "models", "cnn.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := rewrite.Prepare(g, rewrite.Options{PlanOptions: rewrite.PlanOptions{InputShape: []int64{1, 28, 28}, Batch: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return g, rp
}
