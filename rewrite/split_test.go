package rewrite

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSplitFrozenPrefix cuts the fixtures where their trained part
// begins, and refuses the cuts that would not be the model: the numbers
// through the two halves are the model's (dptrain.TestFeatureCache runs
// them).
func TestSplitFrozenPrefix(t *testing.T) {
	cases := []struct {
		fixture, train string
		views          int64
		cut            []string // the cut tensors' producers' op types
		shape          []int64  // one sample's shape of the head's input
		heads          []string // parameters of the head's plan, trainable first
		reason         string
	}{
		{fixture: "cnn", train: `^classifier\.3\.`, cut: []string{"Tanh"}, shape: []int64{32}, heads: []string{"classifier.3.weight", "classifier.3.bias"}},
		{fixture: "cnn", train: `^classifier\.`, cut: []string{"Flatten"}, shape: []int64{512}, heads: []string{"classifier.1.weight", "classifier.1.bias", "classifier.3.weight", "classifier.3.bias"}},
		// Only the last layer's weight: its bias sits in the head, frozen.
		{fixture: "cnn", train: `^classifier\.3\.weight$`, cut: []string{"Tanh"}, shape: []int64{32}, heads: []string{"classifier.3.weight", "classifier.3.bias"}},
		{fixture: "resnet_eval", train: `^fc\.`, cut: []string{"Flatten"}, shape: []int64{64}, heads: []string{"fc.weight", "fc.bias"}},
		{fixture: "vit", train: `^heads\.`, cut: []string{"Gather"}, shape: []int64{32}, heads: []string{"heads.head.weight", "heads.head.bias"}},
		// The last block and the head: the block's input.
		{fixture: "resnet_eval", train: `^(layer4|fc)\.`, cut: []string{"Relu"}, shape: []int64{32, 2, 2}},
		{fixture: "cnn", train: "", reason: "reads the input itself"},
		{fixture: "cnn", train: `^features\.0\.bias$`, reason: "reads the input itself"},
		// Several rows a sample (a user's examples): the head reads as
		// many cut rows a sample.
		{fixture: "cnn", train: `^classifier\.`, views: 3, cut: []string{"Flatten"}, shape: []int64{512}},
		// An MLP's second layer alone: its input and the residual
		// stream, two tensors packed into one input.
		{fixture: "vit", train: `encoder_layer_1\.mlp\.3\.`, cut: []string{"Add", "Mul"}, shape: []int64{17*32 + 17*64}},
		// CrossViT's two heads read the two branches' class tokens.
		{fixture: "crossvit", train: `^heads\.`, cut: []string{"Gather", "Gather"}, shape: []int64{32 + 48},
			heads: []string{"heads.0.weight", "heads.0.bias", "heads.1.weight", "heads.1.bias"}},
	}
	t.Run("preprocessing", func(t *testing.T) {
		// The input normalized and rectified before the trained Gemm:
		// nothing worth caching.
		g := newMB().input("x", "N", 8).output("y", "N", 4).
			init("w", []int64{4, 8}).init("b", []int64{4}).
			node("Relu", "relu", []string{"x"}, []string{"r"}).
			node("Gemm", "fc", []string{"r", "w", "b"}, []string{"y"}, attrInt("transB", 1)).build(t)
		opts := PlanOptions{InputShape: []int64{8}, Batch: 4}
		p, err := Prepare(g, Options{PlanOptions: opts})
		if err != nil {
			t.Fatal(err)
		}
		if f, reason, err := SplitFrozenPrefix(g, p, opts); err != nil || f != nil || !strings.Contains(reason, "no convolution or matrix product") {
			t.Errorf("split %v, %q, %v; want none", f != nil, reason, err)
		}
	})
	for _, c := range cases {
		t.Run(c.fixture+"/"+c.train, func(t *testing.T) {
			g := loadFixture(t, c.fixture)
			opts := Options{PlanOptions: PlanOptions{InputShape: fixtureSample(c.fixture), Batch: 4, Multiplicity: c.views}}
			if c.train != "" {
				opts.Train = regexp.MustCompile(c.train)
			}
			p, err := Prepare(g, opts)
			if err != nil {
				t.Fatal(err)
			}
			f, reason, err := SplitFrozenPrefix(g, p, opts.PlanOptions)
			if err != nil {
				t.Fatal(err)
			}
			if c.reason != "" {
				if f != nil || !strings.Contains(reason, c.reason) {
					t.Fatalf("split %v, reason %q; want none because %q", f != nil, reason, c.reason)
				}
				return
			}
			if f == nil {
				t.Fatalf("no split: %s", reason)
			}
			var ops []string
			for _, name := range f.Cut {
				if cv := g.Values[name]; cv != nil && cv.Producer != nil {
					ops = append(ops, cv.Producer.OpType)
				}
			}
			if !slices.Equal(ops, c.cut) || len(f.Shapes) != len(f.Cut) {
				t.Fatalf("cut %q (%v, shapes %v), want the outputs of %v", f.Cut, ops, f.Shapes, c.cut)
			}
			if !slices.Equal(f.Shape, c.shape) || f.SampleFloats() != prod(c.shape) {
				t.Errorf("cut shape %v (%d floats), want %v", f.Shape, f.SampleFloats(), c.shape)
			}
			// The halves: the prefix from the model's input to the cut,
			// the head from the cut to the first output, the nodes split
			// between them (a node may be in both only if it computes from
			// constants alone), the head's tensors the model's.
			var pouts []string
			for _, v := range f.Prefix.Outputs {
				pouts = append(pouts, v.Name)
			}
			if len(f.Prefix.Inputs) != 1 || f.Prefix.Inputs[0].Name != g.Inputs[0].Name || !slices.Equal(pouts, f.Cut) {
				t.Errorf("prefix %v → %v", f.Prefix.Inputs, f.Prefix.Outputs)
			}
			hin := f.Cut[0]
			if len(f.Cut) > 1 {
				hin = PackedInput
			}
			if len(f.Head.Inputs) != 1 || f.Head.Inputs[0].Name != hin || len(f.Head.Outputs) != 1 || f.Head.Outputs[0].Name != g.Outputs[0].Name {
				t.Errorf("head %v → %v", f.Head.Inputs, f.Head.Outputs)
			}
			if hs := f.Head.Inputs[0].Shape; len(hs) != len(c.shape)+1 || hs[0] != g.Inputs[0].Shape[0] || !slices.Equal(hs[1:].Ints(), c.shape) {
				t.Errorf("head input shape %v", hs)
			}
			if f.PrefixNodes+f.HeadNodes < len(g.Nodes) || f.PrefixNodes != len(f.Prefix.Nodes) || f.HeadNodes != len(f.Head.Nodes) {
				t.Errorf("%d + %d nodes of %d", f.PrefixNodes, f.HeadNodes, len(g.Nodes))
			}
			for _, prm := range p.Params {
				if prm.Trainable() {
					hv, gv := f.Head.Values[prm.Name], g.Values[prm.Name]
					if hv == nil || hv.Const != gv.Const {
						t.Errorf("trained %q: not the model's tensor in the head", prm.Name)
					}
					if pv := f.Prefix.Values[prm.Name]; pv != nil {
						t.Errorf("trained %q in the prefix", prm.Name)
					}
				}
			}
			// The head's plan trains what the model's plan trains, with the
			// same decisions.
			hp := f.HeadPlan
			if hp.Trainable != p.Trainable || !slices.Equal(hp.InputShape, c.shape) {
				t.Fatalf("head plan trains %+v at %v, the model's %+v", hp.Trainable, hp.InputShape, p.Trainable)
			}
			if hp.Multiplicity != p.Multiplicity {
				t.Errorf("head plan reads %d rows a sample, the model's %d", hp.Multiplicity, p.Multiplicity)
			}
			var got []string
			for _, prm := range hp.Params {
				q := p.Param(prm.Name)
				if q.Trainable() != prm.Trainable() {
					t.Errorf("%q trainable %v in the head, %v in the model", prm.Name, prm.Trainable(), q.Trainable())
				}
				got = append(got, prm.Name)
			}
			if c.heads != nil && !slices.Equal(got, c.heads) {
				t.Errorf("head parameters %q, want %q", got, c.heads)
			}
			hl := map[string]Decision{}
			for _, l := range hp.Layers {
				hl[l.Param] = l.Decision
			}
			for _, l := range p.Layers {
				if d, ok := hl[l.Param]; !ok || d != l.Decision {
					t.Errorf("layer %q: %s in the head, %s in the model", l.Param, d, l.Decision)
				}
			}
		})
	}
}
