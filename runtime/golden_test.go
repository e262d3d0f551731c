package runtime

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/internal/npy"
	"github.com/dpfinetune/dpfinetune/onnx"
)

var fixtures = []string{"cnn", "resnet_eval", "resnet_train", "vgg", "mobilenet", "vit", "beit", "crossvit"}

func loadFixture(t testing.TB, name string) (*graph.Graph, map[string]*npy.Array) {
	t.Helper()
	dir := filepath.Join("..", "testdata")
	mp := filepath.Join(dir, "models", name+".onnx")
	if _, err := os.Stat(mp); err != nil {
		t.Skipf("fixture %s not present", mp)
	}
	m, err := onnx.Load(mp)
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.FromONNX(m)
	if err != nil {
		t.Fatal(err)
	}
	gold, err := npy.ReadNPZ(filepath.Join(dir, "golden", name+".npz"))
	if err != nil {
		t.Fatal(err)
	}
	return g, gold
}

// relErr returns max|got−want| / max(max|want|, floor).
func relErrFloor(got, want []float32, floor float64) float64 {
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = math.Max(m, math.Abs(float64(want[i])))
	}
	return d / math.Max(m, math.Max(floor, 1e-30))
}

func relErr(got, want []float32) float64 { return relErrFloor(got, want, 0) }

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// TestGoldens checks logits, per-sample losses and summed parameter
// gradients of every fixture against PyTorch. The measure is the max
// absolute difference divided by the max absolute golden value of the
// tensor; for gradients, that value is floored at 1e-4 × the largest
// golden gradient of the model, because some gradients are analytically
// zero (attention key biases: softmax is invariant to them) and their
// goldens are float rounding noise of order 1e-9.
func TestGoldens(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			g, gold := loadFixture(t, name)
			p := matchPyTorch(t, g, gold, "logits")
			t.Logf("arena %d KiB (live bound %d KiB, unshared %d KiB)", p.ArenaBytes()>>10, p.LiveBytes()>>10, p.UnplannedBytes()>>10)
		})
	}
}

// matchPyTorch compiles g for the batch of ref["input"] and holds its
// output to ref[logits], its per-sample losses for ref["labels"] to
// ref["loss"] where the file has them, and the gradients of their sum to
// the "grad/NAME" arrays, one for every trainable parameter, with
// TestGoldens' measures. It returns the plan after its Backward.
func matchPyTorch(t *testing.T, g *graph.Graph, ref map[string]*npy.Array, logits string) *Plan {
	t.Helper()
	in := ref["input"]
	p, err := CompileForBatch(g, in.Shape[0], to64(in.Shape[1:]), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetInput(0, in.F32); err != nil {
		t.Fatal(err)
	}
	if err := p.Forward(); err != nil {
		t.Fatal(err)
	}
	y, _ := p.Output(0)
	if e := relErr(y, ref[logits].F32); e > 1e-4 {
		t.Errorf("logits: relative error %.3g > 1e-4", e)
	} else {
		t.Logf("logits: relative error %.3g", e)
	}
	losses := make([]float32, in.Shape[0])
	if err := p.Loss(ref["labels"].I64, losses); err != nil {
		t.Fatal(err)
	}
	if want, ok := ref["loss"]; ok {
		if e := relErr(losses, want.F32); e > 1e-4 {
			t.Errorf("loss: relative error %.3g > 1e-4", e)
		} else {
			t.Logf("loss: relative error %.3g", e)
		}
	}
	if err := p.Backward(nil, nil); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range ref {
		if strings.HasPrefix(k, "grad/") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var largest float64
	for _, k := range keys {
		largest = math.Max(largest, maxAbs(ref[k].F32))
	}
	worst, worstName := 0.0, ""
	for _, k := range keys {
		name := strings.TrimPrefix(k, "grad/")
		gr := p.Grad(name)
		if gr == nil {
			t.Errorf("%s: not a trainable parameter of the plan", name)
			continue
		}
		e := relErrFloor(gr, ref[k].F32, 1e-4*largest)
		if e > 1e-3 {
			t.Errorf("grad %s: relative error %.3g > 1e-3", name, e)
		}
		if e > worst {
			worst, worstName = e, name
		}
	}
	if len(keys) == 0 || len(keys) != len(p.Params()) {
		t.Errorf("%d PyTorch gradients, %d trainable parameters %v", len(keys), len(p.Params()), p.Params())
	}
	t.Logf("%d gradients: max relative error %.3g (%s)", len(keys), worst, worstName)
	return p
}
