package dpengine

import (
	"fmt"
	"slices"

	"github.com/dpfinetune/dpfinetune/graph"
	"github.com/dpfinetune/dpfinetune/onnx/onnxpb"
)

// A weight computed from parameters (weight standardization) needs each
// sample's vector-Jacobian product of the computation: J_fᵀ g_i for B
// output gradients g_i at the same parameters. The computation's own
// backward pass gives one product a pass. liftSamples rewrites the
// computation to run for n samples at once — every parameter stacked n
// times on a new leading axis, every value computed from them carrying
// that axis — so that one backward pass from the n stacked gradients
// gives the n products in the stacked parameters' gradients (sample k's
// rows depend on sample k's copy alone). The forward pass is repeated n
// times over, which costs what one product's backward pass does; the
// loop it replaces cost n passes and n times the launches (a GPU's).

// liftedSuffix names a parameter's stacked copies in a lifted computation.
const liftedSuffix = "/samples"

// liftSamples returns the computation sub (a graph computing its one
// output from the parameters params and constants, shapes inferred) for n
// samples at once: each parameter p replaced by the initializer
// p+liftedSuffix of n copies (shape (n, …p)), its output of shape (n, …).
// It fails, naming the node, on an operator it cannot lift.
func liftSamples(sub *graph.Graph, params []string, n int) (*graph.Graph, error) {
	g := sub.Clone()
	l := &lifter{valueMaker: valueMaker{g: g, tag: "lift"}, n: int64(n), lifted: map[*graph.Value]bool{}, shape: map[*graph.Value][]int64{}}
	for _, v := range g.Values {
		if v.Shape != nil && v.Shape.Static() {
			l.shape[v] = v.Shape.Ints()
		}
	}
	for _, name := range params {
		v := g.Values[name]
		if v == nil || v.Const == nil || v.Const.DType != graph.Float32 {
			return nil, fmt.Errorf("lift: %q is not a float32 parameter of the computation", name)
		}
		t := &graph.Tensor{DType: graph.Float32, Shape: append([]int64{int64(n)}, v.Const.Shape...), F32: make([]float32, n*len(v.Const.F32))}
		for k := 0; k < n; k++ {
			copy(t.F32[k*len(v.Const.F32):], v.Const.F32)
		}
		delete(g.Values, name)
		v.Name = name + liftedSuffix
		v.Const, v.Shape = t, graph.StaticShape(t.Shape...)
		g.Values[v.Name] = v
		l.lifted[v] = true
	}
	for _, nd := range g.Nodes {
		lifts := false
		for _, in := range nd.Inputs {
			lifts = lifts || in != nil && l.lifted[in]
		}
		if !lifts {
			l.nodes = append(l.nodes, nd)
			continue
		}
		if nd.Domain != "" {
			return nil, fmt.Errorf("lift: node %s: %s is not lifted over samples", nd, nd.OpType)
		}
		for _, v := range append(slices.Clone(nd.Inputs), nd.Outputs...) {
			if _, ok := l.shape[v]; v != nil && !ok {
				return nil, fmt.Errorf("lift: node %s: the shape of %q is unknown", nd, v.Name)
			}
		}
		if err := l.node(nd); err != nil {
			return nil, fmt.Errorf("lift: node %s: %w", nd, err)
		}
		for _, o := range nd.Outputs {
			if o != nil {
				l.lifted[o] = true
			}
		}
	}
	g.Nodes = l.nodes
	for _, v := range g.Values {
		if v.Const == nil {
			v.Shape = nil
		}
		v.Consumers = nil
	}
	for _, nd := range g.Nodes {
		for _, in := range nd.Inputs {
			if in != nil {
				in.Consumers = append(in.Consumers, nd)
			}
		}
	}
	if len(g.Outputs) != 1 || !l.lifted[g.Outputs[0]] {
		return nil, fmt.Errorf("lift: the computation's output does not depend on %v", params)
	}
	if err := g.InferShapes(nil); err != nil {
		return nil, fmt.Errorf("lift: %w", err)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("lift: %w", err)
	}
	return g, nil
}

// lifter holds liftSamples' state: the nodes written so far, which values
// carry the sample axis, and every value's shape before lifting.
type lifter struct {
	valueMaker
	n      int64
	nodes  []*graph.Node
	lifted map[*graph.Value]bool
	shape  map[*graph.Value][]int64
}

// valueMaker adds fresh values and constants to a graph (liftSamples',
// statGraph's), named base/tagN.
type valueMaker struct {
	g     *graph.Graph
	tag   string
	fresh int
}

