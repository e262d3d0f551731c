package rewrite

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// entryOf returns sd's entry of key, or nil.
func entryOf(sd *StateDict, key string) *StateEntry {
	for i := range sd.Entries {
		if sd.Entries[i].Key == key {
			return &sd.Entries[i]
		}
	}
	return nil
}

// TestStateDictOf names the fixtures' tensors by their state-dict keys, in
// PyTorch's layouts: a training-form ResNet's BatchNorm buffers; after
// RewriteBatchNorm and export, its GroupNorms' (C) affines and the modules
// to replace; an eval-form ViT's Linear weights transposed back
// (nn.MultiheadAttention's in_proj_weight named by its in_proj_bias); and
// BEiT's qkv weight, which its attention multiplies by functionally,
// unnamed with the reason.
func TestStateDictOf(t *testing.T) {
	cases := []struct {
		name       string
		prepare    bool // trained as RewriteBatchNorm and ExportGraph leave it
		keys       map[string][]int64
		absent     []string
		transposed []string // nil: not checked; empty: none
		groupNorms int
		unnamed    []string // reasons' substrings, one an unnamed tensor
	}{
		{name: "resnet_train", keys: map[string][]int64{"bn1.running_mean": {8}, "bn1.weight": {8}, "fc.weight": {10, 64}, "layer2.0.downsample.1.running_var": {16}}, transposed: []string{}},
		{name: "resnet_train", prepare: true, keys: map[string][]int64{"bn1.weight": {8}, "bn1.bias": {8}, "layer1.0.conv1.weight": {8, 8, 3, 3}},
			absent: []string{"bn1.running_mean", "bn1.running_var"}, groupNorms: 12},
		{name: "vit", keys: map[string][]int64{"encoder.layers.encoder_layer_0.self_attention.in_proj_weight": {96, 32}, "encoder.layers.encoder_layer_0.mlp.0.weight": {64, 32},
			"encoder.layers.encoder_layer_0.self_attention.out_proj.weight": {32, 32}, "class_token": {1, 1, 32}},
			transposed: []string{"encoder.layers.encoder_layer_0.self_attention.in_proj_weight", "encoder.layers.encoder_layer_1.mlp.3.weight"}},
		{name: "vit_nofold", keys: map[string][]int64{"encoder.layers.encoder_layer_0.self_attention.in_proj_weight": {96, 32}}, transposed: []string{}},
		{name: "beit", keys: map[string][]int64{"blocks.0.attn.proj.weight": {32, 32}, "blocks.0.attn.q_bias": {32}},
			absent: []string{"blocks.0.attn.weight"}, unnamed: []string{"module blocks.0.attn multiplies by", "module blocks.1.attn multiplies by"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := loadFixture(t, c.name)
			if c.prepare {
				if _, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: fixtureSample(c.name), Batch: 2}}); err != nil {
					t.Fatal(err)
				}
				g = roundTrip(t, exported(t, g))
			}
			sd, err := StateDictOf(g, fixtureSample(c.name), false)
			if err != nil {
				t.Fatal(err)
			}
			for k, shape := range c.keys {
				e := entryOf(sd, k)
				if e == nil {
					t.Errorf("no %s", k)
					continue
				}
				if !slices.Equal(e.Shape, shape) {
					t.Errorf("%s: shape %v, want %v", k, e.Shape, shape)
				}
			}
			for _, k := range c.absent {
				if entryOf(sd, k) != nil {
					t.Errorf("%s written", k)
				}
			}
			for _, e := range sd.Entries {
				if c.transposed != nil && len(c.transposed) == 0 && e.Transposed {
					t.Errorf("%s transposed", e.Key)
				}
				vals, err := e.Values()
				if err != nil {
					t.Fatal(err)
				}
				n := int64(1)
				for _, d := range e.Shape {
					n *= d
				}
				if int64(len(vals)) != n {
					t.Errorf("%s: %d values for shape %v", e.Key, len(vals), e.Shape)
				}
			}
			for _, k := range c.transposed {
				e := entryOf(sd, k)
				if e == nil || !e.Transposed {
					t.Errorf("%s not transposed", k)
					continue
				}
				src := g.Values[e.Source].Const
				vals, _ := e.Values()
				rows, cols := int(src.Shape[0]), int(src.Shape[1])
				for i := 0; i < rows; i++ {
					for j := 0; j < cols; j++ {
						if vals[j*rows+i] != src.F32[i*cols+j] {
							t.Fatalf("%s[%d, %d] is not %s[%d, %d]", k, j, i, e.Source, i, j)
						}
					}
				}
			}
			if len(sd.GroupNorms) != c.groupNorms {
				t.Errorf("%d GroupNorm modules, want %d: %+v", len(sd.GroupNorms), c.groupNorms, sd.GroupNorms)
			}
			for _, gn := range sd.GroupNorms {
				if e := entryOf(sd, gn.Module+".weight"); e == nil || e.Shape[0] != gn.Channels || gn.Channels%gn.Groups != 0 || gn.Epsilon <= 0 {
					t.Errorf("GroupNorm %+v: its weight %v", gn, e)
				}
			}
			if len(sd.Unnamed) != len(c.unnamed) {
				t.Errorf("unnamed %+v, want %d", sd.Unnamed, len(c.unnamed))
			}
			for i, want := range c.unnamed {
				if i < len(sd.Unnamed) && !strings.Contains(sd.Unnamed[i].Reason, want) {
					t.Errorf("unnamed %s: %q, want it to say %q", sd.Unnamed[i].Source, sd.Unnamed[i].Reason, want)
				}
			}
		})
	}
}

