package graph

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// rule is how the IR handles one operator: infer sets the dtypes and shapes
// of the outputs; eval, where present, computes the outputs of a node whose
// inputs are constants.
type rule struct {
	infer func(g *Graph, n *Node) error
	eval  func(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error)
}

// rules is filled by the init functions of this file and of the files
// that add operators (rules_*.go), in any order.
var rules = map[string]rule{}

// SupportedOps returns whether the IR can infer shapes through op.
func SupportedOps(op string) bool { _, ok := rules[op]; return ok }

// Folds reports whether the IR evaluates op at load time when all its inputs
// are constants (shape arithmetic such as Shape, Gather, Concat, Equal):
// such a node never reaches a runtime if its inputs are constants.
func Folds(op string) bool { return rules[op].eval != nil }

// FoldOps returns the operators Folds reports, sorted.
func FoldOps() []string {
	var out []string
	for op, r := range rules {
		if r.eval != nil {
			out = append(out, op)
		}
	}
	sort.Strings(out)
	return out
}

func init() {
	for _, op := range []string{"Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
		"Tanh", "Erf", "Exp", "Log", "Softplus", "Softsign", "Mish", "Gelu", "Sin", "Cos", "Round",
		"Sign", "Clip", "Softmax", "LogSoftmax", "Hardmax", "CumSum", "Trilu", "Shrink", "ThresholdedRelu"} {
		rules[op] = rule{infer: sameAsInput}
	}
	for _, op := range []string{"Neg", "Abs", "Sqrt", "Reciprocal", "Identity", "Floor", "Ceil", "Not"} {
		rules[op] = rule{infer: sameAsInput, eval: evalUnary}
	}
	rules["IsNaN"] = rule{infer: boolLikeInput}
	rules["IsInf"] = rule{infer: boolLikeInput}
	for _, op := range []string{"Add", "Sub", "Mul", "Div", "Pow", "Mod"} {
		rules[op] = rule{infer: broadcastInfer(false), eval: evalBinary}
	}
	for _, op := range []string{"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"} {
		rules[op] = rule{infer: broadcastInfer(true), eval: evalBinary}
	}
	rules["Where"] = rule{infer: inferWhere, eval: evalWhere}
	rules["Dropout"] = rule{infer: inferDropout}
	rules["Conv"] = rule{infer: inferConv}
	rules["MaxPool"] = rule{infer: inferPool}
	rules["AveragePool"] = rule{infer: inferPool}
	rules["LpPool"] = rule{infer: inferPool}
	rules["GlobalAveragePool"] = rule{infer: inferGlobalPool}
	rules["GlobalMaxPool"] = rule{infer: inferGlobalPool}
	rules["Gemm"] = rule{infer: inferGemm}
	rules["MatMul"] = rule{infer: inferMatMul}
	for _, op := range []string{"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp"} {
		rules[op] = rule{infer: inferReduce}
	}
	for _, op := range []string{"ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"} {
		rules[op] = rule{infer: inferReduce, eval: evalReduce}
	}
	rules["ArgMax"] = rule{infer: inferArg}
	rules["ArgMin"] = rule{infer: inferArg}
	rules["Transpose"] = rule{infer: inferTranspose, eval: evalTranspose}
	rules["Reshape"] = rule{infer: inferReshape, eval: evalReshape}
	rules["Flatten"] = rule{infer: inferFlatten, eval: evalReshape}
	rules["Squeeze"] = rule{infer: inferSqueeze, eval: evalReshape}
	rules["Unsqueeze"] = rule{infer: inferUnsqueeze, eval: evalReshape}
	rules["Concat"] = rule{infer: inferConcat, eval: evalConcat}
	rules["Slice"] = rule{infer: inferSlice, eval: evalSlice}
	rules["Gather"] = rule{infer: inferGather, eval: evalGather}
	rules["Expand"] = rule{infer: inferExpand, eval: evalExpand}
	rules["Tile"] = rule{infer: inferTile, eval: evalTile}
	rules["Pad"] = rule{infer: inferPad}
	rules["Cast"] = rule{infer: inferCast, eval: evalCast}
	rules["CastLike"] = rule{infer: inferCastLike, eval: evalCastLike}
	rules["BatchNormalization"] = rule{infer: inferBatchNorm}
	rules["InstanceNormalization"] = rule{infer: sameAsInput}
	rules["GroupNormalization"] = rule{infer: sameAsInput}
	rules["LayerNormalization"] = rule{infer: inferLayerNorm}
	rules["Shape"] = rule{infer: inferShape, eval: evalShape}
	rules["Size"] = rule{infer: inferSize, eval: evalSize}
	rules["ConstantOfShape"] = rule{infer: inferConstantOfShape, eval: evalConstantOfShape}
	rules["Constant"] = rule{infer: inferConstant, eval: evalConstant}
	rules["Range"] = rule{infer: inferRange, eval: evalRange}
	rules["Split"] = rule{infer: inferSplit, eval: evalSplit}
	rules["Resize"] = rule{infer: inferResize}
	rules["Upsample"] = rule{infer: inferResize}
}

