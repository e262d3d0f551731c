package runtime

import (
	"fmt"
	"math"

	"github.com/dpfinetune/dpfinetune/graph"
)

// builder compiles one node: it sets nd.fwd, nd.bwd (when a backward is
// possible), nd.saveIn / nd.saveOut (what the backward reads), and
// registers workspace needs with p.needWS.
type builder func(p *Plan, nd *node) error

var opTable map[string]builder

func init() {
	opTable = map[string]builder{
		"Add": buildBinary(BinaryAdd), "Sub": buildBinary(BinarySub), "Mul": buildBinary(BinaryMul),
		"Div": buildBinary(BinaryDiv), "Pow": buildBinary(BinaryPow),
		"Relu": buildUnary(UnaryRelu), "Sigmoid": buildUnary(UnarySigmoid), "Tanh": buildUnary(UnaryTanh),
		"Erf": buildUnary(UnaryErf), "Exp": buildUnary(UnaryExp), "Log": buildUnary(UnaryLog),
		"Sqrt": buildUnary(UnarySqrt), "Neg": buildUnary(UnaryNeg), "Abs": buildUnary(UnaryAbs),
		"Reciprocal": buildUnary(UnaryReciprocal),
		"Clip":       buildClip,
		"Identity":   buildCopy, "Reshape": buildCopy, "Flatten": buildCopy, "Squeeze": buildCopy,
		"Unsqueeze": buildCopy, "Dropout": buildDropout, "Cast": buildCast,
		"Transpose": buildTranspose, "Concat": buildConcat, "Slice": buildSlice, "Gather": buildGather,
		"Pad": buildPad, "Expand": buildExpand, "Where": buildWhere,
		"ReduceMean": buildReduce(true), "ReduceSum": buildReduce(false),
		"Softmax": buildSoftmax(false), "LogSoftmax": buildSoftmax(true),
		"Conv": buildConv, "Gemm": buildGemm, "MatMul": buildMatMul,
		"MaxPool": buildMaxPool, "AveragePool": buildAvgPool, "GlobalAveragePool": buildGlobalAvgPool,
		"BatchNormalization": buildBatchNorm, "LayerNormalization": buildLayerNorm,
		"InstanceNormalization": buildInstanceNorm, "GroupNormalization": buildGroupNorm,
		"Resize": buildResize, "Upsample": buildResize,
	}
}

