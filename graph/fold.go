package graph

import (
	"errors"
	"fmt"
	"math"
)

// The evaluators below compute shape arithmetic at load time. They favour
// clarity over speed: folded tensors are small (bounded by
// maxFoldElements).

func evalUnary(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	out := x.take(x.Shape, identityIndex(x.Len()))
	switch n.OpType {
	case "Identity":
		return []*Tensor{out}, nil
	case "Not":
		if out.B == nil {
			return nil, errors.New("Not needs a bool tensor")
		}
		for i := range out.B {
			out.B[i] = !out.B[i]
		}
		return []*Tensor{out}, nil
	}
	f := map[string]func(float64) float64{
		"Neg": func(v float64) float64 { return -v }, "Abs": math.Abs, "Sqrt": math.Sqrt,
		"Reciprocal": func(v float64) float64 { return 1 / v }, "Floor": math.Floor, "Ceil": math.Ceil,
	}[n.OpType]
	if err := out.mapNumeric(f); err != nil {
		return nil, err
	}
	return []*Tensor{out}, nil
}

func identityIndex(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// mapNumeric applies f elementwise, rounding to the tensor's own type.
func (t *Tensor) mapNumeric(f func(float64) float64) error {
	switch {
	case t.F32 != nil:
		for i, v := range t.F32 {
			t.F32[i] = float32(f(float64(v)))
		}
	case t.F64 != nil:
		for i, v := range t.F64 {
			t.F64[i] = f(v)
		}
	case t.I64 != nil:
		for i, v := range t.I64 {
			t.I64[i] = int64(f(float64(v)))
		}
	default:
		return fmt.Errorf("cannot fold arithmetic on %v", t.DType)
	}
	return nil
}

func evalBinary(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	if n.OpType == "Max" || n.OpType == "Min" {
		// Variadic: one input is itself, more fold pairwise.
		switch len(in) {
		case 0:
			return nil, fmt.Errorf("%s needs an input", n.OpType)
		case 1:
			return evalUnary(g, &Node{OpType: "Identity"}, in)
		case 2:
		default:
			acc := in[0]
			for _, t := range in[1:] {
				out, err := evalBinary(g, n, []*Tensor{acc, t})
				if err != nil {
					return nil, err
				}
				acc = out[0]
			}
			return []*Tensor{acc}, nil
		}
	}
	if len(in) != 2 {
		return nil, fmt.Errorf("%s needs 2 inputs, got %d", n.OpType, len(in))
	}
	a, b := in[0], in[1]
	sh, err := broadcastShapes(StaticShape(a.Shape...), StaticShape(b.Shape...))
	if err != nil {
		return nil, err
	}
	outShape := sh.Ints()
	ia, ib := broadcastIndex(outShape, a.Shape), broadcastIndex(outShape, b.Shape)
	cnt := len(ia)
	switch n.OpType {
	case "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual":
		out := newTensor(Bool, outShape)
		for i := 0; i < cnt; i++ {
			x, y := a.At(ia[i]), b.At(ib[i])
			var r bool
			switch n.OpType {
			case "Equal":
				r = x == y
			case "Less":
				r = x < y
			case "LessOrEqual":
				r = x <= y
			case "Greater":
				r = x > y
			case "GreaterOrEqual":
				r = x >= y
			}
			out.B[i] = r
		}
		return []*Tensor{out}, nil
	case "And", "Or", "Xor":
		if a.B == nil || b.B == nil {
			return nil, fmt.Errorf("%s needs bool tensors", n.OpType)
		}
		out := newTensor(Bool, outShape)
		for i := 0; i < cnt; i++ {
			x, y := a.B[ia[i]], b.B[ib[i]]
			switch n.OpType {
			case "And":
				out.B[i] = x && y
			case "Or":
				out.B[i] = x || y
			default:
				out.B[i] = x != y
			}
		}
		return []*Tensor{out}, nil
	}
	out := newTensor(a.DType, outShape)
	if a.I64 != nil && b.I64 != nil {
		for i := 0; i < cnt; i++ {
			x, y := a.I64[ia[i]], b.I64[ib[i]]
			var r int64
			switch n.OpType {
			case "Add":
				r = x + y
			case "Sub":
				r = x - y
			case "Mul":
				r = x * y
			case "Div", "Mod":
				if y == 0 {
					return nil, errors.New("integer division by zero")
				}
				// Integer Div truncates toward zero (as C and
				// onnxruntime); Mod with fmod=0 takes the divisor's sign.
				if n.OpType == "Div" {
					r = x / y
				} else {
					r = x % y
					if r != 0 && (r < 0) != (y < 0) && n.IntOr("fmod", 0) == 0 {
						r += y
					}
				}
			case "Max":
				r = max(x, y)
			case "Min":
				r = min(x, y)
			case "Pow":
				r = int64(math.Pow(float64(x), float64(y)))
			}
			out.I64[i] = r
		}
		return []*Tensor{out}, nil
	}
	if !a.DType.IsFloat() || (a.F32 == nil && a.F64 == nil) {
		return nil, fmt.Errorf("cannot fold %s on %v and %v", n.OpType, a.DType, b.DType)
	}
	vals := make([]float64, cnt)
	for i := 0; i < cnt; i++ {
		x, y := a.At(ia[i]), b.At(ib[i])
		if a.F32 != nil {
			// Compute as float32 would: operands are float32 already, and
			// one correctly rounded float64 op rounds to the float32 result.
			x, y = float64(float32(x)), float64(float32(y))
		}
		switch n.OpType {
		case "Add":
			vals[i] = x + y
		case "Sub":
			vals[i] = x - y
		case "Mul":
			vals[i] = x * y
		case "Div":
			vals[i] = x / y
		case "Pow":
			vals[i] = math.Pow(x, y)
		case "Max":
			vals[i] = math.Max(x, y)
		case "Min":
			vals[i] = math.Min(x, y)
		case "Mod":
			vals[i] = math.Mod(x, y)
		}
	}
	for i, v := range vals {
		if out.F32 != nil {
			out.F32[i] = float32(v)
		} else {
			out.F64[i] = v
		}
	}
	return []*Tensor{out}, nil
}

func evalWhere(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	c, x, y := in[0], in[1], in[2]
	if c.B == nil {
		return nil, errors.New("Where condition is not bool")
	}
	sh, err := broadcastShapes(StaticShape(c.Shape...), StaticShape(x.Shape...), StaticShape(y.Shape...))
	if err != nil {
		return nil, err
	}
	outShape := sh.Ints()
	ic, ix, iy := broadcastIndex(outShape, c.Shape), broadcastIndex(outShape, x.Shape), broadcastIndex(outShape, y.Shape)
	// Concatenate x and y, then pick from the joint index space.
	both, err := concatFlat(x, y)
	if err != nil {
		return nil, err
	}
	idx := make([]int, len(ic))
	for i := range idx {
		if c.B[ic[i]] {
			idx[i] = ix[i]
		} else {
			idx[i] = x.Len() + iy[i]
		}
	}
	return []*Tensor{both.take(outShape, idx)}, nil
}

// concatFlat joins the elements of tensors of one dtype into a 1-D tensor.
func concatFlat(ts ...*Tensor) (*Tensor, error) {
	out := &Tensor{DType: ts[0].DType}
	total := 0
	for _, t := range ts {
		if t.DType != out.DType {
			return nil, fmt.Errorf("mixed dtypes %v and %v", out.DType, t.DType)
		}
		total += t.Len()
		out.F32 = append(out.F32, t.F32...)
		out.F64 = append(out.F64, t.F64...)
		out.I64 = append(out.I64, t.I64...)
		out.B = append(out.B, t.B...)
		out.Raw = append(out.Raw, t.Raw...)
	}
	out.Shape = []int64{int64(total)}
	return out, nil
}

func evalReduce(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	axes, noop, err := n.ReduceAxes(len(x.Shape))
	if err != nil {
		return nil, err
	}
	if noop {
		return []*Tensor{x.take(x.Shape, identityIndex(x.Len()))}, nil
	}
	keep, _ := n.Int("keepdims")
	outKeep := reducedShape(StaticShape(x.Shape...), axes, true).Ints()
	outShape := reducedShape(StaticShape(x.Shape...), axes, keep != 0).Ints()
	outIdx := reduceIndex(x.Shape, outKeep)
	acc := make([]float64, numel(outKeep))
	seen := make([]bool, len(acc))
	for i, o := range outIdx {
		v := x.At(i)
		if !seen[o] {
			acc[o], seen[o] = v, true
			continue
		}
		switch n.OpType {
		case "ReduceSum":
			acc[o] += v
		case "ReduceProd":
			acc[o] *= v
		case "ReduceMax":
			acc[o] = math.Max(acc[o], v)
		case "ReduceMin":
			acc[o] = math.Min(acc[o], v)
		}
	}
	if n.OpType == "ReduceProd" || n.OpType == "ReduceSum" {
		for o := range acc {
			if !seen[o] {
				acc[o] = map[bool]float64{true: 1, false: 0}[n.OpType == "ReduceProd"]
			}
		}
	}
	out := newTensor(x.DType, outShape)
	for i, v := range acc {
		switch {
		case out.F32 != nil:
			out.F32[i] = float32(v)
		case out.F64 != nil:
			out.F64[i] = v
		case out.I64 != nil:
			out.I64[i] = int64(v)
		default:
			return nil, fmt.Errorf("cannot fold %s on %v", n.OpType, x.DType)
		}
	}
	return []*Tensor{out}, nil
}

// reduceIndex maps each input element to its element of the keepdims output.
func reduceIndex(in, out []int64) []int {
	return broadcastIndex(in, out)
}

func evalTranspose(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	perm, err := n.Perm(len(x.Shape))
	if err != nil {
		return nil, err
	}
	outShape := make([]int64, len(perm))
	for i, p := range perm {
		outShape[i] = x.Shape[p]
	}
	inSt := stridesOf(x.Shape)
	idx := make([]int, numel(outShape))
	coord := make([]int64, len(outShape))
	for i := range idx {
		j := 0
		for k, p := range perm {
			j += int(coord[k]) * inSt[p]
		}
		idx[i] = j
		increment(coord, outShape)
	}
	return []*Tensor{x.take(outShape, idx)}, nil
}

// increment advances a row-major coordinate.
func increment(coord, shape []int64) {
	for k := len(shape) - 1; k >= 0; k-- {
		coord[k]++
		if coord[k] < shape[k] {
			return
		}
		coord[k] = 0
	}
}

// evalReshape covers Reshape, Flatten, Squeeze and Unsqueeze: the output
// shape was inferred already, the elements do not move.
func evalReshape(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	out := n.Outputs[0].Shape
	if !out.Static() || out.NumElements() != int64(x.Len()) {
		return nil, fmt.Errorf("output shape %v not known", out)
	}
	return []*Tensor{x.take(out.Ints(), identityIndex(x.Len()))}, nil
}

func evalConcat(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	if !n.Outputs[0].Shape.Static() {
		return nil, fmt.Errorf("output shape %v not known", n.Outputs[0].Shape)
	}
	out := n.Outputs[0].Shape.Ints()
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(out))
	if err != nil {
		return nil, err
	}
	var parts []*Tensor
	for _, t := range in {
		if t != nil {
			parts = append(parts, t)
		}
	}
	flat, err := concatFlat(parts...)
	if err != nil {
		return nil, err
	}
	// Walk output coordinates; the axis coordinate selects the part.
	idx := make([]int, numel(out))
	coord := make([]int64, len(out))
	for i := range idx {
		c := coord[ax]
		base := 0
		for _, p := range parts {
			if c < p.Shape[ax] {
				st := stridesOf(p.Shape)
				j := 0
				for k := range coord {
					cc := coord[k]
					if k == ax {
						cc = c
					}
					j += int(cc) * st[k]
				}
				idx[i] = base + j
				break
			}
			c -= p.Shape[ax]
			base += p.Len()
		}
		increment(coord, out)
	}
	return []*Tensor{flat.take(out, idx)}, nil
}