// --- helpers ---

func setOut(n *Node, i int, dt DType, sh Shape) {
	if i < len(n.Outputs) && n.Outputs[i] != nil {
		n.Outputs[i].DType = dt
		n.Outputs[i].Shape = sh
	}
}

func in0(n *Node) (*Value, error) {
	x := n.Input(0)
	if x == nil {
		return nil, errors.New("missing input 0")
	}
	return x, nil
}

// constInput returns input i's constant data, or an error saying the
// operator needs it constant.
func constInput(n *Node, i int) (*Tensor, error) {
	v := n.Input(i)
	if v == nil {
		return nil, nil
	}
	if v.Const == nil {
		return nil, fmt.Errorf("input %d (%q) must be a constant known before run time (it is computed by %v)", i, v.Name, v.Producer)
	}
	return v.Const, nil
}

func constInts(n *Node, i int) ([]int64, error) {
	t, err := constInput(n, i)
	if err != nil || t == nil {
		return nil, err
	}
	return t.Ints()
}

// rankedIn0 returns input 0, which must be present with a known rank.
func rankedIn0(n *Node) (*Value, error) {
	x, err := in0(n)
	if err != nil {
		return nil, err
	}
	return x, needRank(x)
}

func needRank(x *Value) error {
	if x.Shape == nil {
		return fmt.Errorf("input %q has unknown rank", x.Name)
	}
	return nil
}

// --- elementwise ---

func sameAsInput(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, x.Shape)
	return nil
}

func boolLikeInput(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	setOut(n, 0, Bool, x.Shape)
	return nil
}

func broadcastInfer(toBool bool) func(g *Graph, n *Node) error {
	return func(g *Graph, n *Node) error {
		if err := legacyBroadcast(n); err != nil {
			return err
		}
		var shapes []Shape
		for i, v := range n.Inputs {
			if v == nil {
				return fmt.Errorf("missing input %d", i)
			}
			shapes = append(shapes, v.Shape)
		}
		if len(shapes) == 0 {
			return errors.New("no inputs")
		}
		sh, err := broadcastShapes(shapes...)
		if err != nil {
			return err
		}
		dt := n.Inputs[0].DType
		if toBool {
			dt = Bool
		}
		setOut(n, 0, dt, sh)
		return nil
	}
}

func inferWhere(g *Graph, n *Node) error {
	for i := 0; i < 3; i++ {
		if n.Input(i) == nil {
			return fmt.Errorf("missing input %d", i)
		}
	}
	sh, err := broadcastShapes(n.Inputs[0].Shape, n.Inputs[1].Shape, n.Inputs[2].Shape)
	if err != nil {
		return err
	}
	setOut(n, 0, n.Inputs[1].DType, sh)
	return nil
}

func inferDropout(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, x.Shape)
	mask := Bool
	if n.Opset > 0 && n.Opset < 10 {
		mask = x.DType // the mask became bool in opset 10
	}
	setOut(n, 1, mask, x.Shape)
	return nil
}

// --- windows ---

