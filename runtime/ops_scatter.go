package runtime

import (
	"fmt"

	"github.com/dpfinetune/dpfinetune/graph"
)

func init() {
	opTable["ScatterND"] = buildScatterND
}

// buildScatterND compiles y = data with the slices named by constant
// indices replaced by (or reduced with) updates: a Copy and a
// ScatterReduce. Backward, for replacement: dData is dy with the
// overwritten elements zeroed, dUpdates gathers dy (both IndexGather); for
// "add" dData is dy. The other reductions have no backward.
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
	name, err := nd.g.ScatterReduction()
	if err != nil {
		return err
	}
	red, err := ScatterReductionNamed(name)
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
	if red == ScatterReduceNone {
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
		p.ops.Copy(x.data, y.data)
		p.ops.ScatterReduce(red, u.data, idx, y.data)
	}
	switch red {
	case ScatterReduceNone, ScatterReduceAdd:
	default:
		return nil
	}
	// dUpdates gathers dy; dData is dy (a copy for "add"; for
	// replacement, a gather with the overwritten elements reading 0).
	dUpd := NewIndexMap(idx, y.n, 0)
	var dData *IndexMap
	if red == ScatterReduceNone {
		keep := make([]int32, x.n)
		for j := range keep {
			keep[j] = int32(j)
		}
		for _, j := range idx {
			keep[j] = -1
		}
		dData = NewIndexMap(keep, y.n, 0)
	}
	nd.bwd = func() {
		dy := y.grad
		if dx := nd.dIn[0]; dx != nil {
			if dData == nil {
				p.ops.Copy(dy, dx)
			} else {
				p.ops.IndexGather(dy, dData, dx)
			}
		}
		if du := nd.dIn[2]; du != nil {
			p.ops.IndexGather(dy, dUpd, du)
		}
	}
	return nil
}
