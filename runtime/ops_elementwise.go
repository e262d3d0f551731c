package runtime

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/runtime/kernels"
)

// Elementwise operators of older and Caffe2-era exports and of the ONNX
// backend tests: PRelu (with a trainable slope), Selu, Celu, Sign, Shrink,
// Softsign, ThresholdedRelu, Mish, Floor, Ceil, Round, Sin, Cos, and the
// variadic Sum, Mean, Max, Min.

func init() {
	opTable["PRelu"] = buildPRelu
	opTable["Selu"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		a := float64(attrF(n, "alpha", 1.67326319217681884765625))
		g := float64(attrF(n, "gamma", 1.05070102214813232421875))
		return func(x float32) float32 {
				if x > 0 {
					return float32(g * float64(x))
				}
				return float32(g * a * math.Expm1(float64(x)))
			}, func(x float32) float32 {
				if x > 0 {
					return float32(g)
				}
				return float32(g * a * math.Exp(float64(x)))
			}
	})
	opTable["Celu"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		a := float64(attrF(n, "alpha", 1))
		return func(x float32) float32 {
				if x > 0 {
					return x
				}
				return float32(a * math.Expm1(float64(x)/a))
			}, func(x float32) float32 {
				if x > 0 {
					return 1
				}
				return float32(math.Exp(float64(x) / a))
			}
	})
	opTable["Sign"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		return func(x float32) float32 {
			switch {
			case x > 0:
				return 1
			case x < 0:
				return -1
			}
			return x // 0, −0 and NaN map to themselves
		}, func(x float32) float32 { return 0 }
	})
	opTable["Shrink"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		l, b := attrF(n, "lambd", 0.5), attrF(n, "bias", 0)
		return func(x float32) float32 {
				switch {
				case x < -l:
					return x + b
				case x > l:
					return x - b
				}
				return 0
			}, func(x float32) float32 {
				if x < -l || x > l {
					return 1
				}
				return 0
			}
	})
	opTable["Softsign"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		return func(x float32) float32 { return x / (1 + float32(math.Abs(float64(x)))) },
			func(x float32) float32 {
				d := 1 + float32(math.Abs(float64(x)))
				return 1 / (d * d)
			}
	})
	opTable["ThresholdedRelu"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		a := attrF(n, "alpha", 1)
		return func(x float32) float32 {
				if x > a {
					return x
				}
				return 0
			}, func(x float32) float32 {
				if x > a {
					return 1
				}
				return 0
			}
	})
	opTable["Mish"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		sp := func(v float64) float64 {
			if v > 20 {
				return v
			}
			return math.Log1p(math.Exp(v))
		}
		return func(x float32) float32 {
				v := float64(x)
				return float32(v * math.Tanh(sp(v)))
			}, func(x float32) float32 {
				v := float64(x)
				t := math.Tanh(sp(v))
				return float32(t + v*(1-t*t)/(1+math.Exp(-v)))
			}
	})
	// Piecewise-constant maps: gradient zero almost everywhere.
	for op, f := range map[string]func(float64) float64{"Floor": math.Floor, "Ceil": math.Ceil, "Round": math.RoundToEven} {
		opTable[op] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
			return func(x float32) float32 { return float32(f(float64(x))) }, func(x float32) float32 { return 0 }
		})
	}
	opTable["Sin"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		return func(x float32) float32 { return float32(math.Sin(float64(x))) },
			func(x float32) float32 { return float32(math.Cos(float64(x))) }
	})
	opTable["Cos"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		return func(x float32) float32 { return float32(math.Cos(float64(x))) },
			func(x float32) float32 { return float32(-math.Sin(float64(x))) }
	})
	opTable["Sum"] = buildVariadic("Sum")
	opTable["Mean"] = buildVariadic("Mean")
	opTable["Max"] = buildVariadic("Max")
	opTable["Min"] = buildVariadic("Min")
}

// broadcastMap returns, for every element of a tensor of shape out, the
// element of a tensor of shape in (numpy-broadcast onto out) it reads; nil
// when the shapes are equal.
func broadcastMap(in, out []int) []int32 {
	if sameInts(in, out) {
		return nil
	}
	st := strides(in)
	off := len(out) - len(in)
	idx := make([]int32, numel(out))
	forCoords(out, func(i int, c []int) {
		j := 0
		for k := off; k < len(out); k++ {
			if in[k-off] != 1 {
				j += c[k] * st[k-off]
			}
		}
		idx[i] = int32(j)
	})
	return idx
}