// SupportedOps returns the operators the runtime compiles.
func SupportedOps() []string {
	out := make([]string, 0, len(opTable))
	for k := range opTable {
		out = append(out, k)
	}
	return sortStrings(out)
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// floatIn returns input i, which must be a float tensor.
func floatIn(nd *node, i int) (*tensor, error) {
	if i >= len(nd.in) || nd.in[i] == nil {
		return nil, fmt.Errorf("input %d is missing", i)
	}
	t := nd.in[i]
	if t.i64 != nil || t.b != nil {
		return nil, fmt.Errorf("input %d (%q) is %v; this kernel needs float32", i, t.v.Name, t.v.DType)
	}
	return t, nil
}

// floatIn3 returns the two float inputs and the optional third of a
// Conv, ConvTranspose or Gemm (X, W, B) or a normalization (X, scale, bias);
// c is nil when the third input is absent.
func floatIn3(nd *node) (a, b, c *tensor, err error) {
	if a, err = floatIn(nd, 0); err != nil {
		return nil, nil, nil, err
	}
	if b, err = floatIn(nd, 1); err != nil {
		return nil, nil, nil, err
	}
	if len(nd.in) > 2 && nd.in[2] != nil {
		if c, err = floatIn(nd, 2); err != nil {
			return nil, nil, nil, err
		}
	}
	return a, b, c, nil
}

// onlyOutput checks that outputs beyond the first are absent or unused.
func onlyOutput(p *Plan, nd *node) error {
	for k, t := range nd.out[1:] {
		if t == nil {
			continue
		}
		used := len(t.cons) > 0
		for _, o := range p.outputs {
			if o == t {
				used = true
			}
		}
		if used {
			return fmt.Errorf("output %d (%q) is used; only the first output is supported", k+1, t.v.Name)
		}
	}
	return nil
}

// constFloat reads a scalar float constant input (def if absent).
func constFloat(nd *node, i int, def float32) (float32, error) {
	if i >= len(nd.in) || nd.in[i] == nil {
		return def, nil
	}
	t := nd.in[i]
	if !t.isConst {
		return 0, fmt.Errorf("input %d (%q) must be a constant", i, t.v.Name)
	}
	switch {
	case t.host != nil && len(t.host) == 1:
		return t.host[0], nil
	case t.i64 != nil && len(t.i64) == 1:
		return float32(t.i64[0]), nil
	}
	return 0, fmt.Errorf("input %d (%q) must be a scalar", i, t.v.Name)
}

func buildBinary(op BinaryOp) builder {
	return func(p *Plan, nd *node) error {
		a, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		b, err := floatIn(nd, 1)
		if err != nil {
			return err
		}
		y := nd.out[0]
		nd.fwd = func() { p.ops.Binary(op, a.data, a.shape, b.data, b.shape, y.data, y.shape) }
		// What the backward reads, and only where a gradient needs it:
		// d(a·b) reads b for da and a for db; d(a/b) reads b for da, y and
		// b for db, never a (so a Div by a constant, attention's 1/√d,
		// keeps only its constant).
		switch {
		case keepAllSaves && (op == BinaryMul || op == BinaryDiv):
			nd.saveIn[0], nd.saveIn[1], nd.saveOut = true, true, op == BinaryDiv
		case op == BinaryMul:
			nd.saveIn[0], nd.saveIn[1] = b.needGrad, a.needGrad
		case op == BinaryDiv:
			nd.saveIn[1], nd.saveOut = true, b.needGrad
		case op == BinaryPow:
			nd.saveIn[0], nd.saveIn[1], nd.saveOut = true, true, true
		}
		nd.bwd = func() {
			p.ops.BinaryBackward(op, a.data, a.shape, b.data, b.shape, y.data, y.grad, y.shape, nd.dIn[0], nd.dIn[1])
		}
		// d(a±b)/da is dy itself: where a is y's size the plan may hand
		// dy's buffer on as a's gradient (planBuffers), and the backward
		// then has nothing to write for a (ElementwiseOps.BinaryBackward).
		// A GroupNorm's shift and a residual connection then cost no pass
		// and no buffer for it; b's gradient, read from dy, is the same.
		nd.inplaceGrad = op == BinaryAdd || op == BinarySub
		return nil
	}
}

func buildUnary(op UnaryOp) builder {
	return func(p *Plan, nd *node) error {
		x, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		y := nd.out[0]
		nd.fwd = func() { p.ops.Unary(op, UnaryParams{}, x.data, y.data) }
		switch op {
		case UnaryErf, UnaryLog, UnaryAbs:
			nd.saveIn[0] = true
		case UnaryRelu, UnarySigmoid, UnaryTanh, UnaryExp, UnarySqrt, UnaryReciprocal:
			nd.saveOut = true
		}
		nd.bwd = func() { p.ops.UnaryBackward(op, UnaryParams{}, x.data, y.data, y.grad, nd.dIn[0]) }
		nd.inplaceGrad = true
		return nil
	}
}

func buildClip(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	lo, hi := float32(math.Inf(-1)), float32(math.Inf(1))
	if nd.g.Opset >= 11 {
		if lo, err = constFloat(nd, 1, lo); err != nil {
			return err
		}
		if hi, err = constFloat(nd, 2, hi); err != nil {
			return err
		}
	} else {
		if a := nd.g.Attr("min"); a != nil {
			lo = a.GetF()
		}
		if a := nd.g.Attr("max"); a != nil {
			hi = a.GetF()
		}
	}
	y := nd.out[0]
	nd.fwd = func() { p.ops.Clip(x.data, lo, hi, y.data) }
	nd.saveIn[0] = true
	nd.bwd = func() { p.ops.ClipBackward(x.data, lo, hi, y.grad, nd.dIn[0]) }
	return nil
}

// buildCopy compiles the operators that only change the shape (Reshape,
// Flatten, Squeeze, Unsqueeze, Identity): a copy forward and backward.
func buildCopy(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	y := nd.out[0]
	if x.n != y.n {
		return fmt.Errorf("input %v and output %v differ in size", x.shape, y.shape)
	}
	nd.fwd = func() { p.ops.Copy(x.data, y.data) }
	nd.bwd = func() {
		if !SameMemory(y.grad, nd.dIn[0]) {
			p.ops.Copy(y.grad, nd.dIn[0])
		}
	}
	// The gradient of a reshape is dy itself: the plan hands dy's buffer
	// on as x's gradient where dy dies here, or adds dy into x's gradient
	// where another consumer wrote it first (gradIsDy), and the backward
	// then has nothing to copy. A ViT block's head splits and merges and a
	// weight-standardized convolution's reshapes of its weight cost no pass
	// over memory and no buffer then.
	nd.inplaceGrad, nd.gradIsDy = true, true
	return nil
}

// buildDropout runs Dropout as identity, whatever its ratio and
// training_mode: inference plans need exactly that, and training plans do
// not drop activations (the rewrite elides Dropout and says so). The mask
// output, if any, is a constant (see dropoutMask).
func buildDropout(p *Plan, nd *node) error {
	return buildCopy(p, nd)
}

func buildCast(p *Plan, nd *node) error {
	to, err := nd.g.Int("to")
	if err != nil {
		return err
	}
	if graph.DType(to) != graph.Float32 {
		return fmt.Errorf("Cast to %v at run time is not supported (only float32 to float32)", graph.DType(to))
	}
	if x := nd.in[0]; x != nil && x.isConst && x.data == nil {
		// A constant the graph could not fold because the runtime made
		// it (a Dropout mask): convert it once.
		f := make([]float32, x.n)
		for i := range f {
			switch {
			case x.b != nil && x.b[i]:
				f[i] = 1
			case x.i64 != nil:
				f[i] = float32(x.i64[i])
			}
		}
		// The converted constant lives on the device, in a buffer of
		// the node's own.
		buf, err := p.dev.Alloc(len(f))
		if err != nil {
			return err
		}
		if err := p.dev.CopyIn(buf, 0, f); err != nil {
			return err
		}
		y := nd.out[0]
		nd.fwd = func() { p.ops.Copy(buf.Floats(), y.data) }
		return nil
	}
	return buildCopy(p, nd)
}

func buildExpand(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	y := nd.out[0]
	nd.fwd = func() { p.ops.Expand(x.data, x.shape, y.data, y.shape) }
	nd.bwd = func() { p.ops.ReduceToShape(y.grad, y.shape, nd.dIn[0], x.shape) }
	return nil
}

func buildWhere(p *Plan, nd *node) error {
	c := nd.in[0]
	if c == nil || !c.isConst || c.b == nil {
		return fmt.Errorf("Where needs a constant boolean condition (it is computed at run time here)")
	}
	x, err := floatIn(nd, 1)
	if err != nil {
		return err
	}
	yv, err := floatIn(nd, 2)
	if err != nil {
		return err
	}
	o := nd.out[0]
	// The condition as the bytes ElementwiseOps.Where reads (1 for true),
	// converted once here.
	cond := make([]uint8, len(c.b))
	for i, v := range c.b {
		if v {
			cond[i] = 1
		}
	}
	p.needWS(o.n)
	nd.fwd = func() { p.ops.Where(cond, c.shape, x.data, x.shape, yv.data, yv.shape, o.data, o.shape) }
	nd.bwd = func() {
		p.ops.WhereBackward(cond, c.shape, x.shape, yv.shape, o.grad, o.shape, nd.dIn[1], nd.dIn[2], p.ws)
	}
	return nil
}

// --- index-map operators: Slice, Gather, Pad (and Tile, nearest Resize) ---

// buildMap compiles node nd as the gather y[i] = x[m(i)] (m's fill where
// it reads nothing), whose backward scatters dx[m(i)] += dy[i]
// (LayoutOps.IndexGather).
func buildMap(p *Plan, nd *node, x *tensor, m *IndexMap) {
	y := nd.out[0]
	nd.fwd = func() { p.ops.IndexGather(x.data, m, y.data) }
	nd.bwd = func() { p.ops.IndexGatherBackward(y.grad, m, nd.dIn[0]) }
}

func strides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// forCoords calls fn with every coordinate of shape in row-major order.
func forCoords(shape []int, fn func(i int, c []int)) {
	n := numel(shape)
	c := make([]int, len(shape))
	for i := 0; i < n; i++ {
		fn(i, c)
		for k := len(shape) - 1; k >= 0; k-- {
			c[k]++
			if c[k] < shape[k] {
				break
			}
			c[k] = 0
		}
	}
}

// separableIndex is the element map of an operator whose source offset is
// a sum of one term per axis (Slice, Pad, Gather): tables[k][c] is axis
// k's term for output coordinate c, or −1 where that coordinate reads no
// element (the padding); a nil last table is the identity 0, 1, … (a
// Gather's inner elements). Row by row — the outer coordinates' sum once
// a row, the last axis's terms added in a loop — instead of a coordinate
// walk per element: Swin-T's Slices and Pads, rebuilt by each plan the
// memory estimate compiles, spent most of a 22 s `plan` in that walk.
func separableIndex(yShape []int, tables [][]int32) []int32 {
	n := numel(yShape)
	idx := make([]int32, n)
	r := len(yShape)
	if r == 0 || n == 0 {
		return idx
	}
	last := tables[r-1]
	w := yShape[r-1]
	if last == nil {
		last = make([]int32, w)
		for i := range last {
			last[i] = int32(i)
		}
	}
	separableRows(yShape, tables, func(row int, base int32, pad bool) {
		out := idx[row*w : (row+1)*w]
		for i, t := range last {
			if pad || t < 0 {
				out[i] = -1
			} else {
				out[i] = base + t
			}
		}
	})
	return idx
}

// separableRows calls fn for each row of yShape (all axes but the last)
// with the sum of its outer axes' terms, and whether one of them is
// padding.
func separableRows(yShape []int, tables [][]int32, fn func(row int, base int32, pad bool)) {
	r := len(yShape)
	rows := numel(yShape[:r-1])
	c := make([]int, r-1)
	for row := 0; row < rows; row++ {
		base, pad := int32(0), false
		for k, ck := range c {
			if t := tables[k][ck]; t < 0 {
				pad = true
			} else {
				base += t
			}
		}
		fn(row, base, pad)
		for k := r - 2; k >= 0; k-- {
			c[k]++
			if c[k] < yShape[k] {
				break
			}
			c[k] = 0
		}
	}
}

// newSeparableMap is NewIndexMap(separableIndex(yShape, tables), srcLen,
// fill) without the element map where it would keep runs: the last axis's
// table cut once into its segments of consecutive offsets (and padding),
// each row then a few runs, a run continued across rows where the next
// one starts where it ends — the same maximal runs runsOf finds.
func newSeparableMap(yShape []int, tables [][]int32, srcLen int, fill float32) *IndexMap {
	n := numel(yShape)
	r := len(yShape)
	if r == 0 || n == 0 {
		return NewIndexMap(separableIndex(yShape, tables), srcLen, fill)
	}
	type segment struct{ c, n, t int32 } // t −1: padding
	var segs []segment
	last := tables[r-1]
	w := yShape[r-1]
	if last == nil {
		segs = append(segs, segment{0, int32(w), 0})
	}
	for c := 0; c < len(last); {
		e := c + 1
		for e < len(last) && (last[c] < 0) == (last[e] < 0) && (last[c] < 0 || last[e] == last[e-1]+1) {
			e++
		}
		segs = append(segs, segment{int32(c), int32(e - c), last[c]})
		c = e
	}
	rows := n / w
	// More runs than an element map of runs of 8 on average is worth:
	// the element map.
	if len(segs)*rows*8 > n*2 {
		return NewIndexMap(separableIndex(yShape, tables), srcLen, fill)
	}
	runs := &IndexRuns{}
	separableRows(yShape, tables, func(row int, base int32, pad bool) {
		for _, sg := range segs {
			if pad || sg.t < 0 {
				runs.Padded = true
				continue
			}
			dst, src := int32(row*w)+sg.c, base+sg.t
			if k := len(runs.N) - 1; k >= 0 && runs.Dst[k]+runs.N[k] == dst && runs.Src[k]+runs.N[k] == src {
				runs.N[k] += sg.n
				continue
			}
			runs.Dst = append(runs.Dst, dst)
			runs.Src = append(runs.Src, src)
			runs.N = append(runs.N, sg.n)
		}
	})
	if len(runs.N)*8 > n {
		return NewIndexMap(separableIndex(yShape, tables), srcLen, fill)
	}
	runs.setCoverage(srcLen)
	return &IndexMap{Len: n, SrcLen: srcLen, Fill: fill, Runs: runs}
}

func buildSlice(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	in := make([]int64, len(x.shape))
	for i, d := range x.shape {
		in[i] = int64(d)
	}
	s, err := nd.g.ResolveSlice(in)
	if err != nil {
		return err
	}
	y := nd.out[0]
	st := strides(x.shape)
	tables := make([][]int32, len(y.shape))
	for k, d := range y.shape {
		tables[k] = make([]int32, d)
		for c := range tables[k] {
			tables[k][c] = int32((int(s.Start[k]) + c*int(s.Step[k])) * st[k])
		}
	}
	buildMap(p, nd, x, newSeparableMap(y.shape, tables, x.n, 0))
	return nil
}

func buildGather(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	it := nd.in[1]
	if it == nil || !it.isConst || it.i64 == nil {
		return fmt.Errorf("Gather needs constant integer indices")
	}
	a, _ := nd.g.Int("axis")
	r := len(x.shape)
	if a < 0 {
		a += int64(r)
	}
	if a < 0 || int(a) >= r {
		return fmt.Errorf("axis %d out of range for rank %d", a, r)
	}
	ax := int(a)
	outer := numel(x.shape[:ax])
	dim := x.shape[ax]
	inner := numel(x.shape[ax+1:])
	y := nd.out[0]
	// (outer, indices, inner): a separable map, each index a run of inner
	// elements.
	at := make([]int32, len(it.i64))
	for j, g := range it.i64 {
		if g < 0 {
			g += int64(dim)
		}
		if g < 0 || g >= int64(dim) {
			return fmt.Errorf("index %d out of range for axis %d of size %d", it.i64[j], ax, dim)
		}
		at[j] = int32(int(g) * inner)
	}
	if n := outer * len(at) * inner; n != y.n {
		return fmt.Errorf("gathered %d elements, output %v holds %d", n, y.shape, y.n)
	}
	outerAt := make([]int32, outer)
	for o := range outerAt {
		outerAt[o] = int32(o * dim * inner)
	}
	buildMap(p, nd, x, newSeparableMap([]int{outer, len(at), inner}, [][]int32{outerAt, at, nil}, x.n, 0))
	return nil
}

func buildPad(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	r := len(x.shape)
	pads, err := nd.g.PadAmounts(r)
	if err != nil {
		return err
	}
	mode, _ := nd.g.Str("mode")
	if mode == "wrap" && nd.g.Opset < 19 {
		return fmt.Errorf("pad mode %q came with opset 19; the model imports opset %d", mode, nd.g.Opset)
	}
	var fill float32
	if nd.g.Opset >= 11 {
		if fill, err = constFloat(nd, 2, 0); err != nil {
			return err
		}
	} else if a := nd.g.Attr("value"); a != nil {
		fill = a.GetF()
	}
	switch mode {
	case "constant", "", "edge", "reflect", "wrap":
	default:
		return fmt.Errorf("pad mode %q is not supported", mode)
	}
	y := nd.out[0]
	st := strides(x.shape)
	tables := make([][]int32, r)
	for k, n := range y.shape {
		tables[k] = make([]int32, n)
		d := x.shape[k]
		for c := range tables[k] {
			v := c - int(pads[k])
			if v < 0 || v >= d {
				switch mode {
				case "constant", "":
					tables[k][c] = -1
					continue
				case "edge":
					v = min(max(v, 0), d-1)
				case "reflect":
					if d == 1 {
						v = 0
					}
					for v < 0 || v >= d {
						if v < 0 {
							v = -v
						}
						if v >= d {
							v = 2*(d-1) - v
						}
					}
				case "wrap":
					// Periodic, as numpy's wrap: a pad wider than
					// the axis repeats it again.
					v = ((v % d) + d) % d
				}
			}
			tables[k][c] = int32(v * st[k])
		}
	}
	buildMap(p, nd, x, newSeparableMap(y.shape, tables, x.n, fill))
	return nil
}

// --- Transpose and Concat ---

func buildTranspose(p *Plan, nd *node) error {
	x, err := floatIn(nd, 0)
	if err != nil {
		return err
	}
	perm, err := nd.g.Perm(len(x.shape))
	if err != nil {
		return err
	}
	y := nd.out[0]
	pp := NewPermPlan(x.shape, perm)
	nd.fwd = func() { p.ops.Transpose(x.data, pp, y.data) }
	nd.bwd = func() { p.ops.TransposeBackward(y.grad, pp, nd.dIn[0]) }
	return nil
}

func buildConcat(p *Plan, nd *node) error {
	y := nd.out[0]
	a, err := nd.g.Int("axis")
	if err != nil {
		return err
	}
	r := len(y.shape)
	if a < 0 {
		a += int64(r)
	}
	if a < 0 || int(a) >= r {
		return fmt.Errorf("axis %d out of range for rank %d", a, r)
	}
	ax := int(a)
	off, size := make([]int, len(nd.in)), make([]int, len(nd.in))
	at := 0
	for i := range nd.in {
		t, err := floatIn(nd, i)
		if err != nil {
			return err
		}
		off[i], size[i] = at, numel(t.shape[ax:])
		at += size[i]
	}
	b := NewRowBlocks(numel(y.shape[:ax]), numel(y.shape[ax:]), off, size)
	xs, dxs := make([][]float32, len(nd.in)), make([][]float32, len(nd.in))
	nd.fwd = func() {
		for i, t := range nd.in {
			xs[i] = t.data
		}
		p.ops.Concat(xs, b, y.data)
	}
	nd.bwd = func() {
		copy(dxs, nd.dIn)
		p.ops.Split(y.grad, b, dxs)
	}
	return nil
}

// --- reductions and softmax ---

func buildReduce(mean bool) builder {
	op := ReduceSum
	if mean {
		op = ReduceMean
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
			return buildCopy(p, nd)
		}
		kept := append([]int(nil), x.shape...)
		for _, a := range axes {
			kept[a] = 1
		}
		if numel(kept) != y.n {
			return fmt.Errorf("reduced shape %v does not match output %v", kept, y.shape)
		}
		nd.fwd = func() { p.ops.ReduceAxes(op, x.data, x.shape, y.data, kept, nil, nil) }
		nd.bwd = func() { p.ops.ReduceAxesBackward(op, nil, x.shape, nil, y.grad, kept, nil, nil, nd.dIn[0]) }
		return nil
	}
}

