package runtime

import (
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/dynamotest"
	"github.com/dpfinetune/dpfinetune/internal/orttest"
	"github.com/dpfinetune/dpfinetune/onnx"
)

// TestDynamoExports: real models as PyTorch's dynamo exporter writes
// them (testdata/dynamo) compile, run as onnxruntime does and take a
// backward pass with every parameter the graph has. Swin-T: no parameter
// reaches a comparison (its shifted-window masks' fill values, which only
// a proof by evaluation shows no gradient reaches, are constants), so the
// masks fold; MaxViT-T: attention as Einsums over windows and grids (its
// plan once took 100 s building index maps it discarded); EfficientViT-M0
// (timm): convolutions over windows folded into the batch.
func TestDynamoExports(t *testing.T) {
	for _, c := range []struct {
		file   string
		params int // the parameters Swin-T has without its masks' fill values; 0: unchecked
		cmps   int // Equal nodes
	}{
		{"swin_t.nodata.onnx.gz", 149, 3},
		{"maxvit_t.nodata.onnx.gz", 0, 0},
		{"efficientvit_m0.nodata.onnx.gz", 0, 0},
	} {
		t.Run(c.file, func(t *testing.T) { checkDynamoExport(t, c.file, c.params, c.cmps) })
	}
}

func checkDynamoExport(t *testing.T, file string, wantParams, wantCmps int) {
	filled := dynamotest.Filled(t, file)
	m, err := onnx.LoadBytes(filled, "")
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	// No parameter upstream of a comparison.
	seen := map[*graph.Value]bool{}
	var up func(v *graph.Value) *graph.Value
	up = func(v *graph.Value) *graph.Value {
		if v == nil || seen[v] {
			return nil
		}
		seen[v] = true
		if v.IsParam() {
			return v
		}
		if v.Producer != nil {
			for _, in := range v.Producer.Inputs {
				if p := up(in); p != nil {
					return p
				}
			}
		}
		return nil
	}
	cmps := 0
	for _, n := range g.Nodes {
		if n.OpType != "Equal" {
			continue
		}
		cmps++
		for _, in := range n.Inputs {
			if p := up(in); p != nil {
				t.Errorf("parameter %s %v reaches %s", p.Name, p.Shape, n)
			}
		}
	}
	if cmps != wantCmps {
		t.Fatalf("%d Equal nodes, want %d", cmps, wantCmps)
	}
	params := 0
	for _, v := range g.Initializers {
		if v.IsParam() {
			params++
		}
	}
	const batch = 2
	plan, err := CompileForBatch(g, batch, nil, &Options{KeepActivations: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(2))
	xIn, xShape := plan.Input(0)
	x := make([]float32, len(xIn))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	if err := plan.SetInput(0, x); err != nil {
		t.Fatal(err)
	}
	if err := plan.Forward(); err != nil {
		t.Fatal(err)
	}
	y, shape := plan.Output(0)
	if len(shape) != 2 || shape[0] != batch || shape[1] != 1000 {
		t.Fatalf("logits shape %v", shape)
	}
	logits := append([]float32(nil), y...)
	var big float64
	for _, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("non-finite logit %v", v)
		}
		big = max(big, math.Abs(float64(v)))
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, filled, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("onnxruntime", func(t *testing.T) {
		ort := orttest.Run(t, path, map[string]orttest.Tensor{g.Inputs[0].Name: {Shape: to64(xShape), Data: x}})
		want, ok := ort[g.Outputs[0].Name]
		if !ok || len(want.Data) != len(logits) {
			t.Fatalf("onnxruntime gave %v", ort)
		}
		worst := 0.0
		for i, v := range want.Data {
			worst = max(worst, math.Abs(float64(v-logits[i])))
		}
		if worst > 1e-5*max(big, 1) {
			t.Errorf("logits differ from onnxruntime's by %.3g (largest %.3g)", worst, big)
		}
	})
	t.Run("backward", func(t *testing.T) {
		losses := make([]float32, batch)
		if err := plan.Loss([]int64{3, 7}, losses); err != nil {
			t.Fatal(err)
		}
		// Every product of activations by a weight sees the samples in
		// both: the DP engine takes per-sample gradients there (Swin-T's
		// head reads them through a Gather along the batch axis).
		hooked := 0
		hook := func(ev *HookEvent) {
			switch ev.Node.OpType {
			case "Gemm", "MatMul", "Conv":
			default:
				return
			}
			if ev.Params[0] || !ev.Params[1] {
				return
			}
			hooked++
			if ev.Inputs[0].BatchAxis < 0 || ev.DOut.BatchAxis < 0 {
				t.Errorf("%s %s: the input's batch axis %d, the output gradient's %d", ev.Node.OpType, ev.Node.Name, ev.Inputs[0].BatchAxis, ev.DOut.BatchAxis)
			}
		}
		if err := plan.Backward(nil, &BackwardOptions{Hook: hook}); err != nil {
			t.Fatal(err)
		}
		if hooked == 0 {
			t.Error("no product of activations by a weight was hooked")
		}
		names := plan.Params()
		if len(names) != params || wantParams > 0 && params != wantParams {
			t.Errorf("%d parameters in the plan, %d in the graph, want %d", len(names), params, wantParams)
		}
		var sq float64
		for _, name := range names {
			for _, v := range plan.Grad(name) {
				sq += float64(v) * float64(v)
			}
		}
		if math.IsNaN(sq) || math.IsInf(sq, 0) || sq == 0 {
			t.Errorf("the gradient's squared norm is %v", sq)
		}
	})
}