func inferConv(g *Graph, n *Node) error {
	x, w := n.Input(0), n.Input(1)
	if x == nil || w == nil {
		return errors.New("Conv needs X and W")
	}
	if err := needRank(x); err != nil {
		return err
	}
	if len(x.Shape) < 3 || len(w.Shape) != len(x.Shape) {
		return fmt.Errorf("X %v and W %v must have the same rank ≥ 3", x.Shape, w.Shape)
	}
	group, err := n.Int("group")
	if err != nil {
		return err
	}
	kernel, err := n.Ints("kernel_shape", w.Shape[2:].Ints())
	if err != nil {
		return err
	}
	c, m, cw := x.Shape[1].Size, w.Shape[0].Size, w.Shape[1].Size
	if group <= 0 || (c >= 0 && cw >= 0 && c != cw*group) || (m >= 0 && m%group != 0) {
		return fmt.Errorf("X has %d channels, W %v, group %d: want channels = W.shape[1]·group and W.shape[0] divisible by group", c, w.Shape, group)
	}
	if b := n.Input(2); b != nil && b.Shape != nil && (len(b.Shape) != 1 || (b.Shape[0].Size >= 0 && m >= 0 && b.Shape[0].Size != m)) {
		return fmt.Errorf("bias shape %v does not match %d output channels", b.Shape, m)
	}
	p, err := n.Window(x.Shape[2:].Ints(), kernel)
	if err != nil {
		return err
	}
	out := Shape{x.Shape[0], w.Shape[0]}
	for _, o := range p.Out {
		out = append(out, Dim{Size: o})
	}
	setOut(n, 0, x.DType, out)
	return nil
}

func inferPool(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	kernel, err := n.Ints("kernel_shape", nil)
	if err != nil {
		return err
	}
	if len(x.Shape) < 3 || len(kernel) != len(x.Shape)-2 {
		return fmt.Errorf("kernel_shape %v does not match input %v", kernel, x.Shape)
	}
	p, err := n.Window(x.Shape[2:].Ints(), kernel)
	if err != nil {
		return err
	}
	out := Shape{x.Shape[0], x.Shape[1]}
	for _, o := range p.Out {
		out = append(out, Dim{Size: o})
	}
	setOut(n, 0, x.DType, out)
	setOut(n, 1, Int64, out)
	return nil
}

func inferGlobalPool(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	if len(x.Shape) < 3 {
		return fmt.Errorf("input %v has no spatial axes", x.Shape)
	}
	out := Shape{x.Shape[0], x.Shape[1]}
	for range x.Shape[2:] {
		out = append(out, Dim{Size: 1})
	}
	setOut(n, 0, x.DType, out)
	return nil
}

// --- linear algebra ---

func inferGemm(g *Graph, n *Node) error {
	a, b := n.Input(0), n.Input(1)
	if a == nil || b == nil || len(a.Shape) != 2 || len(b.Shape) != 2 {
		return errors.New("Gemm needs 2-D A and B")
	}
	ta, _ := n.Int("transA")
	tb, _ := n.Int("transB")
	m, k := a.Shape[0], a.Shape[1]
	if ta != 0 {
		m, k = k, m
	}
	k2, nn := b.Shape[0], b.Shape[1]
	if tb != 0 {
		k2, nn = nn, k2
	}
	if k.Size >= 0 && k2.Size >= 0 && k.Size != k2.Size {
		return fmt.Errorf("inner dimensions differ: A %v (transA=%d), B %v (transB=%d)", a.Shape, ta, b.Shape, tb)
	}
	out := Shape{m, nn}
	if c := n.Input(2); c != nil {
		if _, err := broadcastShapes(out, c.Shape); err != nil {
			return fmt.Errorf("C does not broadcast to the output: %w", err)
		}
	}
	setOut(n, 0, a.DType, out)
	return nil
}

// MatMulShape returns the output shape of numpy-style matmul.
func MatMulShape(a, b Shape) (Shape, error) {
	if a == nil || b == nil {
		return nil, nil
	}
	if len(a) == 0 || len(b) == 0 {
		return nil, errors.New("MatMul operands must have rank ≥ 1")
	}
	aa, bb := a, b
	if len(a) == 1 {
		aa = Shape{{Size: 1}, a[0]}
	}
	if len(b) == 1 {
		bb = Shape{b[0], {Size: 1}}
	}
	k1, k2 := aa[len(aa)-1].Size, bb[len(bb)-2].Size
	if k1 >= 0 && k2 >= 0 && k1 != k2 {
		return nil, fmt.Errorf("inner dimensions differ: %v × %v", a, b)
	}
	batch, err := broadcastShapes(aa[:len(aa)-2], bb[:len(bb)-2])
	if err != nil {
		return nil, err
	}
	out := append(Shape{}, batch...)
	if len(a) > 1 {
		out = append(out, aa[len(aa)-2])
	}
	if len(b) > 1 {
		out = append(out, bb[len(bb)-1])
	}
	return out, nil
}

