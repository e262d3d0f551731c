package runtime

import (
	"fmt"
	"math"
)

// Operators beyond the fixtures: pointwise activations (LeakyRelu, Elu,
// HardSigmoid, HardSwish, Gelu, Softplus), Split, Tile, GlobalMaxPool.

func init() {
	opTable["LeakyRelu"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		a := attrF(n, "alpha", 0.01)
		return func(x float32) float32 {
				if x < 0 {
					return a * x
				}
				return x
			}, func(x float32) float32 {
				if x < 0 {
					return a
				}
				return 1
			}
	})
	opTable["Elu"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		a := float64(attrF(n, "alpha", 1))
		return func(x float32) float32 {
				if x < 0 {
					return float32(a * math.Expm1(float64(x)))
				}
				return x
			}, func(x float32) float32 {
				if x < 0 {
					return float32(a * math.Exp(float64(x)))
				}
				return 1
			}
	})
	opTable["HardSigmoid"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		a, b := attrF(n, "alpha", 0.2), attrF(n, "beta", 0.5)
		return func(x float32) float32 { return min(max(a*x+b, 0), 1) },
			func(x float32) float32 {
				if v := a*x + b; v > 0 && v < 1 {
					return a
				}
				return 0
			}
	})
	opTable["HardSwish"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		return func(x float32) float32 { return x * min(max(x/6+0.5, 0), 1) },
			func(x float32) float32 {
				switch {
				case x <= -3:
					return 0
				case x >= 3:
					return 1
				}
				return x/3 + 0.5
			}
	})
	opTable["Softplus"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		return func(x float32) float32 {
				v := float64(x)
				if v > 20 {
					return x
				}
				return float32(math.Log1p(math.Exp(v)))
			}, func(x float32) float32 {
				return float32(1 / (1 + math.Exp(-float64(x))))
			}
	})
	opTable["Gelu"] = buildPointwise(func(n *node) (func(x float32) float32, func(x float32) float32) {
		approx, _ := n.g.Str("approximate")
		if approx == "tanh" {
			const c = 0.7978845608028654 // √(2/π)
			return func(x float32) float32 {
					v := float64(x)
					return float32(0.5 * v * (1 + math.Tanh(c*(v+0.044715*v*v*v))))
				}, func(x float32) float32 {
					v := float64(x)
					u := c * (v + 0.044715*v*v*v)
					th := math.Tanh(u)
					return float32(0.5*(1+th) + 0.5*v*(1-th*th)*c*(1+3*0.044715*v*v))
				}
		}
		return func(x float32) float32 {
				v := float64(x)
				return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
			}, func(x float32) float32 {
				v := float64(x)
				return float32(0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-0.5*v*v)/math.Sqrt(2*math.Pi))
			}
	})
	opTable["Split"] = buildSplit
	opTable["Tile"] = buildTile
	opTable["GlobalMaxPool"] = buildGlobalMaxPool
}

// attrF reads a float attribute with a default.
func attrF(n *node, name string, def float32) float32 {
	if a := n.g.Attr(name); a != nil {
		return a.GetF()
	}
	return def
}

// buildPointwise compiles y = f(x) with dx = dy·f'(x); mk builds f and f'
// from the node's attributes.
func buildPointwise(mk func(n *node) (f, df func(float32) float32)) builder {
	return func(p *Plan, nd *node) error {
		x, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		y := nd.out[0]
		f, df := mk(nd)
		fwd := func(lo, hi int) {
			for i, v := range x.data[lo:hi] {
				y.data[lo+i] = f(v)
			}
		}
		bwd := func(lo, hi int) {
			dx := nd.dIn[0]
			for i, v := range x.data[lo:hi] {
				dx[lo+i] = y.grad[lo+i] * df(v)
			}
		}
		nd.saveIn[0] = true
		nd.fwd = func() { parFor(x.n, 1<<14, fwd) }
		nd.bwd = func() { parFor(x.n, 1<<14, bwd) }
		return nil
	}
}

func buildSplit(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	a := nd.g.IntOr("axis", 0)
	r := len(x.shape)
	if a < 0 {
		a += int64(r)
	}
	if a < 0 || int(a) >= r {
		return fmt.Errorf("axis %d out of range for rank %d", a, r)
	}
	ax := int(a)
	outer, inner := numel(x.shape[:ax]), numel(x.shape[ax+1:])
	rows := make([]int, len(nd.out))
	total := 0
	for i, t := range nd.out {
		if t == nil {
			return fmt.Errorf("output %d is empty", i)
		}
		rows[i] = t.shape[ax] * inner
		total += t.shape[ax]
	}
	if total != x.shape[ax] {
		return fmt.Errorf("outputs take %d of %d along axis %d", total, x.shape[ax], ax)
	}
	off, size := make([]int, len(nd.out)), make([]int, len(nd.out))
	at := 0
	for i := range nd.out {
		off[i] = at
		size[i] = rows[i]
		at += rows[i]
	}
	b := NewRowBlocks(outer, x.shape[ax]*inner, off, size)
	ys, dys := make([][]float32, len(nd.out)), make([][]float32, len(nd.out))
	nd.fwd = func() {
		for i, t := range nd.out {
			ys[i] = t.data
		}
		p.ops.Split(x.data, b, ys)
	}
	nd.bwd = func() {
		// An output that does not reach the loss has no gradient: its
		// part of dx is zero.
		for i, t := range nd.out {
			dys[i] = t.grad
		}
		p.ops.Concat(dys, b, nd.dIn[0])
	}
	return nil
}

func buildTile(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	y := nd.out[0]
	if len(y.shape) != len(x.shape) {
		return fmt.Errorf("output rank %d differs from input rank %d", len(y.shape), len(x.shape))
	}
	st := strides(x.shape)
	idx := make([]int32, y.n)
	forCoords(y.shape, func(i int, c []int) {
		j := 0
		for k, ck := range c {
			j += (ck % x.shape[k]) * st[k]
		}
		idx[i] = int32(j)
	})
	buildIndexMap(p, nd, x, idx, 0)
	return nil
}

func buildGlobalMaxPool(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	y := nd.out[0]
	if len(x.shape) < 3 {
		return fmt.Errorf("input %v has no spatial axes", x.shape)
	}
	planes, L := x.shape[0]*x.shape[1], numel(x.shape[2:])
	arg := make([]int32, planes)
	fwd := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := x.data[i*L : (i+1)*L]
			bi := 0
			for j, v := range row {
				if v > row[bi] || v != v {
					bi = j
				}
			}
			y.data[i], arg[i] = row[bi], int32(bi)
		}
	}
	bwd := func(lo, hi int) {
		dx := nd.dIn[0]
		for i := lo; i < hi; i++ {
			row := dx[i*L : (i+1)*L]
			clear(row)
			row[arg[i]] = y.grad[i]
		}
	}
	grain := grainFor(L)
	nd.fwd = func() { parFor(planes, grain, fwd) }
	nd.bwd = func() { parFor(planes, grain, bwd) }
	return nil
}