// value adds a fresh float32 value named after base.
func (m *valueMaker) value(base string) *graph.Value {
	for {
		m.fresh++
		name := fmt.Sprintf("%s/%s%d", base, m.tag, m.fresh)
		if m.g.Values[name] == nil {
			v := &graph.Value{Name: name, DType: graph.Float32}
			m.g.Values[name] = v
			return v
		}
	}
}

// ints adds an int64 constant vector.
func (m *valueMaker) ints(base string, v ...int64) *graph.Value {
	c := m.value(base)
	c.DType = graph.Int64
	c.Const = &graph.Tensor{DType: graph.Int64, Shape: []int64{int64(len(v))}, I64: v}
	c.Shape = graph.StaticShape(int64(len(v)))
	return c
}

// constant adds a float32 constant of the given shape.
func (m *valueMaker) constant(base string, shape []int64, v ...float32) *graph.Value {
	c := m.value(base)
	c.Const = &graph.Tensor{DType: graph.Float32, Shape: shape, F32: v}
	c.Shape = graph.StaticShape(shape...)
	return c
}

// add appends a node of nd's opset and returns its output, marked lifted.
func (l *lifter) add(nd *graph.Node, op string, attrs []*onnxpb.AttributeProto, out *graph.Value, in ...*graph.Value) *graph.Value {
	if out == nil {
		out = l.value(nd.Name + "/" + op)
	}
	m := &graph.Node{Name: fmt.Sprintf("%s/lift/%s%d", nd.Name, op, len(l.nodes)), OpType: op, Opset: nd.Opset, Inputs: in, Outputs: []*graph.Value{out}, Attrs: attrs}
	out.Producer = m
	l.lifted[out] = true
	l.nodes = append(l.nodes, m)
	return out
}

// rank is v's rank before lifting.
func (l *lifter) rank(v *graph.Value) int { return len(l.shape[v]) }

// toRank returns lifted v with unit axes after the sample axis, so that it
// broadcasts as v did against values of rank r (numpy aligns from the
// right: the sample axis would otherwise meet the other operand's axes).
func (l *lifter) toRank(nd *graph.Node, v *graph.Value, r int) *graph.Value {
	if !l.lifted[v] || l.rank(v) >= r {
		return v
	}
	dims := append([]int64{0}, make([]int64, r-l.rank(v))...) // 0 copies the sample axis
	for k := range dims[1:] {
		dims[k+1] = 1
	}
	dims = append(dims, l.shape[v]...)
	return l.add(nd, "Reshape", nil, nil, v, l.ints(nd.Name+"/shape", dims...))
}

// withSamples returns unlifted v as n stacked copies (Concat's inputs
// must all carry the axis).
func (l *lifter) withSamples(nd *graph.Node, v *graph.Value) *graph.Value {
	if l.lifted[v] {
		return v
	}
	s := l.shape[v]
	u := l.add(nd, "Reshape", nil, nil, v, l.ints(nd.Name+"/shape", append([]int64{1}, s...)...))
	return l.add(nd, "Expand", nil, nil, u, l.ints(nd.Name+"/shape", append([]int64{l.n}, s...)...))
}

// shiftAxis is a non-negative axis of a value of rank r, moved past the
// sample axis.
func shiftAxis(a int64, r int) (int64, error) {
	if a < -int64(r) || a >= int64(r) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", a, r)
	}
	if a < 0 {
		a += int64(r)
	}
	return a + 1, nil
}

// withAttr returns nd's attributes with name set to the integer v.
func withAttr(nd *graph.Node, name string, v int64) []*onnxpb.AttributeProto {
	out := []*onnxpb.AttributeProto{{Name: &name, Type: onnxpb.AttributeProto_INT.Enum(), I: &v}}
	for _, a := range nd.Attrs {
		if a.GetName() != name {
			out = append(out, a)
		}
	}
	return out
}

// intsAttr is the attribute name of integers v; intAttr and floatAttr
// of one integer, one float.
func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: &name, Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: &name, Type: onnxpb.AttributeProto_INT.Enum(), I: &v}
}

func floatAttr(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: &name, Type: onnxpb.AttributeProto_FLOAT.Enum(), F: &v}
}

// withInts returns nd's attributes with name set to the integers v (or
// removed, v nil).
func withInts(nd *graph.Node, name string, v []int64) []*onnxpb.AttributeProto {
	var out []*onnxpb.AttributeProto
	if v != nil {
		out = append(out, intsAttr(name, v...))
	}
	for _, a := range nd.Attrs {
		if a.GetName() != name {
			out = append(out, a)
		}
	}
	return out
}

// constInts reads input i of nd, an int64 constant.
func constInts(nd *graph.Node, i int) ([]int64, error) {
	v := nd.Input(i)
	if v == nil || v.Const == nil || v.Const.I64 == nil && v.Const.Len() > 0 {
		return nil, fmt.Errorf("input %d is not an int64 constant", i)
	}
	return v.Const.I64, nil
}

