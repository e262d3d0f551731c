package runtime

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/runtime/noise"
)

// hostOnly is a device without the DP operations.
type hostOnly struct{ Device }

func (hostOnly) Name() string { return "host-only" }

// TestDPOpsOf: nil and the CPU give the CPU's operations; a device without
// them is an error that names it.
func TestDPOpsOf(t *testing.T) {
	for _, c := range []struct {
		name string
		dev  Device
		err  string
	}{
		{"nil", nil, ""},
		{"cpu", CPU{}, ""},
		{"without", hostOnly{CPU{}}, `device host-only does not implement the DP operations`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, err := DPOpsOf(c.dev)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ops.(CPU); !ok {
				t.Fatalf("got %T, want CPU", ops)
			}
			if ops.Workers() < 1 {
				t.Errorf("Workers() = %d", ops.Workers())
			}
		})
	}
}

// TestCPUVectorAndClipOps: the CPU's vector, clip and SGD operations on
// hand-computed cases.
func TestCPUVectorAndClipOps(t *testing.T) {
	var c CPU
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name      string
		got, want []float64
	}{
		{"SumSq", []float64{c.SumSq([]float32{3, 4}), c.SumSq(nil)}, []float64{25, 0}},
		{"SquaredNorms", func() []float64 {
			d := make([]float64, 3)
			c.SquaredNorms([]float32{1, 2, 0, 0, -3, 4}, d)
			return d
		}(), []float64{5, 0, 25}},
		{"Dot", []float64{c.Dot([]float32{1, 2, 3}, []float32{4, 5, 6, 100})}, []float64{32}},
		{"Scale", f64(func() []float32 { x := []float32{1, -2}; c.Scale(2, x); return x }()), []float64{2, -4}},
		{"Add", f64(func() []float32 { y := []float32{10, 20, 30}; c.Add([]float32{1, 2}, y); return y }()), []float64{11, 22, 30}},
		{"AddRunSums", f64(func() []float32 {
			d := []float32{0.5, 0}
			c.AddRunSums([]float32{1, 2, 3, 4, 5, 6}, d)
			return d
		}()), []float64{6.5, 15}},
		{"ScatterAdd", f64(func() []float32 {
			d := []float32{1, 1, 1}
			c.ScatterAdd(d, []float32{5, 6, 7, 8}, []int32{2, -1, 0, 2})
			return d
		}()), []float64{8, 1, 14}},
		{"AddNormSq", func() []float64 {
			y := []float64{1, 2, 3}
			c.AddNormSq([]float64{0.5, 0.25}, y)
			return y
		}(), []float64{1.5, 2.25, 3}},
		{"SumRows", f64(func() []float32 {
			out := []float32{9, 9, 9}
			c.SumRows([]float32{1, 2, 3, 4, 5, 6}, 2, 3, out)
			return out
		}()), []float64{5, 7, 9}},
		{"ClipFactors/abadi", f64(func() []float32 {
			d := make([]float32, 5)
			c.ClipFactors(ClipRule{Fn: ClipAbadi, R: 1}, []float64{0.25, 1, 4, nan, inf}, d)
			return d
		}()), []float64{1, 1, 0.5, 0, 0}},
		{"ClipFactors/automatic", f64(func() []float32 {
			d := make([]float32, 2)
			c.ClipFactors(ClipRule{Fn: ClipAutomatic, R: 1, Gamma: 1}, []float64{9, 0}, d)
			return d
		}()), []float64{0.25, 1}},
		{"ClipFactors/global", f64(func() []float32 {
			d := make([]float32, 3)
			c.ClipFactors(ClipRule{Fn: ClipGlobal, R: 2}, []float64{1, 4, 9}, d)
			return d
		}()), []float64{1, 0, 0}},
		{"SGDUpdate/plain", f64(func() []float32 {
			p := []float32{1, 2}
			c.SGDUpdate(p, []float32{2, 4}, nil, SGDCoeffs{LR: 0.5, WeightDecay: 0.5, GradScale: 0.5})
			return p // θ − η(s·g + λθ)
		}()), []float64{0.25, 0.5}},
		{"SGDUpdate/momentum", f64(func() []float32 {
			p, v := []float32{1}, []float32{7}
			co := SGDCoeffs{LR: 0.5, Momentum: 0.5, GradScale: 1, First: true}
			c.SGDUpdate(p, []float32{2}, v, co) // v = 2, θ = 0
			co.First = false
			c.SGDUpdate(p, []float32{2}, v, co) // v = 3, θ = −1.5
			return append(p, v...)
		}()), []float64{-1.5, 3}},
		{"AverageUpdate", f64(func() []float32 {
			avg := []float32{1, 4, -2}
			c.AverageUpdate(avg, []float32{3, 4, 6, 100}, 0.25) // avg + ¼(p − avg); p's tail unread
			return avg
		}()), []float64{1.5, 4, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.got) != len(tc.want) {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
			for i := range tc.want {
				if tc.got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", tc.got, tc.want)
				}
			}
		})
	}
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestCPUAddGaussianNoise: the CPU's noise is runtime/noise's reference
// bit for bit, for a range that starts inside the step's noise vector.
func TestCPUAddGaussianNoise(t *testing.T) {
	key := NoiseKey{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	got, want := make([]float32, 3000), make([]float32, 3000)
	for i := range got {
		got[i] = float32(i) / 100
		want[i] = got[i]
	}
	CPU{}.AddGaussianNoise(got, CPU{}.PrepareNoise(key, 7), 12345, 0.8, 0.125)
	noise.Reference(want, key, 7, 12345, 0.8, 0.125)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
		}
	}
}