func evalSlice(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	s, err := n.ResolveSlice(x.Shape)
	if err != nil {
		return nil, err
	}
	st := stridesOf(x.Shape)
	idx := make([]int, numel(s.Count))
	coord := make([]int64, len(s.Count))
	for i := range idx {
		j := 0
		for k := range coord {
			j += int(s.Start[k]+coord[k]*s.Step[k]) * st[k]
		}
		idx[i] = j
		increment(coord, s.Count)
	}
	return []*Tensor{x.take(s.Count, idx)}, nil
}

func evalGather(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x, ind := in[0], in[1]
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(x.Shape))
	if err != nil {
		return nil, err
	}
	indices, err := ind.Ints()
	if err != nil {
		return nil, err
	}
	outer := numel(x.Shape[:ax])
	inner := numel(x.Shape[ax+1:])
	dim := x.Shape[ax]
	out := append(append(append([]int64{}, x.Shape[:ax]...), ind.Shape...), x.Shape[ax+1:]...)
	idx := make([]int, 0, numel(out))
	for o := 0; o < outer; o++ {
		for _, i := range indices {
			if i < 0 {
				i += dim
			}
			if i < 0 || i >= dim {
				return nil, fmt.Errorf("index out of range for axis %d of size %d", ax, dim)
			}
			for k := 0; k < inner; k++ {
				idx = append(idx, (o*int(dim)+int(i))*inner+k)
			}
		}
	}
	return []*Tensor{x.take(out, idx)}, nil
}