func inferMatMul(g *Graph, n *Node) error {
	a, b := n.Input(0), n.Input(1)
	if a == nil || b == nil {
		return errors.New("MatMul needs A and B")
	}
	sh, err := MatMulShape(a.Shape, b.Shape)
	if err != nil {
		return err
	}
	setOut(n, 0, a.DType, sh)
	return nil
}

// --- reductions ---

// ReduceAxes returns the normalized, sorted axes a Reduce* node reduces
// over, from its attribute or (newer opsets) its second input. An empty
// result with noop false means every axis.
func (n *Node) ReduceAxes(rank int) (axes []int, noop bool, err error) {
	var raw []int64
	if n.Input(1) != nil {
		if raw, err = constInts(n, 1); err != nil {
			return nil, false, err
		}
	} else if raw, err = n.Ints("axes", nil); err != nil {
		return nil, false, err
	}
	if len(raw) == 0 {
		if n.IntOr("noop_with_empty_axes", 0) != 0 {
			return nil, true, nil
		}
		for i := 0; i < rank; i++ {
			axes = append(axes, i)
		}
		return axes, false, nil
	}
	seen := map[int]bool{}
	for _, a := range raw {
		ax, err := normAxis(a, rank)
		if err != nil {
			return nil, false, err
		}
		if !seen[ax] {
			seen[ax] = true
			axes = append(axes, ax)
		}
	}
	sortInts(axes)
	return axes, false, nil
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func reducedShape(sh Shape, axes []int, keep bool) Shape {
	red := map[int]bool{}
	for _, a := range axes {
		red[a] = true
	}
	out := Shape{}
	for i, d := range sh {
		switch {
		case !red[i]:
			out = append(out, d)
		case keep:
			out = append(out, Dim{Size: 1})
		}
	}
	return out
}

func inferReduce(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	axes, noop, err := n.ReduceAxes(len(x.Shape))
	if err != nil {
		return err
	}
	if noop {
		setOut(n, 0, x.DType, x.Shape)
		return nil
	}
	keep, _ := n.Int("keepdims")
	setOut(n, 0, x.DType, reducedShape(x.Shape, axes, keep != 0))
	return nil
}

func inferArg(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(x.Shape))
	if err != nil {
		return err
	}
	keep, _ := n.Int("keepdims")
	setOut(n, 0, Int64, reducedShape(x.Shape, []int{ax}, keep != 0))
	return nil
}

// --- data movement ---

// Perm returns the permutation of a Transpose node for the given rank.
func (n *Node) Perm(rank int) ([]int, error) {
	def := make([]int64, rank)
	for i := range def {
		def[i] = int64(rank - 1 - i)
	}
	p, err := n.Ints("perm", def)
	if err != nil {
		return nil, err
	}
	if len(p) != rank {
		return nil, fmt.Errorf("perm %v does not match rank %d", p, rank)
	}
	out := make([]int, rank)
	seen := make([]bool, rank)
	for i, v := range p {
		if v < 0 || int(v) >= rank || seen[v] {
			return nil, fmt.Errorf("perm %v is not a permutation", p)
		}
		seen[v] = true
		out[i] = int(v)
	}
	return out, nil
}

func inferTranspose(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	perm, err := n.Perm(len(x.Shape))
	if err != nil {
		return err
	}
	out := make(Shape, len(perm))
	for i, p := range perm {
		out[i] = x.Shape[p]
	}
	setOut(n, 0, x.DType, out)
	return nil
}