// buildVariadic compiles Sum, Mean, Max and Min of one or more inputs with
// numpy broadcasting. Max and Min send the gradient of each element to the
// first input that attains it (PyTorch splits ties; ties have measure zero
// on real data).
func buildVariadic(op string) builder {
	return func(p *Plan, nd *node) error {
		if len(nd.in) == 0 {
			return fmt.Errorf("%s needs at least one input", op)
		}
		y := nd.out[0]
		xs := make([]*tensor, len(nd.in))
		maps := make([][]int32, len(nd.in))
		for i := range nd.in {
			x, err := floatIn(nd, i)
			if err != nil {
				return err
			}
			xs[i] = x
			if len(x.shape) > len(y.shape) {
				return fmt.Errorf("input %d %v has a higher rank than the output %v", i, x.shape, y.shape)
			}
			maps[i] = broadcastMap(x.shape, y.shape)
		}
		at := func(i, j int) float32 {
			if m := maps[i]; m != nil {
				return xs[i].data[m[j]]
			}
			return xs[i].data[j]
		}
		scale := float32(1)
		if op == "Mean" {
			scale = 1 / float32(len(xs))
		}
		// winner returns the input whose value is y[j] (Max, Min).
		winner := func(j int) int {
			w, v := 0, at(0, j)
			for i := 1; i < len(xs); i++ {
				u := at(i, j)
				if op == "Max" && u > v || op == "Min" && u < v || u != u && v == v {
					w, v = i, u
				}
			}
			return w
		}
		if op == "Sum" || op == "Mean" {
			// The vectorized broadcasting kernels: x₀ + x₁, then + xᵢ in
			// place (each output element reads only its own position).
			nd.fwd = func() {
				if len(xs) == 1 {
					kernels.Expand(xs[0].data, xs[0].shape, y.data, y.shape)
				} else {
					kernels.Binary(kernels.Add, xs[0].data, xs[0].shape, xs[1].data, xs[1].shape, y.data, y.shape)
				}
				for _, x := range xs[min(2, len(xs)):] {
					kernels.Binary(kernels.Add, y.data, y.shape, x.data, x.shape, y.data, y.shape)
				}
				if scale != 1 {
					for j := range y.data {
						y.data[j] *= scale
					}
				}
			}
		} else {
			nd.fwd = func() {
				for j := range y.data {
					v := at(0, j)
					for i := 1; i < len(xs); i++ {
						u := at(i, j)
						switch op {
						case "Max":
							if u > v || u != u {
								v = u
							}
						case "Min":
							if u < v || u != u {
								v = u
							}
						}
					}
					y.data[j] = v
				}
			}
		}
		switch op {
		case "Sum", "Mean":
			nd.bwd = func() {
				for i, x := range xs {
					dx := nd.dIn[i]
					if dx == nil {
						continue
					}
					if maps[i] == nil {
						copy(dx, y.grad)
					} else {
						kernels.ReduceToShape(y.grad, y.shape, dx, x.shape)
					}
					if scale != 1 {
						for k := range dx {
							dx[k] *= scale
						}
					}
				}
			}
		default:
			for i := range nd.saveIn {
				nd.saveIn[i] = true
			}
			nd.bwd = func() {
				for i := range xs {
					clear(nd.dIn[i])
				}
				for j, g := range y.grad {
					w := winner(j)
					dx := nd.dIn[w]
					if dx == nil {
						continue
					}
					if m := maps[w]; m != nil {
						dx[m[j]] += g
					} else {
						dx[j] += g
					}
				}
			}
		}
		return nil
	}
}

// buildPRelu compiles y = x for x > 0 and slope·x otherwise, the slope
// broadcast onto x (numpy rules from opset 7; opset 6 and earlier also
// take a per-channel slope of shape (C) against (N, C, …)). The slope is
// usually a trainable parameter: its gradient is Σ dy·x over x ≤ 0,
// reduced onto its shape.
func buildPRelu(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	s, err := floatIn(nd, 1)
	if err != nil {
		return err
	}
	sShape, err := preluSlopeShape(nd, x.shape, s.shape)
	if err != nil {
		return err
	}
	y := nd.out[0]
	sm := broadcastMap(sShape, x.shape)
	slope := func(j int) float32 {
		if sm != nil {
			return s.data[sm[j]]
		}
		return s.data[j]
	}
	nd.saveIn[0], nd.saveIn[1] = true, true
	p.needWS(x.n)
	nd.fwd = func() {
		for j, v := range x.data {
			if v > 0 {
				y.data[j] = v
			} else {
				y.data[j] = slope(j) * v
			}
		}
	}
	nd.bwd = func() {
		dy := y.grad
		if dx := nd.dIn[0]; dx != nil {
			for j, v := range x.data {
				if v > 0 {
					dx[j] = dy[j]
				} else {
					dx[j] = dy[j] * slope(j)
				}
			}
		}
		if ds := nd.dIn[1]; ds != nil {
			t := p.ws[:x.n]
			for j, v := range x.data {
				if v > 0 {
					t[j] = 0
				} else {
					t[j] = dy[j] * v
				}
			}
			if sm == nil {
				copy(ds, t)
			} else {
				kernels.ReduceToShape(t, x.shape, ds, sShape)
			}
		}
	}
	return nil
}

// preluSlopeShape is graph.PReluSlopeShape on the runtime's shapes.
func preluSlopeShape(nd *node, xs, ss []int) ([]int, error) {
	sh, err := graph.PReluSlopeShape(nd.g.Opset, to64(xs), to64(ss))
	if err != nil {
		return nil, err
	}
	return toInt(sh), nil
}