func evalExpand(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	if !n.Outputs[0].Shape.Static() {
		return nil, fmt.Errorf("output shape %v not known", n.Outputs[0].Shape)
	}
	x := in[0]
	out := n.Outputs[0].Shape.Ints()
	return []*Tensor{x.take(out, broadcastIndex(out, x.Shape))}, nil
}

func evalTile(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	if !n.Outputs[0].Shape.Static() {
		return nil, fmt.Errorf("output shape %v not known", n.Outputs[0].Shape)
	}
	x := in[0]
	out := n.Outputs[0].Shape.Ints()
	st := stridesOf(x.Shape)
	idx := make([]int, numel(out))
	coord := make([]int64, len(out))
	for i := range idx {
		j := 0
		for k := range coord {
			j += int(coord[k]%x.Shape[k]) * st[k]
		}
		idx[i] = j
		increment(coord, out)
	}
	return []*Tensor{x.take(out, idx)}, nil
}

func evalCast(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	to, _ := n.Int("to")
	out := newTensor(DType(to), x.Shape)
	for i := 0; i < x.Len(); i++ {
		v := x.At(i)
		switch {
		case out.F32 != nil:
			out.F32[i] = float32(v)
		case out.F64 != nil:
			out.F64[i] = v
		case out.I64 != nil:
			// Float to integer conversion truncates toward zero.
			out.I64[i] = int64(v)
		case out.B != nil:
			out.B[i] = v != 0
		default:
			return nil, fmt.Errorf("cannot fold Cast to %v", DType(to))
		}
	}
	return []*Tensor{out}, nil
}