// ReshapeTarget resolves a Reshape target (0 copies the input dim unless
// allowzero, -1 is inferred) against the input shape.
func ReshapeTarget(in Shape, target []int64, allowZero bool) (Shape, error) {
	out := make(Shape, len(target))
	infer := -1
	known := int64(1)
	for i, t := range target {
		switch {
		case t == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("target %v has more than one -1", target)
			}
			infer = i
			continue
		case t == 0 && !allowZero:
			if i >= len(in) {
				return nil, fmt.Errorf("target %v copies dim %d of input %v, which has no such dim", target, i, in)
			}
			out[i] = in[i]
		case t < 0:
			return nil, fmt.Errorf("target %v has negative dim %d", target, t)
		default:
			out[i] = Dim{Size: t}
		}
		if out[i].Size >= 0 {
			known *= out[i].Size
		} else {
			known = -1
		}
	}
	total := in.NumElements()
	if infer >= 0 {
		switch {
		case total < 0 || known < 0:
			out[infer] = Dim{Size: -1}
		case known == 0 || total%known != 0:
			return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v", in, total, target)
		default:
			out[infer] = Dim{Size: total / known}
		}
	} else if total >= 0 && known >= 0 && total != known {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v (%d elements)", in, total, target, known)
	}
	return out, nil
}

func inferReshape(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	target, err := constInts(n, 1)
	if err != nil {
		return err
	}
	sh, err := ReshapeTarget(x.Shape, target, n.IntOr("allowzero", 0) != 0)
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, sh)
	return nil
}

func inferFlatten(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	a, _ := n.Int("axis")
	if a < 0 {
		a += int64(len(x.Shape))
	}
	if a < 0 || a > int64(len(x.Shape)) {
		return fmt.Errorf("axis %d out of range for rank %d", a, len(x.Shape))
	}
	prod := func(s Shape) Dim {
		p := int64(1)
		for _, d := range s {
			if d.Size < 0 {
				return Dim{Size: -1}
			}
			p *= d.Size
		}
		return Dim{Size: p}
	}
	setOut(n, 0, x.DType, Shape{prod(x.Shape[:a]), prod(x.Shape[a:])})
	return nil
}

func (n *Node) squeezeAxes() ([]int64, error) {
	if n.Input(1) != nil {
		return constInts(n, 1)
	}
	return n.Ints("axes", nil)
}

func inferSqueeze(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	raw, err := n.squeezeAxes()
	if err != nil {
		return err
	}
	drop := map[int]bool{}
	if len(raw) == 0 {
		for i, d := range x.Shape {
			if d.Size == 1 {
				drop[i] = true
			} else if d.Size < 0 {
				return fmt.Errorf("Squeeze without axes on input %v with unknown dims", x.Shape)
			}
		}
	}
	for _, a := range raw {
		ax, err := normAxis(a, len(x.Shape))
		if err != nil {
			return err
		}
		if s := x.Shape[ax].Size; s >= 0 && s != 1 {
			return fmt.Errorf("cannot squeeze axis %d of size %d", ax, s)
		}
		drop[ax] = true
	}
	out := Shape{}
	for i, d := range x.Shape {
		if !drop[i] {
			out = append(out, d)
		}
	}
	setOut(n, 0, x.DType, out)
	return nil
}

func inferUnsqueeze(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	raw, err := n.squeezeAxes()
	if err != nil {
		return err
	}
	rank := len(x.Shape) + len(raw)
	ins := map[int]bool{}
	for _, a := range raw {
		ax, err := normAxis(a, rank)
		if err != nil {
			return err
		}
		if ins[ax] {
			return fmt.Errorf("axes %v repeat an axis", raw)
		}
		ins[ax] = true
	}
	out := make(Shape, 0, rank)
	j := 0
	for i := 0; i < rank; i++ {
		if ins[i] {
			out = append(out, Dim{Size: 1})
		} else {
			out = append(out, x.Shape[j])
			j++
		}
	}
	setOut(n, 0, x.DType, out)
	return nil
}