func buildSoftmax(logSoftmax bool) builder {
	return func(p *Plan, nd *node) error {
		x, err := floatIn(nd, 0)
		if err != nil {
			return err
		}
		y := nd.out[0]
		r := len(x.shape)
		def := int64(-1)
		if nd.g.Opset < 13 {
			def = 1
		}
		a := nd.g.IntOr("axis", def)
		if a < 0 {
			a += int64(r)
		}
		if a < 0 || int(a) >= r {
			return fmt.Errorf("axis %d out of range for rank %d", a, r)
		}
		ax := int(a)
		outer, L, inner := numel(x.shape[:ax]), x.shape[ax], numel(x.shape[ax+1:])
		if nd.g.Opset < 13 {
			L, inner = numel(x.shape[ax:]), 1
		}
		nd.saveOut = true
		if logSoftmax {
			nd.fwd = func() { p.ops.LogSoftmax(x.data, outer, L, inner, y.data) }
			nd.bwd = func() { p.ops.LogSoftmaxBackward(y.data, y.grad, outer, L, inner, nd.dIn[0]) }
		} else {
			nd.fwd = func() { p.ops.Softmax(x.data, outer, L, inner, y.data) }
			nd.bwd = func() { p.ops.SoftmaxBackward(y.data, y.grad, outer, L, inner, nd.dIn[0]) }
		}
		return nil
	}
}
