package runtime

import "fmt"

// Reductions beyond ReduceMean and ReduceSum: the extremes (the expanded
// Softmax and LogSoftmax of ONNX's backend tests subtract the row maximum
// with ReduceMax), the norms and the log-sums.

func init() {
	for _, op := range []string{"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
		"ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"} {
		opTable[op] = buildReduceOther(op)
	}
}

// buildReduceOther compiles ReduceMax, ReduceMin, ReduceProd, ReduceL1,
// ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp
// (ReduceOps.ReduceAxes with the group map and the state it keeps for the
// backward).
func buildReduceOther(name string) builder {
	op, ok := ReduceOpNamed(name)
	if !ok {
		panic("runtime: unknown reduction " + name)
	}
	return func(p *Plan, nd *node) error {
		x, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		y := nd.out[0]
		axes, noop, err := nd.g.ReduceAxes(len(x.shape))
		if err != nil {
			return err
		}
		if noop {
			if op == ReduceMax || op == ReduceMin || op == ReduceProd {
				return buildCopy(p, nd)
			}
			return fmt.Errorf("%s with noop_with_empty_axes and no axes is not supported", op)
		}
		kept := append([]int(nil), x.shape...)
		for _, a := range axes {
			kept[a] = 1
		}
		if outN := numel(kept); outN != y.n {
			return fmt.Errorf("reduced size %d does not match output %v", outN, y.shape)
		}
		grp := ReduceGroups(x.shape, kept)
		// The reduction's run-time state (what the backward reads) is
		// written by the device: device memory.
		state, err := AllocFloat64(p.dev, ReduceStateLen(op, y.n))
		if err != nil {
			return err
		}
		nd.auxBytes = int64(8 * len(state))
		nd.saveIn[0] = true
		nd.saveOut = true
		nd.fwd = func() { p.ops.ReduceAxes(op, x.data, x.shape, y.data, kept, grp, state) }
		nd.bwd = func() { p.ops.ReduceAxesBackward(op, x.data, x.shape, y.data, y.grad, kept, grp, state, nd.dIn[0]) }
		return nil
	}
}