// TestNormAffineGrads holds the CPU's NormAffineGrads, which reads the
// whole tensors, to NormAffineSampleGrad on each sample's gathered rows,
// bit for bit, for every kind of NormRows and both batch layouts.
func TestNormAffineGrads(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	const B = 3
	for _, c := range []struct {
		name   string
		nr     *NormRows
		stride int
	}{
		{"GroupNorm", NewGroupNormRows(B, 4, 5, 2, false, 1e-5), 20},
		{"GroupNorm per group", NewGroupNormRows(B, 4, 5, 2, true, 1e-5), 20},
		{"InstanceNorm", NewInstanceNormRows(B, 3, 7, 1e-5), 21},
		{"LayerNorm (B, T, D)", NewLayerNormRows(4*B, 6, 1e-5), 24},
		{"LayerNorm (T, B, D)", NewLayerNormRows(4*B, 6, 1e-5), 6},
		// 2100 rows a sample, 37 elements: the lane order's chunks end
		// inside a sample, a block of SumLanes elements is cut short.
		{"LayerNorm (B, T, D), long", NewLayerNormRows(2100*B, 37, 1e-5), 2100 * 37},
		{"LayerNorm (T, B, D), long", NewLayerNormRows(2100*B, 37, 1e-5), 37},
	} {
		L, P := c.nr.RowLen(), c.nr.NumParams()
		n := c.nr.Rows() * L
		x, dy := make([]float32, n), make([]float32, n)
		mean, inv := make([]float32, c.nr.Rows()), make([]float32, c.nr.Rows())
		for i := range x {
			x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		for i := range mean {
			mean[i], inv[i] = float32(r.NormFloat64()), float32(r.Float64()+0.1)
		}
		for _, scale := range []bool{true, false} {
			got := make([]float32, B*P)
			CPU{}.NormAffineGrads(c.nr, scale, B, c.stride, x, mean, inv, dy, make([]float64, B*P), got, nil)
			if scale { // the bias's from the same call: a call of its own's bits
				gotS, gotB, wantB := make([]float32, B*P), make([]float32, B*P), make([]float32, B*P)
				CPU{}.NormAffineGrads(c.nr, true, B, c.stride, x, mean, inv, dy, make([]float64, B*P), gotS, gotB)
				CPU{}.NormAffineGrads(c.nr, false, B, c.stride, nil, mean, inv, dy, make([]float64, B*P), wantB, nil)
				for k := range gotB {
					if math.Float32bits(gotS[k]) != math.Float32bits(got[k]) || math.Float32bits(gotB[k]) != math.Float32bits(wantB[k]) {
						t.Fatalf("%s: element %d of the pair %v, %v, of single calls %v, %v", c.name, k, gotS[k], gotB[k], got[k], wantB[k])
					}
				}
			}
			for i := 0; i < B; i++ {
				var xi, gi []float32
				for b := i; b < n/c.stride; b += B {
					xi, gi = append(xi, x[b*c.stride:(b+1)*c.stride]...), append(gi, dy[b*c.stride:(b+1)*c.stride]...)
				}
				want := make([]float32, P)
				CPU{}.NormAffineSampleGrad(c.nr, scale, i, B, c.stride, xi, mean, inv, gi, make([]float64, P), want)
				for k := range want {
					if math.Float32bits(got[i*P+k]) != math.Float32bits(want[k]) {
						t.Fatalf("%s scale=%v: sample %d element %d = %v, the sample's own %v", c.name, scale, i, k, got[i*P+k], want[k])
					}
				}
			}
		}
	}
}
