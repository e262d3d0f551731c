package runtime

import (
	"errors"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
)

// TestOpsetsCoverOpTable: every operator with a kernel declares the opset
// versions it implements, and nothing else does.
func TestOpsetsCoverOpTable(t *testing.T) {
	for op := range opTable {
		r, ok := opsets[op]
		if !ok {
			t.Errorf("%s has a kernel but no OpsetRange in opsets", op)
			continue
		}
		if r.Since < 1 || r.Until < r.Since {
			t.Errorf("%s: bad range %v", op, r)
		}
	}
	for op := range opsets {
		if _, ok := opTable[op]; !ok {
			t.Errorf("%s has an OpsetRange but no kernel", op)
		}
	}
}

// TestCheckOps: every refused node is listed once, in graph order, with
// the reason; folded-only operators and in-range kernels pass.
func TestCheckOps(t *testing.T) {
	mk := func(op, name, domain string, opset int64) *graph.Node {
		return &graph.Node{OpType: op, Name: name, Domain: domain, Opset: opset}
	}
	g := &graph.Graph{Nodes: []*graph.Node{
		mk("Relu", "ok", "", 14),
		mk("Shape", "shape", "", 14), // folded by the IR
		mk("Hardmax", "r1", "", 14),  // inferred, no kernel
		mk("Wibble", "w", "", 14),    // unknown
		mk("LayerNormalization", "ln", "", 14),
		mk("Conv", "conv", "", 28),
		mk("Relu", "vendor", "com.example", 1),
	}}
	err := CheckOps(g)
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatalf("CheckOps = %v, want *UnsupportedError", err)
	}
	want := []UnsupportedNode{
		{"r1", "Hardmax", 14, "no kernel (shapes are inferred, but nothing runs it)"},
		{"w", "Wibble", 14, "not supported"},
		{"ln", "LayerNormalization", 14, "opset 14 is older than the kernel's range 17–27"},
		{"conv", "Conv", 28, "opset 28 is newer than the kernel's range 1–27"},
		{"vendor", "com.example.Relu", 1, `operator domain "com.example" is not supported (only ai.onnx)`},
	}
	if len(ue.Nodes) != len(want) {
		t.Fatalf("got %d nodes %+v, want %d", len(ue.Nodes), ue.Nodes, len(want))
	}
	for i := range want {
		if ue.Nodes[i] != want[i] {
			t.Errorf("node %d: %+v, want %+v", i, ue.Nodes[i], want[i])
		}
	}
	if err := CheckOps(&graph.Graph{Nodes: g.Nodes[:2]}); err != nil {
		t.Errorf("supported graph: %v", err)
	}
}