// TestStateDictOfErrors: a folded export, and two initializers that name
// one key (a weight the exporter renamed beside one keeping that name).
func TestStateDictOfErrors(t *testing.T) {
	// An eval-form export: a Conv reads an exporter-named weight.
	folded := newMB().input("x", "N", 3, 4, 4).output("y", "N", 2, 4, 4).
		init("onnx::Conv_7", []int64{2, 3, 1, 1}).init("onnx::Conv_8", []int64{2}).
		node("Conv", "/conv1/Conv", []string{"x", "onnx::Conv_7", "onnx::Conv_8"}, []string{"y"}).build(t)
	if _, err := StateDictOf(folded, nil, false); err == nil || !strings.Contains(err.Error(), "folded its BatchNorms") {
		t.Errorf("folded export: %v", err)
	}
	twice := newMB().input("x", "N", 4).output("y", "N", 2).
		init("fc.weight", []int64{2, 4}).init("onnx::Gemm_3", []int64{2, 4}).
		node("Gemm", "/fc/Gemm", []string{"x", "onnx::Gemm_3"}, []string{"h"}, attrInt("transB", 1)).
		node("Gemm", "/other/Gemm", []string{"h", "fc.weight"}, []string{"y"}, attrInt("transB", 1)).build(t)
	if _, err := StateDictOf(twice, nil, false); err == nil || !strings.Contains(err.Error(), `both "fc.weight"`) {
		t.Errorf("two initializers of one key: %v", err)
	}
}

