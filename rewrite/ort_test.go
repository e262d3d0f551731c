package rewrite

import (
	"path/filepath"
	"testing"

	"github.com/dpfinetune/dpfinetune/internal/orttest"
)

// TestRewrittenModelsRunInOnnxruntime: rewritten exports keep a dynamic
// batch and run in onnxruntime at a batch the plan never saw (3): resnet_train
// frozen gives PyTorch's eval-mode logits, with GroupNorm what the Go
// reference evaluator computes; a 6-class ViT head gives (3, 6) logits.
// Skips when onnxruntime is unavailable (internal/orttest).
func TestRewrittenModelsRunInOnnxruntime(t *testing.T) {
	gold := readNPZ(t, "../testdata/golden/resnet_train.npz")
	x := gold["input"]
	per := len(x.d) / x.shape[0]
	sub := &tens{shape: append([]int{3}, x.shape[1:]...), d: x.d[:3*per]}
	in := orttest.Tensor{Shape: []int64{3, 3, 32, 32}, Data: make([]float32, len(sub.d))}
	for i, v := range sub.d {
		in.Data[i] = float32(v)
	}
	dir := t.TempDir()
	export := func(name string, opts Options) (string, *tens) {
		g := loadFixture(t, name)
		if _, err := Prepare(g, opts); err != nil {
			t.Fatal(err)
		}
		g = exported(t, g)
		m, err := g.ToONNX()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+string(opts.BN.Mode)+".onnx")
		if err := m.Save(path, nil); err != nil {
			t.Fatal(err)
		}
		if name != "resnet_train" {
			return path, nil
		}
		c := g.Clone()
		if err := c.InferShapes(map[string][]int64{"input": {3, 3, 32, 32}}); err != nil {
			t.Fatal(err)
		}
		return path, evaluate(t, c, map[string]*tens{"input": sub}, nil)["logits"]
	}
	opts := func(bn BNMode) Options {
		return Options{PlanOptions: PlanOptions{InputShape: []int64{3, 32, 32}, Batch: 8}, BN: BNOptions{Mode: bn}}
	}
	diff := func(o orttest.Tensor, want *tens) float64 {
		got := &tens{d: make([]float64, len(o.Data))}
		for i, v := range o.Data {
			got.d[i] = float64(v)
		}
		return got.maxAbsDiff(want)
	}
	frozen, fwant := export("resnet_train", opts(BNFreeze))
	out := orttest.Run(t, frozen, map[string]orttest.Tensor{"input": in})["logits"]
	eval := &tens{d: gold["logits_eval"].d[:3*10]}
	if d := diff(out, eval); d > 1e-4 {
		t.Errorf("frozen resnet_train in onnxruntime vs PyTorch eval-mode logits: %g", d)
	}
	if d := diff(out, fwant); d > 1e-4 {
		t.Errorf("frozen resnet_train in onnxruntime vs the Go evaluator: %g", d)
	}
	gn, gwant := export("resnet_train", opts(BNGroupNorm))
	if d := diff(orttest.Run(t, gn, map[string]orttest.Tensor{"input": in})["logits"], gwant); d > 1e-4*max(1, gwant.maxAbs()) {
		t.Errorf("GroupNorm resnet_train in onnxruntime vs the Go evaluator: %g", d)
	}
	o := opts(BNGroupNorm)
	o.NumClasses = 6
	vit, _ := export("vit", o)
	if s := orttest.Run(t, vit, map[string]orttest.Tensor{"input": in})["logits"].Shape; len(s) != 2 || s[0] != 3 || s[1] != 6 {
		t.Errorf("6-class ViT logits shape %v", s)
	}
}
