package runtime

import "fmt"

// Operators beyond the fixtures: pointwise activations (LeakyRelu, Elu,
// HardSigmoid, HardSwish, Gelu, Softplus), Split, Tile, GlobalMaxPool.

func init() {
	opTable["LeakyRelu"] = buildActivation(UnaryLeakyRelu, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "alpha", 0.01)}
	})
	opTable["Elu"] = buildActivation(UnaryElu, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "alpha", 1)}
	})
	opTable["HardSigmoid"] = buildActivation(UnaryHardSigmoid, func(n *node) UnaryParams {
		return UnaryParams{Alpha: attrF(n, "alpha", 0.2), Beta: attrF(n, "beta", 0.5)}
	})
	opTable["HardSwish"] = buildActivation(UnaryHardSwish, nil)
	opTable["Softplus"] = buildActivation(UnarySoftplus, nil)
	opTable["Gelu"] = func(p *Plan, nd *node) error {
		op := UnaryGelu
		if approx, _ := nd.g.Str("approximate"); approx == "tanh" {
			op = UnaryGeluTanh
		}
		return buildActivation(op, nil)(p, nd)
	}
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

// buildActivation compiles y = op(x) with dx = dy·op'(x) for the
// activations that ElementwiseOps.Unary evaluates from the input (the
// backward reads x); par reads the operator's attributes (nil: none).
func buildActivation(op UnaryOp, par func(n *node) UnaryParams) builder {
	return func(p *Plan, nd *node) error {
		x, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		y := nd.out[0]
		var pr UnaryParams
		if par != nil {
			pr = par(nd)
		}
		nd.saveIn[0] = true
		nd.fwd = func() { p.ops.Unary(op, pr, x.data, y.data) }
		nd.bwd = func() { p.ops.UnaryBackward(op, pr, x.data, nil, y.grad, nd.dIn[0]) }
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
	tables := make([][]int32, len(y.shape))
	for k, n := range y.shape {
		tables[k] = make([]int32, n)
		for c := range tables[k] {
			tables[k][c] = int32((c % x.shape[k]) * st[k])
		}
	}
	buildMap(p, nd, x, newSeparableMap(y.shape, tables, x.n, 0))
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
	// The winners, written by the device's forward for its backward:
	// device memory.
	arg, err := AllocInt32(p.dev, planes)
	if err != nil {
		return fmt.Errorf("the winners of GlobalMaxPool: %w", err)
	}
	nd.fwd = func() { p.ops.GlobalMaxPool(planes, L, x.data, y.data, arg) }
	nd.bwd = func() { p.ops.GlobalMaxPoolBackward(planes, L, y.grad, arg, nd.dIn[0]) }
	return nil
}