// node writes the lifted form of nd, some of whose inputs are lifted.
func (l *lifter) node(nd *graph.Node) error {
	out := nd.Outputs[0]
	in := nd.Inputs
	r := l.rank(in[0])
	switch nd.OpType {
	case "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where":
		or := len(l.shape[out])
		args := make([]*graph.Value, len(in))
		for k, v := range in {
			args[k] = l.toRank(nd, v, or)
		}
		if nd.OpType == "Where" && l.lifted[in[0]] {
			return fmt.Errorf("a lifted condition")
		}
		l.add(nd, nd.OpType, nd.Attrs, out, args...)
	case "Clip", "Cast", "Identity", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal",
		"Erf", "Gelu", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
		"Mish", "Sin", "Cos":
		for _, v := range in[1:] {
			if v != nil && l.lifted[v] {
				return fmt.Errorf("a lifted bound")
			}
		}
		l.add(nd, nd.OpType, nd.Attrs, out, in...)
	case "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin", "ReduceLogSumExp":
		axes, noop, err := nd.ReduceAxes(r)
		if err != nil {
			return err
		}
		if noop {
			l.add(nd, "Identity", nil, out, in[0])
			return nil
		}
		shifted := make([]int64, len(axes))
		for k, a := range axes {
			shifted[k] = int64(a) + 1
		}
		if nd.Input(1) != nil || (nd.OpType == "ReduceSum" && nd.Opset >= 13) || nd.Opset >= 18 {
			l.add(nd, nd.OpType, withInts(nd, "axes", nil), out, in[0], l.ints(nd.Name+"/axes", shifted...))
		} else {
			l.add(nd, nd.OpType, withInts(nd, "axes", shifted), out, in[0])
		}
	case "Softmax", "LogSoftmax", "LayerNormalization", "Flatten", "Concat", "Gather":
		def := int64(1)
		if nd.OpType == "Softmax" || nd.OpType == "LogSoftmax" {
			if nd.Opset >= 13 {
				def = -1
			}
		} else if nd.OpType == "LayerNormalization" {
			def = -1
		} else if nd.OpType == "Gather" || nd.OpType == "Concat" {
			def = 0
		}
		a := nd.IntOr("axis", def)
		if nd.OpType == "Concat" {
			r = len(l.shape[out])
		}
		if nd.OpType == "Flatten" {
			s := l.shape[in[0]]
			if a < 0 {
				a += int64(r)
			}
			if a < 0 || a > int64(r) {
				return fmt.Errorf("axis %d out of range for rank %d", a, r)
			}
			rows, cols := graph.StaticShape(s[:a]...).NumElements(), graph.StaticShape(s[a:]...).NumElements()
			l.add(nd, "Reshape", nil, out, in[0], l.ints(nd.Name+"/shape", 0, rows, cols))
			return nil
		}
		s, err := shiftAxis(a, r)
		if err != nil {
			return err
		}
		args := slices.Clone(in)
		switch nd.OpType {
		case "LayerNormalization":
			for _, v := range in[1:] {
				if v != nil && l.lifted[v] {
					return fmt.Errorf("a lifted scale or bias")
				}
			}
		case "Gather":
			if l.lifted[in[1]] {
				return fmt.Errorf("lifted indices")
			}
		case "Concat":
			for k, v := range in {
				args[k] = l.withSamples(nd, v)
			}
		}
		l.add(nd, nd.OpType, withAttr(nd, "axis", s), out, args...)
	case "Reshape":
		if l.lifted[in[1]] || nd.IntOr("allowzero", 0) != 0 {
			return fmt.Errorf("a lifted or zero-allowing shape")
		}
		dims, err := constInts(nd, 1)
		if err != nil {
			return err
		}
		l.add(nd, "Reshape", nd.Attrs, out, in[0], l.ints(nd.Name+"/shape", append([]int64{0}, dims...)...))
	case "Transpose":
		perm, err := nd.Perm(r)
		if err != nil {
			return err
		}
		p := []int64{0}
		for _, x := range perm {
			p = append(p, int64(x)+1)
		}
		l.add(nd, "Transpose", withInts(nd, "perm", p), out, in[0])
	case "Squeeze", "Unsqueeze":
		// Both as a Reshape to the known output shape.
		l.add(nd, "Reshape", nil, out, in[0], l.ints(nd.Name+"/shape", append([]int64{0}, l.shape[out]...)...))
	case "MatMul":
		a, b := in[0], in[1]
		if l.lifted[a] && l.rank(a) < 2 && l.rank(b) != 2 || l.rank(b) < 2 || !l.lifted[a] && l.rank(a) < 2 {
			return fmt.Errorf("a lifted vector operand")
		}
		// The sample axis before the other operand's batch axes (Swin
		// V2's coordinate table (1, 2w−1, 2w−1, 2) times a lifted weight).
		if r := len(l.shape[out]); l.rank(a) >= 2 {
			a, b = l.toRank(nd, a, r), l.toRank(nd, b, r)
		}
		l.add(nd, "MatMul", nil, out, a, b)
	case "Gemm":
		// A·B (transposed as asked) scaled by alpha, plus beta·C.
		operand := func(v *graph.Value, trans string) *graph.Value {
			if nd.IntOr(trans, 0) == 0 {
				return v
			}
			perm := []int64{1, 0}
			if l.lifted[v] {
				perm = []int64{0, 2, 1}
			}
			return l.add(nd, "Transpose", []*onnxpb.AttributeProto{intsAttr("perm", perm...)}, nil, v)
		}
		y := l.add(nd, "MatMul", nil, nil, operand(in[0], "transA"), operand(in[1], "transB"))
		if alpha, _ := nd.Float("alpha"); nd.Has("alpha") && alpha != 1 {
			y = l.add(nd, "Mul", nil, nil, y, l.scalar(nd, alpha))
		}
		if c := nd.Input(2); c != nil {
			if beta, _ := nd.Float("beta"); nd.Has("beta") && beta != 1 {
				c = l.add(nd, "Mul", nil, nil, l.toRank(nd, c, 2), l.scalar(nd, beta))
			} else {
				c = l.toRank(nd, c, 2)
			}
			y = l.add(nd, "Add", nil, nil, y, c)
		}
		l.add(nd, "Identity", nil, out, y)
	case "Resize":
		return l.resize(nd)
	default:
		return fmt.Errorf("%s is not lifted over samples", nd.OpType)
	}
	return nil
}