func inferConcat(g *Graph, n *Node) error {
	a, err := n.Int("axis")
	if err != nil {
		return err
	}
	var out Shape
	var ax int
	var dt DType
	for i, v := range n.Inputs {
		if v == nil {
			continue
		}
		if err := needRank(v); err != nil {
			return err
		}
		if out == nil {
			if ax, err = normAxis(a, len(v.Shape)); err != nil {
				return err
			}
			out = append(Shape{}, v.Shape...)
			dt = v.DType
			continue
		}
		if len(v.Shape) != len(out) {
			return fmt.Errorf("input %d has rank %d, want %d", i, len(v.Shape), len(out))
		}
		for d := range out {
			if d == ax {
				if out[d].Size >= 0 && v.Shape[d].Size >= 0 {
					out[d].Size += v.Shape[d].Size
				} else {
					out[d] = Dim{Size: -1}
				}
				continue
			}
			if out[d].Size >= 0 && v.Shape[d].Size >= 0 && out[d].Size != v.Shape[d].Size {
				return fmt.Errorf("input %d has shape %v, incompatible with %v off axis %d", i, v.Shape, out, ax)
			}
		}
	}
	if out == nil {
		return errors.New("no inputs")
	}
	setOut(n, 0, dt, out)
	return nil
}

// SliceSpec is a resolved Slice: for each axis of the input, the start,
// step and count of the elements taken.
type SliceSpec struct {
	Start, Step, Count []int64
}

// ResolveSlice computes the slice of a Slice node (opset ≥ 10 inputs or
// opset 1 attributes) on an input of static shape in.
func (n *Node) ResolveSlice(in []int64) (*SliceSpec, error) {
	var starts, ends, axes, steps []int64
	var err error
	if n.Opset >= 10 {
		if starts, err = constInts(n, 1); err != nil {
			return nil, err
		}
		if ends, err = constInts(n, 2); err != nil {
			return nil, err
		}
		if axes, err = constInts(n, 3); err != nil {
			return nil, err
		}
		if steps, err = constInts(n, 4); err != nil {
			return nil, err
		}
	} else {
		starts, _ = n.Ints("starts", nil)
		ends, _ = n.Ints("ends", nil)
		axes, _ = n.Ints("axes", nil)
	}
	if len(starts) != len(ends) {
		return nil, fmt.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if steps == nil {
		for range starts {
			steps = append(steps, 1)
		}
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		return nil, fmt.Errorf("starts, ends, axes and steps differ in length")
	}
	r := len(in)
	s := &SliceSpec{Start: make([]int64, r), Step: make([]int64, r), Count: append([]int64{}, in...)}
	for i := range s.Step {
		s.Step[i] = 1
	}
	for i, a := range axes {
		ax, err := normAxis(a, r)
		if err != nil {
			return nil, err
		}
		dim, st := in[ax], steps[i]
		if st == 0 {
			return nil, errors.New("slice step 0")
		}
		clamp := func(v, lo, hi int64) int64 {
			if v < lo {
				return lo
			}
			if v > hi {
				return hi
			}
			return v
		}
		b, e := starts[i], ends[i]
		if b < 0 {
			b += dim
		}
		if e < 0 {
			e += dim
		}
		// ⌈span/|step|⌉ as (span−1)/|step| + 1: a step near ±2⁶³ (one
		// element) must not overflow the sum.
		var cnt int64
		if st > 0 {
			b, e = clamp(b, 0, dim), clamp(e, 0, dim)
			if e > b {
				cnt = (e-b-1)/st + 1
			}
		} else {
			b, e = clamp(b, 0, dim-1), clamp(e, -1, dim-1)
			switch {
			case b > e && st == math.MinInt64:
				cnt = 1
			case b > e:
				cnt = (b-e-1)/(-st) + 1
			}
		}
		s.Start[ax], s.Step[ax], s.Count[ax] = b, st, cnt
	}
	return s, nil
}

func inferSlice(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	if !x.Shape.Static() {
		return fmt.Errorf("Slice needs a known input shape, got %v", x.Shape)
	}
	s, err := n.ResolveSlice(x.Shape.Ints())
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, StaticShape(s.Count...))
	return nil
}

func inferGather(g *Graph, n *Node) error {
	x, idx := n.Input(0), n.Input(1)
	if x == nil || idx == nil {
		return errors.New("Gather needs data and indices")
	}
	if err := needRank(x); err != nil {
		return err
	}
	if err := needRank(idx); err != nil {
		return err
	}
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(x.Shape))
	if err != nil {
		return err
	}
	if idx.Const != nil && x.Shape[ax].Size >= 0 {
		for _, i := range idx.Const.I64 {
			if i < -x.Shape[ax].Size || i >= x.Shape[ax].Size {
				return fmt.Errorf("index %d out of range for axis %d of size %d", i, ax, x.Shape[ax].Size)
			}
		}
	}
	out := append(Shape{}, x.Shape[:ax]...)
	out = append(out, idx.Shape...)
	out = append(out, x.Shape[ax+1:]...)
	setOut(n, 0, x.DType, out)
	return nil
}

