package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

func init() {
	opTable["ScatterND"] = buildScatterND
}

// buildScatterND compiles y = data with the slices named by constant
// indices replaced by (or reduced with) updates. Backward, for
// replacement: dData is dy with the overwritten elements zeroed, dUpdates
// gathers dy; for "add" dData is dy. The other reductions have no backward.
func buildScatterND(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	u, err := floatIn(nd, 2)
	if err != nil {
		return err
	}
	it := nd.in[1]
	if it == nil || !it.isConst || it.i64 == nil {
		return fmt.Errorf("ScatterND needs constant integer indices")
	}
	red, err := nd.g.ScatterReduction()
	if err != nil {
		return err
	}
	tgt, err := graph.ScatterNDTargets(to64(x.shape), to64(it.shape), it.i64)
	if err != nil {
		return err
	}
	if len(tgt) != u.n {
		return fmt.Errorf("updates %v hold %d elements, the indices address %d", u.shape, u.n, len(tgt))
	}
	if red == "none" {
		// ONNX leaves duplicate indices undefined for replacement; refuse
		// them rather than pick one writer silently.
		seen := make([]bool, x.n)
		for _, j := range tgt {
			if seen[j] {
				return fmt.Errorf("indices name element %d twice (undefined for reduction \"none\")", j)
			}
			seen[j] = true
		}
	}
	idx := make([]int32, len(tgt))
	for i, j := range tgt {
		idx[i] = int32(j)
	}
	y := nd.out[0]
	nd.fwd = func() {
		copy(y.data, x.data)
		yd, ud := y.data, u.data
		switch red {
		case "none":
			for i, j := range idx {
				yd[j] = ud[i]
			}
		case "add":
			for i, j := range idx {
				yd[j] += ud[i]
			}
		case "mul":
			for i, j := range idx {
				yd[j] *= ud[i]
			}
		case "max":
			for i, j := range idx {
				yd[j] = max(yd[j], ud[i])
			}
		case "min":
			for i, j := range idx {
				yd[j] = min(yd[j], ud[i])
			}
		}
	}
	if red != "none" && red != "add" {
		return nil
	}
	nd.bwd = func() {
		dy := y.grad
		if dx := nd.dIn[0]; dx != nil {
			copy(dx, dy)
			if red == "none" {
				for _, j := range idx {
					dx[j] = 0
				}
			}
		}
		if du := nd.dIn[2]; du != nil {
			for i, j := range idx {
				du[i] = dy[j]
			}
		}
	}
	return nil
}
