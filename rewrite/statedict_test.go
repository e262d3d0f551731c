package rewrite

import (
	"slices"
	"strings"
	"testing"
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
			sd, err := StateDictOf(g, fixtureSample(c.name))
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
	if _, err := StateDictOf(folded, nil); err == nil || !strings.Contains(err.Error(), "folded its BatchNorms") {
		t.Errorf("folded export: %v", err)
	}
	twice := newMB().input("x", "N", 4).output("y", "N", 2).
		init("fc.weight", []int64{2, 4}).init("onnx::Gemm_3", []int64{2, 4}).
		node("Gemm", "/fc/Gemm", []string{"x", "onnx::Gemm_3"}, []string{"h"}, attrInt("transB", 1)).
		node("Gemm", "/other/Gemm", []string{"h", "fc.weight"}, []string{"y"}, attrInt("transB", 1)).build(t)
	if _, err := StateDictOf(twice, nil); err == nil || !strings.Contains(err.Error(), `both "fc.weight"`) {
		t.Errorf("two initializers of one key: %v", err)
	}
}