func inferExpand(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	target, err := constInts(n, 1)
	if err != nil {
		return err
	}
	sh, err := broadcastShapes(x.Shape, StaticShape(target...))
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, sh)
	return nil
}

func inferTile(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	reps, err := constInts(n, 1)
	if err != nil {
		return err
	}
	if len(reps) != len(x.Shape) {
		return fmt.Errorf("repeats %v do not match rank %d", reps, len(x.Shape))
	}
	out := make(Shape, len(reps))
	for i, r := range reps {
		if r < 0 {
			return fmt.Errorf("negative repeats %v", reps)
		}
		out[i] = Dim{Size: -1}
		if d := x.Shape[i].Size; d >= 0 {
			if r != 0 && d > math.MaxInt64/r {
				return fmt.Errorf("repeats %v overflow axis %d of size %d", reps, i, d)
			}
			out[i].Size = d * r
		}
	}
	setOut(n, 0, x.DType, out)
	return nil
}

// PadAmounts returns the begin-then-end pads of a Pad node for rank r.
func (n *Node) PadAmounts(r int) ([]int64, error) {
	var pads []int64
	var err error
	if n.Opset >= 11 {
		if pads, err = constInts(n, 1); err != nil {
			return nil, err
		}
		if axes, err := constInts(n, 3); err != nil {
			return nil, err
		} else if axes != nil {
			if len(pads) != 2*len(axes) {
				return nil, fmt.Errorf("pads %v do not match axes %v", pads, axes)
			}
			full := make([]int64, 2*r)
			for i, a := range axes {
				ax, err := normAxis(a, r)
				if err != nil {
					return nil, err
				}
				full[ax], full[ax+r] = pads[i], pads[i+len(axes)]
			}
			pads = full
		}
	} else {
		pads, _ = n.Ints("pads", nil)
	}
	if len(pads) != 2*r {
		return nil, fmt.Errorf("pads %v do not match rank %d", pads, r)
	}
	return pads, nil
}

func inferPad(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	pads, err := n.PadAmounts(len(x.Shape))
	if err != nil {
		return err
	}
	r := len(x.Shape)
	out := make(Shape, r)
	for i, d := range x.Shape {
		out[i] = Dim{Size: -1}
		if d.Size >= 0 {
			out[i].Size = d.Size + pads[i] + pads[i+r]
			if out[i].Size < 0 {
				return fmt.Errorf("pads %v make axis %d negative", pads, i)
			}
		}
	}
	setOut(n, 0, x.DType, out)
	return nil
}

func inferCast(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	to, err := n.Int("to")
	if err != nil {
		return err
	}
	setOut(n, 0, DType(to), x.Shape)
	return nil
}

func inferCastLike(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	if n.Input(1) == nil {
		return errors.New("CastLike needs target_type")
	}
	if n.Inputs[1].DType == Undefined {
		return fmt.Errorf("the element type of target_type %q is unknown", n.Inputs[1].Name)
	}
	setOut(n, 0, n.Inputs[1].DType, x.Shape)
	return nil
}

// --- normalization ---

func inferBatchNorm(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	if len(x.Shape) < 2 {
		return fmt.Errorf("input %v has no channel axis", x.Shape)
	}
	c := x.Shape[1]
	for i := 1; i < 5; i++ {
		p := n.Input(i)
		if p != nil && p.Shape != nil && (len(p.Shape) != 1 || (p.Shape[0].Size >= 0 && c.Size >= 0 && p.Shape[0].Size != c.Size)) {
			return fmt.Errorf("input %d (%q) has shape %v, want (%d)", i, p.Name, p.Shape, c.Size)
		}
	}
	setOut(n, 0, x.DType, x.Shape)
	for i := 1; i < len(n.Outputs); i++ {
		setOut(n, i, x.DType, Shape{c})
	}
	return nil
}

