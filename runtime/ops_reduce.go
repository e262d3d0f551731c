package runtime

import (
	"fmt"
	"math"
)

// Reductions beyond ReduceMean and ReduceSum: the extremes (the expanded
// Softmax and LogSoftmax of ONNX's backend tests subtract the row maximum
// with ReduceMax), the norms and the log-sums.

func init() {
	for _, op := range []string{"ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
		"ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"} {
		opTable[op] = buildReduceOther(op)
	}
}

// reduceGroups returns, for every element of x, the element of the
// reduced output (keepdims layout) it belongs to, or ok false when the
// node reduces nothing (noop_with_empty_axes).
func reduceGroups(nd *node, x *tensor) (grp []int32, outN int, noop bool, err error) {
	axes, noop, err := nd.g.ReduceAxes(len(x.shape))
	if err != nil || noop {
		return nil, 0, noop, err
	}
	kept := append([]int(nil), x.shape...)
	for _, a := range axes {
		kept[a] = 1
	}
	st := strides(kept)
	grp = make([]int32, x.n)
	forCoords(x.shape, func(i int, c []int) {
		j := 0
		for k, ck := range c {
			if kept[k] != 1 {
				j += ck * st[k]
			}
		}
		grp[i] = int32(j)
	})
	return grp, numel(kept), false, nil
}

// buildReduceOther compiles ReduceMax, ReduceMin, ReduceProd, ReduceL1,
// ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp. Sums
// accumulate in float64. Backward: the extremes send each output's
// gradient to the first element that attains it; the others use their
// derivative (sign(x), x/y, 2x, e^(x−y), 1/Σx, and for the product the
// product of the other elements, exact with zeros).
func buildReduceOther(op string) builder {
	return func(p *Plan, nd *node) error {
		x, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		y := nd.out[0]
		grp, outN, noop, err := reduceGroups(nd, x)
		if err != nil {
			return err
		}
		if noop {
			if op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" {
				return buildCopy(p, nd)
			}
			return fmt.Errorf("%s with noop_with_empty_axes and no axes is not supported", op)
		}
		if outN != y.n {
			return fmt.Errorf("reduced size %d does not match output %v", outN, y.shape)
		}
		acc := make([]float64, outN)
		var arg []int32   // extremes: the winning element of each output
		var nz []float64  // product: the product of the nonzero elements
		var zeros []int32 // product: the number of zero elements
		nd.auxBytes = int64(8 * outN)
		switch op {
		case "ReduceMax", "ReduceMin":
			arg = make([]int32, outN)
			nd.auxBytes += int64(4 * outN)
		case "ReduceProd":
			nz, zeros = make([]float64, outN), make([]int32, outN)
			nd.auxBytes += int64(12 * outN)
		}
		nd.saveIn[0] = true
		nd.saveOut = true
		nd.fwd = func() {
			switch op {
			case "ReduceMax", "ReduceMin":
				for g := range arg {
					arg[g] = -1
				}
				for i, v := range x.data {
					g := grp[i]
					a := arg[g]
					switch {
					case a < 0, v != v && x.data[a] == x.data[a],
						op == "ReduceMax" && v > x.data[a], op == "ReduceMin" && v < x.data[a]:
						arg[g] = int32(i)
					}
				}
				for g, a := range arg {
					y.data[g] = x.data[a]
				}
				return
			case "ReduceProd":
				for g := range nz {
					nz[g], zeros[g] = 1, 0
				}
				for i, v := range x.data {
					if v == 0 {
						zeros[grp[i]]++
					} else {
						nz[grp[i]] *= float64(v)
					}
				}
				for g := range nz {
					if zeros[g] > 0 {
						y.data[g] = 0
					} else {
						y.data[g] = float32(nz[g])
					}
				}
				return
			case "ReduceLogSumExp":
				// Shifted by each group's maximum, so that large inputs
				// do not overflow.
				for g := range acc {
					acc[g] = math.Inf(-1)
				}
				for i, v := range x.data {
					acc[grp[i]] = math.Max(acc[grp[i]], float64(v))
				}
				for g := range acc {
					y.data[g] = float32(acc[g]) // the maximum, for now
					acc[g] = 0
				}
				for i, v := range x.data {
					acc[grp[i]] += math.Exp(float64(v - y.data[grp[i]]))
				}
				for g := range acc {
					y.data[g] += float32(math.Log(acc[g]))
				}
				return
			}
			clear(acc)
			for i, v := range x.data {
				f := float64(v)
				switch op {
				case "ReduceL1":
					acc[grp[i]] += math.Abs(f)
				case "ReduceL2", "ReduceSumSquare":
					acc[grp[i]] += f * f
				case "ReduceLogSum":
					acc[grp[i]] += f
				}
			}
			for g, a := range acc {
				switch op {
				case "ReduceL2":
					a = math.Sqrt(a)
				case "ReduceLogSum":
					a = math.Log(a)
				}
				y.data[g] = float32(a)
			}
		}
		nd.bwd = func() {
			dx, dy := nd.dIn[0], y.grad
			if arg != nil {
				clear(dx)
				for g, a := range arg {
					dx[a] += dy[g]
				}
				return
			}
			for i, v := range x.data {
				g := grp[i]
				yg, d := y.data[g], dy[g]
				switch op {
				case "ReduceProd":
					switch {
					case zeros[g] == 0:
						dx[i] = d * float32(nz[g]/float64(v))
					case zeros[g] == 1 && v == 0:
						dx[i] = d * float32(nz[g])
					default:
						dx[i] = 0
					}
				case "ReduceL1":
					switch {
					case v > 0:
						dx[i] = d
					case v < 0:
						dx[i] = -d
					default:
						dx[i] = 0
					}
				case "ReduceL2":
					if yg == 0 {
						dx[i] = 0
					} else {
						dx[i] = d * v / yg
					}
				case "ReduceSumSquare":
					dx[i] = 2 * d * v
				case "ReduceLogSum":
					dx[i] = d * float32(math.Exp(-float64(yg)))
				case "ReduceLogSumExp":
					dx[i] = d * float32(math.Exp(float64(v-yg)))
				}
			}
		}
		return nil
	}
}