// TestUnfoldBatchNorm: a model frozen by --bn freeze (RewriteBatchNorm
// folds conv1's BatchNorm and conv2's, which has a bias of its own, into
// them; bn2, after a Relu, becomes a Mul and an Add) and exported, then
// unfolded against the original, gives back the original's state dict —
// every tensor, the BatchNorms' included — to float32's rounding; a run
// trains what the folding made, and the unfolding is that algebra
// undone. A BatchNorm the tuned model lacks in both forms is an error.
func TestUnfoldBatchNorm(t *testing.T) {
	build := func(gamma3 float32) *graph.Graph {
		b := newMB().input("x", "N", 3, 4, 4).output("y", "N", 4, 4, 4).
			init("conv1.weight", []int64{4, 3, 3, 3}).
			init("bn1.weight", []int64{4}, 1.5, 0.5, -0.7, gamma3).init("bn1.bias", []int64{4}, 0.1, -0.2, 0.3, 0).
			init("bn1.running_mean", []int64{4}, 0.3, -0.1, 0.05, 1).init("bn1.running_var", []int64{4}, 0.5, 1.5, 2, 0.25).
			init("bn2.weight", []int64{4}, 0.9, 1.1, 1.3, -0.4).init("bn2.bias", []int64{4}, 0, 0.2, -0.1, 0.4).
			init("bn2.running_mean", []int64{4}, -0.2, 0.1, 0.4, 0.3).init("bn2.running_var", []int64{4}, 1, 0.7, 1.2, 3).
			init("conv2.weight", []int64{4, 4, 1, 1}).init("conv2.bias", []int64{4}, 0.5, -0.5, 0.25, 0).
			init("bn3.weight", []int64{4}, 1, 2, 0.5, 0.8).init("bn3.bias", []int64{4}, 0.1, 0.1, -0.3, 0.2).
			init("bn3.running_mean", []int64{4}, 0.2, -0.4, 0, 0.1).init("bn3.running_var", []int64{4}, 0.9, 1.1, 0.6, 2.5).
			node("Conv", "/conv1/Conv", []string{"x", "conv1.weight"}, []string{"c1"}, attrInts("pads", 1, 1, 1, 1)).
			node("BatchNormalization", "/bn1/BatchNormalization", []string{"c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}, []string{"b1"}).
			node("Relu", "/relu/Relu", []string{"b1"}, []string{"r1"}).
			node("BatchNormalization", "/bn2/BatchNormalization", []string{"r1", "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var"}, []string{"b2"}).
			node("Conv", "/conv2/Conv", []string{"b2", "conv2.weight", "conv2.bias"}, []string{"c2"}).
			node("BatchNormalization", "/bn3/BatchNormalization", []string{"c2", "bn3.weight", "bn3.bias", "bn3.running_mean", "bn3.running_var"}, []string{"y"})
		return b.build(t)
	}
	orig := build(2)
	want, err := StateDictOf(orig, []int64{3, 4, 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	freeze := func(g *graph.Graph) *graph.Graph {
		if _, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: []int64{3, 4, 4}, Batch: 2}, BN: BNOptions{Mode: BNFreeze}}); err != nil {
			t.Fatal(err)
		}
		return roundTrip(t, exported(t, g))
	}
	tuned := freeze(build(2))
	sd, err := StateDictOf(tuned, []int64{3, 4, 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	if entryOf(sd, "bn1.running_mean") != nil || entryOf(sd, "conv1.bias") == nil {
		t.Fatalf("the frozen model is not folded as the test means: %+v", sd.Entries)
	}
	if _, err := UnfoldBatchNorm(sd, tuned, orig); err != nil {
		t.Fatal(err)
	}
	if len(sd.Entries) != len(want.Entries) {
		var keys []string
		for _, e := range sd.Entries {
			keys = append(keys, e.Key)
		}
		t.Errorf("unfolded keys %v, want the original's %d", keys, len(want.Entries))
	}
	for _, w := range want.Entries {
		e := entryOf(sd, w.Key)
		if e == nil {
			t.Errorf("no %s", w.Key)
			continue
		}
		if !slices.Equal(e.Shape, w.Shape) {
			t.Errorf("%s: shape %v, want %v", w.Key, e.Shape, w.Shape)
		}
		got, _ := e.Values()
		ref, _ := w.Values()
		for i := range ref {
			if d := math.Abs(float64(got[i] - ref[i])); d > 1e-6*math.Max(1, math.Abs(float64(ref[i]))) {
				t.Errorf("%s[%d] = %g, want %g", w.Key, i, got[i], ref[i])
				break
			}
		}
	}
	// A channel whose γ is 0: its folded weights are 0, and W'/s has no
	// value; the unfolding gives it γ = √(var + ε) (s = 1), W = W' and β
	// from its folded bias, which compute what the folded channel does.
	zero := build(0)
	tz := freeze(build(0))
	sd, err = StateDictOf(tz, []int64{3, 4, 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UnfoldBatchNorm(sd, tz, zero); err != nil {
		t.Fatal(err)
	}
	g3, _ := entryOf(sd, "bn1.weight").Values()
	w3, _ := entryOf(sd, "conv1.weight").Values()
	b3, _ := entryOf(sd, "bn1.bias").Values()
	// β: the channel's output is its folded bias β = 0, which γ(0 −
	// mean)/√(var + ε) + β' = −mean + β' makes with β' = mean = 1.
	if d := math.Abs(float64(g3[3]) - math.Sqrt(0.25+1e-5)); d > 1e-6 || w3[3*27] != 0 || math.Abs(float64(b3[3])-1) > 1e-6 {
		t.Errorf("γ = 0 channel unfolded to γ %g, W[3,0,0,0] %g, β %g; want √(var+ε) = %g, 0 and the mean 1", g3[3], w3[3*27], b3[3], math.Sqrt(0.25+1e-5))
	}
	// The tuned model of another original: its BatchNorms are not there.
	other := newMB().input("x", "N", 3, 4, 4).output("y", "N", 3, 4, 4).
		init("bnX.weight", []int64{3}, 1).init("bnX.bias", []int64{3}, 0).init("bnX.running_mean", []int64{3}, 0).init("bnX.running_var", []int64{3}, 1).
		node("BatchNormalization", "/bnX/BatchNormalization", []string{"x", "bnX.weight", "bnX.bias", "bnX.running_mean", "bnX.running_var"}, []string{"y"}).build(t)
	sd, _ = StateDictOf(tuned, []int64{3, 4, 4}, false)
	if _, err := UnfoldBatchNorm(sd, tuned, other); err == nil || !strings.Contains(err.Error(), "neither its frozen form") {
		t.Errorf("unfolding against another model: %v", err)
	}
}
