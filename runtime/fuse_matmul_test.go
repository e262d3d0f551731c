package runtime

import (
	"fmt"
	"testing"
)

// TestFusedMatMul: on the torchvision ViT fixtures (sequence-first
// nn.MultiheadAttention exports) the attention products fold their
// Transposes and the query's scaling (FusedMatMul: four of each layer's
// six Transposes gone), and the plan computes what the unfolded one does:
// the same losses, parameter gradients, and every hook's data with the
// same batch axes and strides, bit for bit (the scaling is by ¼, a power
// of two, so α rounds as the division did), with the probabilities kept
// and recomputed. The timm-style fixtures (four-axis attention) fold
// nothing.
func TestFusedMatMul(t *testing.T) {
	defer func() { fuseMatMulsOff = false }()
	for _, c := range []struct {
		name  string
		folds int
	}{{"vit", 4}, {"vit17", 4}, {"vit_nofold", 4}, {"crossvit", 0}, {"beit", 0}, {"packedqkv", 0}} {
		for _, how := range []Probabilities{ProbabilitiesKeep, ProbabilitiesRecompute} {
			t.Run(fmt.Sprintf("%s/%d", c.name, how), func(t *testing.T) {
				type run struct {
					losses []float32
					grads  map[string][]float32
					hooks  []float32
					axes   []string
					folds  int
					trans  int
				}
				var runs [2]run
				for i, off := range []bool{true, false} {
					fuseMatMulsOff = off
					p, _, labels := compileFixture(t, c.name, &Options{Probabilities: how})
					r := &runs[i]
					for _, nd := range p.nodes {
						switch nd.g.OpType {
						case fusedMatMul:
							r.folds++
						case "Transpose":
							r.trans++
						}
					}
					bo := &BackwardOptions{Hook: func(ev *HookEvent) {
						r.hooks = append(r.hooks, ev.DOut.Data...)
						r.axes = append(r.axes, fmt.Sprintf("%s dout %d/%d", ev.Node.Name, ev.DOut.BatchAxis, ev.DOut.BatchStride))
						for j, in := range ev.Inputs {
							r.axes = append(r.axes, fmt.Sprintf("%s in%d %d/%d", ev.Node.Name, j, in.BatchAxis, in.BatchStride))
							switch ev.Node.OpType {
							case "Add", "Sub": // a batched operand's buffer may be another's
								if !ev.Params[j] && !ev.Derived[j] {
									continue
								}
							}
							r.hooks = append(r.hooks, in.Data...)
						}
					}}
					step(t, p, labels, nil, nil)
					r.hooks, r.axes = nil, nil
					r.losses = step(t, p, labels, nil, bo)
					r.grads = map[string][]float32{}
					for _, pn := range p.Params() {
						r.grads[pn] = append([]float32(nil), p.Grad(pn)...)
					}
				}
				off, on := runs[0], runs[1]
				if off.folds != 0 || on.folds != c.folds {
					t.Fatalf("%d FusedMatMuls (%d with the fold off), want %d", on.folds, off.folds, c.folds)
				}
				if want := off.trans - 2*c.folds; on.trans != want {
					t.Errorf("%d Transposes left of %d, want %d", on.trans, off.trans, want)
				}
				if !sameBits(on.losses, off.losses) {
					t.Errorf("losses %v, unfolded %v", on.losses, off.losses)
				}
				for pn, want := range off.grads {
					if !sameBits(on.grads[pn], want) {
						t.Errorf("gradient of %s differs from the unfolded plan's", pn)
					}
				}
				if len(off.hooks) == 0 || !sameBits(on.hooks, off.hooks) {
					t.Errorf("hook data: %d and %d values, or not the same bits", len(off.hooks), len(on.hooks))
				}
				if fmt.Sprint(on.axes) != fmt.Sprint(off.axes) {
					t.Errorf("hook views' batch axes and strides differ:\n%v\nunfolded:\n%v", on.axes, off.axes)
				}
			})
		}
	}
}
