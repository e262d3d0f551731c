package dpengine

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
	"github.com/dpfinetune/dpfinetune/rewrite"
	"github.com/dpfinetune/dpfinetune/runtime"
)

// loraFixture loads a fixture and prepares it with LoRA adapters of rank
// 2 (α 6: a scale of 3, so that a rule dropping the scale shows), every B
// factor drawn from U(−0.5, 0.5) — at B = 0 every A factor's per-sample
// gradient is zero and would check nothing.
func loraFixture(t testing.TB, name string, b int64) (*graph.Graph, *rewrite.Plan) {
	return loraFixtureWith(t, name, b, nil, 2)
}

// loraFixtureWith is loraFixture with edit applied to the graph first and
// adapters of the given rank (0: none, the fixture as Prepare plans it).
func loraFixtureWith(t testing.TB, name string, b int64, edit func(*graph.Graph), rank int64) (*graph.Graph, *rewrite.Plan) {
	t.Helper()
	g, rp := fixturePreparedWith(t, name, edit, rewrite.Options{PlanOptions: rewrite.PlanOptions{Batch: b},
		LoRA: rewrite.LoRAOptions{Rank: rank, Alpha: 3 * float64(rank), Seed: 7}})
	if rank > 0 && len(rp.Adapters) == 0 {
		t.Fatalf("%s: no adapters", name)
	}
	rng := rand.New(rand.NewPCG(8, 9))
	for _, ad := range rp.Adapters {
		c := g.Values[ad.B].Const
		for i := range c.F32 {
			c.F32[i] = float32(rng.Float64() - 0.5)
		}
	}
	return g, rp
}

// TestLoRANorms: on every engine fixture with LoRA adapters (B drawn),
// in every mode, on the CPU and on a device with memory of its own, the
// engine's per-sample norms of the adapters, the heads and together are
// each sample's own gradient's (the norm check's oracle: a plain backward
// pass a sample at a time), to 1e-5 of the squared total; and every A
// factor has a per-sample gradient to check (not zero).
func TestLoRANorms(t *testing.T) {
	forEachEngine(t, engineFixtures, func(t *testing.T, name string, dev runtime.Device, mode Mode) {
		const n = 3
		x, y, _, _ := engineBatch(t, name, n)
		g, rp := loraFixture(t, name, 4)
		e := checkedNorms(t, g, rp, compareConfig(dev, mode, Clipping{Fn: Abadi, R: 0.5}, false, "sgd", 4), x, y)
		norms := e.ParamNorms()
		for _, p := range e.ParamNames() {
			if !strings.Contains(p, ".lora_A") {
				continue
			}
			for i := 0; i < n; i++ {
				if v := norms[p][i]; !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("%s: sample %d's norm %g", p, i, v)
				}
			}
		}
	})
}

// TestLoRAExportMerges: the model ExportGraph writes from a LoRA-adapted
// fixture (B drawn) has the adapters merged: the layers and initializer
// names of the fixture prepared without them, and the logits of the
// adapted graph to 1e-5 of their largest.
//
// resnet_train too (its BatchNorms rewritten to GroupNorms, written
// decomposed). The cnn fixture is also run with its adapted Gemm's alpha set to 0.5
// (the adapter's branch then scales by alpha too, and the merge divides
// it out), in the model prepared with and without the adapters.
func TestLoRAExportMerges(t *testing.T) {
	halfAlpha := func(g *graph.Graph) {
		for _, n := range g.Nodes {
			if n.OpType == "Gemm" && n.Input(1).Name == "classifier.1.weight" {
				var attrs []*onnxpb.AttributeProto
				for _, a := range n.Attrs {
					if a.GetName() != "alpha" {
						attrs = append(attrs, a)
					}
				}
				n.Attrs = append(attrs, &onnxpb.AttributeProto{Name: proto.String("alpha"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(0.5)})
				return
			}
		}
		panic("no classifier.1 Gemm")
	}
	// resnet_train's BatchNorms become GroupNorms, which the export
	// writes decomposed after the merge.
	for _, fx := range append(engineFixtures, "resnet_train", "cnn/alpha") {
		t.Run(fx, func(t *testing.T) {
			const n = 3
			name, edit := fx, func(*graph.Graph) {}
			if fx == "cnn/alpha" {
				name, edit = "cnn", halfAlpha
			}
			x, _, _, _ := engineBatch(t, name, n)
			g, rp := loraFixtureWith(t, name, n, edit, 2)
			plain, _ := loraFixtureWith(t, name, n, edit, 0)
			eg, err := rewrite.ExportGraph(g)
			if err != nil {
				t.Fatal(err)
			}
			pe, err := rewrite.ExportGraph(plain)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := opList(eg), opList(pe); got != want {
				t.Errorf("exported layers\n%s\nwant the fixture's\n%s", got, want)
			}
			if got, want := initNames(eg), initNames(pe); got != want {
				t.Errorf("exported initializers %s, want %s", got, want)
			}
			for _, ad := range rp.Adapters {
				if eg.Values[ad.Base].Const == g.Values[ad.Base].Const {
					t.Errorf("%s: the export shares the training graph's tensor (the merge would write into it)", ad.Base)
				}
			}
			logits := func(g *graph.Graph) []float32 {
				p, err := runtime.CompileForBatch(g, n, nil, &runtime.Options{ForwardOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.SetInput(0, x); err != nil {
					t.Fatal(err)
				}
				if err := p.Forward(); err != nil {
					t.Fatal(err)
				}
				out, _ := p.Output(0)
				return append([]float32(nil), out...)
			}
			want, got := logits(g), logits(eg)
			var top, diff float64
			for i := range want {
				top = max(top, math.Abs(float64(want[i])))
				diff = max(diff, math.Abs(float64(want[i]-got[i])))
			}
			if diff > 1e-5*top {
				t.Errorf("merged logits differ by %.3g (largest %.3g)", diff, top)
			}
			// Without the drawn B the adapters add nothing: the plain
			// fixture's logits.
			if diff := maxDiff(logits(plain), want); diff < 1e-3*top {
				t.Errorf("the drawn adapters change the logits by %.3g only: the test checks nothing", diff)
			}
		})
	}
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func opList(g *graph.Graph) string {
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	return strings.Join(ops, " ")
}

func initNames(g *graph.Graph) string {
	var names []string
	for _, v := range g.Initializers {
		names = append(names, v.Name)
	}
	return strings.Join(names, " ")
}
