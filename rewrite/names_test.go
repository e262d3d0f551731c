package rewrite

import (
	"regexp"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/dynamotest"
	"github.com/dpfinetune/dpfinetune/onnx"
)

func TestScopePath(t *testing.T) {
	for _, c := range []struct{ node, want string }{
		{"/conv1/Conv", "conv1"},
		{"/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"},
		{"/features/features.3/block/block.0/block.0.0/Conv", "features.3.block.0.0"},
		{"/encoder/layers/encoder_layer_0/self_attention/MatMul", "encoder.layers.encoder_layer_0.self_attention"},
		{"/fc/Gemm", "fc"},
		{"Conv_12", ""},  // older exporters: no scope
		{"/Conv", ""},    // the root module: no name
		{"//x/Conv", ""}, // malformed
		{"", ""},
	} {
		if got := scopePath(c.node); got != c.want {
			t.Errorf("scopePath(%q) = %q, want %q", c.node, got, c.want)
		}
	}
}

func TestExporterNamed(t *testing.T) {
	for name, want := range map[string]bool{
		"onnx::Conv_497": true, "onnx::MatMul_1021": true, "123": true,
		"conv1.weight": false, "onnx::Conv": false, "fc.bias": false, "": false,
	} {
		if got := ExporterNamed(name); got != want {
			t.Errorf("ExporterNamed(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestModuleName: the name of an exporter-named initializer comes from
// the scope of the node reading it and its input position; names the
// user wrote are kept.
func TestModuleName(t *testing.T) {
	g := &graph.Graph{}
	x := &graph.Value{Name: "x"}
	w := &graph.Value{Name: "onnx::Conv_196"}
	b := &graph.Value{Name: "onnx::Conv_197"}
	kept := &graph.Value{Name: "fc.weight"}
	dup := &graph.Value{Name: "onnx::Conv_5"}
	dupOut := &graph.Value{Name: "/Identity_output_0"}
	y := &graph.Value{Name: "y"}
	conv := &graph.Node{Name: "/layer1/layer1.0/conv1/Conv", OpType: "Conv", Inputs: []*graph.Value{x, w, b}, Outputs: []*graph.Value{y}}
	gemm := &graph.Node{Name: "/fc/Gemm", OpType: "Gemm", Inputs: []*graph.Value{y, kept}}
	id := &graph.Node{Name: "Identity_3", OpType: "Identity", Inputs: []*graph.Value{dup}, Outputs: []*graph.Value{dupOut}}
	conv2 := &graph.Node{Name: "/layer2/conv/Conv", OpType: "Conv", Inputs: []*graph.Value{y, dupOut}}
	w.Consumers, b.Consumers, kept.Consumers = []*graph.Node{conv}, []*graph.Node{conv}, []*graph.Node{gemm}
	dup.Consumers, dupOut.Consumers = []*graph.Node{id}, []*graph.Node{conv2}
	g.Nodes = []*graph.Node{conv, gemm, id, conv2}
	for v, want := range map[*graph.Value]string{
		w: "layer1.0.conv1.weight", b: "layer1.0.conv1.bias", kept: "", dup: "layer2.conv.weight",
	} {
		if got := ModuleName(v); got != want {
			t.Errorf("ModuleName(%s) = %q, want %q", v.Name, got, want)
		}
	}
	if got := ExportForm(g); got != ExportEvalFolded {
		t.Errorf("ExportForm = %q, want %q", got, ExportEvalFolded)
	}
	// A BatchNormalization of the batch's data; one of a parameter alone
	// (weight standardization) is none.
	g.Inputs = []*graph.Value{x}
	g.Nodes = append(g.Nodes, &graph.Node{OpType: "BatchNormalization", Inputs: []*graph.Value{w}})
	if got := ExportForm(g); got != ExportEvalFolded {
		t.Errorf("ExportForm with a BN of a weight = %q, want %q", got, ExportEvalFolded)
	}
	g.Nodes = append(g.Nodes, &graph.Node{OpType: "BatchNormalization", Inputs: []*graph.Value{y}})
	if got := ExportForm(g); got != ExportTraining {
		t.Errorf("ExportForm with BN = %q, want %q", got, ExportTraining)
	}
	if got := ExportForm(&graph.Graph{Nodes: []*graph.Node{gemm}}); got != "" {
		t.Errorf("ExportForm without convs = %q, want \"\"", got)
	}
	// The dynamo exporter's fold keeps the weight's name but not its
	// signature mark.
	cw := &graph.Value{Name: "conv1.weight", Initializer: true, ExportKind: "PARAMETER"}
	dconv := &graph.Node{Name: "node_conv2d", OpType: "Conv", Inputs: []*graph.Value{x, cw}}
	dg := &graph.Graph{Nodes: []*graph.Node{dconv}, ExportSignature: true}
	if got := ExportForm(dg); got != "" {
		t.Errorf("ExportForm of a marked weight = %q, want \"\"", got)
	}
	cw.ExportKind = ""
	if got := ExportForm(dg); got != ExportEvalFolded {
		t.Errorf("ExportForm of a dynamo fold = %q, want %q", got, ExportEvalFolded)
	}
	dg.ExportSignature = false
	if got := ExportForm(dg); got != "" {
		t.Errorf("ExportForm without the signature = %q, want \"\"", got)
	}
}

// TestScopeOf: in Swin-T as the dynamo exporter writes it
// (testdata/dynamo), the parameters its optimizer made under made-up
// names are labelled with the module that reads them — the attention's
// transposed qkv weight with the attention, an MLP's with its Linear —
// and --freeze selects them by it; a parameter with its state-dict name
// gets no label.
func TestScopeOf(t *testing.T) {
	m, err := onnx.LoadBytes(dynamotest.Filled(t, "swin_t.nodata.onnx.gz"), "")
	if err != nil {
		t.Fatal(err)
	}
	prep := func(freeze *regexp.Regexp) *Plan {
		g, err := graph.FromONNX(m)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: []int64{3, 224, 224}, Batch: 2, Freeze: freeze}})
		if err != nil {
			t.Fatal(err)
		}
		return rp
	}
	p := prep(nil)
	for name, want := range map[string]string{
		"val_34":              "val_34 (in features.1.0.attn)",
		"val_81":              "val_81 (in features.1.0.mlp.0)",
		"features.0.0.weight": "features.0.0.weight",
	} {
		if got := p.Label(name); got != want {
			t.Errorf("Label(%s) = %q, want %q", name, got, want)
		}
	}
	p = prep(regexp.MustCompile(`^features\.1\.0\.attn$`))
	for name, frozen := range map[string]bool{"val_34": true, "val_52": true, "val_81": false} {
		if prm := p.Param(name); prm == nil || (prm.Kind == KindFrozen) != frozen {
			t.Errorf("--freeze features.1.0.attn: %s %+v, frozen want %v", name, prm, frozen)
		}
	}
}

// TestDynamoExportsFreezeNothing: the batch is followed through every
// node of the dynamo exports, Swin-T's as_strided flatten before its head
// included (a Gather along the batch axis by indices computed from the
// input's shape), at two batch sizes, so that no parameter is frozen.
func TestDynamoExportsFreezeNothing(t *testing.T) {
	for _, name := range []string{"swin_t", "maxvit_t", "efficientvit_m0"} {
		m, err := onnx.LoadBytes(dynamotest.Filled(t, name+".nodata.onnx.gz"), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []int64{2, 3} {
			g, err := graph.FromONNX(m)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: []int64{3, 224, 224}, Batch: batch}})
			if err != nil {
				t.Fatal(err)
			}
			var frozen []string
			for _, prm := range p.Params {
				if prm.Kind == KindFrozen {
					frozen = append(frozen, prm.Name+": "+prm.Reason)
				}
			}
			if len(frozen)+len(p.Problems)+len(p.Warnings) > 0 || len(p.Params) == 0 {
				t.Errorf("%s at batch %d: %d parameters, frozen %q, problems %q, warnings %q", name, batch, len(p.Params), frozen, p.Problems, p.Warnings)
			}
		}
	}
}
