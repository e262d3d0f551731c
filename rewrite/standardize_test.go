package rewrite

import (
	"slices"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// TestStandardizedWeights: a Conv weight standardized as timm writes it
// (a training-mode BatchNormalization of the weight's rows, written out as
// a LayerNormalization by the rewrite) is read as weight standardization
// — its gain, constant γ, shift and scalar factors — and every other
// computation of the weight is left to the general path.
func TestStandardizedWeights(t *testing.T) {
	constant := func(b *mb, name string, v ...float64) {
		b.node("Constant", name, nil, []string{name}, attrTensor("value", floatTensor(graph.Float32, []int64{int64(len(v))}, v)))
	}
	for _, c := range []struct {
		name string
		// scale and shift are the BatchNormalization's γ and β: "gain"
		// (a parameter), "ones"/"zeros"/"row" (constants), "beta" (a
		// parameter).
		scale, shift string
		factor       bool   // times a scalar constant after
		mask         string // times "param" or "constant" taps after
		twice        bool   // the weight also read by a second Conv
		consumer     string // Conv, or Gemm
		want         *Standardized
	}{
		{name: "gain, shift and factor (ScaledStdConv2d)", scale: "gain", shift: "row", factor: true, consumer: "Conv",
			want: &Standardized{Weight: "w", Gain: "gain", Rows: 4, K: 18, Scale: 0.5, GainScale: []float32{0.5, 0.5, 0.5, 0.5}}},
		{name: "gain times a constant as γ (timm's gain·scale)", scale: "gain·c", shift: "zeros", consumer: "Conv",
			want: &Standardized{Weight: "w", Gain: "gain", Rows: 4, K: 18, Scale: 1, GainScale: []float32{0.25, 0.25, 0.25, 0.25}}},
		{name: "no affine (StdConv2d)", scale: "ones", shift: "zeros", consumer: "Conv",
			want: &Standardized{Weight: "w", Rows: 4, K: 18, Scale: 1}},
		{name: "constant γ", scale: "row", shift: "zeros", factor: true, consumer: "Conv",
			want: &Standardized{Weight: "w", Rows: 4, K: 18, Scale: 0.5}},
		{name: "a learned shift", scale: "gain", shift: "beta", consumer: "Conv"},
		{name: "a learned mask over the taps", scale: "ones", shift: "zeros", mask: "param", consumer: "Conv"},
		{name: "a constant mask over the taps", scale: "ones", shift: "zeros", mask: "constant", consumer: "Conv"},
		{name: "the weight read again", scale: "ones", shift: "zeros", twice: true, consumer: "Conv"},
		{name: "a Gemm's weight", scale: "gain", shift: "zeros", consumer: "Gemm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newMB().input("x", "N", 2, 5, 5).output("y", "N", 4, 5, 5)
			b.opset = 15
			if c.consumer == "Gemm" {
				b = newMB().input("x", "N", 18).output("y", "N", 4)
				b.opset = 15
			}
			b.init("w", []int64{4, 2, 3, 3}).ints("rows", 1, 4, -1).ints("wshape", 4, 2, 3, 3).ints("flat", 4, 18).
				init("mu", []int64{4}).init("va", []int64{4}, 1).
				node("Reshape", "/conv/Reshape", []string{"w", "rows"}, []string{"wr"})
			for _, v := range []string{c.scale, c.shift} {
				switch v {
				case "gain":
					b.init("gain", []int64{4}, 1, 1.2, 0.8, 1.1)
				case "gain·c":
					b.init("gain", []int64{4}, 1, 1.2, 0.8, 1.1)
					constant(b, "quarter", 0.25)
					b.node("Mul", "/conv/Mul_gain", []string{"quarter", "gain"}, []string{"gain·c"})
				case "beta":
					b.init("beta", []int64{4}, 0.1, 0.2, -0.1, 0)
				case "ones":
					constant(b, "ones", 1, 1, 1, 1)
				case "zeros":
					constant(b, "zeros", 0, 0, 0, 0)
				case "row":
					constant(b, "row"+string(rune('0'+len(b.g.Node))), 0.5, 2, -1, 1.5)
				}
			}
			scale, shift := c.scale, c.shift
			for _, n := range b.g.Node {
				if n.GetOpType() == "Constant" && n.Output[0][:3] == "row" {
					if c.scale == "row" && scale == "row" {
						scale = n.Output[0]
					} else {
						shift = n.Output[0]
					}
				}
			}
			b.node("BatchNormalization", "/conv/BatchNormalization", []string{"wr", scale, shift, "mu", "va"}, []string{"wb"},
				attrFloat("epsilon", 1e-4), attrInt("training_mode", 1))
			shapeTo := "wshape"
			if c.consumer == "Gemm" {
				shapeTo = "flat"
			}
			b.node("Reshape", "/conv/Reshape_1", []string{"wb", shapeTo}, []string{"wn"})
			w := "wn"
			if c.factor {
				constant(b, "half", 0.5)
				b.node("Mul", "/conv/Mul", []string{w, "half"}, []string{"wf"})
				w = "wf"
			}
			if c.mask != "" {
				if c.mask == "param" {
					b.init("mask", []int64{1, 1, 3, 3})
				} else {
					b.node("Constant", "mask", nil, []string{"mask"}, attrTensor("value", floatTensor(graph.Float32, []int64{1, 1, 3, 3}, []float64{1, 0, 1, 0, 1, 0, 1, 0, 1})))
				}
				b.node("Mul", "/conv/Mask", []string{w, "mask"}, []string{"wm"})
				w = "wm"
			}
			out := "y"
			if c.twice {
				out = "y1"
			}
			if c.consumer == "Gemm" {
				b.node("Gemm", "/fc/Gemm", []string{"x", w}, []string{out}, attrInt("transB", 1))
			} else {
				b.node("Conv", "/conv/Conv", []string{"x", w}, []string{out}, attrInts("pads", 1, 1, 1, 1))
			}
			if c.twice {
				b.node("Conv", "/conv2/Conv", []string{"x", "w"}, []string{"y2"}, attrInts("pads", 1, 1, 1, 1)).
					node("Add", "/add", []string{"y1", "y2"}, []string{"y"})
			}
			g := b.build(t)
			sample := []int64{2, 5, 5}
			if c.consumer == "Gemm" {
				sample = []int64{18}
			}
			p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 4}})
			if err != nil {
				t.Fatal(err)
			}
			var got *Standardized
			transformed := false
			for _, prm := range p.Params {
				if !prm.Trainable() {
					t.Errorf("%s frozen: %s", prm.Name, prm.Reason)
				}
				for _, u := range prm.Uses {
					transformed = transformed || u.Transform
					if u.Standardized != nil {
						if got != nil && got != u.Standardized {
							t.Errorf("two readings of one weight")
						}
						got = u.Standardized
						if !u.Layer.Standardized {
							t.Errorf("%s's layer is not marked standardized", prm.Name)
						}
					}
				}
			}
			if !transformed {
				t.Fatal("no use is computed")
			}
			if c.want == nil {
				if got != nil {
					t.Fatalf("read as standardization: %+v", got)
				}
				return
			}
			if got == nil {
				t.Fatal("not read as standardization")
			}
			w0 := c.want
			if got.Weight != w0.Weight || got.Gain != w0.Gain || got.Rows != w0.Rows || got.K != w0.K || got.Scale != w0.Scale ||
				!slices.Equal(got.GainScale, w0.GainScale) || got.Epsilon != 1e-4 || c.scale != "ones" && got.Gamma == "" {
				t.Errorf("read as %+v, want %+v", got, w0)
			}
			for _, v := range []string{got.Input, got.Output, got.Gamma} {
				if v != "" && g.Values[v] == nil {
					t.Errorf("value %q is not in the graph", v)
				}
			}
			// The plan names the weight by its module.
			if l := p.Label("w"); l != "w" {
				t.Errorf("label %q", l)
			}
		})
	}
}
