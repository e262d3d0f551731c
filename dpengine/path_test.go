package dpengine

import (
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx"
	"github.com/dpfinetune/dpfinetune/rewrite"
)

// TestPathDecisions: a weight through layout ops that keep the norm
// (Transpose, Reshape, Squeeze) keeps the mode's ghost/instantiate choice;
// slices of a packed weight used by several MatMuls are instantiated in
// every mode (their per-use ghost norms would miss the cross terms).
func TestPathDecisions(t *testing.T) {
	for _, tc := range []struct {
		fixture, use string
		mode         Mode
		want         rewrite.Decision
	}{
		{"packedqkv", "qkv_weight@/MatMul", Ghost, rewrite.Instantiate},
		{"packedqkv", "qkv_weight@/MatMul_1", Mixed, rewrite.Instantiate},
		{"packedqkv", "qkv_weight@/MatMul_2", BK, rewrite.Instantiate},
		{"packedqkv", "proj_weight@/MatMul_5", Ghost, rewrite.Ghost},
		{"packedqkv", "fc_weight@/MatMul_6", Ghost, rewrite.Ghost},
		{"packedqkv", "fc_weight@/MatMul_6", Instantiate, rewrite.Instantiate},
		{"vit_nofold", "encoder.layers.encoder_layer_0.self_attention.in_proj_weight@/encoder/layers/encoder_layer_0/self_attention/MatMul", Ghost, rewrite.Ghost},
		{"vit_nofold", "encoder.layers.encoder_layer_0.self_attention.in_proj_weight@/encoder/layers/encoder_layer_0/self_attention/MatMul", Instantiate, rewrite.Instantiate},
	} {
		e := newEngine(t, tc.fixture, tc.mode, Clipping{Fn: Abadi, R: 1}, false)
		d := e.Decisions()
		got, ok := d[tc.use]
		if !ok {
			t.Errorf("%s %s: no linear use %s (have %v)", tc.fixture, tc.mode, tc.use, sortedKeys(d))
			continue
		}
		if got != tc.want {
			t.Errorf("%s %s: %s decided %s, want %s", tc.fixture, tc.mode, tc.use, got, tc.want)
		}
	}
}

// TestBuildPathMap: the index map of a packed weight's slice is the
// slice's own index arithmetic: operand element (a, b) of k's weight
// Transpose(Slice(qkv_weight, C…2C)) copies qkv_weight[C+b, a].
func TestBuildPathMap(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "testdata", "models", "packedqkv.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.InferShapes(map[string][]int64{"input": {2, 3, 32, 32}}); err != nil {
		t.Fatal(err)
	}
	const C = 32
	for _, tc := range []struct {
		operand string
		at      func(a, b int) int
	}{
		{"/Transpose_1_output_0", func(a, b int) int { return b*C + a }},       // q
		{"/Transpose_3_output_0", func(a, b int) int { return (C+b)*C + a }},   // k
		{"/Transpose_4_output_0", func(a, b int) int { return (2*C+b)*C + a }}, // v
	} {
		idx, err := buildPathMap(g, tc.operand, "qkv_weight", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(idx) != C*C {
			t.Fatalf("%s: map of %d elements, want %d", tc.operand, len(idx), C*C)
		}
		for a := 0; a < C; a++ {
			for b := 0; b < C; b++ {
				if got, want := int(idx[a*C+b]), tc.at(a, b); got != want {
					t.Fatalf("%s[%d,%d] maps to %d, want %d", tc.operand, a, b, got, want)
				}
			}
		}
	}
	// The weight of another MatMul is not on the path.
	if _, err := buildPathMap(g, "/Transpose_9_output_0", "qkv_weight", nil); err == nil {
		t.Error("a map from fc_weight's operand to qkv_weight: want an error")
	}
}
