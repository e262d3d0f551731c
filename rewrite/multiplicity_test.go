package rewrite

import (
	"slices"
	"testing"
)

// TestMultiplicity: planned for k views a sample, every fixture's layers
// see k times a view's positions (T; a Gemm over a sample's k rows), the
// output's k rows a sample are accepted as the loss's, Compile's graph
// takes (B, k, sample…) and puts out B·k rows, the graph itself (what is
// exported) keeps its input, and a multiplicity outside [0,
// MaxMultiplicity] is refused.
func TestMultiplicity(t *testing.T) {
	for _, name := range []string{"cnn", "resnet_train", "vit", "crossvit"} {
		t.Run(name, func(t *testing.T) {
			sample := []int64{3, 32, 32}
			if name == "cnn" {
				sample = []int64{1, 28, 28}
			}
			plans := map[int64]*Plan{}
			for _, k := range []int64{1, 3} {
				g := loadFixture(t, name)
				p, err := Prepare(g, Options{PlanOptions: PlanOptions{InputShape: sample, Batch: 4, Multiplicity: k}})
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Problems) > 0 {
					t.Fatalf("%d views: problems %v", k, p.Problems)
				}
				plans[k] = p
				if want := map[int64]int64{1: 0, 3: 3}[k]; p.Multiplicity != want {
					t.Errorf("%d views: plan multiplicity %d, want %d", k, p.Multiplicity, want)
				}
				if g.Inputs[0].Name != p.Input || len(g.Inputs[0].Shape) != len(sample)+1 {
					t.Errorf("%d views: the graph's input became %s %v", k, g.Inputs[0].Name, g.Inputs[0].Shape)
				}
				c, err := p.Compile(g, 5)
				if err != nil {
					t.Fatal(err)
				}
				in := c.Inputs[0].Shape
				wantIn := append([]int64{5}, sample...)
				if k > 1 {
					wantIn = append([]int64{5, k}, sample...)
				}
				var got []int64
				for _, d := range in {
					got = append(got, d.Size)
				}
				if !slices.Equal(got, wantIn) {
					t.Errorf("%d views: compiled input %v, want %v", k, got, wantIn)
				}
				if rows := c.Outputs[0].Shape[0].Size; rows != 5*k {
					t.Errorf("%d views: compiled output has %d rows, want %d", k, rows, 5*k)
				}
			}
			one, three := plans[1], plans[3]
			if len(one.Layers) != len(three.Layers) {
				t.Fatalf("%d layers for one view, %d for three", len(one.Layers), len(three.Layers))
			}
			for i, l := range three.Layers {
				if l.T != 3*one.Layers[i].T || l.D != one.Layers[i].D || l.P != one.Layers[i].P {
					t.Errorf("layer %s: T, D, p = %d, %d, %d for three views; %d, %d, %d for one", l.Node, l.T, l.D, l.P, one.Layers[i].T, one.Layers[i].D, one.Layers[i].P)
				}
			}
			if three.Trainable != one.Trainable {
				t.Errorf("trainable %+v for three views, %+v for one", three.Trainable, one.Trainable)
			}
		})
	}
	for _, k := range []int64{-1, MaxMultiplicity + 1} {
		if _, err := Analyze(loadFixture(t, "cnn"), PlanOptions{InputShape: []int64{1, 28, 28}, Batch: 2, Multiplicity: k}); err == nil {
			t.Errorf("multiplicity %d accepted", k)
		}
	}
}