func evalShape(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	sh := n.Inputs[0].Shape.Ints()
	s, e := n.shapeRange(len(sh))
	return []*Tensor{{DType: Int64, Shape: []int64{int64(e - s)}, I64: append([]int64{}, sh[s:e]...)}}, nil
}

func evalSize(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	return []*Tensor{{DType: Int64, Shape: []int64{}, I64: []int64{n.Inputs[0].Shape.NumElements()}}}, nil
}

func evalConstantOfShape(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	dims, err := in[0].Ints()
	if err != nil {
		return nil, err
	}
	val := &Tensor{DType: Float32, Shape: []int64{1}, F32: []float32{0}}
	if n.Has("value") {
		if val, err = n.TensorAttr(g, "value"); err != nil {
			return nil, err
		}
		if val.Len() != 1 {
			return nil, fmt.Errorf("value has %d elements, want 1", val.Len())
		}
	}
	for _, d := range dims {
		if d < 0 {
			return nil, fmt.Errorf("negative dimension in %v", dims)
		}
	}
	return []*Tensor{val.take(dims, make([]int, numel(dims)))}, nil
}

// constantValue decodes a Constant node's value, whichever attribute holds
// it.
func constantValue(g *Graph, n *Node) (*Tensor, error) {
	switch {
	case n.Has("value"):
		return n.TensorAttr(g, "value")
	case n.Has("value_float"):
		f, err := n.Float("value_float")
		return &Tensor{DType: Float32, Shape: []int64{}, F32: []float32{f}}, err
	case n.Has("value_floats"):
		f, err := n.Floats("value_floats", nil)
		return &Tensor{DType: Float32, Shape: []int64{int64(len(f))}, F32: append([]float32{}, f...)}, err
	case n.Has("value_int"):
		i, err := n.Int("value_int")
		return &Tensor{DType: Int64, Shape: []int64{}, I64: []int64{i}}, err
	case n.Has("value_ints"):
		i, err := n.Ints("value_ints", nil)
		return &Tensor{DType: Int64, Shape: []int64{int64(len(i))}, I64: append([]int64{}, i...)}, err
	}
	return nil, errors.New("Constant has no supported value attribute (value, value_float(s), value_int(s))")
}