func inferLayerNorm(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(x.Shape))
	if err != nil {
		return err
	}
	setOut(n, 0, x.DType, x.Shape)
	stat := append(Shape{}, x.Shape[:ax]...)
	for range x.Shape[ax:] {
		stat = append(stat, Dim{Size: 1})
	}
	setOut(n, 1, Float32, stat)
	setOut(n, 2, Float32, stat)
	return nil
}

// --- shape ops ---

// shapeRange returns the [start, end) of a Shape node (opset 15 attrs).
func (n *Node) shapeRange(rank int) (int, int) {
	clamp := func(v int64) int {
		if v < 0 {
			v += int64(rank)
		}
		if v < 0 {
			return 0
		}
		if v > int64(rank) {
			return rank
		}
		return int(v)
	}
	start := clamp(n.IntOr("start", 0))
	end := rank
	if n.Has("end") {
		end = clamp(n.IntOr("end", int64(rank)))
	}
	if end < start {
		end = start
	}
	return start, end
}

func inferShape(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	s, e := n.shapeRange(len(x.Shape))
	setOut(n, 0, Int64, StaticShape(int64(e-s)))
	return nil
}

func inferSize(g *Graph, n *Node) error {
	setOut(n, 0, Int64, Shape{})
	return nil
}

func inferConstantOfShape(g *Graph, n *Node) error {
	dims, err := constInts(n, 0)
	if err != nil {
		return err
	}
	dt := Float32
	if n.Has("value") {
		t, err := n.TensorAttr(g, "value")
		if err != nil {
			return err
		}
		dt = t.DType
	}
	setOut(n, 0, dt, StaticShape(dims...))
	return nil
}

func inferConstant(g *Graph, n *Node) error {
	t, err := constantValue(g, n)
	if err != nil {
		return err
	}
	setOut(n, 0, t.DType, StaticShape(t.Shape...))
	return nil
}

func inferRange(g *Graph, n *Node) error {
	x, err := in0(n)
	if err != nil {
		return err
	}
	var cnt int64 = -1
	for i, v := range n.Inputs[:min(3, len(n.Inputs))] {
		if v != nil && v.Const != nil && v.Const.Len() != 1 {
			return fmt.Errorf("Range input %d holds %d values; start, limit and delta are scalars", i, v.Const.Len())
		}
	}
	if s, l, d := n.Input(0), n.Input(1), n.Input(2); s != nil && l != nil && d != nil && s.Const != nil && l.Const != nil && d.Const != nil {
		// The count alone: the values are the fold's to compute.
		c, err := rangeCount(s.Const.At(0), l.Const.At(0), d.Const.At(0))
		if err != nil {
			return err
		}
		cnt = c
	}
	setOut(n, 0, x.DType, Shape{{Size: cnt}})
	return nil
}

func inferSplit(g *Graph, n *Node) error {
	x, err := rankedIn0(n)
	if err != nil {
		return err
	}
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(x.Shape))
	if err != nil {
		return err
	}
	var sizes []int64
	if n.Input(1) != nil {
		if sizes, err = constInts(n, 1); err != nil {
			return err
		}
	} else if sizes, err = n.Ints("split", nil); err != nil {
		return err
	}
	k := len(n.Outputs)
	if no := n.IntOr("num_outputs", 0); no != 0 && (no != int64(k) || len(sizes) != 0) {
		return fmt.Errorf("num_outputs %d with %d outputs and split sizes %v (opset 18: num_outputs or sizes, matching the outputs)", no, k, sizes)
	}
	dim := x.Shape[ax].Size
	if len(sizes) == 0 {
		if dim < 0 {
			return errors.New("Split of an unknown dim needs explicit sizes")
		}
		chunk := (dim + int64(k) - 1) / int64(k)
		for i := 0; i < k; i++ {
			s := chunk
			if rest := dim - int64(i)*chunk; rest < chunk {
				s = rest
			}
			sizes = append(sizes, s)
		}
	}
	if len(sizes) != k {
		return fmt.Errorf("split sizes %v do not match %d outputs", sizes, k)
	}
	for i, s := range sizes {
		sh := append(Shape{}, x.Shape...)
		sh[ax] = Dim{Size: s}
		setOut(n, i, x.DType, sh)
	}
	return nil
}