// resize lifts a Resize of opset 11 or later (a position embedding
// interpolated to the input's grid): the sample axis kept by a scale of 1
// or its size, a region of interest extended by the whole axis, or the
// resized axes moved past it.
func (l *lifter) resize(nd *graph.Node) error {
	if nd.Opset < 11 {
		return fmt.Errorf("Resize before opset 11")
	}
	in := slices.Clone(nd.Inputs)
	for len(in) < 4 {
		in = append(in, nil)
	}
	for _, v := range in[1:] {
		if v != nil && (l.lifted[v] || v.Const == nil) {
			return fmt.Errorf("a computed region, scales or sizes")
		}
	}
	attrs := nd.Attrs
	if axes, err := nd.Ints("axes", nil); err != nil {
		return err
	} else if axes != nil {
		shifted := make([]int64, len(axes))
		for k, a := range axes {
			if shifted[k], err = shiftAxis(a, l.rank(in[0])); err != nil {
				return err
			}
		}
		l.add(nd, "Resize", withInts(nd, "axes", shifted), nd.Outputs[0], in...)
		return nil
	}
	if roi := in[1]; roi != nil && roi.Const.Len() > 0 {
		f, err := floatsOf(roi.Const)
		if err != nil {
			return err
		}
		h := len(f) / 2
		in[1] = l.floats(nd, append(append(append([]float32{0}, f[:h]...), 1), f[h:]...)...)
	}
	switch {
	case in[2] != nil && in[2].Const.Len() > 0:
		f, err := floatsOf(in[2].Const)
		if err != nil {
			return err
		}
		in[2] = l.floats(nd, append([]float32{1}, f...)...)
	case in[3] != nil:
		sizes, err := constInts(nd, 3)
		if err != nil {
			return err
		}
		in[3] = l.ints(nd.Name+"/sizes", append([]int64{l.n}, sizes...)...)
	default:
		return fmt.Errorf("neither scales nor sizes")
	}
	l.add(nd, "Resize", attrs, nd.Outputs[0], in...)
	return nil
}

// floatsOf reads a float32 constant's values.
func floatsOf(t *graph.Tensor) ([]float32, error) {
	if t.DType != graph.Float32 {
		return nil, fmt.Errorf("a %v constant where float32 was expected", t.DType)
	}
	return t.F32, nil
}

// floats adds a float32 constant vector.
func (l *lifter) floats(nd *graph.Node, v ...float32) *graph.Value {
	return l.constant(nd.Name+"/floats", []int64{int64(len(v))}, v...)
}

// scalar adds a float32 scalar constant.
func (l *lifter) scalar(nd *graph.Node, x float32) *graph.Value {
	return l.constant(nd.Name+"/scalar", []int64{}, x)
}