func evalConstant(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	t, err := constantValue(g, n)
	return []*Tensor{t}, err
}

// rangeCount is the element count of the Range operator,
// max(ceil((limit-start)/delta), 0), checked against the fold limit
// (only folding computes a Range).
func rangeCount(start, limit, delta float64) (int64, error) {
	if delta == 0 {
		return 0, errors.New("Range delta is 0")
	}
	// In float64 first: a NaN or an enormous count converts to int64 as
	// garbage (math.MinInt64 on amd64).
	fcnt := math.Ceil((limit - start) / delta)
	if math.IsNaN(fcnt) {
		return 0, fmt.Errorf("Range(%v, %v, %v) has no element count", start, limit, delta)
	}
	if fcnt > maxFoldElements {
		return 0, fmt.Errorf("Range(%v, %v, %v) of %.0f elements is over the %d-element limit for a folded constant", start, limit, delta, fcnt, maxFoldElements)
	}
	return int64(math.Max(fcnt, 0)), nil
}

// rangeTensor is the Range operator: ceil((limit-start)/delta) elements.
func rangeTensor(dt DType, start, limit, delta float64) (*Tensor, error) {
	cnt, err := rangeCount(start, limit, delta)
	if err != nil {
		return nil, err
	}
	t := newTensor(dt, []int64{cnt})
	for i := int64(0); i < cnt; i++ {
		v := start + float64(i)*delta
		switch {
		case t.F32 != nil:
			t.F32[i] = float32(v)
		case t.F64 != nil:
			t.F64[i] = v
		case t.I64 != nil:
			t.I64[i] = int64(v)
		default:
			return nil, fmt.Errorf("Range of %v", dt)
		}
	}
	return t, nil
}

func evalRange(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	t, err := rangeTensor(n.Outputs[0].DType, in[0].At(0), in[1].At(0), in[2].At(0))
	return []*Tensor{t}, err
}

// evalSplit cuts x along the axis into the outputs' inferred sizes (in
// order): a shape vector split into its parts, as exporters write them.
func evalSplit(g *Graph, n *Node, in []*Tensor) ([]*Tensor, error) {
	x := in[0]
	a, _ := n.Int("axis")
	ax, err := normAxis(a, len(x.Shape))
	if err != nil {
		return nil, err
	}
	outer := numel(x.Shape[:ax])
	inner := numel(x.Shape[ax+1:])
	dim := int(x.Shape[ax])
	var outs []*Tensor
	off := 0
	for _, v := range n.Outputs {
		if v == nil || len(v.Shape) != len(x.Shape) || v.Shape[ax].Size < 0 {
			return nil, fmt.Errorf("output shapes %v not known", v)
		}
		size := int(v.Shape[ax].Size)
		if off+size > dim {
			return nil, fmt.Errorf("parts of %d along axis %d of size %d", off+size, ax, dim)
		}
		shape := append([]int64{}, x.Shape...)
		shape[ax] = int64(size)
		idx := make([]int, 0, outer*size*inner)
		for o := range outer {
			for i := off; i < off+size; i++ {
				for k := range inner {
					idx = append(idx, (o*dim+i)*inner+k)
				}
			}
		}
		outs = append(outs, x.take(shape, idx))
		off += size
	}
	return outs, nil
}
